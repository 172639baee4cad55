//! Runs the `ava` binary as a user would and checks what it prints, including bad input.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{ava, command, exported, ok, refused, stderr, stdout, with_stdin};
use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

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
    // Under the demo's tight budget the conversation block holds its newest turns, never
    // its oldest, which compete with what else is recalled (the conversation is months old,
    // which once made every turn tie at value 0).
    let in_conversation = |text: &str| {
        out.lines()
            .any(|l| l.contains("+ [temporal]") && l.contains(text))
    };
    assert!(!in_conversation("Hi! I'm Maya"), "{out}");
    assert!(in_conversation("Tomás asked me to present"), "{out}");
    assert!(first_hit("allergic to?").contains("peanuts"), "{out}");
    assert!(first_hit("my manager").contains("Tomás"), "{out}");
    assert!(first_hit("going to Kyoto").contains("Kyoto"), "{out}");
    assert!(out.contains("finds 0 memories"), "{out}");
    assert!(
        out.contains("not a language model"),
        "the demo is honest about its embedder"
    );
    // The compiled prompt and its explain report: the pinned facts go in, the tight budget
    // leaves some of the conversation out.
    assert!(out.contains("The prompt an LLM would get"), "{out}");
    assert!(out.contains("| --- message 1 (system) ---"), "{out}");
    assert_eq!(out.matches("Explain report").count(), 4, "{out}");
    assert!(
        out.contains("[knowledge] \"Maya's cat is called Pixel.\""),
        "{out}"
    );
    assert!(out.contains("memories dropped: "), "{out}");
    // Something is cut for the budget in most prompts (older talk no search found is left
    // out before compile, as over the conversation's limits).
    assert!(out.matches("memories dropped: 0").count() < 2, "{out}");
    assert!(out.contains("over limits 4"), "{out}");
}

/// `text` with every memory id (a UUID, new each run) replaced by `[id]`.
fn redact_ids(text: &str) -> String {
    let is_id = |s: &str| {
        s.len() == 36
            && s.bytes().enumerate().all(|(i, b)| match i {
                8 | 13 | 18 | 23 => b == b'-',
                _ => b.is_ascii_hexdigit(),
            })
    };
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        match rest.get(..36) {
            Some(head) if is_id(head) => {
                out.push_str("[id]");
                rest = &rest[36..];
            }
            _ => {
                out.push(c);
                rest = &rest[c.len_utf8()..];
            }
        }
    }
    out
}

#[test]
fn demo_manager_question_puts_the_manager_in_the_prompt() {
    let (_dir, db) = store();
    let out = ok(ava(&db, &["demo", "--all-prompts"]));
    let (_, after) = out
        .split_once("Q: Who is my manager at work?")
        .expect("the manager question");
    let (block, _) = after.split_once("\nQ: ").expect("a question after it");
    let (prompt, report) = block
        .split_once("Explain report")
        .expect("the prompt, then its report");
    // Under its day's header (the question it answered may come with it).
    let day = prompt
        .find("| [2026-03-02 Mon]\n")
        .expect("the day's header");
    let line = prompt
        .find("| - user: Motion planning for warehouse robots. My manager is called Tomás.")
        .expect("the manager's message");
    assert!(
        day < line && !prompt[day + 1..line].contains("| [2026-"),
        "{block}"
    );
    // The demo asks at a fixed time and uses the hashing embedder, so the whole prompt
    // and its report are the same on every run but for the memory ids.
    insta::assert_snapshot!(
        "demo_manager_question",
        redact_ids(&format!(
            "Q: Who is my manager at work?{prompt}Explain report{report}"
        ))
    );
}

#[test]
fn demo_works_on_a_fresh_machine_with_nothing_configured() {
    let empty = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ava"))
        .arg("demo")
        .env_remove("AVA_DB")
        .env_remove("AVA_EMBEDDER")
        .env("AVA_MODEL_DIR", empty.path())
        .env("HOME", empty.path())
        .env_remove("XDG_DATA_HOME")
        .current_dir(empty.path())
        .output()
        .unwrap();
    let text = ok(out);
    assert!(
        text.contains("embedder hash/"),
        "falls back to hashing: {text}"
    );
    assert!(text.contains("not a language model"), "{text}");
    assert!(text.contains("Stored 10 memories"), "{text}");
}

