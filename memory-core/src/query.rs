//! Search requests, filters, and scored results with their score breakdown.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::capability::{Capabilities, Capability, Limits};
use crate::embedding::Embedding;
use crate::entry::{MemoryEntry, MemoryId, MemoryKind, Role, Tag, TagSet};
use crate::error::{MemoryError, Result};
use crate::spread::{ScopeSpread, Spread};
use crate::time::Timestamp;

/// How a tag filter combines its tags.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TagMatch {
    /// A memory matches if it has at least one of the tags.
    Any,
    /// A memory matches if it has every tag.
    All,
}

/// A tag filter.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TagQuery {
    /// The tags to look for (at least one).
    pub tags: TagSet,
    /// Any or all of them.
    pub mode: TagMatch,
}

impl TagQuery {
    /// Memories with at least one of `tags`.
    pub fn any(tags: impl IntoIterator<Item = Tag>) -> Self {
        Self {
            tags: tags.into_iter().collect(),
            mode: TagMatch::Any,
        }
    }

    /// Memories with all of `tags`.
    pub fn all(tags: impl IntoIterator<Item = Tag>) -> Self {
        Self {
            tags: tags.into_iter().collect(),
            mode: TagMatch::All,
        }
    }

    /// Whether a memory with `tags` matches.
    pub fn matches(&self, tags: &TagSet) -> bool {
        match self.mode {
            TagMatch::Any => self.tags.iter().any(|t| tags.contains(t)),
            TagMatch::All => self.tags.iter().all(|t| tags.contains(t)),
        }
    }
}

/// Conditions every returned memory must meet. The default admits every memory that is
/// not superseded.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Filter {
    /// Tag condition.
    pub tags: Option<TagQuery>,
    /// Only memories created at or after this instant.
    pub created_after: Option<Timestamp>,
    /// Only memories created strictly before this instant.
    pub created_before: Option<Timestamp>,
    /// Only these kinds (all kinds when empty).
    pub kinds: Vec<MemoryKind>,
    /// Only messages said by these roles (any memory when empty; a memory without a role
    /// never matches a list).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub roles: Vec<Role>,
    /// Only memories whose validity window contains this instant.
    pub valid_at: Option<Timestamp>,
    /// Also return memories marked as superseded.
    pub include_superseded: bool,
}

impl Filter {
    /// Memories as they stood at `at`: created by then and valid then, superseded ones
    /// included (they may have held at `at`). Needs [`Capability::TimeFilter`].
    pub fn as_of(at: Timestamp) -> Self {
        Self {
            created_before: Some(at.plus(std::time::Duration::from_millis(1))),
            valid_at: Some(at),
            include_superseded: true,
            ..Self::default()
        }
    }

    /// Whether `entry` passes the filter.
    pub fn matches(&self, entry: &MemoryEntry) -> bool {
        self.tags.as_ref().is_none_or(|q| q.matches(&entry.tags))
            && self.created_after.is_none_or(|t| entry.created_at >= t)
            && self.created_before.is_none_or(|t| entry.created_at < t)
            && (self.kinds.is_empty() || self.kinds.contains(&entry.kind))
            && (self.roles.is_empty() || entry.role.is_some_and(|r| self.roles.contains(&r)))
            && (self.include_superseded || entry.superseded_by.is_none())
            && self.valid_at.is_none_or(|at| {
                entry.valid_from.is_none_or(|f| f <= at) && entry.valid_until.is_none_or(|u| at < u)
            })
    }

    /// Checks the filter is well formed and only uses advertised capabilities.
    pub fn validate(&self, caps: &Capabilities, provider: &str) -> Result<()> {
        if let Some(q) = &self.tags {
            caps.require(Capability::TagFilter, provider)?;
            if q.tags.is_empty() {
                return Err(MemoryError::invalid(
                    "tag filter",
                    "names no tags; give at least one",
                ));
            }
        }
        if self.created_after.is_some() || self.created_before.is_some() || self.valid_at.is_some()
        {
            caps.require(Capability::TimeFilter, provider)?;
        }
        if let (Some(a), Some(b)) = (self.created_after, self.created_before)
            && b <= a
        {
            return Err(MemoryError::invalid(
                "time filter",
                format!("created_before {b} is not after created_after {a}"),
            ));
        }
        Ok(())
    }
}

