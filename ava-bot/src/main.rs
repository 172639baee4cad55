//! `ava`: the command line of the Ava reference app.

mod demo;

use clap::{Parser, Subcommand};

/// Ava: long-term memory and context hydration for LLM agents.
#[derive(Debug, Parser)]
#[command(name = "ava", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Store a short conversation in a fresh store and show what Ava recalls for a few
    /// questions. Needs no token, no server and no model.
    Demo,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Demo => demo::run(&mut std::io::stdout().lock()).await,
    }
}
