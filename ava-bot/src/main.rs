//! `ava`: the command line of the Ava reference app.

mod agent;
#[cfg(test)]
mod cli_docs;
mod commands;
mod config;
mod erase;
mod llm;
mod mcp;
mod prompts;
mod serve;
mod shared;
mod telegram;
mod upkeep;

use clap::{Parser, Subcommand};

use crate::config::Settings;
use crate::shared::{Hint, error_chain};

/// Ava: long-term memory and context hydration for LLM agents.
///
/// Settings come from flags, then environment variables, then a `.env` file in the current
/// directory.
#[derive(Debug, Parser)]
#[command(name = "ava", version, about)]
struct Cli {
    #[command(flatten)]
    settings: Settings,
    /// How the log on stderr is written: `human` lines, or `json`, one object per line with
    /// who each line is about as a keyed hash (key: `AVA_LOG_KEY`, else random per process).
    #[arg(
        long,
        global = true,
        env = "AVA_LOG_FORMAT",
        value_enum,
        default_value_t
    )]
    log_format: shared::logs::LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Store a short conversation in a fresh store and show what Ava recalls for a few
    /// questions. Needs no token, no server and no model.
    Demo(commands::demo::Args),
    /// Remember a fact of a user (theirs in every private context, or one chat's with
    /// `--chat`); prints the new memory's id.
    Remember(commands::remember::Args),
    /// Search a user's memories in a chat; prints scored hits.
    Recall(commands::recall::Args),
    /// Forget one memory of a user by id.
    Forget(commands::forget::Args),
    /// Show the versions of one of a user's memories: what it replaced, what replaced it.
    History(commands::history::Args),
    /// Erase everything Ava keeps of one person (every chat, facts, documents, their part of
    /// groups) and say what; without --yes, only say what would go.
    Erase(commands::erase::Args),
    /// List the facts Ava holds about a user now, numbered as the bot's /facts numbers them.
    Facts(commands::facts::Args),
    /// Import a Telegram Desktop chat export (result.json) as a user's memories, or restore
    /// a file `ava export` wrote.
    Import(commands::import::Args),
    /// Write every memory of a user (all chats, facts, documents) as JSON Lines, losslessly,
    /// for `ava import` here or elsewhere.
    Export(commands::export::Args),
    /// Copy a whole store (or one tenant's or user's part) into another, SQLite or Postgres:
    /// same ids, times and links; resumable; every scope's count checked at the end.
    Migrate(commands::migrate::Args),
    /// Print the prompt the LLM would get for a message, without calling it.
    Context(commands::context::Args),
    /// Talk to Ava in the terminal (the bot's pipeline; one message a line on stdin).
    Chat(commands::chat::Args),
    /// Run the Telegram bot (long polling) until Ctrl-C.
    Run(commands::run::Args),
    /// Serve Ava's memory to MCP clients: over stdio for one --user and --chat, or over
    /// streamable HTTP (--http ADDR) for the identities of a bearer-token file.
    Mcp(commands::mcp::Args),
    /// Serve apps on one address: MCP at /mcp and an OpenAI-compatible proxy at /v1 that
    /// gives every chat completion what Ava recalls and remembers every exchange.
    Serve(commands::serve::Args),
    /// Index a user's text and Markdown files (`add`), list them (`list`) or remove them
    /// (`remove`): the bot, `chat` and `context` draw on their passages, with file and lines.
    Docs(commands::docs::Args),
    /// Tag a user's stored memories with the names they mention (`index`), for the graph
    /// context `chat`, `context` and the bot draw one hop from a message's names.
    Graph(commands::graph::Args),
    /// Show what the store holds.
    Stats(commands::stats::Args),
    /// Remove a user's old chat turns and what is beyond each chat's cap (pinned memories
    /// and valid facts stay); --dry-run lists what would go, and why.
    Prune(commands::prune::Args),
    /// Fold a user's facts that say the same thing into one (the others stay in its
    /// history); optionally prune too; --dry-run lists what would change.
    Consolidate(commands::consolidate::Args),
    /// Re-embed every memory with the configured embedder (after changing models), or with
    /// --missing only those without a vector yet.
    Reembed(commands::stats::ReembedArgs),
    /// Check the configuration and ask each service it names once (store, embedder, chat
    /// model, reranker, web search, Telegram): one line each; fails if any check fails.
    Check(commands::check::Args),
}

