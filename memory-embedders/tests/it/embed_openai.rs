//! `OpenAiEmbedder` (the real async-openai client) against a loopback server speaking the
//! OpenAI `/v1/embeddings` API: success, batch order, retries, timeouts and failures.

// Test helpers outside #[test] fns may unwrap too: a failure is a test failure.
use std::time::Duration;

use memory_core::{EmbeddingProvider, MemoryError, embed_all};
use memory_embedders::{ApiKey, OpenAiConfig, OpenAiEmbedder, RetryPolicy};
use serde_json::{Value, json};
use wiremock::matchers::{body_partial_json, header, method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

const DIMS: usize = 3;
const KEY: &str = "sk-test-0123456789";

fn quick_retries(max_retries: u32) -> RetryPolicy {
    RetryPolicy {
        max_retries,
        initial_backoff: Duration::from_millis(5),
        max_backoff: Duration::from_millis(20),
    }
}

fn config(server: &MockServer) -> OpenAiConfig {
    OpenAiConfig {
        base_url: format!("{}/v1", server.uri()),
        api_key: Some(ApiKey::new(KEY).unwrap()),
        model: "text-embedding-3-small".into(),
        dimensions: Some(DIMS),
        request_dimensions: false,
        timeout: Duration::from_secs(5),
        max_batch: 256,
        retry: quick_retries(2),
    }
}

fn vector_for(text: &str) -> Vec<f32> {
    let n = text.len() as f32;
    vec![n, -n, 0.25]
}

fn response(items: &[(usize, Vec<f32>)]) -> Value {
    let data: Vec<Value> = items
        .iter()
        .map(|(i, v)| json!({"object": "embedding", "index": i, "embedding": v}))
        .collect();
    json!({
        "object": "list",
        "data": data,
        "model": "text-embedding-3-small",
        "usage": {"prompt_tokens": 8, "total_tokens": 8},
    })
}

/// Answers like OpenAI, but lists the vectors in reverse order: only `index` says which
/// input each belongs to.
struct ReversedEmbeddings;

impl Respond for ReversedEmbeddings {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let body: Value = request.body_json().unwrap();
        let inputs: Vec<String> = serde_json::from_value(body["input"].clone()).unwrap();
        let items: Vec<(usize, Vec<f32>)> = inputs
            .iter()
            .enumerate()
            .rev()
            .map(|(i, t)| (i, vector_for(t)))
            .collect();
        ResponseTemplate::new(200).set_body_json(response(&items))
    }
}

async fn mount_ok(server: &MockServer) {
    Mock::given(method("POST"))
        .and(path("/v1/embeddings"))
        .respond_with(ReversedEmbeddings)
        .mount(server)
        .await;
}

async fn request_count(server: &MockServer) -> usize {
    server.received_requests().await.unwrap().len()
}

fn message(err: &MemoryError) -> String {
    match err {
        MemoryError::Embedding {
            provider, message, ..
        } => {
            // Each part of the chain is said once.
            assert_eq!(memory_core::repeated_cause(err), None, "{err:?}");
            assert_eq!(provider, "openai");
            assert!(!message.contains(KEY), "the key leaked into {message}");
            let chain = memory_core::ErrorChain(err).to_string();
            assert!(!chain.contains(KEY), "the key leaked into {chain}");
            message.clone()
        }
        other => panic!("expected an Embedding error, got {other:?}"),
    }
}

fn openai_error(status: u16, message: &str, kind: &str, code: &str) -> ResponseTemplate {
    ResponseTemplate::new(status).set_body_json(json!({
        "error": {"message": message, "type": kind, "param": null, "code": code}
    }))
}

#[tokio::test]
async fn embeds_a_batch_with_key_and_model() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/embeddings"))
        .and(header("authorization", format!("Bearer {KEY}").as_str()))
        .and(body_partial_json(
            json!({"model": "text-embedding-3-small", "input": ["a cat", "a dog"]}),
        ))
        .respond_with(ReversedEmbeddings)
        .expect(1)
        .mount(&server)
        .await;
    let embedder = OpenAiEmbedder::new(config(&server)).unwrap();

    let out = embedder.embed_batch(&["a cat", "a dog"]).await.unwrap();

    assert_eq!(out.len(), 2);
    assert_eq!(out[1].vector(), vector_for("a dog").as_slice());
    let space = embedder.space();
    assert_eq!(
        (space.provider.as_str(), space.model.as_str(), space.dims),
        ("openai", "text-embedding-3-small", DIMS)
    );
    let body: Value = server.received_requests().await.unwrap()[0]
        .body_json()
        .unwrap();
    assert!(body.get("dimensions").is_none(), "not asked for: {body}");
}