/// Relative weights of the two signals in hybrid search. Both are at least 0 and they sum
/// to 1.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "HybridWeightsRaw")]
pub struct HybridWeights {
    semantic: f32,
    keyword: f32,
}

#[derive(Deserialize)]
struct HybridWeightsRaw {
    semantic: f32,
    keyword: f32,
}

impl TryFrom<HybridWeightsRaw> for HybridWeights {
    type Error = MemoryError;
    fn try_from(r: HybridWeightsRaw) -> Result<Self> {
        Self::new(r.semantic, r.keyword)
    }
}

impl HybridWeights {
    /// Weights from two non-negative numbers (not both zero), scaled to sum to 1.
    pub fn new(semantic: f32, keyword: f32) -> Result<Self> {
        let ok = |w: f32| w.is_finite() && w >= 0.0;
        if !ok(semantic) || !ok(keyword) || semantic + keyword <= 0.0 {
            return Err(MemoryError::invalid(
                "hybrid weights",
                format!(
                    "semantic {semantic}, keyword {keyword}: both must be finite and >= 0, not both 0"
                ),
            ));
        }
        let sum = semantic + keyword;
        Ok(Self {
            semantic: semantic / sum,
            keyword: keyword / sum,
        })
    }

    /// Weight of the semantic score.
    pub fn semantic(self) -> f32 {
        self.semantic
    }

    /// Weight of the keyword score.
    pub fn keyword(self) -> f32 {
        self.keyword
    }
}

impl Default for HybridWeights {
    /// Semantic 0.5, keyword 0.5: [`fuse`] measures each signal by how far its candidates
    /// stand out of their scope, so neither needs a head start; which one leads is decided
    /// per query by that (see BENCHMARKS.md for both kinds of conversation).
    fn default() -> Self {
        Self {
            semantic: 0.5,
            keyword: 0.5,
        }
    }
}

/// How a search ranks memories.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SearchMode {
    /// Cosine similarity of embeddings; the score is the similarity (-1..=1).
    Semantic,
    /// BM25 over words; the score is BM25 divided by the best match's BM25 (0..=1].
    Keyword,
    /// Weighted sum of the semantic similarity (clamped to 0..=1) and the normalised keyword
    /// score, over the union of both candidate lists; see [`fuse`].
    Hybrid(HybridWeights),
}

impl SearchMode {
    /// The capability this mode needs.
    pub fn capability(self) -> Capability {
        match self {
            Self::Semantic => Capability::SemanticSearch,
            Self::Keyword => Capability::KeywordSearch,
            Self::Hybrid(_) => Capability::HybridSearch,
        }
    }

    /// The mode to search with when `preferred` is asked for: `preferred` itself if `caps`
    /// support it, else the most capable mode they do, in the order hybrid (with
    /// `preferred`'s weights, or the default ones), keyword, semantic. `None` when `caps`
    /// offer no search at all. The one rule every caller that picks a mode shares
    /// ([`SearchRequest::best`], hydrate's memory source, the CLI).
    pub fn best_supported(preferred: SearchMode, caps: &Capabilities) -> Option<SearchMode> {
        let weights = match preferred {
            Self::Hybrid(w) => w,
            _ => HybridWeights::default(),
        };
        [
            preferred,
            Self::Hybrid(weights),
            Self::Keyword,
            Self::Semantic,
        ]
        .into_iter()
        .find(|m| caps.supports(m.capability()))
    }

    /// `hybrid`, `semantic` or `keyword`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Hybrid(_) => "hybrid",
            Self::Semantic => "semantic",
            Self::Keyword => "keyword",
        }
    }
}

/// A search: what to look for, how to rank, how many, and which memories qualify.
#[derive(Clone, Debug, PartialEq)]
pub struct SearchRequest {
    /// The query text (needed for keyword and hybrid; embedded for semantic when no vector).
    pub text: Option<String>,
    /// A precomputed query vector (semantic and hybrid).
    pub vector: Option<Embedding>,
    /// Ranking.
    pub mode: SearchMode,
    /// At most this many hits (1 to the backend's `max_results`).
    pub limit: usize,
    /// Leave out hits scoring below this.
    pub threshold: Option<f32>,
    /// Conditions every hit meets.
    pub filter: Filter,
    /// Whether returned hits count as recalled (bump `access_count` and `accessed_at`).
    pub record_access: bool,
}

