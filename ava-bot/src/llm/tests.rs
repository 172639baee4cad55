//! The LLM clients against loopback servers speaking the Ollama and OpenAI HTTP APIs.

use std::sync::Arc;
use std::time::Duration;

use hydrate::{ChatMessage, ChatModel, ToolSpec};
use memory_core::{HashingEmbedder, MemoryBackend, Scope};
use memory_inmem::InMemoryBackend;
use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

use super::{OllamaChat, OpenAiChat};
use crate::agent::{Agent, Speaker};
use memory_core::Secret;

const LONG: Duration = Duration::from_secs(30);

fn tools() -> Vec<ToolSpec> {
    hydrate::memory_tools()
        .unwrap()
        .iter()
        .map(ToolSpec::from)
        .collect()
}

pub(crate) fn ollama_answer(text: &str) -> Value {
    json!({
        "model": "llama-test",
        "created_at": "2026-03-10T09:30:00Z",
        "message": {"role": "assistant", "content": text},
        "done": true
    })
}

pub(crate) fn ollama_tool_call(name: &str, arguments: Value) -> Value {
    json!({
        "model": "llama-test",
        "created_at": "2026-03-10T09:30:00Z",
        "message": {"role": "assistant", "content": "",
            "tool_calls": [{"function": {"name": name, "arguments": arguments}}]},
        "done": true
    })
}

use hydrate::testing::openai_completion as openai_response;

fn bodies(requests: &[wiremock::Request]) -> Vec<Value> {
    requests
        .iter()
        .map(|r| serde_json::from_slice(&r.body).unwrap())
        .collect()
}

fn agent() -> Agent {
    let backend: Arc<dyn MemoryBackend> = Arc::new(InMemoryBackend::new(Some(Arc::new(
        HashingEmbedder::new(64).unwrap(),
    ))));
    Agent::new(backend, None, 4000).unwrap()
}

#[tokio::test]
async fn ollama_runs_a_tool_call_then_answers() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/api/chat"))
        .respond_with(ResponseTemplate::new(200).set_body_json(ollama_tool_call(
            "remember",
            json!({"content": "The user's cat is called Pixel."}),
        )))
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/api/chat"))
        .respond_with(ResponseTemplate::new(200).set_body_json(ollama_answer("Noted: Pixel.")))
        .mount(&server)
        .await;
    let model = OllamaChat::new(&server.uri(), "llama-test", LONG).unwrap();
    let agent = agent();
    let scope = Scope::for_user("1").unwrap().in_chat("2").unwrap();

    let done = agent
        .answer(
            &model,
            &Speaker::private(scope.clone(), hydrate::SessionState::default()),
            "My cat is called Pixel.",
            "test",
        )
        .await
        .unwrap();
    turn_stored(&done);
    let done = done.answer.map_err(|(_, e)| e).unwrap();
    assert_eq!(done.reply, "Noted: Pixel.");
    assert_eq!(done.steps, 2);
    assert!(done.tool_runs[0].ok, "{:?}", done.tool_runs);

    let sent = bodies(&server.received_requests().await.unwrap());
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[0]["model"], "llama-test");
    assert_eq!(sent[0]["stream"], false);
    let names: Vec<&str> = sent[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["remember", "recall", "forget"]);
    // The second call carries the assistant's call and the tool's result.
    let second = sent[1]["messages"].as_array().unwrap();
    let n = second.len();
    assert_eq!(second[n - 2]["role"], "assistant");
    assert_eq!(
        second[n - 2]["tool_calls"][0]["function"]["name"],
        "remember"
    );
    assert_eq!(second[n - 1]["role"], "tool");
    assert!(
        second[n - 1]["content"]
            .as_str()
            .unwrap()
            .contains("stored"),
        "{}",
        second[n - 1]
    );
    // The message and the answer are stored in the chat, the fact as the user's own.
    let store = agent.store();
    assert_eq!(store.count(&scope).await.unwrap(), 2);
    assert_eq!(store.count(&scope.user_wide()).await.unwrap(), 1);
}

