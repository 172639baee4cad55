//! The facade's one error type: what failed, with the store's, embedder's or hydration's
//! error kept as its source.

use std::path::PathBuf;

/// What went wrong in the facade. Each variant says what it was doing; the cause is its
/// `source`, so `{e:#}`-style chains (anyhow) read each fact once.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A value given to the facade was refused (an empty message, a zero budget, a scope
    /// key that is not one).
    #[error("{what}: {problem}")]
    Invalid {
        /// What was refused.
        what: &'static str,
        /// What was wrong with it and what was expected.
        problem: String,
    },
    /// The local model was asked for but is not installed (or this build has no local
    /// embedder); the notice says what is missing where and how to fetch it.
    #[error("{notice}")]
    ModelMissing {
        /// What is missing where, and how to get it.
        notice: String,
    },
    /// The embedder could not be made or reached.
    #[error("{what}")]
    Embedder {
        /// What was being done (`connect to the Ollama embedder`, ...).
        what: &'static str,
        /// The embedder's error.
        #[source]
        source: memory_core::MemoryError,
    },
    /// The SQLite store could not be opened.
    #[error("open memory store {}", path.display())]
    Sqlite {
        /// The store file.
        path: PathBuf,
        /// The store's error.
        #[source]
        source: memory_sqlite::SqliteError,
    },
    /// The Postgres store could not be opened.
    #[cfg(feature = "postgres")]
    #[error("open memory store {url}")]
    Postgres {
        /// The store's URL, its password replaced by `***`.
        url: String,
        /// The store's error (boxed: it is large).
        #[source]
        source: Box<memory_postgres::PostgresError>,
    },
    /// A `postgres://` URL was given to a build without the `postgres` feature.
    #[error(
        "{url} is a Postgres URL, but this build has no Postgres support; rebuild it with the \
         `postgres` feature"
    )]
    NoPostgres {
        /// The URL, its password replaced by `***`.
        url: String,
    },
    /// No store was named and no default place for one exists.
    #[error("no store given and neither XDG_DATA_HOME nor HOME is set; name a store file")]
    NoDefaultStore,
    /// The default store's directory could not be made.
    #[error("create data directory {}", dir.display())]
    DataDir {
        /// The directory.
        dir: PathBuf,
        /// Why it could not be made.
        #[source]
        source: std::io::Error,
    },
    /// A store operation failed.
    #[error("{what}")]
    Store {
        /// What was being done (`store the message`, `read the facts`, ...).
        what: &'static str,
        /// The store's error.
        #[source]
        source: memory_core::MemoryError,
    },
    /// A store operation on one scope failed.
    #[error("{what} {scope}")]
    InScope {
        /// What was being done (`delete the memories of`, ...), the scope following.
        what: &'static str,
        /// The scope (boxed: it is large, and errors are rare).
        scope: Box<memory_core::Scope>,
        /// The store's error.
        #[source]
        source: memory_core::MemoryError,
    },
    /// Building the prompt (hydrating, compiling) failed.
    #[error("{what}")]
    Hydrate {
        /// What was being done.
        what: &'static str,
        /// Hydration's error.
        #[source]
        source: hydrate::Error,
    },
    /// Erasing a person stopped: facts were still being learned in one of their places
    /// after waiting; nothing was erased.
    #[error(
        "facts are still being learned in {scope} after {waited_s} s; nothing was erased, try \
         again"
    )]
    StillLearning {
        /// The place being learned into (boxed: it is large).
        scope: Box<memory_core::Scope>,
        /// How long erasing waited, in seconds.
        waited_s: u64,
    },
}

impl Error {
    /// An [`Error::Invalid`] for `what`.
    pub(crate) fn invalid(what: &'static str, problem: impl Into<String>) -> Self {
        Self::Invalid {
            what,
            problem: problem.into(),
        }
    }

    /// A closure wrapping an embedder's error as [`Error::Embedder`] doing `what`.
    pub(crate) fn embedder(what: &'static str) -> impl FnOnce(memory_core::MemoryError) -> Self {
        move |source| Self::Embedder { what, source }
    }

    /// A closure wrapping a store error as [`Error::Store`] doing `what`.
    pub(crate) fn store(what: &'static str) -> impl FnOnce(memory_core::MemoryError) -> Self {
        move |source| Self::Store { what, source }
    }

    /// A closure wrapping a store error as [`Error::InScope`] doing `what` in `scope`.
    pub(crate) fn in_scope(
        what: &'static str,
        scope: &memory_core::Scope,
    ) -> impl FnOnce(memory_core::MemoryError) -> Self {
        let scope = Box::new(scope.clone());
        move |source| Self::InScope {
            what,
            scope,
            source,
        }
    }

    /// A closure wrapping a hydration error as [`Error::Hydrate`] doing `what`.
    pub(crate) fn hydrate(what: &'static str) -> impl FnOnce(hydrate::Error) -> Self {
        move |source| Self::Hydrate { what, source }
    }
}

/// The facade's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;
