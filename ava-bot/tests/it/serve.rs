//! `ava serve`: the OpenAI-compatible proxy in front of a loopback fake upstream (wiremock),
//! driven by async-openai, by raw HTTP and by the official `openai` Python package: answers
//! passed on byte for byte (streamed or not), what the upstream receives, identities from
//! tokens (and an app's end users) kept apart, upstream failures that store nothing, the
//! explain report (kept in the store, so another server on it finds it too), fact learning,
//! and MCP on the same address.

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_openai::Client;
use async_openai::config::OpenAIConfig;
use async_openai::types::chat::{
    ChatCompletionRequestSystemMessage, ChatCompletionRequestUserMessage,
    CreateChatCompletionRequestArgs,
};
use common::{
    as_nobody, ava, command, fake_bot_api, listening, listening_url, ok, privileged, set_mode,
};
use futures_util::StreamExt;
use serde_json::{Value, json};
use wiremock::matchers::{body_partial_json, body_string_contains, method, path};
use wiremock::{Mock, MockServer, Request, ResponseTemplate};

use common::{PATIENCE, TOKEN_A, TOKEN_B};
const TOKEN_APP: &str = "shop-0123456789abcdef0123456789abcdef0";
const TOKEN_KIOSK: &str = "kiosk-0123456789abcdef0123456789abcdef";

/// A token file: alice and bob (chat `desk`), the app `shop` that names its end users, and
/// the app `kiosk`, whose calls that name no one share one memory.
fn token_file(dir: &Path) -> PathBuf {
    common::alice_and_bob_tokens(
        dir,
        &[
            json!({"token": TOKEN_APP, "user": "shop", "chat": "assistant", "end_users": true}),
            json!({"token": TOKEN_KIOSK, "user": "kiosk", "chat": "lobby", "end_users": true,
                "anonymous": true}),
        ],
    )
}

/// A running `ava serve` and where it listens.
struct Serve {
    _child: tokio::process::Child,
    url: String,
    _dir: tempfile::TempDir,
    db: PathBuf,
    /// What it writes on stderr after the line saying where it listens.
    log: common::Log,
}

/// `ava serve` on a fresh store in front of `upstream`, with `extra` arguments.
async fn serve(upstream: &str, extra: &[&str]) -> Serve {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ava.db");
    let tokens = token_file(dir.path());
    let mut cmd = command(&db);
    cmd.args(["serve", "--addr", "127.0.0.1:0", "--tokens"])
        .arg(&tokens)
        .args(["--upstream", upstream])
        .args(extra);
    let (child, line, log) = listening(cmd, PATIENCE).await;
    assert!(line.contains("MCP at /mcp"), "{line}");
    assert!(line.contains("proxy at /v1"), "{line}");
    let url = listening_url(&line);
    Serve {
        _child: child,
        url,
        _dir: dir,
        db,
        log,
    }
}

/// A second `ava serve` on `s`'s store and token file (another replica behind a load
/// balancer); the child and where it listens.
async fn replica_of(s: &Serve, upstream: &str) -> (tokio::process::Child, String) {
    let mut cmd = command(&s.db);
    cmd.args(["serve", "--addr", "127.0.0.1:0", "--tokens"])
        .arg(s._dir.path().join("tokens.json"))
        .args(["--upstream", upstream, "--no-facts"]);
    let (child, line, _) = listening(cmd, PATIENCE).await;
    (child, listening_url(&line))
}

