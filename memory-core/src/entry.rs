//! What a memory is: ids, tags, kinds, the stored `MemoryEntry`, and the `NewMemory` and
//! `MemoryPatch` inputs that create and change one.

use std::collections::{BTreeSet, HashSet};
use std::fmt;
use std::ops::Range;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::embedding::Embedding;
use crate::error::{MemoryError, Result};
use crate::scope::Scope;
use crate::time::Timestamp;

/// Default largest accepted memory content, in bytes (64 KiB).
pub const DEFAULT_MAX_CONTENT_BYTES: usize = 64 * 1024;

/// The tag every part of a memory split by [`NewMemory::split_to_fit`] carries, followed by
/// the id of its first part: the parts of one long message are the memories tagged alike.
pub const PART_OF_TAG_PREFIX: &str = "part-of:";

/// Longest accepted tag, in bytes.
pub const MAX_TAG_BYTES: usize = 64;

/// The most of one message (or fact, or answer) that is kept, in bytes (1 MiB). Of a longer
/// text [`NewMemory::split_to_fit`] keeps the first this many bytes, cut at a break where
/// there is one, and ends what it keeps with a line saying how much was left out
/// ([`MessageCut`]). With [`embeds_head_only`] it bounds what one call may store and embed,
/// whatever door the text came through.
pub const MAX_MESSAGE_BYTES: usize = 1024 * 1024;

/// The tag every part of a memory split by [`NewMemory::split_to_fit`] carries to say which
/// part it is, followed by `<k>-of-<n>`.
const PART_TAG_PREFIX: &str = "part:";

/// The id of a memory: a UUIDv7, so ids sort roughly by creation time and are unique
/// across every scope and backend.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct MemoryId(Uuid);

impl MemoryId {
    /// A fresh id.
    pub fn new() -> Self {
        Self(Uuid::now_v7())
    }

    /// Wraps an existing UUID (e.g. one derived deterministically for idempotent imports).
    pub fn from_uuid(uuid: Uuid) -> Self {
        Self(uuid)
    }

    /// The underlying UUID.
    pub fn as_uuid(&self) -> &Uuid {
        &self.0
    }
}

impl Default for MemoryId {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Display for MemoryId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0.hyphenated(), f)
    }
}

impl fmt::Debug for MemoryId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MemoryId({})", self.0.hyphenated())
    }
}

impl FromStr for MemoryId {
    type Err = MemoryError;

    fn from_str(s: &str) -> Result<Self> {
        Uuid::parse_str(s.trim()).map(Self).map_err(|_| {
            MemoryError::invalid(
                "memory id",
                format!("`{s}` is not a memory id; expected a UUID such as 0192f1c4-7d0e-7c3a-9b1e-2f4a5c6d7e8f"),
            )
        })
    }
}

/// A label on a memory. Stored lowercase; 1 to [`MAX_TAG_BYTES`] bytes with no whitespace
/// or control characters, so tags survive any storage and command line unchanged.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Tag(String);

impl Tag {
    /// Validates and lowercases a tag.
    pub fn new(tag: impl AsRef<str>) -> Result<Self> {
        let raw = tag.as_ref();
        let tag = raw.trim().to_lowercase();
        if tag.is_empty() {
            return Err(MemoryError::invalid("tag", "must not be empty"));
        }
        if tag.len() > MAX_TAG_BYTES {
            return Err(MemoryError::invalid(
                "tag",
                format!(
                    "`{raw}` is {} bytes long, at most {MAX_TAG_BYTES} are allowed",
                    tag.len()
                ),
            ));
        }
        if tag.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(MemoryError::invalid(
                "tag",
                format!("`{raw}` contains whitespace; use e.g. `-` or `_` between words"),
            ));
        }
        Ok(Self(tag))
    }

    /// The tag text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for Tag {
    type Error = MemoryError;
    fn try_from(s: String) -> Result<Self> {
        Self::new(s)
    }
}

impl From<Tag> for String {
    fn from(t: Tag) -> Self {
        t.0
    }
}

impl fmt::Display for Tag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Tag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// A sorted, de-duplicated set of tags.
pub type TagSet = BTreeSet<Tag>;

