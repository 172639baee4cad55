//! `hydrate`: a [`ContextRequest`] for a scope becomes a [`PromptIR`] of static sections
//! (system prompt, constraints), tools, state sections (time, project, user, goal) and one
//! section per retrieved item, fetched from every wanted source concurrently, each under its
//! own deadline.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use memory_core::{Embedding, MemoryId, Scope, Timestamp};
use prompt_ir::{
    BudgetAllocation, ContentHash, ContextRequest, Priority, PromptIR, Relevance, Section,
    SectionSource, TokenBudget, Tokenizer, ToolDef,
};
use serde::Serialize;
use tracing::Instrument;

use crate::chat::ToolHandler;
use crate::cues::{CueMatch, CueWeights, QueryCues};
use crate::error::{Error, Result};
use crate::ops::memory_tools;
use crate::provider::{
    KindLimits, NoopReranker, ProviderOptions, Reranker, ResolvedOptions, SourceChoice,
    SourceProvider, plan_sources,
};
use crate::render::{self, DEFAULT_CONSTRAINTS};
use crate::report::{Degradation, DegradationKind, ScoreExplain, SourceReport, SourceStatus};
use crate::scoring::{ScoringWeights, score_item};
use crate::source::{
    ContextSource, QueryEmbeddings, SourceItem, SourceKind, SourceOutput, SourceParams, SourceQuery,
};

/// Sections longer than this many bytes may be truncated (at a sentence or line boundary)
/// instead of only kept whole or dropped.
const SHRINKABLE_BYTES: usize = 400;
/// The smallest useful size of a shrinkable item, in tokens.
const MIN_ITEM_TOKENS: u32 = 32;

/// Everything about hydration that does not change from request to request: the static
/// prompt, tools, which kinds of context to fetch and from whom, limits, deadlines, scoring.
#[derive(Clone)]
pub struct HydrationConfig {
    /// The system prompt (the start of the stable prefix).
    pub system_prompt: String,
    /// Rules about recalled data, after the system prompt in the stable prefix; empty to
    /// leave out. Defaults to [`DEFAULT_CONSTRAINTS`].
    pub constraints: String,
    /// The application's tools. Give them [`Priority::Critical`] to keep them (and so the
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
    /// Sources set explicitly; they win over providers.
    pub sources: BTreeMap<SourceKind, Arc<dyn ContextSource>>,
    /// Providers, in precedence order (earlier ones win).
    pub providers: Vec<SourceProvider>,
    /// Bot/app state options, per provider name (below request and runtime options).
    pub app_options: BTreeMap<String, ProviderOptions>,
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
    /// The newest this many messages of the conversation are always kept (High priority);
    /// older ones in the window compete on relevance with everything else. Default 2: the
    /// last exchange.
    pub keep_recent: usize,
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
    /// names; see [`QueryCues`]) gains in relevance. [`CueWeights::OFF`] to rank on
    /// similarity alone.
    pub cue_weights: CueWeights,
    /// Near-duplicates are collapsed: a candidate whose distinct words overlap a better
    /// one's by at least this share (Jaccard, 0 to 1) is left out, so the prompt is not
    /// filled with one fact said several times. The newest messages of the conversation
    /// are never left out. Default `Some(0.8)`; `None` keeps every candidate.
    pub near_duplicate: Option<f64>,
    /// Counts tokens (of sources' items, and when compiling).
    pub tokenizer: Arc<dyn Tokenizer>,
    /// Put the rendered prompt in trace events (off by default: prompts hold personal data).
    pub trace_prompt_text: bool,
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
            sources: BTreeMap::new(),
            providers: Vec::new(),
            app_options: BTreeMap::new(),
            reranker: Arc::new(NoopReranker),
            scoring: ScoringWeights::default(),
            deadline: Duration::from_secs(2),
            deadlines: BTreeMap::new(),
            knowledge_limit: 10,
            extra_limit: 5,
            source_token_share: 1.0,
            keep_recent: 2,
            item_tokens: 25,
            unmatched_relevance: 0.35,
            allocation: None,
            cue_weights: CueWeights::default(),
            near_duplicate: Some(0.8),
            tokenizer,
            trace_prompt_text: false,
        }
    }

    /// Adds a provider after the existing ones.
    pub fn with_provider(mut self, provider: SourceProvider) -> Self {
        self.providers.push(provider);
        self
    }

    /// Sets the source of `kind` explicitly (and wants the kind).
    pub fn with_source(mut self, kind: SourceKind, source: Arc<dyn ContextSource>) -> Self {
        self.kinds.insert(kind);
        self.sources.insert(kind, source);
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

    /// Sets bot/app state options for the provider named `provider`.
    pub fn with_app_options(
        mut self,
        provider: impl Into<String>,
        options: ProviderOptions,
    ) -> Self {
        self.app_options.insert(provider.into(), options);
        self
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
}

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
            .field("sources", &self.sources)
            .field("providers", &self.providers)
            .field("app_options", &self.app_options)
            .field("reranker", &self.reranker)
            .field("scoring", &self.scoring)
            .field("deadline", &self.deadline)
            .field("deadlines", &self.deadlines)
            .field("knowledge_limit", &self.knowledge_limit)
            .field("extra_limit", &self.extra_limit)
            .field("source_token_share", &self.source_token_share)
            .field("keep_recent", &self.keep_recent)
            .field("item_tokens", &self.item_tokens)
            .field("unmatched_relevance", &self.unmatched_relevance)
            .field("allocation", &self.allocation)
            .field("cue_weights", &self.cue_weights)
            .field("near_duplicate", &self.near_duplicate)
            .field("tokenizer", &self.tokenizer.name())
            .field("trace_prompt_text", &self.trace_prompt_text)
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
    /// Request-level options per provider name.
    pub provider_options: BTreeMap<String, ProviderOptions>,
    /// A precomputed vector of the observation, used instead of embedding it.
    pub query_vector: Option<Embedding>,
}

