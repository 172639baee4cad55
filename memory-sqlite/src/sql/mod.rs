//! The SQL behind the backend: row mapping, filters, inserts and deletes; the searches are in
//! `search.rs`, the records in `records.rs`. Every query that reads memories names the scope id
//! in its WHERE clause.

use std::collections::HashMap;
use std::path::Path;

use memory_core::keyword::{self, MAX_QUERY_TERMS};
use memory_core::{
    Filter, Importance, MemoryEntry, MemoryId, MemoryKind, Role, Scope, Spread, Tag, TagMatch,
    Timestamp,
};
use rusqlite::types::Value;
use rusqlite::{CachedStatement, Connection, OptionalExtension, params, params_from_iter};
use uuid::Uuid;

use crate::error::{JobError, SqliteError};
use crate::kernels;
use crate::schema::INSERT_VECTOR;
use crate::vector_rows::{MAX_VECTORS, RowVector, VECTOR_COUNT_SQL, vector_rowid, vector_rowids};

mod records;
mod search;

/// The largest `k` sqlite-vec accepts in one KNN query.
pub(crate) const MAX_KNN_K: usize = 4096;

const ENTRY_COLS: &str = "m.pk, m.id, s.tenant, s.user, s.chat, s.thread, m.kind, m.content, m.context, \
     m.role, m.source, m.importance, m.pinned, m.created_at, m.accessed_at, m.access_count, \
     m.valid_from, m.valid_until, m.superseded_by, m.embedded";

/// A connection plus the file path, for error messages. Its methods fail with
/// [`JobError`], so SQLite's errors are classified with the path once, by whoever runs the
/// job.
pub(crate) struct Sql<'c> {
    pub(crate) conn: &'c Connection,
    pub(crate) path: &'c Path,
}

type R<T> = Result<T, JobError>;

/// A stored memory to embed: its key, its text, and whether it is embedded by its head only
/// (a later part of a message kept in parts, [`memory_core::embeds_head_only`]).
pub(crate) type ToEmbed = (i64, String, bool);

/// The part tags of the row `memories` (named so) as one space-separated text, the third
/// column [`to_embed`] reads.
pub(crate) const PART_TAGS: &str = "(SELECT group_concat(tag, ' ') FROM memory_tags \
     WHERE memory = memories.pk AND tag GLOB 'part:*')";

/// The text each of `rows` is embedded by: its content, or for a memory embedded by its
/// head only, the passage it starts with ([`memory_core::head_passage`]).
pub(crate) fn texts_to_embed<'r>(
    embedder: &dyn memory_core::EmbeddingProvider,
    rows: &'r [ToEmbed],
) -> Vec<&'r str> {
    let window = embedder.window_bytes();
    rows.iter()
        .map(|(_, content, head_only)| match head_only {
            true => memory_core::head_passage(content, window),
            false => content.as_str(),
        })
        .collect()
}

/// Reads a row of (pk, content, [`PART_TAGS`]).
pub(crate) fn to_embed(r: &rusqlite::Row<'_>) -> rusqlite::Result<ToEmbed> {
    let tags: Option<String> = r.get(2)?;
    let head_only = tags.is_some_and(|t| memory_core::embeds_head_only(t.split_whitespace()));
    Ok((r.get(0)?, r.get(1)?, head_only))
}

struct RawRow {
    pk: i64,
    id: Vec<u8>,
    tenant: String,
    user: String,
    chat: Option<String>,
    thread: Option<String>,
    kind: String,
    content: String,
    context: Option<String>,
    role: Option<String>,
    source: Option<String>,
    importance: f64,
    pinned: bool,
    created_at: i64,
    accessed_at: i64,
    access_count: i64,
    valid_from: Option<i64>,
    valid_until: Option<i64>,
    superseded_by: Option<Vec<u8>>,
    embedded: bool,
}

fn raw_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<RawRow> {
    Ok(RawRow {
        pk: r.get(0)?,
        id: r.get(1)?,
        tenant: r.get(2)?,
        user: r.get(3)?,
        chat: r.get(4)?,
        thread: r.get(5)?,
        kind: r.get(6)?,
        content: r.get(7)?,
        context: r.get(8)?,
        role: r.get(9)?,
        source: r.get(10)?,
        importance: r.get(11)?,
        pinned: r.get(12)?,
        created_at: r.get(13)?,
        accessed_at: r.get(14)?,
        access_count: r.get(15)?,
        valid_from: r.get(16)?,
        valid_until: r.get(17)?,
        superseded_by: r.get(18)?,
        embedded: r.get(19)?,
    })
}