#[test]
fn remember_recall_forget_round_trip() {
    let (_dir, db) = store();
    let id = ok(ava(
        &db,
        &common::in_chat_7("remember", &["--tag", "pets", "My cat is called Pixel"]),
    ));
    let id = id.trim();
    assert_eq!(id.len(), 36, "prints a UUID: {id}");
    ok(ava(
        &db,
        &common::in_chat_7("remember", &["I am allergic to peanuts"]),
    ));

    let out = ok(ava(
        &db,
        &common::in_chat_7("recall", &["--limit", "1", "cat called"]),
    ));
    assert!(
        out.starts_with("1. [") && out.contains("Pixel") && out.contains(id),
        "{out}"
    );
    let json = ok(ava(
        &db,
        &common::in_chat_7("recall", &["--json", "peanuts"]),
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
    let out = ok(ava(&db, &common::in_chat_7("recall", &["cat Pixel"])));
    assert!(!out.contains("Pixel"), "{out}");
    let again = ava(&db, &["forget", "--user", "42", id]);
    refused(&again, "has no memory");
    // Another user cannot forget it either.
    let id2 = ok(ava(&db, &common::in_chat_7("remember", &["secret plan"])));
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
        &common::in_chat("42", "777", "recall", &["Porto"]),
    ));
    assert!(hits.contains("Bob: Let's meet in Porto"), "{hits}");
    assert!(
        ok(ava(
            &db,
            &common::in_chat("42", "777", "recall", &["example"])
        ))
        .contains("see https://example.com ok")
    );

    std::fs::write(&export, "{ not json").unwrap();
    let bad = ava(&db, &["import", "--user", "42", path]);
    refused(&bad, "is not JSON");
    std::fs::write(&export, r#"{"chats": []}"#).unwrap();
    let bad = ava(&db, &["import", "--user", "42", path]);
    refused(&bad, "no `messages` list");
}

#[test]
fn bad_stores_and_bad_messages_get_clear_errors() {
    let (dir, _) = store();
    let missing = dir.path().join("no/such/dir/m.db");
    let o = ava(&missing, &common::in_chat("1", "1", "remember", &["hello"]));
    refused(&o, "does not exist");

    let foreign = dir.path().join("notes.db");
    std::fs::write(&foreign, "just some notes").unwrap();
    let o = ava(&foreign, &["stats"]);
    refused(&o, "not an SQLite database");
    assert_eq!(
        std::fs::read_to_string(&foreign).unwrap(),
        "just some notes",
        "left untouched"
    );

    let (_d, db) = store();
    let o = ava(&db, &common::in_chat("1", "1", "remember", &["   "]));
    assert!(
        !o.status.success() && stderr(&o).contains("content") && stderr(&o).contains("empty"),
        "{}",
        stderr(&o)
    );
    // Longer than one memory holds: stored whole, in linked parts.
    let big = "word ".repeat(20 * 1024);
    let o = ava(&db, &common::in_chat("1", "1", "remember", &[&big]));
    assert!(
        o.status.success() && stderr(&o).contains("stored in 2 linked parts"),
        "{}",
        stderr(&o)
    );
    let o = ava(&db, &["forget", "--user", "1", "not-an-id"]);
    refused(&o, "not a memory id");
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

/// Under `--log-format json` even a command line clap refuses is one JSON object on
/// stderr, with clap's exit code; help still prints as it is.
#[test]
fn a_refused_command_line_is_a_json_line_when_the_log_is_json() {
    let (_dir, db) = store();
    let out = ava(
        &db,
        &[
            "--log-format",
            "json",
            "recall",
            "--limit",
            "many",
            "--user",
            "1",
            "--chat",
            "1",
            "cat",
        ],
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "one line: {err}");
    let line: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
    assert_eq!(line["level"], "ERROR", "{line}");
    let message = line["message"].as_str().unwrap();
    assert!(
        message.contains("invalid value 'many'") && message.contains("--limit"),
        "{message}"
    );
    // The same from the environment; and without JSON logs clap's own text.
    let out = command(&db)
        .env("AVA_LOG_FORMAT", "json")
        .args(["frobnicate"])
        .output()
        .unwrap();
    assert!(
        serde_json::from_str::<serde_json::Value>(stderr(&out).trim()).is_ok(),
        "{}",
        stderr(&out)
    );
    let out = ava(&db, &["frobnicate"]);
    assert!(
        stderr(&out).starts_with("error: unrecognized subcommand"),
        "{}",
        stderr(&out)
    );
    let help = ava(&db, &["--log-format", "json", "--help"]);
    assert!(help.status.success() && stdout(&help).contains("Usage"));
}

#[test]
fn context_prints_the_prompt_and_explains_it() {
    let (_dir, db) = store();
    let id = ok(ava(
        &db,
        &common::in_chat_7("remember", &["My cat is called Pixel"]),
    ));
    let id = id.trim();
    ok(ava(
        &db,
        &common::in_chat("43", "7", "remember", &["My dog is called Rex"]),
    ));
    let out = ok(ava(
        &db,
        &common::in_chat_7("context", &["--explain", "What is my cat called?"]),
    ));
    assert!(out.contains("My cat is called Pixel"), "{out}");
    assert!(!out.contains("Rex"), "another user's memory: {out}");
    assert!(out.contains("What is my cat called?"), "{out}");
    assert!(
        out.contains("--- tools: remember, recall, forget ---"),
        "{out}"
    );
    assert!(out.contains("memories in the prompt: 1"), "{out}");
    assert!(out.contains(id), "the report names the memory: {out}");

    // Without --explain, no report; with --json, machine-readable.
    let plain = ok(ava(&db, &common::in_chat_7("context", &["cat?"])));
    assert!(!plain.contains("memories in the prompt"), "{plain}");
    let json: Value = serde_json::from_str(&ok(ava(
        &db,
        &common::in_chat_7(
            "context",
            &["--json", "--explain", "--budget", "2000", "cat?"],
        ),
    )))
    .unwrap();
    assert_eq!(json["report"]["budget"]["total"], 2000);
    assert_eq!(json["report"]["budget"]["allocation"], "relevance");
    assert_eq!(json["messages"][0]["role"], "system");
    assert_eq!(json["tools"].as_array().unwrap().len(), 3);

    // The operator picks how the budget is split; the report says which was used.
    let fixed = ok(ava(
        &db,
        &[
            "--allocation",
            "fixed:0.5,0.4,0.1",
            "context",
            "--user",
            "42",
            "--chat",
            "7",
            "--explain",
            "cat?",
        ],
    ));
    assert!(fixed.contains("allocation fixed:0.5,0.4,0.1"), "{fixed}");
    assert!(fixed.contains("My cat is called Pixel"), "{fixed}");
    let o = ava(
        &db,
        &[
            "--allocation",
            "fair",
            "context",
            "--user",
            "42",
            "--chat",
            "7",
            "cat?",
        ],
    );
    refused(&o, "`relevance`, `information` or `fixed:");

    // Nothing was stored by the dry run.
    let stats = ok(ava(&db, &["stats"]));
    assert!(stats.contains("memories: 2"), "{stats}");
    assert!(stats.contains("(embedded, durable)"), "{stats}");
}

#[test]
fn context_rejects_bad_input() {
    let (dir, db) = store();
    for (args, expect) in [
        (vec!["   "], "empty"),
        (vec!["--budget", "0", "hi"], "budget"),
    ] {
        let mut all = vec!["context", "--user", "1", "--chat", "1"];
        all.extend(args);
        let o = ava(&db, &all);
        refused(&o, expect);
    }
    // The store is not created by a dry run.
    assert!(!db.exists());
    ok(ava(&db, &common::in_chat("1", "1", "remember", &["hello"])));
    // A message larger than the budget: the prompt is shown, and said not to fit.
    let big = "x ".repeat(50 * 1024);
    let o = ava(&db, &common::in_chat("1", "1", "context", &[&big]));
    assert!(
        !o.status.success()
            && stderr(&o).contains("the prompt above is incomplete")
            && stderr(&o).contains("the observation"),
        "{}",
        stderr(&o)
    );
    let missing = dir.path().join("no/such/dir/m.db");
    let o = ava(&missing, &common::in_chat("1", "1", "context", &["hi"]));
    refused(&o, "does not exist");
}

/// Runs `ava chat` against `llm` with `input` on stdin.
fn chat(db: &Path, llm: &str, input: &str) -> Output {
    chat_with(db, llm, &[], input)
}

/// `ava chat` as user 42 in chat 7 against a fake Ollama at `llm`, with `extra` arguments.
fn chat_with(db: &Path, llm: &str, extra: &[&str], input: &str) -> Output {
    let mut chat = command(db);
    chat.args(["chat", "--user", "42", "--chat", "7", "--llm", "ollama"])
        .args([
            "--llm-url",
            llm,
            "--llm-model",
            "fake",
            "--llm-timeout",
            "30",
        ])
        .args(extra);
    with_stdin(chat, input)
}

fn ollama_answer(text: &str) -> Value {
    json!({"model": "fake", "created_at": "2026-03-10T09:30:00Z",
        "message": {"role": "assistant", "content": text}, "done": true})
}

/// A fake Ollama that answers every chat with `text`.
async fn fake_ollama(text: &str) -> MockServer {
    let llm = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/api/chat"))
        .respond_with(ResponseTemplate::new(200).set_body_json(ollama_answer(text)))
        .mount(&llm)
        .await;
    llm
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_answers_from_stdin_and_stores_both_turns() {
    let llm = fake_ollama("Hello, Maya!").await;
    let (_dir, db) = store();
    let uri = llm.uri();
    let db2 = db.clone();
    let out = tokio::task::spawn_blocking(move || {
        chat(&db2, &uri, "I am Maya and I live in Porto.\n\n/context\n")
    })
    .await
    .unwrap();
    let text = ok(out);
    assert!(text.contains("ava> Hello, Maya!"), "{text}");
    assert!(
        text.contains("tokens:"),
        "/context prints the report: {text}"
    );

    // One answering call (blank lines and /context are not sent), and one asking for
    // the exchange's facts (whose non-JSON answer here changes nothing).
    let (extractions, sent): (Vec<_>, Vec<_>) = llm
        .received_requests()
        .await
        .unwrap()
        .into_iter()
        .partition(|r| String::from_utf8_lossy(&r.body).contains("<conversation>"));
    assert_eq!(sent.len(), 1, "one model call to answer");
    assert_eq!(extractions.len(), 1, "one call to learn facts");
    let body = String::from_utf8_lossy(&sent[0].body);
    assert!(body.contains("I live in Porto"), "{body}");

    let db3 = db.clone();
    let recalled = tokio::task::spawn_blocking(move || {
        ok(ava(&db3, &common::in_chat_7("recall", &["Porto Maya"])))
    })
    .await
    .unwrap();
    assert!(recalled.contains("I live in Porto"), "{recalled}");
    assert!(
        recalled.contains("Hello, Maya!"),
        "the answer is stored: {recalled}"
    );
}

/// A standing instruction said in `ava chat` is stored marked (pinned, tagged), so every
/// later prompt of the chat carries it; a statement that opens with "never" is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_marks_a_standing_instruction() {
    let llm = fake_ollama("D'accord.").await;
    let (_dir, db) = store();
    let (uri, db2) = (llm.uri(), db.clone());
    let recalled = tokio::task::spawn_blocking(move || {
        ok(chat_with(
            &db2,
            &uri,
            &["--no-facts"],
            "From now on, answer me in French please.\nNever tried snails, are they good?\n",
        ));
        ok(ava(
            &db2,
            &common::in_chat_7("recall", &["--json", "French snails"]),
        ))
    })
    .await
    .unwrap();
    let hits: Value = serde_json::from_str(&recalled).unwrap();
    let entry = |start: &str| {
        hits.as_array()
            .unwrap()
            .iter()
            .map(|h| &h["entry"])
            .find(|e| e["content"].as_str().unwrap().starts_with(start))
            .unwrap_or_else(|| panic!("no {start:?} in {hits}"))
            .clone()
    };
    let marked = |e: &Value| {
        e["pinned"] == true
            && e["tags"]
                .as_array()
                .unwrap()
                .iter()
                .any(|t| t == hydrate::INSTRUCTION_TAG)
    };
    let instruction = entry("From now on");
    assert!(marked(&instruction), "{instruction}");
    let question = entry("Never tried");
    assert!(!marked(&question), "{question}");
}

/// An answer of 341 KiB (a model repeating itself, as one in BEAM does) is stored whole, in
/// linked parts, and its end is found again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_keeps_an_answer_of_any_length() {
    let mut answer = String::new();
    let mut i = 0;
    while answer.len() < 341 * 1024 {
        answer.push_str(&format!(
            "Point {i}: keep the plan as it is and check it again. "
        ));
        i += 1;
    }
    answer.push_str("In the end, the answer is the zeppelin.");
    let llm = fake_ollama(&answer).await;
    let (_dir, db) = store();
    let uri = llm.uri();
    let db2 = db.clone();
    let out = tokio::task::spawn_blocking(move || {
        chat_with(
            &db2,
            &uri,
            &["--no-facts"],
            "Tell me everything about the plan.\n",
        )
    })
    .await
    .unwrap();
    let text = ok(out);
    assert!(text.contains("Point 0: keep the plan"), "{}", &text[..200]);
    assert!(!text.contains("could not"), "nothing was refused");

    let db3 = db.clone();
    let (recalled, listed) = tokio::task::spawn_blocking(move || {
        let recalled = ok(ava(
            &db3,
            &common::in_chat_7("recall", &["--json", "zeppelin"]),
        ));
        let listed = ok(ava(
            &db3,
            &common::in_chat_7("recall", &["--json", "--limit", "20", "plan"]),
        ));
        (recalled, listed)
    })
    .await
    .unwrap();
    let hits: Value = serde_json::from_str(&recalled).unwrap();
    let best = &hits.as_array().unwrap()[0];
    assert!(
        best["entry"]["content"]
            .as_str()
            .unwrap()
            .ends_with("the answer is the zeppelin."),
        "{best}"
    );
    let tags: Vec<&str> = best["entry"]["tags"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(tags.iter().any(|t| t.starts_with("part-of:")), "{tags:?}");
    let of = tags.iter().find(|t| t.starts_with("part:")).unwrap();
    let n: usize = of.rsplit("-of-").next().unwrap().parse().unwrap();
    assert!(n >= 6, "341 KiB in parts of at most 64 KiB: {of}");
    // Every part is stored, and together they are the whole answer.
    let all: Value = serde_json::from_str(&listed).unwrap();
    let mut parts: Vec<&Value> = all
        .as_array()
        .unwrap()
        .iter()
        .filter(|h| h["entry"]["role"] == "assistant")
        .collect();
    assert_eq!(parts.len(), n, "{}", parts.len());
    parts.sort_by_key(|h| h["entry"]["created_at"].as_str().unwrap().to_owned());
    let joined: String = parts
        .iter()
        .map(|h| h["entry"]["content"].as_str().unwrap())
        .collect();
    assert_eq!(joined, answer);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_apologises_when_the_model_fails() {
    let llm = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/api/chat"))
        .respond_with(ResponseTemplate::new(500).set_body_string("{\"error\":\"boom\"}"))
        .mount(&llm)
        .await;
    let (_dir, db) = store();
    let uri = llm.uri();
    let out = tokio::task::spawn_blocking(move || chat(&db, &uri, "hello\n"))
        .await
        .unwrap();
    let text = ok(out);
    assert!(text.contains("ava> Sorry"), "{text}");
}

#[test]
fn run_refuses_to_start_without_what_it_needs() {
    let (_dir, db) = store();
    let o = ava(&db, &["run"]);
    refused(&o, "TELOXIDE_TOKEN");
    let with_token = |args: &[&str]| {
        command(&db)
            .args(args)
            .env("TELOXIDE_TOKEN", "123:secret-token-value")
            .output()
            .unwrap()
    };
    let o = with_token(&["run", "--allow-users", "12,bob"]);
    refused(&o, "`bob` is not a Telegram user id");
    let o = with_token(&["run", "--llm-url", "localhost:11434"]);
    refused(&o, "not an http(s) URL");
    let o = with_token(&["run", "--telegram-api-url", "not a url"]);
    refused(&o, "Telegram API URL");
    assert!(
        !stderr(&o).contains("secret-token-value"),
        "the token is never printed"
    );
}

/// A Telegram export of chat 7 with `n` messages from January 2024, one a minute.
fn old_export(dir: &Path, n: usize) -> PathBuf {
    let messages: Vec<Value> = (0..n)
        .map(|i| {
            json!({"id": i + 1, "type": "message",
                "date": format!("2024-01-02T10:{i:02}:00"),
                "date_unixtime": (1_704_189_600 + 60 * i).to_string(),
                "from": "Bob", "text": format!("old message number {i} about Porto")})
        })
        .collect();
    let export = dir.join("result.json");
    std::fs::write(
        &export,
        json!({"name": "Bob", "type": "personal_chat", "id": 7, "messages": messages}).to_string(),
    )
    .unwrap();
    export
}

/// The memory ids an `ava prune` output lists, sorted.
fn listed_ids(out: &str) -> Vec<String> {
    let mut ids: Vec<String> = out
        .lines()
        .filter_map(|l| l.strip_prefix("  "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect();
    ids.sort();
    ids
}

#[test]
fn prune_dry_run_lists_what_a_real_run_then_removes() {
    let (dir, db) = store();
    let export = old_export(dir.path(), 5);
    ok(ava(
        &db,
        &["import", "--user", "42", export.to_str().unwrap()],
    ));
    ok(ava(
        &db,
        &common::in_chat_7("remember", &["My cat is called Miso"]),
    ));

    // Faded: untouched for far more than three half-lives of a day.
    let faded = ok(ava(
        &db,
        &[
            "prune",
            "--user",
            "42",
            "--max-count",
            "1000",
            "--decay-half-life",
            "1d",
            "--dry-run",
        ],
    ));
    assert!(faded.contains("would remove 5"), "{faded}");
    assert!(faded.contains("faded (decay)"), "{faded}");
    assert!(!faded.contains("Miso"), "{faded}");
    let fresh = ok(ava(
        &db,
        &[
            "prune",
            "--user",
            "42",
            "--decay-half-life",
            "100000d",
            "--dry-run",
        ],
    ));
    assert!(fresh.contains("would remove 0"), "{fresh}");

    let dry = ok(ava(
        &db,
        &["prune", "--user", "42", "--max-age", "30d", "--dry-run"],
    ));
    assert!(dry.contains("would remove 5"), "{dry}");
    assert!(dry.contains("older than 30 days"), "{dry}");
    assert!(dry.contains("old message number 0 about Porto"), "{dry}");
    assert!(!dry.contains("Miso"), "a valid fact is never pruned: {dry}");
    let listed = listed_ids(&dry);
    assert_eq!(listed.len(), 5, "{dry}");
    let still = ok(ava(&db, &["stats", "--user", "42"]));
    assert!(
        still.contains("/c=7/h: 6"),
        "a dry run removes nothing: {still}"
    );

    let real = ok(ava(&db, &["prune", "--user", "42", "--max-age", "30d"]));
    assert!(real.contains("removed 5"), "{real}");
    assert_eq!(
        listed_ids(&real),
        listed,
        "the real run removed what the dry run listed"
    );
    let hits = ok(ava(&db, &common::in_chat_7("recall", &["Porto"])));
    assert!(!hits.contains("old message"), "{hits}");
    let cat = ok(ava(&db, &common::in_chat_7("recall", &["cat"])));
    assert!(cat.contains("My cat is called Miso"), "{cat}");

    let bad = ava(&db, &["prune", "--user", "42", "--max-age", "3y"]);
    refused(&bad, "use s, m, h, d or w");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_prunes_the_chat_it_uses_unless_told_not_to() {
    let llm = fake_ollama("Noted.").await;
    for (flags, left) in [
        (vec!["--prune-max-count", "3"], 3),
        (vec!["--no-prune", "--prune-max-count", "3"], 8),
    ] {
        let (dir, db) = store();
        let export = old_export(dir.path(), 6);
        let args: Vec<String> = flags.iter().map(|f| f.to_string()).collect();
        let (db2, uri) = (db.clone(), llm.uri());
        let counted = tokio::task::spawn_blocking(move || {
            ok(ava(
                &db2,
                &["import", "--user", "42", export.to_str().unwrap()],
            ));
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let out = ok(chat_with(&db2, &uri, &args, "I moved to Lisbon.\n"));
            assert!(out.contains("ava> Noted."), "{out}");
            ok(ava(&db2, &["stats", "--user", "42"]))
        })
        .await
        .unwrap();
        assert!(
            counted.contains(&format!("/c=7/h: {left}\n")),
            "{flags:?}: expected {left} memories left: {counted}"
        );
    }
}

/// Pruning is shared by the processes on a store: a chat one `ava chat` pruned is not pruned
/// again by the next within `--prune-every` (the first holds the chat's pruning turn, a
/// lease in the store), and each process prunes its first chat when nobody has lately.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_is_pruned_once_per_interval_whichever_process_uses_it() {
    let llm = fake_ollama("Noted.").await;
    let (dir, db) = store();
    let export = old_export(dir.path(), 6);
    let uri = llm.uri();
    let counts = tokio::task::spawn_blocking(move || {
        ok(ava(
            &db,
            &["import", "--user", "42", export.to_str().unwrap()],
        ));
        let flags = ["--prune-max-count", "3", "--prune-every", "10m"];
        let mut counts = Vec::new();
        for said in ["I moved to Lisbon.\n", "The weather is fine.\n"] {
            ok(chat_with(&db, &uri, &flags, said));
            counts.push(ok(ava(&db, &["stats", "--user", "42"])));
        }
        counts
    })
    .await
    .unwrap();
    assert!(
        counts[0].contains("/c=7/h: 3\n"),
        "pruned to 3: {}",
        counts[0]
    );
    assert!(
        counts[1].contains("/c=7/h: 5\n"),
        "the next process's two turns, not pruned within 10 minutes: {}",
        counts[1]
    );
}

#[test]
fn remembering_the_same_fact_twice_keeps_one_memory() {
    let (_dir, db) = store();
    let first = ok(ava(
        &db,
        &common::in_chat_7("remember", &["--tag", "pets", "My cat is called Pixel"]),
    ));
    let again = ava(
        &db,
        &common::in_chat_7("remember", &["--tag", "home", "my cat is called Pixel."]),
    );
    assert!(
        stderr(&again).contains("already remembered"),
        "{}",
        stderr(&again)
    );
    assert_eq!(ok(again).trim(), first.trim(), "the same memory");
    let stats = ok(ava(&db, &["stats", "--user", "42"]));
    assert!(stats.contains("/c=7/h: 1"), "{stats}");
    let hits = ok(ava(&db, &common::in_chat_7("recall", &["--json", "cat"])));
    assert!(
        hits.contains("home") && hits.contains("pets"),
        "tags merged: {hits}"
    );
}

#[test]
fn a_replaced_fact_leaves_the_prompt_but_stays_in_the_history() {
    let (_dir, db) = store();
    let pixel = ok(ava(
        &db,
        &common::in_chat_7("remember", &["My cat is called Pixel"]),
    ));
    let pixel = pixel.trim();
    let max = ok(ava(
        &db,
        &common::in_chat_7(
            "remember",
            &["--replaces", pixel, "We renamed the cat to Max"],
        ),
    ));
    let max = max.trim();
    let prompt = ok(ava(
        &db,
        &common::in_chat_7("context", &["What is my cat called?"]),
    ));
    assert!(prompt.contains("We renamed the cat to Max"), "{prompt}");
    assert!(
        !prompt.contains("Pixel"),
        "the replaced fact is not in the prompt: {prompt}"
    );
    for from in [pixel, max] {
        let history = ok(ava(&db, &["history", "--user", "42", from]));
        let lines: Vec<&str> = history.lines().collect();
        assert_eq!(lines.len(), 2, "{history}");
        assert!(
            lines[0].contains(pixel)
                && lines[0].contains(&format!("by {max}"))
                && lines[0].contains("My cat is called Pixel"),
            "{history}"
        );
        assert!(
            lines[1].contains(max) && lines[1].contains("[current]"),
            "{history}"
        );
    }
    let stats = ok(ava(&db, &["stats", "--user", "42"]));
    assert!(stats.contains("/c=7/h: 2"), "nothing deleted: {stats}");

    // Replacing it again, or an id that is not there, stores nothing.
    let again = ava(
        &db,
        &common::in_chat_7("remember", &["--replaces", pixel, "Tom"]),
    );
    refused(&again, "already replaced");
    let missing = ava(
        &db,
        &common::in_chat_7(
            "remember",
            &["--replaces", "01a209cf-9c5b-765f-aa78-b86db7dc6fef", "Tom"],
        ),
    );
    assert!(!missing.status.success(), "{}", stderr(&missing));
    assert!(ok(ava(&db, &["stats", "--user", "42"])).contains("/c=7/h: 2"));
}

/// The bytes of every file of `dir`, by name: what a command may have written.
fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().unwrap().is_file())
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect();
    out.sort();
    out
}

/// One-shot `remember`s leave their memories in the store file itself (not only in its
/// write-ahead log), so copying the file backs them up; and `recall`, a lookup, writes
/// nothing at all and counts no access.
#[test]
fn one_shot_commands_leave_a_whole_file_and_recall_writes_nothing() {
    let (dir, db) = store();
    for i in 0..5 {
        ok(ava(
            &db,
            &common::in_chat_7(
                "remember",
                &[&format!("Parcel {i} goes to the harbour office")],
            ),
        ));
    }
    let backup = dir.path().join("backup").join("memories.db");
    std::fs::create_dir(backup.parent().unwrap()).unwrap();
    std::fs::copy(&db, &backup).unwrap();
    let recall = |db: &Path| -> Value {
        let out = ok(ava(
            db,
            &common::in_chat_7("recall", &["--json", "--limit", "10", "parcel"]),
        ));
        serde_json::from_str(&out).unwrap()
    };
    let copied = recall(&backup);
    assert_eq!(copied.as_array().unwrap().len(), 5, "{copied}");

    let before = files(dir.path());
    let first = recall(&db);
    let second = recall(&db);
    assert_eq!(
        files(dir.path()),
        before,
        "recall changed the store's files"
    );
    for hits in [&first, &second] {
        for h in hits.as_array().unwrap() {
            assert_eq!(h["entry"]["access_count"], 0, "{h}");
        }
    }
}

/// Every answer is capped: `ava chat` sends `--max-answer-tokens` (default 2,048) as Ollama's
/// `num_predict` and as the OpenAI-compatible `max_completion_tokens`, so a runaway model
/// stops at the server; 0 is refused before anything is asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_caps_the_length_of_an_answer() {
    let llm = fake_ollama("Short.").await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 1_773_000_000,
            "model": "gpt-test",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "Short."},
                "finish_reason": "length"}]
        })))
        .mount(&llm)
        .await;
    let (_dir, db) = store();
    let (uri, db2) = (llm.uri(), db.clone());
    let refused = tokio::task::spawn_blocking(move || {
        ok(chat_with(&db2, &uri, &["--no-facts"], "Hi\n"));
        ok(chat_with(
            &db2,
            &uri,
            &["--no-facts", "--max-answer-tokens", "300"],
            "Hi\n",
        ));
        let mut openai = command(&db2);
        openai
            .args(["chat", "--user", "42", "--chat", "7", "--llm", "openai"])
            .args(["--llm-url", &format!("{uri}/v1"), "--llm-model", "gpt-test"])
            .args(["--no-facts", "--max-answer-tokens", "300"]);
        ok(with_stdin(openai, "Hi\n"));
        chat_with(&db2, &uri, &["--max-answer-tokens", "0"], "Hi\n")
    })
    .await
    .unwrap();
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("--max-answer-tokens is 0"),
        "{}",
        stderr(&refused)
    );
    let bodies: Vec<Value> = llm
        .received_requests()
        .await
        .unwrap()
        .iter()
        .map(|r| serde_json::from_slice(&r.body).unwrap())
        .collect();
    assert_eq!(bodies.len(), 3, "the refused run asked nothing: {bodies:?}");
    assert_eq!(bodies[0]["options"]["num_predict"], 2048, "{}", bodies[0]);
    assert_eq!(bodies[1]["options"]["num_predict"], 300, "{}", bodies[1]);
    assert_eq!(bodies[2]["max_completion_tokens"], 300, "{}", bodies[2]);
}

