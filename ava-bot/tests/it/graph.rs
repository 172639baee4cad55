//! The entity graph through the `ava` binary on a temporary SQLite store: memories stored
//! without entity tags (an older build) give no graph context; `ava graph index` tags them
//! (and a second run changes nothing); then `ava context` shows a memory that never names
//! the question's place, reached one hop away through a person, with its path, and none of
//! another user's memories about the same place.

use crate::common;

#[cfg(feature = "graph")]
use common::{command, ok};

#[cfg(feature = "graph")]
const BAKERY: &str = "Bob's sister runs a bakery near the river.";

/// Stores `texts` as user messages of `user`'s chat 7, a minute apart from `start` (RFC
/// 3339), without entity tags: what a build before the graph wrote.
#[cfg(feature = "graph")]
async fn store_untagged(db: &std::path::Path, user: &str, start: &str, texts: &[String]) {
    use memory_core::{MemoryBackend, NewMemory, Role, Scope, Timestamp};
    let store =
        memory_sqlite::SqliteBackend::open(db, None, memory_sqlite::SqliteConfig::default())
            .await
            .unwrap();
    let scope = Scope::for_user(user).unwrap().in_chat("7").unwrap();
    let start = Timestamp::parse_rfc3339(start).unwrap();
    let memories = texts
        .iter()
        .enumerate()
        .map(|(i, t)| {
            NewMemory::new(t.as_str())
                .with_role(Role::User)
                .at(start.plus(std::time::Duration::from_secs(60 * i as u64)))
        })
        .collect();
    store.store_batch(&scope, memories).await.unwrap();
    store.close().await;
}

#[cfg(feature = "graph")]
#[tokio::test]
async fn graph_index_then_context_shows_a_one_hop_memory() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("m.db");
    // Porto, then Bob's sister (who is never said to be in Porto), then more messages than
    // the recent conversation holds, so only a search or the graph brings the first two.
    let mut alice = vec![
        "Bob moved to Porto last spring.".to_owned(),
        BAKERY.to_owned(),
    ];
    alice.extend((0..150).map(|n| format!("ok, talk at {n} then")));
    store_untagged(&db, "42", "2024-01-01T10:00:00Z", &alice).await;
    let mallory = [
        "Dave keeps the spare key in Porto.".to_owned(),
        "Dave's password is hunter2.".to_owned(),
    ];
    store_untagged(&db, "43", "2024-01-01T10:00:00Z", &mallory).await;

    // Keyword search only: the store was written without vectors.
    let run = |args: &[&str]| keyword_only(&db, args);
    let question = "What should we do in Porto?";
    let context = || run(&common::in_chat_7("context", &[question]));

    let before = context();
    assert!(
        before.contains("Bob moved to Porto"),
        "keyword search: {before}"
    );
    assert!(!before.contains("bakery"), "not indexed yet: {before}");

    let first = run(&["graph", "index", "--user", "42"]);
    assert!(
        first.contains("152 memories read, 2 tagged, 2 entities"),
        "{first}"
    );
    let again = run(&["graph", "index", "--user", "42", "--chat", "7"]);
    assert!(again.contains("152 memories read, 0 tagged"), "{again}");
    run(&["graph", "index", "--user", "43"]);

    let prompt = context();
    assert!(
        prompt.contains("<recalled-memory kind=\"graph\">"),
        "{prompt}"
    );
    assert!(
        prompt.contains(&format!("{BAKERY} (via Porto → Bob)")),
        "{prompt}"
    );
    for foreign in ["Dave", "hunter2", "spare key"] {
        assert!(!prompt.contains(foreign), "{foreign} leaked: {prompt}");
    }
}

/// New memories are tagged as they are stored: `ava remember` needs no index run.
#[cfg(feature = "graph")]
#[test]
fn remembered_facts_are_tagged_when_stored() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("m.db");
    let run = |args: &[&str]| keyword_only(&db, args);
    run(&common::in_chat_7("remember", &["Bob moved to Porto."]));
    run(&common::in_chat_7("remember", &[BAKERY]));
    let index = run(&["graph", "index", "--user", "42"]);
    assert!(
        index.contains("2 memories read, 0 tagged, 2 entities"),
        "already tagged: {index}"
    );
}

/// A build without the feature (`--no-default-features`) names it.
#[cfg(not(feature = "graph"))]
#[test]
fn without_the_feature_graph_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let o = common::ava(dir.path().join("m.db"), &["graph", "index", "--user", "42"]);
    assert_eq!(o.status.code(), Some(1));
    let err = common::stderr(&o);
    assert!(
        err.contains("rebuild with the cargo feature `graph`"),
        "{err}"
    );
}

#[cfg(feature = "graph")]
/// `ava` with `args` on the store `db`, without an embedder (keyword search only); its
/// stdout, the run having succeeded.
fn keyword_only(db: &std::path::Path, args: &[&str]) -> String {
    ok(command(db)
        .env("AVA_EMBEDDER", "none")
        .args(args)
        .output()
        .unwrap())
}
