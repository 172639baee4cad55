//! `ava run`: the Telegram bot until Ctrl-C, taking updates by long polling or, with
//! `--webhook-url`, by webhook (several replicas behind one load balancer).

use std::collections::BTreeSet;
use std::io::Write;
use std::sync::Arc;

use anyhow::{Context, bail};
use teloxide::adaptors::throttle::Limits;

use crate::agent::DEFAULT_BUDGET;
use crate::config::{Settings, secret_from_env};
use crate::llm::LlmSettings;
use crate::telegram::webhook::Webhook;
use crate::telegram::{BotState, LEARNED_REACTION, make_bot};
use crate::upkeep::UpkeepArgs;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    llm: LlmSettings,
    /// Token budget of each prompt.
    #[arg(long, default_value_t = DEFAULT_BUDGET)]
    budget: u32,
    /// Only these Telegram user ids may use the bot (comma-separated) [default: everyone].
    #[arg(long, env = "AVA_ALLOW_USERS", value_delimiter = ',')]
    allow_users: Vec<String>,
    /// The Bot API's address (for a local Bot API server or tests).
    #[arg(long, env = "AVA_TELEGRAM_API_URL")]
    telegram_api_url: Option<String>,
    /// The reaction put on a message once Ava has learned (or changed) a fact from it, so
    /// the user sees it without a message; `off` puts none. One of the emoji Telegram lets
    /// bots react with.
    #[arg(long, env = "AVA_LEARNED_REACTION", default_value = LEARNED_REACTION)]
    learned_reaction: String,
    #[command(flatten)]
    upkeep: UpkeepArgs,
    /// Take updates by webhook at this public https:// address (a proxy or load balancer
    /// that holds the certificate and forwards to --webhook-addr) instead of long polling;
    /// needs AVA_WEBHOOK_SECRET. Several replicas may serve one address.
    #[arg(long, env = "AVA_WEBHOOK_URL")]
    webhook_url: Option<String>,
    /// Where to listen for the webhook's requests.
    #[arg(long, env = "AVA_WEBHOOK_ADDR", default_value = "127.0.0.1:8443")]
    webhook_addr: std::net::SocketAddr,
    /// Where to answer a load balancer and Prometheus, on a listener of its own without
    /// tokens: `/healthz`, `/readyz` (store, embedder, chat model) and `/metrics` [default:
    /// off]. Bind it where only they reach.
    #[arg(long, env = "AVA_METRICS_ADDR", value_name = "ADDR")]
    metrics_addr: Option<std::net::SocketAddr>,
}

pub(crate) async fn run(
    settings: &Settings,
    args: &Args,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let token = secret_from_env("TELOXIDE_TOKEN");
    let Some(token) = token.as_ref().map(memory_core::Secret::expose) else {
        bail!("no bot token: set TELOXIDE_TOKEN (from @BotFather) in the environment or .env");
    };
    let allow = parse_allow(&args.allow_users)?;
    let webhook = args
        .webhook_url
        .as_deref()
        .map(|url| {
            Webhook::new(
                url,
                args.webhook_addr,
                secret_from_env("AVA_WEBHOOK_SECRET"),
            )
        })
        .transpose()?;
    let (model, opened, agent) =
        super::answering(settings, &args.llm, &args.upkeep, args.budget).await?;
    let bot = make_bot(token, args.telegram_api_url.as_deref(), Limits::default())?;
    tracing::info!(
        embedder = %opened.embedder_note,
        model = model.name(),
        allow_list = allow.as_ref().map(BTreeSet::len),
        "starting the bot; Ctrl-C stops it"
    );
    let background = agent.clone();
    let reaction = match args.learned_reaction.trim() {
        "" | "off" => None,
        emoji => Some(emoji.to_owned()),
    };
    let probes = match args.metrics_addr {
        None => None,
        Some(addr) => {
            let probes = crate::serve::health::Probes {
                store: agent.store().clone(),
                store_file: opened.sqlite.as_ref().map(|s| s.path().to_owned()),
                totals: crate::serve::health::totals_of(&opened),
                embedder: opened.embedder.clone(),
                model: Some(crate::serve::health::Reach::new(
                    "chat model",
                    args.llm.probe_url(settings),
                )?),
            };
            Some(crate::serve::health::start(addr, "ava run", probes).await?)
        }
    };
    let state = Arc::new(BotState::new(agent, model, allow).with_learned_reaction(reaction));
    let listener = match &webhook {
        Some(hook) => {
            let (listener, addr) = crate::telegram::webhook::listen(&bot, hook).await?;
            tracing::info!(
                url = %hook.url,
                "taking updates by webhook; listening on http://{addr}{}",
                hook.url.path()
            );
            Some(listener)
        }
        None => None,
    };
    let ran = crate::telegram::run(bot, state, listener).await;
    if let Some((task, stop)) = probes {
        stop.cancel();
        let _ = task.await;
    }
    ran?;
    background.finish_background().await;
    writeln!(out, "stopped")?;
    Ok(())
}

fn parse_allow(ids: &[String]) -> anyhow::Result<Option<BTreeSet<u64>>> {
    let ids: BTreeSet<u64> = ids
        .iter()
        .map(|s| s.trim())
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<u64>().with_context(|| {
                format!("AVA_ALLOW_USERS: `{s}` is not a Telegram user id (a number)")
            })
        })
        .collect::<anyhow::Result<_>>()?;
    Ok((!ids.is_empty()).then_some(ids))
}
