//! Searching Postgres: a semantic search over the HNSW index or an exact scan, a keyword
//! search over the full-text index, and reading the hits' entries.

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use deadpool_postgres::Object;
use memory_core::{
    Filter, MemoryEntry, MemoryId, Scope, Spread, Timestamp, expected_max, passage_similarity,
};
use pgvector::Vector;
use tokio_postgres::Row;

use crate::PostgresBackend;
use crate::error::{Cells, PostgresError};
use crate::index::Indexes;
use crate::sql::{
    Query, SCORE_COL, TsQuery, entries, entry_cols, push_filter, rarest_lexemes_sql, scored,
    scored_entries, tsquery,
};
use memory_core::keyword::{self, MAX_QUERY_TERMS};

/// What a candidate statement found: `(pk, id, score)` best first, the entries by pk
/// when it read them, and how the score is spread over the scope when it was asked to tell.
#[derive(Default)]
pub(crate) struct Found {
    pub(crate) ranked: Vec<(i64, MemoryId, f32)>,
    pub(crate) entries: HashMap<i64, MemoryEntry>,
    pub(crate) spread: Option<Spread>,
    /// Keyword candidates of a hybrid search: how many passages each memory is stored as.
    pub(crate) passages: HashMap<i64, usize>,
}

/// How many heads of a scope searched through its HNSW index the spread of its
/// similarities is estimated from.
const SPREAD_SAMPLE: i64 = 2000;

/// How many values of `expected_max` a semantic search passes until it meets a memory of
/// more vectors.
pub(crate) const LONGEST_AT_FIRST: usize = 64;

/// One semantic search's parts.
pub(crate) struct Nearest<'a> {
    pub(crate) scope: &'a Scope,
    /// The scope's id, when its HNSW index is ready.
    pub(crate) indexed: Option<i64>,
    /// The query vector.
    pub(crate) q: &'a [f32],
    pub(crate) filter: &'a Filter,
    pub(crate) limit: usize,
    /// Whether to read the hits' entries too.
    pub(crate) entries: bool,
    /// Whether the search wants the spread (hybrid), not only the scores it corrects.
    pub(crate) spread: bool,
}
impl PostgresBackend {
    /// The statement's last part over the ranked candidates `t` (pk, id, score) of the
    /// tenant bound at `tenant`: with `entries`, `SELECT <entry columns>, t.score[, extra]
    /// FROM t JOIN memories m ...`; without, `SELECT t.pk, t.id, t.score[, extra] FROM t`.
    /// Best first.
    pub(crate) fn candidate_rows(&self, entries: bool, extra: &str, tenant: &str) -> String {
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
    pub(crate) fn found(
        &self,
        rows: &[Row],
        entries: bool,
    ) -> std::result::Result<Found, PostgresError> {
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
    pub(crate) async fn semantic(
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
    pub(crate) fn semantic_sql(&self, search: &Nearest<'_>, longest: usize) -> Query {
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
    pub(crate) async fn keyword(
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
    pub(crate) async fn rows(
        &self,
        c: &Object,
        query: &Query,
    ) -> std::result::Result<Vec<tokio_postgres::Row>, PostgresError> {
        self.on(c).rows(&query.sql, &query.params()).await
    }

    /// Loads the entries of these pks in the scope with key `key`, counting a recall of
    /// each if `bump` (the new counts come back with them). A memory deleted since it was
    /// ranked is not among them.
    pub(crate) async fn load(
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
    pub(crate) fn select_entries(&self, tail: &str) -> String {
        format!(
            "SELECT {} FROM {} m {} {tail}",
            entry_cols("a"),
            self.names.memories,
            self.joins()
        )
    }

    /// A memory row `m`'s scope `sc` and recall counts `a`, joined within its tenant.
    pub(crate) fn joins(&self) -> String {
        format!(
            "JOIN {} sc ON sc.tenant = m.tenant AND sc.id = m.scope_id \
             LEFT JOIN {} a ON a.tenant = m.tenant AND a.pk = m.pk",
            self.names.scopes, self.names.access
        )
    }
}
