//! Records: small notes a store keeps about a scope's use beside its memories (the explain
//! report of each prompt built for it), the newest few of each kind (`MemoryBackend::keep_record`).

use serde::{Deserialize, Serialize};

use crate::entry::MemoryId;
use crate::error::{MemoryError, Result};
use crate::time::Timestamp;

/// Longest record body accepted, in bytes (an explain report is a few tens of KB).
pub const MAX_RECORD_BYTES: usize = 256 * 1024;

/// Longest record kind accepted, in bytes.
pub const MAX_RECORD_KIND_BYTES: usize = 64;

/// The largest ring: most records of one kind a scope keeps.
pub const MAX_RECORDS_KEPT: usize = 1000;

/// Most memories one record may name as quoted ([`Record::quoting`]).
pub const MAX_RECORD_QUOTES: usize = 1000;

/// One record of a scope: what it is, when it happened, and what its writer noted.
///
/// Not a memory: never searched, counted, exported or pruned; a scope keeps the newest few
/// of each kind ([`crate::MemoryBackend::keep_record`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// What it is, e.g. `prompt`: each kind is a ring of its own. 1 to
    /// [`MAX_RECORD_KIND_BYTES`] bytes of lowercase ASCII letters, digits, `-`, `_`, `.`, `:`.
    pub kind: String,
    /// When what it records happened: the newest records are those with the latest `at`.
    pub at: Timestamp,
    /// The note itself, JSON or text as its writer chose: at most [`MAX_RECORD_BYTES`]
    /// bytes, no NUL character.
    pub body: String,
    /// The memories of the scope whose words the record quotes (a prompt's recalled
    /// memories): deleting one of them removes the record, and so does pruning one. Empty
    /// when the writer did not say: such a record is removed by the deletion of any memory
    /// of its scope, since it may quote any (see [`crate::MemoryBackend::keep_record`]).
    /// At most [`MAX_RECORD_QUOTES`]; absent from records kept before it existed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub quotes: Vec<MemoryId>,
}

impl Record {
    /// A record of `kind` at `at` holding `body`.
    pub fn new(kind: impl Into<String>, at: Timestamp, body: impl Into<String>) -> Self {
        Self {
            kind: kind.into(),
            at,
            body: body.into(),
            quotes: Vec::new(),
        }
    }

    /// The record, naming `ids` as the memories it quotes (see [`Record::quotes`]); each
    /// named once, in the order first given.
    #[must_use]
    pub fn quoting(mut self, ids: impl IntoIterator<Item = MemoryId>) -> Self {
        for id in ids {
            if !self.quotes.contains(&id) {
                self.quotes.push(id);
            }
        }
        self
    }

    /// Checks the record, and a ring of `keep` (1 to [`MAX_RECORDS_KEPT`]), before a backend
    /// keeps it.
    pub fn validate(&self, keep: usize) -> Result<()> {
        check_record_kind(&self.kind)?;
        let n = self.body.len();
        if n > MAX_RECORD_BYTES {
            return Err(MemoryError::invalid(
                "record body",
                format!("is {n} bytes long, at most {MAX_RECORD_BYTES} bytes are accepted"),
            ));
        }
        if self.body.contains('\0') {
            return Err(MemoryError::invalid(
                "record body",
                "contains a NUL character",
            ));
        }
        if self.quotes.len() > MAX_RECORD_QUOTES {
            return Err(MemoryError::invalid(
                "record quotes",
                format!(
                    "names {} memories, at most {MAX_RECORD_QUOTES} are accepted",
                    self.quotes.len()
                ),
            ));
        }
        if keep == 0 || keep > MAX_RECORDS_KEPT {
            return Err(MemoryError::invalid(
                "records kept",
                format!("{keep}; expected 1 to {MAX_RECORDS_KEPT}"),
            ));
        }
        Ok(())
    }
}

