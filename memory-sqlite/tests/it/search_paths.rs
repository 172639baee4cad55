//! The ways a semantic search can run (the in-process block scan, its quantized form when
//! only that fits the cache, sqlite-vec KNN when the cache is off, a stream over the codes
//! stored beside the vectors when the scope does not fit the cache even quantized or is big
//! and not loaded yet) return the same hits, and a filter still holds on each path.

use std::sync::Arc;

use memory_core::{
    EmbeddingProvider, Filter, HashingEmbedder, MemoryBackend, MemoryId, NewMemory, Scope,
    SearchRequest, Tag, TagQuery,
};
use memory_sqlite::{SqliteBackend, SqliteConfig};

const DIMS: usize = 384;
/// 3,000 vectors of 384 dimensions: 4.4 MiB whole, 1.13 MiB quantized (384 codes, a step
/// and a key each), so a 1 MiB cache streams them and a 2 MiB cache holds them quantized.
const MEMORIES: usize = 3000;

async fn store_with(dir: &std::path::Path, vector_cache_mib: u32) -> SqliteBackend {
    let embedder: Arc<dyn EmbeddingProvider> = Arc::new(HashingEmbedder::new(DIMS).unwrap());
    open_with(dir, embedder, vector_cache_mib).await
}

async fn open_with(
    dir: &std::path::Path,
    embedder: Arc<dyn EmbeddingProvider>,
    vector_cache_mib: u32,
) -> SqliteBackend {
    let config = SqliteConfig {
        vector_cache_mib,
        ..SqliteConfig::default()
    };
    SqliteBackend::open(dir.join("paths.db"), Some(embedder), config)
        .await
        .unwrap()
}

/// One store per vector cache size in `mibs`, each holding `data`, and the directories
/// that hold them (kept as long as the stores are).
async fn stores_holding(
    embedder: &Arc<dyn EmbeddingProvider>,
    mibs: &[u32],
    data: &[NewMemory],
) -> (Vec<SqliteBackend>, Vec<tempfile::TempDir>) {
    let mut stores = Vec::new();
    let mut dirs = Vec::new();
    for &mib in mibs {
        let dir = tempfile::tempdir().unwrap();
        let store = open_with(dir.path(), Arc::clone(embedder), mib).await;
        store.store_batch(&scope(), data.to_vec()).await.unwrap();
        stores.push(store);
        dirs.push(dir);
    }
    (stores, dirs)
}

fn scope() -> Scope {
    Scope::for_user("u").unwrap().in_chat("c").unwrap()
}

fn memories() -> Vec<NewMemory> {
    memories_n(MEMORIES)
}

fn memories_n(n: usize) -> Vec<NewMemory> {
    let words = [
        "cat", "dog", "tea", "rain", "bike", "piano", "garden", "train", "soup", "river", "book",
        "lamp",
    ];
    (0..n)
        .map(|i| {
            let text = format!(
                "{} {} {} note {i}",
                words[i % 12],
                words[(i / 12) % 12],
                words[(i * 7) % 12]
            );
            let mut m = NewMemory::new(text).with_id(MemoryId::new());
            if i % 5 == 0 {
                m = m.with_tag(Tag::new("fifth").unwrap());
            }
            m
        })
        .collect()
}

async fn hits(store: &SqliteBackend, req: &SearchRequest) -> Vec<(MemoryId, f32)> {
    store
        .search(&scope(), req)
        .await
        .unwrap()
        .into_iter()
        .map(|h| (h.entry.id, h.score))
        .collect()
}

/// `got` and `want` are the same ranking: scores equal rank by rank (to 1e-4, as sqlite-vec
/// computes cosine distance in its own order of operations), and the same memories, except
/// that memories whose scores are that close may trade places (or the last place).
fn same_hits(got: &[(MemoryId, f32)], want: &[(MemoryId, f32)], what: &str) {
    same_hits_within(got, want, what, 1e-4);
}

/// [`same_hits`], scores equal to `within`.
fn same_hits_within(got: &[(MemoryId, f32)], want: &[(MemoryId, f32)], what: &str, within: f32) {
    assert_eq!(got.len(), want.len(), "{what}: {got:?} vs {want:?}");
    for (a, b) in got.iter().zip(want) {
        assert!((a.1 - b.1).abs() < within, "{what}: {a:?} vs {b:?}");
    }
    let Some(last) = want.last().map(|w| w.1) else {
        return;
    };
    let clear = |h: &[(MemoryId, f32)]| {
        let mut ids: Vec<MemoryId> = h
            .iter()
            .filter(|x| x.1 > last + within)
            .map(|x| x.0)
            .collect();
        ids.sort();
        ids
    };
    assert_eq!(clear(got), clear(want), "{what}: {got:?} vs {want:?}");
    let mut rank = 0;
    while rank < want.len() {
        // A run of near-equal scores holds the same memories in any order.
        let end = (rank..want.len())
            .take_while(|&i| (want[i].1 - want[rank].1).abs() < within)
            .last()
            .map_or(rank + 1, |i| i + 1);
        if end < want.len() {
            let mut a: Vec<MemoryId> = got[rank..end].iter().map(|x| x.0).collect();
            let mut b: Vec<MemoryId> = want[rank..end].iter().map(|x| x.0).collect();
            a.sort();
            b.sort();
            assert_eq!(a, b, "{what}: ranks {rank}..{end}");
        }
        rank = end;
    }
}

