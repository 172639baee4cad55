//! Runs the `ava` binary as a user would and checks what it prints, including bad input.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// `ava` with a private store, the hashing embedder (deterministic, no model needed), and no
/// `.env` or settings leaking in from the environment.
fn ava(db: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ava"))
        .args(args)
        .env("AVA_DB", db)
        .env("AVA_EMBEDDER", "hash")
        .env_remove("AVA_MODEL_DIR")
        .current_dir(env!("CARGO_TARGET_TMPDIR"))
        .output()
        .expect("run ava")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn ok(o: Output) -> String {
    assert!(
        o.status.success(),
        "ava failed: {}\n{}",
        stderr(&o),
        stdout(&o)
    );
    stdout(&o)
}

fn store() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("memories.db");
    (dir, db)
}

#[test]
fn demo_recalls_the_right_memories_and_keeps_scopes_apart() {
    let (_dir, db) = store();
    let out = ok(ava(&db, &["demo"]));
    assert!(out.contains("Stored 10 memories"), "{out}");
    // The first hit after each question is the memory that answers it.
    let first_hit = |question: &str| -> String {
        let (_, after) = out
            .split_once(question)
            .unwrap_or_else(|| panic!("{question} missing"));
        after.lines().nth(1).unwrap_or_default().to_owned()
    };
    assert!(first_hit("name of my cat").contains("Pixel"), "{out}");
    assert!(first_hit("allergic to?").contains("peanuts"), "{out}");
    assert!(first_hit("my manager").contains("Tomás"), "{out}");
    assert!(first_hit("going to Kyoto").contains("Kyoto"), "{out}");
    assert!(out.contains("finds 0 memories"), "{out}");
    assert!(
        out.contains("not a language model"),
        "the demo is honest about its embedder"
    );
}

#[test]
fn remember_recall_forget_round_trip() {
    let (_dir, db) = store();
    let id = ok(ava(
        &db,
        &[
            "remember",
            "--user",
            "42",
            "--chat",
            "7",
            "--tag",
            "pets",
            "My cat is called Pixel",
        ],
    ));
    let id = id.trim();
    assert_eq!(id.len(), 36, "prints a UUID: {id}");
    ok(ava(
        &db,
        &[
            "remember",
            "--user",
            "42",
            "--chat",
            "7",
            "I am allergic to peanuts",
        ],
    ));

    let out = ok(ava(
        &db,
        &[
            "recall",
            "--user",
            "42",
            "--chat",
            "7",
            "--limit",
            "1",
            "cat called",
        ],
    ));
    assert!(
        out.starts_with("1. [") && out.contains("Pixel") && out.contains(id),
        "{out}"
    );
    let json = ok(ava(
        &db,
        &["recall", "--user", "42", "--chat", "7", "--json", "peanuts"],
    ));
    let hits: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(hits[0]["entry"]["content"], "I am allergic to peanuts");
    assert!(hits[0]["breakdown"]["keyword"].as_f64().unwrap() > 0.0);

    // Another user, and the same user in another chat, see nothing.
    for (user, chat) in [("43", "7"), ("42", "8")] {
        let out = ok(ava(
            &db,
            &[
                "recall",
                "--user",
                user,
                "--chat",
                chat,
                "cat Pixel peanuts",
            ],
        ));
        assert!(
            out.contains("no memories match"),
            "{user}/{chat} saw: {out}"
        );
    }

    // Forget without naming the chat finds it among the user's chats; twice is an error.
    assert!(ok(ava(&db, &["forget", "--user", "42", id])).contains("forgot"));
    let out = ok(ava(
        &db,
        &["recall", "--user", "42", "--chat", "7", "cat Pixel"],
    ));
    assert!(!out.contains("Pixel"), "{out}");
    let again = ava(&db, &["forget", "--user", "42", id]);
    assert!(
        !again.status.success() && stderr(&again).contains("has no memory"),
        "{}",
        stderr(&again)
    );
    // Another user cannot forget it either.
    let id2 = ok(ava(
        &db,
        &["remember", "--user", "42", "--chat", "7", "secret plan"],
    ));
    let theirs = ava(&db, &["forget", "--user", "43", id2.trim()]);
    assert!(!theirs.status.success());

    let stats = ok(ava(&db, &["stats", "--user", "42"]));
    assert!(
        stats.contains("memories: 2") && stats.contains("t=default/u=42/c=7/h: 2"),
        "{stats}"
    );
}

