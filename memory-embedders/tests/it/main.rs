//! memory-embedders' integration tests, one crate (one link), a module per provider, each
//! built with its provider's feature: Ollama and OpenAI-compatible clients against loopback
//! servers speaking their wire protocols, and the local model against its published
//! reference similarities.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test's helpers fail loudly on an unexpected error"
)]

#[cfg(feature = "local")]
mod embed_local;
#[cfg(feature = "ollama")]
mod embed_ollama;
#[cfg(feature = "openai")]
mod embed_openai;