/// Encodes a vector as sqlite-vec's float32 blob (little-endian).
pub(crate) fn vector_blob(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Writes new memories of one scope into the base, tag, FTS and vec0 tables, with each
/// statement looked up once per batch instead of once per row.
pub(crate) struct Inserter<'c> {
    conn: &'c Connection,
    scope_id: i64,
    /// The FTS `scope` column's token for this scope.
    scope_token: String,
    memory: CachedStatement<'c>,
    tag: CachedStatement<'c>,
    fts: CachedStatement<'c>,
    /// Prepared on the first vector: a store without an embedding space has no vec0 table.
    vec: Option<CachedStatement<'c>>,
    /// Reused encoding buffers for vectors and their codes.
    blob: Vec<u8>,
    code: Vec<u8>,
}

/// How many of a scope scan's best similarities must be exact for a top-`limit` search:
/// the candidates [`Sql::semantic`] checks against the filter first.
/// Ranked hits: `(pk, id, score)`, best first.
pub(crate) type Hits = Vec<(i64, MemoryId, f32)>;

/// A semantic search's best memories, and how the similarities of the scope's vectors
/// were spread (`None` when nothing was scored).
#[derive(Debug, Default)]
pub(crate) struct Semantic {
    pub(crate) hits: Hits,
    pub(crate) spread: Option<Spread>,
}

fn exact_needed(limit: usize) -> usize {
    (limit * 2).max(20)
}

impl<'c> Inserter<'c> {
    pub(crate) fn new(sql: &Sql<'c>, scope_id: i64) -> R<Self> {
        let conn = sql.conn;
        let prep = |q: &str| conn.prepare_cached(q);
        Ok(Self {
            conn,
            scope_id,
            scope_token: format!("s{scope_id}"),
            memory: prep(
                "INSERT INTO memories (id, scope_id, kind, content, context, role, source, importance, pinned, \
                 created_at, accessed_at, access_count, valid_from, valid_until, superseded_by, embedded) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16) \
                 ON CONFLICT (id) DO NOTHING",
            )?,
            tag: prep("INSERT INTO memory_tags (memory, tag) VALUES (?1, ?2)")?,
            fts: prep(
                "INSERT INTO memory_fts (rowid, scope, content, context) VALUES (?1, ?2, ?3, ?4)",
            )?,
            vec: None,
            blob: Vec::new(),
            code: Vec::new(),
        })
    }

    /// Inserts one memory; `None` (nothing written) when a memory with this id already
    /// exists. The UNIQUE index on `id` is the check, so an insert costs no separate lookup.
    /// Its vectors (one per passage; none without an embedder) go to vec0 (see
    /// [`vector_rowid`]) and come back with their rowids, for the caller to hand to the
    /// cache.
    pub(crate) fn insert(
        &mut self,
        e: &MemoryEntry,
        vectors: Vec<Vec<f32>>,
    ) -> R<Option<Vec<RowVector>>> {
        let written = self.memory.execute(params![
            e.id.as_uuid().as_bytes().as_slice(),
            self.scope_id,
            e.kind.as_str(),
            e.content,
            e.context,
            e.role.map(Role::as_str),
            e.source,
            f64::from(e.importance.get()),
            e.pinned,
            e.created_at.as_millis(),
            e.accessed_at.as_millis(),
            i64::try_from(e.access_count).unwrap_or(i64::MAX),
            e.valid_from.map(Timestamp::as_millis),
            e.valid_until.map(Timestamp::as_millis),
            e.superseded_by.map(|s| s.as_uuid().as_bytes().to_vec()),
            vectors.len().min(MAX_VECTORS) as i64,
        ])?;
        if written == 0 {
            return Ok(None);
        }
        let pk = self.conn.last_insert_rowid();
        for t in &e.tags {
            self.tag.execute(params![pk, t.as_str()])?;
        }
        self.fts
            .execute(params![pk, self.scope_token, e.content, e.context])?;
        let n = vectors.len();
        let mut written = Vec::with_capacity(n);
        for (k, v) in vectors.into_iter().enumerate() {
            let Some(rowid) = vector_rowid(pk, k) else {
                break;
            };
            if self.vec.is_none() {
                let stmt = self.conn.prepare_cached(INSERT_VECTOR)?;
                self.vec = Some(stmt);
            }
            self.blob.clear();
            self.blob.extend(v.iter().flat_map(|x| x.to_le_bytes()));
            self.code.clear();
            kernels::encode_code(&mut self.code, &v);
            if let Some(stmt) = &mut self.vec {
                stmt.execute(params![
                    rowid,
                    self.scope_id,
                    self.blob.as_slice(),
                    self.code.as_slice()
                ])?;
            }
            written.push((rowid, v));
        }
        if written.len() != n {
            self.conn.execute(
                "UPDATE memories SET embedded = ?1 WHERE pk = ?2",
                params![written.len() as i64, pk],
            )?;
        }
        Ok(Some(written))
    }
}

