//! `ava graph index`: tag the memories a store already holds with the entities they mention
//! (hydrate's `index_entities`), for memories stored before the entity graph existed, by a
//! build without it, or by `ava import`. New memories are tagged as they are stored.

use std::io::Write;

use anyhow::Context;

use crate::config::Settings;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(subcommand)]
    command: GraphCommand,
}

#[derive(Debug, clap::Subcommand)]
enum GraphCommand {
    /// Tag a user's memories with the names they mention (`ent:porto`), replacing entity
    /// tags they had; one line a chat. Running it again changes nothing.
    Index {
        /// User id.
        #[arg(long)]
        user: String,
        /// Only this chat [default: every chat of the user].
        #[arg(long)]
        chat: Option<String>,
    },
}

pub(crate) async fn run(
    settings: &Settings,
    args: &Args,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    // A build without the feature says so before it opens anything.
    hydrate::graph_available()?;
    let GraphCommand::Index { user, chat } = &args.command;
    let opened = settings.open_existing().await?;
    let store = &*opened.store;
    let scopes = super::user_scopes(store, user, chat.as_deref()).await?;
    let mut indexed = 0;
    for scope in &scopes {
        // The documents scope is read by the documents source, never by the graph.
        if scope.chat() == Some(hydrate::DOCUMENTS_CHAT) {
            continue;
        }
        let done = hydrate::index_entities(store, scope)
            .await
            .with_context(|| format!("index the entities of {scope}"))?;
        indexed += 1;
        let more = if done.complete {
            ""
        } else {
            " (some memories may be left out: more than a listing holds were stored in one \
             millisecond)"
        };
        writeln!(
            out,
            "{scope}: {} memories read, {} tagged, {} entities{more}",
            done.scanned, done.tagged, done.entities
        )?;
    }
    if indexed == 0 {
        writeln!(out, "user {user} has no memories to index")?;
    }
    Ok(())
}
