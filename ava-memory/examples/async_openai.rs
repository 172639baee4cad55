//! The ten-line loop with async-openai: for each line on stdin, Ava's messages for it go to
//! an OpenAI-compatible server (`OPENAI_BASE_URL`, `OPENAI_API_KEY`), and the exchange is
//! kept. `cargo run -p ava-memory --example async_openai`.

use async_openai::Client;
use async_openai::config::OpenAIConfig;
use async_openai::types::chat::{ChatCompletionRequestMessage, CreateChatCompletionRequest};
use ava_memory::{Conversation, Memory};
use tokio::io::AsyncBufReadExt;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let memory = Memory::open("memories.db").await?;
    let base =
        std::env::var("OPENAI_BASE_URL").unwrap_or_else(|_| "https://api.openai.com/v1".into());
    let key = std::env::var("OPENAI_API_KEY").unwrap_or_default();
    let client = Client::with_config(OpenAIConfig::new().with_api_base(base).with_api_key(key));
    let chat = memory.person("alice", "terminal")?;
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    while let Some(line) = lines.next_line().await? {
        println!("{}", reply(&client, &chat, &line).await?);
    }
    Ok(())
}

/// Ava's messages for `message` to the model, then the exchange kept; the model's answer.
pub(crate) async fn reply(
    client: &Client<OpenAIConfig>,
    chat: &Conversation,
    message: &str,
) -> Result<String, Box<dyn std::error::Error>> {
    let context = chat.context(message, 4000).await?;
    let messages: Vec<ChatCompletionRequestMessage> =
        serde_json::from_value(serde_json::to_value(&context.messages)?)?;
    let request = CreateChatCompletionRequest {
        model: "gpt-4o-mini".into(),
        messages,
        ..Default::default()
    };
    let response = client.chat().create(request).await?;
    let answer = response
        .choices
        .into_iter()
        .next()
        .and_then(|c| c.message.content);
    let answer = answer.unwrap_or_default();
    chat.remember(message, Some(&answer)).await?;
    Ok(answer)
}
