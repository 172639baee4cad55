//! hydrate + compile over a 100k-memory SQLite store: 100 chat scopes of 980 memories (5 %
//! facts) plus 20 user-wide facts per user, precomputed 384-d `HashingEmbedder` vectors; the
//! memory provider's three sources (temporal, knowledge, semantic/hybrid), an 8k o200k
//! budget, the default strategy (no semantic threshold). The observation's vector
//! is precomputed, so no embedding call is timed.
//!
//! Criterion measures the whole call; a second pass times single calls and prints
//! `ava-bench: percentiles <name> p50=<ms> p95=<ms> n=<calls>` lines for `cargo xtask bench`.
//! Four cases:
//! `tracked` (the default: searches record access, one write per search), `untracked`
//! (`HydrateInput::without_access_tracking`), `untracked/count_cache` (untracked, with the product's
//! tokenizer, which remembers the token counts of texts it has seen:
//! `hydrate::product::tokenizer`), and `product`: exactly what `ava` runs
//! (`hydrate::product::config`: tracked, with the product's tokenizer and system prompt).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test fails loudly on an unexpected error"
)]

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::Criterion;
use hydrate::{HydrateInput, HydrationConfig, compile, hydrate, memory_provider};
use memory_core::testing::Rng;
use memory_core::testing::bench::{percentiles, scope, words};
use memory_core::{
    Embedding, HashingEmbedder, MemoryBackend, MemoryKind, NewMemory, Role, Scope, Timestamp,
};
use memory_sqlite::{SqliteBackend, SqliteConfig};
use prompt_ir::{ContextRequest, TiktokenTokenizer, TokenBudget};
use tokio::runtime::Runtime;

const DIMS: usize = 384;
const SCOPES: usize = 100;
const PER_CHAT: usize = 980;
const PER_USER: usize = 20;
const VOCAB: usize = 3000;

fn now() -> Timestamp {
    Timestamp::parse_rfc3339("2026-03-10T09:30:00Z").unwrap()
}

fn memory(rng: &mut Rng, e: &HashingEmbedder, kind: MemoryKind, age_ms: u64) -> NewMemory {
    let text = words(rng, 12, VOCAB);
    let m = NewMemory::new(text.clone())
        .with_kind(kind)
        .with_embedding(e.embed_sync(&text))
        .at(now().minus(Duration::from_millis(age_ms)));
    if kind == MemoryKind::Message {
        m.with_role(if rng.below(2) == 0 {
            Role::User
        } else {
            Role::Assistant
        })
    } else {
        m
    }
}

async fn build(path: &std::path::Path, e: &Arc<HashingEmbedder>) -> Arc<SqliteBackend> {
    let embedder: Arc<dyn memory_core::EmbeddingProvider> = e.clone();
    let store = SqliteBackend::open(path, Some(embedder), SqliteConfig::default())
        .await
        .unwrap();
    let mut rng = Rng::new(7);
    const NINETY_DAYS_MS: u64 = 90 * 24 * 3600 * 1000;
    for s in 0..SCOPES {
        let batch: Vec<NewMemory> = (0..PER_CHAT)
            .map(|i| {
                let kind = if i % 20 == 0 {
                    MemoryKind::Fact
                } else {
                    MemoryKind::Message
                };
                // Older first, a minute or more apart.
                let age = NINETY_DAYS_MS / PER_CHAT as u64 * (PER_CHAT - i) as u64;
                memory(&mut rng, e, kind, age)
            })
            .collect();
        store.store_batch(&scope(s), batch).await.unwrap();
        let user = Scope::for_user(format!("user-{s}")).unwrap();
        let facts: Vec<NewMemory> = (0..PER_USER)
            .map(|_| {
                let age = rng.next_u64() % NINETY_DAYS_MS;
                memory(&mut rng, e, MemoryKind::Fact, age)
            })
            .collect();
        store.store_batch(&user, facts).await.unwrap();
    }
    assert_eq!(
        {
            let mut total = 0;
            for s in 0..SCOPES {
                total += store.count(&scope(s)).await.unwrap();
                total += store
                    .count(&Scope::for_user(format!("user-{s}")).unwrap())
                    .await
                    .unwrap();
            }
            total
        },
        (SCOPES * (PER_CHAT + PER_USER)) as u64
    );
    Arc::new(store)
}

