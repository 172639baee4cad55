//! A request body read whole up to a bound, the one rule `ava`'s HTTP servers share (MCP
//! over HTTP, the proxy, the inspector, the webhook); each says a refusal in its own format.
//! And the body they answer with ([`Body`]).

use std::convert::Infallible;

use bytes::Bytes;
use http::StatusCode;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;

/// A response body, as every listener of `ava` sends it.
pub(crate) type Body = BoxBody<Bytes, Infallible>;

/// Why a request body was not read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BodyError {
    /// It is longer than the bound.
    TooLarge,
    /// The connection failed while it was read.
    Unreadable,
}

impl BodyError {
    /// The status that says it: 413 or 400.
    pub(crate) fn status(self) -> StatusCode {
        match self {
            Self::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Self::Unreadable => StatusCode::BAD_REQUEST,
        }
    }
}

/// The whole of `body`, if it is at most `max` bytes.
pub(crate) async fn read_whole(body: Incoming, max: usize) -> Result<Bytes, BodyError> {
    match Limited::new(body, max).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(BodyError::TooLarge),
        Err(_) => Err(BodyError::Unreadable),
    }
}
