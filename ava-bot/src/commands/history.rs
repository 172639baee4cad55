//! `ava history`: the versions of one of a user's memories, oldest first (what it replaced,
//! and what replaced it), with when each stopped being valid.

use std::io::Write;

use crate::commands::terminal_safe;
use crate::config::Opened;

/// The same arguments as `ava forget`: the user, maybe the chat, the id (any version's).
pub(crate) type Args = super::forget::Args;

pub(crate) async fn run(opened: &Opened, args: &Args, out: &mut impl Write) -> anyhow::Result<()> {
    let id = args.id;
    let store = &*opened.store;
    let scopes = super::readable_scopes(store, &args.user, args.chat.as_deref()).await?;
    let (_, chain) =
        super::in_scope_holding(&scopes, &args.user, id, "read the history", async |scope| {
            memory_core::history(store, scope, id).await
        })
        .await?;
    for e in &chain {
        let state = match (e.superseded_by, e.valid_until) {
            (Some(by), Some(until)) => format!("replaced {until} by {by}"),
            (Some(by), None) => format!("replaced by {by}"),
            (None, Some(until)) => format!("valid until {until}"),
            (None, None) => "current".to_owned(),
        };
        writeln!(
            out,
            "{} {} [{}] {}",
            e.created_at,
            e.id,
            state,
            terminal_safe(&e.content, false)
        )?;
    }
    Ok(())
}
