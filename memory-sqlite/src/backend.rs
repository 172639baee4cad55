//! `MemoryBackend` for `SqliteBackend`: validation and embedding happen on the async side,
//! then one job on the worker thread does the SQL, inside a transaction where it writes.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use memory_core::{
    BackendInfo, Capabilities, Capability, Filter, MemoryBackend, MemoryEntry, MemoryError,
    MemoryId, MemoryPatch, NewMemory, PrunePolicy, PruneReport, Record, Remembered, Result,
    SUPERSEDER_NOT_IN_SCOPE, Scope, ScoredMemory, SearchMode, SearchRequest, StoreVectors,
    Timestamp, check_lease, check_limit, check_record_kind, ensure_scope, merge_patch, normalise,
    plan_prune, same_fact, superseded_by_refused, validate_content,
};
use rusqlite::types::Value;

use crate::SqliteBackend;
use crate::error::BACKEND;
use crate::read::{Place, SearchJob, Searched, search_snapshot};
use crate::sql::{Inserter, Sql};
use crate::worker::SpaceCheck;

/// How many keyword matches `remember_once` compares with a new fact.
const REMEMBER_CANDIDATES: usize = 50;

impl SqliteBackend {
    fn caps(&self) -> Capabilities {
        let caps = Capabilities::full_store(self.embedder.is_some())
            .with(Capability::Persistence)
            .with(Capability::Records)
            .with(Capability::Leases);
        if !self.read_only {
            return caps;
        }
        // A read-only store searches and reads; it cannot change what it holds.
        caps.without(Capability::Update)
            .without(Capability::PruneTtl)
            .without(Capability::PruneMaxCount)
            .without(Capability::PruneDecay)
            .without(Capability::Lifecycle)
    }

    fn store_name(&self) -> String {
        format!("store `{}`", self.path.display())
    }

    fn vectors(&self) -> StoreVectors<'_> {
        StoreVectors {
            backend: BACKEND,
            store: self.store_name().into(),
            embedder: self.embedder.as_deref(),
            space: self.space.as_deref(),
        }
    }
}

#[async_trait]
impl MemoryBackend for SqliteBackend {
    fn info(&self) -> BackendInfo {
        BackendInfo {
            name: BACKEND.to_owned(),
            location: Some(self.path.display().to_string()),
            topology: memory_core::Topology::Embedded,
            durable: true,
            embedding_space: self.embedder.as_ref().and(self.space.clone()),
            limits: self.config.limits,
        }
    }

    fn capabilities(&self) -> Capabilities {
        self.caps()
    }

    /// Expiry by this machine's clock: every process sharing the file runs on it.
    async fn try_lease(&self, name: &str, holder: &str, ttl: Duration) -> Result<bool> {
        let ttl_ms = check_lease(name, holder, ttl)?;
        let (name, holder) = (name.to_owned(), holder.to_owned());
        self.worker
            .call(move |conn| {
                conn.write_aside(|tx| {
                    let now = Timestamp::now().as_millis();
                    let taken = tx.execute(
                        "INSERT INTO leases (name, holder, until_ms) VALUES (?1, ?2, ?3) \
                         ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, \
                         until_ms = excluded.until_ms \
                         WHERE leases.holder = excluded.holder OR leases.until_ms <= ?4",
                        rusqlite::params![name, holder, now.saturating_add(ttl_ms), now],
                    )?;
                    Ok(taken == 1)
                })
            })
            .await
    }

    async fn release_lease(&self, name: &str, holder: &str) -> Result<()> {
        let (name, holder) = (name.to_owned(), holder.to_owned());
        self.worker
            .call(move |conn| {
                conn.write_aside(|tx| {
                    tx.execute(
                        "DELETE FROM leases WHERE name = ?1 AND holder = ?2",
                        rusqlite::params![name, holder],
                    )?;
                    Ok(())
                })
            })
            .await
    }

    async fn end_lease(&self, name: &str) -> Result<()> {
        let name = name.to_owned();
        self.worker
            .call(move |conn| {
                conn.write_aside(|tx| {
                    tx.execute("DELETE FROM leases WHERE name = ?1", [name])?;
                    Ok(())
                })
            })
            .await
    }

