//! A user's documents as context (cargo feature `documents`, the vector kind): text and
//! Markdown files split into passages with `text-splitter`, stored as notes in a scope of
//! the user's own, and searched for each prompt with `path:start-end` provenance.
//!
//! # Storage
//!
//! Every user's documents live in [`documents_scope`]: the user's tenant and user, in the
//! reserved chat [`DOCUMENTS_CHAT`], which no Telegram chat id can be (those are integers).
//! So the memory sources of a chat never see them, and a user's documents are searched only
//! for that user's requests, whatever chat they speak in. Each passage is a
//! [`MemoryKind::Note`] whose content is the passage, pinned (pruning leaves it alone),
//! tagged [`DOCUMENT_TAG`] and `ava-doc-<first 16 hex digits of the SHA-256 of the file's
//! path>`, and whose context records the line range, the SHA-256 of the whole file and the
//! path: `ava-doc v1 lines=3-17 sha256=<64 hex> path=/home/me/notes.md`. Only
//! [`MemoryBackend`] methods are used (`store_batch`, `by_tags`, `delete`, `search`), so
//! this works on every backend.
//!
//! Re-adding a file whose bytes did not change is a no-op; a changed file's new passages
//! are stored first and only then the old ones deleted, so a failure never leaves the file
//! with fewer passages than before; when several processes index one file at once, the
//! newest version stored stays, once. Listing and removing read every passage, a page at a
//! time.
//!
//! # Limits
//!
//! Passages are [`CHUNK_DESIRED_CHARS`] to [`CHUNK_MAX_CHARS`] characters (Unicode scalar
//! values), split at the largest semantic unit that fits (Markdown: headings, then
//! blocks; text: paragraphs, then lines and sentences). Files must be UTF-8, without NUL
//! bytes, not blank, at most [`MAX_DOCUMENT_BYTES`] long, and named `.md`, `.markdown` or
//! `.txt`; anything else is a [`Error::Document`] naming the file and what was wrong.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use memory_core::{
    Capability, EmbeddingProvider, ErrorChain, Filter, MemoryBackend, MemoryEntry, MemoryError,
    MemoryKind, NewMemory, Scope, SearchMode, SearchRequest, Tag, TagQuery, Timestamp,
    ensure_scope,
};

use crate::error::{Error, Result};
use crate::source::DegradationKind;
use crate::source::{ContextSource, SourceItem, SourceOutput, SourceQuery};

/// The cargo feature that builds document splitting and the document source.
pub const DOCUMENTS_FEATURE: &str = "documents";

/// The chat key of every user's documents scope (see [`documents_scope`]).
pub const DOCUMENTS_CHAT: &str = "ava:documents";

/// The tag every document passage carries.
pub const DOCUMENT_TAG: &str = "ava-doc";

/// Largest file indexed, in bytes (512 KiB): a long set of notes, not a book. With
/// passages of at least [`CHUNK_DESIRED_CHARS`] characters this stays within the few
/// hundred passages a store lists in one call.
pub const MAX_DOCUMENT_BYTES: u64 = 512 * 1024;

/// The size a passage is filled up to, in characters.
pub const CHUNK_DESIRED_CHARS: usize = 500;

/// The largest passage, in characters: a passage may grow past [`CHUNK_DESIRED_CHARS`]
/// up to this to keep a larger semantic unit (a section, a paragraph) whole. About 250
/// tokens of English.
pub const CHUNK_MAX_CHARS: usize = 1000;

/// The file name extensions that are indexed.
pub const DOCUMENT_EXTENSIONS: [&str; 3] = ["md", "markdown", "txt"];

/// What starts the context of every passage.
const CONTEXT_PREFIX: &str = "ava-doc v1 ";

/// The scope holding `scope`'s user's documents: the same tenant and user, the chat
/// [`DOCUMENTS_CHAT`], no thread.
pub fn documents_scope(scope: &Scope) -> Result<Scope> {
    Ok(Scope::for_user(scope.user())?
        .in_tenant(scope.tenant())?
        .in_chat(DOCUMENTS_CHAT)?)
}

/// `Ok` when this build has the `documents` feature, else [`Error::Unavailable`] naming it.
pub fn documents_available() -> Result<()> {
    if cfg!(feature = "documents") {
        Ok(())
    } else {
        Err(unavailable())
    }
}

fn unavailable() -> Error {
    Error::Unavailable {
        what: "document indexing and search",
        feature: DOCUMENTS_FEATURE,
    }
}

