//! Retrieval scoring: one number per item from similarity, recency, importance and access
//! frequency, with every part kept in the item's [`ScoreBreakdown`].
//!
//! # Formula
//!
//! For an item with similarity `s` (present only when a search found it), created at `t`,
//! with importance `i` and recalled `n` times before:
//!
//! ```text
//! r = 1                                   if the memory is pinned (exempt from decay)
//!   = strategy.recency_decay.factor(t)    otherwise: f + (1 - f)·0.5^(age / half-life),
//!                                         1 if undated (f: the decay's floor)
//! i = the memory's importance             (0.5 when unknown)
//! a = ln(1 + n) / (1 + ln(1 + n))         (0 when never recalled, 0.5 at n ≈ 1.7, → 1)
//!
//!         w_s·s + w_r·r + w_i·i + w_a·a
//! score = ─────────────────────────────      (the w_s terms only when s is present)
//!           w_s + w_r + w_i + w_a
//! ```
//!
//! The default weights ([`ScoringWeights::default`]) are `w_s = 0.55, w_r = 0.25,
//! w_i = 0.15, w_a = 0.05`: similarity leads, recency breaks near-ties, importance and
//! frequency nudge. Every factor lies in `0..=1`, so the score does too. The breakdown keeps
//! the backend's parts (`semantic`, `keyword`, `keyword_raw`) and gets `recency`,
//! `importance` and `access` filled with `r`, `i` and `a`.

use memory_core::{ScoreBreakdown, ScoredMemory, Timestamp};
use prompt_ir::RecencyDecay;
use serde::Serialize;

use crate::error::{Error, Result};
use crate::source::SourceItem;

/// Importance assumed for items that carry none (non-memory items).
pub const DEFAULT_IMPORTANCE: f32 = 0.5;

/// Relative weights of the four parts of a score. All finite and at least 0; recency,
/// importance and access not all 0 (so an item without similarity still scores).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct ScoringWeights {
    similarity: f32,
    recency: f32,
    importance: f32,
    access: f32,
}

impl ScoringWeights {
    /// Checks and builds weights.
    pub fn new(similarity: f32, recency: f32, importance: f32, access: f32) -> Result<Self> {
        let ok = |w: f32| w.is_finite() && w >= 0.0;
        if !(ok(similarity) && ok(recency) && ok(importance) && ok(access))
            || recency + importance + access <= 0.0
        {
            return Err(Error::invalid(
                "scoring weights",
                format!(
                    "similarity {similarity}, recency {recency}, importance {importance}, \
                     access {access}: each must be finite and >= 0, and recency + importance \
                     + access must be > 0"
                ),
            ));
        }
        Ok(Self {
            similarity,
            recency,
            importance,
            access,
        })
    }

    /// Weight of similarity.
    pub fn similarity(self) -> f32 {
        self.similarity
    }

    /// Weight of recency.
    pub fn recency(self) -> f32 {
        self.recency
    }

    /// Weight of importance.
    pub fn importance(self) -> f32 {
        self.importance
    }

    /// Weight of access frequency.
    pub fn access(self) -> f32 {
        self.access
    }
}

impl Default for ScoringWeights {
    /// 0.55 similarity, 0.25 recency, 0.15 importance, 0.05 access.
    fn default() -> Self {
        Self {
            similarity: 0.55,
            recency: 0.25,
            importance: 0.15,
            access: 0.05,
        }
    }
}

/// The recency factor `r`: 1 for pinned memories, else the strategy's decay of the age.
pub fn recency_factor(
    created_at: Option<Timestamp>,
    pinned: bool,
    decay: RecencyDecay,
    now: Timestamp,
) -> f32 {
    if pinned {
        return 1.0;
    }
    decay.factor(created_at.map(Timestamp::to_datetime), now.to_datetime()) as f32
}

/// The access factor `a = ln(1 + n) / (1 + ln(1 + n))`.
pub fn access_factor(access_count: u64) -> f32 {
    let l = (1.0 + access_count as f64).ln();
    (l / (1.0 + l)) as f32
}

/// The combined score of the parts; see the module docs.
pub fn combine(
    similarity: Option<f32>,
    recency: f32,
    importance: f32,
    access: f32,
    weights: ScoringWeights,
) -> f32 {
    let mut num =
        weights.recency * recency + weights.importance * importance + weights.access * access;
    let mut den = weights.recency + weights.importance + weights.access;
    if let Some(s) = similarity {
        num += weights.similarity * s.clamp(0.0, 1.0);
        den += weights.similarity;
    }
    if den > 0.0 { num / den } else { 0.0 }
}