    /// A write of its own (`BEGIN IMMEDIATE`) that leaves the write sequence, so no
    /// process's vector cache is dropped for it; the ring is trimmed in the same transaction.
    async fn keep_record(&self, scope: &Scope, record: Record, keep: usize) -> Result<()> {
        record.validate(keep)?;
        let (scope, path) = (scope.clone(), self.path.clone());
        self.worker
            .call(move |conn| {
                conn.write_aside(|tx| {
                    let sql = Sql {
                        conn: tx,
                        path: &path,
                    };
                    let scope_id = sql.ensure_scope_id(&scope)?;
                    sql.keep_record(scope_id, &record, keep)
                })
            })
            .await
    }

    async fn records(&self, scope: &Scope, kind: &str, limit: usize) -> Result<Vec<Record>> {
        check_record_kind(kind)?;
        check_limit(limit, &self.config.limits)?;
        let (scope, kind, path) = (scope.clone(), kind.to_owned(), self.path.clone());
        self.worker
            .call(move |conn| {
                let sql = Sql { conn, path: &path };
                match sql.scope_id(&scope)? {
                    Some(scope_id) => sql.records(scope_id, &kind, limit),
                    None => Ok(Vec::new()),
                }
            })
            .await
    }

    async fn store_batch(
        &self,
        scope: &Scope,
        memories: Vec<NewMemory>,
    ) -> Result<Vec<MemoryEntry>> {
        // Checked and embedded before touching the database.
        let (entries, vectors) = self
            .vectors()
            .prepare_batch(scope, memories, self.config.limits.max_content_bytes)
            .await?;
        let scope = scope.clone();
        self.worker
            .call(move |conn| {
                let (mut entries, mut vectors) = (entries, vectors);
                let path = conn.path.clone();
                conn.write(|tx, space, ops| {
                    if space != SpaceCheck::Same {
                        // Another process re-embedded the store into another space: keep
                        // the text, without vectors of the old space; a process of the
                        // new space embeds them when it searches their scope.
                        vectors.iter_mut().for_each(Vec::clear);
                        entries.iter_mut().for_each(|e| e.embedded = false);
                    }
                    if entries.is_empty() {
                        return Ok(());
                    }
                    let sql = Sql {
                        conn: tx,
                        path: &path,
                    };
                    let scope_id = sql.ensure_scope_id(&scope)?;
                    let mut inserter = Inserter::new(&sql, scope_id)?;
                    for (e, v) in entries.iter().zip(&mut vectors) {
                        // A taken id writes nothing; the error drops the transaction, which
                        // rolls back the rows already written for this batch.
                        let Some(written) = inserter.insert(e, std::mem::take(v))? else {
                            return Err(MemoryError::Conflict { id: e.id }.into());
                        };
                        for (rowid, v) in written {
                            ops.append(scope_id, rowid, v);
                        }
                    }
                    Ok(())
                })?;
                Ok(entries)
            })
            .await
    }

