//! Erased means gone from the file (issue 54, item 2): after `delete` and `delete_scope`,
//! no byte of the store's file, its write-ahead log or its shared-memory index holds the
//! deleted text (memories, their context, their records), while a neighbour's stays.

use std::path::Path;
use std::sync::Arc;

use memory_core::{
    EmbeddingProvider, HashingEmbedder, MemoryBackend, NewMemory, Record, Scope, SearchRequest,
    Timestamp,
};
use memory_sqlite::{SqliteBackend, SqliteConfig};

/// Where `needle` occurs in the store's files (`""`, `-wal`, `-shm`): the names of those
/// that hold it.
fn files_holding(db: &Path, needle: &str) -> Vec<String> {
    let mut out = Vec::new();
    for suffix in ["", "-wal", "-shm"] {
        let mut name = db.as_os_str().to_owned();
        name.push(suffix);
        let Ok(bytes) = std::fs::read(&name) else {
            continue;
        };
        let n = needle.as_bytes();
        if bytes.windows(n.len()).any(|w| w == n) {
            out.push(format!("{}{suffix}", db.display()));
        }
    }
    out
}

#[tokio::test]
async fn deleted_text_leaves_no_byte_in_the_file_or_its_log() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("memories.db");
    let embedder: Arc<dyn EmbeddingProvider> = Arc::new(HashingEmbedder::new(64).unwrap());
    let store = SqliteBackend::open(&db, Some(embedder), SqliteConfig::default())
        .await
        .unwrap();
    let alice = Scope::for_user("alice").unwrap().in_chat("group").unwrap();
    let carol = Scope::for_user("carol").unwrap();

    // Enough of the neighbours' text around it that the deleted rows share pages with
    // rows that stay (a deleted cell on a live page is what secure_delete overwrites).
    let mut batch: Vec<NewMemory> = (0..40)
        .map(|i| {
            NewMemory::new(format!(
                "neighbour note {i}: the kumquatorchard is in bloom"
            ))
        })
        .collect();
    batch.push(
        NewMemory::new("Alice lives at 12 Zanzibarquokka Lane")
            .with_context("she said: my address is 12 Zanzibarquokka Lane"),
    );
    let stored = store.store_batch(&alice, batch).await.unwrap();
    let secret = stored[40].id;
    store
        .keep_record(
            &alice,
            Record::new(
                "prompt",
                Timestamp::now(),
                "{\"question\":\"where is Zanzibarquokka Lane\"}",
            ),
            16,
        )
        .await
        .unwrap();
    store
        .store_batch(
            &carol,
            vec![NewMemory::new("Carol's password hint is xylophonewombat")],
        )
        .await
        .unwrap();
    store
        .keep_record(
            &carol,
            Record::new("prompt", Timestamp::now(), "recalled: xylophonewombat"),
            16,
        )
        .await
        .unwrap();
    // Searched, so the full-text index has read (and cached) its pages.
    for (scope, word) in [(&alice, "zanzibarquokka"), (&carol, "xylophonewombat")] {
        let hits = store
            .search(scope, &SearchRequest::keyword(word))
            .await
            .unwrap();
        assert_eq!(hits.len(), 1, "{word}");
    }

    store.delete(&alice, secret).await.unwrap();
    assert_eq!(store.delete_scope(&carol).await.unwrap(), 1);

    // Raw bytes, with the store still open (its close would checkpoint anyway).
    for secret in [
        "Zanzibarquokka",
        "zanzibarquokka",
        "xylophonewombat",
        "password hint",
        "12 Zanzibar",
    ] {
        assert_eq!(
            files_holding(&db, secret),
            Vec::<String>::new(),
            "{secret:?} is still readable"
        );
    }
    assert!(!files_holding(&db, "kumquatorchard").is_empty());
    let hits = store
        .search(&alice, &SearchRequest::keyword("kumquatorchard").limit(50))
        .await
        .unwrap();
    assert_eq!(hits.len(), 40);
    store.close().await;
}
