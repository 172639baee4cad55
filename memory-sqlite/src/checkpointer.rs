//! Background WAL checkpoints: a commit on the writer only appends to the write-ahead log,
//! and a second connection on its own thread copies the log back into the database file.
//!
//! SQLite's default (`wal_autocheckpoint`) makes the committing connection do that copy
//! itself, inside the commit that crosses 1000 log frames: about a tenth of bulk-ingest
//! time, all of it on the writer's thread. Here the writer's WAL hook only nudges the
//! checkpointer once the log holds [`TRIGGER_FRAMES`], and the copy runs next to the writer
//! (`PASSIVE`: it never blocks the writer or a reader). If the log still grows past
//! [`WRITER_CAP_FRAMES`] (the checkpointer cannot keep up, or is gone), the writer
//! checkpoints itself as SQLite would, so the log stays bounded either way.
//!
//! Durability is unchanged: a commit is durable once it is in the log (per the store's
//! `synchronous` setting); checkpointing only moves committed pages, with the same syncs.

use std::path::Path;
use std::sync::Mutex;
use std::sync::mpsc::{self, SyncSender};
use std::thread::JoinHandle;

use rusqlite::Connection;
use rusqlite::hooks::Wal;
use rusqlite::wal::CheckpointMode;

use crate::error::{SqliteError, sql_error};
use crate::worker::take;

/// Log frames (pages) after a commit that wake the checkpointer: SQLite's own default.
pub(crate) const TRIGGER_FRAMES: i32 = 1000;
/// Log frames after a commit at which the writer checkpoints itself. SQLite rewinds the log
/// only when a write transaction begins with every frame already copied; under non-stop
/// writes the background checkpoint is always a few commits behind, so the log rewinds
/// only after such a checkpoint by the writer. That one copies just the frames the
/// background one has not, and it keeps the log at most 64 MiB (16 KiB pages).
pub(crate) const WRITER_CAP_FRAMES: i32 = 4 * TRIGGER_FRAMES;

#[derive(Debug)]
enum Msg {
    Checkpoint,
    Stop,
}

/// The checkpointing thread and its connection.
#[derive(Debug)]
pub(crate) struct Checkpointer {
    tx: SyncSender<Msg>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Checkpointer {
    /// Starts checkpointing with `conn` (a second connection to the writer's file) and
    /// installs the WAL hook on `writer` that replaces SQLite's automatic checkpoints.
    pub(crate) fn attach(
        writer: &mut Connection,
        conn: Connection,
        path: &Path,
    ) -> Result<Self, SqliteError> {
        // One pending nudge is enough: a checkpoint copies everything committed so far.
        let (tx, rx) = mpsc::sync_channel::<Msg>(1);
        let thread = std::thread::Builder::new()
            .name("ava-sqlite-checkpoint".into())
            .spawn(move || {
                for msg in rx {
                    match msg {
                        // A busy or failed checkpoint is retried on the next nudge; the
                        // writer's cap keeps the log bounded meanwhile.
                        Msg::Checkpoint => {
                            let _ = conn.wal_checkpoint_v2(None::<&str>, CheckpointMode::PASSIVE);
                        }
                        Msg::Stop => break,
                    }
                }
                // Closing the last connection to the file checkpoints the whole log and
                // removes it, as before.
                drop(conn);
            })
            .map_err(|source| SqliteError::Thread {
                path: path.to_owned(),
                source,
            })?;
        let nudge = tx.clone();
        writer
            .wal_hook(Some(move |wal: &mut Wal, frames: i32| {
                if frames >= WRITER_CAP_FRAMES {
                    // The commit has happened whatever this returns; an error here would
                    // only make the committed statement report failure. A busy log is
                    // being checkpointed by the other thread already.
                    let _ = wal.checkpoint();
                } else if frames >= TRIGGER_FRAMES {
                    // Full: a nudge is already queued. Disconnected: the store is closing.
                    let _ = nudge.try_send(Msg::Checkpoint);
                }
                Ok(())
            }))
            .map_err(|e| sql_error(path, e))?;
        Ok(Self {
            tx,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Stops the thread and closes its connection. Called on the worker's thread after the
    /// writer has closed, so this connection is the file's last and leaves it fully
    /// checkpointed.
    pub(crate) fn close(&self) {
        if let Some(h) = take(&self.thread) {
            // Blocks only while a nudge is queued; the thread drains it and then stops.
            let _ = self.tx.send(Msg::Stop);
            // A panic on that thread has nothing left to report.
            let _ = h.join();
        }
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.close();
    }
}
