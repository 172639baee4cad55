//! `ava mcp`: serve Ava's memory to MCP clients, over stdio for one identity (`--user`,
//! `--chat`) or over streamable HTTP (`--http ADDR`: `ava serve`'s server without an
//! upstream) for the identities of a bearer-token file, until the client hangs up (stdio),
//! Ctrl-C or SIGTERM.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, bail};
use rmcp::service::ServerInitializeError;

use crate::agent::DEFAULT_BUDGET;
use crate::commands::serve::Server;
use crate::config::{Opened, Settings};
use crate::mcp::stdio;
use crate::mcp::{AvaMcp, Memory};
use crate::serve::tokens::TokenTable;
use crate::shared::listen::shutdown_signal;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The user a stdio server acts for: every tool call reads and writes this user's
    /// memories in --chat (the model cannot choose another).
    #[arg(long, conflicts_with = "http")]
    user: Option<String>,
    /// The chat a stdio server acts for.
    #[arg(long, conflicts_with = "http")]
    chat: Option<String>,

    /// Serve streamable HTTP at this address (e.g. 127.0.0.1:8765; port 0 picks a free one)
    /// instead of stdio. The endpoint is /mcp, the inspector /inspect; identities come from
    /// --tokens. This is `ava serve` without an upstream.
    #[arg(long, value_name = "ADDR")]
    http: Option<SocketAddr>,
    /// With --http: the bearer-token file (JSON, mode 600), mapping each token to a user and
    /// chat; see docs/mcp.md.
    #[arg(long, env = "AVA_MCP_TOKENS", value_name = "FILE")]
    tokens: Option<PathBuf>,
    /// With --http: another Host name clients may use besides localhost, 127.0.0.1 and ::1 at
    /// the port listened on (requests naming other hosts are refused, against DNS rebinding):
    /// `NAME` at any port, or `NAME:PORT`; pages there may be http or https. Repeatable.
    #[arg(long = "allow-host", value_name = "HOST", requires = "http")]
    allow_hosts: Vec<String>,
}

/// What to serve.
#[derive(Debug)]
enum Plan {
    /// One identity on stdin and stdout.
    Stdio(memory_core::Scope),
    /// Streamable HTTP at an address, for the identities of a token file.
    Http(SocketAddr, TokenTable, PathBuf),
}

/// How a stdio session ended.
#[derive(Debug, PartialEq, Eq)]
enum Ended {
    /// The client closed stdin (or never initialized).
    Hangup,
    /// Ctrl-C or SIGTERM.
    Signal,
}

pub(crate) async fn run(settings: &Settings, args: &Args) -> anyhow::Result<()> {
    // What can be judged without the store is judged first.
    let plan = match (args.http, &args.user, &args.chat) {
        (Some(addr), _, _) => {
            let Some(path) = &args.tokens else {
                bail!(
                    "--http needs --tokens FILE (or AVA_MCP_TOKENS): the bearer tokens clients \
                     must send, each mapped to a user and chat"
                );
            };
            Plan::Http(addr, TokenTable::load(path)?, path.clone())
        }
        (None, Some(user), Some(chat)) => {
            Plan::Stdio(memory_core::Scope::for_user(user)?.in_chat(chat)?)
        }
        (None, _, _) => bail!(
            "ava mcp serves one identity over stdio: give --user and --chat (or --http ADDR \
             with --tokens FILE for several)"
        ),
    };
    let scope = match plan {
        Plan::Http(addr, tokens, token_file) => {
            // `ava serve` without an upstream: MCP and the inspector.
            let server = Server {
                name: "ava mcp",
                addr,
                tokens,
                token_file,
                allow_hosts: args.allow_hosts.clone(),
                budget: DEFAULT_BUDGET,
                upkeep: None,
                proxy: None,
                metrics_addr: None,
            };
            return server.run(settings).await;
        }
        Plan::Stdio(scope) => scope,
    };
    let opened = settings.open().await?;
    let memory = Arc::new(memory(settings, &opened)?);
    tracing::info!(%scope, embedder = %opened.embedder_note, "serving MCP on stdio");
    let ended = serve_stdio(AvaMcp::new(memory, scope)).await?;
    // Every acknowledged write is committed already; this waits for the store's worker and
    // folds the write-ahead log back into the file.
    if let Some(sqlite) = &opened.sqlite {
        sqlite.close().await;
    }
    tracing::info!(?ended, "MCP server stopped");
    if ended == Ended::Signal {
        // A read of stdin that is not a pipe (a terminal, a socket) runs on a blocking
        // thread that cannot be cancelled, and the runtime would wait for it on the way out:
        // everything is stored and closed, so leave now.
        std::process::exit(0);
    }
    Ok(())
}

/// What MCP serves over `opened`'s store: prompts built as the settings say (`context`
/// with a budget of its own, [`DEFAULT_BUDGET`] unless asked).
fn memory(settings: &Settings, opened: &Opened) -> anyhow::Result<Memory> {
    Memory::new(
        settings.agent(opened, DEFAULT_BUDGET)?,
        opened.embedder_note.clone(),
    )
}

async fn serve_stdio(handler: AvaMcp) -> anyhow::Result<Ended> {
    let signal = shutdown_signal();
    tokio::pin!(signal);
    // rmcp reads the client through the front, which answers what rmcp would not.
    let (stdin, stdout) = rmcp::transport::stdio_pipes();
    let (pipes, front) = stdio::start(stdin, stdout);
    let started = tokio::select! {
        started = rmcp::serve_server(handler, pipes) => started,
        () = &mut signal => return Ok(Ended::Signal),
    };
    let running = match started {
        Ok(running) => running,
        Err(ServerInitializeError::ConnectionClosed(_)) => {
            tracing::info!("stdin closed before the client initialized");
            front.finish().await;
            return Ok(Ended::Hangup);
        }
        Err(e) => return Err(e).context("start the MCP session on stdio"),
    };
    let cancel = running.cancellation_token();
    let waiting = running.waiting();
    tokio::pin!(waiting);
    let ended = tokio::select! {
        quit = &mut waiting => {
            quit.context("the MCP session failed")?;
            Ended::Hangup
        }
        () = &mut signal => {
            // Answers to the requests in flight are still sent (rmcp drains them).
            cancel.cancel();
            waiting.await.context("the MCP session failed")?;
            Ended::Signal
        }
    };
    front.finish().await;
    Ok(ended)
}
