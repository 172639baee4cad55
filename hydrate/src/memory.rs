//! The memory-backed provider: temporal, knowledge and semantic context from any
//! `Arc<dyn MemoryBackend>` (and, optionally, the embedder of its space).
//!
//! - **temporal**: the newest `Message` memories of the request's scope (`recent`).
//! - **knowledge**: `Fact` memories valid now, from the request's scope and, in a private
//!   context ([`Reach::Private`]), from the user-level scope (same tenant and user, no chat
//!   or thread; in a shared chat only the user-wide facts of a member who shares them there):
//!   the newest ones plus the ones a search finds relevant; and the user's
//!   standing instructions in the request's scope (messages marked by
//!   [`crate::with_instruction_mark`]).
//! - **semantic**: related past `Message` memories found by searching for the observation,
//!   over-fetched by the temporal window so that, once messages already in the recent
//!   conversation are removed (hydrate de-duplicates by memory id), enough remain. A
//!   first-person question ("what did I say...") also searches the user's own messages. The
//!   best hits bring the message before each of them (what a reply answers; see
//!   [`MemoryTuning::neighbours`]), and a hit said close in time to a better one is lifted
//!   toward it (what the talk around it was about; see [`NEARBY_LIFT`]).
//!
//! Searches use [`MemoryTuning::search`] (default hybrid) when the backend advertises it, and
//! otherwise fall back to the most capable mode it does (`SearchMode::best_supported`:
//! hybrid, keyword, semantic) and record the degradation, e.g. "asked hybrid, got keyword".
//! The observation is embedded once per request and space (see
//! [`QueryEmbeddings`](crate::QueryEmbeddings)); a precomputed query vector is used as is.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use async_trait::async_trait;
use memory_core::{
    Capability, EmbeddingProvider, ErrorChain, Filter, MemoryBackend, MemoryId, MemoryKind, Role,
    Scope, SearchMode, SearchRequest, Tag, TagQuery,
};

use crate::error::{Error, Result};
use crate::instructions::INSTRUCTION_TAG;
use crate::provider::{BuildContext, ProviderCapabilities, SourceBuilder, SourceProvider};
use crate::reach::SearchPreference;
use crate::source::{
    ContextSource, DegradationKind, Honours, SourceItem, SourceKind, SourceOutput, SourceQuery,
};

#[cfg(doc)]
use crate::reach::{MemoryTuning, NEARBY_LIFT, Reach};

/// The share of a related message's similarity the message before it is given: it
/// competes for room as a hit of its own, a little below the one that brought it.
pub const NEIGHBOUR_SHARE: f32 = 0.7;

/// The time constant, in minutes, of [`NEARBY_LIFT`]'s weight: a hit half an hour away counts
/// `1/e` of one said at the same moment, one a day away nothing. Half an hour is the pause
/// that commonly ends a session of talk, not a value fitted to the evaluation data.
pub const NEARBY_MINUTES: f64 = 30.0;

/// The memory-backed provider over `backend`, supplying temporal, knowledge and semantic
/// context. `embedder` (the one of the backend's space, if any) embeds the observation once
/// per request for every search; without it the backend embeds query text itself.
pub fn memory_provider(
    backend: Arc<dyn MemoryBackend>,
    embedder: Option<Arc<dyn EmbeddingProvider>>,
) -> SourceProvider {
    let name = format!("memory:{}", backend.info().name);
    let builder: Arc<dyn SourceBuilder> = Arc::new(MemorySourceBuilder { backend, embedder });
    let caps = ProviderCapabilities::new(SourceKind::MEMORY).with_honours(MemorySource::HONOURS);
    SourceKind::MEMORY
        .into_iter()
        .fold(SourceProvider::new(name, caps), |p, kind| {
            p.with_builder(kind, Arc::clone(&builder))
        })
}

#[derive(Debug)]
struct MemorySourceBuilder {
    backend: Arc<dyn MemoryBackend>,
    embedder: Option<Arc<dyn EmbeddingProvider>>,
}

