//! `ava`: the command line of the Ava reference app.

mod commands;
mod config;

use clap::{Parser, Subcommand};

use crate::config::Settings;

/// Ava: long-term memory and context hydration for LLM agents.
///
/// Settings come from flags, then environment variables, then a `.env` file in the current
/// directory.
#[derive(Debug, Parser)]
#[command(name = "ava", version, about)]
struct Cli {
    #[command(flatten)]
    settings: Settings,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Store a short conversation in a fresh store and show what Ava recalls for a few
    /// questions. Needs no token, no server and no model.
    Demo(commands::demo::Args),
    /// Remember a fact for a user in a chat; prints the new memory's id.
    Remember(commands::remember::Args),
    /// Search a user's memories in a chat; prints scored hits.
    Recall(commands::recall::Args),
    /// Forget one memory of a user by id.
    Forget(commands::forget::Args),
    /// Import a Telegram Desktop chat export (result.json) as a user's memories.
    Import(commands::import::Args),
    /// Show what the store holds.
    Stats(commands::stats::Args),
    /// Re-embed every memory with the configured embedder (after changing models).
    Reembed,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // A missing .env is fine; a broken one is worth saying.
    if let Err(e) = dotenvy::dotenv()
        && !e.not_found()
    {
        eprintln!("warning: ignoring .env: {e}");
    }
    let cli = Cli::parse();
    let out = &mut std::io::stdout().lock();
    match cli.command {
        Command::Demo(args) => commands::demo::run(&args, out).await,
        Command::Remember(args) => commands::remember::run(&cli.settings, &args, out).await,
        Command::Recall(args) => commands::recall::run(&cli.settings, &args, out).await,
        Command::Forget(args) => commands::forget::run(&cli.settings, &args, out).await,
        Command::Import(args) => commands::import::run(&cli.settings, &args, out).await,
        Command::Stats(args) => commands::stats::run(&cli.settings, &args, out).await,
        Command::Reembed => commands::stats::reembed(&cli.settings, out).await,
    }
}