/// Checks a record kind (see [`Record::kind`]).
pub fn check_record_kind(kind: &str) -> Result<()> {
    let fine = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || "-_.:".contains(c);
    if kind.is_empty() || kind.len() > MAX_RECORD_KIND_BYTES || !kind.chars().all(fine) {
        return Err(MemoryError::invalid(
            "record kind",
            format!(
                "{kind:?}; expected 1 to {MAX_RECORD_KIND_BYTES} bytes of lowercase letters, \
                 digits, `-`, `_`, `.` and `:`"
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use async_trait::async_trait;

    use super::*;
    use crate::{
        BackendInfo, Capabilities, Capability, Filter, Limits, MemoryBackend, MemoryEntry,
        MemoryId, MemoryPatch, NewMemory, PrunePolicy, PruneReport, Scope, ScoredMemory,
        SearchRequest, Topology,
    };

    /// A backend of the required methods only, each refusing: what a store that keeps no
    /// records and takes no leases inherits.
    #[derive(Debug)]
    struct Bare;

    fn no<T>() -> Result<T> {
        Err(MemoryError::invalid("bare", "does nothing"))
    }

    #[async_trait]
    impl MemoryBackend for Bare {
        fn info(&self) -> BackendInfo {
            BackendInfo {
                name: "bare".into(),
                location: None,
                topology: Topology::InProcess,
                durable: false,
                embedding_space: None,
                limits: Limits::default(),
            }
        }
        fn capabilities(&self) -> Capabilities {
            Capabilities::none()
        }
        async fn store_batch(&self, _: &Scope, _: Vec<NewMemory>) -> Result<Vec<MemoryEntry>> {
            no()
        }
        async fn get(&self, _: &Scope, _: MemoryId) -> Result<MemoryEntry> {
            no()
        }
        async fn search(&self, _: &Scope, _: &SearchRequest) -> Result<Vec<ScoredMemory>> {
            no()
        }
        async fn recent(&self, _: &Scope, _: usize, _: &Filter) -> Result<Vec<MemoryEntry>> {
            no()
        }
        async fn update(&self, _: &Scope, _: MemoryId, _: MemoryPatch) -> Result<MemoryEntry> {
            no()
        }
        async fn delete(&self, _: &Scope, _: MemoryId) -> Result<()> {
            no()
        }
        async fn delete_scope(&self, _: &Scope) -> Result<u64> {
            no()
        }
        async fn prune(&self, _: &Scope, _: &PrunePolicy) -> Result<PruneReport> {
            no()
        }
        async fn count(&self, _: &Scope) -> Result<u64> {
            no()
        }
        async fn scopes(&self, _: Option<&str>, _: Option<&str>) -> Result<Vec<Scope>> {
            no()
        }
    }

    #[tokio::test]
    async fn a_store_without_records_or_leases_refuses_them_by_name() {
        let s = Scope::for_user("u").unwrap();
        let record = Record::new("prompt", Timestamp::now(), "{}");
        let minute = Duration::from_secs(60);
        // Through the trait object and the forwarding impls alike.
        let stores: [Arc<dyn MemoryBackend>; 2] = [Arc::new(Bare), Arc::new(Arc::new(Bare))];
        for b in stores {
            for (result, needs) in [
                (
                    b.keep_record(&s, record.clone(), 1).await,
                    Capability::Records,
                ),
                (
                    b.records(&s, "prompt", 1).await.map(drop),
                    Capability::Records,
                ),
                (
                    b.try_lease("learn", "a", minute).await.map(drop),
                    Capability::Leases,
                ),
                (b.release_lease("learn", "a").await, Capability::Leases),
                (b.end_lease("learn").await, Capability::Leases),
            ] {
                match result {
                    Err(MemoryError::Unsupported {
                        capability,
                        provider,
                    }) => {
                        assert_eq!(capability, needs);
                        assert_eq!(provider, "bare");
                    }
                    other => panic!("expected Unsupported, got {other:?}"),
                }
            }
        }
    }

    #[test]
    fn a_record_names_what_it_quotes_and_older_ones_load_without() {
        let (a, b) = (MemoryId::new(), MemoryId::new());
        let r = Record::new("prompt", Timestamp::now(), "{}").quoting([a, b, a]);
        assert_eq!(r.quotes, [a, b]);
        let json = serde_json::to_string(&r).unwrap();
        assert_eq!(serde_json::from_str::<Record>(&json).unwrap(), r);
        let old = r#"{"kind":"prompt","at":"2026-01-01T00:00:00Z","body":"x"}"#;
        let old: Record = serde_json::from_str(old).unwrap();
        assert!(old.quotes.is_empty());
        assert!(!serde_json::to_string(&old).unwrap().contains("quotes"));
        let many = Record::new("prompt", Timestamp::now(), "")
            .quoting((0..=MAX_RECORD_QUOTES).map(|_| MemoryId::new()));
        let e = many.validate(1).unwrap_err().to_string();
        assert!(
            e.starts_with("invalid record quotes: names 1001 memories"),
            "{e}"
        );
    }

    #[test]
    fn records_are_checked_before_they_are_kept() {
        let at = Timestamp::now();
        assert!(Record::new("prompt", at, "{}").validate(16).is_ok());
        assert!(Record::new("a-b_c.d:9", at, "").validate(1).is_ok());
        let full = "x".repeat(MAX_RECORD_BYTES);
        assert!(Record::new("prompt", at, full.clone()).validate(1).is_ok());
        let e = Record::new("prompt", at, full + "x")
            .validate(1)
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            format!(
                "invalid record body: is {} bytes long, at most {MAX_RECORD_BYTES} bytes are \
                 accepted",
                MAX_RECORD_BYTES + 1
            )
        );
        assert!(
            Record::new("prompt", at, "{}")
                .validate(MAX_RECORDS_KEPT)
                .is_ok()
        );
        let e = Record::new("prompt", at, "{}")
            .validate(0)
            .unwrap_err()
            .to_string();
        assert!(e.contains("expected 1 to 1000"), "{e}");
        let e = Record::new("Prompt", at, "{}")
            .validate(1)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("invalid record kind: \"Prompt\""), "{e}");
    }
}
