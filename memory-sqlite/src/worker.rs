//! The connection's own thread, in sqlx's shape: the thread opens the connection itself
//! (inspection, schema creation and migrations, the recorded embedding space) and then runs
//! jobs fed by a command channel, so async callers never block the runtime, not even to
//! open or close a store. Jobs get a [`Conn`]: the connection plus what the thread knows
//! about it (its path, whether it may write, recalls not yet recorded), and
//! [`Conn::write`], the one way a job writes. Job code uses `?` on rusqlite errors
//! ([`JobError`]); they are classified with the store's path once, in the reply.

use std::cell::Cell;
use std::collections::HashMap;
use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use memory_core::{EmbeddingSpace, MemoryError, Result, Timestamp};
use rusqlite::{Connection, Transaction, TransactionBehavior};
use tokio::sync::oneshot;

use crate::cache::{CacheOps, VectorCache};
use crate::error::{JobError, SqliteError, is_busy, sql_error};
use crate::schema;
use crate::{Opened, SqliteConfig};

type Job = Box<dyn FnOnce(&mut Conn) + Send>;

/// Takes what a slot holds (a thread's handle, a sender), so only the first `close` gets
/// it (a poisoned lock still yields it).
pub(crate) fn take<T>(slot: &Mutex<Option<T>>) -> Option<T> {
    slot.lock().unwrap_or_else(PoisonError::into_inner).take()
}

/// How long the worker polls for the next job before it sleeps.
const SPIN: Duration = Duration::from_micros(50);

/// At most this many recalled memories wait to be counted; beyond it, counts are dropped
/// (they are statistics, never worth memory or a failed read).
const MAX_PENDING_ACCESS: usize = 10_000;

/// How long closing waits for the write lock to record the last pending recalls.
const CLOSE_FLUSH_WAIT: Duration = Duration::from_millis(200);

/// How long dropping a store on a current-thread runtime waits for its worker to finish
/// before it lets the thread finish alone (see [`Worker`]'s `Drop`).
const DROP_WAIT: Duration = Duration::from_secs(1);

/// The next job; `None` once every sender is gone. Calls come in bursts (a hydrate runs
/// several searches back to back, the bot stores after it recalls), and waking a sleeping
/// thread costs an idle VM's vCPU tens of microseconds, as much as a whole per-scope
/// search. So the worker polls the channel briefly after each job and only then sleeps.
fn next_job(rx: &mpsc::Receiver<Job>) -> Option<Job> {
    let start = Instant::now();
    loop {
        match rx.try_recv() {
            Ok(job) => return Some(job),
            Err(mpsc::TryRecvError::Disconnected) => return None,
            Err(mpsc::TryRecvError::Empty) if start.elapsed() < SPIN => std::hint::spin_loop(),
            Err(mpsc::TryRecvError::Empty) => return rx.recv().ok(),
        }
    }
}

/// The worker's connection and what it knows about it. Derefs to the [`Connection`] for
/// reads; writes go through [`Conn::write`].
#[derive(Debug)]
pub(crate) struct Conn {
    conn: Connection,
    pub(crate) path: PathBuf,
    /// Opened read-only (the file or its directory is not writable): every write is refused
    /// with [`SqliteError::ReadOnly`] before SQLite is asked.
    pub(crate) read_only: bool,
    busy_timeout: Duration,
    /// Recalls not yet written, noted by searches on any thread (see
    /// [`Conn::flush_access`]).
    pending_access: Arc<PendingAccess>,
    /// The store's vector cache, brought along by every write after it commits.
    cache: Option<Arc<Mutex<VectorCache>>>,
    /// The space this process embeds in, if any, and the `data_version` at which the
    /// file's recorded space was last seen to match it.
    space: Option<EmbeddingSpace>,
    space_checked_at: Cell<Option<i64>>,
}

impl Deref for Conn {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        &self.conn
    }
}

impl DerefMut for Conn {
    fn deref_mut(&mut self) -> &mut Connection {
        &mut self.conn
    }
}

