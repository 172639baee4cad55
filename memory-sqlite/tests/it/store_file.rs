//! The store as a file: persistence, refusing foreign / corrupt / newer files without
//! touching them, embedding-space checks, backfill and `reembed`.

use std::path::Path;
use std::sync::Arc;

use memory_core::{
    EmbeddingProvider, EmbeddingSpace, Filter, HashingEmbedder, MemoryBackend, MemoryError,
    NewMemory, Scope, SearchRequest,
};
use memory_sqlite::{SqliteBackend, SqliteConfig, reembed};

fn hash(dims: usize) -> Option<Arc<dyn EmbeddingProvider>> {
    Some(Arc::new(HashingEmbedder::new(dims).unwrap()))
}

fn scope() -> Scope {
    Scope::for_user("42").unwrap().in_chat("7").unwrap()
}

async fn open(
    path: &Path,
    embedder: Option<Arc<dyn EmbeddingProvider>>,
) -> memory_core::Result<SqliteBackend> {
    Ok(SqliteBackend::open(path, embedder, SqliteConfig::default()).await?)
}

/// A backend error's whole chain, each fact said once.
fn backend_message(err: &MemoryError) -> String {
    assert!(
        matches!(err, MemoryError::Backend { .. }),
        "expected a backend error, got {err:?}"
    );
    assert_eq!(memory_core::repeated_cause(err), None, "{err:?}");
    memory_core::ErrorChain(err).to_string()
}

/// Name, size and content hash of every file in the store's directory, to prove a refused
/// open changed nothing (no byte of the file, no new -wal or -shm file).
fn snapshot(path: &Path) -> Vec<(String, usize, u64)> {
    use std::hash::{Hash, Hasher};
    let dir = path.parent().unwrap();
    let mut files: Vec<(String, usize, u64)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap();
            let mut h = std::collections::hash_map::DefaultHasher::new();
            bytes.hash(&mut h);
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                bytes.len(),
                h.finish(),
            )
        })
        .collect();
    files.sort();
    files
}

#[tokio::test]
async fn memories_survive_close_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.db");
    let store = open(&path, hash(64)).await.unwrap();
    let e = store
        .store(
            &scope(),
            NewMemory::new("the blue notebook is in the drawer"),
        )
        .await
        .unwrap();
    store.close().await;
    assert!(
        store.count(&scope()).await.is_err(),
        "a closed store refuses work"
    );
    drop(store);

    let store = open(&path, hash(64)).await.unwrap();
    assert_eq!(store.get(&scope(), e.id).await.unwrap(), e);
    let hits = store
        .search(&scope(), &SearchRequest::hybrid("blue notebook"))
        .await
        .unwrap();
    assert_eq!(hits[0].entry.id, e.id);
    assert!(
        store
            .capabilities()
            .supports(memory_core::Capability::Persistence)
    );
    assert_eq!(
        store.info().location.as_deref(),
        Some(path.to_str().unwrap())
    );
}

#[tokio::test]
async fn a_text_file_is_refused_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notes.txt");
    std::fs::write(&path, "these are my notes, not a database\n".repeat(100)).unwrap();
    let before = snapshot(&path);
    let err = open(&path, None).await.unwrap_err();
    let msg = backend_message(&err);
    assert!(
        msg.contains("not an SQLite database") && msg.contains("untouched"),
        "{msg}"
    );
    assert_eq!(snapshot(&path), before);
}

#[tokio::test]
async fn another_applications_database_is_refused_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.db");
    {
        let c = rusqlite::Connection::open(&path).unwrap();
        c.execute_batch("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL); INSERT INTO invoices VALUES (1, 9.5);")
            .unwrap();
    }
    let before = snapshot(&path);
    let msg = backend_message(&open(&path, hash(64)).await.unwrap_err());
    assert!(
        msg.contains("another application") && msg.contains("invoices"),
        "{msg}"
    );
    assert_eq!(
        snapshot(&path),
        before,
        "no byte changed, no -wal or -shm file appeared"
    );
}

#[tokio::test]
async fn a_store_from_a_newer_ava_is_refused_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.db");
    open(&path, None).await.unwrap().close().await;
    {
        let c = rusqlite::Connection::open(&path).unwrap();
        c.execute_batch("PRAGMA user_version = 99;").unwrap();
    }
    let before = snapshot(&path);
    let msg = backend_message(&open(&path, None).await.unwrap_err());
    assert!(
        msg.contains("schema version 99") && msg.contains("upgrade Ava"),
        "{msg}"
    );
    assert_eq!(snapshot(&path), before);
}

