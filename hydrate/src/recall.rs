//! Recall: the one ranking of a lookup, for every door that offers one (the model's `recall`
//! tool and the bot's `/recall` through [`Ops::recall`](crate::Ops::recall), `ava recall`,
//! MCP `recall`): the store's search over each readable scope, a pool of
//! [`RECALL_POOL`] times the hits asked for, each hit lifted by the talk around it as the
//! prompt's semantic source lifts it, then scored by recency, importance and access
//! ([`crate::scoring`]), best first.

use memory_core::{MemoryBackend, Scope, ScoredMemory, SearchRequest, Timestamp};
use prompt_ir::{Ratio, RecencyDecay};

use crate::error::Result;
use crate::memory::lift_by_nearby;
use crate::reach::NEARBY_LIFT;
use crate::scoring::{ScoringWeights, score_memory};

/// [`recall`] ranks this many times the hits it returns: a hit said amid talk that matches
/// may rise from below the cut (measured in BENCHMARKS.md, "Read in the talk around it").
pub const RECALL_POOL: usize = 4;

/// How [`recall`] ranks what the store's search found.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RecallRanking {
    /// How far a hit is lifted toward the best other hit said near it in time
    /// ([`NEARBY_LIFT`] by default, as the prompt's
    /// [`MemoryTuning::nearby_lift`](crate::MemoryTuning::nearby_lift)).
    pub nearby_lift: Ratio,
    /// The store's embedder's window
    /// ([`window_bytes`](memory_core::EmbeddingProvider::window_bytes)): a memory longer
    /// than that was searched passage by passage, so it keeps its own score, as the semantic
    /// source keeps it. `None`: every hit may be lifted.
    pub window: Option<usize>,
    /// How similarity, recency, importance and access combine.
    pub scoring: ScoringWeights,
    /// How recency decays.
    pub decay: RecencyDecay,
}

impl RecallRanking {
    /// The product's ranking for a store whose embedder reads `window` bytes at a time.
    pub fn new(window: Option<usize>) -> Self {
        Self {
            nearby_lift: Ratio::clamped(f64::from(NEARBY_LIFT)),
            window,
            scoring: ScoringWeights::default(),
            decay: RecencyDecay::default(),
        }
    }
}

/// The memories of `scopes` that best match `request`, best first, at most `request.limit`
/// (see the module docs). The request says how to search (mode, filter, whether hits count
/// as recalled); its limit is what is returned, and the store is asked for
/// [`RECALL_POOL`] times as many (within its `max_results`). Scores are the combined score
/// of [`crate::scoring`], their breakdown keeping the search's own parts.
pub async fn recall(
    store: &dyn MemoryBackend,
    scopes: &[Scope],
    request: &SearchRequest,
    ranking: &RecallRanking,
    now: Timestamp,
) -> Result<Vec<ScoredMemory>> {
    let limit = request.limit;
    if limit == 0 {
        return Ok(Vec::new());
    }
    let pool = limit
        .saturating_mul(RECALL_POOL)
        .min(store.info().limits.max_results)
        .max(limit);
    let pooled = request.clone().limit(pool);
    let mut hits = Vec::new();
    for scope in scopes {
        hits.extend(store.search(scope, &pooled).await?);
    }
    let lifted = lift_by_nearby(&hits, ranking.nearby_lift.get() as f32, ranking.window);
    let mut hits: Vec<ScoredMemory> = hits
        .into_iter()
        .zip(lifted)
        .map(|(mut h, s)| {
            h.score = s;
            score_memory(h, now, ranking.decay, ranking.scoring)
        })
        .collect();
    hits.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then(a.entry.id.cmp(&b.entry.id))
    });
    hits.truncate(limit);
    Ok(hits)
}
