//! The quickstart example (the README's library program) against a temporary SQLite store
//! with the hashing embedder: what it keeps, and that the next prompt holds it.

#[expect(
    dead_code,
    reason = "the example's main opens a store in the working directory; the test runs its body"
)]
#[path = "../../examples/quickstart.rs"]
mod example;

use ava_memory::prompts;
use ava_memory::{ChatRole, Scope};

use crate::common::Store;

#[tokio::test]
async fn the_quickstart_keeps_the_fact_and_the_exchange_and_the_next_prompt_extends_its_own() {
    let store = Store::new();
    let memory = store.open().await;
    example::quickstart(&memory).await.unwrap();

    let alice = memory.person("alice", "web").unwrap();
    let facts = alice.facts().await.unwrap();
    assert_eq!(facts.len(), 1, "{facts:?}");
    assert_eq!(facts[0].content, "Alice's cat is called Pixel");
    assert!(
        facts[0].scope.is_user_wide(),
        "a person's fact is theirs, not the chat's"
    );
    // The exchange, as the bot keeps chat turns: the answer in reply to the question.
    let said = alice.history(4000).await.unwrap();
    let texts: Vec<&str> = said.iter().map(|m| m.content.as_str()).collect();
    assert_eq!(
        texts,
        ["What is my cat called?", "Your cat is called Pixel."]
    );
    assert_eq!(
        said[1].context.as_deref(),
        Some("in reply to: What is my cat called?")
    );
    // The prompt the example built is the conversation's newest, naming its question.
    let scope = Scope::for_user("alice").unwrap().in_chat("web").unwrap();
    let kept = prompts::newest(memory.store().as_ref(), &scope)
        .await
        .unwrap();
    assert_eq!(kept.len(), 1);
    assert!(kept[0].1.next.is_some());

    // Reopened (another process), the next prompt holds the fact and the exchange and
    // repeats the start of the one before.
    drop(memory);
    let memory = store.open().await;
    let alice = memory.person("alice", "web").unwrap();
    let next = alice.context("And how old is she?", 2000).await.unwrap();
    let all: String = next.messages.iter().map(|m| m.content.as_str()).collect();
    assert!(all.contains("Pixel"), "{all}");
    assert_eq!(next.messages[0].role, ChatRole::System);
    assert!(
        next.report
            .cache
            .shared_prefix_tokens
            .is_some_and(|t| t > 0),
        "{:?}",
        next.report.cache
    );
}
