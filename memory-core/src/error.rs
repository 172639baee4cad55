//! The one error type of memory-core, shared by every backend and embedding provider.

use std::sync::Arc;

use crate::capability::Capability;
use crate::embedding::EmbeddingSpace;
use crate::entry::MemoryId;

/// Boxed source error kept by [`MemoryError::Backend`] and [`MemoryError::Embedding`].
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Result alias used across the memory crates.
pub type Result<T, E = MemoryError> = std::result::Result<T, E>;

/// Everything that can go wrong when storing, reading or embedding memories.
///
/// Every variant says what was wrong and, where it applies, what was expected.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MemoryError {
    /// A vector's length does not match the embedding space the store was created with.
    #[error(
        "embedding has {got} dimensions, {what} expects {expected} ({} / {})",
        space.provider,
        space.model
    )]
    DimensionMismatch {
        /// Dimensions of the vector that was offered.
        got: usize,
        /// Dimensions the store or provider expects.
        expected: usize,
        /// The embedding space the store was created with.
        space: Arc<EmbeddingSpace>,
        /// Who refused the vector (a store, a provider, a query).
        what: String,
    },

    /// A vector comes from another embedding space (provider or model) than the store's,
    /// even if the number of dimensions happens to agree.
    #[error("embedding comes from space {got}, but {what} was created with {expected}")]
    SpaceMismatch {
        /// The space of the vector that was offered.
        got: Arc<EmbeddingSpace>,
        /// The space the store was created with.
        expected: Arc<EmbeddingSpace>,
        /// Who refused the vector.
        what: String,
    },

    /// The caller asked for something the backend or provider does not advertise.
    #[error("{provider} does not support {capability}")]
    Unsupported {
        /// The capability that was needed.
        capability: Capability,
        /// The backend or provider that lacks it.
        provider: String,
    },

    /// No memory with this id exists in the scope the caller named.
    ///
    /// A memory that exists in another scope is reported the same way, so the error does
    /// not reveal other scopes' contents.
    #[error("no memory {id} in this scope")]
    NotFound {
        /// The id that was looked up.
        id: MemoryId,
    },

    /// A memory id given for a new memory is already taken.
    #[error("memory id {id} is already in use")]
    Conflict {
        /// The id that was offered.
        id: MemoryId,
    },

    /// A backend returned data that belongs to another scope than the one asked for.
    ///
    /// Backends check their own results before returning them; this error means a bug in a
    /// backend was caught before one scope's memories could reach another's caller.
    #[error("{backend} returned a memory of another scope ({found}) for a request in {requested}")]
    ScopeViolation {
        /// The backend at fault.
        backend: String,
        /// The scope key the caller asked for.
        requested: String,
        /// The scope key of the memory that would have leaked.
        found: String,
    },

    /// The caller passed a value that is not acceptable.
    #[error("invalid {field}: {problem}")]
    InvalidInput {
        /// Which input was wrong (`content`, `limit`, `tag`, ...).
        field: &'static str,
        /// What was wrong with it and what was expected.
        problem: String,
    },

    /// An embedding provider failed (server down, model missing, malformed response, ...).
    ///
    /// Its text is the provider and `message`; the cause is the [`source`](std::error::Error::source),
    /// said once: print the whole chain with [`ErrorChain`].
    #[error("embedding provider {provider} failed{}", then(message))]
    Embedding {
        /// The provider's name.
        provider: String,
        /// What went wrong, for people.
        message: String,
        /// The underlying error, if any.
        #[source]
        source: Option<BoxError>,
    },

    /// The storage layer failed (I/O, SQL, a corrupt file, ...).
    ///
    /// A backend's own typed error (`SqliteError`, `PostgresError`) is the source, with an
    /// empty `message`, so its text is said once: `{e}` is `memory-sqlite failed`, and
    /// [`ErrorChain`] (or anyhow's `{:#}`) prints the rest of the chain.
    #[error("{backend} failed{}", then(message))]
    Backend {
        /// The backend's name.
        backend: String,
        /// What went wrong, for people, when the source does not say it (may be empty).
        message: String,
        /// The underlying error, if any: the backend's typed error, for callers that match
        /// on it (`downcast_ref`).
        #[source]
        source: Option<BoxError>,
    },
}

/// `": message"`, or nothing for an empty message (the source says it).
fn then(message: &str) -> String {
    if message.is_empty() {
        String::new()
    } else {
        format!(": {message}")
    }
}

impl MemoryError {
    /// The backend error for a store's own typed error: the typed error is the source and
    /// says what went wrong, once.
    pub fn from_backend(
        backend: impl Into<String>,
        error: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Self::Backend {
            backend: backend.into(),
            message: String::new(),
            source: Some(Box::new(error)),
        }
    }