/// Parses several tags at once.
pub fn tags<I, S>(items: I) -> Result<TagSet>
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    items.into_iter().map(Tag::new).collect()
}

/// What sort of thing a memory records.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum MemoryKind {
    /// A turn of a conversation (see [`MemoryEntry::role`]).
    #[default]
    Message,
    /// A long-term fact about the user or the world, kept on purpose.
    Fact,
    /// Anything else worth keeping: a summary, a document excerpt, a tool result.
    Note,
}

impl MemoryKind {
    /// The lowercase name, as stored.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Message => "message",
            Self::Fact => "fact",
            Self::Note => "note",
        }
    }

    /// Parses the stored name.
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "message" => Ok(Self::Message),
            "fact" => Ok(Self::Fact),
            "note" => Ok(Self::Note),
            other => Err(MemoryError::invalid(
                "memory kind",
                format!("`{other}` is not one of message, fact, note"),
            )),
        }
    }
}

/// Who said a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The person talking to the agent.
    User,
    /// The agent.
    Assistant,
    /// The operator or application.
    System,
    /// A tool's output.
    Tool,
}

impl Role {
    /// The lowercase name, as stored.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::User => "user",
            Self::Assistant => "assistant",
            Self::System => "system",
            Self::Tool => "tool",
        }
    }

    /// Parses the stored name.
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "user" => Ok(Self::User),
            "assistant" => Ok(Self::Assistant),
            "system" => Ok(Self::System),
            "tool" => Ok(Self::Tool),
            other => Err(MemoryError::invalid(
                "role",
                format!("`{other}` is not one of user, assistant, system, tool"),
            )),
        }
    }
}

/// How much a memory matters, from 0 (trivia) to 1 (essential). Default 0.5.
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd, Serialize, Deserialize)]
#[serde(try_from = "f32", into = "f32")]
pub struct Importance(f32);

impl Importance {
    /// Validates a value in `0.0..=1.0`.
    pub fn new(value: f32) -> Result<Self> {
        if (0.0..=1.0).contains(&value) {
            Ok(Self(value))
        } else {
            Err(MemoryError::invalid(
                "importance",
                format!("{value} is outside 0.0..=1.0"),
            ))
        }
    }

    /// The value, in `0.0..=1.0`.
    pub fn get(self) -> f32 {
        self.0
    }
}

impl Default for Importance {
    fn default() -> Self {
        Self(0.5)
    }
}

impl TryFrom<f32> for Importance {
    type Error = MemoryError;
    fn try_from(v: f32) -> Result<Self> {
        Self::new(v)
    }
}

impl From<Importance> for f32 {
    fn from(i: Importance) -> Self {
        i.0
    }
}

/// A stored memory, as a backend returns it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MemoryEntry {
    /// Unique id.
    pub id: MemoryId,
    /// The identity it belongs to.
    pub scope: Scope,
    /// What sort of memory it is.
    pub kind: MemoryKind,
    /// The remembered text.
    pub content: String,
    /// How or why it was learned ("user said so in chat", "imported from export.json").
    pub context: Option<String>,
    /// Labels.
    pub tags: TagSet,
    /// Who said it, for messages.
    pub role: Option<Role>,
    /// Where it came from (`telegram`, `cli`, `tool:remember`, `import:result.json`, ...).
    pub source: Option<String>,
    /// How much it matters.
    pub importance: Importance,
    /// Pinned memories are never pruned and do not decay.
    pub pinned: bool,
    /// When it was said or learned.
    pub created_at: Timestamp,
    /// When it was last recalled by a search (initially `created_at`).
    pub accessed_at: Timestamp,
    /// How many times a search has recalled it.
    pub access_count: u64,
    /// From when the memory holds, if it is time-bound.
    pub valid_from: Option<Timestamp>,
    /// Until when the memory holds, if it is time-bound.
    pub valid_until: Option<Timestamp>,
    /// A newer memory that replaces this one; superseded memories are left out of searches
    /// unless asked for.
    pub superseded_by: Option<MemoryId>,
    /// Whether the backend holds a vector for it (false in keyword-only stores).
    pub embedded: bool,
}