/// The FTS5 query for `words` in one scope: the scope token AND any of the words. `None`
/// when there is no word.
pub(crate) fn fts_expression(scope_id: i64, words: &[String]) -> Option<String> {
    if words.is_empty() {
        return None;
    }
    let mut any: Vec<String> = words
        .iter()
        .map(|w| format!("\"{}\"", w.replace('"', "\"\"")))
        .collect();
    any.sort();
    any.dedup();
    Some(format!("scope:s{scope_id} AND ({})", any.join(" OR ")))
}

/// The tokenizer of the full-text table (`schema::create_fts`), for the query words' table.
const FTS_TOKENIZE: &str = "porter unicode61 remove_diacritics 2";
/// The WHERE fragment (starting with ` AND`) and parameters for a filter over alias `m`.
pub(crate) fn filter_sql(filter: &Filter, sql: &mut String, params: &mut Vec<Value>) {
    if let Some(q) = &filter.tags {
        let marks = vec!["?"; q.tags.len()].join(", ");
        match q.mode {
            TagMatch::Any => sql.push_str(&format!(
                " AND EXISTS (SELECT 1 FROM memory_tags t WHERE t.memory = m.pk AND t.tag IN ({marks}))"
            )),
            TagMatch::All => sql.push_str(&format!(
                " AND (SELECT COUNT(*) FROM memory_tags t WHERE t.memory = m.pk AND t.tag IN ({marks})) = {}",
                q.tags.len()
            )),
        }
        params.extend(q.tags.iter().map(|t| Value::Text(t.as_str().to_owned())));
    }
    if let Some(t) = filter.created_after {
        sql.push_str(" AND m.created_at >= ?");
        params.push(Value::Integer(t.as_millis()));
    }
    if let Some(t) = filter.created_before {
        sql.push_str(" AND m.created_at < ?");
        params.push(Value::Integer(t.as_millis()));
    }
    let mut one_of = |column: &str, values: Vec<&str>| {
        if !values.is_empty() {
            let marks = vec!["?"; values.len()].join(", ");
            sql.push_str(&format!(" AND {column} IN ({marks})"));
            params.extend(values.into_iter().map(|v| Value::Text(v.to_owned())));
        }
    };
    one_of("m.kind", filter.kinds.iter().map(|k| k.as_str()).collect());
    one_of("m.role", filter.roles.iter().map(|r| r.as_str()).collect());
    if !filter.include_superseded {
        sql.push_str(" AND m.superseded_by IS NULL");
    }
    if let Some(at) = filter.valid_at {
        sql.push_str(" AND (m.valid_from IS NULL OR m.valid_from <= ?) AND (m.valid_until IS NULL OR ? < m.valid_until)");
        params.push(Value::Integer(at.as_millis()));
        params.push(Value::Integer(at.as_millis()));
    }
}

