//! `OpenAiEmbedder`: embeddings from any OpenAI-compatible `/embeddings` endpoint (OpenAI,
//! vLLM, llama.cpp server, LM Studio, Ollama's `/v1`), through async-openai.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_openai::Client;
use async_openai::config::OpenAIConfig;
use async_openai::error::OpenAIError;
use async_openai::middleware::ReqwestService;
use async_openai::types::embeddings::{CreateEmbeddingRequest, EmbeddingInput};
use async_trait::async_trait;

use crate::retry::{Failure, RetryPolicy, snippet, with_retries};
use crate::{HttpEmbedder, embed_batch};
use memory_core::{Embedding, EmbeddingProvider, EmbeddingSpace};
use memory_core::{MemoryError, Result, Secret};

/// An API key: a [`Secret`] checked to fit an HTTP header. Its `Debug` is the secret's,
/// redacted, and it has no `Display`, so it cannot end up in logs by accident.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiKey(Secret);

impl ApiKey {
    /// Wraps a key; it must be printable ASCII without spaces, as an HTTP header demands.
    pub fn new(key: impl Into<String>) -> Result<Self> {
        let key = key.into();
        if key.is_empty() || !key.bytes().all(|b| b.is_ascii_graphic()) {
            // Never echo the key itself.
            return Err(MemoryError::invalid(
                "API key",
                format!(
                    "must be non-empty printable ASCII without spaces or line breaks (got {} \
                     characters that are not)",
                    key.chars().count()
                ),
            ));
        }
        Ok(Self(Secret::new(key)))
    }

    /// The key itself, for the `Authorization` header.
    pub fn expose(&self) -> &str {
        self.0.expose()
    }
}

/// Settings for [`OpenAiEmbedder`].
///
/// ```
/// use memory_embedders::{ApiKey, OpenAiConfig};
/// # fn demo() -> memory_core::Result<()> {
/// // A llama.cpp server on this machine: no key, dimensions discovered on connect.
/// let local = OpenAiConfig {
///     base_url: "http://127.0.0.1:8080/v1".into(),
///     ..OpenAiConfig::new("nomic-embed-text-v1.5")
/// };
/// let openai = OpenAiConfig { api_key: Some(ApiKey::new("sk-example")?), ..OpenAiConfig::default() };
/// assert!(!format!("{openai:?}").contains("sk-example"));
/// # let _ = local; Ok(()) }
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct OpenAiConfig {
    /// API root, up to and including the version (`https://api.openai.com/v1`);
    /// requests go to `<base_url>/embeddings`.
    pub base_url: String,
    /// Sent as `Authorization: Bearer <key>`; `None` for servers that want none.
    pub api_key: Option<ApiKey>,
    /// The embedding model (`text-embedding-3-small`).
    pub model: String,
    /// Vector length the model produces. `None` is discovered by
    /// [`OpenAiEmbedder::connect`]; a response with any other length is a
    /// [`MemoryError::DimensionMismatch`].
    pub dimensions: Option<usize>,
    /// Also send `dimensions` in each request, asking the server to shorten its vectors.
    /// Only `text-embedding-3` and later models support this; other servers may refuse it.
    pub request_dimensions: bool,
    /// Limit for one HTTP request.
    pub timeout: Duration,
    /// Most texts sent in one request (OpenAI accepts up to 2048).
    pub max_batch: usize,
    /// Retries of transient failures.
    pub retry: RetryPolicy,
}

impl OpenAiConfig {
    /// Default settings for `model`, with dimensions left to discovery.
    pub fn new(model: impl Into<String>) -> Self {
        Self {
            model: model.into(),
            dimensions: None,
            ..Self::default()
        }
    }

    /// Checks the settings without contacting the server: an http(s) URL, a model name,
    /// dimensions (when set), a timeout and a batch size above zero, and `request_dimensions`
    /// only with dimensions to request. Building an embedder calls it first.
    pub fn validate(&self) -> Result<()> {
        let base = self.base_url.trim().trim_end_matches('/');
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(MemoryError::invalid(
                "OpenAI base_url",
                format!("`{base}` is not an http(s) URL; expected e.g. https://api.openai.com/v1"),
            ));
        }
        if self.request_dimensions && self.dimensions.is_none() {
            return Err(MemoryError::invalid(
                "OpenAI request_dimensions",
                "is set, but no dimensions are configured to request",
            ));
        }
        crate::check_common(
            "OpenAI",
            &self.model,
            self.dimensions,
            self.timeout,
            self.max_batch,
        )
    }
}

impl Default for OpenAiConfig {
    /// `text-embedding-3-small` (1536 dimensions) at `https://api.openai.com/v1`, no key,
    /// 30 s timeout, batches of 256, the default [`RetryPolicy`].
    fn default() -> Self {
        Self {
            base_url: "https://api.openai.com/v1".into(),
            api_key: None,
            model: "text-embedding-3-small".into(),
            dimensions: Some(1536),
            request_dimensions: false,
            timeout: Duration::from_secs(30),
            max_batch: 256,
            retry: RetryPolicy::default(),
        }
    }
}