/// How a document is split.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DocumentFormat {
    /// Plain text: paragraphs, lines, sentences.
    Text,
    /// Markdown (CommonMark): headings, blocks, lines, sentences.
    Markdown,
}

impl DocumentFormat {
    /// The format of a file named `path` (by its extension, any case), or `None` when it
    /// is not one of [`DOCUMENT_EXTENSIONS`].
    pub fn of_path(path: &Path) -> Option<Self> {
        let ext = path.extension()?.to_str()?.to_ascii_lowercase();
        match ext.as_str() {
            "md" | "markdown" => Some(Self::Markdown),
            "txt" => Some(Self::Text),
            _ => None,
        }
    }
}

/// One passage of a document, with where it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chunk {
    /// The file, as given to [`split_document`].
    pub path: String,
    /// The first line of the passage, 1-based.
    pub start_line: usize,
    /// The last line of the passage, 1-based, inclusive.
    pub end_line: usize,
    /// The passage without surrounding blank lines and trailing whitespace, with `\r\n`
    /// line ends made `\n`.
    pub text: String,
}

impl Chunk {
    /// `path:start-end`, as shown in prompts.
    pub fn provenance(&self) -> String {
        format!("{}:{}-{}", self.path, self.start_line, self.end_line)
    }
}

/// Splits `text` (the contents of `path`) into passages of [`CHUNK_DESIRED_CHARS`] to
/// [`CHUNK_MAX_CHARS`] characters, each with its 1-based line range (a `\r\n` line end
/// counts as one). Blank text gives no passages. Without the `documents` feature this is
/// [`Error::Unavailable`].
pub fn split_document(path: &str, text: &str, format: DocumentFormat) -> Result<Vec<Chunk>> {
    let pieces = split_pieces(text, format)?;
    // Byte offsets of every `\n`: a line number is how many come before a byte, plus one.
    let newlines: Vec<usize> = text
        .bytes()
        .enumerate()
        .filter_map(|(i, b)| (b == b'\n').then_some(i))
        .collect();
    let line_of = |offset: usize| newlines.partition_point(|&n| n < offset) + 1;
    Ok(pieces
        .into_iter()
        .filter(|(_, piece)| !piece.trim().is_empty())
        .map(|(offset, piece)| {
            // Leading blank lines go (the passage starts on its first line of text);
            // indentation stays (a code block's first line).
            let body = piece.trim_start_matches(['\r', '\n']);
            let start = offset + (piece.len() - body.len());
            let body = body.trim_end();
            Chunk {
                path: path.to_owned(),
                start_line: line_of(start),
                end_line: line_of(start + body.len().saturating_sub(1)),
                text: body.replace("\r\n", "\n"),
            }
        })
        .collect())
}

/// The splitter's passages of `text` with their byte offsets.
#[cfg(feature = "documents")]
fn split_pieces(text: &str, format: DocumentFormat) -> Result<Vec<(usize, &str)>> {
    use text_splitter::{ChunkCapacity, ChunkConfig, MarkdownSplitter, TextSplitter};
    let capacity = ChunkCapacity::new(CHUNK_DESIRED_CHARS)
        .with_max(CHUNK_MAX_CHARS)
        .map_err(|e| Error::invalid("passage size", e.to_string()))?;
    let config = ChunkConfig::new(capacity);
    Ok(match format {
        DocumentFormat::Markdown => MarkdownSplitter::new(config).chunk_indices(text).collect(),
        DocumentFormat::Text => TextSplitter::new(config).chunk_indices(text).collect(),
    })
}

#[cfg(not(feature = "documents"))]
fn split_pieces(_text: &str, _format: DocumentFormat) -> Result<Vec<(usize, &str)>> {
    Err(unavailable())
}

/// The SHA-256 of `bytes` as 64 lowercase hex digits.
#[cfg(feature = "documents")]
fn sha256_hex(bytes: &[u8]) -> Result<String> {
    use sha2::{Digest, Sha256};
    use std::fmt::Write as _;
    let digest = Sha256::digest(bytes);
    let mut out = String::with_capacity(64);
    for b in digest.iter() {
        let _ = write!(out, "{b:02x}");
    }
    Ok(out)
}

#[cfg(not(feature = "documents"))]
fn sha256_hex(_bytes: &[u8]) -> Result<String> {
    Err(unavailable())
}