#[tokio::test]
async fn a_corrupt_store_gives_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.db");
    let store = open(&path, hash(64)).await.unwrap();
    let batch = (0..400)
        .map(|i| NewMemory::new(format!("memory number {i} with some padding text")))
        .collect();
    store.store_batch(&scope(), batch).await.unwrap();
    store.close().await;
    drop(store);
    // Scribble over everything after the first page (the header stays valid).
    let mut bytes = std::fs::read(&path).unwrap();
    assert!(bytes.len() > 8192, "the store spans several pages");
    for b in bytes[4096..].iter_mut() {
        *b = 0xA5;
    }
    std::fs::write(&path, &bytes).unwrap();
    let result = match open(&path, None).await {
        Err(e) => Err(e),
        Ok(store) => store
            .recent(&scope(), 10, &Filter::default())
            .await
            .map(drop),
    };
    let msg = backend_message(&result.unwrap_err());
    assert!(
        (msg.contains("corrupt") && msg.contains(".recover"))
            || msg.contains("not an SQLite database"),
        "{msg}"
    );
}

#[tokio::test]
async fn a_missing_directory_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("no/such/dir/m.db");
    let msg = backend_message(&open(&path, None).await.unwrap_err());
    assert!(
        msg.contains("does not exist") && msg.contains("no/such/dir"),
        "{msg}"
    );
}

#[tokio::test]
async fn another_embedding_space_is_refused_until_reembedded() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.db");
    let store = open(&path, hash(64)).await.unwrap();
    let batch: Vec<NewMemory> = [
        "grey cat named Pixel",
        "trip to Kyoto in April",
        "allergic to peanuts",
    ]
    .into_iter()
    .map(NewMemory::new)
    .collect();
    let stored = store.store_batch(&scope(), batch).await.unwrap();
    store.close().await;
    drop(store);

    let msg = backend_message(&open(&path, hash(32)).await.unwrap_err());
    assert!(
        msg.contains("64 dims") && msg.contains("32 dims") && msg.contains("re-embed"),
        "{msg}"
    );

    let report = reembed(&path, hash(32).unwrap(), SqliteConfig::default())
        .await
        .unwrap();
    assert_eq!(report.memories, 3);
    assert!(report.previous_space.unwrap().contains("64 dims"));
    let store = open(&path, hash(32)).await.unwrap();
    assert_eq!(store.count(&scope()).await.unwrap(), 3, "no memory lost");
    assert_eq!(store.info().embedding_space.unwrap().dims, 32);
    let hits = store
        .search(&scope(), &SearchRequest::semantic("Kyoto trip").limit(1))
        .await
        .unwrap();
    assert_eq!(
        hits[0].entry.id, stored[1].id,
        "vectors of the new space are searchable"
    );
    for e in &stored {
        assert_eq!(store.get(&scope(), e.id).await.unwrap().content, e.content);
    }
}

