//! Facts learned from conversation, end to end: `ava chat` against a loopback
//! OpenAI-compatible server whose extraction answers are scripted, then `ava context`,
//! `ava recall` and `ava history` on the same SQLite file. A fact that changed replaces the
//! old one in the prompt and keeps it in the history; a garbage, mislabelled or late
//! extraction answer changes nothing.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use common::{ava, command, completion, count_in, ok, stderr, stdout, with_stdin};
use serde_json::{Value, json};
use wiremock::matchers::{body_string_contains, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

fn store() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("memories.db");
    (dir, db)
}

/// A server that answers every chat turn with "Noted.", and `extraction` (matched by the
/// data block each extraction call carries) with its scripted answers.
async fn server(scripted: &[(&str, &str, ResponseTemplate)]) -> MockServer {
    let server = MockServer::start().await;
    for (block, needle, answer) in scripted {
        Mock::given(method("POST"))
            .and(path("/v1/chat/completions"))
            .and(body_string_contains(*block))
            .and(body_string_contains(*needle))
            .respond_with(answer.clone())
            .with_priority(1)
            .mount(&server)
            .await;
    }
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(200).set_body_json(completion("Noted.")))
        .with_priority(10)
        .mount(&server)
        .await;
    server
}

fn json_answer(v: Value) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_json(completion(&v.to_string()))
}

/// `ava chat` as user 42 in chat 7 against the OpenAI-compatible server at `llm`; the
/// process exits once the background learning is done.
fn chat(db: &Path, llm: &str, input: &str, timeout: &str) -> Output {
    let mut chat = command(db);
    chat.args(["chat", "--user", "42", "--chat", "7", "--llm", "openai"])
        .args(["--llm-url", &format!("{llm}/v1"), "--llm-model", "gpt-test"])
        .args(["--llm-timeout", timeout, "--no-prune"])
        .env("RUST_LOG", "warn,ava=info")
        .env_remove("RUST_BACKTRACE");
    with_stdin(chat, input)
}

/// The facts of user 42 in chat 7 that hold now, as `ava recall --json` lists them.
fn current_facts(db: &Path, query: &str) -> Vec<Value> {
    let out = ok(ava(
        db,
        &common::in_chat_7("recall", &["--json", "--limit", "20", query]),
    ));
    let hits: Vec<Value> = serde_json::from_str(&out).unwrap();
    hits.into_iter()
        .map(|h| h["entry"].clone())
        .filter(|e| e["kind"] == "fact")
        .collect()
}

fn count(db: &Path) -> u64 {
    count_in(db, "42", "7")
}

