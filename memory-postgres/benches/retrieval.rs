//! Retrieval benches for the Postgres store, the same cases and data as memory-sqlite's:
//! durable bulk ingest of precomputed 384-d vectors, and top-10 semantic / keyword / hybrid
//! search in one scope at 100k memories over 100 scopes (`AVA_BENCH_CASES`, comma
//! separated: `ingest`, `10k`, `100k`; default `ingest,100k`). Also measures recall@10 of
//! the HNSW index against exact search, over the whole table (the index path) and through
//! the store's own large-scope path.
//!
//! Needs `MEMORY_PG_URL` (a server with pgvector); without it, prints one skip line and
//! exits 0. Output for `cargo xtask bench`: `ava-bench: percentiles <id> p50=.. p95=.. n=..`
//! and `ava-bench: note <id> <text>` lines.

#![allow(clippy::unwrap_used, clippy::expect_used)]

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

async fn drop_schema(url: &str, schema: &str) {
    sql_client(url)
        .await
        .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
        .await
        .unwrap();
}

/// A store with `n` memories spread evenly over `scopes` scopes, loaded without the HNSW
/// index, which the returned (default-configured) store then builds in one go.
async fn build(url: &str, schema: &str, n: usize, scopes: usize) -> PostgresBackend {
    let default_max = PostgresConfig::default().exact_scan_max;
    let store = open(url, schema, default_max, false).await;
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
    store.close();
    let t = Instant::now();
    let store = open(url, schema, default_max, true).await;
    println!(
        "ava-bench: note postgres/build/{n} HNSW index built over {n} vectors at connect in {:.1}s",
        t.elapsed().as_secs_f64()
    );
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
    for (name, hnsw) in [
        ("10k_precomputed_384d_batches_of_1000", true),
        ("10k_precomputed_384d_batches_of_1000_no_hnsw", false),
    ] {
        let mut rates = Vec::new();
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let schema = fresh_schema("ingest");
                    let store = rt.block_on(open(url, &schema, 20_000, hnsw));
                    let batches: Vec<Vec<NewMemory>> =
                        data.chunks(1000).map(<[NewMemory]>::to_vec).collect();
                    let t = Instant::now();
                    for (i, batch) in batches.into_iter().enumerate() {
                        rt.block_on(store.store_batch(&scope(i % SCOPES), batch))
                            .unwrap();
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
                "ava-bench: note postgres/ingest/{name} median {median:.0} memories/s over {} runs (one transaction per batch, synchronous_commit on, HNSW index {})",
                rates.len(),
                if hnsw { "maintained" } else { "off" }
            );
        }
    }
    group.finish();
}

/// recall@10 of the HNSW index against an exact scan over the whole table, through SQL.
async fn index_recall(url: &str, schema: &str, queries: &[Query]) -> String {
    let client = sql_client(url).await;
    let m = format!("\"{schema}\".memories");
    let ext: String = client
        .query_one(
            "SELECT n.nspname::text FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'vector'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let sql = format!(
        "SELECT pk FROM {m} ORDER BY embedding OPERATOR(\"{ext}\".<=>) $1::\"{ext}\".vector LIMIT 10"
    );
    let top = |rows: Vec<tokio_postgres::Row>| -> HashSet<i64> {
        rows.iter().map(|r| r.get(0)).collect()
    };
    let vectors: Vec<pgvector::Vector> = queries
        .iter()
        .map(|q| pgvector::Vector::from(q.vector.vector().to_vec()))
        .collect();
    client
        .batch_execute("SET enable_indexscan = off; SET enable_bitmapscan = off")
        .await
        .unwrap();
    let mut exact = Vec::new();
    for q in &vectors {
        exact.push(top(client.query(&sql, &[q]).await.unwrap()));
    }
    client
        .batch_execute("RESET enable_indexscan; RESET enable_bitmapscan")
        .await
        .unwrap();
    let mut parts = Vec::new();
    for ef in [40, 100, 400] {
        client
            .batch_execute(&format!("SET hnsw.ef_search = {ef}"))
            .await
            .unwrap();
        let (mut hit, mut total) = (0usize, 0usize);
        let mut times = Vec::new();
        for (q, want) in vectors.iter().zip(&exact) {
            let t = Instant::now();
            let got = top(client.query(&sql, &[q]).await.unwrap());
            times.push(t.elapsed());
            hit += want.intersection(&got).count();
            total += want.len();
        }
        times.sort();
        parts.push(format!(
            "ef_search={ef}: recall@10={:.3} p50={:.3}ms",
            hit as f64 / total.max(1) as f64,
            times[times.len() / 2].as_secs_f64() * 1e3
        ));
    }
    let plan: Vec<String> = client
        .query(
            &format!("EXPLAIN {sql}"),
            &[&pgvector::Vector::from(queries[0].vector.vector().to_vec())],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get::<_, String>(0))
        .collect();
    let uses_index = plan.iter().any(|l| l.contains("memories_embedding_hnsw"));
    format!(
        "HNSW index vs exact scan, unscoped top-10 over all vectors, {} queries (index used: {uses_index}): {}",
        queries.len(),
        parts.join("; ")
    )
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
    rt.block_on(async {
        sql_client(url)
            .await
            .batch_execute(&format!("VACUUM ANALYZE \"{schema}\".memories"))
            .await
            .unwrap();
    });
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

    // Recall: the HNSW index over the whole table, and the store's large-scope path (HNSW
    // with iterative scan, filtered by scope) forced on these 1k-vector scopes.
    let note = rt.block_on(index_recall(url, &schema, &queries));
    println!("ava-bench: note {group_id}/semantic_unscoped_index {note}");
    let hnsw_store = rt.block_on(open(url, &schema, 0, true));
    let (mut hit, mut total) = (0usize, 0usize);
    for q in &queries {
        let req = q.semantic();
        let exact: HashSet<_> = rt
            .block_on(store.search(&q.scope, &req))
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
    println!(
        "ava-bench: note {group_id}/semantic_hnsw_path recall@10={:.3} (store's HNSW path, iterative scan filtered by scope, forced with exact_scan_max=0, vs the default exact per-scope scan; {} queries)",
        hit as f64 / total.max(1) as f64,
        queries.len()
    );
    hnsw_store.close();
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
    let cases = std::env::var("AVA_BENCH_CASES").unwrap_or_else(|_| "ingest,100k".into());
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
    c.final_summary();
}
