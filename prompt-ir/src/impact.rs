//! How much a section is worth ([`estimate_impact`]) and whether two sections say the same
//! thing ([`equivalent`]), with embeddings supplied by the caller so this crate stays I/O free.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::section::{Embedding, Section};
use crate::unit::Ratio;

/// Word statistics of a text: a cheap, tokenizer-independent information estimate.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Information {
    /// Number of words (runs of letters and digits, case-folded).
    pub words: u32,
    /// Estimated information in bits: words times the empirical unigram entropy of the
    /// text's own words. Repetitive text scores low; varied text scores high.
    pub bits: f64,
}

impl Information {
    /// Lexical diversity from 0 to 1: entropy per word relative to the most a text of this
    /// length could have (every word distinct). 1 for one word, 0 for none.
    pub fn diversity(self) -> f64 {
        match self.words {
            0 => 0.0,
            1 => 1.0,
            n => round6((self.bits / f64::from(n)) / f64::from(n).log2()),
        }
    }
}

/// Rounds to 6 decimals so floating-point results are identical across platforms' libm.
pub(crate) fn round6(x: f64) -> f64 {
    (x * 1e6).round() / 1e6 + 0.0
}

/// Every word of `text` (a run of letters and digits), in order, as a hash of its lowercased
/// form: FNV-1a over the lowercased UTF-8, read as the text is, ASCII without a Unicode
/// lookup and no string built per word. Equal words (whatever their case) hash alike; the
/// one word splitter of the Prompt IR's statistics and of hydrate's near-duplicate sets.
pub fn word_hashes(text: &str) -> Vec<u64> {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut hashes: Vec<u64> = Vec::new();
    let (mut h, mut in_word) = (OFFSET, false);
    let mut buf = [0u8; 4];
    for c in text.chars() {
        if c.is_ascii_alphanumeric() {
            in_word = true;
            h = (h ^ u64::from(c.to_ascii_lowercase() as u8)).wrapping_mul(PRIME);
        } else if !c.is_ascii() && c.is_alphanumeric() {
            in_word = true;
            for l in c.to_lowercase() {
                for &b in l.encode_utf8(&mut buf).as_bytes() {
                    h = (h ^ u64::from(b)).wrapping_mul(PRIME);
                }
            }
        } else if in_word {
            hashes.push(h);
            (h, in_word) = (OFFSET, false);
        }
    }
    if in_word {
        hashes.push(h);
    }
    hashes
}

/// Word statistics of `text`.
pub(crate) fn information(text: &str) -> Information {
    // This runs on every section, long memories included: the words' hashes are counted by
    // sorting rather than in a map.
    let mut hashes = word_hashes(text);
    let words = u32::try_from(hashes.len()).unwrap_or(u32::MAX);
    if words == 0 {
        return Information::default();
    }
    hashes.sort_unstable();
    // Summed in a fixed order (counts ascending), so the float sum is the same every run.
    let mut freq: Vec<u32> = hashes
        .chunk_by(|a, b| a == b)
        .map(|run| u32::try_from(run.len()).unwrap_or(u32::MAX))
        .collect();
    freq.sort_unstable();
    let n = f64::from(words);
    let entropy: f64 = freq
        .iter()
        .map(|&c| {
            let p = f64::from(c) / n;
            -p * p.log2()
        })
        .sum();
    Information {
        words,
        bits: round6(entropy * n),
    }
}

/// The estimated worth of a section, as [`estimate_impact`] computes it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Impact {
    /// [`Priority::weight`](crate::Priority::weight) of the section.
    pub priority_weight: f64,
    /// Its relevance.
    pub relevance: f64,
    /// Estimated information in bits ([`Information::bits`]).
    pub information_bits: f64,
    /// Lexical diversity from 0 to 1 ([`Information::diversity`]).
    pub diversity: f64,
    /// `priority_weight × relevance × (0.5 + 0.5 × diversity)`: what the section is worth
    /// under [`BudgetAllocation::InformationWeighted`](crate::BudgetAllocation). Diversity
    /// counts for half, so boilerplate loses to varied text of equal priority and relevance
    /// but never outranks a more relevant section on diversity alone.
    pub score: f64,
}

/// Estimates what `section` contributes, from its priority, relevance and content. Pure and
/// deterministic; recency is applied separately by `compress`.
pub fn estimate_impact(section: &Section) -> Impact {
    let info = section.information();
    let priority_weight = section.priority().weight();
    let relevance = section.relevance().get();
    let diversity = info.diversity();
    Impact {
        priority_weight,
        relevance,
        information_bits: info.bits,
        diversity,
        score: round6(priority_weight * relevance * (0.5 + 0.5 * diversity)),
    }
}

/// Supplies an embedding for a text, for sections that carry none.
///
/// Implemented for every `Fn(&str) -> Option<Embedding>`, so a closure over precomputed
/// vectors will do. Object safe. Returning `None` means "no embedding available".
pub trait Embedder {
    /// An embedding of `text`, if one can be had.
    fn embed(&self, text: &str) -> Option<Embedding>;
}

