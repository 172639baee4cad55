//! The connection's own thread: blocking SQLite work runs there, fed by a command channel,
//! so async callers never block the runtime. Jobs get a [`Conn`]: the connection plus what
//! the thread knows about it (its path, whether it may write, recalls not yet recorded),
//! and [`Conn::write`], the one way a job writes.

use std::cell::Cell;
use std::collections::HashMap;
use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use memory_core::{EmbeddingSpace, MemoryError, Result, Timestamp};
use rusqlite::{Connection, Transaction, TransactionBehavior};
use tokio::sync::oneshot;

use crate::checkpointer::Checkpointer;
use crate::error::{SqliteError, is_busy, sql_error};
use crate::schema;

type Job = Box<dyn FnOnce(&mut Conn) + Send>;

/// Takes a thread's handle out of its slot, so only the first `close` joins it (a poisoned
/// lock still yields the handle).
pub(crate) fn take_thread(slot: &Mutex<Option<JoinHandle<()>>>) -> Option<JoinHandle<()>> {
    slot.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take()
}

/// How long the worker polls for the next job before it sleeps.
const SPIN: Duration = Duration::from_micros(50);

/// At most this many recalled memories wait to be counted; beyond it, counts are dropped
/// (they are statistics, never worth memory or a failed read).
const MAX_PENDING_ACCESS: usize = 10_000;

/// How long closing waits for the write lock to record the last pending recalls.
const CLOSE_FLUSH_WAIT: Duration = Duration::from_millis(200);

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
    /// Recalls not yet written: pk -> (count, latest time). Recorded after the read that
    /// made them, never inside it (see [`Conn::flush_access`]).
    pending_access: HashMap<i64, (u64, i64)>,
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

impl Conn {
    pub(crate) fn new(conn: Connection, path: &Path, read_only: bool, busy: Duration) -> Self {
        Self {
            conn,
            path: path.to_owned(),
            read_only,
            busy_timeout: busy,
            pending_access: HashMap::new(),
            space: None,
            space_checked_at: Cell::new(None),
        }
    }

    /// The space this process's vectors live in (set once the store knows it).
    pub(crate) fn set_space(&mut self, space: Option<EmbeddingSpace>) {
        self.space = space;
        self.space_checked_at.set(None);
    }

    pub(crate) fn err(&self, e: rusqlite::Error) -> SqliteError {
        sql_error(&self.path, e)
    }

