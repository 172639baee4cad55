//! Web search as a context source (cargo feature `web-search`): a SearxNG-compatible JSON
//! API, `GET {url}/search?q=...&format=json`, answering `{"results": [{"url", "title",
//! "content"}, ...]}`. Each result becomes a web item with its URL as provenance (the
//! item's note, shown after its line). With an embedder, a result's similarity is the
//! cosine between the question and its title and snippet, so results compete with memories
//! for the budget on the same footing; without one they carry none and rank last.
//!
//! It runs under hydrate's deadline for the web kind like any source; a server that fails
//! or answers something else is an error naming the server and what was expected.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use memory_core::{EmbeddingProvider, Secret, cosine, embed_all};

use crate::error::{Error, Result};
#[cfg(feature = "web-search")]
use crate::http::Failure;
use crate::http::check_url;
use crate::source::{ContextSource, SourceItem, SourceOutput, SourceQuery};

/// The cargo feature that builds the web search source.
pub const WEB_FEATURE: &str = "web-search";

/// Longest text kept of one result (title and snippet), in bytes.
const MAX_RESULT_BYTES: usize = 600;

/// How to reach a SearxNG-compatible search server. `Debug` shows the key redacted.
#[derive(Clone, Debug, PartialEq)]
pub struct WebSearchConfig {
    /// The server's root, e.g. `http://127.0.0.1:8888` (`/search` is appended).
    pub url: String,
    /// How long one search may take (hydrate's deadline for the web kind also applies).
    pub timeout: Duration,
    /// At most this many results are used.
    pub max_results: usize,
    /// The `language` parameter, e.g. `en` (the server's default when unset).
    pub language: Option<String>,
    /// Sent as `Authorization: Bearer ...` when set (for a server behind a proxy).
    pub api_key: Option<Secret>,
}

impl WebSearchConfig {
    /// A config for the server at `url`: a 3 s timeout, 5 results.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            timeout: Duration::from_secs(3),
            max_results: 5,
            language: None,
            api_key: None,
        }
    }

    /// Checks the config without contacting the server.
    pub fn validate(&self) -> Result<()> {
        check_url("web search url", &self.url, " (the server's root)")?;
        if self.timeout.is_zero() {
            return Err(Error::invalid(
                "web search timeout",
                "0; expected more than 0 s",
            ));
        }
        if self.max_results == 0 {
            return Err(Error::invalid(
                "web search max results",
                "0; expected at least 1",
            ));
        }
        Ok(())
    }

    /// The search endpoint.
    fn endpoint(&self) -> String {
        format!("{}/search", self.url.trim().trim_end_matches('/'))
    }
}

/// A [`ContextSource`] for [`crate::SourceKind::Web`] over a SearxNG-compatible server.
pub struct WebSearchSource {
    config: WebSearchConfig,
    embedder: Option<Arc<dyn EmbeddingProvider>>,
    #[cfg(feature = "web-search")]
    client: reqwest::Client,
}

impl fmt::Debug for WebSearchSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WebSearchSource")
            .field("config", &self.config)
            .field("embedder", &self.embedder.as_ref().map(|e| e.space()))
            .finish_non_exhaustive()
    }
}

/// One result as the server gives it.
#[derive(serde::Deserialize)]
struct WebResult {
    url: String,
    #[serde(default)]
    title: String,
    #[serde(default)]
    content: String,
}

#[derive(serde::Deserialize)]
struct WebAnswer {
    results: Vec<WebResult>,
}

impl WebSearchSource {
    /// A source for `config`, checked first; `embedder` (the store's, if any) scores each
    /// result against the question. Without the `web-search` feature this is
    /// [`Error::Unavailable`] naming it.
    pub fn new(
        config: WebSearchConfig,
        embedder: Option<Arc<dyn EmbeddingProvider>>,
    ) -> Result<Self> {
        config.validate()?;
        #[cfg(feature = "web-search")]
        {
            let client = crate::http::client("web search client", config.timeout)?;
            Ok(Self {
                config,
                embedder,
                client,
            })
        }
        #[cfg(not(feature = "web-search"))]
        {
            let _ = (config, embedder);
            Err(Error::Unavailable {
                what: "web search",
                feature: WEB_FEATURE,
            })
        }
    }

    fn failed(&self, message: impl Into<String>) -> Error {
        Error::source_failed(self.name(), message)
    }

    /// A failure caused by `cause`, which is kept as the source and not repeated.
    #[cfg(feature = "web-search")]
    fn failed_by(&self, message: impl Into<String>, cause: reqwest::Error) -> Error {
        Error::source_failed_by(self.name(), message, cause)
    }

    /// Runs one search and checks the answer; returns how many results it gave. For
    /// health checks (`ava check`).
    pub async fn check(&self) -> Result<usize> {
        let body = self.call("long-term memory").await?;
        Ok(self.parse(&body)?.len())
    }

    /// The endpoint it calls.
    pub fn url(&self) -> String {
        self.config.endpoint()
    }

