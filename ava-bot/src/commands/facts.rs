//! `ava facts`: the facts Ava holds about a user now, numbered as the bot's `/facts` numbers
//! them (a lookup: it writes nothing).

use std::io::Write;

use crate::agent::{current_facts, render_facts};
use crate::config::{Person, Settings};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    who: Person,
    /// Print the facts as JSON (oldest first, as numbered).
    #[arg(long)]
    json: bool,
}

pub(crate) async fn run(
    settings: &Settings,
    args: &Args,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let mut scopes: Vec<_> = args.who.in_chat()?.into_iter().collect();
    scopes.push(args.who.own()?);
    let opened = settings.open_existing().await?;
    let facts = current_facts(opened.store.as_ref(), &scopes).await?;
    if args.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&facts)?)?;
    } else {
        write!(out, "{}", super::terminal_safe(&render_facts(&facts), true))?;
    }
    Ok(())
}