/// `GET /v1/ava/explain/<id>` at `url` as `token`.
async fn explained(url: &str, id: &str, token: &str) -> reqwest::Response {
    reqwest::Client::new()
        .get(format!("{url}/v1/ava/explain/{id}"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
}

/// A chat completion as an upstream writes it, spacing and all (to check it is passed on
/// byte for byte).
fn completion(text: &str) -> String {
    format!(
        "{{\n  \"id\": \"chatcmpl-up1\",\n  \"object\": \"chat.completion\",\n  \"created\": \
         1767225600,\n  \"model\": \"gpt-test\",\n  \"choices\": [ {{\"index\": 0, \"message\": \
         {{\"role\": \"assistant\", \"content\": {}}}, \"finish_reason\": \"stop\"}} ],\n  \
         \"usage\": {{\"prompt_tokens\": 31, \"completion_tokens\": 7, \"total_tokens\": 38}}\n}}\n",
        serde_json::to_string(text).unwrap()
    )
}

/// A streamed chat completion (server-sent events) saying `pieces` in turn, with a usage
/// chunk and `[DONE]`.
fn streamed(pieces: &[&str]) -> String {
    let chunk = |delta: Value, finish: Value| {
        json!({"id": "chatcmpl-up2", "object": "chat.completion.chunk", "created": 1767225600,
               "model": "gpt-test", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    };
    let mut out = format!(
        "data: {}\n\n",
        chunk(json!({"role": "assistant", "content": ""}), Value::Null)
    );
    for p in pieces {
        out.push_str(&format!(
            "data: {}\n\n",
            chunk(json!({"content": p}), Value::Null)
        ));
    }
    out.push_str(&format!("data: {}\n\n", chunk(json!({}), json!("stop"))));
    out.push_str(
        "data: {\"id\":\"chatcmpl-up2\",\"object\":\"chat.completion.chunk\",\"created\":1767225600,\
         \"model\":\"gpt-test\",\"choices\":[],\"usage\":{\"prompt_tokens\":40,\"completion_tokens\":3,\
         \"total_tokens\":43}}\n\ndata: [DONE]\n\n",
    );
    out
}

/// An upstream answering every chat completion with `answer` (and streams with
/// `pieces`); fact extraction calls are not answered here.
async fn upstream(answer: &str, pieces: &[&str]) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .and(body_partial_json(json!({"stream": true})))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_raw(streamed(pieces).into_bytes(), "text/event-stream"),
        )
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_raw(completion(answer).into_bytes(), "application/json")
                .insert_header("x-request-id", "req-42"),
        )
        .with_priority(5)
        .mount(&server)
        .await;
    server
}

/// The chat completion bodies the upstream received, in order (fact learning's excluded).
async fn received(server: &MockServer) -> Vec<Value> {
    server
        .received_requests()
        .await
        .unwrap()
        .iter()
        .filter(|r| r.url.path() == "/v1/chat/completions")
        .map(|r: &Request| serde_json::from_slice::<Value>(&r.body).unwrap())
        .filter(|b| !b.to_string().contains("<conversation>"))
        .collect()
}

/// A raw POST of `body` to the proxy as `token` (and an `x-ava-user`, if any).
async fn post(s: &Serve, token: &str, body: &Value, end_user: Option<&str>) -> reqwest::Response {
    let mut request = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", s.url))
        .bearer_auth(token)
        .json(body);
    if let Some(user) = end_user {
        request = request.header("x-ava-user", user);
    }
    tokio::time::timeout(PATIENCE, request.send())
        .await
        .expect("answered in time")
        .unwrap()
}

/// `ava recall` of `user`'s memories in `chat` for `query`.
fn recall(db: &Path, user: &str, chat: &str, query: &str) -> String {
    ok(ava(db, &["recall", "--user", user, "--chat", chat, query]))
}

fn openai(s: &Serve, token: &str) -> Client<OpenAIConfig> {
    Client::with_config(
        OpenAIConfig::new()
            .with_api_base(format!("{}/v1", s.url))
            .with_api_key(token),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_app_gets_what_ava_recalls_and_its_exchanges_are_remembered() {
    let up = upstream(
        "Noted: Maya lives in Lisbon.",
        &["Maya ", "lives in ", "Lisbon."],
    )
    .await;
    let s = serve(&format!("{}/v1", up.uri()), &["--no-facts"]).await;
    let client = openai(&s, TOKEN_A);

    // 1. async-openai, not streamed: the answer is the upstream's.
    let request = CreateChatCompletionRequestArgs::default()
        .model("gpt-test")
        .messages([
            ChatCompletionRequestSystemMessage::from("You are a travel helper.").into(),
            ChatCompletionRequestUserMessage::from("My sister Maya lives in Lisbon.").into(),
        ])
        .build()
        .unwrap();
    let answer = client.chat().create(request).await.unwrap();
    assert_eq!(
        answer.choices[0].message.content.as_deref(),
        Some("Noted: Maya lives in Lisbon.")
    );
    assert_eq!(answer.usage.unwrap().total_tokens, 38, "usage passed on");
    let kept = recall(&s.db, "alice", "desk", "sister Maya Lisbon");
    assert!(kept.contains("My sister Maya lives in Lisbon."), "{kept}");
    assert!(kept.contains("Noted: Maya lives in Lisbon."), "{kept}");

    // 2. Raw: the body comes back byte for byte, with the upstream's headers and the
    // explain report's id; the upstream got the app's messages as sent, in their order, then
    // what Ava recalls right before the last user message, and every other field as sent.
    let tools = json!([{"type": "function", "function": {"name": "book", "parameters": {"type": "object"}}}]);
    let body = json!({
    "model": "gpt-test", "temperature": 0.25, "tools": tools, "user": "someone",
    "messages": [
        {"role": "system", "content": "You are a travel helper."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": [{"type": "text", "text": "Which city should I visit to see my sister?"}]},
    ]});
    let response = post(&s, TOKEN_A, &body, None).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-request-id"], "req-42");
    let explain = response.headers()["x-ava-explain-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let bytes = response.bytes().await.unwrap();
    assert_eq!(
        bytes.as_ref(),
        completion("Noted: Maya lives in Lisbon.").as_bytes()
    );
    let sent = received(&up).await;
    let last = sent.last().unwrap();
    for field in ["model", "temperature", "tools", "user"] {
        assert_eq!(last[field], body[field], "{field} passed on unchanged");
    }
    let messages = last["messages"].as_array().unwrap();
    let app = body["messages"].as_array().unwrap();
    // The app's history is the start of what the upstream got, byte for byte.
    let bytes_of = |m: &[Value]| serde_json::to_string(m).unwrap();
    let history = bytes_of(&app[..3]);
    assert_eq!(
        bytes_of(&messages[..3]),
        history,
        "the app's messages first, as sent"
    );
    assert_eq!(messages.len(), 5);
    assert_eq!(messages[3]["role"], "system");
    let memory = messages[3]["content"].as_str().unwrap();
    assert!(memory.contains("<recalled-memory"), "{memory}");
    assert!(
        memory.contains("My sister Maya lives in Lisbon."),
        "{memory}"
    );
    assert!(
        !memory.contains("Hello!"),
        "nothing the app sent is recalled again: {memory}"
    );
    assert_eq!(messages[4], app[3], "the new message last");

    // The explain report, for this token only.
    let get = |token: &'static str| {
        reqwest::Client::new()
            .get(format!("{}/v1/ava/explain/{explain}", s.url))
            .bearer_auth(token)
            .send()
    };
    let report: Value = get(TOKEN_A).await.unwrap().json().await.unwrap();
    assert_eq!(report["id"], explain.as_str());
    assert!(
        report["report"]["sections"].as_array().unwrap().len() > 1,
        "{report}"
    );
    assert_eq!(get(TOKEN_B).await.unwrap().status(), 404);

    // 3. Streamed, through async-openai: the pieces arrive, and the whole answer is kept.
    let request = CreateChatCompletionRequestArgs::default()
        .model("gpt-test")
        .messages([ChatCompletionRequestUserMessage::from("Where does Maya live again?").into()])
        .build()
        .unwrap();
    let mut stream = client.chat().create_stream(request).await.unwrap();
    let mut text = String::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.unwrap();
        if let Some(c) = chunk.choices.first() {
            text.push_str(c.delta.content.as_deref().unwrap_or_default());
        }
    }
    assert_eq!(text, "Maya lives in Lisbon.");
    let kept = tokio::time::timeout(PATIENCE, async {
        loop {
            let kept = recall(&s.db, "alice", "desk", "Where does Maya live again");
            if kept.contains("Where does Maya live again?")
                && kept.lines().any(|l| l.ends_with("] Maya lives in Lisbon."))
            {
                return kept;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("the streamed exchange is stored");
    assert!(kept.contains("Where does Maya live again?"), "{kept}");
    assert!(
        !kept.contains("Hi\n"),
        "only what the user said this turn is stored: {kept}"
    );

    // 4. Bob, on the same server, gets none of it.
    let body = json!({"model": "gpt-test", "messages": [{"role": "user", "content": "Where does Maya live?"}]});
    assert_eq!(post(&s, TOKEN_B, &body, None).await.status(), 200);
    let bobs = received(&up).await.pop().unwrap().to_string();
    assert!(!bobs.contains("Lisbon"), "{bobs}");
    // (Bob's own exchange is stored: his question, and the upstream's canned answer.)
    let bobs = recall(&s.db, "bob", "desk", "sister Maya Lisbon");
    assert!(bobs.contains("Where does Maya live?"), "{bobs}");
    assert!(!bobs.contains("My sister"), "{bobs}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_is_passed_on_byte_for_byte() {
    let up = upstream("unused", &["Hello", " there", "!"]).await;
    let s = serve(&format!("{}/v1", up.uri()), &["--no-facts"]).await;
    let body = json!({"model": "gpt-test", "stream": true, "stream_options": {"include_usage": true},
                      "messages": [{"role": "user", "content": "Say hello."}]});
    let response = post(&s, TOKEN_A, &body, None).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let bytes = response.bytes().await.unwrap();
    assert_eq!(
        bytes.as_ref(),
        streamed(&["Hello", " there", "!"]).as_bytes()
    );
    assert_eq!(
        received(&up).await[0]["stream_options"],
        body["stream_options"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_failures_come_back_as_they_are_and_store_nothing() {
    let server = MockServer::start().await;
    let refusal = r#"{"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}}"#;
    Mock::given(method("POST"))
        .and(body_string_contains("rate me"))
        .respond_with(ResponseTemplate::new(429).set_body_raw(refusal, "application/json"))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(body_string_contains("slow me"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_raw(completion("late"), "application/json")
                .set_delay(Duration::from_secs(5)),
        )
        .mount(&server)
        .await;
    let s = serve(
        &format!("{}/v1", server.uri()),
        &["--no-facts", "--upstream-timeout", "1"],
    )
    .await;
    let ask =
        |text: &str| json!({"model": "gpt-test", "messages": [{"role": "user", "content": text}]});

    let response = post(&s, TOKEN_A, &ask("rate me"), None).await;
    assert_eq!(response.status(), 429);
    // A refused request keeps no prompt, so names none.
    assert!(response.headers().get("x-ava-explain-id").is_none());
    assert_eq!(response.text().await.unwrap(), refusal);

    let response = post(&s, TOKEN_A, &ask("slow me"), None).await;
    assert_eq!(response.status(), 504);
    let said: Value = response.json().await.unwrap();
    let message = said["error"]["message"].as_str().unwrap();
    assert!(message.contains("did not answer within 1 s"), "{message}");
    assert!(message.contains("nothing was stored"), "{message}");

    // An upstream that is not there at all.
    let gone = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = gone.local_addr().unwrap().port();
    drop(gone);
    let s2 = serve(&format!("http://127.0.0.1:{port}/v1"), &["--no-facts"]).await;
    let response = post(&s2, TOKEN_A, &ask("anyone there?"), None).await;
    assert_eq!(response.status(), 502);
    let said: Value = response.json().await.unwrap();
    let message = said["error"]["message"].as_str().unwrap();
    assert!(message.contains("could not be reached"), "{said}");
    // Where the upstream is stays in the server's log.
    assert!(!message.contains(&port.to_string()), "{said}");

    // Bad requests are refused before the upstream hears of them.
    let raw = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", s.url))
        .bearer_auth(TOKEN_A)
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(raw.status(), 400);
    let said: Value = raw.json().await.unwrap();
    assert!(
        said["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not JSON"),
        "{said}"
    );
    let response = post(&s, TOKEN_A, &json!({"model": "m", "messages": "hi"}), None).await;
    assert_eq!(response.status(), 400);
    let unauthenticated = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", s.url))
        .json(&ask("hello"))
        .send()
        .await
        .unwrap();
    assert_eq!(unauthenticated.status(), 401);

    for db in [&s.db, &s2.db] {
        let found = recall(db, "alice", "desk", "rate slow anyone");
        assert!(
            !found.contains("rate me") && !found.contains("slow me") && !found.contains("anyone"),
            "{found}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apps_end_users_are_kept_apart_and_history_can_be_replaced() {
    let up = upstream("Got it.", &[]).await;
    let s = serve(
        &format!("{}/v1", up.uri()),
        &["--no-facts", "--history", "replace"],
    )
    .await;
    let say = |text: &str, user: Option<&str>| {
        let mut body = json!({"model": "gpt-test", "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "old question"},
            {"role": "assistant", "content": "old answer"},
            {"role": "user", "content": text},
        ]});
        if let Some(u) = user {
            body["user"] = json!(u);
        }
        body
    };
    // Carol through OpenAI's `user` field, Dave through the header.
    assert_eq!(
        post(
            &s,
            TOKEN_APP,
            &say("My locker code is 4711.", Some("carol")),
            None
        )
        .await
        .status(),
        200
    );
    assert_eq!(
        post(
            &s,
            TOKEN_APP,
            &say("What is my locker code?", None),
            Some("dave")
        )
        .await
        .status(),
        200
    );
    let sent = received(&up).await;
    assert!(
        !sent[1].to_string().contains("4711"),
        "dave got carol's memory: {}",
        sent[1]
    );
    let asked = post(
        &s,
        TOKEN_APP,
        &say("What is my locker code?", Some("carol")),
        None,
    )
    .await;
    assert_eq!(asked.status(), 200);
    let carols_id = asked.headers()["x-ava-explain-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let sent = received(&up).await;
    let carols = sent[2]["messages"].as_array().unwrap();
    // Replace: the app's system message, what Ava recalls, and only the current turn.
    assert_eq!(carols.len(), 3, "{carols:?}");
    assert_eq!(carols[0]["content"], "Be brief.");
    assert!(
        carols[1]["content"].as_str().unwrap().contains("4711"),
        "{carols:?}"
    );
    assert_eq!(carols[2]["content"], "What is my locker code?");

    // The explain report of carol's prompt, from the store: for the app's token without
    // naming carol again, on this server or another on the same store; for no other token.
    let (_other, other_url) = replica_of(&s, &format!("{}/v1", up.uri())).await;
    for url in [&s.url, &other_url] {
        let report: Value = explained(url, &carols_id, TOKEN_APP)
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(report["id"], carols_id.as_str(), "{report}");
        assert!(
            report["scope"].as_str().unwrap().contains("carol"),
            "{report}"
        );
        assert!(report["report"]["sections"].as_array().unwrap().len() > 1);
    }
    assert_eq!(explained(&s.url, &carols_id, TOKEN_A).await.status(), 404);
    // An id naming an end user is only ever one of the asking token's own.
    let (prompt, _) = carols_id.split_once('.').unwrap();
    let alices = format!(
        "{prompt}.{}",
        "alice"
            .bytes()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    );
    assert_eq!(explained(&s.url, &alices, TOKEN_APP).await.status(), 404);
    assert_eq!(
        explained(&s.url, &format!("{prompt}.zz"), TOKEN_APP)
            .await
            .status(),
        404
    );

    // Each end user is their own identity in the app's tenant, not a user of the store's own.
    // By the memory's text: an id printed beside a hit may hold any four digits.
    assert!(!recall(&s.db, "carol", "assistant", "locker code").contains("code is 4711"));
    // A token that may not name end users is refused when it tries.
    let response = post(&s, TOKEN_A, &say("hi", None), Some("carol")).await;
    assert_eq!(response.status(), 403);
    let said: Value = response.json().await.unwrap();
    assert!(
        said["error"]["message"]
            .as_str()
            .unwrap()
            .contains("may not name end users"),
        "{said}"
    );
}

/// Makes `up` answer fact learning (its `<conversation>` prompt) with `facts`, as the model
/// `facts-model`.
async fn learns(up: &MockServer, facts: &[&str]) {
    let facts = json!({ "facts": facts });
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .and(body_string_contains("<conversation>"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "id": "x", "object": "chat.completion", "created": 1, "model": "facts-model",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": facts.to_string()}}]})))
        .with_priority(1)
        .mount(up)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn facts_are_learned_on_the_upstream_and_mcp_is_served_beside() {
    let up = upstream("Congratulations!", &[]).await;
    learns(&up, &["I moved to Porto."]).await;
    let s = serve(
        &format!("{}/v1", up.uri()),
        &["--facts-model", "facts-model"],
    )
    .await;
    let body = json!({"model": "gpt-test", "messages": [{"role": "user", "content": "I just moved to Porto!"}]});
    assert_eq!(post(&s, TOKEN_A, &body, None).await.status(), 200);
    let listed = tokio::time::timeout(PATIENCE, async {
        loop {
            let listed = ok(ava(&s.db, &["facts", "--user", "alice"]));
            if listed.contains("I moved to Porto.") {
                return listed;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await
    .expect("the fact is learned in the background");
    assert!(listed.contains("I moved to Porto."), "{listed}");
    let learning = up
        .received_requests()
        .await
        .unwrap()
        .into_iter()
        .map(|r| serde_json::from_slice::<Value>(&r.body).unwrap())
        .find(|b| b.to_string().contains("<conversation>"))
        .unwrap();
    assert_eq!(learning["model"], "facts-model");

    // MCP on the same address and tokens.
    let mcp = reqwest::Client::new()
        .post(format!("{}/mcp", s.url))
        .bearer_auth(TOKEN_A)
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": "facts", "arguments": {}}}))
        .send()
        .await
        .unwrap();
    assert_eq!(mcp.status(), 200);
    let answer = mcp.text().await.unwrap();
    assert!(answer.contains("I moved to Porto."), "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_openai_python_client_works_through_the_proxy() {
    let Some(python) = memory_core::testing::env_or_skip(
        "AVA_PYTHON",
        "ava-bot's OpenAI client test",
        "a Python with the `openai` package (pip install openai)",
    ) else {
        return;
    };
    let up = upstream("Maya lives in Lisbon.", &["Maya lives ", "in Lisbon."]).await;
    let s = serve(&format!("{}/v1", up.uri()), &["--no-facts"]).await;
    let script = r#"
import os
from openai import OpenAI
client = OpenAI(base_url=os.environ["AVA_URL"] + "/v1", api_key=os.environ["AVA_TOKEN"])
r = client.chat.completions.create(model="gpt-test",
    messages=[{"role": "user", "content": "My sister Maya lives in Lisbon."}])
print("ANSWER", r.choices[0].message.content, r.usage.total_tokens)
s = client.chat.completions.create(model="gpt-test", stream=True,
    messages=[{"role": "user", "content": "Where does my sister live?"}])
print("STREAM", "".join(c.choices[0].delta.content or "" for c in s if c.choices))
print("MODELS", [m.id for m in client.models.list()])
"#;
    Mock::given(method("GET"))
        .and(path("/v1/models"))
        .respond_with(ResponseTemplate::new(200).set_body_raw(
            r#"{"object":"list","data":[{"id":"gpt-test","object":"model","created":1,"owned_by":"me"}]}"#,
            "application/json",
        ))
        .mount(&up)
        .await;
    let out = tokio::process::Command::new(python)
        .args(["-c", script])
        .env("AVA_URL", &s.url)
        .env("AVA_TOKEN", TOKEN_A)
        .output();
    let out = tokio::time::timeout(PATIENCE, out).await.unwrap().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("ANSWER Maya lives in Lisbon. 38"),
        "{stdout}"
    );
    assert!(stdout.contains("STREAM Maya lives in Lisbon."), "{stdout}");
    assert!(stdout.contains("MODELS ['gpt-test']"), "{stdout}");
    let sent = received(&up).await;
    let memory = sent[1]["messages"][0]["content"].as_str().unwrap();
    assert!(
        memory.contains("My sister Maya lives in Lisbon."),
        "{memory}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_with_tool_calls_is_passed_on_and_kept_once() {
    let server = MockServer::start().await;
    let call = json!({"id": "chatcmpl-t1", "object": "chat.completion", "created": 1, "model": "gpt-test",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": null,
            "tool_calls": [{"id": "call_1", "type": "function",
                            "function": {"name": "book", "arguments": "{\"people\":2}"}}]}}]});
    Mock::given(method("POST"))
        .and(body_string_contains("\"role\":\"tool\""))
        .respond_with(ResponseTemplate::new(200).set_body_raw(
            completion("Booked a table for two at 8pm."),
            "application/json",
        ))
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_raw(call.to_string(), "application/json"))
        .mount(&server)
        .await;
    let s = serve(&format!("{}/v1", server.uri()), &["--no-facts"]).await;
    let mut messages = vec![json!({"role": "user", "content": "Book a table for two tonight."})];
    let first = post(
        &s,
        TOKEN_A,
        &json!({"model": "gpt-test", "messages": messages}),
        None,
    )
    .await;
    let first: Value = first.json().await.unwrap();
    assert_eq!(first, call, "the tool call is passed on unchanged");
    messages.push(first["choices"][0]["message"].clone());
    messages.push(json!({"role": "tool", "tool_call_id": "call_1", "content": "booked: 20:00"}));
    let second = post(
        &s,
        TOKEN_A,
        &json!({"model": "gpt-test", "messages": messages}),
        None,
    )
    .await;
    assert_eq!(
        second.text().await.unwrap(),
        completion("Booked a table for two at 8pm.")
    );
    // The upstream got the tool turn as the app sent it, after what Ava recalls.
    let sent = received(&server).await;
    let got = sent[1]["messages"].as_array().unwrap();
    assert_eq!(&got[got.len() - 3..], &messages[..]);
    // The user's message is kept once, and the final answer with it.
    let kept = recall(&s.db, "alice", "desk", "book table two tonight");
    assert_eq!(
        kept.matches("Book a table for two tonight.").count(),
        1,
        "{kept}"
    );
    assert!(kept.contains("Booked a table for two at 8pm."), "{kept}");
}

/// Answers each chat completion with the answer `exchanges` gives its last user message, as a
/// model that answers what the app replays.
struct Scripted(std::collections::HashMap<String, String>);

impl wiremock::Respond for Scripted {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&request.body).unwrap_or_default();
        let last = body["messages"]
            .as_array()
            .and_then(|m| m.iter().rev().find(|m| m["role"] == "user"))
            .and_then(|m| m["content"].as_str())
            .unwrap_or_default();
        let answer = self.0.get(last).cloned().unwrap_or_else(|| "Noted.".into());
        ResponseTemplate::new(200)
            .set_body_raw(completion(&answer).into_bytes(), "application/json")
    }
}

/// An app replays a conversation through the proxy, sending its whole history each call (as
/// apps do): in the default mode every call's prompt repeats nearly all of the one before,
/// as the app's own would, and with `--history replace` Ava's conversation block is extended
/// from call to call. Prints the shares (BENCHMARKS.md records them for the dev files, with
/// `AVA_REPLAY_FILE`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_app_replaying_a_conversation_gets_prompts_a_provider_can_cache() {
    let exchanges = common::replay::exchanges();
    let up = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(Scripted(exchanges.iter().cloned().collect()))
        .mount(&up)
        .await;
    for (mode, floor) in [("keep", 0.85), ("replace", 0.60)] {
        let s = serve(
            &format!("{}/v1", up.uri()),
            &["--no-facts", "--history", mode],
        )
        .await;
        let seen = up.received_requests().await.unwrap().len();
        let mut history =
            vec![json!({"role": "system", "content": "You are a helpful assistant."})];
        let mut apps = Vec::new();
        for (said, answer) in &exchanges {
            history.push(json!({"role": "user", "content": said}));
            let body = json!({"model": "gpt-test", "messages": history});
            apps.push(common::replay::prompt_text(history.as_slice()));
            let response = post(&s, TOKEN_A, &body, None).await;
            assert_eq!(response.status(), 200);
            let reply: Value = response.json().await.unwrap();
            assert_eq!(reply["choices"][0]["message"]["content"], answer.as_str());
            history.push(json!({"role": "assistant", "content": answer}));
        }
        let sent: Vec<String> = up.received_requests().await.unwrap()[seen..]
            .iter()
            .map(|r| {
                let body: Value = serde_json::from_slice(&r.body).unwrap();
                common::replay::prompt_text(body["messages"].as_array().unwrap())
            })
            .collect();
        assert_eq!(sent.len(), exchanges.len());
        let (app, ava) = (
            common::replay::mean_shared_prefix(&apps),
            common::replay::mean_shared_prefix(&sent),
        );
        eprintln!(
            "history {mode}: {} calls, the app alone {app:.3}, through ava serve {ava:.3}",
            sent.len()
        );
        assert!(
            ava >= floor,
            "history {mode}: shared prefix {ava:.3} < {floor}"
        );
        if mode == "keep" {
            // The app's messages are the start of what the upstream got, byte for byte.
            let last = up.received_requests().await.unwrap();
            let body: Value = serde_json::from_slice(&last.last().unwrap().body).unwrap();
            let got = body["messages"].as_array().unwrap();
            let n = history.len() - 2;
            assert_eq!(
                serde_json::to_string(&got[..n]).unwrap(),
                serde_json::to_string(&history[..n]).unwrap()
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apps_token_refuses_a_request_that_names_no_one_unless_it_may() {
    let up = upstream("Got it.", &[]).await;
    let s = serve(&format!("{}/v1", up.uri()), &["--no-facts"]).await;
    let say = |user: Option<Value>| {
        let mut body = json!({"model": "gpt-test",
            "messages": [{"role": "user", "content": "My phone number is 555-0199."}]});
        if let Some(u) = user {
            body["user"] = u;
        }
        body
    };
    // Two people of the app who are not named would share one memory: refused, with why.
    for (user, says) in [
        (None, "names none"),
        (Some(json!(42)), "must be a string"),
        (Some(json!(null)), "names none"),
        (Some(json!("")), "end user"),
        (Some(json!("   ")), "end user"),
    ] {
        let response = post(&s, TOKEN_APP, &say(user.clone()), None).await;
        assert_eq!(response.status(), 400, "{user:?}");
        let said: Value = response.json().await.unwrap();
        assert_eq!(said["error"]["type"], "invalid_request_error", "{said}");
        let message = said["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{user:?}: {message}");
    }
    assert!(received(&up).await.is_empty(), "nothing went upstream");
    let kept = recall(&s.db, "shop", "assistant", "phone number");
    assert!(!kept.contains("555-0199"), "{kept}");
    // Named, it is served; a token that opts in keeps unnamed calls in its own identity.
    let named = post(&s, TOKEN_APP, &say(Some(json!("carol"))), None).await;
    assert_eq!(named.status(), 200);
    let shared = post(&s, TOKEN_KIOSK, &say(None), None).await;
    assert_eq!(shared.status(), 200);
    assert!(recall(&s.db, "kiosk", "lobby", "phone number").contains("555-0199"));
}

/// A fake upstream on raw TCP: a streamed request is answered with `events` (server-sent
/// events, one chunk each) and then the connection is held open, as by an upstream whose
/// end is slow to follow its `[DONE]`; a request whose last message says `hold` gets only
/// the first event. Any other request gets a completion saying "Noted.". Every body it got,
/// in order, is in the list returned with its base URL.
async fn holding_upstream(events: Vec<String>) -> (String, Arc<Mutex<Vec<Value>>>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}/v1", listener.local_addr().unwrap());
    let bodies = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&bodies);
    let events = Arc::new(events);
    tokio::spawn(async move {
        loop {
            let (mut socket, _) = listener.accept().await.unwrap();
            let (seen, events) = (Arc::clone(&seen), Arc::clone(&events));
            tokio::spawn(async move {
                let mut got = Vec::new();
                let mut buf = [0u8; 16384];
                let (start, len) = loop {
                    let n = socket.read(&mut buf).await.unwrap();
                    if n == 0 {
                        return;
                    }
                    got.extend_from_slice(&buf[..n]);
                    if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&got[..end]).to_lowercase();
                        let len = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .map_or(0, |v| v.trim().parse::<usize>().unwrap());
                        break (end + 4, len);
                    }
                };
                while got.len() < start + len {
                    let n = socket.read(&mut buf).await.unwrap();
                    assert!(n > 0, "the request was cut short");
                    got.extend_from_slice(&buf[..n]);
                }
                let body: Value = serde_json::from_slice(&got[start..start + len]).unwrap();
                seen.lock().unwrap().push(body.clone());
                if body["stream"] != true {
                    let answer = completion("Noted.");
                    let head = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: \
                         {}\r\nconnection: close\r\n\r\n",
                        answer.len()
                    );
                    socket.write_all(head.as_bytes()).await.unwrap();
                    socket.write_all(answer.as_bytes()).await.unwrap();
                    return;
                }
                let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
                            transfer-encoding: chunked\r\n\r\n";
                socket.write_all(head.as_bytes()).await.unwrap();
                let hold = body.to_string().contains("hold");
                for event in events.iter().take(if hold { 1 } else { events.len() }) {
                    let chunk = format!("{:x}\r\n{event}\r\n", event.len());
                    socket.write_all(chunk.as_bytes()).await.unwrap();
                }
                // Never ends: the connection stays open until the test does.
                std::future::pending::<()>().await;
            });
        }
    });
    (base, bodies)
}

/// Reads the response's streamed body until it holds `end`; what it read.
async fn read_until(mut response: reqwest::Response, end: &str) -> String {
    let mut text = String::new();
    tokio::time::timeout(PATIENCE, async {
        while !text.contains(end) {
            let piece = response.chunk().await.unwrap().expect("more of the stream");
            text.push_str(&String::from_utf8_lossy(&piece));
        }
    })
    .await
    .expect("the stream came in time");
    text
}

/// A streamed exchange is in the store before the app has the stream's end: the user's
/// message when the answer starts, the answer before the piece that ends it. So the app's
/// very next call recalls both, whenever the upstream closes its end, and a server killed
/// mid-stream still has the message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_exchange_is_stored_before_the_app_sees_its_end() {
    let events: Vec<String> = streamed(&["Noted: her flat ", "is in Alfama."])
        .split_inclusive("\n\n")
        .map(str::to_owned)
        .collect();
    let (base, bodies) = holding_upstream(events).await;
    let mut s = serve(&base, &["--no-facts"]).await;
    let ask = |text: &str, stream: bool| {
        json!({"model": "gpt-test", "stream": stream,
               "messages": [{"role": "user", "content": text}]})
    };
    let response = post(
        &s,
        TOKEN_A,
        &ask("My sister Maya has a flat in Alfama.", true),
        None,
    )
    .await;
    assert_eq!(response.status(), 200);
    let text = read_until(response, "data: [DONE]").await;
    assert!(text.contains("is in Alfama."), "{text}");
    // At once, while the upstream still holds the stream open: the next call recalls both.
    let next = post(
        &s,
        TOKEN_A,
        &ask("Which flat in Alfama is my sister's?", false),
        None,
    )
    .await;
    assert_eq!(next.status(), 200);
    let sent = bodies.lock().unwrap().last().unwrap().to_string();
    assert!(
        sent.contains("My sister Maya has a flat in Alfama."),
        "{sent}"
    );
    assert!(sent.contains("Noted: her flat is in Alfama."), "{sent}");

    // Killed while the answer streams: the message is kept.
    let response = post(
        &s,
        TOKEN_A,
        &ask("hold: my brother Tom moved to Porto.", true),
        None,
    )
    .await;
    assert_eq!(response.status(), 200);
    read_until(response, "data:").await;
    s._child.kill().await.unwrap();
    let kept = recall(&s.db, "alice", "desk", "brother Tom Porto");
    assert!(kept.contains("my brother Tom moved to Porto."), "{kept}");
}

/// A store this server cannot write (read-only to it): each answer still comes, and says in
/// `x-ava-degraded` that it was not stored, without the store's path; an MCP tool's failure
/// does not show the path either (the server's log has it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_cannot_be_written_is_said_in_x_ava_degraded() {
    let up = upstream("Noted.", &["Noted", "."]).await;
    let dir = tempfile::tempdir().unwrap();
    set_mode(dir.path(), 0o755);
    let shared = dir.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    let db = shared.join("ava.db");
    ok(ava(
        &db,
        &common::in_chat("alice", "desk", "remember", &["I like tea."]),
    ));
    set_mode(&shared, 0o777);
    set_mode(&db, 0o444);
    let tokens = token_file(dir.path());
    let mut cmd = command(&db);
    cmd.args(["serve", "--addr", "127.0.0.1:0", "--no-facts", "--tokens"])
        .arg(&tokens)
        .args(["--upstream", &format!("{}/v1", up.uri())]);
    // As root, permissions do not apply: the server runs as `nobody`, the token file its own.
    let cmd = if privileged(dir.path()) {
        std::os::unix::fs::chown(&tokens, Some(65534), Some(65534)).unwrap();
        as_nobody(&cmd)
    } else {
        cmd
    };
    let (_child, line, log) = listening(cmd, PATIENCE).await;
    let url = listening_url(&line);
    let s = Serve {
        _child,
        url,
        _dir: dir,
        db: db.clone(),
        log,
    };
    let shown = db.to_str().unwrap();
    for stream in [false, true] {
        let body = json!({"model": "gpt-test", "stream": stream,
                          "messages": [{"role": "user", "content": "Do I like tea?"}]});
        let response = post(&s, TOKEN_A, &body, None).await;
        assert_eq!(response.status(), 200, "stream {stream}");
        let degraded = response
            .headers()
            .get("x-ava-degraded")
            .unwrap_or_else(|| panic!("stream {stream}: no x-ava-degraded"))
            .to_str()
            .unwrap()
            .to_owned();
        assert!(degraded.contains("not stored"), "{degraded}");
        assert!(!degraded.contains(shown), "{degraded}");
        let text = response.text().await.unwrap();
        assert!(text.contains("Noted"), "{text}");
    }
    let mcp = reqwest::Client::new()
        .post(format!("{}/mcp", s.url))
        .bearer_auth(TOKEN_A)
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": "remember", "arguments": {"content": "I like coffee."}}}))
        .send()
        .await
        .unwrap();
    let answer = mcp.text().await.unwrap();
    assert!(answer.contains(r#""isError":true"#), "{answer}");
    assert!(answer.contains("could not store the memory"), "{answer}");
    assert!(
        !answer.contains(shown) && !answer.contains("shared/"),
        "{answer}"
    );
}

/// A message of 4 MiB of distinct words through the proxy (issue 54, D1): the app gets its
/// answer, with `x-ava-degraded` saying only the message's first MiB is kept; the store holds
/// that MiB and, at its end, a line saying how much was left out, not the rest; and the app's
/// next small call recalls from what was kept, as any call does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_message_is_kept_by_its_first_mib_and_the_app_still_gets_its_answer() {
    let up = upstream("Noted.", &["Noted", "."]).await;
    let s = serve(&format!("{}/v1", up.uri()), &["--no-facts"]).await;
    let mut huge = String::from("My cat is called Zorro. ");
    let mut i = 0u64;
    while huge.len() < 4 << 20 {
        huge.push_str(&format!("w{i:x}q "));
        i += 1;
    }
    huge.push_str("My parrot is called Kiwi.");
    let body = json!({"model": "gpt-test",
                      "messages": [{"role": "user", "content": huge}]});
    let response = post(&s, TOKEN_A, &body, None).await;
    assert_eq!(response.status(), 200);
    let degraded = response
        .headers()
        .get("x-ava-degraded")
        .expect("the cut is said in x-ava-degraded")
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        degraded.contains("message not stored whole") && degraded.contains("left out"),
        "{degraded}"
    );
    assert!(response.text().await.unwrap().contains("Noted."));

    let stored: Vec<String> = common::exported(&s.db, "alice")
        .iter()
        .map(|line| {
            let m: Value = serde_json::from_str(line).unwrap();
            m["content"].as_str().unwrap().to_owned()
        })
        .collect();
    let all = stored.concat();
    let mib = memory_core::MAX_MESSAGE_BYTES;
    assert!(
        all.len() < mib + 1024,
        "{} bytes stored of a {} byte message",
        all.len(),
        huge.len()
    );
    assert!(all.contains("My cat is called Zorro."));
    assert!(!all.contains("Kiwi"), "the end of the message is not kept");
    let left_out = huge.len() - memory_core::MessageCut::of(&huge).unwrap().kept;
    assert!(
        all.contains(&format!("{left_out} more bytes, was not kept")),
        "the memory says what was left out"
    );

    let small = json!({"model": "gpt-test",
                       "messages": [{"role": "user", "content": "What is my cat called?"}]});
    let response = post(&s, TOKEN_A, &small, None).await;
    assert_eq!(response.status(), 200);
    assert!(response.headers().get("x-ava-degraded").is_none());
    assert!(response.text().await.unwrap().contains("Noted."));
    let sent = received(&up).await;
    let last = sent.last().unwrap().to_string();
    assert!(last.contains("What is my cat called?"), "{last:.400}");
    assert!(
        last.contains("Zorro"),
        "recalled from the kept MiB: {last:.2000}"
    );
}

/// `--log-format json`: every line on stderr is one JSON object, and none holds the token,
/// the message's text or who it is about; the line saying facts were learned names the scope
/// by its keyed hash (issue 56, item 3).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_json_log_holds_no_token_no_text_and_no_identity() {
    const SECRET: &str = "P-7731-QX";
    let up = upstream("Noted.", &[]).await;
    learns(&up, &[&format!("My passport number is {SECRET}.")]).await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ava.db");
    let mut cmd = command(&db);
    cmd.args(["serve", "--addr", "127.0.0.1:0", "--tokens"])
        .arg(token_file(dir.path()))
        .args(["--upstream", &format!("{}/v1", up.uri())])
        .args(["--facts-model", "facts-model", "--log-format", "json"])
        .env_remove("RUST_LOG")
        .env("AVA_LOG_KEY", "a key of this deployment");
    let (mut child, line, log) = listening(cmd, PATIENCE).await;
    let url = listening_url(&line);
    let body = json!({"model": "gpt-test", "messages": [
        {"role": "user", "content": format!("My passport number is {SECRET}, keep it safe")}]});
    let sent = reqwest::Client::new()
        .post(format!("{url}/v1/chat/completions"))
        .bearer_auth(TOKEN_A)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(sent.status(), 200);
    tokio::time::timeout(PATIENCE, async {
        while !ok(ava(&db, &["facts", "--user", "alice"])).contains(SECRET) {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await
    .expect("the fact is learned in the background");
    common::signal(&child, "TERM");
    child.wait().await.unwrap();

    let mut lines = vec![line];
    lines.extend(log.lock().unwrap().iter().cloned());
    let mut learned = None;
    for l in &lines {
        let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"));
        assert!(v["level"].is_string() && v["message"].is_string(), "{l}");
        for leak in [SECRET, "passport", TOKEN_A, "alice", "desk"] {
            assert!(!l.contains(leak), "the log holds {leak:?}: {l}");
        }
        if v["message"] == "learned facts from the exchange" {
            learned = Some(v);
        }
    }
    let learned = learned.unwrap_or_else(|| panic!("no line says facts were learned: {lines:#?}"));
    let scope = learned["fields"]["scope"].as_str().unwrap();
    assert!(scope.starts_with("h:"), "{learned}");
    assert_eq!(learned["fields"]["added"], 1, "{learned}");
}

/// `ava serve --metrics-addr` on a fresh store in front of `upstream`, and where its probes
/// and metrics are.
async fn serve_with_metrics(upstream: &str) -> (Serve, String) {
    let s = serve(upstream, &["--no-facts", "--metrics-addr", "127.0.0.1:0"]).await;
    let probes = tokio::time::timeout(PATIENCE, async {
        loop {
            let found = s.log.lock().unwrap().iter().find_map(|l| {
                l.split_once("probes and metrics at ")
                    .and_then(|(_, rest)| rest.split_whitespace().next())
                    .map(str::to_owned)
            });
            if let Some(found) = found {
                return found;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the probes' address is said");
    (s, probes)
}

/// Prometheus' text format read back: each sample's series (name and labels) and value;
/// every line is a comment or a sample.
fn samples(text: &str) -> std::collections::HashMap<String, f64> {
    text.lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (series, value) = l
                .rsplit_once(' ')
                .unwrap_or_else(|| panic!("not a sample: {l}"));
            let value: f64 = value.parse().unwrap_or_else(|e| panic!("{e}: {l}"));
            (series.to_owned(), value)
        })
        .collect()
}

/// `--metrics-addr` (issue 56, item 2): `/healthz` and `/readyz` answer, `/metrics` counts
/// requests by door and outcome, their latency, the prompt's tokens and what the provider
/// could cache, in Prometheus' text format with no identity in it; an upstream that cannot
/// be reached makes the server not ready, and says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_and_metrics_answer_on_their_own_listener() {
    let up = upstream("Lisbon it is.", &[]).await;
    let (s, probes) = serve_with_metrics(&format!("{}/v1", up.uri())).await;
    let url = s.url.clone();
    let http = reqwest::Client::new();
    let healthz = http.get(format!("{probes}/healthz")).send().await.unwrap();
    assert_eq!(healthz.status(), 200);
    let readyz = http.get(format!("{probes}/readyz")).send().await.unwrap();
    assert_eq!(readyz.status(), 200);
    let ready: Value = readyz.json().await.unwrap();
    assert_eq!(ready["ready"], true, "{ready}");
    for check in ["store", "embedder", "upstream"] {
        assert_eq!(ready["checks"][check], "ok", "{ready}");
    }

    let body = json!({"model": "gpt-test", "messages": [{"role": "user", "content": "Where does alice live?"}]});
    let asked = http
        .post(format!("{url}/v1/chat/completions"))
        .bearer_auth(TOKEN_A)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(asked.status(), 200);
    asked.text().await.unwrap();
    let refused = http.get(format!("{url}/v1/models")).send().await.unwrap();
    assert_eq!(refused.status(), 401);

    let scraped = http.get(format!("{probes}/metrics")).send().await.unwrap();
    assert_eq!(scraped.status(), 200);
    assert!(
        scraped.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain; version=0.0.4"),
    );
    let text = scraped.text().await.unwrap();
    for leak in ["alice", "desk", TOKEN_A] {
        assert!(!text.contains(leak), "the metrics name {leak}: {text}");
    }
    let m = samples(&text);
    let get = |series: &str| {
        *m.get(series)
            .unwrap_or_else(|| panic!("no {series}:\n{text}"))
    };
    assert_eq!(get(r#"ava_requests_total{door="proxy",outcome="ok"}"#), 1.0);
    assert_eq!(
        get(r#"ava_requests_total{door="proxy",outcome="client_error"}"#),
        1.0
    );
    assert_eq!(get(r#"ava_requests_total{door="mcp",outcome="ok"}"#), 0.0);
    // A histogram's buckets only grow, and the last holds them all.
    let buckets: Vec<f64> = text
        .lines()
        .filter(|l| l.starts_with(r#"ava_request_seconds_bucket{door="proxy","#))
        .map(|l| l.rsplit_once(' ').unwrap().1.parse().unwrap())
        .collect();
    assert!(
        buckets.len() > 2 && buckets.windows(2).all(|w| w[0] <= w[1]),
        "{buckets:?}"
    );
    assert_eq!(buckets.last(), Some(&2.0));
    assert_eq!(get(r#"ava_request_seconds_count{door="proxy"}"#), 2.0);
    assert_eq!(get("ava_prompts_total"), 1.0);
    // Its context gathered and compiled once each, timed apart.
    assert_eq!(get("ava_hydrate_seconds_count"), 1.0);
    assert_eq!(get("ava_compile_seconds_count"), 1.0);
    assert!(
        get("ava_prompt_seconds_sum") >= get("ava_compile_seconds_sum"),
        "{text}"
    );
    assert!(get("ava_prompt_tokens_total") > 0.0, "{text}");
    assert!(get("ava_cached_prefix_tokens_total") <= get("ava_prompt_tokens_total"));
    assert_eq!(get("ava_upstream_seconds_count"), 1.0);
    assert_eq!(get("ava_upstream_errors_total"), 0.0);
    assert_eq!(get("ava_exchanges_kept_total"), 1.0);
    assert_eq!(get("ava_store_write_failures_total"), 0.0);
    // The store's totals: the exchange's two turns, in alice's one scope.
    assert_eq!(get("ava_memories"), 2.0);
    assert_eq!(get("ava_scopes"), 1.0);

    // The store's file removed under it: alive, not ready, the store named.
    std::fs::remove_file(&s.db).unwrap();
    let readyz = http.get(format!("{probes}/readyz")).send().await.unwrap();
    assert_eq!(readyz.status(), 503);
    let ready: Value = readyz.json().await.unwrap();
    let why = ready["checks"]["store"].as_str().unwrap();
    assert!(why.contains("is gone"), "{ready}");
    assert_eq!(ready["checks"]["upstream"], "ok", "{ready}");

    // An upstream nobody answers at: alive, not ready, and the reason named.
    let gone = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("http://{}/v1", gone.local_addr().unwrap());
    drop(gone);
    let (_other, probes) = serve_with_metrics(&dead).await;
    assert_eq!(
        http.get(format!("{probes}/healthz"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    let readyz = http.get(format!("{probes}/readyz")).send().await.unwrap();
    assert_eq!(readyz.status(), 503);
    let ready: Value = readyz.json().await.unwrap();
    assert_eq!(ready["ready"], false, "{ready}");
    assert_eq!(ready["checks"]["store"], "ok", "{ready}");
    let why = ready["checks"]["upstream"].as_str().unwrap();
    assert!(
        why.contains("cannot be reached") && why.contains(&dead),
        "{why}"
    );
}

/// `ava run --metrics-addr`: the bot answers probes too (its chat model in place of the
/// upstream), and counts each Telegram message answered by its outcome, with the prompt's
/// tokens and the exchange kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bot_answers_probes_and_counts_what_it_answers() {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let model = upstream("Hello there.", &[]).await;
    let queue = fake_bot_api::Queue::default();
    let telegram = fake_bot_api::start(queue.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let mut bot = tokio::process::Command::from(command(dir.path().join("ava.db")));
    bot.args([
        "run",
        "--no-facts",
        "--llm",
        "openai",
        "--llm-model",
        "gpt-test",
    ])
    .args(["--llm-url", &format!("{}/v1", model.uri())])
    .args(["--telegram-api-url", &telegram.uri()])
    .args(["--metrics-addr", "127.0.0.1:0"])
    .env("TELOXIDE_TOKEN", fake_bot_api::TOKEN)
    .stdin(std::process::Stdio::null())
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::piped())
    .kill_on_drop(true);
    let mut child = bot.spawn().unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let probes = tokio::time::timeout(PATIENCE, async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if let Some((_, rest)) = line.split_once("probes and metrics at ") {
                return rest.split_whitespace().next().unwrap().to_owned();
            }
        }
        panic!("the bot exited without saying where its probes are");
    })
    .await
    .expect("the probes' address is said");
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });

    let http = reqwest::Client::new();
    let readyz = http.get(format!("{probes}/readyz")).send().await.unwrap();
    assert_eq!(readyz.status(), 200);
    let ready: Value = readyz.json().await.unwrap();
    assert_eq!(ready["checks"]["chat model"], "ok", "{ready}");
    assert_eq!(ready["checks"]["store"], "ok", "{ready}");

    let mut sender = fake_bot_api::Sender::new(queue);
    let reply = sender.say(&telegram, (77, "Mia"), 77, "hello bot").await;
    assert!(reply.contains("Hello there."), "{reply}");
    let text = http
        .get(format!("{probes}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(!text.contains("Mia") && !text.contains("77\""), "{text}");
    let m = samples(&text);
    let get = |series: &str| {
        *m.get(series)
            .unwrap_or_else(|| panic!("no {series}:\n{text}"))
    };
    assert_eq!(
        get(r#"ava_requests_total{door="telegram",outcome="ok"}"#),
        1.0
    );
    assert_eq!(get(r#"ava_request_seconds_count{door="telegram"}"#), 1.0);
    assert_eq!(get("ava_prompts_total"), 1.0);
    // The bot's prompt timed by part, and its chat model as the upstream.
    assert_eq!(get("ava_hydrate_seconds_count"), 1.0);
    assert_eq!(get("ava_compile_seconds_count"), 1.0);
    assert_eq!(get("ava_upstream_seconds_count"), 1.0);
    assert_eq!(get("ava_upstream_errors_total"), 0.0);
    assert!(get("ava_prompt_tokens_total") > 0.0, "{text}");
    assert_eq!(get("ava_exchanges_kept_total"), 1.0);
    child.start_kill().unwrap();
}
