//! Whether a message's evidence is in a compiled prompt, and how much of its text: the line
//! `compile` writes for it, its excerpts as the explain report names them, its head.

use hydrate::{Block, CompiledPrompt, day_header, escape_data};
use memory_core::{MemoryId, Timestamp};
use prompt_ir::Action;

use crate::locomo::Turn;

/// A message as the prompt shows it: its text, who said it, when.
pub(super) trait Said {
    fn text(&self) -> &str;
    fn role(&self) -> memory_core::Role;
    fn said_at(&self) -> Timestamp;
}

impl Said for Turn {
    fn text(&self) -> &str {
        &self.text
    }
    fn role(&self) -> memory_core::Role {
        self.role
    }
    fn said_at(&self) -> Timestamp {
        self.chat_at
    }
}

/// One stored memory of a turn: the whole turn, or one of the linked parts of a turn
/// longer than the store takes in one memory.
pub(super) struct Part {
    pub(super) id: MemoryId,
    pub(super) text: String,
    pub(super) role: memory_core::Role,
    pub(super) at: Timestamp,
}

impl Said for Part {
    fn text(&self) -> &str {
        &self.text
    }
    fn role(&self) -> memory_core::Role {
        self.role
    }
    fn said_at(&self) -> Timestamp {
        self.at
    }
}

/// How `compile` writes a chat turn into a `<recalled-memory>` block: the header of its day
/// (`[2023-05-08 Mon]`) and, under it, the line `- role: escaped text` after a line break
/// (a block's items always are), with the time of day after the dash (`- 13:56 role: ...`)
/// in the recent conversation. Returns the header and both forms of the line's start.
pub(super) fn turn_line(turn: &impl Said) -> (String, [String; 2]) {
    let text = escape_data(turn.text());
    let role = turn.role().as_str();
    (
        day_header(turn.said_at()),
        [
            format!("\n- {role}: {text}"),
            format!(
                "\n- {} {role}: {text}",
                turn.said_at().to_datetime().format("%H:%M")
            ),
        ],
    )
}

/// Whether one of `texts` holds `turn`'s whole line under the header of its day: the text
/// ends the line, or a note in parentheses follows it (`(mentions Porto)`). A truncated
/// line does not count; the date keeps equal texts apart.
pub(super) fn line_in<'a>(texts: impl IntoIterator<Item = &'a str>, turn: &impl Said) -> bool {
    let (day, lines) = turn_line(turn);
    texts.into_iter().any(|t| {
        lines.iter().any(|line| {
            t.match_indices(line.as_str()).any(|(at, _)| {
                let after = &t[at + line.len()..];
                if !(after.starts_with('\n') || after.starts_with(" (")) {
                    return false;
                }
                // The nearest header above the line: headers are the only lines starting `[`.
                let above = &t[..=at];
                above.rfind("\n[").is_some_and(|h| {
                    above[h + 1..]
                        .split('\n')
                        .next()
                        .is_some_and(|header| header == day)
                })
            })
        })
    })
}

/// Whether `turn` is in one of `prompt`'s data messages (never the observation).
pub(super) fn in_prompt(prompt: &CompiledPrompt, turn: &impl Said) -> bool {
    line_in(data_texts(prompt), turn)
}

/// The data messages of `prompt` (never the observation).
pub(super) fn data_texts(prompt: &CompiledPrompt) -> impl Iterator<Item = &str> {
    prompt
        .messages
        .iter()
        .zip(&prompt.layout)
        .filter(|(_, b)| matches!(b, Block::Data(_)))
        .map(|(m, _)| m.content.as_str())
}

/// The share of `turn`'s text (its passages' characters, whitespace between them left out)
/// that is in `prompt`: 1 for the whole line; for an excerpt the passages the explain report
/// names (`excerpt`), each counted only if its escaped text is in a data message; otherwise
/// the longest head of the line that is there (`- role: ` and the start of the text). The
/// second value is whether the report named a passage that is not in the prompt.
pub(super) fn coverage(prompt: &CompiledPrompt, turn: &impl Said, id: MemoryId) -> (f64, bool) {
    if in_prompt(prompt, turn) {
        return (1.0, false);
    }
    let text = turn.text();
    let total = text_chars(text);
    if total == 0 {
        return (0.0, false);
    }
    let data: Vec<&str> = data_texts(prompt).collect();
    let excerpt = prompt
        .report
        .sections
        .iter()
        .find(|s| s.memory_id == Some(id))
        .and_then(|s| s.excerpt.as_ref());
    if let Some(kept) = excerpt {
        let chars: Vec<char> = text.chars().collect();
        let (mut found, mut missing) = (0usize, false);
        for &(a, b) in kept {
            let piece: String = chars.get(a..b).unwrap_or_default().iter().collect();
            if data.iter().any(|d| d.contains(&escape_data(&piece))) {
                found += b - a;
            } else {
                missing = true;
            }
        }
        return ((found as f64 / total as f64).min(1.0), missing);
    }
    // A head: the longest prefix of the line (by characters) found in a data message.
    let role = turn.role().as_str();
    let present = |n: usize| {
        let head: String = text.chars().take(n).collect();
        let line = format!("\n- {role}: {}", escape_data(&head));
        data.iter().any(|d| d.contains(&line))
    };
    let (mut lo, mut hi) = (0usize, text.chars().count());
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if present(mid) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    // A head of a few characters is a coincidence (`- user: I`), not the message.
    let head = if lo >= 20 { lo } else { 0 };
    ((head as f64 / total as f64).min(1.0), false)
}

/// The characters of `text`'s passages (the whitespace between them left out).
pub(super) fn text_chars(text: &str) -> usize {
    hydrate::passages(text)
        .iter()
        .map(|r| text[r.clone()].chars().count())
        .sum()
}

/// [`coverage`] of a turn stored in `parts`: each part's share weighed by its length.
pub(super) fn parts_coverage(prompt: &CompiledPrompt, parts: &[Part]) -> (f64, bool) {
    let total: usize = parts.iter().map(|p| text_chars(&p.text)).sum();
    let (mut covered, mut missing) = (0.0, false);
    for p in parts {
        let (share, m) = coverage(prompt, p, p.id);
        covered += share * text_chars(&p.text) as f64;
        missing |= m;
    }
    ((covered / total.max(1) as f64).min(1.0), missing)
}

/// What the explain report says of one memory: kept whole, or why not.
pub(super) fn report_action(
    prompt: &CompiledPrompt,
    id: MemoryId,
) -> Option<(&str, Action, f64, &str)> {
    prompt
        .report
        .sections
        .iter()
        .find(|s| s.memory_id == Some(id))
        .map(|s| {
            let score = s.scores.as_ref().map_or(0.0, |x| x.score);
            (s.block.as_str(), s.action, score, s.reason.as_str())
        })
}
