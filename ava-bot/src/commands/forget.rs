//! `ava forget`: delete one of a user's memories by id.

use std::io::Write;

use memory_core::MemoryId;

use crate::config::Opened;

/// One of a user's memories, by id (`forget` and `history`).
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The user whose memory it is.
    #[arg(long)]
    pub(crate) user: String,
    /// A chat of the user: the id is looked for there and among the user's own facts;
    /// without it, in every chat of the user.
    #[arg(long)]
    pub(crate) chat: Option<String>,
    /// The memory id (as printed by `ava remember` or `ava recall`).
    pub(crate) id: MemoryId,
}

pub(crate) async fn run(opened: &Opened, args: &Args, out: &mut impl Write) -> anyhow::Result<()> {
    let store = &*opened.store;
    let scopes = super::readable_scopes(store, &args.user, args.chat.as_deref()).await?;
    super::in_scope_holding(
        &scopes,
        &args.user,
        args.id,
        "delete the memory",
        async |scope| store.delete(scope, args.id).await,
    )
    .await?;
    writeln!(out, "forgot {}", args.id)?;
    Ok(())
}
