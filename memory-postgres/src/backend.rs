//! `MemoryBackend` for `PostgresBackend`: validation and embedding happen before any
//! statement; writes are one transaction each; every statement names the scope.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::Object;
use memory_core::{
    BackendInfo, Capabilities, Capability, Filter, MemoryBackend, MemoryEntry, MemoryError,
    MemoryId, MemoryPatch, NewMemory, PrunePolicy, PruneReport, Record, Remembered, Result,
    SUPERSEDER_NOT_IN_SCOPE, Scope, ScopeSpread, ScoredMemory, SearchMode, SearchRequest, Spread,
    StoreVectors, Timestamp, check_lease, check_limit, check_record_kind, ensure_scope,
    expected_max, merge_patch, normalise, passage_similarity, plan_prune, rank, same_fact,
    superseded_by_refused, validate_content,
};
use pgvector::Vector;
use tokio_postgres::Row;
use tokio_postgres::error::SqlState;
use uuid::Uuid;

use crate::PostgresBackend;
use crate::error::{BACKEND, Cells, InSchema, PostgresError, query_error};
use crate::index::Indexes;
use crate::schema::{space_is, space_key, space_sql};
use crate::sql::{
    Passages, Query, SCORE_COL, TsQuery, entries, entry, entry_cols, push_filter,
    rarest_lexemes_sql, scored, scored_entries, tsquery,
};
use memory_core::keyword::{self, MAX_QUERY_TERMS};

/// What a candidate statement found: `(pk, id, score)` best first, the entries by pk
/// when it read them, and how the score is spread over the scope when it was asked to tell.
#[derive(Default)]
struct Found {
    ranked: Vec<(i64, MemoryId, f32)>,
    entries: HashMap<i64, MemoryEntry>,
    spread: Option<Spread>,
    /// Keyword candidates of a hybrid search: how many passages each memory is stored as.
    passages: HashMap<i64, usize>,
}

/// How many heads of a scope searched through its HNSW index the spread of its
/// similarities is estimated from.
const SPREAD_SAMPLE: i64 = 2000;

/// How many values of `expected_max` a semantic search passes until it meets a memory of
/// more vectors.
pub(crate) const LONGEST_AT_FIRST: usize = 64;

/// One semantic search's parts.
struct Nearest<'a> {
    scope: &'a Scope,
    /// The scope's id, when its HNSW index is ready.
    indexed: Option<i64>,
    /// The query vector.
    q: &'a [f32],
    filter: &'a Filter,
    limit: usize,
    /// Whether to read the hits' entries too.
    entries: bool,
    /// Whether the search wants the spread (hybrid), not only the scores it corrects.
    spread: bool,
}

impl PostgresBackend {
    fn caps(&self) -> Capabilities {
        Capabilities::full_store(self.embedder.is_some())
            .with(Capability::Persistence)
            .with(Capability::Records)
    }

    fn store_name(&self) -> String {
        format!("store `{}` on {}", self.schema, self.server)
    }

