//! Runs the shared backend conformance suite against `InMemoryBackend`.

use std::sync::Arc;

use memory_core::testing::{Setup, TestBackend};
use memory_inmem::InMemoryBackend;

async fn make(setup: Setup) -> TestBackend {
    TestBackend::new(Arc::new(InMemoryBackend::new(setup.embedder)))
}

memory_core::backend_conformance!(make);
