//! What hydration is given: [`HydrationConfig`] (everything that does not change from request
//! to request, with its builders) and [`HydrateInput`] (one request: scope, who it may read,
//! observation, state, "now").

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use memory_core::{Embedding, Scope, Timestamp};
use prompt_ir::{BudgetAllocation, ContentHash, ContextRequest, Tokenizer, ToolDef};
use serde::Serialize;

use crate::cache::PreviousPrompt;
use crate::chat::ToolHandler;
use crate::cues::CueWeights;
use crate::error::{Error, Result};
use crate::provider::{NoopReranker, Reranker, SourceProvider};
use crate::reach::{MemoryTuning, Reach};
use crate::render::DEFAULT_CONSTRAINTS;
use crate::scoring::ScoringWeights;
use crate::source::{ContextSource, SourceKind};
use crate::texts::TextCache;

/// The default [`HydrationConfig::conversation_share`]: the conversation may take up to half
/// of what a prompt's fixed part leaves, and holds a quarter when it starts again. Measured in BENCHMARKS.md
/// ("Prompts a provider can cache").
pub const CONVERSATION_SHARE: f64 = 0.5;

/// Everything about hydration that does not change from request to request: the static
/// prompt, tools, which kinds of context to fetch and from whom, limits, deadlines, scoring.
#[derive(Clone)]
pub struct HydrationConfig {
    /// The system prompt (the start of the stable prefix).
    pub system_prompt: String,
    /// Rules about recalled data, after the system prompt in the stable prefix; empty to
    /// leave out. Defaults to [`DEFAULT_CONSTRAINTS`].
    pub constraints: String,
    /// The application's tools. Give them [`Priority::Critical`](prompt_ir::Priority::Critical) to keep them (and so the
    /// stable prefix) even when the budget is tight; High tools may be dropped.
    pub tools: Vec<ToolDef>,
    /// Whether to offer the memory tools (`remember`, `recall`, `forget`; see
    /// [`crate::Ops`]) after the application's tools. Default on.
    pub memory_tools: bool,
    /// What runs each application tool the model calls, by tool name (see
    /// [`HydrationConfig::with_app_tool`]); a tool without one is only offered.
    pub tool_handlers: BTreeMap<String, Arc<dyn ToolHandler>>,
    /// Longest an application tool call may run. Default 30 s.
    pub tool_timeout: Duration,
    /// The kinds of context wanted. Default: temporal, knowledge, semantic.
    pub kinds: BTreeSet<SourceKind>,
    /// Providers, in precedence order (earlier ones win); every family comes through one.
    pub providers: Vec<SourceProvider>,
    /// How the memory source searches: its mode, hybrid weights, neighbours and the lift
    /// by the talk around a hit.
    pub memory: MemoryTuning,
    /// Reranks each source's scored items (not the recent conversation). Default: no-op.
    pub reranker: Arc<dyn Reranker>,
    /// How items are scored.
    pub scoring: ScoringWeights,
    /// Deadline of each source unless [`HydrationConfig::deadlines`] names its kind.
    /// Default 2 s.
    pub deadline: Duration,
    /// Per-kind deadlines.
    pub deadlines: BTreeMap<SourceKind, Duration>,
    /// At most this many knowledge items. Default 10.
    pub knowledge_limit: usize,
    /// At most this many items from graph, vector and web sources. Default 5.
    pub extra_limit: usize,
    /// Each source may bring at most this share of the available budget in candidates
    /// (before compression chooses among all of them). Default 1: no cap, compression
    /// decides by value across sources.
    pub source_token_share: f64,
    /// The newest this many messages of the conversation are always candidates of High
    /// priority, even when they do not fit in the conversation's room. Default 2: the last
    /// exchange.
    pub keep_recent: usize,
    /// The share of the budget the conversation may take, from 0 to 1, of what the system
    /// prompt, tools, state and message leave: the newest messages, oldest first, in a block
    /// that the next prompt extends. Without a previous prompt it holds the newest
    /// [`Self::keep_recent`] messages (within half the room); then it starts where the previous prompt's did
    /// ([`HydrateInput::after`]) while it fits this room, and when it outgrows it, starts
    /// again holding half of it, so most prompts extend the one before instead of sliding.
    /// Older messages compete with what is recalled. 0: no conversation block (every message
    /// competes on relevance). Default [`CONVERSATION_SHARE`].
    pub conversation_share: f64,
    /// Least relevance, from 0 to 1, for what is recalled for one message (related messages,
    /// graph, documents, web, facts found by a search) to enter the prompt at all: below it
    /// a candidate is unlikely to be worth its tokens. The request's strategy may ask more
    /// ([`prompt_ir::ContextStrategy::relevance_floor`]). Default 0.
    pub relevance_floor: f64,
    /// Roughly how many tokens one retrieved item takes: search limits grow with the
    /// budget to `available / item_tokens` candidates (never below the strategy's and the
    /// config's own limits), so a larger budget is filled with more evidence rather than
    /// left unused. Default 25; 0 keeps the fixed limits.
    pub item_tokens: u32,
    /// The relevance of an item no search matched (an older message of the window, a fact
    /// listed because it is recent), from 0 to 1: where it ranks against search hits,
    /// whose relevance is their similarity to the observation. Never more than the weakest
    /// hit of the search that could have found it: that search saw the item and ranked it
    /// lower. Default 0.35.
    pub unmatched_relevance: f64,
    /// How every prompt's budget is split among its sections, over the request's own
    /// allocation (the operator's choice, e.g. `ava --allocation`). Default `None`: each
    /// request's budget decides ([`BudgetAllocation::RelevanceWeighted`] unless it says
    /// otherwise).
    pub allocation: Option<BudgetAllocation>,
    /// How much a candidate that matches the question's cues (its time, quoted phrases,
    /// names; see [`QueryCues`](crate::QueryCues)) gains in relevance. [`CueWeights::OFF`] to rank on
    /// similarity alone.
    pub cue_weights: CueWeights,
    /// Near-duplicates are collapsed: a candidate whose distinct words overlap a better
    /// one's by at least this share (Jaccard, 0 to 1) is left out, so the prompt is not
    /// filled with one fact said several times. The newest messages of the conversation
    /// are never left out. Default `Some(0.8)`; `None` keeps every candidate.
    pub near_duplicate: Option<f64>,
    /// A long memory that does not fit whole (or is worth less than its whole cost) may
    /// shrink to an excerpt: its passages that best answer the message, in order, gaps
    /// marked `[…]` (see [`passages`](crate::passages)). Off, it is cut at its head, as any
    /// long section. Default on.
    pub excerpts: bool,
    /// Counts tokens (of sources' items, and when compiling).
    pub tokenizer: Arc<dyn Tokenizer>,
    /// Put the rendered prompt in trace events (off by default: prompts hold personal data).
    pub trace_prompt_text: bool,
    /// What hydrate has read from memories' texts (words, passages), kept across prompts;
    /// clones of the config share it. Default: [`TextCache::default`].
    pub texts: Arc<TextCache>,
}

