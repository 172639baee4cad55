//! An HTTP reranker for the common `/rerank` APIs (cargo feature `rerank-http`). Cohere v2,
//! Jina, vLLM and Infinity take `{model, query, documents}` and answer `{results: [{index,
//! relevance_score}]}` ([`RerankApi::Cohere`]); text-embeddings-inference takes `{query,
//! texts}` and answers `[{index, score}]` ([`RerankApi::Tei`]).
//!
//! Each judged item's relevance score (0..=1) becomes its similarity, so hydrate scores it
//! again with recency and importance, in the reranker's order; items under `min_score` are
//! dropped. A timeout, an error status or an answer that is not a rerank result is an error,
//! which hydrate records as a degradation and answers with the scored order.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use memory_core::Secret;

use crate::error::{Error, Result};
#[cfg(feature = "rerank-http")]
use crate::http::Failure;
use crate::http::check_url;
use crate::provider::Reranker;
use crate::source::{SourceItem, SourceQuery};

/// The cargo feature that builds the HTTP reranker.
pub const RERANK_FEATURE: &str = "rerank-http";

/// Which request and answer shape the server speaks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RerankApi {
    /// `{model, query, documents}` -> `{results: [{index, relevance_score}]}`: Cohere v2
    /// (`/v2/rerank`), Jina (`/v1/rerank`), vLLM and Infinity (`/rerank`).
    #[default]
    Cohere,
    /// `{query, texts}` -> `[{index, score}]`: Hugging Face text-embeddings-inference.
    Tei,
}

impl RerankApi {
    /// Parses `cohere` (also `jina`, `vllm`) or `tei`.
    pub fn parse(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "cohere" | "jina" | "vllm" | "infinity" => Ok(Self::Cohere),
            "tei" => Ok(Self::Tei),
            other => Err(Error::invalid(
                "rerank api",
                format!(
                    "`{other}` is not one; expected `cohere` (also Jina, vLLM, Infinity) or `tei`"
                ),
            )),
        }
    }
}

/// How to reach a reranking server. `Debug` shows the key redacted.
#[derive(Clone, Debug, PartialEq)]
pub struct HttpRerankerConfig {
    /// The full endpoint, e.g. `https://api.cohere.com/v2/rerank` or `http://127.0.0.1:8080/rerank`.
    pub url: String,
    /// The model name (Cohere-shaped APIs need one; TEI serves one model and ignores it).
    pub model: Option<String>,
    /// The request and answer shape.
    pub api: RerankApi,
    /// Sent as `Authorization: Bearer ...` when set.
    pub api_key: Option<Secret>,
    /// How long one call may take.
    pub timeout: Duration,
    /// Judged items scoring under this (0..=1) are dropped.
    pub min_score: Option<f32>,
    /// At most this many items are sent per call; the rest follow the judged ones unchanged.
    pub max_documents: usize,
}

impl HttpRerankerConfig {
    /// A config for `url` with the defaults: Cohere shape, no model, no key, a 2 s timeout,
    /// no minimum score, 100 documents.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            model: None,
            api: RerankApi::Cohere,
            api_key: None,
            timeout: Duration::from_secs(2),
            min_score: None,
            max_documents: 100,
        }
    }

    /// Checks the config without contacting the server.
    pub fn validate(&self) -> Result<()> {
        check_url("rerank url", &self.url, "")?;
        if self.api == RerankApi::Cohere && self.model.as_deref().is_none_or(str::is_empty) {
            return Err(Error::invalid(
                "rerank model",
                "none given; Cohere-shaped rerank APIs need a model name (e.g. rerank-v3.5)",
            ));
        }
        if self.timeout.is_zero() {
            return Err(Error::invalid(
                "rerank timeout",
                "0; expected more than 0 s",
            ));
        }
        if let Some(m) = self.min_score
            && !(0.0..=1.0).contains(&m)
        {
            return Err(Error::invalid(
                "rerank min score",
                format!("{m}; expected a number from 0 to 1"),
            ));
        }
        if self.max_documents == 0 {
            return Err(Error::invalid(
                "rerank max documents",
                "0; expected at least 1",
            ));
        }
        Ok(())
    }
}