/// A document read from disk and checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Document {
    /// The file's absolute path, symbolic links resolved.
    pub path: String,
    /// How it is split.
    pub format: DocumentFormat,
    /// Its text (a leading byte order mark removed).
    pub text: String,
    /// The SHA-256 of its bytes, 64 lowercase hex digits.
    pub sha256: String,
}

fn bad(path: &Path, problem: impl Into<String>) -> Error {
    Error::Document {
        path: path.display().to_string(),
        problem: problem.into(),
    }
}

/// Reads the text or Markdown file at `path` and checks it: it exists, is a file named
/// `.md`, `.markdown` or `.txt`, holds at most [`MAX_DOCUMENT_BYTES`], is UTF-8 without NUL
/// bytes, and is not blank. Each failure is an [`Error::Document`] saying which.
pub fn read_document(path: &Path) -> Result<Document> {
    documents_available()?;
    let meta = std::fs::metadata(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => bad(path, "does not exist"),
        _ => bad(path, format!("cannot be read: {e}")),
    })?;
    if !meta.is_file() {
        return Err(bad(path, "is not a file"));
    }
    if DocumentFormat::of_path(path).is_none() {
        return Err(bad(
            path,
            "is not a text or Markdown file; expected a name ending in .md, .markdown or .txt",
        ));
    }
    let too_large = |len: u64| {
        bad(
            path,
            format!(
                "is {len} bytes long; at most {MAX_DOCUMENT_BYTES} bytes (512 KiB) are indexed \
                 (split it into smaller files)"
            ),
        )
    };
    if meta.len() > MAX_DOCUMENT_BYTES {
        return Err(too_large(meta.len()));
    }
    let absolute =
        std::fs::canonicalize(path).map_err(|e| bad(path, format!("cannot be resolved: {e}")))?;
    let Some(shown) = absolute.to_str() else {
        return Err(bad(path, "has a name that is not UTF-8; rename it"));
    };
    // A link is judged by what it points to: `notes.txt -> secret.conf` is not a text file.
    let Some(format) = DocumentFormat::of_path(&absolute) else {
        return Err(bad(
            path,
            format!(
                "is a link to {shown}, which is not a text or Markdown file; expected a name \
                 ending in .md, .markdown or .txt"
            ),
        ));
    };
    let bytes = std::fs::read(&absolute).map_err(|e| bad(path, format!("cannot be read: {e}")))?;
    // It may have grown since it was measured.
    if bytes.len() as u64 > MAX_DOCUMENT_BYTES {
        return Err(too_large(bytes.len() as u64));
    }
    if let Some(at) = bytes.iter().position(|&b| b == 0) {
        return Err(bad(
            path,
            format!("looks binary (a NUL byte at offset {at}); expected UTF-8 text"),
        ));
    }
    let text = match std::str::from_utf8(&bytes) {
        Ok(text) => text,
        Err(e) => {
            return Err(bad(
                path,
                format!(
                    "is not UTF-8 text (an invalid byte at offset {}); expected UTF-8 (convert \
                     it first, e.g. with iconv)",
                    e.valid_up_to()
                ),
            ));
        }
    };
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    if text.trim().is_empty() {
        return Err(bad(path, "is empty; there is nothing to index"));
    }
    Ok(Document {
        path: shown.to_owned(),
        format,
        text: text.to_owned(),
        sha256: sha256_hex(&bytes)?,
    })
}

/// What [`add_document`] did with a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// The file was new: its passages were stored.
    Indexed,
    /// The file was indexed already with these bytes: nothing changed.
    Unchanged,
    /// The file had changed: its new passages replaced this many old ones.
    Replaced {
        /// How many passages the old version had.
        removed: usize,
    },
}

/// The outcome of [`add_document`] for one file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Added {
    /// The file's absolute path, as stored.
    pub path: String,
    /// How many passages it has now.
    pub chunks: usize,
    /// What changed.
    pub change: Change,
}

/// Where a stored passage came from, read back from its context.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Origin {
    start_line: usize,
    end_line: usize,
    sha256: String,
    path: String,
}

impl Origin {
    fn context(chunk: &Chunk, sha256: &str) -> String {
        format!(
            "{CONTEXT_PREFIX}lines={}-{} sha256={sha256} path={}",
            chunk.start_line, chunk.end_line, chunk.path
        )
    }

