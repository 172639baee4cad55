//! Remembering a fact twice keeps one memory: [`remember_once`] finds a memory of the same
//! kind in the scope whose content is the same once normalised ([`normalise`]: case,
//! whitespace, final punctuation) and merges the new one into it (tags joined, the higher
//! importance, pinned if either is) instead of storing a second copy.

use serde::Serialize;

use crate::backend::MemoryBackend;
use crate::capability::Capability;
use crate::entry::{MemoryEntry, MemoryPatch, NewMemory};
use crate::error::Result;
use crate::query::{Filter, SearchRequest};
use crate::scope::Scope;

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
/// importance and pinned if either is (when the backend can update). The duplicate is
/// looked for by keyword search (else semantic search) among the best matches, without
/// counting as a recall; a backend with neither stores as usual.
pub async fn remember_once(
    backend: &dyn MemoryBackend,
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
async fn merge(
    backend: &dyn MemoryBackend,
    scope: &Scope,
    existing: MemoryEntry,
    new: NewMemory,
) -> Result<MemoryEntry> {
    if !backend.capabilities().supports(Capability::Update) {
        return Ok(existing);
    }
    let mut patch = MemoryPatch::default();
    if !new.tags.is_subset(&existing.tags) {
        patch.tags = Some(existing.tags.union(&new.tags).cloned().collect());
    }
    if new.importance.get() > existing.importance.get() {
        patch.importance = Some(new.importance);
    }
    if new.pinned && !existing.pinned {
        patch.pinned = Some(true);
    }
    if patch.is_empty() {
        return Ok(existing);
    }
    backend.update(scope, existing.id, patch).await
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
