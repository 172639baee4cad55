//! `ava erase`: remove everything Ava keeps of one person (every chat, their facts, their
//! documents, their part of group conversations) and say what; without `--yes` it only says
//! what would go.

use std::io::Write;

use crate::config::{Opened, Whole};
use crate::erase::erase_person;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The person to erase.
    #[command(flatten)]
    who: Whole,
    /// Erase; without it, list what would be erased and change nothing.
    #[arg(long)]
    yes: bool,
}

pub(crate) async fn run(opened: &Opened, args: &Args, out: &mut impl Write) -> anyhow::Result<()> {
    // Nothing to erase in a store that does not exist; do not create one.
    let erased = erase_person(
        opened.store.as_ref(),
        &args.who.tenant,
        &args.who.user,
        args.yes,
    )
    .await?;
    let total = erased.total();
    write!(
        out,
        "{}",
        crate::commands::terminal_safe(&erased.describe(), true)
    )?;
    if args.yes {
        writeln!(out, "erased {total} memories of user {}", args.who.user)?;
    } else if total == 0 {
        writeln!(out, "nothing stored for user {}", args.who.user)?;
    } else {
        writeln!(
            out,
            "{total} memories of user {} would be erased; run again with --yes to erase them",
            args.who.user
        )?;
    }
    if let Some(sqlite) = &opened.sqlite {
        sqlite.close().await;
    }
    Ok(())
}