#[tokio::test]
async fn openai_runs_a_tool_call_then_answers() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(openai_response(json!({
                "role": "assistant",
                "content": null,
                "tool_calls": [{"id": "call_7", "type": "function",
                    "function": {"name": "recall", "arguments": "{\"query\":\"cat\"}"}}]
            }))),
        )
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(200).set_body_json(openai_response(
            json!({"role": "assistant", "content": "I don't know your cat yet."}),
        )))
        .mount(&server)
        .await;
    let key = Secret::new("sk-test-key");
    let model = OpenAiChat::new(
        &format!("{}/v1", server.uri()),
        "gpt-test",
        Some(&key),
        LONG,
    )
    .unwrap();
    assert!(!format!("{model:?}").contains("sk-test-key"));
    let scope = Scope::for_user("1").unwrap().in_chat("2").unwrap();

    let done = agent()
        .answer(
            &model,
            &Speaker::private(scope.clone(), hydrate::SessionState::default()),
            "What is my cat called?",
            "test",
        )
        .await
        .unwrap();
    turn_stored(&done);
    let done = done.answer.map_err(|(_, e)| e).unwrap();
    assert_eq!(done.reply, "I don't know your cat yet.");
    assert_eq!(done.tool_runs.len(), 1);
    assert_eq!(done.tool_runs[0].name, "recall");

    let requests = server.received_requests().await.unwrap();
    assert_eq!(
        requests[0].headers.get("authorization").unwrap(),
        "Bearer sk-test-key"
    );
    let sent = bodies(&requests);
    assert_eq!(sent[0]["model"], "gpt-test");
    assert_eq!(sent[0]["tools"][0]["type"], "function");
    assert_eq!(sent[0]["tools"][1]["function"]["name"], "recall");
    let second = sent[1]["messages"].as_array().unwrap();
    let n = second.len();
    assert_eq!(second[n - 2]["tool_calls"][0]["id"], "call_7");
    assert_eq!(second[n - 1]["role"], "tool");
    assert_eq!(second[n - 1]["tool_call_id"], "call_7");
}

async fn failing_server(route: &str, response: ResponseTemplate) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(route))
        .respond_with(response)
        .mount(&server)
        .await;
    server
}

fn models(server: &MockServer, timeout: Duration) -> Vec<Box<dyn ChatModel>> {
    vec![
        Box::new(OllamaChat::new(&server.uri(), "llama-test", timeout).unwrap()),
        Box::new(OpenAiChat::new(&server.uri(), "gpt-test", None, timeout).unwrap()),
    ]
}

/// Each failure is an error naming the model, for both clients.
async fn assert_fails(response: ResponseTemplate, timeout: Duration, expect: &str) {
    for route in ["/api/chat", "/chat/completions"] {
        let server = failing_server(route, response.clone()).await;
        let model = models(&server, timeout)
            .into_iter()
            .find(|m| (m.name() == "llama-test") == (route == "/api/chat"))
            .unwrap();
        let err = model
            .chat(&[ChatMessage::user("hello")], &tools())
            .await
            .unwrap_err();
        // The model error says its own part; the client's words are its source.
        if let Some(cause) = std::error::Error::source(&err) {
            assert!(!err.to_string().contains(&cause.to_string()), "{err:?}");
        }
        let text = memory_core::ErrorChain(&err).to_string();
        assert!(text.contains(model.name()), "{text}");
        assert!(
            text.to_lowercase().contains(expect),
            "{route}: expected `{expect}` in: {text}"
        );
    }
}

#[tokio::test]
async fn a_server_error_is_a_model_error() {
    assert_fails(
        ResponseTemplate::new(500).set_body_string(
            "{\"error\":{\"message\":\"model exploded\",\"type\":\"server_error\",\"param\":null,\"code\":null}}",
        ),
        LONG,
        "model exploded",
    )
    .await;
}

#[tokio::test]
async fn a_slow_server_times_out() {
    assert_fails(
        ResponseTemplate::new(200)
            .set_body_json(ollama_answer("too late"))
            .set_delay(Duration::from_secs(30)),
        Duration::from_millis(200),
        "no answer within",
    )
    .await;
}