#[test]
fn telegram_export_imports_once_and_reports_bad_entries() {
    let (dir, db) = store();
    let export = dir.path().join("result.json");
    std::fs::write(
        &export,
        r#"{"name":"Bob","type":"personal_chat","id":777,"messages":[
          {"id":1,"type":"message","date":"2024-01-02T10:00:00","date_unixtime":"1704189600","from":"Bob","text":"Let's meet in Porto next week"},
          {"id":2,"type":"service","action":"pin_message"},
          {"id":3,"type":"message","date":"2024-01-02T10:01:00","date_unixtime":"1704189660","from":"Me","text":["see ",{"type":"link","text":"https://example.com"}," ok"]},
          {"id":4,"type":"message","from":"Me","text":"no date"},
          {"type":"message","date":"2024-01-02T10:02:00","text":"no id"}
        ]}"#,
    )
    .unwrap();
    let path = export.to_str().unwrap();
    let first = ava(&db, &["import", "--user", "42", path]);
    let out = ok(first.clone());
    assert!(
        out.contains("imported 2 messages") && out.contains("2 malformed skipped"),
        "{out}"
    );
    assert!(
        stderr(&first).contains("no readable date"),
        "{}",
        stderr(&first)
    );
    let again = ok(ava(&db, &["import", "--user", "42", path]));
    assert!(
        again.contains("imported 0 messages") && again.contains("2 already there"),
        "{again}"
    );
    let hits = ok(ava(
        &db,
        &["recall", "--user", "42", "--chat", "777", "Porto"],
    ));
    assert!(hits.contains("Bob: Let's meet in Porto"), "{hits}");
    assert!(
        ok(ava(
            &db,
            &["recall", "--user", "42", "--chat", "777", "example"]
        ))
        .contains("see https://example.com ok")
    );

    std::fs::write(&export, "{ not json").unwrap();
    let bad = ava(&db, &["import", "--user", "42", path]);
    assert!(
        !bad.status.success() && stderr(&bad).contains("is not JSON"),
        "{}",
        stderr(&bad)
    );
    std::fs::write(&export, r#"{"chats": []}"#).unwrap();
    let bad = ava(&db, &["import", "--user", "42", path]);
    assert!(
        !bad.status.success() && stderr(&bad).contains("no `messages` list"),
        "{}",
        stderr(&bad)
    );
}

#[test]
fn bad_stores_and_bad_messages_get_clear_errors() {
    let (dir, _) = store();
    let missing = dir.path().join("no/such/dir/m.db");
    let o = ava(
        &missing,
        &["remember", "--user", "1", "--chat", "1", "hello"],
    );
    assert!(
        !o.status.success() && stderr(&o).contains("does not exist"),
        "{}",
        stderr(&o)
    );

    let foreign = dir.path().join("notes.db");
    std::fs::write(&foreign, "just some notes").unwrap();
    let o = ava(&foreign, &["stats"]);
    assert!(
        !o.status.success() && stderr(&o).contains("not an SQLite database"),
        "{}",
        stderr(&o)
    );
    assert_eq!(
        std::fs::read_to_string(&foreign).unwrap(),
        "just some notes",
        "left untouched"
    );

    let (_d, db) = store();
    let o = ava(&db, &["remember", "--user", "1", "--chat", "1", "   "]);
    assert!(
        !o.status.success() && stderr(&o).contains("content") && stderr(&o).contains("empty"),
        "{}",
        stderr(&o)
    );
    let big = "x".repeat(100 * 1024);
    let o = ava(&db, &["remember", "--user", "1", "--chat", "1", &big]);
    assert!(
        !o.status.success() && stderr(&o).contains("at most 65536 bytes"),
        "{}",
        stderr(&o)
    );
    let o = ava(&db, &["forget", "--user", "1", "not-an-id"]);
    assert!(
        !o.status.success() && stderr(&o).contains("not a memory id"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn unknown_subcommand_fails_with_usage() {
    let (_dir, db) = store();
    let out = ava(&db, &["frobnicate"]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("unrecognized subcommand") && err.contains("Usage"),
        "{err}"
    );
}
