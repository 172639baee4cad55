//! The memory-backed provider: temporal, knowledge and semantic context from any
//! `Arc<dyn MemoryBackend>` (and, optionally, the embedder of its space).
//!
//! - **temporal**: the newest `Message` memories of the request's scope (`recent`).
//! - **knowledge**: `Fact` memories valid now, from the request's scope and, when the
//!   `user_knowledge` option is on, from the user-level scope (same tenant and user, no chat
//!   or thread): the newest ones plus the ones a search finds relevant; and the user's
//!   standing instructions in the request's scope (messages marked by
//!   [`crate::with_instruction_mark`]).
//! - **semantic**: related past `Message` memories found by searching for the observation,
//!   over-fetched by the temporal window so that, once messages already in the recent
//!   conversation are removed (hydrate de-duplicates by memory id), enough remain. A
//!   first-person question ("what did I say...") also searches the user's own messages. The
//!   best hits bring the message before each of them (what a reply answers; see
//!   [`OPT_NEIGHBOURS`]), and a hit said close in time to a better one is lifted toward it
//!   (what the talk around it was about; see [`OPT_NEARBY_LIFT`]).
//!
//! Searches use the `search` option (default hybrid) when the backend advertises it, and
//! otherwise fall back to the most capable mode it does (`SearchMode::best_supported`:
//! hybrid, keyword, semantic) and record the degradation, e.g. "asked hybrid, got keyword".
//! The observation is embedded once per request and space (see
//! [`QueryEmbeddings`](crate::QueryEmbeddings)); a precomputed query vector is used as is.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use async_trait::async_trait;
use memory_core::{
    Capability, EmbeddingProvider, ErrorChain, Filter, HybridWeights, MemoryBackend, MemoryId,
    MemoryKind, Role, Scope, SearchMode, SearchRequest, Tag, TagQuery,
};
use serde::Serialize;

use crate::error::{Error, Result};
use crate::instructions::INSTRUCTION_TAG;
use crate::provider::{
    BuildContext, OptionOrigin, ProviderCapabilities, ProviderOptions, ResolvedOptions,
    SourceBuilder, SourceProvider,
};
use crate::source::{
    ContextSource, DegradationKind, Honours, SourceItem, SourceKind, SourceOutput, SourceQuery,
};

/// Option key: how to search, `"hybrid"` (default), `"semantic"` or `"keyword"`.
pub const OPT_SEARCH: &str = "search";
/// Option key: whether knowledge also reads the user-level scope (default `true`).
pub const OPT_USER_KNOWLEDGE: &str = "user_knowledge";
/// Option key: in a shared chat (a group), the user key of the speaker who chose to share
/// their user-wide facts there; knowledge also reads that user's user-wide scope (same
/// tenant). Honoured only as the provider's runtime option ([`crate::Ops`] sets it), never
/// from a request, and empty means none. Unset by default: a group reads no member's
/// user-wide facts.
pub const OPT_SHARED_FACTS_OF: &str = "shared_facts_of";
/// Option key: whether searches count their hits as recalled (default `true`; this is what
/// makes access frequency mean something).
pub const OPT_RECORD_ACCESS: &str = "record_access";
/// Option key: the semantic share of hybrid search, from 0 to 1 (default: that of
/// `HybridWeights::default()`, 0.5).
pub const OPT_SEMANTIC_WEIGHT: &str = "semantic_weight";
/// Option key: how many of the best related messages bring the message before them in the
/// conversation (what they answer), from 0 (none) to 100; default [`NEIGHBOURS`].
pub const OPT_NEIGHBOURS: &str = "neighbours";

/// The default of [`OPT_NEIGHBOURS`]: the five best related messages each bring the message
/// they follow. A reply ("Yes! Loved it") is often found by the question's words while what
/// it answers holds the fact ("I signed up for the class downtown"); measured in
/// BENCHMARKS.md.
pub const NEIGHBOURS: usize = 5;

/// The share of a related message's similarity the message before it is given: it
/// competes for room as a hit of its own, a little below the one that brought it.
pub const NEIGHBOUR_SHARE: f32 = 0.7;

/// Option key: how far a related message is lifted toward the best other hit said close in
/// time to it, from 0 (not at all) to 1; default [`NEARBY_LIFT`].
pub const OPT_NEARBY_LIFT: &str = "nearby_lift";

/// The default of [`OPT_NEARBY_LIFT`]. A message is read in the talk around it: "Yes, I went
/// yesterday!" says little alone, but if the messages around it match the question, it
/// likely answers it. Each hit of the search, with similarity `s`, is lifted as a cue lifts
/// it, `s + lift · n · (1 - s)`, where `n` is the best similarity among the other hits, each
/// weighed down by `e^(-Δt / NEARBY_MINUTES)` for the time `Δt` between the two messages. A
/// hit alone in its stretch of talk keeps `s`. A hit longer than the embedder's window
/// ([`EmbeddingProvider::window_bytes`]) keeps `s` too: the store searched it passage by
/// passage, so it was matched on its own words, and lifting it would spend the room of several
/// short ones (in an agent's chat, the answers next to a good question). Measured in
/// BENCHMARKS.md ("Read in the talk around it").
pub const NEARBY_LIFT: f32 = 0.5;

