//! `OllamaEmbedder` (the real ollama-rs client) against a loopback server speaking Ollama's
//! `/api/embed`: success, batch order, retries, timeouts and every kind of failure.

// Test helpers outside #[test] fns may unwrap too: a failure is a test failure.
use std::time::Duration;

use memory_core::{EmbeddingProvider, MemoryError, embed_all};
use memory_embedders::{OllamaConfig, OllamaEmbedder, RetryPolicy};
use serde_json::{Value, json};
use wiremock::matchers::{body_partial_json, method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

const DIMS: usize = 4;

/// Fast retries so the tests stay quick.
fn quick_retries(max_retries: u32) -> RetryPolicy {
    RetryPolicy {
        max_retries,
        initial_backoff: Duration::from_millis(5),
        max_backoff: Duration::from_millis(20),
    }
}

fn config(server: &MockServer) -> OllamaConfig {
    OllamaConfig {
        base_url: server.uri(),
        model: "nomic-embed-text".into(),
        dimensions: Some(DIMS),
        timeout: Duration::from_secs(5),
        max_batch: 64,
        retry: quick_retries(2),
    }
}

/// A vector that encodes its text, so a test can tell which text a vector belongs to.
fn vector_for(text: &str) -> Vec<f32> {
    let n = text.len() as f32;
    vec![n, 1.0, -n, 0.5]
}

/// Answers like Ollama: one vector per input, in input order.
struct EchoEmbeddings;

impl Respond for EchoEmbeddings {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let body: Value = request.body_json().unwrap();
        let inputs: Vec<String> = match &body["input"] {
            Value::String(s) => vec![s.clone()],
            other => serde_json::from_value(other.clone()).unwrap(),
        };
        let embeddings: Vec<Vec<f32>> = inputs.iter().map(|t| vector_for(t)).collect();
        ResponseTemplate::new(200).set_body_json(json!({
            "model": body["model"],
            "embeddings": embeddings,
            "total_duration": 1000,
            "load_duration": 10,
            "prompt_eval_count": inputs.len(),
        }))
    }
}

async fn mount_echo(server: &MockServer) {
    Mock::given(method("POST"))
        .and(path("/api/embed"))
        .respond_with(EchoEmbeddings)
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
            assert_eq!(provider, "ollama");
            message.clone()
        }
        other => panic!("expected an Embedding error, got {other:?}"),
    }
}

#[tokio::test]
async fn embeds_a_batch_with_the_configured_model() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/api/embed"))
        .and(body_partial_json(
            json!({"model": "nomic-embed-text", "input": ["a cat", "a dog"]}),
        ))
        .respond_with(EchoEmbeddings)
        .expect(1)
        .mount(&server)
        .await;
    let embedder = OllamaEmbedder::new(config(&server)).unwrap();

    let out = embedder.embed_batch(&["a cat", "a dog"]).await.unwrap();

    assert_eq!(out.len(), 2);
    assert_eq!(out[0].vector(), vector_for("a cat").as_slice());
    let space = embedder.space();
    assert_eq!(
        (space.provider.as_str(), space.model.as_str(), space.dims),
        ("ollama", "nomic-embed-text", DIMS)
    );
    assert!(out.iter().all(|e| e.space() == &space));
}

#[tokio::test]
async fn batches_keep_input_order_across_requests() {
    let server = MockServer::start().await;
    mount_echo(&server).await;
    let embedder = OllamaEmbedder::new(OllamaConfig {
        max_batch: 2,
        ..config(&server)
    })
    .unwrap();
    let texts = ["one", "three", "fivefive", "", "a much longer sentence"];

    let out = embed_all(&embedder, &texts).await.unwrap();

    let got: Vec<&[f32]> = out.iter().map(|e| e.vector()).collect();
    let want: Vec<Vec<f32>> = texts.iter().map(|t| vector_for(t)).collect();
    assert_eq!(got, want.iter().map(Vec::as_slice).collect::<Vec<_>>());
    assert_eq!(
        request_count(&server).await,
        3,
        "5 texts in batches of at most 2"
    );
}