#[tokio::test]
async fn batches_keep_input_order_by_index_across_requests() {
    let server = MockServer::start().await;
    mount_ok(&server).await;
    let embedder = OpenAiEmbedder::new(OpenAiConfig {
        max_batch: 2,
        ..config(&server)
    })
    .unwrap();
    let texts = ["one", "three", "fivefive", "x", "a much longer sentence"];

    let out = embed_all(&embedder, &texts).await.unwrap();

    for (text, e) in texts.iter().zip(&out) {
        assert_eq!(e.vector(), vector_for(text).as_slice(), "{text}");
    }
    assert_eq!(request_count(&server).await, 3);
}

#[tokio::test]
async fn rate_limit_then_success_is_retried() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/embeddings"))
        .respond_with(openai_error(
            429,
            "Rate limit reached",
            "requests",
            "rate_limit_exceeded",
        ))
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&server)
        .await;
    mount_ok(&server).await;
    let embedder = OpenAiEmbedder::new(config(&server)).unwrap();

    let out = embedder.embed("hello").await.unwrap();

    assert_eq!(out.vector(), vector_for("hello").as_slice());
    assert_eq!(request_count(&server).await, 2);
}

#[tokio::test]
async fn exhausted_quota_is_not_retried() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/embeddings"))
        .respond_with(openai_error(
            429,
            "You exceeded your current quota",
            "insufficient_quota",
            "insufficient_quota",
        ))
        .mount(&server)
        .await;
    let embedder = OpenAiEmbedder::new(config(&server)).unwrap();

    let msg = message(&embedder.embed("hello").await.unwrap_err());

    assert!(msg.contains("quota exhausted"), "{msg}");
    assert_eq!(request_count(&server).await, 1);
}

#[tokio::test]
async fn server_errors_are_retried_then_reported() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/embeddings"))
        .respond_with(ResponseTemplate::new(500).set_body_string("upstream exploded"))
        .mount(&server)
        .await;
    let embedder = OpenAiEmbedder::new(config(&server)).unwrap();

    let msg = message(&embedder.embed("hello").await.unwrap_err());

    assert!(
        msg.contains("HTTP 500") && msg.contains("upstream exploded"),
        "{msg}"
    );
    assert!(msg.contains("gave up after 3 attempts"), "{msg}");
    assert_eq!(request_count(&server).await, 3);
}

#[tokio::test]
async fn a_slow_server_times_out() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/embeddings"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(response(&[(0, vec![1.0, 0.0, 0.0])]))
                .set_delay(Duration::from_secs(10)),
        )
        .mount(&server)
        .await;
    let embedder = OpenAiEmbedder::new(OpenAiConfig {
        timeout: Duration::from_millis(100),
        retry: RetryPolicy::NONE,
        ..config(&server)
    })
    .unwrap();

    let msg = message(&embedder.embed("hello").await.unwrap_err());

    assert!(
        msg.contains("did not answer within 100ms") && msg.contains("after 1 attempt)"),
        "{msg}"
    );
}

#[tokio::test]
async fn malformed_json_is_a_clear_permanent_error() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/embeddings"))
        .respond_with(ResponseTemplate::new(200).set_body_string("<html>proxy error</html>"))
        .mount(&server)
        .await;
    let embedder = OpenAiEmbedder::new(config(&server)).unwrap();

    let msg = message(&embedder.embed("hello").await.unwrap_err());

    assert!(
        msg.contains("malformed JSON") && msg.contains("<html>proxy error</html>"),
        "{msg}"
    );
    assert_eq!(request_count(&server).await, 1);
}

#[tokio::test]
async fn wrong_dimensions_are_a_dimension_mismatch() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/embeddings"))
        .respond_with(ResponseTemplate::new(200).set_body_json(response(&[(0, vec![0.5; 1536])])))
        .mount(&server)
        .await;
    let embedder = OpenAiEmbedder::new(config(&server)).unwrap();

    let err = embedder.embed("hello").await.unwrap_err();

    assert!(
        matches!(
            err,
            MemoryError::DimensionMismatch {
                got: 1536,
                expected: DIMS,
                ..
            }
        ),
        "{err:?}"
    );
}

#[tokio::test]
async fn missing_or_duplicate_indices_are_refused() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/embeddings"))
        .respond_with(ResponseTemplate::new(200).set_body_json(response(&[
            (0, vec![1.0, 0.0, 0.0]),
            (0, vec![0.0, 1.0, 0.0]),
        ])))
        .mount(&server)
        .await;
    let embedder = OpenAiEmbedder::new(config(&server)).unwrap();

    let msg = message(&embedder.embed_batch(&["a", "b"]).await.unwrap_err());

    assert!(msg.contains("duplicate or out-of-range index 0"), "{msg}");
}

#[tokio::test]
async fn a_rejected_key_is_permanent_and_never_echoed() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/embeddings"))
        .respond_with(openai_error(
            401,
            "Incorrect API key provided",
            "invalid_request_error",
            "invalid_api_key",
        ))
        .mount(&server)
        .await;
    let embedder = OpenAiEmbedder::new(config(&server)).unwrap();

    let err = embedder.embed("hello").await.unwrap_err();

    let msg = message(&err);
    assert!(msg.contains("rejected the API key (HTTP 401)"), "{msg}");
    assert!(!format!("{err:?} {embedder:?}").contains(KEY));
    assert_eq!(request_count(&server).await, 1);
}