    fn read(entry: &MemoryEntry) -> Option<Self> {
        let rest = entry.context.as_deref()?.strip_prefix(CONTEXT_PREFIX)?;
        let (lines, rest) = rest.strip_prefix("lines=")?.split_once(' ')?;
        let (sha256, path) = rest.strip_prefix("sha256=")?.split_once(' ')?;
        let path = path.strip_prefix("path=")?;
        let (start, end) = lines.split_once('-')?;
        Some(Self {
            start_line: start.parse().ok()?,
            end_line: end.parse().ok()?,
            sha256: sha256.to_owned(),
            path: path.to_owned(),
        })
    }

    fn provenance(&self) -> String {
        format!("{}:{}-{}", self.path, self.start_line, self.end_line)
    }
}

/// The tag of one file's passages: `ava-doc-` and 16 hex digits of its path's SHA-256.
fn file_tag(path: &str) -> Result<Tag> {
    let hash = sha256_hex(path.as_bytes())?;
    Ok(Tag::new(format!("{DOCUMENT_TAG}-{}", &hash[..16]))?)
}

/// The stored passages of the file at `path` (absolute, as stored) in `docs`.
async fn passages_of(
    store: &dyn MemoryBackend,
    docs: &Scope,
    path: &str,
) -> Result<Vec<(MemoryEntry, Origin)>> {
    let limit = store.info().limits.max_results;
    let entries = store
        .by_tags(docs, &TagQuery::any([file_tag(path)?]), limit)
        .await?;
    // Two paths whose hashes share 16 digits would share a tag: the path decides.
    Ok(entries
        .into_iter()
        .filter_map(|e| Origin::read(&e).map(|o| (e, o)))
        .filter(|(_, o)| o.path == path)
        .collect())
}

