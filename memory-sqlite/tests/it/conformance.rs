//! Runs the shared backend conformance suite against `SqliteBackend`, each scenario on a
//! fresh store file in its own temporary directory.

use memory_core::testing::{Setup, TestBackend};
use memory_sqlite::{SqliteBackend, SqliteConfig};

async fn make(setup: Setup) -> TestBackend {
    let dir = tempfile::tempdir().expect("create a temp dir");
    let store = SqliteBackend::open(
        dir.path().join("memories.db"),
        setup.embedder,
        SqliteConfig::default(),
    )
    .await
    .expect("open a fresh store");
    TestBackend::new(std::sync::Arc::new(store)).with_guard(dir)
}

memory_core::backend_conformance!(make);
