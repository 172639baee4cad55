//! `ava check` against loopback servers speaking each service's wire format (an
//! OpenAI-compatible chat server, a text-embeddings-inference reranker, SearxNG, the
//! Telegram Bot API): one line per check, and a non-zero exit naming what failed.

use crate::common;

use common::{ava, command, ok, stderr, stdout};
use serde_json::json;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.unwrap()
}

/// The line `ava check` printed for `name`.
fn line<'a>(out: &'a str, name: &str) -> &'a str {
    out.lines()
        .find(|l| l.starts_with(&format!("{name} ")))
        .unwrap_or_else(|| panic!("no {name} line: {out}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_configured_service_is_asked_once() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(200).set_body_json(common::completion("OK")))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/rerank"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!([
            {"index": 0, "score": 0.9}, {"index": 1, "score": 0.1}
        ])))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/search"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "results": [{"url": "https://example.org", "title": "Memory", "content": "..."}]
        })))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/bot123:ABC/GetMe"))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(json!({"ok": true, "result": {
            "id": 1, "is_bot": true, "first_name": "Ava", "username": "ava_test_bot",
            "can_join_groups": true, "can_read_all_group_messages": false,
            "supports_inline_queries": false, "can_connect_to_business": false,
            "has_main_web_app": false}})),
        )
        .expect(1)
        .mount(&server)
        .await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("m.db");
    ok(ava(
        &db,
        &common::in_chat("1", "1", "remember", &["a fact"]),
    ));
    let uri = server.uri();
    let out = blocking(move || {
        ok(command(&db)
            .env("TELOXIDE_TOKEN", "123:ABC")
            .env("OPENAI_API_KEY", "sk-test")
            .args([
                "--rerank-url",
                &format!("{uri}/rerank"),
                "--rerank-api",
                "tei",
            ])
            .args(["--web-search-url", &uri])
            .args(["check", "--llm", "openai", "--llm-model", "gpt-test"])
            .args([
                "--llm-url",
                &format!("{uri}/v1"),
                "--telegram-api-url",
                &uri,
            ])
            .output()
            .unwrap())
    })
    .await;
    assert!(line(&out, "store").contains("ok    sqlite"), "{out}");
    assert!(line(&out, "store").contains("(embedded, durable)"), "{out}");
    assert!(line(&out, "store").contains("hash/fnv1a-words-v1"), "{out}");
    assert!(
        line(&out, "embedder").contains("embedded a sentence"),
        "{out}"
    );
    let llm = line(&out, "llm");
    assert!(
        llm.contains("ok    openai gpt-test at http://") && llm.contains("/v1 answered in"),
        "{out}"
    );
    assert!(
        line(&out, "reranker").contains("judged 2 of 2 documents"),
        "{out}"
    );
    assert!(
        line(&out, "web search").contains("gave 1 result(s)"),
        "{out}"
    );
    assert!(
        line(&out, "telegram").contains("the token belongs to @ava_test_bot"),
        "{out}"
    );
    assert!(
        !out.contains("123:ABC") && !out.contains("sk-test"),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_failure_is_one_line_and_the_command_fails() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(500).set_body_string("model crashed"))
        .mount(&server)
        .await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("not-yet.db");
    let uri = server.uri();
    let o = blocking(move || {
        command(&db)
            .env_remove("RUST_BACKTRACE")
            .args([
                "--rerank-url",
                &format!("{uri}/v2/rerank"),
                "--rerank-model",
                "m",
            ])
            .args(["--web-search-url", "http://127.0.0.1:9"])
            .args([
                "check",
                "--llm",
                "ollama",
                "--llm-url",
                "http://127.0.0.1:9",
            ])
            .args(["--llm-timeout", "5"])
            .output()
            .unwrap()
    })
    .await;
    let (out, err) = (stdout(&o), stderr(&o));
    assert!(!o.status.success(), "{out}");
    assert!(line(&out, "store").contains("does not exist yet"), "{out}");
    assert!(line(&out, "llm").starts_with("llm         FAIL"), "{out}");
    let reranker = line(&out, "reranker");
    assert!(
        reranker.contains("FAIL") && reranker.contains("500") && reranker.contains("model crashed"),
        "{out}"
    );
    assert!(line(&out, "web search").contains("FAIL"), "{out}");
    assert!(
        line(&out, "telegram").contains("off   no TELOXIDE_TOKEN"),
        "{out}"
    );
    assert!(
        err.contains("3 check(s) failed: llm, reranker, web search"),
        "{err}"
    );
    assert_eq!(out.lines().count(), 6, "one line each: {out}");
}

/// `ava` settles how many threads the local model's matrix multiplies use before anything
/// starts (the machine's physical cores), unless the user chose a count, in the
/// environment or in `.env`; `ava check` says which. Without it, candle works the count
/// out again at every multiply.
#[cfg(feature = "local")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_local_model_runs_on_the_threads_ava_settled() {
    if common::local_model().is_none() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("not-yet.db");
    // A directory whose `.env` chooses three threads.
    let with_dotenv = tmp.path().join("project");
    std::fs::create_dir(&with_dotenv).unwrap();
    std::fs::write(with_dotenv.join(".env"), "RAYON_NUM_THREADS=3\n").unwrap();
    let check = |threads: Option<&'static str>, dotenv: bool| {
        let (db, dir) = (db.clone(), with_dotenv.clone());
        blocking(move || {
            let mut c = command(&db);
            c.env("AVA_EMBEDDER", "local")
                .env_remove(memory_embedders::THREADS_ENV);
            if let Some(n) = threads {
                c.env(memory_embedders::THREADS_ENV, n);
            }
            if dotenv {
                c.current_dir(dir);
            }
            ok(c.args(["check", "--no-llm"]).output().unwrap())
        })
    };
    let settled = memory_embedders::threads_to_set(None).unwrap();
    let out = check(None, false).await;
    assert!(
        line(&out, "embedder").contains(&format!(" on {settled} thread(s) (RAYON_NUM_THREADS)")),
        "{out}"
    );
    let out = check(Some("1"), false).await;
    assert!(
        line(&out, "embedder").contains(" on 1 thread(s) (RAYON_NUM_THREADS)"),
        "{out}"
    );
    let out = check(None, true).await;
    assert!(
        line(&out, "embedder").contains(" on 3 thread(s) (RAYON_NUM_THREADS)"),
        "{out}"
    );
}