/// Deletes `entries` from `docs`; one already gone (another process) is not an error.
async fn delete_all(
    store: &dyn MemoryBackend,
    docs: &Scope,
    entries: &[(MemoryEntry, Origin)],
) -> Result<()> {
    for (entry, _) in entries {
        match store.delete(docs, entry.id).await {
            Ok(()) | Err(MemoryError::NotFound { .. }) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Every document passage in `docs`, newest first, read a page at a time (a store lists at
/// most [`Limits::max_results`](memory_core::Limits) per call): each next page is the one
/// created before the oldest instant of the last, and that instant is read whole on its
/// own, so passages that share a timestamp (a file's are stored at once) are neither
/// skipped nor read twice. `false` when that cannot be done: the store has no time filter
/// and the first page is full, or more passages than a page holds share one instant.
async fn every_passage(
    store: &dyn MemoryBackend,
    docs: &Scope,
) -> Result<(Vec<MemoryEntry>, bool)> {
    let limit = store.info().limits.max_results;
    let tags = Some(TagQuery::any([Tag::new(DOCUMENT_TAG)?]));
    let paged = store.capabilities().supports(Capability::TimeFilter);
    let mut out = Vec::new();
    let mut before = None;
    loop {
        let filter = Filter {
            tags: tags.clone(),
            created_before: before,
            ..Filter::default()
        };
        let page = store.recent(docs, limit, &filter).await?;
        let oldest = match page.last() {
            Some(last) if page.len() >= limit => last.created_at,
            _ => {
                out.extend(page);
                return Ok((out, true));
            }
        };
        if !paged {
            out.extend(page);
            return Ok((out, false));
        }
        out.extend(page.into_iter().filter(|e| e.created_at > oldest));
        let instant = Filter {
            tags: tags.clone(),
            created_after: Some(oldest),
            created_before: Some(oldest.plus(std::time::Duration::from_millis(1))),
            ..Filter::default()
        };
        let at = store.recent(docs, limit, &instant).await?;
        let whole = at.len() < limit;
        out.extend(at);
        if !whole {
            return Ok((out, false));
        }
        before = Some(oldest);
    }
}

/// Leaves the file at `path` with one version of its passages after this process stored
/// `chunks` (of the bytes hashed `sha256`), whatever other processes indexing the same file
/// did meanwhile: the newest version stored (latest instant, then the greater hash) stays
/// and every other is deleted; when that version is this one, passages stored twice (two
/// processes indexed the same bytes at one instant) are deleted down to one of each, the
/// smallest id kept. Every process that runs this reaches the same choice for what it sees,
/// and a later one that sees more only deletes what is older or doubled, so concurrent
/// `docs add`s of one file leave exactly one copy.
async fn settle(
    store: &dyn MemoryBackend,
    docs: &Scope,
    path: &str,
    chunks: &[Chunk],
    sha256: &str,
) -> Result<()> {
    let mut stored = passages_of(store, docs, path).await?;
    let Some(newest) = stored
        .iter()
        .map(|(e, o)| (e.created_at, o.sha256.clone()))
        .max()
    else {
        return Ok(());
    };
    stored.sort_by_key(|(e, _)| e.id);
    // How many copies of each passage the newest version should hold.
    let mut wanted: HashMap<(usize, usize, String), usize> = HashMap::new();
    if newest.1 == sha256 {
        for c in chunks {
            *wanted
                .entry((c.start_line, c.end_line, c.text.clone()))
                .or_default() += 1;
        }
    }
    let mut extra = Vec::new();
    for (entry, origin) in stored {
        if (entry.created_at, origin.sha256.as_str()) != (newest.0, newest.1.as_str()) {
            extra.push((entry, origin));
            continue;
        }
        if newest.1 != sha256 {
            continue;
        }
        let key = (origin.start_line, origin.end_line, entry.content.clone());
        match wanted.get_mut(&key) {
            Some(n) if *n > 0 => *n -= 1,
            _ => extra.push((entry, origin)),
        }
    }
    delete_all(store, docs, &extra).await
}

/// Indexes the file at `path` for `scope`'s user (see [`read_document`] for what is
/// accepted): new, its passages are stored; unchanged, nothing happens; changed, its new
/// passages are stored and then every other version deleted (see `settle`: concurrent adds
/// of one file leave one copy). Reading and splitting the file are
/// blocking work (a few milliseconds for a large file), done on the caller's task.
pub async fn add_document(store: &dyn MemoryBackend, scope: &Scope, path: &Path) -> Result<Added> {
    let doc = read_document(path)?;
    let docs = documents_scope(scope)?;
    let chunks = split_document(&doc.path, &doc.text, doc.format)?;
    if chunks.is_empty() {
        return Err(bad(path, "is empty; there is nothing to index"));
    }
    let max = store.info().limits.max_results;
    if chunks.len() > max {
        return Err(bad(
            path,
            format!(
                "splits into {} passages; at most {max} per file are kept (split it into \
                 smaller files)",
                chunks.len()
            ),
        ));
    }
    let old = passages_of(store, &docs, &doc.path).await?;
    if old.len() == chunks.len() && old.iter().all(|(_, o)| o.sha256 == doc.sha256) {
        return Ok(Added {
            path: doc.path,
            chunks: chunks.len(),
            change: Change::Unchanged,
        });
    }
    let tags = [Tag::new(DOCUMENT_TAG)?, file_tag(&doc.path)?];
    let now = Timestamp::now();
    let memories: Vec<NewMemory> = chunks
        .iter()
        .map(|c| {
            NewMemory::new(c.text.clone())
                .with_kind(MemoryKind::Note)
                .with_context(Origin::context(c, &doc.sha256))
                .with_tags(tags.clone())
                .with_source("ava docs")
                .pinned()
                .at(now)
        })
        .collect();
    store.store_batch(&docs, memories).await?;
    settle(store, &docs, &doc.path, &chunks, &doc.sha256).await?;
    Ok(Added {
        path: doc.path,
        chunks: chunks.len(),
        change: if old.is_empty() {
            Change::Indexed
        } else {
            Change::Replaced { removed: old.len() }
        },
    })
}

/// One indexed file, as [`list_documents`] sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DocumentInfo {
    /// The file's absolute path.
    pub path: String,
    /// How many passages it has.
    pub chunks: usize,
    /// The last line any passage reaches.
    pub lines: usize,
    /// When its passages were stored.
    pub added: Timestamp,
}

/// What [`list_documents`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listing {
    /// The files, by path.
    pub documents: Vec<DocumentInfo>,
    /// False when some passages could not be read (see `every_passage`: more of them share
    /// one instant than the store lists in one call), so some files may be missing from
    /// [`Self::documents`].
    pub complete: bool,
}

/// The files indexed for `scope`'s user.
pub async fn list_documents(store: &dyn MemoryBackend, scope: &Scope) -> Result<Listing> {
    documents_available()?;
    let docs = documents_scope(scope)?;
    let (entries, complete) = every_passage(store, &docs).await?;
    let mut files: BTreeMap<String, DocumentInfo> = BTreeMap::new();
    for entry in &entries {
        let Some(origin) = Origin::read(entry) else {
            continue;
        };
        let info = files
            .entry(origin.path.clone())
            .or_insert_with(|| DocumentInfo {
                path: origin.path.clone(),
                chunks: 0,
                lines: 0,
                added: entry.created_at,
            });
        info.chunks += 1;
        info.lines = info.lines.max(origin.end_line);
        info.added = info.added.min(entry.created_at);
    }
    Ok(Listing {
        documents: files.into_values().collect(),
        complete,
    })
}

/// One file [`remove_documents`] removed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Removed {
    /// The file's absolute path.
    pub path: String,
    /// How many passages were deleted.
    pub chunks: usize,
}

/// The absolute form of `path`: symbolic links resolved when it exists, else made
/// absolute as written (a file deleted since it was indexed).
fn absolute(path: &Path) -> Result<PathBuf> {
    std::fs::canonicalize(path)
        .or_else(|_| std::path::absolute(path))
        .map_err(|e| bad(path, format!("cannot be made absolute: {e}")))
}

/// Removes the passages of the file at `path` for `scope`'s user, or, when `path` is a
/// directory, of every indexed file under it. The file need not exist any more. A path
/// with nothing indexed is an [`Error::Document`].
pub async fn remove_documents(
    store: &dyn MemoryBackend,
    scope: &Scope,
    path: &Path,
) -> Result<Vec<Removed>> {
    documents_available()?;
    let docs = documents_scope(scope)?;
    let target = absolute(path)?;
    let Some(target) = target.to_str() else {
        return Err(bad(path, "has a name that is not UTF-8"));
    };
    let exact = passages_of(store, &docs, target).await?;
    let mut unseen = false;
    let mut groups: BTreeMap<String, Vec<(MemoryEntry, Origin)>> = BTreeMap::new();
    if exact.is_empty() {
        // A directory: every indexed file under it.
        let sep = std::path::MAIN_SEPARATOR_STR;
        let prefix = format!("{}{sep}", target.trim_end_matches(sep));
        let (entries, complete) = every_passage(store, &docs).await?;
        unseen = !complete;
        for entry in entries {
            if let Some(origin) = Origin::read(&entry)
                && origin.path.starts_with(&prefix)
            {
                groups
                    .entry(origin.path.clone())
                    .or_default()
                    .push((entry, origin));
            }
        }
    } else {
        groups.insert(target.to_owned(), exact);
    }
    if groups.is_empty() && !unseen {
        return Err(bad(path, "is not indexed (see `ava docs list`)"));
    }
    let mut removed = Vec::with_capacity(groups.len());
    for (path, entries) in groups {
        delete_all(store, &docs, &entries).await?;
        removed.push(Removed {
            path,
            chunks: entries.len(),
        });
    }
    if unseen {
        return Err(bad(
            path,
            format!(
                "could not be removed whole: more passages were stored at one instant than the \
                 store lists at once, so some may remain ({} file(s) removed); run the command \
                 again",
                removed.len()
            ),
        ));
    }
    Ok(removed)
}

/// A [`ContextSource`] for [`crate::SourceKind::Vector`]: the passages of the requesting
/// user's documents that match the observation (hybrid search when the store has vectors,
/// keywords otherwise), each with `path:start-end` as its note. It reads only
/// [`documents_scope`] of the request's scope, and refuses a hit from any other scope.
pub struct DocumentSource {
    store: Arc<dyn MemoryBackend>,
    embedder: Option<Arc<dyn EmbeddingProvider>>,
}

impl fmt::Debug for DocumentSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DocumentSource")
            .field("store", &self.store.info().name)
            .field("embedder", &self.embedder.as_ref().map(|e| e.space()))
            .finish()
    }
}

