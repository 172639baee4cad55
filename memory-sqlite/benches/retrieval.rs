//! Retrieval benches for the SQLite store: durable bulk ingest with precomputed 384-d
//! vectors, and top-10 semantic / keyword / hybrid search in one scope at 10k and 100k
//! memories over 100 scopes, one scope of 100k memories (`100k1`: a big chat) and one of
//! 1M (`1m`; slow to build); the default set is `ingest,10k,100k`. `long_query` times one
//! keyword search whose query is 4 MiB of distinct words (issue 54). Each search case also
//! prints the store's footprint (file bytes against raw vector and text bytes), the time
//! of a new process's first query (open the store, search a scope not yet in memory), and a
//! peer: the same vectors in plain sqlite-vec as a user would write it by hand, searched
//! with vec0's KNN (`plain_sqlite_vec`), with its ingest rate.
//!
//! Criterion measures each case; a second pass times single queries and prints
//! `ava-bench: percentiles <name> p50=<ms> p95=<ms> n=<queries>` lines, and the bytes a
//! brute-force scan of the scope reads as `ava-bench: scanned <name> bytes=<n>`, which
//! `cargo xtask bench` turns into the tables of BENCHMARKS.md.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test fails loudly on an unexpected error"
)]

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput};
use memory_core::testing::Rng;
use memory_core::testing::bench::{Query, memories, percentiles, queries, scope};
use memory_core::{HashingEmbedder, MemoryBackend, NewMemory, SearchRequest};
use memory_sqlite::{Durability, SqliteBackend, SqliteConfig};
use tokio::runtime::Runtime;

const DIMS: usize = 384;
const SCOPES: usize = 100;

/// The bench store's space: vectors are random, so the embedder only supplies the identity
/// (and embeds nothing: every memory and query comes with its vector).
fn embedder() -> Arc<HashingEmbedder> {
    Arc::new(HashingEmbedder::new(DIMS).unwrap())
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
    let mut rng = Rng::new(7);
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

fn bench_ingest(c: &mut Criterion, rt: &Runtime) {
    let space = memory_core::EmbeddingProvider::space(&*embedder());
    let mut group = c.benchmark_group("sqlite/ingest");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(15));
    const N: usize = 10_000;
    group.throughput(Throughput::Elements(N as u64));
    let mut rng = Rng::new(1);
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
                    rt.block_on(store.close());
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
    let queries = queries(&mut Rng::new(99), &space, 256, scopes);
    let per_scope = n / scopes;
    let default_mib = SqliteConfig::default().vector_cache_mib;
    measure(c, rt, &store, &queries, per_scope, label, default_mib);
    rt.block_on(store.close());
    footprint(dir.path(), n, label);
    if per_scope < 1_000_000 {
        plain_sqlite_vec(dir.path(), n, scopes, label, &queries);
    }
    // A new process's first query: open the store, search a scope whose block is not loaded.
    for (i, q) in queries.iter().take(3).enumerate() {
        let t = Instant::now();
        let store = rt.block_on(open(dir.path()));
        black_box(rt.block_on(store.search(&q.scope, &q.semantic())).unwrap());
        println!(
            "ava-bench: note sqlite/search_top10/{label}/semantic cold open + first query #{i} {:.3}s",
            t.elapsed().as_secs_f64()
        );
        rt.block_on(store.close());
    }
    if let Some(mib) = big_cache_mib {
        let config = SqliteConfig {
            vector_cache_mib: mib,
            ..SqliteConfig::default()
        };
        let store = rt.block_on(open_with(dir.path(), config));
        let label = format!("{label}_cache_{mib}MiB");
        // The first query streams the scope (a big one is loaded on its second); report
        // it, then measure.
        let q = &queries[0];
        let t = Instant::now();
        black_box(rt.block_on(store.search(&q.scope, &q.semantic())).unwrap());
        println!(
            "ava-bench: note sqlite/search_top10/{label}/semantic first query (streamed) {:.2}s",
            t.elapsed().as_secs_f64()
        );
        measure(c, rt, &store, &queries, per_scope, &label, mib);
        rt.block_on(store.close());
    }
}

