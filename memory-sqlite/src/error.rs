//! `SqliteError`: what can go wrong opening or using a SQLite memory store.

use std::path::PathBuf;

use memory_core::MemoryError;

/// Errors specific to the SQLite store. They reach callers as the source of a
/// [`MemoryError::Backend`], whose message is this error's text.
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
    #[error("cannot read memory store {path}: {source}")]
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
    #[error("memory store {path} is corrupt ({source}); restore it from a backup")]
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
         is {given}; open it with {stored}, or migrate it with memory_sqlite::reembed"
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

    /// Any other SQLite failure.
    #[error("SQLite failed on {path}: {source}")]
    Sqlite {
        /// The file.
        path: PathBuf,
        /// What SQLite said.
        #[source]
        source: rusqlite::Error,
    },
}

pub(crate) const BACKEND: &str = "memory-sqlite";

impl From<SqliteError> for MemoryError {
    fn from(e: SqliteError) -> Self {
        MemoryError::Backend {
            backend: BACKEND.to_owned(),
            message: e.to_string(),
            source: Some(Box::new(e)),
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
        _ => SqliteError::Sqlite {
            path: path.to_owned(),
            source,
        },
    }
}
