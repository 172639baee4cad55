//! Retrieval benches for the Postgres store, the same cases and data as memory-sqlite's:
//! durable bulk ingest of precomputed 384-d vectors (into ordinary scopes, and into a scope
//! large enough to have its HNSW index), and top-10 semantic / keyword / hybrid search in one
//! scope at 100k memories over 100 scopes, and in one scope of 50k that has its own HNSW
//! index (`AVA_BENCH_CASES`, comma separated: `ingest`, `10k`, `100k`, `large`; default
//! `ingest,100k,large`). Also measures recall@10 of the store's large-scope path (a scope's
//! own HNSW index) against its exact scan.
//!
//! Needs `MEMORY_PG_URL` (a server with pgvector); without it, prints one skip line and
//! exits 0. Output for `cargo xtask bench`: `ava-bench: percentiles <id> p50=.. p95=.. n=..`
//! and `ava-bench: note <id> <text>` lines.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test fails loudly on an unexpected error"
)]

use std::collections::HashSet;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use criterion::{Criterion, Throughput};
use memory_core::testing::Rng;
use memory_core::testing::bench::{Query, memories, percentiles, queries, scope};
use memory_core::{HashingEmbedder, MemoryBackend, NewMemory, SearchRequest};
use memory_postgres::{PostgresBackend, PostgresConfig};
use tokio::runtime::Runtime;

const DIMS: usize = 384;
const SCOPES: usize = 100;

/// The bench store's space: vectors are random, so the embedder only supplies the identity.
/// The data (`memory_core::testing::bench`) and seeds are the same as memory-sqlite's bench.
fn embedder() -> Arc<HashingEmbedder> {
    Arc::new(HashingEmbedder::new(DIMS).unwrap())
}

fn fresh_schema(label: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("ava_bench_{label}_{}_{nanos}", std::process::id())
}

async fn open(url: &str, schema: &str, exact_scan_max: usize, hnsw_index: bool) -> PostgresBackend {
    let e: Arc<dyn memory_core::EmbeddingProvider> = embedder();
    let config = PostgresConfig {
        schema: schema.to_owned(),
        exact_scan_max,
        hnsw_index,
        ..PostgresConfig::default()
    };
    PostgresBackend::connect(url, Some(e), config)
        .await
        .unwrap()
}

async fn sql_client(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
}

/// Fresh planner statistics for the schema's memories, as a long-running store would have.
async fn analyze(url: &str, schema: &str) {
    sql_client(url)
        .await
        .batch_execute(&format!("VACUUM ANALYZE \"{schema}\".memories"))
        .await
        .unwrap();
}

async fn drop_schema(url: &str, schema: &str) {
    sql_client(url)
        .await
        .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
        .await
        .unwrap();
}

/// A store with `n` memories spread evenly over `scopes` scopes, default-configured (scopes
/// this small are searched exactly and have no HNSW index).
async fn build(url: &str, schema: &str, n: usize, scopes: usize) -> PostgresBackend {
    let store = open(url, schema, PostgresConfig::default().exact_scan_max, true).await;
    let space = memory_core::EmbeddingProvider::space(&*embedder());
    let mut rng = Rng::new(7);
    let per_scope = n / scopes;
    for s in 0..scopes {
        let mut left = per_scope;
        while left > 0 {
            let batch = left.min(1000);
            store
                .store_batch(&scope(s), memories(&mut rng, &space, batch))
                .await
                .unwrap();
            left -= batch;
        }
    }
    store
}