    fn vectors(&self) -> StoreVectors<'_> {
        StoreVectors {
            backend: BACKEND,
            store: self.store_name().into(),
            embedder: self.embedder.as_deref(),
            space: self.space.as_deref(),
        }
    }

    /// SQL that is true while the store records this process's embedding space (its key
    /// bound in `q`; see [`space_is`]), or `true` for a process without one.
    fn space_guard(&self, q: &mut Query) -> String {
        match &self.space {
            Some(space) => space_is(&self.names.meta, &q.bind(space_key(space))),
            None => "true".to_owned(),
        }
    }

    /// [`PostgresError::SpaceMoved`] if the store records another space than this
    /// process's now (another process ran `reembed`).
    pub(crate) async fn check_space<C>(&self, c: &C) -> std::result::Result<(), PostgresError>
    where
        C: deadpool_postgres::GenericClient + Sync,
    {
        let Some(mine) = &self.space else {
            return Ok(());
        };
        let row = self.on(c).one(&space_sql(&self.names.meta), &[]).await?;
        let cells = Cells::new(&row, &self.schema);
        let (provider, model, dims): (Option<String>, Option<String>, Option<String>) =
            (cells.get(0)?, cells.get(1)?, cells.get(2)?);
        let now = match (provider, model, dims) {
            (Some(p), Some(m), Some(d)) => format!("{p}/{m} ({d} dims)"),
            _ => "none".to_owned(),
        };
        // As `EmbeddingSpace` displays itself.
        if mine.to_string() == now {
            return Ok(());
        }
        Err(self.space_moved(now))
    }

    /// [`PostgresError::SpaceMoved`] into `now`.
    fn space_moved(&self, now: String) -> PostgresError {
        PostgresError::SpaceMoved {
            server: self.server.clone(),
            schema: self.schema.clone(),
            now,
            mine: self
                .space
                .as_ref()
                .map_or_else(|| "none".to_owned(), ToString::to_string),
        }
    }

    /// `m.tenant = $t AND m.scope_id = (SELECT id FROM scopes WHERE tenant = $t AND key =
    /// $k)`: the rows of `scope` in `memories m`, the tenant first (as every key leads with
    /// it), binding the scope's tenant and key. Returns the condition and the tenant's
    /// placeholder.
    fn in_scope(&self, q: &mut Query, scope: &Scope) -> (String, String) {
        self.rows_of(q, scope, "m")
    }

    /// [`Self::in_scope`] for the rows of a table named `alias` (with `tenant` and
    /// `scope_id` columns).
    fn rows_of(&self, q: &mut Query, scope: &Scope, alias: &str) -> (String, String) {
        let t = q.bind(scope.tenant().to_owned());
        let k = q.bind(scope.key());
        let condition = format!(
            "{alias}.tenant = {t} AND {alias}.scope_id = \
             (SELECT id FROM {} WHERE tenant = {t} AND key = {k})",
            self.names.scopes
        );
        (condition, t)
    }

    /// The statement's last part over the ranked candidates `t` (pk, id, score) of the
    /// tenant bound at `tenant`: with `entries`, `SELECT <entry columns>, t.score[, extra]
    /// FROM t JOIN memories m ...`; without, `SELECT t.pk, t.id, t.score[, extra] FROM t`.
    /// Best first.
    fn candidate_rows(&self, entries: bool, extra: &str, tenant: &str) -> String {
        if entries {
            format!(
                "SELECT {}, t.score::float8{extra} FROM t \
                 JOIN {} m ON m.tenant = {tenant} AND m.pk = t.pk {} \
                 ORDER BY t.score DESC, t.id",
                entry_cols("a"),
                self.names.memories,
                self.joins()
            )
        } else {
            format!("SELECT t.pk, t.id, t.score::float8{extra} FROM t ORDER BY t.score DESC, t.id")
        }
    }

    /// Maps the rows of [`Self::candidate_rows`].
    fn found(&self, rows: &[Row], entries: bool) -> std::result::Result<Found, PostgresError> {
        if entries {
            let mut found = Found::default();
            for (pk, e, score) in scored_entries(rows, &self.schema)? {
                found.ranked.push((pk, e.id, score));
                found.entries.insert(pk, e);
            }
            Ok(found)
        } else {
            Ok(Found {
                ranked: scored(rows, &self.schema)?,
                ..Found::default()
            })
        }
    }

    /// The best `limit` memories by similarity among the scope's memories passing the
    /// filter, with their entries if `entries`, and how the similarities of the scope's
    /// vectors are spread (kept in [`Found::spread`] when the search wants it).
    ///
    /// A memory's similarity is its best vector's (its head, `memories.embedding`, or one of
    /// its further passages, `memory_passages`) less what its number of vectors adds by
    /// chance: [`passage_similarity`], with the deviation of the similarities of every
    /// vector of the scope, whatever the filter. A memory of one vector keeps its cosine.
    /// One statement ([`Self::semantic_sql`]) sums the spread and ranks the memories so,
    /// with the deviation computed in SQL as [`Spread::from_sums`] computes it (the suite's
    /// long-memory scenario holds the two together); the scores are then computed here by
    /// `passage_similarity` itself, with that deviation, and the hits sorted by them. A
    /// statement that meets a memory of more vectors than its `expected_max` values cover
    /// is run again with more (and later searches start with them).
    async fn semantic(
        &self,
        c: &Object,
        search: &Nearest<'_>,
    ) -> std::result::Result<Found, PostgresError> {
        loop {
            let longest = self.longest.load(Ordering::Relaxed);
            // Vectors of another space (another process ran `reembed`) must not meet this
            // process's query: the statement says whether the store still records this
            // process's space, in its own snapshot; when it returns no row, or fails (the
            // vectors' dimensions may differ now), a look of its own says.
            let rows = match self.rows(c, &self.semantic_sql(search, longest)).await {
                Ok(rows) => rows,
                Err(e) => {
                    self.check_space(c).await?;
                    return Err(e);
                }
            };
            let Some(first) = rows.first() else {
                self.check_space(c).await?;
                return Ok(Found::default());
            };
            // After the score: each row's best similarity and number of vectors; then, the
            // same in every row, the spread's count, sum and sum of squares, the deviation
            // the statement ranked by, the most vectors of a memory ranked, whether the store
            // records this process's space, and on the exact path the scope's id and whether
            // its index is ready.
            let at = if search.entries { SCORE_COL + 1 } else { 3 };
            let cells = Cells::new(first, &self.schema);
            if !cells.get::<bool>(at + 7)? {
                self.check_space(c).await?;
                return Err(self.space_moved("another space".to_owned()));
            }
            let most: Option<i64> = cells.get(at + 6)?;
            let most = most.and_then(|n| usize::try_from(n).ok()).unwrap_or(1);
            if most > longest {
                self.longest
                    .fetch_max(most.next_power_of_two(), Ordering::Relaxed);
                continue;
            }
            let count: i64 = cells.get(at + 2)?;
            let spread = Spread::from_sums(
                usize::try_from(count).unwrap_or(0),
                cells.get(at + 3)?,
                cells.get(at + 4)?,
            );
            // The statement's own deviation, so that the hits are those it chose; it is
            // `spread.std()` computed in SQL.
            let deviation: f64 = cells.get(at + 5)?;
            if search.indexed.is_none() {
                let id: i64 = cells.get(at + 8)?;
                let ready: bool = cells.get(at + 9)?;
                self.indexes.learn(&search.scope.key(), id, ready);
            }
            let mut found = self.found(&rows, search.entries)?;
            for (hit, row) in found.ranked.iter_mut().zip(&rows) {
                let cells = Cells::new(row, &self.schema);
                let best: f64 = cells.get(at)?;
                let vectors: i64 = cells.get(at + 1)?;
                hit.2 = passage_similarity(
                    best as f32,
                    usize::try_from(vectors).unwrap_or(1),
                    deviation as f32,
                );
            }
            found
                .ranked
                .sort_by(|a, b| b.2.total_cmp(&a.2).then(a.1.cmp(&b.1)));
            found.spread = search.spread.then_some(spread);
            return Ok(found);
        }
    }

    /// The statement of [`Self::semantic`], passing `expected_max(1..=longest)`.
    ///
    /// It ranks, by the corrected similarity, the top `limit` heads of the passing memories
    /// of one vector and every passing long memory, all of whose vectors it reads: the
    /// scope's passages are scanned through their scope index (only long memories have
    /// any), and each long memory's head is looked up once. That is the top `limit` of
    /// ranking every memory so: a memory of one vector outside the top heads is beaten by
    /// all of them. (SQL ranks in double precision, the scores are computed in single:
    /// memories within rounding of each other at the edge may trade places.)
    ///
    /// With `indexed` (the scope's id, its HNSW index being ready), the scope's own index
    /// gives the top heads with iterative scan, which is approximate; the id is written into
    /// the statement so the planner can match the partial index. The spread is then an
    /// estimate, as computing every head's similarity would defeat the index: the heads'
    /// part is measured on at most [`SPREAD_SAMPLE`] of them (as a b-tree index of the scope
    /// yields them: an arbitrary sample, not a random one) and scaled to the scope's
    /// `stored` count, to which the passages, all read anyway, add exactly. In semantic
    /// mode the sample is taken only when some long memory needs the deviation.
    ///
    /// Otherwise every head distance in the scope is computed, filter aside, so the spread
    /// is exact: its rows come through the scope index (the materialized CTE keeps the
    /// planner from an index that cannot filter by scope first), and the rows also say
    /// whether the scope has a ready index now, so searches learn of indexes other
    /// processes built.
    fn semantic_sql(&self, search: &Nearest<'_>, longest: usize) -> Query {
        let (m, p, op) = (
            &self.names.memories,
            &self.names.passages,
            &self.names.cosine,
        );
        let mut query = Query::default();
        let qv = query.bind(Vector::from(search.q.to_vec()));
        let lim = query.bind(i64::try_from(search.limit).unwrap_or(i64::MAX));
        let t = query.bind(search.scope.tenant().to_owned());
        let em = query.bind(
            (1..=longest)
                .map(|n| f64::from(expected_max(n)))
                .collect::<Vec<f64>>(),
        );
        let sid = match search.indexed {
            Some(id) => {
                query.push("WITH ");
                id.to_string()
            }
            None => {
                // The scope, and whether its index is ready, looked up once per statement.
                let key = query.bind(search.scope.key());
                let schema = query.bind(self.schema.clone());
                query.push(&format!(
                    "WITH s AS MATERIALIZED (SELECT sc.id, {} AS ready FROM {} sc \
                     WHERE sc.tenant = {t} AND sc.key = {key}), ",
                    Indexes::ready_sql("sc.id", &schema),
                    self.names.scopes
                ));
                "(SELECT id FROM s)".to_owned()
            }
        };
        let embedded = format!(
            "m.tenant = {t} AND m.scope_id = {sid} AND m.embedding IS NOT NULL AND m.embedded"
        );
        // `pv`: the scope's passages by memory (the least distance, and the count, sum and
        // sum of squares of their similarities); `v`: the long memories they belong to, by
        // their best vector (the head's looked up once a memory), with their number of
        // vectors and whether they pass the filter; `l`: those that pass; `ps`: the sums
        // over every passage.
        const SUMS: &str = "count(*) AS n, coalesce(sum(1 - d), 0) AS s, \
                            coalesce(sum((1 - d) * (1 - d)), 0) AS ss";
        query.push(&format!(
            "pv AS MATERIALIZED (SELECT memory, min(d) AS d, {SUMS} FROM \
             (SELECT p.memory, p.embedding {op} {qv} AS d FROM {p} p \
             WHERE p.tenant = {t} AND p.scope_id = {sid}) x GROUP BY memory), \
             v AS MATERIALIZED (SELECT m.pk, m.id, least(pv.d, m.embedding {op} {qv}) AS d, \
             pv.n + 1 AS n, pv.s, pv.ss, (true"
        ));
        push_filter(&mut query, search.filter);
        query.push(&format!(
            ") AS pass FROM pv JOIN {m} m ON m.tenant = {t} AND m.pk = pv.memory WHERE {embedded}), \
             l AS (SELECT pk, id, d, n FROM v WHERE pass), \
             ps AS (SELECT coalesce(sum(n - 1), 0)::int8 AS n, coalesce(sum(s), 0) AS s, \
             coalesce(sum(ss), 0) AS ss FROM v), "
        ));
        // `h`: the top heads of memories of one vector; `sp`: the count, sum and sum of
        // squares of the similarities of the scope's vectors.
        if search.indexed.is_some() {
            query.push(&format!(
                "h AS MATERIALIZED (SELECT m.pk, m.id, m.embedding {op} {qv} AS d FROM {m} m \
                 WHERE {embedded}"
            ));
            push_filter(&mut query, search.filter);
            let gate = if search.spread {
                ""
            } else {
                " AND EXISTS (SELECT 1 FROM l)"
            };
            query.push(&format!(
                " AND NOT EXISTS (SELECT 1 FROM {p} x WHERE x.tenant = {t} AND x.memory = m.pk) \
                 ORDER BY m.embedding {op} {qv} LIMIT {lim}), \
                 hs AS (SELECT {SUMS} FROM (SELECT m.embedding {op} {qv} AS d FROM {m} m \
                 WHERE {embedded}{gate} LIMIT {SPREAD_SAMPLE}) a), \
                 hw AS MATERIALIZED (SELECT hs.*, CASE WHEN hs.n < {SPREAD_SAMPLE} THEN hs.n \
                 ELSE greatest(hs.n, (SELECT sc.stored FROM {} sc \
                 WHERE sc.tenant = {t} AND sc.id = {sid})) END AS heads FROM hs), \
                 sp AS (SELECT hw.heads + ps.n AS n, hw.s * hw.heads / greatest(hw.n, 1) + ps.s AS s, \
                 hw.ss * hw.heads / greatest(hw.n, 1) + ps.ss AS ss FROM hw, ps), ",
                self.names.scopes
            ));
        } else {
            query.push(&format!(
                "c AS MATERIALIZED (SELECT m.pk, m.id, m.embedding {op} {qv} AS d, (true"
            ));
            push_filter(&mut query, search.filter);
            query.push(&format!(
                ") AS pass FROM {m} m WHERE {embedded}), \
                 h AS (SELECT pk, id, d FROM c WHERE pass \
                 AND NOT EXISTS (SELECT 1 FROM pv WHERE pv.memory = c.pk) ORDER BY d, id LIMIT {lim}), \
                 sp AS (SELECT hs.n + ps.n AS n, hs.s + ps.s AS s, hs.ss + ps.ss AS ss \
                 FROM (SELECT {SUMS} FROM c) hs, ps), "
            ));
        }
        // `dv`: the deviation of `sp` as `Spread::from_sums` has it (counting one memory more
        // that scores 0); `t`: the best by `passage_similarity` with it.
        query.push(&format!(
            "dv AS MATERIALIZED (SELECT sqrt(greatest(ss / (n + 1) - (s / (n + 1)) ^ 2, 0)) AS dev \
             FROM sp), \
             t AS (SELECT pk, id, CASE WHEN n = 1 THEN 1 - d \
             ELSE 1 - d - (SELECT dev FROM dv) * ({em}::float8[])[n::int4] END AS score, \
             1 - d AS best, n \
             FROM (SELECT pk, id, d, 1::int8 AS n FROM h UNION ALL SELECT pk, id, d, n FROM l) x \
             ORDER BY score DESC, id LIMIT {lim}) "
        ));
        let guard = self.space_guard(&mut query);
        let mut extra = format!(
            ", t.best::float8, t.n, (SELECT n FROM sp)::int8, (SELECT s FROM sp)::float8, \
             (SELECT ss FROM sp)::float8, (SELECT dev FROM dv)::float8, \
             (SELECT max(n) FROM l)::int8, {guard}"
        );
        if search.indexed.is_none() {
            extra.push_str(", (SELECT id FROM s), (SELECT ready FROM s)");
        }
        query.push(&self.candidate_rows(search.entries, &extra, &t));
        query
    }

    /// The keyword query for `text` in `scope`: any of its distinct words (of its first
    /// [`keyword::MAX_QUERY_BYTES`] bytes), or of more than [`MAX_QUERY_TERMS`] the
    /// [`MAX_QUERY_TERMS`] rarest lexemes the scope holds ([`rarest_lexemes_sql`]), so no
    /// query gives the server an expression of thousands of alternatives to parse. `None`
    /// when there is no word to search for.
    pub(crate) async fn keyword_query(
        &self,
        c: &Object,
        scope: &Scope,
        text: &str,
    ) -> std::result::Result<Option<TsQuery>, PostgresError> {
        let words = keyword::query_words(text);
        if words.len() <= MAX_QUERY_TERMS {
            return Ok(tsquery(&words).map(TsQuery::Words));
        }
        let sql = rarest_lexemes_sql(&self.names.memories, &self.names.scopes);
        let rows = self
            .rows(c, &{
                let mut q = Query::default();
                q.bind(words);
                q.bind(scope.tenant().to_owned());
                q.bind(scope.key());
                q.push(&sql);
                q
            })
            .await?;
        let picked: Option<String> = match rows.first() {
            Some(row) => Cells::new(row, &self.schema).get(0)?,
            None => None,
        };
        Ok(picked.map(TsQuery::Lexemes))
    }

    /// Top-`limit` full-text matches (raw `ts_rank`, higher is better) in the scope, with
    /// their entries if `entries`. With `spread`, the same statement sums how the ranks are
    /// spread over the scope's memories (every one of them, a memory that does not match or
    /// does not pass the filter counting 0), kept in [`Found::spread`].
    #[expect(
        clippy::too_many_arguments,
        reason = "one search's parts, each used once; a struct would only rename them"
    )]
    async fn keyword(
        &self,
        c: &Object,
        scope: &Scope,
        text: &str,
        filter: &Filter,
        limit: usize,
        entries: bool,
        spread: bool,
    ) -> std::result::Result<Found, PostgresError> {
        let Some(tsq) = self.keyword_query(c, scope, text).await? else {
            return Ok(Found::default());
        };
        let m = &self.names.memories;
        let mut query = Query::default();
        let (in_scope, t) = self.in_scope(&mut query, scope);
        let tq = tsq.sql(&query.bind(tsq.text().to_owned()));
        // Weights {D, C, B, A}: content is A, context B at 0.3 of it (as memory-sqlite's
        // bm25 column weights); normalization 1 divides by 1 + log(document length).
        query.push(&format!(
            "WITH k AS (SELECT m.pk, m.id, \
             ts_rank('{{0, 0, 0.3, 1}}'::float4[], m.fts, q.q, 1) AS score \
             FROM {m} m, {tq} AS q(q) \
             WHERE {in_scope} AND m.fts @@ q.q"
        ));
        push_filter(&mut query, filter);
        let lim = query.bind(i64::try_from(limit).unwrap_or(i64::MAX));
        query.push(&format!(
            "), t AS (SELECT pk, id, score FROM k ORDER BY score DESC, id LIMIT {lim}) "
        ));
        // In hybrid search (a store with vectors): each candidate's number of passages (its
        // head and its further ones), then the spread of the scope's scores.
        let extra = if spread {
            format!(
                ", 1 + (SELECT count(*) FROM {p} p WHERE p.tenant = {t} AND p.memory = t.pk), \
                 (SELECT count(*) FROM {m} m WHERE {in_scope}), \
                 (SELECT coalesce(sum(score::float8), 0) FROM k), \
                 (SELECT coalesce(sum(score::float8 * score::float8), 0) FROM k)",
                p = self.names.passages
            )
        } else {
            String::new()
        };
        query.push(&self.candidate_rows(entries, &extra, &t));
        let rows = self.rows(c, &query).await?;
        let mut found = self.found(&rows, entries)?;
        if spread {
            let at = if entries { SCORE_COL + 1 } else { 3 };
            for (row, &(pk, _, _)) in rows.iter().zip(&found.ranked) {
                let n: i64 = Cells::new(row, &self.schema).get(at)?;
                found.passages.insert(pk, usize::try_from(n).unwrap_or(1));
            }
            if let Some(first) = rows.first() {
                let cells = Cells::new(first, &self.schema);
                let count: i64 = cells.get(at + 1)?;
                found.spread = Some(Spread::from_sums(
                    usize::try_from(count).unwrap_or(0),
                    cells.get(at + 2)?,
                    cells.get(at + 3)?,
                ));
            }
        }
        Ok(found)
    }

    /// Runs a prepared (cached) query.
    async fn rows(
        &self,
        c: &Object,
        query: &Query,
    ) -> std::result::Result<Vec<tokio_postgres::Row>, PostgresError> {
        self.on(c).rows(&query.sql, &query.params()).await
    }

    /// Loads the entries of these pks in the scope with key `key`, counting a recall of
    /// each if `bump` (the new counts come back with them). A memory deleted since it was
    /// ranked is not among them.
    async fn load(
        &self,
        c: &Object,
        scope: &Scope,
        pks: Vec<i64>,
        bump: bool,
    ) -> std::result::Result<HashMap<i64, MemoryEntry>, PostgresError> {
        if pks.is_empty() {
            return Ok(HashMap::new());
        }
        let (m, s, acc) = (&self.names.memories, &self.names.scopes, &self.names.access);
        let (key, tenant) = (scope.key(), scope.tenant());
        let rows = if bump {
            let sql = format!(
                "WITH b AS (INSERT INTO {acc} AS x (tenant, pk, accessed_at, access_count) \
                 SELECT m.tenant, m.pk, $4, 1 FROM {m} m \
                 WHERE m.tenant = $1 AND m.scope_id = (SELECT id FROM {s} WHERE tenant = $1 AND key = $2) \
                 AND m.pk = ANY($3) \
                 ON CONFLICT (tenant, pk) DO UPDATE SET access_count = x.access_count + 1, \
                 accessed_at = GREATEST(x.accessed_at, excluded.accessed_at) \
                 RETURNING pk, accessed_at, access_count) \
                 SELECT {} FROM {m} m JOIN {s} sc ON sc.tenant = m.tenant AND sc.id = m.scope_id \
                 JOIN b ON b.pk = m.pk WHERE m.tenant = $1 AND sc.key = $2",
                entry_cols("b")
            );
            let now = Timestamp::now().as_millis();
            self.on(c).rows(&sql, &[&tenant, &key, &pks, &now]).await?
        } else {
            let sql = self.select_entries("WHERE m.tenant = $1 AND sc.key = $2 AND m.pk = ANY($3)");
            self.on(c).rows(&sql, &[&tenant, &key, &pks]).await?
        };
        Ok(entries(&rows, &self.schema)?.into_iter().collect())
    }

    /// `SELECT <entry columns> FROM memories m JOIN scopes sc ... LEFT JOIN memory_access a`
    /// followed by `tail`, which names the tenant (`m.tenant = ...`).
    fn select_entries(&self, tail: &str) -> String {
        format!(
            "SELECT {} FROM {} m {} {tail}",
            entry_cols("a"),
            self.names.memories,
            self.joins()
        )
    }

    /// A memory row `m`'s scope `sc` and recall counts `a`, joined within its tenant.
    fn joins(&self) -> String {
        format!(
            "JOIN {} sc ON sc.tenant = m.tenant AND sc.id = m.scope_id \
             LEFT JOIN {} a ON a.tenant = m.tenant AND a.pk = m.pk",
            self.names.scopes, self.names.access
        )
    }

    /// [`MemoryBackend::remember_once`]'s look and store, on `client`, which holds the
    /// fact's lock: the scope's memories of its kind matching all of its words (or, for a
    /// text of stopwords only, all of them) are compared with it; the oldest that is the same
    /// fact takes the new one's tags, importance and pin, else `memory` (embedded as
    /// `vector`, one per passage) is stored.
    async fn remember_locked(
        &self,
        client: &mut Object,
        scope: &Scope,
        memory: NewMemory,
        vector: Vec<Vec<f32>>,
        told: &NewMemory,
        wanted: &str,
    ) -> Result<Remembered> {
        let now = Timestamp::now();
        let sql = self.select_entries(
            "WHERE m.tenant = $4 AND sc.key = $1 AND m.kind = $2 AND m.superseded_by IS NULL \
             AND (m.fts @@ plainto_tsquery('english', $3) \
             OR numnode(plainto_tsquery('english', $3)) = 0) \
             ORDER BY m.created_at, m.id LIMIT 200",
        );
        let rows = client
            .query(
                &sql,
                &[
                    &scope.key(),
                    &told.kind.as_str(),
                    &told.content.as_str(),
                    &scope.tenant(),
                ],
            )
            .await
            .in_schema(&self.schema)?;
        let same = entries(&rows, &self.schema)?
            .into_iter()
            .find(|(_, e)| same_fact(e, told.kind, wanted, now));
        if let Some((pk, mut existing)) = same {
            let patch = merge_patch(&existing, told);
            if !patch.is_empty() {
                patch.apply(&mut existing);
                let tags: Vec<String> = existing
                    .tags
                    .iter()
                    .map(|t| t.as_str().to_owned())
                    .collect();
                client
                    .execute(
                        &format!(
                            "UPDATE {} SET tags = $1::text[], importance = $2, pinned = $3 \
                             WHERE tenant = $5 AND pk = $4",
                            self.names.memories
                        ),
                        &[
                            &tags,
                            &existing.importance.get(),
                            &existing.pinned,
                            &pk,
                            &scope.tenant(),
                        ],
                    )
                    .await
                    .in_schema(&self.schema)?;
            }
            ensure_scope(BACKEND, scope, [&existing])?;
            return Ok(Remembered {
                entry: existing,
                merged: true,
            });
        }
        let mut entries = [memory.into_entry(scope, now, !vector.is_empty())];
        match self
            .insert_all(client, scope, &mut entries, vec![vector])
            .await?
        {
            Ok((scope_id, stored)) => {
                let key = scope.key();
                if self.indexes.wants(&key, stored) {
                    self.indexes
                        .spawn_build(key, scope.tenant().to_owned(), scope_id);
                }
            }
            Err(id) => return Err(MemoryError::Conflict { id }),
        }
        let [entry] = entries;
        Ok(Remembered {
            entry,
            merged: false,
        })
    }

    /// Adds `n` to the memories stored in `scope` (creating its row if needed); returns
    /// the scope's id and that count. The scope's row stays locked until `tx` ends, so
    /// writers into one scope take turns.
    async fn count_into_scope(
        &self,
        tx: &deadpool_postgres::Transaction<'_>,
        scope: &Scope,
        n: usize,
    ) -> std::result::Result<(i64, i64), PostgresError> {
        let sql = format!(
            "INSERT INTO {} AS x (key, tenant, user_id, chat, thread, stored) \
             VALUES ($1, $2, $3, $4, $5, $6) \
             ON CONFLICT (tenant, key) DO UPDATE SET stored = x.stored + excluded.stored \
             RETURNING id, stored",
            self.names.scopes
        );
        let n = i64::try_from(n).unwrap_or(i64::MAX);
        let row = self
            .on(tx)
            .one(
                &sql,
                &[
                    &scope.key(),
                    &scope.tenant(),
                    &scope.user(),
                    &scope.chat(),
                    &scope.thread(),
                    &n,
                ],
            )
            .await?;
        let get = |i| row.try_get::<_, i64>(i).in_schema(&self.schema);
        Ok((get(0)?, get(1)?))
    }

    /// Writes `entries` (with their `vectors`: per memory, one per passage) into the scope
    /// in one transaction. Returns the scope's id and its count of memories ever stored, or
    /// the first id of the batch that another memory holds already (nothing written). If
    /// another process moved the store to another embedding space, the memories are written
    /// without their vectors (and `entries` say so).
    async fn insert_all(
        &self,
        client: &mut Object,
        scope: &Scope,
        entries: &mut [MemoryEntry],
        vectors: Vec<Vec<Vec<f32>>>,
    ) -> std::result::Result<std::result::Result<(i64, i64), MemoryId>, PostgresError> {
        let ids: Vec<Uuid> = entries.iter().map(|e| *e.id.as_uuid()).collect();
        let tx = client.transaction().await.in_schema(&self.schema)?;
        let tenant = scope.tenant();
        let (taken, same_space) = self.first_taken(&tx, tenant, &ids).await?;
        if let Some(id) = taken {
            return Ok(Err(id));
        }
        let vectors = if same_space {
            vectors
        } else {
            // Another process re-embedded the store: keep the text, without vectors of the
            // old space; a process of the new space embeds them.
            entries.iter_mut().for_each(|e| e.embedded = false);
            Vec::new()
        };
        let mut heads: Vec<Option<Vec<f32>>> = vec![None; ids.len()];
        let mut more = Passages::default();
        for ((&id, head), vectors) in ids.iter().zip(&mut heads).zip(vectors) {
            let mut vectors = vectors.into_iter();
            *head = vectors.next();
            more.extend(id, vectors);
        }
        let (scope_id, stored) = self.count_into_scope(&tx, scope, entries.len()).await?;
        let insert = self.insert_statement(tenant, scope_id, ids.clone(), entries, heads);
        match tx.execute(&insert.sql, &insert.params()).await {
            Ok(_) => {}
            Err(e) if e.code() == Some(&SqlState::UNIQUE_VIOLATION) => {
                // Another process took one of the ids after the check above.
                drop(tx);
                return match self.collided(client, tenant, &ids, &e).await? {
                    Some(id) => Ok(Err(id)),
                    None => Err(query_error(&self.schema, e)),
                };
            }
            Err(e) => return Err(query_error(&self.schema, e)),
        }
        if !more.is_empty() {
            let sql = format!(
                "INSERT INTO {} (tenant, memory, scope_id, k, embedding) \
                 SELECT m.tenant, m.pk, m.scope_id, u.k, u.v \
                 FROM unnest($1::uuid[], $2::int4[], $3::{}[]) AS u(id, k, v) \
                 JOIN {} m ON m.tenant = $5 AND m.id = u.id WHERE m.scope_id = $4",
                self.names.passages, self.names.vector, self.names.memories
            );
            let params: [&(dyn tokio_postgres::types::ToSql + Sync); 5] =
                [&more.owners, &more.ks, &more.vectors, &scope_id, &tenant];
            tx.execute(&sql, &params).await.in_schema(&self.schema)?;
        }
        tx.commit().await.in_schema(&self.schema)?;
        Ok(Ok((scope_id, stored)))
    }

    /// The first of `ids`, in their order, that a stored memory of `tenant` holds (ids are
    /// unique per tenant), and whether the store records this process's embedding space.
    /// The first statement of a write transaction: from it on, the transaction holds a lock
    /// on `memories` that a `reembed` waits for, so the space it saw holds until it ends.
    async fn first_taken(
        &self,
        c: &tokio_postgres::Transaction<'_>,
        tenant: &str,
        ids: &[Uuid],
    ) -> std::result::Result<(Option<MemoryId>, bool), PostgresError> {
        let mut q = Query::default();
        let ids_p = q.bind(ids.to_vec());
        let t = q.bind(tenant.to_owned());
        let guard = self.space_guard(&mut q);
        q.push(&format!(
            "SELECT (SELECT id FROM {} WHERE tenant = {t} AND id = ANY({ids_p}) \
             ORDER BY array_position({ids_p}, id) LIMIT 1), {guard}",
            self.names.memories
        ));
        let row = c
            .query_one(&q.sql, &q.params())
            .await
            .in_schema(&self.schema)?;
        let cells = Cells::new(&row, &self.schema);
        let taken: Option<Uuid> = cells.get(0)?;
        Ok((taken.map(MemoryId::from_uuid), cells.get(1)?))
    }

    /// Which of `ids` an insert that failed with `violation` (a unique violation) collided
    /// with: the id the server names in the violation's detail, or else the first of them
    /// stored now (looked up in a transaction of its own, the failed one being gone).
    async fn collided(
        &self,
        client: &mut Object,
        tenant: &str,
        ids: &[Uuid],
        violation: &tokio_postgres::Error,
    ) -> std::result::Result<Option<MemoryId>, PostgresError> {
        let detail = violation
            .as_db_error()
            .and_then(|d| d.detail())
            .unwrap_or_default();
        if let Some(id) = ids.iter().find(|id| detail.contains(&id.to_string())) {
            return Ok(Some(MemoryId::from_uuid(*id)));
        }
        let tx = client.transaction().await.in_schema(&self.schema)?;
        Ok(self.first_taken(&tx, tenant, ids).await?.0)
    }

    /// The one `INSERT ... SELECT FROM unnest(...)` that writes the whole batch: one array
    /// parameter per column.
    fn insert_statement(
        &self,
        tenant: &str,
        scope_id: i64,
        ids: Vec<Uuid>,
        entries: &[MemoryEntry],
        vectors: Vec<Option<Vec<f32>>>,
    ) -> Query {
        let mut q = Query::default();
        let sid = q.bind(scope_id);
        let t = q.bind(tenant.to_owned());
        let embedded = q.bind(vectors.iter().map(Option::is_some).collect::<Vec<_>>());
        let [
            id,
            kind,
            content,
            context,
            role,
            source,
            tags,
            imp,
            pinned,
            ca,
            aa,
            ac,
            vf,
            vu,
            sup,
        ] = bind_columns(&mut q, ids, entries);
        let with_vectors = self.space.is_some();
        let vec_col = if with_vectors {
            let p = q.bind(
                vectors
                    .into_iter()
                    .map(|v| v.map(Vector::from))
                    .collect::<Vec<_>>(),
            );
            format!(", {p}::{}[]", self.names.vector)
        } else {
            String::new()
        };
        q.push(&format!(
            "INSERT INTO {m} (tenant, id, scope_id, kind, content, context, role, source, tags, importance, \
             pinned, created_at, accessed_at, access_count, valid_from, valid_until, superseded_by, \
             embedded{e}) \
             SELECT {t}, u.id, {sid}, u.kind, u.content, u.context, u.role, u.source, \
             string_to_array(u.tags, ' '), u.importance, u.pinned, u.created_at, u.accessed_at, \
             u.access_count, u.valid_from, u.valid_until, u.superseded_by, u.embedded{ev} \
             FROM unnest({id}::uuid[], {kind}::text[], {content}::text[], {context}::text[], \
             {role}::text[], {source}::text[], {tags}::text[], {imp}::float4[], {pinned}::bool[], \
             {ca}::int8[], {aa}::int8[], {ac}::int8[], {vf}::int8[], {vu}::int8[], {sup}::uuid[], \
             {embedded}::bool[]{vec_col}) AS u(id, kind, content, context, role, source, tags, \
             importance, pinned, created_at, accessed_at, access_count, valid_from, valid_until, \
             superseded_by, embedded{e})",
            m = self.names.memories,
            e = if with_vectors { ", embedding" } else { "" },
            ev = if with_vectors { ", u.embedding" } else { "" },
        ));
        q
    }
}