impl HydrateInput {
    /// A request for `scope`, now, with no state or options.
    pub fn new(scope: Scope, request: ContextRequest) -> Self {
        Self {
            scope,
            request,
            now: Timestamp::now(),
            state: SessionState::default(),
            provider_options: BTreeMap::new(),
            query_vector: None,
        }
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

    /// Sets request-level options for the provider named `provider`.
    pub fn with_provider_options(
        mut self,
        provider: impl Into<String>,
        options: ProviderOptions,
    ) -> Self {
        self.provider_options.insert(provider.into(), options);
        self
    }

    /// Supplies a precomputed vector of the observation.
    pub fn with_query_vector(mut self, vector: Embedding) -> Self {
        self.query_vector = Some(vector);
        self
    }

    /// The request's hash: scope, observation, goal, strategy, budget, state and options
    /// (not "now"), as canonical JSON hashed with the Prompt IR's content hash.
    pub fn request_hash(&self) -> String {
        let value = serde_json::json!({
            "scope": self.scope,
            "request": self.request,
            "state": self.state,
            "provider_options": self.provider_options,
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

/// Which message a section renders into.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Block {
    /// The stable prefix: system prompt and constraints.
    System,
    /// Current state: time, project, user, goal.
    State,
    /// Recalled data of one kind, in a delimited block.
    Data(SourceKind),
    /// The observation (the user's new message).
    Observation,
}

impl Block {
    /// `system`, `state`, or the source kind's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Block::System => "system",
            Block::State => "state",
            Block::Data(kind) => kind.as_str(),
            Block::Observation => "observation",
        }
    }

    /// The block a section of `source` renders into when hydrate did not say.
    pub(crate) fn of_source(source: &SectionSource) -> Block {
        match source {
            SectionSource::Static(_) => Block::System,
            SectionSource::State(_) => Block::State,
            SectionSource::Conditional(name) if name == "web" => Block::Data(SourceKind::Web),
            SectionSource::Conditional(_) => Block::State,
            SectionSource::Temporal => Block::Data(SourceKind::Temporal),
            SectionSource::Semantic(_) => Block::Data(SourceKind::Semantic),
            SectionSource::Knowledge => Block::Data(SourceKind::Knowledge),
        }
    }
}

/// What hydrate knows about one section beyond the Prompt IR.
#[derive(Clone, Debug, PartialEq)]
pub struct SectionInfo {
    /// The message it renders into.
    pub block: Block,
    /// The memory it shows, if one.
    pub memory_id: Option<MemoryId>,
    /// How a retrieved item scored.
    pub scores: Option<ScoreExplain>,
    /// Every kind of source that found the item, in precedence order (empty for sections
    /// that were not retrieved). A memory found by several sources is one section.
    pub found_by: Vec<SourceKind>,
    /// The day header its line sits under in its block (`[2023-05-08 Mon]`), if dated.
    pub day: Option<String>,
}

/// The result of [`hydrate`]: the Prompt IR and what is needed to compile and explain it.
#[derive(Clone, Debug)]
pub struct Hydrated {
    /// The prompt, before budgeting.
    pub ir: PromptIR,
    /// Per-section facts, by section id.
    pub sections: BTreeMap<String, SectionInfo>,
    /// One report per wanted kind of context, in precedence order.
    pub sources: Vec<SourceReport>,
    /// Everything that was served less well than asked.
    pub degradations: Vec<Degradation>,
    /// Kinds whose result is partial (a missed deadline or a failure midway).
    pub partial: BTreeSet<SourceKind>,
    /// See [`HydrateInput::request_hash`].
    pub request_hash: String,
    /// The request's budget.
    pub budget: TokenBudget,
    /// What the observation said beyond its meaning (time, quoted phrases, names).
    pub cues: QueryCues,
}

/// One source ready to run.
struct Runnable {
    kind: SourceKind,
    source: Arc<dyn ContextSource>,
    /// The next providers of the kind (name, source), in precedence order: if the source
    /// fails before finding anything, the next one runs in what is left of the deadline.
    fallbacks: Vec<(String, Arc<dyn ContextSource>, KindLimits)>,
    params: SourceParams,
    /// Whether `params.max_tokens` can bind (a share of the budget below 1, or a provider's
    /// own token limit): only then are the kept items' tokens counted.
    token_cap: bool,
    deadline: Duration,
    report: SourceReport,
}

enum Outcome {
    Done,
    Failed(Error),
    TimedOut,
}

fn round4(x: f32) -> f64 {
    (f64::from(x) * 10_000.0).round() / 10_000.0
}

fn score_explain(item: &SourceItem, cues: &CueMatch) -> ScoreExplain {
    let r = |x: Option<f32>| x.map(round4);
    ScoreExplain {
        score: round4(item.score),
        similarity: r(item.similarity),
        semantic: r(item.breakdown.semantic),
        keyword: r(item.breakdown.keyword),
        recency: r(item.breakdown.recency),
        importance: r(item.breakdown.importance),
        access: r(item.breakdown.access),
        cues: cues.any().then(|| cues.describe()),
    }
}

fn item_label(kind: SourceKind) -> &'static str {
    match kind {
        SourceKind::Temporal => "Recent message",
        SourceKind::Knowledge => "Knowledge",
        SourceKind::Semantic => "Related past message",
        SourceKind::Graph => "Graph fact",
        SourceKind::Vector => "Document passage",
        SourceKind::Web => "Web result",
    }
}

/// Builds the Prompt IR for one request. See the crate docs for the pipeline.
///
/// Sources run concurrently, each under its deadline ([`HydrationConfig::deadline_for`]);
/// a source that misses it contributes what it pushed so far, marked partial. Failing,
/// missing and degraded sources are reported, never fatal. Must run inside a Tokio runtime
/// with the time driver enabled.
pub async fn hydrate(config: &HydrationConfig, input: &HydrateInput) -> Result<Hydrated> {
    let span = tracing::info_span!(
        "hydrate",
        gen_ai.operation.name = "hydrate",
        gen_ai.request.max_tokens = input.request.budget.total(),
        hydrate.sources = tracing::field::Empty,
        hydrate.items = tracing::field::Empty,
        hydrate.sections = tracing::field::Empty,
        hydrate.tokens = tracing::field::Empty,
        hydrate.degradations = tracing::field::Empty,
        duration_ms = tracing::field::Empty,
    );
    hydrate_inner(config, input, span.clone())
        .instrument(span)
        .await
}

async fn hydrate_inner(
    config: &HydrationConfig,
    input: &HydrateInput,
    span: tracing::Span,
) -> Result<Hydrated> {
    let started = Instant::now();
    let request = &input.request;
    let (mut ir, mut infos) = fixed_sections(config, input)?;
    let mut acc = Gathered::default();
    let runnables = acc.plan(config, input);

    let cues = QueryCues::read(&request.observation, input.now);
    let mut embeddings = QueryEmbeddings::new(request.observation.clone());
    if let Some(v) = &input.query_vector {
        embeddings = embeddings.with_vector(v.clone());
    }
    let queries: Vec<SourceQuery<'_>> = runnables
        .iter()
        .map(|r| SourceQuery {
            kind: r.kind,
            scope: &input.scope,
            observation: &request.observation,
            goal: request.goal.as_deref(),
            params: r.params,
            strategy: &request.strategy,
            now: input.now,
            embeddings: &embeddings,
            cues: &cues,
        })
        .collect();
    let mut outputs: Vec<SourceOutput> = runnables.iter().map(|_| SourceOutput::new()).collect();
    let runs: Vec<_> = runnables
        .iter()
        .zip(&queries)
        .zip(outputs.iter_mut())
        .map(|((r, q), out)| run_source(r, q, out))
        .collect();
    let outcomes = join_all(runs).await;

    // In precedence order (runnables are in kind order), so the earlier kind keeps a memory
    // two sources returned.
    let mut returned = 0usize;
    for (((r, query), out), (outcome, elapsed, served_by)) in runnables
        .into_iter()
        .zip(&queries)
        .zip(outputs)
        .zip(outcomes)
    {
        let (items, notes, search) = out.into_parts();
        let mut r = r;
        if served_by > 0 {
            let (provider, source, limits) = r.fallbacks.swap_remove(served_by - 1);
            // What served must also be kept within its own limits.
            r.params = limits.narrow(r.params);
            r.token_cap |= limits.max_tokens.is_some();
            r.report.params = Some(r.params);
            r.report.provider = Some(provider);
            r.report.source = Some(source.name().to_owned());
            r.source = source;
        }
        r.report.elapsed_ms = (elapsed.as_secs_f64() * 1e6).round() / 1e3;
        r.report.search = search;
        r.report.returned = items.len();
        returned += items.len();
        let kind = r.kind;
        acc.degradations
            .extend(notes.into_iter().map(|d| d.for_source(kind)));
        acc.outcome(&mut r, outcome, items.len());
        acc.collect(config, query, r, items).await?;
    }
    acc.merge(config, &cues)?;
    acc.reports.sort_by_key(|r| r.kind);

    // Retrieved sections in render order: background first, the conversation last; messages
    // (the conversation, related messages) in time order, so a day's lines share one header;
    // within other blocks, best first.
    let mut retrieved = std::mem::take(&mut acc.retrieved);
    retrieved.sort_by(|(a, _), (b, _)| {
        a.kind
            .render_rank()
            .cmp(&b.kind.render_rank())
            .then_with(|| {
                if matches!(a.kind, SourceKind::Temporal | SourceKind::Semantic) {
                    a.item
                        .created_at
                        .cmp(&b.item.created_at)
                        .then(a.item.key.cmp(&b.item.key))
                } else {
                    std::cmp::Ordering::Equal
                }
            })
    });
    span.record("hydrate.sections", retrieved.len());
    span.record(
        "hydrate.tokens",
        retrieved
            .iter()
            .filter_map(|(_, s)| s.tokens())
            .fold(0, u32::saturating_add),
    );
    for (cand, section) in retrieved {
        infos.insert(
            section.id().to_owned(),
            SectionInfo {
                block: Block::Data(cand.kind),
                memory_id: cand.item.memory_id,
                scores: Some(score_explain(&cand.item, &cand.cues)),
                found_by: cand.found_by,
                day: render::item_day(&cand.item),
            },
        );
        ir.push_section(section)?;
    }

    span.record("hydrate.sources", acc.reports.len());
    span.record("hydrate.items", returned);
    span.record("hydrate.degradations", acc.degradations.len());
    span.record("duration_ms", started.elapsed().as_secs_f64() * 1e3);

    Ok(Hydrated {
        ir,
        sections: infos,
        sources: acc.reports,
        degradations: acc.degradations,
        partial: acc.partial,
        request_hash: input.request_hash(),
        budget: budget_of(config, request),
        cues,
    })
}

/// The request's budget, split as [`HydrationConfig::allocation`] says when it is set.
fn budget_of(config: &HydrationConfig, request: &ContextRequest) -> TokenBudget {
    match &config.allocation {
        Some(a) => request.budget.clone().with_allocation(a.clone()),
        None => request.budget.clone(),
    }
}

/// The IR with everything that is not retrieved: the stable prefix (system prompt,
/// constraints, tools), then the state sections.
fn fixed_sections(
    config: &HydrationConfig,
    input: &HydrateInput,
) -> Result<(PromptIR, BTreeMap<String, SectionInfo>)> {
    let request = &input.request;
    let mut ir = PromptIR::new(input.now.to_datetime());
    ir.set_observation(request.observation.clone());
    ir.set_budget(budget_of(config, request));
    ir.set_strategy(request.strategy.clone());
    let mut infos = BTreeMap::new();
    let mut push = |ir: &mut PromptIR, section: Section, block: Block| -> Result<()> {
        let info = SectionInfo {
            block,
            memory_id: None,
            scores: None,
            found_by: Vec::new(),
            day: None,
        };
        infos.insert(section.id().to_owned(), info);
        Ok(ir.push_section(section)?)
    };

    // The stable prefix: byte-identical for every request with the same config.
    for (id, label, text) in [
        ("system", "System prompt", &config.system_prompt),
        ("constraints", "Constraints", &config.constraints),
    ] {
        if !text.trim().is_empty() {
            let s = Section::new(id, label, SectionSource::Static(id.into()), text.clone())?;
            push(&mut ir, s, Block::System)?;
        }
    }
    for tool in &config.tools {
        ir.push_tool(tool.clone())?;
    }
    if config.memory_tools {
        for tool in memory_tools()? {
            ir.push_tool(tool)?;
        }
    }

    // State: changes between requests, so it comes after the prefix.
    let now = input.now.to_datetime();
    let time = format!(
        "Current time: {} UTC ({})",
        now.format("%Y-%m-%d %H:%M"),
        now.format("%A")
    );
    let mut state: Vec<(String, String, String)> =
        vec![("time".into(), "Current time".into(), time)];
    let mut line = |name: &str, label: &str, value: &Option<String>| {
        if let Some(v) = value {
            state.push((name.into(), label.into(), format!("{label}: {v}")));
        }
    };
    line("project", "Project", &input.state.project);
    line("user", "User", &input.state.user);
    line("goal", "Goal", &request.goal);
    for (label, value) in &input.state.extra {
        state.push((
            format!("extra:{label}"),
            label.clone(),
            format!("{label}: {value}"),
        ));
    }
    for (name, label, content) in state {
        let id = format!("state:{name}");
        let s = Section::new(id, label, SectionSource::State(name), content)?;
        push(&mut ir, s, Block::State)?;
    }
    Ok((ir, infos))
}

/// What the sources gave, as it is gathered.
#[derive(Default)]
struct Gathered {
    reports: Vec<SourceReport>,
    degradations: Vec<Degradation>,
    partial: BTreeSet<SourceKind>,
    /// Each source's surviving items, in precedence order, before merging.
    collected: Vec<Collected>,
    /// Every candidate after merging, with its section.
    retrieved: Vec<(Candidate, Section)>,
}

/// One source's items after scoring, threshold, reranking and its item limit.
struct Collected {
    kind: SourceKind,
    items: Vec<SourceItem>,
    report: SourceReport,
}

/// One retrieved item, however many sources found it.
struct Candidate {
    /// The block it renders into: that of the first source (in precedence order) that
    /// found it, so a message of the recent conversation stays in the conversation.
    kind: SourceKind,
    /// The item, carrying the best similarity any source found for it.
    item: SourceItem,
    found_by: Vec<SourceKind>,
    /// The question's cues it matches (names only when informative among the candidates).
    cues: CueMatch,
}

impl Gathered {
    fn degrade(&mut self, kind: SourceKind, what: DegradationKind, message: String) {
        self.degradations
            .push(Degradation::new(what, message).for_source(kind));
    }

