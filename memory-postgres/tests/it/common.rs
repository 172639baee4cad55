//! Helpers shared by the Postgres tests: the server address from `MEMORY_PG_URL` (with one
//! skip line when it is unset) and its TLS front from `MEMORY_PG_TLS_URL`, fresh schema
//! names, and a guard that drops its schema.

#![allow(
    dead_code,
    unreachable_pub,
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "each test binary uses a different part of the shared helpers, which fail loudly"
)]

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// The variable naming the test server.
pub const URL_VAR: &str = "MEMORY_PG_URL";

/// The server URL, or `None` (after one skip line per process) when it is not set.
pub fn pg_url() -> Option<String> {
    memory_core::testing::env_or_skip(
        URL_VAR,
        "memory-postgres",
        "a Postgres URL whose server has pgvector (e.g. start one with .ci/postgres.sh start)",
    )
}

/// The variable naming the TLS front of the test server: a `verify-full` URL with its
/// `sslrootcert` (e.g. from `.ci/pgbouncer-tls.sh start`).
pub const TLS_URL_VAR: &str = "MEMORY_PG_TLS_URL";

/// The variable naming a CA certificate that did not sign the TLS server's certificate.
pub const OTHER_CA_VAR: &str = "MEMORY_PG_TLS_OTHER_CA";

/// What to set the TLS variables to, for skip and failure lines.
pub const TLS_SET_TO: &str = "a verify-full URL of a Postgres with pgvector behind TLS, and \
     MEMORY_PG_TLS_OTHER_CA a CA that did not sign its certificate (e.g. \
     eval \"$(.ci/pgbouncer-tls.sh start)\")";

/// The TLS front of the test server, read from [`TLS_URL_VAR`] and [`OTHER_CA_VAR`].
#[derive(Debug, Clone)]
pub struct TlsServer {
    /// `postgres://USER@HOST:PORT/DB`, without query parameters.
    pub base: String,
    /// The host its certificate names, as the URL gives it.
    pub host: String,
    /// The CA that signed its certificate.
    pub ca: String,
    /// A CA that did not.
    pub other_ca: String,
}

impl TlsServer {
    /// The server, or `None` (after a skip line) when the variables are not set;
    /// with `AVA_REQUIRE_SERVICES=1`, a panic instead.
    pub fn from_env() -> Option<Self> {
        let url =
            memory_core::testing::env_or_skip(TLS_URL_VAR, "memory-postgres (TLS)", TLS_SET_TO)?;
        let other_ca = memory_core::testing::env_or_skip(
            OTHER_CA_VAR,
            "memory-postgres (TLS)",
            "a CA file that did not sign the server's certificate",
        )?;
        let (base, params) = memory_postgres::split_params(&url).expect("a valid TLS URL");
        let Some(memory_postgres::RootCert::File(ca)) = params.sslrootcert else {
            panic!("{TLS_URL_VAR} names its CA with sslrootcert=FILE: {url}");
        };
        let host = base
            .split_once('@')
            .and_then(|(_, rest)| rest.split(':').next())
            .expect("postgres://USER@HOST:PORT/DB")
            .to_owned();
        Some(Self {
            base,
            host,
            ca: ca.display().to_string(),
            other_ca,
        })
    }

    /// The server's URL with these query parameters.
    pub fn url(&self, query: &str) -> String {
        format!("{}?{query}", self.base)
    }

    /// The server reached by the address of its host but under the name `name`, with
    /// these query parameters: the certificate is checked for `name`.
    pub fn named(&self, name: &str, query: &str) -> String {
        format!(
            "{}?hostaddr=127.0.0.1&{query}",
            self.base
                .replacen(&format!("@{}:", self.host), &format!("@{name}:"), 1)
        )
    }
}

/// A schema name no other test (or earlier run) uses.
pub fn fresh_schema() -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "ava_test_{}_{}_{nanos}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Runs `sql` on a plain connection of its own (a thread with its own runtime, so it works
/// from inside or outside a tokio runtime).
pub fn run_sql(url: &str, sql: &str) -> Result<(), String> {
    let (url, sql) = (url.to_owned(), sql.to_owned());
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        rt.block_on(async move {
            let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                .await
                .map_err(|e| e.to_string())?;
            let task = tokio::spawn(conn);
            let r = client.batch_execute(&sql).await.map_err(|e| e.to_string());
            drop(client);
            let _ = task.await;
            r
        })
    })
    .join()
    .map_err(|_| "the SQL thread panicked".to_owned())?
}

/// Drops its schema (and everything in it) when dropped.
#[derive(Debug)]
pub struct DropSchema {
    pub url: String,
    pub schema: String,
}

impl DropSchema {
    /// A [`fresh_schema`] on the server at `url`, and the guard that drops it.
    pub fn fresh(url: &str) -> (String, Self) {
        let schema = fresh_schema();
        let guard = Self {
            url: url.to_owned(),
            schema: schema.clone(),
        };
        (schema, guard)
    }
}

impl Drop for DropSchema {
    /// Gives up after 10 s of waiting for locks: a test that panicked may still hold some
    /// in a session its stopped runtime cannot end until this returns (the schema is then
    /// left behind, and the test's own failure is what is reported).
    fn drop(&mut self) {
        let _ = run_sql(
            &self.url,
            &format!(
                "SET lock_timeout = '10s'; DROP SCHEMA IF EXISTS \"{}\" CASCADE",
                self.schema
            ),
        );
    }
}

/// SQL that takes the store in `schema` (quoted as given) back to version 4's keys (before
/// the tenant led them), for tests that make older stores out of a new one. The passages'
/// table, which the older versions these tests make lack, is dropped.
pub fn undo_tenant_first(schema: &str) -> String {
    format!(
        "DROP TABLE IF EXISTS \"{schema}\".memory_passages;
         ALTER TABLE \"{schema}\".memory_access DROP COLUMN tenant;
         ALTER TABLE \"{schema}\".memories DROP COLUMN tenant;
         ALTER TABLE \"{schema}\".scopes DROP CONSTRAINT scopes_pkey,
             DROP CONSTRAINT scopes_tenant_key_key, ADD PRIMARY KEY (id), ADD UNIQUE (key);
         ALTER TABLE \"{schema}\".memories ADD PRIMARY KEY (pk), ADD UNIQUE (id),
             ADD FOREIGN KEY (scope_id) REFERENCES \"{schema}\".scopes (id);
         ALTER TABLE \"{schema}\".memory_access ADD PRIMARY KEY (pk),
             ADD FOREIGN KEY (pk) REFERENCES \"{schema}\".memories (pk) ON DELETE CASCADE;
         CREATE INDEX memories_by_scope_time ON \"{schema}\".memories (scope_id, created_at DESC, id DESC);
         DO $$ BEGIN
             IF EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = '{schema}'
                        AND table_name = 'memories' AND column_name = 'embedding') THEN
                 CREATE INDEX memories_embedded_by_scope ON \"{schema}\".memories (scope_id)
                     WHERE embedding IS NOT NULL;
             END IF;
         END $$;"
    )
}
