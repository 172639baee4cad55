//! `ava chat`: the bot's conversation pipeline in the terminal, one message a line on stdin.

use std::io::{IsTerminal, Write};

use tokio::io::{AsyncBufReadExt, BufReader};

use crate::agent::{Audience, DEFAULT_BUDGET, Speaker, named};
use crate::config::{Identity, Settings};
use crate::llm::LlmSettings;
use crate::prompts::{self, Builder, Built};
use crate::shared::error_chain;
use crate::upkeep::UpkeepArgs;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    who: Identity,
    #[command(flatten)]
    llm: LlmSettings,
    /// Token budget of each prompt.
    #[arg(long, default_value_t = DEFAULT_BUDGET)]
    budget: u32,
    #[command(flatten)]
    upkeep: UpkeepArgs,
}

pub(crate) async fn run(
    settings: &Settings,
    args: &Args,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let scope = args.who.scope()?;
    let (model, opened, agent) =
        super::answering(settings, &args.llm, &args.upkeep, args.budget).await?;
    let interactive = std::io::stdin().is_terminal();
    if interactive {
        eprintln!(
            "{}; model {} ({:?}). One message a line; /context explains the last prompt; \
             Ctrl-D ends.",
            opened.embedder_note,
            model.name(),
            args.llm.llm
        );
    }
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    let mut last_report = None;
    loop {
        if interactive {
            eprint!("you> ");
        }
        let Some(line) = lines.next_line().await? else {
            break;
        };
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if line == "/context" {
            match &last_report {
                Some(report) => write!(
                    out,
                    "{}",
                    agent.explain(&scope, Audience::Private, report).await
                )?,
                None => writeln!(out, "no prompt yet; say something first")?,
            }
            continue;
        }
        match agent
            .answer(
                model.as_ref(),
                &Speaker::private(scope.clone(), named(args.who.name.as_deref())),
                line,
                "cli",
            )
            .await
        {
            Err(e) => writeln!(out, "ava> (not sent: {})", error_chain(&e))?,
            Ok(turn) => {
                match turn.answer {
                    Ok(inference) => {
                        writeln!(out, "ava> {}", inference.reply)?;
                        // Kept as the bot keeps its prompts, only with the question stored,
                        // so the next prompt extends this one.
                        if turn.stored.is_ok() {
                            let next = inference.prompt.previous();
                            let built =
                                Built::new(Builder::Chat, None, inference.prompt.report.clone())
                                    .with_next(next);
                            let store = agent.store().as_ref();
                            let at = memory_core::Timestamp::now();
                            prompts::keep(store, &scope, at, &built, &turn.message_ids).await;
                        }
                        last_report = Some(inference.prompt.report);
                    }
                    Err((_, e)) => {
                        let e = error_chain(&e);
                        tracing::error!(error = e, "could not answer");
                        writeln!(out, "ava> Sorry, I could not answer that: {e}")?;
                    }
                }
                match turn.stored {
                    Ok(()) => {}
                    Err(e) => {
                        let e = error_chain(&e);
                        tracing::error!(error = e, "could not store the turn");
                        writeln!(out, "ava> (this turn was not saved: {e})")?;
                    }
                }
            }
        }
        out.flush()?;
    }
    agent.finish_background().await;
    Ok(())
}