/// A long memory embedded whole (by a build, or an embedder, without a window) keeps one
/// vector of its head, so its end is not found by meaning; `reembed` with an embedder that
/// declares its window gives it one vector per passage, and its end is found.
#[tokio::test]
async fn reembed_gives_long_memories_their_passages() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.db");
    let whole = memory_core::HashingEmbedder::new(384).unwrap();
    let windowed: Arc<dyn EmbeddingProvider> = Arc::new(whole.clone().with_window(120));
    let head_only: Arc<dyn EmbeddingProvider> = Arc::new(whole.clone().with_window(120));
    // The old build: the same space, read through the window, but no passages declared.
    #[derive(Debug)]
    struct NoWindow(Arc<dyn EmbeddingProvider>);
    #[async_trait::async_trait]
    impl EmbeddingProvider for NoWindow {
        fn space(&self) -> Arc<memory_core::EmbeddingSpace> {
            self.0.space()
        }
        async fn embed_batch(
            &self,
            texts: &[&str],
        ) -> memory_core::Result<Vec<memory_core::Embedding>> {
            self.0.embed_batch(texts).await
        }
    }
    let store = open(&path, Some(Arc::new(NoWindow(head_only))))
        .await
        .unwrap();
    let text = format!(
        "{}The harbour master keeps a blue canoe.",
        "Notes on the weekly budget review and its figures. ".repeat(6)
    );
    let long = store.store(&scope(), NewMemory::new(text)).await.unwrap();
    store
        .store(&scope(), NewMemory::new("a red bicycle in the shed"))
        .await
        .unwrap();
    let query = SearchRequest::semantic("harbour master canoe").limit(1);
    let hits = store.search(&scope(), &query).await.unwrap();
    assert!(
        hits.first()
            .is_none_or(|h| h.entry.id != long.id || h.score < 0.1),
        "{hits:#?}"
    );
    store.close().await;
    drop(store);

    let report = reembed(&path, Arc::clone(&windowed), SqliteConfig::default())
        .await
        .unwrap();
    assert_eq!(report.memories, 2);
    let store = open(&path, Some(windowed)).await.unwrap();
    let hits = store.search(&scope(), &query).await.unwrap();
    assert_eq!(hits.first().map(|h| h.entry.id), Some(long.id), "{hits:#?}");
    assert!(hits[0].score > 0.4, "{hits:#?}");
    assert_eq!(store.count(&scope()).await.unwrap(), 2, "no memory lost");
}

#[tokio::test]
async fn keyword_only_memories_are_embedded_when_an_embedder_arrives() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.db");
    let store = open(&path, None).await.unwrap();
    assert!(
        !store
            .capabilities()
            .supports(memory_core::Capability::SemanticSearch)
    );
    let e = store
        .store(
            &scope(),
            NewMemory::new("the spare key is under the flowerpot"),
        )
        .await
        .unwrap();
    assert!(!e.embedded);
    let space = Arc::new(EmbeddingSpace::new("hash", "fnv1a-words-v1", 64).unwrap());
    let v = memory_core::Embedding::new(space, vec![0.1; 64]).unwrap();
    assert!(
        store
            .store(&scope(), NewMemory::new("x").with_embedding(v))
            .await
            .unwrap_err()
            .is_unsupported()
    );
    store.close().await;
    drop(store);

    let store = open(&path, hash(64)).await.unwrap();
    assert!(
        !store.get(&scope(), e.id).await.unwrap().embedded,
        "opening embeds nothing (a store may hold many scopes without vectors)"
    );
    let hits = store
        .search(
            &scope(),
            &SearchRequest::semantic("where is the spare key").limit(1),
        )
        .await
        .unwrap();
    assert_eq!(
        hits[0].entry.id, e.id,
        "the search embedded its scope first"
    );
    assert!(store.get(&scope(), e.id).await.unwrap().embedded);
    store.close().await;
    drop(store);
    // Back to keyword-only (say the model went missing): still opens, still searchable by words.
    let store = open(&path, None).await.unwrap();
    let hits = store
        .search(&scope(), &SearchRequest::keyword("flowerpot"))
        .await
        .unwrap();
    assert_eq!(hits[0].entry.id, e.id);
}

#[tokio::test]
async fn a_second_connection_sees_the_other_ones_writes() {
    // Two stores on one file stand in for two processes (say the bot and `ava remember`).
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.db");
    let a = open(&path, hash(64)).await.unwrap();
    let b = open(&path, hash(64)).await.unwrap();
    let s = scope();
    let first = a
        .store(&s, NewMemory::new("the red kite flies high"))
        .await
        .unwrap();
    // A's vector block for the scope is now loaded.
    let hits = a
        .search(&s, &SearchRequest::semantic("red kite").limit(5))
        .await
        .unwrap();
    assert_eq!(hits.len(), 1);

    let second = b
        .store(&s, NewMemory::new("a red kite nest in the oak"))
        .await
        .unwrap();
    let hits = a
        .search(&s, &SearchRequest::semantic("red kite nest").limit(5))
        .await
        .unwrap();
    let ids: Vec<_> = hits.iter().map(|h| h.entry.id).collect();
    assert!(ids.contains(&second.id), "A sees B's new memory: {ids:?}");

    b.delete(&s, first.id).await.unwrap();
    let hits = a
        .search(&s, &SearchRequest::semantic("red kite").limit(5))
        .await
        .unwrap();
    assert!(
        hits.iter().all(|h| h.entry.id != first.id),
        "A no longer returns what B deleted"
    );
}