/// The peer: the same vectors in a vec0 table as a user would write it by hand (a partition
/// key per scope, cosine distance, sqlite-vec's default chunk size, `synchronous=NORMAL`),
/// inserted in 5000-row transactions and searched with vec0's KNN, printed as
/// `ava-bench: percentiles sqlite/search_top10/<label>/plain_sqlite_vec` and an ingest note.
fn plain_sqlite_vec(
    dir: &std::path::Path,
    n: usize,
    scopes: usize,
    label: &str,
    queries: &[Query],
) {
    // Opening a `SqliteBackend` registered sqlite-vec with every connection of the process.
    let mut conn = rusqlite::Connection::open(dir.join("plain.db")).unwrap();
    conn.execute_batch(&format!(
        "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; \
         CREATE VIRTUAL TABLE v USING vec0(scope_id INTEGER PARTITION KEY, \
         embedding float[{DIMS}] distance_metric=cosine)"
    ))
    .unwrap();
    let space = memory_core::EmbeddingProvider::space(&*embedder());
    // The same generator and seed as `build`, so the same vectors in the same scopes.
    let mut rng = Rng::new(7);
    let per_scope = n / scopes;
    let blob = |v: &[f32]| -> Vec<u8> { v.iter().flat_map(|x| x.to_le_bytes()).collect() };
    let t = Instant::now();
    for s in 0..scopes {
        let mut left = per_scope;
        while left > 0 {
            let batch = left.min(5000);
            let tx = conn.transaction().unwrap();
            {
                let mut insert = tx
                    .prepare_cached("INSERT INTO v (scope_id, embedding) VALUES (?1, ?2)")
                    .unwrap();
                for m in memories(&mut rng, &space, batch) {
                    let e = m.embedding.unwrap();
                    insert
                        .execute(rusqlite::params![s as i64, blob(e.vector())])
                        .unwrap();
                }
            }
            tx.commit().unwrap();
            left -= batch;
        }
    }
    println!(
        "ava-bench: note sqlite/search_top10/{label}/plain_sqlite_vec ingest {:.0} vectors/s ({n} in {:.1}s)",
        n as f64 / t.elapsed().as_secs_f64(),
        t.elapsed().as_secs_f64()
    );
    let index = |q: &Query| -> i64 { q.scope.user().trim_start_matches("user-").parse().unwrap() };
    let mut knn = conn
        .prepare(
            "SELECT rowid, distance FROM v WHERE embedding MATCH ?1 AND k = 10 AND scope_id = ?2",
        )
        .unwrap();
    percentiles(
        &format!("sqlite/search_top10/{label}/plain_sqlite_vec"),
        1000,
        |i| {
            let q = &queries[i % queries.len()];
            let rows: Vec<(i64, f64)> = knn
                .query_map(rusqlite::params![blob(q.vector.vector()), index(q)], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })
                .unwrap()
                .collect::<rusqlite::Result<_>>()
                .unwrap();
            black_box(rows);
        },
    );
}

