//! Searches in one read snapshot, on the worker's connection or on a read connection of
//! the caller's own thread. WAL lets any number of readers work beside the writer; a
//! search whose scope's vectors are already in the cache (and small) runs on the calling
//! thread, sparing two thread hand-offs that cost an idle machine as much as the search.

use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use memory_core::{
    EmbeddingSpace, Scope, ScopeSpread, ScoredMemory, SearchMode, SearchRequest, Timestamp, rank,
};
use rusqlite::Connection;

use crate::cache::VectorCache;
use crate::error::{JobError, SqliteError};
use crate::schema::{self, Pragmas};
use crate::sql::Sql;
use crate::worker::{SpaceCheck, check_space, lock_cache_for};

/// Largest scope (vectors in its cached block) searched on the caller's thread: its scan
/// reads at most ~6 MB of 384-d vectors, well under a millisecond. Bigger scopes, scopes
/// not in the cache yet (their first search loads them) and stores without a cache are
/// searched on the worker's thread, which may take longer without holding up the caller's
/// async runtime.
pub(crate) const CALLER_MAX_VECTORS: usize = 4096;

/// Idle read connections kept for reuse.
const MAX_IDLE: usize = 4;

/// What one search found: hits, or memories of the scope to embed first.
pub(crate) enum Searched {
    Hits(Vec<ScoredMemory>),
    Unembedded(Vec<crate::sql::ToEmbed>),
}

/// One search, as asked.
pub(crate) struct SearchJob<'a> {
    pub(crate) scope: &'a Scope,
    pub(crate) request: &'a SearchRequest,
    pub(crate) query: Option<&'a [f32]>,
    /// Answer with the scope's memories that have no vector yet, if there are any.
    pub(crate) backfill: bool,
    /// Candidates per list for hybrid fusion.
    pub(crate) pool: usize,
}

/// Where a search runs, and what it knows there about the store's embedding space.
pub(crate) struct Place<'a> {
    pub(crate) path: &'a Path,
    /// This process's space, if it embeds.
    pub(crate) mine: Option<&'a EmbeddingSpace>,
    /// The connection's `data_version` at which the file's space was last seen to match.
    pub(crate) space_checked_at: &'a Cell<Option<i64>>,
    pub(crate) cache: Option<&'a Mutex<VectorCache>>,
    /// On the caller's thread: give up (`None`) unless the scope's block is cached and at
    /// most [`CALLER_MAX_VECTORS`] long.
    pub(crate) caller: bool,
}

