//! `compile`: a hydrated Prompt IR becomes chat messages and tool specs within the budget,
//! with an explain report.
//!
//! Layout of the messages, ordered by how often their content changes from one message of a
//! conversation to the next ([`Stability`]), so each prompt repeats the start of the one
//! before and a provider's prompt cache can serve that part:
//!
//! 1. **system**: the system prompt and constraints ([`Stability::Fixed`]): byte-identical
//!    for every request with the same config (the tools, sent beside the messages, are part
//!    of it too);
//! 2. **system**: who is talking, the project and goal; then **user** blocks of the
//!    person's newest facts and standing instructions, in the order they were told
//!    ([`Stability::Slow`]);
//! 3. **user**: the conversation, oldest first, which the next prompt extends
//!    ([`Stability::Growing`]);
//! 4. **user**, one per kind of data recalled for this message (facts a search found,
//!    related messages, graph, documents, web), then **system**: the current time
//!    ([`Stability::Volatile`]);
//! 5. **user**: the observation.
//!
//! Recalled data is in `<recalled-memory>` blocks that say it is data, not instructions,
//! with every item escaped ([`crate::escape_data`]) so it cannot close the block.
//!
//! The budget is enforced by the Prompt IR's `compress` on what is left of the available
//! budget after the framing (block headers, separators, about
//! [`MESSAGE_OVERHEAD_TOKENS`] per message), so the messages as sent fit. The report's
//! [`CacheExplain`] says where the stable part ends and, given the previous prompt of the
//! conversation ([`HydrateInput::after`](crate::HydrateInput::after)), how many of this
//! prompt's tokens repeat its start.

use std::collections::HashMap;
use std::time::Instant;

use prompt_ir::{
    Action, Compressed, ContentHash, PromptIR, PromptMeta, Section, Stability, TokenBudget,
    Tokenizer, compress,
};
use serde::Serialize;

use crate::cache::{CacheExplain, PreviousPrompt, PromptPrint};
use crate::chat::{ChatMessage, ChatRole, MESSAGE_OVERHEAD_TOKENS, ToolSpec};
use crate::config::{HydrateInput, HydrationConfig, canonical_json};
use crate::error::Result;
use crate::hydrate::{Block, Hydrated, hydrate};
use crate::render::{self, BLOCK_CLOSE};
use crate::report::{BudgetExplain, ExplainReport, SectionExplain, ToolExplain};
use crate::source::{Degradation, DegradationKind, SourceKind};

/// A prompt ready to send, with its explanation.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CompiledPrompt {
    /// The messages, stable prefix first.
    pub messages: Vec<ChatMessage>,
    /// What each message holds, one entry per message.
    pub layout: Vec<Block>,
    /// How often each message changes from one prompt of the conversation to the next, one
    /// entry per message.
    pub stability: Vec<Stability>,
    /// The messages' print, to give the next request of the conversation
    /// ([`CompiledPrompt::previous`]).
    pub print: PromptPrint,
    /// The compiled IR's meta: its tokens, how much compression took off, and whether a
    /// provider's prompt cache can serve its stable part (`cache_hit`, as
    /// [`CacheExplain::hit`]).
    pub meta: PromptMeta,
    /// The tools to offer (part of the stable prefix).
    pub tools: Vec<ToolSpec>,
    /// What happened to every section, tool and source, and why.
    pub report: ExplainReport,
    /// The request's hash.
    pub request_hash: String,
}

impl CompiledPrompt {
    /// What the next request of this conversation needs of this prompt
    /// ([`HydrateInput::after`](crate::HydrateInput::after)).
    pub fn previous(&self) -> PreviousPrompt {
        PreviousPrompt {
            print: self.print.clone(),
            conversation_from: self.report.cache.conversation_from,
            stable_tokens: self.report.cache.stable_tokens,
        }
    }
}

/// Where a section renders: how often it changes, and its block.
type Group = (Stability, Block);

