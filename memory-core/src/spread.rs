//! How a search's scores are spread over a scope, so that two signals can be put on one
//! scale ([`fuse`](crate::fuse)) and a memory of many passages is not many chances
//! ([`passage_similarity`]).
//!
//! Cosine similarities and BM25 scores live on different scales, and each moves from one
//! query and one scope to the next: in a chat about one project every message shares the
//! project's words, so the best BM25 hit stands out little; in a chat between friends a
//! rare name makes it stand out a lot. Measured against its own scope (how many standard
//! deviations above the scope's average a memory scores), each signal says how unusual a
//! memory is for this query, and the two can be added.

use serde::{Deserialize, Serialize};

/// The mean and standard deviation of one score over the memories of a scope, for one
/// query: of the cosine similarities of every vector of the scope (a long memory has one
/// per passage), or of the BM25 scores of every memory (0 for a memory that does not match).
///
/// Every spread also counts one memory more that scores 0, one that shares nothing with the
/// query: in a scope of one memory, or of a few that score alike, nothing would stand out
/// of the rest, although they match and an unrelated memory would not. In a scope of many
/// memories the extra one changes nothing that matters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    mean: f32,
    std: f32,
}

impl Spread {
    /// A spread from its mean and standard deviation (not finite: 0; a negative deviation
    /// counts as 0).
    pub fn new(mean: f32, std: f32) -> Self {
        let finite = |x: f32| if x.is_finite() { x } else { 0.0 };
        Self {
            mean: finite(mean),
            std: finite(std).max(0.0),
        }
    }

    /// The spread of `values` among `count` items, the items beyond `values` scoring 0 (a
    /// memory a keyword search did not match). `None` when there is no item.
    pub fn of(values: impl IntoIterator<Item = f32>, count: usize) -> Option<Self> {
        let (mut n, mut sum, mut squares) = (0usize, 0.0f64, 0.0f64);
        for v in values {
            n += 1;
            sum += f64::from(v);
            squares += f64::from(v) * f64::from(v);
        }
        let count = count.max(n);
        if count == 0 {
            return None;
        }
        Some(Self::from_sums(count, sum, squares))
    }

    /// The spread of `count` values whose sum and sum of squares are given (what a database
    /// aggregates in one pass), and of the one more that scores 0 (see [`Spread`]).
    pub fn from_sums(count: usize, sum: f64, squares: f64) -> Self {
        let n = (count + 1) as f64;
        let mean = sum / n;
        let var = (squares / n - mean * mean).max(0.0);
        Self::new(mean as f32, var.sqrt() as f32)
    }

    /// The mean.
    pub fn mean(self) -> f32 {
        self.mean
    }

    /// The standard deviation.
    pub fn std(self) -> f32 {
        self.std
    }

    /// How many standard deviations `x` lies above the mean (0 when the scores do not
    /// vary: then nothing stands out).
    pub fn z(self, x: f32) -> f32 {
        if self.std > 0.0 {
            (x - self.mean) / self.std
        } else {
            0.0
        }
    }
}

/// What a backend measured of one search's scores over the whole scope; a part it could not
/// measure is `None` and [`fuse`](crate::fuse) estimates it from the candidates.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ScopeSpread {
    /// Of the cosine similarities of the scope's vectors to the query vector.
    pub semantic: Option<Spread>,
    /// Of the BM25 scores of the scope's memories for the query's words.
    pub keyword: Option<Spread>,
}

/// The expected maximum of `n` independent draws from a standard normal distribution (0 for
/// one draw; Blom's approximation, within 0.03 of the exact value): 0.56 for 2, 1.16 for 5, 1.54
/// for 10, 2.25 for 50.
pub fn expected_max(n: usize) -> f32 {
    if n <= 1 {
        return 0.0;
    }
    let n = n as f64;
    inverse_normal((n - 0.375) / (n + 0.25)) as f32
}

/// A memory's similarity from its passages': the best passage's, less what `passages`
/// chances add by themselves. The best of many unrelated passages is higher than one
/// unrelated passage by about `spread` (the standard deviation of similarities in the
/// scope) times [`expected_max`] of their number, so a long answer would otherwise outrank
/// a short message that matches as well. A memory of one vector keeps its similarity.
pub fn passage_similarity(best: f32, passages: usize, spread: f32) -> f32 {
    best - spread.max(0.0) * expected_max(passages)
}

/// The inverse of the standard normal distribution function, for `p` in `(0, 1)` (Acklam's
/// rational approximation, relative error below 1.2e-9).
fn inverse_normal(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] = [
        7.784_695_709_041_462e-3,
        3.224_671_290_700_398e-1,
        2.445_134_137_142_996,
        3.754_408_661_907_416,
    ];
    let tail = |q: f64| {
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    };
    let p = p.clamp(1e-12, 1.0 - 1e-12);
    if p < 0.02425 {
        tail((-2.0 * p.ln()).sqrt())
    } else if p > 1.0 - 0.02425 {
        -tail((-2.0 * (1.0 - p).ln()).sqrt())
    } else {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_expected_maximum_of_normal_draws_grows_with_their_number() {
        // Exact values: 0.5642 (2), 1.1630 (5), 1.5388 (10), 2.2491 (50).
        for (n, exact) in [(2, 0.5642), (5, 1.1630), (10, 1.5388), (50, 2.2491)] {
            let e = expected_max(n);
            assert!((e - exact).abs() < 0.03, "{n}: {e} against {exact}");
        }
        assert_eq!(expected_max(0), 0.0);
        assert_eq!(expected_max(1), 0.0);
        assert!(expected_max(1000) > expected_max(100));
    }

    #[test]
    fn many_passages_are_not_many_chances() {
        // One vector: unchanged. Eight: the best less about 1.42 deviations.
        assert_eq!(passage_similarity(0.5, 1, 0.1), 0.5);
        let long = passage_similarity(0.5, 8, 0.1);
        assert!((long - (0.5 - 0.1 * expected_max(8))).abs() < 1e-6);
        assert!(long < 0.37 && long > 0.35, "{long}");
        // A negative spread is no spread.
        assert_eq!(passage_similarity(0.5, 8, -1.0), 0.5);
    }

    #[test]
    fn a_spread_counts_the_unmatched_as_zero() {
        // 2 and 4 among three memories, and the one more that shares nothing: mean 1.5,
        // variance (4 + 16) / 4 - 2.25 = 2.75.
        let s = Spread::of([2.0, 4.0], 3).unwrap();
        assert!((s.mean() - 1.5).abs() < 1e-6);
        assert!((s.std() - 2.75f32.sqrt()).abs() < 1e-6);
        assert!((s.z(1.5)).abs() < 1e-6);
        assert!(s.z(4.0) > 1.0);
        // The same from sums, as a database hands them over.
        assert_eq!(Spread::from_sums(3, 6.0, 20.0), s);
        // One memory that matches stands out of a memory that would not.
        let one = Spread::of([0.6], 1).unwrap();
        assert!((one.z(0.6) - 1.0).abs() < 1e-6);
        // Nothing varies: nothing stands out.
        let flat = Spread::new(1.0, 0.0);
        assert_eq!(flat.z(1.0), 0.0);
        assert_eq!(Spread::of([], 0), None);
        assert_eq!(Spread::new(f32::NAN, -1.0), Spread::new(0.0, 0.0));
    }
}
