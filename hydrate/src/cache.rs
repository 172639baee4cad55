//! What a provider's prompt cache can reuse: a prompt's [`PromptPrint`] (each line's hash and
//! tokens), the prefix two prompts of one conversation share, and where a prompt's stable
//! part ends ([`CacheExplain`]).
//!
//! Providers bill the part of a prompt that repeats the start of an earlier one (its
//! *prefix*) at a fraction of its price and answer it sooner. A prompt compiled by
//! [`crate::compile`] puts what changes least first, so the next prompt of the conversation
//! repeats it; the print of one prompt, given with the next request
//! ([`crate::HydrateInput::after`]), says how much of the new one a cache could serve.

use std::fmt;

use memory_core::MemoryId;
use prompt_ir::Tokenizer;
use serde::{Deserialize, Serialize};

use crate::chat::{ChatMessage, ChatRole, MESSAGE_OVERHEAD_TOKENS};

/// A prompt as a provider's cache sees it, line by line: each message's role and each line of
/// its text, as a hash with the line's tokens. Two prompts share a prefix as long as their
/// lines are equal. A print holds no text, so keeping it (as prompt records do) keeps nothing
/// a person said.
///
/// Serialized as one string, `hash:tokens` per line (the hash in 8 hex digits), so a record
/// of a long prompt stays small.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct PromptPrint {
    lines: Vec<Line>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Line {
    hash: u32,
    tokens: u32,
    /// The line that opens a message (its role).
    opens: bool,
}

/// 32-bit FNV-1a of `bytes`: enough to tell one line of a prompt from another.
fn fnv32(bytes: &[u8]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for &b in bytes {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// The hash of the line that opens a message of `role`: a byte no text line holds first, so
/// it never equals a line of text.
fn role_hash(role: &str) -> u32 {
    let mut bytes = Vec::with_capacity(role.len() + 1);
    bytes.push(0x01);
    bytes.extend_from_slice(role.as_bytes());
    fnv32(&bytes)
}

impl PromptPrint {
    /// The print of `messages` (each a role and its text, in order), counting each line's
    /// tokens with `tokenizer` and [`MESSAGE_OVERHEAD_TOKENS`] for each message's framing.
    pub fn of<'a>(
        messages: impl IntoIterator<Item = (&'a str, &'a str)>,
        tokenizer: &dyn Tokenizer,
    ) -> Self {
        let mut lines = Vec::new();
        for (role, text) in messages {
            lines.push(Line {
                hash: role_hash(role),
                tokens: MESSAGE_OVERHEAD_TOKENS,
                opens: true,
            });
            for line in text.split('\n') {
                lines.push(Line {
                    hash: fnv32(line.as_bytes()),
                    // The line and its line break.
                    tokens: tokenizer.count(line).saturating_add(1),
                    opens: false,
                });
            }
        }
        Self { lines }
    }

    /// The print of compiled chat messages.
    pub fn of_messages(messages: &[ChatMessage], tokenizer: &dyn Tokenizer) -> Self {
        Self::of(
            messages
                .iter()
                .map(|m| (role_name(m.role), m.content.as_str())),
            tokenizer,
        )
    }

    /// Its tokens, as the lines count them.
    pub fn tokens(&self) -> u32 {
        self.lines.iter().fold(0, |t, l| t.saturating_add(l.tokens))
    }

    /// How many messages it holds.
    pub fn messages(&self) -> usize {
        self.lines.iter().filter(|l| l.opens).count()
    }

    /// The tokens of its first `n` messages.
    pub fn tokens_of_first(&self, n: usize) -> u32 {
        let mut seen = 0usize;
        let mut tokens = 0u32;
        for l in &self.lines {
            if l.opens {
                if seen == n {
                    break;
                }
                seen += 1;
            }
            tokens = tokens.saturating_add(l.tokens);
        }
        tokens
    }

    /// The tokens of this prompt that repeat the start of `previous`: its lines up to the
    /// first that differs (or that `previous` does not have).
    pub fn shared_with(&self, previous: &PromptPrint) -> u32 {
        self.lines
            .iter()
            .zip(&previous.lines)
            .take_while(|(a, b)| a.hash == b.hash && a.opens == b.opens)
            .fold(0, |t, (a, _)| t.saturating_add(a.tokens))
    }
}

/// The role's name as chat APIs write it.
fn role_name(role: ChatRole) -> &'static str {
    match role {
        ChatRole::System => "system",
        ChatRole::User => "user",
        ChatRole::Assistant => "assistant",
        ChatRole::Tool => "tool",
    }
}

impl fmt::Display for PromptPrint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, l) in self.lines.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            let mark = if l.opens { "m" } else { "" };
            write!(f, "{mark}{:08x}:{}", l.hash, l.tokens)?;
        }
        Ok(())
    }
}

impl From<PromptPrint> for String {
    fn from(p: PromptPrint) -> String {
        p.to_string()
    }
}

impl TryFrom<String> for PromptPrint {
    type Error = String;