/// The time constant, in minutes, of [`NEARBY_LIFT`]'s weight: a hit half an hour away counts
/// `1/e` of one said at the same moment, one a day away nothing. Half an hour is the pause
/// that commonly ends a session of talk, not a value fitted to the evaluation data.
pub const NEARBY_MINUTES: f64 = 30.0;

/// How a memory source prefers to search.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SearchPreference {
    /// Fused semantic and keyword search.
    Hybrid,
    /// Vector similarity only.
    Semantic,
    /// BM25 only.
    Keyword,
}

/// A memory source's settings, read from its provider's resolved options.
#[derive(Clone, Debug, PartialEq)]
pub struct MemoryOptions {
    /// How to search.
    pub search: SearchPreference,
    /// Whether knowledge also reads the user-level scope.
    pub user_knowledge: bool,
    /// The user whose user-wide facts knowledge also reads, shared by them into a group.
    pub shared_facts_of: Option<String>,
    /// Whether searches count hits as recalled.
    pub record_access: bool,
    /// Hybrid weights.
    pub weights: HybridWeights,
    /// How many of the best related messages bring the message before them.
    pub neighbours: usize,
    /// How far a related message is lifted toward the best other hit said near it in time.
    pub nearby_lift: f32,
}

impl Default for MemoryOptions {
    fn default() -> Self {
        Self {
            search: SearchPreference::Hybrid,
            user_knowledge: true,
            shared_facts_of: None,
            record_access: true,
            weights: HybridWeights::default(),
            neighbours: NEIGHBOURS,
            nearby_lift: NEARBY_LIFT,
        }
    }
}

impl MemoryOptions {
    /// The provider defaults, as options.
    pub fn defaults() -> ProviderOptions {
        ProviderOptions::new()
            .with(OPT_SEARCH, "hybrid")
            .with(OPT_USER_KNOWLEDGE, true)
            .with(OPT_RECORD_ACCESS, true)
            .with(
                OPT_SEMANTIC_WEIGHT,
                f64::from(HybridWeights::default().semantic()),
            )
            .with(OPT_NEIGHBOURS, NEIGHBOURS as f64)
            .with(OPT_NEARBY_LIFT, f64::from(NEARBY_LIFT))
    }

    /// Reads settings from resolved options; unknown keys are ignored, missing ones take
    /// their defaults, and a value of the wrong type or range is an error naming the option.
    pub fn from_resolved(provider: &str, options: &ResolvedOptions) -> Result<Self> {
        let mut out = Self::default();
        if let Some(s) = options.str(provider, OPT_SEARCH)? {
            out.search = match s {
                "hybrid" => SearchPreference::Hybrid,
                "semantic" => SearchPreference::Semantic,
                "keyword" => SearchPreference::Keyword,
                other => {
                    return Err(Error::BadOption {
                        provider: provider.to_owned(),
                        key: OPT_SEARCH.to_owned(),
                        found: format!("{other:?}"),
                        expected: "one of \"hybrid\", \"semantic\", \"keyword\"",
                    });
                }
            };
        }
        if let Some(b) = options.bool(provider, OPT_USER_KNOWLEDGE)? {
            out.user_knowledge = b;
        }
        if let Some(user) = options.str(provider, OPT_SHARED_FACTS_OF)?
            && options.origin(OPT_SHARED_FACTS_OF) == Some(OptionOrigin::Runtime)
            && !user.is_empty()
        {
            out.shared_facts_of = Some(user.to_owned());
        }
        if let Some(b) = options.bool(provider, OPT_RECORD_ACCESS)? {
            out.record_access = b;
        }
        const SHARE: &str = "a number from 0 to 1";
        let bad = |key: &str, found: f64, expected: &'static str| Error::BadOption {
            provider: provider.to_owned(),
            key: key.to_owned(),
            found: found.to_string(),
            expected,
        };
        // A number option within `range` (and whole, if asked), or an error naming it.
        let number = |key: &str, range: std::ops::RangeInclusive<f64>, whole: bool, expected| {
            let value = options.f64(provider, key)?;
            match value {
                Some(x) if !range.contains(&x) || (whole && x.fract() != 0.0) => {
                    Err(bad(key, x, expected))
                }
                other => Ok(other),
            }
        };
        if let Some(w) = number(OPT_SEMANTIC_WEIGHT, 0.0..=1.0, false, SHARE)? {
            out.weights = HybridWeights::new(w as f32, 1.0 - w as f32)
                .map_err(|_| bad(OPT_SEMANTIC_WEIGHT, w, SHARE))?;
        }
        let whole = "a whole number from 0 to 100";
        if let Some(n) = number(OPT_NEIGHBOURS, 0.0..=100.0, true, whole)? {
            out.neighbours = n as usize;
        }
        if let Some(l) = number(OPT_NEARBY_LIFT, 0.0..=1.0, false, SHARE)? {
            out.nearby_lift = l as f32;
        }
        Ok(out)
    }
}

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
    SourceKind::MEMORY.into_iter().fold(
        SourceProvider::new(name, caps).with_defaults(MemoryOptions::defaults()),
        |p, kind| p.with_builder(kind, Arc::clone(&builder)),
    )
}

