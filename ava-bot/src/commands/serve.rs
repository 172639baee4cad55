//! `ava serve`: one long-running server for apps, on one address: MCP at `/mcp`, the
//! OpenAI-compatible proxy under `/v1/` in front of an upstream, if one is named
//! ([`crate::serve::proxy`]), and the web inspector at `/inspect` ([`crate::serve::inspect`]), for the
//! identities of a bearer-token file, until Ctrl-C or SIGTERM. `ava mcp --http` is this
//! server without an upstream ([`Server`]).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use crate::agent::DEFAULT_BUDGET;
use crate::config::{Settings, secret_from_env};
use crate::mcp::Memory;
use crate::serve::inspect::Inspector;
use crate::serve::proxy::{History, Learning, Proxy, Upstream};
use crate::serve::tokens::TokenTable;
use crate::serve::{self, HttpConfig};
use crate::shared::listen::{bind, shutdown_signal};
use crate::upkeep::{Upkeep, UpkeepArgs};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Where to listen (port 0 picks a free one). Loopback by default: beyond this machine,
    /// put a TLS proxy in front.
    #[arg(long, env = "AVA_SERVE_ADDR", default_value = "127.0.0.1:8765")]
    addr: SocketAddr,
    /// The bearer-token file (JSON, mode 600), mapping each token to a user and chat; the
    /// same as `ava mcp --http`'s (see docs/mcp.md).
    #[arg(long, env = "AVA_MCP_TOKENS", value_name = "FILE")]
    tokens: PathBuf,
    /// Another Host name clients may use besides localhost, 127.0.0.1 and ::1 at the port
    /// listened on (requests naming other hosts are refused, against DNS rebinding): `NAME`
    /// at any port, or `NAME:PORT`; pages there may be http or https. Repeatable.
    #[arg(long = "allow-host", value_name = "HOST")]
    allow_hosts: Vec<String>,
    /// The OpenAI-compatible server that answers, up to where `/chat/completions` follows:
    /// e.g. `https://api.openai.com/v1`, or Ollama's `http://localhost:11434/v1`. Its key comes
    /// from AVA_UPSTREAM_API_KEY (or OPENAI_API_KEY) [default: none: MCP and the inspector
    /// only, as `ava mcp --http` serves them].
    #[arg(long, env = "AVA_UPSTREAM_URL", value_name = "URL")]
    upstream: Option<String>,
    /// Seconds the upstream gets to start answering, and to send each next part of a
    /// streamed answer.
    #[arg(long, env = "AVA_UPSTREAM_TIMEOUT", default_value_t = 120)]
    upstream_timeout: u64,
    /// What the upstream gets of the app's own history: `keep` sends all of it after what
    /// Ava recalls; `replace` sends only the current turn, what Ava recalls standing in
    /// for the older messages.
    #[arg(long, env = "AVA_HISTORY", value_enum, default_value_t = History::Keep)]
    history: History,
    /// Token budget of what Ava adds to each request (its recalled memory).
    #[arg(long, default_value_t = DEFAULT_BUDGET)]
    budget: u32,
    /// The upstream model that learns facts from each exchange, in the background [default:
    /// the model each request names].
    #[arg(long, env = "AVA_FACTS_MODEL")]
    facts_model: Option<String>,
    /// Learn no facts (one or two extra upstream calls per exchange otherwise).
    #[arg(long, env = "AVA_NO_FACTS")]
    no_facts: bool,
    /// Where to answer a load balancer and Prometheus, on a listener of its own without
    /// tokens: `/healthz`, `/readyz` (store, embedder, upstream) and `/metrics` [default: off].
    /// Bind it where only they reach.
    #[arg(long, env = "AVA_METRICS_ADDR", value_name = "ADDR")]
    metrics_addr: Option<SocketAddr>,
    #[command(flatten)]
    upkeep: UpkeepArgs,
}

pub(crate) async fn run(settings: &Settings, args: &Args) -> anyhow::Result<()> {
    // What can be judged without the store is judged first.
    let tokens = TokenTable::load(&args.tokens)?;
    let key = secret_from_env("AVA_UPSTREAM_API_KEY").or_else(|| secret_from_env("OPENAI_API_KEY"));
    let upstream = args
        .upstream
        .as_deref()
        .map(|url| Upstream::new(url, key, Duration::from_secs(args.upstream_timeout)))
        .transpose()?;
    let learning = match (&args.facts_model, args.no_facts) {
        (_, true) => Learning::Off,
        (Some(model), false) => Learning::Model(model.clone()),
        (None, false) => Learning::RequestModel,
    };
    let server = Server {
        name: "ava serve",
        addr: args.addr,
        tokens,
        token_file: args.tokens.clone(),
        allow_hosts: args.allow_hosts.clone(),
        budget: args.budget,
        upkeep: args.upkeep.upkeep(),
        proxy: upstream.map(|upstream| (upstream, args.history, learning)),
        metrics_addr: args.metrics_addr,
    };
    server.run(settings).await
}

