//! `ava recall`: look up a user's memories in a chat (and the user's own facts) and print
//! them ranked as every door's recall ranks them ([`hydrate::recall`]); a lookup, so it
//! records no access and writes nothing.

use std::io::Write;

use anyhow::Context;
use memory_core::{Filter, SearchMode, Timestamp};

use crate::config::{Identity, Opened};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    who: Identity,
    /// How many hits at most.
    #[arg(long, default_value_t = 5)]
    limit: usize,
    /// Print the hits as JSON.
    #[arg(long)]
    json: bool,
    /// Search the memories as they stood then: a date (`2026-03-01`, the end of that day,
    /// UTC) or an RFC 3339 time; replaced and ended facts that held then are found.
    #[arg(long, value_parser = crate::shared::dates::parse_as_of)]
    as_of: Option<Timestamp>,
    /// What to look for.
    query: String,
}

pub(crate) async fn run(opened: &Opened, args: &Args, out: &mut impl Write) -> anyhow::Result<()> {
    let scope = args.who.scope()?;
    let store = &*opened.store;
    // A lookup from the terminal is not the assistant recalling: it counts no access, so
    // it writes nothing and works on a store it may only read.
    let mut req = super::best_search(store, &args.query, args.limit).without_access_tracking();
    if let Some(at) = args.as_of {
        req = req.filter(Filter::as_of(at));
    }
    // The chat's memories and the person's own facts, best first.
    let window = opened.embedder.as_ref().and_then(|e| e.window_bytes());
    let hits = hydrate::recall(
        store,
        &scope.private_context(),
        &req,
        &hydrate::RecallRanking::new(window),
        Timestamp::now(),
    )
    .await
    .context("search memories")?;
    if args.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&hits)?)?;
        return Ok(());
    }
    let mode = match req.mode {
        SearchMode::Semantic => "semantic".to_owned(),
        SearchMode::Keyword => "keyword".to_owned(),
        SearchMode::Hybrid(w) => format!(
            "hybrid: {:.2} semantic, {:.2} keyword",
            w.semantic(),
            w.keyword()
        ),
    };
    eprintln!("{} ({mode} search)", opened.embedder_note);
    if hits.is_empty() {
        writeln!(out, "no memories match")?;
    }
    for (i, h) in hits.iter().enumerate() {
        let b = &h.breakdown;
        let parts: Vec<String> = [("semantic", b.semantic), ("keyword", b.keyword)]
            .iter()
            .filter_map(|(n, v)| v.map(|v| format!("{n} {v:.2}")))
            .collect();
        let content = super::terminal_safe(&h.entry.content, false);
        writeln!(out, "{}. [{:.3}] {content}", i + 1, h.score)?;
        writeln!(
            out,
            "   id {} · {} · {} · {}",
            h.entry.id,
            h.entry.kind.as_str(),
            h.entry.created_at,
            parts.join(", ")
        )?;
    }
    Ok(())
}