impl SourceBuilder for MemorySourceBuilder {
    fn build(&self, _ctx: &BuildContext<'_>) -> Result<Arc<dyn ContextSource>> {
        Ok(Arc::new(MemorySource::new(
            Arc::clone(&self.backend),
            self.embedder.clone(),
        )))
    }
}

/// A context source over a memory backend; serves the temporal, knowledge and semantic
/// kinds (see the module docs), reading what the query's [`Reach`] allows and searching as
/// its [`MemoryTuning`] says. Usable on its own as an explicit source.
#[derive(Debug, Clone)]
pub struct MemorySource {
    name: String,
    backend: Arc<dyn MemoryBackend>,
    embedder: Option<Arc<dyn EmbeddingProvider>>,
}

impl MemorySource {
    /// What it applies itself: the similarity threshold (the backend filters). Item and
    /// token limits are applied by hydrate after de-duplication.
    pub const HONOURS: Honours = Honours {
        threshold: true,
        max_tokens: false,
        max_items: false,
    };

    /// A source over `backend`.
    pub fn new(
        backend: Arc<dyn MemoryBackend>,
        embedder: Option<Arc<dyn EmbeddingProvider>>,
    ) -> Self {
        Self {
            name: format!("memory:{}", backend.info().name),
            backend,
            embedder,
        }
    }

    fn max_results(&self) -> usize {
        self.backend.info().limits.max_results
    }

    async fn temporal(&self, query: &SourceQuery<'_>, out: &mut SourceOutput) -> Result<()> {
        let limit = query.params.max_items.min(self.max_results());
        out.set_search("recent");
        if limit == 0 {
            return Ok(());
        }
        let filter = Filter {
            kinds: vec![MemoryKind::Message],
            ..Filter::default()
        };
        let entries = self.backend.recent(query.scope, limit, &filter).await?;
        out.extend(entries.iter().map(SourceItem::from_memory));
        Ok(())
    }

    async fn semantic(&self, query: &SourceQuery<'_>, out: &mut SourceOutput) -> Result<()> {
        let window = usize::try_from(query.strategy.temporal_window).unwrap_or(usize::MAX);
        let limit = query
            .params
            .max_items
            .saturating_add(window)
            .min(self.max_results());
        if limit == 0 {
            return Ok(());
        }
        let filter = Filter {
            kinds: vec![MemoryKind::Message],
            ..Filter::default()
        };
        let Some(mut request) = self.search_request(query, out).await? else {
            return Ok(());
        };
        request = request.limit(limit).filter(filter.clone());
        if let Some(t) = query.params.threshold {
            request = request.threshold(t);
        }
        let hits = self.backend.search(query.scope, &request).await?;
        let window = self.embedder.as_ref().and_then(|e| e.window_bytes());
        let lifted = lift_by_nearby(&hits, query.tuning.nearby_lift.get() as f32, window);
        out.extend(hits.iter().zip(lifted).map(|(h, s)| {
            let mut item = hit_item(query, h);
            if item.similarity.is_some_and(|own| s > own + 1e-4) {
                item.lifted_from = item.similarity;
                item.similarity = Some(s);
            }
            item
        }));
        let mut seen: HashSet<MemoryId> = hits.iter().map(|h| h.entry.id).collect();
        // The searches for cues find many of the same memories again: only the first search
        // counts its hits as recalled, so one prompt never counts a memory twice.
        let extra = request.clone().without_access_tracking();
        // A reply is often what the question's words find while the message it answers
        // holds the fact: the best hits bring the message before them, a little less
        // relevant than they are, to compete for room like any hit. (Pushed even when found
        // by a search, and left for the searches below to find again: hydrate keeps a
        // memory once, at its best similarity.)
        if self.backend.capabilities().supports(Capability::TimeFilter) {
            for hit in hits
                .iter()
                .take(query.tuning.neighbours.min(crate::reach::MAX_NEIGHBOURS))
            {
                let before = Filter {
                    created_before: Some(hit.entry.created_at),
                    ..filter.clone()
                };
                for entry in self.backend.recent(query.scope, 1, &before).await? {
                    let mut item = SourceItem::from_memory(&entry);
                    item.similarity = Some((hit.score * NEIGHBOUR_SHARE).clamp(0.0, 1.0));
                    out.push(item);
                }
            }
        }
        // A question in the first person ("what did I say about...") asks what the user
        // told: the user's own messages are also searched on their own, so the agent's
        // answers, long and repeating the question's words, cannot crowd them all out.
        if query.cues.first_person {
            let mine = Filter {
                roles: vec![Role::User],
                ..filter.clone()
            };
            let more = self
                .backend
                .search(query.scope, &extra.clone().filter(mine))
                .await?;
            for h in more {
                if seen.insert(h.entry.id) {
                    out.push(hit_item(query, &h));
                }
            }
        }
        // A question about a time ("last week", "in June") also searches that time alone,
        // so what was said then competes even when older or newer talk matches better; when
        // few of its messages share a word with the question ("what did I say yesterday?"),
        // the newest of that time fill in.
        if let Some(window) = &query.cues.window
            && self.backend.capabilities().supports(Capability::TimeFilter)
        {
            let (start, end) = window.reach();
            let within = Filter {
                created_after: Some(start),
                created_before: Some(end),
                ..filter
            };
            let more = self
                .backend
                .search(query.scope, &extra.filter(within.clone()))
                .await?;
            let found = more.len();
            for h in more {
                if seen.insert(h.entry.id) {
                    out.push(hit_item(query, &h));
                }
            }
            if found < limit {
                let then = self
                    .backend
                    .recent(query.scope, limit - found, &within)
                    .await?;
                out.extend(
                    then.iter()
                        .filter(|e| seen.insert(e.id))
                        .map(SourceItem::from_memory),
                );
            }
        }
        Ok(())
    }

