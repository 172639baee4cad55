//! Ava in a rig agent (feature `rig`, rig-core 0.40.0): [`AvaConversations`] is rig's
//! `ConversationMemory` (each conversation durable in the store, per person, and loaded
//! bounded by a token budget rather than whole), and [`AvaIndex`] is rig's
//! `VectorStoreIndex`, so an agent's dynamic context is what Ava recalls for the prompt
//! where that person's conversation may read (their facts, never another person's).
//!
//! A rig conversation id names an Ava scope: [`conversation_id`] writes one, and
//! [`AvaConversations`] refuses an id that is not one (rig would otherwise keep a
//! conversation nobody could find to erase).
//!
//! ```no_run
//! # async fn run(model: rig_core::providers::openai::CompletionModel) -> Result<(), Box<dyn std::error::Error>> {
//! use ava_memory::rig::{AvaConversations, conversation_id};
//! use rig_core::completion::Prompt;
//!
//! let memory = ava_memory::Memory::open("memories.db").await?;
//! let chat = memory.person("alice", "web")?;
//! let agent = rig_core::agent::AgentBuilder::new(model)
//!     .preamble("You are a helpful assistant.")
//!     .memory(AvaConversations::new(memory.clone(), 1000))
//!     .dynamic_context(5, chat.index())
//!     .build();
//! let answer = agent
//!     .prompt("What is my cat called?")
//!     .conversation(conversation_id(chat.scope()))
//!     .await?;
//! # Ok(()) }
//! ```

use rig_core::completion::Message;
use rig_core::completion::message::{AssistantContent, UserContent};
use rig_core::memory::{ConversationMemory, MemoryError};
use rig_core::vector_store::request::Filter;
use rig_core::vector_store::{VectorSearchRequest, VectorStoreError, VectorStoreIndex};
use rig_core::wasm_compat::{WasmBoxedFuture, WasmCompatSend};
use serde::{Deserialize, Serialize};

use crate::error::Error;
use crate::memory::{Conversation, Memory};
use memory_core::{Role, Scope};

/// The rig conversation id of `scope`: the scope as JSON (tenant, user, chat, thread), which
/// [`AvaConversations`] reads back, so one id is one scope and no id is two.
pub fn conversation_id(scope: &Scope) -> String {
    // A scope is plain strings; writing it as JSON cannot fail.
    serde_json::to_string(scope).unwrap_or_default()
}

/// The scope a rig conversation id names ([`conversation_id`]).
pub fn scope_of(conversation_id: &str) -> crate::Result<Scope> {
    serde_json::from_str(conversation_id).map_err(|e| {
        Error::invalid(
            "rig conversation id",
            format!(
                "`{conversation_id}` is not an Ava scope ({e}); make it with \
                 ava_memory::rig::conversation_id"
            ),
        )
    })
}

/// Ava as rig's `ConversationMemory`: `append` keeps each turn as the bot keeps chat turns
/// ([`Conversation::remember`]), durable in the store; `load` gives the conversation's
/// newest messages that fit in `budget` tokens ([`Conversation::history`]), oldest first;
/// `clear` erases the conversation ([`Conversation::erase`]). What the person said in other
/// conversations and their facts reach the prompt through [`AvaIndex`], by relevance.
/// Every conversation is private to its person unless made [`AvaConversations::shared`].
#[derive(Clone, Debug)]
pub struct AvaConversations {
    memory: Memory,
    budget: u32,
    shared: bool,
}

impl AvaConversations {
    /// Conversations of `memory` whose loaded history takes at most `budget` tokens.
    pub fn new(memory: Memory, budget: u32) -> Self {
        Self {
            memory,
            budget,
            shared: false,
        }
    }

    /// The same, for conversations others share (groups): see [`Conversation::shared`].
    pub fn shared(mut self) -> Self {
        self.shared = true;
        self
    }

    fn conversation(&self, id: &str) -> Result<Conversation, MemoryError> {
        let conversation = self
            .memory
            .conversation(scope_of(id).map_err(MemoryError::backend)?);
        Ok(if self.shared {
            conversation.shared()
        } else {
            conversation
        })
    }
}

/// The text of a rig message's parts that are text (not tool calls, tool results or media).
fn text_of(message: &Message) -> (Option<Role>, String) {
    match message {
        Message::User { content } => (
            Some(Role::User),
            joined(content.iter().filter_map(|c| match c {
                UserContent::Text(t) => Some(t.text.as_str()),
                _ => None,
            })),
        ),
        Message::Assistant { content, .. } => (
            Some(Role::Assistant),
            joined(content.iter().filter_map(|c| match c {
                AssistantContent::Text(t) => Some(t.text.as_str()),
                _ => None,
            })),
        ),
        Message::System { .. } => (None, String::new()),
    }
}

/// `parts`, a line each.
fn joined<'a>(parts: impl Iterator<Item = &'a str>) -> String {
    parts.collect::<Vec<_>>().join("\n")
}