impl SearchRequest {
    /// A search for `text` in `mode`, top 10.
    pub fn in_mode(text: impl Into<String>, mode: SearchMode) -> Self {
        Self {
            text: Some(text.into()),
            vector: None,
            mode,
            limit: 10,
            threshold: None,
            filter: Filter::default(),
            record_access: true,
        }
    }

    /// Semantic search for `text` (embedded by the backend's embedder), top 10.
    pub fn semantic(text: impl Into<String>) -> Self {
        Self::in_mode(text, SearchMode::Semantic)
    }

    /// Semantic search for a precomputed vector, top 10.
    pub fn vector(vector: Embedding) -> Self {
        Self {
            text: None,
            vector: Some(vector),
            ..Self::in_mode("", SearchMode::Semantic)
        }
    }

    /// Keyword search for `text`, top 10.
    pub fn keyword(text: impl Into<String>) -> Self {
        Self::in_mode(text, SearchMode::Keyword)
    }

    /// Hybrid search for `text` with equal weights, top 10.
    pub fn hybrid(text: impl Into<String>) -> Self {
        Self::in_mode(text, SearchMode::Hybrid(HybridWeights::default()))
    }

    /// The best search `caps` offer for `text`, top 10: hybrid when the store has vectors and
    /// keywords, else keyword, else semantic ([`SearchMode::best_supported`]; semantic when
    /// nothing is offered, which the store then refuses as unsupported).
    pub fn best(caps: &Capabilities, text: impl Into<String>) -> Self {
        let mode = SearchMode::best_supported(SearchMode::Hybrid(HybridWeights::default()), caps)
            .unwrap_or(SearchMode::Semantic);
        Self::in_mode(text, mode)
    }

    /// Sets the number of hits.
    pub fn limit(mut self, limit: usize) -> Self {
        self.limit = limit;
        self
    }

    /// Sets the minimum score.
    pub fn threshold(mut self, threshold: f32) -> Self {
        self.threshold = Some(threshold);
        self
    }

    /// Sets the filter.
    pub fn filter(mut self, filter: Filter) -> Self {
        self.filter = filter;
        self
    }

    /// Supplies a precomputed query vector as well.
    pub fn with_vector(mut self, vector: Embedding) -> Self {
        self.vector = Some(vector);
        self
    }

    /// Searches without counting hits as recalled.
    pub fn without_access_tracking(mut self) -> Self {
        self.record_access = false;
        self
    }

    /// The query text, trimmed, if there is any.
    pub fn query_text(&self) -> Option<&str> {
        self.text
            .as_deref()
            .map(str::trim)
            .filter(|t| !t.is_empty())
    }

    /// Checks the request against a backend's capabilities and limits before any work.
    pub fn validate(&self, caps: &Capabilities, limits: &Limits, provider: &str) -> Result<()> {
        caps.require(self.mode.capability(), provider)?;
        check_limit(self.limit, limits)?;
        if let Some(t) = self.threshold
            && !t.is_finite()
        {
            return Err(MemoryError::invalid(
                "threshold",
                format!("{t} is not a finite number"),
            ));
        }
        match self.mode {
            SearchMode::Keyword | SearchMode::Hybrid(_) if self.query_text().is_none() => {
                Err(MemoryError::invalid(
                    "query",
                    "keyword and hybrid search need query text; none was given",
                ))
            }
            SearchMode::Semantic if self.query_text().is_none() && self.vector.is_none() => {
                Err(MemoryError::invalid(
                    "query",
                    "semantic search needs query text or a query vector",
                ))
            }
            _ => self.filter.validate(caps, provider),
        }
    }
}

/// Checks a result count against a backend's limits.
pub fn check_limit(limit: usize, limits: &Limits) -> Result<()> {
    if limit == 0 || limit > limits.max_results {
        return Err(MemoryError::invalid(
            "limit",
            format!("{limit} is outside 1..={}", limits.max_results),
        ));
    }
    Ok(())
}