/// Binds the entries' columns, one array each, in the order of [`PostgresBackend::insert_statement`]'s
/// `unnest`: id, kind, content, context, role, source, tags, importance, pinned, created,
/// accessed, access count, valid from, valid until, superseded by.
fn bind_columns(q: &mut Query, ids: Vec<Uuid>, entries: &[MemoryEntry]) -> [String; 15] {
    fn col<T>(entries: &[MemoryEntry], f: impl Fn(&MemoryEntry) -> T) -> Vec<T> {
        entries.iter().map(f).collect()
    }
    [
        q.bind(ids),
        q.bind(col(entries, |e| e.kind.as_str().to_owned())),
        q.bind(col(entries, |e| e.content.clone())),
        q.bind(col(entries, |e| e.context.clone())),
        q.bind(col(entries, |e| e.role.map(|r| r.as_str().to_owned()))),
        q.bind(col(entries, |e| e.source.clone())),
        // Tags hold no whitespace, so one space-joined string per memory is lossless.
        q.bind(col(entries, |e| {
            e.tags
                .iter()
                .map(|t| t.as_str())
                .collect::<Vec<_>>()
                .join(" ")
        })),
        q.bind(col(entries, |e| e.importance.get())),
        q.bind(col(entries, |e| e.pinned)),
        q.bind(col(entries, |e| e.created_at.as_millis())),
        q.bind(col(entries, |e| e.accessed_at.as_millis())),
        q.bind(col(entries, |e| {
            i64::try_from(e.access_count).unwrap_or(i64::MAX)
        })),
        q.bind(col(entries, |e| e.valid_from.map(Timestamp::as_millis))),
        q.bind(col(entries, |e| e.valid_until.map(Timestamp::as_millis))),
        q.bind(col(entries, |e| e.superseded_by.map(|s| *s.as_uuid()))),
    ]
}

