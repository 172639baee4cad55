//! `ava context`: the prompt the LLM would get for a message (a dry run: nothing stored, no
//! model called), with the explain report on `--explain`.

use std::io::Write;

use hydrate::{DegradationKind, ExplainReport, SourceStatus};

use crate::agent::{Agent, Audience, DEFAULT_BUDGET, named, render_messages};
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
    /// What the user is trying to do: the prompt says so.
    #[arg(long)]
    goal: Option<String>,
    /// The message the user would send.
    message: String,
}

pub(crate) async fn run(
    settings: &Settings,
    args: &Args,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let scope = args.who.scope()?;
    // What can be judged without the store is judged first.
    if args.message.trim().is_empty() {
        anyhow::bail!("the message is empty; say something");
    }
    if args.budget == 0 {
        anyhow::bail!("token budget 0: expected at least 1");
    }
    let opened = settings.open_existing().await?;
    let agent = settings.equip(
        Agent::dry_run(
            std::sync::Arc::clone(&opened.store),
            opened.embedder.clone(),
            args.budget,
        )?,
        &opened,
    )?;
    let prompt = agent
        .prepare(
            &scope,
            named(args.who.name.as_deref()),
            args.goal.as_deref(),
            &args.message,
        )
        .await?;
    // Printed first, then judged: a prompt missing a source is still worth seeing.
    let problems = incomplete(&prompt.report);
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
    } else {
        eprintln!("{}", opened.embedder_note);
        write!(
            out,
            "{}",
            super::terminal_safe(&render_messages(&prompt), true)
        )?;
        if args.explain {
            writeln!(out, "--- explain ---")?;
            let report = agent
                .explain(&scope, Audience::Private, &prompt.report)
                .await;
            write!(out, "{}", super::terminal_safe(&report, true))?;
        }
    }
    if problems.is_empty() {
        return Ok(());
    }
    out.flush()?;
    anyhow::bail!("the prompt above is incomplete: {}", problems.join("; "))
}

/// Why a prompt is not what the store could give: a source that failed or timed out, a
/// prompt that does not fit its budget. Weaker search modes (keyword only, without an
/// embedder) are how the store is set up, not failures.
fn incomplete(report: &ExplainReport) -> Vec<String> {
    let mut out: Vec<String> = report
        .degradations
        .iter()
        .filter(|d| {
            !matches!(
                d.kind,
                DegradationKind::SearchFallback | DegradationKind::MissingProvider
            )
        })
        .map(ToString::to_string)
        .collect();
    for s in &report.sources {
        if matches!(s.status, SourceStatus::Failed | SourceStatus::Partial)
            && !out.iter().any(|d| d.contains(s.kind.as_str()))
        {
            out.push(format!("source {} {:?}", s.kind.as_str(), s.status).to_lowercase());
        }
    }
    if !report.fits {
        out.push(format!(
            "it takes {} tokens, more than the {} available",
            report.estimated_prompt_tokens, report.budget.available
        ));
    }
    out
}