impl fmt::Debug for OpenAiConfig {
    /// Like a derived `Debug`, with the key redacted.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiConfig")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("model", &self.model)
            .field("dimensions", &self.dimensions)
            .field("request_dimensions", &self.request_dimensions)
            .field("timeout", &self.timeout)
            .field("max_batch", &self.max_batch)
            .field("retry", &self.retry)
            .finish()
    }
}

/// Embeds texts with an OpenAI-compatible server (`POST <base_url>/embeddings`, one request
/// per batch). Vectors are put back in input order by the `index` the server gives them.
///
/// Its space is `openai/<model>` with the configured or discovered dimensions. The key is
/// never part of any message or `Debug` output.
#[derive(Clone)]
pub struct OpenAiEmbedder {
    client: Client<OpenAIConfig>,
    space: Arc<EmbeddingSpace>,
    /// `<base_url>/embeddings`, for messages.
    origin: String,
    config: OpenAiConfig,
}

impl fmt::Debug for OpenAiEmbedder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiEmbedder")
            .field("space", &self.space)
            .field("origin", &self.origin)
            .finish_non_exhaustive()
    }
}

impl OpenAiEmbedder {
    /// Provider name recorded in the embedding space.
    pub const PROVIDER: &'static str = "openai";

    /// Builds the embedder without contacting the server; `config.dimensions` must be set.
    pub fn new(config: OpenAiConfig) -> Result<Self> {
        let dims = config.dimensions.ok_or_else(|| {
            MemoryError::invalid(
                "OpenAI dimensions",
                format!(
                    "not configured for model `{}`; set OpenAiConfig::dimensions or use \
                     OpenAiEmbedder::connect, which discovers them",
                    config.model
                ),
            )
        })?;
        Self::build(config, dims)
    }

    /// Builds the embedder and embeds one probe text, so an unreachable server, a rejected
    /// key or an unknown model fails here rather than on first use. Unset dimensions are
    /// taken from the probe's answer; set ones are checked against it.
    pub async fn connect(config: OpenAiConfig) -> Result<Self> {
        let configured = config.dimensions;
        crate::connect(config, configured).await
    }
}

impl HttpEmbedder for OpenAiEmbedder {
    type Config = OpenAiConfig;

    fn build(config: Self::Config, dims: usize) -> Result<Self> {
        config.validate()?;
        let base = config.base_url.trim().trim_end_matches('/');
        let space = Arc::new(EmbeddingSpace::new(
            Self::PROVIDER,
            config.model.clone(),
            dims,
        )?);
        // Every field set explicitly: async-openai's defaults read OPENAI_* variables, and
        // this provider takes its settings from the caller only.
        let openai = OpenAIConfig::new()
            .with_api_base(base)
            .with_api_key(
                config
                    .api_key
                    .as_ref()
                    .map(ApiKey::expose)
                    .unwrap_or_default(),
            )
            .with_org_id("")
            .with_project_id("");
        // A bare reqwest service: retries and timeouts are ours (`RetryPolicy`), not
        // async-openai's built-in retry layer, so the configured counts are what happens.
        let client = Client::with_config(openai).with_http_service(ReqwestService::default());
        let origin = format!("{base}/embeddings");
        Ok(Self {
            client,
            space,
            origin,
            config,
        })
    }

    /// One `/embeddings` call with retries; returns the raw vectors in input order.
    async fn request(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        let input: Vec<String> = texts.iter().map(|t| (*t).to_owned()).collect();
        let dimensions = if self.config.request_dimensions {
            u32::try_from(self.space.dims).ok()
        } else {
            None
        };
        let response = with_retries(
            Self::PROVIDER,
            &self.origin,
            &self.config.retry,
            self.config.timeout,
            || {
                let request = CreateEmbeddingRequest {
                    model: self.config.model.clone(),
                    input: EmbeddingInput::StringArray(input.clone()),
                    encoding_format: None,
                    user: None,
                    dimensions,
                };
                async move {
                    self.client
                        .embeddings()
                        .create(request)
                        .await
                        .map_err(|e| self.classify(e))
                }
            },
        )
        .await?;

        // Servers may answer out of order; `index` says which input each vector is for.
        let mut slots: Vec<Option<Vec<f32>>> = vec![None; texts.len()];
        for item in response.data {
            let i = item.index as usize;
            match slots.get_mut(i) {
                Some(slot @ None) => *slot = Some(item.embedding),
                _ => {
                    return Err(MemoryError::embedding(
                        Self::PROVIDER,
                        format!(
                            "{} answered with a duplicate or out-of-range index {i} for {} \
                             texts; expected each of 0..{} once",
                            self.origin,
                            texts.len(),
                            texts.len()
                        ),
                    ));
                }
            }
        }
        let answered = slots.iter().filter(|s| s.is_some()).count();
        slots.into_iter().collect::<Option<Vec<_>>>().ok_or_else(|| {
            MemoryError::embedding(
                Self::PROVIDER,
                format!(
                    "{} returned {answered} vectors for {} texts; expected exactly one per text",
                    self.origin,
                    texts.len()
                ),
            )
        })
    }

