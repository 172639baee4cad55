//! Standing instructions: what a user tells the assistant to do from now on ("Always include
//! version numbers when I ask about libraries.", "Never use jargon."). Such a message says
//! nothing a later question repeats, so no search finds it when it applies; hydrate's write
//! paths mark it instead ([`with_instruction_mark`]: the [`INSTRUCTION_TAG`] tag, pinned), and
//! the knowledge source brings the scope's marked messages to every prompt, ahead of what a
//! search found (pinned knowledge ranks High).
//!
//! Recognised without a model, in English: a user's message of at most
//! [`MAX_INSTRUCTION_CHARS`] characters whose first sentence is not a question and opens (after
//! a "please", "also", "ok" ...) with a standing word: "always" or "never" followed by a verb,
//! "from now on", "going forward", "in the future", "don't ever", "make sure to always" and
//! the like, or "whenever I ..., always ...". "Never mind", "always wanted to" or "always good
//! to hear" are not instructions.

use memory_core::{MemoryKind, NewMemory, Role, Tag};

/// The tag of a user's standing instruction.
pub const INSTRUCTION_TAG: &str = "instruction";

/// The longest message taken for a standing instruction, in characters: an instruction is a
/// sentence or two, and a long message that opens with "always" is a request about something
/// else.
pub const MAX_INSTRUCTION_CHARS: usize = 400;

/// Openings that make a standing instruction whatever follows.
const OPENINGS: [&str; 16] = [
    "from now on",
    "from here on",
    "going forward",
    "in the future",
    "in future",
    "henceforth",
    "don't ever",
    "do not ever",
    "remember to always",
    "remember to never",
    "make sure to always",
    "make sure to never",
    "make sure you always",
    "make sure you never",
    "be sure to always",
    "be sure to never",
];

/// Words before the instruction proper that do not change it.
const FILLERS: [&str; 9] = [
    "please", "also", "and", "ok", "okay", "so", "btw", "oh", "just",
];

/// Words after "always" / "never" that make a statement, not an instruction: participles
/// ("never been", "always wanted") and the adjectives of small talk ("always good to hear").
const NOT_A_VERB: [&str; 24] = [
    "been",
    "seen",
    "done",
    "had",
    "heard",
    "thought",
    "knew",
    "got",
    "gotten",
    "mind",
    "understood",
    "made",
    "written",
    "taken",
    "known",
    "felt",
    "good",
    "nice",
    "great",
    "happy",
    "glad",
    "fun",
    "a",
    "the",
];

/// Whether `text` reads as a standing instruction (see the module docs).
pub fn is_standing_instruction(text: &str) -> bool {
    let text = text.trim();
    if text.is_empty() || text.chars().count() > MAX_INSTRUCTION_CHARS {
        return false;
    }
    let end = text
        .find(['.', '!', '?', '\n'])
        .map_or(text.len(), |i| i + 1);
    let sentence = text[..end].trim().to_lowercase();
    if sentence.ends_with('?') {
        return false;
    }
    let words: Vec<&str> = sentence
        .split_whitespace()
        .map(|w| w.trim_matches(|c: char| matches!(c, ',' | ':' | ';' | '-' | '.' | '!')))
        .filter(|w| !w.is_empty())
        .collect();
    let start = words
        .iter()
        .position(|w| !FILLERS.contains(w))
        .unwrap_or(words.len());
    let words = &words[start..];
    let rest = words.join(" ");
    if OPENINGS
        .iter()
        .any(|o| rest.strip_prefix(o).is_some_and(|r| r.starts_with(' ')))
    {
        return true;
    }
    match words {
        [first, next, ..] if matches!(*first, "always" | "never") => {
            !NOT_A_VERB.contains(next) && !next.ends_with("ed")
        }
        // "Whenever I ask about deadlines, always use ...": the condition, then the rule.
        [first, who, ..] if matches!(*first, "when" | "whenever") && matches!(*who, "i" | "we") => {
            let clause = sentence.split_once(',').map_or("", |(_, c)| c.trim_start());
            let clause = clause.strip_prefix("please ").unwrap_or(clause);
            clause.starts_with("always ") || clause.starts_with("never ")
        }
        _ => false,
    }
}

/// `memory` marked as a standing instruction when it is one: a user's message whose text
/// [`is_standing_instruction`] gets the [`INSTRUCTION_TAG`] tag and is pinned (never pruned,
/// never decays). Anything else is returned unchanged.
pub fn with_instruction_mark(memory: NewMemory) -> NewMemory {
    if memory.kind != MemoryKind::Message
        || memory.role != Some(Role::User)
        || !is_standing_instruction(&memory.content)
    {
        return memory;
    }
    match Tag::new(INSTRUCTION_TAG) {
        Ok(tag) => memory.with_tag(tag).pinned(),
        // The tag is a valid constant; a failure here would leave the message as it was.
        Err(_) => memory,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instructions_are_told_from_statements_and_requests() {
        for yes in [
            "Always include version numbers when I ask about software dependencies.",
            "Please always answer in French.",
            "ok, never use jargon with me",
            "From now on, call me Sam.",
            "Don't ever suggest jQuery.",
            "Whenever I ask about deadlines, always give the date as month-day-year.",
            "Also: make sure to always cite sources!",
        ] {
            assert!(is_standing_instruction(yes), "{yes}");
        }
        for no in [
            "Never mind, I found it.",
            "Always good to hear! See you later!",
            "I always wanted to learn Rust.",
            "Always wanted to try that place.",
            "Never been to Porto, is it nice?",
            "Always use tabs?",
            "When I run the script, it crashes.",
            "Can you always include tests?",
            "",
        ] {
            assert!(!is_standing_instruction(no), "{no}");
        }
        let long = format!("Always {}", "do this and that. ".repeat(30));
        assert!(!is_standing_instruction(&long), "over the length limit");
    }

    #[test]
    fn only_a_users_message_is_marked() {
        let text = "Always include version numbers when I ask about libraries.";
        let marked = with_instruction_mark(NewMemory::new(text).with_role(Role::User));
        assert!(marked.pinned);
        assert!(marked.tags.iter().any(|t| t.as_str() == INSTRUCTION_TAG));
        for other in [
            NewMemory::new(text).with_role(Role::Assistant),
            NewMemory::new(text),
            NewMemory::new(text)
                .with_role(Role::User)
                .with_kind(MemoryKind::Fact),
            NewMemory::new("Hello there").with_role(Role::User),
        ] {
            let same = with_instruction_mark(other.clone());
            assert_eq!(same, other);
        }
    }
}
