//! `InMemoryBackend`: a complete `MemoryBackend` held in process memory, with brute-force
//! cosine search and BM25 keyword scoring. For tests, demos and small agents; nothing
//! survives a restart.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use memory_core::keyword::{self, Bm25, MAX_QUERY_TERMS, tokenize};
use memory_core::{
    BackendInfo, Capabilities, Capability, EmbeddingProvider, EmbeddingSpace, Filter, Limits,
    MemoryBackend, MemoryEntry, MemoryError, MemoryId, MemoryPatch, NewMemory, PrunePolicy,
    PruneReport, Record, Remembered, Result, SUPERSEDER_NOT_IN_SCOPE, Scope, ScopeSpread,
    ScoreBreakdown, ScoredMemory, SearchMode, SearchRequest, Spread, StoreVectors, Timestamp,
    check_lease, check_limit, check_record_kind, cosine, ensure_scope, merge_patch, normalise,
    passage_similarity, plan_prune, rank, same_fact, superseded_by_refused, validate_content,
};

const NAME: &str = "memory-inmem";

/// Hybrid search fuses this many candidates per signal for each requested hit (at least 50).
const HYBRID_POOL_FACTOR: usize = 4;

/// An in-process memory store. Cheap to create; safe to share across tasks (`Arc`).
///
/// Built with an embedder it offers semantic and hybrid search; without one it is a
/// keyword-only store and says so in its capabilities.
#[derive(Debug)]
pub struct InMemoryBackend {
    embedder: Option<Arc<dyn EmbeddingProvider>>,
    space: Option<Arc<EmbeddingSpace>>,
    limits: Limits,
    state: RwLock<State>,
}

#[derive(Debug, Default)]
struct State {
    scopes: HashMap<Scope, HashMap<MemoryId, Item>>,
    /// Every id in the store, for global id uniqueness.
    ids: HashSet<MemoryId>,
    /// Leases by name: holder and when the lease ends.
    leases: HashMap<String, (String, Instant)>,
    /// Each scope's records, newest first, each with the number it was kept under (of
    /// equal times, the later kept is the newer).
    records: HashMap<Scope, Vec<(u64, Record)>>,
    /// How many records were ever kept: the next one's number.
    records_kept: u64,
}

#[derive(Debug)]
struct Item {
    entry: MemoryEntry,
    /// One vector per passage (one for a memory that fits the embedder's window); empty
    /// without an embedder.
    vectors: Vec<Vec<f32>>,
    terms: Vec<String>,
}

impl Item {
    fn new(entry: MemoryEntry, vectors: Vec<Vec<f32>>) -> Self {
        let terms = tokenize(&entry.content);
        Self {
            entry,
            vectors,
            terms,
        }
    }

    /// Similarity of each of its vectors (one per passage) to `q`; empty without vectors.
    fn similarities(&self, q: &[f32]) -> Vec<f32> {
        self.vectors.iter().map(|v| cosine(q, v)).collect()
    }
}

impl InMemoryBackend {
    /// A store that embeds with `embedder`, or a keyword-only store when `None`.
    pub fn new(embedder: Option<Arc<dyn EmbeddingProvider>>) -> Self {
        let space = embedder.as_ref().map(|e| e.space());
        Self {
            embedder,
            space,
            limits: Limits::default(),
            state: RwLock::new(State::default()),
        }
    }

    /// The same store with other limits.
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    // A panic while a lock is held cannot leave the maps half-updated (every write is a
    // single insert/remove pass after all checks), so a poisoned lock is safe to reuse.
    fn read(&self) -> RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(PoisonError::into_inner)
    }

    fn vectors(&self) -> StoreVectors<'_> {
        StoreVectors {
            backend: NAME,
            store: "store `memory-inmem`".into(),
            embedder: self.embedder.as_deref(),
            space: self.space.as_deref(),
        }
    }

    fn caps(&self) -> Capabilities {
        Capabilities::full_store(self.embedder.is_some())
            .with(Capability::Records)
            .with(Capability::Leases)
    }
}