impl Sql<'_> {
    fn invalid(&self, what: impl Into<String>) -> JobError {
        SqliteError::InvalidData {
            path: self.path.to_owned(),
            what: what.into(),
        }
        .into()
    }

    /// The FTS5 query for `text` in one scope: the scope token AND any of its words, of
    /// which at most [`MAX_QUERY_TERMS`] (the rarest the index holds when there are more,
    /// [`keyword::rarest`]) of its first [`keyword::MAX_QUERY_BYTES`] bytes. `None` when the
    /// text has no searchable word, or none the index holds among more than
    /// [`MAX_QUERY_TERMS`].
    pub(crate) fn fts_query(&self, scope_id: i64, text: &str) -> R<Option<String>> {
        let words = keyword::query_words(text);
        let words = if words.len() > MAX_QUERY_TERMS {
            let held = self.documents_holding(&words)?;
            keyword::rarest(words, |w| held.get(w).copied().unwrap_or(0))
        } else {
            words
        };
        Ok(fts_expression(scope_id, &words))
    }

    /// How many rows of the full-text index (of every scope) hold each of `words` (distinct),
    /// from FTS5's own counts (an `fts5vocab` table over it): the words held by none are left
    /// out. A word is looked up as the index holds it, stemmed by the index's tokenizer: the
    /// words are written to a temporary full-text table of that tokenizer, whose own vocabulary
    /// gives each word's terms (a word of several terms counts as its rarest). All in this
    /// connection's temporary (in-memory) schema, so a read-only connection can do it too.
    fn documents_holding(&self, words: &[String]) -> R<HashMap<String, u64>> {
        self.conn.execute_batch(&format!(
            "CREATE VIRTUAL TABLE IF NOT EXISTS temp.query_words USING fts5(word, \
             tokenize = '{FTS_TOKENIZE}', detail = none); \
             CREATE VIRTUAL TABLE IF NOT EXISTS temp.query_terms \
             USING fts5vocab(temp, query_words, instance); \
             CREATE VIRTUAL TABLE IF NOT EXISTS temp.memory_vocab \
             USING fts5vocab(main, memory_fts, row); \
             DELETE FROM temp.query_words;"
        ))?;
        {
            let mut put = self
                .conn
                .prepare_cached("INSERT INTO temp.query_words (rowid, word) VALUES (?1, ?2)")?;
            for (i, w) in words.iter().enumerate() {
                put.execute(params![i as i64, w])?;
            }
        }
        let terms: Vec<(String, i64)> = self
            .conn
            .prepare_cached("SELECT term, doc FROM temp.query_terms")?
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?;
        let mut count = self
            .conn
            .prepare_cached("SELECT doc FROM temp.memory_vocab WHERE term = ?1")?;
        let mut seen: HashMap<String, u64> = HashMap::new();
        let mut held: HashMap<String, u64> = HashMap::new();
        for (term, row) in terms {
            let n = match seen.get(&term) {
                Some(n) => *n,
                None => {
                    let n: Option<i64> = count.query_row([&term], |r| r.get(0)).optional()?;
                    let n = n.and_then(|n| u64::try_from(n).ok()).unwrap_or(0);
                    seen.insert(term, n);
                    n
                }
            };
            let Some(word) = usize::try_from(row).ok().and_then(|i| words.get(i)) else {
                continue;
            };
            if n > 0 {
                held.entry(word.clone())
                    .and_modify(|m| *m = (*m).min(n))
                    .or_insert(n);
            }
        }
        self.conn.execute_batch("DELETE FROM temp.query_words;")?;
        Ok(held)
    }

    pub(crate) fn scope_id(&self, scope: &Scope) -> R<Option<i64>> {
        Ok(self
            .conn
            .prepare_cached("SELECT id FROM scopes WHERE key = ?1")?
            .query_row([scope.key()], |r| r.get(0))
            .optional()?)
    }

    pub(crate) fn ensure_scope_id(&self, scope: &Scope) -> R<i64> {
        if let Some(id) = self.scope_id(scope)? {
            return Ok(id);
        }
        self.conn.execute(
            "INSERT INTO scopes (key, tenant, user, chat, thread) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![
                scope.key(),
                scope.tenant(),
                scope.user(),
                scope.chat(),
                scope.thread()
            ],
        )?;
        Ok(self.conn.last_insert_rowid())
    }

    pub(crate) fn insert_tags<'t>(&self, pk: i64, tags: impl Iterator<Item = &'t Tag>) -> R<()> {
        let mut stmt = self
            .conn
            .prepare_cached("INSERT INTO memory_tags (memory, tag) VALUES (?1, ?2)")?;
        for t in tags {
            stmt.execute(params![pk, t.as_str()])?;
        }
        Ok(())
    }

    /// Replaces the tags of the memory `pk` with `tags`.
    pub(crate) fn replace_tags<'t>(&self, pk: i64, tags: impl Iterator<Item = &'t Tag>) -> R<()> {
        self.conn
            .execute("DELETE FROM memory_tags WHERE memory = ?1", [pk])?;
        self.insert_tags(pk, tags)
    }

    pub(crate) fn insert_fts(
        &self,
        pk: i64,
        scope_id: i64,
        content: &str,
        context: Option<&str>,
    ) -> R<()> {
        self.conn
            .prepare_cached(
                "INSERT INTO memory_fts (rowid, scope, content, context) VALUES (?1, ?2, ?3, ?4)",
            )?
            .execute(params![pk, format!("s{scope_id}"), content, context])?;
        Ok(())
    }

    /// Writes a memory's vectors (one per passage, see [`vector_rowid`]) and records how
    /// many it has; its old ones must be gone ([`Sql::delete_vectors`]).
    pub(crate) fn insert_vectors(&self, pk: i64, scope_id: i64, vectors: &[Vec<f32>]) -> R<()> {
        let mut stmt = self.conn.prepare_cached(INSERT_VECTOR)?;
        let mut n = 0i64;
        let mut code = Vec::new();
        for (k, v) in vectors.iter().enumerate() {
            let Some(rowid) = vector_rowid(pk, k) else {
                break;
            };
            code.clear();
            kernels::encode_code(&mut code, v);
            stmt.execute(params![rowid, scope_id, vector_blob(v), code])?;
            n += 1;
        }
        self.conn
            .prepare_cached("UPDATE memories SET embedded = ?1 WHERE pk = ?2")?
            .execute(params![n, pk])?;
        Ok(())
    }

    /// Removes a memory's vectors from vec0 (as many as `memories.embedded` says it has).
    /// Call it before the row's `embedded` changes or the row goes.
    pub(crate) fn delete_vectors(&self, pk: i64) -> R<()> {
        let n: i64 = self
            .conn
            .prepare_cached("SELECT embedded FROM memories WHERE pk = ?1")?
            .query_row([pk], |r| r.get(0))
            .optional()?
            .unwrap_or(0);
        let mut stmt = self
            .conn
            .prepare_cached("DELETE FROM memory_vec WHERE rowid = ?1")?;
        // A memory of an older build marked 1 may still have its vector: always try the
        // first.
        for rowid in vector_rowids(pk, n.max(1)) {
            stmt.execute([rowid])?;
        }
        Ok(())
    }

    /// Removes memory `pk`'s terms from the full-text index; call it while its row still
    /// holds what was indexed. FTS5's `delete` command with the indexed values, in the
    /// index's `secure-delete` mode, takes the terms out of the
    /// index's segments (see `schema::create_fts`).
    pub(crate) fn remove_fts(&self, pk: i64) -> R<()> {
        let row: Option<(i64, String, Option<String>)> = self
            .conn
            .prepare_cached("SELECT scope_id, content, context FROM memories WHERE pk = ?1")?
            .query_row([pk], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .optional()?;
        // A memory with no row has nothing indexed under its pk.
        if let Some((scope_id, content, context)) = row {
            self.conn
                .prepare_cached(
                    "INSERT INTO memory_fts (memory_fts, rowid, scope, content, context) \
                     VALUES ('delete', ?1, ?2, ?3, ?4)",
                )?
                .execute(params![pk, format!("s{scope_id}"), content, context])?;
        }
        Ok(())
    }

    /// Removes memories from every table.
    pub(crate) fn delete_pks(&self, pks: &[i64]) -> R<()> {
        let vec_table = !pks.is_empty() && self.has_vec_table()?;
        for &pk in pks {
            if vec_table {
                self.delete_vectors(pk)?;
            }
            self.remove_fts(pk)?;
            // Tags go with it (ON DELETE CASCADE).
            self.conn
                .prepare_cached("DELETE FROM memories WHERE pk = ?1")
                .and_then(|mut s| s.execute([pk]))?;
        }
        Ok(())
    }

    /// The pk of memory `id` if it belongs to scope `scope_id`.
    pub(crate) fn find_pk(&self, scope_id: i64, id: MemoryId) -> R<Option<i64>> {
        Ok(self
            .conn
            .prepare_cached("SELECT pk FROM memories WHERE id = ?1 AND scope_id = ?2")?
            .query_row(params![id.as_uuid().as_bytes().as_slice(), scope_id], |r| {
                r.get(0)
            })
            .optional()?)
    }

    /// Loads full entries: `tail` continues `FROM memories m JOIN scopes s ...` with a WHERE
    /// clause (naming the scope) and any ORDER BY / LIMIT.
    pub(crate) fn entries(&self, tail: &str, params: &[Value]) -> R<Vec<(i64, MemoryEntry)>> {
        let sql = format!(
            "SELECT {ENTRY_COLS} FROM memories m JOIN scopes s ON s.id = m.scope_id {tail}"
        );
        let mut stmt = self.conn.prepare_cached(&sql)?;
        let raws = stmt
            .query_map(params_from_iter(params.iter()), raw_row)
            .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())?;
        let mut tags = self.tags_of(&raws.iter().map(|r| r.pk).collect::<Vec<_>>())?;
        raws.into_iter()
            .map(|raw| {
                let pk = raw.pk;
                let t = tags.remove(&pk).unwrap_or_default();
                self.entry(raw, t).map(|e| (pk, e))
            })
            .collect()
    }

    /// Entries for these pks, in the given order (pks that vanished are skipped).
    pub(crate) fn entries_by_pk(&self, scope_id: i64, pks: &[i64]) -> R<Vec<(i64, MemoryEntry)>> {
        if pks.is_empty() {
            return Ok(Vec::new());
        }
        let marks = vec!["?"; pks.len()].join(", ");
        let mut params = vec![Value::Integer(scope_id)];
        params.extend(pks.iter().map(|p| Value::Integer(*p)));
        let mut by_pk: HashMap<i64, MemoryEntry> = self
            .entries(
                // `+m.scope_id`: look rows up by pk; the scope stays a check on each row. A
                // plain `m.scope_id = ?` lets the planner walk the scope's whole index.
                &format!("WHERE +m.scope_id = ? AND m.pk IN ({marks})"),
                &params,
            )?
            .into_iter()
            .collect();
        Ok(pks
            .iter()
            .filter_map(|pk| by_pk.remove(pk).map(|e| (*pk, e)))
            .collect())
    }

    fn tags_of(&self, pks: &[i64]) -> R<HashMap<i64, memory_core::TagSet>> {
        let mut out: HashMap<i64, memory_core::TagSet> = HashMap::new();
        for chunk in pks.chunks(500) {
            let marks = vec!["?"; chunk.len()].join(", ");
            let mut stmt = self.conn.prepare_cached(&format!(
                "SELECT memory, tag FROM memory_tags WHERE memory IN ({marks})"
            ))?;
            let rows = stmt
                .query_map(params_from_iter(chunk.iter()), |r| {
                    Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?))
                })
                .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())?;
            for (pk, tag) in rows {
                let tag = Tag::new(&tag).map_err(|e| self.invalid(e.to_string()))?;
                out.entry(pk).or_default().insert(tag);
            }
        }
        Ok(out)
    }

    fn ts(&self, ms: i64, what: &str) -> R<Timestamp> {
        Timestamp::from_millis(ms)
            .ok_or_else(|| self.invalid(format!("{what} {ms} is out of range")))
    }

    fn id(&self, bytes: &[u8]) -> R<MemoryId> {
        Uuid::from_slice(bytes)
            .map(MemoryId::from_uuid)
            .map_err(|_| self.invalid(format!("memory id of {} bytes", bytes.len())))
    }

    fn entry(&self, raw: RawRow, tags: memory_core::TagSet) -> R<MemoryEntry> {
        let inv = |e: memory_core::MemoryError| self.invalid(e.to_string());
        let mut scope = Scope::for_user(raw.user)
            .and_then(|s| s.in_tenant(raw.tenant))
            .map_err(inv)?;
        if let Some(c) = raw.chat {
            scope = scope.in_chat(c).map_err(inv)?;
        }
        if let Some(t) = raw.thread {
            scope = scope.in_thread(t).map_err(inv)?;
        }
        Ok(MemoryEntry {
            id: self.id(&raw.id)?,
            scope,
            kind: MemoryKind::parse(&raw.kind).map_err(inv)?,
            content: raw.content,
            context: raw.context,
            tags,
            role: raw
                .role
                .as_deref()
                .map(Role::parse)
                .transpose()
                .map_err(inv)?,
            source: raw.source,
            importance: Importance::new(raw.importance as f32).map_err(inv)?,
            pinned: raw.pinned,
            created_at: self.ts(raw.created_at, "created_at")?,
            accessed_at: self.ts(raw.accessed_at, "accessed_at")?,
            access_count: u64::try_from(raw.access_count).unwrap_or(0),
            valid_from: raw
                .valid_from
                .map(|t| self.ts(t, "valid_from"))
                .transpose()?,
            valid_until: raw
                .valid_until
                .map(|t| self.ts(t, "valid_until"))
                .transpose()?,
            superseded_by: raw
                .superseded_by
                .as_deref()
                .map(|b| self.id(b))
                .transpose()?,
            embedded: raw.embedded,
        })
    }

    /// How many vectors a scope's partition holds.
    pub(crate) fn vector_count(&self, scope_id: i64) -> R<usize> {
        let n: i64 = self
            .conn
            .prepare_cached(VECTOR_COUNT_SQL)?
            .query_row([scope_id], |r| r.get(0))?;
        Ok(usize::try_from(n).unwrap_or(0))
    }

    /// Up to `limit` memories of the scope that have no vector yet, oldest first (the
    /// partial index `memories_unembedded` finds them without a scan).
    pub(crate) fn unembedded(&self, scope_id: i64, limit: usize) -> R<Vec<ToEmbed>> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT pk, content, {PART_TAGS} FROM memories INDEXED BY memories_unembedded \
             WHERE scope_id = ?1 AND embedded = 0 ORDER BY pk LIMIT ?2"
        ))?;
        let rows = stmt
            .query_map(params![scope_id, limit as i64], to_embed)?
            .collect::<rusqlite::Result<_>>()?;
        Ok(rows)
    }

    /// Whether the vec0 table exists: another process may have created it (given the
    /// store its space) after this one opened the file.
    pub(crate) fn has_vec_table(&self) -> R<bool> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'memory_vec')",
            )?
            .query_row([], |r| r.get(0))?)
    }
}

