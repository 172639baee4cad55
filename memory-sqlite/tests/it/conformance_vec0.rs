//! Runs the conformance suite against `SqliteBackend` with the vector cache turned off, so
//! every semantic search goes through sqlite-vec's vec0 KNN and its filtered fallback.

use memory_core::testing::{Setup, TestBackend};
use memory_sqlite::{SqliteBackend, SqliteConfig};

async fn make(setup: Setup) -> TestBackend {
    let dir = tempfile::tempdir().expect("create a temp dir");
    let config = SqliteConfig {
        vector_cache_mib: 0,
        ..SqliteConfig::default()
    };
    let store = SqliteBackend::open(dir.path().join("memories.db"), setup.embedder, config)
        .await
        .expect("open a fresh store");
    TestBackend::new(std::sync::Arc::new(store)).with_guard(dir)
}

memory_core::backend_conformance!(make);