/// Why a memory scored what it did. Backends fill the retrieval parts; rerankers and the
/// hydration layer add the others.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ScoreBreakdown {
    /// Cosine similarity to the query vector.
    pub semantic: Option<f32>,
    /// Keyword score, BM25 normalised so the best match of the query is 1.
    pub keyword: Option<f32>,
    /// Raw BM25, before normalisation.
    pub keyword_raw: Option<f32>,
    /// Recency factor (0..=1), when a later stage applies one.
    pub recency: Option<f32>,
    /// Importance factor, when a later stage applies one.
    pub importance: Option<f32>,
    /// Access-frequency factor, when a later stage applies one.
    pub access: Option<f32>,
}

/// A search hit.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScoredMemory {
    /// The memory (access count already bumped when the search recorded access).
    pub entry: MemoryEntry,
    /// The score the hits are ranked by (meaning depends on [`SearchMode`]).
    pub score: f32,
    /// The parts that made the score.
    pub breakdown: ScoreBreakdown,
}

/// One candidate of [`fuse`]'s output.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Fused {
    /// The memory.
    pub id: MemoryId,
    /// The weighted score.
    pub score: f32,
    /// Its semantic similarity, if it was a semantic candidate.
    pub semantic: Option<f32>,
    /// Its normalised keyword score, if it was a keyword candidate.
    pub keyword: Option<f32>,
    /// Its raw BM25, if it was a keyword candidate.
    pub keyword_raw: Option<f32>,
}

/// Divides raw keyword scores (BM25, higher is better) by the best of them, so the best is 1
/// and every other in `0..=1`; all 0 when none is above 0. The one rule [`fuse`] and
/// [`rank`] share: the best is the maximum, so a store's order cannot change the scale.
fn keyword_scale(raw: impl IntoIterator<Item = f32>) -> impl Fn(f32) -> f32 {
    let best = raw.into_iter().fold(0.0f32, f32::max);
    move |s| if best > 0.0 { s / best } else { 0.0 }
}

/// The score [`fuse`] gives a candidate that stands out no more than the scope's average:
/// it stays a candidate, ranked last.
pub const BELOW_AVERAGE: f32 = 0.001;