/// Where a group's message goes: by stability, then (within it) who is talking first, the
/// data blocks in their order, and the clock last, right before the observation.
fn group_rank((stability, block): Group) -> (Stability, u8) {
    let at = match block {
        Block::System => 0,
        Block::State if stability == Stability::Volatile => 10,
        Block::State => 1,
        Block::Data(kind) => 2 + kind.render_rank(),
        Block::Observation => 11,
    };
    (stability, at)
}

fn block_of(hydrated: &Hydrated, ir: &PromptIR, id: &str) -> Block {
    hydrated
        .sections
        .get(id)
        .map(|i| i.block)
        .or_else(|| ir.section(id).map(|s| Block::of_source(s.source())))
        .unwrap_or(Block::State)
}

/// The sections of `ir` grouped by stability and block, in [`group_rank`] order; each with
/// the day header its line sits under, if any.
fn grouped<'a>(hydrated: &'a Hydrated, ir: &'a PromptIR) -> Vec<(Group, Vec<Part<'a>>)> {
    let mut groups: Vec<(Group, Vec<Part<'a>>)> = Vec::new();
    for s in ir.sections() {
        let (group, day) = placement(hydrated, s);
        let part = (day, s.content());
        match groups.iter_mut().find(|(g, _)| *g == group) {
            Some((_, parts)) => parts.push(part),
            None => groups.push((group, vec![part])),
        }
    }
    groups.sort_by_key(|(g, _)| group_rank(*g));
    groups
}

/// Where `section` (of the hydrated IR or a compressed copy) renders: its group and the day
/// header its line sits under, if any.
fn placement<'a>(hydrated: &'a Hydrated, section: &Section) -> (Group, Option<&'a str>) {
    match hydrated.sections.get(section.id()) {
        Some(info) => ((section.stability(), info.block), info.day.as_deref()),
        None => (
            (section.stability(), Block::of_source(section.source())),
            None,
        ),
    }
}

/// A section's text and the day header it sits under.
type Part<'a> = (Option<&'a str>, &'a str);

fn contents<'a>(parts: &[Part<'a>]) -> Vec<&'a str> {
    parts.iter().map(|&(_, text)| text).collect()
}

/// What compile adds around the sections of a hydrated IR, measured once per compile so
/// that the framing of any subset of them is a cheap sum: per section its block and day
/// header, and the token counts of each block's opening and closing and of each header.
struct Frame<'a> {
    /// Per section of the hydrated IR, in order.
    parts: Vec<(Group, Option<&'a str>)>,
    /// Block opening and closing, per kind of data block.
    data: Vec<(SourceKind, u32)>,
    /// Each header line (days, [`render::UNDATED`]) with its line break.
    headers: HashMap<&'a str, u32>,
    observation: bool,
}

impl<'a> Frame<'a> {
    fn new(hydrated: &'a Hydrated, tokenizer: &dyn Tokenizer) -> Self {
        let ir = &hydrated.ir;
        let mut parts = Vec::with_capacity(ir.sections().len());
        let mut data = Vec::new();
        let mut headers = HashMap::new();
        headers.insert(
            render::UNDATED,
            tokenizer.count(render::UNDATED).saturating_add(1),
        );
        for s in ir.sections() {
            let (group, day) = placement(hydrated, s);
            if let Block::Data(kind) = group.1
                && !data.iter().any(|(k, _)| *k == kind)
            {
                let open = render::block_open(kind, hydrated.partial.contains(&kind));
                let cost = tokenizer
                    .count(&open)
                    .saturating_add(tokenizer.count(BLOCK_CLOSE));
                data.push((kind, cost));
            }
            if let Some(d) = day {
                headers
                    .entry(d)
                    .or_insert_with(|| tokenizer.count(d).saturating_add(1));
            }
            parts.push((group, day));
        }
        Self {
            parts,
            data,
            headers,
            observation: ir.observation().is_some(),
        }
    }

