//! The durable embedded memory backend: one SQLite file (rusqlite, bundled) holding many
//! users' and chats' memories, with sqlite-vec (vec0, cosine, one partition per scope) for
//! semantic search and FTS5 (BM25) for keyword search.
//!
//! ```no_run
//! # async fn demo() -> memory_core::Result<()> {
//! use std::sync::Arc;
//! use memory_core::{HashingEmbedder, MemoryBackend, NewMemory, Scope, SearchRequest};
//! use memory_sqlite::{SqliteBackend, SqliteConfig};
//!
//! let embedder = Arc::new(HashingEmbedder::new(384)?);
//! let store = SqliteBackend::open("memories.db", Some(embedder), SqliteConfig::default()).await?;
//! let scope = Scope::for_user("42")?.in_chat("7")?;
//! store.store(&scope, NewMemory::new("Pixel is the cat's name")).await?;
//! let hits = store.search(&scope, &SearchRequest::hybrid("cat name")).await?;
//! # let _ = hits; Ok(()) }
//! ```
//!
//! Blocking SQLite work runs on one worker thread per store, fed over a channel, so the
//! backend is `Send + Sync` and any number of tasks can share it.

mod backend;
mod cache;
mod checkpointer;
mod error;
mod reembed;
mod schema;
mod sql;
mod worker;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use memory_core::{EmbeddingProvider, EmbeddingSpace, Limits, MemoryError, Result, embed_all};

pub use error::SqliteError;
pub use reembed::{ReembedReport, reembed};

use crate::cache::VectorCache;
use crate::schema::{Existing, Pragmas};
use crate::sql::Sql;
use crate::worker::Worker;

/// How hard a commit tries to reach the disk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Durability {
    /// `synchronous = NORMAL` with WAL: a committed write survives the process being killed;
    /// the last commits may be lost if the machine loses power. SQLite's recommended setting
    /// for WAL, and the default.
    #[default]
    Normal,
    /// `synchronous = FULL`: every commit is fsynced before it returns.
    Full,
}

/// How a store is opened. The defaults suit a bot or CLI on one machine.
#[derive(Clone, Debug, PartialEq)]
pub struct SqliteConfig {
    /// Commit durability.
    pub durability: Durability,
    /// How long to wait for another process's lock before failing.
    pub busy_timeout: Duration,
    /// SQLite page cache, in MiB.
    pub cache_mib: u32,
    /// Memory-mapped I/O window, in MiB (0 disables it).
    pub mmap_mib: u32,
    /// Size limits enforced on input.
    pub limits: Limits,
    /// Page size of a newly created file, in bytes (a power of two from 512 to 65536).
    pub page_size: u32,
    /// Memory for the in-process vector block cache, in MiB (0 turns it off and every
    /// semantic search asks vec0). A scope whose vectors do not fit is searched with vec0.
    pub vector_cache_mib: u32,
    /// Hybrid search fuses the top `hybrid_pool_factor × limit` (at least 50) candidates of
    /// each signal.
    pub hybrid_pool_factor: usize,
}

impl Default for SqliteConfig {
    fn default() -> Self {
        Self {
            durability: Durability::Normal,
            busy_timeout: Duration::from_secs(5),
            cache_mib: 64,
            mmap_mib: 256,
            limits: Limits::default(),
            page_size: 16384,
            vector_cache_mib: 256,
            hybrid_pool_factor: 4,
        }
    }
}

/// Totals of a store, from [`SqliteBackend::stats`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreStats {
    /// Memories in the file.
    pub memories: u64,
    /// Memories that have a vector.
    pub embedded: u64,
    /// Memories of kind fact.
    pub facts: u64,
    /// Scopes holding memories.
    pub scopes: u64,
    /// Distinct (tenant, user) pairs holding memories.
    pub users: u64,
    /// Size of the main database file (pages × page size; the WAL not counted).
    pub file_bytes: u64,
    /// The recorded embedding space, if any.
    pub embedding_space: Option<String>,
}

