//! The rig example's agent against a loopback OpenAI-compatible server: Ava as its
//! conversation memory and dynamic context. A fact kept in one conversation of a person
//! reaches the model's prompt in a later conversation of theirs, and never another
//! person's; a conversation's history survives reopening the store.

#[expect(
    dead_code,
    reason = "the example's main reads its prompt from the command line; the test calls ask"
)]
#[path = "../../examples/rig_agent.rs"]
mod example;

use ava_memory::rig::{AvaConversations, conversation_id, scope_of};
use rig_core::memory::ConversationMemory;
use rig_core::providers::openai;

use crate::common::{Store, chat_server, requests};

fn client(server: &wiremock::MockServer) -> openai::CompletionsClient {
    openai::CompletionsClient::builder()
        .api_key("sk-test")
        .base_url(format!("{}/v1", server.uri()))
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_fact_kept_in_one_conversation_reaches_a_later_one_of_that_person_only() {
    let server = chat_server("Happy to help.").await;
    let client = client(&server);
    let store = Store::new();
    let memory = store.open().await.with_system_prompt("");

    // Alice, in her first conversation, says it; the program keeps it as a fact there.
    let answer = example::ask(
        &client,
        &memory,
        "alice",
        "monday",
        "My cat is called Pixel",
    )
    .await
    .unwrap();
    assert_eq!(answer, "Happy to help.");
    memory
        .person("alice", "monday")
        .unwrap()
        .remember_fact("Alice's cat is called Pixel")
        .await
        .unwrap();

    // Later, in another conversation: the prompt the model gets holds it.
    example::ask(
        &client,
        &memory,
        "alice",
        "friday",
        "What is my cat called?",
    )
    .await
    .unwrap();
    // Bob, asking the same: never.
    example::ask(&client, &memory, "bob", "friday", "What is my cat called?")
        .await
        .unwrap();
    let sent = requests(&server).await;
    assert_eq!(sent.len(), 3);
    assert!(
        sent[1].contains("Pixel"),
        "Alice's later prompt:\n{}",
        sent[1]
    );
    assert!(!sent[2].contains("Pixel"), "Bob's prompt:\n{}", sent[2]);
    assert!(sent[2].contains("What is my cat called?"), "{}", sent[2]);
}

#[tokio::test]
async fn a_conversation_is_durable_bounded_and_cleared_through_rig() {
    let server = chat_server("Noted.").await;
    let client = client(&server);
    let store = Store::new();
    let memory = store.open().await.with_system_prompt("");
    example::ask(
        &client,
        &memory,
        "alice",
        "monday",
        "I am planning a trip to Porto",
    )
    .await
    .unwrap();
    drop(memory);

    // Another process: rig loads the conversation from the store and sends it again.
    let memory = store.open().await.with_system_prompt("");
    example::ask(&client, &memory, "alice", "monday", "Where was I going?")
        .await
        .unwrap();
    let sent = requests(&server).await;
    assert!(
        sent[1].contains("I am planning a trip to Porto"),
        "{}",
        sent[1]
    );
    assert!(
        sent[1].contains("Noted."),
        "the answer is history too: {}",
        sent[1]
    );

    let conversations = AvaConversations::new(memory.clone(), 1000);
    let id = conversation_id(memory.person("alice", "monday").unwrap().scope());
    assert_eq!(scope_of(&id).unwrap().chat(), Some("monday"));
    assert_eq!(conversations.load(&id).await.unwrap().len(), 4);
    // Bounded by the budget, not the whole log: the newest that fit.
    let small = AvaConversations::new(memory.clone(), 12);
    let newest = small.load(&id).await.unwrap();
    assert!(!newest.is_empty() && newest.len() < 4, "{newest:?}");
    conversations.clear(&id).await.unwrap();
    assert!(conversations.load(&id).await.unwrap().is_empty());
    // An id that names no scope is refused, not kept where nothing could find it.
    assert!(conversations.load("thread-1").await.is_err());
}