#[tokio::test]
async fn block_scan_and_both_knn_paths_agree() {
    let data = memories();
    // Big cache (block scan), no cache (vec0 KNN), a cache too small for the scope even
    // quantized (stream), a cache that holds it quantized.
    let hashing: Arc<dyn EmbeddingProvider> = Arc::new(HashingEmbedder::new(DIMS).unwrap());
    let (stores, _dirs) = stores_holding(&hashing, &[256, 0, 1, 2], &data).await;
    let tagged = fifth();
    let bits = |h: &[(MemoryId, f32)]| h.iter().map(|x| (x.0, x.1.to_bits())).collect::<Vec<_>>();
    for query in QUERIES {
        for filter in [Filter::default(), tagged.clone()] {
            for limit in [1, 10, 40] {
                let req = SearchRequest::semantic(query)
                    .limit(limit)
                    .filter(filter.clone())
                    .without_access_tracking();
                let scan = hits(&stores[0], &req).await;
                assert_eq!(scan.len(), limit, "{query}: {scan:?}");
                for (other, name) in [(&stores[1], "no cache"), (&stores[2], "small cache")] {
                    let got = hits(other, &req).await;
                    same_hits(&got, &scan, &format!("{query} ({name}, {filter:?})"));
                }
                // The quantized block's hits are exact: those of the whole block, to the bit
                // (its second search, once the block is loaded, and its first).
                for _ in 0..2 {
                    let quantized = hits(&stores[3], &req).await;
                    assert_eq!(
                        bits(&quantized),
                        bits(&scan),
                        "{query} (quantized, {filter:?})"
                    );
                }
            }
        }
    }
}

/// A scope of more than `STREAM_FIRST` (10,000) vectors: a new process's first search
/// streams the stored codes, the next one loads the block from them (quantized, as every
/// scope of that size) and scans it; both find what vec0's own KNN finds, and the two
/// in-process paths agree to the bit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_big_scope_streams_its_first_search_and_scans_a_block_after() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_with(dir.path(), 256).await;
    for batch in memories_n(10_200).chunks(2_000) {
        store.store_batch(&scope(), batch.to_vec()).await.unwrap();
    }
    store.close().await;
    let req = SearchRequest::semantic("rain on the river with a cat")
        .limit(10)
        .without_access_tracking();
    let fresh = store_with(dir.path(), 256).await;
    let first = hits(&fresh, &req).await;
    let second = hits(&fresh, &req).await;
    let third = hits(&fresh, &req).await;
    assert_eq!(first.len(), 10);
    let bits = |h: &[(MemoryId, f32)]| h.iter().map(|x| (x.0, x.1.to_bits())).collect::<Vec<_>>();
    assert_eq!(bits(&first), bits(&second), "stream and block scan");
    assert_eq!(bits(&second), bits(&third));
    fresh.close().await;
    let knn = store_with(dir.path(), 0).await;
    let exact = hits(&knn, &req).await;
    same_hits(&first, &exact, "the same as sqlite-vec KNN");
}

