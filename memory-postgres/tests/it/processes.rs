//! Two processes on one store: this test binary runs itself twice as children, each
//! writing to and searching its own scopes of the same Postgres schema at the same time.
//! Afterwards every acknowledged write is there, and no search ever returned a memory of
//! another scope; and `reembed` beside a writer and cut short (`reembed`). Needs
//! `MEMORY_PG_URL`.

use crate::common;
mod reembed;

use std::collections::{BTreeSet, HashMap};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;

use memory_core::{
    EmbeddingProvider, HashingEmbedder, MemoryBackend, MemoryId, NewMemory, Scope, SearchRequest,
};
use memory_postgres::{PostgresBackend, PostgresConfig};

const CHILD_ENV: &str = "AVA_PG_TWO_PROCESS_CHILD";
const TEST_NAME: &str = "processes::two_processes_share_a_store_without_loss_or_leaks";
const WRITES: usize = 120;
const SCOPES_PER_CHILD: usize = 3;

fn embedder() -> Option<Arc<dyn EmbeddingProvider>> {
    Some(Arc::new(HashingEmbedder::new(32).unwrap()))
}

fn scope(child: usize, i: usize) -> Scope {
    // Both children use the same user and chats; only the thread differs, so a scope
    // filter that ignored any key would show up as a leak.
    Scope::for_user("shared-user")
        .unwrap()
        .in_chat(format!("chat-{i}"))
        .unwrap()
        .in_thread(format!("child-{child}"))
        .unwrap()
}

async fn open(url: &str, schema: &str) -> PostgresBackend {
    let config = PostgresConfig {
        schema: schema.to_owned(),
        pool_size: 3,
        ..PostgresConfig::default()
    };
    PostgresBackend::connect(url, embedder(), config)
        .await
        .unwrap()
}

/// The child's job: write, and search after each write; print every acknowledged id, and
/// `LEAK ...` for any hit of another scope.
async fn child(url: &str, schema: &str, me: usize) {
    let store = open(url, schema).await;
    let mut out = std::io::stdout().lock();
    for i in 0..WRITES {
        let s = scope(me, i % SCOPES_PER_CHILD);
        let e = store
            .store(
                &s,
                NewMemory::new(format!("common words entry {i} written by child {me}")),
            )
            .await
            .unwrap();
        writeln!(out, "ACK {} {}", i % SCOPES_PER_CHILD, e.id).unwrap();
        out.flush().unwrap();
        for req in [
            SearchRequest::keyword("common words entry"),
            SearchRequest::semantic("common words entry written"),
            SearchRequest::hybrid("common words entry"),
        ] {
            for h in store.search(&s, &req.limit(50)).await.unwrap() {
                if h.entry.scope != s || !h.entry.content.ends_with(&format!("child {me}")) {
                    writeln!(out, "LEAK {} in {}", h.entry.id, s).unwrap();
                }
            }
        }
    }
    writeln!(out, "DONE").unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_share_a_store_without_loss_or_leaks() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        let mut parts = spec.splitn(3, ' ');
        let (me, schema, url) = (
            parts.next().unwrap().parse().unwrap(),
            parts.next().unwrap().to_owned(),
            parts.next().unwrap().to_owned(),
        );
        child(&url, &schema, me).await;
        return;
    }
    let Some(url) = common::pg_url() else { return };
    let (schema, _guard) = common::DropSchema::fresh(&url);
    // Create the store first, so the children race on writes, not on creating the schema.
    open(&url, &schema).await.close();

    let mut children = Vec::new();
    for me in 0..2 {
        children.push(
            Command::new(std::env::current_exe().unwrap())
                .args(["--exact", TEST_NAME, "--nocapture", "--test-threads", "1"])
                .env(CHILD_ENV, format!("{me} {schema} {url}"))
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .unwrap(),
        );
    }
    let mut acked: Vec<HashMap<usize, BTreeSet<MemoryId>>> = Vec::new();
    for (me, mut c) in children.into_iter().enumerate() {
        let mut mine: HashMap<usize, BTreeSet<MemoryId>> = HashMap::new();
        let mut done = false;
        for line in BufReader::new(c.stdout.take().unwrap()).lines() {
            let line = line.unwrap();
            // libtest may print the test's name on the same line as the first output.
            if let Some(rest) = line.find("ACK ").map(|at| &line[at + 4..]) {
                let (i, id) = rest.split_once(' ').unwrap();
                mine.entry(i.parse().unwrap())
                    .or_default()
                    .insert(id.parse().unwrap());
            } else if line.contains("LEAK ") {
                panic!("child {me} saw another scope's memory: {line}");
            } else if line.ends_with("DONE") {
                done = true;
            }
        }
        let status = c.wait().unwrap();
        assert!(status.success() && done, "child {me} failed: {status}");
        acked.push(mine);
    }

    let store = open(&url, &schema).await;
    for (me, mine) in acked.iter().enumerate() {
        for (i, ids) in mine {
            let s = scope(me, *i);
            let got = memory_core::testing::ids_in(&store, &s).await;
            assert_eq!(
                &got, ids,
                "every acknowledged write of child {me} in {s} is there, and nothing else"
            );
        }
    }
    let total: usize = acked
        .iter()
        .flat_map(|m| m.values())
        .map(BTreeSet::len)
        .sum();
    assert_eq!(total, 2 * WRITES);
}
