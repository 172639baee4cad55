//! Writing to Postgres: storing a batch in one statement, the collision checks around it,
//! and remembering a fact once under its lock.

use deadpool_postgres::Object;
use memory_core::{
    MemoryEntry, MemoryError, MemoryId, NewMemory, Remembered, Result, Scope, Timestamp,
    ensure_scope, merge_patch, same_fact,
};
use pgvector::Vector;
use tokio_postgres::error::SqlState;
use uuid::Uuid;

use crate::PostgresBackend;
use crate::error::{BACKEND, Cells, InSchema, PostgresError, query_error};
use crate::sql::{Passages, Query, entries};

impl PostgresBackend {
    /// [`MemoryBackend::remember_once`]'s look and store, on `client`, which holds the
    /// fact's lock: the scope's memories of its kind matching all of its words (or, for a
    /// text of stopwords only, all of them) are compared with it; the oldest that is the same
    /// fact takes the new one's tags, importance and pin, else `memory` (embedded as
    /// `vector`, one per passage) is stored.
    pub(crate) async fn remember_locked(
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
            Ok((scope_id, stored)) => self.index_if_grown(scope, scope_id, stored),
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
    pub(crate) async fn count_into_scope(
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

    /// After a write left `stored` memories in `scope` (`scope_id`): when that took the
    /// scope past exact scans, indexes it in the background.
    pub(crate) fn index_if_grown(&self, scope: &Scope, scope_id: i64, stored: i64) {
        let key = scope.key();
        if self.indexes.wants(&key, stored) {
            self.indexes
                .spawn_build(key, scope.tenant().to_owned(), scope_id);
        }
    }

    /// Writes `entries` (with their `vectors`: per memory, one per passage) into the scope
    /// in one transaction. Returns the scope's id and its count of memories ever stored, or
    /// the first id of the batch that another memory holds already (nothing written). If
    /// another process moved the store to another embedding space, the memories are written
    /// without their vectors (and `entries` say so).
    pub(crate) async fn insert_all(
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
    pub(crate) async fn first_taken(
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
    pub(crate) async fn collided(
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
    pub(crate) fn insert_statement(
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
    pub(crate) fn col<T>(entries: &[MemoryEntry], f: impl Fn(&MemoryEntry) -> T) -> Vec<T> {
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
