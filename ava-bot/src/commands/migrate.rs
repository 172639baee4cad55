//! `ava migrate --from A --to B`: copies a whole store (or one tenant's or one user's part)
//! into another store of any backend, SQLite file or Postgres, scope by scope and oldest
//! first, each memory as [`export`](super::export) writes it (same ids, times, access,
//! validity and supersession links; the receiving store embeds the text in its own space).
//! Resumable: a scope whose copy is whole is passed over, an interrupted one continues where
//! it stopped (ids already there are kept, never doubled), and at the end every scope's count
//! in B is checked against A's.

use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use memory_core::{ErrorChain, Ingested, MemoryEntry, MemoryId};

use super::export::{all_of, as_new, link_replaced};
use crate::config::{Settings, redact_url};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The store to copy from, which must exist: a SQLite file or a `postgres://` URL.
    #[arg(long, value_name = "DB")]
    from: PathBuf,
    /// The store to copy into (a new SQLite file is created): a SQLite file or a
    /// `postgres://` URL.
    #[arg(long, value_name = "DB")]
    to: PathBuf,
    /// Only the scopes of this tenant.
    #[arg(long)]
    tenant: Option<String>,
    /// Only the scopes of this user (in every tenant, or in --tenant).
    #[arg(long)]
    user: Option<String>,
    /// Memories written per batch.
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    batch: u32,
}

/// What a migration did, over every scope.
#[derive(Debug, Default)]
struct Moved {
    scopes: usize,
    stored: u64,
    present: u64,
    refused: Vec<String>,
    short: Vec<String>,
}

/// How a store is named in what `migrate` prints: a URL without its password.
fn name(db: &Path) -> String {
    let shown = db.display().to_string();
    if shown.starts_with("postgres://") || shown.starts_with("postgresql://") {
        redact_url(&shown)
    } else {
        shown
    }
}

/// Where the SQLite file `db` is, links and `.`/`..` resolved (its directory's, when the file
/// is not there yet); `None` for a URL, or a directory that is not there.
fn located(db: &Path) -> Option<PathBuf> {
    let shown = db.to_string_lossy();
    if shown.starts_with("postgres://") || shown.starts_with("postgresql://") {
        return None;
    }
    if let Ok(found) = std::fs::canonicalize(db) {
        return Some(found);
    }
    let name = db.file_name()?;
    let dir = match db.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    Some(std::fs::canonicalize(dir).ok()?.join(name))
}

/// Whether `a` and `b` name one store (`x.db` and `./x.db`, or a link to it).
fn same_store(a: &Path, b: &Path) -> bool {
    a == b || located(a).is_some_and(|a| Some(a) == located(b))
}

pub(crate) async fn run(
    settings: &Settings,
    args: &Args,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    if same_store(&args.from, &args.to) {
        bail!(
            "--from and --to are the same store ({}); give another one to copy into",
            name(&args.from)
        );
    }
    let at = |db: &PathBuf| Settings {
        db: Some(db.clone()),
        ..settings.clone()
    };
    let from = at(&args.from)
        .open_existing()
        .await
        .context("open the store to copy from (--from)")?;
    let to = at(&args.to)
        .open()
        .await
        .context("open the store to copy into (--to)")?;
    let (source, target) = (from.store.as_ref(), to.store.as_ref());
    let scopes = source
        .scopes(args.tenant.as_deref(), args.user.as_deref())
        .await
        .context("list the scopes to copy")?;
    let mut moved = Moved::default();
    for scope in &scopes {
        let memories = all_of(source, scope).await?;
        let there = target
            .count(scope)
            .await
            .with_context(|| format!("count the memories of {scope} in the copy"))?;
        // An interrupted copy holds part of the scope: what it holds is not written again
        // (read as the original is, a page at a time, not looked up one by one).
        let held: HashSet<MemoryId> = if there == 0 {
            HashSet::new()
        } else {
            all_of(target, scope).await?.iter().map(|m| m.id).collect()
        };
        let todo: Vec<&MemoryEntry> = memories.iter().filter(|m| !held.contains(&m.id)).collect();
        moved.present += (memories.len() - todo.len()) as u64;
        for chunk in todo.chunks(args.batch as usize) {
            let batch = chunk.iter().map(|m| as_new(m)).collect();
            let results = target
                .store_each(scope, batch)
                .await
                .with_context(|| format!("write the memories of {scope}"))?;
            for (m, r) in chunk.iter().zip(results) {
                match r {
                    Ingested::Stored(_) => moved.stored += 1,
                    Ingested::Exists(_) => moved.present += 1,
                    Ingested::Rejected(e) => {
                        moved
                            .refused
                            .push(format!("{scope}, memory {}: {}", m.id, ErrorChain(&e)))
                    }
                }
            }
        }
        // Links last, when both ends are there; setting one again changes nothing.
        for m in &memories {
            if let Some(by) = m.superseded_by
                && let Err(why) = link_replaced(target, scope, m.id, by).await
            {
                moved.refused.push(format!("{scope}, {why}"));
            }
        }
        let copied = target
            .count(scope)
            .await
            .with_context(|| format!("count the memories of {scope} in the copy"))?;
        if copied < memories.len() as u64 {
            moved
                .short
                .push(format!("{scope}: {copied} of {} memories", memories.len()));
        }
        moved.scopes += 1;
    }
    for sqlite in [&from.sqlite, &to.sqlite].into_iter().flatten() {
        sqlite.close().await;
    }
    for line in &moved.refused {
        eprintln!("refused: {line}");
    }
    writeln!(
        out,
        "copied {} scopes from {} to {}: {} memories stored, {} already there, {} refused",
        moved.scopes,
        name(&args.from),
        name(&args.to),
        moved.stored,
        moved.present,
        moved.refused.len()
    )?;
    if !moved.short.is_empty() {
        bail!(
            "the copy holds fewer memories than the original in {} scope(s): {}; run the same \
             command again to continue",
            moved.short.len(),
            moved.short.join("; ")
        );
    }
    writeln!(out, "every scope's count matches")?;
    Ok(())
}
