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
//! Blocking SQLite work runs on one worker thread per store, fed over a channel (the thread
//! opens and migrates the file itself, and closing awaits it), so the
//! backend is `Send + Sync` and any number of tasks can share it; any number of processes
//! can share the file (writes begin `IMMEDIATE` and wait their turn, reads never write).

mod backend;
mod cache;
mod checkpointer;
mod error;
mod kernels;
mod read;
mod reembed;
mod scan;
mod schema;
mod sql;
mod vector_rows;
mod worker;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use memory_core::{
    Embedding, EmbeddingProvider, EmbeddingSpace, Limits, MemoryError, Result, embed_passages,
};
use rusqlite::OptionalExtension;

pub use error::SqliteError;
pub use reembed::{ReembedReport, reembed};

use crate::cache::VectorCache;
use crate::checkpointer::Checkpointer;
use crate::error::JobError;
use crate::read::Readers;
use crate::schema::{Existing, Pragmas};
use crate::sql::Sql;
use crate::worker::{Conn, PendingAccess, Worker};

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
    /// semantic search asks vec0). A scope's vectors are held whole (4 bytes a dimension)
    /// when they fit and number under 10,000 (from 256 on with 1-byte codes beside them,
    /// scanned first), else quantized (1 byte a dimension; the best hits are still scored
    /// exactly): the default 512 holds about 1.3M 384-dimension vectors quantized. A scope
    /// that does not fit even quantized, and a scope of 10,000 or more on its first search
    /// in a process, is streamed from the file: its stored codes, then the best hits'
    /// vectors.
    pub vector_cache_mib: u32,
    /// Hybrid search fuses the top `hybrid_pool_factor × limit` (at least 50) candidates of
    /// each signal.
    pub hybrid_pool_factor: usize,
    /// Create the file when there is none (default). When `false`, a missing file is
    /// [`SqliteError::NoStore`], so a mistyped path is not silently a new, empty store.
    pub create_if_missing: bool,
    /// Open read-only: nothing is ever written (no schema, no recall counts, no vectors
    /// for memories stored without one), and writes fail with [`SqliteError::ReadOnly`].
    /// A file this process cannot write is opened this way whatever the setting.
    pub read_only: bool,
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
            vector_cache_mib: 512,
            hybrid_pool_factor: 4,
            create_if_missing: true,
            read_only: false,
        }
    }
}

impl SqliteConfig {
    /// Checks the settings without touching a file: a page size SQLite accepts, usable
    /// limits, a hybrid pool of at least one candidate per result. [`SqliteBackend::open`]
    /// calls it first (SQLite itself would silently ignore a bad page size).
    pub fn validate(&self) -> Result<()> {
        if !(512..=65536).contains(&self.page_size) || !self.page_size.is_power_of_two() {
            return Err(MemoryError::invalid(
                "page_size",
                format!(
                    "is {} bytes; SQLite takes a power of two from 512 to 65536",
                    self.page_size
                ),
            ));
        }
        self.limits.validate()?;
        if self.hybrid_pool_factor == 0 {
            return Err(MemoryError::invalid(
                "hybrid_pool_factor",
                "must be at least 1",
            ));
        }
        Ok(())
    }
}

/// Totals of a store, from its `stats` (one definition for every backend).
pub use memory_core::StoreStats;

/// A memory store in one SQLite file. See the crate docs.
#[derive(Debug)]
pub struct SqliteBackend {
    path: PathBuf,
    worker: Worker,
    embedder: Option<Arc<dyn EmbeddingProvider>>,
    /// The space the store's vectors live in (recorded in the file), if any.
    space: Option<Arc<EmbeddingSpace>>,
    /// Per-scope vector blocks, shared by the worker and the read connections.
    cache: Option<Arc<Mutex<VectorCache>>>,
    /// Read connections for searches on the caller's thread.
    readers: Readers,
    /// Recalls noted by searches, written by the worker.
    pending_access: Arc<PendingAccess>,
    config: SqliteConfig,
    /// The connection is read-only (asked for, or the file is not writable here).
    read_only: bool,
}

impl Drop for SqliteBackend {
    /// Closes the read connections before the worker's (which drop after this): the last
    /// connection to close is the one that checkpoints the log into the file and removes
    /// it, and a read connection cannot, so a store dropped without [`SqliteBackend::close`]
    /// (a one-shot command) would leave its writes in the log only.
    fn drop(&mut self) {
        self.readers.close();
    }
}

