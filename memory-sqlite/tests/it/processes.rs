//! One store file, many OS processes at once (this test binary re-executed as children):
//! writers and readers on a file none of them has created yet, eight processes creating
//! one new file, and `reembed` run while another process writes and forgets. No call may
//! fail, every acknowledged memory must be there, and the file must stay consistent.

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use memory_core::{
    EmbeddingProvider, HashingEmbedder, MemoryBackend, MemoryError, MemoryId, NewMemory, Scope,
    SearchRequest,
};
use memory_sqlite::{SqliteBackend, SqliteConfig, SqliteError, reembed};

/// Set in a child: `role:index:path`.
const CHILD_ENV: &str = "AVA_SQLITE_PROCESS_CHILD";

fn hash(dims: usize) -> Option<Arc<dyn EmbeddingProvider>> {
    Some(Arc::new(HashingEmbedder::new(dims).unwrap()))
}

/// An error with its causes, for a failure line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        out.push_str(&format!(": {c}"));
        cause = c.source();
    }
    out
}

fn child_role() -> Option<(String, usize, PathBuf)> {
    let v = std::env::var(CHILD_ENV).ok()?;
    // The test harness has printed `test NAME ... ` without a newline: end that line.
    say("");
    let mut parts = v.splitn(3, ':');
    let role = parts.next()?.to_owned();
    let index = parts.next()?.parse().ok()?;
    Some((role, index, PathBuf::from(parts.next()?)))
}

/// Starts this test binary as a child running `test` in `role`.
fn spawn(test: &str, role: &str, index: usize, path: &Path) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--test-threads", "1"])
        .env(CHILD_ENV, format!("{role}:{index}:{}", path.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()
}

/// What a child printed: `ack USER ID`, `gone USER ID`, `fail WHAT`, and other lines.
#[derive(Default, Debug)]
struct Heard {
    acked: Vec<(String, MemoryId)>,
    gone: HashSet<MemoryId>,
    fails: Vec<String>,
    other: Vec<String>,
}

fn listen(children: Vec<Child>) -> Heard {
    let mut heard = Heard::default();
    let readers: Vec<_> = children
        .into_iter()
        .map(|mut c| {
            let out = c.stdout.take().unwrap();
            std::thread::spawn(move || {
                let lines: Vec<String> =
                    BufReader::new(out).lines().map_while(Result::ok).collect();
                (c.wait().unwrap(), lines)
            })
        })
        .collect();
    for r in readers {
        let (status, lines) = r.join().unwrap();
        assert!(status.success(), "a child process failed: {status}");
        for line in lines {
            let mut words = line.splitn(3, ' ');
            match (words.next(), words.next(), words.next()) {
                (Some("ack"), Some(user), Some(id)) => {
                    heard.acked.push((user.to_owned(), id.parse().unwrap()))
                }
                (Some("gone"), Some(_), Some(id)) => {
                    heard.gone.insert(id.parse().unwrap());
                }
                (Some("fail"), _, _) => heard.fails.push(line.clone()),
                _ => heard.other.push(line),
            }
        }
    }
    heard
}

/// Prints a line for the parent and flushes it.
fn say(line: impl std::fmt::Display) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}").unwrap();
    out.flush().unwrap();
}

fn scope_of(user: &str) -> Scope {
    Scope::for_user(user).unwrap().in_chat("c").unwrap()
}

