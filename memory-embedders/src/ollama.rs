//! `OllamaEmbedder`: embeddings from an Ollama server's batch `/api/embed`, through ollama-rs.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use ollama_rs::Ollama;
use ollama_rs::error::OllamaError;
use ollama_rs::generation::embeddings::request::{EmbeddingsInput, GenerateEmbeddingsRequest};

use crate::retry::{Failure, RetryPolicy, snippet, with_retries};
use crate::{HttpEmbedder, embed_batch};
use memory_core::{Embedding, EmbeddingProvider, EmbeddingSpace};
use memory_core::{MemoryError, Result};

/// Settings for [`OllamaEmbedder`].
///
/// ```
/// use memory_embedders::OllamaConfig;
/// let config = OllamaConfig { base_url: "http://gpu-box:11434".into(), ..OllamaConfig::new("mxbai-embed-large") };
/// assert_eq!(config.dimensions, None); // discovered by `OllamaEmbedder::connect`
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OllamaConfig {
    /// Where Ollama listens (`http://localhost:11434`). Plain HTTP only: for an Ollama
    /// behind HTTPS, use the `openai` provider with `<base>/v1`.
    pub base_url: String,
    /// The embedding model as Ollama names it (`nomic-embed-text`).
    pub model: String,
    /// Vector length the model produces. `None` is discovered by
    /// [`OllamaEmbedder::connect`]; a response with any other length is a
    /// [`MemoryError::DimensionMismatch`].
    pub dimensions: Option<usize>,
    /// Limit for one HTTP request, including loading the model on first use.
    pub timeout: Duration,
    /// Most texts sent in one request.
    pub max_batch: usize,
    /// Retries of transient failures.
    pub retry: RetryPolicy,
}

impl OllamaConfig {
    /// Default settings for `model`, with dimensions left to discovery.
    pub fn new(model: impl Into<String>) -> Self {
        Self {
            model: model.into(),
            dimensions: None,
            ..Self::default()
        }
    }

    /// Checks the settings without contacting the server: a plain-HTTP URL, a model name,
    /// dimensions (when set), a timeout and a batch size above zero. Building an embedder
    /// calls it first.
    pub fn validate(&self) -> Result<()> {
        parse_base_url(&self.base_url)?;
        crate::check_common(
            "Ollama",
            &self.model,
            self.dimensions,
            self.timeout,
            self.max_batch,
        )
    }
}

impl Default for OllamaConfig {
    /// `nomic-embed-text` (768 dimensions) on `http://localhost:11434`, 60 s timeout,
    /// batches of 64, the default [`RetryPolicy`].
    fn default() -> Self {
        Self {
            base_url: "http://localhost:11434".into(),
            model: "nomic-embed-text".into(),
            dimensions: Some(768),
            timeout: Duration::from_secs(60),
            max_batch: 64,
            retry: RetryPolicy::default(),
        }
    }
}

/// Embeds texts with an Ollama server (`POST /api/embed`, one request per batch).
///
/// Its space is `ollama/<model>` with the configured or discovered dimensions.
#[derive(Clone)]
pub struct OllamaEmbedder {
    client: Ollama,
    space: Arc<EmbeddingSpace>,
    /// The normalised base URL, for messages.
    origin: String,
    config: OllamaConfig,
}

impl fmt::Debug for OllamaEmbedder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OllamaEmbedder")
            .field("space", &self.space)
            .field("origin", &self.origin)
            .finish_non_exhaustive()
    }
}

impl OllamaEmbedder {
    /// Provider name recorded in the embedding space.
    pub const PROVIDER: &'static str = "ollama";

    /// Builds the embedder without contacting the server; `config.dimensions` must be set.
    pub fn new(config: OllamaConfig) -> Result<Self> {
        let dims = config.dimensions.ok_or_else(|| {
            MemoryError::invalid(
                "Ollama dimensions",
                format!(
                    "not configured for model `{}`; set OllamaConfig::dimensions or use \
                     OllamaEmbedder::connect, which discovers them",
                    config.model
                ),
            )
        })?;
        Self::build(config, dims)
    }

    /// Builds the embedder and embeds one probe text, so a server that is down or a model
    /// that is not pulled fails here rather than on first use. Unset dimensions are taken
    /// from the probe's answer; set ones are checked against it.
    pub async fn connect(config: OllamaConfig) -> Result<Self> {
        let configured = config.dimensions;
        crate::connect(config, configured).await
    }
}

impl HttpEmbedder for OllamaEmbedder {
    type Config = OllamaConfig;

    fn build(config: Self::Config, dims: usize) -> Result<Self> {
        config.validate()?;
        let client = parse_base_url(&config.base_url)?;
        let origin = format!("Ollama at {}", client.url_str().trim_end_matches('/'));
        let space = Arc::new(EmbeddingSpace::new(
            Self::PROVIDER,
            config.model.clone(),
            dims,
        )?);
        Ok(Self {
            client,
            space,
            origin,
            config,
        })
    }