impl MemoryEntry {
    /// Whether this memory holds at `at`: not superseded, and `at` inside its validity window.
    pub fn is_valid_at(&self, at: Timestamp) -> bool {
        self.superseded_by.is_none()
            && self.valid_from.is_none_or(|from| from <= at)
            && self.valid_until.is_none_or(|until| at < until)
    }
}

/// A memory to store. Build one with [`NewMemory::new`] and the `with_*` methods.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NewMemory {
    /// A caller-chosen id (for idempotent imports); a fresh one when `None`.
    pub id: Option<MemoryId>,
    /// What sort of memory it is.
    pub kind: MemoryKind,
    /// The text to remember.
    pub content: String,
    /// How or why it was learned.
    pub context: Option<String>,
    /// Labels.
    pub tags: TagSet,
    /// Who said it, for messages.
    pub role: Option<Role>,
    /// Where it came from.
    pub source: Option<String>,
    /// How much it matters.
    pub importance: Importance,
    /// Never prune, never decay.
    pub pinned: bool,
    /// When it was said; now when `None`. Set it when importing history.
    pub created_at: Option<Timestamp>,
    /// From when it holds.
    pub valid_from: Option<Timestamp>,
    /// Until when it holds.
    pub valid_until: Option<Timestamp>,
    /// A precomputed vector; the backend's embedder computes one when `None`.
    pub embedding: Option<Embedding>,
    /// When it was last recalled and how many times, for a memory restored from an export;
    /// `None` for a new memory (never recalled: last "recalled" when created, 0 times).
    pub accessed: Option<(Timestamp, u64)>,
}

impl NewMemory {
    /// A message memory with this content and defaults for everything else.
    pub fn new(content: impl Into<String>) -> Self {
        Self {
            content: content.into(),
            ..Self::default()
        }
    }

    /// Sets the kind.
    pub fn with_kind(mut self, kind: MemoryKind) -> Self {
        self.kind = kind;
        self
    }

    /// Sets how or why it was learned.
    pub fn with_context(mut self, context: impl Into<String>) -> Self {
        self.context = Some(context.into());
        self
    }

    /// Adds a tag.
    pub fn with_tag(mut self, tag: Tag) -> Self {
        self.tags.insert(tag);
        self
    }

    /// Adds tags.
    pub fn with_tags(mut self, tags: impl IntoIterator<Item = Tag>) -> Self {
        self.tags.extend(tags);
        self
    }

    /// Sets who said it.
    pub fn with_role(mut self, role: Role) -> Self {
        self.role = Some(role);
        self
    }

    /// Sets where it came from.
    pub fn with_source(mut self, source: impl Into<String>) -> Self {
        self.source = Some(source.into());
        self
    }

    /// Sets the importance.
    pub fn with_importance(mut self, importance: Importance) -> Self {
        self.importance = importance;
        self
    }

    /// Pins it: never pruned, never decays.
    pub fn pinned(mut self) -> Self {
        self.pinned = true;
        self
    }

    /// Sets when it was said.
    pub fn at(mut self, created_at: Timestamp) -> Self {
        self.created_at = Some(created_at);
        self
    }

    /// Sets a caller-chosen id.
    pub fn with_id(mut self, id: MemoryId) -> Self {
        self.id = Some(id);
        self
    }

    /// Supplies a precomputed vector.
    pub fn with_embedding(mut self, embedding: Embedding) -> Self {
        self.embedding = Some(embedding);
        self
    }

    /// Sets the validity window.
    pub fn valid(mut self, from: Option<Timestamp>, until: Option<Timestamp>) -> Self {
        self.valid_from = from;
        self.valid_until = until;
        self
    }

    /// Checks the parts a backend cannot fix: content and the validity window.
    pub fn validate(&self, max_content_bytes: usize) -> Result<()> {
        validate_content(&self.content, max_content_bytes)?;
        if let (Some(from), Some(until)) = (self.valid_from, self.valid_until)
            && until <= from
        {
            return Err(MemoryError::invalid(
                "validity window",
                format!("valid_until {until} is not after valid_from {from}"),
            ));
        }
        Ok(())
    }