#[async_trait]
impl MemoryBackend for PostgresBackend {
    fn info(&self) -> BackendInfo {
        BackendInfo {
            name: BACKEND.to_owned(),
            location: Some(match self.partitions {
                0 => format!("postgres {} schema {}", self.server, self.schema),
                n => format!(
                    "postgres {} schema {}, {n} tenant partitions",
                    self.server, self.schema
                ),
            }),
            topology: memory_core::Topology::Server,
            durable: true,
            embedding_space: self.embedder.as_ref().and(self.space.clone()),
            limits: self.config.limits,
        }
    }

    fn capabilities(&self) -> Capabilities {
        self.caps()
    }

    /// Expiry by the server's clock, so replicas on machines whose clocks differ agree.
    async fn try_lease(&self, name: &str, holder: &str, ttl: Duration) -> Result<bool> {
        let ttl_ms = check_lease(name, holder, ttl)?;
        let c = self.client().await?;
        // The row is locked by the upsert, so two takers of a free lease do not both win.
        let sql = format!(
            "INSERT INTO {l} AS l (name, holder, until_ms) \
             VALUES ($1, $2, (extract(epoch FROM clock_timestamp()) * 1000)::bigint + $3) \
             ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, until_ms = excluded.until_ms \
             WHERE l.holder = excluded.holder OR l.until_ms <= excluded.until_ms - $3 \
             RETURNING holder",
            l = self.names.leases
        );
        let rows = self.on(&c).rows(&sql, &[&name, &holder, &ttl_ms]).await?;
        Ok(!rows.is_empty())
    }