    fn origin(&self) -> &str {
        &self.origin
    }

    fn into_config(self) -> Self::Config {
        self.config
    }
}

impl OpenAiEmbedder {
    /// Sorts an async-openai error into transient or permanent, with a message for people.
    fn classify(&self, err: OpenAIError) -> Failure {
        let origin = &self.origin;
        let model = &self.config.model;
        match err {
            OpenAIError::ApiError(api) => {
                let status = api.status_code.as_u16();
                let detail = snippet(&api.api_error.message);
                let quota = api.api_error.r#type.as_deref() == Some("insufficient_quota");
                match status {
                    429 if quota => Failure::permanent(
                        Self::PROVIDER,
                        format!(
                            "{origin}: quota exhausted (HTTP 429 insufficient_quota): {detail}"
                        ),
                        None,
                    ),
                    429 => Failure::transient(
                        format!("{origin} is rate limiting (HTTP 429): {detail}"),
                        None,
                    ),
                    500..=599 => Failure::transient(
                        format!("{origin} failed with HTTP {status}: {detail}"),
                        None,
                    ),
                    401 | 403 => Failure::permanent(
                        Self::PROVIDER,
                        format!("{origin} rejected the API key (HTTP {status}): {detail}"),
                        None,
                    ),
                    404 => Failure::permanent(
                        Self::PROVIDER,
                        format!(
                            "{origin} has no model `{model}` or no embeddings endpoint (HTTP \
                             404): {detail}"
                        ),
                        None,
                    ),
                    _ => Failure::permanent(
                        Self::PROVIDER,
                        format!(
                            "{origin} refused the request for model `{model}` (HTTP {status}): {detail}"
                        ),
                        None,
                    ),
                }
            }
            OpenAIError::Reqwest(e) if e.is_connect() => Failure::transient(
                format!("cannot connect to {origin}: is the server running and the URL right?"),
                Some(Box::new(e)),
            ),
            OpenAIError::Reqwest(e) if e.is_timeout() => {
                Failure::transient(format!("{origin} timed out"), Some(Box::new(e)))
            }
            OpenAIError::Reqwest(e) if e.is_builder() => Failure::permanent(
                Self::PROVIDER,
                format!("cannot build a request for {origin}"),
                Some(Box::new(e)),
            ),
            OpenAIError::Reqwest(e) => {
                Failure::transient(format!("request to {origin} failed"), Some(Box::new(e)))
            }
            OpenAIError::JSONDeserialize(e, body) => Failure::permanent(
                Self::PROVIDER,
                format!(
                    "{origin} answered with malformed JSON; expected {{\"data\": \
                     [{{\"index\": 0, \"embedding\": [numbers]}}, ...]}}; body starts: {}",
                    snippet(&body)
                ),
                Some(Box::new(e)),
            ),
            other => Failure::permanent(
                Self::PROVIDER,
                format!("{origin} failed"),
                Some(Box::new(other)),
            ),
        }
    }
}

#[async_trait]
impl EmbeddingProvider for OpenAiEmbedder {
    fn space(&self) -> Arc<EmbeddingSpace> {
        Arc::clone(&self.space)
    }

    async fn embed_batch(&self, texts: &[&str]) -> Result<Vec<Embedding>> {
        embed_batch(self, texts).await
    }

    fn max_batch(&self) -> usize {
        self.config.max_batch
    }

    /// OpenAI's embedding models read at most 8,191 tokens and refuse a longer input: a longer text is embedded as passages of that many tokens' worth of bytes.
    fn window_bytes(&self) -> Option<usize> {
        Some(WINDOW_TOKENS * crate::BYTES_PER_TOKEN)
    }
}

/// Tokens one input may hold (see [`EmbeddingProvider::window_bytes`]).
const WINDOW_TOKENS: usize = 8191;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_redacted_and_checked_without_echoing_them() {
        let key = ApiKey::new("sk-very-secret").unwrap();
        assert_eq!(format!("{key:?}"), "ApiKey(Secret(<redacted>))");
        let config = OpenAiConfig {
            api_key: Some(key),
            ..OpenAiConfig::default()
        };
        let debug = format!("{config:?}");
        assert!(
            !debug.contains("sk-very-secret") && debug.contains("<redacted>"),
            "{debug}"
        );
        let err = ApiKey::new("sk-bad\nkey").unwrap_err().to_string();
        assert!(!err.contains("sk-bad"), "{err}");
        assert!(ApiKey::new("").is_err());
    }

    #[test]
    fn bad_settings_are_refused_before_any_request() {
        let err = OpenAiEmbedder::new(OpenAiConfig::new("m"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("connect"), "{err}");
        let bad_url = OpenAiConfig {
            base_url: "api.openai.com".into(),
            ..OpenAiConfig::default()
        };
        assert!(OpenAiEmbedder::new(bad_url).is_err());
        let zero = OpenAiConfig {
            max_batch: 0,
            ..OpenAiConfig::default()
        };
        assert!(OpenAiEmbedder::new(zero).is_err());
    }
}
