//! TLS to the server as libpq's `sslmode` and `sslrootcert` ask, on rustls (ring): the modes,
//! where the roots come from, the certificate check each mode makes, and the connector
//! tokio-postgres drives. A handshake that fails says why as a [`PostgresError`] naming the
//! server (host name mismatch, unknown issuer, no TLS offered).

use std::fmt;
use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{verify_server_cert_signed_by_trust_anchor, verify_server_name};
use rustls::crypto::{WebPkiSupportedAlgorithms, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect};

use crate::error::PostgresError;
use crate::sslmode::SslMode;

/// Which roots vouch for the server's certificate: libpq's `sslrootcert`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RootCert {
    /// The system's trust store (`sslrootcert=system`, as libpq 16 has it), as
    /// rustls-native-certs reads it: on Linux the distribution's CA bundle, or the files
    /// `SSL_CERT_FILE` / `SSL_CERT_DIR` name.
    System,
    /// The certificates (PEM) in this file.
    File(PathBuf),
}

/// TLS to the server: [`SslMode`] and the roots it checks against.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tls {
    /// How the connection is encrypted and the server checked (default `prefer`).
    pub mode: SslMode,
    /// The roots that vouch for the server. `None`: `verify-ca` and `verify-full` use the
    /// system's ([`RootCert::System`]; libpq would read `~/.postgresql/root.crt`), `prefer`
    /// and `require` check nothing.
    pub root_cert: Option<RootCert>,
}

impl Tls {
    /// `self` with a connection string's `sslmode` and `sslrootcert` where given. As in libpq,
    /// `sslrootcert=system` without an `sslmode` means `verify-full`.
    pub fn with_params(mut self, mode: Option<SslMode>, root_cert: Option<RootCert>) -> Self {
        if let Some(root) = root_cert {
            if root == RootCert::System && mode.is_none() {
                self.mode = SslMode::VerifyFull;
            }
            self.root_cert = Some(root);
        }
        if let Some(mode) = mode {
            self.mode = mode;
        }
        self
    }

    /// Checks the combination as libpq does: the system's roots only with `verify-full` (a
    /// weaker mode would trust any certificate any public CA issued for any name).
    pub fn validate(&self) -> Result<(), PostgresError> {
        if self.root_cert == Some(RootCert::System) && self.mode != SslMode::VerifyFull {
            return Err(PostgresError::BadUrl {
                reason: format!(
                    "sslmode={} may not be used with sslrootcert=system; use sslmode=verify-full",
                    self.mode
                ),
            });
        }
        Ok(())
    }
}

/// What a mode checks of the server's certificate, and against which roots.
#[derive(Debug)]
enum Check {
    /// Nothing: encryption without knowing who is at the other end.
    Nothing,
    /// That a root vouches for the chain; with `name`, that the certificate names the host.
    Chain {
        roots: Arc<RootCertStore>,
        name: bool,
    },
}

/// The rustls client settings of `tls` (its roots read now) and how messages name the roots,
/// or `None` for `disable`. Errors name the server (`server`) and what is wrong with the roots.
fn client_config(
    tls: &Tls,
    server: &str,
) -> Result<Option<(Arc<ClientConfig>, String)>, PostgresError> {
    tls.validate()?;
    let (check, named) = match (tls.mode, &tls.root_cert) {
        (SslMode::Disable, _) => return Ok(None),
        (SslMode::Prefer | SslMode::Require, None) => (Check::Nothing, String::new()),
        // A root given to `prefer` or `require` checks the chain, as in libpq.
        (mode, root) => {
            let root = root.clone().unwrap_or(RootCert::System);
            let (roots, named) = load_roots(&root, server)?;
            let check = Check::Chain {
                roots: Arc::new(roots),
                name: mode == SslMode::VerifyFull,
            };
            (check, named)
        }
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = Arc::new(Verifier {
        check,
        algorithms: provider.signature_verification_algorithms,
    });
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| PostgresError::TlsSetup {
            server: server.to_owned(),
            what: format!("rustls refused its own default protocol versions: {e}"),
        })?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    // As libpq 17 does: the protocol name Postgres 17 servers expect on a direct TLS
    // connection (`sslnegotiation=direct`); servers and poolers that do not know it ignore it.
    config.alpn_protocols = vec![b"postgresql".to_vec()];
    Ok(Some((Arc::new(config), named)))
}

/// The roots of `root`, and how messages name them.
fn load_roots(root: &RootCert, server: &str) -> Result<(RootCertStore, String), PostgresError> {
    let setup = |what: String| PostgresError::TlsSetup {
        server: server.to_owned(),
        what,
    };
    let mut roots = RootCertStore::empty();
    match root {
        RootCert::File(path) => {
            let certs = read_pem_certs(path).map_err(&setup)?;
            let (added, _) = roots.add_parsable_certificates(certs);
            if added == 0 {
                return Err(setup(format!(
                    "sslrootcert {} holds no CA certificate rustls can use",
                    path.display()
                )));
            }
            Ok((roots, format!("the CA in {}", path.display())))
        }
        RootCert::System => {
            let found = rustls_native_certs::load_native_certs();
            let (added, _) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                let errors: Vec<String> = found.errors.iter().map(ToString::to_string).collect();
                return Err(setup(format!(
                    "no trusted root certificates were found in the system's store{}; give the \
                     CA that signed the server's certificate as sslrootcert=FILE",
                    if errors.is_empty() {
                        String::new()
                    } else {
                        format!(" ({})", errors.join("; "))
                    }
                )));
            }
            Ok((roots, "any of the system's trusted roots".to_owned()))
        }
    }
}