#[derive(Debug)]
struct MemorySourceBuilder {
    backend: Arc<dyn MemoryBackend>,
    embedder: Option<Arc<dyn EmbeddingProvider>>,
}

impl SourceBuilder for MemorySourceBuilder {
    fn build(&self, ctx: &BuildContext<'_>) -> Result<Arc<dyn ContextSource>> {
        let options = MemoryOptions::from_resolved(ctx.provider, ctx.options)?;
        Ok(Arc::new(MemorySource::new(
            Arc::clone(&self.backend),
            self.embedder.clone(),
            options,
        )))
    }
}

/// A context source over a memory backend; serves the temporal, knowledge and semantic
/// kinds (see the module docs). Usable on its own as an explicit source.
#[derive(Debug, Clone)]
pub struct MemorySource {
    name: String,
    backend: Arc<dyn MemoryBackend>,
    embedder: Option<Arc<dyn EmbeddingProvider>>,
    options: MemoryOptions,
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
        options: MemoryOptions,
    ) -> Self {
        Self {
            name: format!("memory:{}", backend.info().name),
            backend,
            embedder,
            options,
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
        let lifted = lift_by_nearby(&hits, self.options.nearby_lift, window);
        out.extend(hits.iter().zip(lifted).map(|(h, s)| {
            let mut item = self.hit_item(h);
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
            for hit in hits.iter().take(self.options.neighbours) {
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
                    out.push(self.hit_item(&h));
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
                    out.push(self.hit_item(&h));
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
        if self.options.user_knowledge && !query.scope.is_user_wide() {
            scopes.push((query.scope.user_wide(), Some("user-wide")));
        }
        if let Some(user) = &self.options.shared_facts_of {
            let theirs = Scope::for_user(user.as_str())?.in_tenant(query.scope.tenant())?;
            scopes.push((theirs, Some("shared by the speaker")));
        }
        for (scope, note) in scopes {
            // Hits first, so a fact both recent and relevant keeps its similarity.
            let mut found: BTreeMap<_, SourceItem> = BTreeMap::new();
            let mut order = Vec::new();
            if let Some(req) = &request {
                for hit in self.backend.search(&scope, req).await? {
                    order.push(hit.entry.id);
                    found.insert(hit.entry.id, self.hit_item(&hit));
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

    /// A hit as an item. A search that records access has already counted itself; the
    /// access factor should reflect the recalls before it.
    fn hit_item(&self, hit: &memory_core::ScoredMemory) -> SourceItem {
        let mut item = SourceItem::from_hit(hit);
        if self.options.record_access {
            item.access_count = item.access_count.saturating_sub(1);
        }
        item
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
        let asked = match self.options.search {
            SearchPreference::Hybrid => SearchMode::Hybrid(self.options.weights),
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
        if !self.options.record_access {
            request = request.without_access_tracking();
        }
        Ok(Some(request))
    }
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
    fn numeric_options_out_of_range_are_errors_naming_the_option() {
        let read = |key: &str, value: f64| {
            let runtime = ProviderOptions::new().with(key, value);
            let options =
                crate::provider::resolve_options(&MemoryOptions::defaults(), None, None, &runtime);
            MemoryOptions::from_resolved("memory", &options)
        };
        let read_ok = read(OPT_NEARBY_LIFT, 0.25).unwrap();
        assert_eq!(read_ok.nearby_lift, 0.25);
        assert_eq!(read(OPT_NEIGHBOURS, 7.0).unwrap().neighbours, 7);
        for (key, value, expected) in [
            (OPT_NEARBY_LIFT, 1.5, "a number from 0 to 1"),
            (OPT_NEARBY_LIFT, -0.1, "a number from 0 to 1"),
            (OPT_SEMANTIC_WEIGHT, 2.0, "a number from 0 to 1"),
            (OPT_NEIGHBOURS, 2.5, "a whole number from 0 to 100"),
            (OPT_NEIGHBOURS, 101.0, "a whole number from 0 to 100"),
        ] {
            let err = read(key, value).unwrap_err().to_string();
            assert!(
                err.contains(key) && err.contains(expected) && err.contains(&value.to_string()),
                "{key} = {value}: {err}"
            );
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