/// The store file's size against the raw data it holds: the vectors (4 bytes a float) and
/// the text (content and context), as `ava-bench: footprint` lines.
fn footprint(dir: &std::path::Path, n: usize, label: &str) {
    let path = dir.join("bench.db");
    let file = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    let conn =
        rusqlite::Connection::open_with_flags(&path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    let text: i64 = conn
        .query_row(
            "SELECT coalesce(sum(length(CAST(content AS BLOB)) + coalesce(length(CAST(context AS BLOB)), 0)), 0) FROM memories",
            [],
            |r| r.get(0),
        )
        .unwrap();
    let raw = (n * DIMS * 4) as u64 + text as u64;
    println!(
        "ava-bench: footprint sqlite/{label} file={file} raw={raw} ratio={:.2}",
        file as f64 / raw as f64
    );
}

/// Criterion and single-call percentiles for semantic, keyword and hybrid top-10 queries.
fn measure(
    c: &mut Criterion,
    rt: &Runtime,
    store: &SqliteBackend,
    queries: &[Query],
    per_scope: usize,
    label: &str,
    cache_mib: u32,
) {
    // Fewer timed single queries where one query scans a million vectors.
    let big = per_scope >= 1_000_000;
    let queries_timed = if big { 30 } else { 1000 };
    let query = |i: usize| &queries[i % queries.len()];
    // What a scan of the queried scope reads: its whole block (4 bytes a dimension) if it fits
    // the cache (an 8-byte key per vector besides) and holds under 10,000 vectors, else its
    // quantized block (1 byte a dimension and a 4-byte step; the key besides), else the
    // stream over vec0's chunks (the raw vectors).
    let cache = u64::from(cache_mib) << 20;
    let whole = (per_scope * (DIMS * 4 + 8)) as u64;
    let quantized = (per_scope * (DIMS + 12)) as u64;
    let scanned = if whole <= cache && per_scope < 10_000 {
        (per_scope * DIMS * 4) as u64
    } else if quantized <= cache {
        println!(
            "ava-bench: note sqlite/search_top10/{label}/semantic the scope is held quantized (int8 scan, exact rescoring)"
        );
        (per_scope * (DIMS + 4)) as u64
    } else {
        println!(
            "ava-bench: note sqlite/search_top10/{label}/semantic the scope does not fit the vector cache: streamed from vec0's chunks"
        );
        (per_scope * DIMS * 4) as u64
    };
    for name in ["semantic", "hybrid", "semantic_tracked"] {
        println!("ava-bench: scanned sqlite/search_top10/{label}/{name} bytes={scanned}");
    }
    let mut group = c.benchmark_group(format!("sqlite/search_top10/{label}"));
    group
        .sample_size(if big { 10 } else { 30 })
        .measurement_time(Duration::from_secs(5));
    type Make = fn(&Query) -> SearchRequest;
    let cases: [(&str, Make); 3] = [
        ("semantic", Query::semantic),
        ("keyword", Query::keyword),
        ("hybrid", Query::hybrid),
    ];
    for (name, make) in cases {
        let mut i = 0;
        group.bench_function(name, |b| {
            b.iter(|| {
                i += 1;
                let q = query(i);
                black_box(rt.block_on(store.search(&q.scope, &make(q))).unwrap())
            })
        });
        percentiles(
            &format!("sqlite/search_top10/{label}/{name}"),
            queries_timed,
            |i| {
                let q = query(i);
                black_box(rt.block_on(store.search(&q.scope, &make(q))).unwrap());
            },
        );
    }
    // The same semantic query with access tracking on (a write per search), as a bot does.
    percentiles(
        &format!("sqlite/search_top10/{label}/semantic_tracked"),
        queries_timed,
        |i| {
            let q = query(i);
            let mut req = q.semantic();
            req.record_access = true;
            black_box(rt.block_on(store.search(&q.scope, &req)).unwrap());
        },
    );
    group.finish();
}

/// A keyword search whose query is 4 MiB of distinct words (issue 54, D1), in a scope of a
/// 10k-memory store over 100 scopes: its time, printed as `ava-bench: long_query ...` (one
/// search, not a Criterion case: before the bound on a query's words it took minutes).
fn bench_long_query(rt: &Runtime) {
    let dir = tempfile::tempdir().unwrap();
    let store = rt.block_on(build(dir.path(), 10_000, SCOPES));
    let mut text = String::with_capacity(4 << 20);
    let mut i = 0usize;
    while text.len() < 4 << 20 {
        let (mut n, mut w) = (i, String::from("q"));
        for _ in 0..5 {
            w.push(char::from(b'a' + (n % 26) as u8));
            n /= 26;
        }
        text.push_str(&w);
        text.push(' ');
        i += 1;
    }
    let t = Instant::now();
    let hits = rt
        .block_on(store.search(&scope(0), &SearchRequest::keyword(text.as_str()).limit(10)))
        .unwrap();
    println!(
        "ava-bench: long_query bytes={} words={i} hits={} seconds={:.3}",
        text.len(),
        hits.len(),
        t.elapsed().as_secs_f64()
    );
    rt.block_on(store.close());
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let mut c = Criterion::default().configure_from_args();
    // `AVA_BENCH_CASES` picks cases (comma separated): ingest, long_query, 10k, 100k,
    // 100k1, 1m.
    let cases = std::env::var("AVA_BENCH_CASES").unwrap_or_else(|_| "ingest,10k,100k".into());
    let on = |name: &str| {
        cases
            .split(',')
            .any(|c| c.trim().eq_ignore_ascii_case(name))
    };
    if on("ingest") {
        bench_ingest(&mut c, &rt);
    }
    if on("long_query") {
        bench_long_query(&rt);
    }
    if on("10k") {
        bench_search(&mut c, &rt, 10_000, SCOPES, "10k_in_100_scopes", None);
    }
    if on("100k") {
        bench_search(&mut c, &rt, 100_000, SCOPES, "100k_in_100_scopes", None);
    }
    if on("100k1") {
        // One chat of 100k memories: what a new process's first search there costs.
        bench_search(&mut c, &rt, 100_000, 1, "100k_in_1_scope", None);
    }
    if on("1m") {
        // Default config (the scope's 1.5 GB of vectors do not fit the cache whole: held
        // quantized, 396 MB), then reopened with a cache that holds the whole scope.
        bench_search(&mut c, &rt, 1_000_000, 1, "1M_in_1_scope", Some(2048));
    }
    c.final_summary();
}