    /// One `/api/embed` call with retries; returns the raw vectors.
    async fn request(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        let input: Vec<String> = texts.iter().map(|t| (*t).to_owned()).collect();
        with_retries(
            Self::PROVIDER,
            &self.origin,
            &self.config.retry,
            self.config.timeout,
            || {
                let request = GenerateEmbeddingsRequest::new(
                    self.config.model.clone(),
                    EmbeddingsInput::Multiple(input.clone()),
                );
                async move {
                    match self.client.generate_embeddings(request).await {
                        Ok(response) => Ok(response.embeddings),
                        Err(e) => Err(self.classify(e)),
                    }
                }
            },
        )
        .await
    }

    fn origin(&self) -> &str {
        &self.origin
    }

    fn into_config(self) -> Self::Config {
        self.config
    }
}

impl OllamaEmbedder {
    /// Sorts an ollama-rs error into transient or permanent, with a message for people.
    ///
    /// ollama-rs reports a failed call as the response body without its HTTP status, so
    /// failures are told apart by Ollama's `{"error": "..."}` message: "not found" is a
    /// missing model, messages about bad input are permanent, anything else (overload,
    /// 429, 5xx) is retried.
    fn classify(&self, err: OllamaError) -> Failure {
        let origin = &self.origin;
        let model = &self.config.model;
        match err {
            OllamaError::ReqwestError(e) if e.is_connect() => Failure::transient(
                format!("cannot connect to {origin}: is Ollama running (`ollama serve`)?"),
                Some(Box::new(e)),
            ),
            OllamaError::ReqwestError(e) if e.is_timeout() => {
                Failure::transient(format!("{origin} timed out"), Some(Box::new(e)))
            }
            OllamaError::ReqwestError(e) if e.is_builder() => Failure::permanent(
                Self::PROVIDER,
                format!("cannot build a request for {origin}"),
                Some(Box::new(e)),
            ),
            OllamaError::ReqwestError(e) => {
                Failure::transient(format!("request to {origin} failed"), Some(Box::new(e)))
            }
            OllamaError::JsonError(e) => Failure::permanent(
                Self::PROVIDER,
                format!(
                    "{origin} answered with malformed JSON; expected \
                     {{\"embeddings\": [[numbers], ...]}}"
                ),
                Some(Box::new(e)),
            ),
            OllamaError::Other(body) => {
                let message = serde_json::from_str::<serde_json::Value>(&body)
                    .ok()
                    .and_then(|v| v.get("error").and_then(|m| m.as_str()).map(str::to_owned))
                    .unwrap_or_else(|| snippet(&body));
                let lower = message.to_lowercase();
                if lower.contains("not found") {
                    Failure::permanent(
                        Self::PROVIDER,
                        format!(
                            "model `{model}` is not available on {origin}: run `ollama pull \
                             {model}` there ({message})"
                        ),
                        None,
                    )
                } else if [
                    "does not support",
                    "invalid",
                    "required",
                    "exceeds",
                    "missing",
                ]
                .iter()
                .any(|k| lower.contains(k))
                {
                    Failure::permanent(
                        Self::PROVIDER,
                        format!("{origin} refused the request for model `{model}`: {message}"),
                        None,
                    )
                } else {
                    Failure::transient(format!("{origin} failed: {message}"), None)
                }
            }
            // The cause is said once, as the source.
            other => Failure::permanent(
                Self::PROVIDER,
                format!("{origin} failed"),
                Some(Box::new(other)),
            ),
        }
    }
}

/// Parses and checks a base URL into a client.
fn parse_base_url(base: &str) -> Result<Ollama> {
    let invalid = |problem: String| MemoryError::invalid("Ollama base_url", problem);
    let parse = |text: &str| {
        Ollama::try_new(text).map_err(|e| {
            invalid(format!(
                "`{base}` is not a URL ({e}); expected e.g. http://localhost:11434"
            ))
        })
    };
    let client = parse(base.trim())?;
    match client.url().scheme() {
        "http" => {}
        "https" => {
            return Err(invalid(format!(
                "`{base}` uses https, but the `ollama` provider speaks plain HTTP; use the \
                 `openai` provider with base URL `{}/v1` (Ollama's OpenAI-compatible API)",
                base.trim().trim_end_matches('/')
            )));
        }
        other => {
            return Err(invalid(format!(
                "`{base}` has scheme `{other}`; expected http://host:port"
            )));
        }
    }
    // ollama-rs appends "api/embed" to the URL text, so a path prefix needs its slash.
    if client.url().path().ends_with('/') {
        Ok(client)
    } else {
        parse(&format!("{}/", client.url_str()))
    }
}

#[async_trait]
impl EmbeddingProvider for OllamaEmbedder {
    fn space(&self) -> Arc<EmbeddingSpace> {
        Arc::clone(&self.space)
    }

    async fn embed_batch(&self, texts: &[&str]) -> Result<Vec<Embedding>> {
        embed_batch(self, texts).await
    }

    fn max_batch(&self) -> usize {
        self.config.max_batch
    }

    /// Ollama runs an embedding model with a context of 2,048 tokens unless told otherwise, and cuts a longer input: a longer text is embedded as passages of that many tokens' worth of bytes.
    fn window_bytes(&self) -> Option<usize> {
        Some(WINDOW_TOKENS * crate::BYTES_PER_TOKEN)
    }
}

/// Tokens one input may hold (see [`EmbeddingProvider::window_bytes`]).
const WINDOW_TOKENS: usize = 2048;