#[tokio::test]
async fn keyword_search_stems_words_and_reads_what_a_reply_answered() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir.path().join("m.db"), None).await.unwrap();
    let s = scope();
    let reply = store
        .store(
            &s,
            NewMemory::new("Yes! I went yesterday, it was lovely.")
                .with_context("in reply to: Did you go to the pottery workshop?"),
        )
        .await
        .unwrap();
    let direct = store
        .store(&s, NewMemory::new("The pottery workshop opens in May."))
        .await
        .unwrap();
    let painted = store
        .store(&s, NewMemory::new("Melanie painted a sunrise last year."))
        .await
        .unwrap();

    // The reply shares no word with the question; its context does. A memory whose own
    // text matches still ranks first, since context counts for less.
    let hits = store
        .search(&s, &SearchRequest::keyword("pottery workshop"))
        .await
        .unwrap();
    let ids: Vec<_> = hits.iter().map(|h| h.entry.id).collect();
    assert_eq!(ids, vec![direct.id, reply.id], "{hits:#?}");
    // Porter stemming: "paintings" and "paint" meet at the same stem.
    let hits = store
        .search(&s, &SearchRequest::keyword("paintings"))
        .await
        .unwrap();
    assert_eq!(hits[0].entry.id, painted.id);
    // Changing the context re-indexes it.
    let patch = memory_core::MemoryPatch {
        context: Some(None),
        ..Default::default()
    };
    store.update(&s, reply.id, patch).await.unwrap();
    let hits = store
        .search(&s, &SearchRequest::keyword("pottery workshop"))
        .await
        .unwrap();
    assert_eq!(
        hits.iter().map(|h| h.entry.id).collect::<Vec<_>>(),
        vec![direct.id]
    );
}

