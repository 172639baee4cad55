//! Opening one pooled connection: TLS as the store's `sslmode` asks (with `prefer`, plain
//! again after a failed handshake, as libpq does), then Ava's session settings, sent as `SET`
//! statements rather than a startup `options` packet, which connection poolers refuse
//! (PgBouncer before 1.20) or pass on only for settings they track.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use deadpool_postgres::Connect;
use tokio::task::JoinHandle;
use tokio_postgres::{Client, Config, NoTls};

use crate::PostgresConfig;
use crate::error::PostgresError;
use crate::sslmode::SslMode;
use crate::tls::MakeTls;

/// deadpool's way of opening a connection, with TLS and Ava's session settings.
#[derive(Debug)]
pub(crate) struct Connector {
    /// `None`: plain TCP (`sslmode=disable`, or a Unix socket).
    tls: Option<MakeTls>,
    /// The session settings ([`session_settings`]), run on each new connection.
    settings: Arc<str>,
}

impl Connector {
    /// Connections through `tls` (none: plain), set up with `settings`.
    pub(crate) fn new(tls: Option<MakeTls>, settings: Arc<str>) -> Self {
        Self { tls, settings }
    }
}

type Connecting<'a> = Pin<
    Box<dyn Future<Output = Result<(Client, JoinHandle<()>), tokio_postgres::Error>> + Send + 'a>,
>;

impl Connect for Connector {
    fn connect(&self, pg: &Config) -> Connecting<'_> {
        let pg = pg.clone();
        Box::pin(async move {
            let (client, task) = match &self.tls {
                None => drive(pg.connect(NoTls).await?),
                Some(tls) => match pg.connect(tls.clone()).await {
                    Ok(connected) => drive(connected),
                    // libpq's `prefer`: a handshake that failed (made by our connector, so
                    // the error's source is ours) is tried again without TLS.
                    Err(e)
                        if tls.mode() == SslMode::Prefer
                            && std::error::Error::source(&e)
                                .is_some_and(|s| s.is::<PostgresError>()) =>
                    {
                        tracing::debug!(
                            error = %memory_core::ErrorChain(&e),
                            "the TLS handshake failed; sslmode=prefer connects without TLS"
                        );
                        let mut plain = pg.clone();
                        plain.ssl_mode(tokio_postgres::config::SslMode::Disable);
                        drive(plain.connect(NoTls).await?)
                    }
                    Err(e) => return Err(e),
                },
            };
            if !self.settings.is_empty() {
                client.batch_execute(&self.settings).await?;
            }
            Ok((client, task))
        })
    }
}

/// The client, and the task that drives its connection.
fn drive<C>((client, connection): (Client, C)) -> (Client, JoinHandle<()>)
where
    C: Future<Output = Result<(), tokio_postgres::Error>> + Send + 'static,
{
    let task = tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::warn!(error = %memory_core::ErrorChain(&e), "a Postgres connection failed");
        }
    });
    (client, task)
}

/// Ava's session settings as SQL: the statement timeout, and pgvector's HNSW search settings,
/// each unless the caller's own startup `options` (`pg_options`) set it, so theirs win.
pub(crate) fn session_settings(config: &PostgresConfig, pg_options: Option<&str>) -> String {
    let theirs = option_names(pg_options.unwrap_or_default());
    let ours = [
        (
            "statement_timeout",
            config.statement_timeout.as_millis().to_string(),
        ),
        ("hnsw.ef_search", config.hnsw_ef_search.to_string()),
        ("hnsw.iterative_scan", "relaxed_order".to_owned()),
    ];
    ours.iter()
        .filter(|(name, _)| !theirs.iter().any(|t| t == name))
        .map(|(name, value)| format!("SET {name} = '{value}'; "))
        .collect()
}

/// The names of the settings a startup `options` string sets (`-c name=value`,
/// `-cname=value`, `--name=value`), `-` in names read as `_` as the server does.
fn option_names(options: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut words = options.split_whitespace();
    while let Some(word) = words.next() {
        let setting = if word == "-c" {
            words.next()
        } else {
            word.strip_prefix("-c").or_else(|| word.strip_prefix("--"))
        };
        if let Some((name, _)) = setting.and_then(|s| s.split_once('=')) {
            names.push(name.replace('-', "_"));
        }
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PostgresBackend;

    /// `SHOW name` on a pooled connection of `store`.
    async fn show(store: &PostgresBackend, name: &str) -> String {
        let c = store.client().await.unwrap();
        c.query_one(&format!("SHOW {name}"), &[])
            .await
            .unwrap()
            .get(0)
    }

    /// The settings are in force on the server's session, directly and through PgBouncer
    /// (which would refuse them as startup `options`); a caller's own `options` win.
    #[tokio::test]
    async fn the_session_settings_reach_the_server_directly_and_through_a_pooler() {
        let Some(direct) = memory_core::testing::env_or_skip(
            "MEMORY_PG_URL",
            "memory-postgres",
            "a Postgres URL whose server has pgvector (e.g. start one with .ci/postgres.sh start)",
        ) else {
            return;
        };
        let Some(pooled) = memory_core::testing::env_or_skip(
            "MEMORY_PG_TLS_URL",
            "memory-postgres",
            "the TLS front of that server (e.g. eval \"$(.ci/pgbouncer-tls.sh start)\")",
        ) else {
            return;
        };
        let schema = format!("ava_unit_session_{}", std::process::id());
        let config = PostgresConfig {
            schema: schema.clone(),
            pool_size: 1,
            ..PostgresConfig::default()
        };
        let sep = if direct.contains('?') { '&' } else { '?' };
        let theirs = format!("{direct}{sep}options=-c%20statement_timeout%3D7s");
        for (url, timeout) in [(&direct, "30s"), (&pooled, "30s"), (&theirs, "7s")] {
            let store = PostgresBackend::connect(url, None, config.clone())
                .await
                .unwrap();
            assert_eq!(show(&store, "statement_timeout").await, timeout, "{url}");
            assert_eq!(show(&store, "hnsw.ef_search").await, "100", "{url}");
            assert_eq!(
                show(&store, "hnsw.iterative_scan").await,
                "relaxed_order",
                "{url}"
            );
            store.close();
        }
        let store = PostgresBackend::connect(&direct, None, config)
            .await
            .unwrap();
        store
            .client()
            .await
            .unwrap()
            .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
            .await
            .unwrap();
        store.close();
    }

    #[test]
    fn the_callers_options_win_over_avas_settings() {
        let config = PostgresConfig::default();
        let all = session_settings(&config, None);
        assert_eq!(
            all,
            "SET statement_timeout = '30000'; SET hnsw.ef_search = '100'; \
             SET hnsw.iterative_scan = 'relaxed_order'; "
        );
        let some = session_settings(
            &config,
            Some("-c statement_timeout=5s --hnsw.ef-search=40 -cwork_mem=64MB"),
        );
        assert_eq!(some, "SET hnsw.iterative_scan = 'relaxed_order'; ");
    }
}