/// How many memories user 42 holds as their own (the user-wide scope, no chat).
fn own_facts(db: &Path) -> u64 {
    let out = ok(ava(db, &["stats", "--user", "42"]));
    out.lines()
        .find(|l| l.contains("/c/"))
        .and_then(|l| l.rsplit(": ").next())
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renamed_cat_replaces_the_old_fact_in_the_prompt_and_keeps_it_in_the_history() {
    let llm = server(&[
        (
            "<conversation>",
            "name is Pixel",
            json_answer(json!({"facts": ["My cat is called Pixel."]})),
        ),
        (
            "<conversation>",
            "renamed",
            json_answer(json!({"facts": ["My cat is called Max."]})),
        ),
        (
            "<new-facts>",
            "My cat is called Max.",
            json_answer(json!({"decisions": [
                {"new": "N1", "op": "UPDATE", "existing": "E1", "reason": "the cat was renamed"}
            ]})),
        ),
    ])
    .await;
    let (_dir, db) = store();
    let (uri, d) = (llm.uri(), db.clone());
    let first =
        blocking(move || chat(&d, &uri, "By the way, my cat's name is Pixel.\n", "30")).await;
    let said = ok(first);
    assert!(said.contains("ava> Noted."), "{said}");
    let (d, q) = (db.clone(), "cat called");
    let facts = blocking(move || current_facts(&d, q)).await;
    assert_eq!(facts.len(), 1, "{facts:?}");
    assert_eq!(facts[0]["content"], "My cat is called Pixel.");
    assert_eq!(facts[0]["source"], "cli");
    let pixel = facts[0]["id"].as_str().unwrap().to_owned();

    let (uri, d) = (llm.uri(), db.clone());
    let second =
        blocking(move || chat(&d, &uri, "We renamed the cat to Max last week.\n", "30")).await;
    ok(second);
    let d = db.clone();
    let facts = blocking(move || current_facts(&d, "cat called")).await;
    assert_eq!(facts.len(), 1, "only the current fact: {facts:?}");
    assert_eq!(facts[0]["content"], "My cat is called Max.");
    let max = facts[0]["id"].as_str().unwrap().to_owned();

    // The decision call showed the old fact as data, labelled, next to the new one.
    let sent: Vec<String> = llm
        .received_requests()
        .await
        .unwrap()
        .iter()
        .map(|r| String::from_utf8_lossy(&r.body).into_owned())
        .collect();
    let decide = sent
        .iter()
        .find(|b| b.contains("<new-facts>"))
        .expect("a decision call");
    assert!(
        decide.contains("E1: My cat is called Pixel.")
            && decide.contains("N1: My cat is called Max."),
        "{decide}"
    );
    assert_eq!(
        sent.iter().filter(|b| b.contains("<conversation>")).count(),
        2,
        "one extraction per exchange"
    );

    // The prompt for the next question has Max as a fact, and Pixel only in the old turn.
    let d = db.clone();
    let prompt = blocking(move || {
        ok(ava(
            &d,
            &common::in_chat_7("context", &["What is my cat called?"]),
        ))
    })
    .await;
    assert!(prompt.contains("My cat is called Max."), "{prompt}");
    assert!(!prompt.contains("My cat is called Pixel."), "{prompt}");

    // Pixel is in the history, replaced by Max; nothing was deleted.
    let (d, m) = (db.clone(), max.clone());
    let history = blocking(move || ok(ava(&d, &common::in_chat_7("history", &[&m])))).await;
    let lines: Vec<&str> = history.lines().collect();
    assert_eq!(lines.len(), 2, "{history}");
    assert!(
        lines[0].contains(&pixel) && lines[0].contains(&format!("by {max}")),
        "{history}"
    );
    assert!(
        lines[1].contains(&max) && lines[1].contains("current"),
        "{history}"
    );
    let d = db.clone();
    assert_eq!(blocking(move || count(&d)).await, 4, "4 turns in the chat");
    let d = db.clone();
    assert_eq!(
        blocking(move || own_facts(&d)).await,
        2,
        "2 facts, the user's own"
    );

    // As of before the rename, Pixel was the fact.
    let d = db.clone();
    let then = blocking(move || {
        let history = ok(ava(&d, &common::in_chat_7("history", &[&pixel])));
        let renamed = history
            .lines()
            .next()
            .and_then(|l| l.split("replaced ").nth(1))
            .and_then(|r| r.split(' ').next())
            .unwrap()
            .to_owned();
        let before = chrono::DateTime::parse_from_rfc3339(&renamed).unwrap()
            - chrono::Duration::milliseconds(1);
        ok(ava(
            &d,
            &common::in_chat_7("recall", &["--as-of", &before.to_rfc3339(), "cat called"]),
        ))
    })
    .await;
    assert!(then.contains("My cat is called Pixel."), "{then}");
    assert!(!then.contains("My cat is called Max."), "{then}");
}

/// Runs one exchange whose extraction gets `scripted`, after a first fact is stored, and
/// asserts that nothing but the two turns was added and the first fact still holds.
async fn changes_nothing(scripted: &[(&str, &str, ResponseTemplate)], timeout: &str, expect: &str) {
    let llm = server(scripted).await;
    let (_dir, db) = store();
    let d = db.clone();
    blocking(move || {
        ok(ava(
            &d,
            &common::in_chat_7("remember", &["My dog is called Rex."]),
        ))
    })
    .await;
    let (uri, d, t) = (llm.uri(), db.clone(), timeout.to_owned());
    let out = blocking(move || chat(&d, &uri, "My dog is now called Bolt.\n", &t)).await;
    let log = stderr(&out);
    assert!(out.status.success(), "{log}\n{}", stdout(&out));
    assert!(
        stdout(&out).contains("ava> Noted."),
        "the reply is not held up"
    );
    assert!(
        log.contains("fact extraction failed; no memory was changed") && log.contains(expect),
        "{log}"
    );
    let d = db.clone();
    let facts = blocking(move || current_facts(&d, "dog called")).await;
    assert_eq!(facts.len(), 1, "{facts:?}");
    assert_eq!(facts[0]["content"], "My dog is called Rex.");
    let d = db.clone();
    assert_eq!(
        blocking(move || count(&d)).await,
        3,
        "the fact and two turns"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_garbage_extraction_changes_nothing() {
    let prose = ResponseTemplate::new(200)
        .set_body_json(completion("Sure! The user's dog is now called Bolt."));
    changes_nothing(
        &[("<conversation>", "Bolt", prose)],
        "30",
        "not the JSON asked for",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decision_naming_no_listed_fact_changes_nothing() {
    let facts = json_answer(json!({"facts": ["My dog is called Bolt."]}));
    let bad = json_answer(json!({"decisions": [
        {"new": "N1", "op": "UPDATE", "existing": "E7"}
    ]}));
    changes_nothing(
        &[
            ("<conversation>", "Bolt", facts),
            ("<new-facts>", "Bolt", bad),
        ],
        "30",
        "\"E7\" is not one of E1..E1",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_extraction_changes_nothing() {
    let late =
        json_answer(json!({"facts": ["My dog is called Bolt."]})).set_delay(Duration::from_secs(4));
    changes_nothing(&[("<conversation>", "Bolt", late)], "1", "within 1").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consolidate_folds_a_fact_stored_twice_and_keeps_the_copy_in_the_history() {
    let (_dir, db) = store();
    let d = db.clone();
    let first = blocking(move || {
        ok(ava(
            &d,
            &common::in_chat_7("remember", &["--tag", "family", "My sister lives in Lyon."]),
        ))
    })
    .await;
    let kept = first
        .split_whitespace()
        .find(|w| w.len() == 36)
        .unwrap()
        .to_owned();
    // A second process that did not look first (an older build, an import) stored it again.
    let store =
        memory_sqlite::SqliteBackend::open(&db, None, memory_sqlite::SqliteConfig::default())
            .await
            .unwrap();
    let scope = memory_core::Scope::for_user("42")
        .unwrap()
        .in_chat("7")
        .unwrap();
    let copy = memory_core::MemoryBackend::store(
        &store,
        &scope,
        memory_core::NewMemory::new("my sister lives in  lyon")
            .with_kind(memory_core::MemoryKind::Fact)
            .with_tag(memory_core::Tag::new("city").unwrap()),
    )
    .await
    .unwrap();
    store.close().await;
    let copy = copy.id.to_string();

    let d = db.clone();
    let plan = blocking(move || ok(ava(&d, &["consolidate", "--user", "42", "--dry-run"]))).await;
    assert!(plan.contains(&format!("keep {kept}")), "{plan}");
    assert!(plan.contains(&format!("would merge {copy}")), "{plan}");
    assert!(plan.contains("run without --dry-run"), "{plan}");
    let d = db.clone();
    assert_eq!(
        blocking(move || current_facts(&d, "sister Lyon"))
            .await
            .len(),
        2,
        "a dry run changes nothing"
    );

    let d = db.clone();
    let done = blocking(move || ok(ava(&d, &["consolidate", "--user", "42"]))).await;
    assert!(done.contains(&format!("merged {copy}")), "{done}");
    let d = db.clone();
    let facts = blocking(move || current_facts(&d, "sister Lyon")).await;
    assert_eq!(facts.len(), 1, "{facts:?}");
    assert_eq!(facts[0]["id"], kept.as_str());
    // `ava remember` also tags the place it names when the entity graph is built in.
    let joined = if cfg!(feature = "graph") {
        json!(["city", "ent:lyon", "family"])
    } else {
        json!(["city", "family"])
    };
    assert_eq!(facts[0]["tags"], joined, "tags joined");
    let (d, k) = (db.clone(), kept.clone());
    let history = blocking(move || ok(ava(&d, &["history", "--user", "42", &k]))).await;
    assert!(
        history.contains(&copy) && history.contains(&format!("by {kept}")),
        "{history}"
    );
    let d = db.clone();
    assert_eq!(blocking(move || count(&d)).await, 2, "nothing deleted");

    // A merge can be undone.
    let (d, c) = (db.clone(), copy.clone());
    let back =
        blocking(move || ok(ava(&d, &["consolidate", "--user", "42", "--restore", &c]))).await;
    assert!(back.contains("current again"), "{back}");
    let d = db.clone();
    assert_eq!(
        blocking(move || current_facts(&d, "sister Lyon"))
            .await
            .len(),
        2
    );
}
