//! The conformance scenarios: each `pub async fn` here is one named test for every backend.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use super::{Ctx, Outcome, Rng, Setup};
use crate::{
    Capability, DecayPolicy, Embedding, EmbeddingSpace, Filter, HashingEmbedder, Importance,
    MemoryBackend, MemoryEntry, MemoryError, MemoryId, MemoryKind, MemoryPatch, NewMemory,
    PrunePolicy, PruneReason, Role, Scope, SearchRequest, Tag, TagQuery, Timestamp, tags,
};

const DAY: Duration = Duration::from_secs(86_400);

fn scope(user: &str, chat: Option<&str>) -> Scope {
    let s = Scope::for_user(user).unwrap();
    match chat {
        Some(c) => s.in_chat(c).unwrap(),
        None => s,
    }
}

fn tag(t: &str) -> Tag {
    Tag::new(t).unwrap()
}

/// A fixed reference time, so scenarios do not depend on the clock.
fn t0() -> Timestamp {
    Timestamp::from_millis(1_767_225_600_000).unwrap() // 2026-01-01T00:00:00Z
}

macro_rules! require {
    ($cx:expr, $($cap:expr),+) => {
        let caps = $cx.backend.capabilities();
        $(
            if !caps.supports($cap) {
                return Outcome::Skipped($cap);
            }
        )+
    };
}

async fn store(b: &dyn MemoryBackend, s: &Scope, text: &str) -> MemoryEntry {
    b.store(s, NewMemory::new(text)).await.unwrap()
}

fn ids(entries: &[MemoryEntry]) -> Vec<MemoryId> {
    entries.iter().map(|e| e.id).collect()
}

fn hit_ids(hits: &[crate::ScoredMemory]) -> Vec<MemoryId> {
    hits.iter().map(|h| h.entry.id).collect()
}

fn assert_not_found<T: std::fmt::Debug>(r: crate::Result<T>, what: &str) {
    match r {
        Err(MemoryError::NotFound { .. }) => {}
        other => panic!("{what}: expected NotFound, got {other:?}"),
    }
}

fn assert_invalid<T: std::fmt::Debug>(r: crate::Result<T>, field_part: &str) {
    match r {
        Err(MemoryError::InvalidInput { field, problem }) => {
            assert!(
                field.contains(field_part),
                "expected an error about {field_part}, got {field}: {problem}"
            );
            assert!(!problem.is_empty());
        }
        other => panic!("expected InvalidInput about {field_part}, got {other:?}"),
    }
}

// The scenarios, by theme (after `require!`, which they use).
mod change;
mod facts;
mod isolation;
mod records;
mod refusals;
mod search;
mod storing;

pub use change::*;
pub use facts::*;
pub use isolation::*;
pub use records::*;
pub use refusals::*;
pub use search::*;
pub use storing::*;
