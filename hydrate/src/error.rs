//! The crate's one error type: everything hydrate, compile and the agent ops can fail with.

use memory_core::{BoxError, MemoryError};

/// Everything that can go wrong in `hydrate`.
///
/// A failing or slow *context source* is not an error: it becomes a degradation in the
/// explain report and the prompt is built without it. These variants are for what the
/// caller must handle.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A memory backend or embedding provider failed or refused the request (an
    /// unadvertised capability, a foreign id, bad input). Transparent: its text and source
    /// are the memory error's own, said once (print the chain with [`memory_core::ErrorChain`]).
    #[error(transparent)]
    Memory(#[from] MemoryError),

    /// The prompt could not be built: a duplicate section id or tool name, a tool schema
    /// that is not an object, a zero budget. Transparent, like [`Error::Memory`].
    #[error(transparent)]
    Prompt(#[from] prompt_ir::Error),

    /// A provider option has a value of the wrong type or outside its range.
    #[error("provider `{provider}` option `{key}` is {found}, expected {expected}")]
    BadOption {
        /// The provider whose option it is.
        provider: String,
        /// The option's key.
        key: String,
        /// The value that was given, as JSON.
        found: String,
        /// What is accepted.
        expected: &'static str,
    },

    /// A value handed to this crate is not acceptable.
    #[error("invalid {field}: {problem}")]
    InvalidInput {
        /// Which input was wrong (`scoring weights`, `max steps`, ...).
        field: &'static str,
        /// What was wrong with it and what was expected.
        problem: String,
    },

    /// A context source failed for a reason of its own (not a memory backend error). The
    /// text is the source and `message`; the cause, if any, is the `source`, not repeated.
    #[error("source `{name}` failed: {message}")]
    Source {
        /// The source's name.
        name: String,
        /// What went wrong, for people.
        message: String,
        /// The underlying error, if any.
        #[source]
        source: Option<BoxError>,
    },

    /// The chat model failed (server down, bad response, refused request).
    #[error("chat model `{model}` failed{}", then(message))]
    Model {
        /// The model's name.
        model: String,
        /// What went wrong, for people; empty when the source says it all.
        message: String,
        /// The underlying error, if any.
        #[source]
        source: Option<BoxError>,
    },

    /// A document could not be indexed or removed: it is missing, not a text or Markdown
    /// file, too large, binary, not UTF-8, empty, or not indexed.
    #[error("{path}: {problem}")]
    Document {
        /// The file as it was named.
        path: String,
        /// What was wrong with it and what was expected.
        problem: String,
    },

    /// A part of this crate that the build leaves out (a cargo feature that is off).
    #[error("{what} is not in this build; rebuild with the cargo feature `{feature}`")]
    Unavailable {
        /// What was asked for.
        what: &'static str,
        /// The cargo feature that builds it.
        feature: &'static str,
    },

    /// The model was still calling tools when the step limit was reached.
    #[error(
        "chat model `{model}` was still calling tools after {steps} steps; raise the step \
         limit or check the tool results it gets"
    )]
    MaxSteps {
        /// The model's name.
        model: String,
        /// The limit that was reached.
        steps: usize,
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

impl Error {
    /// Shorthand for [`Error::Model`] with an underlying error, for `ChatModel` implementations
    /// (`message` may be empty when the error says what went wrong).
    pub fn model(
        model: impl Into<String>,
        message: impl Into<String>,
        source: impl Into<BoxError>,
    ) -> Self {
        Self::Model {
            model: model.into(),
            message: message.into(),
            source: Some(source.into()),
        }
    }

    /// Shorthand for [`Error::Source`] with an underlying error, which `message` does not
    /// repeat.
    pub fn source_failed_by(
        name: impl Into<String>,
        message: impl Into<String>,
        source: impl Into<BoxError>,
    ) -> Self {
        Self::Source {
            name: name.into(),
            message: message.into(),
            source: Some(source.into()),
        }
    }

    /// Shorthand for [`Error::Source`] without an underlying error.
    pub fn source_failed(name: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Source {
            name: name.into(),
            message: message.into(),
            source: None,
        }
    }

    /// Shorthand for [`Error::InvalidInput`].
    pub fn invalid(field: &'static str, problem: impl Into<String>) -> Self {
        Self::InvalidInput {
            field,
            problem: problem.into(),
        }
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