/// `tests/it/fixtures/store-v1.db` was written by the schema-1 build (commit a873313): five
/// memories with a 64-d hashing embedder, three for alice in chat 100 (one fact tagged
/// `pets` and one with a context), two for bob (one a `pets` fact). Opening a copy upgrades
/// it to the current schema, and every memory stays findable, by keyword and by meaning,
/// in its own scope only.
#[tokio::test]
async fn a_schema_1_store_is_migrated_without_losing_a_memory() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/fixtures/store-v1.db"),
        &path,
    )
    .unwrap();
    let version = |path: &Path| -> i64 {
        rusqlite::Connection::open(path)
            .unwrap()
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap()
    };
    assert_eq!(version(&path), 1);

    let store = open(&path, hash(64)).await.unwrap();
    let alice = Scope::for_user("alice").unwrap().in_chat("100").unwrap();
    let bob = Scope::for_user("bob").unwrap();
    let texts = |hits: Vec<memory_core::ScoredMemory>| -> Vec<String> {
        hits.into_iter().map(|h| h.entry.content).collect()
    };

    // Keyword search reads the rebuilt index (stemmed: "cats" finds "cat's"), and the
    // context column came along.
    let cat = texts(
        store
            .search(&alice, &SearchRequest::keyword("cats"))
            .await
            .unwrap(),
    );
    assert_eq!(cat, ["Pixel is the name of Alice's cat"]);
    let lessons = texts(
        store
            .search(&alice, &SearchRequest::keyword("lessons"))
            .await
            .unwrap(),
    );
    assert_eq!(lessons, ["Alice is learning to play the cello"]);
    let dog = texts(
        store
            .search(&bob, &SearchRequest::keyword("dog"))
            .await
            .unwrap(),
    );
    assert_eq!(dog, ["Bob's dog is called Rex"]);
    // Scopes are still apart: alice's words are not found in bob's scope.
    assert!(
        store
            .search(&bob, &SearchRequest::keyword("cello"))
            .await
            .unwrap()
            .is_empty()
    );
    // Vectors came through the migration (schema 7 rewrote their table).
    let tea = texts(
        store
            .search(
                &alice,
                &SearchRequest::semantic("Alice prefers green tea over coffee"),
            )
            .await
            .unwrap(),
    );
    assert_eq!(tea[0], "Alice prefers green tea over coffee");
    let all = Filter::default();
    assert_eq!(store.recent(&alice, 10, &all).await.unwrap().len(), 3);
    assert_eq!(store.recent(&bob, 10, &all).await.unwrap().len(), 2);
    let pets = memory_core::TagQuery::any([memory_core::Tag::new("pets").unwrap()]);
    let bob_pets = store.by_tags(&bob, &pets, 10).await.unwrap();
    assert_eq!(bob_pets.len(), 1);
    assert_eq!(bob_pets[0].content, "Bob's dog is called Rex");

    // A memory stored and forgotten after the migration behaves as in a new store.
    let added = store
        .store(&bob, NewMemory::new("Bob's cat is called Tom"))
        .await
        .unwrap();
    assert_eq!(
        store
            .search(&bob, &SearchRequest::keyword("cat"))
            .await
            .unwrap()
            .len(),
        1
    );
    store.delete(&bob, added.id).await.unwrap();
    assert!(
        store
            .search(&bob, &SearchRequest::keyword("tom"))
            .await
            .unwrap()
            .is_empty()
    );
    // The leases' table came with the migration.
    let ttl = std::time::Duration::from_secs(60);
    assert!(store.try_lease("upkeep", "a", ttl).await.unwrap());
    assert!(!store.try_lease("upkeep", "b", ttl).await.unwrap());
    // So did the records' (schema 8), in a scope from before and a new one.
    let at = memory_core::Timestamp::now();
    for (i, s) in [&alice, &bob.in_chat("new").unwrap()]
        .into_iter()
        .enumerate()
    {
        for n in 0..3 {
            let record = memory_core::Record::new("prompt", at, format!("{i}.{n}"));
            store.keep_record(s, record, 2).await.unwrap();
        }
        let kept: Vec<String> = store
            .records(s, "prompt", 10)
            .await
            .unwrap()
            .into_iter()
            .map(|r| r.body)
            .collect();
        assert_eq!(kept, [format!("{i}.2"), format!("{i}.1")]);
    }
    store.close().await;

    assert_eq!(version(&path), 9);
    let c = rusqlite::Connection::open(&path).unwrap();
    let ok: String = c
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(ok, "ok");
    let fts: i64 = c
        .query_row("SELECT COUNT(*) FROM memory_fts", [], |r| r.get(0))
        .unwrap();
    assert_eq!(fts, 5);
    let records: i64 = c
        .query_row("SELECT COUNT(*) FROM records", [], |r| r.get(0))
        .unwrap();
    assert_eq!(records, 4);
    // Each of the five vectors has its code beside it: 64 codes and a 4-byte step in
    // every slot of the code column's chunks (vec0's shadow tables, readable without it).
    let vectors: i64 = c
        .query_row("SELECT COUNT(*) FROM memory_vec_rowids", [], |r| r.get(0))
        .unwrap();
    assert_eq!(vectors, 5);
    let widths: Vec<i64> = c
        .prepare("SELECT length(vectors) FROM memory_vec_vector_chunks01")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    assert!(!widths.is_empty());
    assert!(widths.iter().all(|w| *w == 64 * 68), "{widths:?}");
}

/// Commits only append to the write-ahead log; the store's checkpointer copies the log into
/// the database file in the background once it passes 1000 pages (16 MiB at the default
/// page size). Ingesting about 25 MB of vectors must therefore reach the database file
/// while the store is still open; had nothing checkpointed, the file would stay at its
/// schema's few hundred KB until `close`.
#[tokio::test]
async fn the_log_is_checkpointed_into_the_file_while_the_store_is_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.db");
    let embedder = HashingEmbedder::new(384).unwrap();
    let space = embedder.space();
    let store = open(&path, Some(Arc::new(embedder))).await.unwrap();
    let mut seed = 1u32;
    let mut unit = move || {
        seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        (seed >> 8) as f32 / (1u32 << 24) as f32 - 0.5
    };
    for batch in 0..16 {
        let memories: Vec<NewMemory> = (0..1000)
            .map(|i| {
                let v: Vec<f32> = (0..384).map(|_| unit()).collect();
                NewMemory::new(format!("memory {i} of batch {batch}"))
                    .with_embedding(memory_core::Embedding::new(space.clone(), v).unwrap())
            })
            .collect();
        store.store_batch(&scope(), memories).await.unwrap();
    }
    let file_len = || std::fs::metadata(&path).unwrap().len();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while file_len() < 16 << 20 && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(
        file_len() >= 16 << 20,
        "database file is {} bytes after 24 MB of vectors",
        file_len()
    );
    assert_eq!(store.count(&scope()).await.unwrap(), 16_000);
    store.close().await;
    // Closing checkpointed the rest and removed the log.
    assert!(!dir.path().join("m.db-wal").exists());
    let reopened = open(&path, hash(384)).await.unwrap();
    assert_eq!(reopened.count(&scope()).await.unwrap(), 16_000);
}