/// Hybrid fusion shared by all backends, so the same request ranks the same way everywhere.
///
/// `semantic` holds `(id, cosine similarity)` candidates, `keyword` holds `(id, raw BM25,
/// passages)` candidates (higher is better; `passages` is how many the memory is stored as,
/// 1 for a memory of one vector or none); `spread` is how each score is spread over the scope's
/// memories (see [`ScopeSpread`]; a part a backend could not measure is estimated from
/// its candidates). Each score is put on one scale, how many standard deviations it lies
/// above the scope's average, and a candidate's fused value is
/// `w_semantic * z_semantic + w_keyword * z_keyword`. A candidate missing from the keyword
/// list scores 0 there (it shares no word, or too few to be a candidate); one missing from
/// the semantic list is taken as similar as the least similar semantic candidate. So a
/// signal counts as much as its best candidates stand out of its scope: in a chat where
/// every message shares the question's words, BM25's best barely do, and meaning leads;
/// where a rare name is asked, it is the other way round.
///
/// The score is the fused value over the best one's (the best is 1); at or below the
/// scope's average it is [`BELOW_AVERAGE`], less by a factor e per deviation below, so such
/// candidates stay in order, last. A long memory's BM25 is taken less what its number of
/// passages adds by itself ([`passage_similarity`](crate::passage_similarity) on the keyword
/// scale), as its similarity is: it holds as many chances to share the question's words as
/// to match its meaning. Candidates with nothing in common with the
/// query (similarity at most 0, no keyword match) are dropped; the rest are sorted by
/// fused value, ties broken by id for determinism. `Fused::keyword` is the BM25 score over
/// the best one's, for explanations.
pub fn fuse(
    semantic: &[(MemoryId, f32)],
    keyword: &[(MemoryId, f32, usize)],
    weights: HybridWeights,
    spread: ScopeSpread,
) -> Vec<Fused> {
    let scale = keyword_scale(keyword.iter().map(|&(_, s, _)| s));
    let sem_spread = spread
        .semantic
        .or_else(|| Spread::of(semantic.iter().map(|h| h.1), semantic.len()));
    let kw_spread = spread
        .keyword
        .or_else(|| Spread::of(keyword.iter().map(|h| h.1), keyword.len()));
    let least_similar = semantic.iter().map(|h| h.1).reduce(f32::min);
    // Each candidate with its BM25 less what its passages add (0 when not a keyword match).
    let mut by_id: HashMap<MemoryId, (Fused, f32)> = HashMap::new();
    for &(id, sim) in semantic {
        by_id.insert(
            id,
            (
                Fused {
                    id,
                    score: 0.0,
                    semantic: Some(sim),
                    keyword: None,
                    keyword_raw: None,
                },
                0.0,
            ),
        );
    }
    let deviation = kw_spread.map_or(0.0, Spread::std);
    for &(id, raw, passages) in keyword {
        let (f, corrected) = by_id.entry(id).or_insert((
            Fused {
                id,
                score: 0.0,
                semantic: None,
                keyword: None,
                keyword_raw: None,
            },
            0.0,
        ));
        f.keyword = Some(scale(raw));
        f.keyword_raw = Some(raw);
        *corrected = crate::passage_similarity(raw, passages, deviation);
    }
    // A candidate with nothing in common with the query (orthogonal or opposed vector, no
    // shared word) is not a hit.
    let mut out: Vec<(f32, Fused)> = by_id
        .into_values()
        .filter(|(f, _)| {
            f.semantic.is_some_and(|s| s > 0.0) || f.keyword_raw.is_some_and(|k| k > 0.0)
        })
        .map(|(f, keyword)| {
            let z_semantic = match (sem_spread, f.semantic.or(least_similar)) {
                (Some(spread), Some(sim)) => spread.z(sim),
                _ => 0.0,
            };
            let z_keyword = kw_spread.map_or(0.0, |spread| spread.z(keyword));
            (
                weights.semantic() * z_semantic + weights.keyword() * z_keyword,
                f,
            )
        })
        .collect();
    out.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.id.cmp(&b.1.id)));
    let best = out.first().map_or(0.0, |c| c.0);
    out.into_iter()
        .map(|(value, mut f)| {
            f.score = if value > 0.0 && best > 0.0 {
                (value / best).max(BELOW_AVERAGE)
            } else {
                BELOW_AVERAGE * value.min(0.0).exp()
            };
            f
        })
        .collect()
}