    async fn release_lease(&self, name: &str, holder: &str) -> Result<()> {
        let c = self.client().await?;
        let sql = format!(
            "DELETE FROM {} WHERE name = $1 AND holder = $2",
            self.names.leases
        );
        self.on(&c).execute(&sql, &[&name, &holder]).await?;
        Ok(())
    }

    async fn end_lease(&self, name: &str) -> Result<()> {
        let c = self.client().await?;
        let sql = format!("DELETE FROM {} WHERE name = $1", self.names.leases);
        self.on(&c).execute(&sql, &[&name]).await?;
        Ok(())
    }

    /// One transaction, the ring trimmed in it. Keepers of one scope take turns on the
    /// scope's row (its upsert locks it), so concurrent keeps leave exactly the newest.
    async fn keep_record(&self, scope: &Scope, record: Record, keep: usize) -> Result<()> {
        record.validate(keep)?;
        let keep = i64::try_from(keep).unwrap_or(i64::MAX);
        let mut client = self.client().await?;
        let tx = client.transaction().await.in_schema(&self.schema)?;
        let (scope_id, _) = self.count_into_scope(&tx, scope, 0).await?;
        let r = &self.names.records;
        let tenant = scope.tenant();
        self.on(&tx)
            .execute(
                &format!(
                    "INSERT INTO {r} (tenant, scope_id, kind, at, body, quotes) \
                     VALUES ($1, $2, $3, $4, $5, $6)"
                ),
                &[
                    &tenant,
                    &scope_id,
                    &record.kind,
                    &record.at.as_millis(),
                    &record.body,
                    &record
                        .quotes
                        .iter()
                        .map(|m| *m.as_uuid())
                        .collect::<Vec<Uuid>>(),
                ],
            )
            .await?;
        self.on(&tx)
            .execute(
                &format!(
                    "DELETE FROM {r} WHERE tenant = $1 AND scope_id = $2 AND kind = $3 \
                     AND id NOT IN (SELECT id FROM {r} WHERE tenant = $1 AND scope_id = $2 \
                     AND kind = $3 ORDER BY at DESC, id DESC LIMIT $4)"
                ),
                &[&tenant, &scope_id, &record.kind, &keep],
            )
            .await?;
        tx.commit().await.in_schema(&self.schema)?;
        Ok(())
    }

