//! Ava's own settings: the one definition of how the `ava` binary hydrates a prompt and records
//! a chat turn, shared by the binary and by the evaluation (`cargo xtask eval locomo
//! --context-budget`), so what is measured is what ships.
//!
//! Only the defaults are chosen here; the store stays a `dyn MemoryBackend` the caller opens.
//! "Now" is not part of the config: it is [`HydrateInput::now`](crate::HydrateInput::now),
//! which an evaluation sets with [`HydrateInput::at`](crate::HydrateInput::at).

use std::sync::Arc;

use memory_core::{EmbeddingProvider, MemoryBackend, NewMemory, Role};
use prompt_ir::{CountCache, TiktokenTokenizer, Tokenizer};

use crate::config::HydrationConfig;
use crate::error::Result;
use crate::graph::GraphSource;
use crate::memory::memory_provider;
use crate::source::SourceKind;

/// The system prompt of every conversation (the stable prefix; no secrets, no user data).
pub const SYSTEM_PROMPT: &str = "You are Ava, a friendly assistant with long-term \
memory. Use what you recall about the user when it helps, say so when you do not know, and \
answer briefly. Use the remember tool for durable facts the user tells you, recall to look \
something up, and forget when the user asks you to.";

/// Default token budget of one prompt.
pub const DEFAULT_BUDGET: u32 = 4000;

/// The model whose tokenizer counts prompt tokens.
pub const TOKENIZER_MODEL: &str = "gpt-4o";

/// The least relevance for what is recalled for one message to enter `ava`'s prompts
/// ([`HydrationConfig::relevance_floor`]): over the candidates of every prompt of both
/// evaluation files, fewer than one in a hundred below it held evidence (BENCHMARKS.md,
/// "Whole first", the calibration), so below it a candidate is not worth its tokens.
pub const RELEVANCE_FLOOR: f64 = 0.3;

/// How many characters of the answered message a chat turn keeps as its context.
pub const REPLY_CONTEXT_CHARS: usize = 500;

/// The hydration config of `ava` over `store`: [`SYSTEM_PROMPT`], the tokenizer of
/// [`TOKENIZER_MODEL`], [`RELEVANCE_FLOOR`], the memory provider over `store`, the entity graph over `store`
/// (in a build with the `graph` feature), and [`HydrationConfig::new`]'s defaults for
/// everything else. `embedder` is the store's own (of its embedding space): with it the
/// observation is embedded once per prompt and shared by every search; without it each
/// search has the backend embed it again. Fails only if the tokenizer cannot be loaded.
pub fn config(
    store: Arc<dyn MemoryBackend>,
    embedder: Option<Arc<dyn EmbeddingProvider>>,
) -> Result<HydrationConfig> {
    let mut config = HydrationConfig::new(SYSTEM_PROMPT, tokenizer()?)
        .with_provider(memory_provider(Arc::clone(&store), embedder));
    config.relevance_floor = RELEVANCE_FLOOR;
    Ok(match GraphSource::new(store) {
        Ok(graph) => config.with_source(SourceKind::Graph, Arc::new(graph)),
        // A build without the `graph` feature: no graph.
        Err(_) => config,
    })
}

/// Texts whose token counts [`tokenizer`] remembers (about 10 MB of text at most).
pub const COUNTED_TEXTS: usize = 100_000;

/// The tokenizer of [`TOKENIZER_MODEL`], remembering the counts of up to [`COUNTED_TEXTS`]
/// texts: every prompt of a chat counts the same recent turns and facts again.
pub fn tokenizer() -> Result<Arc<dyn Tokenizer>> {
    let bpe = TiktokenTokenizer::for_model(TOKENIZER_MODEL)?;
    Ok(Arc::new(CountCache::new(Arc::new(bpe), COUNTED_TEXTS)))
}

/// A chat turn as `ava` stores it: tagged with the entities it mentions (the graph's index)
/// and, when the user sets a standing instruction, marked as one
/// ([`crate::with_instruction_mark`]). The caller adds when, where from and its context.
pub fn chat_turn(text: impl Into<String>, role: Role) -> NewMemory {
    crate::instructions::with_instruction_mark(
        crate::graph::with_entity_tags(NewMemory::new(text)).with_role(role),
    )
}

/// The context `ava` records for a chat turn: the message it answers, cut to
/// [`REPLY_CONTEXT_CHARS`] characters (with `…` when cut). Keyword search indexes it, so a
/// reply is also found by what it was about.
pub fn in_reply_to(text: &str) -> String {
    let cut: String = text.chars().take(REPLY_CONTEXT_CHARS).collect();
    let more = if cut.len() < text.len() { "…" } else { "" };
    format!("in reply to: {cut}{more}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reply_context_names_the_message_and_stays_short() {
        assert_eq!(in_reply_to("Did you go?"), "in reply to: Did you go?");
        let long = "é".repeat(800);
        let ctx = in_reply_to(&long);
        assert_eq!(
            ctx.chars().count(),
            "in reply to: ".len() + REPLY_CONTEXT_CHARS + 1
        );
        assert!(ctx.ends_with('…'));
    }

    #[test]
    fn config_is_the_products() {
        let store: Arc<dyn MemoryBackend> = Arc::new(memory_inmem::InMemoryBackend::new(None));
        let config = config(store, None).unwrap();
        assert_eq!(config.system_prompt, SYSTEM_PROMPT);
        assert_eq!(config.tokenizer.name(), "o200k_base");
        // The memory provider, and the graph where the build has it (it ships, so it is
        // measured).
        let graph = config
            .providers
            .iter()
            .any(|p| p.supports(SourceKind::Graph));
        assert_eq!(graph, crate::graph_available().is_ok());
        assert_eq!(config.providers.len(), 1 + usize::from(graph));
        assert!(config.memory_tools);
        assert_eq!(config.relevance_floor, RELEVANCE_FLOOR);
    }
}