/// Every acknowledged memory that was not forgotten is in its scope; the file is intact
/// and its indexes agree with the base table.
async fn check_store(path: &Path, embedder: Option<Arc<dyn EmbeddingProvider>>, heard: &Heard) {
    {
        let c = rusqlite::Connection::open(path).unwrap();
        let check: String = c
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .unwrap();
        assert_eq!(check, "ok");
    }
    let store = SqliteBackend::open(path, embedder, SqliteConfig::default())
        .await
        .unwrap();
    for (user, id) in &heard.acked {
        let got = store.get(&scope_of(user), *id).await;
        if heard.gone.contains(id) {
            assert!(
                matches!(got, Err(MemoryError::NotFound { .. })),
                "{id} was forgotten"
            );
        } else {
            got.unwrap_or_else(|e| panic!("acknowledged memory {id} of {user} lost: {e}"));
        }
    }
    store.close().await;
    drop(store);
    let c = rusqlite::Connection::open(path).unwrap();
    let n = |sql: &str| -> i64 { c.query_row(sql, [], |r| r.get(0)).unwrap() };
    let base = n("SELECT COUNT(*) FROM memories");
    assert_eq!(
        n("SELECT COUNT(*) FROM memory_fts"),
        base,
        "one FTS row per memory"
    );
    assert_eq!(
        n("SELECT COUNT(*) FROM memory_vec WHERE rowid NOT IN (SELECT pk FROM memories)"),
        0,
        "no vector without its memory"
    );
    assert_eq!(
        n("SELECT COUNT(*) FROM memories WHERE embedded = 1 \
           AND pk NOT IN (SELECT rowid FROM memory_vec)"),
        0,
        "no memory marked embedded without a vector"
    );
}

const SHARE: &str = "processes::many_processes_write_and_read_one_new_file_without_a_failed_call";

/// A writer: stores single memories (as `ava remember` and the bot do), some in a scope all
/// writers share, reopening the store now and then (each CLI call is a new process), and
/// searches its own scope.
async fn writer(index: usize, path: &Path) {
    let me = format!("w{index}");
    let mut store = None;
    for i in 0..60 {
        if i % 15 == 0 {
            if let Some(s) = store.take() {
                SqliteBackend::close(&s).await;
            }
            store = open_or_say(path).await;
        }
        let Some(s) = &store else { continue };
        let user = if i % 3 == 0 { "shared" } else { me.as_str() };
        let text = format!("note {i} from {me} about the garden and the piano");
        match s.store(&scope_of(user), NewMemory::new(text)).await {
            Ok(e) => say(format!("ack {user} {}", e.id)),
            Err(e) => say(format!("fail store: {}", chain(&e))),
        }
        if i % 5 == 0 {
            match s
                .search(
                    &scope_of(&me),
                    &SearchRequest::hybrid("garden piano").limit(20),
                )
                .await
            {
                Ok(hits) if hits.iter().all(|h| h.entry.scope == scope_of(&me)) => {}
                Ok(_) => say("fail isolation: a hit of another scope"),
                Err(e) => say(format!("fail search: {}", chain(&e))),
            }
        }
    }
}

/// A reader: searches and lists every writer's scope while they write.
async fn reader(path: &Path) {
    let mut store = None;
    for i in 0..80 {
        if i % 20 == 0 {
            drop(store.take());
            store = open_or_say(path).await;
        }
        let Some(s) = &store else { continue };
        let user = ["w0", "w1", "w2", "w3", "shared"][i % 5];
        let scope = scope_of(user);
        for req in [
            SearchRequest::hybrid("garden piano"),
            SearchRequest::keyword("note garden"),
        ] {
            if let Err(e) = s.search(&scope, &req.limit(10)).await {
                say(format!("fail search: {}", chain(&e)));
            }
        }
        if let Err(e) = s.recent(&scope, 10, &Default::default()).await {
            say(format!("fail recent: {}", chain(&e)));
        }
    }
}