/// One HTTP server for apps, as `ava serve` or `ava mcp --http` asks for it: MCP at
/// [`serve::PATH`], the inspector at `/inspect`, and the proxy at `/v1` when it has an
/// upstream.
pub(crate) struct Server {
    /// The command, for the line that says where it listens.
    pub(crate) name: &'static str,
    pub(crate) addr: SocketAddr,
    pub(crate) tokens: TokenTable,
    pub(crate) token_file: PathBuf,
    pub(crate) allow_hosts: Vec<String>,
    /// Token budget of what Ava adds to each request of the proxy (MCP's `context` names its
    /// own).
    pub(crate) budget: u32,
    pub(crate) upkeep: Option<Arc<Upkeep>>,
    /// The proxy's upstream, what it passes on of an app's history, and how it learns.
    pub(crate) proxy: Option<(Upstream, History, Learning)>,
    /// Where the probes and metrics listen, if anywhere (`serve::health`).
    pub(crate) metrics_addr: Option<SocketAddr>,
}

impl Server {
    /// Serves until Ctrl-C or SIGTERM, then closes the store.
    pub(crate) async fn run(self, settings: &Settings) -> anyhow::Result<()> {
        let opened = settings.open().await?;
        let agent = settings
            .agent(&opened, self.budget)?
            .with_upkeep(self.upkeep);
        // One agent for the server: MCP's `context` builds its prompts too (with its own
        // budget).
        let memory = Arc::new(Memory::new(agent.clone(), opened.embedder_note.clone())?);
        // The settings in force, for the inspector (the proxy's when there is one).
        let mut shown = serde_json::json!({
            "location": opened.store.info().location,
            "embedder": opened.embedder_note,
        });
        let mut proxied = String::new();
        let mut probed_upstream = None;
        let proxy = match self.proxy {
            None => None,
            Some((upstream, history, learning)) => {
                probed_upstream = Some(serve::health::Reach::new(
                    "upstream",
                    format!("{}/models", upstream.base()),
                )?);
                let history_name = clap::ValueEnum::to_possible_value(&history)
                    .map_or_else(String::new, |v| v.get_name().to_owned());
                proxied = format!(
                    ", the OpenAI-compatible proxy at /v1 (upstream {}, history {history_name})",
                    upstream.base()
                );
                shown["upstream"] = serde_json::json!(upstream.base());
                shown["upstream_timeout_s"] = serde_json::json!(upstream.timeout().as_secs());
                shown["budget"] = serde_json::json!(self.budget);
                shown["history"] = serde_json::json!(history_name);
                shown["facts"] = serde_json::json!(learning.describe());
                Some(Arc::new(
                    Proxy::new(agent.clone(), upstream, history, learning)
                        .context("load the tokenizer")?,
                ))
            }
        };
        // The inspector reads through the same agent (see `Inspector::new`).
        let inspector = Inspector::new(agent.clone(), shown).with_sqlite(opened.sqlite.clone());
        let listener = bind(self.addr).await?;
        let local = listener
            .local_addr()
            .context("read the listening address")?;
        if !local.ip().is_loopback() {
            tracing::warn!(
                "serving on {local}, beyond this machine, over plain HTTP: put a TLS proxy in \
                 front of it, or bearer tokens travel in the clear"
            );
        }
        // On its own line and not through the log filter: clients and scripts read it.
        crate::shared::logs::announce(
            "INFO",
            &format!(
                "{}: listening on http://{local} for {} token(s): MCP at {}{proxied}, the \
                 inspector at /inspect; {}",
                self.name,
                self.tokens.len(),
                serve::PATH,
                opened.embedder_note
            ),
        );
        let probes = match self.metrics_addr {
            None => None,
            Some(addr) => {
                let probes = serve::health::Probes {
                    store: agent.store().clone(),
                    store_file: opened.sqlite.as_ref().map(|s| s.path().to_owned()),
                    totals: crate::serve::health::totals_of(&opened),
                    embedder: opened.embedder.clone(),
                    model: probed_upstream,
                };
                Some(serve::health::start(addr, self.name, probes).await?)
            }
        };
        let config = HttpConfig {
            tokens: self.tokens,
            token_file: self.token_file,
            extra_hosts: self.allow_hosts,
            proxy,
            inspector: Arc::new(inspector),
        };
        let served = serve::serve(listener, memory, config, shutdown_signal()).await;
        if let Some((task, stop)) = probes {
            stop.cancel();
            let _ = task.await;
        }
        served?;
        // Facts still being learned are learned before the store closes.
        agent.finish_background().await;
        if let Some(sqlite) = &opened.sqlite {
            sqlite.close().await;
        }
        tracing::info!("{} stopped", self.name);
        Ok(())
    }
}
