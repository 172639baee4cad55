//! What the tests share: a store file in a temporary directory opened with the hashing
//! embedder (no model), and a loopback OpenAI-compatible chat server.

use ava_memory::{EmbedderChoice, EmbedderSettings, Location, Memory};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

/// A SQLite store file in its own temporary directory (removed on drop).
pub(crate) struct Store {
    pub(crate) dir: tempfile::TempDir,
}

impl Store {
    pub(crate) fn new() -> Self {
        Self {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    pub(crate) fn location(&self) -> Location {
        Location::Sqlite(self.dir.path().join("memories.db"))
    }

    /// The store opened as `ava --embedder hash` opens it.
    pub(crate) async fn open(&self) -> Memory {
        let settings = EmbedderSettings::default().with_choice(EmbedderChoice::Hash);
        Memory::open_with(&self.location(), &settings)
            .await
            .unwrap()
    }
}

/// An OpenAI chat completion whose answer is `content`.
pub(crate) use hydrate::testing::openai_answer as completion;

/// A loopback OpenAI-compatible server answering every chat completion with `answer`; its
/// API root is `{uri}/v1`.
pub(crate) async fn chat_server(answer: &str) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(200).set_body_json(completion(answer)))
        .mount(&server)
        .await;
    server
}

/// The text of every request the server received, in order (what the model was sent).
pub(crate) async fn requests(server: &MockServer) -> Vec<String> {
    server
        .received_requests()
        .await
        .unwrap_or_default()
        .iter()
        .map(|r| String::from_utf8_lossy(&r.body).into_owned())
        .collect()
}