/// Alice's memories in every kind of scope (her own facts, chats 7 and 8, a document under
/// `dir`) and one of Bob's, in the store `db`; returns the id of Alice's door code (chat 7).
fn alice_everywhere(dir: &Path, db: &Path) -> String {
    ok(ava(
        db,
        &["remember", "--user", "alice", "my cat is called Pixel"],
    ));
    let door = ok(ava(
        db,
        &common::in_chat("alice", "7", "remember", &["the door code is 4711"]),
    ));
    ok(ava(
        db,
        &common::in_chat("alice", "8", "remember", &["lunch on Fridays"]),
    ));
    let notes = dir.join("notes.md");
    std::fs::write(&notes, "# Trip\n\nThe ferry leaves at nine.\n").unwrap();
    ok(ava(
        db,
        &["docs", "add", "--user", "alice", notes.to_str().unwrap()],
    ));
    ok(ava(
        db,
        &["remember", "--user", "bob", "my dog is called Rex"],
    ));
    door.trim().to_owned()
}

/// [`alice_everywhere`], then the door code changed ("1234" replaces "4711"); returns the
/// old code's id.
fn alice_with_a_new_door_code(dir: &Path, db: &Path) -> String {
    let old = alice_everywhere(dir, db);
    ok(ava(
        db,
        &common::in_chat(
            "alice",
            "7",
            "remember",
            &["--replaces", &old, "the door code is 1234"],
        ),
    ));
    old
}