impl HydrationConfig {
    /// A config with `system_prompt`, counting with `tokenizer`, and the defaults above; add
    /// providers or sources to fetch context.
    pub fn new(system_prompt: impl Into<String>, tokenizer: Arc<dyn Tokenizer>) -> Self {
        Self {
            system_prompt: system_prompt.into(),
            constraints: DEFAULT_CONSTRAINTS.to_owned(),
            tools: Vec::new(),
            memory_tools: true,
            tool_handlers: BTreeMap::new(),
            tool_timeout: Duration::from_secs(30),
            kinds: SourceKind::MEMORY.into_iter().collect(),
            providers: Vec::new(),
            memory: MemoryTuning::default(),
            reranker: Arc::new(NoopReranker),
            scoring: ScoringWeights::default(),
            deadline: Duration::from_secs(2),
            deadlines: BTreeMap::new(),
            knowledge_limit: 10,
            extra_limit: 5,
            source_token_share: 1.0,
            keep_recent: 2,
            conversation_share: CONVERSATION_SHARE,
            relevance_floor: 0.0,
            item_tokens: 25,
            unmatched_relevance: 0.35,
            allocation: None,
            cue_weights: CueWeights::default(),
            near_duplicate: Some(0.8),
            excerpts: true,
            tokenizer,
            trace_prompt_text: false,
            texts: Arc::new(TextCache::default()),
        }
    }

    /// Adds a provider after the existing ones.
    pub fn with_provider(mut self, provider: SourceProvider) -> Self {
        self.providers.push(provider);
        self
    }