    /// Tokens of everything compile adds around the sections `kept` says are rendered,
    /// counted generously (one token per separator): message overheads, block openings and
    /// closings, separators, and day headers as [`render::with_days`] writes them.
    fn cost(&self, kept: impl Iterator<Item = bool>) -> u32 {
        // Per group: (group, sections, current day run, header tokens).
        let mut blocks: Vec<(Group, u32, Option<&str>, u32)> = Vec::with_capacity(8);
        for (&(block, day), keep) in self.parts.iter().zip(kept) {
            if !keep {
                continue;
            }
            let i = match blocks.iter().position(|b| b.0 == block) {
                Some(i) => i,
                None => {
                    blocks.push((block, 0, None, 0));
                    blocks.len() - 1
                }
            };
            let Some(b) = blocks.get_mut(i) else { continue };
            b.1 = b.1.saturating_add(1);
            if let Some(h) = render::header_between(b.2, day) {
                b.3 =
                    b.3.saturating_add(self.headers.get(h).copied().unwrap_or(16));
            }
            b.2 = day;
        }
        let mut total = 0u32;
        for ((_, block), n, _, headers) in blocks {
            total = total.saturating_add(MESSAGE_OVERHEAD_TOKENS);
            total = total.saturating_add(match block {
                Block::System | Block::State | Block::Observation => n.saturating_sub(1),
                Block::Data(kind) => self
                    .data
                    .iter()
                    .find(|(k, _)| *k == kind)
                    .map_or(0, |(_, c)| *c)
                    .saturating_add(n.saturating_add(1))
                    .saturating_add(headers),
            });
        }
        if self.observation {
            total = total.saturating_add(MESSAGE_OVERHEAD_TOKENS);
        }
        total
    }

    /// The framing of what `report` kept of the hydrated IR.
    fn of(&self, report: &prompt_ir::CompressionReport) -> u32 {
        let kept = report
            .sections
            .iter()
            .map(|o| !matches!(o.action, Action::Dropped { .. }))
            .chain(std::iter::repeat(true));
        self.cost(kept)
    }
}

fn render_messages(hydrated: &Hydrated, ir: &PromptIR) -> Vec<(Group, ChatMessage)> {
    let mut messages = Vec::new();
    for ((stability, block), parts) in grouped(hydrated, ir) {
        let message = match block {
            Block::System => ChatMessage::system(contents(&parts).join("\n\n")),
            Block::State => ChatMessage::system(contents(&parts).join("\n")),
            Block::Data(kind) => ChatMessage::user(render::block(
                kind,
                hydrated.partial.contains(&kind),
                &render::with_days(&parts),
            )),
            // Sections never claim the observation's block; treat one that does as data.
            Block::Observation => ChatMessage::user(contents(&parts).join("\n")),
        };
        messages.push(((stability, block), message));
    }
    if let Some(o) = ir.observation() {
        messages.push((
            (Stability::Volatile, Block::Observation),
            ChatMessage::user(o.content()),
        ));
    }
    messages
}

/// The sections' compression and the framing around what it kept, as chosen by [`fit`].
struct Fitted {
    compressed: Compressed,
    /// Tokens compression was given: `available - framing` (at least 1).
    for_sections: u32,
    /// The framing of what was kept.
    used: u32,
    /// The framing reserved.
    framing: u32,
}