fn bench_ingest(c: &mut Criterion, rt: &Runtime, url: &str) {
    let space = memory_core::EmbeddingProvider::space(&*embedder());
    let mut group = c.benchmark_group("postgres/ingest");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(15));
    const N: usize = 10_000;
    group.throughput(Throughput::Elements(N as u64));
    let mut rng = Rng::new(1);
    let data: Vec<NewMemory> = memories(&mut rng, &space, N);
    // Ordinary scopes (the default config: none reaches exact_scan_max, so no HNSW upkeep),
    // and one scope that already has its HNSW index (exact_scan_max 0), whose every write
    // also inserts into the graph.
    for (name, indexed) in [
        ("10k_precomputed_384d_batches_of_1000", false),
        (
            "10k_precomputed_384d_batches_of_1000_into_an_indexed_scope",
            true,
        ),
    ] {
        let mut rates = Vec::new();
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let schema = fresh_schema("ingest");
                    let max = if indexed { 0 } else { 20_000 };
                    let store = rt.block_on(open(url, &schema, max, true));
                    if indexed {
                        rt.block_on(async {
                            store
                                .store(&scope(0), NewMemory::new("first"))
                                .await
                                .unwrap();
                            // Waits for the build the write started.
                            store.index_large_scopes().await.unwrap();
                        });
                    }
                    let batches: Vec<Vec<NewMemory>> =
                        data.chunks(1000).map(<[NewMemory]>::to_vec).collect();
                    let t = Instant::now();
                    for (i, batch) in batches.into_iter().enumerate() {
                        let s = if indexed { 0 } else { i % SCOPES };
                        rt.block_on(store.store_batch(&scope(s), batch)).unwrap();
                    }
                    let took = t.elapsed();
                    rates.push(N as f64 / took.as_secs_f64());
                    total += took;
                    store.close();
                    rt.block_on(drop_schema(url, &schema));
                }
                total
            });
        });
        rates.sort_by(f64::total_cmp);
        if let Some(median) = rates.get(rates.len() / 2) {
            println!(
                "ava-bench: note postgres/ingest/{name} median {median:.0} memories/s over {} runs (one transaction per batch, synchronous_commit on, {})",
                rates.len(),
                if indexed {
                    "one scope with its HNSW index maintained"
                } else {
                    "100 scopes of at most exact_scan_max memories: no HNSW upkeep"
                }
            );
        }
    }
    group.finish();
}

/// Index scans served so far by the schema's per-scope HNSW indexes.
async fn hnsw_scans(url: &str, schema: &str) -> i64 {
    let client = sql_client(url).await;
    client
        .batch_execute("SELECT pg_stat_clear_snapshot()")
        .await
        .unwrap();
    client
        .query_one(
            "SELECT coalesce(sum(idx_scan), 0)::int8 FROM pg_stat_user_indexes \
             WHERE schemaname = $1 AND indexrelname LIKE 'memories_hnsw_%'",
            &[&schema],
        )
        .await
        .unwrap()
        .get(0)
}

