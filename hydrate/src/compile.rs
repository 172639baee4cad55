//! `compile`: a hydrated Prompt IR becomes chat messages and tool specs within the budget,
//! with an explain report.
//!
//! Layout of the messages, in order:
//!
//! 1. **system**: the system prompt and constraints: the *stable prefix*, byte-identical
//!    for every request with the same config (the tools, sent beside the messages, are part
//!    of it too), so providers can cache it;
//! 2. **system**: current state (time, project, user, goal);
//! 3. **user**, one per kind of recalled data (knowledge, related messages, ..., the recent
//!    conversation last): a `<recalled-memory>` block that says it is data, not
//!    instructions, with every item escaped ([`crate::escape_data`]) so it cannot close the
//!    block;
//! 4. **user**: the observation.
//!
//! The budget is enforced by the Prompt IR's `compress` on what is left of the available
//! budget after the framing (block headers, separators, about
//! [`MESSAGE_OVERHEAD_TOKENS`] per message), so the messages as sent fit.

use std::time::Instant;

use prompt_ir::{Action, ContentHash, PromptIR, TokenBudget, Tokenizer, compress};
use serde::Serialize;

use crate::chat::{ChatMessage, ChatRole, ToolSpec};
use crate::error::Result;
use crate::hydrate::{Block, Hydrated, HydrationConfig, canonical_json};
use crate::render::{self, BLOCK_CLOSE};
use crate::report::{
    BudgetExplain, Degradation, DegradationKind, ExplainReport, SectionExplain, ToolExplain,
};

/// Tokens a chat format adds around each message (role markers), as an estimate.
pub const MESSAGE_OVERHEAD_TOKENS: u32 = 4;

/// A prompt ready to send, with its explanation.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CompiledPrompt {
    /// The messages, stable prefix first.
    pub messages: Vec<ChatMessage>,
    /// What each message holds, one entry per message.
    pub layout: Vec<Block>,
    /// The tools to offer (part of the stable prefix).
    pub tools: Vec<ToolSpec>,
    /// What happened to every section, tool and source, and why.
    pub report: ExplainReport,
    /// The request's hash.
    pub request_hash: String,
}

fn block_of(hydrated: &Hydrated, ir: &PromptIR, id: &str) -> Block {
    hydrated
        .sections
        .get(id)
        .map(|i| i.block)
        .or_else(|| ir.section(id).map(|s| Block::of_source(s.source())))
        .unwrap_or(Block::State)
}

