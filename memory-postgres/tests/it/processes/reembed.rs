//! `reembed` on a real server, with real processes: beside a writer of the old space (which
//! loses nothing, and whose semantic searches are refused once the store moved), and cut
//! short by a kill (the store stays wholly in its old space; the next run resumes from what
//! was staged, and embeds a memory changed since from its new content). Needs
//! `MEMORY_PG_URL`.

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use memory_core::{
    EmbeddingProvider, HashingEmbedder, MemoryBackend, MemoryError, MemoryId, MemoryPatch,
    NewMemory, Scope, SearchRequest,
};
use memory_postgres::{PostgresBackend, PostgresConfig, PostgresError, reembed};

use super::common;

/// Set in a child: `ROLE SCHEMA STOPFILE URL`.
const CHILD: &str = "AVA_PG_REEMBED_CHILD";

/// The embedders of the old and the new space, reading 200 bytes at a time, so a long memory
/// is several passages.
fn old() -> Arc<dyn EmbeddingProvider> {
    Arc::new(HashingEmbedder::new(64).unwrap().with_window(200))
}

fn new() -> Arc<dyn EmbeddingProvider> {
    Arc::new(HashingEmbedder::new(32).unwrap().with_window(200))
}

fn config(schema: &str) -> PostgresConfig {
    PostgresConfig {
        schema: schema.to_owned(),
        pool_size: 3,
        ..PostgresConfig::default()
    }
}

fn scope() -> Scope {
    Scope::for_user("writer").unwrap().in_chat("c").unwrap()
}

/// A text of about 700 bytes: several passages.
fn long(i: usize) -> String {
    format!(
        "long note {i}: {}",
        "the lighthouse keeper logged the tides and the ships each night ".repeat(11)
    )
}

/// Prints a line for the parent and flushes it.
fn say(line: impl std::fmt::Display) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}").unwrap();
    out.flush().unwrap();
}

/// The whole chain of an error, for a failure line.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    memory_core::ErrorChain(e).to_string()
}

fn spawn(test: &str, role: &str, schema: &str, stop: &str, url: &str) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--test-threads", "1"])
        .env(CHILD, format!("{role} {schema} {stop} {url}"))
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()
}

/// The child's role, schema, stop file and URL, if this process is a child.
fn child_role() -> Option<(String, String, PathBuf, String)> {
    let spec = std::env::var(CHILD).ok()?;
    // libtest has printed `test NAME ... ` without a newline: end that line.
    say("");
    let mut parts = spec.splitn(4, ' ');
    Some((
        parts.next()?.to_owned(),
        parts.next()?.to_owned(),
        PathBuf::from(parts.next()?),
        parts.next()?.to_owned(),
    ))
}

/// One number from the store in `schema` at `url`, by `sql` (`{s}` is the schema).
async fn number(url: &str, schema: &str, sql: &str) -> i64 {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    let task = tokio::spawn(conn);
    let n = client
        .query_one(&sql.replace("{s}", &format!("\"{schema}\"")), &[])
        .await
        .unwrap()
        .get(0);
    drop(client);
    let _ = task.await;
    n
}

