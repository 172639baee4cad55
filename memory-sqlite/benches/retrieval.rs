//! Retrieval benches for the SQLite store: durable bulk ingest with precomputed 384-d
//! vectors, and top-10 semantic / keyword / hybrid search in one scope at 10k and 100k
//! memories over 100 scopes, and one scope of 1M memories (`AVA_BENCH_CASES=1m`; slow to
//! build, so not in the default set `ingest,10k,100k`).
//!
//! Criterion measures each case; a second pass times single queries and prints
//! `ava-bench: percentiles <name> p50=<ms> p95=<ms> n=<queries>` lines, and the bytes a
//! brute-force scan of the scope reads as `ava-bench: scanned <name> bytes=<n>`, which
//! `cargo xtask bench` turns into the tables of BENCHMARKS.md.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput};
use memory_core::{
    Embedding, EmbeddingSpace, HashingEmbedder, MemoryBackend, NewMemory, Scope, SearchRequest,
};
use memory_sqlite::{Durability, SqliteBackend, SqliteConfig};
use tokio::runtime::Runtime;

const DIMS: usize = 384;
const SCOPES: usize = 100;

/// Deterministic data: splitmix64.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// The bench store's space: vectors are random, so the embedder only supplies the identity
/// (and embeds nothing: every memory and query comes with its vector).
fn embedder() -> Arc<HashingEmbedder> {
    Arc::new(HashingEmbedder::new(DIMS).unwrap())
}

fn vector(rng: &mut Rng, space: &Arc<EmbeddingSpace>) -> Embedding {
    let mut v: Vec<f32> = (0..DIMS).map(|_| rng.unit()).collect();
    memory_core::normalize(&mut v);
    Embedding::new(Arc::clone(space), v).unwrap()
}

fn text(rng: &mut Rng) -> String {
    (0..12)
        .map(|_| format!("w{}", rng.below(5000)))
        .collect::<Vec<_>>()
        .join(" ")
}

fn scope(i: usize) -> Scope {
    Scope::for_user(format!("user-{i}"))
        .unwrap()
        .in_chat("bench")
        .unwrap()
}

fn memories(rng: &mut Rng, space: &Arc<EmbeddingSpace>, n: usize) -> Vec<NewMemory> {
    (0..n)
        .map(|_| NewMemory::new(text(rng)).with_embedding(vector(rng, space)))
        .collect()
}

async fn open(dir: &std::path::Path) -> SqliteBackend {
    open_with(dir, SqliteConfig::default()).await
}

async fn open_with(dir: &std::path::Path, config: SqliteConfig) -> SqliteBackend {
    let e: Arc<dyn memory_core::EmbeddingProvider> = embedder();
    SqliteBackend::open(dir.join("bench.db"), Some(e), config)
        .await
        .unwrap()
}

/// A store with `n` memories spread evenly over `scopes` scopes.
async fn build(dir: &std::path::Path, n: usize, scopes: usize) -> SqliteBackend {
    let store = open(dir).await;
    let space = memory_core::EmbeddingProvider::space(&*embedder());
    let mut rng = Rng(7);
    let per_scope = n / scopes;
    for s in 0..scopes {
        let mut left = per_scope;
        while left > 0 {
            let batch = left.min(5000);
            store
                .store_batch(&scope(s), memories(&mut rng, &space, batch))
                .await
                .unwrap();
            left -= batch;
        }
    }
    store
}

fn percentiles(name: &str, queries: usize, mut one: impl FnMut(usize)) {
    let mut times: Vec<Duration> = Vec::with_capacity(queries);
    for i in 0..queries {
        let t = Instant::now();
        one(i);
        times.push(t.elapsed());
    }
    times.sort();
    let at = |q: f64| {
        times[((times.len() as f64 * q) as usize).min(times.len() - 1)].as_secs_f64() * 1e3
    };
    println!(
        "ava-bench: percentiles {name} p50={:.3}ms p95={:.3}ms n={queries}",
        at(0.50),
        at(0.95)
    );
}