/// Best score first, ties by id; `of` gives a hit's id and score.
fn sort_hits<T>(hits: &mut [T], of: impl Fn(&T) -> (MemoryId, f32)) {
    hits.sort_by(|a, b| {
        let ((a_id, a_score), (b_id, b_score)) = (of(a), of(b));
        b_score.total_cmp(&a_score).then(a_id.cmp(&b_id))
    });
}

/// The words a keyword query searches for ([`keyword::query_words`]): of more than
/// [`MAX_QUERY_TERMS`], the rarest among `docs` ([`keyword::rarest`], with the documents
/// holding each counted in one pass over them).
fn query_terms<'a>(text: &str, docs: impl Iterator<Item = &'a [String]>) -> Vec<String> {
    let words = keyword::query_words(text);
    if words.len() <= MAX_QUERY_TERMS {
        return words;
    }
    let mut held: HashMap<&str, u64> = words.iter().map(|w| (w.as_str(), 0)).collect();
    for doc in docs {
        let mut seen: Vec<&str> = doc.iter().map(String::as_str).collect();
        seen.sort_unstable();
        seen.dedup();
        for w in seen {
            if let Some(n) = held.get_mut(w) {
                *n += 1;
            }
        }
    }
    let held: HashMap<String, u64> = held.into_iter().map(|(w, n)| (w.to_owned(), n)).collect();
    keyword::rarest(words, |w| held.get(w).copied().unwrap_or(0))
}

#[async_trait]
impl MemoryBackend for InMemoryBackend {
    fn info(&self) -> BackendInfo {
        BackendInfo {
            name: NAME.to_owned(),
            location: None,
            topology: memory_core::Topology::InProcess,
            durable: false,
            embedding_space: self.space.clone(),
            limits: self.limits,
        }
    }

    fn capabilities(&self) -> Capabilities {
        self.caps()
    }

    /// Every holder is in this process, as the store is: expiry by the process's clock.
    async fn try_lease(&self, name: &str, holder: &str, ttl: Duration) -> Result<bool> {
        check_lease(name, holder, ttl)?;
        let now = Instant::now();
        let mut state = self.write();
        let taken = match state.leases.get(name) {
            Some((other, until)) => other == holder || *until <= now,
            None => true,
        };
        if taken {
            state
                .leases
                .insert(name.to_owned(), (holder.to_owned(), now + ttl));
        }
        Ok(taken)
    }

    async fn release_lease(&self, name: &str, holder: &str) -> Result<()> {
        let mut state = self.write();
        if state.leases.get(name).is_some_and(|(h, _)| h == holder) {
            state.leases.remove(name);
        }
        Ok(())
    }

    async fn end_lease(&self, name: &str) -> Result<()> {
        self.write().leases.remove(name);
        Ok(())
    }

    async fn keep_record(&self, scope: &Scope, record: Record, keep: usize) -> Result<()> {
        record.validate(keep)?;
        let kind = record.kind.clone();
        let mut state = self.write();
        let n = state.records_kept;
        state.records_kept += 1;
        let kept = state.records.entry(scope.clone()).or_default();
        // Newest first: before every record of its time or older (it is the last kept).
        let at = kept
            .iter()
            .position(|(_, r)| r.at <= record.at)
            .unwrap_or(kept.len());
        kept.insert(at, (n, record));
        // The ring: the newest `keep` of its kind stay.
        let mut of_kind = 0;
        kept.retain(|(_, r)| {
            if r.kind != kind {
                return true;
            }
            of_kind += 1;
            of_kind <= keep
        });
        Ok(())
    }

    async fn records(&self, scope: &Scope, kind: &str, limit: usize) -> Result<Vec<Record>> {
        check_record_kind(kind)?;
        check_limit(limit, &self.limits)?;
        let state = self.read();
        Ok(state
            .records
            .get(scope)
            .into_iter()
            .flatten()
            .filter(|(_, r)| r.kind == kind)
            .take(limit)
            .map(|(_, r)| r.clone())
            .collect())
    }

