//! The three ways a semantic search can run (the in-process block scan, sqlite-vec KNN when
//! the cache is off, and KNN when the cache is on but the scope does not fit it) return
//! the same hits, and a filter still holds on each path.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::sync::Arc;

use memory_core::{
    EmbeddingProvider, Filter, HashingEmbedder, MemoryBackend, MemoryId, NewMemory, Scope,
    SearchRequest, Tag, TagQuery,
};
use memory_sqlite::{SqliteBackend, SqliteConfig};

const DIMS: usize = 384;
/// 700 vectors of 384 floats (~1.05 MiB with their keys) do not fit a 1 MiB cache.
const MEMORIES: usize = 700;

async fn store_with(dir: &std::path::Path, vector_cache_mib: u32) -> SqliteBackend {
    let embedder: Arc<dyn EmbeddingProvider> = Arc::new(HashingEmbedder::new(DIMS).unwrap());
    let config = SqliteConfig {
        vector_cache_mib,
        ..SqliteConfig::default()
    };
    SqliteBackend::open(dir.join("paths.db"), Some(embedder), config)
        .await
        .unwrap()
}

fn scope() -> Scope {
    Scope::for_user("u").unwrap().in_chat("c").unwrap()
}

fn memories() -> Vec<NewMemory> {
    let words = [
        "cat", "dog", "tea", "rain", "bike", "piano", "garden", "train", "soup", "river", "book",
        "lamp",
    ];
    (0..MEMORIES)
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

#[tokio::test]
async fn block_scan_and_both_knn_paths_agree() {
    let data = memories();
    let mut stores = Vec::new();
    let mut dirs = Vec::new();
    // Big cache (block scan), no cache (vec0 KNN), a cache too small for the scope.
    for mib in [256, 0, 1] {
        let dir = tempfile::tempdir().unwrap();
        let store = store_with(dir.path(), mib).await;
        store.store_batch(&scope(), data.clone()).await.unwrap();
        stores.push(store);
        dirs.push(dir);
    }
    let tagged = Filter {
        tags: Some(TagQuery::any([Tag::new("fifth").unwrap()])),
        ..Filter::default()
    };
    for query in [
        "cat piano",
        "rain on the river",
        "soup and a book by the lamp",
    ] {
        for filter in [Filter::default(), tagged.clone()] {
            let req = SearchRequest::semantic(query)
                .limit(10)
                .filter(filter.clone())
                .without_access_tracking();
            let scan = hits(&stores[0], &req).await;
            assert_eq!(scan.len(), 10, "{query}: {scan:?}");
            for (other, name) in [(&stores[1], "no cache"), (&stores[2], "small cache")] {
                let got = hits(other, &req).await;
                let ids = |h: &[(MemoryId, f32)]| h.iter().map(|x| x.0).collect::<Vec<_>>();
                assert_eq!(ids(&got), ids(&scan), "{query} ({name}, {filter:?})");
                for (a, b) in got.iter().zip(&scan) {
                    assert!((a.1 - b.1).abs() < 1e-4, "{query} ({name}): {a:?} vs {b:?}");
                }
            }
        }
    }
}
