//! `PostgresError`: what can go wrong connecting to or using a Postgres memory store.

use memory_core::MemoryError;

/// Errors specific to the Postgres store. They reach callers as the source of a
/// [`MemoryError::Backend`], which says it once (its message is empty). Messages name the server
/// (`host:port/database`) and the Postgres schema, never a password.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PostgresError {
    /// The connection string could not be parsed.
    #[error(
        "invalid Postgres connection string: {reason}; expected e.g. \
         postgres://user@127.0.0.1:5432/dbname (optionally ?schema=name)"
    )]
    BadUrl {
        /// What was wrong (the string itself is not repeated: it may hold a password).
        reason: String,
    },

    /// The configured schema name is not a plain identifier.
    #[error(
        "invalid Postgres schema name `{name}`: use 1 to 63 lowercase ASCII letters, digits and \
         `_`, starting with a letter or `_`"
    )]
    BadSchemaName {
        /// The name given.
        name: String,
    },

    /// No server answered at the address. What the OS or driver said is the source.
    #[error(
        "the Postgres server at {server} is unreachable; check that it is running and \
         accepting TCP connections there"
    )]
    Unreachable {
        /// `host:port/database`.
        server: String,
        /// What the OS or driver said.
        #[source]
        source: tokio_postgres::Error,
    },

    /// The TLS settings cannot be used: `sslrootcert` cannot be read or holds no
    /// certificate, the system has no trusted roots, the host cannot be named in a
    /// certificate.
    #[error("cannot set up TLS to the Postgres server at {server}: {what}")]
    TlsSetup {
        /// `host:port/database`.
        server: String,
        /// What was wrong.
        what: String,
    },

    /// `sslmode` `require` or stricter, but the server does not offer TLS.
    #[error(
        "the Postgres server at {server} does not offer TLS, but sslmode={mode} requires it; \
         enable ssl on the server, or connect with sslmode=prefer (TLS when offered) or disable"
    )]
    TlsNotOffered {
        /// `host:port/database`.
        server: String,
        /// The mode asked for.
        mode: crate::sslmode::SslMode,
    },

    /// `sslmode=verify-full`, and the server's certificate does not name the host connected
    /// to.
    #[error(
        "the Postgres server at {server} presented a TLS certificate for {presented}, not for \
         `{expected}`: sslmode=verify-full refuses a certificate that does not name the host \
         connected to; connect by a name the certificate lists, or with sslmode=verify-ca to \
         check only who signed it"
    )]
    TlsWrongHost {
        /// `host:port/database`.
        server: String,
        /// The host the certificate had to name.
        expected: String,
        /// The names it lists.
        presented: String,
    },

    /// The server's certificate is not signed by a trusted root (`verify-ca`, `verify-full`,
    /// or a weaker mode given `sslrootcert`).
    #[error(
        "the Postgres server at {server} presented a TLS certificate not signed by {roots} \
         (sslmode={mode}); set sslrootcert to the certificate of the CA that signed the \
         server's"
    )]
    TlsUntrusted {
        /// `host:port/database`.
        server: String,
        /// The mode asked for.
        mode: crate::sslmode::SslMode,
        /// The roots checked against ("the CA in FILE", "any of the system's trusted roots").
        roots: String,
    },

    /// The TLS handshake failed otherwise (an expired certificate, no protocol in common,
    /// the connection closed). What rustls or the socket said is the source.
    #[error("the TLS handshake with the Postgres server at {server} failed (sslmode={mode})")]
    Tls {
        /// `host:port/database`.
        server: String,
        /// The mode asked for.
        mode: crate::sslmode::SslMode,
        /// What rustls or the socket said.
        #[source]
        source: std::io::Error,
    },

    /// Connecting took longer than the configured connect timeout.
    #[error(
        "timed out after {seconds:.1} s connecting to the Postgres server at {server}; the server \
         is unreachable or overloaded"
    )]
    ConnectTimeout {
        /// `host:port/database`.
        server: String,
        /// The timeout, in seconds.
        seconds: f64,
    },

    /// The server answered but refused the session (authentication, unknown database, ...).
    /// What the server said is the source.
    #[error("the Postgres server at {server} refused the connection")]
    Refused {
        /// `host:port/database`.
        server: String,
        /// What the server said.
        #[source]
        source: tokio_postgres::Error,
    },

    /// The pgvector extension is not installed on the server, or may not be created.
    /// What the server said is the source.
    #[error(
        "the pgvector extension (`vector`) is not available in {server}; install pgvector on \
         the server (https://github.com/pgvector/pgvector, version 0.5 or newer) and run \
         `CREATE EXTENSION vector;` in that database as a role allowed to (a superuser or the \
         database owner)"
    )]
    ExtensionMissing {
        /// `host:port/database`.
        server: String,
        /// What the server said.
        #[source]
        source: tokio_postgres::Error,
    },

    /// The schema holds tables, but not an Ava store.
    #[error(
        "Postgres schema `{schema}` in {server} holds tables of something else ({tables}), not \
         an Ava memory store; it was left untouched. Choose another schema"
    )]
    Foreign {
        /// `host:port/database`.
        server: String,
        /// The schema.
        schema: String,
        /// Some of its table names.
        tables: String,
    },

    /// The store was written by a newer version of Ava.
    #[error(
        "Postgres schema `{schema}` in {server} has store schema version {found}, newer than the \
         {supported} this build of Ava understands; upgrade Ava to use it (it was left untouched)"
    )]
    NewerSchema {
        /// `host:port/database`.
        server: String,
        /// The schema.
        schema: String,
        /// Its store schema version.
        found: i64,
        /// The newest version this build knows.
        supported: i64,
    },

    /// The store holds vectors of another embedding space than the embedder offered.
    #[error(
        "memory store `{schema}` in {server} was created with embeddings from {stored}, but the \
         embedder given is {given}; connect with {stored}, or use another schema"
    )]
    SpaceChanged {
        /// `host:port/database`.
        server: String,
        /// The schema.
        schema: String,
        /// The space recorded in the store.
        stored: String,
        /// The embedder's space.
        given: String,
    },

    /// Another process moved the store to another embedding space (`reembed`) after this
    /// one connected with the old one. This process's writes keep their text, without
    /// vectors (a process of the new space embeds them); its semantic searches are refused.
    #[error(
        "memory store `{schema}` in {server} was re-embedded into {now} by another process, but \
         this process embeds with {mine}; restart it with an embedder of {now}"
    )]
    SpaceMoved {
        /// `host:port/database`.
        server: String,
        /// The schema.
        schema: String,
        /// The space the store records now (`none` if it has none).
        now: String,
        /// The space of this process's embedder.
        mine: String,
    },

    /// Another `reembed` of the store is under way (in this or another process).
    #[error(
        "memory store `{schema}` in {server} is being re-embedded by another process; wait for \
         it to end (an interrupted one is resumed by running reembed again)"
    )]
    ReembedRunning {
        /// `host:port/database`.
        server: String,
        /// The schema.
        schema: String,
    },

    /// The store's bookkeeping holds a value this build cannot read.
    #[error("memory store `{schema}` holds an invalid value: {what}")]
    InvalidData {
        /// The schema.
        schema: String,
        /// What was wrong.
        what: String,
    },

    /// No pooled connection became free in time.
    #[error(
        "timed out waiting for a free connection to {server} (pool of {size}); raise \
         PostgresConfig::pool_size or lower the load"
    )]
    PoolTimeout {
        /// `host:port/database`.
        server: String,
        /// The pool size.
        size: usize,
    },

    /// A statement ran longer than the configured statement timeout. What the server said
    /// is the source.
    #[error("a query on memory store `{schema}` was cancelled by the statement timeout")]
    StatementTimeout {
        /// The schema.
        schema: String,
        /// What the server said.
        #[source]
        source: tokio_postgres::Error,
    },

    /// Any other failure of a query or of the connection. What the driver or server said
    /// is the source.
    #[error("Postgres failed on memory store `{schema}`")]
    Query {
        /// The schema.
        schema: String,
        /// What the driver or server said.
        #[source]
        source: tokio_postgres::Error,
    },

    /// The connection pool could not be set up or failed in a way the other variants do
    /// not name. What deadpool said is the source.
    #[error("the connection pool for {server} failed")]
    Pool {
        /// `host:port/database`.
        server: String,
        /// What deadpool said.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },

    /// The [`PostgresConfig`](crate::PostgresConfig) is not usable (checked before any
    /// connection). Its text is the [`MemoryError::InvalidInput`] it holds, which it becomes
    /// again as a `MemoryError`.
    #[error(transparent)]
    InvalidConfig(MemoryError),

    /// The embedder failed while [`connect`](crate::PostgresBackend::connect) embedded the
    /// memories stored without a vector. As a `MemoryError` it is the embedder's error, as
    /// before connecting returned typed errors.
    #[error(transparent)]
    Embedder(MemoryError),
}

