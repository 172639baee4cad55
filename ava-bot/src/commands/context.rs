//! `ava context`: the prompt the LLM would get for a message (a dry run: nothing stored, no
//! model called), with the explain report on `--explain`.

use std::io::Write;

use crate::agent::{Agent, DEFAULT_BUDGET, render_messages};
use crate::config::{Identity, Settings};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    who: Identity,
    /// Token budget of the prompt.
    #[arg(long, default_value_t = DEFAULT_BUDGET)]
    budget: u32,
    /// Also print the explain report: which memories went in, which were dropped, tokens.
    #[arg(long)]
    explain: bool,
    /// Print JSON (`messages`, `tools`, and `report` with --explain).
    #[arg(long)]
    json: bool,
    /// The message the user would send.
    message: String,
}

pub(crate) async fn run(
    settings: &Settings,
    args: &Args,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let scope = args.who.scope()?;
    let opened = settings.open().await?;
    let agent = Agent::new(opened.store, args.budget)?;
    let prompt = agent.prepare(&scope, &args.message).await?;
    if args.json {
        let mut value = serde_json::json!({
            "messages": prompt.messages,
            "tools": prompt.tools,
            "request_hash": prompt.request_hash,
        });
        if args.explain {
            value["report"] = serde_json::to_value(&prompt.report)?;
        }
        writeln!(out, "{}", serde_json::to_string_pretty(&value)?)?;
        return Ok(());
    }
    eprintln!("{}", opened.embedder_note);
    write!(out, "{}", render_messages(&prompt))?;
    if args.explain {
        writeln!(out, "--- explain ---")?;
        write!(out, "{}", agent.explain(&scope, &prompt.report).await)?;
    }
    Ok(())
}
