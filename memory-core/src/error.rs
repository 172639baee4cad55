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
    #[error("embedding provider {provider} failed: {message}")]
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
    #[error("{backend} failed: {message}")]
    Backend {
        /// The backend's name.
        backend: String,
        /// What went wrong, for people.
        message: String,
        /// The underlying error, if any.
        #[source]
        source: Option<BoxError>,
    },
}

impl MemoryError {
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
