//! A memory backend on a Postgres server: many bot processes (replicas behind a webhook,
//! agents sharing memory) read and write one store. pgvector holds the vectors (an exact
//! per-scope scan for ordinary scopes, a per-scope HNSW index for very large ones; a memory
//! longer than the embedder's window has one vector per passage and ranks by its best, less
//! what their number adds by chance), Postgres full-text search does keyword search, and
//! hybrid search fuses both like every backend, on the spread of each over the scope.
//!
//! ```no_run
//! # async fn demo() -> memory_core::Result<()> {
//! use std::sync::Arc;
//! use memory_core::{HashingEmbedder, MemoryBackend, NewMemory, Scope, SearchRequest};
//! use memory_postgres::{PostgresBackend, PostgresConfig};
//!
//! let embedder = Arc::new(HashingEmbedder::new(384)?);
//! let store = PostgresBackend::connect(
//!     "postgres://ava@127.0.0.1:5432/ava?schema=bot",
//!     Some(embedder),
//!     PostgresConfig::default(),
//! )
//! .await?;
//! let scope = Scope::for_user("42")?.in_chat("7")?;
//! store.store(&scope, NewMemory::new("Pixel is the cat's name")).await?;
//! let hits = store.search(&scope, &SearchRequest::hybrid("cat name")).await?;
//! # let _ = hits; Ok(()) }
//! ```
//!
//! The store lives in one Postgres schema (`PostgresConfig::schema`, default `ava`, or the
//! URL's `schema` query parameter), so one database can hold several stores. The tenant leads
//! every key and index, and a new store can be split into hash partitions of the tenant
//! (`PostgresConfig::tenant_partitions`, or the URL's `tenant_partitions`).
//!
//! Connections use TLS as libpq's parameters ask ([`Tls`], or the URL's `sslmode` and
//! `sslrootcert`): `disable`, `prefer` (the default: TLS when the server offers it),
//! `require` (TLS, the certificate unchecked unless a root is given), `verify-ca` (signed by
//! a trusted root) and `verify-full` (and naming the host), against the CA certificates of
//! `sslrootcert=FILE` or else the system's trusted roots, on rustls:
//!
//! ```text
//! postgres://ava:PASSWORD@db.example.com:5432/ava?sslmode=verify-full&sslrootcert=/etc/ava/db-ca.pem
//! ```

mod backend;
mod connect;
mod conninfo;
mod error;
mod index;
mod records;
mod reembed;
mod schema;
mod search;
mod sql;
mod sslmode;
mod tls;
mod write;

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, PoolError, RecyclingMethod, Runtime};
use memory_core::{
    Embedding, EmbeddingProvider, EmbeddingSpace, Limits, Result, embed_passages, embeds_head_only,
    head_passage,
};
use tokio_postgres::config::Host;

pub use conninfo::{UrlParams, split_params};
pub use error::PostgresError;
pub use reembed::{ReembedReport, reembed};
pub use sslmode::SslMode;
pub use tls::{RootCert, Tls};

use crate::connect::{Connector, session_settings};
use crate::error::{InSchema, On, connect_error};
use crate::index::Indexes;
use crate::schema::{HNSW_MAX_DIMS, Opened, Target, quote_ident, valid_schema_name};
use crate::sql::Passages;
use crate::tls::MakeTls;

/// The most hash partitions of the tenant a store may be made with.
pub const MAX_TENANT_PARTITIONS: u16 = 1024;