/// Runs `job` in one read transaction on `conn`. Returns the hits and the pks to count as
/// recalled, or `None` when `place.caller` and the scope is not one for the caller.
pub(crate) fn search_snapshot(
    conn: &Connection,
    place: &Place<'_>,
    job: &SearchJob<'_>,
) -> Result<Option<(Searched, Vec<i64>)>, JobError> {
    let path = place.path;
    // One read transaction: every query sees the same snapshot.
    let tx = conn.unchecked_transaction()?;
    let sql = Sql { conn: &tx, path };
    let Some(scope_id) = sql.scope_id(job.scope)? else {
        return Ok(Some((Searched::Hits(Vec::new()), Vec::new())));
    };
    let mut guard = lock_cache_for(place.cache, &tx, path)?;
    if place.caller {
        let loaded = guard.as_ref().and_then(|c| c.loaded_len(scope_id));
        if loaded.is_none_or(|n| n > CALLER_MAX_VECTORS) {
            return Ok(None);
        }
    }
    // In this snapshot, before any vector is read: vectors of another space (another
    // process ran `reembed`) must not meet this process's query.
    if job.query.is_some()
        && let SpaceCheck::Moved(now) = check_space(&tx, path, place.mine, place.space_checked_at)?
    {
        return Err(SqliteError::SpaceMoved {
            path: path.to_owned(),
            now: now.unwrap_or_else(|| "none".into()),
            mine: place
                .mine
                .map_or_else(|| "none".to_owned(), ToString::to_string),
        }
        .into());
    }
    if job.backfill {
        let rows = sql.unembedded(scope_id, 256)?;
        if !rows.is_empty() {
            return Ok(Some((Searched::Unembedded(rows), Vec::new())));
        }
    }
    let request = job.request;
    let text = request.query_text().unwrap_or_default();
    let f = &request.filter;
    let q = job.query.unwrap_or_default();
    let mut spread = ScopeSpread::default();
    let (sem, kw) = match request.mode {
        SearchMode::Semantic => (
            sql.semantic(scope_id, q, f, request.limit, guard.as_deref_mut())?
                .hits,
            Vec::new(),
        ),
        SearchMode::Keyword => {
            let fts = sql.fts_query(scope_id, text)?;
            (
                Vec::new(),
                sql.keyword(scope_id, fts.as_deref(), f, request.limit)?,
            )
        }
        SearchMode::Hybrid(_) => {
            let semantic = sql.semantic(scope_id, q, f, job.pool, guard.as_deref_mut())?;
            spread.semantic = semantic.spread;
            let fts = sql.fts_query(scope_id, text)?;
            spread.keyword = sql.keyword_spread(scope_id, fts.as_deref(), f)?;
            (
                semantic.hits,
                sql.keyword(scope_id, fts.as_deref(), f, job.pool)?,
            )
        }
    };
    let scored = rank(request, &sem, &kw, spread);
    let pks: Vec<i64> = scored.iter().map(|(pk, _, _)| *pk).collect();
    let mut entries = sql.entries_by_pk(scope_id, &pks)?.into_iter();
    drop(guard);
    drop(tx);
    let now = Timestamp::now();
    let mut out = Vec::with_capacity(scored.len());
    for (pk, score, breakdown) in scored {
        if let Some((epk, mut entry)) = entries.next() {
            debug_assert_eq!(epk, pk);
            if request.record_access {
                // What the store will hold once the recall is recorded.
                entry.access_count += 1;
                entry.accessed_at = entry.accessed_at.max(now);
            }
            out.push(ScoredMemory {
                entry,
                score,
                breakdown,
            });
        }
    }
    Ok(Some((Searched::Hits(out), pks)))
}

/// A read connection and what it knows about the file's space.
struct ReadConn {
    conn: Connection,
    space_checked_at: Cell<Option<i64>>,
}

/// Read connections for searches on the callers' threads, opened as needed and kept (a
/// few) for reuse.
pub(crate) struct Readers {
    path: PathBuf,
    pragmas: Pragmas,
    idle: Mutex<Vec<ReadConn>>,
    /// Searches answered on a caller's thread (for tests and diagnostics).
    served: AtomicU64,
    /// The store was closed: every search goes to the worker, which says so.
    closed: AtomicBool,
}