    /// The items of an answer: at most `max_results`, text cut to [`MAX_RESULT_BYTES`].
    fn parse(&self, body: &[u8]) -> Result<Vec<SourceItem>> {
        let answer: WebAnswer = serde_json::from_slice(body).map_err(|e| {
            self.failed(format!(
                "{} answered something that is not a search result ({e}); expected \
                 {{\"results\": [{{\"url\": ..., \"title\": ..., \"content\": ...}}, ...]}}",
                self.config.endpoint()
            ))
        })?;
        let mut seen = std::collections::HashSet::new();
        Ok(answer
            .results
            .into_iter()
            .filter(|r| !r.url.trim().is_empty() && seen.insert(r.url.clone()))
            .take(self.config.max_results)
            .map(|r| {
                let (title, content) = (r.title.trim(), r.content.trim());
                let text = match (title.is_empty(), content.is_empty()) {
                    (false, false) => format!("{title}: {content}"),
                    (false, true) => title.to_owned(),
                    _ => content.to_owned(),
                };
                SourceItem::text(r.url.clone(), cut(&text, MAX_RESULT_BYTES)).with_note(r.url)
            })
            .filter(|i| !i.content.is_empty())
            .collect())
    }

    #[cfg(feature = "web-search")]
    async fn call(&self, question: &str) -> Result<Vec<u8>> {
        let mut params = vec![("q", question), ("format", "json")];
        if let Some(lang) = &self.config.language {
            params.push(("language", lang.as_str()));
        }
        let request = self.client.get(self.config.endpoint()).query(&params);
        let endpoint = self.config.endpoint();
        crate::http::send(request, self.config.api_key.as_ref())
            .await
            .map_err(|f| {
                let message = match f {
                    Failure::TimedOut => {
                        format!("{endpoint} did not answer within {:?}", self.config.timeout)
                    }
                    Failure::Unreachable(e) => {
                        return self.failed_by(format!("{endpoint} could not be reached"), e);
                    }
                    Failure::BrokeOff(e) => {
                        return self.failed_by(format!("{endpoint} broke off its answer"), e);
                    }
                    Failure::Status(reqwest::StatusCode::FORBIDDEN, _) => format!(
                        "{endpoint} answered 403 Forbidden: SearxNG serves JSON only when its \
                         settings.yml lists it (search: formats: [html, json])"
                    ),
                    Failure::Status(status, text) => {
                        format!("{endpoint} answered HTTP {status}: {text}")
                    }
                };
                self.failed(message)
            })
    }

    #[cfg(not(feature = "web-search"))]
    async fn call(&self, _question: &str) -> Result<Vec<u8>> {
        Err(Error::Unavailable {
            what: "web search",
            feature: WEB_FEATURE,
        })
    }
}

/// `text` cut at a char boundary to at most `max` bytes, with `…` when cut.
fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", text[..end].trim_end())
}

#[async_trait]
impl ContextSource for WebSearchSource {
    fn name(&self) -> &str {
        "web search"
    }

    async fn fetch(&self, query: &SourceQuery<'_>, out: &mut SourceOutput) -> Result<()> {
        let body = self.call(query.observation).await?;
        let mut items = self.parse(&body)?;
        out.set_search("searxng");
        if let Some(embedder) = &self.embedder
            && !items.is_empty()
        {
            // The question's vector is shared with the memory searches.
            let q = query.embeddings.get(embedder.as_ref()).await?;
            let texts: Vec<&str> = items.iter().map(|i| i.content.as_str()).collect();
            let vectors = embed_all(embedder.as_ref(), &texts).await?;
            for (item, v) in items.iter_mut().zip(&vectors) {
                item.similarity = Some(cosine(q.vector(), v.vector()).clamp(0.0, 1.0));
            }
        }
        out.extend(items);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_results_are_cut_at_a_char_boundary() {
        let text = "é".repeat(400);
        let c = cut(&text, 601);
        assert!(
            c.len() <= 601 + '…'.len_utf8() && c.ends_with('…'),
            "{}",
            c.len()
        );
        assert_eq!(cut("short", 600), "short");
    }

    /// Runs in `cargo test -p hydrate --lib` (features off; `.ci/run` does so).
    #[cfg(not(feature = "web-search"))]
    #[test]
    fn without_the_feature_building_one_names_the_flag() {
        let err =
            WebSearchSource::new(WebSearchConfig::new("http://127.0.0.1:1"), None).unwrap_err();
        assert!(
            matches!(
                err,
                Error::Unavailable {
                    feature: "web-search",
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(
            err.to_string().contains("cargo feature `web-search`"),
            "{err}"
        );
    }

    #[test]
    fn a_bad_config_is_refused_first() {
        let err = WebSearchSource::new(WebSearchConfig::new("searx.local"), None).unwrap_err();
        assert!(
            matches!(
                err,
                Error::InvalidInput {
                    field: "web search url",
                    ..
                }
            ),
            "{err:?}"
        );
    }
}