/// Recall in alice's chat 7 finds the new door code, not the one it replaced.
fn the_old_code_stays_replaced(db: &Path) {
    let recalled = ok(ava(
        db,
        &common::in_chat("alice", "7", "recall", &["door code"]),
    ));
    // By the memories' text: an id printed beside a hit may hold any four digits.
    assert!(
        recalled.contains("code is 1234") && !recalled.contains("code is 4711"),
        "the old code stays replaced: {recalled}"
    );
}

#[test]
fn erase_lists_then_removes_everything_of_one_person_only() {
    let (dir, db) = store();
    alice_everywhere(dir.path(), &db);

    let listed = ok(ava(&db, &["erase", "--user", "alice"]));
    assert!(
        listed.contains("would be erased; run again with --yes"),
        "{listed}"
    );
    assert!(
        listed.contains("chat 7") && listed.contains("chat 8"),
        "{listed}"
    );
    assert!(
        listed.contains("facts about them") && listed.contains("their documents"),
        "{listed}"
    );
    let recalled = ok(ava(
        &db,
        &common::in_chat("alice", "7", "recall", &["door code"]),
    ));
    assert!(
        recalled.contains("code is 4711"),
        "a dry run changes nothing: {recalled}"
    );

    let erased = ok(ava(&db, &["erase", "--user", "alice", "--yes"]));
    assert!(
        erased.contains("erased") && erased.contains("memories of user alice"),
        "{erased}"
    );
    for chat in ["7", "8"] {
        let left = ok(ava(
            &db,
            &[
                "recall",
                "--user",
                "alice",
                "--chat",
                chat,
                "door code cat lunch ferry",
            ],
        ));
        assert!(left.contains("no memories match"), "{left}");
    }
    assert!(ok(ava(&db, &["erase", "--user", "alice"])).contains("nothing stored for user alice"));
    let bobs = ok(ava(&db, &["facts", "--user", "bob"]));
    assert!(bobs.contains("my dog is called Rex"), "{bobs}");
    // Erased means gone from the files: none of her words is readable in the store, its
    // write-ahead log or its shared memory, while Bob's are.
    let db_name = db.file_name().unwrap().to_str().unwrap();
    let holding = |needle: &str| common::files::holding(dir.path(), db_name, needle);
    for hers in [
        "door code is 4711",
        "Pixel",
        "lunch on Fridays",
        "ferry leaves",
    ] {
        assert_eq!(
            holding(hers),
            Vec::<String>::new(),
            "{hers} is still readable"
        );
    }
    assert!(!holding("dog is called Rex").is_empty(), "Bob's stays");
}