/// What [`Conn::space_matches`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SpaceCheck {
    /// The file records the space this process embeds in (or neither has one).
    Same,
    /// Another process moved the store to this space (`reembed`) after this one opened it.
    Moved(Option<String>),
}

/// Recalls not yet written: pk -> (count, latest time). Recorded after the read that made
/// them, never inside it, by the writer ([`Conn::flush_access`]).
#[derive(Debug, Default)]
pub(crate) struct PendingAccess(Mutex<HashMap<i64, (u64, i64)>>);

impl PendingAccess {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<i64, (u64, i64)>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Notes that these memories were recalled at `now`.
    pub(crate) fn note(&self, pks: &[i64], now: Timestamp) {
        self.merge(pks.iter().map(|&pk| (pk, (1, now.as_millis()))));
    }

    /// Takes what is pending, to be written; see [`Self::restore`].
    fn take(&self) -> HashMap<i64, (u64, i64)> {
        std::mem::take(&mut *self.lock())
    }

    /// Puts back counts that could not be written, merged with those noted meanwhile.
    fn restore(&self, counts: HashMap<i64, (u64, i64)>) {
        self.merge(counts);
    }

    /// Adds (pk, (count, latest time)) pairs; a new pk past [`MAX_PENDING_ACCESS`] ends it.
    fn merge(&self, counts: impl IntoIterator<Item = (i64, (u64, i64))>) {
        let mut pending = self.lock();
        for (pk, (n, at)) in counts {
            if pending.len() >= MAX_PENDING_ACCESS && !pending.contains_key(&pk) {
                return;
            }
            let e = pending.entry(pk).or_insert((0, 0));
            e.0 += n;
            e.1 = e.1.max(at);
        }
    }

    fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }
}

/// Bumps the write sequence inside a write transaction: (before, after).
fn bump_write_seq(tx: &Transaction<'_>) -> rusqlite::Result<(i64, i64)> {
    let after: i64 = tx
        .prepare_cached("UPDATE write_seq SET n = n + 1 WHERE id = 0 RETURNING n")?
        .query_row([], |r| r.get(0))?;
    Ok((after - 1, after))
}

/// The write sequence in the snapshot `reader` (a connection with a read transaction
/// open) sees.
pub(crate) fn read_write_seq(reader: &Connection) -> rusqlite::Result<i64> {
    reader
        .prepare_cached("SELECT n FROM write_seq WHERE id = 0")?
        .query_row([], |r| r.get(0))
}

impl Conn {
    pub(crate) fn new(conn: Connection, path: &Path, read_only: bool, busy: Duration) -> Self {
        Self {
            conn,
            path: path.to_owned(),
            read_only,
            busy_timeout: busy,
            pending_access: Arc::default(),
            cache: None,
            space: None,
            space_checked_at: Cell::new(None),
        }
    }

    /// The store's vector cache and pending recalls, shared with its read connections.
    pub(crate) fn share(
        &mut self,
        cache: Option<Arc<Mutex<VectorCache>>>,
        pending: Arc<PendingAccess>,
    ) {
        self.cache = cache;
        self.pending_access = pending;
    }

    /// The space this process embeds in, if any.
    pub(crate) fn space(&self) -> Option<&EmbeddingSpace> {
        self.space.as_ref()
    }

    /// The `data_version` at which the file's space was last seen to match this process's.
    pub(crate) fn space_checked_at(&self) -> &Cell<Option<i64>> {
        &self.space_checked_at
    }

    /// The space this process's vectors live in (set once the store knows it).
    pub(crate) fn set_space(&mut self, space: Option<EmbeddingSpace>) {
        self.space = space;
        self.space_checked_at.set(None);
    }

