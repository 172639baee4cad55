//! The SQL behind the backend: statement text for one store (schema-qualified names),
//! parameter lists built alongside, filters, and row mapping. Every statement that reads
//! memories names the scope (`scope_id` or the scope key) in its WHERE clause, and its tenant
//! first.

use memory_core::keyword::MAX_QUERY_TERMS;
use memory_core::{
    Filter, Importance, MemoryEntry, MemoryId, MemoryKind, Role, Scope, Tag, TagMatch, TagSet,
    Timestamp,
};
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;
use uuid::Uuid;

use crate::error::{Cells, PostgresError};

/// The columns every entry is read from (`m` is memories, `sc` is scopes, and `a` the
/// memory's row in `memory_access`, if any): recalls are counted in that narrow table so
/// that counting one never rewrites the wide memory row and its vector and text indexes.
pub(crate) fn entry_cols(a: &str) -> String {
    format!(
        "m.pk, m.id, sc.tenant, sc.user_id, sc.chat, sc.thread, m.kind, m.content, m.context, \
         m.role, m.source, m.tags, m.importance, m.pinned, m.created_at, \
         GREATEST(m.accessed_at, {a}.accessed_at), m.access_count + coalesce({a}.access_count, 0), \
         m.valid_from, m.valid_until, m.superseded_by, m.embedded"
    )
}

/// A statement under construction with its parameters: `bind` appends a value and
/// returns its placeholder.
#[derive(Default)]
pub(crate) struct Query {
    pub(crate) sql: String,
    params: Vec<Box<dyn ToSql + Sync + Send>>,
}

impl std::fmt::Debug for Query {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Query")
            .field("sql", &self.sql)
            .field("params", &self.params.len())
            .finish()
    }
}

impl Query {
    /// Adds a parameter; returns its placeholder (`$n`).
    pub(crate) fn bind(&mut self, value: impl ToSql + Sync + Send + 'static) -> String {
        self.params.push(Box::new(value));
        format!("${}", self.params.len())
    }

    /// Appends SQL text.
    pub(crate) fn push(&mut self, sql: &str) -> &mut Self {
        self.sql.push_str(sql);
        self
    }

    pub(crate) fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        self.params
            .iter()
            .map(|p| p.as_ref() as &(dyn ToSql + Sync))
            .collect()
    }
}

/// Long memories' passages after their first, as the parallel arrays a statement
/// `unnest`s: whose (a pk or an id), which (`k`, from 1), and the vector.
#[derive(Debug)]
pub(crate) struct Passages<T> {
    pub(crate) owners: Vec<T>,
    pub(crate) ks: Vec<i32>,
    pub(crate) vectors: Vec<pgvector::Vector>,
}

impl<T> Default for Passages<T> {
    fn default() -> Self {
        Self {
            owners: Vec::new(),
            ks: Vec::new(),
            vectors: Vec::new(),
        }
    }
}

impl<T: Copy> Passages<T> {
    /// Adds `owner`'s passages after its first (which `vectors` no longer holds).
    pub(crate) fn extend(&mut self, owner: T, vectors: impl IntoIterator<Item = Vec<f32>>) {
        for (k, v) in (1..=i32::MAX).zip(vectors) {
            self.owners.push(owner);
            self.ks.push(k);
            self.vectors.push(pgvector::Vector::from(v));
        }
    }

    /// Whether there are none.
    pub(crate) fn is_empty(&self) -> bool {
        self.owners.is_empty()
    }
}

