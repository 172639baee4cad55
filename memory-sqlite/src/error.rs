//! `SqliteError`: what can go wrong opening or using a SQLite memory store.

use std::path::PathBuf;

use memory_core::MemoryError;

/// Errors specific to the SQLite store. They reach callers as the source of a
/// [`MemoryError::Backend`], which says it once (its message is empty).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SqliteError {
    /// The directory the store file should live in does not exist.
    #[error("cannot create memory store {path}: directory {dir} does not exist")]
    MissingDirectory {
        /// The store path.
        path: PathBuf,
        /// Its parent directory.
        dir: PathBuf,
    },

    /// The file could not be read.
    #[error("cannot read memory store {path}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },

    /// The file exists but is not an SQLite database at all.
    #[error(
        "{path} is not an SQLite database, so it is not an Ava memory store; it was left untouched"
    )]
    NotADatabase {
        /// The file.
        path: PathBuf,
        /// What SQLite said.
        #[source]
        source: rusqlite::Error,
    },

    /// The file is an SQLite database that belongs to something else.
    #[error(
        "{path} is an SQLite database of another application (application_id {application_id}, \
         tables: {tables}), not an Ava memory store; it was left untouched"
    )]
    Foreign {
        /// The file.
        path: PathBuf,
        /// Its `PRAGMA application_id`.
        application_id: i32,
        /// Some of its table names.
        tables: String,
    },

    /// The store was written by a newer version of Ava.
    #[error(
        "{path} has store schema version {found}, newer than the {supported} this build of Ava \
         understands; upgrade Ava to open it (the file was left untouched)"
    )]
    NewerSchema {
        /// The file.
        path: PathBuf,
        /// Its schema version.
        found: i64,
        /// The newest version this build knows.
        supported: i64,
    },

    /// SQLite reports the file as damaged.
    #[error(
        "memory store {path} is corrupt; restore it from a backup, or save what can be read \
         with `sqlite3 {path} .recover | sqlite3 recovered.db` and open that (after making a copy)"
    )]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What SQLite said.
        #[source]
        source: rusqlite::Error,
    },

    /// The store holds vectors of another embedding space than the embedder offered.
    #[error(
        "memory store {path} was created with embeddings from {stored}, but the embedder given \
         is {given}; open it with {stored}, or re-embed the store into {given} first"
    )]
    SpaceChanged {
        /// The file.
        path: PathBuf,
        /// The space recorded in the store.
        stored: String,
        /// The embedder's space.
        given: String,
    },

    /// The store's bookkeeping is inconsistent (e.g. an unreadable id or timestamp).
    #[error("memory store {path} holds an invalid value: {what}")]
    InvalidData {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        what: String,
    },

    /// The worker thread that owns the connection has stopped.
    #[error("the SQLite worker thread for {path} has stopped")]
    WorkerGone {
        /// The file.
        path: PathBuf,
    },

    /// Another process moved the store to another embedding space (`reembed`) while this
    /// one had it open with the old embedder. Its memories are still stored (without
    /// vectors, embedded later by a process of the new space); semantic search is refused.
    #[error(
        "memory store {path} was re-embedded into {now} by another process, but this process \
         embeds with {mine}; restart it with an embedder of {now}"
    )]
    SpaceMoved {
        /// The file.
        path: PathBuf,
        /// The space the file records now (`none` if it has none).
        now: String,
        /// The space of this process's embedder.
        mine: String,
    },

    /// The store cannot be written: the file or its directory is read-only (reads work).
    #[error("memory store {path} is read-only here; it can be searched but not changed")]
    ReadOnly {
        /// The file.
        path: PathBuf,
    },

    /// The store needs a schema upgrade, which a read-only open cannot do.
    #[error(
        "memory store {path} has schema version {found} and needs an upgrade to {current}, \
         which a read-only open cannot do; open it once for writing"
    )]
    UpgradeNeeded {
        /// The file.
        path: PathBuf,
        /// Its schema version.
        found: i64,
        /// The version this build writes.
        current: i64,
    },

    /// No store exists at the path, and the caller asked not to create one.
    #[error("there is no memory store at {path} (nothing has been stored there yet)")]
    NoStore {
        /// The path.
        path: PathBuf,
    },

    /// The path names something SQLite would not treat as a plain file: an SQLite URI
    /// (`file:...`), `:memory:`, or nothing at all.
    #[error("{shown} is not a store file path: {why}")]
    NotAFilePath {
        /// The path as given, quoted.
        shown: String,
        /// What it would have meant, and what to pass instead.
        why: &'static str,
    },

    /// The path exists but is not a regular file (a directory, FIFO, device, socket).
    #[error("memory store {path} is {kind}, not a regular file; it was left untouched")]
    NotAFile {
        /// The path.
        path: PathBuf,
        /// What it is ("a directory", "a FIFO", ...).
        kind: &'static str,
    },

    /// The path is a symbolic link whose target does not exist.
    #[error(
        "memory store {path} is a symbolic link to {target}, which does not exist; fix or \
         remove the link"
    )]
    DanglingLink {
        /// The link.
        path: PathBuf,
        /// Where it points.
        target: PathBuf,
    },

    /// The store file could not be created or opened (permissions, a read-only directory).
    #[error("cannot open or create memory store {path}")]
    CannotOpen {
        /// The file.
        path: PathBuf,
        /// What the OS or SQLite said.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },

    /// Any other SQLite failure.
    #[error("SQLite failed on {path}")]
    Sqlite {
        /// The file.
        path: PathBuf,
        /// What SQLite said.
        #[source]
        source: rusqlite::Error,
    },

    /// The [`SqliteConfig`](crate::SqliteConfig) is not usable (checked before any file is
    /// touched). Its text is the [`MemoryError::InvalidInput`] it holds, which it becomes
    /// again as a `MemoryError`.
    #[error(transparent)]
    InvalidConfig(MemoryError),

    /// The store's worker or checkpoint thread could not be started.
    #[error("cannot start a thread for memory store {path}")]
    Thread {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
}

pub(crate) const BACKEND: &str = "memory-sqlite";

impl From<SqliteError> for MemoryError {
    fn from(e: SqliteError) -> Self {
        match e {
            // Bad settings are the caller's input, as they were before they were typed.
            SqliteError::InvalidConfig(e) => e,
            e => MemoryError::from_backend(BACKEND, e),
        }
    }
}

/// What a job on the store's connection fails with. Job code uses `?` on rusqlite errors,
/// store errors and memory errors alike; the rusqlite ones are classified with the store's
/// path in one place, [`JobError::into_memory`] (the worker's reply).
#[derive(Debug)]
pub(crate) enum JobError {
    /// SQLite said no; not classified yet.
    Sql(rusqlite::Error),
    /// A store error, already classified.
    Store(SqliteError),
    /// Anything else (a taken id, a memory not found, ...).
    Memory(MemoryError),
}

impl From<rusqlite::Error> for JobError {
    fn from(e: rusqlite::Error) -> Self {
        Self::Sql(e)
    }
}

impl From<SqliteError> for JobError {
    fn from(e: SqliteError) -> Self {
        Self::Store(e)
    }
}

impl From<MemoryError> for JobError {
    fn from(e: MemoryError) -> Self {
        Self::Memory(e)
    }
}

impl JobError {
    /// The error for the caller, rusqlite's classified on `path` ([`sql_error`]).
    pub(crate) fn into_memory(self, path: &std::path::Path) -> MemoryError {
        match self {
            Self::Sql(e) => sql_error(path, e).into(),
            Self::Store(e) => e.into(),
            Self::Memory(e) => e,
        }
    }
}

/// Classifies a rusqlite error on `path` (corruption gets its own message).
pub(crate) fn sql_error(path: &std::path::Path, source: rusqlite::Error) -> SqliteError {
    use rusqlite::ffi::ErrorCode;
    match source.sqlite_error_code() {
        Some(ErrorCode::DatabaseCorrupt) => SqliteError::Corrupt {
            path: path.to_owned(),
            source,
        },
        Some(ErrorCode::NotADatabase) => SqliteError::NotADatabase {
            path: path.to_owned(),
            source,
        },
        Some(ErrorCode::ReadOnly) => SqliteError::ReadOnly {
            path: path.to_owned(),
        },
        Some(ErrorCode::CannotOpen) => SqliteError::CannotOpen {
            path: path.to_owned(),
            source: Box::new(source),
        },
        _ => SqliteError::Sqlite {
            path: path.to_owned(),
            source,
        },
    }
}

/// Whether SQLite said another connection holds a lock (`SQLITE_BUSY`, `SQLITE_LOCKED`, in
/// any of their extended forms).
pub(crate) fn is_busy(e: &rusqlite::Error) -> bool {
    use rusqlite::ffi::ErrorCode;
    matches!(
        e.sqlite_error_code(),
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
    )
}

impl SqliteError {
    /// Whether this is SQLite saying another connection holds a lock (worth retrying).
    pub(crate) fn is_busy(&self) -> bool {
        match self {
            SqliteError::Sqlite { source, .. } => is_busy(source),
            _ => false,
        }
    }
}