/// Turns the candidates a store found for `request` into its ranked hits, the same way in
/// every backend: the score and [`ScoreBreakdown`] of the request's [`SearchMode`], then its
/// threshold, then its limit.
///
/// Candidates are `(key, id, score)`, best first: `key` is whatever the store loads hits by
/// (a row key, or the id again), `score` the cosine similarity (`semantic`) or raw BM25
/// (`keyword`, which also carries the memory's number of passages, 1 for one vector or
/// none). Semantic mode reads only `semantic`, keyword mode only `keyword` (each score
/// divided by the best one), hybrid mode [`fuse`]s both on the scale of `spread`. A long
/// memory's similarity is already [`passage_similarity`](crate::passage_similarity) of its
/// passages; `fuse` corrects its BM25 alike.
pub fn rank<K: Copy>(
    request: &SearchRequest,
    semantic: &[(K, MemoryId, f32)],
    keyword: &[(K, MemoryId, f32, usize)],
    spread: ScopeSpread,
) -> Vec<(K, f32, ScoreBreakdown)> {
    let mut ranked: Vec<(K, f32, ScoreBreakdown)> = match request.mode {
        SearchMode::Semantic => semantic
            .iter()
            .map(|&(key, _, s)| {
                let b = ScoreBreakdown {
                    semantic: Some(s),
                    ..Default::default()
                };
                (key, s, b)
            })
            .collect(),
        SearchMode::Keyword => {
            let scale = keyword_scale(keyword.iter().map(|h| h.2));
            keyword
                .iter()
                .map(|&(key, _, raw, _)| {
                    let s = scale(raw);
                    let b = ScoreBreakdown {
                        keyword: Some(s),
                        keyword_raw: Some(raw),
                        ..Default::default()
                    };
                    (key, s, b)
                })
                .collect()
        }
        SearchMode::Hybrid(weights) => {
            let key_of: HashMap<MemoryId, K> = semantic
                .iter()
                .map(|&(key, id, _)| (id, key))
                .chain(keyword.iter().map(|&(key, id, _, _)| (id, key)))
                .collect();
            let sem: Vec<(MemoryId, f32)> = semantic.iter().map(|&(_, id, s)| (id, s)).collect();
            let kw: Vec<(MemoryId, f32, usize)> =
                keyword.iter().map(|&(_, id, s, n)| (id, s, n)).collect();
            fuse(&sem, &kw, weights, spread)
                .into_iter()
                .filter_map(|f| {
                    let b = ScoreBreakdown {
                        semantic: f.semantic,
                        keyword: f.keyword,
                        keyword_raw: f.keyword_raw,
                        ..Default::default()
                    };
                    key_of.get(&f.id).map(|&key| (key, f.score, b))
                })
                .collect()
        }
    };
    if let Some(t) = request.threshold {
        ranked.retain(|(_, s, _)| *s >= t);
    }
    ranked.truncate(request.limit);
    ranked
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keyword_scores_are_divided_by_the_best_in_fuse_and_rank_alike() {
        let scale = keyword_scale([2.0, 8.0, 4.0]);
        assert_eq!([scale(8.0), scale(4.0), scale(2.0)], [1.0, 0.5, 0.25]);
        let zero = keyword_scale([0.0, 0.0]);
        assert_eq!(zero(0.0), 0.0);
        assert_eq!(keyword_scale(std::iter::empty())(3.0), 0.0);

        // Best first (as stores hand them over) or not, `rank` and `fuse` agree.
        let (a, b, c) = (MemoryId::new(), MemoryId::new(), MemoryId::new());
        for kw in [
            [(1, a, 8.0, 1), (2, b, 4.0, 1), (3, c, 2.0, 1)],
            [(3, c, 2.0, 1), (1, a, 8.0, 1), (2, b, 4.0, 1)],
        ] {
            let ranked = rank(
                &SearchRequest::keyword("q"),
                &[],
                &kw,
                ScopeSpread::default(),
            );
            let scores: Vec<_> = ranked.iter().map(|h| (h.0, h.2.keyword)).collect();
            let ids: Vec<_> = kw.iter().map(|&(_, id, s, n)| (id, s, n)).collect();
            let only_keyword = HybridWeights::new(0.0, 1.0).unwrap();
            let fused = fuse(&[], &ids, only_keyword, ScopeSpread::default());
            for (key, keyword) in scores {
                let id = kw.iter().find(|h| h.0 == key).unwrap().1;
                let f = fused.iter().find(|f| f.id == id).unwrap();
                assert_eq!(keyword, f.keyword, "{key}");
            }
            let mut by_key: Vec<_> = ranked.iter().map(|h| (h.0, h.1)).collect();
            by_key.sort_by_key(|h| h.0);
            assert_eq!(by_key, [(1, 1.0), (2, 0.5), (3, 0.25)]);
        }
    }

    #[test]
    fn the_best_supported_mode_is_the_preferred_else_the_most_capable() {
        let full = Capabilities::full_store(true);
        let text_only = Capabilities::full_store(false);
        let vectors_only = Capabilities::none()
            .with(Capability::SemanticSearch)
            .with(Capability::HybridSearch);
        let w = HybridWeights::new(1.0, 1.0).unwrap();
        let best = SearchMode::best_supported;
        assert_eq!(
            best(SearchMode::Hybrid(w), &full),
            Some(SearchMode::Hybrid(w))
        );
        assert_eq!(
            best(SearchMode::Semantic, &full),
            Some(SearchMode::Semantic)
        );
        assert_eq!(best(SearchMode::Keyword, &full), Some(SearchMode::Keyword));
        assert_eq!(
            best(SearchMode::Hybrid(w), &text_only),
            Some(SearchMode::Keyword)
        );
        assert_eq!(
            best(SearchMode::Semantic, &text_only),
            Some(SearchMode::Keyword)
        );
        assert_eq!(
            best(SearchMode::Keyword, &vectors_only),
            Some(SearchMode::Hybrid(HybridWeights::default()))
        );
        assert_eq!(best(SearchMode::Keyword, &Capabilities::none()), None);
        assert_eq!(
            SearchRequest::best(&text_only, "q").mode,
            SearchMode::Keyword
        );
        assert_eq!(
            SearchRequest::best(&full, "q").mode,
            SearchMode::Hybrid(HybridWeights::default())
        );
    }

    #[test]
    fn weights_are_normalised_and_validated() {
        let w = HybridWeights::new(3.0, 1.0).unwrap();
        assert!((w.semantic() - 0.75).abs() < 1e-6 && (w.keyword() - 0.25).abs() < 1e-6);
        assert!(HybridWeights::new(-1.0, 1.0).is_err());
        assert!(HybridWeights::new(0.0, 0.0).is_err());
        assert!(serde_json::from_str::<HybridWeights>(r#"{"semantic":-1,"keyword":2}"#).is_err());
    }

    #[test]
    fn rank_scores_each_mode_then_applies_threshold_and_limit() {
        let (a, b, c) = (MemoryId::new(), MemoryId::new(), MemoryId::new());
        let sem = [(1, a, 0.9), (2, b, 0.5), (3, c, 0.1)];
        let kw = [(2, b, 8.0, 1), (3, c, 2.0, 1)];

        let hits = rank(
            &SearchRequest::semantic("q").threshold(0.3),
            &sem,
            &kw,
            ScopeSpread::default(),
        );
        assert_eq!(hits.iter().map(|h| h.0).collect::<Vec<_>>(), [1, 2]);
        assert_eq!(hits[0].2.semantic, Some(0.9));
        assert_eq!(hits[0].2.keyword, None);

        let hits = rank(
            &SearchRequest::keyword("q").limit(1),
            &sem,
            &kw,
            ScopeSpread::default(),
        );
        assert_eq!(hits.len(), 1);
        assert_eq!((hits[0].0, hits[0].1), (2, 1.0));
        assert_eq!(hits[0].2.keyword_raw, Some(8.0));
        let all = rank(
            &SearchRequest::keyword("q"),
            &sem,
            &kw,
            ScopeSpread::default(),
        );
        assert_eq!(all[1].1, 0.25);
        // Keyword mode and hybrid fusion scale by the same best score, whatever the order.
        let unsorted = [(3, c, 2.0, 1), (2, b, 8.0, 1)];
        let all = rank(
            &SearchRequest::keyword("q"),
            &sem,
            &unsorted,
            ScopeSpread::default(),
        );
        assert_eq!((all[0].1, all[1].1), (0.25, 1.0));

        let hits = rank(
            &SearchRequest::hybrid("q"),
            &sem,
            &kw,
            ScopeSpread::default(),
        );
        // b is in both lists and comes first; every key is the one its candidate carried.
        assert_eq!(hits[0].0, 2);
        assert_eq!(hits.len(), 3);
        assert!(hits.iter().all(|h| h.2.semantic.is_some()));
        assert_eq!(
            hits.iter().find(|h| h.0 == 3).unwrap().2.keyword,
            Some(0.25)
        );
    }

    /// A scope where similarities average 0.2 (deviation 0.1) and BM25 scores 0.3
    /// (deviation 1).
    fn scope_spread(semantic: (f32, f32), keyword: (f32, f32)) -> ScopeSpread {
        ScopeSpread {
            semantic: Some(Spread::new(semantic.0, semantic.1)),
            keyword: Some(Spread::new(keyword.0, keyword.1)),
        }
    }

    #[test]
    fn fusion_rewards_agreement() {
        let (a, b, c, d, e) = (
            MemoryId::new(),
            MemoryId::new(),
            MemoryId::new(),
            MemoryId::new(),
            MemoryId::new(),
        );
        let out = fuse(
            &[(a, 0.62), (b, 0.6), (d, 0.3)],
            &[(c, 6.5, 1), (b, 6.0, 1), (e, 1.0, 1)],
            HybridWeights::new(0.5, 0.5).unwrap(),
            scope_spread((0.2, 0.1), (0.3, 1.0)),
        );
        // b is near the top of both lists; a and c each top one list only.
        assert_eq!(out[0].id, b);
        assert_eq!(out[0].score, 1.0);
        assert_eq!(out.len(), 5);
        assert_eq!(out.iter().find(|f| f.id == c).unwrap().keyword, Some(1.0));
        assert!(out.windows(2).all(|w| w[0].score >= w[1].score));
    }

    #[test]
    fn the_signal_that_stands_out_of_its_scope_leads() {
        let (x, y) = (MemoryId::new(), MemoryId::new());
        // x is the most similar, y the best keyword match; each is second in the other list.
        let sem = [(x, 0.6), (y, 0.4)];
        let kw = [(y, 9.0, 1), (x, 6.0, 1)];
        let even = HybridWeights::new(0.5, 0.5).unwrap();
        // In a chat where every message shares the question's words, BM25 scores are
        // spread wide and its best barely stands out: meaning leads.
        let one_project = fuse(&sem, &kw, even, scope_spread((0.2, 0.1), (5.0, 4.0)));
        assert_eq!(one_project[0].id, x);
        // Where the question's words are rare, the best keyword match stands far out and
        // similarities are close together: the words lead.
        let rare_words = fuse(&sem, &kw, even, scope_spread((0.3, 0.2), (0.1, 1.0)));
        assert_eq!(rare_words[0].id, y);
    }

    #[test]
    fn a_long_memory_is_not_many_chances_to_share_the_words() {
        let (long, short) = (MemoryId::new(), MemoryId::new());
        let even = HybridWeights::new(0.5, 0.5).unwrap();
        let spread = scope_spread((0.2, 0.1), (1.0, 2.0));
        // Alike in meaning; the long one (10 passages) has the higher BM25, by less than
        // what ten chances add on the keyword scale (2 * 1.54).
        let sem = [(long, 0.5), (short, 0.5)];
        let out = fuse(&sem, &[(long, 7.0, 10), (short, 5.0, 1)], even, spread);
        assert_eq!(out[0].id, short);
        // Its raw BM25 is what the hit reports.
        let hit = out.iter().find(|f| f.id == long).unwrap();
        assert_eq!((hit.keyword_raw, hit.keyword), (Some(7.0), Some(1.0)));
        // Counted as one passage, it would lead.
        let out = fuse(&sem, &[(long, 7.0, 1), (short, 5.0, 1)], even, spread);
        assert_eq!(out[0].id, long);
    }

    #[test]
    fn candidates_below_the_scopes_average_stay_last() {
        let (a, b, c) = (MemoryId::new(), MemoryId::new(), MemoryId::new());
        let out = fuse(
            &[(a, 0.7), (b, 0.15), (c, -0.2)],
            &[],
            HybridWeights::default(),
            scope_spread((0.2, 0.1), (0.0, 0.0)),
        );
        // c is opposed to the query: not a hit. b is below the average similarity: it
        // stays, last, under the floor (by a factor e per deviation below the average).
        assert_eq!(out.iter().map(|f| f.id).collect::<Vec<_>>(), [a, b]);
        assert_eq!(out[0].score, 1.0);
        let below = BELOW_AVERAGE * (0.5f32 * -0.5).exp();
        assert!((out[1].score - below).abs() < 1e-9, "{}", out[1].score);
    }

    #[test]
    fn requests_are_checked_against_capabilities() {
        let caps = Capabilities::none().with(Capability::KeywordSearch);
        let limits = Limits::default();
        let err = SearchRequest::semantic("x")
            .validate(&caps, &limits, "b")
            .unwrap_err();
        assert!(err.is_unsupported());
        assert!(
            SearchRequest::keyword("x")
                .limit(0)
                .validate(&caps, &limits, "b")
                .is_err()
        );
        assert!(
            SearchRequest::keyword("  ")
                .validate(&caps, &limits, "b")
                .is_err()
        );
        assert!(
            SearchRequest::keyword("x")
                .validate(&caps, &limits, "b")
                .is_ok()
        );
    }
}