fn bench_ingest(c: &mut Criterion, rt: &Runtime) {
    let space = memory_core::EmbeddingProvider::space(&*embedder());
    let mut group = c.benchmark_group("sqlite/ingest");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(15));
    const N: usize = 10_000;
    group.throughput(Throughput::Elements(N as u64));
    let mut rng = Rng(1);
    let data: Vec<NewMemory> = memories(&mut rng, &space, N);
    // `Normal` (the default: WAL + synchronous=NORMAL, a commit survives the process being
    // killed) and `Full` (every commit fsynced: survives power loss too).
    for (name, durability) in [
        ("10k_precomputed_384d_batches_of_1000", Durability::Normal),
        (
            "10k_precomputed_384d_batches_of_1000_sync_full",
            Durability::Full,
        ),
    ] {
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let dir = tempfile::tempdir().unwrap();
                    let config = SqliteConfig {
                        durability,
                        ..SqliteConfig::default()
                    };
                    let store = rt.block_on(open_with(dir.path(), config));
                    let batches: Vec<Vec<NewMemory>> =
                        data.chunks(1000).map(<[NewMemory]>::to_vec).collect();
                    let t = Instant::now();
                    for (i, batch) in batches.into_iter().enumerate() {
                        rt.block_on(store.store_batch(&scope(i % SCOPES), batch))
                            .unwrap();
                    }
                    total += t.elapsed();
                    store.close();
                }
                total
            });
        });
    }
    group.finish();
}

/// Builds `n` memories over `scopes` scopes and measures top-10 searches on them; with
/// `big_cache_mib`, measures again after reopening the file with a vector cache that large.
fn bench_search(
    c: &mut Criterion,
    rt: &Runtime,
    n: usize,
    scopes: usize,
    label: &str,
    big_cache_mib: Option<u32>,
) {
    let dir = tempfile::tempdir().unwrap();
    let t = Instant::now();
    let store = rt.block_on(build(dir.path(), n, scopes));
    println!(
        "built {label}: {n} memories in {scopes} scopes in {:.1}s",
        t.elapsed().as_secs_f64()
    );
    let space = memory_core::EmbeddingProvider::space(&*embedder());
    let mut rng = Rng(99);
    let queries: Vec<(Scope, Embedding, String)> = (0..256)
        .map(|_| {
            let words = (0..3)
                .map(|_| format!("w{}", rng.below(5000)))
                .collect::<Vec<_>>()
                .join(" ");
            (scope(rng.below(scopes)), vector(&mut rng, &space), words)
        })
        .collect();
    let per_scope = n / scopes;
    let default_mib = SqliteConfig::default().vector_cache_mib;
    measure(c, rt, &store, &queries, per_scope, label, default_mib);
    store.close();
    if let Some(mib) = big_cache_mib {
        let config = SqliteConfig {
            vector_cache_mib: mib,
            ..SqliteConfig::default()
        };
        let store = rt.block_on(open_with(dir.path(), config));
        let label = format!("{label}_cache_{mib}MiB");
        // The first query loads the scope's block into the cache; report it, then measure.
        let (s, v, _) = &queries[0];
        let t = Instant::now();
        let req = SearchRequest::vector(v.clone())
            .limit(10)
            .without_access_tracking();
        black_box(rt.block_on(store.search(s, &req)).unwrap());
        println!(
            "ava-bench: note sqlite/search_top10/{label}/semantic first query (loads the block) {:.2}s",
            t.elapsed().as_secs_f64()
        );
        measure(c, rt, &store, &queries, per_scope, &label, mib);
        store.close();
    }
}

