//! Ava in a program of your own: open a store, keep what a person tells, and get the
//! messages for the next model call. `cargo run -p ava-memory --example quickstart`.

use ava_memory::Memory;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The embedder `ava` would choose: the local model if installed, else keywords only.
    let memory = Memory::open("memories.db").await?;
    quickstart(&memory).await
}

pub(crate) async fn quickstart(memory: &Memory) -> Result<(), Box<dyn std::error::Error>> {
    let alice = memory.person("alice", "web")?;
    alice.remember_fact("Alice's cat is called Pixel").await?;
    let question = "What is my cat called?";
    let context = alice.context(question, 2000).await?;
    for message in &context.messages {
        println!("{:?}: {}", message.role, message.content);
    }
    // Send `context.messages` to the model, then keep the exchange:
    let answer = "Your cat is called Pixel.";
    alice.remember(question, Some(answer)).await?;
    Ok(())
}