impl DocumentSource {
    /// A source over `store`; `embedder` (the store's own, if any) embeds the observation
    /// once for every source of a request. Without the `documents` feature this is
    /// [`Error::Unavailable`] naming it.
    pub fn new(
        store: Arc<dyn MemoryBackend>,
        embedder: Option<Arc<dyn EmbeddingProvider>>,
    ) -> Result<Self> {
        documents_available()?;
        Ok(Self { store, embedder })
    }

    /// The search for `query`: hybrid when the store offers it, else keyword, else
    /// semantic; only document passages.
    async fn request(
        &self,
        query: &SourceQuery<'_>,
        out: &mut SourceOutput,
    ) -> Result<SearchRequest> {
        let caps = self.store.capabilities();
        let text = query.observation;
        let mut request = SearchRequest::best(&caps, text);
        if !matches!(request.mode, SearchMode::Keyword) {
            let vector = match &self.embedder {
                Some(embedder) => match query.embeddings.get(embedder.as_ref()).await {
                    Ok(v) => Some(v),
                    Err(e) if caps.supports(Capability::KeywordSearch) => {
                        out.degrade(
                            DegradationKind::EmbeddingFailed,
                            format!(
                                "asked hybrid, got keyword: embedding the observation failed: {}",
                                ErrorChain(&e)
                            ),
                        );
                        request = SearchRequest::keyword(text);
                        None
                    }
                    Err(e) => return Err(e),
                },
                None => match self.store.info().embedding_space {
                    Some(space) => query.embeddings.cached(&space).await,
                    None => None,
                },
            };
            if let Some(v) = vector {
                request = request.with_vector(v);
            }
        }
        let limit = query
            .params
            .max_items
            .clamp(1, self.store.info().limits.max_results);
        let mut filter = Filter {
            kinds: vec![MemoryKind::Note],
            ..Filter::default()
        };
        if caps.supports(Capability::TagFilter) {
            filter.tags = Some(TagQuery::any([Tag::new(DOCUMENT_TAG)?]));
        }
        Ok(request
            .limit(limit)
            .filter(filter)
            .without_access_tracking())
    }
}