    /// `VACUUM` of the store's tables: rows deleted (and the old versions of rows changed)
    /// leave the tables, their TOAST and their indexes (the full-text one too), instead of
    /// staying there, dead, until autovacuum comes by. What the server keeps past that is
    /// beyond the store's reach: its write-ahead log and archives, backups, replicas' copies,
    /// and the bytes of freed space inside pages until new rows overwrite them (only
    /// `VACUUM FULL`, which locks each table while it rewrites it, leaves none).
    async fn reclaim_deleted(&self) -> Result<()> {
        let c = self.client().await?;
        let n = &self.names;
        let mut tables = vec![
            n.memories.clone(),
            n.access.clone(),
            n.records.clone(),
            n.scopes.clone(),
            n.leases.clone(),
        ];
        let passages = self
            .on(&c)
            .one("SELECT to_regclass($1) IS NOT NULL", &[&n.passages])
            .await?;
        if Cells::new(&passages, &self.schema).get::<bool>(0)? {
            tables.push(n.passages.clone());
        }
        c.batch_execute(&format!("VACUUM {}", tables.join(", ")))
            .await
            .in_schema(&self.schema)?;
        Ok(())
    }

    async fn records(&self, scope: &Scope, kind: &str, limit: usize) -> Result<Vec<Record>> {
        check_record_kind(kind)?;
        check_limit(limit, &self.config.limits)?;
        let mut q = Query::default();
        let (in_scope, _) = self.rows_of(&mut q, scope, "r");
        let kp = q.bind(kind.to_owned());
        let lim = q.bind(i64::try_from(limit).unwrap_or(i64::MAX));
        q.push(&format!(
            "SELECT r.kind, r.at, r.body, r.quotes FROM {} r WHERE {in_scope} AND r.kind = {kp} \
             ORDER BY r.at DESC, r.id DESC LIMIT {lim}",
            self.names.records
        ));
        let c = self.client().await?;
        let rows = self.on(&c).rows(&q.sql, &q.params()).await?;
        let mut out = Vec::with_capacity(rows.len());
        for row in &rows {
            let cells = Cells::new(row, &self.schema);
            let at: i64 = cells.get(1)?;
            let at = Timestamp::from_millis(at).ok_or_else(|| PostgresError::InvalidData {
                schema: self.schema.clone(),
                what: format!("a record's time {at} is out of range"),
            })?;
            let quotes: Vec<Uuid> = cells.get(3)?;
            out.push(
                Record::new(cells.get::<String>(0)?, at, cells.get::<String>(2)?)
                    .quoting(quotes.into_iter().map(MemoryId::from_uuid)),
            );
        }
        Ok(out)
    }

    async fn store_batch(
        &self,
        scope: &Scope,
        memories: Vec<NewMemory>,
    ) -> Result<Vec<MemoryEntry>> {
        // Checked and embedded before taking a connection.
        let (mut entries, vectors) = self
            .vectors()
            .prepare_batch(scope, memories, self.config.limits.max_content_bytes)
            .await?;
        if entries.is_empty() {
            return Ok(Vec::new());
        }
        let mut client = self.client().await?;
        match self
            .insert_all(&mut client, scope, &mut entries, vectors)
            .await?
        {
            Ok((scope_id, stored)) => {
                // This write took the scope past exact scans: index it in the background.
                let key = scope.key();
                if self.indexes.wants(&key, stored) {
                    self.indexes
                        .spawn_build(key, scope.tenant().to_owned(), scope_id);
                }
                Ok(entries)
            }
            Err(id) => Err(MemoryError::Conflict { id }),
        }
    }

    /// Looks and stores under a Postgres advisory lock on the fact (its scope, kind and
    /// normalised text), held by the one connection that does both: concurrent calls with
    /// one fact, from any process, leave one memory.
    async fn remember_once(&self, scope: &Scope, memory: NewMemory) -> Result<Remembered> {
        let wanted = normalise(&memory.content);
        if wanted.is_empty() {
            return Ok(Remembered {
                entry: self.store(scope, memory).await?,
                merged: false,
            });
        }
        let told = memory.clone();
        // Embedded before taking a connection, even if it turns out to be told already.
        let (memory, vector) = self
            .vectors()
            .check_and_embed_one(memory, self.config.limits.max_content_bytes)
            .await?;
        let mut client = self.client().await?;
        let key = format!("{}\u{1f}{}\u{1f}{wanted}", scope.key(), told.kind.as_str());
        client
            .execute("SELECT pg_advisory_lock(hashtextextended($1, 0))", &[&key])
            .await
            .in_schema(&self.schema)?;
        let result = self
            .remember_locked(&mut client, scope, memory, vector, &told, &wanted)
            .await;
        let unlocked = client
            .execute(
                "SELECT pg_advisory_unlock(hashtextextended($1, 0))",
                &[&key],
            )
            .await;
        if unlocked.is_err() {
            // The lock must not outlive this call: closing the connection releases it.
            drop(Object::take(client));
        }
        result
    }

    async fn get(&self, scope: &Scope, id: MemoryId) -> Result<MemoryEntry> {
        let c = self.client().await?;
        let sql = self.select_entries("WHERE m.tenant = $3 AND m.id = $1 AND sc.key = $2");
        let row = self
            .on(&c)
            .opt(&sql, &[id.as_uuid(), &scope.key(), &scope.tenant()])
            .await?
            .ok_or(MemoryError::NotFound { id })?;
        let (_, entry) = entry(&row, &self.schema)?;
        ensure_scope(BACKEND, scope, [&entry])?;
        Ok(entry)
    }

    /// One round trip when the candidates are the hits (semantic or keyword, recalls not
    /// counted): the statement returns their entries too. Otherwise (hybrid, or counting
    /// recalls) two: the candidates (both kinds at once, pipelined, for hybrid), then the
    /// winners' entries, counted in the same statement.
    async fn search(&self, scope: &Scope, request: &SearchRequest) -> Result<Vec<ScoredMemory>> {
        request.validate(&self.caps(), &self.config.limits, BACKEND)?;
        let query_vec = match request.mode {
            SearchMode::Semantic | SearchMode::Hybrid(_) => {
                Some(self.vectors().query_vector(request).await?)
            }
            SearchMode::Keyword => None,
        };
        let c = self.client().await?;
        let key = scope.key();
        let indexed = self.indexes.ready(&key);
        let text = request.query_text().unwrap_or_default();
        let f = &request.filter;
        let q = query_vec.as_deref().unwrap_or_default();
        let pool = (request.limit * self.config.hybrid_pool_factor).max(50);
        let load_after = request.record_access || matches!(request.mode, SearchMode::Hybrid(_));
        let with = !load_after;
        let nearest = |limit: usize, spread: bool| Nearest {
            scope,
            indexed,
            q,
            filter: f,
            limit,
            entries: with,
            spread,
        };
        let (sem, kw) = match request.mode {
            SearchMode::Semantic => (
                self.semantic(&c, &nearest(request.limit, false)).await?,
                Found::default(),
            ),
            SearchMode::Keyword => (
                Found::default(),
                self.keyword(&c, scope, text, f, request.limit, with, false)
                    .await?,
            ),
            SearchMode::Hybrid(_) => {
                futures_util::future::try_join(
                    self.semantic(&c, &nearest(pool, true)),
                    self.keyword(&c, scope, text, f, pool, with, true),
                )
                .await?
            }
        };
        // Hybrid mode fuses on the scale of the scope's spreads, which the statements
        // measured (in a scope searched through its index, the similarities' is an
        // estimate).
        let spread = ScopeSpread {
            semantic: sem.spread,
            keyword: kw.spread,
        };
        let keyword: Vec<(i64, MemoryId, f32, usize)> = kw
            .ranked
            .iter()
            .map(|&(pk, id, s)| (pk, id, s, kw.passages.get(&pk).copied().unwrap_or(1)))
            .collect();
        let ranked = rank(request, &sem.ranked, &keyword, spread);
        let mut found = if load_after {
            let pks = ranked.iter().map(|(pk, _, _)| *pk).collect();
            self.load(&c, scope, pks, request.record_access).await?
        } else {
            let mut all = sem.entries;
            all.extend(kw.entries);
            all
        };
        // A memory deleted between ranking and loading is left out.
        let hits: Vec<ScoredMemory> = ranked
            .into_iter()
            .filter_map(|(pk, score, breakdown)| {
                found.remove(&pk).map(|entry| ScoredMemory {
                    entry,
                    score,
                    breakdown,
                })
            })
            .collect();
        ensure_scope(BACKEND, scope, hits.iter().map(|h| &h.entry))?;
        Ok(hits)
    }