    /// Looks and stores in one write transaction (`BEGIN IMMEDIATE`, so one writer at a time
    /// across processes): concurrent calls with one fact leave one memory. The candidates
    /// are the scope's best keyword matches of its kind, valid now.
    async fn remember_once(&self, scope: &Scope, memory: NewMemory) -> Result<Remembered> {
        let wanted = normalise(&memory.content);
        let told = memory.clone();
        // Embedded before the transaction, even if it turns out to be told already.
        let (memory, vector) = self
            .vectors()
            .check_and_embed_one(memory, self.config.limits.max_content_bytes)
            .await?;
        let now = Timestamp::now();
        let entry = memory.into_entry(scope, now, !vector.is_empty());
        let scope = scope.clone();
        let path = self.path.clone();
        self.worker
            .call(move |conn| {
                let (mut entry, mut vector) = (entry, vector);
                conn.write(|tx, space, ops| {
                    if space != SpaceCheck::Same {
                        vector.clear();
                        entry.embedded = false;
                    }
                    let sql = Sql {
                        conn: tx,
                        path: &path,
                    };
                    let scope_id = sql.ensure_scope_id(&scope)?;
                    if !wanted.is_empty() {
                        let filter = Filter {
                            kinds: vec![entry.kind],
                            valid_at: Some(now),
                            ..Filter::default()
                        };
                        let fts = sql.fts_query(scope_id, &entry.content)?;
                        let pks: Vec<i64> = sql
                            .keyword(scope_id, fts.as_deref(), &filter, REMEMBER_CANDIDATES)?
                            .into_iter()
                            .map(|(pk, ..)| pk)
                            .collect();
                        let same = sql
                            .entries_by_pk(scope_id, &pks)?
                            .into_iter()
                            .filter(|(_, e)| same_fact(e, entry.kind, &wanted, now))
                            .min_by_key(|(_, e)| (e.created_at, e.id));
                        if let Some((pk, mut existing)) = same {
                            let patch = merge_patch(&existing, &told);
                            let tags_changed = patch.tags.is_some();
                            patch.apply(&mut existing);
                            tx.execute(
                                "UPDATE memories SET importance = ?1, pinned = ?2 WHERE pk = ?3",
                                rusqlite::params![
                                    f64::from(existing.importance.get()),
                                    existing.pinned,
                                    pk
                                ],
                            )?;
                            if tags_changed {
                                sql.replace_tags(pk, existing.tags.iter())?;
                            }
                            return Ok(Remembered {
                                entry: existing,
                                merged: true,
                            });
                        }
                    }
                    let mut inserter = Inserter::new(&sql, scope_id)?;
                    let Some(written) = inserter.insert(&entry, std::mem::take(&mut vector))?
                    else {
                        return Err(MemoryError::Conflict { id: entry.id }.into());
                    };
                    for (rowid, v) in written {
                        ops.append(scope_id, rowid, v);
                    }
                    Ok(Remembered {
                        entry: entry.clone(),
                        merged: false,
                    })
                })
            })
            .await
    }

    async fn get(&self, scope: &Scope, id: MemoryId) -> Result<MemoryEntry> {
        let key = scope.key();
        let path = self.path.clone();
        let found = self
            .worker
            .call(move |conn| {
                let sql = Sql { conn, path: &path };
                let params = [
                    Value::Blob(id.as_uuid().as_bytes().to_vec()),
                    Value::Text(key),
                ];
                Ok(sql.entries("WHERE m.id = ? AND s.key = ?", &params)?.pop())
            })
            .await?;
        let (_, entry) = found.ok_or(MemoryError::NotFound { id })?;
        ensure_scope(BACKEND, scope, [&entry])?;
        Ok(entry)
    }

    async fn search(&self, scope: &Scope, request: &SearchRequest) -> Result<Vec<ScoredMemory>> {
        request.validate(&self.caps(), &self.config.limits, BACKEND)?;
        let query_vec = match request.mode {
            SearchMode::Semantic | SearchMode::Hybrid(_) => {
                Some(Arc::new(self.vectors().query_vector(request).await?))
            }
            SearchMode::Keyword => None,
        };
        // Memories of the scope that have no vector yet are embedded first, a batch at a
        // time, so a semantic search misses none of them (bounded: a process without an
        // embedder may be storing more meanwhile).
        let backfill = query_vec.is_some() && !self.read_only;
        for round in 0..=MAX_BACKFILL_ROUNDS {
            let found = self
                .search_once(
                    scope,
                    request,
                    query_vec.clone(),
                    backfill && round < MAX_BACKFILL_ROUNDS,
                )
                .await?;
            match found {
                Searched::Hits(hits) => {
                    ensure_scope(BACKEND, scope, hits.iter().map(|h| &h.entry))?;
                    return Ok(hits);
                }
                Searched::Unembedded(rows) => {
                    self.add_vectors(rows).await?;
                }
            }
        }
        // Unreachable: the last round does not ask for unembedded rows.
        Ok(Vec::new())
    }

    async fn recent(
        &self,
        scope: &Scope,
        limit: usize,
        filter: &Filter,
    ) -> Result<Vec<MemoryEntry>> {
        check_limit(limit, &self.config.limits)?;
        filter.validate(&self.caps(), BACKEND)?;
        let key = scope.key();
        let filter = filter.clone();
        let path = self.path.clone();
        let out = self
            .worker
            .call(move |conn| {
                let sql = Sql { conn, path: &path };
                let mut tail = String::from("WHERE s.key = ?");
                let mut params = vec![Value::Text(key)];
                crate::sql::filter_sql(&filter, &mut tail, &mut params);
                tail.push_str(" ORDER BY m.created_at DESC, m.id DESC LIMIT ?");
                params.push(Value::Integer(limit as i64));
                Ok(sql
                    .entries(&tail, &params)?
                    .into_iter()
                    .map(|(_, e)| e)
                    .collect::<Vec<_>>())
            })
            .await?;
        ensure_scope(BACKEND, scope, &out)?;
        Ok(out)
    }

