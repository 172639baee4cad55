//! How facts mature without losing anything. Remembering a fact twice keeps one memory:
//! [`remember_once`] finds a memory of the same kind in the scope whose content is the same
//! once normalised ([`normalise`]: case, whitespace, final punctuation) and merges the new one
//! into it (tags joined, the higher importance, pinned if either is). A fact that changed is
//! [`supersede`]d: the new one is stored and the old one's validity closed, never deleted, and
//! [`history`] reads the chain back.

use serde::Serialize;

use crate::backend::MemoryBackend;
use crate::capability::Capability;
use crate::entry::{Importance, MemoryEntry, MemoryId, MemoryKind, MemoryPatch, NewMemory, TagSet};
use crate::error::{MemoryError, Result};
use crate::query::{Filter, SearchRequest};
use crate::scope::Scope;
use crate::time::Timestamp;

/// The longest chain [`history`] follows (a guard against a cycle written by hand).
const MAX_HISTORY: usize = 100;

/// How many search hits are compared with the new content.
const CANDIDATES: usize = 20;

/// What [`remember_once`] did.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Remembered {
    /// The memory that holds the content now.
    pub entry: MemoryEntry,
    /// `true` when it was already there (and the new one was merged into it), `false` when
    /// it was stored as a new memory.
    pub merged: bool,
}

/// `content` compared for duplicates: lowercased, runs of whitespace as one space, without
/// surrounding whitespace and final `.`, `!`, `?` or `…`.
pub fn normalise(content: &str) -> String {
    let spaced = content.split_whitespace().collect::<Vec<_>>().join(" ");
    spaced
        .trim_end_matches(['.', '!', '?', '…', ' '])
        .to_lowercase()
}

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

/// Whether `entry` is the fact `wanted` (a [`normalise`]d content) of `kind`, valid `now`:
/// the test every backend's [`MemoryBackend::remember_once`] applies to its candidates.
pub fn same_fact(entry: &MemoryEntry, kind: MemoryKind, wanted: &str, now: Timestamp) -> bool {
    entry.kind == kind
        && Filter {
            valid_at: Some(now),
            ..Filter::default()
        }
        .matches(entry)
        && normalise(&entry.content) == wanted
}

/// The patch that merges `new` into `existing`, the same fact told again: its tags joined,
/// the higher importance, pinned if either is. Empty when `existing` has all of it.
pub fn merge_patch(existing: &MemoryEntry, new: &NewMemory) -> MemoryPatch {
    absorb(existing, [(&new.tags, new.importance, new.pinned)])
}

/// [`MemoryBackend::remember_once`] in two steps (a search, then a store or an update):
/// the default for backends that cannot do it in one. The duplicate is looked for by
/// keyword search (else semantic search) among the best matches, without counting as a
/// recall; a backend with neither stores as usual.
pub(crate) async fn search_then_store<B: MemoryBackend + ?Sized>(
    backend: &B,
    scope: &Scope,
    memory: NewMemory,
) -> Result<Remembered> {
    let caps = backend.capabilities();
    let request = if caps.supports(Capability::KeywordSearch) {
        Some(SearchRequest::keyword(memory.content.clone()))
    } else if caps.supports(Capability::SemanticSearch) {
        Some(SearchRequest::semantic(memory.content.clone()))
    } else {
        None
    };
    let wanted = normalise(&memory.content);
    if let Some(request) = request
        && !wanted.is_empty()
    {
        let request = request
            .limit(CANDIDATES)
            .filter(Filter {
                kinds: vec![memory.kind],
                // A fact that no longer holds is not the same as one told again now.
                valid_at: caps.supports(Capability::TimeFilter).then(Timestamp::now),
                ..Filter::default()
            })
            .without_access_tracking();
        let same = backend
            .search(scope, &request)
            .await?
            .into_iter()
            .map(|h| h.entry)
            .find(|e| normalise(&e.content) == wanted);
        if let Some(existing) = same {
            let entry = merge(backend, scope, existing, memory).await?;
            return Ok(Remembered {
                entry,
                merged: true,
            });
        }
    }
    Ok(Remembered {
        entry: backend.store(scope, memory).await?,
        merged: false,
    })
}

/// Merges `new` into `existing` where the backend can update; otherwise leaves it.
async fn merge<B: MemoryBackend + ?Sized>(
    backend: &B,
    scope: &Scope,
    existing: MemoryEntry,
    new: NewMemory,
) -> Result<MemoryEntry> {
    if !backend.capabilities().supports(Capability::Update) {
        return Ok(existing);
    }
    let patch = merge_patch(&existing, &new);
    if patch.is_empty() {
        return Ok(existing);
    }
    backend.update(scope, existing.id, patch).await
}

/// The patch that gives `kept` what `others` (tags, importance, pinned) had: their tags
/// joined, the highest importance, pinned if any is. Empty when `kept` has all of it.
pub(crate) fn absorb<'a>(
    kept: &MemoryEntry,
    others: impl IntoIterator<Item = (&'a TagSet, Importance, bool)>,
) -> MemoryPatch {
    let (mut tags, mut importance, mut pinned) = (kept.tags.clone(), kept.importance, kept.pinned);
    for (t, i, p) in others {
        tags.extend(t.iter().cloned());
        if i.get() > importance.get() {
            importance = i;
        }
        pinned |= p;
    }
    MemoryPatch {
        tags: (tags != kept.tags).then_some(tags),
        importance: (importance != kept.importance).then_some(importance),
        pinned: (pinned != kept.pinned).then_some(true),
        ..MemoryPatch::default()
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalise_ignores_case_spacing_and_final_punctuation() {
        assert_eq!(
            normalise("  My cat is  called\nMiso. "),
            "my cat is called miso"
        );
        assert_eq!(
            normalise("My cat is called Miso!!"),
            "my cat is called miso"
        );
        assert_ne!(
            normalise("My cat is called Miso"),
            normalise("My cat is called Misa")
        );
        assert_eq!(normalise("..."), "");
    }
}