fn bench_search(c: &mut Criterion, rt: &Runtime, url: &str, n: usize, scopes: usize, label: &str) {
    let queries_timed = 1000;
    let schema = fresh_schema(label.split('_').next().unwrap_or("search"));
    let t = Instant::now();
    let store = rt.block_on(build(url, &schema, n, scopes));
    println!(
        "built {label}: {n} memories in {scopes} scopes in {:.1}s",
        t.elapsed().as_secs_f64()
    );
    rt.block_on(analyze(url, &schema));
    let space = memory_core::EmbeddingProvider::space(&*embedder());
    let queries = queries(&mut Rng::new(99), &space, 256, scopes);
    let query = |i: usize| &queries[i % queries.len()];
    let group_id = format!("postgres/search_top10/{label}");
    let mut group = c.benchmark_group(&group_id);
    group
        .sample_size(30)
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
        percentiles(&format!("{group_id}/{name}"), queries_timed, |i| {
            let q = query(i);
            black_box(rt.block_on(store.search(&q.scope, &make(q))).unwrap());
        });
    }
    // The same semantic query with access tracking on (a write per search), as a bot does.
    percentiles(
        &format!("{group_id}/semantic_tracked"),
        queries_timed,
        |i| {
            let q = query(i);
            let mut req = q.semantic();
            req.record_access = true;
            black_box(rt.block_on(store.search(&q.scope, &req)).unwrap());
        },
    );
    group.finish();

    // Recall of the store's large-scope path (each scope's own HNSW index, iterative scan)
    // forced on these 1k-vector scopes.
    let hnsw_store = rt.block_on(open(url, &schema, 0, true));
    // Exact: a store with indexes off never searches through one.
    let exact_store = rt.block_on(open(url, &schema, 0, false));
    let t = Instant::now();
    let built = rt.block_on(hnsw_store.index_large_scopes()).unwrap();
    println!(
        "ava-bench: note {group_id}/hnsw_build {built} per-scope HNSW indexes of {} vectors built in {:.1}s",
        n / scopes,
        t.elapsed().as_secs_f64()
    );
    let (mut hit, mut total) = (0usize, 0usize);
    for q in &queries {
        let req = q.semantic();
        let exact: HashSet<_> = rt
            .block_on(exact_store.search(&q.scope, &req))
            .unwrap()
            .into_iter()
            .map(|h| h.entry.id)
            .collect();
        let approx: HashSet<_> = rt
            .block_on(hnsw_store.search(&q.scope, &req))
            .unwrap()
            .into_iter()
            .map(|h| h.entry.id)
            .collect();
        hit += exact.intersection(&approx).count();
        total += exact.len();
    }
    // Statistics reach the views when a backend goes idle, within a second or so.
    std::thread::sleep(Duration::from_secs(2));
    let scans_before = rt.block_on(hnsw_scans(url, &schema));
    percentiles(
        &format!("{group_id}/semantic_hnsw_path"),
        queries_timed,
        |i| {
            let q = query(i);
            black_box(
                rt.block_on(hnsw_store.search(&q.scope, &q.semantic()))
                    .unwrap(),
            );
        },
    );
    std::thread::sleep(Duration::from_secs(2));
    let scans = rt.block_on(hnsw_scans(url, &schema)) - scans_before;
    println!(
        "ava-bench: note {group_id}/semantic_hnsw_path recall@10={:.3} (store's large-scope path, the scope's own HNSW index with iterative scan, forced with exact_scan_max=0, vs the exact per-scope scan; {} queries); the planner scanned a per-scope index in {scans} of the {queries_timed} timed searches",
        hit as f64 / total.max(1) as f64,
        queries.len()
    );
    hnsw_store.close();
    exact_store.close();
    store.close();
    rt.block_on(drop_schema(url, &schema));
}

