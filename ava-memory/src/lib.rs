//! Ava's memory for an agent in a few lines: open a store as `ava` opens it, then for each
//! person's conversation get the messages for the next model call and keep each exchange.
//!
//! ```no_run
//! # async fn run() -> Result<(), ava_memory::Error> {
//! let memory = ava_memory::Memory::open("memories.db").await?;
//! let chat = memory.person("alice", "web")?;
//! chat.remember_fact("Alice's cat is called Pixel").await?;
//! let context = chat.context("What is my cat called?", 2000).await?;
//! // Send `context.messages` to the model; `context.report` says what went in and why.
//! chat.remember("What is my cat called?", Some("Pixel.")).await?;
//! # Ok(()) }
//! ```
//!
//! - [`Memory`]: a store (a SQLite file, or a `postgres://` URL with the `postgres` feature)
//!   with the embedder chosen as `ava` chooses it ([`open`]: the local model when it is
//!   installed, else keyword search only; `AVA_EMBEDDER` and the rest as `ava` reads them),
//!   and the product's hydration config (`hydrate::product::config`).
//! - [`Conversation`]: one scope, private to its person (their facts follow them into every
//!   private conversation) or shared ([`Conversation::shared`]: a group's prompts never read
//!   a member's own facts). [`Conversation::context`] builds the budgeted, explained prompt,
//!   laid out to extend the conversation's previous one ([`prompts`]);
//!   [`Conversation::remember`] keeps an exchange as the bot keeps chat turns;
//!   [`Conversation::remember_fact`], [`Conversation::facts`], [`Conversation::recall`],
//!   [`Conversation::forget`], [`Conversation::erase`]; [`Memory::erase_person`] erases all
//!   of a person ([`erase`]).
//! - With the `rig` feature, `ava_memory::rig`: Ava as rig's `ConversationMemory` and
//!   `VectorStoreIndex`.
//!
//! Modules from the bottom: `error`, `open`, `prompts`, `erase`, `memory`, then `rig`.

mod error;
mod memory;

pub mod erase;
pub mod open;
pub mod prompts;
#[cfg(feature = "rig")]
pub mod rig;

pub use error::{Error, Result};
pub use hydrate::{ChatMessage, ChatRole, ExplainReport, Reach, SessionState};
pub use memory::{
    Context, Conversation, DEFAULT_SOURCE, DEFAULT_SYSTEM_PROMPT, Kept, MAX_FACTS_LISTED, Memory,
};
pub use memory_core::{MemoryEntry, MemoryId, Scope, ScoredMemory};
pub use open::{EmbedderChoice, EmbedderSettings, Location};