fn main() {
    let rt: Runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let embedder = Arc::new(HashingEmbedder::new(DIMS).unwrap());
    let dir = tempfile::tempdir().unwrap();
    let t = Instant::now();
    let store = rt.block_on(build(&dir.path().join("bench.db"), &embedder));
    let backend: Arc<dyn MemoryBackend> = store.clone();
    println!(
        "built: {} memories in {} chat + {} user scopes in {:.1}s",
        SCOPES * (PER_CHAT + PER_USER),
        SCOPES,
        SCOPES,
        t.elapsed().as_secs_f64()
    );

    let tokenizer = Arc::new(TiktokenTokenizer::for_model("gpt-4o").unwrap());
    let plain = HydrationConfig::new(
        "You are Ava, a helpful assistant with long-term memory.",
        tokenizer,
    )
    .with_provider(memory_provider(Arc::clone(&backend), None));

    // The product's tokenizer: the same counts, remembered across calls.
    let counted = HydrationConfig::new(
        "You are Ava, a helpful assistant with long-term memory.",
        hydrate::product::tokenizer().unwrap(),
    )
    .with_provider(memory_provider(Arc::clone(&backend), None));

    // What `ava` runs: the product's own config (its system prompt, tokenizer with the
    // count cache, and the memory provider with its defaults: searches record access).
    let product = hydrate::product::config(Arc::clone(&backend), None).unwrap();

    let mut rng = Rng::new(99);
    let inputs: Vec<HydrateInput> = (0..256)
        .map(|_| {
            let observation = words(&mut rng, 6, VOCAB);
            let vector: Embedding = embedder.embed_sync(&observation);
            // The default strategy: every hit competes under the budget, and search limits
            // grow with it (8,000 / 25 = 320 semantic candidates).
            let request = ContextRequest::new(observation, TokenBudget::new(8000).unwrap());
            HydrateInput::new(scope(rng.below(SCOPES)), request)
                .at(now())
                .with_query_vector(vector)
        })
        .collect();
    // The same requests, counting nothing as recalled.
    let untracked: Vec<HydrateInput> = inputs
        .iter()
        .map(|i| i.clone().without_access_tracking())
        .collect();

    // One call to show what is being measured.
    let sample = rt
        .block_on(async {
            let h = hydrate(&plain, &inputs[0]).await.unwrap();
            compile(&plain, &h)
        })
        .unwrap();
    println!(
        "sample: {} sections ({} kept of {} retrieved), {} tokens, degradations {:?}, sources {:?}",
        sample.report.sections.len(),
        sample.report.sources.iter().map(|s| s.kept).sum::<usize>(),
        sample
            .report
            .sources
            .iter()
            .map(|s| s.returned)
            .sum::<usize>(),
        sample.report.estimated_prompt_tokens,
        sample.report.degradations,
        sample
            .report
            .sources
            .iter()
            .map(|s| (s.kind.as_str(), s.search.clone(), s.kept))
            .collect::<Vec<_>>()
    );

    let mut c = Criterion::default().configure_from_args();
    let mut group = c.benchmark_group("hydrate_compile/100k_sqlite_8k");
    group
        .sample_size(50)
        .measurement_time(Duration::from_secs(5));
    for (name, config, inputs) in [
        ("tracked", &plain, &inputs),
        ("untracked", &plain, &untracked),
        ("untracked/count_cache", &counted, &untracked),
        ("product", &product, &inputs),
    ] {
        let call = |i: usize| {
            let input = &inputs[i % inputs.len()];
            rt.block_on(async {
                let h = hydrate(config, input).await.unwrap();
                black_box(compile(config, &h).unwrap())
            })
        };
        let mut i = 0;
        group.bench_function(name, |b| {
            b.iter(|| {
                i += 1;
                call(i)
            })
        });
        percentiles(
            &format!("hydrate_compile/100k_sqlite_8k/{name}"),
            1000,
            |i| {
                call(i);
            },
        );
    }
    group.finish();
    // Where the time goes (untracked): the sources alone, then compile alone.
    percentiles(
        "hydrate_compile/100k_sqlite_8k/untracked/hydrate_only",
        1000,
        |i| {
            let input = &untracked[i % untracked.len()];
            black_box(rt.block_on(hydrate(&plain, input)).unwrap());
        },
    );
    let hydrated: Vec<_> = untracked
        .iter()
        .map(|input| rt.block_on(hydrate(&plain, input)).unwrap())
        .collect();
    percentiles(
        "hydrate_compile/100k_sqlite_8k/untracked/compile_only",
        1000,
        |i| {
            black_box(compile(&plain, &hydrated[i % hydrated.len()]).unwrap());
        },
    );
    c.final_summary();
    rt.block_on(store.close());
}
