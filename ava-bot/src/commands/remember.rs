//! `ava remember`: store a fact for a user in a chat.

use std::io::Write;

use anyhow::Context;
use memory_core::{MemoryBackend, MemoryKind, NewMemory, Tag};

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
    let entry = opened
        .store
        .store(&scope, memory)
        .await
        .context("store the memory")?;
    writeln!(out, "{}", entry.id)?;
    Ok(())
}
