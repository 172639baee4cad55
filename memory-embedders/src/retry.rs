//! Retries with exponential backoff and per-attempt timeouts, shared by the HTTP providers.

use std::collections::hash_map::RandomState;
use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

use memory_core::{BoxError, MemoryError, Result};

/// How often and how patiently an HTTP provider retries transient failures: rate limits
/// (429), server errors (5xx), refused connections and timeouts.
///
/// Waits grow as `initial_backoff × 2ⁿ`, capped at `max_backoff`, with the upper half
/// randomised so many clients do not retry in lockstep. Permanent failures (a missing
/// model, a rejected key, malformed JSON, wrong dimensions) are never retried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first attempt; 0 tries once.
    pub max_retries: u32,
    /// Wait before the first retry.
    pub initial_backoff: Duration,
    /// Longest single wait.
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    /// 3 retries, waiting about 0.25 s, 0.5 s and 1 s.
    fn default() -> Self {
        Self {
            max_retries: 3,
            initial_backoff: Duration::from_millis(250),
            max_backoff: Duration::from_secs(8),
        }
    }
}

impl RetryPolicy {
    /// Try once, never retry.
    pub const NONE: Self = Self {
        max_retries: 0,
        initial_backoff: Duration::ZERO,
        max_backoff: Duration::ZERO,
    };

    /// The longest wait before retry number `retry` (0-based): `initial_backoff × 2^retry`,
    /// capped at `max_backoff`. The actual wait is between half of this and all of it.
    pub fn backoff(&self, retry: u32) -> Duration {
        self.initial_backoff
            .saturating_mul(2u32.saturating_pow(retry))
            .min(self.max_backoff)
    }

    fn jittered(&self, retry: u32) -> Duration {
        let full = self.backoff(retry);
        let half = full / 2;
        // A fresh RandomState is randomly keyed: enough randomness for jitter, no extra crate.
        let r = RandomState::new().build_hasher().finish();
        let nanos = u64::try_from(half.as_nanos()).unwrap_or(u64::MAX);
        half + Duration::from_nanos(if nanos == 0 { 0 } else { r % (nanos + 1) })
    }
}

/// Why one attempt failed.
#[derive(Debug)]
pub(crate) enum Failure {
    /// Worth another try (429, 5xx, connection refused, timeout).
    Transient {
        /// What went wrong, for people.
        message: String,
        /// The underlying error, if any.
        source: Option<BoxError>,
    },
    /// Retrying cannot help; returned as is.
    Permanent(MemoryError),
}

impl Failure {
    pub(crate) fn transient(message: impl Into<String>, source: Option<BoxError>) -> Self {
        Self::Transient {
            message: message.into(),
            source,
        }
    }

    pub(crate) fn permanent(
        provider: &str,
        message: impl Into<String>,
        source: Option<BoxError>,
    ) -> Self {
        Self::Permanent(MemoryError::Embedding {
            provider: provider.to_owned(),
            message: message.into(),
            source,
        })
    }
}

/// Runs `attempt` until it succeeds, fails permanently, or `policy` runs out of retries.
/// Each attempt is cut off after `timeout`, which counts as a transient failure.
pub(crate) async fn with_retries<T, F, Fut>(
    provider: &str,
    origin: &str,
    policy: &RetryPolicy,
    timeout: Duration,
    mut attempt: F,
) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Failure>>,
{
    let mut retry = 0u32;
    loop {
        let failure = match tokio::time::timeout(timeout, attempt()).await {
            Ok(Ok(value)) => return Ok(value),
            Ok(Err(failure)) => failure,
            Err(_) => Failure::transient(
                format!("{origin} did not answer within {timeout:?} (the configured timeout)"),
                None,
            ),
        };
        match failure {
            Failure::Permanent(err) => return Err(err),
            Failure::Transient { message, source } if retry >= policy.max_retries => {
                let attempts = retry + 1;
                let plural = if attempts == 1 { "" } else { "s" };
                return Err(MemoryError::Embedding {
                    provider: provider.to_owned(),
                    message: format!("{message} (gave up after {attempts} attempt{plural})"),
                    source,
                });
            }
            Failure::Transient { .. } => {
                tokio::time::sleep(policy.jittered(retry)).await;
                retry += 1;
            }
        }
    }
}

/// Cuts a response body down for an error message.
pub(crate) fn snippet(body: &str) -> String {
    const MAX: usize = 160;
    let body = body.trim();
    match body.char_indices().nth(MAX) {
        Some((end, _)) => format!("{}…", &body[..end]),
        None => body.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_caps() {
        let p = RetryPolicy {
            max_retries: 5,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_millis(500),
        };
        let waits: Vec<_> = (0..5).map(|r| p.backoff(r).as_millis()).collect();
        assert_eq!(waits, [100, 200, 400, 500, 500]);
        for r in 0..5 {
            let j = p.jittered(r);
            assert!(j >= p.backoff(r) / 2 && j <= p.backoff(r), "{j:?}");
        }
        assert_eq!(RetryPolicy::NONE.jittered(3), Duration::ZERO);
    }

    #[test]
    fn snippets_are_short_and_cut_on_char_boundaries() {
        assert_eq!(snippet("  short "), "short");
        let long = "é".repeat(500);
        let s = snippet(&long);
        assert_eq!(s.chars().count(), 161);
        assert!(s.ends_with('…'));
    }

    #[tokio::test]
    async fn transient_failures_are_retried_then_reported_with_the_count() {
        let policy = RetryPolicy {
            max_retries: 2,
            initial_backoff: Duration::from_millis(1),
            max_backoff: Duration::from_millis(2),
        };
        let mut calls = 0;
        let err = with_retries("p", "server", &policy, Duration::from_secs(5), || {
            calls += 1;
            async { Err::<(), _>(Failure::transient("HTTP 503", None)) }
        })
        .await
        .unwrap_err()
        .to_string();
        assert_eq!(calls, 3);
        assert!(
            err.contains("HTTP 503") && err.contains("after 3 attempts"),
            "{err}"
        );

        let mut calls = 0;
        let ok = with_retries("p", "server", &policy, Duration::from_secs(5), || {
            calls += 1;
            let n = calls;
            async move {
                if n < 2 {
                    Err(Failure::transient("429", None))
                } else {
                    Ok(n)
                }
            }
        })
        .await
        .unwrap();
        assert_eq!(ok, 2);
    }

    #[tokio::test]
    async fn permanent_failures_are_not_retried() {
        let mut calls = 0;
        let err = with_retries(
            "p",
            "server",
            &RetryPolicy::default(),
            Duration::from_secs(5),
            || {
                calls += 1;
                async { Err::<(), _>(Failure::permanent("p", "model missing", None)) }
            },
        )
        .await
        .unwrap_err();
        assert_eq!(calls, 1);
        assert!(matches!(err, MemoryError::Embedding { .. }));
    }
}