#[tokio::test]
async fn rate_limit_then_success_is_retried() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/api/embed"))
        .respond_with(
            ResponseTemplate::new(429).set_body_json(json!({"error": "too many requests"})),
        )
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&server)
        .await;
    mount_echo(&server).await;
    let embedder = OllamaEmbedder::new(config(&server)).unwrap();

    let out = embedder.embed("hello").await.unwrap();

    assert_eq!(out.vector(), vector_for("hello").as_slice());
    assert_eq!(request_count(&server).await, 2);
}

#[tokio::test]
async fn server_errors_are_retried_then_reported() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/api/embed"))
        .respond_with(
            ResponseTemplate::new(500)
                .set_body_json(json!({"error": "llama runner process has terminated"})),
        )
        .mount(&server)
        .await;
    let embedder = OllamaEmbedder::new(config(&server)).unwrap();

    let err = embedder.embed("hello").await.unwrap_err();

    let msg = message(&err);
    assert!(msg.contains("llama runner process has terminated"), "{msg}");
    assert!(msg.contains("gave up after 3 attempts"), "{msg}");
    assert_eq!(request_count(&server).await, 3, "1 try + 2 retries");
}

#[tokio::test]
async fn a_slow_server_times_out() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/api/embed"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(json!({"embeddings": [[0.0, 0.0, 0.0, 1.0]]}))
                .set_delay(Duration::from_secs(10)),
        )
        .mount(&server)
        .await;
    let embedder = OllamaEmbedder::new(OllamaConfig {
        timeout: Duration::from_millis(100),
        retry: quick_retries(1),
        ..config(&server)
    })
    .unwrap();

    let err = embedder.embed("hello").await.unwrap_err();

    let msg = message(&err);
    assert!(msg.contains("did not answer within 100ms"), "{msg}");
    assert!(msg.contains("gave up after 2 attempts"), "{msg}");
}

#[tokio::test]
async fn malformed_json_is_a_clear_permanent_error() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/api/embed"))
        .respond_with(ResponseTemplate::new(200).set_body_string("{\"embeddings\": [[0.1, 0.2"))
        .mount(&server)
        .await;
    let embedder = OllamaEmbedder::new(config(&server)).unwrap();

    let err = embedder.embed("hello").await.unwrap_err();

    let msg = message(&err);
    assert!(
        msg.contains("malformed JSON") && msg.contains("\"embeddings\""),
        "{msg}"
    );
    assert_eq!(
        request_count(&server).await,
        1,
        "malformed answers are not retried"
    );
}

#[tokio::test]
async fn wrong_dimensions_are_a_dimension_mismatch() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/api/embed"))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(json!({"embeddings": [[0.1, 0.2, 0.3]]})),
        )
        .mount(&server)
        .await;
    let embedder = OllamaEmbedder::new(config(&server)).unwrap();

    let err = embedder.embed("hello").await.unwrap_err();

    assert!(
        matches!(
            err,
            MemoryError::DimensionMismatch {
                got: 3,
                expected: DIMS,
                ..
            }
        ),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains("3 dimensions") && msg.contains("nomic-embed-text"),
        "{msg}"
    );
}

#[tokio::test]
async fn a_wrong_number_of_vectors_is_refused() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/api/embed"))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(json!({"embeddings": [[0.1, 0.2, 0.3, 0.4]]})),
        )
        .mount(&server)
        .await;
    let embedder = OllamaEmbedder::new(config(&server)).unwrap();

    let err = embedder.embed_batch(&["a", "b"]).await.unwrap_err();

    let msg = message(&err);
    assert!(msg.contains("returned 1 vectors for 2 texts"), "{msg}");
}