    /// Who serves each wanted kind, with its parameters; skipped, missing and unbuildable
    /// kinds are reported here.
    fn plan(&mut self, config: &HydrationConfig, input: &HydrateInput) -> Vec<Runnable> {
        let strategy = &input.request.strategy;
        let disabled = |kind: SourceKind| match kind {
            SourceKind::Temporal => strategy.temporal_window == 0,
            SourceKind::Semantic => strategy.semantic_limit == 0,
            SourceKind::Knowledge => !strategy.include_knowledge || config.knowledge_limit == 0,
            _ => config.extra_limit == 0,
        };
        let (off, wanted): (BTreeSet<SourceKind>, BTreeSet<SourceKind>) =
            config.kinds.iter().partition(|&&k| disabled(k));
        for kind in off {
            self.reports
                .push(SourceReport::new(kind, SourceStatus::Skipped));
        }
        let available = input.request.budget.available();
        let max_tokens = (f64::from(available) * config.source_token_share.clamp(0.0, 1.0)) as u32;
        let count = |n: u32| usize::try_from(n).unwrap_or(usize::MAX);
        // Search limits grow with the budget, so a larger budget holds more evidence;
        // compression then keeps what is worth most.
        let fill = match config.item_tokens {
            0 => 0,
            per_item => count(available / per_item),
        };
        let params_for = |kind: SourceKind| SourceParams {
            max_items: match kind {
                SourceKind::Temporal => count(strategy.temporal_window),
                SourceKind::Semantic => count(strategy.semantic_limit).max(fill),
                SourceKind::Knowledge => config.knowledge_limit.max(fill / 4),
                _ => config.extra_limit,
            },
            max_tokens,
            threshold: match kind {
                SourceKind::Semantic | SourceKind::Vector => {
                    Some(strategy.semantic_threshold.get() as f32)
                }
                _ => None,
            },
        };

        let mut runnables = Vec::new();
        for (kind, choice) in plan_sources(&wanted, &config.sources, &config.providers) {
            let mut report = SourceReport::new(kind, SourceStatus::Complete);
            let mut fallbacks = Vec::new();
            let mut limits = KindLimits::NONE;
            let source = match choice {
                SourceChoice::Missing => {
                    report.status = SourceStatus::Missing;
                    self.reports.push(report);
                    self.degrade(
                        kind,
                        DegradationKind::MissingProvider,
                        format!("no source or provider supplies {kind} context; branch skipped"),
                    );
                    continue;
                }
                SourceChoice::Explicit(source) => Arc::clone(source),
                SourceChoice::Provider(first) => {
                    // Routing: every provider of the kind, in precedence order. One whose
                    // identity does not admit the scope is passed over; one that cannot build
                    // its source is recorded and the next is tried; the first that builds
                    // serves, and the rest stand by should it fail.
                    let mut chain = Vec::new();
                    let mut passed_over = Vec::new();
                    for provider in config.providers.iter().filter(|p| p.supports(kind)) {
                        let mut built = SourceReport::new(kind, SourceStatus::Complete);
                        match build_from_provider(provider, kind, config, input, &mut built) {
                            Ok(source) => {
                                if chain.is_empty() {
                                    report.provider = Some(provider.name().to_owned());
                                    report.options = built.options;
                                }
                                chain.push((
                                    provider.name().to_owned(),
                                    source,
                                    provider.capabilities().limits_for(kind),
                                ));
                            }
                            Err(d) if d.kind == DegradationKind::IdentityMismatch => {
                                passed_over.push(d);
                            }
                            Err(d) => self.degradations.push(d.for_source(kind)),
                        }
                    }
                    if chain.is_empty() {
                        report.provider = Some(first.name().to_owned());
                        report.status = SourceStatus::Failed;
                        self.reports.push(report);
                        self.degradations
                            .extend(passed_over.into_iter().map(|d| d.for_source(kind)));
                        continue;
                    }
                    let (_, source, first_limits) = chain.remove(0);
                    limits = first_limits;
                    fallbacks = chain;
                    source
                }
            };
            report.source = Some(source.name().to_owned());
            // The serving provider's own limits narrow what is asked and kept.
            let params = limits.narrow(params_for(kind));
            report.params = Some(params);
            runnables.push(Runnable {
                kind,
                source,
                fallbacks,
                params,
                token_cap: config.source_token_share < 1.0 || limits.max_tokens.is_some(),
                deadline: config.deadline_for(kind),
                report,
            });
        }
        runnables
    }