    /// Runs `f` in a write transaction begun `IMMEDIATE`: the write lock is taken up
    /// front, so the transaction waits its turn behind other processes' writers (the busy
    /// timeout) instead of failing when it upgrades from reading. Recalls still pending
    /// are recorded in the same transaction. `f` also hears whether the file still records
    /// this process's embedding space, checked under the lock, so no vector of an old space
    /// is written after another process's `reembed`.
    pub(crate) fn write<T>(
        &mut self,
        f: impl FnOnce(&Transaction<'_>, SpaceCheck) -> Result<T>,
    ) -> Result<T> {
        if self.read_only {
            return Err(SqliteError::ReadOnly {
                path: self.path.clone(),
            }
            .into());
        }
        let tx = begin_write(&mut self.conn, &self.path, self.busy_timeout)?;
        let check = check_space(&tx, &self.path, self.space.as_ref(), &self.space_checked_at)?;
        // Best-effort: a failure to count recalls must not fail the caller's write.
        let counted =
            !self.pending_access.is_empty() && record_access(&tx, &self.pending_access).is_ok();
        let out = f(&tx, check)?;
        tx.commit().map_err(|e| sql_error(&self.path, e))?;
        if counted {
            self.pending_access.clear();
        }
        Ok(out)
    }

    /// Whether the file records this process's space, read through `reader` (the
    /// connection itself, or a transaction open on it).
    pub(crate) fn space_check(&self, reader: &Connection) -> Result<SpaceCheck> {
        check_space(
            reader,
            &self.path,
            self.space.as_ref(),
            &self.space_checked_at,
        )
    }

    /// Notes that these memories were recalled now; written after the read (see
    /// [`Conn::flush_access`]).
    pub(crate) fn note_access(&mut self, pks: &[i64], now: Timestamp) {
        if self.read_only {
            return;
        }
        for &pk in pks {
            if self.pending_access.len() >= MAX_PENDING_ACCESS
                && !self.pending_access.contains_key(&pk)
            {
                return;
            }
            let e = self.pending_access.entry(pk).or_insert((0, 0));
            e.0 += 1;
            e.1 = e.1.max(now.as_millis());
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
        let result = (|| -> rusqlite::Result<()> {
            let tx = Transaction::new_unchecked(&self.conn, TransactionBehavior::Immediate)?;
            record_access(&tx, &self.pending_access)?;
            tx.commit()
        })();
        let _ = self.conn.busy_timeout(self.busy_timeout);
        match result {
            Ok(()) => self.pending_access.clear(),
            // Another process is writing: try again after the next job.
            Err(e) if is_busy(&e) => {}
            // Read-only, disk full, ...: the counts cannot be kept.
            Err(_) => self.pending_access.clear(),
        }
    }

    /// This process's space, for messages.
    pub(crate) fn space_name(&self) -> String {
        self.space
            .as_ref()
            .map_or_else(|| "none".to_owned(), ToString::to_string)
    }
}

/// Whether the file still records `mine`. The recorded space is read again only when
/// another connection has committed since it was last seen to match (`data_version`,
/// read before the space itself, so a commit in between is seen next time).
fn check_space(
    reader: &Connection,
    path: &Path,
    mine: Option<&EmbeddingSpace>,
    checked_at: &Cell<Option<i64>>,
) -> Result<SpaceCheck> {
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

/// Begins a transaction `IMMEDIATE` (the write lock up front, waiting on the busy
/// timeout). A lock that SQLite reports busy without waiting (e.g. while another process
/// recovers the log) is retried until `timeout` has passed.
pub(crate) fn begin_write<'c>(
    conn: &'c mut Connection,
    path: &Path,
    timeout: Duration,
) -> Result<Transaction<'c>, SqliteError> {
    let conn: &'c Connection = conn;
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(1);
    loop {
        // `&mut` was taken above, so no other transaction can be open on `conn`.
        match Transaction::new_unchecked(conn, TransactionBehavior::Immediate) {
            Ok(tx) => return Ok(tx),
            Err(e) if is_busy(&e) && Instant::now() < deadline => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            Err(e) => return Err(sql_error(path, e)),
        }
    }
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
#[derive(Debug)]
pub(crate) struct Worker {
    path: PathBuf,
    tx: Mutex<Option<mpsc::Sender<Job>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    checkpointer: Option<Checkpointer>,
}

impl Worker {
    /// Starts the worker on `conn`, with `checkpoint` (a second connection to the same
    /// file; none for a read-only store) copying its write-ahead log into the database in
    /// the background.
    pub(crate) fn spawn(mut conn: Conn, checkpoint: Option<Connection>) -> Result<Self> {
        let path = conn.path.clone();
        let checkpointer = match checkpoint {
            Some(c) => Some(Checkpointer::attach(&mut conn, c, &path)?),
            None => None,
        };
        let (tx, rx) = mpsc::channel::<Job>();
        let thread = std::thread::Builder::new()
            .name("ava-sqlite".into())
            .spawn(move || {
                while let Some(job) = next_job(&rx) {
                    job(&mut conn);
                    // After the job has replied: its caller does not wait for this.
                    conn.flush_access(Duration::ZERO);
                }
                conn.flush_access(CLOSE_FLUSH_WAIT);
                // Every sender is gone: close the connection here, on its own thread.
                drop(conn);
            })
            .map_err(|e| {
                MemoryError::backend(crate::error::BACKEND, "spawn the SQLite worker thread", e)
            })?;
        Ok(Self {
            path,
            tx: Mutex::new(Some(tx)),
            thread: Mutex::new(Some(thread)),
            checkpointer,
        })
    }

    /// Runs `f` on the worker thread and waits for its result.
    pub(crate) async fn call<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Conn) -> Result<T> + Send + 'static,
    {
        let (reply, rx) = oneshot::channel();
        let job: Job = Box::new(move |conn| {
            // The caller may have gone away (cancelled); then nobody wants the result.
            let _ = reply.send(f(conn));
        });
        let sent = {
            let tx = self
                .tx
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            tx.as_ref().map(|tx| tx.send(job).is_ok()).unwrap_or(false)
        };
        if !sent {
            return Err(SqliteError::WorkerGone {
                path: self.path.clone(),
            }
            .into());
        }
        rx.await
            .map_err(|_| {
                SqliteError::WorkerGone {
                    path: self.path.clone(),
                }
                .into()
            })
            .and_then(|r| r)
    }

    /// Stops accepting work, lets queued work finish, and closes both connections (the
    /// last one to close checkpoints the whole log and removes it).
    pub(crate) fn close(&self) {
        self.tx
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(h) = take_thread(&self.thread) {
            // A panicking job already lost its reply; nothing more to report here.
            let _ = h.join();
        }
        if let Some(c) = &self.checkpointer {
            c.close();
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.close();
    }
}