    /// The memory as it can be stored under a content limit of `max_bytes`: itself when it
    /// fits, otherwise linked parts of at most `max_bytes` each, cut at a paragraph, line,
    /// sentence or word break in the second half of each part where there is one, so that
    /// nothing of a message of up to [`MAX_MESSAGE_BYTES`] is refused or lost. The parts
    /// together hold the whole text, in order; each keeps the memory's kind, context, tags,
    /// role, source, importance, pin and validity, and is dated a millisecond after the one
    /// before (so they stay in order; now when the memory has no date). Every part is tagged
    /// `part-of:<id of the first part>` and `part:<k>-of-<n>` (see [`PART_OF_TAG_PREFIX`]);
    /// the first part has the memory's id (or a fresh one), the others ids derived from it,
    /// so an import that chooses ids stays idempotent. A precomputed vector is dropped (it is
    /// not a part's). Parts that would hold only whitespace are left out. Every part after
    /// the first is embedded by its head only ([`embeds_head_only`]).
    ///
    /// A text longer than [`MAX_MESSAGE_BYTES`] is kept by its first MiB only (cut at a
    /// break, [`MessageCut::of`]), followed by a line saying how many bytes were left out
    /// ([`MessageCut::note`]); its precomputed vector is dropped too.
    pub fn split_to_fit(mut self, max_bytes: usize) -> Vec<NewMemory> {
        if let Some(cut) = MessageCut::of(&self.content) {
            self.content.truncate(cut.kept);
            let kept = self.content.trim_end().len();
            self.content.truncate(kept);
            self.content.push_str("\n\n");
            self.content.push_str(&cut.note());
            self.embedding = None;
        }
        if self.content.len() <= max_bytes || max_bytes < 8 {
            return vec![self];
        }
        let text = self.content.as_str();
        let pieces: Vec<&str> = split_text(text, max_bytes)
            .into_iter()
            .filter_map(|r| text.get(r))
            .collect();
        let first = self.id.unwrap_or_default();
        let start = self.created_at.unwrap_or_else(Timestamp::now);
        let n = pieces.len();
        let group = Tag::new(format!("{PART_OF_TAG_PREFIX}{first}")).ok();
        pieces
            .iter()
            .enumerate()
            .map(|(k, piece)| {
                let id = if k == 0 {
                    first
                } else {
                    MemoryId::from_uuid(Uuid::new_v5(
                        first.as_uuid(),
                        format!("part-{k}").as_bytes(),
                    ))
                };
                let mut part = NewMemory {
                    id: Some(id),
                    content: (*piece).to_owned(),
                    created_at: Some(start.plus(std::time::Duration::from_millis(k as u64))),
                    embedding: None,
                    ..self.clone()
                };
                part.tags.extend(group.clone());
                part.tags
                    .extend(Tag::new(format!("{PART_TAG_PREFIX}{}-of-{n}", k + 1)).ok());
                part
            })
            .collect()
    }

    /// Checks a batch before a backend stores any of it: each memory
    /// ([`NewMemory::validate`]), no caller-chosen id twice in the batch
    /// ([`MemoryError::Conflict`] with that id), and each given vector with `check_vector`
    /// (usually [`StoreVectors::check`](crate::StoreVectors::check)).
    ///
    /// Whether an id is already taken in the store is the backend's to check.
    pub fn validate_batch(
        memories: &[NewMemory],
        max_content_bytes: usize,
        mut check_vector: impl FnMut(&Embedding) -> Result<()>,
    ) -> Result<()> {
        let mut ids = HashSet::with_capacity(memories.len());
        for m in memories {
            m.validate(max_content_bytes)?;
            if let Some(id) = m.id
                && !ids.insert(id)
            {
                return Err(MemoryError::Conflict { id });
            }
            if let Some(e) = &m.embedding {
                check_vector(e)?;
            }
        }
        Ok(())
    }

    /// Turns the input into the entry a backend stores, stamping times and the id.
    pub fn into_entry(self, scope: &Scope, now: Timestamp, embedded: bool) -> MemoryEntry {
        let created_at = self.created_at.unwrap_or(now);
        MemoryEntry {
            id: self.id.unwrap_or_default(),
            scope: scope.clone(),
            kind: self.kind,
            content: self.content,
            context: self.context,
            tags: self.tags,
            role: self.role,
            source: self.source,
            importance: self.importance,
            pinned: self.pinned,
            created_at,
            accessed_at: self.accessed.map_or(created_at, |(at, _)| at),
            access_count: self.accessed.map_or(0, |(_, n)| n),
            valid_from: self.valid_from,
            valid_until: self.valid_until,
            superseded_by: None,
            embedded,
        }
    }
}