impl ConversationMemory for AvaConversations {
    fn load<'a>(
        &'a self,
        conversation_id: &'a str,
    ) -> WasmBoxedFuture<'a, Result<Vec<Message>, MemoryError>> {
        Box::pin(async move {
            let conversation = self.conversation(conversation_id)?;
            let history = conversation
                .history(self.budget)
                .await
                .map_err(MemoryError::backend)?;
            Ok(history
                .into_iter()
                .map(|m| match m.role {
                    Some(Role::Assistant) => Message::assistant(m.content),
                    _ => Message::user(m.content),
                })
                .collect())
        })
    }

    fn append<'a>(
        &'a self,
        conversation_id: &'a str,
        messages: Vec<Message>,
    ) -> WasmBoxedFuture<'a, Result<(), MemoryError>> {
        Box::pin(async move {
            let conversation = self.conversation(conversation_id)?;
            // A turn is the user's prompt, then the answer (tool calls and their results
            // between them are the turn's working, not what was said).
            let mut said = Vec::new();
            let mut answered = Vec::new();
            for message in &messages {
                match text_of(message) {
                    (Some(Role::User), text) if !text.trim().is_empty() => said.push(text),
                    (Some(Role::Assistant), text) if !text.trim().is_empty() => {
                        answered.push(text);
                    }
                    _ => {}
                }
            }
            if said.is_empty() {
                return Ok(());
            }
            let answer = (!answered.is_empty()).then(|| answered.join("\n"));
            conversation
                .remember(&said.join("\n"), answer.as_deref())
                .await
                .map_err(MemoryError::backend)?;
            Ok(())
        })
    }

    fn clear<'a>(
        &'a self,
        conversation_id: &'a str,
    ) -> WasmBoxedFuture<'a, Result<(), MemoryError>> {
        Box::pin(async move {
            self.conversation(conversation_id)?
                .erase()
                .await
                .map_err(MemoryError::backend)?;
            Ok(())
        })
    }
}

/// What [`AvaIndex`] gives rig for one recalled memory (rig shows it to the model as JSON).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Recalled {
    /// The memory's text.
    pub text: String,
    /// `fact`, `message` or `note` ([`memory_core::MemoryKind`]).
    pub kind: String,
    /// When it was said or learned (RFC 3339, UTC).
    pub at: String,
}

/// Ava behind rig's `VectorStoreIndex`, for one conversation: `top_n` is what Ava recalls
/// for the query where the conversation may read ([`Conversation::recall`]: in a private
/// one, its messages and its person's facts; in a shared one, the conversation alone), so a
/// rig agent's dynamic context holds that person's memories and never another's. Make it
/// with [`Conversation::index`]. It takes no rig filter: its reach is the conversation's.
#[derive(Clone, Debug)]
pub struct AvaIndex {
    conversation: Conversation,
}

impl Conversation {
    /// This conversation as rig's `VectorStoreIndex` ([`AvaIndex`]), for an agent's
    /// `dynamic_context`.
    pub fn index(&self) -> AvaIndex {
        AvaIndex {
            conversation: self.clone(),
        }
    }
}

impl AvaIndex {
    async fn recalled(
        &self,
        req: &VectorSearchRequest<Filter<serde_json::Value>>,
    ) -> Result<Vec<(f64, String, Recalled)>, VectorStoreError> {
        if req.filter().is_some() {
            return Err(VectorStoreError::DatastoreError(Box::new(Error::invalid(
                "rig filter",
                "Ava's index takes none: what it may read is the conversation's reach",
            ))));
        }
        let limit = usize::try_from(req.samples()).unwrap_or(usize::MAX);
        if limit == 0 {
            return Ok(Vec::new());
        }
        let hits = self
            .conversation
            .recall(req.query(), limit)
            .await
            .map_err(|e| VectorStoreError::DatastoreError(Box::new(e)))?;
        Ok(hits
            .into_iter()
            .filter(|h| req.threshold().is_none_or(|t| f64::from(h.score) >= t))
            .map(|h| {
                let kind = h.entry.kind.as_str().to_owned();
                let at = h.entry.created_at.to_datetime().to_rfc3339();
                (
                    f64::from(h.score),
                    h.entry.id.to_string(),
                    Recalled {
                        text: h.entry.content,
                        kind,
                        at,
                    },
                )
            })
            .collect())
    }
}

impl VectorStoreIndex for AvaIndex {
    type Filter = Filter<serde_json::Value>;

    async fn top_n<T: for<'a> Deserialize<'a> + WasmCompatSend>(
        &self,
        req: VectorSearchRequest<Self::Filter>,
    ) -> Result<Vec<(f64, String, T)>, VectorStoreError> {
        let mut out = Vec::new();
        for (score, id, doc) in self.recalled(&req).await? {
            out.push((
                score,
                id,
                serde_json::from_value(serde_json::to_value(doc)?)?,
            ));
        }
        Ok(out)
    }

    async fn top_n_ids(
        &self,
        req: VectorSearchRequest<Self::Filter>,
    ) -> Result<Vec<(f64, String)>, VectorStoreError> {
        Ok(self
            .recalled(&req)
            .await?
            .into_iter()
            .map(|(score, id, _)| (score, id))
            .collect())
    }
}
