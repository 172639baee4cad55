//! `ava consolidate`: fold a user's facts that say the same thing into one (the oldest keeps
//! the others' tags and pinning; the others stay in its history, no longer current), with
//! `--similar` also facts of nearly the same meaning, then optionally prune as `ava prune`
//! does; `--dry-run` lists what would change, `--restore ID` undoes a merge.

use std::io::Write;
use std::time::Duration;

use anyhow::Context;
use memory_core::{Consolidation, MemoryBackend, MemoryId, PrunePolicy, Scope, Timestamp};

use crate::commands::terminal_safe;
use crate::config::Opened;
use crate::upkeep::{parse_age, reason};
use hydrate::preview;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The user whose chats to consolidate.
    #[arg(long)]
    user: String,
    /// Only this chat [default: every chat of the user].
    #[arg(long)]
    chat: Option<String>,
    /// Also prune chat turns (and facts no longer valid) older than this (`90d`, `2w`).
    #[arg(long, value_parser = parse_age)]
    max_age: Option<Duration>,
    /// Also keep at most this many memories per chat, removing the oldest first.
    #[arg(long)]
    max_count: Option<usize>,
    /// Also fold facts whose meaning is nearly the same: the cosine similarity of their
    /// vectors at least this (0.95 is cautious; see BENCHMARKS.md) [default: exact
    /// duplicates only].
    #[arg(long)]
    similar: Option<f32>,
    /// List what would change, and why; change nothing.
    #[arg(long)]
    dry_run: bool,
    /// Make this merged (or ended) memory current again, and do nothing else.
    #[arg(long, value_name = "ID", conflicts_with_all = ["dry_run", "similar", "max_age", "max_count"])]
    restore: Option<String>,
}

async fn describe(store: &dyn MemoryBackend, scope: &Scope, id: MemoryId) -> String {
    match store.get(scope, id).await {
        Ok(m) => format!(
            "{id} \"{}\"",
            terminal_safe(&preview(&m.content, 60), false)
        ),
        Err(_) => id.to_string(),
    }
}

pub(crate) async fn run(opened: &Opened, args: &Args, out: &mut impl Write) -> anyhow::Result<()> {
    let store = &*opened.store;
    let scopes = super::user_scopes(store, &args.user, args.chat.as_deref()).await?;
    if let Some(id) = &args.restore {
        let id: MemoryId = id.parse()?;
        let (scope, restored) = super::in_scope_holding(
            &scopes,
            &args.user,
            id,
            "restore the memory",
            async |scope| memory_core::restore(store, scope, id).await,
        )
        .await?;
        let text = terminal_safe(&preview(&restored.content, 60), false);
        writeln!(
            out,
            "restored {id} \"{text}\" in {scope}; it is current again"
        )?;
        return Ok(());
    }
    let now = Timestamp::now();
    let prune = (args.max_age.is_some() || args.max_count.is_some()).then(|| PrunePolicy {
        max_age: args.max_age,
        max_count: args.max_count,
        now,
        ..PrunePolicy::new()
    });
    let what = Consolidation {
        prune,
        similar: args.similar,
        dry_run: args.dry_run,
        now,
        ..Consolidation::new()
    };
    let (merge, prune_verb) = if args.dry_run {
        ("would merge", "would prune")
    } else {
        ("merged", "pruned")
    };
    let (mut merged, mut pruned) = (0, 0);
    for scope in &scopes {
        let report = memory_core::consolidate(store, scope, &what)
            .await
            .with_context(|| format!("consolidate {scope}"))?;
        let folded: usize = report.merged.iter().map(|m| m.merged.len()).sum();
        writeln!(
            out,
            "{scope}: {merge} {folded} duplicate fact(s), {prune_verb} {} memories",
            report.pruned.len()
        )?;
        for m in &report.merged {
            writeln!(
                out,
                "  keep {} ({})",
                describe(store, scope, m.kept).await,
                m.why
            )?;
            for id in &m.merged {
                writeln!(out, "    {merge} {}", describe(store, scope, *id).await)?;
            }
        }
        for (id, why) in &report.pruned {
            let why = reason(*why, args.max_age, args.max_count.unwrap_or_default());
            writeln!(out, "  {prune_verb} {id} ({why})")?;
        }
        merged += folded;
        pruned += report.pruned.len();
    }
    writeln!(
        out,
        "{merge} {merged} and {prune_verb} {pruned} memories in {} chat(s){}",
        scopes.len(),
        if args.dry_run {
            "; run without --dry-run to change them"
        } else {
            ""
        }
    )?;
    Ok(())
}
