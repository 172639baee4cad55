//! One store file shared by several `ava` processes at once, and the odd paths and files a
//! user can hand `--db`: the defects a user hit, each run as the user ran it.

use crate::common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::{ava, command, count_in, ok, privileged, set_mode, stderr, stdout, with_stdin};
use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

fn store() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("memories.db");
    (dir, db)
}

/// Runs `jobs` threads, each calling `ava` with the args `make(job, i)` for `i` in
/// `0..calls`; returns every run's output.
fn in_parallel(
    db: &Path,
    jobs: usize,
    calls: usize,
    make: fn(usize, usize) -> Vec<String>,
) -> Vec<Output> {
    let handles: Vec<_> = (0..jobs)
        .map(|job| {
            let db = db.to_owned();
            std::thread::spawn(move || {
                (0..calls)
                    .map(|i| {
                        let args = make(job, i);
                        let args: Vec<&str> = args.iter().map(String::as_str).collect();
                        ava(&db, &args)
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect()
}

/// Starts `n` `ava` processes at once, the `i`th with the args `args(i)`, and waits for all.
fn at_once(db: &Path, n: usize, args: impl Fn(usize) -> Vec<String>) -> Vec<Output> {
    let children: Vec<_> = (0..n)
        .map(|i| {
            command(db)
                .args(args(i))
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect()
}

fn failures(outs: &[Output]) -> Vec<String> {
    outs.iter()
        .filter(|o| !o.status.success())
        .map(stderr)
        .collect()
}

#[test]
fn writers_and_readers_in_several_processes_never_fail() {
    let (_dir, db) = store();
    // Three shells storing into one chat, while a fourth recalls from it, on a file none of
    // them has created yet.
    let handles: Vec<_> = (0..2)
        .map(|kind| {
            let db = db.clone();
            std::thread::spawn(move || {
                if kind == 0 {
                    in_parallel(&db, 3, 25, |job, i| {
                        ["remember", "--user", "w1", "--chat", "c"]
                            .iter()
                            .map(ToString::to_string)
                            .chain([format!("x {job} {i}")])
                            .collect()
                    })
                } else {
                    in_parallel(&db, 1, 30, |_, i| {
                        ["recall", "--user", "w1", "--chat", "c"]
                            .iter()
                            .map(ToString::to_string)
                            .chain([format!("x {i}")])
                            .collect()
                    })
                }
            })
        })
        .collect();
    let mut writes = handles.into_iter().map(|h| h.join().unwrap());
    let (stores, recalls) = (writes.next().unwrap(), writes.next().unwrap());
    assert_eq!(failures(&stores), Vec::<String>::new(), "no store failed");
    // A recall that ran before the first store created the file says there is no store;
    // every other one succeeds.
    let bad: Vec<String> = failures(&recalls)
        .into_iter()
        .filter(|e| !e.contains("no memory store at"))
        .collect();
    assert_eq!(bad, Vec::<String>::new(), "no recall failed");
    assert_eq!(
        count_in(&db, "w1", "c"),
        75,
        "every acknowledged memory is there"
    );
}

#[test]
fn eight_processes_creating_one_new_store_all_succeed() {
    let dir = tempfile::tempdir().unwrap();
    for round in 0..3 {
        let db = dir.path().join(format!("f{round}.db"));
        let outs = at_once(&db, 8, |i| {
            vec![
                "remember".into(),
                "--user".into(),
                format!("u{i}"),
                "--chat".into(),
                "c".into(),
                "hi".into(),
            ]
        });
        assert_eq!(failures(&outs), Vec::<String>::new(), "round {round}");
        for i in 0..8 {
            assert_eq!(count_in(&db, &format!("u{i}"), "c"), 1);
        }
    }
}

/// Eight processes telling one fact at once (`ava remember`, the issue's race: up to five
/// rows before) leave one memory, and every process prints its id; three rounds.
#[test]
fn eight_processes_remembering_one_fact_leave_one_memory() {
    let (_dir, db) = store();
    ok(ava(
        &db,
        &common::in_chat("u", "c", "remember", &["the store exists"]),
    ));
    for round in 0..3 {
        let fact = format!("The spare key for round {round} is under the blue pot");
        let outs = at_once(&db, 8, |_| {
            ["remember", "--user", "u", "--chat", "c", &fact]
                .map(String::from)
                .into()
        });
        assert_eq!(failures(&outs), Vec::<String>::new(), "round {round}");
        let mut ids: Vec<String> = outs.iter().map(|o| stdout(o).trim().to_owned()).collect();
        ids.dedup();
        assert_eq!(ids.len(), 1, "round {round}: {ids:?}");
        assert_eq!(count_in(&db, "u", "c"), 2 + round, "round {round}");
    }
}

fn ollama_answer(text: &str) -> Value {
    json!({"model": "fake", "created_at": "2026-03-10T09:30:00Z",
        "message": {"role": "assistant", "content": text}, "done": true})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminal_chat_beside_two_writers_loses_no_turn() {
    let llm = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/api/chat"))
        .respond_with(ResponseTemplate::new(200).set_body_json(ollama_answer("Noted.")))
        .mount(&llm)
        .await;
    let (_dir, db) = store();
    ok(ava(&db, &common::in_chat_7("remember", &["start"])));
    let input: String = (0..20).map(|i| format!("message number {i}\n")).collect();
    let (uri, db2) = (llm.uri(), db.clone());
    let chat = std::thread::spawn(move || {
        let mut chat = command(&db2);
        chat.args(["chat", "--user", "42", "--chat", "7", "--llm", "ollama"])
            .args(["--llm-url", &uri, "--llm-model", "fake"]);
        with_stdin(chat, &input)
    });
    let db3 = db.clone();
    let writers = tokio::task::spawn_blocking(move || {
        in_parallel(&db3, 2, 20, |job, i| {
            ["remember", "--user", "42", "--chat", "other"]
                .iter()
                .map(ToString::to_string)
                .chain([format!("note {job} {i}")])
                .collect()
        })
    })
    .await
    .unwrap();
    let chat = chat.join().unwrap();
    let text = ok(chat);
    assert_eq!(text.matches("ava> Noted.").count(), 20, "{text}");
    assert!(!text.contains("not saved"), "{text}");
    assert_eq!(failures(&writers), Vec::<String>::new());
    // 20 messages and 20 answers, plus the first memory.
    assert_eq!(count_in(&db, "42", "7"), 41);
    assert_eq!(count_in(&db, "42", "other"), 40);
}

#[test]
fn paths_that_are_not_store_files_are_refused_with_what_they_are() {
    let dir = tempfile::tempdir().unwrap();
    let foreign = dir.path().join("foreign.db");
    assert!(foreign_database(&foreign).status.success());
    let before = std::fs::read(&foreign).unwrap();
    let fifo = dir.path().join("pipe");
    memory_core::testing::mkfifo(&fifo);
    for (db, expect) in [
        ("file:foreign.db".to_owned(), "URIs are not accepted"),
        (":memory:".to_owned(), "lose it on exit"),
        (fifo.display().to_string(), "is a FIFO"),
        ("/dev/null".to_owned(), "a character device"),
    ] {
        let o = command(&db)
            .current_dir(dir.path())
            .args(["remember", "--user", "1", "--chat", "1", "hi"])
            .output()
            .unwrap();
        let err = stderr(&o);
        assert!(!o.status.success() && err.contains(expect), "{db}: {err}");
        assert!(stdout(&o).is_empty(), "no id printed for {db}");
    }
    assert_eq!(
        std::fs::read(&foreign).unwrap(),
        before,
        "foreign.db untouched"
    );
    let link = dir.path().join("link.db");
    std::os::unix::fs::symlink(dir.path().join("gone/x.db"), &link).unwrap();
    let o = ava(&link, &common::in_chat("1", "1", "remember", &["hi"]));
    let err = stderr(&o);
    assert!(
        err.contains("symbolic link") && err.contains("does not exist"),
        "{err}"
    );
    assert!(!err.contains("not an SQLite database"), "{err}");
}

/// Writes another application's SQLite database, with Python's sqlite3 module (this test
/// crate has no SQLite binding of its own).
fn foreign_database(path: &Path) -> Output {
    Command::new("python3")
        .args([
            "-c",
            "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); \
             c.execute('CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)'); \
             c.commit(); c.close()",
        ])
        .arg(path)
        .output()
        .unwrap()
}

#[test]
fn read_commands_do_not_create_a_store() {
    let (_dir, db) = store();
    for args in [
        vec!["recall", "--user", "1", "--chat", "1", "cat"],
        vec!["context", "--user", "1", "--chat", "1", "hello"],
        vec!["stats"],
        vec![
            "forget",
            "--user",
            "1",
            "01a2084c-68f5-756a-b1d8-21d4a977d900",
        ],
    ] {
        let o = ava(&db, &args);
        let err = stderr(&o);
        assert!(
            !o.status.success() && err.contains("no memory store at") && err.contains("hint:"),
            "{args:?}: {err}"
        );
        assert!(!db.exists(), "{args:?} created the store");
    }
}

#[test]
fn errors_say_each_cause_once() {
    let (_dir, db) = store();
    let o = ava(&db, &common::in_chat("1", "1", "recall", &["cat"]));
    let err = stderr(&o);
    assert_eq!(err.matches("no memory store at").count(), 1, "{err}");
    assert!(err.starts_with("error: "), "{err}");
    assert!(!err.contains("Caused by"), "{err}");
}

#[test]
fn recall_shows_control_characters_escaped() {
    let (_dir, db) = store();
    ok(ava(
        &db,
        &[
            "remember",
            "--user",
            "1",
            "--chat",
            "1",
            "red \u{1b}[31m alert \u{7} bell",
        ],
    ));
    let out = ok(ava(&db, &common::in_chat("1", "1", "recall", &["alert"])));
    assert!(!out.contains('\u{1b}') && !out.contains('\u{7}'), "{out:?}");
    assert!(out.contains("\\u{1b}[31m alert \\u{7} bell"), "{out}");
    // JSON keeps the text as it is (escaped by JSON itself).
    let json = ok(ava(
        &db,
        &common::in_chat("1", "1", "recall", &["--json", "alert"]),
    ));
    let hits: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(
        hits[0]["entry"]["content"],
        "red \u{1b}[31m alert \u{7} bell"
    );
}

#[test]
fn context_is_a_dry_run_and_says_when_the_prompt_is_incomplete() {
    let (_dir, db) = store();
    ok(ava(
        &db,
        &common::in_chat("1", "1", "remember", &["my cat is called Pixel"]),
    ));
    for _ in 0..2 {
        ok(ava(
            &db,
            &common::in_chat("1", "1", "context", &["what is my cat called"]),
        ));
    }
    // The dry runs recorded no recall (and `recall`, a lookup, counts none either).
    let json = ok(ava(
        &db,
        &common::in_chat("1", "1", "recall", &["--json", "cat"]),
    ));
    let hits: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(
        hits[0]["entry"]["content"], "my cat is called Pixel",
        "{json}"
    );
    assert_eq!(hits[0]["entry"]["access_count"], 0, "{json}");
    // A budget too small for the system prompt: the prompt is printed and the exit says so.
    let o = ava(
        &db,
        &common::in_chat(
            "1",
            "1",
            "context",
            &["--budget", "40", "what is my cat called"],
        ),
    );
    let err = stderr(&o);
    assert!(!o.status.success(), "{err}");
    assert!(err.contains("incomplete"), "{err}");
    assert!(stdout(&o).contains("--- message 1 (system) ---"));
}

#[test]
fn import_ids_belong_to_one_identity() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("m.db");
    let export = dir.path().join("x.json");
    std::fs::write(
        &export,
        r#"{"name":"A","type":"personal_chat","id":1,"messages":[
          {"id":1,"type":"message","date_unixtime":"1704189600","from":"A","text":"first"},
          {"id":2,"type":"message","date_unixtime":"1704189660","from":"A","text":"second"}
        ]}"#,
    )
    .unwrap();
    let file = export.to_str().unwrap();
    let a = ok(ava(&db, &["import", "--user", "a/b", "--chat", "c", file]));
    assert!(a.contains("imported 2 messages"), "{a}");
    let b = ok(ava(&db, &["import", "--user", "a", "--chat", "b/c", file]));
    assert!(
        b.contains("imported 2 messages") && b.contains("0 already there"),
        "{b}"
    );
    let again = ok(ava(&db, &["import", "--user", "a", "--chat", "b/c", file]));
    assert!(
        again.contains("imported 0 messages") && again.contains("2 already there"),
        "{again}"
    );
    assert_eq!(count_in(&db, "a", "b%2Fc"), 2);
}

#[test]
fn an_import_where_nothing_could_be_read_fails() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("m.db");
    let export = dir.path().join("x.json");
    std::fs::write(
        &export,
        r#"{"id":1,"messages":[{"id":1,"type":"message","text":"no date"},{"type":"message","text":"no id"}]}"#,
    )
    .unwrap();
    let o = ava(&db, &["import", "--user", "1", export.to_str().unwrap()]);
    let err = stderr(&o);
    assert!(
        !o.status.success() && err.contains("none of the 2"),
        "{err}"
    );
    // Truncated JSON: what came before the damage is stored, and the exit says where.
    std::fs::write(
        &export,
        r#"{"id":1,"messages":[{"id":1,"type":"message","date_unixtime":"1704189600","from":"A","text":"kept"},{"id":2,"ty"#,
    )
    .unwrap();
    let o = ava(&db, &["import", "--user", "1", export.to_str().unwrap()]);
    let err = stderr(&o);
    assert!(!o.status.success() && err.contains("is not JSON"), "{err}");
    assert!(ok(ava(&db, &common::in_chat("1", "1", "recall", &["kept"]))).contains("A: kept"));
}

/// A store in `shared/` of a temporary directory others may enter, holding user 1's fact
/// about Pixel: the directory, `shared` and the store.
fn store_of_pixel() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    set_mode(dir.path(), 0o755);
    let shared = dir.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    let db = shared.join("m.db");
    ok(ava(
        &db,
        &common::in_chat("1", "1", "remember", &["my cat is called Pixel"]),
    ));
    (dir, shared, db)
}

/// The `ava` binary on `db` with the hashing embedder, at home in `home`, run as `nobody`
/// when `root` (permissions do not apply to root).
fn ava_as_user(root: bool, db: &Path, home: &Path) -> Command {
    let mut c = if root {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(env!("CARGO_BIN_EXE_ava"));
        c
    } else {
        Command::new(env!("CARGO_BIN_EXE_ava"))
    };
    c.env("AVA_DB", db)
        .env("AVA_EMBEDDER", "hash")
        .env("HOME", home)
        .env_remove("RUST_BACKTRACE")
        .current_dir(home);
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_the_user_cannot_write_still_answers_recall() {
    let (dir, shared, db) = store_of_pixel();
    set_mode(&shared, 0o777);
    set_mode(&db, 0o444);
    // As root, permissions do not apply: run as `nobody`, who has no right to write it.
    let root = privileged(dir.path());
    let as_user = |args: &[&str]| -> Output {
        ava_as_user(root, &db, dir.path())
            .args(args)
            .output()
            .unwrap()
    };
    let out = ok(as_user(&common::in_chat("1", "1", "recall", &["cat"])));
    assert!(out.contains("Pixel"), "{out}");
    let o = as_user(&common::in_chat("1", "1", "remember", &["new"]));
    let err = stderr(&o);
    assert!(!o.status.success() && err.contains("read-only"), "{err}");
    // The terminal chat still answers, and says the turn was not saved.
    let llm = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/api/chat"))
        .respond_with(ResponseTemplate::new(200).set_body_json(ollama_answer("Pixel, I think.")))
        .mount(&llm)
        .await;
    let uri = llm.uri();
    let home = dir.path().to_owned();
    let o = tokio::task::spawn_blocking(move || {
        let mut child = ava_as_user(root, &db, &home)
            .args(["chat", "--user", "1", "--chat", "1", "--llm", "ollama"])
            .args(["--llm-url", &uri, "--llm-model", "fake"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(b"what is my cat called?\n")
            .unwrap();
        child.wait_with_output().unwrap()
    })
    .await
    .unwrap();
    let text = ok(o);
    assert!(text.contains("ava> Pixel, I think."), "{text}");
    assert!(
        text.contains("this turn was not saved") && text.contains("read-only"),
        "{text}"
    );
}

/// A store in a directory the user cannot write (SQLite cannot make the index its log
/// needs beside it) still answers every read command, as docs/store.md promises; writing says
/// it is read-only.
#[test]
fn a_store_in_a_directory_the_user_cannot_write_still_answers_every_read() {
    let (dir, shared, db) = store_of_pixel();
    set_mode(&db, 0o644);
    let root = privileged(dir.path());
    // As root, permissions do not apply: run as `nobody`; otherwise take the write bit away.
    if !root {
        set_mode(&shared, 0o555);
    }
    let as_user = |args: &[&str]| -> Output {
        ava_as_user(root, &db, dir.path())
            .args(args)
            .output()
            .unwrap()
    };
    let out = ok(as_user(&common::in_chat("1", "1", "recall", &["cat"])));
    assert!(out.contains("Pixel"), "{out}");
    let id = out
        .split_whitespace()
        .skip_while(|w| *w != "id")
        .nth(1)
        .unwrap()
        .to_owned();
    let out = ok(as_user(&common::in_chat("1", "1", "history", &[&id])));
    assert!(out.contains("Pixel"), "{out}");
    let out = ok(as_user(&common::in_chat(
        "1",
        "1",
        "context",
        &["what is my cat called?"],
    )));
    assert!(out.contains("Pixel"), "{out}");
    let out = ok(as_user(&["stats", "--user", "1"]));
    assert!(out.contains("c=1/"), "{out}");
    if cfg!(feature = "documents") {
        let o = as_user(&["docs", "list", "--user", "1"]);
        assert!(o.status.success(), "{}", stderr(&o));
    }
    let o = as_user(&common::in_chat("1", "1", "remember", &["new"]));
    let err = stderr(&o);
    assert!(!o.status.success() && err.contains("read-only"), "{err}");
    let left: Vec<_> = std::fs::read_dir(&shared)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, ["m.db"], "nothing written beside the store");
    set_mode(&shared, 0o755);
}
