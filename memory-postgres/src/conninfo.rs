//! The parameters of a connection string the driver does not take: Ava's own (`schema`,
//! `tenant_partitions`) and libpq's TLS ones tokio-postgres lacks or reads otherwise
//! (`sslmode`'s `verify-ca` and `verify-full`, `sslrootcert`), split off a `postgres://` URL or
//! a `key=value` connection string.

use std::path::PathBuf;

use crate::error::PostgresError;
use crate::sslmode::SslMode;
use crate::tls::RootCert;
use crate::{MAX_TENANT_PARTITIONS, PostgresConfig};

/// The query parameters of a `postgres://` URL (or keys of a `key=value` string) that Ava
/// reads itself.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UrlParams {
    /// `schema`: the Postgres schema holding the store ([`PostgresConfig::schema`]).
    pub schema: Option<String>,
    /// `tenant_partitions`: hash partitions of a new store
    /// ([`PostgresConfig::tenant_partitions`]).
    pub tenant_partitions: Option<u16>,
    /// `sslmode` ([`crate::Tls::mode`]).
    pub sslmode: Option<SslMode>,
    /// `sslrootcert`: a file of CA certificates, or `system`
    /// ([`crate::Tls::root_cert`]).
    pub sslrootcert: Option<RootCert>,
}

impl UrlParams {
    /// `config` with these parameters where given.
    pub fn apply(self, mut config: PostgresConfig) -> PostgresConfig {
        if let Some(schema) = self.schema {
            config.schema = schema;
        }
        if let Some(n) = self.tenant_partitions {
            config.tenant_partitions = n;
        }
        config.tls = config.tls.with_params(self.sslmode, self.sslrootcert);
        config
    }

    /// Reads one parameter if it is one of these; `false` if it is not.
    fn take(&mut self, key: &str, value: &str) -> Result<bool, PostgresError> {
        match key {
            "schema" => self.schema = Some(value.to_owned()),
            "tenant_partitions" => {
                let n = value.parse().map_err(|_| PostgresError::BadUrl {
                    reason: format!(
                        "tenant_partitions is `{value}`; give a number of partitions, 0 to \
                         {MAX_TENANT_PARTITIONS}"
                    ),
                })?;
                self.tenant_partitions = Some(n);
            }
            "sslmode" => {
                let mode = SslMode::parse(value).ok_or_else(|| PostgresError::BadUrl {
                    reason: format!(
                        "sslmode is `{value}`; expected disable, prefer, require, verify-ca or \
                         verify-full"
                    ),
                })?;
                self.sslmode = Some(mode);
            }
            "sslrootcert" => {
                self.sslrootcert = Some(match value {
                    "system" => RootCert::System,
                    "" => {
                        return Err(PostgresError::BadUrl {
                            reason: "sslrootcert is empty; give a file of CA certificates (PEM) \
                                     or `system`"
                                .to_owned(),
                        });
                    }
                    path => RootCert::File(PathBuf::from(path)),
                });
            }
            "sslcert" | "sslkey" | "sslpassword" | "sslcertmode" => {
                return Err(PostgresError::BadUrl {
                    reason: format!(
                        "{key}: client certificates are not supported; authenticate with a \
                         password (TLS still protects it with sslmode=verify-full)"
                    ),
                });
            }
            "sslcrl" | "sslcrldir" => {
                return Err(PostgresError::BadUrl {
                    reason: format!("{key}: certificate revocation lists are not supported"),
                });
            }
            _ => return Ok(false),
        }
        Ok(true)
    }
}

/// Splits the parameters Ava reads itself ([`UrlParams`]) off a connection string, a
/// `postgres://` URL (query parameters, percent-decoded) or a `key=value` string: returns the
/// string without them (what the driver understands) and their values. A value that is not
/// valid (a `tenant_partitions` that is not a number, an unknown `sslmode`), or a client
/// certificate, is a [`PostgresError::BadUrl`] (a number of partitions above
/// [`MAX_TENANT_PARTITIONS`] is refused by [`PostgresConfig::validate`]).
pub fn split_params(url: &str) -> Result<(String, UrlParams), PostgresError> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        split_url(url)
    } else {
        split_key_values(url)
    }
}

fn split_url(url: &str) -> Result<(String, UrlParams), PostgresError> {
    let mut params = UrlParams::default();
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_owned(), params));
    };
    let mut kept = Vec::new();
    for kv in query.split('&').filter(|kv| !kv.is_empty()) {
        let (key, value) = kv.split_once('=').unwrap_or((kv, ""));
        let value = percent_encoding::percent_decode_str(value)
            .decode_utf8()
            .map_err(|_| PostgresError::BadUrl {
                reason: format!("the value of `{key}` is not UTF-8 once percent-decoded"),
            })?;
        if !params.take(key, &value)? {
            kept.push(kv);
        }
    }
    let url = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    Ok((url, params))
}