    /// Records how a fetch ended: a timeout or a failure makes the result partial (or
    /// failed, if nothing arrived) and is a degradation.
    fn outcome(&mut self, r: &mut Runnable, outcome: Outcome, arrived: usize) {
        let name = r.source.name();
        match outcome {
            Outcome::Done => {}
            Outcome::TimedOut => {
                r.report.status = SourceStatus::Partial;
                self.partial.insert(r.kind);
                let message = format!(
                    "{name} missed its {} ms deadline; kept the {arrived} item(s) it found before",
                    r.deadline.as_millis(),
                );
                self.degrade(r.kind, DegradationKind::Timeout, message);
            }
            Outcome::Failed(e) => {
                r.report.status = if arrived == 0 {
                    SourceStatus::Failed
                } else {
                    self.partial.insert(r.kind);
                    SourceStatus::Partial
                };
                tracing::warn!(source = name, kind = r.kind.as_str(), error = %e, "context source failed");
                let message = format!(
                    "{name} failed: {}; kept the {arrived} item(s) it found before",
                    failure(&e)
                );
                self.degrade(r.kind, DegradationKind::SourceFailed, message);
            }
        }
    }

    /// Scores, filters and reranks one source's items, removes repeats within it and
    /// applies its item limit. Items found by several sources are merged later
    /// ([`Gathered::merge`]), so no source loses an item to a weaker copy of it.
    async fn collect(
        &mut self,
        config: &HydrationConfig,
        query: &SourceQuery<'_>,
        r: Runnable,
        mut items: Vec<SourceItem>,
    ) -> Result<()> {
        let Runnable {
            kind,
            source,
            params,
            token_cap,
            mut report,
            ..
        } = r;
        let score = |items: &mut [SourceItem]| {
            for item in items {
                score_item(
                    item,
                    query.now,
                    query.strategy.recency_decay,
                    config.scoring,
                );
            }
        };
        score(&mut items);
        let before = items.len();
        if !source.honours().threshold
            && let Some(t) = params.threshold
        {
            items.retain(|i| i.similarity.is_none_or(|s| s >= t));
        }
        let mut over_limits = before - items.len();
        rank(kind, &mut items);
        if kind != SourceKind::Temporal && items.len() > 1 {
            let n = items.len();
            // Under the kind's deadline, like its source.
            let deadline = config.deadline_for(kind);
            match tokio::time::timeout(deadline, config.reranker.rerank(query, items.clone())).await
            {
                Ok(Ok(reranked)) => {
                    over_limits += n.saturating_sub(reranked.len());
                    items = reranked;
                    // A reranker may set a new similarity: score again, in its order.
                    score(&mut items);
                }
                Ok(Err(e)) => {
                    let message = format!(
                        "reranker {} failed: {}; kept the scored order",
                        config.reranker.name(),
                        failure(&e)
                    );
                    self.degrade(kind, DegradationKind::RerankFailed, message);
                }
                Err(_) => {
                    let message = format!(
                        "reranker {} did not answer within {deadline:?}; kept the scored order",
                        config.reranker.name()
                    );
                    self.degrade(kind, DegradationKind::RerankFailed, message);
                }
            }
        }
        // Limits are applied here even when the source honours them: applying a limit
        // twice is harmless.
        let mut keys: HashSet<String> = HashSet::new();
        let mut kept = Vec::with_capacity(items.len().min(params.max_items));
        // The token cap is counted only when it can bind (counting costs a tokenizer pass).
        let capped = token_cap;
        let mut tokens = 0u32;
        for item in items {
            if !keys.insert(item.key.clone()) {
                report.duplicates += 1;
                continue;
            }
            if kept.len() >= params.max_items {
                over_limits += 1;
                continue;
            }
            if capped {
                let t = config.tokenizer.count(&render::item_line(kind, &item));
                if tokens.saturating_add(t) > params.max_tokens {
                    over_limits += 1;
                    continue;
                }
                tokens = tokens.saturating_add(t);
            }
            kept.push(item);
        }
        report.over_limits = over_limits;
        tracing::debug!(
            gen_ai.source.kind = kind.as_str(),
            gen_ai.source.name = source.name(),
            gen_ai.source.status = ?report.status,
            gen_ai.source.returned = report.returned,
            gen_ai.source.kept = kept.len(),
            duration_ms = report.elapsed_ms,
            "context source"
        );
        self.collected.push(Collected {
            kind,
            items: kept,
            report,
        });
        Ok(())
    }