    async fn store_batch(
        &self,
        scope: &Scope,
        memories: Vec<NewMemory>,
    ) -> Result<Vec<MemoryEntry>> {
        let (entries, vectors) = self
            .vectors()
            .prepare_batch(scope, memories, self.limits.max_content_bytes)
            .await?;
        let items: Vec<Item> = entries
            .into_iter()
            .zip(vectors)
            .map(|(e, v)| Item::new(e, v))
            .collect();
        let mut state = self.write();
        // Checked under the write lock: an id taken before, or by another task meanwhile.
        if let Some(item) = items.iter().find(|i| state.ids.contains(&i.entry.id)) {
            return Err(MemoryError::Conflict { id: item.entry.id });
        }
        let out: Vec<MemoryEntry> = items.iter().map(|i| i.entry.clone()).collect();
        let state = &mut *state;
        let bucket = state.scopes.entry(scope.clone()).or_default();
        for item in items {
            state.ids.insert(item.entry.id);
            bucket.insert(item.entry.id, item);
        }
        Ok(out)
    }

    async fn get(&self, scope: &Scope, id: MemoryId) -> Result<MemoryEntry> {
        let state = self.read();
        let entry = state
            .scopes
            .get(scope)
            .and_then(|m| m.get(&id))
            .map(|i| i.entry.clone())
            .ok_or(MemoryError::NotFound { id })?;
        ensure_scope(NAME, scope, [&entry])?;
        Ok(entry)
    }

    async fn search(&self, scope: &Scope, request: &SearchRequest) -> Result<Vec<ScoredMemory>> {
        request.validate(&self.caps(), &self.limits, NAME)?;
        let query_vec = match request.mode {
            SearchMode::Semantic | SearchMode::Hybrid(_) => {
                Some(self.vectors().query_vector(request).await?)
            }
            SearchMode::Keyword => None,
        };
        let limit = request.limit;
        let pool = (limit * HYBRID_POOL_FACTOR).max(50);
        let scored: Vec<(MemoryId, f32, ScoreBreakdown)> = {
            let state = self.read();
            let Some(items) = state.scopes.get(scope) else {
                return Ok(Vec::new());
            };
            let candidates: Vec<&Item> = items
                .values()
                .filter(|i| request.filter.matches(&i.entry))
                .collect();
            // Spreads are measured over the memories the search considers (those passing
            // the filter): every one of them is scored here anyway.
            let mut spread = ScopeSpread::default();
            let mut semantic_hits: Vec<(MemoryId, f32)> = Vec::new();
            if let Some(q) = &query_vec {
                let sims: Vec<(MemoryId, Vec<f32>)> = candidates
                    .iter()
                    .map(|i| (i.entry.id, i.similarities(q)))
                    .filter(|(_, s)| !s.is_empty())
                    .collect();
                let vectors = sims.iter().map(|(_, s)| s.len()).sum();
                let all = Spread::of(sims.iter().flat_map(|(_, s)| s.iter().copied()), vectors);
                let deviation = all.map_or(0.0, Spread::std);
                spread.semantic = all;
                semantic_hits = sims
                    .into_iter()
                    .map(|(id, s)| {
                        let best = s.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                        (id, passage_similarity(best, s.len(), deviation))
                    })
                    .collect();
                sort_hits(&mut semantic_hits, |&h| h);
            }
            let semantic = |take: usize| -> Vec<(MemoryId, f32)> {
                semantic_hits.iter().take(take).copied().collect()
            };
            // Each keyword hit carries how many passages its memory is stored as.
            let mut keyword_hits: Vec<(MemoryId, MemoryId, f32, usize)> = Vec::new();
            if request.mode != SearchMode::Semantic {
                let terms = query_terms(
                    request.query_text().unwrap_or_default(),
                    candidates.iter().map(|i| i.terms.as_slice()),
                );
                keyword_hits = Bm25::default()
                    .score(&terms, candidates.iter().map(|i| i.terms.as_slice()))
                    .into_iter()
                    .map(|(idx, s)| {
                        let i = &candidates[idx];
                        (i.entry.id, i.entry.id, s, i.vectors.len().max(1))
                    })
                    .collect();
                spread.keyword = Spread::of(keyword_hits.iter().map(|h| h.2), candidates.len());
                sort_hits(&mut keyword_hits, |h| (h.0, h.2));
            }
            let keyword = |take: usize| -> Vec<(MemoryId, MemoryId, f32, usize)> {
                keyword_hits.iter().take(take).copied().collect()
            };
            // Keyed by id: the in-memory store loads hits by id.
            let keyed = |hits: Vec<(MemoryId, f32)>| -> Vec<(MemoryId, MemoryId, f32)> {
                hits.into_iter().map(|(id, s)| (id, id, s)).collect()
            };
            let (sem, kw) = match request.mode {
                SearchMode::Semantic => (keyed(semantic(usize::MAX)), Vec::new()),
                SearchMode::Keyword => (Vec::new(), keyword(usize::MAX)),
                SearchMode::Hybrid(_) => (keyed(semantic(pool)), keyword(pool)),
            };
            rank(request, &sem, &kw, spread)
        };

        let now = Timestamp::now();
        let hits: Vec<ScoredMemory> = if request.record_access {
            let mut state = self.write();
            let items = state.scopes.get_mut(scope);
            let mut out = Vec::with_capacity(scored.len());
            if let Some(items) = items {
                for (id, score, breakdown) in scored {
                    // A memory deleted between the read and this write is simply not returned.
                    if let Some(item) = items.get_mut(&id) {
                        item.entry.access_count += 1;
                        item.entry.accessed_at = now.max(item.entry.accessed_at);
                        out.push(ScoredMemory {
                            entry: item.entry.clone(),
                            score,
                            breakdown,
                        });
                    }
                }
            }
            out
        } else {
            let state = self.read();
            scored
                .into_iter()
                .filter_map(|(id, score, breakdown)| {
                    let entry = state.scopes.get(scope)?.get(&id)?.entry.clone();
                    Some(ScoredMemory {
                        entry,
                        score,
                        breakdown,
                    })
                })
                .collect()
        };
        ensure_scope(NAME, scope, hits.iter().map(|h| &h.entry))?;
        Ok(hits)
    }

