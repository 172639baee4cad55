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
    let opened = settings.open().await?;
    let Some(sqlite) = &opened.sqlite else {
        // Totals are read from SQLite's own bookkeeping; Postgres has no equivalent yet.
        let info = opened.store.info();
        writeln!(
            out,
            "store: {}",
            info.location.as_deref().unwrap_or(&info.name)
        )?;
        writeln!(out, "totals: not supported on postgres yet")?;
        writeln!(out, "{}", opened.embedder_note)?;
        return list_user_scopes(&*opened.store, args, out).await;
    };
    let s = sqlite.stats().await?;
    writeln!(out, "store: {}", sqlite.path().display())?;
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

pub(crate) async fn reembed(settings: &Settings, out: &mut impl Write) -> anyhow::Result<()> {
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