    async fn knowledge(&self, query: &SourceQuery<'_>, out: &mut SourceOutput) -> Result<()> {
        let limit = query.params.max_items.min(self.max_results());
        if limit == 0 {
            return Ok(());
        }
        let mut filter = Filter {
            kinds: vec![MemoryKind::Fact],
            ..Filter::default()
        };
        if self.backend.capabilities().supports(Capability::TimeFilter) {
            filter.valid_at = Some(query.now);
        }
        // Small talk looks nothing up: the newest facts and the instructions still come.
        let request = match query.cues.small_talk {
            true => None,
            false => self
                .search_request(query, out)
                .await?
                .map(|r| r.limit(limit).filter(filter.clone())),
        };
        let marked = Filter {
            kinds: vec![MemoryKind::Message],
            roles: vec![Role::User],
            tags: Some(TagQuery::any([Tag::new(INSTRUCTION_TAG)?])),
            ..Filter::default()
        };
        let mut scopes = vec![(query.scope.clone(), None)];
        if query.reach.reads_user_wide() && !query.scope.is_user_wide() {
            scopes.push((query.scope.user_wide(), Some("user-wide")));
        }
        if let Some(user) = query.reach.shared_facts_of() {
            let theirs = Scope::for_user(user)?.in_tenant(query.scope.tenant())?;
            scopes.push((theirs, Some("shared by the speaker")));
        }
        for (scope, note) in scopes {
            // Hits first, so a fact both recent and relevant keeps its similarity.
            let mut found: BTreeMap<_, SourceItem> = BTreeMap::new();
            let mut order = Vec::new();
            if let Some(req) = &request {
                for hit in self.backend.search(&scope, req).await? {
                    order.push(hit.entry.id);
                    found.insert(hit.entry.id, hit_item(query, &hit));
                }
            }
            let newest = self.backend.recent(&scope, limit, &filter).await?;
            // The user's standing instructions apply whatever the question: all of them,
            // newest first, up to the limit. They are messages, so they live in the
            // request's own scope, never in the user-level one.
            let instructions = match note {
                None => self.backend.recent(&scope, limit, &marked).await?,
                Some(_) => Vec::new(),
            };
            for entry in newest.into_iter().chain(instructions) {
                if let std::collections::btree_map::Entry::Vacant(slot) = found.entry(entry.id) {
                    order.push(entry.id);
                    slot.insert(SourceItem::from_memory(&entry));
                }
            }
            // Pushed per scope: if the next scope stalls past the deadline, these stay.
            for id in order {
                if let Some(mut item) = found.remove(&id) {
                    if let Some(n) = note {
                        item.note = Some(n.to_owned());
                    }
                    out.push(item);
                }
            }
        }
        Ok(())
    }