#[tokio::test]
async fn malformed_json_is_a_model_error() {
    assert_fails(
        ResponseTemplate::new(200)
            .insert_header("content-type", "application/json")
            .set_body_string("{\"model\": \"x\", \"message\": "),
        LONG,
        "",
    )
    .await;
}

#[test]
fn bad_urls_and_timeouts_are_refused() {
    let e = OllamaChat::new("localhost:11434", "m", LONG).unwrap_err();
    assert!(e.to_string().contains("not an http(s) URL"), "{e}");
    let e = OpenAiChat::new("ftp://x", "m", None, LONG).unwrap_err();
    assert!(e.to_string().contains("not an http(s) URL"), "{e}");
}

/// Asserts that a turn's message and answer reached the store.
fn turn_stored(turn: &crate::agent::Turn) {
    if let Err(e) = &turn.stored {
        panic!("the turn was not stored: {e:#}");
    }
}

/// Answers a fact decision call by finding the labels of the facts it is told about in the
/// request (their order depends on search ranking).
struct Decide;

impl wiremock::Respond for Decide {
    fn respond(&self, request: &wiremock::Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&request.body).unwrap();
        let data = body["messages"][1]["content"].as_str().unwrap().to_owned();
        let label = |text: &str| {
            data.lines()
                .find(|l| l.ends_with(text))
                .and_then(|l| l.split(':').next())
                .unwrap_or("missing")
                .to_owned()
        };
        let decisions = json!({"decisions": [
            {"new": label("I sold my bike."), "op": "ADD"},
            {"op": "INVALIDATE", "existing": label("I own a red bike."), "reason": "sold"},
            {"new": label("I started learning Welsh."), "op": "ADD"},
        ]});
        ResponseTemplate::new(200).set_body_json(openai_response(
            json!({"role": "assistant", "content": decisions.to_string()}),
        ))
    }
}

#[tokio::test]
async fn learned_facts_are_added_ended_and_not_repeated() {
    use hydrate::{Exchange, FactExtractor};
    use memory_core::{Filter, MemoryKind, NewMemory, Timestamp};

    let server = MockServer::start().await;
    let facts = json!({"facts": ["I sold my bike.", "I work at Acme.", "i work at acme", "I started learning Welsh."]});
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .and(wiremock::matchers::body_string_contains("<conversation>"))
        .respond_with(ResponseTemplate::new(200).set_body_json(openai_response(
            json!({"role": "assistant", "content": format!("```json\n{facts}\n```")}),
        )))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .and(wiremock::matchers::body_string_contains("<new-facts>"))
        .respond_with(Decide)
        .mount(&server)
        .await;
    let model: Arc<dyn ChatModel> =
        Arc::new(OpenAiChat::new(&format!("{}/v1", server.uri()), "gpt-test", None, LONG).unwrap());
    let backend = InMemoryBackend::new(Some(Arc::new(HashingEmbedder::new(64).unwrap())));
    let scope = Scope::for_user("1").unwrap().in_chat("2").unwrap();
    let fact = |t: &str| NewMemory::new(t).with_kind(MemoryKind::Fact);
    let t0 = Timestamp::parse_rfc3339("2026-03-01T10:00:00Z").unwrap();
    let bike = backend
        .store(&scope, fact("I own a red bike.").at(t0))
        .await
        .unwrap();
    let acme = backend
        .store(&scope, fact("I work at Acme.").at(t0))
        .await
        .unwrap();
    let at = Timestamp::parse_rfc3339("2026-03-02T10:00:00Z").unwrap();
    // Said by a member of a shared chat: what is learned is theirs.
    let member = memory_core::Tag::new("from:42").unwrap();
    let exchange = Exchange {
        user: "Sold my bike <finally>; I still work at Acme, and I started Welsh lessons!",
        assistant: Some("Congratulations!"),
        at,
        source: "test",
        member: Some(&member),
    };
    let report = FactExtractor::new(model)
        .learn(&backend, std::slice::from_ref(&scope), exchange)
        .await
        .unwrap();
    assert_eq!(report.added.len(), 2, "{report:?}");
    assert_eq!(report.invalidated.len(), 1, "{report:?}");
    assert_eq!(report.invalidated[0].id, bike.id);
    assert_eq!(report.invalidated[0].why, "sold");
    assert!(report.superseded.is_empty() && report.failed.is_empty());

    let current = Filter {
        kinds: vec![MemoryKind::Fact],
        valid_at: Some(at),
        ..Filter::default()
    };
    let mut now: Vec<String> = backend
        .recent(&scope, 10, &current)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.content)
        .collect();
    now.sort();
    assert_eq!(
        now,
        [
            "I sold my bike.",
            "I started learning Welsh.",
            "I work at Acme."
        ],
        "Acme is neither repeated nor replaced"
    );
    let ended = backend.get(&scope, bike.id).await.unwrap();
    assert_eq!(ended.valid_until, Some(at), "ended, not deleted");
    assert_eq!(
        backend.get(&scope, acme.id).await.unwrap().valid_until,
        None
    );
    let learned = backend.get(&scope, report.added[0]).await.unwrap();
    assert_eq!(learned.created_at, at);
    assert_eq!(learned.source.as_deref(), Some("test"));
    assert!(learned.tags.contains(&member), "{:?}", learned.tags);
    // It quotes nothing of the message it came from.
    assert_eq!(learned.context.as_deref(), Some(hydrate::LEARNED_CONTEXT));

    // The conversation reached the model escaped, inside its data block.
    let sent = bodies(&server.received_requests().await.unwrap());
    let data = sent[0]["messages"][1]["content"].as_str().unwrap();
    assert!(
        data.starts_with("<conversation>\nuser: Sold my bike &lt;finally&gt;;"),
        "{data}"
    );
    assert!(
        data.ends_with("assistant: Congratulations!\n</conversation>"),
        "{data}"
    );
    assert_eq!(sent.len(), 2, "one extraction, one decision");
}

