//! How much a section is worth ([`estimate_impact`]) and whether two sections say the same
//! thing ([`equivalent`]), with embeddings supplied by the caller so this crate stays I/O free.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::section::{Embedding, Section};
use crate::unit::Ratio;
use crate::words::round6;

/// The estimated worth of a section, as [`estimate_impact`] computes it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Impact {
    /// [`Priority::weight`](crate::Priority::weight) of the section.
    pub priority_weight: f64,
    /// Its relevance.
    pub relevance: f64,
    /// Estimated information in bits ([`Information::bits`](crate::Information::bits)).
    pub information_bits: f64,
    /// Lexical diversity from 0 to 1 ([`Information::diversity`](crate::Information::diversity)).
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
    use crate::words::{Information, information};

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