/// What [`SqliteBackend::embed_missing`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EmbedMissingReport {
    /// Memories that got a vector.
    pub embedded: u64,
    /// Memories still without one (changed or written meanwhile by another process).
    pub remaining: u64,
}

impl SqliteBackend {
    /// Opens (or creates) the store at `path`.
    ///
    /// A path that is not a plain file path (an SQLite URI, `:memory:`, a FIFO or device),
    /// a file that is not an Ava store, is corrupt, or comes from a newer Ava is refused
    /// with a clear error and left unmodified. Any number of processes may open one file at
    /// once, a new one included: each waits its turn for the write lock (the busy timeout).
    /// With an embedder, the store's recorded embedding space must be the embedder's (a
    /// store without one adopts it); memories stored while no embedder was available get
    /// their vectors when their scope is next searched (or from [`Self::embed_missing`]),
    /// not here. Without an embedder the store works on keyword search only.
    ///
    /// Everything that touches the file runs on the store's worker thread, which opens the
    /// connection itself; the caller's task only awaits the outcome. Errors are the typed
    /// [`SqliteError`] (`?` turns it into a [`MemoryError`]; bad settings become the
    /// [`MemoryError::InvalidInput`] they hold).
    pub async fn open(
        path: impl AsRef<Path>,
        embedder: Option<Arc<dyn EmbeddingProvider>>,
        config: SqliteConfig,
    ) -> Result<Self, SqliteError> {
        config.validate().map_err(SqliteError::InvalidConfig)?;
        let path = path.as_ref().to_owned();
        let given = embedder.as_ref().map(|e| e.space());
        let (worker, opened) = Worker::open(&path, &config, given).await?;
        let readers = Readers::new(&path, &opened.pragmas);
        // A read-only store that records no space cannot take on the embedder's: it stays
        // keyword-only, without the embedder.
        let embedder = embedder.filter(|_| opened.space.is_some());
        Ok(Self {
            path,
            worker,
            embedder,
            space: opened.space,
            cache: opened.cache,
            readers,
            pending_access: opened.pending,
            config,
            read_only: opened.read_only,
        })
    }

    /// Whether the store was opened read-only (asked for, or the file is not writable).
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// The store file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Totals over the whole file (every tenant, user and chat): for operators, never for
    /// prompts.
    pub async fn stats(&self) -> Result<StoreStats> {
        let space = self.space.as_ref().map(|s| s.to_string());
        self.worker
            .call(move |conn| {
                let q = |sql: &str| -> rusqlite::Result<u64> {
                    conn.query_row(sql, [], |r| r.get::<_, i64>(0))
                        .map(|n| u64::try_from(n).unwrap_or(0))
                };
                let page_count = q("PRAGMA page_count")?;
                let page_size = q("PRAGMA page_size")?;
                Ok(StoreStats {
                    memories: q("SELECT COUNT(*) FROM memories")?,
                    embedded: q("SELECT COUNT(*) FROM memories WHERE embedded > 0")?,
                    facts: q("SELECT COUNT(*) FROM memories WHERE kind = 'fact'")?,
                    scopes: q("SELECT COUNT(*) FROM scopes s WHERE EXISTS (SELECT 1 FROM memories m WHERE m.scope_id = s.id)")?,
                    users: q("SELECT COUNT(DISTINCT tenant || '/' || user) FROM scopes s WHERE EXISTS (SELECT 1 FROM memories m WHERE m.scope_id = s.id)")?,
                    bytes: page_count * page_size,
                    embedding_space: space,
                })
            })
            .await
    }

    /// Waits for queued work and closes the connection (checkpointing the WAL), without
    /// blocking the runtime: the worker thread closes it and this awaits its reply. Later
    /// calls fail with a clear error. Dropping the store closes it too (see `Worker`).
    pub async fn close(&self) {
        self.readers.close();
        self.worker.close().await;
    }

