//! `ava export`: every memory of one user (each chat and thread, their user-wide facts,
//! their documents), or with `--all` of the whole store, as JSON Lines, losslessly: the first line says what the file is, each
//! other line is one memory as the store holds it (id, scope, text, context, tags, role,
//! source, importance, pinned, times, access, validity, what superseded it). Vectors are
//! not written: `ava import` embeds each memory again with the store's own embedder.
//!
//! `ava import` reads such a file back ([`restore`]), skipping ids already present, so a
//! second import adds nothing; an export of the imported store is the same file again
//! (but for the header's time).

use std::collections::HashSet;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use memory_core::{
    Filter, MemoryBackend, MemoryEntry, MemoryError, MemoryId, MemoryPatch, NewMemory, Scope,
    Timestamp,
};
use serde_json::{Value, json};

use crate::config::Settings;

/// The first line's key and the format's version.
const MAGIC: &str = "ava_export";
const VERSION: u64 = 1;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The person whose memories to export.
    #[arg(long, required_unless_present = "all", conflicts_with = "all")]
    user: Option<String>,
    /// With --user, the tenant they belong to [default: `default`]; with --all, only this
    /// tenant's memories.
    #[arg(long)]
    tenant: Option<String>,
    /// Every memory of the store (or of --tenant), every person's.
    #[arg(long)]
    all: bool,
    /// Write here instead of to standard output.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
}

/// Every memory of `scope`, superseded and ended ones included, oldest first: read newest
/// first a page at a time, each page the memories created before the last page's oldest.
pub(crate) async fn all_of(
    store: &dyn MemoryBackend,
    scope: &Scope,
) -> anyhow::Result<Vec<MemoryEntry>> {
    let page = store.info().limits.max_results;
    let mut all: Vec<MemoryEntry> = Vec::new();
    let mut seen = HashSet::new();
    let mut before: Option<Timestamp> = None;
    loop {
        let filter = Filter {
            include_superseded: true,
            // The oldest instant of the last page again (ties across a page boundary).
            created_before: before.map(|t| t.plus(std::time::Duration::from_millis(1))),
            ..Filter::default()
        };
        let got = store
            .recent(scope, page, &filter)
            .await
            .with_context(|| format!("read the memories of {scope}"))?;
        let full = got.len() == page;
        let oldest = got.iter().map(|e| e.created_at).min();
        let mut new = 0;
        for e in got {
            if seen.insert(e.id) {
                all.push(e);
                new += 1;
            }
        }
        if !full || new == 0 {
            break;
        }
        before = oldest;
    }
    let expected = store.count(scope).await.context("count the memories")?;
    if all.len() as u64 != expected {
        bail!(
            "read {} memories of {scope} but it holds {expected} (more than {page} created in \
             one millisecond?); nothing was written",
            all.len()
        );
    }
    all.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.id.cmp(&b.id)));
    Ok(all)
}

pub(crate) async fn run(
    settings: &Settings,
    args: &Args,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let opened = settings.open_existing().await?;
    let store = opened.store.as_ref();
    // A person is in one tenant (the default one unless named); the whole store is every
    // tenant unless one is named.
    let tenant = match (&args.user, &args.tenant) {
        (Some(_), None) => Some(memory_core::DEFAULT_TENANT.to_owned()),
        (_, t) => t.clone(),
    };
    let mut memories = Vec::new();
    for scope in store
        .scopes(tenant.as_deref(), args.user.as_deref())
        .await
        .context("list the scopes to export")?
    {
        memories.extend(all_of(store, &scope).await?);
    }
    let header = json!({
        MAGIC: VERSION,
        "tenant": tenant,
        "user": args.user,
        "exported_at": Timestamp::now(),
        "memories": memories.len(),
        "vectors": false,
    });
    let mut text = format!("{header}\n");
    for m in &memories {
        text.push_str(&serde_json::to_string(m).context("write a memory as JSON")?);
        text.push('\n');
    }
    match &args.out {
        Some(path) => {
            std::fs::write(path, &text).with_context(|| format!("write {}", path.display()))?;
            let whose = match &args.user {
                Some(user) => format!("user {user}"),
                None => "the store".to_owned(),
            };
            eprintln!(
                "exported {} memories of {whose} to {}",
                memories.len(),
                path.display()
            );
        }
        None => out.write_all(text.as_bytes())?,
    }
    if let Some(sqlite) = &opened.sqlite {
        sqlite.close().await;
    }
    Ok(())
}

/// Whether `path` is an `ava export` file (its first line names the format).
pub(crate) fn is_export(path: &Path) -> bool {
    let Ok(file) = std::fs::File::open(path) else {
        return false;
    };
    let mut first = String::new();
    let _ = std::io::BufReader::new(file).read_line(&mut first);
    serde_json::from_str::<Value>(&first).is_ok_and(|v| v.get(MAGIC).is_some())
}

