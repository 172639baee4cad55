//! `ava remember`: store a fact of a user: the person's (it reaches every private context
//! of theirs), or, with `--chat`, one chat's only.

use std::io::Write;

use anyhow::Context;
use memory_core::{MemoryId, MemoryKind, NewMemory, Tag, Timestamp, remember_once, supersede};

use crate::config::{Person, Settings};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    who: Person,
    /// A tag (repeatable).
    #[arg(long = "tag")]
    tags: Vec<String>,
    /// The id of a fact this one replaces ("we renamed the cat to Max"): that one is kept in
    /// the history (`ava history`) but no longer recalled or put in prompts.
    #[arg(long, value_name = "ID")]
    replaces: Option<String>,
    /// What to remember.
    text: String,
}

pub(crate) async fn run(
    settings: &Settings,
    args: &Args,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let scope = match args.who.in_chat()? {
        Some(chat) => chat,
        None => args.who.own()?,
    };
    let tags = args
        .tags
        .iter()
        .map(Tag::new)
        .collect::<Result<Vec<_>, _>>()?;
    let replaces: Option<MemoryId> = args
        .replaces
        .as_deref()
        .map(str::parse)
        .transpose()
        .context("--replaces")?;
    let opened = settings.open().await?;
    let memory = hydrate::with_entity_tags(NewMemory::new(args.text.clone()))
        .with_kind(MemoryKind::Fact)
        .with_tags(tags)
        .with_source("cli")
        .with_context("remembered with `ava remember`");
    if let Some(old) = replaces {
        // The old fact may be one chat's (a store from before facts were the user's own):
        // the new one replaces it there.
        let scopes = super::readable_scopes(
            opened.store.as_ref(),
            &args.who.user,
            args.who.chat.as_deref(),
        )
        .await?;
        let home = crate::agent::find_memory(opened.store.as_ref(), &scopes, old)
            .await
            .map_or(scope, |e| e.scope);
        let entry = supersede(opened.store.as_ref(), &home, old, memory, Timestamp::now())
            .await
            .with_context(|| format!("replace {old}"))?;
        writeln!(out, "{}", entry.id)?;
        return Ok(());
    }
    let max = opened.store.info().limits.max_content_bytes;
    if memory.content.len() > max {
        // Longer than the store takes in one memory: kept whole, in linked parts.
        let parts = opened
            .store
            .store_batch(&scope, memory.split_to_fit(max))
            .await
            .context("store the memory")?;
        if let Some(first) = parts.first() {
            eprintln!(
                "longer than {max} bytes: stored in {} linked parts, tagged {}{}",
                parts.len(),
                memory_core::PART_OF_TAG_PREFIX,
                first.id
            );
            writeln!(out, "{}", first.id)?;
        }
        return Ok(());
    }
    let done = remember_once(opened.store.as_ref(), &scope, memory)
        .await
        .context("store the memory")?;
    if done.merged {
        eprintln!("already remembered: merged into the memory with the same text");
    }
    writeln!(out, "{}", done.entry.id)?;
    Ok(())
}