#[tokio::test]
async fn a_missing_model_names_the_pull_command_and_is_not_retried() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/api/embed"))
        .respond_with(ResponseTemplate::new(404).set_body_json(
            json!({"error": "model \"nomic-embed-text\" not found, try pulling it first"}),
        ))
        .mount(&server)
        .await;
    let embedder = OllamaEmbedder::new(config(&server)).unwrap();

    let err = embedder.embed("hello").await.unwrap_err();

    let msg = message(&err);
    assert!(msg.contains("ollama pull nomic-embed-text"), "{msg}");
    assert_eq!(request_count(&server).await, 1);
}

#[tokio::test]
async fn a_server_that_is_down_says_so() {
    // Bind a loopback port, then free it: nothing listens there any more.
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let embedder = OllamaEmbedder::new(OllamaConfig {
        base_url: format!("http://127.0.0.1:{port}"),
        dimensions: Some(DIMS),
        retry: quick_retries(1),
        ..OllamaConfig::default()
    })
    .unwrap();

    let err = embedder.embed("hello").await.unwrap_err();

    let msg = message(&err);
    assert!(
        msg.contains("cannot connect to Ollama at http://127.0.0.1"),
        "{msg}"
    );
    assert!(
        msg.contains("ollama serve") && msg.contains("after 2 attempts"),
        "{msg}"
    );
}

#[tokio::test]
async fn connect_discovers_dimensions_and_checks_configured_ones() {
    let server = MockServer::start().await;
    mount_echo(&server).await;

    let found = OllamaEmbedder::connect(OllamaConfig {
        dimensions: None,
        ..config(&server)
    })
    .await
    .unwrap();
    assert_eq!(found.dimensions(), DIMS);

    let err = OllamaEmbedder::connect(OllamaConfig {
        dimensions: Some(768),
        ..config(&server)
    })
    .await
    .unwrap_err();
    assert!(
        matches!(
            err,
            MemoryError::DimensionMismatch {
                got: 4,
                expected: 768,
                ..
            }
        ),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_base_url_with_a_path_prefix_is_joined_properly() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/ollama/api/embed"))
        .respond_with(EchoEmbeddings)
        .mount(&server)
        .await;
    let embedder = OllamaEmbedder::new(OllamaConfig {
        base_url: format!("{}/ollama", server.uri()),
        ..config(&server)
    })
    .unwrap();

    let out = embedder.embed("hi").await.unwrap();

    assert_eq!(out.vector(), vector_for("hi").as_slice());
}

#[test]
fn bad_settings_are_refused_before_any_request() {
    let err = OllamaEmbedder::new(OllamaConfig::new("mxbai-embed-large"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("OllamaEmbedder::connect"), "{err}");
    let https = OllamaConfig {
        base_url: "https://ollama.example".into(),
        ..OllamaConfig::default()
    };
    let err = OllamaEmbedder::new(https).unwrap_err().to_string();
    assert!(err.contains("https://ollama.example/v1"), "{err}");
    let garbage = OllamaConfig {
        base_url: "not a url".into(),
        ..OllamaConfig::default()
    };
    assert!(OllamaEmbedder::new(garbage).is_err());
    assert!(
        OllamaEmbedder::new(OllamaConfig {
            max_batch: 0,
            ..OllamaConfig::default()
        })
        .is_err()
    );
}

#[tokio::test]
async fn keeps_the_embedder_contract() {
    let server = MockServer::start().await;
    mount_echo(&server).await;
    let embedder = OllamaEmbedder::new(OllamaConfig {
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
    mount_echo(&server).await;
    assert!(config(&server).validate().is_ok());
    let cases = [
        (
            OllamaConfig {
                model: " ".into(),
                ..config(&server)
            },
            "model",
        ),
        (
            OllamaConfig {
                dimensions: Some(0),
                ..config(&server)
            },
            "dimensions",
        ),
        (
            OllamaConfig {
                timeout: Duration::ZERO,
                ..config(&server)
            },
            "timeout",
        ),
        (
            OllamaConfig {
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
        assert!(e.to_string().contains("Ollama"), "{e}");
        assert!(OllamaEmbedder::connect(bad).await.is_err());
    }
    assert_eq!(request_count(&server).await, 0);
}