/// Long memories embedded as passages (a windowed embedder): on every path (block scan,
/// vec0 KNN, stream, quantized block) a memory is one hit whose similarity is its best
/// passage's, as computed here from the passages themselves, with and without a filter;
/// the quantized block's hits are those of the whole block, to the bit.
#[tokio::test]
async fn long_memories_rank_by_their_best_passage_on_every_path() {
    let embedder = HashingEmbedder::new(DIMS).unwrap().with_window(48);
    let words = [
        "cat", "dog", "tea", "rain", "bike", "piano", "garden", "train", "soup", "river", "book",
        "lamp",
    ];
    let n = 2000;
    let data: Vec<NewMemory> = (0..n)
        .map(|i| {
            let sentence = |j: usize| {
                format!(
                    "{} {} {} line {j} of {i}.",
                    words[(i + j) % 12],
                    words[(i / 3 + 2 * j) % 12],
                    words[(i * 7 + j) % 12]
                )
            };
            let text = if i % 3 == 0 {
                (0..4).map(sentence).collect::<Vec<_>>().join(" ")
            } else {
                sentence(0)
            };
            let mut m = NewMemory::new(text).with_id(MemoryId::new());
            if i % 5 == 0 {
                m = m.with_tag(Tag::new("fifth").unwrap());
            }
            m
        })
        .collect();
    let texts: Vec<&str> = data.iter().map(|m| m.content.as_str()).collect();
    let passages = memory_core::embed_passages(&embedder, &texts)
        .await
        .unwrap();
    let vectors: usize = passages.iter().map(Vec::len).sum();
    assert!(vectors > n + n / 3, "{vectors} vectors for {n} memories");
    // A cache that holds the scope quantized (codes, a step and a key per vector) but not
    // whole.
    let quantized_mib = (vectors * (DIMS + 12)).div_ceil(1 << 20) + 1;
    assert!(vectors * (DIMS * 4 + 8) > quantized_mib << 20);
    let shared: Arc<dyn EmbeddingProvider> = Arc::new(embedder.clone());
    let mibs = [256, 0, 1, u32::try_from(quantized_mib).unwrap()];
    let (stores, _dirs) = stores_holding(&shared, &mibs, &data).await;
    let tagged = fifth();
    let bits = |h: &[(MemoryId, f32)]| h.iter().map(|x| (x.0, x.1.to_bits())).collect::<Vec<_>>();
    for query in QUERIES {
        let q = embedder.embed_sync(query);
        let truth_single: std::collections::HashSet<MemoryId> = data
            .iter()
            .zip(&passages)
            .filter(|(_, vs)| vs.len() == 1)
            .map(|(m, _)| m.id.unwrap())
            .collect();
        // How similarities are spread over every vector of the scope (filters aside).
        let similarities = passages
            .iter()
            .flatten()
            .map(|v| memory_core::cosine(v.vector(), q.vector()));
        let deviation = memory_core::Spread::of(similarities, vectors)
            .unwrap()
            .std();
        for (filter, only_tagged) in [(Filter::default(), false), (tagged.clone(), true)] {
            let mut truth: Vec<(MemoryId, f32)> = data
                .iter()
                .zip(&passages)
                .enumerate()
                .filter(|(i, _)| !only_tagged || i % 5 == 0)
                .map(|(_, (m, vs))| {
                    let best = vs
                        .iter()
                        .map(|v| memory_core::cosine(v.vector(), q.vector()))
                        .fold(f32::MIN, f32::max);
                    let similarity = memory_core::passage_similarity(best, vs.len(), deviation);
                    (m.id.unwrap(), similarity)
                })
                .collect();
            truth.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            for limit in [1, 10, 40] {
                let req = SearchRequest::semantic(query)
                    .limit(limit)
                    .filter(filter.clone())
                    .without_access_tracking();
                let want = &truth[..limit];
                // A long memory's similarity depends on the spread of the scope's
                // similarities, which a scan over codes (a first search streams them, a
                // quantized block holds them) reads within its error bound: scores agree to
                // 1e-3 where they depend on it, and to 1e-4 where they do not.
                let scan = hits(&stores[0], &req).await;
                let within = 1e-3;
                same_hits_within(
                    &scan,
                    want,
                    &format!("{query} (block scan, {filter:?})"),
                    within,
                );
                for (other, name) in [
                    (&stores[1], "no cache"),
                    (&stores[2], "small cache"),
                    (&stores[3], "quantized"),
                ] {
                    let got = hits(other, &req).await;
                    same_hits_within(&got, want, &format!("{query} ({name}, {filter:?})"), within);
                }
                // A quantized block answers the same twice, to the bit.
                let quantized = hits(&stores[3], &req).await;
                assert_eq!(
                    bits(&quantized),
                    bits(&hits(&stores[3], &req).await),
                    "{query} (quantized, {filter:?}, limit {limit})"
                );
                // Memories of one vector keep their similarity on every path, to 1e-4.
                let single: Vec<(MemoryId, f32)> = want
                    .iter()
                    .filter(|w| truth_single.contains(&w.0))
                    .copied()
                    .collect();
                for got in [&scan, &quantized] {
                    for w in &single {
                        if let Some(g) = got.iter().find(|g| g.0 == w.0) {
                            assert!((g.1 - w.1).abs() < 1e-4, "{query}: {g:?} vs {w:?}");
                        }
                    }
                }
            }
        }
    }
}

/// What both path tests ask.
const QUERIES: [&str; 3] = [
    "cat piano",
    "rain on the river",
    "soup and a book by the lamp",
];

/// Only the memories tagged `fifth`.
fn fifth() -> Filter {
    Filter {
        tags: Some(TagQuery::any([Tag::new("fifth").unwrap()])),
        ..Filter::default()
    }
}