/// Every certificate in the PEM file at `path`, or what is wrong with the file.
fn read_pem_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let bad = |e: &dyn fmt::Display| format!("sslrootcert {} cannot be read: {e}", path.display());
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| bad(&e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(&e))?;
    if certs.is_empty() {
        return Err(format!(
            "sslrootcert {} holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
            path.display()
        ));
    }
    Ok(certs)
}

/// The check a mode makes of the server's certificate; handshake signatures are always
/// checked (the server holds the key of the certificate it showed).
#[derive(Debug)]
struct Verifier {
    check: Check,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Check::Chain { roots, name, .. } = &self.check else {
            return Ok(ServerCertVerified::assertion());
        };
        let cert = ParsedCertificate::try_from(end_entity)?;
        verify_server_cert_signed_by_trust_anchor(
            &cert,
            roots,
            intermediates,
            now,
            self.algorithms.all,
        )?;
        if *name {
            verify_server_name(&cert, server_name)?;
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// Makes tokio-postgres's TLS connectors for one store: the rustls settings, and what its
/// errors say (the server, the mode, the roots).
#[derive(Clone)]
pub(crate) struct MakeTls {
    config: Arc<ClientConfig>,
    server: Arc<str>,
    mode: SslMode,
    /// How messages name the roots ("the CA in FILE", "any of the system's trusted roots"),
    /// when the chain is checked.
    roots: Arc<str>,
}

impl fmt::Debug for MakeTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MakeTls")
            .field("server", &self.server)
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}

impl MakeTls {
    /// The connectors of `tls` to `server` (`host:port/database`, for errors), its roots
    /// read now; `None` for `disable`.
    pub(crate) fn new(tls: &Tls, server: &str) -> Result<Option<Self>, PostgresError> {
        let Some((config, roots)) = client_config(tls, server)? else {
            return Ok(None);
        };
        Ok(Some(Self {
            config,
            server: server.into(),
            mode: tls.mode,
            roots: roots.into(),
        }))
    }

    /// The mode the connectors were made for.
    pub(crate) fn mode(&self) -> SslMode {
        self.mode
    }
}

impl<S> MakeTlsConnect<S> for MakeTls
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = TlsStream<S>;
    type TlsConnect = Connector;
    type Error = PostgresError;

    /// `host` is what the certificate must name (empty for a Unix socket, over which the
    /// server never offers TLS).
    fn make_tls_connect(&mut self, host: &str) -> Result<Connector, PostgresError> {
        Ok(Connector {
            make: self.clone(),
            host: host.to_owned(),
        })
    }
}

/// One TLS handshake with the server reached as `host`.
#[derive(Debug)]
pub(crate) struct Connector {
    make: MakeTls,
    host: String,
}

impl<S> TlsConnect<S> for Connector
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = TlsStream<S>;
    type Error = PostgresError;
    type Future = Pin<Box<dyn Future<Output = Result<TlsStream<S>, PostgresError>> + Send>>;

    fn connect(self, stream: S) -> Self::Future {
        Box::pin(async move {
            let make = &self.make;
            let name =
                ServerName::try_from(self.host.clone()).map_err(|_| PostgresError::TlsSetup {
                    server: make.server.to_string(),
                    what: format!(
                        "`{}` is not a host name or IP address a certificate can name",
                        self.host
                    ),
                })?;
            tokio_rustls::TlsConnector::from(Arc::clone(&make.config))
                .connect(name, stream)
                .await
                .map(TlsStream)
                .map_err(|e| handshake_error(make, &self.host, e))
        })
    }
}

/// What a failed handshake means, as a [`PostgresError`] of the server.
fn handshake_error(make: &MakeTls, host: &str, e: io::Error) -> PostgresError {
    let server = make.server.to_string();
    let rustls_error = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>());
    match rustls_error {
        Some(rustls::Error::InvalidCertificate(CertificateError::NotValidForNameContext {
            presented,
            ..
        })) => PostgresError::TlsWrongHost {
            server,
            expected: host.to_owned(),
            presented: presented_names(presented),
        },
        Some(rustls::Error::InvalidCertificate(CertificateError::NotValidForName)) => {
            PostgresError::TlsWrongHost {
                server,
                expected: host.to_owned(),
                presented: "other names".to_owned(),
            }
        }
        Some(rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer)) => {
            PostgresError::TlsUntrusted {
                server,
                mode: make.mode,
                roots: make.roots.to_string(),
            }
        }
        _ => PostgresError::Tls {
            server,
            mode: make.mode,
            source: e,
        },
    }
}

/// The names a certificate presents, as webpki lists them (`DnsName("db.example")`,
/// `IpAddress(10.0.0.5)`), plainly: `db.example, 10.0.0.5`.
fn presented_names(presented: &[String]) -> String {
    if presented.is_empty() {
        return "no host name at all".to_owned();
    }
    presented
        .iter()
        .map(|n| {
            let inner = n
                .split_once('(')
                .and_then(|(_, rest)| rest.strip_suffix(')'))
                .unwrap_or(n);
            inner.trim_matches('"').to_owned()
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// A TLS session with the server.
pub(crate) struct TlsStream<S>(tokio_rustls::client::TlsStream<S>);

impl<S> fmt::Debug for TlsStream<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TlsStream")
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for TlsStream<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for TlsStream<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> tokio_postgres::tls::TlsStream for TlsStream<S> {
    /// No `tls-server-end-point` binding: SCRAM authenticates without channel binding
    /// (`channel_binding=require` is refused by the driver).
    fn channel_binding(&self) -> ChannelBinding {
        ChannelBinding::none()
    }
}
