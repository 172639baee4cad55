//! The crate's one error type: every way a value handed to `prompt-ir` can be rejected.

use crate::encoding::Encoding;

/// Everything that can go wrong in `prompt-ir`.
///
/// Each message names what was wrong and what was expected, so it can be shown to whoever
/// wrote the offending configuration.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A number that must lie in a range (a ratio, a relevance, a threshold) did not,
    /// or was not a number at all (NaN, infinity).
    #[error("{what} was {value}, expected {expected}")]
    OutOfRange {
        /// Which value was wrong, e.g. "reserve ratio".
        what: &'static str,
        /// The value that was given.
        value: f64,
        /// The range that is accepted.
        expected: &'static str,
    },

    /// A budget allocation written as text (a command-line flag, a setting) was not one
    /// of the accepted forms.
    #[error(
        "budget allocation `{given}` is not understood, expected `relevance`, `information` \
         or `fixed:SYSTEM,CONTEXT,OBSERVATION` (three shares, e.g. `fixed:0.3,0.6,0.1`)"
    )]
    UnknownAllocation {
        /// The text that was given.
        given: String,
    },

    /// A token budget of zero tokens: nothing could ever be sent.
    #[error("token budget is 0 tokens, expected at least 1")]
    ZeroBudget,

    /// Fixed allocation ratios add up to more than the whole budget.
    #[error(
        "budget allocation ratios add up to {sum} (system {system} + context {context} + \
         observation {observation}), expected at most 1"
    )]
    RatiosOverOne {
        /// Share of the system pool.
        system: f64,
        /// Share of the context pool.
        context: f64,
        /// Share of the observation pool.
        observation: f64,
        /// Their sum.
        sum: f64,
    },

    /// An identifier (section id, tool name) was empty.
    #[error("{what} is empty, expected a non-empty string")]
    EmptyId {
        /// Which identifier, e.g. "section id".
        what: &'static str,
    },

    /// A section's passages were out of order, overlapping, empty, outside its content, off
    /// a character boundary, or scored with a number that is not finite.
    #[error(
        "section `{id}` passage {index} spans bytes {start}..{end} of a {len}-byte content, \
         expected non-empty, ordered, non-overlapping ranges on character boundaries with \
         finite scores"
    )]
    InvalidPassage {
        /// The section's id.
        id: String,
        /// Which passage (0-based).
        index: usize,
        /// Its start.
        start: usize,
        /// Its end.
        end: usize,
        /// The content's length in bytes.
        len: usize,
    },

    /// Two sections of one prompt IR share an id; ids name sections in compression reports,
    /// so they must be unique.
    #[error("section id `{id}` appears twice in one prompt IR, expected unique section ids")]
    DuplicateSectionId {
        /// The repeated id.
        id: String,
    },

    /// Two tools of one prompt IR share a name.
    #[error("tool `{name}` appears twice in one prompt IR, expected unique tool names")]
    DuplicateToolName {
        /// The repeated name.
        name: String,
    },

    /// A tool's parameter schema was not a JSON object.
    #[error("tool `{name}` has a parameter schema that is a JSON {found}, expected a JSON object")]
    ToolSchemaNotObject {
        /// The tool's name.
        name: String,
        /// The JSON type that was given instead ("array", "string", ...).
        found: &'static str,
    },

    /// A serialized section's content hash does not match its content: the content was
    /// edited by hand, or the hash belongs to another section.
    #[error("section `{id}` carries content hash {stored}, but its content hashes to {actual}")]
    HashMismatch {
        /// The section's id.
        id: String,
        /// The hash that was stored.
        stored: String,
        /// The hash of the content as it is.
        actual: String,
    },

    /// A token encoding name that this crate does not know.
    #[error("unknown token encoding `{name}`, expected `o200k_base` or `cl100k_base`")]
    UnknownEncoding {
        /// The name that was given.
        name: String,
    },

    /// The BPE tables bundled with `tiktoken-rs` could not be loaded. The tables are built
    /// once per process and shared, so the underlying error is kept as its message.
    #[error("could not load the {encoding} token encoding: {message}")]
    TokenizerLoad {
        /// The encoding that failed to load.
        encoding: Encoding,
        /// What `tiktoken-rs` reported.
        message: String,
    },

    /// An embedding with no dimensions.
    #[error("embedding is empty, expected at least one dimension")]
    EmptyEmbedding,

    /// An embedding with a NaN or infinite component.
    #[error("embedding component {index} is {value}, expected a finite number")]
    NonFiniteEmbedding {
        /// Index of the first bad component.
        index: usize,
        /// Its value.
        value: f32,
    },

    /// Two embeddings that were compared come from different embedding spaces.
    #[error(
        "embedding of `{left_id}` has {left} dimensions and embedding of `{right_id}` has \
         {right}, expected both from the same embedding model"
    )]
    EmbeddingDimensions {
        /// Id of the first section.
        left_id: String,
        /// Its dimensions.
        left: usize,
        /// Id of the second section.
        right_id: String,
        /// Its dimensions.
        right: usize,
    },

    /// A section had no embedding and the embedding function supplied none either.
    #[error(
        "section `{id}` has no embedding and the embedding function returned none, expected \
         one of the two to provide it"
    )]
    MissingEmbedding {
        /// The section's id.
        id: String,
    },
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