/// Appends a filter's conditions (each starting with ` AND`) over alias `m`.
pub(crate) fn push_filter(q: &mut Query, filter: &Filter) {
    if let Some(t) = &filter.tags {
        let tags: Vec<String> = t.tags.iter().map(|t| t.as_str().to_owned()).collect();
        let p = q.bind(tags);
        match t.mode {
            TagMatch::Any => q.push(&format!(" AND m.tags && {p}::text[]")),
            TagMatch::All => q.push(&format!(" AND m.tags @> {p}::text[]")),
        };
    }
    if let Some(t) = filter.created_after {
        let p = q.bind(t.as_millis());
        q.push(&format!(" AND m.created_at >= {p}"));
    }
    if let Some(t) = filter.created_before {
        let p = q.bind(t.as_millis());
        q.push(&format!(" AND m.created_at < {p}"));
    }
    let mut one_of = |column: &str, values: Vec<String>| {
        if !values.is_empty() {
            let p = q.bind(values);
            q.push(&format!(" AND {column} = ANY({p}::text[])"));
        }
    };
    one_of(
        "m.kind",
        filter.kinds.iter().map(|k| k.as_str().to_owned()).collect(),
    );
    one_of(
        "m.role",
        filter.roles.iter().map(|r| r.as_str().to_owned()).collect(),
    );
    if !filter.include_superseded {
        q.push(" AND m.superseded_by IS NULL");
    }
    if let Some(at) = filter.valid_at {
        let p = q.bind(at.as_millis());
        q.push(&format!(
            " AND (m.valid_from IS NULL OR m.valid_from <= {p}) AND (m.valid_until IS NULL OR {p} < m.valid_until)"
        ));
    }
}

/// A keyword query's words, as a statement takes them: the text given to
/// `to_tsquery('english', ..)` or, already as the index holds them, to `..::tsquery`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum TsQuery {
    /// Any of these words (at most [`MAX_QUERY_TERMS`]), stemmed by `to_tsquery`.
    Words(String),
    /// Any of these lexemes (the rarest of a longer query, [`memory_core::keyword::rarest`]), as stored.
    Lexemes(String),
}

impl TsQuery {
    /// The SQL of the query, its text bound at `param`: a function call or a subquery, so
    /// it may stand in a FROM list.
    pub(crate) fn sql(&self, param: &str) -> String {
        match self {
            Self::Words(_) => format!("to_tsquery('english', {param})"),
            Self::Lexemes(_) => format!("(SELECT {param}::text::tsquery)"),
        }
    }

    /// The text to bind.
    pub(crate) fn text(&self) -> &str {
        match self {
            Self::Words(t) | Self::Lexemes(t) => t,
        }
    }
}

/// The `to_tsquery` text for a keyword query of at most [`MAX_QUERY_TERMS`] distinct
/// `words`: any of them. `None` when there is no word. The shared tokenizer yields only
/// alphanumeric words, so no word can carry tsquery syntax.
pub(crate) fn tsquery(words: &[String]) -> Option<String> {
    if words.is_empty() {
        return None;
    }
    Some(words.join(" | "))
}

/// The statement choosing a long query's words (more than [`MAX_QUERY_TERMS`] distinct):
/// of the query's lexemes (its words `$1`, each stemmed as the index stems them), the
/// [`MAX_QUERY_TERMS`] rarest that the scope's memories hold, by how many of them hold each
/// (`ts_stat` over the scope: a pass over its memories' `fts`, made only for such a query),
/// ties by lexeme; joined as a `tsquery` text. `$2` is the tenant and `$3` the scope key;
/// `memories` and `scopes` are the quoted table names.
pub(crate) fn rarest_lexemes_sql(memories: &str, scopes: &str) -> String {
    // The table names go into format()'s pattern: `%` there would be a directive.
    let (memories, scopes) = (memories.replace('%', "%%"), scopes.replace('%', "%%"));
    format!(
        "SELECT string_agg(quote_literal(r.word), ' | ' ORDER BY r.word) FROM \
         (SELECT s.word FROM ts_stat(format('SELECT fts FROM {memories} WHERE tenant = %L \
         AND scope_id = (SELECT id FROM {scopes} WHERE tenant = %L AND key = %L)', \
         $2::text, $2::text, $3::text)) s \
         WHERE s.word IN (SELECT unnest(tsvector_to_array(to_tsvector('english', w))) \
         FROM unnest($1::text[]) w) \
         ORDER BY s.ndoc, s.word LIMIT {MAX_QUERY_TERMS}) r"
    )
}

