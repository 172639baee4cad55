//! Concrete embedding providers, each behind a cargo feature that only adds: Ollama
//! (`ollama`), any OpenAI-compatible server (`openai`), and all-MiniLM-L6-v2 run offline
//! with candle (`local`).
//!
//! Every provider implements the [`EmbeddingProvider` trait](memory_core::EmbeddingProvider),
//! reports its [embedding space](memory_core::EmbeddingSpace) (provider, model, dimensions), and
//! fails with [`MemoryError::Embedding`](memory_core::MemoryError#variant.Embedding) (server down,
//! model missing, malformed response, timeout) or
//! [`MemoryError::DimensionMismatch`](memory_core::MemoryError#variant.DimensionMismatch) (the
//! server answered with other dimensions than configured or first discovered).
//!
//! The model-directory helpers ([`resolve_model_dir`], [`ModelDir`]) need no feature, so a
//! build without `local` can still tell people where the model belongs and how to fetch it.
//!
//! ```no_run
//! # #[cfg(feature = "ollama")]
//! # async fn demo() -> memory_core::Result<()> {
//! use memory_core::EmbeddingProvider;
//! use memory_embedders::{OllamaConfig, OllamaEmbedder};
//! // Discovers the dimensions with one call and fails early if the model is not pulled.
//! let embedder = OllamaEmbedder::connect(OllamaConfig::new("nomic-embed-text")).await?;
//! let v = embedder.embed("Alice's cat is called Miso").await?;
//! # let _ = v; Ok(()) }
//! ```

mod model_dir;

/// The fewest UTF-8 bytes a token is taken to cover when a model's token window is turned
/// into a byte window ([`EmbeddingProvider::window_bytes`](memory_core::EmbeddingProvider::window_bytes)):
/// English runs at about four bytes a token, code and numbers nearer three, so a passage
/// this long is read whole.
#[cfg_attr(
    not(any(feature = "local", feature = "ollama", feature = "openai")),
    expect(dead_code, reason = "only the embedders use it")
)]
pub(crate) const BYTES_PER_TOKEN: usize = 3;

#[cfg(any(feature = "ollama", feature = "openai"))]
mod retry;

#[cfg(feature = "local")]
mod bert;
#[cfg(feature = "local")]
mod local;
#[cfg(feature = "ollama")]
mod ollama;
#[cfg(feature = "openai")]
mod openai;
#[cfg(feature = "local")]
mod threads;

pub use model_dir::{
    DEFAULT_MODEL_NAME, FETCH_MODEL_COMMAND, MODEL_DIR_ENV, MODEL_FILES, ModelDir, ModelDirSource,
    resolve_model_dir,
};
#[cfg(any(feature = "ollama", feature = "openai"))]
pub use retry::RetryPolicy;

#[cfg(feature = "local")]
pub use local::{LocalConfig, LocalEmbedder};
#[cfg(feature = "ollama")]
pub use ollama::{OllamaConfig, OllamaEmbedder};
#[cfg(feature = "openai")]
pub use openai::{ApiKey, OpenAiConfig, OpenAiEmbedder};
#[cfg(feature = "local")]
pub use threads::{THREADS_ENV, default_threads, settle_thread_count, threads_to_set};

#[cfg(any(feature = "ollama", feature = "openai", feature = "local"))]
use std::sync::Arc;

#[cfg(any(feature = "ollama", feature = "openai"))]
use memory_core::EmbeddingProvider;
#[cfg(any(feature = "ollama", feature = "openai", feature = "local"))]
use memory_core::{Embedding, EmbeddingSpace, MemoryError, Result};

/// Turns raw vectors from a provider into [`Embedding`]s of `space`, checking that there is
/// one per text and that each has the space's dimensions; `origin` names the server or
/// model directory in errors.
#[cfg(any(feature = "ollama", feature = "openai", feature = "local"))]
fn into_embeddings(
    space: &Arc<EmbeddingSpace>,
    origin: &str,
    texts: usize,
    vectors: Vec<Vec<f32>>,
) -> Result<Vec<Embedding>> {
    if vectors.len() != texts {
        return Err(MemoryError::embedding(
            space.provider.clone(),
            format!(
                "{origin} returned {} vectors for {texts} texts; expected exactly one per text",
                vectors.len()
            ),
        ));
    }
    vectors
        .into_iter()
        .map(|v| {
            if v.len() != space.dims {
                return Err(dimension_mismatch(space, origin, v.len()));
            }
            Embedding::new(Arc::clone(space), v)
        })
        .collect()
}