/// Fits a hydrated prompt into its budget and renders it; see the module docs.
pub fn compile(config: &HydrationConfig, hydrated: &Hydrated) -> Result<CompiledPrompt> {
    let span = tracing::info_span!(
        "compile",
        gen_ai.operation.name = "compile",
        gen_ai.request.max_tokens = hydrated.budget.total(),
        gen_ai.prompt.sections = tracing::field::Empty,
        gen_ai.prompt.sections.truncated = tracing::field::Empty,
        gen_ai.prompt.sections.dropped = tracing::field::Empty,
        gen_ai.prompt.messages = tracing::field::Empty,
        gen_ai.prompt.tokens_before = tracing::field::Empty,
        gen_ai.usage.input_tokens = tracing::field::Empty,
        gen_ai.prompt.fits = tracing::field::Empty,
        duration_ms = tracing::field::Empty,
    );
    let _entered = span.enter();
    let started = Instant::now();
    let mut fitted = fit(config, hydrated)?;
    let (groups, messages): (Vec<Group>, Vec<ChatMessage>) =
        render_messages(hydrated, &fitted.compressed.ir)
            .into_iter()
            .unzip();
    let (stability, layout): (Vec<Stability>, Vec<Block>) = groups.into_iter().unzip();
    let print = PromptPrint::of_messages(&messages, config.tokenizer.as_ref());
    let cache = cache_explain(hydrated, &stability, &print);
    fitted.compressed.ir.set_cache_hit(cache.hit);
    let ir = &fitted.compressed.ir;
    let meta = ir.meta().clone();
    let tools: Vec<ToolSpec> = ir.tools().iter().map(ToolSpec::from).collect();
    let report = explain(hydrated, &fitted, &messages, &tools, cache);
    trace(config, &span, &report, &messages);
    span.record("duration_ms", started.elapsed().as_secs_f64() * 1e3);

    Ok(CompiledPrompt {
        messages,
        layout,
        stability,
        print,
        meta,
        tools,
        request_hash: report.request_hash.clone(),
        report,
    })
}

/// Compresses the sections into what the budget leaves after their framing (block
/// openings, separators, day headers, message overheads), reserving as little framing as
/// still fits.
fn fit(config: &HydrationConfig, hydrated: &Hydrated) -> Result<Fitted> {
    let tokenizer = config.tokenizer.as_ref();
    let budget = &hydrated.budget;
    let available = budget.available();
    let frame = Frame::new(hydrated, tokenizer);
    let attempt = |framing: u32| -> Result<_> {
        let for_sections = available.saturating_sub(framing).max(1);
        let section_budget =
            TokenBudget::new(for_sections)?.with_allocation(budget.allocation().clone());
        let compressed = compress(&section_budget, &hydrated.ir, tokenizer);
        let used = frame.of(&compressed.report);
        Ok((compressed, for_sections, used))
    };
    // The framing of the whole IR bounds that of any part of it (dropping items never adds a
    // block, a separator or a day header), so the first fit fits. Emptied blocks and dropped
    // day runs free framing, and those tokens are offered to the sections: a binary search
    // for the least framing to reserve whose fit still fits with the framing it renders
    // with. Only a fit that fits is kept, and the one holding the most wins.
    let mut framing = frame.cost(std::iter::repeat(true));
    let (mut compressed, mut for_sections, mut used) = attempt(framing)?;
    // When what may not be cut overflows the room the whole framing leaves, the fit drops
    // the rest, whose blocks then need no framing: reserve less by the overflow (no less
    // than what that fit renders with) and fit again. Below that reserve nothing overflows,
    // so the search below holds.
    if !compressed.report.fits() {
        let excess: u32 = compressed
            .report
            .pools
            .iter()
            .filter_map(|p| p.overflow.map(|o| o.saturating_sub(p.cap)))
            .sum();
        let reserve = framing.saturating_sub(excess);
        if reserve >= used && reserve < framing {
            let (retry, retry_for, retry_used) = attempt(reserve)?;
            let total = retry.report.tokens_after.saturating_add(retry_used);
            if retry.report.fits() && total <= available {
                framing = reserve;
                (compressed, for_sections, used) = (retry, retry_for, retry_used);
            }
        }
    }
    let (mut lo, mut hi) = (used, framing);
    let mut best = compressed.report.tokens_after.saturating_add(used);
    // Nothing more can fit once what is left is less than the smallest dropped section.
    let smallest_dropped = |report: &prompt_ir::CompressionReport| {
        report
            .sections
            .iter()
            .filter_map(|o| match o.action {
                Action::Dropped { tokens } => Some(tokens),
                _ => None,
            })
            .min()
    };
    while lo < hi
        && compressed.report.fits()
        && smallest_dropped(&compressed.report).is_some_and(|t| t < available.saturating_sub(best))
    {
        let mid = lo + (hi - lo) / 2;
        let (retry, retry_for, retry_used) = attempt(mid)?;
        let total = retry.report.tokens_after.saturating_add(retry_used);
        if retry.report.fits() && total <= available {
            hi = mid;
            if total > best {
                best = total;
                framing = mid;
                (compressed, for_sections, used) = (retry, retry_for, retry_used);
            }
        } else {
            lo = mid + 1;
        }
    }
    Ok(Fitted {
        compressed,
        for_sections,
        used,
        framing,
    })
}