    async fn update(&self, scope: &Scope, id: MemoryId, patch: MemoryPatch) -> Result<MemoryEntry> {
        self.caps().require(Capability::Update, BACKEND)?;
        if let Some(c) = &patch.content {
            validate_content(c, self.config.limits.max_content_bytes)?;
        }
        let superseding = patch.superseding(id)?;
        let mut entry = self.get(scope, id).await?;
        let vectors = match &patch.content {
            Some(c) => self.vectors().embed_text(c).await?,
            None => Vec::new(),
        };
        let content_changed = patch.content.is_some();
        let reindex = content_changed || patch.context.is_some();
        let tags_changed = patch.tags.is_some();
        patch.apply(&mut entry);
        if content_changed {
            // Without an embedder, changed content has no vector until a store opened with
            // one backfills it.
            entry.embedded = !vectors.is_empty();
        }
        let (scope_c, path) = (scope.clone(), self.path.clone());
        let e = entry.clone();
        self.worker
            .call(move |conn| {
                let mut vectors = vectors;
                let mut e = e;
                conn.write(|tx, space, ops| {
                    if !vectors.is_empty() && space != SpaceCheck::Same {
                        // Re-embedded into another space by another process: no vector of
                        // ours; a process of the new space embeds it later.
                        vectors.clear();
                        e.embedded = false;
                    }
                    let sql = Sql { conn: tx, path: &path };
                    let scope_id = sql.scope_id(&scope_c)?.ok_or(MemoryError::NotFound { id })?;
                    let pk = sql.find_pk(scope_id, id)?.ok_or(MemoryError::NotFound { id })?;
                    if let Some(t) = superseding
                        && sql.find_pk(scope_id, t)?.is_none()
                    {
                        return Err(superseded_by_refused(t, SUPERSEDER_NOT_IN_SCOPE).into());
                    }
                    // The old vectors go while the row still says how many there are, and
                    // the old words while it still holds them.
                    if content_changed && sql.has_vec_table()? {
                        sql.delete_vectors(pk)?;
                    }
                    if reindex {
                        sql.remove_fts(pk)?;
                    }
                    tx.execute(
                        "UPDATE memories SET kind = ?1, content = ?2, context = ?3, importance = ?4, pinned = ?5, \
                         valid_until = ?6, superseded_by = ?7, \
                         embedded = CASE WHEN ?8 THEN 0 ELSE embedded END WHERE pk = ?9",
                        rusqlite::params![
                            e.kind.as_str(),
                            e.content,
                            e.context,
                            f64::from(e.importance.get()),
                            e.pinned,
                            e.valid_until.map(Timestamp::as_millis),
                            e.superseded_by.map(|s| s.as_uuid().as_bytes().to_vec()),
                            content_changed,
                            pk
                        ],
                    )?;
                    if tags_changed {
                        sql.replace_tags(pk, e.tags.iter())?;
                    }
                    if reindex {
                        sql.insert_fts(pk, scope_id, &e.content, e.context.as_deref())?;
                    }
                    if content_changed {
                        if !vectors.is_empty() {
                            sql.insert_vectors(pk, scope_id, &vectors)?;
                        }
                        ops.invalidate(scope_id);
                    }
                    Ok(e.embedded)
                })
            })
            .await
            .map(|embedded| {
                entry.embedded = embedded;
                entry
            })
    }

    async fn delete(&self, scope: &Scope, id: MemoryId) -> Result<()> {
        let (scope, path) = (scope.clone(), self.path.clone());
        self.worker
            .call(move |conn| {
                conn.write(|tx, _, ops| {
                    let sql = Sql {
                        conn: tx,
                        path: &path,
                    };
                    let scope_id = sql.scope_id(&scope)?.ok_or(MemoryError::NotFound { id })?;
                    let pk = sql
                        .find_pk(scope_id, id)?
                        .ok_or(MemoryError::NotFound { id })?;
                    sql.delete_pks(&[pk])?;
                    sql.delete_records_quoting(scope_id, id, true)?;
                    ops.invalidate(scope_id);
                    Ok(())
                })?;
                checkpoint_deleted(conn);
                Ok(())
            })
            .await
    }