/// Stores (a long memory now and then) and forgets until the stop file exists, with the old
/// embedder; then searches by meaning and by keyword and says how each went.
async fn churn(url: &str, schema: &str, stop: &std::path::Path) {
    let store = PostgresBackend::connect(url, Some(old()), config(schema))
        .await
        .unwrap();
    let scope = scope();
    let mut kept: Vec<MemoryId> = Vec::new();
    let mut i = 0;
    while !stop.exists() {
        let text = if i % 10 == 0 {
            long(i)
        } else {
            format!("entry {i} on kites and lanterns")
        };
        match store.store(&scope, NewMemory::new(text)).await {
            Ok(e) => {
                say(format!("ack {}", e.id));
                kept.push(e.id);
            }
            Err(e) => say(format!("fail store: {}", chain(&e))),
        }
        if i % 4 == 3 {
            let id = kept.remove(kept.len() / 2);
            match store.delete(&scope, id).await {
                Ok(()) => say(format!("gone {id}")),
                Err(e) => say(format!("fail forget: {}", chain(&e))),
            }
        }
        i += 1;
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    match store
        .search(&scope, &SearchRequest::semantic("kites").limit(3))
        .await
    {
        Err(e)
            if matches!(
                e.backend_error::<PostgresError>(),
                Some(PostgresError::SpaceMoved { .. })
            ) =>
        {
            say(format!("search refused: {}", chain(&e)));
        }
        other => say(format!("fail semantic search: {other:?}")),
    }
    match store
        .search(&scope, &SearchRequest::keyword("kites").limit(3))
        .await
    {
        Ok(hits) if !hits.is_empty() => say("keyword search ok"),
        other => say(format!("fail keyword search: {other:?}")),
    }
    store.close();
}

/// What a child printed.
#[derive(Default, Debug)]
struct Heard {
    acked: Vec<MemoryId>,
    gone: HashSet<MemoryId>,
    fails: Vec<String>,
    other: Vec<String>,
}

fn listen(mut child: Child) -> Heard {
    let mut heard = Heard::default();
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        let mut words = line.splitn(2, ' ');
        match (words.next(), words.next()) {
            (Some("ack"), Some(id)) => heard.acked.push(id.parse().unwrap()),
            (Some("gone"), Some(id)) => {
                heard.gone.insert(id.parse().unwrap());
            }
            (Some("fail"), _) => heard.fails.push(line.clone()),
            _ => heard.other.push(line),
        }
    }
    let status = child.wait().unwrap();
    assert!(status.success(), "the writer failed: {status}");
    heard
}