/// What a provider's cache can make of a prompt whose messages have `stability` and `print`:
/// where its stable part and its conversation end, and what it shares with the previous
/// prompt of the conversation.
fn cache_explain(
    hydrated: &Hydrated,
    stability: &[Stability],
    print: &PromptPrint,
) -> CacheExplain {
    let upto = |last: Stability| stability.iter().take_while(|s| **s <= last).count();
    let (stable_messages, through_conversation) = (upto(Stability::Slow), upto(Stability::Growing));
    let stable_tokens = print.tokens_of_first(stable_messages);
    let shared = hydrated
        .previous
        .as_ref()
        .map(|p| print.shared_with(&p.print));
    CacheExplain {
        prompt_tokens: print.tokens(),
        stable_messages,
        stable_tokens,
        through_conversation,
        through_conversation_tokens: print.tokens_of_first(through_conversation),
        conversation_from: hydrated.conversation_from,
        conversation_kept: hydrated.conversation_kept,
        shared_prefix_tokens: shared,
        hit: match (&hydrated.previous, shared) {
            (Some(p), Some(shared)) => p.stable_tokens > 0 && shared >= p.stable_tokens,
            _ => false,
        },
    }
}

/// The explain report of a fitted prompt: every section and tool with what happened to it,
/// the sources, and every degradation (hydrate's, and an overflow of what may not be cut).
fn explain(
    hydrated: &Hydrated,
    fitted: &Fitted,
    messages: &[ChatMessage],
    tools: &[ToolSpec],
    cache: CacheExplain,
) -> ExplainReport {
    let Fitted {
        compressed,
        for_sections,
        used,
        framing,
    } = fitted;
    let (for_sections, used, framing) = (*for_sections, *used, *framing);
    let outcome = &compressed.report;
    let budget = &hydrated.budget;
    let available = budget.available();
    let sections: Vec<SectionExplain> = outcome
        .sections
        .iter()
        .map(|o| {
            let info = hydrated.sections.get(&o.id);
            // The passages an excerpt kept, as character ranges of the memory's text.
            let excerpt = compressed
                .ir
                .section(&o.id)
                .and_then(|s| s.excerpt())
                .zip(info)
                .map(|(kept, i)| {
                    kept.iter()
                        .filter_map(|&k| i.passages.get(k).copied())
                        .collect::<Vec<_>>()
                });
            SectionExplain {
                id: o.id.clone(),
                label: o.label.clone(),
                block: block_of(hydrated, &hydrated.ir, &o.id).as_str().to_owned(),
                stability: hydrated
                    .ir
                    .section(&o.id)
                    .map_or(Stability::Volatile, Section::stability),
                memory_id: info.and_then(|i| i.memory_id),
                priority: o.priority,
                value: o.value,
                action: o.action,
                reason: o.reason.to_string(),
                scores: info.and_then(|i| i.scores.clone()),
                found_by: info.map(|i| i.found_by.clone()).unwrap_or_default(),
                excerpt,
            }
        })
        .collect();
    let tool_report: Vec<ToolExplain> = outcome
        .tools
        .iter()
        .map(|o| ToolExplain {
            name: o.id.clone(),
            priority: o.priority,
            action: o.action,
            reason: o.reason.to_string(),
        })
        .collect();

    let mut degradations = hydrated.degradations.clone();
    for pool in outcome.pools.iter().filter(|p| p.overflow.is_some()) {
        degradations.push(Degradation::new(
            DegradationKind::OverBudget,
            format!(
                "what may not be cut (system prompt, constraints, critical tools, the \
                 observation) takes {} tokens; {} were left after {framing} tokens of framing",
                pool.overflow.unwrap_or(0),
                pool.cap
            ),
        ));
    }

    let prefix = messages
        .first()
        .filter(|m| m.role == ChatRole::System)
        .map_or("", |m| m.content.as_str());
    let tools_json = serde_json::to_value(tools)
        .map(|v| canonical_json(&v))
        .unwrap_or_default();
    let prefix_hash = ContentHash::of(&format!("{prefix}\n{tools_json}")).to_string();
    // With the framing of what is actually rendered.
    let estimated = outcome.tokens_after.saturating_add(used);

    ExplainReport {
        request_hash: hydrated.request_hash.clone(),
        prefix_hash,
        tokenizer: outcome.tokenizer.clone(),
        budget: BudgetExplain {
            total: budget.total(),
            allocation: budget.allocation().to_string(),
            reserved: budget.reserved_tokens(),
            available,
            framing,
            for_sections,
        },
        cues: hydrated.cues.clone(),
        tokens_before: outcome.tokens_before,
        tokens_after: outcome.tokens_after,
        estimated_prompt_tokens: estimated,
        fits: outcome.fits() && estimated <= available,
        sections,
        tools: tool_report,
        sources: hydrated.sources.clone(),
        degradations,
        cache,
    }
}