    /// Runs `f` in a write transaction begun `IMMEDIATE`: the write lock is taken up
    /// front, so the transaction waits its turn behind other processes' writers (the busy
    /// timeout) instead of failing when it upgrades from reading. Recalls still pending
    /// are recorded in the same transaction. `f` also hears whether the file still records
    /// this process's embedding space, checked under the lock, so no vector of an old space
    /// is written after another process's `reembed`.
    ///
    /// Every write bumps the store's write sequence. What `f` did to vectors goes in its
    /// [`CacheOps`], applied to the cache once the transaction has committed.
    pub(crate) fn write<T>(
        &mut self,
        f: impl FnOnce(&Transaction<'_>, SpaceCheck, &mut CacheOps) -> Result<T, JobError>,
    ) -> Result<T, JobError> {
        self.write_with(f)
    }

    /// [`Conn::write`] for `f` failing with any `E` a store error converts into
    /// ([`SqliteError`] while opening, before there are jobs).
    pub(crate) fn write_with<T, E: From<SqliteError>>(
        &mut self,
        f: impl FnOnce(&Transaction<'_>, SpaceCheck, &mut CacheOps) -> Result<T, E>,
    ) -> Result<T, E> {
        self.writable()?;
        let tx = schema::begin_write(&mut self.conn, &self.path, self.busy_timeout)?;
        let check = check_space(&tx, &self.path, self.space.as_ref(), &self.space_checked_at)?;
        let (before, after) = bump_write_seq(&tx).map_err(|e| sql_error(&self.path, e))?;
        // Best-effort: a failure to count recalls must not fail the caller's write.
        let pending = self.pending_access.take();
        let counted = !pending.is_empty() && record_access(&tx, &pending).is_ok();
        let mut ops = CacheOps::default();
        let result = f(&tx, check, &mut ops).and_then(|out| {
            tx.commit().map_err(|e| sql_error(&self.path, e))?;
            Ok(out)
        });
        if result.is_err() || !counted {
            self.pending_access.restore(pending);
        }
        let out = result?;
        if let Some(cache) = &self.cache {
            cache
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .after_write(before, after, ops);
        }
        Ok(out)
    }

    /// Refuses to write to a store opened read-only.
    fn writable(&self) -> Result<(), SqliteError> {
        if self.read_only {
            return Err(SqliteError::ReadOnly {
                path: self.path.clone(),
            });
        }
        Ok(())
    }

    /// Runs `f` in a write transaction begun `IMMEDIATE` that touches no memory (leases,
    /// records): the write sequence stays, so no process's vector cache is dropped for it.
    pub(crate) fn write_aside<T>(
        &mut self,
        f: impl FnOnce(&Transaction<'_>) -> Result<T, JobError>,
    ) -> Result<T, JobError> {
        self.writable()?;
        let tx = schema::begin_write(&mut self.conn, &self.path, self.busy_timeout)?;
        let out = f(&tx)?;
        tx.commit().map_err(|e| sql_error(&self.path, e))?;
        Ok(out)
    }

    /// Notes that these memories were recalled now; written after the read (see
    /// [`Conn::flush_access`]).
    pub(crate) fn note_access(&self, pks: &[i64], now: Timestamp) {
        if !self.read_only {
            self.pending_access.note(pks, now);
        }
    }

    /// Writes pending recall counts if the write lock can be had within `wait`; otherwise
    /// they stay pending for the next write or flush. Never fails: recall counts are
    /// ranking statistics, and recording them must not fail or block a read. On a store
    /// that cannot be written (read-only file, full disk) they are dropped.
    pub(crate) fn flush_access(&mut self, wait: Duration) {
        if self.pending_access.is_empty() {
            return;
        }
        if self.conn.busy_timeout(wait).is_err() {
            return;
        }
        let pending = self.pending_access.take();
        // Recall counts do not touch vectors: no write sequence bump, no cache change.
        let result = (|| -> rusqlite::Result<()> {
            let tx = Transaction::new_unchecked(&self.conn, TransactionBehavior::Immediate)?;
            record_access(&tx, &pending)?;
            tx.commit()
        })();
        let _ = self.conn.busy_timeout(self.busy_timeout);
        match result {
            Ok(()) => {}
            // Another process is writing: try again after the next job.
            Err(e) if is_busy(&e) => self.pending_access.restore(pending),
            // Read-only, disk full, ...: the counts cannot be kept.
            Err(_) => {}
        }
    }
}

/// Locks `cache` (if any) and makes it valid for the snapshot of the read transaction open
/// on `reader`.
pub(crate) fn lock_cache_for<'c>(
    cache: Option<&'c Mutex<VectorCache>>,
    reader: &Connection,
    path: &Path,
) -> Result<Option<std::sync::MutexGuard<'c, VectorCache>>, SqliteError> {
    let Some(cache) = cache else {
        return Ok(None);
    };
    let seq = read_write_seq(reader).map_err(|e| sql_error(path, e))?;
    let mut guard = cache.lock().unwrap_or_else(PoisonError::into_inner);
    guard.sync(seq);
    Ok(Some(guard))
}

/// Whether the file still records `mine`. The recorded space is read again only when
/// another connection has committed since it was last seen to match (`data_version`,
/// read before the space itself, so a commit in between is seen next time).
pub(crate) fn check_space(
    reader: &Connection,
    path: &Path,
    mine: Option<&EmbeddingSpace>,
    checked_at: &Cell<Option<i64>>,
) -> Result<SpaceCheck, SqliteError> {
    let Some(mine) = mine else {
        return Ok(SpaceCheck::Same);
    };
    let version: i64 = reader
        .query_row("PRAGMA data_version", [], |r| r.get(0))
        .map_err(|e| sql_error(path, e))?;
    if checked_at.get() == Some(version) {
        return Ok(SpaceCheck::Same);
    }
    let stored = schema::stored_space(reader, path)?;
    if stored.as_ref() == Some(mine) {
        checked_at.set(Some(version));
        return Ok(SpaceCheck::Same);
    }
    Ok(SpaceCheck::Moved(stored.map(|s| s.to_string())))
}

/// Adds pending recall counts to their memories (rows deleted since are skipped).
fn record_access(tx: &Transaction<'_>, pending: &HashMap<i64, (u64, i64)>) -> rusqlite::Result<()> {
    let mut stmt = tx.prepare_cached(
        "UPDATE memories SET access_count = access_count + ?1, \
         accessed_at = MAX(accessed_at, ?2) WHERE pk = ?3",
    )?;
    for (pk, (n, at)) in pending {
        stmt.execute(rusqlite::params![
            i64::try_from(*n).unwrap_or(i64::MAX),
            at,
            pk
        ])?;
    }
    Ok(())
}

/// Owns one connection on a dedicated thread and runs closures against it in order.
///
/// Closing is [`Worker::close`], which awaits the thread's last act (the reply that it has
/// closed both connections) without blocking the runtime. Dropping an open worker stops
/// it too, and waits for the thread as closing a file should (its last connection folds
/// the write-ahead log back, so a process that exits right after leaves a whole file):
/// off a runtime it joins the thread; on a multi-thread runtime it joins inside
/// `block_in_place`, so the runtime's other tasks move to other threads meanwhile; on a
/// current-thread runtime, which has no other thread to move them to, it waits at most
/// [`DROP_WAIT`] and then leaves the thread to finish alone.
#[derive(Debug)]
pub(crate) struct Worker {
    path: PathBuf,
    tx: Mutex<Option<mpsc::Sender<Job>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// Answered by the thread once both connections are closed.
    done: Mutex<Option<oneshot::Receiver<()>>>,
}

impl Worker {
    /// Starts the worker thread, which opens the store at `path` itself ([`crate::open_store`]:
    /// inspection, schema, space, with the checkpointer unless read-only), and waits for
    /// what it found. `given` is the space of the caller's embedder, if any.
    pub(crate) async fn open(
        path: &Path,
        config: &SqliteConfig,
        given: Option<Arc<EmbeddingSpace>>,
    ) -> Result<(Self, Opened), SqliteError> {
        let (tx, rx) = mpsc::channel::<Job>();
        let (ready, opened) = oneshot::channel();
        let (done_tx, done) = oneshot::channel();
        let (p, c) = (path.to_owned(), config.clone());
        let thread = std::thread::Builder::new()
            .name("ava-sqlite".into())
            .spawn(move || {
                let (mut conn, checkpointer, opened) = match crate::open_store(&p, &c, given) {
                    Ok(o) => o,
                    Err(e) => {
                        let _ = ready.send(Err(e));
                        return;
                    }
                };
                // Nobody waits for the store any more (the open was cancelled): close it.
                if ready.send(Ok(opened)).is_ok() {
                    while let Some(job) = next_job(&rx) {
                        job(&mut conn);
                        // After the job has replied: its caller does not wait for this.
                        conn.flush_access(Duration::ZERO);
                    }
                    conn.flush_access(CLOSE_FLUSH_WAIT);
                }
                // Every sender is gone: close the connection here, on its own thread, then
                // the checkpointer's, the file's last, which checkpoints the whole log.
                drop(conn);
                if let Some(c) = checkpointer {
                    c.close();
                }
                let _ = done_tx.send(());
            })
            .map_err(|source| SqliteError::Thread {
                path: path.to_owned(),
                source,
            })?;
        let gone = || SqliteError::WorkerGone {
            path: path.to_owned(),
        };
        let opened = match opened.await {
            Ok(Ok(opened)) => opened,
            Ok(Err(e)) => {
                // The thread has ended, having opened nothing.
                let _ = thread.join();
                return Err(e);
            }
            Err(_) => return Err(gone()),
        };
        let worker = Self {
            path: path.to_owned(),
            tx: Mutex::new(Some(tx)),
            thread: Mutex::new(Some(thread)),
            done: Mutex::new(Some(done)),
        };
        Ok((worker, opened))
    }

