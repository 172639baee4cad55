//! What the handlers share: the bot, the state every handler is given ([`BotState`]), and
//! who wrote a message ([`Who`]) and what the prompt says of them ([`speaker_state`]).

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use hydrate::{ChatModel, SessionState};
use memory_core::{MemoryId, Scope, Tag};
use teloxide::adaptors::Throttle;
use teloxide::prelude::*;

use crate::agent::{Agent, Audience, GROUP_USER, MAX_STATE_CHARS, Member, state_line};

/// The bot as handlers see it: rate-limited, retrying on 429 `retry_after`.
pub(crate) type AvaBot = Throttle<Bot>;

/// How many (user, chat) pairs the bot keeps the last `/facts` listing for: the least
/// recently set goes first.
pub(super) const CONVERSATIONS_KEPT: usize = 4096;

/// Per-(user, chat) state for the [`CONVERSATIONS_KEPT`] most recently set; bounded so a
/// bot used by many people does not grow without end.
#[derive(Debug)]
pub(super) struct PerChat<V> {
    pub(super) entries: HashMap<(u64, i64), (u64, V)>,
    /// Increases with each insert: an entry's age.
    clock: u64,
}

impl<V> Default for PerChat<V> {
    fn default() -> Self {
        Self {
            entries: HashMap::new(),
            clock: 0,
        }
    }
}

impl<V> PerChat<V> {
    pub(super) fn insert(&mut self, key: (u64, i64), value: V) {
        self.clock += 1;
        self.entries.insert(key, (self.clock, value));
        if self.entries.len() > CONVERSATIONS_KEPT
            && let Some(oldest) = self
                .entries
                .iter()
                .min_by_key(|(_, (at, _))| *at)
                .map(|(k, _)| *k)
        {
            self.entries.remove(&oldest);
        }
    }

    pub(super) fn get(&self, key: &(u64, i64)) -> Option<&V> {
        self.entries.get(key).map(|(_, v)| v)
    }

    pub(super) fn remove(&mut self, key: &(u64, i64)) -> Option<V> {
        self.entries.remove(key).map(|(_, v)| v)
    }
}

/// Everything the handlers share.
#[derive(Debug)]
pub(crate) struct BotState {
    pub(super) agent: Agent,
    pub(super) model: Arc<dyn ChatModel>,
    pub(super) allow: Option<BTreeSet<u64>>,
    /// The facts the last `/facts` listed, in its numbering, per (user, chat).
    pub(super) listings: Mutex<PerChat<Vec<MemoryId>>>,
    /// The reaction put on a message that taught Ava something; `None` puts none.
    pub(super) learned_reaction: Option<String>,
}

impl BotState {
    pub(crate) fn new(
        agent: Agent,
        model: Arc<dyn ChatModel>,
        allow: Option<BTreeSet<u64>>,
    ) -> Self {
        Self {
            agent,
            model,
            allow,
            listings: Mutex::default(),
            learned_reaction: None,
        }
    }

    /// The same state, reacting with `emoji` to each message that taught Ava something.
    pub(crate) fn with_learned_reaction(mut self, emoji: Option<String>) -> Self {
        self.learned_reaction = emoji;
        self
    }
}

/// Who wrote a message, as a memory scope and a key, who else hears it, and in a group the
/// member. Derived once per message by the handler tree ([`super::schema`]).
#[derive(Clone)]
pub(super) struct Who {
    pub(super) key: (u64, i64),
    pub(super) scope: Scope,
    pub(super) audience: Audience,
    pub(super) member: Option<Member>,
}

pub(super) fn who(msg: &Message) -> Option<Who> {
    let from = msg.from.as_ref()?;
    let (user, chat) = (from.id.0, msg.chat.id.0);
    let (owner, audience, member) = if msg.chat.is_private() {
        (user.to_string(), Audience::Private, None)
    } else {
        let member = Member {
            tag: Tag::new(format!("from:{user}")).ok()?,
            name: state_line(&display_name(from), MAX_STATE_CHARS),
            user: user.to_string(),
            // Read from the store when it matters (`shares`).
            shares: false,
        };
        (GROUP_USER.to_owned(), Audience::Group, Some(member))
    };
    let scope = Scope::for_user(owner)
        .and_then(|s| s.in_chat(chat.to_string()))
        .ok()?;
    Some(Who {
        key: (user, chat),
        scope,
        audience,
        member,
    })
}

/// A sender as people call them: their name, and their username when they have one. The
/// name is the sender's own choice, so the characters this line is made of (`(`, `)`, `@`,
/// and `:`, which separates a stored line's speaker from their words) are taken out of it:
/// a first name "Alice (@alice)" cannot pass for the member whose username is `alice`.
fn display_name(from: &teloxide::types::User) -> String {
    let name: String = from
        .full_name()
        .chars()
        .map(|c| if "()@:[]".contains(c) { ' ' } else { c })
        .collect();
    let name = name.split_whitespace().collect::<Vec<_>>().join(" ");
    let name = if name.is_empty() {
        format!("user {}", from.id.0)
    } else {
        name
    };
    match &from.username {
        Some(username) => format!("{name} (@{username})"),
        None => name,
    }
}

/// What the prompt says about who is talking and where, from what Telegram sends with every
/// message: the sender's name and username, their language (answer in it), the chat's type
/// and title. Each kept to one short line ([`state_line`]).
pub(super) fn speaker_state(msg: &Message) -> SessionState {
    let mut state = SessionState::default();
    if let Some(from) = &msg.from {
        let name = display_name(from);
        state.user = Some(state_line(&name, MAX_STATE_CHARS)).filter(|n| !n.is_empty());
        if let Some(language) = from.language_code.as_deref().map(|l| state_line(l, 16))
            && !language.is_empty()
        {
            state.extra.insert(
                "Language".into(),
                format!("{language} (answer in it unless asked otherwise)"),
            );
        }
    }
    let chat = if msg.chat.is_private() {
        "a private chat".to_owned()
    } else {
        let title = msg
            .chat
            .title()
            .map(|t| state_line(t, MAX_STATE_CHARS))
            .unwrap_or_default();
        format!("the group \"{title}\" (its members read the answer)")
    };
    state.extra.insert("Chat".into(), chat);
    state
}

pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // The maps hold plain data; a panicked holder leaves nothing half-written worth refusing.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