    async fn recent(
        &self,
        scope: &Scope,
        limit: usize,
        filter: &Filter,
    ) -> Result<Vec<MemoryEntry>> {
        check_limit(limit, &self.config.limits)?;
        filter.validate(&self.caps(), BACKEND)?;
        let mut q = Query::default();
        let key = q.bind(scope.key());
        let t = q.bind(scope.tenant().to_owned());
        q.push(&self.select_entries(&format!("WHERE m.tenant = {t} AND sc.key = {key}")));
        push_filter(&mut q, filter);
        let lim = q.bind(i64::try_from(limit).unwrap_or(i64::MAX));
        q.push(&format!(
            " ORDER BY m.created_at DESC, m.id DESC LIMIT {lim}"
        ));
        let c = self.client().await?;
        let rows = self.on(&c).rows(&q.sql, &q.params()).await?;
        let out: Vec<MemoryEntry> = entries(&rows, &self.schema)?
            .into_iter()
            .map(|(_, e)| e)
            .collect();
        ensure_scope(BACKEND, scope, &out)?;
        Ok(out)
    }

    async fn update(&self, scope: &Scope, id: MemoryId, patch: MemoryPatch) -> Result<MemoryEntry> {
        self.caps().require(Capability::Update, BACKEND)?;
        if let Some(c) = &patch.content {
            validate_content(c, self.config.limits.max_content_bytes)?;
        }
        let mut vectors = match &patch.content {
            Some(c) => self.vectors().embed_text(c).await?.into_iter(),
            None => Vec::new().into_iter(),
        };
        let mut head = vectors.next();
        let content_changed = patch.content.is_some();
        let superseding = patch.superseding(id)?;
        let mut client = self.client().await?;
        let tx = client.transaction().await.in_schema(&self.schema)?;
        if let Some(t) = superseding {
            let sql = self.select_entries("WHERE m.tenant = $3 AND m.id = $1 AND sc.key = $2");
            let found = tx
                .query_opt(&sql, &[t.as_uuid(), &scope.key(), &scope.tenant()])
                .await
                .in_schema(&self.schema)?;
            if found.is_none() {
                return Err(superseded_by_refused(t, SUPERSEDER_NOT_IN_SCOPE));
            }
        }
        let sql = self
            .select_entries("WHERE m.tenant = $3 AND m.id = $1 AND sc.key = $2 FOR UPDATE OF m");
        let row = tx
            .query_opt(&sql, &[id.as_uuid(), &scope.key(), &scope.tenant()])
            .await
            .in_schema(&self.schema)?
            .ok_or(MemoryError::NotFound { id })?;
        let (pk, mut entry) = entry(&row, &self.schema)?;
        ensure_scope(BACKEND, scope, [&entry])?;
        if head.is_some() {
            // The row is locked, so a `reembed` waits for this transaction: whether the
            // store still records this process's space holds until it ends.
            let mut q = Query::default();
            let guard = self.space_guard(&mut q);
            q.push(&format!("SELECT {guard}"));
            let row = tx
                .query_one(&q.sql, &q.params())
                .await
                .in_schema(&self.schema)?;
            if !Cells::new(&row, &self.schema).get::<bool>(0)? {
                head = None;
                vectors = Vec::new().into_iter();
            }
        }
        patch.apply(&mut entry);
        if content_changed {
            // Without an embedder, changed content has no vector until a connection with
            // one backfills it.
            entry.embedded = head.is_some();
        }
        let e = &entry;
        let mut q = Query::default();
        let sets = [
            format!("kind = {}", q.bind(e.kind.as_str().to_owned())),
            format!("content = {}", q.bind(e.content.clone())),
            format!("context = {}", q.bind(e.context.clone())),
            format!(
                "tags = {}::text[]",
                q.bind(
                    e.tags
                        .iter()
                        .map(|t| t.as_str().to_owned())
                        .collect::<Vec<_>>()
                )
            ),
            format!("importance = {}", q.bind(e.importance.get())),
            format!("pinned = {}", q.bind(e.pinned)),
            format!(
                "valid_until = {}",
                q.bind(e.valid_until.map(Timestamp::as_millis))
            ),
            format!(
                "superseded_by = {}",
                q.bind(e.superseded_by.map(|s| *s.as_uuid()))
            ),
            format!("embedded = {}", q.bind(e.embedded)),
        ];
        let mut set = sets.join(", ");
        let new_vectors = content_changed && self.space.is_some();
        if new_vectors {
            let p = q.bind(head.map(Vector::from));
            set.push_str(&format!(", embedding = {p}::{}", self.names.vector));
        }
        let pkp = q.bind(pk);
        let t = q.bind(scope.tenant().to_owned());
        q.push(&format!(
            "UPDATE {} SET {set} WHERE tenant = {t} AND pk = {pkp}",
            self.names.memories
        ));
        tx.execute(&q.sql, &q.params())
            .await
            .in_schema(&self.schema)?;
        if new_vectors {
            // The old text's passages go; the new text's come.
            let p = &self.names.passages;
            tx.execute(
                &format!("DELETE FROM {p} WHERE tenant = $2 AND memory = $1"),
                &[&pk, &scope.tenant()],
            )
            .await
            .in_schema(&self.schema)?;
            let mut more = Passages::default();
            more.extend(pk, vectors);
            if !more.is_empty() {
                let sql = format!(
                    "INSERT INTO {p} (tenant, memory, scope_id, k, embedding) \
                     SELECT m.tenant, u.memory, m.scope_id, u.k, u.v \
                     FROM unnest($1::int8[], $2::int4[], $3::{}[]) AS u(memory, k, v) \
                     JOIN {} m ON m.tenant = $4 AND m.pk = u.memory",
                    self.names.vector, self.names.memories
                );
                let params: [&(dyn tokio_postgres::types::ToSql + Sync); 4] =
                    [&more.owners, &more.ks, &more.vectors, &scope.tenant()];
                tx.execute(&sql, &params).await.in_schema(&self.schema)?;
            }
        }
        tx.commit().await.in_schema(&self.schema)?;
        Ok(entry)
    }

    /// One statement: the memory, and with it the scope's records that quote it or name
    /// nothing they quote.
    async fn delete(&self, scope: &Scope, id: MemoryId) -> Result<()> {
        let mut q = Query::default();
        let idp = q.bind(*id.as_uuid());
        let (in_scope, t) = self.in_scope(&mut q, scope);
        q.push(&format!(
            "WITH gone AS (DELETE FROM {m} m WHERE {in_scope} AND m.id = {idp} RETURNING m.scope_id), \
             notes AS (DELETE FROM {r} r WHERE r.tenant = {t} \
             AND r.scope_id IN (SELECT scope_id FROM gone) \
             AND ({idp} = ANY(r.quotes) OR cardinality(r.quotes) = 0)) \
             SELECT count(*) FROM gone",
            m = self.names.memories,
            r = self.names.records,
        ));
        let c = self.client().await?;
        let row = self.on(&c).one(&q.sql, &q.params()).await?;
        let n: i64 = Cells::new(&row, &self.schema).get(0)?;
        if n == 0 {
            return Err(MemoryError::NotFound { id });
        }
        Ok(())
    }