#[tokio::test]
async fn an_unknown_model_is_permanent() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/embeddings"))
        .respond_with(openai_error(
            404,
            "The model `nope` does not exist",
            "invalid_request_error",
            "model_not_found",
        ))
        .mount(&server)
        .await;
    let embedder = OpenAiEmbedder::new(OpenAiConfig {
        model: "nope".into(),
        ..config(&server)
    })
    .unwrap();

    let msg = message(&embedder.embed("hello").await.unwrap_err());

    assert!(
        msg.contains("no model `nope`") && msg.contains("HTTP 404"),
        "{msg}"
    );
    assert_eq!(request_count(&server).await, 1);
}

#[tokio::test]
async fn a_server_that_is_down_says_so() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let embedder = OpenAiEmbedder::new(OpenAiConfig {
        base_url: format!("http://127.0.0.1:{port}/v1"),
        dimensions: Some(DIMS),
        retry: quick_retries(1),
        ..OpenAiConfig::default()
    })
    .unwrap();

    let msg = message(&embedder.embed("hello").await.unwrap_err());

    assert!(
        msg.contains(&format!(
            "cannot connect to http://127.0.0.1:{port}/v1/embeddings"
        )),
        "{msg}"
    );
    assert!(msg.contains("after 2 attempts"), "{msg}");
}

#[tokio::test]
async fn connect_discovers_dimensions_and_requested_dimensions_are_sent() {
    let server = MockServer::start().await;
    mount_ok(&server).await;

    let found = OpenAiEmbedder::connect(OpenAiConfig {
        dimensions: None,
        ..config(&server)
    })
    .await
    .unwrap();
    assert_eq!(found.dimensions(), DIMS);

    let shortened = OpenAiEmbedder::new(OpenAiConfig {
        request_dimensions: true,
        ..config(&server)
    })
    .unwrap();
    shortened.embed("hi").await.unwrap();
    let requests = server.received_requests().await.unwrap();
    let body: Value = requests.last().unwrap().body_json().unwrap();
    assert_eq!(body["dimensions"], json!(DIMS));

    let err = OpenAiEmbedder::connect(OpenAiConfig {
        dimensions: Some(1536),
        ..config(&server)
    })
    .await
    .unwrap_err();
    assert!(
        matches!(
            err,
            MemoryError::DimensionMismatch {
                got: 3,
                expected: 1536,
                ..
            }
        ),
        "{err:?}"
    );
}

#[tokio::test]
async fn servers_without_keys_get_no_key() {
    let server = MockServer::start().await;
    mount_ok(&server).await;
    let embedder = OpenAiEmbedder::new(OpenAiConfig {
        api_key: None,
        ..config(&server)
    })
    .unwrap();

    embedder.embed("hi").await.unwrap();

    let requests = server.received_requests().await.unwrap();
    let auth = requests[0]
        .headers
        .get("authorization")
        .map(|v| v.to_str().unwrap().trim().to_owned());
    assert!(matches!(auth.as_deref(), None | Some("Bearer")), "{auth:?}");
}

#[tokio::test]
async fn keeps_the_embedder_contract() {
    let server = MockServer::start().await;
    mount_ok(&server).await;
    let embedder = OpenAiEmbedder::new(OpenAiConfig {
        max_batch: 2,
        ..config(&server)
    })
    .unwrap();
    memory_core::testing::embedder_contract(&embedder).await;
}

/// `validate` says what is wrong with a config before anything is sent: `connect` on a bad
/// one never reaches the server.
#[tokio::test]
async fn validate_names_the_bad_setting_and_connect_sends_nothing() {
    let server = MockServer::start().await;
    mount_ok(&server).await;
    assert!(config(&server).validate().is_ok());
    let cases = [
        (
            OpenAiConfig {
                base_url: "api.openai.com/v1".into(),
                ..config(&server)
            },
            "OpenAI base_url",
        ),
        (
            OpenAiConfig {
                model: String::new(),
                ..config(&server)
            },
            "model",
        ),
        (
            OpenAiConfig {
                dimensions: None,
                request_dimensions: true,
                ..config(&server)
            },
            "OpenAI request_dimensions",
        ),
        (
            OpenAiConfig {
                timeout: Duration::ZERO,
                ..config(&server)
            },
            "timeout",
        ),
        (
            OpenAiConfig {
                max_batch: 0,
                ..config(&server)
            },
            "max_batch",
        ),
    ];
    for (bad, field) in cases {
        let e = bad.validate().unwrap_err();
        assert!(
            matches!(&e, MemoryError::InvalidInput { field: f, .. } if *f == field),
            "{field}: {e:?}"
        );
        assert!(e.to_string().contains("OpenAI"), "{e}");
        assert!(OpenAiEmbedder::connect(bad).await.is_err());
    }
    assert_eq!(request_count(&server).await, 0);
}