/// How a store is reached and searched. The defaults suit a few bot processes sharing one
/// server.
#[derive(Clone, Debug, PartialEq)]
pub struct PostgresConfig {
    /// The Postgres schema holding the store (created if missing). A `schema` query
    /// parameter in the connection URL takes precedence.
    pub schema: String,
    /// Connections in this process's pool.
    pub pool_size: usize,
    /// How long to wait for the server to accept a connection.
    pub connect_timeout: Duration,
    /// How long to wait for a free pooled connection.
    pub acquire_timeout: Duration,
    /// Longest a single statement may run before the server cancels it.
    pub statement_timeout: Duration,
    /// Size limits enforced on input.
    pub limits: Limits,
    /// Hybrid search fuses the top `hybrid_pool_factor × limit` (at least 50) candidates of
    /// each signal.
    pub hybrid_pool_factor: usize,
    /// A scope that has held more memories than this gets its own HNSW index, built in the
    /// background (see [`PostgresBackend::index_large_scopes`]); its searches then go
    /// through that index with pgvector's iterative scan, which is approximate. Every other
    /// scope, and a large one until its index is ready, is searched exactly (a scan of its
    /// rows through the scope index).
    pub exact_scan_max: usize,
    /// `hnsw.ef_search` for searches that use an HNSW index.
    pub hnsw_ef_search: u32,
    /// Whether scopes larger than `exact_scan_max` get an HNSW index (cosine) and are
    /// searched through it. Keeping one up to date is most of the cost of a write into that
    /// scope (see BENCHMARKS.md). With `false`, every search is an exact scan, only slower
    /// in large scopes, and indexes that exist are neither used nor dropped.
    pub hnsw_index: bool,
    /// `maintenance_work_mem` (MiB) for building a scope's index: a graph that fits builds
    /// many times faster.
    pub hnsw_build_mib: u32,
    /// A new store's memories, recall counts, passages and records are split into this many hash
    /// partitions of the tenant (0, the default: one table each). It applies when the store
    /// is created; a store keeps the layout it was made with (`ava migrate` moves one into
    /// a new store of another layout). Every key and index leads with the tenant either
    /// way, so a tenant's searches read one partition. Partitioned stores need PostgreSQL 17
    /// or newer (identity columns on partitioned tables).
    pub tenant_partitions: u16,
    /// TLS to the server (default `sslmode=prefer`, as libpq). The URL's `sslmode` and
    /// `sslrootcert` take precedence.
    pub tls: Tls,
}

impl Default for PostgresConfig {
    fn default() -> Self {
        Self {
            schema: "ava".to_owned(),
            pool_size: 8,
            connect_timeout: Duration::from_secs(5),
            acquire_timeout: Duration::from_secs(10),
            statement_timeout: Duration::from_secs(30),
            limits: Limits::default(),
            hybrid_pool_factor: 4,
            exact_scan_max: 20_000,
            hnsw_ef_search: 100,
            hnsw_index: true,
            hnsw_build_mib: 512,
            tenant_partitions: 0,
            tls: Tls::default(),
        }
    }
}

impl PostgresConfig {
    /// Checks the settings without contacting a server: a schema name Postgres accepts
    /// unquoted, a pool of at least one connection, timeouts above zero, usable limits, and
    /// an `hnsw_ef_search` pgvector accepts (1 to 1000), and at most
    /// [`MAX_TENANT_PARTITIONS`] partitions. [`PostgresBackend::connect`] calls it first.
    pub fn validate(&self) -> Result<()> {
        if !valid_schema_name(&self.schema) {
            return Err(PostgresError::BadSchemaName {
                name: self.schema.clone(),
            }
            .into());
        }
        let invalid = |field: &'static str, problem: &str| {
            memory_core::MemoryError::invalid(field, problem.to_owned())
        };
        if self.pool_size == 0 {
            return Err(invalid("pool_size", "must be at least 1 connection"));
        }
        for (field, d) in [
            ("connect_timeout", self.connect_timeout),
            ("acquire_timeout", self.acquire_timeout),
            ("statement_timeout", self.statement_timeout),
        ] {
            if d.is_zero() {
                return Err(invalid(field, "must be longer than zero"));
            }
        }
        self.limits.validate()?;
        if self.hybrid_pool_factor == 0 {
            return Err(invalid("hybrid_pool_factor", "must be at least 1"));
        }
        if !(1..=1000).contains(&self.hnsw_ef_search) {
            return Err(invalid(
                "hnsw_ef_search",
                &format!("is {}; pgvector accepts 1 to 1000", self.hnsw_ef_search),
            ));
        }
        if self.hnsw_build_mib == 0 {
            return Err(invalid("hnsw_build_mib", "must be at least 1 MiB"));
        }
        if self.tenant_partitions > MAX_TENANT_PARTITIONS {
            return Err(invalid(
                "tenant_partitions",
                &format!(
                    "is {}; at most {MAX_TENANT_PARTITIONS} (each is three tables)",
                    self.tenant_partitions
                ),
            ));
        }
        Ok(())
    }
}