    /// One ranking across sources: a memory found by several sources becomes one
    /// candidate with its best similarity and all its provenance, placed in the block of
    /// the first source that found it; then every candidate becomes a section whose value
    /// for compression is its relevance (similarity to the observation, or
    /// [`HydrationConfig::unmatched_relevance`] when no search matched it) and its age
    /// (the strategy's recency decay). The newest [`HydrationConfig::keep_recent`]
    /// messages of the conversation and pinned facts are kept first (High priority).
    fn merge(&mut self, config: &HydrationConfig, cues: &QueryCues) -> Result<()> {
        let mut collected = std::mem::take(&mut self.collected);
        collected.sort_by_key(|c| c.kind);
        // A search sees every memory of its kind in the scope, so one it did not return
        // matches the observation no better than the weakest one it did.
        let weakest = |kind: SourceKind| {
            collected
                .iter()
                .filter(|c| c.kind == kind)
                .flat_map(|c| c.items.iter().filter_map(|i| i.similarity))
                .min_by(f32::total_cmp)
        };
        let capped = |weakest: Option<f32>| {
            let base = config.unmatched_relevance;
            weakest.map_or(base, |w| base.min(f64::from(w.max(0.0))))
        };
        let (unmatched_message, unmatched_fact) = (
            capped(weakest(SourceKind::Semantic)),
            capped(weakest(SourceKind::Knowledge)),
        );
        let mut candidates: Vec<Candidate> = Vec::new();
        let mut at: HashMap<MemoryId, usize> = HashMap::new();
        for c in &mut collected {
            for item in std::mem::take(&mut c.items) {
                if let Some(id) = item.memory_id
                    && let Some(&i) = at.get(&id)
                {
                    let cand = &mut candidates[i];
                    cand.found_by.push(c.kind);
                    if item.similarity.unwrap_or(f32::MIN)
                        > cand.item.similarity.unwrap_or(f32::MIN)
                    {
                        cand.item.similarity = item.similarity;
                        cand.item.breakdown = item.breakdown;
                        cand.item.score = cand.item.score.max(item.score);
                    }
                    c.report.duplicates += 1;
                    continue;
                }
                if let Some(id) = item.memory_id {
                    at.insert(id, candidates.len());
                }
                candidates.push(Candidate {
                    kind: c.kind,
                    item,
                    found_by: vec![c.kind],
                    cues: CueMatch::default(),
                });
            }
        }
        if !cues.is_empty() {
            mark_cues(&mut candidates, cues, config.cue_weights);
        }
        // The protected tail: the newest messages of the conversation block.
        let mut conversation: Vec<(Option<Timestamp>, &str, usize)> = candidates
            .iter()
            .enumerate()
            .filter(|(_, c)| c.kind == SourceKind::Temporal)
            .map(|(i, c)| (c.item.created_at, c.item.key.as_str(), i))
            .collect();
        conversation.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
        let tail: HashSet<usize> = conversation
            .iter()
            .take(config.keep_recent)
            .map(|(_, _, i)| *i)
            .collect();
        let mut reports: BTreeMap<SourceKind, SourceReport> =
            collected.into_iter().map(|c| (c.kind, c.report)).collect();
        let relevance: Vec<Relevance> = candidates
            .iter()
            .enumerate()
            .map(|(i, cand)| {
                let unmatched = match cand.kind {
                    SourceKind::Temporal => unmatched_message,
                    SourceKind::Knowledge => unmatched_fact,
                    _ => config.unmatched_relevance,
                };
                relevance_of(cand, tail.contains(&i), unmatched, config.cue_weights)
            })
            .collect();
        let collapsed = match config.near_duplicate {
            Some(t) => near_duplicates(&candidates, &relevance, &tail, t),
            None => HashSet::new(),
        };
        for (i, cand) in candidates.into_iter().enumerate() {
            if collapsed.contains(&i) {
                if let Some(report) = reports.get_mut(&cand.kind) {
                    report.near_duplicates += 1;
                }
                continue;
            }
            let mut section = item_section(&cand, tail.contains(&i), relevance[i])?;
            let tokens = section.count_tokens(config.tokenizer.as_ref());
            if let Some(report) = reports.get_mut(&cand.kind) {
                report.kept += 1;
                report.tokens = report.tokens.saturating_add(tokens);
            }
            self.retrieved.push((cand, section));
        }
        self.reports.extend(reports.into_values());
        Ok(())
    }
}

/// A candidate's relevance to the observation: its best similarity, or `unmatched` when no
/// search matched it, lifted by the question's cues it matches; the protected newest
/// messages are kept for being newest, not for what they match, and rank 1.
fn relevance_of(cand: &Candidate, protected: bool, unmatched: f64, w: CueWeights) -> Relevance {
    match cand.item.similarity {
        _ if protected => Relevance::ONE,
        Some(s) => Relevance::clamped(cand.cues.lift(f64::from(s), w)),
        None => Relevance::clamped(cand.cues.lift(unmatched, w)),
    }
}

/// The candidates to leave out as near-duplicates: one whose words overlap those of a
/// better candidate (protected first, then pinned, then more relevant, then newer) by at
/// least `threshold` (Jaccard over distinct lowercased words). Texts of fewer than
/// [`NEAR_DUPLICATE_MIN_WORDS`] words are never collapsed, nor are protected messages.
fn near_duplicates(
    candidates: &[Candidate],
    relevance: &[Relevance],
    protected: &HashSet<usize>,
    threshold: f64,
) -> HashSet<usize> {
    let sets: Vec<Vec<u64>> = candidates
        .iter()
        .map(|c| word_set(&c.item.content))
        .collect();
    let mut order: Vec<usize> = (0..candidates.len()).collect();
    order.sort_by(|&a, &b| {
        let (ca, cb) = (&candidates[a].item, &candidates[b].item);
        protected
            .contains(&b)
            .cmp(&protected.contains(&a))
            .then(cb.pinned.cmp(&ca.pinned))
            .then(relevance[b].get().total_cmp(&relevance[a].get()))
            .then(cb.created_at.cmp(&ca.created_at))
            .then(ca.key.cmp(&cb.key))
    });
    collapse(&sets, order, protected, threshold)
}

/// Goes through `sets` in `order` (best first) and returns those whose Jaccard similarity
/// to an earlier set that was kept reaches `threshold` (never a protected one, nor a set of
/// fewer than [`NEAR_DUPLICATE_MIN_WORDS`]). Each set is sorted and distinct.
fn collapse(
    sets: &[Vec<u64>],
    order: impl IntoIterator<Item = usize>,
    protected: &HashSet<usize>,
    threshold: f64,
) -> HashSet<usize> {
    // Prefix filtering: with every set sorted in one global order (by hash), two sets of
    // Jaccard >= t share an element among the first `len - ceil(t * len) + 1` of each. Kept
    // sets are indexed by those prefix elements, so each candidate is compared only with
    // the kept sets it could be a near-duplicate of, not with all of them.
    let prefix = |set: &[u64]| -> usize {
        // A hair under t * len, so rounding can only lengthen the prefix (never miss a pair).
        let overlap = (threshold * set.len() as f64 - 1e-9).ceil().max(0.0) as usize;
        (set.len() + 1)
            .saturating_sub(overlap)
            .clamp(1, set.len().max(1))
    };
    let mut index: HashMap<u64, Vec<usize>> = HashMap::new();
    let mut dropped = HashSet::new();
    let mut compared = HashSet::new();
    for i in order {
        let a = &sets[i];
        if a.len() < NEAR_DUPLICATE_MIN_WORDS {
            continue;
        }
        compared.clear();
        let duplicate = !protected.contains(&i)
            && a[..prefix(a)]
                .iter()
                .filter_map(|w| index.get(w))
                .flatten()
                .any(|&k| {
                    let b = &sets[k];
                    // Jaccard is at most min/max of the sizes: skip pairs that cannot reach it.
                    let (lo, hi) = (a.len().min(b.len()), a.len().max(b.len()));
                    compared.insert(k)
                        && lo as f64 >= threshold * hi as f64
                        && jaccard(a, b) >= threshold
                });
        if duplicate {
            dropped.insert(i);
        } else {
            for w in &a[..prefix(a)] {
                index.entry(*w).or_default().push(i);
            }
        }
    }
    dropped
}

/// Texts shorter than this many distinct words are never near-duplicates ("ok", "thanks!").
const NEAR_DUPLICATE_MIN_WORDS: usize = 4;

/// The distinct lowercased words of `text`, hashed and sorted.
fn word_set(text: &str) -> Vec<u64> {
    use std::hash::{Hash, Hasher};
    let mut set: Vec<u64> = text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(|w| {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            w.to_lowercase().hash(&mut h);
            h.finish()
        })
        .collect();
    set.sort_unstable();
    set.dedup();
    set
}

/// |a ∩ b| / |a ∪ b| of two sorted, distinct lists.
fn jaccard(a: &[u64], b: &[u64]) -> f64 {
    let (small, large) = if a.len() <= b.len() { (a, b) } else { (b, a) };
    let (mut i, mut j, mut common) = (0, 0, 0usize);
    while i < small.len() && j < large.len() {
        match small[i].cmp(&large[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                common += 1;
                i += 1;
                j += 1;
            }
        }
    }
    let union = a.len() + b.len() - common;
    if union == 0 {
        0.0
    } else {
        common as f64 / union as f64
    }
}

/// Marks what each candidate matches of the question's cues, for the kinds of cue that lift
/// (weight above 0). A name counts only where it tells candidates apart: one that half of
/// them or more hold (the person the whole chat is with, say) lifts none.
fn mark_cues(candidates: &mut [Candidate], cues: &QueryCues, w: CueWeights) {
    for c in candidates.iter_mut() {
        let mut m = cues.matches(&c.item.content, c.item.created_at);
        m.time &= w.time > 0.0;
        if w.phrase <= 0.0 {
            m.phrases = 0;
        }
        if w.name <= 0.0 {
            m.names.clear();
        }
        c.cues = m;
    }
    let common: Vec<String> = cues
        .names
        .iter()
        .filter(|n| {
            let holders = candidates
                .iter()
                .filter(|c| c.cues.names.contains(n))
                .count();
            holders * 2 >= candidates.len()
        })
        .cloned()
        .collect();
    if !common.is_empty() {
        for c in candidates.iter_mut() {
            c.cues.names.retain(|n| !common.contains(n));
        }
    }
}

/// Builds a provider's source for this request, or says why it cannot be used.
fn build_from_provider(
    provider: &SourceProvider,
    kind: SourceKind,
    config: &HydrationConfig,
    input: &HydrateInput,
    report: &mut SourceReport,
) -> std::result::Result<Arc<dyn ContextSource>, Degradation> {
    if !provider.config().identity.admits(&input.scope) {
        return Err(Degradation::new(
            DegradationKind::IdentityMismatch,
            format!(
                "provider {} is configured for another identity than this request's scope; not used",
                provider.name()
            ),
        ));
    }
    let options: ResolvedOptions = provider.resolve(
        config.app_options.get(provider.name()),
        input.provider_options.get(provider.name()),
    );
    report.options = options.clone();
    if let Err(e) = provider.capabilities().limits_for(kind).validate() {
        return Err(Degradation::new(
            DegradationKind::ProviderFailed,
            format!(
                "provider {} declares unusable {kind} limits: {e}",
                provider.name()
            ),
        ));
    }
    match provider.build(kind, &options) {
        Ok(Some(source)) => Ok(source),
        Ok(None) => Err(Degradation::new(
            DegradationKind::ProviderFailed,
            format!("provider {} built no {kind} source", provider.name()),
        )),
        Err(e) => Err(Degradation::new(
            DegradationKind::ProviderFailed,
            format!(
                "provider {} could not build its {kind} source: {e}",
                provider.name()
            ),
        )),
    }
}

/// Best first: the conversation by time (newest first), everything else by score; ties by
/// key, so the order is deterministic.
fn rank(kind: SourceKind, items: &mut [SourceItem]) {
    if kind == SourceKind::Temporal {
        items.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(a.key.cmp(&b.key)));
    } else {
        items.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.key.cmp(&b.key)));
    }
}