/// `entry` as a memory to store again elsewhere: the same id, times, access and validity
/// (the link to what superseded it is set once that one is stored too). No vector: the
/// receiving store embeds it in its own space.
pub(crate) fn as_new(entry: &MemoryEntry) -> NewMemory {
    NewMemory {
        id: Some(entry.id),
        kind: entry.kind,
        content: entry.content.clone(),
        context: entry.context.clone(),
        tags: entry.tags.clone(),
        role: entry.role,
        source: entry.source.clone(),
        importance: entry.importance,
        pinned: entry.pinned,
        created_at: Some(entry.created_at),
        valid_from: entry.valid_from,
        valid_until: entry.valid_until,
        embedding: None,
        accessed: Some((entry.accessed_at, entry.access_count)),
    }
}

/// What [`restore`] did.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Restored {
    pub(crate) stored: u64,
    pub(crate) present: u64,
    pub(crate) refused: Vec<String>,
}

/// Reads an `ava export` file into `store`: each memory in its own scope with its id, times,
/// access and validity; then the links to what superseded each. Ids already in the store
/// are skipped. `user`, when given, must be the file's person, or picks one person's part of
/// a whole-store export. A line that is not a memory of the file's (or that) person, or that
/// the store refuses, is reported with its number and skipped; the rest is restored.
pub(crate) async fn restore(
    store: &dyn MemoryBackend,
    path: &Path,
    user: Option<&str>,
) -> anyhow::Result<Restored> {
    let file = std::fs::File::open(path).with_context(|| format!("open {}", path.display()))?;
    let mut lines = std::io::BufReader::new(file).lines();
    let header: Value = match lines.next() {
        Some(line) => serde_json::from_str(&line.context("read the header")?)
            .context("the first line is not JSON")?,
        None => bail!("{} is empty", path.display()),
    };
    if header[MAGIC].as_u64() != Some(VERSION) {
        bail!(
            "{} is an ava export of version {} ; this ava reads version {VERSION}",
            path.display(),
            header[MAGIC]
        );
    }
    let of = header["user"].as_str();
    let user = match (of, user) {
        (Some(of), Some(user)) if of != user => bail!(
            "{} is the export of user `{of}`, not of `{user}`; give --user {of} or no --user",
            path.display()
        ),
        (Some(of), _) => Some(of),
        (None, user) => user,
    };
    let mut done = Restored::default();
    let mut links = Vec::new();
    for (i, line) in lines.enumerate() {
        let n = i + 2;
        let line = line.with_context(|| format!("read line {n}"))?;
        if line.trim().is_empty() {
            continue;
        }
        let entry: MemoryEntry = match serde_json::from_str(&line) {
            Ok(e) => e,
            Err(e) => {
                done.refused.push(format!("line {n}: not a memory ({e})"));
                continue;
            }
        };
        if let Some(user) = user
            && entry.scope.user() != user
        {
            // A whole-store file holds everyone: another person's line is not damage.
            if of.is_some() {
                done.refused.push(format!(
                    "line {n}: a memory of user `{}`, not `{user}`",
                    entry.scope.user()
                ));
            }
            continue;
        }
        match store.get(&entry.scope, entry.id).await {
            Ok(_) => {
                done.present += 1;
                continue;
            }
            Err(MemoryError::NotFound { .. }) => {}
            Err(e) => return Err(e).context("look the memory up"),
        }
        match store.store(&entry.scope, as_new(&entry)).await {
            Ok(_) => {
                done.stored += 1;
                if let Some(by) = entry.superseded_by {
                    links.push((entry.scope, entry.id, by));
                }
            }
            Err(e) => done
                .refused
                .push(format!("line {n}: {}", memory_core::ErrorChain(&e))),
        }
    }
    for (scope, id, by) in links {
        if let Err(why) = link_replaced(store, &scope, id, by).await {
            done.refused.push(why);
        }
    }
    Ok(done)
}

/// Links a restored or copied memory to the one that replaced it (set once both are
/// stored; setting it again changes nothing), or says why it could not.
pub(crate) async fn link_replaced(
    store: &dyn MemoryBackend,
    scope: &Scope,
    id: MemoryId,
    by: MemoryId,
) -> Result<(), String> {
    let patch = MemoryPatch {
        superseded_by: Some(Some(by)),
        ..MemoryPatch::default()
    };
    store
        .update(scope, id, patch)
        .await
        .map(|_| ())
        .map_err(|e| {
            format!(
                "memory {id}: could not link it to {by}, which replaced it: {}",
                memory_core::ErrorChain(&e)
            )
        })
}