    async fn recent(
        &self,
        scope: &Scope,
        limit: usize,
        filter: &Filter,
    ) -> Result<Vec<MemoryEntry>> {
        check_limit(limit, &self.limits)?;
        filter.validate(&self.caps(), NAME)?;
        let state = self.read();
        let Some(items) = state.scopes.get(scope) else {
            return Ok(Vec::new());
        };
        let mut entries: Vec<&MemoryEntry> = items
            .values()
            .map(|i| &i.entry)
            .filter(|e| filter.matches(e))
            .collect();
        entries.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(b.id.cmp(&a.id)));
        let out: Vec<MemoryEntry> = entries.into_iter().take(limit).cloned().collect();
        ensure_scope(NAME, scope, &out)?;
        Ok(out)
    }

    /// Looks and stores under one write lock: concurrent calls with one fact leave one.
    async fn remember_once(&self, scope: &Scope, memory: NewMemory) -> Result<Remembered> {
        let wanted = normalise(&memory.content);
        let (memory, vectors) = self
            .vectors()
            .check_and_embed_one(memory, self.limits.max_content_bytes)
            .await?;
        let now = Timestamp::now();
        let mut state = self.write();
        let bucket = state.scopes.get_mut(scope);
        if let Some(item) = bucket.and_then(|b| {
            b.values_mut()
                .filter(|i| !wanted.is_empty() && same_fact(&i.entry, memory.kind, &wanted, now))
                .min_by_key(|i| (i.entry.created_at, i.entry.id))
        }) {
            merge_patch(&item.entry, &memory).apply(&mut item.entry);
            return Ok(Remembered {
                entry: item.entry.clone(),
                merged: true,
            });
        }
        if let Some(id) = memory.id.filter(|id| state.ids.contains(id)) {
            return Err(MemoryError::Conflict { id });
        }
        let item = Item::new(memory.into_entry(scope, now, !vectors.is_empty()), vectors);
        let entry = item.entry.clone();
        let state = &mut *state;
        state.ids.insert(entry.id);
        state
            .scopes
            .entry(scope.clone())
            .or_default()
            .insert(entry.id, item);
        Ok(Remembered {
            entry,
            merged: false,
        })
    }

    async fn update(&self, scope: &Scope, id: MemoryId, patch: MemoryPatch) -> Result<MemoryEntry> {
        self.caps().require(Capability::Update, NAME)?;
        if let Some(c) = &patch.content {
            validate_content(c, self.limits.max_content_bytes)?;
        }
        let superseding = patch.superseding(id)?;
        // Exists in this scope? (checked before embedding, so a foreign id costs nothing)
        self.get(scope, id).await?;
        let new_vectors = match &patch.content {
            Some(c) => Some(self.vectors().embed_text(c).await?),
            None => None,
        };
        let mut state = self.write();
        if let Some(t) = superseding
            && !state.scopes.get(scope).is_some_and(|m| m.contains_key(&t))
        {
            return Err(superseded_by_refused(t, SUPERSEDER_NOT_IN_SCOPE));
        }
        let item = state
            .scopes
            .get_mut(scope)
            .and_then(|m| m.get_mut(&id))
            .ok_or(MemoryError::NotFound { id })?;
        let content_changed = patch.content.is_some();
        patch.apply(&mut item.entry);
        if content_changed {
            item.terms = tokenize(&item.entry.content);
            if let Some(v) = new_vectors.filter(|v| !v.is_empty()) {
                item.vectors = v;
            }
        }
        Ok(item.entry.clone())
    }

    async fn delete(&self, scope: &Scope, id: MemoryId) -> Result<()> {
        let mut state = self.write();
        let removed = state.scopes.get_mut(scope).and_then(|m| m.remove(&id));
        match removed {
            Some(_) => {
                state.ids.remove(&id);
                // Those that quote it, or may (see `MemoryBackend::keep_record`).
                if let Some(kept) = state.records.get_mut(scope) {
                    kept.retain(|(_, r)| !r.quotes.is_empty() && !r.quotes.contains(&id));
                }
                Ok(())
            }
            None => Err(MemoryError::NotFound { id }),
        }
    }

    async fn delete_scope(&self, scope: &Scope) -> Result<u64> {
        let mut state = self.write();
        let removed = state.scopes.remove(scope).unwrap_or_default();
        state.records.remove(scope);
        for id in removed.keys() {
            state.ids.remove(id);
        }
        Ok(removed.len() as u64)
    }

    async fn prune(&self, scope: &Scope, policy: &PrunePolicy) -> Result<PruneReport> {
        policy.validate(&self.caps(), NAME)?;
        let mut state = self.write();
        let state = &mut *state;
        let Some(items) = state.scopes.get_mut(scope) else {
            return Ok(PruneReport::default());
        };
        let report = plan_prune(items.values().map(|i| &i.entry), policy);
        if report.dry_run {
            return Ok(report);
        }
        for (id, _) in &report.removed {
            items.remove(id);
            state.ids.remove(id);
        }
        // The records that quote what was pruned go with it.
        if let Some(kept) = state.records.get_mut(scope) {
            kept.retain(|(_, r)| !report.removed.iter().any(|(id, _)| r.quotes.contains(id)));
        }
        Ok(report)
    }

    async fn scopes(&self, tenant: Option<&str>, user: Option<&str>) -> Result<Vec<Scope>> {
        let state = self.read();
        let holding = state
            .scopes
            .iter()
            .filter(|(_, m)| !m.is_empty())
            .map(|(s, _)| s)
            .chain(
                state
                    .records
                    .iter()
                    .filter(|(_, r)| !r.is_empty())
                    .map(|(s, _)| s),
            );
        let mut out: Vec<Scope> = holding
            .filter(|s| {
                tenant.is_none_or(|t| s.tenant() == t) && user.is_none_or(|u| s.user() == u)
            })
            .cloned()
            .collect();
        out.sort();
        out.dedup();
        Ok(out)
    }

    async fn count(&self, scope: &Scope) -> Result<u64> {
        Ok(self.read().scopes.get(scope).map_or(0, |m| m.len() as u64))
    }
}
