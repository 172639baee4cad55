//! What several front doors share: below every one of them, importing nothing of `ava`'s
//! own. An error told as one line ([`error_chain`], its [`Hint`] on a line of its own) or to
//! a client ([`client_error`]); a request body read whole (`body.rs`); the listener every HTTP
//! door runs and the signal every long-running command stops on (`listen.rs`); the dates a
//! person types (`dates.rs`); the log, for people or as JSON with identities hashed
//! (`logs.rs`); what a running `ava` counts, for Prometheus (`metrics.rs`).

pub(crate) mod body;
pub(crate) mod dates;
pub(crate) mod listen;
pub(crate) mod logs;
pub(crate) mod metrics;

use memory_core::MemoryError;

/// What to do about an error, shown on its own line after it (an outermost context).
#[derive(Debug)]
pub(crate) struct Hint(pub(crate) String);

impl std::fmt::Display for Hint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// An error and its causes on one line, as [`memory_core::ErrorChain`] prints them (each
/// said once), without the [`Hint`], which is shown on its own line.
pub(crate) fn error_chain(e: &anyhow::Error) -> String {
    let hint = e.downcast_ref::<Hint>().map(|h| h.0.as_str());
    memory_core::ErrorChain(e.as_ref())
        .parts()
        .filter(|part| Some(part.as_str()) != hint)
        .collect::<Vec<_>>()
        .join(": ")
}

/// What a client is told of `e`: the whole chain, except that a failure of the store or the
/// embedder ends at its own first line (`memory-sqlite failed`), with no file path, server
/// address or URL of ours; the server's log has the rest.
pub(crate) fn client_error(e: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in e.chain() {
        let inner = cause.downcast_ref::<MemoryError>();
        let text = match inner {
            Some(MemoryError::Backend { backend, .. }) => format!("{backend} failed"),
            Some(MemoryError::Embedding { provider, .. }) => {
                format!("embedding provider {provider} failed")
            }
            _ => cause.to_string(),
        };
        if !text.is_empty() && !parts.last().is_some_and(|last| last.contains(&text)) {
            parts.push(text);
        }
        if matches!(
            inner,
            Some(MemoryError::Backend { .. } | MemoryError::Embedding { .. })
        ) {
            parts.push("the details are in the server's log".to_owned());
            break;
        }
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use anyhow::anyhow;

    use super::*;

    #[test]
    fn a_client_is_told_what_failed_without_the_stores_path() {
        let inner = std::io::Error::other("memory store /srv/ava/secret.db is read-only here");
        let failed = MemoryError::Backend {
            backend: "memory-sqlite".to_owned(),
            message: String::new(),
            source: Some(Box::new(inner)),
        };
        let e = anyhow::Error::new(failed).context("could not store the memory");
        let told = client_error(&e);
        assert_eq!(
            told,
            "could not store the memory: memory-sqlite failed: the details are in the server's log"
        );
        assert!(error_chain(&e).contains("/srv/ava/secret.db"));
        let plain = anyhow!("`limit` is 0; expected 1 to 20").context("bad arguments");
        assert_eq!(client_error(&plain), error_chain(&plain));
    }
}