/// Cuts `text` into consecutive pieces of at most `max_bytes` bytes each (at least 8; a
/// smaller limit is taken as 8), at a paragraph, line, sentence or word break in the second
/// half of each piece where there is one, else at the last character that fits. The
/// pieces together are the whole text, in order, except that pieces holding only
/// whitespace are left out. A text of at most `max_bytes` is one piece.
///
/// The one rule for cutting a long text: [`NewMemory::split_to_fit`] stores a message too
/// long for a store as linked parts with it, and [`embed_passages`](crate::embed_passages)
/// embeds a memory longer than the embedder's window as passages with it.
pub fn split_text(text: &str, max_bytes: usize) -> Vec<Range<usize>> {
    let max_bytes = max_bytes.max(8);
    let mut cuts = Vec::new();
    let mut at = 0;
    while text.len() - at > max_bytes {
        let cut = cut_end(text, at, max_bytes);
        cuts.push(at..cut);
        at = cut;
    }
    cuts.push(at..text.len());
    cuts.retain(|r| text.get(r.clone()).is_some_and(|p| !p.trim().is_empty()));
    cuts
}

/// Where the piece of `text` that starts at `at` ends when it may hold at most `max_bytes`
/// (at least 8): the text's end if it fits, else after the last paragraph, line, sentence
/// or word break in the second half of the piece, else at the last character that fits.
/// [`split_text`]'s one cut.
pub(crate) fn cut_end(text: &str, at: usize, max_bytes: usize) -> usize {
    let max_bytes = max_bytes.max(8);
    if text.len().saturating_sub(at) <= max_bytes {
        return text.len();
    }
    let mut end = at + max_bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let window = &text[at..end];
    let half = window.len() / 2;
    ["\n\n", "\n", ". ", " "]
        .iter()
        .find_map(|sep| {
            window
                .rfind(sep)
                .filter(|&i| i >= half)
                .map(|i| at + i + sep.len())
        })
        .unwrap_or(end)
}

/// How a text longer than [`MAX_MESSAGE_BYTES`] is kept: its first `kept` bytes (cut at a
/// paragraph, line, sentence or word break in the second half of the first MiB where there
/// is one), the `left_out` bytes after them not at all. Every door stores a message with
/// [`NewMemory::split_to_fit`], which cuts it so; a door says so to whoever sent it (the
/// proxy in `x-ava-degraded`, MCP `remember` in its answer) with this value's `Display`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MessageCut {
    /// How many bytes of the text are kept: its first.
    pub kept: usize,
    /// How many bytes after them are left out.
    pub left_out: usize,
}

impl MessageCut {
    /// How `text` is cut when kept as one message or fact; `None` when it is kept whole
    /// (it is at most [`MAX_MESSAGE_BYTES`] long).
    pub fn of(text: &str) -> Option<Self> {
        if text.len() <= MAX_MESSAGE_BYTES {
            return None;
        }
        let kept = cut_end(text, 0, MAX_MESSAGE_BYTES);
        Some(Self {
            kept,
            left_out: text.len() - kept,
        })
    }

    /// The line that ends what is kept of a cut message, in the memory itself, so that
    /// whoever reads it (a prompt, `ava recall`, an export) knows it is not all that was said.
    pub fn note(&self) -> String {
        format!(
            "[… the rest of this message, {} more bytes, was not kept: a message keeps at most \
             its first {} MiB]",
            self.left_out,
            MAX_MESSAGE_BYTES >> 20
        )
    }
}

impl fmt::Display for MessageCut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} bytes long, more than the {} MiB a message keeps: its first {} bytes kept, {} \
             left out",
            self.kept + self.left_out,
            MAX_MESSAGE_BYTES >> 20,
            self.kept,
            self.left_out
        )
    }
}