/// A `key=value` connection string (values unquoted, or in single quotes with `\'` and `\\`
/// escapes, as libpq writes them). A string this cannot read is left whole for the driver
/// to refuse.
fn split_key_values(conninfo: &str) -> Result<(String, UrlParams), PostgresError> {
    let mut params = UrlParams::default();
    let Some(pairs) = key_values(conninfo) else {
        return Ok((conninfo.to_owned(), params));
    };
    let mut kept = Vec::new();
    for (key, value, text) in pairs {
        if !params.take(key, &value)? {
            kept.push(text);
        }
    }
    Ok((kept.join(" "), params))
}

/// The pairs of a `key=value` string: key, value (unescaped) and the pair's own text.
fn key_values(s: &str) -> Option<Vec<(&str, String, &str)>> {
    let mut out = Vec::new();
    let mut rest = s.trim_start();
    while !rest.is_empty() {
        let start = rest;
        let key_end = rest.find(|c: char| c == '=' || c.is_whitespace())?;
        let key = &rest[..key_end];
        rest = rest[key_end..].trim_start().strip_prefix('=')?.trim_start();
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let end = if rest.starts_with('\'') {
            chars.next();
            loop {
                match chars.next()? {
                    (_, '\\') => value.push(chars.next()?.1),
                    (i, '\'') => break i + 1,
                    (_, c) => value.push(c),
                }
            }
        } else {
            loop {
                match chars.next() {
                    None => break rest.len(),
                    Some((i, c)) if c.is_whitespace() => break i,
                    Some((_, '\\')) => value.push(chars.next()?.1),
                    Some((_, c)) => value.push(c),
                }
            }
        };
        let used = start.len() - rest.len() + end;
        out.push((key, value, &start[..used]));
        rest = rest[end..].trim_start();
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_parameters_are_split_off_urls_and_key_value_strings() {
        let (url, p) = split_params(
            "postgres://u:pw@db.example:5432/ava?sslmode=verify-full&sslrootcert=%2Fetc%2Fca%20a.pem&application_name=x",
        )
        .unwrap();
        assert_eq!(
            url,
            "postgres://u:pw@db.example:5432/ava?application_name=x"
        );
        assert_eq!(p.sslmode, Some(SslMode::VerifyFull));
        assert_eq!(
            p.sslrootcert,
            Some(RootCert::File(PathBuf::from("/etc/ca a.pem")))
        );

        let (s, p) = split_params(
            "host=db.example sslmode = 'verify-ca' sslrootcert='/etc/it\\'s ca.pem' dbname=ava schema=bot",
        )
        .unwrap();
        assert_eq!(s, "host=db.example dbname=ava");
        assert_eq!(p.sslmode, Some(SslMode::VerifyCa));
        assert_eq!(
            p.sslrootcert,
            Some(RootCert::File(PathBuf::from("/etc/it's ca.pem")))
        );
        assert_eq!(p.schema.as_deref(), Some("bot"));

        // `system` without a mode is verify-full, as in libpq 16; with a weaker one, refused.
        let (_, p) = split_params("postgres://h/db?sslrootcert=system").unwrap();
        let tls = p.apply(PostgresConfig::default()).tls;
        assert_eq!(tls.mode, SslMode::VerifyFull);
        let (_, p) = split_params("postgres://h/db?sslrootcert=system&sslmode=require").unwrap();
        let e = p
            .apply(PostgresConfig::default())
            .tls
            .validate()
            .unwrap_err();
        assert!(e.to_string().contains("verify-full"), "{e}");
    }

    #[test]
    fn unknown_modes_and_client_certificates_are_clear_errors() {
        for (url, says) in [
            ("postgres://h/db?sslmode=allow", "verify-full"),
            (
                "postgres://h/db?sslmode=verify_full",
                "expected disable, prefer",
            ),
            (
                "host=h sslcert=/c.pem",
                "client certificates are not supported",
            ),
            (
                "postgres://u:secret@h/db?sslkey=/k.pem",
                "client certificates",
            ),
        ] {
            let e = split_params(url).unwrap_err().to_string();
            assert!(e.contains(says), "{url}: {e}");
            assert!(!e.contains("secret"), "{e}");
        }
    }
}