    /// Embeds every memory that has no vector yet (stored while no embedder was available,
    /// or by a process of an older space), in batches of 256, each committed on its own, so
    /// an interruption keeps what was done. `progress` hears (done, total) after each
    /// batch. Searches do this for their own scope as they need it; this is for doing the
    /// whole store at once. Without an embedder, or read-only, it does nothing.
    pub async fn embed_missing(
        &self,
        mut progress: impl FnMut(u64, u64) + Send,
    ) -> Result<EmbedMissingReport> {
        let mut report = EmbedMissingReport::default();
        if self.embedder.is_none() || self.read_only {
            return Ok(report);
        }
        let total = self.worker.call(count_unembedded).await?;
        let mut after = 0i64;
        loop {
            let todo: Vec<sql::ToEmbed> = self
                .worker
                .call(move |conn| {
                    let mut stmt = conn.prepare_cached(&format!(
                        "SELECT pk, content, {} FROM memories WHERE embedded = 0 AND pk > ?1 \
                         ORDER BY pk LIMIT 256",
                        sql::PART_TAGS
                    ))?;
                    let rows = stmt
                        .query_map([after], sql::to_embed)?
                        .collect::<rusqlite::Result<Vec<_>>>()?;
                    Ok(rows)
                })
                .await?;
            let Some(last) = todo.last() else {
                break;
            };
            after = last.0;
            report.embedded += self.add_vectors(todo).await?;
            progress(report.embedded, total);
        }
        report.remaining = self.worker.call(count_unembedded).await?;
        Ok(report)
    }

    /// Embeds `rows` (pk, content, head only) as a new memory is embedded (by its passages,
    /// or a later part of a message by its head) and writes their vectors, each only if the
    /// memory still has no vector and the same content (another process may have changed,
    /// embedded or deleted it meanwhile). Returns how many got one.
    pub(crate) async fn add_vectors(&self, rows: Vec<sql::ToEmbed>) -> Result<u64> {
        let Some(embedder) = self.embedder.clone() else {
            return Ok(0);
        };
        if rows.is_empty() {
            return Ok(0);
        }
        let texts = sql::texts_to_embed(embedder.as_ref(), &rows);
        let vectors = embed_passages(embedder.as_ref(), &texts).await?;
        let rows: Vec<(i64, String, Vec<Vec<f32>>)> = rows
            .into_iter()
            .zip(vectors)
            .map(|((pk, content, _), v)| {
                let v = v.into_iter().map(Embedding::into_vector).collect();
                (pk, content, v)
            })
            .collect();
        self.worker
            .call(move |conn| {
                let path = conn.path.clone();
                conn.write(|tx, space, ops| {
                    if space != worker::SpaceCheck::Same {
                        // Another process moved the store to another space: these vectors
                        // would be of the wrong one. A process of the new space embeds them.
                        return Ok(0);
                    }
                    let sql = Sql {
                        conn: tx,
                        path: &path,
                    };
                    let mut added = 0;
                    for (pk, content, v) in &rows {
                        let scope_id: Option<i64> = tx
                            .prepare_cached(
                                "SELECT scope_id FROM memories \
                                 WHERE pk = ?1 AND embedded = 0 AND content = ?2",
                            )?
                            .query_row(rusqlite::params![pk, content], |r| r.get(0))
                            .optional()?;
                        if let Some(sid) = scope_id {
                            sql.insert_vectors(*pk, sid, v)?;
                            ops.invalidate(sid);
                            added += 1;
                        }
                    }
                    Ok(added)
                })
            })
            .await
    }
}

/// How many memories have no vector yet.
fn count_unembedded(conn: &mut Conn) -> Result<u64, JobError> {
    let n: i64 = conn.query_row(
        "SELECT COUNT(*) FROM memories WHERE embedded = 0",
        [],
        |r| r.get(0),
    )?;
    Ok(u64::try_from(n).unwrap_or(0))
}

/// What the worker thread found and settled opening a store file.
pub(crate) struct Opened {
    /// The settings it was opened with.
    pub(crate) pragmas: Pragmas,
    /// The embedding space the file recorded when it was opened, if any.
    pub(crate) recorded: Option<EmbeddingSpace>,
    /// The store's space now: the recorded one, or the caller's, adopted.
    pub(crate) space: Option<Arc<EmbeddingSpace>>,
    /// Per-scope vector blocks, shared by the worker and the read connections.
    pub(crate) cache: Option<Arc<Mutex<VectorCache>>>,
    /// Recalls noted by searches, written by the worker.
    pub(crate) pending: Arc<PendingAccess>,
    /// Whether the connection is read-only.
    pub(crate) read_only: bool,
}

