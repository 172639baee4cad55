//! The connection's own thread: blocking SQLite work runs there, fed by a command channel,
//! so async callers never block the runtime.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use memory_core::{MemoryError, Result};
use rusqlite::Connection;
use tokio::sync::oneshot;

use crate::checkpointer::Checkpointer;
use crate::error::SqliteError;

type Job = Box<dyn FnOnce(&mut Connection) + Send>;

/// Takes a thread's handle out of its slot, so only the first `close` joins it (a poisoned
/// lock still yields the handle).
pub(crate) fn take_thread(slot: &Mutex<Option<JoinHandle<()>>>) -> Option<JoinHandle<()>> {
    slot.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take()
}

/// How long the worker polls for the next job before it sleeps.
const SPIN: Duration = Duration::from_micros(50);

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

/// Owns one connection on a dedicated thread and runs closures against it in order.
#[derive(Debug)]
pub(crate) struct Worker {
    path: PathBuf,
    tx: Mutex<Option<mpsc::Sender<Job>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    checkpointer: Checkpointer,
}

impl Worker {
    /// Starts the worker on `conn`, with `checkpoint` (a second connection to the same
    /// file) copying its write-ahead log into the database in the background.
    pub(crate) fn spawn(mut conn: Connection, checkpoint: Connection, path: &Path) -> Result<Self> {
        let checkpointer = Checkpointer::attach(&mut conn, checkpoint, path)?;
        let (tx, rx) = mpsc::channel::<Job>();
        let thread = std::thread::Builder::new()
            .name("ava-sqlite".into())
            .spawn(move || {
                while let Some(job) = next_job(&rx) {
                    job(&mut conn);
                }
                // Every sender is gone: close the connection here, on its own thread.
                drop(conn);
            })
            .map_err(|e| {
                MemoryError::backend(crate::error::BACKEND, "spawn the SQLite worker thread", e)
            })?;
        Ok(Self {
            path: path.to_owned(),
            tx: Mutex::new(Some(tx)),
            thread: Mutex::new(Some(thread)),
            checkpointer,
        })
    }

    /// Runs `f` on the worker thread and waits for its result.
    pub(crate) async fn call<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T> + Send + 'static,
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
        self.checkpointer.close();
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.close();
    }
}