/// The section for one candidate. Its relevance is what the observation asked for: the
/// best similarity a search found, or `unmatched` when no search matched it (see
/// [`Gathered::merge`]); its recency is when it was said or learned (pinned memories are
/// undated: they do not age), and compression weighs the two with the strategy's recency
/// decay. Retrieved memories share one priority, so value decides between sources;
/// `protected` (the newest messages of the conversation) and pinned facts rank High.
fn item_section(cand: &Candidate, protected: bool, relevance: Relevance) -> Result<Section> {
    let (kind, item) = (cand.kind, &cand.item);
    let line = render::item_line(kind, item);
    let long = line.len() > SHRINKABLE_BYTES;
    let priority = if protected || (item.pinned && kind == SourceKind::Knowledge) {
        Priority::High
    } else {
        Priority::Medium
    };
    let mut s = Section::new(
        format!("{kind}:{}", item.key),
        item_label(kind),
        kind.section_source(relevance),
        line,
    )?
    .with_relevance(relevance)
    .with_priority(priority);
    if !item.pinned
        && let Some(at) = item.created_at
    {
        s = s.with_recency(at.to_datetime());
    }
    if long {
        s = s.with_min_tokens(MIN_ITEM_TOKENS);
    }
    Ok(s)
}

/// Why a source or reranker failed, said once: its own message, without the error's
/// "source `name` failed:" prefix, which the degradation names already.
fn failure(e: &Error) -> String {
    match e {
        Error::Source { message, .. } => message.clone(),
        other => other.to_string(),
    }
}