/// `host:port/database` of a connection config, for messages (never the password).
fn server_name(pg: &tokio_postgres::Config) -> String {
    let hosts: Vec<String> = pg
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let port = pg
                .get_ports()
                .get(i)
                .or_else(|| pg.get_ports().first())
                .copied()
                .unwrap_or(5432);
            match h {
                Host::Tcp(name) => format!("{name}:{port}"),
                Host::Unix(path) => format!("{}/.s.PGSQL.{port}", path.display()),
            }
        })
        .collect();
    let hosts = if hosts.is_empty() {
        "localhost:5432".to_owned()
    } else {
        hosts.join(",")
    };
    let db = pg.get_dbname().or(pg.get_user()).unwrap_or("postgres");
    format!("{hosts}/{db}")
}

/// A connection from `pool` (of the server `server`, set up by `config`), with connection
/// failures named clearly.
pub(crate) async fn pooled(
    pool: &Pool,
    server: &str,
    config: &PostgresConfig,
) -> std::result::Result<deadpool_postgres::Object, PostgresError> {
    pool.get().await.map_err(|e| match e {
        PoolError::Backend(e) => connect_error(server, config.tls.mode, e),
        PoolError::Timeout(deadpool_postgres::TimeoutType::Wait) => PostgresError::PoolTimeout {
            server: server.to_owned(),
            size: config.pool_size,
        },
        PoolError::Timeout(_) => PostgresError::ConnectTimeout {
            server: server.to_owned(),
            seconds: config.connect_timeout.as_secs_f64(),
        },
        other => PostgresError::Pool {
            server: server.to_owned(),
            source: Box::new(other),
        },
    })
}

/// Totals of a store, from its `stats` (one definition for every backend).
pub use memory_core::StoreStats;

/// A memory store in one schema of a Postgres database. See the crate docs.
#[derive(Debug)]
pub struct PostgresBackend {
    pool: Pool,
    /// `host:port/database`, for messages.
    server: String,
    /// The schema's bare name.
    schema: String,
    /// Schema-qualified SQL names.
    names: Names,
    embedder: Option<Arc<dyn EmbeddingProvider>>,
    /// The space the store's vectors live in (recorded in the store), if any.
    space: Option<Arc<EmbeddingSpace>>,
    config: PostgresConfig,
    /// The per-scope HNSW indexes.
    indexes: Arc<Indexes>,
    /// The hash partitions of the tenant the store was made with (0: none).
    partitions: u16,
    /// How many values of `expected_max` a semantic search passes: at least the most
    /// vectors of a memory this process has ranked (see `backend.rs`).
    longest: AtomicUsize,
}

/// The driver config with Ava's connect timeout, application name `ava` unless the caller
/// set one, and the `sslmode` the driver knows for `tls` (`verify-*` is `require` to it; the
/// checks are the connector's). Ava's session settings are not startup options but
/// statements run on each new connection ([`session_settings`]).
fn session(mut pg: tokio_postgres::Config, config: &PostgresConfig) -> tokio_postgres::Config {
    pg.connect_timeout(config.connect_timeout);
    if pg.get_application_name().is_none() {
        pg.application_name("ava");
    }
    pg.ssl_mode(match config.tls.mode {
        SslMode::Disable => tokio_postgres::config::SslMode::Disable,
        SslMode::Prefer => tokio_postgres::config::SslMode::Prefer,
        SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => {
            tokio_postgres::config::SslMode::Require
        }
    });
    pg
}