    /// Sets the source of `kind` explicitly (and wants the kind): it is served by a
    /// provider ([`SourceProvider::serving`]) put before every other, so it wins, in place
    /// of a source set this way before.
    pub fn with_source(mut self, kind: SourceKind, source: Arc<dyn ContextSource>) -> Self {
        self.kinds.insert(kind);
        self.providers
            .retain(|p| !(p.is_serving() && p.supports(kind)));
        self.providers
            .insert(0, SourceProvider::serving(kind, source));
        self
    }

    /// Wants another kind of context.
    pub fn with_kind(mut self, kind: SourceKind) -> Self {
        self.kinds.insert(kind);
        self
    }

    /// Adds an application tool (offered to the model; see [`Self::with_app_tool`] to run
    /// its calls too).
    pub fn with_tool(mut self, tool: ToolDef) -> Self {
        self.tools.push(tool);
        self
    }

    /// Adds an application tool and what runs it: [`crate::Ops::infer`] runs the model's
    /// calls to it with `handler` and gives the model the result. A second tool of the same
    /// name is refused (a clash with a memory tool is refused when compiling).
    pub fn with_app_tool(mut self, tool: ToolDef, handler: Arc<dyn ToolHandler>) -> Result<Self> {
        let name = tool.name().to_owned();
        if self.tools.iter().any(|t| t.name() == name) {
            return Err(Error::invalid(
                "application tool",
                format!("`{name}` is there already; tool names must be unique"),
            ));
        }
        self.tools.push(tool);
        self.tool_handlers.insert(name, handler);
        Ok(self)
    }

    /// Sets the default per-source deadline.
    pub fn with_deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    /// Sets the deadline of one kind.
    pub fn with_deadline_for(mut self, kind: SourceKind, deadline: Duration) -> Self {
        self.deadlines.insert(kind, deadline);
        self
    }

    /// The deadline of `kind`.
    pub fn deadline_for(&self, kind: SourceKind) -> Duration {
        self.deadlines.get(&kind).copied().unwrap_or(self.deadline)
    }

    /// The tokens the conversation block may take when `available` tokens are left for what
    /// is remembered ([`Self::conversation_share`] of them).
    pub fn conversation_room(&self, available: u32) -> u32 {
        (f64::from(available) * self.conversation_share.clamp(0.0, 1.0)) as u32
    }
}

/// The fewest tokens a line of the conversation takes (`- 09:00 user: ok`): the temporal
/// source fetches as many messages as the conversation's room could hold of such lines.
pub(crate) const SHORTEST_TURN_TOKENS: u32 = 8;

impl fmt::Debug for HydrationConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HydrationConfig")
            .field("system_prompt_bytes", &self.system_prompt.len())
            .field(
                "tools",
                &self.tools.iter().map(ToolDef::name).collect::<Vec<_>>(),
            )
            .field("memory_tools", &self.memory_tools)
            .field(
                "tool_handlers",
                &self.tool_handlers.keys().collect::<Vec<_>>(),
            )
            .field("tool_timeout", &self.tool_timeout)
            .field("kinds", &self.kinds)
            .field("providers", &self.providers)
            .field("memory", &self.memory)
            .field("reranker", &self.reranker)
            .field("scoring", &self.scoring)
            .field("deadline", &self.deadline)
            .field("deadlines", &self.deadlines)
            .field("knowledge_limit", &self.knowledge_limit)
            .field("extra_limit", &self.extra_limit)
            .field("source_token_share", &self.source_token_share)
            .field("keep_recent", &self.keep_recent)
            .field("conversation_share", &self.conversation_share)
            .field("relevance_floor", &self.relevance_floor)
            .field("item_tokens", &self.item_tokens)
            .field("unmatched_relevance", &self.unmatched_relevance)
            .field("allocation", &self.allocation)
            .field("cue_weights", &self.cue_weights)
            .field("near_duplicate", &self.near_duplicate)
            .field("excerpts", &self.excerpts)
            .field("tokenizer", &self.tokenizer.name())
            .field("trace_prompt_text", &self.trace_prompt_text)
            .field("texts", &self.texts)
            .finish()
    }
}

