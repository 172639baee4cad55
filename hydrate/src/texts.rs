//! What hydrate reads from a memory's text (its distinct words, its passages and their terms),
//! read once per text and kept across prompts: an agent's long answers come back prompt after
//! prompt, and reading them again was most of what a prompt cost beyond its searches.

use std::collections::HashMap;
use std::fmt;
use std::ops::Range;
use std::sync::{Arc, Mutex};

use crate::passages;

/// How many bytes of text a [`TextCache`] holds facts for by default (16 MiB).
pub const TEXT_CACHE_BYTES: usize = 16 << 20;

/// What one text holds.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TextFacts {
    /// Its distinct lowercased words, hashed and sorted ([`word_set`]).
    pub(crate) words: Vec<u64>,
    /// Its passages as byte ranges ([`passages::passages`]).
    pub(crate) passages: Vec<Range<usize>>,
    /// The same passages as character ranges.
    pub(crate) chars: Vec<(usize, usize)>,
    /// Each passage's terms ([`passages::terms`]).
    pub(crate) terms: Vec<Vec<String>>,
}

impl TextFacts {
    fn read(text: &str) -> Self {
        let ranges = passages::passages(text);
        Self {
            words: word_set(text),
            chars: char_ranges(text, &ranges),
            terms: ranges
                .iter()
                .map(|r| passages::terms(text.get(r.clone()).unwrap_or("")))
                .collect(),
            passages: ranges,
        }
    }
}

/// The facts of the texts hydrate has read, up to a number of bytes of text; when full, it is
/// cleared and refills (as the token counts of `prompt_ir::CountCache`). Shared by the clones
/// of a [`HydrationConfig`](crate::HydrationConfig), so every prompt of a chat reads a memory
/// once. A text is its own key, so an edited memory is read again.
pub struct TextCache {
    capacity: usize,
    held: Mutex<Held>,
}

/// The bytes of text held, and each text's facts.
type Held = (usize, HashMap<Box<str>, Arc<TextFacts>>);

impl TextCache {
    /// A cache of the facts of at most `capacity` bytes of text (0 keeps nothing).
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            held: Mutex::new((0, HashMap::new())),
        }
    }

    /// How many texts are held.
    pub fn len(&self) -> usize {
        self.held.lock().map_or(0, |h| h.1.len())
    }

    /// Whether no text is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The facts of `text`, read now unless held.
    pub(crate) fn facts(&self, text: &str) -> Arc<TextFacts> {
        if let Ok(held) = self.held.lock()
            && let Some(f) = held.1.get(text)
        {
            return Arc::clone(f);
        }
        // Read outside the lock: another prompt may read the same text meanwhile.
        let facts = Arc::new(TextFacts::read(text));
        if text.len() <= self.capacity
            && let Ok(mut held) = self.held.lock()
        {
            if held.0 + text.len() > self.capacity {
                *held = (0, HashMap::new());
            }
            if held.1.insert(text.into(), Arc::clone(&facts)).is_none() {
                held.0 += text.len();
            }
        }
        facts
    }
}

impl Default for TextCache {
    fn default() -> Self {
        Self::new(TEXT_CACHE_BYTES)
    }
}

impl fmt::Debug for TextCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TextCache")
            .field("capacity", &self.capacity)
            .field("held", &self.len())
            .finish()
    }
}

/// The distinct lowercased words of `text`, hashed ([`prompt_ir::word_hashes`]) and sorted.
pub(crate) fn word_set(text: &str) -> Vec<u64> {
    let mut set = prompt_ir::word_hashes(text);
    set.sort_unstable();
    set.dedup();
    set
}

/// Byte ranges of `text` (ordered) as character ranges.
fn char_ranges(text: &str, ranges: &[std::ops::Range<usize>]) -> Vec<(usize, usize)> {
    let (mut bytes, mut chars) = (0, 0);
    let mut at = |b: usize| {
        chars += text.get(bytes..b).map_or(0, |t| t.chars().count());
        bytes = b;
        chars
    };
    ranges.iter().map(|r| (at(r.start), at(r.end))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn word_sets_are_distinct_lowercased_words_in_any_order() {
        let a = word_set("Hello, hello WORLD! world-wide; Ünïcode ÜNÏCODE 42");
        assert_eq!(a.len(), 5, "hello, world, wide, ünïcode, 42: {a:?}");
        assert!(a.windows(2).all(|w| w[0] < w[1]), "sorted and distinct");
        assert_eq!(a, word_set("42 ünïcode wide world hello"));
        assert_ne!(word_set("cat"), word_set("cats"));
        assert!(word_set(" ,.; ").is_empty());
    }

    #[test]
    fn facts_are_read_once_and_are_what_reading_gives() {
        let cache = TextCache::new(1_000);
        let text =
            "First we planned the launch. Then we chose PostgreSQL 16.\n\nLater we tested it.";
        let a = cache.facts(text);
        let b = cache.facts(text);
        assert!(Arc::ptr_eq(&a, &b), "the second read is the first's");
        assert_eq!(*a, TextFacts::read(text));
        assert_eq!(a.passages, passages::passages(text));
        assert_eq!(a.terms.len(), a.passages.len());
        assert_eq!(cache.len(), 1);
        // An edited text is another text.
        let edited = cache.facts("First we planned the launch.");
        assert!(!Arc::ptr_eq(&a, &edited));
        assert_eq!(cache.len(), 2);
    }

    #[test]
    fn a_full_cache_starts_again_and_a_text_over_it_is_not_kept() {
        let cache = TextCache::new(30);
        cache.facts("twenty bytes of text");
        cache.facts("ten bytes!");
        assert_eq!(cache.len(), 2);
        cache.facts("one more text");
        assert_eq!(cache.len(), 1, "cleared, then this one");
        let long = "a word ".repeat(10);
        let f = cache.facts(&long);
        assert!(!f.words.is_empty());
        assert_eq!(cache.len(), 1, "over the capacity: read, not kept");
        assert!(TextCache::new(0).facts("x y z").words.len() == 3);
    }

    #[test]
    fn character_ranges_count_characters() {
        let text = "é é. ab";
        assert_eq!(char_ranges(text, &[0..2, 7..9]), vec![(0, 1), (5, 7)]);
    }
}