    fn try_from(text: String) -> Result<Self, String> {
        let mut lines = Vec::new();
        for (i, part) in text.split(' ').filter(|p| !p.is_empty()).enumerate() {
            let (opens, rest) = match part.strip_prefix('m') {
                Some(rest) => (true, rest),
                None => (false, part),
            };
            let bad = || format!("prompt print, line {i}: `{part}` is not `[m]hash:tokens`");
            let (hash, tokens) = rest.split_once(':').ok_or_else(bad)?;
            if hash.len() != 8 {
                return Err(bad());
            }
            lines.push(Line {
                hash: u32::from_str_radix(hash, 16).map_err(|_| bad())?,
                tokens: tokens.parse().map_err(|_| bad())?,
                opens,
            });
        }
        Ok(Self { lines })
    }
}

/// What of the previous prompt of a conversation the next one needs: its print (to count
/// the prefix they share) and where its conversation began (so the next one's begins there
/// too while it fits, and the prompt extends the previous one instead of sliding).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PreviousPrompt {
    /// Its print.
    pub print: PromptPrint,
    /// The first message of its conversation block, if it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation_from: Option<MemoryId>,
    /// The tokens of its stable part (see [`CacheExplain::stable_tokens`]).
    #[serde(default)]
    pub stable_tokens: u32,
}

/// What a provider's prompt cache can make of one prompt, in its explain report.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CacheExplain {
    /// The prompt's tokens, counted line by line (as the shared prefix is).
    pub prompt_tokens: u32,
    /// How many messages, from the first, hold what never or rarely changes in a
    /// conversation (the system prompt, who is talking, the person's facts): where an app
    /// using cache breakpoints puts one.
    pub stable_messages: usize,
    /// Their tokens.
    pub stable_tokens: u32,
    /// How many messages, from the first, hold the stable part and the conversation so far,
    /// which the next prompt extends.
    pub through_conversation: usize,
    /// Their tokens.
    pub through_conversation_tokens: u32,
    /// The first message of the conversation block, if there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation_from: Option<MemoryId>,
    /// Whether the conversation block starts where the previous prompt's did.
    #[serde(default)]
    pub conversation_kept: bool,
    /// Tokens that repeat the start of the previous prompt of this conversation, as the
    /// caller gave it; `None` when none was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_prefix_tokens: Option<u32>,
    /// Whether this prompt starts with the whole stable part of the previous one, so a
    /// provider's cache can serve it.
    #[serde(default)]
    pub hit: bool,
}

#[cfg(test)]
mod tests {
    use prompt_ir::WhitespaceTokenizer;

    use super::*;

    const TOK: WhitespaceTokenizer = WhitespaceTokenizer;

    fn print(messages: &[(&str, &str)]) -> PromptPrint {
        PromptPrint::of(messages.iter().copied(), &TOK)
    }

    #[test]
    fn the_shared_prefix_runs_to_the_first_line_that_differs() {
        let first = print(&[
            ("system", "Be brief."),
            ("user", "<talk>\n- one two\n</talk>"),
            ("user", "recalled"),
            ("user", "hello there"),
        ]);
        let next = print(&[
            ("system", "Be brief."),
            ("user", "<talk>\n- one two\n- hello there\n</talk>"),
            ("user", "other"),
        ]);
        // Role line (4) + "Be brief." (2 + 1); role line (4) + "<talk>" (1 + 1) + "- one
        // two" (3 + 1); then "- hello there" differs from "</talk>".
        assert_eq!(next.shared_with(&first), 4 + 3 + 4 + 2 + 4);
        assert_eq!(first.shared_with(&first), first.tokens());
        assert_eq!(first.messages(), 4);
        assert_eq!(first.tokens_of_first(1), 7);
        assert_eq!(first.tokens_of_first(0), 0);
        assert_eq!(first.tokens_of_first(9), first.tokens());
        // Another role is another prompt, whatever the text.
        let other_role = print(&[("user", "Be brief.")]);
        assert_eq!(other_role.shared_with(&first), 0);
        assert_eq!(PromptPrint::default().shared_with(&first), 0);
    }

    #[test]
    fn a_print_reads_back_from_its_text_and_refuses_garbage() {
        let p = print(&[("system", "a b\nc"), ("user", "")]);
        let text = String::from(p.clone());
        let back = PromptPrint::try_from(text.clone()).unwrap();
        assert_eq!(back, p);
        let json = serde_json::to_string(&p).unwrap();
        assert_eq!(serde_json::from_str::<PromptPrint>(&json).unwrap(), p);
        for bad in ["zz:1", "0000000g:1", "00000000", "00000000:x", "0000:1"] {
            let err = PromptPrint::try_from(bad.to_owned()).unwrap_err();
            assert!(err.contains("is not `[m]hash:tokens`"), "{bad}: {err}");
        }
        assert_eq!(
            PromptPrint::try_from(String::new()).unwrap(),
            PromptPrint::default()
        );
    }
}