fn main() -> std::process::ExitCode {
    // Both set environment variables, so both come before any thread starts; `.env` first,
    // so that a `RAYON_NUM_THREADS` written there is the user's choice and is kept.
    // A missing .env is fine; a broken one is worth saying.
    if let Err(e) = dotenvy::dotenv()
        && !e.not_found()
    {
        eprintln!("warning: ignoring .env: {e}");
    }
    settle_thread_count();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(&e),
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: could not start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            shared::logs::announce("ERROR", &format!("error: {}", error_chain(&e)));
            if let Some(hint) = e.downcast_ref::<Hint>() {
                shared::logs::announce("ERROR", &format!("hint: {hint}"));
            }
            std::process::ExitCode::FAILURE
        }
    }
}

/// Settles the local embedder's thread count once (`memory_embedders::settle_thread_count`).
#[cfg(feature = "local")]
#[expect(
    unsafe_code,
    reason = "the environment is set before any thread starts"
)]
fn settle_thread_count() {
    // SAFETY: `main` calls this first, before the runtime or any other thread starts.
    unsafe { memory_embedders::settle_thread_count() }
}

#[cfg(not(feature = "local"))]
fn settle_thread_count() {}

/// A command line clap refuses: said as clap says it (usage and all), or as one JSON object
/// when the log was asked to be JSON (`--log-format json`, `AVA_LOG_FORMAT=json`), so that a
/// log pipeline reads it too. Help and the version print as they are.
fn usage_error(e: &clap::Error) -> std::process::ExitCode {
    use clap::error::ErrorKind;
    let printed = matches!(
        e.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    );
    if printed || !json_log_asked() {
        e.exit()
    }
    shared::logs::init(shared::logs::LogFormat::Json);
    let said = e.render().to_string();
    shared::logs::announce("ERROR", said.trim());
    std::process::ExitCode::from(2)
}

/// Whether the command line or the environment asks for JSON logs (read before clap has
/// parsed anything: it refused the line).
fn json_log_asked() -> bool {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let on_the_line = args
        .windows(2)
        .any(|w| w[0] == "--log-format" && w[1] == "json")
        || args.iter().any(|a| a == "--log-format=json");
    on_the_line || std::env::var("AVA_LOG_FORMAT").is_ok_and(|v| v.eq_ignore_ascii_case("json"))
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    shared::logs::init(cli.log_format);
    // Not locked for the whole run: an MCP server speaks on stdout from other threads, and a
    // lock held here would block them.
    let out = &mut std::io::stdout();
    // The commands that only read or tidy a store that exists get it opened here; opening
    // never creates one for them.
    let existing = || cli.settings.open_existing();
    match cli.command {
        Command::Demo(args) => commands::demo::run(&cli.settings, &args, out).await,
        Command::Remember(args) => commands::remember::run(&cli.settings, &args, out).await,
        Command::Recall(args) => commands::recall::run(&existing().await?, &args, out).await,
        Command::Forget(args) => commands::forget::run(&existing().await?, &args, out).await,
        Command::History(args) => commands::history::run(&existing().await?, &args, out).await,
        Command::Facts(args) => commands::facts::run(&cli.settings, &args, out).await,
        Command::Erase(args) => commands::erase::run(&existing().await?, &args, out).await,
        Command::Import(args) => commands::import::run(&cli.settings, &args, out).await,
        Command::Export(args) => commands::export::run(&existing().await?, &args, out).await,
        Command::Migrate(args) => commands::migrate::run(&cli.settings, &args, out).await,
        Command::Context(args) => commands::context::run(&cli.settings, &args, out).await,
        Command::Chat(args) => commands::chat::run(&cli.settings, &args, out).await,
        Command::Run(args) => commands::run::run(&cli.settings, &args, out).await,
        Command::Mcp(args) => commands::mcp::run(&cli.settings, &args).await,
        Command::Serve(args) => commands::serve::run(&cli.settings, &args).await,
        Command::Docs(args) => commands::docs::run(&cli.settings, &args, out).await,
        Command::Graph(args) => commands::graph::run(&cli.settings, &args, out).await,
        Command::Stats(args) => commands::stats::run(&existing().await?, &args, out).await,
        Command::Prune(args) => commands::prune::run(&existing().await?, &args, out).await,
        Command::Consolidate(args) => {
            commands::consolidate::run(&existing().await?, &args, out).await
        }
        Command::Reembed(args) => commands::stats::reembed(&cli.settings, &args, out).await,
        Command::Check(args) => commands::check::run(&cli.settings, &args, out).await,
    }
}
