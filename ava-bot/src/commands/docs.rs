//! `ava docs add|list|remove`: a user's text and Markdown files, split into passages that
//! the bot, `ava chat` and `ava context` draw on (hydrate's `documents` feature).

use std::io::Write;
use std::path::{Path, PathBuf};

use hydrate::{Change, DOCUMENT_EXTENSIONS, DocumentFormat};
use memory_core::Scope;

use crate::config::Settings;
use crate::shared::error_chain;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(subcommand)]
    command: DocsCommand,
}

#[derive(Debug, clap::Subcommand)]
enum DocsCommand {
    /// Index files for a user (a directory: its .md, .markdown and .txt files, recursively,
    /// hidden ones left out). Prints what happened to each file; an unchanged file is left
    /// as it is, a changed one replaced. Exits 1 if any file failed; the others are kept.
    Add {
        /// User id (documents belong to the user, in every chat).
        #[arg(long)]
        user: String,
        /// Files or directories.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
    },
    /// List a user's indexed files: passages, lines, when added.
    List {
        /// User id.
        #[arg(long)]
        user: String,
    },
    /// Remove indexed files of a user (a directory: every file indexed under it). The files
    /// themselves are not touched and need not exist any more.
    Remove {
        /// User id.
        #[arg(long)]
        user: String,
        /// Files or directories, as they were added.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
    },
}

pub(crate) async fn run(
    settings: &Settings,
    args: &Args,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    // A build without the feature says so before it opens anything.
    hydrate::documents_available()?;
    match &args.command {
        DocsCommand::Add { user, paths } => {
            add(settings, &Scope::for_user(user)?, paths, out).await
        }
        DocsCommand::List { user } => list(settings, &Scope::for_user(user)?, out).await,
        DocsCommand::Remove { user, paths } => {
            remove(settings, &Scope::for_user(user)?, paths, out).await
        }
    }
}

/// A path to index, or why a path named on the command line gives none.
type Found = Result<PathBuf, (PathBuf, String)>;

/// The files `path` names: itself, or a directory's text and Markdown files (recursively,
/// sorted, hidden entries left out); symbolic links inside a directory are not followed but
/// added to `left_out`.
fn files_of(path: &Path, found: &mut Vec<Found>, left_out: &mut Vec<PathBuf>) {
    if !path.is_dir() {
        // Files (and missing paths) go to the indexer, which says what is wrong with them.
        found.push(Ok(path.to_path_buf()));
        return;
    }
    let before = found.len();
    walk(path, found, left_out);
    if found.len() == before {
        found.push(Err((
            path.to_path_buf(),
            format!(
                "is a directory with no .{} files in it",
                DOCUMENT_EXTENSIONS.join(", .")
            ),
        )));
    }
}

fn walk(dir: &Path, found: &mut Vec<Found>, left_out: &mut Vec<PathBuf>) {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) => {
            found.push(Err((dir.to_path_buf(), format!("cannot be read: {e}"))));
            return;
        }
    };
    let mut paths: Vec<(PathBuf, std::fs::FileType)> = Vec::new();
    for entry in entries {
        match entry.and_then(|e| Ok((e.path(), e.file_type()?))) {
            Ok(p) => paths.push(p),
            Err(e) => found.push(Err((dir.to_path_buf(), format!("cannot be listed: {e}")))),
        }
    }
    paths.sort_by(|a, b| a.0.cmp(&b.0));
    for (path, kind) in paths {
        let hidden = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with('.'));
        if hidden {
            continue;
        }
        if kind.is_symlink() {
            // Followed, a link would bring a file from outside the tree into prompts (and
            // to the model's provider), where `docs remove DIR` could not take it out.
            left_out.push(path);
        } else if kind.is_dir() {
            walk(&path, found, left_out);
        } else if DocumentFormat::of_path(&path).is_some() && kind.is_file() {
            found.push(Ok(path));
        }
    }
}

/// `1 chunk`, `3 chunks`.
fn chunks(n: usize) -> String {
    if n == 1 {
        "1 chunk".to_owned()
    } else {
        format!("{n} chunks")
    }
}

async fn add(
    settings: &Settings,
    scope: &Scope,
    paths: &[PathBuf],
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let (mut found, mut left_out) = (Vec::new(), Vec::new());
    for path in paths {
        files_of(path, &mut found, &mut left_out);
    }
    for link in &left_out {
        writeln!(
            out,
            "left out: {} (a symbolic link; links inside a directory are not followed, name \
             the file itself to index it)",
            super::terminal_safe(&link.display().to_string(), false)
        )?;
    }
    let opened = settings.open().await?;
    let (mut failed, total) = (0usize, found.len());
    for item in found {
        let result = match item {
            Ok(path) => hydrate::add_document(opened.store.as_ref(), scope, &path)
                .await
                .map_err(|e| (path, error_chain(&e.into()))),
            Err(e) => Err(e),
        };
        match result {
            Ok(added) => {
                let what = match added.change {
                    Change::Indexed => format!("indexed {}", chunks(added.chunks)),
                    Change::Unchanged => format!("unchanged ({})", chunks(added.chunks)),
                    Change::Replaced { removed } => {
                        format!("replaced {} with {}", chunks(removed), added.chunks)
                    }
                };
                writeln!(out, "{what}: {}", super::terminal_safe(&added.path, false))?;
            }
            Err((path, reason)) => {
                failed += 1;
                // The error names the file already when the indexer refused it.
                let shown = path.display().to_string();
                let reason = reason
                    .strip_prefix(&format!("{shown}: "))
                    .unwrap_or(&reason)
                    .to_owned();
                writeln!(
                    out,
                    "skipped: {} ({})",
                    super::terminal_safe(&shown, false),
                    super::terminal_safe(&reason, false)
                )?;
            }
        }
    }
    if failed > 0 {
        out.flush()?;
        anyhow::bail!("{failed} of {total} file(s) were not indexed; the others were");
    }
    Ok(())
}

async fn list(settings: &Settings, scope: &Scope, out: &mut impl Write) -> anyhow::Result<()> {
    let opened = settings.open_existing().await?;
    let listing = hydrate::list_documents(opened.store.as_ref(), scope).await?;
    if listing.documents.is_empty() {
        eprintln!("no documents indexed for user {}", scope.user());
    }
    for d in &listing.documents {
        writeln!(
            out,
            "{}  {}  {} lines  added {}",
            super::terminal_safe(&d.path, false),
            chunks(d.chunks),
            d.lines,
            d.added.to_datetime().format("%Y-%m-%d %H:%M UTC")
        )?;
    }
    if !listing.complete {
        eprintln!(
            "note: more passages share one instant than the store lists at once ({}); some \
             files may be missing above",
            opened.store.info().limits.max_results
        );
    }
    Ok(())
}

async fn remove(
    settings: &Settings,
    scope: &Scope,
    paths: &[PathBuf],
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let opened = settings.open_existing().await?;
    let mut failed = 0usize;
    for path in paths {
        match hydrate::remove_documents(opened.store.as_ref(), scope, path).await {
            Ok(removed) => {
                for r in removed {
                    writeln!(
                        out,
                        "removed {}: {}",
                        chunks(r.chunks),
                        super::terminal_safe(&r.path, false)
                    )?;
                }
            }
            Err(e) => {
                failed += 1;
                writeln!(
                    out,
                    "not removed: {}",
                    super::terminal_safe(&error_chain(&e.into()), false)
                )?;
            }
        }
    }
    if failed > 0 {
        out.flush()?;
        anyhow::bail!("{failed} of {} path(s) were not removed", paths.len());
    }
    Ok(())
}
