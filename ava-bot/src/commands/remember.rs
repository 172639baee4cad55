//! `ava remember`: store a fact for a user in a chat.

use std::io::Write;

use anyhow::Context;
use memory_core::{MemoryKind, NewMemory, Tag, remember_once};

use crate::config::{Identity, Settings};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    who: Identity,
    /// A tag (repeatable).
    #[arg(long = "tag")]
    tags: Vec<String>,
    /// What to remember.
    text: String,
}

pub(crate) async fn run(
    settings: &Settings,
    args: &Args,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let scope = args.who.scope()?;
    let tags = args
        .tags
        .iter()
        .map(Tag::new)
        .collect::<Result<Vec<_>, _>>()?;
    let opened = settings.open().await?;
    let memory = NewMemory::new(args.text.clone())
        .with_kind(MemoryKind::Fact)
        .with_tags(tags)
        .with_source("cli")
        .with_context("remembered with `ava remember`");
    let done = remember_once(opened.store.as_ref(), &scope, memory)
        .await
        .context("store the memory")?;
    if done.merged {
        eprintln!("already remembered: merged into the memory with the same text");
    }
    writeln!(out, "{}", done.entry.id)?;
    Ok(())
}