pub(crate) const BACKEND: &str = "memory-postgres";

impl From<PostgresError> for MemoryError {
    fn from(e: PostgresError) -> Self {
        match e {
            PostgresError::InvalidConfig(e) | PostgresError::Embedder(e) => e,
            e => MemoryError::from_backend(BACKEND, e),
        }
    }
}

/// Names the store in a driver error: `.in_schema(schema)?` classifies it with
/// [`query_error`], the one place query errors are turned into [`PostgresError`]s.
pub(crate) trait InSchema<T> {
    /// The result, its error classified as a failure on the store in `schema`.
    fn in_schema(self, schema: &str) -> Result<T, PostgresError>;
}

impl<T> InSchema<T> for Result<T, tokio_postgres::Error> {
    fn in_schema(self, schema: &str) -> Result<T, PostgresError> {
        self.map_err(|e| query_error(schema, e))
    }
}

/// A row of the store in `schema`, read cell by cell: a cell that does not decode is
/// classified by [`query_error`] like a failed statement.
pub(crate) struct Cells<'r> {
    row: &'r tokio_postgres::Row,
    schema: &'r str,
}

impl<'r> Cells<'r> {
    /// Reads `row` of the store in `schema`.
    pub(crate) fn new(row: &'r tokio_postgres::Row, schema: &'r str) -> Self {
        Self { row, schema }
    }