/// Maps a row of [`entry_cols`] to `(pk, entry)`.
pub(crate) fn entry(row: &Row, schema: &str) -> Result<(i64, MemoryEntry), PostgresError> {
    let row = Cells::new(row, schema);
    let inv = |what: String| PostgresError::InvalidData {
        schema: schema.to_owned(),
        what,
    };
    let core = |e: memory_core::MemoryError| inv(e.to_string());
    let ts = |ms: i64, what: &str| {
        Timestamp::from_millis(ms).ok_or_else(|| inv(format!("{what} {ms} is out of range")))
    };
    let pk: i64 = row.get(0)?;
    let id: Uuid = row.get(1)?;
    let tenant: String = row.get(2)?;
    let user: String = row.get(3)?;
    let chat: Option<String> = row.get(4)?;
    let thread: Option<String> = row.get(5)?;
    let kind: String = row.get(6)?;
    let role: Option<String> = row.get(9)?;
    let tags: Vec<String> = row.get(11)?;
    let importance: f32 = row.get(12)?;
    let created_at: i64 = row.get(14)?;
    let accessed_at: i64 = row.get(15)?;
    let access_count: i64 = row.get(16)?;
    let valid_from: Option<i64> = row.get(17)?;
    let valid_until: Option<i64> = row.get(18)?;
    let superseded_by: Option<Uuid> = row.get(19)?;

    let mut scope = Scope::for_user(user)
        .and_then(|s| s.in_tenant(tenant))
        .map_err(core)?;
    if let Some(c) = chat {
        scope = scope.in_chat(c).map_err(core)?;
    }
    if let Some(t) = thread {
        scope = scope.in_thread(t).map_err(core)?;
    }
    let tags: TagSet = tags
        .iter()
        .map(Tag::new)
        .collect::<memory_core::Result<_>>()
        .map_err(core)?;
    let entry = MemoryEntry {
        id: MemoryId::from_uuid(id),
        scope,
        kind: MemoryKind::parse(&kind).map_err(core)?,
        content: row.get(7)?,
        context: row.get(8)?,
        tags,
        role: role.as_deref().map(Role::parse).transpose().map_err(core)?,
        source: row.get(10)?,
        importance: Importance::new(importance).map_err(core)?,
        pinned: row.get(13)?,
        created_at: ts(created_at, "created_at")?,
        accessed_at: ts(accessed_at, "accessed_at")?,
        access_count: u64::try_from(access_count).unwrap_or(0),
        valid_from: valid_from.map(|t| ts(t, "valid_from")).transpose()?,
        valid_until: valid_until.map(|t| ts(t, "valid_until")).transpose()?,
        superseded_by: superseded_by.map(MemoryId::from_uuid),
        embedded: row.get(20)?,
    };
    Ok((pk, entry))
}

/// Maps rows of [`entry_cols`].
pub(crate) fn entries(
    rows: &[Row],
    schema: &str,
) -> Result<Vec<(i64, MemoryEntry)>, PostgresError> {
    rows.iter().map(|r| entry(r, schema)).collect()
}

/// The column after [`entry_cols`] where ranking statements put the score.
pub(crate) const SCORE_COL: usize = 21;

/// Maps rows of [`entry_cols`] followed by a score to `(pk, entry, score)`.
pub(crate) fn scored_entries(
    rows: &[Row],
    schema: &str,
) -> Result<Vec<(i64, MemoryEntry, f32)>, PostgresError> {
    rows.iter()
        .map(|r| {
            let (pk, e) = entry(r, schema)?;
            let score: f64 = Cells::new(r, schema).get(SCORE_COL)?;
            Ok((pk, e, score as f32))
        })
        .collect()
}

/// Maps `(pk, id, score)` rows.
pub(crate) fn scored(
    rows: &[Row],
    schema: &str,
) -> Result<Vec<(i64, MemoryId, f32)>, PostgresError> {
    rows.iter()
        .map(|r| {
            let r = Cells::new(r, schema);
            let (pk, id, score): (i64, Uuid, f64) = (r.get(0)?, r.get(1)?, r.get(2)?);
            Ok((pk, MemoryId::from_uuid(id), score as f32))
        })
        .collect()
}
