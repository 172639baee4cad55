//! What the HTTP-backed parts (the reranker, web search) share: checking a configured URL,
//! and, with either feature, the client and one request's transport: the bearer key, the
//! timeout, the body, an error status quoted. Each caller says the failures its own way.

use crate::error::{Error, Result};

/// Checks that `url` is an `http://` or `https://` URL; the error, for `field`, says
/// "`url` is not an http:// or https:// URL" and then `more`.
pub(crate) fn check_url(field: &'static str, url: &str, more: &str) -> Result<()> {
    let url = url.trim();
    if !(url.starts_with("http://") || url.starts_with("https://")) || url.len() <= 8 {
        return Err(Error::invalid(
            field,
            format!("`{url}` is not an http:// or https:// URL{more}"),
        ));
    }
    Ok(())
}

/// A client whose requests give up after `timeout`.
#[cfg(any(feature = "rerank-http", feature = "web-search"))]
pub(crate) fn client(field: &'static str, timeout: std::time::Duration) -> Result<reqwest::Client> {
    reqwest::Client::builder()
        .timeout(timeout)
        .build()
        .map_err(|e| Error::invalid(field, memory_core::ErrorChain(&e).to_string()))
}

/// Why a request brought no usable answer.
#[cfg(any(feature = "rerank-http", feature = "web-search"))]
#[derive(Debug)]
pub(crate) enum Failure {
    /// No answer within the client's timeout.
    TimedOut,
    /// The server could not be reached.
    Unreachable(reqwest::Error),
    /// The answer broke off.
    BrokeOff(reqwest::Error),
    /// An error status, with the start of the answer's text.
    Status(reqwest::StatusCode, String),
}

/// Sends `request` (with `key` as a bearer token, if any); returns the body of a success.
#[cfg(any(feature = "rerank-http", feature = "web-search"))]
pub(crate) async fn send(
    mut request: reqwest::RequestBuilder,
    key: Option<&memory_core::Secret>,
) -> std::result::Result<Vec<u8>, Failure> {
    if let Some(key) = key {
        request = request.bearer_auth(key.expose());
    }
    let response = request.send().await.map_err(|e| {
        if e.is_timeout() {
            Failure::TimedOut
        } else {
            Failure::Unreachable(e)
        }
    })?;
    let status = response.status();
    let body = response.bytes().await.map_err(Failure::BrokeOff)?;
    if !status.is_success() {
        let text: String = String::from_utf8_lossy(&body).chars().take(200).collect();
        return Err(Failure::Status(status, text));
    }
    Ok(body.to_vec())
}
