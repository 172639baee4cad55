//! `cargo xtask eval`: quality of Ava's memory search (retrieval recall@k) and of the prompts
//! it builds (evidence in the compiled prompt, `--context-budget`).

mod cache;
mod context;
mod duplicates;
mod locomo;

use clap::{Args as ClapArgs, Subcommand, ValueEnum};

/// `cargo xtask eval <dataset> ...`
#[derive(Debug, ClapArgs)]
pub(crate) struct Args {
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
pub(crate) fn local_embedder() -> anyhow::Result<memory_core::embedders::LocalEmbedder> {
    use memory_core::embedders::{LocalConfig, LocalEmbedder};
    Ok(LocalEmbedder::load(&LocalConfig::default())?)
}

pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    match &args.dataset {
        Dataset::Locomo(a) => locomo::run(a),
        Dataset::Duplicates(a) => duplicates::run(a),
    }
}
