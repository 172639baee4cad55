//! `ava export`: every memory of one user (each chat and thread, their user-wide facts,
//! their documents), or with `--all` of the whole store, as JSON Lines, losslessly: the first line says what the file is, each
//! other line is one memory as the store holds it (id, scope, text, context, tags, role,
//! source, importance, pinned, times, access, validity, what superseded it). Vectors are
//! not written: `ava import` embeds each memory again with the store's own embedder.
//!
//! The header also gives the number of memories and the SHA-256 of the lines after it, so a
//! file cut short or changed is found before anything is imported.
//!
//! `ava import` reads such a file back ([`restore`]), skipping ids already present, so a
//! second import adds nothing; an export of the imported store is the same file again
//! (but for the header's time). A file that is damaged, or holds a memory of another person
//! or tenant than its header (or the operator) names, or a replacement link to a memory of
//! another chat, is refused whole, before anything is stored.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use memory_core::{
    Filter, MemoryBackend, MemoryEntry, MemoryError, MemoryId, MemoryPatch, NewMemory, Scope,
    Timestamp,
};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::config::Opened;

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

pub(crate) async fn run(opened: &Opened, args: &Args, out: &mut impl Write) -> anyhow::Result<()> {
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
    let mut body = String::new();
    for m in &memories {
        body.push_str(&serde_json::to_string(m).context("write a memory as JSON")?);
        body.push('\n');
    }
    let header = json!({
        MAGIC: VERSION,
        "tenant": tenant,
        "user": args.user,
        "exported_at": Timestamp::now(),
        "memories": memories.len(),
        "sha256": hex(&Sha256::digest(body.as_bytes())),
        "vectors": false,
    });
    let text = format!("{header}\n{body}");
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

/// Lowercase hex of `bytes`.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::new(), |mut out, b| {
        let _ = write!(out, "{b:02x}");
        out
    })
}