/// The error for a vector whose length is not the space's.
#[cfg(any(feature = "ollama", feature = "openai", feature = "local"))]
fn dimension_mismatch(space: &Arc<EmbeddingSpace>, origin: &str, got: usize) -> MemoryError {
    MemoryError::DimensionMismatch {
        got,
        expected: space.dims,
        space: Arc::clone(space),
        what: format!(
            "provider {} (model `{}` at {origin})",
            space.provider, space.model
        ),
    }
}

/// An embedder behind an HTTP API (Ollama, OpenAI-compatible): built for known
/// dimensions without contacting the server, then asked for raw vectors. [`connect`] and
/// [`embed_batch`] are what every such provider does with these.
#[cfg(any(feature = "ollama", feature = "openai"))]
trait HttpEmbedder: EmbeddingProvider + Sized {
    /// The provider's settings.
    type Config;

    /// Builds the embedder for vectors of `dims`, without contacting the server.
    fn build(config: Self::Config, dims: usize) -> Result<Self>;

    /// One request with retries; the raw vectors, in input order.
    fn request(&self, texts: &[&str]) -> impl Future<Output = Result<Vec<Vec<f32>>>> + Send;

    /// The server as messages name it.
    fn origin(&self) -> &str;

    /// Gives the settings back, to build again with discovered dimensions.
    fn into_config(self) -> Self::Config;
}

/// The checks every HTTP embedder's config shares; `who` names the provider in errors.
#[cfg(any(feature = "ollama", feature = "openai"))]
fn check_common(
    who: &str,
    model: &str,
    dimensions: Option<usize>,
    timeout: std::time::Duration,
    max_batch: usize,
) -> Result<()> {
    let invalid = |field: &'static str, problem: String| MemoryError::invalid(field, problem);
    if model.trim().is_empty() {
        return Err(invalid("model", format!("{who}: no model name given")));
    }
    if dimensions == Some(0) {
        return Err(invalid(
            "dimensions",
            format!("{who}: 0; leave them unset to discover them"),
        ));
    }
    if timeout.is_zero() {
        return Err(invalid(
            "timeout",
            format!("{who}: must be longer than zero"),
        ));
    }
    if max_batch == 0 {
        return Err(invalid("max_batch", format!("{who}: must be at least 1")));
    }
    Ok(())
}

/// Builds an HTTP embedder and embeds one probe text, so a server that is down or a model
/// it lacks fails here rather than on first use. Unset (`configured` is `None`) dimensions
/// are taken from the probe's answer; set ones are checked against it.
#[cfg(any(feature = "ollama", feature = "openai"))]
async fn connect<E: HttpEmbedder>(config: E::Config, configured: Option<usize>) -> Result<E> {
    // A placeholder length until the probe says; replaced below.
    let probe = E::build(config, configured.unwrap_or(1))?;
    let vectors = probe.request(&["dimension probe"]).await?;
    let dims = probe_dimensions(&probe.space(), probe.origin(), configured, vectors)?;
    if configured.is_some() {
        Ok(probe)
    } else {
        E::build(probe.into_config(), dims)
    }
}

/// [`EmbeddingProvider::embed_batch`] for an HTTP embedder: one request, its answer checked.
#[cfg(any(feature = "ollama", feature = "openai"))]
async fn embed_batch<E: HttpEmbedder>(embedder: &E, texts: &[&str]) -> Result<Vec<Embedding>> {
    if texts.is_empty() {
        return Ok(Vec::new());
    }
    let vectors = embedder.request(texts).await?;
    into_embeddings(&embedder.space(), embedder.origin(), texts.len(), vectors)
}

/// Checks the answer to a one-text probe and returns the dimensions it shows: exactly one
/// non-empty vector, of the `configured` length if there is one.
#[cfg(any(feature = "ollama", feature = "openai"))]
fn probe_dimensions(
    space: &Arc<EmbeddingSpace>,
    origin: &str,
    configured: Option<usize>,
    vectors: Vec<Vec<f32>>,
) -> Result<usize> {
    let [vector] = <[Vec<f32>; 1]>::try_from(vectors).map_err(|v| {
        MemoryError::embedding(
            space.provider.clone(),
            format!(
                "{origin} returned {} vectors for 1 probe text; expected exactly one",
                v.len()
            ),
        )
    })?;
    match configured {
        Some(dims) if dims != vector.len() => Err(dimension_mismatch(space, origin, vector.len())),
        _ if vector.is_empty() => Err(MemoryError::embedding(
            space.provider.clone(),
            format!(
                "{origin} returned an empty vector for model `{}`",
                space.model
            ),
        )),
        _ => Ok(vector.len()),
    }
}
