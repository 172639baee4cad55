//! `ava-eval` (run as `cargo xtask eval`): quality of Ava's memory search (retrieval
//! recall@k) and of the prompts it builds (evidence in the compiled prompt,
//! `--context-budget`).
//!
//! A crate of its own, apart from `xtask`, so that `cargo xtask snapshots` or `bench` does
//! not build the local model's stack (candle, tokenizers) nor the stores.

mod cache;
mod context;
mod duplicates;
mod locomo;

use clap::{Parser, Subcommand, ValueEnum};

/// Evaluate retrieval quality on a dataset (recall@k); `cargo xtask eval` runs this.
#[derive(Debug, Parser)]
#[command(name = "ava-eval", bin_name = "cargo xtask eval", version, about)]
struct Args {
    #[command(subcommand)]
    dataset: Dataset,
}

#[derive(Debug, Subcommand)]
enum Dataset {
    /// Retrieval-only evaluation on LoCoMo-format data (recall@k of the evidence turns).
    Locomo(locomo::Args),
    /// How many facts near-duplicate merging (`ava consolidate --similar`) would fold on
    /// LoCoMo-format data, with sample pairs to judge.
    Duplicates(duplicates::Args),
}

/// Which backend stores the memories under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Backend {
    /// `memory-inmem`.
    Inmem,
    /// `memory-sqlite` in a temporary file.
    Sqlite,
}

/// How memories are searched.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Mode {
    /// BM25 only.
    Keyword,
    /// Embedding similarity only.
    Semantic,
    /// Both, fused.
    Hybrid,
}

/// Which embedder computes vectors.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Embedder {
    /// all-MiniLM-L6-v2 from the local model directory (`cargo xtask fetch-model`).
    Local,
    /// The deterministic word-hashing embedder (not a language model).
    Hash,
}

/// The local all-MiniLM-L6-v2 embedder, or an error naming `cargo xtask fetch-model`.
pub(crate) fn local_embedder() -> anyhow::Result<memory_embedders::LocalEmbedder> {
    use memory_embedders::{LocalConfig, LocalEmbedder};
    Ok(LocalEmbedder::load(&LocalConfig::default())?)
}

fn main() -> anyhow::Result<()> {
    settle_thread_count();
    match &Args::parse().dataset {
        Dataset::Locomo(a) if !a.context_budget.is_empty() => context::run(a),
        Dataset::Locomo(a) => locomo::run(a),
        Dataset::Duplicates(a) => duplicates::run(a),
    }
}

/// The local embedder's thread count, settled as `ava` settles it, so that what is
/// measured is what ships.
#[expect(
    unsafe_code,
    reason = "the environment is set before any thread starts"
)]
fn settle_thread_count() {
    // SAFETY: `main` calls this first, before any other thread starts.
    unsafe { memory_embedders::settle_thread_count() }
}