/// Criterion and single-call percentiles for semantic, keyword and hybrid top-10 queries.
fn measure(
    c: &mut Criterion,
    rt: &Runtime,
    store: &SqliteBackend,
    queries: &[(Scope, Embedding, String)],
    per_scope: usize,
    label: &str,
    cache_mib: u32,
) {
    // Fewer timed single queries where one query scans a million vectors.
    let big = per_scope >= 1_000_000;
    let queries_timed = if big { 30 } else { 1000 };
    let semantic = |i: usize| {
        let (s, v, _) = &queries[i % queries.len()];
        (
            s.clone(),
            SearchRequest::vector(v.clone())
                .limit(10)
                .without_access_tracking(),
        )
    };
    let keyword = |i: usize| {
        let (s, _, w) = &queries[i % queries.len()];
        (
            s.clone(),
            SearchRequest::keyword(w.clone())
                .limit(10)
                .without_access_tracking(),
        )
    };
    let hybrid = |i: usize| {
        let (s, v, w) = &queries[i % queries.len()];
        (
            s.clone(),
            SearchRequest::hybrid(w.clone())
                .with_vector(v.clone())
                .limit(10)
                .without_access_tracking(),
        )
    };
    // What a brute-force pass over the queried scope reads: its vectors, 4 bytes a float.
    let scanned = (per_scope * DIMS * 4) as u64;
    for name in ["semantic", "hybrid", "semantic_tracked"] {
        println!("ava-bench: scanned sqlite/search_top10/{label}/{name} bytes={scanned}");
    }
    if scanned > u64::from(cache_mib) << 20 {
        println!(
            "ava-bench: note sqlite/search_top10/{label}/semantic the scope does not fit the vector cache: sqlite-vec KNN"
        );
    }
    let mut group = c.benchmark_group(format!("sqlite/search_top10/{label}"));
    group
        .sample_size(if big { 10 } else { 30 })
        .measurement_time(Duration::from_secs(5));
    type Make<'a> = &'a dyn Fn(usize) -> (Scope, SearchRequest);
    let cases: [(&str, Make<'_>); 3] = [
        ("semantic", &semantic),
        ("keyword", &keyword),
        ("hybrid", &hybrid),
    ];
    for (name, make) in cases {
        let mut i = 0;
        group.bench_function(name, |b| {
            b.iter(|| {
                i += 1;
                let (s, req) = make(i);
                black_box(rt.block_on(store.search(&s, &req)).unwrap())
            })
        });
        percentiles(
            &format!("sqlite/search_top10/{label}/{name}"),
            queries_timed,
            |i| {
                let (s, req) = make(i);
                black_box(rt.block_on(store.search(&s, &req)).unwrap());
            },
        );
    }
    // The same semantic query with access tracking on (a write per search), as a bot does.
    percentiles(
        &format!("sqlite/search_top10/{label}/semantic_tracked"),
        queries_timed,
        |i| {
            let (s, mut req) = semantic(i);
            req.record_access = true;
            black_box(rt.block_on(store.search(&s, &req)).unwrap());
        },
    );
    group.finish();
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let mut c = Criterion::default().configure_from_args();
    // `AVA_BENCH_CASES` picks cases (comma separated): ingest, 10k, 100k, 1m.
    let cases = std::env::var("AVA_BENCH_CASES").unwrap_or_else(|_| "ingest,10k,100k".into());
    let on = |name: &str| {
        cases
            .split(',')
            .any(|c| c.trim().eq_ignore_ascii_case(name))
    };
    if on("ingest") {
        bench_ingest(&mut c, &rt);
    }
    if on("10k") {
        bench_search(&mut c, &rt, 10_000, SCOPES, "10k_in_100_scopes", None);
    }
    if on("100k") {
        bench_search(&mut c, &rt, 100_000, SCOPES, "100k_in_100_scopes", None);
    }
    if on("1m") {
        // Default config (the scope does not fit the cache: sqlite-vec KNN), then reopened
        // with a cache that holds the whole scope (1.5 GB of vectors).
        bench_search(&mut c, &rt, 1_000_000, 1, "1M_in_1_scope", Some(2048));
    }
    c.final_summary();
}