/// A memory store in one SQLite file. See the crate docs.
#[derive(Debug)]
pub struct SqliteBackend {
    path: PathBuf,
    worker: Worker,
    embedder: Option<Arc<dyn EmbeddingProvider>>,
    /// The space the store's vectors live in (recorded in the file), if any.
    space: Option<Arc<EmbeddingSpace>>,
    /// Per-scope vector blocks; only touched from jobs on the worker thread.
    cache: Option<Arc<Mutex<VectorCache>>>,
    config: SqliteConfig,
}

impl SqliteBackend {
    /// Opens (or creates) the store at `path`.
    ///
    /// A file that is not an Ava store, is corrupt, or comes from a newer Ava is refused with
    /// a clear error and left unmodified. With an embedder, the store's recorded embedding
    /// space must be the embedder's (a store without one adopts it); memories stored while
    /// no embedder was available are embedded now. Without an embedder the store works on
    /// keyword search only.
    pub async fn open(
        path: impl AsRef<Path>,
        embedder: Option<Arc<dyn EmbeddingProvider>>,
        config: SqliteConfig,
    ) -> Result<Self> {
        let path = path.as_ref().to_owned();
        let (worker, stored) = open_store(&path, &config)?;
        let given = embedder.as_ref().map(|e| e.space());
        let space = match (&stored, &given) {
            (Some(s), Some(g)) if **g != *s => {
                return Err(SqliteError::SpaceChanged {
                    path: path.clone(),
                    stored: s.to_string(),
                    given: g.to_string(),
                }
                .into());
            }
            (Some(s), _) => Some(Arc::new(s.clone())),
            (None, Some(g)) => Some(g.clone()),
            (None, None) => None,
        };
        let cache = match &space {
            Some(s) if config.vector_cache_mib > 0 => {
                let budget = usize::try_from(config.vector_cache_mib).unwrap_or(0) * 1024 * 1024;
                Some(Arc::new(Mutex::new(VectorCache::new(s.dims, budget))))
            }
            _ => None,
        };
        let backend = Self {
            path,
            worker,
            embedder,
            space,
            cache,
            config,
        };
        if stored.is_none()
            && let Some(space) = given
        {
            backend.adopt_space(space).await?;
        }
        if backend.embedder.is_some() {
            backend.backfill_vectors().await?;
        }
        Ok(backend)
    }

    /// The store file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Totals over the whole file (every tenant, user and chat): for operators, never for
    /// prompts.
    pub async fn stats(&self) -> Result<StoreStats> {
        let path = self.path.clone();
        let space = self.space.as_ref().map(|s| s.to_string());
        self.worker
            .call(move |conn| {
                let q = |sql: &str| -> Result<u64> {
                    conn.query_row(sql, [], |r| r.get::<_, i64>(0))
                        .map(|n| u64::try_from(n).unwrap_or(0))
                        .map_err(|e| error::sql_error(&path, e).into())
                };
                let page_count = q("PRAGMA page_count")?;
                let page_size = q("PRAGMA page_size")?;
                Ok(StoreStats {
                    memories: q("SELECT COUNT(*) FROM memories")?,
                    embedded: q("SELECT COUNT(*) FROM memories WHERE embedded = 1")?,
                    facts: q("SELECT COUNT(*) FROM memories WHERE kind = 'fact'")?,
                    scopes: q("SELECT COUNT(*) FROM scopes s WHERE EXISTS (SELECT 1 FROM memories m WHERE m.scope_id = s.id)")?,
                    users: q("SELECT COUNT(DISTINCT tenant || '/' || user) FROM scopes s WHERE EXISTS (SELECT 1 FROM memories m WHERE m.scope_id = s.id)")?,
                    file_bytes: page_count * page_size,
                    embedding_space: space,
                })
            })
            .await
    }