    async fn delete_scope(&self, scope: &Scope) -> Result<u64> {
        let (scope, path) = (scope.clone(), self.path.clone());
        self.worker
            .call(move |conn| {
                let n = conn.write(|tx, _, ops| {
                    let sql = Sql {
                        conn: tx,
                        path: &path,
                    };
                    let Some(scope_id) = sql.scope_id(&scope)? else {
                        return Ok(0);
                    };
                    let pks: Vec<i64> = tx
                        .prepare("SELECT pk FROM memories WHERE scope_id = ?1")?
                        .query_map([scope_id], |r| r.get(0))?
                        .collect::<rusqlite::Result<_>>()?;
                    sql.delete_pks(&pks)?;
                    sql.delete_records(scope_id)?;
                    tx.execute("DELETE FROM scopes WHERE id = ?1", [scope_id])?;
                    ops.invalidate(scope_id);
                    Ok(pks.len() as u64)
                })?;
                checkpoint_deleted(conn);
                Ok(n)
            })
            .await
    }

    /// Copies the log into the file and empties it (`wal_checkpoint(TRUNCATE)`), so no
    /// older copy of a deleted row stays in the `-wal` file; what was deleted was
    /// overwritten in the file already (`secure_delete`). Fails with
    /// [`MemoryError::Backend`] when a reader of another connection kept the log from being
    /// emptied (try again when it is done).
    async fn reclaim_deleted(&self) -> Result<()> {
        if self.read_only {
            return Ok(());
        }
        let path = self.path.clone();
        self.worker
            .call(move |conn| {
                if checkpoint_deleted(conn) {
                    Ok(())
                } else {
                    Err(MemoryError::Backend {
                        backend: BACKEND.to_owned(),
                        message: format!(
                            "the write-ahead log of `{}` could not be emptied: another \
                             connection is reading; try again when it is done",
                            path.display()
                        ),
                        source: None,
                    }
                    .into())
                }
            })
            .await
    }

    async fn prune(&self, scope: &Scope, policy: &PrunePolicy) -> Result<PruneReport> {
        policy.validate(&self.caps(), BACKEND)?;
        let (scope, path, policy) = (scope.clone(), self.path.clone(), *policy);
        self.worker
            .call(move |conn| {
                conn.write(|tx, _, ops| {
                    let sql = Sql {
                        conn: tx,
                        path: &path,
                    };
                    let Some(scope_id) = sql.scope_id(&scope)? else {
                        return Ok(PruneReport::default());
                    };
                    let entries =
                        sql.entries("WHERE m.scope_id = ?", &[Value::Integer(scope_id)])?;
                    let report = plan_prune(entries.iter().map(|(_, e)| e), &policy);
                    if report.dry_run {
                        return Ok(report);
                    }
                    let gone: HashSet<MemoryId> =
                        report.removed.iter().map(|(id, _)| *id).collect();
                    let pks: Vec<i64> = entries
                        .iter()
                        .filter(|(_, e)| gone.contains(&e.id))
                        .map(|(pk, _)| *pk)
                        .collect();
                    sql.delete_pks(&pks)?;
                    for id in &gone {
                        sql.delete_records_quoting(scope_id, *id, false)?;
                    }
                    ops.invalidate(scope_id);
                    Ok(report)
                })
            })
            .await
    }

    async fn scopes(&self, tenant: Option<&str>, user: Option<&str>) -> Result<Vec<Scope>> {
        let (tenant, user) = (tenant.map(str::to_owned), user.map(str::to_owned));
        self.worker
            .call(move |conn| {
                let rows: Vec<(String, String, Option<String>, Option<String>)> = conn
                    .prepare_cached(
                        "SELECT tenant, user, chat, thread FROM scopes s \
                         WHERE (?1 IS NULL OR tenant = ?1) AND (?2 IS NULL OR user = ?2) \
                         AND (EXISTS (SELECT 1 FROM memories m WHERE m.scope_id = s.id) \
                         OR EXISTS (SELECT 1 FROM records r WHERE r.scope_id = s.id))",
                    )?
                    .query_map(rusqlite::params![tenant, user], |r| {
                        Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
                    })?
                    .collect::<rusqlite::Result<_>>()?;
                let mut out = Vec::with_capacity(rows.len());
                for (tenant, user, chat, thread) in rows {
                    let mut s = Scope::for_user(user)?.in_tenant(tenant)?;
                    if let Some(c) = chat {
                        s = s.in_chat(c)?;
                    }
                    if let Some(t) = thread {
                        s = s.in_thread(t)?;
                    }
                    out.push(s);
                }
                out.sort();
                Ok(out)
            })
            .await
    }