    /// Cell `i`, decoded as `T`.
    pub(crate) fn get<T: tokio_postgres::types::FromSql<'r>>(
        &self,
        i: usize,
    ) -> Result<T, PostgresError> {
        self.row.try_get(i).in_schema(self.schema)
    }
}

/// Statements on the store in `schema` through one pooled connection or transaction,
/// prepared once per connection (cached), their errors classified by [`query_error`].
pub(crate) struct On<'a, C> {
    /// The connection or transaction.
    pub(crate) c: &'a C,
    /// The store's schema, for the errors.
    pub(crate) schema: &'a str,
}

impl<C: deadpool_postgres::GenericClient + Sync> On<'_, C> {
    /// The rows of `sql` with `params`.
    pub(crate) async fn rows(
        &self,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<tokio_postgres::Row>, PostgresError> {
        let stmt = self.c.prepare_cached(sql).await.in_schema(self.schema)?;
        self.c.query(&stmt, params).await.in_schema(self.schema)
    }

    /// The one row of `sql` with `params` (an error if there is none or more).
    pub(crate) async fn one(
        &self,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<tokio_postgres::Row, PostgresError> {
        let stmt = self.c.prepare_cached(sql).await.in_schema(self.schema)?;
        self.c.query_one(&stmt, params).await.in_schema(self.schema)
    }

    /// The row of `sql` with `params`, if there is one.
    pub(crate) async fn opt(
        &self,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Option<tokio_postgres::Row>, PostgresError> {
        let stmt = self.c.prepare_cached(sql).await.in_schema(self.schema)?;
        self.c.query_opt(&stmt, params).await.in_schema(self.schema)
    }

    /// Runs `sql` with `params`; how many rows it changed.
    pub(crate) async fn execute(
        &self,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<u64, PostgresError> {
        let stmt = self.c.prepare_cached(sql).await.in_schema(self.schema)?;
        self.c.execute(&stmt, params).await.in_schema(self.schema)
    }
}

/// Classifies an error from a query on `schema`.
pub(crate) fn query_error(schema: &str, source: tokio_postgres::Error) -> PostgresError {
    if source.code() == Some(&tokio_postgres::error::SqlState::QUERY_CANCELED) {
        return PostgresError::StatementTimeout {
            schema: schema.to_owned(),
            source,
        };
    }
    PostgresError::Query {
        schema: schema.to_owned(),
        source,
    }
}

/// Classifies an error from opening a connection to `server` in `mode`: a failed TLS
/// handshake is the [`PostgresError`] the connector made of it (`tls.rs`).
pub(crate) fn connect_error(
    server: &str,
    mode: crate::sslmode::SslMode,
    source: tokio_postgres::Error,
) -> PostgresError {
    if std::error::Error::source(&source).is_some_and(|s| s.is::<PostgresError>()) {
        if let Some(Ok(ours)) = source.into_source().map(|s| s.downcast::<PostgresError>()) {
            return *ours;
        }
        // Not reached: the source was checked to be ours.
        return PostgresError::TlsSetup {
            server: server.to_owned(),
            what: "the TLS connector failed".to_owned(),
        };
    }
    // The driver's words when the server answers the TLS request with "no" (it has no
    // kind of its own to tell this by).
    if std::error::Error::source(&source)
        .is_some_and(|s| s.to_string() == "server does not support TLS")
    {
        return PostgresError::TlsNotOffered {
            server: server.to_owned(),
            mode,
        };
    }
    if source.as_db_error().is_some() {
        PostgresError::Refused {
            server: server.to_owned(),
            source,
        }
    } else {
        PostgresError::Unreachable {
            server: server.to_owned(),
            source,
        }
    }
}