    /// One statement: the scope's memories and records.
    async fn delete_scope(&self, scope: &Scope) -> Result<u64> {
        let mut q = Query::default();
        let (in_scope, _) = self.in_scope(&mut q, scope);
        let (of_scope, _) = self.rows_of(&mut q, scope, "r");
        q.push(&format!(
            "WITH gone AS (DELETE FROM {m} m WHERE {in_scope} RETURNING 1), \
             notes AS (DELETE FROM {r} r WHERE {of_scope}) \
             SELECT count(*) FROM gone",
            m = self.names.memories,
            r = self.names.records,
        ));
        let c = self.client().await?;
        // The scope's row stays: removing it would race with a concurrent store into it,
        // and `user_scopes` lists only scopes that hold memories or records.
        let row = self.on(&c).one(&q.sql, &q.params()).await?;
        let n: i64 = Cells::new(&row, &self.schema).get(0)?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    async fn prune(&self, scope: &Scope, policy: &PrunePolicy) -> Result<PruneReport> {
        policy.validate(&self.caps(), BACKEND)?;
        let mut client = self.client().await?;
        let tx = client.transaction().await.in_schema(&self.schema)?;
        let sql = self.select_entries("WHERE m.tenant = $2 AND sc.key = $1 FOR UPDATE OF m");
        let rows = tx
            .query(&sql, &[&scope.key(), &scope.tenant()])
            .await
            .in_schema(&self.schema)?;
        let all = entries(&rows, &self.schema)?;
        ensure_scope(BACKEND, scope, all.iter().map(|(_, e)| e))?;
        let report = plan_prune(all.iter().map(|(_, e)| e), policy);
        let gone: HashSet<MemoryId> = report.removed.iter().map(|(id, _)| *id).collect();
        let pks: Vec<i64> = all
            .iter()
            .filter(|(_, e)| gone.contains(&e.id))
            .map(|(pk, _)| *pk)
            .collect();
        if !pks.is_empty() && !report.dry_run {
            let mut q = Query::default();
            let p = q.bind(pks);
            let (in_scope, _) = self.in_scope(&mut q, scope);
            q.push(&format!(
                "DELETE FROM {} m WHERE {in_scope} AND m.pk = ANY({p})",
                self.names.memories
            ));
            tx.execute(&q.sql, &q.params())
                .await
                .in_schema(&self.schema)?;
            // The records that quote what was pruned go with it.
            let mut q = Query::default();
            let ids = q.bind(gone.iter().map(|id| *id.as_uuid()).collect::<Vec<Uuid>>());
            let (of_scope, _) = self.rows_of(&mut q, scope, "r");
            q.push(&format!(
                "DELETE FROM {} r WHERE {of_scope} AND r.quotes && {ids}::uuid[]",
                self.names.records
            ));
            tx.execute(&q.sql, &q.params())
                .await
                .in_schema(&self.schema)?;
        }
        tx.commit().await.in_schema(&self.schema)?;
        Ok(report)
    }

    async fn count(&self, scope: &Scope) -> Result<u64> {
        let c = self.client().await?;
        let sql = format!(
            "SELECT count(*) FROM {} m WHERE m.tenant = $2 \
             AND m.scope_id = (SELECT id FROM {} WHERE tenant = $2 AND key = $1)",
            self.names.memories, self.names.scopes
        );
        let row = self
            .on(&c)
            .one(&sql, &[&scope.key(), &scope.tenant()])
            .await?;
        let n: i64 = Cells::new(&row, &self.schema).get(0)?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    async fn scopes(&self, tenant: Option<&str>, user: Option<&str>) -> Result<Vec<Scope>> {
        let c = self.client().await?;
        let sql = format!(
            "SELECT tenant, user_id, chat, thread FROM {s} sc \
             WHERE ($1::text IS NULL OR tenant = $1) AND ($2::text IS NULL OR user_id = $2) \
             AND (EXISTS (SELECT 1 FROM {m} m WHERE m.tenant = sc.tenant AND m.scope_id = sc.id) \
             OR EXISTS (SELECT 1 FROM {r} r WHERE r.tenant = sc.tenant AND r.scope_id = sc.id))",
            s = self.names.scopes,
            m = self.names.memories,
            r = self.names.records,
        );
        let rows = self.on(&c).rows(&sql, &[&tenant, &user]).await?;
        let mut out = Vec::with_capacity(rows.len());
        for r in &rows {
            let get =
                |i: usize| -> Result<Option<String>> { Ok(r.try_get(i).in_schema(&self.schema)?) };
            let (Some(tenant), Some(user)) = (get(0)?, get(1)?) else {
                continue;
            };
            let mut s = Scope::for_user(user)?.in_tenant(tenant)?;
            if let Some(c) = get(2)? {
                s = s.in_chat(c)?;
            }
            if let Some(t) = get(3)? {
                s = s.in_thread(t)?;
            }
            out.push(s);
        }
        out.sort();
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        reason = "a test fails loudly on an unexpected error"
    )]

    use super::*;
    use crate::PostgresConfig;

    /// The race `insert_all`'s first check cannot see: another process takes an id after
    /// it. The insert then fails with a unique violation, and the id reported is the one
    /// that collided, not the batch's first.
    #[tokio::test]
    async fn a_collision_after_the_check_names_the_id_that_collided() {
        let Some(url) = memory_core::testing::env_or_skip(
            "MEMORY_PG_URL",
            "memory-postgres",
            "a Postgres URL whose server has pgvector (e.g. start one with .ci/postgres.sh start)",
        ) else {
            return;
        };
        let schema = format!("ava_unit_{}", std::process::id());
        let config = PostgresConfig {
            schema: schema.clone(),
            pool_size: 2,
            ..PostgresConfig::default()
        };
        let store = PostgresBackend::connect(&url, None, config).await.unwrap();
        let scope = Scope::for_user("u").unwrap();
        let taken = MemoryId::new();
        store
            .store(&scope, NewMemory::new("first").with_id(taken))
            .await
            .unwrap();
        let now = Timestamp::now();
        let entries: Vec<MemoryEntry> = [MemoryId::new(), MemoryId::new(), taken]
            .into_iter()
            .map(|id| {
                NewMemory::new("later")
                    .with_id(id)
                    .into_entry(&scope, now, false)
            })
            .collect();
        let ids: Vec<Uuid> = entries.iter().map(|e| *e.id.as_uuid()).collect();
        let mut client = store.client().await.unwrap();
        // The insert without the check before it, as when another process got in between.
        let tx = client.transaction().await.unwrap();
        let (scope_id, _) = store.count_into_scope(&tx, &scope, 3).await.unwrap();
        let insert = store.insert_statement(
            scope.tenant(),
            scope_id,
            ids.clone(),
            &entries,
            vec![None; 3],
        );
        let violation = tx
            .execute(&insert.sql, &insert.params())
            .await
            .expect_err("the third id is taken");
        assert_eq!(violation.code(), Some(&SqlState::UNIQUE_VIOLATION));
        drop(tx);
        let got = store
            .collided(&mut client, scope.tenant(), &ids, &violation)
            .await
            .unwrap();
        assert_eq!(got, Some(taken));
        // Without the server's detail, the lookup finds it too.
        let tx = client.transaction().await.unwrap();
        assert_eq!(
            store
                .first_taken(&tx, scope.tenant(), &ids)
                .await
                .unwrap()
                .0,
            Some(taken)
        );
        drop(tx);
        drop(client);
        let client = store.client().await.unwrap();
        client
            .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
            .await
            .unwrap();
        drop(client);
        store.close();
    }

    /// D1: a query of 100 000 distinct words reaches the server as a tsquery of at most
    /// `MAX_QUERY_TERMS` lexemes, the rarest the scope holds, and still finds the memory
    /// holding its one rare word.
    #[tokio::test]
    async fn a_query_of_100k_words_is_searched_for_its_rarest_held_words() {
        let Some(url) = memory_core::testing::env_or_skip(
            "MEMORY_PG_URL",
            "memory-postgres",
            "a Postgres URL whose server has pgvector (e.g. start one with .ci/postgres.sh start)",
        ) else {
            return;
        };
        let schema = format!("ava_unit_words_{}", std::process::id());
        let config = PostgresConfig {
            schema: schema.clone(),
            pool_size: 2,
            ..PostgresConfig::default()
        };
        let store = PostgresBackend::connect(&url, None, config).await.unwrap();
        let scope = Scope::for_user("u").unwrap();
        let mut memories: Vec<NewMemory> = (0..100)
            .map(|k| {
                NewMemory::new(format!(
                    "a note on topic{k} and topic{} by the garden",
                    k + 1
                ))
            })
            .collect();
        memories.push(NewMemory::new(
            "the quetzalcoatl statue stands in the garden",
        ));
        let rare = store.store_batch(&scope, memories).await.unwrap()[100].id;
        let mut words: Vec<String> = (0..100_000usize)
            .map(|mut i| {
                let mut w = String::from("zx");
                for _ in 0..4 {
                    w.push(char::from(b'a' + (i % 26) as u8));
                    i /= 26;
                }
                w
            })
            .collect();
        words.insert(50_000, "quetzalcoatl".into());
        let only_rare = words.join(" ");
        words.insert(70_000, "garden".into());
        words.extend((0..100).map(|k| format!("topic{k}")));
        let with_topics = words.join(" ");

        let c = store.client().await.unwrap();
        let q = store.keyword_query(&c, &scope, &only_rare).await.unwrap();
        assert_eq!(q, Some(TsQuery::Lexemes("'quetzalcoatl'".into())));
        let Some(TsQuery::Lexemes(q)) =
            store.keyword_query(&c, &scope, &with_topics).await.unwrap()
        else {
            panic!("a long query is searched for lexemes");
        };
        assert_eq!(q.matches(" | ").count() + 1, MAX_QUERY_TERMS, "{q}");
        assert!(
            q.contains("'quetzalcoatl'") && !q.contains("'garden'"),
            "{q}"
        );
        let q = store
            .keyword_query(&c, &scope, "Garden statue, garden")
            .await
            .unwrap();
        assert_eq!(q, Some(TsQuery::Words("garden | statue".into())));
        drop(c);
        for text in [only_rare, with_topics] {
            let hits = store
                .search(&scope, &SearchRequest::keyword(text).limit(100))
                .await
                .unwrap();
            assert!(
                hits.iter().any(|h| h.entry.id == rare),
                "{} hits",
                hits.len()
            );
        }
        let client = store.client().await.unwrap();
        client
            .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
            .await
            .unwrap();
        drop(client);
        store.close();
    }
}
