//! When a fact told again is the same fact, and how the memory that holds it takes in the
//! new telling: the pure rules every backend's `remember_once` (and `consolidate`) applies,
//! so that they agree. No I/O here.

use crate::entry::{Importance, MemoryEntry, MemoryKind, MemoryPatch, NewMemory, TagSet};
use crate::query::Filter;
use crate::time::Timestamp;

/// `content` compared for duplicates: lowercased, runs of whitespace as one space, without
/// surrounding whitespace and final `.`, `!`, `?` or `…`.
pub fn normalise(content: &str) -> String {
    let spaced = content.split_whitespace().collect::<Vec<_>>().join(" ");
    spaced
        .trim_end_matches(['.', '!', '?', '…', ' '])
        .to_lowercase()
}

/// Whether `entry` is the fact `wanted` (a [`normalise`]d content) of `kind`, valid `now`:
/// the test every backend's [`crate::MemoryBackend::remember_once`] applies to its candidates.
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