#[tokio::test]
async fn many_processes_write_and_read_one_new_file_without_a_failed_call() {
    if let Some((role, index, path)) = child_role() {
        match role.as_str() {
            "writer" => writer(index, &path).await,
            _ => reader(&path).await,
        }
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // No file yet: the first opens race to create it.
    let path = dir.path().join("shared.db");
    let mut children: Vec<Child> = (0..4).map(|i| spawn(SHARE, "writer", i, &path)).collect();
    children.extend((0..2).map(|i| spawn(SHARE, "reader", i, &path)));
    let heard = listen(children);
    assert!(heard.fails.is_empty(), "failed calls: {:#?}", heard.fails);
    assert_eq!(heard.acked.len(), 4 * 60, "every store was acknowledged");
    check_store(&path, hash(64), &heard).await;
}

const CREATE: &str = "processes::eight_processes_create_one_new_file_at_once";

#[tokio::test]
async fn eight_processes_create_one_new_file_at_once() {
    if let Some((_, index, path)) = child_role() {
        let user = format!("u{index}");
        match SqliteBackend::open(&path, hash(64), SqliteConfig::default()).await {
            Ok(s) => match s.store(&scope_of(&user), NewMemory::new("hi")).await {
                Ok(e) => say(format!("ack {user} {}", e.id)),
                Err(e) => say(format!("fail store: {}", chain(&e))),
            },
            Err(e) => say(format!("fail open: {}", chain(&e))),
        }
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    for round in 0..3 {
        let path = dir.path().join(format!("new-{round}.db"));
        let children = (0..8).map(|i| spawn(CREATE, "create", i, &path)).collect();
        let heard = listen(children);
        assert!(heard.fails.is_empty(), "round {round}: {:#?}", heard.fails);
        assert_eq!(heard.acked.len(), 8);
        check_store(&path, hash(64), &heard).await;
    }
}

const REEMBED: &str = "processes::reembed_beside_a_writer_keeps_every_memory_and_a_consistent_file";

/// Stores and forgets until `stop` exists, with the 64-dimension embedder, then tries a
/// semantic search and says how it went.
async fn churn(path: &Path) {
    let stop = path.with_extension("stop");
    let store = SqliteBackend::open(path, hash(64), SqliteConfig::default())
        .await
        .unwrap();
    let scope = scope_of("writer");
    let mut kept: Vec<MemoryId> = Vec::new();
    let mut i = 0;
    while !stop.exists() {
        let text = format!("entry {i} on kites and lanterns");
        match store.store(&scope, NewMemory::new(text)).await {
            Ok(e) => {
                say(format!("ack writer {}", e.id));
                kept.push(e.id);
            }
            Err(e) => say(format!("fail store: {}", chain(&e))),
        }
        if i % 4 == 3 {
            let id = kept.remove(kept.len() / 2);
            match store.delete(&scope, id).await {
                Ok(()) => say(format!("gone writer {id}")),
                Err(e) => say(format!("fail forget: {}", chain(&e))),
            }
        }
        i += 1;
        std::thread::sleep(Duration::from_millis(2));
    }
    match store
        .search(&scope, &SearchRequest::semantic("kites").limit(3))
        .await
    {
        Err(e)
            if matches!(
                e.backend_error::<SqliteError>(),
                Some(SqliteError::SpaceMoved { .. })
            ) =>
        {
            say("search refused: space moved")
        }
        other => say(format!("search: {other:?}")),
    }
}

#[tokio::test]
async fn reembed_beside_a_writer_keeps_every_memory_and_a_consistent_file() {
    if let Some((_, _, path)) = child_role() {
        churn(&path).await;
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.db");
    // The file and its space exist before the writer starts.
    SqliteBackend::open(&path, hash(64), SqliteConfig::default())
        .await
        .unwrap()
        .close()
        .await;
    let child = spawn(REEMBED, "churn", 0, &path);
    let count = |p: &Path| -> i64 {
        let c =
            rusqlite::Connection::open_with_flags(p, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
                .unwrap();
        c.busy_timeout(Duration::from_secs(5)).unwrap();
        c.query_row("SELECT COUNT(*) FROM memories", [], |r| r.get(0))
            .unwrap()
    };
    let started = Instant::now();
    while count(&path) < 60 && started.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(20));
    }
    // The writer goes on storing and forgetting while the store moves to 32 dimensions.
    let report = reembed(&path, hash(32).unwrap(), SqliteConfig::default())
        .await
        .unwrap();
    assert!(report.previous_space.unwrap().contains("64 dims"));
    let moved = count(&path);
    while count(&path) < moved + 30 && started.elapsed() < Duration::from_secs(120) {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::fs::write(path.with_extension("stop"), b"").unwrap();
    let heard = listen(vec![child]);
    assert!(heard.fails.is_empty(), "failed calls: {:#?}", heard.fails);
    assert!(
        heard
            .other
            .iter()
            .any(|l| l == "search refused: space moved"),
        "the writer's semantic search is refused once the space moved: {:?}",
        heard.other
    );
    check_store(&path, hash(32), &heard).await;

    // Memories the old-space writer stored after the move are embedded in the new space
    // by the first search of their scope, and found.
    let store = SqliteBackend::open(&path, hash(32), SqliteConfig::default())
        .await
        .unwrap();
    let (_, last) = heard
        .acked
        .iter()
        .rev()
        .find(|(_, id)| !heard.gone.contains(id))
        .unwrap();
    let text = store.get(&scope_of("writer"), *last).await.unwrap().content;
    let hits = store
        .search(
            &scope_of("writer"),
            &SearchRequest::semantic(&text).limit(1),
        )
        .await
        .unwrap();
    // The hashing embedder may give two of these near-identical texts one vector; what
    // matters is that the exact text is found at full similarity.
    let best = hits[0].breakdown.semantic.unwrap();
    assert!(best > 0.999, "the newest memory was embedded: {best}");
    let unembedded: HashMap<bool, usize> =
        futures_count(&store, &scope_of("writer"), heard.acked.len()).await;
    assert_eq!(
        unembedded.get(&false),
        None,
        "every memory of the scope has a vector now"
    );
}

/// How many memories of the scope have a vector (`true`) and how many do not.
async fn futures_count(store: &SqliteBackend, scope: &Scope, max: usize) -> HashMap<bool, usize> {
    let mut out = HashMap::new();
    for e in store
        .recent(scope, max.max(1), &Default::default())
        .await
        .unwrap()
    {
        *out.entry(e.embedded).or_default() += 1;
    }
    out
}

const BACKFILL: &str = "processes::four_processes_embed_the_same_missing_vectors_at_once";

#[tokio::test]
async fn four_processes_embed_the_same_missing_vectors_at_once() {
    if let Some((_, index, path)) = child_role() {
        // Each opens the keyword-only store with an embedder and searches every scope, so
        // all four try to embed the same memories at the same moment.
        match SqliteBackend::open(&path, hash(64), SqliteConfig::default()).await {
            Err(e) => say(format!("fail open: {}", chain(&e))),
            Ok(s) => {
                for u in 0..6 {
                    let user = format!("u{}", (u + index) % 6);
                    match s
                        .search(
                            &scope_of(&user),
                            &SearchRequest::semantic("apples").limit(3),
                        )
                        .await
                    {
                        Ok(hits) if hits.len() == 3 => {}
                        Ok(hits) => say(format!("fail search: {} hits", hits.len())),
                        Err(e) => say(format!("fail search: {}", chain(&e))),
                    }
                }
            }
        }
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.db");
    // Written without an embedder: no memory has a vector.
    let store = SqliteBackend::open(&path, None, SqliteConfig::default())
        .await
        .unwrap();
    let mut heard = Heard::default();
    for u in 0..6 {
        let user = format!("u{u}");
        let batch = (0..300)
            .map(|i| NewMemory::new(format!("note {i} of {user} on apples and pears")))
            .collect();
        for e in store.store_batch(&scope_of(&user), batch).await.unwrap() {
            heard.acked.push((user.clone(), e.id));
        }
    }
    store.close().await;
    drop(store);
    let children = (0..4)
        .map(|i| spawn(BACKFILL, "backfill", i, &path))
        .collect();
    let found = listen(children);
    assert!(found.fails.is_empty(), "failed calls: {:#?}", found.fails);
    check_store(&path, hash(64), &heard).await;
    let c = rusqlite::Connection::open(&path).unwrap();
    let n = |sql: &str| -> i64 { c.query_row(sql, [], |r| r.get(0)).unwrap() };
    assert_eq!(n("SELECT COUNT(*) FROM memories WHERE embedded = 0"), 0);
    assert_eq!(
        n("SELECT COUNT(*) FROM memory_vec"),
        1800,
        "one vector per memory"
    );
}

/// The store at `path`, or `None` having said why it would not open.
async fn open_or_say(path: &Path) -> Option<SqliteBackend> {
    match SqliteBackend::open(path, hash(64), SqliteConfig::default()).await {
        Ok(s) => Some(s),
        Err(e) => {
            say(format!("fail open: {}", chain(&e)));
            None
        }
    }
}
