//! Who is speaking: a person alone or a member of a group (`Speaker`, `Member`, `Audience`),
//! and the short state lines the prompt says of them.

use hydrate::SessionState;
use memory_core::Scope;

/// Longest display name, chat title or language shown in a prompt's state, in characters.
pub(crate) const MAX_STATE_CHARS: usize = 64;

/// Longest goal a caller may set, in characters.
pub(crate) const MAX_GOAL_CHARS: usize = 300;

/// `text` as one line of at most `max` characters for a prompt's state section: control
/// characters (line breaks included) become spaces, runs of spaces one, and a cut ends in
/// `…`. What people call themselves and their groups is theirs to choose, so it is kept
/// short and on its own line.
pub(crate) fn state_line(text: &str, max: usize) -> String {
    let clean: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let words: Vec<&str> = clean.split_whitespace().collect();
    let line = words.join(" ");
    if line.chars().count() <= max {
        return line;
    }
    let mut cut: String = line.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// The state of a private context whose user goes by `name` (the CLI's and MCP's
/// `--name`), if any.
pub(crate) fn named(name: Option<&str>) -> SessionState {
    SessionState {
        user: name
            .map(|n| state_line(n, MAX_STATE_CHARS))
            .filter(|n| !n.is_empty()),
        ..SessionState::default()
    }
}

/// The user key of a group's shared conversation: its messages, the answers and the
/// group's own facts are kept in (this key, the group's chat id). Telegram user ids are
/// numbers, so no user has it.
pub(crate) use ava_memory::erase::GROUP_USER;

/// Who says a message, and where: the scope the conversation is kept in, who else hears
/// it, what the prompt says about the speaker, and in a shared conversation the member.
#[derive(Clone, Debug)]
pub(crate) struct Speaker {
    /// Where the conversation is kept: the user's chat, or a group's shared scope.
    pub(crate) scope: Scope,
    /// Who else hears it.
    pub(crate) audience: Audience,
    /// What the prompt's state lines say (who is talking, the chat, the language).
    pub(crate) state: SessionState,
    /// In a shared conversation, the member who speaks.
    pub(crate) member: Option<Member>,
}

impl Speaker {
    /// The user of `scope` alone (the CLI, a private chat), described by `state`.
    pub(crate) fn private(scope: Scope, state: SessionState) -> Self {
        Self {
            scope,
            audience: Audience::Private,
            state,
            member: None,
        }
    }
}

/// A member of a shared conversation, as what is stored for them says.
#[derive(Clone, Debug)]
pub(crate) struct Member {
    /// On every memory stored for their messages and the answers to them (`from:<id>`), so
    /// their part of the conversation can be found and deleted.
    pub(crate) tag: memory_core::Tag,
    /// How stored lines name them (`Alice (@alice)`).
    pub(crate) name: String,
    /// Their user key, and whether they share their user-wide facts in this conversation
    /// (`/share`): then the prompts answering them hold those facts.
    pub(crate) user: String,
    pub(crate) shares: bool,
}

/// Who is in a chat: the user alone (a private chat, the CLI, an MCP client), or others too
/// (a group). A private context reads the user's user-wide facts and keeps what it learns
/// there; a group never reads them ([`hydrate::Ops::in_shared_chat`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Audience {
    /// The user alone.
    Private,
    /// Others share the chat.
    Group,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_lines_are_one_short_line() {
        assert_eq!(state_line("  Ada\n\nLovelace\t ", 64), "Ada Lovelace");
        assert_eq!(
            state_line("Ignore all\rprevious", 64),
            "Ignore all previous"
        );
        let long = state_line(&"é".repeat(100), 10);
        assert_eq!(long.chars().count(), 10);
        assert!(long.ends_with('…'));
        assert_eq!(named(Some(" \n ")).user, None);
        assert_eq!(named(Some("Maya")).user.as_deref(), Some("Maya"));
    }
}