    async fn count(&self, scope: &Scope) -> Result<u64> {
        let key = scope.key();
        self.worker
            .call(move |conn| {
                let n: i64 = conn
                    .prepare_cached("SELECT COUNT(*) FROM memories m JOIN scopes s ON s.id = m.scope_id WHERE s.key = ?1")?
                    .query_row([key], |r| r.get(0))?;
                Ok(u64::try_from(n).unwrap_or(0))
            })
            .await
    }
}

/// Longest query text searched on the caller's thread (see [`crate::read`]); a longer one
/// goes to the worker's.
const CALLER_MAX_QUERY_BYTES: usize = 2048;

/// After a deletion: copies the write-ahead log into the file and truncates it, so the log
/// keeps no older copy of what was deleted (the file's own copy was overwritten,
/// `secure_delete`). `false` when a reader of another connection kept it from finishing:
/// the log is emptied by a later checkpoint then (the deletion itself has committed).
fn checkpoint_deleted(conn: &rusqlite::Connection) -> bool {
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
        r.get::<_, i64>(0)
    })
    .is_ok_and(|busy| busy == 0)
}

/// Backfill rounds a search runs at most before it searches anyway.
const MAX_BACKFILL_ROUNDS: usize = 64;

impl SqliteBackend {
    /// One search. Reads only: the recall counts of the hits are noted and written after
    /// the reply (`Conn::flush_access`), so a search never waits for or fails because of a
    /// writer, and works on a read-only store. With `backfill`, a scope holding memories
    /// without a vector answers with those first.
    ///
    /// A scope whose vectors are cached (and small) is searched right here on a read
    /// connection; any other goes to the worker's thread.
    async fn search_once(
        &self,
        scope: &Scope,
        request: &SearchRequest,
        query_vec: Option<Arc<Vec<f32>>>,
        backfill: bool,
    ) -> Result<Searched> {
        let pool = (request.limit * self.config.hybrid_pool_factor).max(50);
        // A long query text (its words are looked up to choose the rarest, `Sql::fts_query`)
        // is searched on the worker's thread, never on the caller's runtime thread.
        let short_text = request
            .query_text()
            .is_none_or(|t| t.len() <= CALLER_MAX_QUERY_BYTES);
        if let Some(cache) = self.cache.as_ref().filter(|_| short_text) {
            let job = SearchJob {
                scope,
                request,
                query: query_vec.as_deref().map(Vec::as_slice),
                backfill,
                pool,
            };
            let mine = self.embedder.as_ref().and(self.space.as_deref());
            if let Some((found, pks)) = self.readers.search(mine, cache, &job) {
                if request.record_access && !self.read_only && !pks.is_empty() {
                    self.pending_access.note(&pks, Timestamp::now());
                    // The worker writes pending recalls after each job; this one is empty.
                    self.worker.nudge();
                }
                return Ok(found);
            }
        }
        let (scope, request) = (scope.clone(), request.clone());
        let cache = self.cache.clone();
        self.worker
            .call(move |conn| {
                let path = conn.path.clone();
                let place = Place {
                    path: &path,
                    mine: conn.space(),
                    space_checked_at: conn.space_checked_at(),
                    cache: cache.as_deref(),
                    caller: false,
                };
                let job = SearchJob {
                    scope: &scope,
                    request: &request,
                    query: query_vec.as_deref().map(Vec::as_slice),
                    backfill,
                    pool,
                };
                let (found, pks) = search_snapshot(conn, &place, &job)?
                    .unwrap_or((Searched::Hits(Vec::new()), Vec::new()));
                if request.record_access {
                    conn.note_access(&pks, Timestamp::now());
                }
                Ok(found)
            })
            .await
    }
}
