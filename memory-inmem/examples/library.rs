//! The store on its own: a memory kept in the in-memory backend and found again by a raw
//! hybrid search, with how each score was made (the facade, `ava-memory`, is what an agent
//! uses; this is what it stands on).

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
