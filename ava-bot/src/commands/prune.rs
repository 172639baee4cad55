//! `ava prune`: remove what a user's chats no longer need (turns past an age, the oldest
//! turns past a chat's cap), or with `--dry-run` list it; [`crate::upkeep`] applies the same
//! rules to each chat as it is used.
//!
//! Pinned memories and facts valid now are never pruned (see `memory_core::PrunePolicy`).

use std::io::Write;
use std::time::Duration;

use anyhow::Context;
use memory_core::Timestamp;

use crate::commands::terminal_safe;
use crate::config::Opened;
use crate::upkeep::{DEFAULT_MAX_COUNT, DecayArgs, parse_age, policy, reason};
use hydrate::preview;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The user whose chats to prune.
    #[arg(long)]
    user: String,
    /// Only this chat [default: every chat of the user].
    #[arg(long)]
    chat: Option<String>,
    /// Remove chat turns (and facts no longer valid) older than this: `90d`, `12h`, `2w`
    /// [default: none removed for age].
    #[arg(long, value_parser = parse_age)]
    max_age: Option<Duration>,
    /// Keep at most this many memories per chat, removing the oldest first.
    #[arg(long, default_value_t = DEFAULT_MAX_COUNT)]
    max_count: usize,
    #[command(flatten)]
    decay: DecayArgs,
    /// List what would be removed, and why; remove nothing.
    #[arg(long)]
    dry_run: bool,
}

pub(crate) async fn run(opened: &Opened, args: &Args, out: &mut impl Write) -> anyhow::Result<()> {
    let store = &*opened.store;
    let scopes = super::user_scopes(store, &args.user, args.chat.as_deref()).await?;
    let mut policy = policy(args.max_age, args.max_count, args.decay, Timestamp::now());
    policy.dry_run = args.dry_run;
    let verb = if args.dry_run {
        "would remove"
    } else {
        "removed"
    };
    let mut total = 0;
    for scope in &scopes {
        // Previews first: after a real run the memories are gone.
        let report = store
            .prune(scope, &policy.dry())
            .await
            .with_context(|| format!("plan the prune of {scope}"))?;
        let mut lines = Vec::with_capacity(report.removed.len());
        for (id, why) in &report.removed {
            let text = match store.get(scope, *id).await {
                Ok(m) => terminal_safe(&preview(&m.content, 60), false),
                Err(_) => String::new(),
            };
            lines.push(format!(
                "  {id} ({}): {text}",
                reason(*why, args.max_age, args.max_count)
            ));
        }
        let report = if args.dry_run {
            report
        } else {
            let done = store
                .prune(scope, &policy)
                .await
                .with_context(|| format!("prune {scope}"))?;
            if done.removed != report.removed {
                // Another process wrote in between: say what really went.
                lines = done
                    .removed
                    .iter()
                    .map(|(id, why)| {
                        format!("  {id} ({})", reason(*why, args.max_age, args.max_count))
                    })
                    .collect();
            }
            done
        };
        writeln!(out, "{scope}: {verb} {}", report.removed.len())?;
        for line in lines {
            writeln!(out, "{line}")?;
        }
        total += report.removed.len();
    }
    writeln!(
        out,
        "{verb} {total} memories in {} chat(s){}",
        scopes.len(),
        if args.dry_run {
            "; run without --dry-run to remove them"
        } else {
            ""
        }
    )?;
    Ok(())
}