/// A message of a megabyte is read for facts by its start only: what reaches the model is
/// bounded (issue 54: a 20 MB message went whole to the upstream again for extraction).
#[tokio::test]
async fn a_huge_message_reaches_fact_extraction_by_its_start_only() {
    use hydrate::{Exchange, FactExtractor, MAX_EXTRACT_BYTES};
    use memory_core::Timestamp;

    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(200).set_body_json(openai_response(
            json!({"role": "assistant", "content": r#"{"facts": []}"#}),
        )))
        .mount(&server)
        .await;
    let model: Arc<dyn ChatModel> =
        Arc::new(OpenAiChat::new(&format!("{}/v1", server.uri()), "gpt-test", None, LONG).unwrap());
    let backend = InMemoryBackend::new(Some(Arc::new(HashingEmbedder::new(64).unwrap())));
    let scope = Scope::for_user("1").unwrap().in_chat("2").unwrap();
    // Multi-byte characters, so the cut must find a character boundary.
    let huge = "Grüße aus München, ".repeat(60_000);
    assert!(huge.len() > 1_000_000);
    let exchange = Exchange {
        user: &huge,
        assistant: Some(&huge),
        at: Timestamp::parse_rfc3339("2026-03-02T10:00:00Z").unwrap(),
        source: "test",
        member: None,
    };
    let report = FactExtractor::new(model)
        .learn(&backend, std::slice::from_ref(&scope), exchange)
        .await
        .unwrap();
    assert!(report.is_empty());
    let sent = server.received_requests().await.unwrap();
    assert_eq!(sent.len(), 1);
    assert!(
        sent[0].body.len() < 3 * MAX_EXTRACT_BYTES,
        "{} bytes went to the model",
        sent[0].body.len()
    );
    let data = bodies(&sent)[0]["messages"][1]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        data.starts_with("<conversation>\nuser: Grüße aus München,"),
        "{}",
        &data[..80]
    );
    assert!(data.contains("more bytes not shown"));
}
