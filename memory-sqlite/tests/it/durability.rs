//! Durability and concurrency: a writer killed with SIGKILL mid-ingest loses no
//! acknowledged memory and leaves a consistent file; many tasks on many scopes at once
//! lose nothing and see nothing of each other.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;

use memory_core::{HashingEmbedder, MemoryBackend, MemoryId, NewMemory, Scope, SearchRequest};
use memory_sqlite::{SqliteBackend, SqliteConfig};

const CHILD_ENV: &str = "AVA_SQLITE_KILL_CHILD_DB";
const TEST_NAME: &str = "durability::sigkill_mid_ingest_loses_no_acknowledged_memory";

fn embedder() -> Option<Arc<dyn memory_core::EmbeddingProvider>> {
    Some(Arc::new(HashingEmbedder::new(64).unwrap()))
}

/// The child's job: store memories forever, printing each id once its store call returned.
async fn ingest_forever(path: &Path) -> ! {
    let store = SqliteBackend::open(path, embedder(), SqliteConfig::default())
        .await
        .unwrap();
    let mut out = std::io::stdout().lock();
    for i in 0u64.. {
        let scope = Scope::for_user(format!("user-{}", i % 7)).unwrap();
        let batch = (0..(1 + i % 3))
            .map(|j| NewMemory::new(format!("memory {i}.{j} about topic {}", i % 11)))
            .collect();
        for e in store.store_batch(&scope, batch).await.unwrap() {
            writeln!(out, "{} {}", e.scope.user(), e.id).unwrap();
        }
        out.flush().unwrap();
    }
    unreachable!()
}

fn table_count(c: &rusqlite::Connection, sql: &str) -> i64 {
    c.query_row(sql, [], |r| r.get(0)).unwrap()
}

#[tokio::test]
async fn sigkill_mid_ingest_loses_no_acknowledged_memory() {
    if let Ok(path) = std::env::var(CHILD_ENV) {
        ingest_forever(Path::new(&path)).await;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.db");
    // Run this same test binary as the child, filtered to this test.
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", TEST_NAME, "--nocapture", "--test-threads", "1"])
        .env(CHILD_ENV, &path)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut acknowledged: Vec<(String, MemoryId)> = Vec::new();
    let reader = BufReader::new(child.stdout.take().unwrap());
    for line in reader.lines() {
        let line = line.unwrap();
        let Some((user, id)) = line.split_once(' ') else {
            continue;
        };
        let Ok(id) = id.parse::<MemoryId>() else {
            continue;
        };
        acknowledged.push((user.to_owned(), id));
        if acknowledged.len() >= 1500 {
            child.kill().unwrap(); // SIGKILL on Unix: no destructor, no checkpoint.
            break;
        }
    }
    child.wait().unwrap();
    assert!(
        acknowledged.len() >= 1500,
        "the child ingested before it was killed"
    );

    {
        let c = rusqlite::Connection::open(&path).unwrap();
        let check: String = c
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .unwrap();
        assert_eq!(check, "ok");
    }
    let store = SqliteBackend::open(&path, embedder(), SqliteConfig::default())
        .await
        .unwrap();
    for (user, id) in &acknowledged {
        let scope = Scope::for_user(user).unwrap();
        store
            .get(&scope, *id)
            .await
            .unwrap_or_else(|e| panic!("acknowledged memory {id} lost: {e}"));
    }
    store.close().await;
    drop(store);
    // Every index agrees with the base table.
    sqlite_vec_consistency(&path);
}

fn sqlite_vec_consistency(path: &Path) {
    // The store registered sqlite-vec for this process already (vec0 needs it to be read).
    let c = rusqlite::Connection::open(path).unwrap();
    let base = table_count(&c, "SELECT COUNT(*) FROM memories");
    assert!(base > 0);
    assert_eq!(
        table_count(&c, "SELECT COUNT(*) FROM memory_fts"),
        base,
        "FTS rows match the base table"
    );
    assert_eq!(
        table_count(&c, "SELECT COUNT(*) FROM memory_vec"),
        base,
        "vec0 rows match the base table"
    );
    assert_eq!(
        table_count(
            &c,
            "SELECT COUNT(*) FROM memories m WHERE NOT EXISTS (SELECT 1 FROM memory_fts f WHERE f.rowid = m.pk)"
        ),
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_tasks_on_many_scopes_lose_nothing_and_leak_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.db");
    let store = Arc::new(
        SqliteBackend::open(&path, embedder(), SqliteConfig::default())
            .await
            .unwrap(),
    );
    let mut tasks = Vec::new();
    for t in 0..24 {
        let store = Arc::clone(&store);
        tasks.push(tokio::spawn(async move {
            let scope = Scope::for_user(format!("u{}", t % 6))
                .unwrap()
                .in_chat(format!("c{t}"))
                .unwrap();
            let mut ids = BTreeSet::new();
            for i in 0..40 {
                let e = store
                    .store(
                        &scope,
                        NewMemory::new(format!("common words entry {i} owner {t}")),
                    )
                    .await
                    .unwrap();
                ids.insert(e.id);
                if i % 4 == 0 {
                    for req in [
                        SearchRequest::keyword("common words"),
                        SearchRequest::hybrid("common words entry"),
                    ] {
                        for h in store.search(&scope, &req.limit(100)).await.unwrap() {
                            assert_eq!(h.entry.scope, scope);
                            assert!(
                                ids.contains(&h.entry.id),
                                "task {t} saw a memory it did not write"
                            );
                        }
                    }
                }
            }
            (scope, ids)
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.push(t.await.unwrap());
    }
    store.close().await;
    drop(store);
    let store = SqliteBackend::open(&path, embedder(), SqliteConfig::default())
        .await
        .unwrap();
    for (scope, ids) in all {
        let got = memory_core::testing::ids_in(&store, &scope).await;
        assert_eq!(
            got, ids,
            "every write of {scope} is there after reopening, and nothing else"
        );
    }
}