    /// Runs `f` on the worker thread and waits for its result; its rusqlite errors are
    /// classified with the store's path here.
    pub(crate) async fn call<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Conn) -> Result<T, JobError> + Send + 'static,
    {
        let (reply, rx) = oneshot::channel();
        let job: Job = Box::new(move |conn| {
            // The caller may have gone away (cancelled); then nobody wants the result.
            let _ = reply.send(f(conn));
        });
        let sent = {
            let tx = self.tx.lock().unwrap_or_else(PoisonError::into_inner);
            tx.as_ref().map(|tx| tx.send(job).is_ok()).unwrap_or(false)
        };
        let gone = || -> MemoryError {
            SqliteError::WorkerGone {
                path: self.path.clone(),
            }
            .into()
        };
        if !sent {
            return Err(gone());
        }
        match rx.await {
            Ok(result) => result.map_err(|e| e.into_memory(&self.path)),
            Err(_) => Err(gone()),
        }
    }

    /// Wakes the worker without waiting for it (an empty job: it writes pending recalls
    /// after every job).
    pub(crate) fn nudge(&self) {
        let tx = self.tx.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(tx) = tx.as_ref() {
            let _ = tx.send(Box::new(|_| {}));
        }
    }

    /// Stops accepting work, lets queued work finish, and closes both connections (the
    /// last one to close checkpoints the whole log and removes it). Awaits the thread's
    /// reply, so the runtime is not blocked meanwhile; a second call returns at once.
    pub(crate) async fn close(&self) {
        take(&self.tx);
        if let Some(done) = take(&self.done) {
            // An error means the thread ended without replying (a job panicked).
            let _ = done.await;
        }
        if let Some(h) = take(&self.thread) {
            // Its last act was the reply: this waits only for the thread to exit.
            let _ = h.join();
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        take(&self.tx);
        let Some(h) = take(&self.thread) else {
            return;
        };
        match tokio::runtime::Handle::try_current().map(|rt| rt.runtime_flavor()) {
            Err(_) => {
                // A panicking job already lost its reply; nothing more to report here.
                let _ = h.join();
                return;
            }
            Ok(tokio::runtime::RuntimeFlavor::MultiThread) => {
                tokio::task::block_in_place(|| {
                    let _ = h.join();
                });
                return;
            }
            Ok(_) => {}
        }
        let deadline = Instant::now() + DROP_WAIT;
        while !h.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        if h.is_finished() {
            let _ = h.join();
        }
        // Otherwise the thread finishes the queued work and closes the file alone.
    }
}
