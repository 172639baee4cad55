//! The Prompt IR: labeled sections with provenance, token budgets, compose and compress.
//!
//! A context window is a fresh, budgeted prior built for each inference, not an append-only
//! log. This crate holds that prompt as data: every [`Section`] is labeled, says where it
//! came from ([`SectionSource`]), and carries what an optimizer needs (priority, relevance,
//! recency, smallest useful size, composition mode, content hash, cached token count).
//!
//! # Code map
//!
//! - `section`: [`Section`] and its parts ([`Priority`], [`Stability`], [`CompositionMode`],
//!   [`SectionSource`], [`ContentHash`], [`Embedding`], [`TokenCount`]).
//! - `ir`: [`PromptIR`] (sections, [`ToolDef`]s, [`Observation`], [`PromptMeta`]).
//! - `budget`: [`TokenBudget`], [`BudgetAllocation`], [`FixedRatios`], [`ContextStrategy`],
//!   [`RecencyDecay`], [`ContextRequest`].
//! - `encoding`: [`Encoding`], the BPE a model uses ([`Encoding::for_model`]).
//! - `tokenizer`: the object-safe [`Tokenizer`] trait, [`TiktokenTokenizer`] (o200k or
//!   cl100k) and [`WhitespaceTokenizer`].
//! - `words`: word statistics of a text ([`Information`], [`word_hashes`]).
//! - `compose`: [`compose()`], whose module docs define the semantics of each mode.
//! - `compress`: [`compress()`], whose module docs define ranking, shrinking and dropping,
//!   and its [`CompressionReport`].
//! - `impact`: [`estimate_impact`] and [`equivalent`].
//! - `excerpt`: [`Passage`]s of a section, and the excerpt of its most relevant ones that
//!   compression keeps instead of a head (gaps marked [`ELISION`]).
//!
//! # Architecture invariants
//!
//! - No I/O: no files, network or clock. "Now" is the IR's timestamp; embeddings come from
//!   the caller ([`Embedder`]).
//! - Deterministic: the same inputs give byte-identical outputs (no hash-map order, floats
//!   rounded where they are reported).
//! - Invalid values cannot be built: budgets are never zero, ratios and relevance are in
//!   `0..=1`, section ids are unique within an IR; deserialization checks the same.
//!
//! ```
//! use prompt_ir::{PromptIR, Section, SectionSource, TokenBudget, WhitespaceTokenizer, compress};
//! # fn main() -> prompt_ir::Result<()> {
//! let now = chrono::DateTime::from_timestamp(1_700_000_000, 0).unwrap_or_default();
//! let ir = PromptIR::new(now)
//!     .with_section(Section::new("base", "Base instructions",
//!         SectionSource::Static("base".into()), "You are Ava. Be brief.")?)?
//!     .with_section(Section::new("k1", "Knowledge", SectionSource::Knowledge,
//!         "Alice's cat is called Miso. She adopted him in 2021.")?.with_min_tokens(3))?;
//! let out = compress(&TokenBudget::new(12)?, &ir, &WhitespaceTokenizer);
//! assert!(out.report.fits());
//! assert_eq!(out.ir.section("k1").map(|s| s.content()), Some("Alice's cat is called Miso."));
//! # Ok(()) }
//! ```

mod budget;
mod compose;
mod compress;
mod encoding;
mod error;
mod excerpt;
mod impact;
mod ir;
mod section;
mod tokenizer;
mod truncate;
mod unit;
mod words;

pub use budget::{
    BudgetAllocation, ContextRequest, ContextStrategy, FixedRatios, LONG_ITEM_TOKENS, RecencyDecay,
    TokenBudget,
};
pub use compose::{Composed, Conflict, compose};
pub use compress::{
    Action, Compressed, CompressionReport, ItemOutcome, Pool, PoolReport, Reason, compress,
};
pub use encoding::Encoding;
pub use error::{Error, Result};
pub use excerpt::{ELISION, Passage};
pub use impact::{Embedder, Impact, equivalent, estimate_impact};
pub use ir::{Observation, PromptIR, PromptMeta, ToolDef};
pub use section::{
    CompositionMode, ContentHash, Embedding, Priority, Section, SectionSource, Stability,
    TokenCount,
};
pub use tokenizer::{CountCache, TiktokenTokenizer, Tokenizer, WhitespaceTokenizer};
pub use unit::{Ratio, Relevance};
pub use words::{Information, word_hashes};
