//! `ava remember`: store a fact of a user: the person's (it reaches every private context
//! of theirs), or, with `--chat`, one chat's only.

use std::io::Write;

use anyhow::Context;
use memory_core::{FactKept, MemoryId, MemoryKind, NewMemory, Tag, Timestamp, keep_fact};

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
    // The old fact may be one chat's (a store from before facts were the user's own): the
    // new one replaces it there.
    let scopes = match replaces {
        Some(_) => {
            super::readable_scopes(
                opened.store.as_ref(),
                &args.who.user,
                args.who.chat.as_deref(),
            )
            .await?
        }
        None => Vec::new(),
    };
    let kept = keep_fact(
        opened.store.as_ref(),
        &scope,
        &scopes,
        memory,
        replaces,
        Timestamp::now(),
    )
    .await
    .map_err(|e| match replaces {
        Some(old) => anyhow::Error::new(e).context(format!("replace {old}")),
        None => anyhow::Error::new(e).context("store the memory"),
    })?;
    match &kept {
        FactKept::Parts(parts) => {
            eprintln!(
                "longer than {} bytes: stored in {} linked parts, tagged {}{}",
                opened.store.info().limits.max_content_bytes,
                parts.len(),
                memory_core::PART_OF_TAG_PREFIX,
                kept.entry().map(|e| e.id.to_string()).unwrap_or_default()
            );
            if let Some(cut) = memory_core::MessageCut::of(&args.text) {
                eprintln!("the text is {cut}");
            }
        }
        FactKept::Once(r) if r.merged => {
            eprintln!("already remembered: merged into the memory with the same text");
        }
        FactKept::Once(_) | FactKept::Replaced(_) => {}
    }
    if let Some(entry) = kept.entry() {
        writeln!(out, "{}", entry.id)?;
    }
    Ok(())
}