/// Scores an item in place: fills the breakdown's `recency`, `importance` and `access`, and
/// sets [`SourceItem::score`].
pub fn score_item(
    item: &mut SourceItem,
    now: Timestamp,
    decay: RecencyDecay,
    weights: ScoringWeights,
) {
    let r = recency_factor(item.created_at, item.pinned, decay, now);
    let i = item.importance.unwrap_or(DEFAULT_IMPORTANCE);
    let a = access_factor(item.access_count);
    item.breakdown.recency = Some(r);
    item.breakdown.importance = Some(i);
    item.breakdown.access = Some(a);
    item.score = combine(item.similarity, r, i, a, weights);
}

/// Scores a search hit: its backend score becomes the similarity `s`, and the hit comes back
/// with the combined score and a full breakdown.
pub fn score_memory(
    mut hit: ScoredMemory,
    now: Timestamp,
    decay: RecencyDecay,
    weights: ScoringWeights,
) -> ScoredMemory {
    let e = &hit.entry;
    let r = recency_factor(Some(e.created_at), e.pinned, decay, now);
    let i = e.importance.get();
    let a = access_factor(e.access_count);
    let s = if hit.score.is_nan() {
        0.0
    } else {
        hit.score.clamp(0.0, 1.0)
    };
    hit.breakdown = ScoreBreakdown {
        recency: Some(r),
        importance: Some(i),
        access: Some(a),
        ..hit.breakdown
    };
    hit.score = combine(Some(s), r, i, a, weights);
    hit
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU64;
    use std::time::Duration;

    use memory_core::{Importance, NewMemory, Scope};

    use super::*;

    fn week() -> RecencyDecay {
        RecencyDecay::HalfLife {
            seconds: NonZeroU64::new(7 * 24 * 3600).unwrap(),
            floor: prompt_ir::Ratio::ZERO,
        }
    }

    fn now() -> Timestamp {
        Timestamp::from_millis(1_800_000_000_000).unwrap()
    }

    fn item(age_days: u64, pinned: bool) -> SourceItem {
        let scope = Scope::for_user("u").unwrap();
        let mut m = NewMemory::new("x").at(now().minus(Duration::from_secs(age_days * 86_400)));
        if pinned {
            m = m.pinned();
        }
        SourceItem::from_memory(&m.into_entry(&scope, now(), false))
    }

    #[test]
    fn pinned_memories_do_not_decay() {
        let w = ScoringWeights::default();
        let mut old = item(28, false);
        let mut pinned = item(28, true);
        score_item(&mut old, now(), week(), w);
        score_item(&mut pinned, now(), week(), w);
        assert!((old.breakdown.recency.unwrap() - 0.0625).abs() < 1e-6);
        assert_eq!(pinned.breakdown.recency, Some(1.0));
        assert!(pinned.score > old.score);
    }

    #[test]
    fn similarity_leads_and_missing_similarity_is_renormalised() {
        let w = ScoringWeights::default();
        let close = combine(Some(0.9), 0.5, 0.5, 0.0, w);
        let far = combine(Some(0.1), 0.5, 0.5, 0.0, w);
        assert!(close > far);
        // Without similarity the other parts are averaged by their own weights.
        let none = combine(None, 1.0, 1.0, 1.0, w);
        assert!((none - 1.0).abs() < 1e-6);
    }

    #[test]
    fn access_factor_grows_and_saturates() {
        assert_eq!(access_factor(0), 0.0);
        assert!(access_factor(1) < access_factor(10));
        assert!(access_factor(u64::MAX) < 1.0);
    }

    #[test]
    fn hits_keep_their_backend_parts() {
        let scope = Scope::for_user("u").unwrap();
        let entry = NewMemory::new("x")
            .with_importance(Importance::new(1.0).unwrap())
            .at(now())
            .into_entry(&scope, now(), true);
        let hit = ScoredMemory {
            entry,
            score: 0.8,
            breakdown: ScoreBreakdown {
                semantic: Some(0.8),
                ..ScoreBreakdown::default()
            },
        };
        let out = score_memory(hit, now(), week(), ScoringWeights::default());
        assert_eq!(out.breakdown.semantic, Some(0.8));
        assert_eq!(out.breakdown.recency, Some(1.0));
        assert_eq!(out.breakdown.importance, Some(1.0));
        let expected = (0.55 * 0.8 + 0.25 + 0.15) / 1.0;
        assert!((out.score - expected).abs() < 1e-6, "{}", out.score);
    }

    #[test]
    fn weights_are_checked() {
        assert!(ScoringWeights::new(1.0, 0.0, 0.0, 0.0).is_err());
        assert!(ScoringWeights::new(-1.0, 1.0, 0.0, 0.0).is_err());
        assert!(ScoringWeights::new(f32::NAN, 1.0, 0.0, 0.0).is_err());
        assert!(ScoringWeights::new(0.0, 1.0, 0.0, 0.0).is_ok());
    }
}