#[cfg(test)]
mod tests {
    use memory_core::keyword::MAX_QUERY_TERMS;
    use memory_core::{MemoryBackend, Scope, SearchRequest};
    use rusqlite::Connection;

    use super::Sql;
    use crate::{SqliteBackend, SqliteConfig};

    /// `n` distinct words no memory holds: `zx` and four letters.
    fn terms(expression: &str) -> usize {
        expression.matches(" OR ").count() + 1
    }

    /// D1: a query of 100 000 distinct words reaches FTS5 as an expression of at most
    /// `MAX_QUERY_TERMS` words, the rarest the index holds, and still finds the memory
    /// holding its one rare word.
    #[tokio::test]
    async fn a_query_of_100k_words_is_searched_for_its_rarest_held_words() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.db");
        let store = SqliteBackend::open(&path, None, SqliteConfig::default())
            .await
            .unwrap();
        let scope = Scope::for_user("u").unwrap();
        let q = memory_core::testing::rare_word_query(&store, &scope).await;

        let conn = Connection::open(&path).unwrap();
        let sql = Sql {
            conn: &conn,
            path: &path,
        };
        let scope_id = sql.scope_id(&scope).unwrap().unwrap();
        let e = sql.fts_query(scope_id, &q.only_rare).unwrap().unwrap();
        assert_eq!(e, format!("scope:s{scope_id} AND (\"quetzalcoatl\")"));
        // Above the bound, the rarest held: `garden` (in 101 memories) is left out.
        let e = sql.fts_query(scope_id, &q.with_topics).unwrap().unwrap();
        assert_eq!(terms(&e), MAX_QUERY_TERMS, "{}", &e[..e.len().min(300)]);
        assert!(e.contains("\"quetzalcoatl\"") && !e.contains("\"garden\""));
        // An ordinary query is searched as it is.
        let e = sql
            .fts_query(scope_id, "Garden statue, garden")
            .unwrap()
            .unwrap();
        assert_eq!(
            e,
            format!("scope:s{scope_id} AND (\"garden\" OR \"statue\")")
        );
        drop(conn);

        q.assert_found(&store, &scope).await;
        let hits = store
            .search(
                &scope,
                &SearchRequest::keyword(memory_core::testing::noise_words(100_000).join(" ")),
            )
            .await
            .unwrap();
        assert!(hits.is_empty(), "no held word: no hit");
        store.close().await;
    }
}
