//! The async-openai example's loop against a loopback OpenAI-compatible server: what the
//! model is sent holds what was kept, and each exchange is kept.

#[expect(
    dead_code,
    reason = "the example's main reads stdin; the test runs its loop's body"
)]
#[path = "../../examples/async_openai.rs"]
mod example;

use async_openai::Client;
use async_openai::config::OpenAIConfig;

use crate::common::{Store, chat_server, requests};

#[tokio::test]
async fn each_turn_sends_what_was_kept_and_keeps_the_exchange() {
    let server = chat_server("Noted, Lisbon it is.").await;
    let store = Store::new();
    let memory = store.open().await;
    let config = OpenAIConfig::new()
        .with_api_base(format!("{}/v1", server.uri()))
        .with_api_key("sk-test");
    let client = Client::with_config(config);
    let chat = memory.person("alice", "terminal").unwrap();

    let first = example::reply(&client, &chat, "I moved to Lisbon in May")
        .await
        .unwrap();
    assert_eq!(first, "Noted, Lisbon it is.");
    let second = example::reply(&client, &chat, "Where do I live now?")
        .await
        .unwrap();
    assert_eq!(second, "Noted, Lisbon it is.");

    let sent = requests(&server).await;
    assert_eq!(sent.len(), 2);
    assert!(sent[0].contains("I moved to Lisbon in May"), "{}", sent[0]);
    assert!(!sent[0].contains("Where do I live now?"), "{}", sent[0]);
    // The second call carries the first exchange, kept in the store between the two.
    assert!(sent[1].contains("I moved to Lisbon in May"), "{}", sent[1]);
    assert!(sent[1].contains("Where do I live now?"), "{}", sent[1]);
    let said = chat.history(4000).await.unwrap();
    assert_eq!(said.len(), 4, "two exchanges kept: {said:?}");
}