/// Whether `path` is an `ava export` file (its first line names the format, even when the
/// rest of that line is damaged).
pub(crate) fn is_export(path: &Path) -> bool {
    let Ok(file) = std::fs::File::open(path) else {
        return false;
    };
    let mut first = Vec::new();
    let _ = std::io::Read::read_to_end(
        &mut std::io::Read::take(std::io::BufReader::new(file), 64),
        &mut first,
    );
    let start: String = String::from_utf8_lossy(&first)
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    start.starts_with(&format!("{{\"{MAGIC}\""))
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

/// Whose memories of a file are restored: every line's person must be the header's (when it
/// names one) and in its tenant; of those, the lines of `user` (when given) in `tenant`.
struct Wanted {
    /// The file's person and tenant, when its header names them.
    of: Option<(String, String)>,
    /// The file's tenant, when its header names one (a user's export always does).
    of_tenant: Option<String>,
    user: Option<String>,
    tenant: Option<String>,
}

impl Wanted {
    /// Why the memory of `scope` on line `n` makes the file unusable, if it does.
    fn foreign(&self, n: usize, scope: &Scope) -> Option<String> {
        let (tenant, user) = (scope.tenant(), scope.user());
        if let Some((of, of_tenant)) = &self.of
            && (user != of || tenant != of_tenant)
        {
            return Some(format!(
                "line {n} holds a memory of user `{user}` in tenant `{tenant}`, but the file is \
                 the export of user `{of}` in tenant `{of_tenant}`"
            ));
        }
        if let Some(of_tenant) = &self.of_tenant
            && tenant != of_tenant
        {
            return Some(format!(
                "line {n} holds a memory of tenant `{tenant}`, but the file is the export of \
                 tenant `{of_tenant}`"
            ));
        }
        None
    }

    /// Whether the memory of `scope` is one to restore.
    fn wants(&self, scope: &Scope) -> bool {
        self.user.as_deref().is_none_or(|u| scope.user() == u)
            && self.tenant.as_deref().is_none_or(|t| scope.tenant() == t)
    }
}

/// The header of the `ava export` file at `path` and the lines after it, each with its
/// number; refuses a file whose header is not one this ava reads.
fn open_export(
    path: &Path,
) -> anyhow::Result<(
    Value,
    impl Iterator<Item = (usize, std::io::Result<String>)>,
)> {
    let shown = path.display();
    let file = std::fs::File::open(path).with_context(|| format!("open {shown}"))?;
    let mut lines = std::io::BufReader::new(file).lines();
    let header: Value = match lines.next() {
        Some(line) => serde_json::from_str(&line.with_context(|| format!("read {shown}"))?)
            .map_err(|e| {
                anyhow::anyhow!(
                    "{shown} is an ava export whose first line (the header) is damaged ({e}); \
                     nothing was imported"
                )
            })?,
        None => bail!("{shown} is empty"),
    };
    if header[MAGIC].as_u64() != Some(VERSION) {
        bail!(
            "{shown} is an ava export of version {}; this ava reads version {VERSION}",
            header[MAGIC]
        );
    }
    Ok((header, lines.enumerate().map(|(i, l)| (i + 2, l))))
}

/// Reads an `ava export` file into `store`: each memory in its own scope with its id, times,
/// access and validity; then the links to what superseded each. Ids already in the store
/// are skipped. `user`, when given, must be the file's person, or picks one person's part of
/// a whole-store export; `tenant` likewise (a person is in the tenant `default` unless
/// named). The whole file is checked first, and nothing is stored when any of it is wrong:
/// fewer or more memories than the header says, lines changed since the export (its
/// checksum), a line that is not a memory, a memory of another person or tenant than the
/// file's, or a memory said to be replaced by one that is neither in its chat in the file
/// nor in the store.
pub(crate) async fn restore(
    store: &dyn MemoryBackend,
    path: &Path,
    user: Option<&str>,
    tenant: Option<&str>,
) -> anyhow::Result<Restored> {
    let shown = path.display();
    let (header, lines) = open_export(path)?;
    let of = header["user"].as_str();
    let of_tenant = header["tenant"].as_str();
    if let (Some(of), Some(user)) = (of, user)
        && of != user
    {
        bail!(
            "{shown} is the export of user `{of}`, not of `{user}`; give --user {of} or no --user"
        );
    }
    if let (Some(of_tenant), Some(tenant)) = (of_tenant, tenant)
        && of_tenant != tenant
    {
        bail!(
            "{shown} holds memories of tenant `{of_tenant}`, not of `{tenant}`; give --tenant \
             {of_tenant} or no --tenant"
        );
    }
    let user = user.or(of);
    let wanted = Wanted {
        of: of.map(|u| {
            let t = of_tenant.unwrap_or(memory_core::DEFAULT_TENANT);
            (u.to_owned(), t.to_owned())
        }),
        of_tenant: of_tenant.map(str::to_owned),
        user: user.map(str::to_owned),
        // One person is in one tenant: the default one unless named.
        tenant: tenant
            .or(of_tenant)
            .or(user.map(|_| memory_core::DEFAULT_TENANT))
            .map(str::to_owned),
    };

    // First the whole file, storing nothing.
    let damaged = |why: String| anyhow::anyhow!("{shown} is damaged: {why}; nothing was imported");
    let mut digest = Sha256::new();
    let mut count = 0u64;
    let mut ids = HashSet::new();
    let mut links = Vec::new();
    for (n, line) in lines {
        let line = line.map_err(|e| damaged(format!("line {n} cannot be read ({e})")))?;
        digest.update(line.as_bytes());
        digest.update(b"\n");
        count += 1;
        let entry: MemoryEntry = serde_json::from_str(&line)
            .map_err(|e| damaged(format!("line {n} is not a memory ({e})")))?;
        if let Some(why) = wanted.foreign(n, &entry.scope) {
            bail!("{shown} is refused: {why}; nothing was imported");
        }
        if wanted.wants(&entry.scope) {
            if let Some(by) = entry.superseded_by {
                links.push((n, entry.scope.clone(), entry.id, by));
            }
            ids.insert((entry.scope, entry.id));
        }
    }
    match header["memories"].as_u64() {
        Some(said) if said == count => {}
        Some(said) => {
            return Err(damaged(format!(
                "its header says {said} memories but it holds {count} (cut short, or lines \
                 added)"
            )));
        }
        None => return Err(damaged("its header gives no number of memories".to_owned())),
    }
    if let Some(said) = header.get("sha256").and_then(Value::as_str)
        && said != hex(&digest.finalize())
    {
        return Err(damaged(
            "its lines are not the ones exported (their SHA-256 differs from the header's)"
                .to_owned(),
        ));
    }
    for (n, scope, id, by) in &links {
        if ids.contains(&(scope.clone(), *by)) {
            continue;
        }
        match store.get(scope, *by).await {
            Ok(_) => {}
            Err(MemoryError::NotFound { .. }) => bail!(
                "{shown} is refused: line {n} says memory {id} was replaced by {by}, which is no \
                 memory of {scope} in the file or the store; nothing was imported"
            ),
            Err(e) => return Err(e).context("look up what replaced a memory"),
        }
    }

    // Then the memories wanted.
    let (_, lines) = open_export(path)?;
    let mut done = Restored::default();
    let mut links = Vec::new();
    for (n, line) in lines {
        let line = line.with_context(|| format!("read line {n} of {shown}"))?;
        let entry: MemoryEntry = serde_json::from_str(&line)
            .with_context(|| format!("line {n} of {shown} changed while it was imported"))?;
        if !wanted.wants(&entry.scope) {
            // A whole-store file holds everyone: another person's line is not damage.
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
