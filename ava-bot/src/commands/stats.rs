//! `ava stats` and `ava reembed`: what the store holds, and moving it to a new embedder.

use std::io::Write;

use anyhow::Context;
use memory_core::{DEFAULT_TENANT, MemoryBackend};
use memory_sqlite::SqliteConfig;

use crate::config::{DbTarget, Settings};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Also list this user's chats and how many memories each holds.
    #[arg(long)]
    user: Option<String>,
}

pub(crate) async fn run(
    settings: &Settings,
    args: &Args,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let opened = settings.open_existing().await?;
    let Some(sqlite) = &opened.sqlite else {
        // Totals are read from SQLite's own bookkeeping; Postgres has no equivalent yet.
        let info = opened.store.info();
        writeln!(
            out,
            "store: {} ({})",
            info.location.as_deref().unwrap_or(&info.name),
            info.kind()
        )?;
        writeln!(out, "totals: not supported on postgres yet")?;
        writeln!(out, "{}", opened.embedder_note)?;
        return list_user_scopes(&*opened.store, args, out).await;
    };
    let s = sqlite.stats().await?;
    writeln!(
        out,
        "store: {} ({})",
        sqlite.path().display(),
        opened.store.info().kind()
    )?;
    writeln!(
        out,
        "size: {:.1} MiB",
        s.file_bytes as f64 / (1024.0 * 1024.0)
    )?;
    writeln!(
        out,
        "memories: {} ({} facts, {} with vectors)",
        s.memories, s.facts, s.embedded
    )?;
    if s.embedded < s.memories && s.embedding_space.is_some() {
        writeln!(
            out,
            "  {} have no vector yet: a chat's are embedded when it is next searched with an \
             embedder, or all at once with `ava reembed --missing`",
            s.memories - s.embedded
        )?;
    }
    writeln!(out, "users: {}, scopes: {}", s.users, s.scopes)?;
    writeln!(
        out,
        "embedding space: {}",
        s.embedding_space
            .as_deref()
            .unwrap_or("none (keyword only)")
    )?;
    writeln!(out, "{}", opened.embedder_note)?;
    list_user_scopes(&*opened.store, args, out).await
}

async fn list_user_scopes(
    store: &dyn MemoryBackend,
    args: &Args,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    if let Some(user) = &args.user {
        for scope in store.user_scopes(DEFAULT_TENANT, user).await? {
            let n = store.count(&scope).await?;
            writeln!(out, "  {scope}: {n}")?;
        }
    }
    Ok(())
}

#[derive(Debug, clap::Args)]
pub(crate) struct ReembedArgs {
    /// Only embed the memories that have no vector yet (stored without an embedder, or by
    /// a process of an older model), in the store's current space.
    #[arg(long)]
    missing: bool,
}

pub(crate) async fn reembed(
    settings: &Settings,
    args: &ReembedArgs,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    if args.missing {
        return embed_missing(settings, out).await;
    }
    let path = match settings.db_target()? {
        DbTarget::Sqlite(path) => path,
        DbTarget::Postgres(_) => anyhow::bail!(
            "ava reembed is not supported on postgres yet; connect to a new schema \
             (`?schema=NAME`) with the new embedder and re-import instead"
        ),
    };
    let (embedder, note) = settings.embedder().await?;
    let embedder = embedder.with_context(|| format!("reembed needs an embedder: {note}"))?;
    let report = memory_sqlite::reembed(&path, embedder, SqliteConfig::default())
        .await
        .with_context(|| format!("re-embed {}", path.display()))?;
    writeln!(
        out,
        "re-embedded {} memories: {} -> {}",
        report.memories,
        report.previous_space.as_deref().unwrap_or("none"),
        report.space
    )?;
    Ok(())
}

async fn embed_missing(settings: &Settings, out: &mut impl Write) -> anyhow::Result<()> {
    let opened = settings.open_existing().await?;
    let Some(sqlite) = &opened.sqlite else {
        anyhow::bail!("ava reembed --missing works on SQLite stores only");
    };
    if !opened
        .store
        .capabilities()
        .supports(memory_core::Capability::SemanticSearch)
    {
        anyhow::bail!(
            "ava reembed --missing needs an embedder: {}",
            opened.embedder_note
        );
    }
    let bar = indicatif::ProgressBar::new(0).with_style(
        indicatif::ProgressStyle::with_template("embedding [{bar:40}] {pos}/{len} ({eta})")?
            .progress_chars("=> "),
    );
    let report = sqlite
        .embed_missing(|done, total| {
            bar.set_length(total);
            bar.set_position(done);
        })
        .await
        .context("embed memories without a vector")?;
    bar.finish_and_clear();
    writeln!(
        out,
        "embedded {} memories; {} still without a vector",
        report.embedded, report.remaining
    )?;
    Ok(())
}