impl std::fmt::Debug for Readers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Readers")
            .field("path", &self.path)
            .field("served", &self.served.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl Readers {
    /// Read connections to `path`, opened read-only with the store's other settings.
    pub(crate) fn new(path: &Path, pragmas: &Pragmas) -> Self {
        Self {
            path: path.to_owned(),
            pragmas: Pragmas {
                read_only: true,
                ..pragmas.clone()
            },
            idle: Mutex::new(Vec::new()),
            served: AtomicU64::new(0),
            closed: AtomicBool::new(false),
        }
    }

    /// Closes the idle connections; later searches go to the worker.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        self.idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }

    /// Runs `job` on a read connection of this thread, if its scope is one for the caller
    /// (see [`Place::caller`]); `None` sends it to the worker. So does any failure here (a
    /// read connection that cannot be opened, a busy file, a space moved by another
    /// process): the worker's answer, or its error, is the one to report.
    pub(crate) fn search(
        &self,
        mine: Option<&EmbeddingSpace>,
        cache: &Mutex<VectorCache>,
        job: &SearchJob<'_>,
    ) -> Option<(Searched, Vec<i64>)> {
        if self.closed.load(Ordering::SeqCst) {
            return None;
        }
        let reader = self
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        let reader = match reader {
            Some(r) => r,
            None => match schema::open_conn(&self.path, &self.pragmas, false) {
                Ok((conn, _)) => ReadConn {
                    conn,
                    space_checked_at: Cell::new(None),
                },
                Err(_) => return None,
            },
        };
        let place = Place {
            path: &self.path,
            mine,
            space_checked_at: &reader.space_checked_at,
            cache: Some(cache),
            caller: true,
        };
        let found = search_snapshot(&reader.conn, &place, job);
        // A connection whose search failed may be in a bad state; it is not kept.
        if found.is_ok() && !self.closed.load(Ordering::SeqCst) {
            let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
            if idle.len() < MAX_IDLE {
                idle.push(reader);
            }
        }
        let found = found.ok().flatten()?;
        self.served.fetch_add(1, Ordering::Relaxed);
        Some(found)
    }

    /// Searches answered on a caller's thread so far.
    #[cfg(test)]
    pub(crate) fn served(&self) -> u64 {
        self.served.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use memory_core::{
        EmbeddingProvider, HashingEmbedder, MemoryBackend, MemoryId, NewMemory, Scope,
        SearchRequest,
    };

    use crate::{SqliteBackend, SqliteConfig};

    fn embedder() -> Option<Arc<dyn EmbeddingProvider>> {
        Some(Arc::new(HashingEmbedder::new(64).unwrap()))
    }

    async fn open(path: &std::path::Path, cache_mib: u32) -> SqliteBackend {
        let config = SqliteConfig {
            vector_cache_mib: cache_mib,
            ..SqliteConfig::default()
        };
        SqliteBackend::open(path, embedder(), config).await.unwrap()
    }

    fn ids(hits: &[memory_core::ScoredMemory]) -> Vec<MemoryId> {
        hits.iter().map(|h| h.entry.id).collect()
    }

    /// The same hits: sqlite-vec computes cosine its own way, so scores agree to rounding
    /// and near-ties may swap places, but nothing clearly better is missing.
    fn same_hits(
        here: &[memory_core::ScoredMemory],
        there: &[memory_core::ScoredMemory],
        q: &SearchRequest,
    ) {
        assert_eq!(here.len(), there.len(), "{q:?}");
        for (h, t) in here.iter().zip(there) {
            assert!((h.score - t.score).abs() < 1e-4, "{q:?}: {h:?} vs {t:?}");
        }
        let last = there.last().map_or(0.0, |t| t.score);
        for h in here.iter().filter(|h| h.score > last + 1e-4) {
            assert!(ids(there).contains(&h.entry.id), "{q:?}: {h:?} missing");
        }
    }

    const TOPICS: [&str; 5] = ["garden", "violin", "mortgage", "hiking", "espresso"];

    /// Searches of a cached scope run on the caller's thread and answer exactly what the
    /// worker (and a store without a cache, on sqlite-vec) answers, through this store's
    /// own writes and another connection's.
    #[tokio::test]
    async fn cached_scopes_are_searched_on_the_caller_and_stay_exact() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.db");
        let store = open(&path, 64).await;
        let alice = Scope::for_user("alice").unwrap();
        let bob = Scope::for_user("bob").unwrap();
        let batch = |who: &str, n: usize| -> Vec<NewMemory> {
            (0..n)
                .map(|i| NewMemory::new(format!("{who} note {i} about {}", TOPICS[i % 5])))
                .collect()
        };
        // 300: above DUAL_FROM, so alice's block keeps integer codes beside its f32s.
        store
            .store_batch(&alice, batch("alice", 300))
            .await
            .unwrap();
        store.store_batch(&bob, batch("bob", 70)).await.unwrap();
        let queries = [
            SearchRequest::semantic("garden note").limit(5),
            // 64-d hashing cancels this query out to the zero vector: no similarity.
            SearchRequest::hybrid("violin practice").limit(7),
            SearchRequest::hybrid("garden hiking").limit(6),
            SearchRequest::keyword("espresso").limit(4),
        ]
        .map(SearchRequest::without_access_tracking);
        let untracked = |q: &str| SearchRequest::semantic(q).without_access_tracking();
        // The same file through vec0 only: no cache, every search on its worker.
        let plain = open(&path, 0).await;
        let check = async |store: &SqliteBackend, plain: &SqliteBackend| {
            for q in &queries {
                let here = store.search(&alice, q).await.unwrap();
                let there = plain.search(&alice, q).await.unwrap();
                same_hits(&here, &there, q);
                assert!(here.iter().all(|h| h.entry.scope == alice));
            }
        };

        // The first search loads alice's block on the worker; the next ones use it here.
        store.search(&alice, &queries[0]).await.unwrap();
        let before = store.readers.served();
        check(&store, &plain).await;
        assert_eq!(store.readers.served() - before, 4);

        // This store's own writes reach the cached block.
        let new = store
            .store(
                &alice,
                NewMemory::new("alice planted tomatoes in the garden"),
            )
            .await
            .unwrap();
        let hits = store
            .search(&alice, &untracked("alice planted tomatoes in the garden"))
            .await
            .unwrap();
        assert_eq!(hits[0].entry.id, new.id);
        check(&store, &plain).await;
        let old = hits[1].entry.id;
        store.delete(&alice, old).await.unwrap();
        check(&store, &plain).await;

        // Another connection's write drops the block; the search after it is exact.
        let gone = store.search(&alice, &untracked("violin")).await.unwrap()[0]
            .entry
            .id;
        plain.delete(&alice, gone).await.unwrap();
        let wide = untracked("violin").limit(100);
        let hits = store.search(&alice, &wide).await.unwrap();
        assert!(!ids(&hits).contains(&gone));
        same_hits(&hits, &plain.search(&alice, &wide).await.unwrap(), &wide);
        let theirs = plain
            .store(&alice, NewMemory::new("alice booked a violin recital"))
            .await
            .unwrap();
        let hits = store
            .search(&alice, &untracked("alice booked a violin recital"))
            .await
            .unwrap();
        assert_eq!(hits[0].entry.id, theirs.id);
        check(&store, &plain).await;
        assert!(store.readers.served() - before >= 12);

        // Recalls counted on the caller are written by the worker.
        let tracked = SearchRequest::semantic("hiking").limit(3);
        let served = store.readers.served();
        let hits = store.search(&alice, &tracked).await.unwrap();
        assert_eq!(store.readers.served(), served + 1);
        let first = &hits[0].entry;
        assert_eq!(first.access_count, 1);
        let stored = store.get(&alice, first.id).await.unwrap();
        assert_eq!(stored.access_count, 1);
        let stored = plain.get(&alice, first.id).await.unwrap();
        assert_eq!(stored.access_count, 1);
    }

    /// Searches on many threads at once, while this store and another connection write:
    /// none fails, each sees only its scope, and once the writes stop the answers are
    /// exact again.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_searches_and_writes_stay_consistent() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.db");
        let store = Arc::new(open(&path, 64).await);
        let other = Arc::new(open(&path, 64).await);
        let scopes: Vec<Scope> = (0..3)
            .map(|i| Scope::for_user(format!("u{i}")).unwrap())
            .collect();
        for (i, s) in scopes.iter().enumerate() {
            let batch = (0..300)
                .map(|j| NewMemory::new(format!("u{i} memory {j} about {}", TOPICS[j % 5])))
                .collect();
            store.store_batch(s, batch).await.unwrap();
        }
        let mut tasks = Vec::new();
        for t in 0..4 {
            let (store, scopes) = (Arc::clone(&store), scopes.clone());
            tasks.push(tokio::spawn(async move {
                for n in 0..150 {
                    let s = &scopes[(t + n) % scopes.len()];
                    let q = SearchRequest::hybrid(TOPICS[n % 5]).limit(8);
                    let hits = store.search(s, &q).await.unwrap();
                    assert!(hits.iter().all(|h| &h.entry.scope == s));
                    assert!(!hits.is_empty());
                }
            }));
        }
        for (w, writer) in [Arc::clone(&store), Arc::clone(&other)]
            .into_iter()
            .enumerate()
        {
            let scopes = scopes.clone();
            tasks.push(tokio::spawn(async move {
                for n in 0..40 {
                    let s = &scopes[n % scopes.len()];
                    let m = writer
                        .store(
                            s,
                            NewMemory::new(format!("writer {w} note {n} about garden")),
                        )
                        .await
                        .unwrap();
                    if n % 3 == 0 {
                        writer.delete(s, m.id).await.unwrap();
                    }
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        assert!(store.readers.served() > 0);
        let plain = open(&path, 0).await;
        for s in &scopes {
            for q in TOPICS.map(|t| {
                SearchRequest::semantic(t)
                    .limit(20)
                    .without_access_tracking()
            }) {
                same_hits(
                    &store.search(s, &q).await.unwrap(),
                    &plain.search(s, &q).await.unwrap(),
                    &q,
                );
            }
        }
    }
}