/// The sections of `ir` grouped by block: system, state, then data blocks in order of first
/// appearance.
fn grouped<'a>(hydrated: &Hydrated, ir: &'a PromptIR) -> Vec<(Block, Vec<&'a str>)> {
    let mut groups: Vec<(Block, Vec<&'a str>)> = Vec::new();
    for s in ir.sections() {
        let block = block_of(hydrated, ir, s.id());
        match groups.iter_mut().find(|(b, _)| *b == block) {
            Some((_, parts)) => parts.push(s.content()),
            None => groups.push((block, vec![s.content()])),
        }
    }
    groups.sort_by_key(|(b, _)| match b {
        Block::System => 0,
        Block::State => 1,
        Block::Data(_) => 2,
        Block::Observation => 3,
    });
    groups
}

/// Tokens of everything compile adds around sections, counted generously (one token per
/// separator).
fn framing(hydrated: &Hydrated, ir: &PromptIR, tokenizer: &dyn Tokenizer) -> u32 {
    let mut total = 0u32;
    for (block, parts) in grouped(hydrated, ir) {
        let n = u32::try_from(parts.len()).unwrap_or(u32::MAX);
        total = total.saturating_add(MESSAGE_OVERHEAD_TOKENS);
        total = total.saturating_add(match block {
            Block::System | Block::State | Block::Observation => n.saturating_sub(1),
            Block::Data(kind) => tokenizer
                .count(&render::block_open(kind, hydrated.partial.contains(&kind)))
                .saturating_add(tokenizer.count(BLOCK_CLOSE))
                .saturating_add(n.saturating_add(1)),
        });
    }
    if ir.observation().is_some() {
        total = total.saturating_add(MESSAGE_OVERHEAD_TOKENS);
    }
    total
}

fn render_messages(hydrated: &Hydrated, ir: &PromptIR) -> Vec<(Block, ChatMessage)> {
    let mut messages = Vec::new();
    for (block, parts) in grouped(hydrated, ir) {
        let message = match block {
            Block::System => ChatMessage::system(parts.join("\n\n")),
            Block::State => ChatMessage::system(parts.join("\n")),
            Block::Data(kind) => ChatMessage::user(render::block(
                kind,
                hydrated.partial.contains(&kind),
                &parts,
            )),
            // Sections never claim the observation's block; treat one that does as data.
            Block::Observation => ChatMessage::user(parts.join("\n")),
        };
        messages.push((block, message));
    }
    if let Some(o) = ir.observation() {
        messages.push((Block::Observation, ChatMessage::user(o.content())));
    }
    messages
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
    let tokenizer = config.tokenizer.as_ref();
    let budget = &hydrated.budget;
    let available = budget.available();
    let fit = |framing: u32| -> Result<_> {
        let for_sections = available.saturating_sub(framing).max(1);
        let section_budget =
            TokenBudget::new(for_sections)?.with_allocation(budget.allocation().clone());
        let compressed = compress(&section_budget, &hydrated.ir, tokenizer);
        let used = self::framing(hydrated, &compressed.ir, tokenizer);
        Ok((compressed, for_sections, used))
    };
    let mut framing = self::framing(hydrated, &hydrated.ir, tokenizer);
    let (mut compressed, mut for_sections, mut used) = fit(framing)?;
    // A block whose items were all dropped costs no framing: offer those tokens to the
    // sections once, and keep the result if it still fits with its own framing.
    if used < framing {
        let (retry, retry_for, retry_used) = fit(used)?;
        if retry.report.fits() && retry.report.tokens_after.saturating_add(retry_used) <= available
        {
            framing = used;
            (compressed, for_sections, used) = (retry, retry_for, retry_used);
        }
    }
    let ir = &compressed.ir;
    let outcome = &compressed.report;

    let (layout, messages): (Vec<Block>, Vec<ChatMessage>) =
        render_messages(hydrated, ir).into_iter().unzip();
    let tools: Vec<ToolSpec> = ir.tools().iter().map(ToolSpec::from).collect();

    let sections: Vec<SectionExplain> = outcome
        .sections
        .iter()
        .map(|o| {
            let info = hydrated.sections.get(&o.id);
            SectionExplain {
                id: o.id.clone(),
                label: o.label.clone(),
                block: block_of(hydrated, &hydrated.ir, &o.id).as_str().to_owned(),
                memory_id: info.and_then(|i| i.memory_id),
                priority: o.priority,
                value: o.value,
                action: o.action,
                reason: o.reason.to_string(),
                scores: info.and_then(|i| i.scores.clone()),
                found_by: info.map(|i| i.found_by.clone()).unwrap_or_default(),
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
    let tools_json = serde_json::to_value(&tools)
        .map(|v| canonical_json(&v))
        .unwrap_or_default();
    let prefix_hash = ContentHash::of(&format!("{prefix}\n{tools_json}")).to_string();
    // With the framing of what is actually rendered.
    let estimated = outcome.tokens_after.saturating_add(used);

    let report = ExplainReport {
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
    };

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
        let text = serde_json::to_string(&messages).unwrap_or_default();
        tracing::debug!(gen_ai.prompt = %text, "compiled prompt text");
    }
    span.record("gen_ai.prompt.sections", report.sections.len() - dropped);
    span.record("gen_ai.prompt.sections.truncated", truncated);
    span.record("gen_ai.prompt.sections.dropped", dropped);
    span.record("gen_ai.prompt.messages", messages.len());
    span.record("gen_ai.prompt.tokens_before", report.tokens_before);
    span.record("gen_ai.usage.input_tokens", estimated);
    span.record("gen_ai.prompt.fits", report.fits);
    span.record("duration_ms", started.elapsed().as_secs_f64() * 1e3);

    Ok(CompiledPrompt {
        messages,
        layout,
        tools,
        request_hash: report.request_hash.clone(),
        report,
    })
}

/// Hydrates and compiles in one call.
pub async fn prepare(
    config: &HydrationConfig,
    input: &crate::hydrate::HydrateInput,
) -> Result<CompiledPrompt> {
    let hydrated = crate::hydrate::hydrate(config, input).await?;
    compile(config, &hydrated)
}
