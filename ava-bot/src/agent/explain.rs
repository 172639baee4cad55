//! Rendering the explain report: why a prompt holds what it holds, as `/context`, `ava
//! context` and the inspector show it.

use std::collections::HashMap;
use std::fmt::Write as _;

use hydrate::preview;
use hydrate::{CompiledPrompt, ExplainReport};
use memory_core::{MemoryId, Scope};
use prompt_ir::Action;

use super::{Agent, Audience, find_memory};

impl Agent {
    /// [`render_report`] with a preview of each memory's text (looked up where a context of
    /// `scope` heard by `audience` reads).
    pub(crate) async fn explain(
        &self,
        scope: &Scope,
        audience: Audience,
        report: &ExplainReport,
    ) -> String {
        let scopes = self.ops(scope.clone(), audience).readable_scopes();
        let mut previews = HashMap::new();
        for id in report.sections.iter().filter_map(|s| s.memory_id) {
            // A memory deleted since just shows without text.
            if let Some(m) = find_memory(self.store().as_ref(), &scopes, id).await {
                previews.insert(id, preview(&m.content, 70));
            }
        }
        render_report(report, &previews)
    }
}

/// `, lifted by the talk around it (similarity 0.31 -> 0.66)` when the talk around a memory
/// lifted its similarity by enough to show at two decimals, else nothing.
pub(super) fn lift_mark(x: &hydrate::ScoreExplain) -> String {
    x.lifted_from
        .map(|l| {
            (
                format!("{l:.2}"),
                format!("{:.2}", x.similarity.unwrap_or(l)),
            )
        })
        .filter(|(from, to)| from != to)
        .map(|(from, to)| format!(", lifted by the talk around it (similarity {from} -> {to})"))
        .unwrap_or_default()
}

/// The explain report for people: budget, sources, what went in (with `previews` of their
/// text where known) and what was left out.
/// What a provider's prompt cache can make of a prompt, in one line for people.
pub(crate) fn cache_line(cache: &hydrate::CacheExplain) -> String {
    let shared = match cache.shared_prefix_tokens {
        Some(shared) => format!(
            "; {shared} of its {} tokens repeat the previous prompt's start{}",
            cache.prompt_tokens,
            if cache.hit {
                " (its stable part whole: a provider's cache can serve it)"
            } else {
                ""
            }
        ),
        None => "; no previous prompt to compare with".to_owned(),
    };
    format!(
        "cache: the stable part is the first {} message(s), {} tokens; with the conversation {} \
         message(s), {} tokens{shared}",
        cache.stable_messages,
        cache.stable_tokens,
        cache.through_conversation,
        cache.through_conversation_tokens,
    )
}

pub(super) fn render_report(
    report: &ExplainReport,
    previews: &HashMap<MemoryId, String>,
) -> String {
    let mut out = String::new();
    let b = &report.budget;
    let _ = writeln!(
        out,
        "tokens: {} of {} available ({} budget, {} reserved, allocation {}){}",
        report.estimated_prompt_tokens,
        b.available,
        b.total,
        b.reserved,
        b.allocation,
        if report.fits { "" } else { " -- DOES NOT FIT" }
    );
    let _ = writeln!(
        out,
        "sections: {} tokens before compression, {} after",
        report.tokens_before, report.tokens_after
    );
    if let Some(cues) = report.cues.describe() {
        let _ = writeln!(out, "question: {cues}");
    }
    let _ = writeln!(out, "{}", cache_line(&report.cache));
    let _ = writeln!(out, "sources:");
    for s in &report.sources {
        let _ = writeln!(
            out,
            "  {:<10} {:?}{} returned {}, kept {}, duplicates {}, over limits {}{}",
            s.kind.as_str(),
            s.status,
            s.search
                .as_deref()
                .map(|m| format!(" ({m})"))
                .unwrap_or_default(),
            s.returned,
            s.kept,
            s.duplicates,
            s.over_limits,
            match s.near_duplicates {
                0 => String::new(),
                n => format!(", near-duplicates {n}"),
            },
        );
    }
    let mut went_in = Vec::new();
    let mut left_out = Vec::new();
    for s in report.sections.iter().filter(|s| s.memory_id.is_some()) {
        let score = s
            .scores
            .as_ref()
            .map(|x| {
                let cues = x
                    .cues
                    .as_ref()
                    .map(|c| format!(", matches {c}"))
                    .unwrap_or_default();
                format!(", score {:.2}{cues}{}", x.score, lift_mark(x))
            })
            .unwrap_or_default();
        let id = s.memory_id.map(|i| i.to_string()).unwrap_or_default();
        let what = s
            .memory_id
            .and_then(|i| previews.get(&i))
            .map_or_else(|| s.label.clone(), |p| format!("\"{p}\""));
        match s.action {
            Action::Kept { tokens } => went_in.push(format!(
                "  + [{}] {what} ({tokens} tokens{score}, id {id})",
                s.block
            )),
            Action::Truncated { from, to } => went_in.push(match &s.excerpt {
                Some(kept) => {
                    let ranges: Vec<String> =
                        kept.iter().map(|(a, b)| format!("{a}-{b}")).collect();
                    format!(
                        "  ~ [{}] {what} (excerpt {from} -> {to} tokens: characters {}{score}, id {id})",
                        s.block,
                        ranges.join(", ")
                    )
                }
                None => format!(
                    "  ~ [{}] {what} (cut {from} -> {to} tokens{score}, id {id})",
                    s.block
                ),
            }),
            Action::Dropped { tokens } => left_out.push(format!(
                "  - [{}] {what} ({tokens} tokens{score}, id {id}): {}",
                s.block, s.reason
            )),
        }
    }
    let _ = writeln!(out, "memories in the prompt: {}", went_in.len());
    for line in &went_in {
        let _ = writeln!(out, "{line}");
    }
    let _ = writeln!(out, "memories dropped: {}", left_out.len());
    for line in &left_out {
        let _ = writeln!(out, "{line}");
    }
    if !report.degradations.is_empty() {
        let _ = writeln!(out, "degradations:");
        for d in &report.degradations {
            let _ = writeln!(out, "  ! {d}");
        }
    }
    out
}

/// The compiled messages for people, one block per message.
pub(crate) fn render_messages(prompt: &CompiledPrompt) -> String {
    let mut out = String::new();
    for (i, m) in prompt.messages.iter().enumerate() {
        let role = serde_json::to_value(m.role)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        let _ = writeln!(out, "--- message {} ({role}) ---\n{}", i + 1, m.content);
    }
    let names: Vec<&str> = prompt.tools.iter().map(|t| t.name.as_str()).collect();
    let _ = writeln!(out, "--- tools: {} ---", names.join(", "));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lift_is_marked_only_where_it_shows() {
        let scores = |from: Option<f64>, to: f64| hydrate::ScoreExplain {
            similarity: Some(to),
            lifted_from: from,
            ..Default::default()
        };
        assert_eq!(
            lift_mark(&scores(Some(0.31), 0.6624)),
            ", lifted by the talk around it (similarity 0.31 -> 0.66)"
        );
        assert_eq!(
            lift_mark(&scores(Some(0.001), 0.0012)),
            "",
            "0.00 -> 0.00 says nothing"
        );
        assert_eq!(lift_mark(&scores(None, 0.5)), "");
    }
}