impl<F> Embedder for F
where
    F: Fn(&str) -> Option<Embedding>,
{
    fn embed(&self, text: &str) -> Option<Embedding> {
        self(text)
    }
}

/// Whether `a` and `b` say the same thing: identical content, or embeddings whose cosine
/// similarity is at least `threshold`.
///
/// A section's own embedding is used when it has one; otherwise `embed` is asked. Fails when
/// neither provides one, or when the two embeddings have different dimensions.
pub fn equivalent(
    threshold: Ratio,
    a: &Section,
    b: &Section,
    embed: &dyn Embedder,
) -> Result<bool> {
    if a.hash() == b.hash() {
        return Ok(true);
    }
    let ea = embedding_of(a, embed)?;
    let eb = embedding_of(b, embed)?;
    match ea.cosine(&eb) {
        Some(sim) => Ok(sim >= threshold.get()),
        None => Err(Error::EmbeddingDimensions {
            left_id: a.id().to_owned(),
            left: ea.dims(),
            right_id: b.id().to_owned(),
            right: eb.dims(),
        }),
    }
}

fn embedding_of(s: &Section, embed: &dyn Embedder) -> Result<Embedding> {
    match s.embedding() {
        Some(e) => Ok(e.clone()),
        None => embed
            .embed(s.content())
            .ok_or_else(|| Error::MissingEmbedding {
                id: s.id().to_owned(),
            }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::section::{Priority, SectionSource};
    use crate::unit::Relevance;

    #[test]
    fn words_are_counted_whatever_their_case_and_script() {
        let same = information("Ünïcode ÜNÏCODE ünïcode, UNICODE-unicode");
        assert_eq!(
            (same.words, same.bits),
            (
                5,
                round6(5.0 * (-(0.6f64 * 0.6f64.log2()) - 0.4 * 0.4f64.log2()))
            )
        );
        let two = information("cat, dog!");
        assert_eq!((two.words, two.bits), (2, 2.0));
        assert_eq!(information(" .,; ").words, 0);
        assert_eq!(information("x").bits, 0.0);
    }

    fn knowledge(id: &str, text: &str) -> Section {
        Section::new(id, id, SectionSource::Knowledge, text).unwrap()
    }

    #[test]
    fn information_of_simple_texts() {
        assert_eq!(information(""), Information::default());
        let same = information("spam spam SPAM spam");
        assert_eq!(same.words, 4);
        assert_eq!(same.bits, 0.0);
        let varied = information("one two three four");
        assert_eq!(varied.bits, 8.0);
        assert_eq!(varied.diversity(), 1.0);
    }

    #[test]
    fn impact_prefers_relevant_varied_text() {
        let varied = knowledge("a", "Alice prefers short answers with code examples.");
        let boiler = knowledge("b", "note note note note note note note note.");
        assert!(estimate_impact(&varied).score > estimate_impact(&boiler).score);
        let low = varied.clone().with_relevance(Relevance::new(0.1).unwrap());
        assert!(estimate_impact(&varied).score > estimate_impact(&low).score);
        let high = varied.clone().with_priority(Priority::High);
        assert_eq!(estimate_impact(&high).priority_weight, 4.0);
    }

    #[test]
    fn equivalent_by_hash_needs_no_embedding() {
        let a = knowledge("a", "same text");
        let b = knowledge("b", "same text");
        let never = |_: &str| -> Option<Embedding> { None };
        assert!(equivalent(Ratio::ONE, &a, &b, &never).unwrap());
    }

    #[test]
    fn equivalent_by_embedding() {
        let a = knowledge("a", "the cat is called Miso")
            .with_embedding(Embedding::new(vec![1.0, 0.1]).unwrap());
        let b = knowledge("b", "Miso is the cat's name");
        let close = |_: &str| Embedding::new(vec![1.0, 0.0]).ok();
        assert!(equivalent(Ratio::new(0.9).unwrap(), &a, &b, &close).unwrap());
        let far = |_: &str| Embedding::new(vec![0.0, 1.0]).ok();
        assert!(!equivalent(Ratio::new(0.9).unwrap(), &a, &b, &far).unwrap());
    }

    #[test]
    fn equivalent_reports_missing_and_mismatched_embeddings() {
        let a = knowledge("a", "x");
        let b = knowledge("b", "y");
        let none = |_: &str| -> Option<Embedding> { None };
        let err = equivalent(Ratio::ONE, &a, &b, &none).unwrap_err();
        assert_eq!(err, Error::MissingEmbedding { id: "a".into() });

        let a = a.with_embedding(Embedding::new(vec![1.0, 0.0, 0.0]).unwrap());
        let two = |_: &str| Embedding::new(vec![1.0, 0.0]).ok();
        let err = equivalent(Ratio::ONE, &a, &b, &two).unwrap_err();
        assert_eq!(
            err.to_string(),
            "embedding of `a` has 3 dimensions and embedding of `b` has 2, expected both from \
             the same embedding model"
        );
    }
}