    /// The search to run for the observation, in the best mode the backend supports, with
    /// the query vector when one is available. `None` when there is nothing to search for.
    async fn search_request(
        &self,
        query: &SourceQuery<'_>,
        out: &mut SourceOutput,
    ) -> Result<Option<SearchRequest>> {
        let text = query.observation.trim();
        if text.is_empty() {
            out.set_search("none (empty observation)");
            return Ok(None);
        }
        let caps = self.backend.capabilities();
        let backend_name = self.backend.info().name;
        let asked = match query.tuning.search {
            SearchPreference::Hybrid => SearchMode::Hybrid(query.tuning.weights),
            SearchPreference::Semantic => SearchMode::Semantic,
            SearchPreference::Keyword => SearchMode::Keyword,
        };
        let Some(mut mode) = SearchMode::best_supported(asked, &caps) else {
            // Nothing to search with: the backend's own error names what is missing.
            caps.require(asked.capability(), &backend_name)?;
            return Ok(None);
        };
        if mode != asked {
            out.degrade(
                DegradationKind::SearchFallback,
                format!(
                    "asked {}, got {}: {backend_name} does not support {}",
                    asked.name(),
                    mode.name(),
                    asked.capability()
                ),
            );
        }
        let mut vector = None;
        if !matches!(mode, SearchMode::Keyword) {
            match &self.embedder {
                Some(embedder) => match query.embeddings.get(embedder.as_ref()).await {
                    Ok(v) => vector = Some(v),
                    Err(e) if caps.supports(Capability::KeywordSearch) => {
                        out.degrade(
                            DegradationKind::EmbeddingFailed,
                            format!(
                                "asked {}, got keyword: embedding the observation failed: {}",
                                mode.name(),
                                ErrorChain(&e)
                            ),
                        );
                        mode = SearchMode::Keyword;
                    }
                    Err(e) => return Err(e),
                },
                None => {
                    if let Some(space) = self.backend.info().embedding_space {
                        vector = query.embeddings.cached(&space).await;
                    }
                }
            }
        }
        out.set_search(mode.name());
        let mut request = SearchRequest::in_mode(text, mode);
        if let Some(v) = vector {
            request = request.with_vector(v);
        }
        if !query.record_access {
            request = request.without_access_tracking();
        }
        Ok(Some(request))
    }
}

/// A hit as an item. A search that records access has already counted itself; the access
/// factor should reflect the recalls before it.
fn hit_item(query: &SourceQuery<'_>, hit: &memory_core::ScoredMemory) -> SourceItem {
    let mut item = SourceItem::from_hit(hit);
    if query.record_access {
        item.access_count = item.access_count.saturating_sub(1);
    }
    item
}