#[test]
fn export_then_import_is_lossless_and_idempotent() {
    let (dir, db) = store();
    alice_with_a_new_door_code(dir.path(), &db);

    let first = dir.path().join("alice.jsonl");
    ok(ava(
        &db,
        &[
            "export",
            "--user",
            "alice",
            "--out",
            first.to_str().unwrap(),
        ],
    ));
    let text = std::fs::read_to_string(&first).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines.len() >= 5, "{text}");
    assert!(!text.contains("Rex"), "only alice's memories: {text}");
    let entries: Vec<Value> = lines[1..]
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        entries.iter().any(|e| e["superseded_by"].is_string()),
        "{text}"
    );
    // (Access counts and times are restored too: the conformance suite's
    // a_restored_memory_keeps_its_access_history.)
    assert!(
        entries.iter().all(|e| e["accessed_at"].is_string()),
        "{text}"
    );

    // Into another store, then out again: the same memories, field for field.
    let other = dir.path().join("other.db");
    let restored = ok(ava(
        &other,
        &["import", "--user", "alice", first.to_str().unwrap()],
    ));
    assert!(
        restored.contains(&format!(
            "restored {} memories, 0 already present, 0 skipped",
            entries.len()
        )),
        "{restored}"
    );
    assert_eq!(exported(&other, "alice"), lines[1..], "lossless");
    the_old_code_stays_replaced(&other);

    // Again: nothing added. Another user's name: refused. A damaged line: skipped, said.
    let twice = ok(ava(
        &other,
        &["import", "--user", "alice", first.to_str().unwrap()],
    ));
    assert!(
        twice.contains(&format!(
            "restored 0 memories, {} already present",
            entries.len()
        )),
        "{twice}"
    );
    let o = ava(
        &other,
        &["import", "--user", "bob", first.to_str().unwrap()],
    );
    refused(&o, "is the export of user `alice`");
    let damaged = dir.path().join("damaged.jsonl");
    std::fs::write(&damaged, format!("{}\n{{not json\n", lines[0])).unwrap();
    let o = ava(
        &other,
        &["import", "--user", "alice", damaged.to_str().unwrap()],
    );
    refused(&o, "line 2 is not a memory");
}

