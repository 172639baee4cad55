//! Local embedding throughput (sentences/s) of all-MiniLM-L6-v2 at batch 1 and batch 32.
//!
//! Meant to run on one thread: `RAYON_NUM_THREADS=1 cargo bench -p memory-core --features
//! local --bench embed_local`. Skips with a notice when the model directory is absent
//! (`cargo xtask fetch-model` fetches it).

use criterion::{BenchmarkId, Criterion, Throughput};
use memory_embedders::{LocalConfig, LocalEmbedder, resolve_model_dir};

/// Everyday memory-sized sentences of varied length (5 to 30 words).
const SENTENCES: [&str; 8] = [
    "Alice's cat is called Miso.",
    "The weather is lovely today.",
    "Remind me to call the dentist on Thursday morning before work.",
    "Bob prefers window seats on long flights and always orders the vegetarian meal.",
    "The quarterly report is due next Friday; finance still needs the updated headcount numbers.",
    "He drove to the stadium.",
    "Our wifi password changed last week, the new one is on the fridge next to the calendar, \
     and the guest network is still the old one.",
    "She is allergic to peanuts.",
];

fn main() {
    let dir = match resolve_model_dir(None) {
        Ok(dir) if dir.is_complete() => dir,
        Ok(dir) => {
            println!("SKIPPED embed_local bench: {}", dir.notice());
            return;
        }
        Err(e) => {
            println!("SKIPPED embed_local bench: {e}");
            return;
        }
    };
    if std::env::var("RAYON_NUM_THREADS").as_deref() != Ok("1") {
        println!("note: RAYON_NUM_THREADS is not 1; the numbers are not single-threaded");
    }
    let embedder = match LocalEmbedder::load(&LocalConfig::in_dir(&dir.path)) {
        Ok(e) => e,
        Err(e) => {
            println!("embed_local bench: cannot load the model: {e}");
            std::process::exit(1);
        }
    };

    let mut c = Criterion::default().configure_from_args();
    let mut group = c.benchmark_group("local_embed");
    for batch in [1usize, 32] {
        let texts: Vec<&str> = SENTENCES.iter().copied().cycle().take(batch).collect();
        group.throughput(Throughput::Elements(batch as u64));
        group.bench_with_input(BenchmarkId::new("batch", batch), &texts, |b, texts| {
            b.iter(|| embedder.embed_blocking(texts).map(|v| v.len()))
        });
    }
    group.finish();
    c.final_summary();
}