#[async_trait]
impl ContextSource for DocumentSource {
    fn name(&self) -> &str {
        "documents"
    }

    async fn fetch(&self, query: &SourceQuery<'_>, out: &mut SourceOutput) -> Result<()> {
        let docs = documents_scope(query.scope)?;
        let request = self.request(query, out).await?;
        out.set_search(match request.mode {
            SearchMode::Hybrid(_) => "hybrid",
            SearchMode::Keyword => "keyword",
            SearchMode::Semantic => "semantic",
        });
        let hits = self.store.search(&docs, &request).await?;
        // Backends check this already; a passage of anyone else must never get through.
        ensure_scope(
            &self.store.info().name,
            &docs,
            hits.iter().map(|h| &h.entry),
        )?;
        for hit in hits {
            let Some(origin) = Origin::read(&hit.entry) else {
                continue;
            };
            let mut item = SourceItem::text(format!("doc:{}", hit.entry.id), hit.entry.content)
                .with_similarity(hit.score)
                .with_note(origin.provenance());
            item.breakdown = hit.breakdown;
            out.push(item);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(feature = "documents")]
    fn lines(chunks: &[Chunk]) -> Vec<(usize, usize)> {
        chunks.iter().map(|c| (c.start_line, c.end_line)).collect()
    }

    /// Paragraphs of about 300 characters, so two fit a passage and a third does not.
    #[cfg(feature = "documents")]
    fn paragraph(word: &str) -> String {
        format!("{word} ")
            .repeat(300 / (word.len() + 1))
            .trim_end()
            .to_owned()
    }

    #[cfg(feature = "documents")]
    #[test]
    fn text_passages_know_their_lines() {
        let text = format!(
            "\n{}\n\n{}\n\n\n{}\n{}\n",
            paragraph("alpha"),
            paragraph("beta"),
            paragraph("gamma"),
            paragraph("delta")
        );
        let chunks = split_document("/n.txt", &text, DocumentFormat::Text).unwrap();
        assert_eq!(lines(&chunks), vec![(2, 4), (7, 8)], "{chunks:#?}");
        assert!(chunks[0].text.starts_with("alpha") && chunks[0].text.ends_with("beta"));
        assert!(chunks[1].text.starts_with("gamma") && chunks[1].text.ends_with("delta"));
        assert_eq!(chunks[1].provenance(), "/n.txt:7-8");
        for c in &chunks {
            assert!(c.text.chars().count() <= CHUNK_MAX_CHARS);
        }
    }

    #[cfg(feature = "documents")]
    #[test]
    fn markdown_splits_at_headings_with_their_lines() {
        let text = format!(
            "# Cats\n\n{}\n\n## Food\n\n{}\n\n# Trains\n\n{}\n",
            paragraph("pixel"),
            paragraph("kibble"),
            paragraph("oslo")
        );
        let chunks = split_document("/n.md", &text, DocumentFormat::Markdown).unwrap();
        // The first heading's section (with its sub-section) is 600+ characters, under the
        // maximum: kept whole. The second heading starts a passage of its own.
        assert_eq!(lines(&chunks), vec![(1, 7), (9, 11)], "{chunks:#?}");
        assert!(chunks[0].text.starts_with("# Cats"));
        assert!(chunks[1].text.starts_with("# Trains"));
    }

    #[cfg(feature = "documents")]
    #[test]
    fn crlf_line_ends_count_once_and_are_normalised() {
        let lf = format!(
            "# Cats\n\n{}\n\n# Trains\n\n{}\n{}\n{}\n",
            paragraph("pixel"),
            paragraph("oslo"),
            paragraph("bergen"),
            paragraph("tromso")
        );
        let crlf = lf.replace('\n', "\r\n");
        let a = split_document("/a.md", &lf, DocumentFormat::Markdown).unwrap();
        let b = split_document("/a.md", &crlf, DocumentFormat::Markdown).unwrap();
        assert_eq!(lines(&a), lines(&b));
        assert_eq!(lines(&b), vec![(1, 3), (5, 9)], "{b:#?}");
        assert_eq!(a, b, "the same passages, \\r\\n made \\n");
        assert!(b.iter().all(|c| !c.text.contains('\r')));
    }

    #[cfg(feature = "documents")]
    #[test]
    fn a_long_line_is_split_and_keeps_its_line_number() {
        let text = format!("intro\n{}\nend", "word ".repeat(500));
        let chunks = split_document("/l.txt", &text, DocumentFormat::Text).unwrap();
        assert!(chunks.len() >= 3, "{chunks:#?}");
        assert_eq!(chunks.first().map(|c| c.start_line), Some(1));
        assert!(
            chunks
                .iter()
                .all(|c| c.end_line <= 3 && c.start_line <= c.end_line)
        );
        assert_eq!(chunks.last().map(|c| c.end_line), Some(3));
        assert!(
            chunks
                .iter()
                .all(|c| c.text.chars().count() <= CHUNK_MAX_CHARS)
        );
    }

    #[test]
    fn origins_round_trip_through_the_context() {
        let chunk = Chunk {
            path: "/home/me/my notes.md".into(),
            start_line: 3,
            end_line: 17,
            text: "x".into(),
        };
        let mut entry = NewMemory::new("x")
            .with_context(Origin::context(&chunk, &"ab".repeat(32)))
            .into_entry(&Scope::for_user("u").unwrap(), Timestamp::now(), false);
        let origin = Origin::read(&entry).unwrap();
        assert_eq!(origin.path, "/home/me/my notes.md");
        assert_eq!(origin.provenance(), chunk.provenance());
        assert_eq!(origin.sha256, "ab".repeat(32));
        entry.context = Some("remembered with `ava remember`".into());
        assert_eq!(Origin::read(&entry), None);
    }

    #[test]
    fn the_documents_scope_is_the_users_own() {
        let chat = Scope::for_user("42").unwrap().in_chat("7").unwrap();
        let docs = documents_scope(&chat).unwrap();
        assert_eq!(docs.user(), "42");
        assert_eq!(docs.chat(), Some(DOCUMENTS_CHAT));
        let other = documents_scope(&Scope::for_user("43").unwrap()).unwrap();
        assert_ne!(docs, other);
        assert_eq!(
            docs,
            documents_scope(&Scope::for_user("42").unwrap()).unwrap()
        );
    }

    #[test]
    fn formats_are_read_from_the_extension() {
        assert_eq!(
            DocumentFormat::of_path(Path::new("a/B.MD")),
            Some(DocumentFormat::Markdown)
        );
        assert_eq!(
            DocumentFormat::of_path(Path::new("x.markdown")),
            Some(DocumentFormat::Markdown)
        );
        assert_eq!(
            DocumentFormat::of_path(Path::new("x.txt")),
            Some(DocumentFormat::Text)
        );
        assert_eq!(DocumentFormat::of_path(Path::new("x.pdf")), None);
        assert_eq!(DocumentFormat::of_path(Path::new("README")), None);
    }

    /// Runs in `cargo test -p hydrate --lib` (features off; `.ci/run` does so).
    #[cfg(not(feature = "documents"))]
    #[test]
    fn without_the_feature_every_entry_point_names_the_flag() {
        let unavailable = |err: Error| {
            assert!(
                matches!(
                    err,
                    Error::Unavailable {
                        feature: "documents",
                        ..
                    }
                ),
                "{err:?}"
            );
            assert!(
                err.to_string().contains("cargo feature `documents`"),
                "{err}"
            );
        };
        let store: Arc<dyn MemoryBackend> = Arc::new(memory_inmem::InMemoryBackend::new(None));
        unavailable(DocumentSource::new(store, None).unwrap_err());
        unavailable(split_document("/a.txt", "hello", DocumentFormat::Text).unwrap_err());
        unavailable(read_document(Path::new("/no/such/file.md")).unwrap_err());
        unavailable(documents_available().unwrap_err());
    }
}