/// Inspects, opens, creates or migrates the file, reads its recorded space and settles it
/// against `given` (the caller's embedder's: refused if another, recorded if the file has
/// none and may be written), and starts the checkpointer (unless read-only). Runs on the
/// worker thread ([`Worker::open`]): opening may wait for other processes' locks.
pub(crate) fn open_store(
    path: &Path,
    config: &SqliteConfig,
    given: Option<Arc<EmbeddingSpace>>,
) -> Result<(Conn, Option<Checkpointer>, Opened), SqliteError> {
    let existing = schema::inspect(path)?;
    if (!config.create_if_missing || config.read_only) && !path.exists() {
        return Err(SqliteError::NoStore {
            path: path.to_owned(),
        });
    }
    let pragmas = Pragmas {
        read_only: config.read_only,
        page_size: config.page_size,
        synchronous_full: config.durability == Durability::Full,
        busy_timeout: config.busy_timeout,
        cache_mib: config.cache_mib,
        mmap_mib: config.mmap_mib,
    };
    let fresh = matches!(existing, Existing::Fresh);
    // Setting up a new file takes locks the busy timeout does not always cover (changing
    // the journal mode); another process doing the same is waited for here.
    let deadline = std::time::Instant::now() + config.busy_timeout;
    let mut pause = Duration::from_millis(2);
    let (conn, read_only) = loop {
        let attempt = schema::open_conn(path, &pragmas, fresh).and_then(|(mut conn, ro)| {
            schema::init_schema(&mut conn, path, ro, config.busy_timeout)?;
            Ok((conn, ro))
        });
        match attempt {
            Err(e) if e.is_busy() && std::time::Instant::now() < deadline => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            other => break other?,
        }
    };
    let recorded = schema::stored_space(&conn, path)?;
    let mut conn = Conn::new(conn, path, read_only, config.busy_timeout);
    let checkpointer = if read_only {
        None
    } else {
        let c = schema::open_checkpointer(path, &pragmas)?;
        Some(Checkpointer::attach(&mut conn, c, path)?)
    };
    let space = match (&recorded, &given) {
        (Some(s), Some(g)) if **g != *s => {
            return Err(SqliteError::SpaceChanged {
                path: path.to_owned(),
                stored: s.to_string(),
                given: g.to_string(),
            });
        }
        (Some(s), _) => Some(Arc::new(s.clone())),
        // A read-only store cannot take on a space: it stays keyword-only.
        (None, Some(_)) if read_only => None,
        (None, Some(g)) => {
            adopt_space(&mut conn, g)?;
            Some(Arc::clone(g))
        }
        (None, None) => None,
    };
    let cache = match &space {
        Some(s) if config.vector_cache_mib > 0 => {
            let budget = usize::try_from(config.vector_cache_mib).unwrap_or(0) * 1024 * 1024;
            Some(Arc::new(Mutex::new(VectorCache::new(s.dims, budget))))
        }
        _ => None,
    };
    let pending = Arc::<PendingAccess>::default();
    // Only this process's own embedder's space is checked against the file later.
    conn.set_space(given.and(space.as_deref().cloned()));
    conn.share(cache.clone(), Arc::clone(&pending));
    let opened = Opened {
        pragmas,
        recorded,
        space,
        cache,
        pending,
        read_only,
    };
    Ok((conn, checkpointer, opened))
}

/// Records `space` as the store's, unless another process recorded one first (then it
/// must be the same).
fn adopt_space(conn: &mut Conn, space: &EmbeddingSpace) -> Result<(), SqliteError> {
    let path = conn.path.clone();
    conn.write_with(|tx, _, _| {
        match schema::stored_space(tx, &path)? {
            Some(s) if s == *space => {}
            Some(s) => {
                return Err(SqliteError::SpaceChanged {
                    path: path.clone(),
                    stored: s.to_string(),
                    given: space.to_string(),
                });
            }
            None => {
                schema::create_vec_table(tx, space.dims)
                    .and_then(|()| schema::record_space(tx, space))
                    .map_err(|e| error::sql_error(&path, e))?;
            }
        }
        Ok(())
    })
}
