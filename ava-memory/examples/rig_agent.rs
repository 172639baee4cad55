//! A rig agent with Ava's memory: each conversation kept durable per person (rig's
//! `ConversationMemory`), and what Ava recalls for the prompt as its dynamic context (rig's
//! `VectorStoreIndex`), that person's only. Needs the `rig` feature and an OpenAI-compatible
//! server (`OPENAI_BASE_URL`, `OPENAI_API_KEY`):
//! `cargo run -p ava-memory --features rig --example rig_agent -- "What is my cat called?"`.

use ava_memory::Memory;
use ava_memory::rig::{AvaConversations, conversation_id};
use rig_core::client::CompletionClient;
use rig_core::completion::Prompt;
use rig_core::providers::openai;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let prompt = std::env::args().nth(1).unwrap_or_else(|| "Hello!".into());
    let memory = Memory::open("memories.db").await?.with_system_prompt("");
    let base =
        std::env::var("OPENAI_BASE_URL").unwrap_or_else(|_| "https://api.openai.com/v1".into());
    let key = std::env::var("OPENAI_API_KEY").unwrap_or_default();
    let client = openai::CompletionsClient::builder()
        .api_key(key)
        .base_url(base)
        .build()?;
    println!(
        "{}",
        ask(&client, &memory, "alice", "terminal", &prompt).await?
    );
    Ok(())
}

/// Asks `prompt` in `user`'s conversation `chat` with a rig agent whose history and
/// dynamic context are Ava's.
pub(crate) async fn ask(
    client: &openai::CompletionsClient,
    memory: &Memory,
    user: &str,
    chat: &str,
    prompt: &str,
) -> Result<String, Box<dyn std::error::Error>> {
    let conversation = memory.person(user, chat)?;
    let agent = client
        .agent(openai::GPT_4O_MINI)
        .preamble("You are a friendly assistant. Use what you recall about the user.")
        .memory(AvaConversations::new(memory.clone(), 1000))
        .dynamic_context(5, conversation.index())
        .build();
    let id = conversation_id(conversation.scope());
    Ok(agent.prompt(prompt).conversation(id).await?)
}
