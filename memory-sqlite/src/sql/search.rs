//! The searches in SQL: exact semantic search (over the cached block or sqlite-vec's KNN,
//! with a filter and its fallback), the spread of a scope's similarities, and keyword search
//! over FTS5 with its spread.

use std::collections::HashMap;

use memory_core::{Filter, MemoryId, Spread, passage_similarity};
use rusqlite::types::Value;
use rusqlite::{params, params_from_iter};

use crate::cache::VectorCache;
use crate::kernels;
use crate::scan::{self, Scanned};
use crate::vector_rows::{PASSAGE_SHIFT, PK_MASK, best_per_memory, has_passages, memory_pk};

use super::*;

impl Sql<'_> {
    /// Exact top-`limit` by cosine similarity among the scope's memories passing `filter`.
    ///
    /// With a cache, the scope's vector block is scanned in process; otherwise a KNN query
    /// runs on the scope's vec0 partition. Either way the nearest candidates are checked
    /// against the filter in SQL, and when the filter leaves too few of them, the search
    /// falls back to every memory of the scope that passes the filter, so the answer stays
    /// exact.
    pub(crate) fn semantic(
        &self,
        scope_id: i64,
        q: &[f32],
        filter: &Filter,
        limit: usize,
        cache: Option<&mut VectorCache>,
    ) -> R<Semantic> {
        // A zero query (an embedder can map a text there) is similar to nothing; vec0
        // would answer NULL distances.
        if !q.iter().any(|x| *x != 0.0) {
            return Ok(Semantic::default());
        }
        // How many vectors the scope holds, counted at most once per search.
        let mut counted = None;
        if let Some(cache) = cache {
            let count = match cache.loaded_len(scope_id) {
                Some(n) => n,
                None => self.vector_count(scope_id)?,
            };
            if count == 0 {
                return Ok(Semantic::default());
            }
            if let Some(scanned) = cache.scan(self.conn, scope_id, q, count, exact_needed(limit))? {
                let spread = Spread::of(scanned.all.iter().map(|v| v.1), scanned.all.len());
                let deviation = spread.map_or(0.0, Spread::std);
                return Ok(Semantic {
                    hits: self.filter_ranked(scope_id, scanned, q, filter, limit, deviation)?,
                    spread,
                });
            }
            counted = Some(count);
        }
        let in_scope = match counted {
            Some(n) => n,
            None => self.vector_count(scope_id)?,
        };
        if in_scope == 0 {
            return Ok(Semantic::default());
        }
        let blob = vector_blob(q);
        let spread = self.vector_spread(scope_id, &blob)?;
        let deviation = spread.map_or(0.0, Spread::std);
        // A long memory's passages are several rows of the k nearest: one hit, its best
        // passage's similarity less what its number of passages adds (ranked here, below).
        let sql = {
            let mut sql = format!(
                "SELECT m.pk, m.id, min(knn.distance) AS d, m.embedded, max(knn.distance) FROM \
                 (SELECT rowid, distance FROM memory_vec WHERE embedding MATCH ? AND k = ? AND scope_id = ?) knn \
                 JOIN memories m ON m.pk = (knn.rowid & {PK_MASK}) WHERE m.scope_id = ?",
            );
            let mut filter_params = Vec::new();
            filter_sql(filter, &mut sql, &mut filter_params);
            sql.push_str(" GROUP BY m.pk");
            (sql, filter_params)
        };
        let mut k = (limit * 4).clamp(40, MAX_KNN_K).min(in_scope);
        loop {
            let mut params = vec![
                Value::Blob(blob.clone()),
                Value::Integer(k as i64),
                Value::Integer(scope_id),
                Value::Integer(scope_id),
            ];
            params.extend(sql.1.iter().cloned());
            let (hits, farthest) = self.passage_ranked(&sql.0, &params, limit, deviation)?;
            // A memory none of whose vectors is among the k nearest is no more similar than
            // the farthest of them: when the last hit is at least that, the hits are exact.
            let settled = hits.len() >= limit
                && farthest.is_none_or(|d| f64::from(hits[limit - 1].2) >= 1.0 - d);
            if settled || k >= in_scope {
                return Ok(Semantic { hits, spread });
            }
            if hits.len() < limit || k >= MAX_KNN_K {
                // A selective filter, or too many long memories near the query: scan the
                // scope with the filter applied first.
                break;
            }
            k = (k * 4).min(MAX_KNN_K).min(in_scope);
        }
        // Every vector of every passing memory: passage k of memory pk is looked up by its
        // rowid (`p` counts 0..the most passages a memory of the scope has).
        let most: i64 = self
            .conn
            .prepare_cached(
                "SELECT coalesce(max(embedded), 1) FROM memories WHERE scope_id = ?1 AND embedded > 1",
            )?
            .query_row([scope_id], |r| r.get(0))?;
        let mut sql = format!(
            "WITH RECURSIVE p(k) AS (SELECT 0 UNION ALL SELECT k + 1 FROM p WHERE k + 1 < ?) \
             SELECT m.pk, m.id, min(vec_distance_cosine(v.embedding, ?)) AS d, m.embedded \
             FROM memories m CROSS JOIN p ON p.k < m.embedded \
             CROSS JOIN memory_vec v ON v.rowid = m.pk + (p.k << {PASSAGE_SHIFT}) \
             WHERE m.scope_id = ? AND m.embedded > 0",
        );
        let mut params = vec![
            Value::Integer(most),
            Value::Blob(blob),
            Value::Integer(scope_id),
        ];
        filter_sql(filter, &mut sql, &mut params);
        sql.push_str(" GROUP BY m.pk");
        Ok(Semantic {
            hits: self.passage_ranked(&sql, &params, limit, deviation)?.0,
            spread,
        })
    }

    /// The best `limit` of the rows of `sql` (`pk, id, least distance, vector count`, and
    /// optionally the greatest distance of the vectors read), each memory by
    /// [`passage_similarity`]; and the greatest distance of all rows, if given.
    pub(super) fn passage_ranked(
        &self,
        sql: &str,
        params: &[Value],
        limit: usize,
        deviation: f32,
    ) -> R<(Hits, Option<f64>)> {
        let mut stmt = self.conn.prepare_cached(sql)?;
        let with_farthest = stmt.column_count() > 4;
        let rows = stmt
            .query_map(params_from_iter(params.iter()), |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, Vec<u8>>(1)?,
                    r.get::<_, f64>(2)?,
                    r.get::<_, i64>(3)?,
                    if with_farthest {
                        Some(r.get::<_, f64>(4)?)
                    } else {
                        None
                    },
                ))
            })
            .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())?;
        let farthest = rows.iter().filter_map(|r| r.4).reduce(f64::max);
        let mut hits = rows
            .into_iter()
            .map(|(pk, id, d, n, _)| {
                let similarity = 1.0 - d as f32;
                let n = usize::try_from(n).unwrap_or(1);
                Ok((
                    pk,
                    self.id(&id)?,
                    passage_similarity(similarity, n, deviation),
                ))
            })
            .collect::<R<Vec<_>>>()?;
        hits.sort_by(|a, b| b.2.total_cmp(&a.2).then(a.1.cmp(&b.1)));
        hits.truncate(limit);
        Ok((hits, farthest))
    }

    /// How the similarities of the scope's vectors to `query` (a vector blob) are spread,
    /// read in one pass over them (for a search that does not scan them itself).
    pub(super) fn vector_spread(&self, scope_id: i64, query: &[u8]) -> R<Option<Spread>> {
        let most: i64 = self
            .conn
            .prepare_cached("SELECT coalesce(max(embedded), 1) FROM memories WHERE scope_id = ?1")?
            .query_row([scope_id], |r| r.get(0))?;
        let (n, sum, squares): (i64, f64, f64) = self
            .conn
            .prepare_cached(&format!(
                "WITH RECURSIVE p(k) AS (SELECT 0 UNION ALL SELECT k + 1 FROM p WHERE k + 1 < ?1), \
                 s(x) AS (SELECT 1.0 - vec_distance_cosine(v.embedding, ?2) \
                 FROM memories m CROSS JOIN p ON p.k < m.embedded \
                 CROSS JOIN memory_vec v ON v.rowid = m.pk + (p.k << {PASSAGE_SHIFT}) \
                 WHERE m.scope_id = ?3 AND m.embedded > 0) \
                 SELECT count(*), total(x), total(x * x) FROM s"
            ))?
            .query_row(params![most, query, scope_id], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })?;
        Ok((n > 0).then(|| Spread::from_sums(usize::try_from(n).unwrap_or(0), sum, squares)))
    }

    /// The best `limit` of `all` (every vector of the scope with its similarity, unordered)
    /// that pass the filter: the nearest candidates are checked first, and only if too few
    /// of them pass is the whole scope ranked against the filter.
    ///
    /// From a quantized block only the best candidates are exact; when the filter sends
    /// the search past them, the scope's passing memories are made exact the same way
    /// ([`scan::rescore`]) before they are ranked.
    pub(super) fn filter_ranked(
        &self,
        scope_id: i64,
        scanned: Scanned,
        q: &[f32],
        filter: &Filter,
        limit: usize,
        deviation: f32,
    ) -> R<Vec<(i64, MemoryId, f32)>> {
        let Scanned { all, approximate } = scanned;
        let by_score = |a: &(i64, f32), b: &(i64, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        // Similarities by memory: a long memory's is its best passage's, less what its
        // number of passages adds. The vectors' own list is kept apart only when some
        // memory has several.
        let passages = has_passages(&all);
        let (mut best, vectors) = if passages {
            (best_per_memory(all.clone(), deviation), Some(all))
        } else {
            (all, None)
        };
        let k = exact_needed(limit).min(best.len());
        if k == 0 {
            return Ok(Vec::new());
        }
        if k < best.len() {
            best.select_nth_unstable_by(k - 1, by_score);
        }
        best[..k].sort_by(by_score);
        let pick =
            |pass: &HashMap<i64, MemoryId>, from: &[(i64, f32)]| -> Vec<(i64, MemoryId, f32)> {
                from.iter()
                    .filter_map(|(pk, s)| pass.get(pk).map(|id| (*pk, *id, *s)))
                    .take(limit)
                    .collect()
            };
        let pass = self.passing(scope_id, Some(&best[..k]), filter)?;
        let hits = pick(&pass, &best[..k]);
        if hits.len() >= limit || k == best.len() {
            return Ok(hits);
        }
        let pass = self.passing(scope_id, None, filter)?;
        let mut all = vectors.unwrap_or(best);
        if let Some(bound) = approximate {
            all.retain(|(rowid, _)| pass.contains_key(&memory_pk(*rowid)));
            scan::rescore(
                self.conn,
                q.len(),
                &kernels::unit(q),
                &mut all,
                limit,
                bound,
            )?;
        }
        let mut best = if passages {
            best_per_memory(all, deviation)
        } else {
            all
        };
        best.sort_by(by_score);
        Ok(pick(&pass, &best))
    }

    /// Which of `candidates` (or, with `None`, of all the scope's memories) pass `filter`.
    pub(super) fn passing(
        &self,
        scope_id: i64,
        candidates: Option<&[(i64, f32)]>,
        filter: &Filter,
    ) -> R<HashMap<i64, MemoryId>> {
        // With candidates, `+m.scope_id` keeps the scope a per-row check so the rows are
        // found by pk, not by walking the scope's index (see `entries_by_pk`).
        let scope_term = if candidates.is_some() {
            "+m.scope_id"
        } else {
            "m.scope_id"
        };
        let mut sql = format!("SELECT m.pk, m.id FROM memories m WHERE {scope_term} = ?");
        let mut params = vec![Value::Integer(scope_id)];
        if let Some(c) = candidates {
            sql.push_str(&format!(" AND m.pk IN ({})", vec!["?"; c.len()].join(", ")));
            params.extend(c.iter().map(|(pk, _)| Value::Integer(*pk)));
        }
        filter_sql(filter, &mut sql, &mut params);
        let mut stmt = self.conn.prepare_cached(&sql)?;
        let rows = stmt
            .query_map(params_from_iter(params.iter()), |r| {
                Ok((r.get::<_, i64>(0)?, r.get::<_, Vec<u8>>(1)?))
            })
            .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())?;
        rows.into_iter()
            .map(|(pk, id)| Ok((pk, self.id(&id)?)))
            .collect()
    }

    /// How the BM25 scores of `text` are spread over the scope's memories (0 for a memory
    /// that does not match; the matches counted are those passing `filter`), read in one
    /// pass over the matches, for a query built by [`Sql::fts_query`]. `None` when there is
    /// no query (no searchable word).
    pub(crate) fn keyword_spread(
        &self,
        scope_id: i64,
        query: Option<&str>,
        filter: &Filter,
    ) -> R<Option<Spread>> {
        let Some(query) = query else {
            return Ok(None);
        };
        // bm25() is only callable while FTS5 reads its rows: the matches are materialized
        // first, then summed.
        let mut sql = String::from(
            "WITH s AS MATERIALIZED (SELECT -bm25(memory_fts, 0.0, 1.0, 0.3) AS x FROM memory_fts \
             JOIN memories m ON m.pk = memory_fts.rowid \
             WHERE memory_fts MATCH ? AND m.scope_id = ?",
        );
        let mut params = vec![Value::Text(query.to_owned()), Value::Integer(scope_id)];
        filter_sql(filter, &mut sql, &mut params);
        sql.push_str(
            ") SELECT (SELECT count(*) FROM memories WHERE scope_id = ?), total(x), total(x * x) FROM s",
        );
        params.push(Value::Integer(scope_id));
        let (n, sum, squares): (i64, f64, f64) = self
            .conn
            .prepare_cached(&sql)?
            .query_row(params_from_iter(params.iter()), |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })?;
        Ok((n > 0).then(|| Spread::from_sums(usize::try_from(n).unwrap_or(0), sum, squares)))
    }

    /// Top-`limit` BM25 matches (raw score, higher is better) in the scope, filtered, each
    /// with the number of passages its memory is stored as (1 for one vector or none), for a
    /// query built by [`Sql::fts_query`] (none: no match).
    pub(crate) fn keyword(
        &self,
        scope_id: i64,
        query: Option<&str>,
        filter: &Filter,
        limit: usize,
    ) -> R<Vec<(i64, MemoryId, f32, usize)>> {
        let Some(query) = query else {
            return Ok(Vec::new());
        };
        let mut sql = String::from(
            "SELECT m.pk, m.id, -bm25(memory_fts, 0.0, 1.0, 0.3) AS score, max(m.embedded, 1) \
             FROM memory_fts JOIN memories m ON m.pk = memory_fts.rowid \
             WHERE memory_fts MATCH ? AND m.scope_id = ?",
        );
        let mut params = vec![Value::Text(query.to_owned()), Value::Integer(scope_id)];
        filter_sql(filter, &mut sql, &mut params);
        sql.push_str(" ORDER BY score DESC, m.id LIMIT ?");
        params.push(Value::Integer(limit as i64));
        let mut stmt = self.conn.prepare_cached(&sql)?;
        let rows = stmt
            .query_map(params_from_iter(params.iter()), |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, Vec<u8>>(1)?,
                    r.get::<_, f64>(2)?,
                    r.get::<_, i64>(3)?,
                ))
            })
            .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())?;
        rows.into_iter()
            .map(|(pk, id, s, n)| {
                Ok((pk, self.id(&id)?, s as f32, usize::try_from(n).unwrap_or(1)))
            })
            .collect()
    }
}