/// Whether a memory tagged `tags` is embedded by its head only (one vector, of the passage
/// its text starts with) rather than passage by passage: a later part of a message kept in
/// parts (tagged `part:<k>-of-<n>` with k of 2 or more, [`NewMemory::split_to_fit`]). So one
/// message costs the embedder at most the passages of one memory (its first part) and one
/// vector for each later part; the later parts are found by their words and their heads.
/// Every backend embeds new memories this way ([`StoreVectors`](crate::StoreVectors)).
/// Backends that embed stored memories later (SQLite's memories stored without a vector,
/// `reembed`) read the tags they hold and ask the same.
pub fn embeds_head_only<'a>(tags: impl IntoIterator<Item = &'a str>) -> bool {
    tags.into_iter().any(|t| {
        t.strip_prefix(PART_TAG_PREFIX)
            .and_then(|rest| rest.split_once("-of-"))
            .and_then(|(k, _)| k.parse::<usize>().ok())
            .is_some_and(|k| k >= 2)
    })
}

/// Checks memory content: not blank, no NUL characters, at most `max_bytes` bytes.
pub fn validate_content(content: &str, max_bytes: usize) -> Result<()> {
    if content.trim().is_empty() {
        return Err(MemoryError::invalid(
            "content",
            "is empty; a memory needs some text",
        ));
    }
    if content.len() > max_bytes {
        return Err(MemoryError::invalid(
            "content",
            format!(
                "is {} bytes long, at most {max_bytes} bytes are accepted; split it into smaller memories",
                content.len()
            ),
        ));
    }
    if content.contains('\0') {
        return Err(MemoryError::invalid("content", "contains a NUL character"));
    }
    Ok(())
}

/// A change to a stored memory; `None` fields are left as they are.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MemoryPatch {
    /// New text (re-embedded and re-indexed).
    pub content: Option<String>,
    /// New context (`Some(None)` clears it).
    pub context: Option<Option<String>>,
    /// New kind.
    pub kind: Option<MemoryKind>,
    /// Replacement tag set.
    pub tags: Option<TagSet>,
    /// New importance.
    pub importance: Option<Importance>,
    /// Pin or unpin.
    pub pinned: Option<bool>,
    /// New end of validity (`Some(None)` clears it).
    pub valid_until: Option<Option<Timestamp>>,
    /// Mark as superseded by a newer memory (`Some(None)` clears it).
    pub superseded_by: Option<Option<MemoryId>>,
}

/// The refusal of a patch whose `superseded_by` names `target`, which `why` (is not a
/// memory of the patched memory's scope, is the memory itself).
pub fn superseded_by_refused(target: MemoryId, why: &str) -> MemoryError {
    MemoryError::invalid(
        "superseded_by",
        format!("{target} {why}; expected the id of another memory of the same scope"),
    )
}

/// Why a `superseded_by` naming no memory of the scope is refused ([`superseded_by_refused`]).
pub const SUPERSEDER_NOT_IN_SCOPE: &str = "is not a memory of this scope";

impl MemoryPatch {
    /// Whether the patch changes nothing.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// The memory this patch names as superseding the memory `id` it patches, if it names
    /// one: a backend accepts it only when it is another memory of the same scope, and else
    /// refuses the patch with [`superseded_by_refused`] before changing anything.
    pub fn superseding(&self, id: MemoryId) -> Result<Option<MemoryId>> {
        match self.superseded_by {
            Some(Some(t)) if t == id => Err(superseded_by_refused(t, "is the memory itself")),
            Some(Some(t)) => Ok(Some(t)),
            _ => Ok(None),
        }
    }

    /// Applies the patch to an entry (after [`validate_content`] on new content).
    pub fn apply(self, entry: &mut MemoryEntry) {
        if let Some(c) = self.content {
            entry.content = c;
        }
        if let Some(c) = self.context {
            entry.context = c;
        }
        if let Some(k) = self.kind {
            entry.kind = k;
        }
        if let Some(t) = self.tags {
            entry.tags = t;
        }
        if let Some(i) = self.importance {
            entry.importance = i;
        }
        if let Some(p) = self.pinned {
            entry.pinned = p;
        }
        if let Some(v) = self.valid_until {
            entry.valid_until = v;
        }
        if let Some(s) = self.superseded_by {
            entry.superseded_by = s;
        }
    }
}

#[cfg(test)]
mod tests;
