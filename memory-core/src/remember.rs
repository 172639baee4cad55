//! How facts mature without losing anything. Remembering a fact twice keeps one memory:
//! [`remember_once`] finds a memory of the same kind in the scope whose content is the same
//! once normalised ([`crate::normalise`]: case, whitespace, final punctuation) and merges the
//! new one into it (tags joined, the higher importance, pinned if either is). A fact that changed is
//! [`supersede`]d: the new one is stored and the old one's validity closed, never deleted, and
//! [`history`] reads the chain back.

use crate::backend::{MemoryBackend, Remembered};
use crate::capability::Capability;
use crate::entry::{MAX_MESSAGE_BYTES, MemoryEntry, MemoryId, MemoryPatch, NewMemory};
use crate::error::{MemoryError, Result};
use crate::query::Filter;
use crate::scope::Scope;
use crate::time::Timestamp;

/// The longest chain [`history`] follows (a guard against a cycle written by hand).
const MAX_HISTORY: usize = 100;

/// Stores `memory` in `scope`, unless a memory of the same kind with the same normalised
/// content is there: then that one is returned, with the new tags added, the higher
/// importance and pinned if either is (when the backend can update). The backend decides
/// how ([`MemoryBackend::remember_once`]): the SQLite, Postgres and in-memory backends look
/// and store in one step, so concurrent calls with one fact leave one memory.
pub async fn remember_once(
    backend: &dyn MemoryBackend,
    scope: &Scope,
    memory: NewMemory,
) -> Result<Remembered> {
    backend.remember_once(scope, memory).await
}

/// The patch that ends `entry`'s validity at `now` (never before it began), replaced by
/// `successor` if there is one.
pub(crate) fn closing(
    entry: &MemoryEntry,
    now: Timestamp,
    successor: Option<MemoryId>,
) -> MemoryPatch {
    MemoryPatch {
        valid_until: Some(Some(now.max(entry.valid_from.unwrap_or(now)))),
        superseded_by: successor.map(Some),
        ..MemoryPatch::default()
    }
}

/// Stores `new` as the current version of the memory `old` (a fact that changed: "we
/// renamed the cat to Max"): `new` is stored, then `old` gets `valid_until = now` and
/// `superseded_by = new`. Nothing is deleted; searches and the prompt show only the current
/// version, [`history`] shows both. Needs [`Capability::Update`]; `old` must exist in `scope`
/// and not be superseded already (checked before anything is stored).
pub async fn supersede(
    backend: &dyn MemoryBackend,
    scope: &Scope,
    old: MemoryId,
    new: NewMemory,
    now: Timestamp,
) -> Result<MemoryEntry> {
    backend
        .capabilities()
        .require(Capability::Update, &backend.info().name)?;
    let previous = backend.get(scope, old).await?;
    if let Some(by) = previous.superseded_by {
        return Err(MemoryError::invalid(
            "superseded memory",
            format!("{old} was already replaced by {by}; replace that one instead"),
        ));
    }
    let stored = backend.store(scope, new).await?;
    backend
        .update(scope, old, closing(&previous, now, Some(stored.id)))
        .await
        .map_err(|e| {
            MemoryError::invalid(
                "supersede",
                format!(
                    "stored the new memory {} but could not close {old}: {}; both are current",
                    stored.id,
                    crate::ErrorChain(&e)
                ),
            )
        })?;
    Ok(stored)
}

/// What [`keep_fact`] did with a fact.
#[derive(Clone, Debug, PartialEq)]
pub enum FactKept {
    /// Stored as a new memory, or merged into the same fact already there
    /// ([`remember_once`]).
    Once(Remembered),
    /// Stored as the current version of the fact it replaces ([`supersede`]).
    Replaced(MemoryEntry),
    /// Longer than the store takes in one memory: stored whole in linked parts
    /// ([`NewMemory::split_to_fit`]), the first part first.
    Parts(Vec<MemoryEntry>),
}

impl FactKept {
    /// The memory that holds the fact now (the first part of a long one).
    pub fn entry(&self) -> Option<&MemoryEntry> {
        match self {
            FactKept::Once(r) => Some(&r.entry),
            FactKept::Replaced(e) => Some(e),
            FactKept::Parts(parts) => parts.first(),
        }
    }
}

/// Keeps a fact, the one way every front door (a chat command, the CLI, MCP, the model's
/// `remember` tool) does: with `replaces`, as the new version of that fact, wherever among
/// `scopes` it is (a person's fact may be kept user-wide or, in an older store, in a chat);
/// otherwise in `home`, once ([`remember_once`]), or in linked parts when it is longer than
/// the store takes in one memory (of a fact longer than [`MAX_MESSAGE_BYTES`], its first
/// MiB: [`NewMemory::split_to_fit`]).
pub async fn keep_fact(
    backend: &dyn MemoryBackend,
    home: &Scope,
    scopes: &[Scope],
    memory: NewMemory,
    replaces: Option<MemoryId>,
    now: Timestamp,
) -> Result<FactKept> {
    if let Some(old) = replaces {
        let mut at = home;
        for scope in scopes {
            if backend.get(scope, old).await.is_ok() {
                at = scope;
                break;
            }
        }
        return supersede(backend, at, old, memory, now)
            .await
            .map(FactKept::Replaced);
    }
    let max = backend.info().limits.max_content_bytes;
    if memory.content.len() > max.min(MAX_MESSAGE_BYTES) {
        let parts = backend.store_batch(home, memory.split_to_fit(max)).await?;
        return Ok(FactKept::Parts(parts));
    }
    remember_once(backend, home, memory)
        .await
        .map(FactKept::Once)
}

/// The versions of the memory `id`, oldest first: what it replaced (and what that replaced),
/// the memory itself, and what replaced it since. A memory never superseded is its own
/// history.
pub async fn history(
    backend: &dyn MemoryBackend,
    scope: &Scope,
    id: MemoryId,
) -> Result<Vec<MemoryEntry>> {
    let start = backend.get(scope, id).await?;
    // Predecessors point at their successor: read the scope's memories of the same kind,
    // superseded ones included, once.
    let all = backend
        .recent(
            scope,
            backend.info().limits.max_results,
            &Filter {
                kinds: vec![start.kind],
                include_superseded: true,
                ..Filter::default()
            },
        )
        .await?;
    let mut chain = vec![start];
    while chain.len() < MAX_HISTORY {
        let first = chain[0].id;
        match all.iter().find(|e| e.superseded_by == Some(first)) {
            Some(p) if !chain.iter().any(|c| c.id == p.id) => chain.insert(0, p.clone()),
            _ => break,
        }
    }
    while chain.len() < MAX_HISTORY {
        let Some(next) = chain.last().and_then(|e| e.superseded_by) else {
            break;
        };
        if chain.iter().any(|c| c.id == next) {
            break;
        }
        match backend.get(scope, next).await {
            Ok(e) => chain.push(e),
            // Deleted since: the chain ends here.
            Err(MemoryError::NotFound { .. }) => break,
            Err(e) => return Err(e),
        }
    }
    Ok(chain)
}
