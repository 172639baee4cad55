//! `MemoryBackend` for `PostgresBackend`: validation and embedding happen before any
//! statement; writes are one transaction each; every statement names the scope.

use std::collections::HashSet;
use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::Object;
use memory_core::{
    BackendInfo, Capabilities, Capability, Filter, MemoryBackend, MemoryEntry, MemoryError,
    MemoryId, MemoryPatch, NewMemory, PrunePolicy, PruneReport, Record, Remembered, Result,
    SUPERSEDER_NOT_IN_SCOPE, Scope, ScopeSpread, ScoredMemory, SearchMode, SearchRequest,
    StoreVectors, Timestamp, check_limit, ensure_scope, normalise, plan_prune, rank,
    superseded_by_refused, validate_content,
};
use pgvector::Vector;
use uuid::Uuid;

use crate::PostgresBackend;
use crate::error::{BACKEND, Cells, InSchema, PostgresError};
use crate::schema::{space_is, space_key, space_sql};
use crate::search::{Found, Nearest};
use crate::sql::{Passages, Query, entries, entry, push_filter};

impl PostgresBackend {
    pub(crate) fn caps(&self) -> Capabilities {
        Capabilities::full_store(self.embedder.is_some())
            .with(Capability::Persistence)
            .with(Capability::Records)
            .with(Capability::Leases)
    }

    pub(crate) fn store_name(&self) -> String {
        format!("store `{}` on {}", self.schema, self.server)
    }

    pub(crate) fn vectors(&self) -> StoreVectors<'_> {
        StoreVectors {
            backend: BACKEND,
            store: self.store_name().into(),
            embedder: self.embedder.as_deref(),
            space: self.space.as_deref(),
        }
    }

    /// SQL that is true while the store records this process's embedding space (its key
    /// bound in `q`; see [`space_is`]), or `true` for a process without one.
    pub(crate) fn space_guard(&self, q: &mut Query) -> String {
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
    pub(crate) fn space_moved(&self, now: String) -> PostgresError {
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
    pub(crate) fn in_scope(&self, q: &mut Query, scope: &Scope) -> (String, String) {
        self.rows_of(q, scope, "m")
    }

    /// [`Self::in_scope`] for the rows of a table named `alias` (with `tenant` and
    /// `scope_id` columns).
    pub(crate) fn rows_of(&self, q: &mut Query, scope: &Scope, alias: &str) -> (String, String) {
        let t = q.bind(scope.tenant().to_owned());
        let k = q.bind(scope.key());
        let condition = format!(
            "{alias}.tenant = {t} AND {alias}.scope_id = \
             (SELECT id FROM {} WHERE tenant = {t} AND key = {k})",
            self.names.scopes
        );
        (condition, t)
    }
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

    async fn try_lease(&self, name: &str, holder: &str, ttl: Duration) -> Result<bool> {
        self.take_lease(name, holder, ttl).await
    }

    async fn release_lease(&self, name: &str, holder: &str) -> Result<()> {
        self.give_up_lease(name, holder).await
    }

    async fn end_lease(&self, name: &str) -> Result<()> {
        self.drop_lease(name).await
    }

    async fn keep_record(&self, scope: &Scope, record: Record, keep: usize) -> Result<()> {
        self.keep_one_record(scope, record, keep).await
    }

    async fn reclaim_deleted(&self) -> Result<()> {
        self.vacuum_tables().await
    }

    async fn records(&self, scope: &Scope, kind: &str, limit: usize) -> Result<Vec<Record>> {
        self.newest_records(scope, kind, limit).await
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
                self.index_if_grown(scope, scope_id, stored);
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
    use super::*;
    use crate::PostgresConfig;
    use crate::sql::TsQuery;
    use memory_core::keyword::MAX_QUERY_TERMS;
    use tokio_postgres::error::SqlState;

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
        let huge = memory_core::testing::rare_word_query(&store, &scope).await;

        let c = store.client().await.unwrap();
        let q = store
            .keyword_query(&c, &scope, &huge.only_rare)
            .await
            .unwrap();
        assert_eq!(q, Some(TsQuery::Lexemes("'quetzalcoatl'".into())));
        let Some(TsQuery::Lexemes(q)) = store
            .keyword_query(&c, &scope, &huge.with_topics)
            .await
            .unwrap()
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
        huge.assert_found(&store, &scope).await;
        let client = store.client().await.unwrap();
        client
            .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
            .await
            .unwrap();
        drop(client);
        store.close();
    }
}