/// A [`Reranker`] calling a `/rerank` endpoint. See the module docs.
pub struct HttpReranker {
    config: HttpRerankerConfig,
    name: String,
    #[cfg(feature = "rerank-http")]
    client: reqwest::Client,
}

impl fmt::Debug for HttpReranker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpReranker")
            .field("name", &self.name)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl HttpReranker {
    /// A reranker for `config`, checked first. Without the `rerank-http` feature this is
    /// [`Error::Unavailable`] naming it.
    pub fn new(config: HttpRerankerConfig) -> Result<Self> {
        config.validate()?;
        let name = match &config.model {
            Some(m) if !m.is_empty() => format!("http:{m}"),
            _ => "http".to_owned(),
        };
        #[cfg(feature = "rerank-http")]
        {
            let client = crate::http::client("rerank client", config.timeout)?;
            Ok(Self {
                config,
                name,
                client,
            })
        }
        #[cfg(not(feature = "rerank-http"))]
        {
            let _ = (config, name);
            Err(Error::Unavailable {
                what: "the HTTP reranker",
                feature: RERANK_FEATURE,
            })
        }
    }

    fn failed(&self, message: impl Into<String>) -> Error {
        Error::source_failed(format!("reranker {}", self.name), message)
    }

    /// A failure caused by `cause`, which is kept as the source and not repeated.
    #[cfg(feature = "rerank-http")]
    fn failed_by(&self, message: impl Into<String>, cause: reqwest::Error) -> Error {
        Error::source_failed_by(format!("reranker {}", self.name), message, cause)
    }

    /// Asks the server to judge two documents and checks its answer; returns how many it
    /// judged. For health checks (`ava check`).
    pub async fn check(&self) -> Result<usize> {
        let documents = [
            "Ava remembers what users tell her.",
            "The weather is mild today.",
        ];
        let body = self.call("What does Ava remember?", &documents).await?;
        Ok(self.parse(&body, documents.len())?.len())
    }

    /// The endpoint it calls.
    pub fn url(&self) -> &str {
        self.config.url.trim()
    }

    /// The request body for these documents.
    #[cfg(feature = "rerank-http")]
    fn body(&self, query: &str, documents: &[&str]) -> serde_json::Value {
        match self.config.api {
            RerankApi::Cohere => serde_json::json!({
                "model": self.config.model,
                "query": query,
                "documents": documents,
                "top_n": documents.len(),
            }),
            RerankApi::Tei => serde_json::json!({
                "query": query,
                "texts": documents,
                "raw_scores": false,
                "truncate": true,
            }),
        }
    }

    /// `(index, score)` pairs from an answer, checked against `n` documents.
    fn parse(&self, body: &[u8], n: usize) -> Result<Vec<(usize, f32)>> {
        #[derive(serde::Deserialize)]
        struct CohereAnswer {
            results: Vec<CohereResult>,
        }
        #[derive(serde::Deserialize)]
        struct CohereResult {
            index: usize,
            relevance_score: f32,
        }
        #[derive(serde::Deserialize)]
        struct TeiResult {
            index: usize,
            score: f32,
        }
        let (pairs, expected): (Result<Vec<(usize, f32)>, _>, &str) = match self.config.api {
            RerankApi::Cohere => (
                serde_json::from_slice::<CohereAnswer>(body).map(|a| {
                    a.results
                        .into_iter()
                        .map(|r| (r.index, r.relevance_score))
                        .collect()
                }),
                "{\"results\": [{\"index\": n, \"relevance_score\": x}, ...]}",
            ),
            RerankApi::Tei => (
                serde_json::from_slice::<Vec<TeiResult>>(body)
                    .map(|a| a.into_iter().map(|r| (r.index, r.score)).collect()),
                "[{\"index\": n, \"score\": x}, ...]",
            ),
        };
        let pairs = pairs.map_err(|e| {
            self.failed(format!(
                "answered something that is not a rerank result ({e}); expected {expected}"
            ))
        })?;
        let mut seen = vec![false; n];
        for &(index, score) in &pairs {
            if index >= n || std::mem::replace(&mut seen[index], true) {
                return Err(self.failed(format!(
                    "answered index {index} for {n} documents (out of range or repeated)"
                )));
            }
            if !score.is_finite() {
                return Err(self.failed(format!("answered a score of {score} for index {index}")));
            }
        }
        Ok(pairs)
    }

    #[cfg(feature = "rerank-http")]
    async fn call(&self, query: &str, documents: &[&str]) -> Result<Vec<u8>> {
        let request = self
            .client
            .post(self.config.url.trim())
            .json(&self.body(query, documents));
        crate::http::send(request, self.config.api_key.as_ref())
            .await
            .map_err(|f| match f {
                Failure::TimedOut => {
                    self.failed(format!("did not answer within {:?}", self.config.timeout))
                }
                Failure::Unreachable(e) => self.failed_by(
                    format!("could not be reached at {}", self.config.url.trim()),
                    e,
                ),
                Failure::BrokeOff(e) => self.failed_by("broke off its answer", e),
                Failure::Status(status, text) => {
                    self.failed(format!("answered HTTP {status}: {text}"))
                }
            })
    }

    #[cfg(not(feature = "rerank-http"))]
    async fn call(&self, _query: &str, _documents: &[&str]) -> Result<Vec<u8>> {
        Err(Error::Unavailable {
            what: "the HTTP reranker",
            feature: RERANK_FEATURE,
        })
    }
}