/// Trace events of a compiled prompt: one per section, the prompt text if the config allows
/// it, and the span's totals.
fn trace(
    config: &HydrationConfig,
    span: &tracing::Span,
    report: &ExplainReport,
    messages: &[ChatMessage],
) {
    let count = |f: fn(&Action) -> bool| report.sections.iter().filter(|s| f(&s.action)).count();
    let dropped = count(|a| matches!(a, Action::Dropped { .. }));
    let truncated = count(|a| matches!(a, Action::Truncated { .. }));
    for s in &report.sections {
        let (action, tokens) = match s.action {
            Action::Kept { tokens } => ("kept", tokens),
            Action::Truncated { to, .. } => ("truncated", to),
            Action::Dropped { tokens } => ("dropped", tokens),
        };
        tracing::debug!(
            gen_ai.prompt.section.id = %s.id,
            gen_ai.prompt.section.block = %s.block,
            gen_ai.prompt.section.tokens = tokens,
            gen_ai.prompt.section.action = action,
            "prompt section"
        );
    }
    if config.trace_prompt_text {
        let text = serde_json::to_string(messages).unwrap_or_default();
        tracing::debug!(gen_ai.prompt = %text, "compiled prompt text");
    }
    span.record("gen_ai.prompt.sections", report.sections.len() - dropped);
    span.record("gen_ai.prompt.sections.truncated", truncated);
    span.record("gen_ai.prompt.sections.dropped", dropped);
    span.record("gen_ai.prompt.messages", messages.len());
    span.record("gen_ai.prompt.tokens_before", report.tokens_before);
    span.record("gen_ai.usage.input_tokens", report.estimated_prompt_tokens);
    span.record("gen_ai.prompt.fits", report.fits);
}

/// Hydrates and compiles in one call.
pub async fn prepare(config: &HydrationConfig, input: &HydrateInput) -> Result<CompiledPrompt> {
    let hydrated = hydrate(config, input).await?;
    compile(config, &hydrated)
}
