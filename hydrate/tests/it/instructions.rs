//! A user's standing instruction (memory-sqlite, `HashingEmbedder`, the product config):
//! said once, weeks and sixty answers ago, in words no later question repeats, it reaches a
//! tight prompt for a question it applies to, in the knowledge block, whole; another user's
//! instruction never does; and the same message stored without the mark is not found, which
//! is why hydrate's write paths mark it.

use crate::common;

use std::sync::Arc;

use common::{at, chat_scope, data};
use hydrate::{CompiledPrompt, HydrationConfig, INSTRUCTION_TAG, with_instruction_mark};
use memory_core::{MemoryBackend, MemoryId, NewMemory, Role};
use prompt_ir::Action;

const ALICES: &str = "Always give prices in euros and say whether tax is included.";
const BOBS: &str = "Never answer me in English, only in German.";
const QUESTION: &str = "How much is a return train ticket from Lisbon to Porto?";

/// `user`'s chat: `instruction` (marked or not), then sixty exchanges about trains that share
/// the question's words. Returns the instruction's id.
async fn seed(store: &dyn MemoryBackend, user: &str, instruction: &str, mark: bool) -> MemoryId {
    let said = NewMemory::new(instruction)
        .with_role(Role::User)
        .at(at("2026-01-05T09:00:00Z"));
    let said = if mark {
        with_instruction_mark(said)
    } else {
        said
    };
    let mut turns = vec![said];
    for i in 0..60u64 {
        let when = at("2026-02-01T09:00:00Z").plus(std::time::Duration::from_secs(3600 * i));
        turns.push(
            NewMemory::new(format!(
                "Which train from Lisbon leaves after {i} o'clock, and is the ticket a return?"
            ))
            .with_role(Role::User)
            .at(when),
        );
        turns.push(
            NewMemory::new(format!(
                "Train {i}: the Lisbon to Porto train leaves hourly; a return ticket can be \
                 bought at the station or online, and the train takes about three hours."
            ))
            .with_role(Role::Assistant)
            .at(when.plus(std::time::Duration::from_secs(60))),
        );
    }
    let stored = store.store_batch(&chat_scope(user), turns).await.unwrap();
    stored[0].id
}

async fn ask(config: &HydrationConfig, user: &str) -> CompiledPrompt {
    common::prompt_now(config, chat_scope(user), QUESTION, 500).await
}

fn kept_whole_in(prompt: &CompiledPrompt, id: MemoryId) -> Option<&str> {
    prompt
        .report
        .sections
        .iter()
        .find(|s| s.memory_id == Some(id) && matches!(s.action, Action::Kept { .. }))
        .map(|s| s.block.as_str())
}

#[tokio::test]
async fn a_standing_instruction_reaches_every_prompt_of_its_user_only() {
    let dir = tempfile::tempdir().unwrap();
    let store = common::sqlite_store(&dir).await;
    let alices = seed(store.as_ref(), "alice", ALICES, true).await;
    let bobs = seed(store.as_ref(), "bob", BOBS, true).await;
    let stored = store.get(&chat_scope("alice"), alices).await.unwrap();
    assert!(stored.pinned, "a standing instruction is pinned");
    assert!(stored.tags.iter().any(|t| t.as_str() == INSTRUCTION_TAG));
    let config = hydrate::product::config(Arc::clone(&store), Some(common::embedder())).unwrap();
    let config = HydrationConfig {
        memory_tools: false,
        ..config
    };

    let p = ask(&config, "alice").await;
    assert_eq!(kept_whole_in(&p, alices), Some("knowledge"), "{}", data(&p));
    let text = data(&p);
    assert!(text.contains(&format!("- user: {ALICES}")), "{text}");
    assert!(!text.contains("German"), "bob's instruction leaked: {text}");

    let p = ask(&config, "bob").await;
    assert_eq!(kept_whole_in(&p, bobs), Some("knowledge"), "{}", data(&p));
    assert!(!data(&p).contains("euros"), "alice's instruction leaked");

    // Unmarked, the same message shares no word with the question and is crowded out.
    let carol = seed(store.as_ref(), "carol", ALICES, false).await;
    let p = ask(&config, "carol").await;
    assert_eq!(kept_whole_in(&p, carol), None, "{}", data(&p));
    assert!(!data(&p).contains("euros"), "{}", data(&p));
}
