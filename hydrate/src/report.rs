//! The explain report: what happened to every section, tool and source of one prompt, and
//! every way the request was served less well than asked (the [`Degradation`]s, which
//! sources record and so are defined with them, in `source`). It reads back from its JSON,
//! so an app can keep it and explain the prompt later.

use memory_core::MemoryId;
use prompt_ir::{Action, Priority, Stability};
use serde::{Deserialize, Serialize};

use crate::cache::CacheExplain;
use crate::source::{Degradation, DegradationKind, SourceKind, SourceParams};

/// How one kind of context was served.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SourceStatus {
    /// The source answered in time.
    Complete,
    /// The source missed its deadline or failed midway; what it found before is used.
    Partial,
    /// The source failed before finding anything.
    Failed,
    /// The strategy turned this kind off (a zero window or limit, knowledge excluded).
    Skipped,
    /// Nobody supplies this kind.
    Missing,
}

/// What one source did for a request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SourceReport {
    /// The kind of context.
    pub kind: SourceKind,
    /// The source's name, if one served the kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// The provider that built the source; `None` for an explicit source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// How it went.
    pub status: SourceStatus,
    /// How the source searched (`hybrid`, `keyword`, `recent`, ...), if it said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub search: Option<String>,
    /// The parameters it was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<SourceParams>,
    /// Items the source returned.
    pub returned: usize,
    /// Items that repeated one of this source's own, or that an earlier kind found too
    /// (those are merged into its section, with the best similarity of the two).
    pub duplicates: usize,
    /// Items left out by the threshold, `max_items` or `max_tokens`.
    pub over_limits: usize,
    /// Items left out as near-duplicates of a better candidate (see
    /// [`crate::HydrationConfig::near_duplicate`]).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub near_duplicates: usize,
    /// Items that became sections.
    pub kept: usize,
    /// Tokens of those sections, before compression.
    pub tokens: u32,
    /// Wall-clock time of the fetch, in milliseconds.
    pub elapsed_ms: f64,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl SourceReport {
    pub(crate) fn new(kind: SourceKind, status: SourceStatus) -> Self {
        Self {
            kind,
            source: None,
            provider: None,
            status,
            search: None,
            params: None,
            returned: 0,
            duplicates: 0,
            over_limits: 0,
            near_duplicates: 0,
            kept: 0,
            tokens: 0,
            elapsed_ms: 0.0,
        }
    }
}

/// The parts of a retrieved item's score, rounded to 4 decimals.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ScoreExplain {
    /// The combined score (see [`crate::scoring`]).
    pub score: f64,
    /// Similarity to the observation, if a search found the item.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub similarity: Option<f64>,
    /// Cosine similarity part, from the backend.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub semantic: Option<f64>,
    /// Normalised keyword part, from the backend.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keyword: Option<f64>,
    /// Recency factor (1 for pinned memories).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recency: Option<f64>,
    /// Importance factor.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub importance: Option<f64>,
    /// Access-frequency factor.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub access: Option<f64>,
    /// The question's cues it matched, which lifted its relevance (`time, name Oscar`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cues: Option<String>,
    /// The similarity its search gave it, when the talk around it lifted that to
    /// `similarity` ([`NEARBY_LIFT`](crate::NEARBY_LIFT)).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lifted_from: Option<f64>,
}

/// What happened to one section.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SectionExplain {
    /// The section id (`system`, `state:time`, `knowledge:<memory id>`, ...).
    pub id: String,
    /// Its label.
    pub label: String,
    /// The block it renders into (`system`, `state`, or a source kind).
    pub block: String,
    /// How often it changes from one prompt of the conversation to the next: what is kept
    /// from prompt to prompt comes first ([`Stability`]).
    #[serde(default = "volatile")]
    pub stability: Stability,
    /// The memory it shows, if one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_id: Option<MemoryId>,
    /// Its priority.
    pub priority: Priority,
    /// The value compression ranked it by (higher is kept longer).
    pub value: f64,
    /// Kept, truncated or dropped, with tokens.
    #[serde(flatten)]
    pub action: Action,
    /// Why.
    pub reason: String,
    /// How a retrieved item scored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scores: Option<ScoreExplain>,
    /// Every kind of source that found the item (one section however many did).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub found_by: Vec<SourceKind>,
    /// When the prompt holds an excerpt of a long memory: the character ranges (start, end)
    /// of the memory's text it keeps, in order; the gaps are marked `[…]` in the prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub excerpt: Option<Vec<(usize, usize)>>,
}

/// What happened to one tool definition.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolExplain {
    /// The tool's name.
    pub name: String,
    /// Its priority.
    pub priority: Priority,
    /// Kept or dropped, with tokens.
    #[serde(flatten)]
    pub action: Action,
    /// Why.
    pub reason: String,
}

/// How the budget was split.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BudgetExplain {
    /// The request's budget.
    pub total: u32,
    /// How it was split among the prompt's parts (`relevance`, `information` or
    /// `fixed:SYSTEM,CONTEXT,OBSERVATION`).
    pub allocation: String,
    /// Held back as headroom (the budget's reserve).
    pub reserved: u32,
    /// `total - reserved`.
    pub available: u32,
    /// Tokens of the text around sections: block headers, separators, per-message overhead.
    pub framing: u32,
    /// What compression was given: `available - framing` (at least 1).
    pub for_sections: u32,
}

/// Everything compile did, and why. Serializable; ids and timings are the only values that
/// change from run to run for the same inputs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExplainReport {
    /// Hash of the request (scope, observation, goal, strategy, budget, state, reach).
    pub request_hash: String,
    /// Hash of the stable prefix (first message and tool definitions), for prompt caching.
    pub prefix_hash: String,
    /// The tokenizer that counted.
    pub tokenizer: String,
    /// The budget.
    pub budget: BudgetExplain,
    /// What was read from the question beyond its meaning: the time it asks about, quoted
    /// phrases, names (see [`crate::QueryCues`]).
    #[serde(default, skip_serializing_if = "no_cues")]
    pub cues: crate::QueryCues,
    /// Tokens of sections, tools and observation before compression.
    pub tokens_before: u32,
    /// The same after compression.
    pub tokens_after: u32,
    /// `tokens_after` plus the framing of the blocks actually rendered: what the messages
    /// and tools should come to.
    pub estimated_prompt_tokens: u32,
    /// Whether the prompt fits the available budget.
    pub fits: bool,
    /// Every section, in IR order.
    pub sections: Vec<SectionExplain>,
    /// Every tool, in IR order.
    pub tools: Vec<ToolExplain>,
    /// Every wanted kind of context.
    pub sources: Vec<SourceReport>,
    /// Everything that was served less well than asked.
    pub degradations: Vec<Degradation>,
    /// What a provider's prompt cache can make of it: where its stable part ends, and what
    /// it shares with the previous prompt of the conversation.
    #[serde(default)]
    pub cache: CacheExplain,
}

fn no_cues(cues: &crate::QueryCues) -> bool {
    cues.is_empty() && !cues.small_talk
}

fn volatile() -> Stability {
    Stability::Volatile
}

impl ExplainReport {
    /// The explanation of the section with `id`.
    pub fn section(&self, id: &str) -> Option<&SectionExplain> {
        self.sections.iter().find(|s| s.id == id)
    }

    /// The report of the source of `kind`.
    pub fn source(&self, kind: SourceKind) -> Option<&SourceReport> {
        self.sources.iter().find(|s| s.kind == kind)
    }

    /// Whether a degradation of `kind` was recorded.
    pub fn degraded(&self, kind: DegradationKind) -> bool {
        self.degradations.iter().any(|d| d.kind == kind)
    }
}
