//! What the benches share: their deterministic data (random `w<k>` word texts, unit vectors,
//! `user-<i>` scopes, top-10 queries) and the `ava-bench: percentiles` lines that
//! `cargo xtask bench` reads.
//!
//! The data is a fixed function of the seed and the order of calls, so numbers measured on
//! it stay comparable across runs and commits; change a generator and the published numbers
//! in BENCHMARKS.md no longer describe the same data.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Rng;
use crate::{Embedding, EmbeddingSpace, NewMemory, Scope, SearchRequest, normalize};

/// `n` words `w<k>`, each `k` drawn below `vocab`, joined by single spaces.
pub fn words(rng: &mut Rng, n: usize, vocab: usize) -> String {
    (0..n)
        .map(|_| format!("w{}", rng.below(vocab)))
        .collect::<Vec<_>>()
        .join(" ")
}

/// A memory's text in the retrieval benches: 12 words of a 5000-word vocabulary.
pub fn text(rng: &mut Rng) -> String {
    words(rng, 12, 5000)
}

/// A random unit vector of `space`: one [`Rng::unit`] draw a dimension, then normalized.
pub fn vector(rng: &mut Rng, space: &Arc<EmbeddingSpace>) -> Embedding {
    let mut v: Vec<f32> = (0..space.dims).map(|_| rng.unit()).collect();
    normalize(&mut v);
    Embedding::new(Arc::clone(space), v).unwrap()
}

/// The bench chat of user `i`: `user-<i>`, chat `bench`.
pub fn scope(i: usize) -> Scope {
    Scope::for_user(format!("user-{i}"))
        .unwrap()
        .in_chat("bench")
        .unwrap()
}

/// `n` memories, each a [`text`] then its [`vector`].
pub fn memories(rng: &mut Rng, space: &Arc<EmbeddingSpace>, n: usize) -> Vec<NewMemory> {
    (0..n)
        .map(|_| NewMemory::new(text(rng)).with_embedding(vector(rng, space)))
        .collect()
}

/// One bench query: where it searches, its vector, and its keywords.
#[derive(Clone, Debug)]
pub struct Query {
    /// One of the bench scopes.
    pub scope: Scope,
    /// The semantic side.
    pub vector: Embedding,
    /// The keyword side: 3 words of the memories' vocabulary.
    pub words: String,
}

impl Query {
    /// Top-10 by vector, without access tracking.
    pub fn semantic(&self) -> SearchRequest {
        SearchRequest::vector(self.vector.clone())
            .limit(10)
            .without_access_tracking()
    }

    /// Top-10 by keywords (BM25), without access tracking.
    pub fn keyword(&self) -> SearchRequest {
        SearchRequest::keyword(self.words.clone())
            .limit(10)
            .without_access_tracking()
    }

    /// Top-10 by both, fused, without access tracking.
    pub fn hybrid(&self) -> SearchRequest {
        SearchRequest::hybrid(self.words.clone())
            .with_vector(self.vector.clone())
            .limit(10)
            .without_access_tracking()
    }
}

/// `n` queries over the first `scopes` bench scopes: for each, its [`words`], then its
/// scope, then its [`vector`].
pub fn queries(rng: &mut Rng, space: &Arc<EmbeddingSpace>, n: usize, scopes: usize) -> Vec<Query> {
    (0..n)
        .map(|_| {
            let words = words(rng, 3, 5000);
            let scope = scope(rng.below(scopes));
            let vector = vector(rng, space);
            Query {
                scope,
                vector,
                words,
            }
        })
        .collect()
}

/// Times `calls` single calls of `one` (given the call's index) and prints their p50 and
/// p95 as `ava-bench: percentiles <name> p50=<ms> p95=<ms> n=<calls>`.
///
/// # Panics
/// When `calls` is 0.
pub fn percentiles(name: &str, calls: usize, mut one: impl FnMut(usize)) {
    let mut times: Vec<Duration> = Vec::with_capacity(calls);
    for i in 0..calls {
        let t = Instant::now();
        one(i);
        times.push(t.elapsed());
    }
    println!("{}", percentiles_line(name, times));
}

/// The line [`percentiles`] prints for these times. `cargo xtask bench` parses it: keep
/// the format as it is.
///
/// # Panics
/// When `times` is empty.
pub fn percentiles_line(name: &str, mut times: Vec<Duration>) -> String {
    times.sort();
    let at = |q: f64| {
        times[((times.len() as f64 * q) as usize).min(times.len() - 1)].as_secs_f64() * 1e3
    };
    format!(
        "ava-bench: percentiles {name} p50={:.3}ms p95={:.3}ms n={}",
        at(0.50),
        at(0.95),
        times.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn space() -> Arc<EmbeddingSpace> {
        Arc::new(EmbeddingSpace::new("hash", "test", 384).unwrap())
    }

    #[test]
    fn words_are_w_numbers_below_the_vocabulary() {
        let mut rng = Rng::new(7);
        let text = words(&mut rng, 500, 30);
        let ws: Vec<&str> = text.split(' ').collect();
        assert_eq!(ws.len(), 500);
        for w in ws {
            let k: usize = w.strip_prefix('w').unwrap().parse().unwrap();
            assert!(k < 30, "{w}");
        }
        assert_eq!(words(&mut rng, 0, 30), "");
    }

    #[test]
    fn data_for_a_seed_is_fixed() {
        // Golden values (from an independent splitmix64): the retrieval benches build their
        // stores from seed 7 and their queries from seed 99; if these change, so does every
        // published number's data set.
        let mut rng = Rng::new(7);
        let first = memories(&mut rng, &space(), 2);
        assert_eq!(
            first[0].content,
            "w4487 w804 w4346 w2203 w3674 w3305 w1798 w4182 w2985 w4425 w1083 w516"
        );
        let v = first[0].embedding.as_ref().unwrap().vector();
        assert_eq!(v.len(), 384);
        let norm: f32 = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "{norm}");
        assert_eq!(
            first[1].content,
            "w869 w1587 w785 w4491 w3032 w609 w1920 w3053 w2574 w4205 w998 w3957"
        );
        let q = &queries(&mut Rng::new(99), &space(), 1, 100)[0];
        assert_eq!(q.words, "w403 w4564 w4627");
        assert_eq!(q.scope, scope(7));
    }

    #[test]
    fn queries_ask_for_the_top_ten_untracked() {
        let q = &queries(&mut Rng::new(1), &space(), 3, 5)[2];
        for req in [q.semantic(), q.keyword(), q.hybrid()] {
            assert_eq!(req.limit, 10);
            assert!(!req.record_access);
        }
        assert!(q.keyword().vector.is_none());
        assert_eq!(q.hybrid().vector.as_ref(), Some(&q.vector));
    }

    #[test]
    fn percentiles_line_reads_the_sorted_sample() {
        // 1..=20 ms, shuffled: p50 is the 11th smallest (index 10), p95 the 20th (index 19).
        let mut times: Vec<Duration> = (1..=20).map(Duration::from_millis).collect();
        times.reverse();
        times.swap(3, 17);
        assert_eq!(
            percentiles_line("a/b/semantic", times),
            "ava-bench: percentiles a/b/semantic p50=11.000ms p95=20.000ms n=20"
        );
        assert_eq!(
            percentiles_line("one", vec![Duration::from_micros(1234)]),
            "ava-bench: percentiles one p50=1.234ms p95=1.234ms n=1"
        );
    }
}