/// Runs a kind's source under its deadline; if it fails before finding anything, the next
/// provider of the kind runs in what is left of the deadline (recorded in `out`), and so on.
/// Returns how it ended, how long it took, and which ran last (0: the source itself, `i`:
/// fallback `i - 1`).
async fn run_source(
    r: &Runnable,
    query: &SourceQuery<'_>,
    out: &mut SourceOutput,
) -> (Outcome, Duration, usize) {
    let started = Instant::now();
    let fetch = async |source: &dyn ContextSource, out: &mut SourceOutput, limit: Duration| {
        match tokio::time::timeout(limit, source.fetch(query, out)).await {
            Ok(Ok(())) => Outcome::Done,
            Ok(Err(e)) => Outcome::Failed(e),
            Err(_) => Outcome::TimedOut,
        }
    };
    let mut outcome = fetch(r.source.as_ref(), out, r.deadline).await;
    let mut served_by = 0;
    let mut name = r.source.name().to_owned();
    while let Outcome::Failed(e) = &outcome
        && out.items().is_empty()
        && let Some((provider, next, _)) = r.fallbacks.get(served_by)
    {
        let left = r.deadline.saturating_sub(started.elapsed());
        if left.is_zero() {
            break;
        }
        out.degrade(
            DegradationKind::ProviderFailed,
            format!(
                "{name} failed: {}; fell back to provider {provider}",
                failure(e)
            ),
        );
        name = next.name().to_owned();
        outcome = fetch(next.as_ref(), out, left).await;
        served_by += 1;
    }
    (outcome, started.elapsed(), served_by)
}

