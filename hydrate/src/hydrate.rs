//! `hydrate`: a [`ContextRequest`] for a scope becomes a [`PromptIR`] of static sections
//! (system prompt, constraints), tools, state sections (time, project, user, goal) and one
//! section per retrieved item: the sources' items (fetched concurrently, each under its own
//! deadline, by `gather`) merged into one ranking across sources.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use memory_core::MemoryId;
use prompt_ir::{
    ContextRequest, Passage, Priority, PromptIR, Relevance, Section, SectionSource, Stability,
    TokenBudget,
};
use serde::Serialize;
use tracing::Instrument;

use crate::cache::PreviousPrompt;
use crate::config::{HydrateInput, HydrationConfig};
use crate::cues::{CueMatch, CueWeights, QueryCues};
use crate::error::Result;
use crate::gather::{Collected, gather};
use crate::passages;
use crate::render;
use crate::report::{ScoreExplain, SourceReport};
use crate::source::{Degradation, SourceItem, SourceKind};
use crate::texts::TextFacts;
use crate::tools::memory_tools;

/// Sections longer than this many bytes may be truncated (at a sentence or line boundary)
/// instead of only kept whole or dropped.
const SHRINKABLE_BYTES: usize = 400;
/// The smallest useful size of a shrinkable item, in tokens.
const MIN_ITEM_TOKENS: u32 = 32;

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
            SectionSource::Conditional(name) if name == "graph" => Block::Data(SourceKind::Graph),
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
    /// A long memory's passages, as character ranges (start, end) of its text, in order:
    /// compile may keep an excerpt of them (empty when the section is kept whole or not at
    /// all).
    pub passages: Vec<(usize, usize)>,
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
    /// The conversation block's first message, if it has one.
    pub conversation_from: Option<MemoryId>,
    /// Whether the conversation block starts where the previous prompt's did.
    pub conversation_kept: bool,
    /// The previous prompt of the conversation, as the caller gave it.
    pub previous: Option<PreviousPrompt>,
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
        lifted_from: r(item.lifted_from),
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
    // What the system prompt, tools, state and message leave for what is remembered.
    let fixed = ir.count_tokens(config.tokenizer.as_ref());
    let context_room = input.request.budget.available().saturating_sub(fixed);
    let cues = QueryCues::read(&request.observation, input.now);
    let gathered = gather(config, input, &cues).await;
    let mut reports = gathered.reports;
    let merged = merge(
        config,
        input,
        context_room,
        &cues,
        gathered.collected,
        &mut reports,
    )?;
    let mut retrieved = merged.retrieved;
    reports.sort_by_key(|r| r.kind);

    // Retrieved sections in render order: background first, the conversation last; messages
    // (the conversation, related messages) and facts in time order, so a day's lines share
    // one header and a fact keeps its place from prompt to prompt; within other blocks,
    // best first.
    retrieved.sort_by(|(a, _, _), (b, _, _)| {
        a.kind
            .render_rank()
            .cmp(&b.kind.render_rank())
            .then_with(|| {
                if matches!(
                    a.kind,
                    SourceKind::Temporal | SourceKind::Semantic | SourceKind::Knowledge
                ) {
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
            .filter_map(|(_, s, _)| s.tokens())
            .fold(0, u32::saturating_add),
    );
    for (cand, section, passages) in retrieved {
        infos.insert(
            section.id().to_owned(),
            SectionInfo {
                block: Block::Data(cand.kind),
                memory_id: cand.item.memory_id,
                scores: Some(score_explain(&cand.item, &cand.cues)),
                found_by: cand.found_by,
                day: render::item_day(&cand.item),
                passages,
            },
        );
        ir.push_section(section)?;
    }

    span.record("hydrate.sources", reports.len());
    span.record("hydrate.items", gathered.returned);
    span.record("hydrate.degradations", gathered.degradations.len());
    span.record("duration_ms", started.elapsed().as_secs_f64() * 1e3);

    Ok(Hydrated {
        ir,
        sections: infos,
        sources: reports,
        degradations: gathered.degradations,
        partial: gathered.partial,
        request_hash: input.request_hash(),
        budget: budget_of(config, request),
        cues,
        conversation_from: merged.conversation_from,
        conversation_kept: merged.conversation_kept,
        previous: input.previous.clone(),
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
    let mut strategy = request.strategy.clone();
    let floor = Relevance::clamped(config.relevance_floor);
    if floor > strategy.relevance_floor {
        strategy.relevance_floor = floor;
    }
    ir.set_strategy(strategy);
    let mut infos = BTreeMap::new();
    let mut push = |ir: &mut PromptIR, section: Section, block: Block| -> Result<()> {
        let info = SectionInfo {
            block,
            memory_id: None,
            scores: None,
            found_by: Vec::new(),
            day: None,
            passages: Vec::new(),
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

    // State: who is talking (changes rarely) and the clock (with every message).
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
        // Who is talking changes rarely; the clock with every message, so it goes last.
        let stability = match name.as_str() {
            "time" => Stability::Volatile,
            _ => Stability::Slow,
        };
        let s =
            Section::new(id, label, SectionSource::State(name), content)?.with_stability(stability);
        push(&mut ir, s, Block::State)?;
    }
    Ok((ir, infos))
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
    /// The notes later finders gave it (a graph path), should it render in their block.
    notes: Vec<(SourceKind, String)>,
}

/// A candidate, its section, and its passages as character ranges (see [`item_section`]).
type Retrieved = (Candidate, Section, Vec<(usize, usize)>);

/// What [`merge`] hands on: the sections, and where the conversation block starts.
struct Merged {
    retrieved: Vec<Retrieved>,
    conversation_from: Option<MemoryId>,
    conversation_kept: bool,
}

/// One ranking across sources: a memory found by several sources becomes one candidate with
/// its best similarity and all its provenance, placed in the block of the first source that
/// found it; then every candidate becomes a section whose value for compression is its
/// relevance (similarity to the observation, or [`HydrationConfig::unmatched_relevance`]
/// when no search matched it) and its age (the strategy's recency decay).
///
/// What the prompt keeps from one message to the next is marked stable, so compile puts it
/// first and compression gives it room first: the conversation's newest messages within its
/// room ([`conversation_window`], [`Stability::Growing`]) and the person's newest facts and
/// standing instructions ([`Stability::Slow`]), whatever the message asks. Older messages of
/// the conversation compete with the related ones, and facts only a search found with
/// everything else recalled ([`Stability::Volatile`]). The newest
/// [`HydrationConfig::keep_recent`] messages are kept first (High priority) even when they
/// do not fit in the conversation's room. A candidate saying what the caller's prompt
/// already holds ([`HydrateInput::present`]) is left out. Each source's report is added to
/// `reports` with what it kept.
fn merge(
    config: &HydrationConfig,
    input: &HydrateInput,
    context_room: u32,
    cues: &QueryCues,
    mut collected: Vec<Collected>,
    reports_out: &mut Vec<SourceReport>,
) -> Result<Merged> {
    let question = input.request.observation.as_str();
    let mut retrieved = Vec::new();
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
    let present: HashSet<&str> = input.present.iter().map(|t| t.trim()).collect();
    let mut candidates: Vec<Candidate> = Vec::new();
    let mut at: HashMap<MemoryId, usize> = HashMap::new();
    for c in &mut collected {
        for mut item in std::mem::take(&mut c.items) {
            // The graph's similarity orders its own items (direct mentions before hops); it
            // is not a search's match to the observation, so it neither outranks a search
            // hit nor claims room of its own: a memory only the graph found competes as one
            // the searches saw and did not match.
            if c.kind == SourceKind::Graph {
                item.similarity = None;
                item.lifted_from = None;
            }
            if !present.is_empty() && present.contains(item.content.trim()) {
                c.report.duplicates += 1;
                continue;
            }
            if let Some(id) = item.memory_id
                && let Some(&i) = at.get(&id)
            {
                let cand = &mut candidates[i];
                cand.found_by.push(c.kind);
                if let Some(note) = item.note.take() {
                    cand.notes.push((c.kind, note));
                }
                if item.similarity.unwrap_or(f32::MIN) > cand.item.similarity.unwrap_or(f32::MIN) {
                    cand.item.similarity = item.similarity;
                    cand.item.lifted_from = item.lifted_from;
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
                notes: Vec::new(),
            });
        }
    }
    if !cues.is_empty() {
        mark_cues(&mut candidates, cues, config.cue_weights);
    }
    // The conversation, oldest first.
    let mut conversation: Vec<usize> = (0..candidates.len())
        .filter(|&i| candidates[i].kind == SourceKind::Temporal)
        .collect();
    conversation.sort_by(|&a, &b| {
        let (a, b) = (&candidates[a].item, &candidates[b].item);
        a.created_at.cmp(&b.created_at).then(a.key.cmp(&b.key))
    });
    let room = config.conversation_room(context_room);
    let previous = input.previous.as_ref().map(|p| p.conversation_from);
    let anchor = previous.flatten();
    let costs: Vec<u32> = conversation
        .iter()
        .map(|&i| {
            let line = render::item_line(SourceKind::Temporal, &candidates[i].item);
            config.tokenizer.count(&line).saturating_add(1)
        })
        .collect();
    let ids: Vec<Option<MemoryId>> = conversation
        .iter()
        .map(|&i| candidates[i].item.memory_id)
        .collect();
    let start = conversation_window(&costs, &ids, room, previous, config.keep_recent);
    let window: HashSet<usize> = conversation[start..].iter().copied().collect();
    let conversation_from = conversation
        .get(start)
        .and_then(|&i| candidates[i].item.memory_id);
    let conversation_kept = anchor.is_some() && conversation_from == anchor;
    // The newest messages are kept first, in the window or not.
    let mut tail: HashSet<usize> = conversation
        .iter()
        .rev()
        .take(config.keep_recent)
        .copied()
        .collect();
    tail.extend(window.iter().copied());
    let mut reports: BTreeMap<SourceKind, SourceReport> =
        collected.into_iter().map(|c| (c.kind, c.report)).collect();
    // Older messages of the conversation are recalled like related ones: in the block of
    // the next source that found them (which counts them as its own, no longer a duplicate
    // of the conversation's), or among related messages. One no search found for this
    // message shows no sign of being worth its tokens: under a relevance floor it stays out
    // (counted as over the conversation's limits).
    let floored =
        config.relevance_floor > 0.0 || input.request.strategy.relevance_floor.get() > 0.0;
    let mut report_as: HashMap<usize, SourceKind> = HashMap::new();
    let mut left_out: HashSet<usize> = HashSet::new();
    for &i in &conversation[..start] {
        let next = candidates[i]
            .found_by
            .iter()
            .copied()
            .find(|k| *k != SourceKind::Temporal);
        if floored && next.is_none() && !tail.contains(&i) {
            left_out.insert(i);
            if let Some(r) = reports.get_mut(&SourceKind::Temporal) {
                r.over_limits += 1;
            }
        }
        candidates[i].kind = next.unwrap_or(SourceKind::Semantic);
        if let Some(kind) = next {
            let cand = &mut candidates[i];
            if let Some((_, note)) = cand.notes.iter().find(|(k, _)| *k == kind) {
                cand.item.note = Some(note.clone());
            }
            report_as.insert(i, kind);
            if let Some(r) = reports.get_mut(&kind) {
                r.duplicates = r.duplicates.saturating_sub(1);
            }
        }
    }
    let slow = stable_knowledge(&candidates, config.knowledge_limit);
    let relevance: Vec<Relevance> = candidates
        .iter()
        .enumerate()
        .map(|(i, cand)| {
            let unmatched = match cand.kind {
                SourceKind::Temporal | SourceKind::Graph => unmatched_message,
                SourceKind::Semantic if cand.found_by.first() == Some(&SourceKind::Temporal) => {
                    unmatched_message
                }
                SourceKind::Knowledge => unmatched_fact,
                _ => config.unmatched_relevance,
            };
            relevance_of(cand, tail.contains(&i), unmatched, config.cue_weights)
        })
        .collect();
    // What each text holds (its words, its passages and their terms), read once per text
    // and kept across prompts.
    let facts: Vec<Arc<TextFacts>> = candidates
        .iter()
        .map(|c| config.texts.facts(&c.item.content))
        .collect();
    let collapsed = match config.near_duplicate {
        Some(t) => near_duplicates(&candidates, &facts, &relevance, &tail, t),
        None => HashSet::new(),
    };
    // Long items are marked out in passages scored against the question when excerpts are on.
    let question_terms = config.excerpts.then(|| passages::terms(question));
    // Section ids are `kind:key`; gathering keeps one item per key and kind, and this
    // keeps it so, whatever a source returned: a repeat is a duplicate, never an error.
    let mut section_ids: HashSet<String> = HashSet::new();
    for (i, cand) in candidates.into_iter().enumerate() {
        if left_out.contains(&i) {
            continue;
        }
        // Counted under the kind that found it first (or the search that found an older
        // message of the conversation).
        let reported = report_as
            .get(&i)
            .copied()
            .or(cand.found_by.first().copied())
            .unwrap_or(cand.kind);
        if collapsed.contains(&i) {
            if let Some(report) = reports.get_mut(&reported) {
                report.near_duplicates += 1;
            }
            continue;
        }
        let stability = if window.contains(&i) {
            Stability::Growing
        } else if slow.contains(&i) {
            Stability::Slow
        } else {
            Stability::Volatile
        };
        // The conversation is kept whole, as it was in the prompt before.
        let terms = match stability {
            Stability::Growing => None,
            _ => question_terms.as_deref(),
        };
        let (mut section, passages) = item_section(
            &cand,
            &facts[i],
            terms,
            tail.contains(&i),
            relevance[i],
            stability,
        )?;
        if !section_ids.insert(section.id().to_owned()) {
            if let Some(report) = reports.get_mut(&reported) {
                report.duplicates += 1;
            }
            continue;
        }
        let tokens = section.count_tokens(config.tokenizer.as_ref());
        if let Some(report) = reports.get_mut(&reported) {
            report.kept += 1;
            report.tokens = report.tokens.saturating_add(tokens);
        }
        retrieved.push((cand, section, passages));
    }
    reports_out.extend(reports.into_values());
    Ok(Merged {
        retrieved,
        conversation_from,
        conversation_kept,
    })
}

/// Where the conversation block starts among messages of `costs` tokens each, oldest first
/// (`ids` their memories), given `room` tokens for it and what the previous prompt of the
/// conversation said (`previous`: where its block started, if it had one):
///
/// - where the previous prompt's started while everything from there fits, so the block
///   grows by appending;
/// - when it outgrew its room (or its first message is gone), again, holding at most half the
///   room, so the next prompts append to it for a while rather than slide it a message at a
///   time;
/// - with no previous prompt (nothing to extend: a first message, a dry run), the newest
///   `newest` messages (those of them within half the room), from which it grows.
///
/// `costs.len()` when nothing fits.
fn conversation_window(
    costs: &[u32],
    ids: &[Option<MemoryId>],
    room: u32,
    previous: Option<Option<MemoryId>>,
    newest: usize,
) -> usize {
    // Tokens from each message to the newest.
    let mut from = vec![0u32; costs.len() + 1];
    for i in (0..costs.len()).rev() {
        from[i] = from[i + 1].saturating_add(costs[i]);
    }
    let fits = |i: usize, room: u32| from[i] <= room;
    match previous {
        Some(Some(a)) => {
            if let Some(p) = ids.iter().position(|id| *id == Some(a))
                && fits(p, room)
            {
                return p;
            }
        }
        Some(None) => {}
        None => {
            let start = costs.len().saturating_sub(newest);
            return (start..costs.len())
                .find(|&i| fits(i, room / 2))
                .unwrap_or(costs.len());
        }
    }
    match (0..costs.len()).find(|&i| fits(i, room / 2)) {
        Some(i) => i,
        // The newest alone takes more than half the room: it alone, if it fits.
        None if costs.last().is_some_and(|&c| c <= room) => costs.len() - 1,
        None => costs.len(),
    }
}

/// The knowledge candidates that are the same whatever the message: the person's newest
/// `limit` facts, pinned facts and standing instructions. A fact older than those that a
/// search found for this message is recalled for it alone.
fn stable_knowledge(candidates: &[Candidate], limit: usize) -> HashSet<usize> {
    let mut facts: Vec<usize> = (0..candidates.len())
        .filter(|&i| candidates[i].kind == SourceKind::Knowledge)
        .collect();
    let (always, mut dated): (Vec<usize>, Vec<usize>) = facts.drain(..).partition(|&i| {
        let item = &candidates[i].item;
        item.pinned || item.memory_kind == Some(memory_core::MemoryKind::Message)
    });
    dated.sort_by(|&a, &b| {
        let (a, b) = (&candidates[a].item, &candidates[b].item);
        b.created_at.cmp(&a.created_at).then(a.key.cmp(&b.key))
    });
    always
        .into_iter()
        .chain(dated.into_iter().take(limit))
        .collect()
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
    facts: &[Arc<TextFacts>],
    relevance: &[Relevance],
    protected: &HashSet<usize>,
    threshold: f64,
) -> HashSet<usize> {
    let sets = rarest_first(facts.iter().map(|f| f.words.clone()).collect());
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

/// `sets` with every word renamed to its rank in one global order, rarest among the sets
/// first (ties by hash), each set sorted again. Jaccard is unchanged (renaming is one to one),
/// but a set's prefix in [`collapse`] is now its rarest words: the words most sets share
/// ("the", "and") index long lists, and starting from them compared nearly every pair of
/// long texts.
fn rarest_first(mut sets: Vec<Vec<u64>>) -> Vec<Vec<u64>> {
    let mut count: HashMap<u64, u32> = HashMap::new();
    for w in sets.iter().flatten() {
        *count.entry(*w).or_default() += 1;
    }
    let mut words: Vec<(u32, u64)> = count.iter().map(|(&w, &n)| (n, w)).collect();
    words.sort_unstable();
    let rank: HashMap<u64, u64> = words
        .iter()
        .zip(0u64..)
        .map(|(&(_, w), r)| (w, r))
        .collect();
    for set in &mut sets {
        for w in set.iter_mut() {
            *w = rank.get(w).copied().unwrap_or(*w);
        }
        set.sort_unstable();
    }
    sets
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
        c.cues = cues.lifting(&c.item.content, c.item.created_at, c.item.role, w);
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

/// The section for one candidate. Its relevance is what the observation asked for: the
/// best similarity a search found, or `unmatched` when no search matched it (see
/// [`Gathered::merge`]); its recency is when it was said or learned (pinned memories are
/// undated: they do not age), and compression weighs the two with the strategy's recency
/// decay. Retrieved memories share one priority, so value decides between sources;
/// `protected` (the newest messages of the conversation) and pinned facts rank High.
///
/// With a `question` (excerpts on), a long item is marked out in passages scored against
/// it, so compile keeps the passages that answer it when the whole does not fit; the
/// passages are returned as character ranges of the item's text (none for a short item).
fn item_section(
    cand: &Candidate,
    facts: &TextFacts,
    question: Option<&[String]>,
    protected: bool,
    relevance: Relevance,
    stability: Stability,
) -> Result<(Section, Vec<(usize, usize)>)> {
    let (kind, item) = (cand.kind, &cand.item);
    // One rendering: the passages only mark where each piece lands in the same line.
    let ranges: &[std::ops::Range<usize>] = match question {
        Some(_) => &facts.passages,
        None => &[],
    };
    let (line, spans) = render::item_line_in_passages(kind, item, ranges);
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
    .with_priority(priority)
    .with_stability(stability);
    if !item.pinned
        && let Some(at) = item.created_at
    {
        s = s.with_recency(at.to_datetime());
    }
    if let Some(question) = question
        && long
        && spans.len() >= 2
    {
        let scores = passages::score_terms(question, &facts.terms);
        let marked = spans
            .iter()
            .zip(scores)
            .map(|(span, score)| Passage {
                start: span.start,
                end: span.end,
                score,
            })
            .collect();
        s = s.with_passages(marked)?;
        let chars = facts.chars.clone();
        return Ok((s, chars));
    }
    // The conversation is kept whole or not at all: a cut would change it for the next prompt.
    if long && stability != Stability::Growing {
        s = s.with_min_tokens(MIN_ITEM_TOKENS);
    }
    Ok((s, Vec::new()))
}

#[cfg(test)]
mod tests;