/// An export cut short, changed, or not an export at all is refused before anything is
/// stored, saying what is wrong; so `ava import x && rm x` never deletes the only copy.
#[test]
fn a_damaged_export_is_refused_whole() {
    let (dir, db) = store();
    alice_with_a_new_door_code(dir.path(), &db);
    let export = dir.path().join("alice.jsonl");
    ok(ava(
        &db,
        &[
            "export",
            "--user",
            "alice",
            "--out",
            export.to_str().unwrap(),
        ],
    ));
    let text = std::fs::read_to_string(&export).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let other = dir.path().join("other.db");
    let import = |name: &str, content: &[u8]| {
        let file = dir.path().join(name);
        std::fs::write(&file, content).unwrap();
        ava(
            &other,
            &["import", "--user", "alice", file.to_str().unwrap()],
        )
    };
    // The last line gone (cut at a line's end), or half of it.
    let whole_lines = format!("{}\n", lines[..lines.len() - 1].join("\n"));
    refused(&import("short.jsonl", whole_lines.as_bytes()), "cut short");
    let cut = &text.as_bytes()[..text.len() - 40];
    refused(&import("cut.jsonl", cut), "is not a memory");
    // A line changed since the export (valid JSON, the same count).
    let changed = text.replacen("door code is 1234", "door code is 9999", 1);
    assert_ne!(changed, text);
    refused(&import("changed.jsonl", changed.as_bytes()), "SHA-256");
    // Random bytes are no export of any kind, and the message says so.
    let noise: Vec<u8> = (0..4096u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let o = import("noise.bin", &noise);
    refused(&o, "neither an `ava export` file");
    assert!(!stderr(&o).contains("--user is needed"), "{}", stderr(&o));
    let o = ava(
        &other,
        &["import", dir.path().join("noise.bin").to_str().unwrap()],
    );
    refused(&o, "neither an `ava export` file");
    // None of it imported anything; the whole file still does.
    assert!(exported(&other, "alice").is_empty());
    let restored = ok(ava(
        &other,
        &["import", "--user", "alice", export.to_str().unwrap()],
    ));
    assert!(
        restored.contains(&format!("restored {} memories", lines.len() - 1)),
        "{restored}"
    );
}

/// A file's memories stay with the person and tenant it is the export of: a line naming
/// another tenant's user of the same name, or a replacement by a memory of another chat, has
/// the whole file refused; a whole-store file gives `--user` only their part in the tenant
/// named (`default` unless `--tenant`).
#[test]
fn an_export_restores_only_into_the_tenant_and_person_named() {
    let (dir, db) = store();
    ok(ava(
        &db,
        &common::in_chat("alice", "7", "remember", &["my locker code is 4711"]),
    ));
    let export = dir.path().join("alice.jsonl");
    ok(ava(
        &db,
        &[
            "export",
            "--user",
            "alice",
            "--out",
            export.to_str().unwrap(),
        ],
    ));
    let text = std::fs::read_to_string(&export).unwrap();
    let (head, body) = text.split_once('\n').unwrap();
    let mut header: Value = serde_json::from_str(head).unwrap();
    // As an older ava wrote it (no checksum), with alice's line moved to an app's tenant.
    header.as_object_mut().unwrap().remove("sha256");
    let mut entry: Value = serde_json::from_str(body.lines().next().unwrap()).unwrap();
    let scope = entry["scope"].to_string();
    assert!(scope.contains("default"), "{scope}");
    let moved: Value = serde_json::from_str(&scope.replace("default", "app:shop")).unwrap();
    entry["scope"] = moved;
    let crafted = dir.path().join("crafted.jsonl");
    std::fs::write(&crafted, format!("{header}\n{entry}\n")).unwrap();
    let other = dir.path().join("other.db");
    let o = ava(&other, &["import", crafted.to_str().unwrap()]);
    refused(&o, "tenant `app:shop`");
    let o = ava(
        &other,
        &["import", "--tenant", "app:shop", export.to_str().unwrap()],
    );
    refused(&o, "not of `app:shop`");
    // A replacement by a memory that is not in the chat (here: nowhere).
    let mut replaced: Value = serde_json::from_str(body.lines().next().unwrap()).unwrap();
    replaced["superseded_by"] = json!("00000000-0000-4000-8000-000000000001");
    let linked = dir.path().join("linked.jsonl");
    std::fs::write(&linked, format!("{header}\n{replaced}\n")).unwrap();
    let o = ava(&other, &["import", linked.to_str().unwrap()]);
    refused(&o, "which is no memory of");
    assert!(exported(&other, "alice").is_empty(), "nothing was imported");

    // A whole-store file holding alice in two tenants: --user alice restores the default
    // tenant's alice only; --tenant picks the other.
    let mut everyone = header.clone();
    everyone["user"] = Value::Null;
    everyone["tenant"] = Value::Null;
    everyone["memories"] = json!(2);
    let mine: Value = serde_json::from_str(body.lines().next().unwrap()).unwrap();
    let mut theirs = entry.clone();
    theirs["id"] = json!("00000000-0000-4000-8000-000000000002");
    theirs["content"] = json!("my bank pin is 0000");
    let all = dir.path().join("all.jsonl");
    std::fs::write(&all, format!("{everyone}\n{mine}\n{theirs}\n")).unwrap();
    let restored = ok(ava(
        &other,
        &["import", "--user", "alice", all.to_str().unwrap()],
    ));
    assert!(restored.contains("restored 1 memories"), "{restored}");
    let alices = exported(&other, "alice").join("\n");
    assert!(
        alices.contains("4711") && !alices.contains("bank pin"),
        "{alices}"
    );
    let apps = dir.path().join("apps.db");
    let restored = ok(ava(
        &apps,
        &[
            "import",
            "--user",
            "alice",
            "--tenant",
            "app:shop",
            all.to_str().unwrap(),
        ],
    ));
    assert!(restored.contains("restored 1 memories"), "{restored}");
    assert!(
        exported(&apps, "alice").is_empty(),
        "none in the default tenant"
    );
}

#[test]
fn migrate_copies_a_whole_store_and_continues_an_interrupted_copy() {
    let (dir, db) = store();
    let old = alice_with_a_new_door_code(dir.path(), &db);
    let copy = dir.path().join("copy.db");
    let (from, to) = (db.to_str().unwrap(), copy.to_str().unwrap());

    // One user first: only their part moves.
    let first = ok(ava(
        &db,
        &["migrate", "--from", from, "--to", to, "--user", "bob"],
    ));
    assert!(
        first.contains("copied 1 scopes") && first.contains("1 memories stored, 0 already there"),
        "{first}"
    );
    assert!(exported(&copy, "alice").is_empty());

    // Then the whole store, after the copy lost a memory in the middle of a chat (as a copy
    // stopped half-way would): bob's memory is not written twice, the gap is filled.
    let alices = exported(&db, "alice");
    let out = ok(ava(&db, &["migrate", "--from", from, "--to", to]));
    assert!(out.contains("every scope's count matches"), "{out}");
    assert_eq!(exported(&copy, "alice"), alices, "lossless");
    assert_eq!(exported(&copy, "bob"), exported(&db, "bob"));
    ok(ava(
        &copy,
        &common::in_chat("alice", "7", "forget", &[&old]),
    ));
    assert_ne!(exported(&copy, "alice"), alices);
    let again = ok(ava(&db, &["migrate", "--from", from, "--to", to]));
    let total = alices.len() + 1;
    assert!(
        again.contains(&format!(
            "1 memories stored, {} already there, 0 refused",
            total - 1
        )),
        "{again}"
    );
    assert_eq!(
        exported(&copy, "alice"),
        alices,
        "the gap is filled, links and all"
    );
    the_old_code_stays_replaced(&copy);

    // Into itself, or out of a store that is not there: refused, nothing written.
    let o = ava(&db, &["migrate", "--from", from, "--to", from]);
    refused(&o, "are the same store");
    // Also when named another way: `./x.db` from its directory, or through a link.
    let mut beside = command(&db);
    beside.current_dir(dir.path()).args([
        "migrate",
        "--from",
        "memories.db",
        "--to",
        "./memories.db",
    ]);
    refused(&beside.output().unwrap(), "are the same store");
    let link = dir.path().join("link.db");
    std::os::unix::fs::symlink(&db, &link).unwrap();
    let o = ava(
        &db,
        &["migrate", "--from", from, "--to", link.to_str().unwrap()],
    );
    refused(&o, "are the same store");
    let missing = dir.path().join("missing.db");
    let o = ava(
        &db,
        &["migrate", "--from", missing.to_str().unwrap(), "--to", to],
    );
    refused(&o, "open the store to copy from");
}

#[test]
fn a_whole_store_exports_and_restores_everyone_or_one_person() {
    let (dir, db) = store();
    alice_with_a_new_door_code(dir.path(), &db);
    let all = dir.path().join("all.jsonl");
    let file = all.to_str().unwrap();
    ok(ava(&db, &["export", "--all", "--out", file]));
    let text = std::fs::read_to_string(&all).unwrap();
    let header: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert!(
        header["user"].is_null() && header["tenant"].is_null(),
        "{header}"
    );
    let memories = text.lines().count() - 1;

    let other = dir.path().join("other.db");
    let restored = ok(ava(&other, &["import", file]));
    assert!(
        restored.contains(&format!(
            "restored {memories} memories, 0 already present, 0 skipped"
        )),
        "{restored}"
    );
    for user in ["alice", "bob"] {
        assert_eq!(exported(&other, user), exported(&db, user), "{user}");
    }
    the_old_code_stays_replaced(&other);

    // One person's part of it, the others' lines passed over without complaint.
    let bobs = dir.path().join("bob.db");
    let restored = ok(ava(&bobs, &["import", "--user", "bob", file]));
    assert!(
        restored.contains("restored 1 memories, 0 already present, 0 skipped"),
        "{restored}"
    );
    assert!(exported(&bobs, "alice").is_empty());
    assert_eq!(exported(&bobs, "bob"), exported(&db, "bob"));

    // Asking for both or neither is refused; a Telegram export needs its person.
    let o = ava(&db, &["export", "--all", "--user", "bob"]);
    assert!(!o.status.success(), "{}", stderr(&o));
    let o = ava(&db, &["export"]);
    assert!(!o.status.success(), "{}", stderr(&o));
    let telegram = dir.path().join("result.json");
    std::fs::write(&telegram, r#"{"id": 1, "messages": []}"#).unwrap();
    let o = ava(&db, &["import", telegram.to_str().unwrap()]);
    refused(&o, "--user is needed");
}