/// Current state the application knows, rendered as state sections after the stable prefix.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SessionState {
    /// The project or task being worked on.
    pub project: Option<String>,
    /// Who the user is (display name, preferences the app holds).
    pub user: Option<String>,
    /// Further state lines, by label.
    pub extra: BTreeMap<String, String>,
}

/// One request to hydrate: who for, what for, and when.
#[derive(Clone, Debug)]
pub struct HydrateInput {
    /// The scope whose memories may be used (knowledge may add its user-level scope).
    pub scope: Scope,
    /// The observation, goal, strategy and budget.
    pub request: ContextRequest,
    /// "Now": ages, validity and the time shown in the prompt are measured from it.
    pub now: Timestamp,
    /// State sections.
    pub state: SessionState,
    /// Whose memories beyond the scope this prompt may read: the privacy rule. Default
    /// [`Reach::Private`]; [`crate::Ops`] sets its own on every input it prepares.
    pub reach: Reach,
    /// Whether the searches count what they find as recalled (recall counts feed ranking).
    /// Default on; off for a prompt that only looks (a dry run, a replay, a read-only
    /// caller).
    pub record_access: bool,
    /// A precomputed vector of the observation, used instead of embedding it.
    pub query_vector: Option<Embedding>,
    /// The previous prompt of this conversation, if the caller kept it: the conversation
    /// block starts where its did while it fits, and the report counts the prefix the two
    /// share.
    pub previous: Option<PreviousPrompt>,
    /// Texts the caller's prompt already holds (an app's own history): a candidate whose
    /// text is one of them is left out, counted as a duplicate.
    pub present: Vec<String>,
}

impl HydrateInput {
    /// A request for `scope`, now, with no state or options.
    pub fn new(scope: Scope, request: ContextRequest) -> Self {
        Self {
            scope,
            request,
            now: Timestamp::now(),
            state: SessionState::default(),
            reach: Reach::Private,
            record_access: true,
            query_vector: None,
            previous: None,
            present: Vec::new(),
        }
    }

    /// The request that follows `previous`, the last prompt built in this conversation.
    pub fn after(mut self, previous: Option<PreviousPrompt>) -> Self {
        self.previous = previous;
        self
    }

    /// Leaves out candidates saying what `texts` already say (compared without the
    /// whitespace at either end).
    pub fn with_present(mut self, texts: Vec<String>) -> Self {
        self.present = texts;
        self
    }

    /// Sets "now".
    pub fn at(mut self, now: Timestamp) -> Self {
        self.now = now;
        self
    }

    /// Sets the state.
    pub fn with_state(mut self, state: SessionState) -> Self {
        self.state = state;
        self
    }

    /// Sets whose memories beyond the scope it may read.
    pub fn with_reach(mut self, reach: Reach) -> Self {
        self.reach = reach;
        self
    }

    /// Its searches count nothing as recalled.
    pub fn without_access_tracking(mut self) -> Self {
        self.record_access = false;
        self
    }

    /// Supplies a precomputed vector of the observation.
    pub fn with_query_vector(mut self, vector: Embedding) -> Self {
        self.query_vector = Some(vector);
        self
    }

    /// The request's hash: scope, observation, goal, strategy, budget, state and reach (not
    /// "now"), as canonical JSON hashed with the Prompt IR's content hash.
    pub fn request_hash(&self) -> String {
        let value = serde_json::json!({
            "scope": self.scope,
            "request": self.request,
            "state": self.state,
            "reach": self.reach,
            "query_vector": self.query_vector.as_ref().map(|v| v.space().to_string()),
        });
        ContentHash::of(&canonical_json(&value)).to_string()
    }
}

/// JSON text with object keys sorted at every level, whatever serde_json's `preserve_order`.
pub(crate) fn canonical_json(value: &serde_json::Value) -> String {
    fn sorted(value: &serde_json::Value) -> serde_json::Value {
        match value {
            serde_json::Value::Object(map) => {
                let mut entries: Vec<(&String, &serde_json::Value)> = map.iter().collect();
                entries.sort_by(|a, b| a.0.cmp(b.0));
                serde_json::Value::Object(
                    entries
                        .into_iter()
                        .map(|(k, v)| (k.clone(), sorted(v)))
                        .collect(),
                )
            }
            serde_json::Value::Array(items) => {
                serde_json::Value::Array(items.iter().map(sorted).collect())
            }
            other => other.clone(),
        }
    }
    sorted(value).to_string()
}