    /// The backend's typed error, if this is a [`MemoryError::Backend`] holding one of type `E`.
    pub fn backend_error<E: std::error::Error + 'static>(&self) -> Option<&E> {
        match self {
            Self::Backend {
                source: Some(s), ..
            } => s.downcast_ref::<E>(),
            _ => None,
        }
    }

    /// Whether this refuses the input as given (invalid content, a vector of another
    /// length or space, a taken id), rather than reporting the store failing: the same
    /// input would be refused again, and other input may still succeed.
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            Self::InvalidInput { .. }
                | Self::DimensionMismatch { .. }
                | Self::SpaceMismatch { .. }
                | Self::Conflict { .. }
        )
    }

    /// Shorthand for [`MemoryError::InvalidInput`].
    pub fn invalid(field: &'static str, problem: impl Into<String>) -> Self {
        Self::InvalidInput {
            field,
            problem: problem.into(),
        }
    }

    /// Shorthand for [`MemoryError::Backend`] with a source error.
    pub fn backend(
        backend: impl Into<String>,
        message: impl Into<String>,
        source: impl Into<BoxError>,
    ) -> Self {
        Self::Backend {
            backend: backend.into(),
            message: message.into(),
            source: Some(source.into()),
        }
    }

    /// Shorthand for [`MemoryError::Embedding`] without a source error.
    pub fn embedding(provider: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Embedding {
            provider: provider.into(),
            message: message.into(),
            source: None,
        }
    }

    /// Whether this error says the caller asked for an unadvertised capability.
    pub fn is_unsupported(&self) -> bool {
        matches!(self, Self::Unsupported { .. })
    }
}

/// An error and its sources, joined by `": "`, each said once: what a person should read.
///
/// Every error in the workspace says only its own part in `Display` and keeps its cause as
/// the `source`, so `{e}` alone may be short (`memory-sqlite failed`); print this instead
/// wherever an error reaches a user, a report or a tool result. A part that is empty, or
/// that the part before it already says (a client library's wrapper that repeats its
/// source), is left out.
#[derive(Debug, Clone, Copy)]
pub struct ErrorChain<'a>(pub &'a (dyn std::error::Error + 'static));

impl<'a> ErrorChain<'a> {
    /// The parts as printed, outermost first: each error's own text, without empty parts
    /// and parts the one before already says.
    pub fn parts(self) -> impl Iterator<Item = String> + 'a {
        let mut last = String::new();
        std::iter::successors(Some(self.0), |e| e.source()).filter_map(move |e| {
            let text = e.to_string();
            if text.is_empty() || last.contains(&text) {
                return None;
            }
            last.clone_from(&text);
            Some(text)
        })
    }
}

impl std::fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, part) in self.parts().enumerate() {
            if i > 0 {
                f.write_str(": ")?;
            }
            f.write_str(&part)?;
        }
        Ok(())
    }
}

/// Whether no error in the chain repeats its source's text: the rule [`ErrorChain`] relies on.
/// Returns the first offending pair (outer text, inner text) if one does.
pub fn repeated_cause(e: &(dyn std::error::Error + 'static)) -> Option<(String, String)> {
    let mut outer = e;
    while let Some(inner) = outer.source() {
        let (o, i) = (outer.to_string(), inner.to_string());
        if !i.is_empty() && o.contains(&i) {
            return Some((o, i));
        }
        outer = inner;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_backend_error_says_its_cause_once() {
        let io = std::io::Error::other("disk on fire");
        let e = MemoryError::backend("memory-x", "write the log", io);
        assert_eq!(
            ErrorChain(&e).to_string(),
            "memory-x failed: write the log: disk on fire"
        );
        assert_eq!(repeated_cause(&e), None);

        #[derive(Debug, thiserror::Error)]
        #[error("store /tmp/a is corrupt")]
        struct Typed(#[source] std::io::Error);
        let e = MemoryError::from_backend("memory-x", Typed(std::io::Error::other("bad page")));
        assert_eq!(e.to_string(), "memory-x failed");
        assert_eq!(
            ErrorChain(&e).to_string(),
            "memory-x failed: store /tmp/a is corrupt: bad page"
        );
        assert!(e.backend_error::<Typed>().is_some());
        assert!(e.backend_error::<std::io::Error>().is_none());
        assert_eq!(repeated_cause(&e), None);
    }

    #[test]
    fn a_cause_said_twice_is_found() {
        let io = std::io::Error::other("disk on fire");
        let e = MemoryError::backend("memory-x", "disk on fire", io);
        assert_eq!(
            repeated_cause(&e),
            Some((
                "memory-x failed: disk on fire".into(),
                "disk on fire".into()
            ))
        );
        // A wrapper that repeats its source (a client library's) is printed once.
        assert_eq!(ErrorChain(&e).to_string(), "memory-x failed: disk on fire");
    }
}