/// Polls every future in turn until all are ready; outputs in input order. (A small
/// `join_all`, so the crate needs no futures dependency.)
async fn join_all<F: Future>(futures: Vec<F>) -> Vec<F::Output> {
    let mut futures: Vec<Pin<Box<F>>> = futures.into_iter().map(Box::pin).collect();
    let mut outputs: Vec<Option<F::Output>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (future, slot) in futures.iter_mut().zip(outputs.iter_mut()) {
            if slot.is_none() {
                match future.as_mut().poll(cx) {
                    Poll::Ready(v) => *slot = Some(v),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    outputs.into_iter().flatten().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Prefix filtering finds exactly the pairs a comparison of every pair finds.
    #[test]
    fn prefix_filtered_near_duplicates_match_all_pairs() {
        let mut seed = 7_u64;
        let mut next = move || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            seed >> 33
        };
        for threshold in [0.5, 0.7, 0.8, 0.9] {
            let mut sets: Vec<Vec<u64>> = Vec::new();
            for i in 0..300 {
                let len = 2 + (next() % 12) as usize;
                // A small vocabulary, so many sets overlap a lot; every tenth set repeats
                // an earlier one with one word more.
                let mut s: Vec<u64> = if i % 10 == 9 {
                    let mut copy = sets[(next() as usize) % sets.len()].clone();
                    copy.push(next() % 24);
                    copy
                } else {
                    (0..len).map(|_| next() % 24).collect()
                };
                s.sort_unstable();
                s.dedup();
                sets.push(s);
            }
            let mut brute = HashSet::new();
            let mut kept: Vec<usize> = Vec::new();
            for (i, a) in sets.iter().enumerate() {
                if a.len() < NEAR_DUPLICATE_MIN_WORDS {
                    continue;
                }
                if kept.iter().any(|&k| jaccard(a, &sets[k]) >= threshold) {
                    brute.insert(i);
                } else {
                    kept.push(i);
                }
            }
            let fast = collapse(&sets, 0..sets.len(), &HashSet::new(), threshold);
            assert_eq!(fast, brute, "threshold {threshold}");
            assert!(
                !brute.is_empty(),
                "the data has near-duplicates at {threshold}"
            );
        }
    }
}
