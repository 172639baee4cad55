//! `ava stats` and `ava reembed`: what the store holds, and moving it to a new embedder.

use std::io::Write;

use anyhow::Context;
use memory_core::{DEFAULT_TENANT, MemoryBackend, StoreStats};
use memory_sqlite::SqliteConfig;

use crate::config::{DbTarget, Opened, Settings};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Also list this user's chats and how many memories each holds.
    #[arg(long)]
    user: Option<String>,
}

pub(crate) async fn run(opened: &Opened, args: &Args, out: &mut impl Write) -> anyhow::Result<()> {
    let info = opened.store.info();
    let (totals, size, unembedded) = if let Some(sqlite) = &opened.sqlite {
        let totals = sqlite.stats().await?;
        writeln!(out, "store: {} ({})", sqlite.path().display(), info.kind())?;
        let unembedded = "a chat's are embedded when it is next searched with an embedder, \
                          or all at once with `ava reembed --missing`";
        let size = format!("{} MiB", mib(totals.bytes));
        (totals, size, unembedded)
    } else {
        writeln!(
            out,
            "store: {} ({})",
            info.location.as_deref().unwrap_or(&info.name),
            info.kind()
        )?;
        let totals = postgres_totals(opened).await?;
        let unembedded = "they are embedded when a process with an embedder connects, \
                          or now with `ava reembed --missing`";
        let size = format!("{} MiB (its tables and indexes)", mib(totals.bytes));
        (totals, size, unembedded)
    };
    let s = totals;
    writeln!(out, "size: {size}")?;
    writeln!(
        out,
        "memories: {} ({} facts, {} with vectors)",
        s.memories, s.facts, s.embedded
    )?;
    if s.embedded < s.memories && s.embedding_space.is_some() {
        writeln!(
            out,
            "  {} have no vector yet: {unembedded}",
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

fn mib(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / (1024.0 * 1024.0))
}

/// The totals of a Postgres store, and what its tables take.
#[cfg(feature = "postgres")]
async fn postgres_totals(opened: &Opened) -> anyhow::Result<StoreStats> {
    let Some(pg) = &opened.postgres else {
        anyhow::bail!("the store is neither a SQLite file nor a Postgres schema");
    };
    pg.stats().await.context("read the store's totals")
}

#[cfg(not(feature = "postgres"))]
async fn postgres_totals(_: &Opened) -> anyhow::Result<StoreStats> {
    anyhow::bail!("the store is not a SQLite file, and this build has no Postgres support")
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
    let target = settings.db_target()?;
    let (embedder, note) = settings.embedder().await?;
    let embedder = embedder.with_context(|| format!("reembed needs an embedder: {note}"))?;
    let path = match target {
        DbTarget::Sqlite(path) => path,
        DbTarget::Postgres(url) => return reembed_postgres(&url, embedder, out).await,
    };
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

/// A progress bar of memories done.
fn progress_bar(what: &str) -> anyhow::Result<indicatif::ProgressBar> {
    Ok(indicatif::ProgressBar::new(0).with_style(
        indicatif::ProgressStyle::with_template(&format!(
            "{what} [{{bar:40}}] {{pos}}/{{len}} ({{eta}})"
        ))?
        .progress_chars("=> "),
    ))
}

/// `ava reembed` on Postgres: resumable, beside running processes (see
/// `memory_postgres::reembed`).
#[cfg(feature = "postgres")]
async fn reembed_postgres(
    url: &str,
    embedder: std::sync::Arc<dyn memory_core::EmbeddingProvider>,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let bar = progress_bar("embedding")?;
    let report = memory_postgres::reembed(
        url,
        embedder,
        memory_postgres::PostgresConfig::default(),
        |done, total| {
            bar.set_length(total);
            bar.set_position(done);
        },
    )
    .await
    .with_context(|| format!("re-embed {}", crate::config::redact_url(url)))?;
    bar.finish_and_clear();
    writeln!(
        out,
        "re-embedded {} memories: {} -> {}{}",
        report.memories,
        report.previous_space.as_deref().unwrap_or("none"),
        report.space,
        match report.resumed {
            0 => String::new(),
            n => format!(" ({n} embedded by the run this one resumed)"),
        }
    )?;
    Ok(())
}

#[cfg(not(feature = "postgres"))]
async fn reembed_postgres(
    url: &str,
    _: std::sync::Arc<dyn memory_core::EmbeddingProvider>,
    _: &mut impl Write,
) -> anyhow::Result<()> {
    settings_without_postgres(url)
}

#[cfg(not(feature = "postgres"))]
fn settings_without_postgres(url: &str) -> anyhow::Result<()> {
    anyhow::bail!(
        "{} is a Postgres URL, but this build of ava has no Postgres support; rebuild it with \
         `--features postgres`",
        crate::config::redact_url(url)
    )
}

/// Refuses `ava reembed --missing` on a store opened without an embedder: nothing would be
/// embedded.
fn with_embedder(opened: &Opened) -> anyhow::Result<()> {
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
    Ok(())
}

async fn embed_missing(settings: &Settings, out: &mut impl Write) -> anyhow::Result<()> {
    if let DbTarget::Postgres(url) = settings.db_target()? {
        return embed_missing_postgres(settings, &url, out).await;
    }
    let opened = settings.open_existing().await?;
    let Some(sqlite) = &opened.sqlite else {
        anyhow::bail!("ava reembed --missing: the store is not a SQLite file");
    };
    with_embedder(&opened)?;
    let bar = progress_bar("embedding")?;
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

/// `ava reembed --missing` on Postgres: connecting with an embedder embeds every memory
/// without a vector, so this counts them before (connected without one) and after.
#[cfg(feature = "postgres")]
async fn embed_missing_postgres(
    settings: &Settings,
    url: &str,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let shown = crate::config::redact_url(url);
    let missing = |s: &StoreStats| s.memories.saturating_sub(s.embedded);
    let plain = memory_postgres::PostgresBackend::connect(
        url,
        None,
        memory_postgres::PostgresConfig::default(),
    )
    .await
    .with_context(|| format!("open memory store {shown}"))?;
    let before = plain.stats().await;
    plain.close();
    let before = missing(&before.with_context(|| format!("count the memories of {shown}"))?);
    let opened = settings.open_existing().await?;
    with_embedder(&opened)?;
    let Some(pg) = &opened.postgres else {
        anyhow::bail!("the store is not a Postgres schema");
    };
    let after = missing(
        &pg.stats()
            .await
            .context("count the memories without a vector")?,
    );
    writeln!(
        out,
        "embedded {} memories; {after} still without a vector",
        before.saturating_sub(after)
    )?;
    Ok(())
}

#[cfg(not(feature = "postgres"))]
async fn embed_missing_postgres(_: &Settings, url: &str, _: &mut impl Write) -> anyhow::Result<()> {
    settings_without_postgres(url)
}
