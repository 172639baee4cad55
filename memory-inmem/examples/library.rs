//! The "Using the library" example of docs/library.md, compiled with the tests (`tidy.rs`
//! checks the page shows this file's code as it is).

use std::sync::Arc;

use memory_core::{HashingEmbedder, MemoryBackend, NewMemory, Scope, SearchRequest};
use memory_inmem::InMemoryBackend;

#[tokio::main]
async fn main() -> memory_core::Result<()> {
    let embedder = Arc::new(HashingEmbedder::new(256)?);
    let backend: Arc<dyn MemoryBackend> = Arc::new(InMemoryBackend::new(Some(embedder)));
    let scope = Scope::for_user("42")?.in_chat("7")?;
    let memory = NewMemory::new("My cat is called Pixel");
    backend.store(&scope, memory).await?;
    let request = SearchRequest::hybrid("cat name").limit(3);
    for hit in backend.search(&scope, &request).await? {
        // The score, the memory, and how the score was made.
        println!("{:.2} {} {:?}", hit.score, hit.entry.content, hit.breakdown);
    }
    Ok(())
}