/// One scope past `exact_scan_max`: the write that crosses it starts the scope's index
/// build, searches then go through that index. Measures the build, the search, its
/// recall@10 against an exact scan, and how many searches the planner served from it.
fn bench_large_scope(c: &mut Criterion, rt: &Runtime, url: &str, n: usize) {
    let label = format!("{}k_in_one_scope", n / 1000);
    let group_id = format!("postgres/search_top10/{label}");
    let schema = fresh_schema("large");
    let space = memory_core::EmbeddingProvider::space(&*embedder());
    let store = rt.block_on(open(
        url,
        &schema,
        PostgresConfig::default().exact_scan_max,
        true,
    ));
    let mut rng = Rng::new(11);
    let t = Instant::now();
    for _ in 0..n / 1000 {
        rt.block_on(store.store_batch(&scope(0), memories(&mut rng, &space, 1000)))
            .unwrap();
    }
    let loaded = t.elapsed();
    // The build started in the background at the crossing write; this waits for it.
    let t = Instant::now();
    rt.block_on(store.index_large_scopes()).unwrap();
    println!(
        "ava-bench: note {group_id}/hnsw_build {n} memories stored in {:.1}s; the scope's HNSW index was ready {:.1}s later",
        loaded.as_secs_f64(),
        t.elapsed().as_secs_f64()
    );
    rt.block_on(analyze(url, &schema));
    let exact_store = rt.block_on(open(url, &schema, 0, false));
    let queries = queries(&mut Rng::new(98), &space, 256, 1);
    let (mut hit, mut total) = (0usize, 0usize);
    for q in &queries {
        let req = q.semantic();
        let ids = |store: &PostgresBackend| -> HashSet<_> {
            rt.block_on(store.search(&q.scope, &req))
                .unwrap()
                .into_iter()
                .map(|h| h.entry.id)
                .collect()
        };
        let exact = ids(&exact_store);
        hit += exact.intersection(&ids(&store)).count();
        total += exact.len();
    }
    let mut group = c.benchmark_group(&group_id);
    group
        .sample_size(30)
        .measurement_time(Duration::from_secs(5));
    let mut i = 0;
    group.bench_function("semantic", |b| {
        b.iter(|| {
            i += 1;
            let q = &queries[i % queries.len()];
            black_box(rt.block_on(store.search(&q.scope, &q.semantic())).unwrap())
        })
    });
    group.finish();
    std::thread::sleep(Duration::from_secs(2));
    let scans_before = rt.block_on(hnsw_scans(url, &schema));
    let timed = 1000;
    percentiles(&format!("{group_id}/semantic"), timed, |i| {
        let q = &queries[i % queries.len()];
        black_box(rt.block_on(store.search(&q.scope, &q.semantic())).unwrap());
    });
    std::thread::sleep(Duration::from_secs(2));
    let scans = rt.block_on(hnsw_scans(url, &schema)) - scans_before;
    percentiles(&format!("{group_id}/semantic_exact"), 100, |i| {
        let q = &queries[i % queries.len()];
        black_box(
            rt.block_on(exact_store.search(&q.scope, &q.semantic()))
                .unwrap(),
        );
    });
    println!(
        "ava-bench: note {group_id}/semantic recall@10={:.3} against the exact scan ({} queries, hnsw_ef_search {}); the planner scanned the scope's HNSW index in {scans} of the {timed} timed searches",
        hit as f64 / total.max(1) as f64,
        queries.len(),
        PostgresConfig::default().hnsw_ef_search
    );
    // What a larger `hnsw_ef_search` buys on this data, and costs.
    let exact: Vec<HashSet<_>> = queries
        .iter()
        .map(|q| {
            rt.block_on(exact_store.search(&q.scope, &q.semantic()))
                .unwrap()
                .into_iter()
                .map(|h| h.entry.id)
                .collect()
        })
        .collect();
    let mut parts = Vec::new();
    for ef in [400, 1000] {
        let e: Arc<dyn memory_core::EmbeddingProvider> = embedder();
        let config = PostgresConfig {
            schema: schema.clone(),
            hnsw_ef_search: ef,
            ..PostgresConfig::default()
        };
        let wide = rt
            .block_on(PostgresBackend::connect(url, Some(e), config))
            .unwrap();
        let (mut hit, mut total) = (0usize, 0usize);
        let mut times = Vec::new();
        for (q, want) in queries.iter().zip(&exact) {
            let t = Instant::now();
            let got: HashSet<_> = rt
                .block_on(wide.search(&q.scope, &q.semantic()))
                .unwrap()
                .into_iter()
                .map(|h| h.entry.id)
                .collect();
            times.push(t.elapsed());
            hit += want.intersection(&got).count();
            total += want.len();
        }
        times.sort();
        parts.push(format!(
            "hnsw_ef_search {ef}: recall@10={:.3} p50={:.2}ms",
            hit as f64 / total.max(1) as f64,
            times[times.len() / 2].as_secs_f64() * 1e3
        ));
        wide.close();
    }
    println!(
        "ava-bench: note {group_id}/semantic_wider_search {} ({} queries)",
        parts.join("; "),
        queries.len()
    );
    exact_store.close();
    store.close();
    rt.block_on(drop_schema(url, &schema));
}

fn main() {
    let url = match std::env::var("MEMORY_PG_URL") {
        Ok(u) if !u.trim().is_empty() => u,
        _ => {
            println!(
                "ava-bench: note postgres SKIPPED: MEMORY_PG_URL is not set; set it to a Postgres URL whose server has pgvector (e.g. .ci/postgres.sh start) to run these benches"
            );
            return;
        }
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let mut c = Criterion::default().configure_from_args();
    let cases = std::env::var("AVA_BENCH_CASES").unwrap_or_else(|_| "ingest,100k,large".into());
    let on = |name: &str| {
        cases
            .split(',')
            .any(|c| c.trim().eq_ignore_ascii_case(name))
    };
    if on("ingest") {
        bench_ingest(&mut c, &rt, &url);
    }
    if on("10k") {
        bench_search(&mut c, &rt, &url, 10_000, SCOPES, "10k_in_100_scopes");
    }
    if on("100k") {
        bench_search(&mut c, &rt, &url, 100_000, SCOPES, "100k_in_100_scopes");
    }
    if on("large") {
        bench_large_scope(&mut c, &rt, &url, 50_000);
    }
    c.final_summary();
}