/// The connection pool (no connection is made yet), each connection made by `connector`.
fn pool(
    pg: tokio_postgres::Config,
    connector: Connector,
    config: &PostgresConfig,
    server: &str,
) -> Result<Pool, PostgresError> {
    let manager = Manager::from_connect(
        pg,
        connector,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Pool::builder(manager)
        .max_size(config.pool_size.max(1))
        .runtime(Runtime::Tokio1)
        .wait_timeout(Some(config.acquire_timeout))
        .create_timeout(Some(config.connect_timeout + Duration::from_secs(1)))
        .recycle_timeout(Some(config.connect_timeout))
        .build()
        .map_err(|e| PostgresError::Pool {
            server: server.to_owned(),
            source: Box::new(e),
        })
}

/// Quoted, schema-qualified names used in statements.
#[derive(Debug, Clone)]
pub(crate) struct Names {
    /// The schema, quoted.
    pub(crate) schema: String,
    pub(crate) memories: String,
    pub(crate) scopes: String,
    /// Recall counts, apart from the wide memory rows.
    pub(crate) access: String,
    /// Long memories' passages after the first (a store with vectors only).
    pub(crate) passages: String,
    /// Who holds which lease, until when.
    pub(crate) leases: String,
    /// Each scope's records.
    pub(crate) records: String,
    /// The store's bookkeeping (format, version, embedding space).
    pub(crate) meta: String,
    /// pgvector's cosine distance operator, qualified by the extension's schema.
    pub(crate) cosine: String,
    /// pgvector's `vector` type, qualified.
    pub(crate) vector: String,
}

impl Names {
    /// The names of the store in `schema`, pgvector's in `ext_schema`.
    fn of(schema: &str, ext_schema: &str) -> Self {
        let s = quote_ident(schema);
        Self {
            memories: format!("{s}.memories"),
            scopes: format!("{s}.scopes"),
            access: format!("{s}.memory_access"),
            passages: format!("{s}.memory_passages"),
            leases: format!("{s}.leases"),
            records: format!("{s}.records"),
            meta: format!("{s}.meta"),
            cosine: format!("OPERATOR({ext_schema}.<=>)"),
            vector: format!("{ext_schema}.vector"),
            schema: s,
        }
    }
}

impl PostgresBackend {
    /// Connects to the server at `url` (a `postgres://` URL or a `key=value` connection
    /// string) and opens (or creates) the store in `config.schema`, or in the schema named
    /// by the URL's `schema` query parameter (its `tenant_partitions`, `sslmode` and
    /// `sslrootcert` likewise override the config's; see [`split_params`]).
    ///
    /// A schema that holds something other than an Ava store, or a store from a newer Ava,
    /// is refused with a clear error and left unmodified. pgvector's `vector` extension is
    /// created if it is missing (which needs a role allowed to). With an embedder, the
    /// store's recorded embedding space must be the embedder's (a store without one adopts
    /// it); memories stored while no embedder was given are embedded now.
    ///
    /// Errors are the typed [`PostgresError`] (`?` turns it into a
    /// [`MemoryError`](memory_core::MemoryError); bad settings and a failing embedder become
    /// the `MemoryError` they hold).
    pub async fn connect(
        url: &str,
        embedder: Option<Arc<dyn EmbeddingProvider>>,
        mut config: PostgresConfig,
    ) -> Result<Self, PostgresError> {
        let (url, params) = split_params(url)?;
        config = params.apply(config);
        let pg: tokio_postgres::Config =
            url.parse()
                .map_err(|e: tokio_postgres::Error| PostgresError::BadUrl {
                    reason: e.to_string(),
                })?;
        Self::connect_with(pg, embedder, config).await
    }

    /// Like [`connect`](Self::connect), with a driver config built by the caller. TLS is
    /// `config.tls`'s (the driver config's `ssl_mode` is replaced by it); a server reached
    /// only by Unix sockets is reached without TLS, as libpq does.
    pub async fn connect_with(
        pg: tokio_postgres::Config,
        embedder: Option<Arc<dyn EmbeddingProvider>>,
        mut config: PostgresConfig,
    ) -> Result<Self, PostgresError> {
        if !valid_schema_name(&config.schema) {
            return Err(PostgresError::BadSchemaName {
                name: config.schema.clone(),
            });
        }
        config.validate().map_err(PostgresError::InvalidConfig)?;
        let server = server_name(&pg);
        let sockets_only =
            !pg.get_hosts().is_empty() && pg.get_hosts().iter().all(|h| !matches!(h, Host::Tcp(_)));
        if sockets_only {
            config.tls.mode = SslMode::Disable;
        }
        let tls = MakeTls::new(&config.tls, &server)?;
        let settings: Arc<str> = session_settings(&config, pg.get_options()).into();
        let connector = Connector::new(tls, Arc::clone(&settings));
        let pool = pool(session(pg, &config), connector, &config, &server)?;
        let given = embedder.as_ref().map(|e| e.space());
        let opened = {
            let mut client = pooled(&pool, &server, &config).await?;
            let mut tx = client.transaction().await.in_schema(&config.schema)?;
            let target = Target {
                server: &server,
                schema: &config.schema,
            };
            let opened: Opened =
                schema::open(&mut tx, &target, given.as_deref(), config.tenant_partitions).await?;
            tx.commit().await.in_schema(&config.schema)?;
            opened
        };
        let names = Names::of(&config.schema, &opened.ext_schema);
        let space = match (opened.space, given) {
            (Some(_), Some(g)) => Some(g),
            (Some(s), None) => Some(Arc::new(s)),
            (None, _) => None,
        };
        let indexable = space.as_ref().is_some_and(|s| s.dims <= HNSW_MAX_DIMS);
        let indexes = Arc::new(Indexes::new(
            pool.clone(),
            &server,
            &names,
            &opened.ext_schema,
            &config,
            config.hnsw_index && indexable,
            settings,
        ));
        let backend = Self {
            pool,
            server,
            schema: config.schema.clone(),
            names,
            embedder,
            space,
            config,
            indexes,
            partitions: opened.partitions,
            longest: AtomicUsize::new(search::LONGEST_AT_FIRST),
        };
        if backend.embedder.is_some() {
            backend.backfill_vectors().await?;
        }
        {
            let c = backend.client().await?;
            backend.indexes.load(&c).await?;
            // Scopes that outgrew exact scans while no process was indexing them.
            for (key, tenant, id) in backend.indexes.wanting(&c).await? {
                backend.indexes.spawn_build(key, tenant, id);
            }
        }
        Ok(backend)
    }

    /// Builds the HNSW index of every scope that has held more than `exact_scan_max`
    /// memories and has none yet, and waits for the builds. Such builds otherwise start in
    /// the background, at connect and after the write that takes a scope past the
    /// threshold; this is for tools and benchmarks that want them done now, and it waits
    /// for builds already under way. Returns how many of those scopes have a ready index
    /// afterwards (not one that holds fewer memories now than its count of memories ever
    /// stored). Does nothing when `hnsw_index` is off.
    pub async fn index_large_scopes(&self) -> Result<usize> {
        let c = self.client().await?;
        let wanting = self.indexes.wanting(&c).await?;
        drop(c);
        let mut ready = 0;
        for (key, tenant, id) in wanting {
            if self.indexes.build(&key, &tenant, id, true).await? {
                ready += 1;
            }
        }
        Ok(ready)
    }

    /// Totals over the whole store (every tenant, user and chat): for operators, never for
    /// prompts.
    pub async fn stats(&self) -> Result<StoreStats, PostgresError> {
        let (m, sc) = (&self.names.memories, &self.names.scopes);
        let holding = format!(
            "FROM {sc} sc WHERE EXISTS (SELECT 1 FROM {m} m \
             WHERE m.tenant = sc.tenant AND m.scope_id = sc.id)"
        );
        let sql = format!(
            "SELECT (SELECT count(*) FROM {m}), (SELECT count(*) FROM {m} WHERE embedded), \
             (SELECT count(*) FROM {m} WHERE kind = 'fact'), (SELECT count(*) {holding}), \
             (SELECT count(DISTINCT (sc.tenant, sc.user_id)) {holding}), \
             (SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::int8 FROM pg_class c \
             JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = $1 AND c.relkind IN ('r', 'm'))"
        );
        let c = self.client().await?;
        let row = self.on(&c).one(&sql, &[&self.schema]).await?;
        let cells = error::Cells::new(&row, &self.schema);
        let n = |i: usize| -> Result<u64, PostgresError> {
            Ok(u64::try_from(cells.get::<i64>(i)?).unwrap_or(0))
        };
        let space = self
            .on(&c)
            .one(&schema::space_sql(&self.names.meta), &[])
            .await?;
        let space = error::Cells::new(&space, &self.schema);
        let embedding_space = match (
            space.get::<Option<String>>(0)?,
            space.get::<Option<String>>(1)?,
            space.get::<Option<String>>(2)?,
        ) {
            (Some(p), Some(m), Some(d)) => Some(format!("{p}/{m} ({d} dims)")),
            _ => None,
        };
        Ok(StoreStats {
            memories: n(0)?,
            embedded: n(1)?,
            facts: n(2)?,
            scopes: n(3)?,
            users: n(4)?,
            bytes: n(5)?,
            embedding_space,
        })
    }

    /// The Postgres schema holding the store.
    pub fn schema(&self) -> &str {
        &self.schema
    }

    /// The server, as `host:port/database` (no credentials).
    pub fn server(&self) -> &str {
        &self.server
    }

    /// Closes the pool: later calls fail with a clear error.
    pub fn close(&self) {
        self.pool.close();
    }

    /// Statements on this store through `c`, a pooled connection or a transaction.
    pub(crate) fn on<'a, C>(&'a self, c: &'a C) -> On<'a, C> {
        On {
            c,
            schema: &self.schema,
        }
    }

    /// A pooled connection, with connection failures named clearly.
    pub(crate) async fn client(
        &self,
    ) -> std::result::Result<deadpool_postgres::Object, PostgresError> {
        pooled(&self.pool, &self.server, &self.config).await
    }

    /// Embeds memories stored while no embedder was available, each as its passages
    /// ([`embed_passages`]; a later part of a message by its head, [`embeds_head_only`]). A
    /// memory another process embedded or changed meanwhile is left as that process wrote it.
    async fn backfill_vectors(&self) -> Result<(), PostgresError> {
        let Some(embedder) = self.embedder.clone() else {
            return Ok(());
        };
        let (m, vector) = (&self.names.memories, &self.names.vector);
        // In key order, (tenant, pk), so each batch starts where the last ended.
        let select = format!(
            "SELECT tenant, pk, content, tags FROM {m} WHERE NOT embedded AND (tenant, pk) > ($1, $2) \
             ORDER BY tenant, pk LIMIT 256"
        );
        // Heads into the memory rows (those still unembedded with the text embedded, while
        // the store records this process's space), then the further passages of the rows
        // written.
        let space = self
            .space
            .as_deref()
            .map(schema::space_key)
            .unwrap_or_default();
        let update = format!(
            "WITH w AS (UPDATE {m} SET embedding = u.v, embedded = u.v IS NOT NULL \
             FROM unnest($1::text[], $2::bigint[], $3::text[], $4::{vector}[]) AS u(tenant, pk, content, v) \
             WHERE {m}.tenant = u.tenant AND {m}.pk = u.pk AND NOT {m}.embedded AND {m}.content = u.content \
             AND {} \
             RETURNING {m}.tenant, {m}.pk, {m}.scope_id) \
             INSERT INTO {} (tenant, memory, scope_id, k, embedding) \
             SELECT w.tenant, w.pk, w.scope_id, x.k, x.v FROM w \
             JOIN unnest($5::bigint[], $6::int4[], $7::{vector}[]) AS x(pk, k, v) ON x.pk = w.pk",
            schema::space_is(&self.names.meta, "$8"),
            self.names.passages
        );
        let mut after = (String::new(), 0i64);
        loop {
            let client = self.client().await?;
            let rows = client
                .query(&select, &[&after.0, &after.1])
                .await
                .in_schema(&self.schema)?;
            let Some(last) = rows.last() else {
                return Ok(());
            };
            // Rows that stay unembedded are not read again.
            after = (
                last.try_get(0).in_schema(&self.schema)?,
                last.try_get(1).in_schema(&self.schema)?,
            );
            let mut tenants = Vec::with_capacity(rows.len());
            let mut pks = Vec::with_capacity(rows.len());
            let mut texts = Vec::with_capacity(rows.len());
            let mut head_only = Vec::with_capacity(rows.len());
            for r in &rows {
                tenants.push(r.try_get::<_, String>(0).in_schema(&self.schema)?);
                pks.push(r.try_get::<_, i64>(1).in_schema(&self.schema)?);
                texts.push(r.try_get::<_, String>(2).in_schema(&self.schema)?);
                let tags: Vec<String> = r.try_get(3).in_schema(&self.schema)?;
                head_only.push(embeds_head_only(tags.iter().map(String::as_str)));
            }
            // A later part of a message is embedded by its head, as when it is stored.
            let window = embedder.window_bytes();
            let refs: Vec<&str> = texts
                .iter()
                .zip(&head_only)
                .map(|(t, &head)| match head {
                    true => head_passage(t, window),
                    false => t.as_str(),
                })
                .collect();
            let embedded = embed_passages(embedder.as_ref(), &refs)
                .await
                .map_err(PostgresError::Embedder)?;
            let mut heads = Vec::with_capacity(pks.len());
            let mut more = Passages::default();
            for (&pk, vectors) in pks.iter().zip(embedded) {
                let mut vectors = vectors.into_iter().map(Embedding::into_vector);
                heads.push(vectors.next().map(pgvector::Vector::from));
                more.extend(pk, vectors);
            }
            client
                .execute(
                    &update,
                    &[
                        &tenants,
                        &pks,
                        &texts,
                        &heads,
                        &more.owners,
                        &more.ks,
                        &more.vectors,
                        &space,
                    ],
                )
                .await
                .in_schema(&self.schema)?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bad settings are refused by `validate`, and by `connect` before it dials: the URL
    /// here points at a port nobody listens on, so only validation can answer.
    #[tokio::test]
    async fn bad_settings_are_refused_before_connecting() {
        assert!(PostgresConfig::default().validate().is_ok());
        let cases = [
            (
                PostgresConfig {
                    pool_size: 0,
                    ..PostgresConfig::default()
                },
                "pool_size",
            ),
            (
                PostgresConfig {
                    statement_timeout: Duration::ZERO,
                    ..PostgresConfig::default()
                },
                "statement_timeout",
            ),
            (
                PostgresConfig {
                    hnsw_ef_search: 5000,
                    ..PostgresConfig::default()
                },
                "hnsw_ef_search",
            ),
            (
                PostgresConfig {
                    hybrid_pool_factor: 0,
                    ..PostgresConfig::default()
                },
                "hybrid_pool_factor",
            ),
        ];
        for (config, field) in cases {
            let e = PostgresBackend::connect("postgres://ava@127.0.0.1:9/ava", None, config)
                .await
                .err()
                .map(|e| e.to_string());
            let e = e.unwrap_or_default();
            assert!(e.contains(field), "{field}: {e}");
        }
        let bad_schema = PostgresConfig {
            schema: "Robert'); DROP".into(),
            ..PostgresConfig::default()
        };
        assert!(bad_schema.validate().is_err());
    }
}