#[async_trait]
impl Reranker for HttpReranker {
    fn name(&self) -> &str {
        &self.name
    }

    async fn rerank(
        &self,
        query: &SourceQuery<'_>,
        mut items: Vec<SourceItem>,
    ) -> Result<Vec<SourceItem>> {
        if items.is_empty() {
            return Ok(items);
        }
        let n = items.len().min(self.config.max_documents);
        let rest = items.split_off(n);
        let documents: Vec<&str> = items.iter().map(|i| i.content.as_str()).collect();
        let body = self.call(query.observation, &documents).await?;
        let mut judged = self.parse(&body, n)?;
        judged.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        let mut slots: Vec<Option<SourceItem>> = items.into_iter().map(Some).collect();
        let mut out = Vec::with_capacity(judged.len() + rest.len());
        for (index, score) in judged {
            // Taken either way: a judged item is kept or dropped, never left over.
            let Some(mut item) = slots[index].take() else {
                continue;
            };
            if self.config.min_score.is_none_or(|m| score >= m) {
                item.similarity = Some(score.clamp(0.0, 1.0));
                item.lifted_from = None;
                out.push(item);
            }
        }
        // Items the server did not judge (it may answer with fewer) keep their order, after
        // the judged ones; so do those beyond `max_documents`.
        out.extend(slots.into_iter().flatten());
        out.extend(rest);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs in `cargo test -p hydrate --lib` (features off; `.ci/run` does so): a build
    /// without the feature names it instead of failing later or silently doing nothing.
    #[cfg(not(feature = "rerank-http"))]
    #[test]
    fn without_the_feature_building_one_names_the_flag() {
        let config = HttpRerankerConfig {
            model: Some("m".into()),
            ..HttpRerankerConfig::new("http://127.0.0.1:1/rerank")
        };
        let err = HttpReranker::new(config).unwrap_err();
        assert!(
            matches!(
                err,
                Error::Unavailable {
                    feature: "rerank-http",
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(
            err.to_string().contains("cargo feature `rerank-http`"),
            "{err}"
        );
    }

    /// A bad config is refused first, with or without the feature.
    #[test]
    fn a_bad_config_is_refused_first() {
        let err = HttpReranker::new(HttpRerankerConfig::new("nope")).unwrap_err();
        assert!(
            matches!(
                err,
                Error::InvalidInput {
                    field: "rerank url",
                    ..
                }
            ),
            "{err:?}"
        );
    }
}