/// Waits (at most a minute) until the store holds `n` memories.
async fn until_count(url: &str, schema: &str, n: i64) {
    let started = Instant::now();
    while number(url, schema, "SELECT count(*) FROM {s}.memories").await < n
        && started.elapsed() < Duration::from_secs(60)
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

const BESIDE: &str =
    "processes::reembed::reembed_beside_a_writer_loses_nothing_and_refuses_the_old_space";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reembed_beside_a_writer_loses_nothing_and_refuses_the_old_space() {
    if let Some((_, schema, stop, url)) = child_role() {
        churn(&url, &schema, &stop).await;
        return;
    }
    let Some(url) = common::pg_url() else { return };
    let (schema, _guard) = common::DropSchema::fresh(&url);
    // The store and its space exist before the writer starts.
    PostgresBackend::connect(&url, Some(old()), config(&schema))
        .await
        .unwrap()
        .close();
    let dir = std::env::temp_dir().join(format!("ava-pg-reembed-{schema}"));
    std::fs::create_dir_all(&dir).unwrap();
    let stop = dir.join("stop");
    let child = spawn(BESIDE, "churn", &schema, stop.to_str().unwrap(), &url);
    until_count(&url, &schema, 60).await;
    // The writer goes on storing and forgetting while the store moves to 32 dimensions.
    let report = reembed(&url, new(), config(&schema), |_, _| {})
        .await
        .unwrap();
    assert!(
        report
            .previous_space
            .as_deref()
            .unwrap()
            .contains("64 dims"),
        "{report:?}"
    );
    assert!(report.space.contains("32 dims"), "{report:?}");
    let moved = number(&url, &schema, "SELECT count(*) FROM {s}.memories").await;
    until_count(&url, &schema, moved + 30).await;
    std::fs::write(&stop, b"").unwrap();
    let heard = listen(child);
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(heard.fails.is_empty(), "failed calls: {:#?}", heard.fails);
    assert!(
        heard.other.iter().any(|l| l.starts_with("search refused:")
            && l.contains("re-embedded into")
            && l.contains("32 dims")),
        "the writer's semantic search is refused once the store moved: {:?}",
        heard.other
    );
    assert!(
        heard.other.iter().any(|l| l == "keyword search ok"),
        "{:?}",
        heard.other
    );

    // A process of the new space: it embeds what the old one stored after the move.
    let store = PostgresBackend::connect(&url, Some(new()), config(&schema))
        .await
        .unwrap();
    let scope = scope();
    for id in &heard.acked {
        let got = store.get(&scope, *id).await;
        if heard.gone.contains(id) {
            assert!(
                matches!(got, Err(MemoryError::NotFound { .. })),
                "{id} was forgotten"
            );
        } else {
            got.unwrap_or_else(|e| panic!("acknowledged memory {id} lost: {e}"));
        }
    }
    let stats = store.stats().await.unwrap();
    let alive = heard.acked.len() - heard.gone.len();
    assert_eq!(stats.memories, alive as u64, "nothing but what was kept");
    assert_eq!(stats.embedded, stats.memories, "every memory has a vector");
    assert!(stats.embedding_space.unwrap().contains("32 dims"));
    // One space only: every head and passage has 32 dimensions, the long ones have passages.
    for sql in [
        "SELECT count(*) FROM {s}.memories WHERE embedding IS NULL OR vector_dims(embedding) <> 32",
        "SELECT count(*) FROM {s}.memory_passages WHERE vector_dims(embedding) <> 32",
    ] {
        assert_eq!(number(&url, &schema, sql).await, 0, "{sql}");
    }
    assert!(number(&url, &schema, "SELECT count(*) FROM {s}.memory_passages").await > 0);
    // The newest short memory (a long one ranks below its best passage's similarity) is
    // found by meaning, at full similarity.
    let mut text = String::new();
    for id in heard
        .acked
        .iter()
        .rev()
        .filter(|id| !heard.gone.contains(id))
    {
        text = store.get(&scope, *id).await.unwrap().content;
        if !text.starts_with("long note") {
            break;
        }
    }
    let hits = store
        .search(&scope, &SearchRequest::semantic(&text).limit(1))
        .await
        .unwrap();
    let best = hits[0].breakdown.semantic.unwrap();
    assert!(best > 0.999, "the newest memory was embedded: {best}");
    store.close();
    // A process of the old space is refused now.
    let err = PostgresBackend::connect(&url, Some(old()), config(&schema))
        .await
        .unwrap_err();
    assert!(matches!(err, PostgresError::SpaceChanged { .. }), "{err:?}");
}

const CUT: &str = "processes::reembed::an_interrupted_reembed_leaves_one_space_and_resumes";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_reembed_leaves_one_space_and_resumes() {
    if let Some((_, schema, _, url)) = child_role() {
        // Stops for good once the first batch is staged; the parent kills it there.
        let _ = reembed(&url, new(), config(&schema), |done, total| {
            if done > 0 {
                say(format!("staged {done} of {total}"));
                loop {
                    std::thread::sleep(Duration::from_secs(1));
                }
            }
        })
        .await;
        say("fail: the reembed ended");
        return;
    }
    let Some(url) = common::pg_url() else { return };
    let (schema, _guard) = common::DropSchema::fresh(&url);
    let store = PostgresBackend::connect(&url, Some(old()), config(&schema))
        .await
        .unwrap();
    let scope = scope();
    let memories: Vec<NewMemory> = (0..600)
        .map(|i| {
            let m = NewMemory::new(if i % 50 == 0 {
                long(i)
            } else {
                format!("note {i} on tides")
            });
            // A later part of a message: embedded by its head only, when stored and again.
            match i {
                100 => m.with_tag(memory_core::Tag::new("part:2-of-3").unwrap()),
                _ => m,
            }
        })
        .collect();
    let stored = store.store_batch(&scope, memories).await.unwrap();

    let mut child = spawn(CUT, "cut", &schema, "-", &url);
    let mut staged = None;
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        if line.starts_with("staged ") {
            staged = Some(line);
            break;
        }
        assert!(!line.starts_with("fail"), "{line}");
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(staged.as_deref(), Some("staged 256 of 600"));
    // The killed session's lock goes when the server notices the connection closed.
    let held = format!(
        "SELECT count(*) FROM pg_locks l, (SELECT hashtextextended('{schema}/reembed', 0) AS h) x \
         WHERE l.locktype = 'advisory' AND l.objsubid = 1 \
         AND l.classid::int8 = (x.h >> 32) & 4294967295 AND l.objid::int8 = x.h & 4294967295"
    );
    let started = Instant::now();
    while number(&url, &schema, &held).await > 0 && started.elapsed() < Duration::from_secs(30) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // Cut short: the store is wholly in its old space, and serves its processes as before.
    let old_heads =
        "SELECT count(*) FROM {s}.memories WHERE embedded AND vector_dims(embedding) = 64";
    assert_eq!(number(&url, &schema, old_heads).await, 600);
    assert_eq!(
        number(
            &url,
            &schema,
            "SELECT count(*) FROM {s}.memory_passages WHERE vector_dims(embedding) <> 64"
        )
        .await,
        0
    );
    let hits = store
        .search(&scope, &SearchRequest::semantic("note 7 on tides").limit(1))
        .await
        .unwrap();
    assert_eq!(hits[0].entry.id, stored[7].id);
    let err = PostgresBackend::connect(&url, Some(new()), config(&schema))
        .await
        .unwrap_err();
    assert!(matches!(err, PostgresError::SpaceChanged { .. }), "{err:?}");
    // Meanwhile a staged memory changes and another is forgotten.
    let changed = store
        .update(
            &scope,
            stored[3].id,
            MemoryPatch {
                content: Some("the harbour master keeps pigeons".into()),
                ..MemoryPatch::default()
            },
        )
        .await
        .unwrap();
    store.delete(&scope, stored[5].id).await.unwrap();
    store.close();

    // Run again: it resumes from what was staged and moves the store whole. A memory staged
    // in this run changes before the move (as a writer of the old space would change it).
    let mut calls = Vec::new();
    let bell = stored[301].id;
    let report = reembed(&url, new(), config(&schema), |done, total| {
        if calls.len() == 1 {
            common::run_sql(
                &url,
                &format!(
                    "UPDATE \"{schema}\".memories SET content = 'the harbour bell rings twice' \
                     WHERE id = '{bell}'"
                ),
            )
            .unwrap();
        }
        calls.push((done, total));
    })
    .await
    .unwrap();
    assert_eq!(
        report.resumed, 254,
        "the first batch less the changed and the forgotten memory"
    );
    assert_eq!(calls.first(), Some(&(254, 599)));
    assert_eq!(calls.last(), Some(&(599, 599)));
    assert_eq!(report.memories, 599);
    for sql in [
        "SELECT count(*) FROM {s}.memories WHERE NOT embedded OR vector_dims(embedding) <> 32",
        "SELECT count(*) FROM {s}.memory_passages WHERE vector_dims(embedding) <> 32",
        "SELECT count(*) FROM {s}.meta WHERE key = 'reembed_space'",
        "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
         WHERE n.nspname = '{schema}' AND c.relname = 'reembed_stage'",
    ] {
        let sql = sql.replace("{schema}", &schema);
        assert_eq!(number(&url, &schema, &sql).await, 0, "{sql}");
    }
    // Twelve long memories, each stored as several passages but the later part of a
    // message, stored by its head.
    assert_eq!(
        number(
            &url,
            &schema,
            "SELECT count(DISTINCT memory) FROM {s}.memory_passages"
        )
        .await,
        11
    );
    let store = PostgresBackend::connect(&url, Some(new()), config(&schema))
        .await
        .unwrap();
    // The changed memory has the vector of its new text, not the one staged before.
    let hits = store
        .search(
            &scope,
            &SearchRequest::semantic("the harbour master keeps pigeons").limit(1),
        )
        .await
        .unwrap();
    assert_eq!(hits[0].entry.id, changed.id);
    assert!(hits[0].breakdown.semantic.unwrap() > 0.999);
    // So has the one changed after it was staged (embedded when the reembed connected with
    // the new embedder at its end).
    let hits = store
        .search(
            &scope,
            &SearchRequest::semantic("the harbour bell rings twice").limit(1),
        )
        .await
        .unwrap();
    assert_eq!(hits[0].entry.id, bell);
    assert!(hits[0].breakdown.semantic.unwrap() > 0.999);
    // A long memory's tail is found by meaning.
    let tail = long(50);
    let tail = &tail[tail.len() - 150..];
    let hits = store
        .search(&scope, &SearchRequest::semantic(tail).limit(12))
        .await
        .unwrap();
    assert!(hits.iter().any(|h| h.entry.id == stored[50].id));
    store.close();
}

/// The hashing embedder under another model name, its vectors reversed: a space of as many
/// dimensions as [`old`]'s, whose vectors mean something else.
#[derive(Debug)]
struct Renamed {
    inner: HashingEmbedder,
    space: Arc<memory_core::EmbeddingSpace>,
}

impl Renamed {
    fn embedder() -> Arc<dyn EmbeddingProvider> {
        Arc::new(Self {
            inner: HashingEmbedder::new(64).unwrap().with_window(200),
            space: Arc::new(memory_core::EmbeddingSpace::new("hash", "reversed-v2", 64).unwrap()),
        })
    }
}

#[async_trait::async_trait]
impl EmbeddingProvider for Renamed {
    fn space(&self) -> Arc<memory_core::EmbeddingSpace> {
        Arc::clone(&self.space)
    }

    async fn embed_batch(
        &self,
        texts: &[&str],
    ) -> memory_core::Result<Vec<memory_core::Embedding>> {
        self.inner
            .embed_batch(texts)
            .await?
            .into_iter()
            .map(|e| {
                let mut v = e.into_vector();
                v.reverse();
                memory_core::Embedding::new(Arc::clone(&self.space), v)
            })
            .collect()
    }

    fn window_bytes(&self) -> Option<usize> {
        self.inner.window_bytes()
    }
}

/// A move to another model of as many dimensions, where nothing in the vectors' shape tells
/// the spaces apart: a process of the old model has its semantic searches refused, and writes
/// its text without vectors (a store, and an update of the content); a process of the new
/// model embeds them when it connects.
#[tokio::test]
async fn a_move_to_another_model_of_as_many_dimensions_is_noticed() {
    let Some(url) = common::pg_url() else { return };
    let (schema, _guard) = common::DropSchema::fresh(&url);
    let before = PostgresBackend::connect(&url, Some(old()), config(&schema))
        .await
        .unwrap();
    let scope = scope();
    let first = before
        .store(&scope, NewMemory::new("the ferry leaves at nine"))
        .await
        .unwrap();
    assert!(first.embedded);
    let report = reembed(&url, Renamed::embedder(), config(&schema), |_, _| {})
        .await
        .unwrap();
    assert!(report.space.contains("reversed-v2"), "{report:?}");
    assert_eq!(report.memories, 1);

    let err = before
        .search(&scope, &SearchRequest::semantic("ferry").limit(3))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err.backend_error::<PostgresError>(),
            Some(PostgresError::SpaceMoved { now, .. }) if now.contains("reversed-v2")
        ),
        "{err:?}"
    );
    let later = before
        .store(&scope, NewMemory::new("the night bus stops at the pier"))
        .await
        .unwrap();
    assert!(!later.embedded, "no vector of the old model is written");
    let changed = before
        .update(
            &scope,
            first.id,
            MemoryPatch {
                content: Some("the ferry leaves at ten".into()),
                ..MemoryPatch::default()
            },
        )
        .await
        .unwrap();
    assert!(!changed.embedded);
    let hits = before
        .search(&scope, &SearchRequest::keyword("pier").limit(3))
        .await
        .unwrap();
    assert_eq!(hits[0].entry.id, later.id, "keyword search goes on");
    before.close();
    assert_eq!(
        number(
            &url,
            &schema,
            "SELECT count(*) FROM {s}.memories WHERE embedding IS NOT NULL OR embedded"
        )
        .await,
        0
    );

    let after = PostgresBackend::connect(&url, Some(Renamed::embedder()), config(&schema))
        .await
        .unwrap();
    for (text, id) in [
        ("the night bus stops at the pier", later.id),
        ("the ferry leaves at ten", first.id),
    ] {
        let hits = after
            .search(&scope, &SearchRequest::semantic(text).limit(1))
            .await
            .unwrap();
        assert_eq!(hits[0].entry.id, id);
        assert!(hits[0].breakdown.semantic.unwrap() > 0.999, "{text}");
    }
    after.close();
}