    /// Waits for queued work and closes the connection (checkpointing the WAL). Later
    /// calls fail with a clear error.
    pub fn close(&self) {
        self.worker.close();
    }

    async fn adopt_space(&self, space: Arc<EmbeddingSpace>) -> Result<()> {
        let path = self.path.clone();
        self.worker
            .call(move |conn| {
                let tx = conn.transaction().map_err(|e| error::sql_error(&path, e))?;
                schema::create_vec_table(&tx, space.dims)
                    .map_err(|e| error::sql_error(&path, e))?;
                schema::record_space(&tx, &space).map_err(|e| error::sql_error(&path, e))?;
                tx.commit().map_err(|e| error::sql_error(&path, e))?;
                Ok(())
            })
            .await
    }

    /// Embeds memories stored while no embedder was available.
    async fn backfill_vectors(&self) -> Result<()> {
        let Some(embedder) = self.embedder.clone() else {
            return Ok(());
        };
        loop {
            let path = self.path.clone();
            let todo: Vec<(i64, i64, String)> = self
                .worker
                .call(move |conn| {
                    let mut stmt = conn
                        .prepare("SELECT pk, scope_id, content FROM memories WHERE embedded = 0 ORDER BY pk LIMIT 512")
                        .map_err(|e| error::sql_error(&path, e))?;
                    let rows = stmt
                        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                        .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
                        .map_err(|e| error::sql_error(&path, e))?;
                    Ok(rows)
                })
                .await?;
            if todo.is_empty() {
                return Ok(());
            }
            let texts: Vec<&str> = todo.iter().map(|(_, _, c)| c.as_str()).collect();
            let vectors = embed_all(embedder.as_ref(), &texts).await?;
            let path = self.path.clone();
            let rows: Vec<(i64, i64, Vec<f32>)> = todo
                .iter()
                .zip(vectors)
                .map(|((pk, sid, _), v)| (*pk, *sid, v.into_vector()))
                .collect();
            let cache = self.cache.clone();
            self.worker
                .call(move |conn| {
                    if let Some(c) = &cache {
                        c.lock().unwrap_or_else(PoisonError::into_inner).clear();
                    }
                    let tx = conn.transaction().map_err(|e| error::sql_error(&path, e))?;
                    {
                        let sql = Sql {
                            conn: &tx,
                            path: &path,
                        };
                        for (pk, sid, v) in &rows {
                            sql.insert_vec(*pk, *sid, v)?;
                            tx.execute("UPDATE memories SET embedded = 1 WHERE pk = ?1", [pk])
                                .map_err(|e| error::sql_error(&path, e))?;
                        }
                    }
                    tx.commit().map_err(|e| error::sql_error(&path, e))?;
                    Ok(())
                })
                .await?;
        }
    }
}

/// Inspects, opens, creates or migrates the file, reads its recorded space, and starts the
/// worker (with its checkpointer) on it.
pub(crate) fn open_store(
    path: &Path,
    config: &SqliteConfig,
) -> Result<(Worker, Option<EmbeddingSpace>), MemoryError> {
    let existing = schema::inspect(path)?;
    let pragmas = Pragmas {
        page_size: config.page_size,
        synchronous_full: config.durability == Durability::Full,
        busy_timeout: config.busy_timeout,
        cache_mib: config.cache_mib,
        mmap_mib: config.mmap_mib,
    };
    let fresh = matches!(existing, Existing::Fresh);
    let mut conn = schema::open_rw(path, &pragmas, fresh)?;
    match existing {
        Existing::Fresh => schema::create_schema(&mut conn, path)?,
        Existing::Store { version } => schema::migrate(&mut conn, path, version)?,
    }
    let stored = schema::stored_space(&conn, path)?;
    let checkpoint = schema::open_checkpointer(path, &pragmas)?;
    Ok((Worker::spawn(conn, checkpoint, path)?, stored))
}