/// A batch whose third id is taken writes nothing, and the conflict names that id (not the
/// batch's first).
#[tokio::test]
async fn a_taken_id_in_a_batch_is_the_one_reported() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir.path().join("m.db"), hash(64)).await.unwrap();
    let taken = memory_core::MemoryId::new();
    store
        .store(&scope(), NewMemory::new("first").with_id(taken))
        .await
        .unwrap();
    let batch = vec![
        NewMemory::new("a").with_id(memory_core::MemoryId::new()),
        NewMemory::new("b"),
        NewMemory::new("c").with_id(taken),
        NewMemory::new("d"),
    ];
    match store.store_batch(&scope(), batch).await {
        Err(MemoryError::Conflict { id }) => assert_eq!(id, taken),
        other => panic!("expected a conflict on {taken}, got {other:?}"),
    }
    assert_eq!(
        store.count(&scope()).await.unwrap(),
        1,
        "nothing was written"
    );
    store.close().await;
}

/// How many vectors each memory of the file at `path` holds (`memories.embedded`), in the
/// order the memories were said.
fn vectors_per_memory(path: &Path) -> Vec<i64> {
    let conn = rusqlite::Connection::open(path).unwrap();
    let mut stmt = conn
        .prepare("SELECT embedded FROM memories ORDER BY created_at, pk")
        .unwrap();
    stmt.query_map([], |r| r.get(0))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap()
}

/// A message kept in parts costs the embedder one memory's passages and a vector for each
/// further part (issue 54, D1): its first part is embedded passage by passage, each later part
/// by its head, when it is stored, when a keyword-only store's memories are embedded later, and
/// by `reembed`.
#[tokio::test]
async fn a_message_in_parts_is_embedded_by_passages_in_its_first_part_only() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.db");
    let windowed: Arc<dyn EmbeddingProvider> =
        Arc::new(HashingEmbedder::new(64).unwrap().with_window(200));
    let message = |topic: &str, at: i64| {
        let text: String = (0..300)
            .map(|i| format!("Sentence {i} of the {topic} notes. "))
            .collect();
        NewMemory::new(text)
            .at(memory_core::Timestamp::from_millis(at).unwrap())
            .split_to_fit(2000)
    };
    let store = open(&path, Some(Arc::clone(&windowed))).await.unwrap();
    let first = message("harbour", 1_700_000_000_000);
    let parts = first.len();
    assert!(parts >= 4, "{parts}");
    store.store_batch(&scope(), first).await.unwrap();
    store.close().await;
    drop(store);
    let counts = vectors_per_memory(&path);
    assert!(
        counts[0] >= 10,
        "the first part by its passages: {counts:?}"
    );
    assert!(counts[1..].iter().all(|&n| n == 1), "{counts:?}");

    // Stored without an embedder, embedded by the next search of the scope.
    let store = open(&path, None).await.unwrap();
    let second = message("garden", 1_700_000_100_000);
    let more = second.len();
    store.store_batch(&scope(), second).await.unwrap();
    store.close().await;
    drop(store);
    assert!(vectors_per_memory(&path)[parts..].iter().all(|&n| n == 0));
    let store = open(&path, Some(Arc::clone(&windowed))).await.unwrap();
    store
        .search(&scope(), &SearchRequest::semantic("garden notes").limit(1))
        .await
        .unwrap();
    store.close().await;
    drop(store);
    let counts = vectors_per_memory(&path);
    assert_eq!(counts.len(), parts + more);
    assert!(counts[parts] >= 10, "{counts:?}");
    assert!(counts[parts + 1..].iter().all(|&n| n == 1), "{counts:?}");

    let before = counts;
    reembed(&path, windowed, SqliteConfig::default())
        .await
        .unwrap();
    assert_eq!(
        vectors_per_memory(&path),
        before,
        "reembed follows the same rule"
    );
}