/// Each hit's similarity lifted toward the best other hit said near it in time, by `lift`
/// (see [`NEARBY_LIFT`]), in the order of `hits`: the ranking the semantic source hands on.
/// A hit longer than `window` bytes (the embedder's window: the store searched it passage by
/// passage) keeps its own.
pub fn lift_by_nearby(
    hits: &[memory_core::ScoredMemory],
    lift: f32,
    window: Option<usize>,
) -> Vec<f32> {
    let own: Vec<f32> = hits.iter().map(|h| h.score.clamp(0.0, 1.0)).collect();
    let lift = f64::from(lift.clamp(0.0, 1.0));
    if lift == 0.0 {
        return own;
    }
    let mut by_time: Vec<usize> = (0..hits.len()).collect();
    by_time.sort_by_key(|&i| hits[i].entry.created_at);
    let weight = |a: usize, b: usize| {
        let (a, b) = (hits[a].entry.created_at, hits[b].entry.created_at);
        let minutes = a.as_millis().abs_diff(b.as_millis()) as f64 / 60_000.0;
        (-minutes / NEARBY_MINUTES).exp()
    };
    let mut out = own.clone();
    for (at, &i) in by_time.iter().enumerate() {
        if window.is_some_and(|w| hits[i].entry.content.len() > w) {
            continue;
        }
        let mut near = 0.0f64;
        // Outward in time from the hit, until even a perfect match would weigh no more.
        let mut scan = |side: &mut dyn Iterator<Item = &usize>| {
            for &j in side {
                let w = weight(i, j);
                if w <= near {
                    break;
                }
                near = near.max(f64::from(own[j]) * w);
            }
        };
        scan(&mut by_time[..at].iter().rev());
        scan(&mut by_time[at + 1..].iter());
        let s = f64::from(own[i]);
        out[i] = (s + lift * near * (1.0 - s)) as f32;
    }
    out
}

#[async_trait]
impl ContextSource for MemorySource {
    fn name(&self) -> &str {
        &self.name
    }

    fn honours(&self) -> Honours {
        Self::HONOURS
    }

    async fn fetch(&self, query: &SourceQuery<'_>, out: &mut SourceOutput) -> Result<()> {
        match query.kind {
            SourceKind::Temporal => self.temporal(query, out).await,
            SourceKind::Knowledge => self.knowledge(query, out).await,
            SourceKind::Semantic => self.semantic(query, out).await,
            other => Err(Error::source_failed(
                &self.name,
                format!(
                    "a memory source supplies temporal, knowledge and semantic context, not {other}"
                ),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use memory_core::{NewMemory, Scope, ScoredMemory, Timestamp};

    use super::*;

    fn hit(text: &str, minute: u64, score: f32) -> ScoredMemory {
        let at = Timestamp::from_millis(1_800_000_000_000 + minute as i64 * 60_000).unwrap();
        let scope = Scope::for_user("u").unwrap();
        ScoredMemory {
            entry: NewMemory::new(text).at(at).into_entry(&scope, at, true),
            score,
            breakdown: memory_core::ScoreBreakdown::default(),
        }
    }

    #[test]
    fn a_hit_is_lifted_by_the_best_hit_near_it_in_time_and_no_further() {
        let hits = [
            hit("strong", 0, 1.0),
            hit("next to it", 1, 0.4),
            hit("an hour on", 60, 0.4),
            hit("a day on", 24 * 60, 0.4),
            hit(&"long ".repeat(40), 2, 0.4),
        ];
        let lifted = lift_by_nearby(&hits, 0.5, Some(100));
        // s + lift · best · e^(-Δt / 30 min) · (1 - s)
        let want = |minutes: f64| 0.4 + 0.5 * (-minutes / NEARBY_MINUTES).exp() * 0.6;
        assert!((lifted[1] - want(1.0) as f32).abs() < 1e-5, "{lifted:?}");
        assert!((lifted[2] - want(60.0) as f32).abs() < 1e-5, "{lifted:?}");
        assert!(lifted[1] > lifted[2] && lifted[2] > 0.4 + 0.02);
        assert!((lifted[3] - 0.4).abs() < 1e-5, "a day apart: {lifted:?}");
        // The best hit gains only from the others, the long one not at all.
        assert!(lifted[0] <= 1.0 && lifted[0] >= 1.0 - 1e-6);
        assert_eq!(
            lifted[4], 0.4,
            "longer than the window: searched by passages"
        );
        // Off: every hit keeps its own score.
        let off = lift_by_nearby(&hits, 0.0, Some(100));
        assert_eq!(off, vec![1.0, 0.4, 0.4, 0.4, 0.4]);
    }
}
