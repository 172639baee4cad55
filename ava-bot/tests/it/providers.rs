//! The optional providers through the `ava` binary, against loopback servers speaking
//! their wire formats: `--rerank-url` (Cohere's `/rerank`, the key from AVA_RERANK_KEY)
//! reorders and filters retrieved memories, and a reranker that fails leaves the scored
//! order with the report saying so; `--web-search-url` (SearxNG's JSON API) adds web
//! results with their URLs.

use crate::common;

use common::{ava, command, ok, stderr, stdout};
use serde_json::{Value, json};
use wiremock::matchers::{header, method, path, query_param};
use wiremock::{Mock, MockServer, Request, ResponseTemplate};

/// Runs blocking work (the `ava` process) off the runtime that serves the mock.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.unwrap()
}

/// A store with three memories of user 42 in chat 7.
fn seeded(dir: &tempfile::TempDir) -> std::path::PathBuf {
    let db = dir.path().join("m.db");
    for text in [
        "My cat is called Pixel",
        "The cat sleeps on the red sofa",
        "I bought cat food on Monday",
    ] {
        ok(ava(&db, &common::in_chat_7("remember", &[text])));
    }
    db
}

/// The memory lines of a `context --json` prompt, in the order they appear.
fn memory_lines(out: &str) -> Vec<String> {
    let v: Value = serde_json::from_str(out).unwrap();
    let mut lines = Vec::new();
    for m in v["messages"].as_array().unwrap() {
        for l in m["content"].as_str().unwrap_or_default().lines() {
            if l.starts_with("- ") && l.contains("cat") {
                lines.push(l.to_owned());
            }
        }
    }
    lines
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn context_reranks_through_a_rerank_server() {
    let server = MockServer::start().await;
    // Ranks by the document text: the sofa first, Pixel second, the food dropped.
    Mock::given(method("POST"))
        .and(path("/v2/rerank"))
        .and(header("authorization", "Bearer rk-1"))
        .respond_with(|req: &Request| {
            let body: Value = serde_json::from_slice(&req.body).unwrap();
            let docs = body["documents"].as_array().unwrap();
            let score = |d: &str| {
                if d.contains("sofa") {
                    0.9
                } else if d.contains("Pixel") {
                    0.6
                } else {
                    0.01
                }
            };
            let results: Vec<Value> = docs
                .iter()
                .enumerate()
                .map(|(i, d)| json!({"index": i, "relevance_score": score(d.as_str().unwrap())}))
                .collect();
            ResponseTemplate::new(200).set_body_json(json!({"results": results}))
        })
        .mount(&server)
        .await;
    let dir = tempfile::tempdir().unwrap();
    let db = seeded(&dir);
    let url = format!("{}/v2/rerank", server.uri());
    let out = blocking(move || {
        let o = command(&db)
            .env("AVA_RERANK_KEY", "rk-1")
            .args([
                "--rerank-url",
                &url,
                "--rerank-model",
                "rerank-v3.5",
                "--rerank-min-score",
                "0.1",
            ])
            .args(common::in_chat_7(
                "context",
                &["--json", "--explain", "where does the cat sleep?"],
            ))
            .output()
            .unwrap();
        ok(o)
    })
    .await;
    let lines = memory_lines(&out);
    assert!(
        !out.contains("cat food"),
        "dropped under the minimum: {out}"
    );
    assert!(lines.iter().any(|l| l.contains("sofa")), "{lines:?}");
    assert!(lines.iter().any(|l| l.contains("Pixel")), "{lines:?}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["report"]["degradations"], json!([]), "{out}");
    assert!(!server.received_requests().await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_rerank_server_keeps_the_scored_order_and_says_so() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(500).set_body_string("out of memory"))
        .mount(&server)
        .await;
    let dir = tempfile::tempdir().unwrap();
    let db = seeded(&dir);
    let url = format!("{}/rerank", server.uri());
    let o = blocking(move || {
        command(&db)
            .args(["--rerank-url", &url, "--rerank-api", "tei"])
            .args(common::in_chat_7(
                "context",
                &["--explain", "where does the cat sleep?"],
            ))
            .output()
            .unwrap()
    })
    .await;
    // The prompt is printed in full, in the scored order; `context` then says it is
    // incomplete (its exit status tells scripts so).
    let (out, err) = (stdout(&o), stderr(&o));
    assert!(!o.status.success());
    assert!(out.contains("sofa") && out.contains("cat food"), "{out}");
    let want = "reranker http failed: answered HTTP 500 Internal Server Error: out of memory; \
                kept the scored order";
    assert!(out.contains(want), "{out}");
    assert!(
        err.contains("the prompt above is incomplete") && err.contains(want),
        "{err}"
    );
}

#[test]
fn a_bad_rerank_setting_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let db = seeded(&dir);
    let o = ava(
        &db,
        &[
            "--rerank-url",
            "http://127.0.0.1:9/rerank",
            "context",
            "--user",
            "42",
            "--chat",
            "7",
            "cat?",
        ],
    );
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(
        err.contains("rerank model") && err.contains("rerank-v3.5"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn context_adds_web_results_with_their_urls() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/search"))
        .and(query_param("format", "json"))
        .and(query_param("q", "where does the cat sleep?"))
        .and(header("authorization", "Bearer wk-1"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "query": "where does the cat sleep?",
            "results": [{
                "url": "https://example.org/cats",
                "title": "Where cats sleep",
                "content": "Cats sleep 12 to 16 hours a day, often somewhere warm.",
                "engine": "duckduckgo",
            }],
        })))
        .expect(1)
        .mount(&server)
        .await;
    let dir = tempfile::tempdir().unwrap();
    let db = seeded(&dir);
    let url = server.uri();
    let out = blocking(move || {
        ok(command(&db)
            .env("AVA_WEB_SEARCH_KEY", "wk-1")
            .args(["--web-search-url", &url])
            .args(common::in_chat_7(
                "context",
                &["--explain", "where does the cat sleep?"],
            ))
            .output()
            .unwrap())
    })
    .await;
    assert!(out.contains("<recalled-memory kind=\"web\">"), "{out}");
    assert!(
        out.contains(
            "- Where cats sleep: Cats sleep 12 to 16 hours a day, often somewhere warm. \
             (https://example.org/cats)"
        ),
        "{out}"
    );
    assert!(out.contains("sofa"), "memories too: {out}");
    assert!(!out.contains("wk-1"), "the key never prints: {out}");
}
