//! `reembed`: moves a store to another embedding space without losing a memory, resumable.
//!
//! The new vectors are computed first, in batches each committed to a staging table of the
//! store (`reembed_stage`, with the content digest each was computed from), while the store
//! stays wholly in its old space: a reembed cut short leaves it so, and the next run goes on
//! from what was staged. Then one transaction, holding `memories` (and the passages) for
//! itself, swaps the vector column and the passages for the staged vectors of the memories
//! whose content is still the one embedded, and records the new space. A memory is thus in
//! one space at any time. Writers of the old space wait for that transaction; those that wrote
//! before it are covered by it (a memory not staged, or changed since, is left without a
//! vector), those after it see the new space and write their text without vectors (see
//! `PostgresError::SpaceMoved`). What was left without a vector is embedded at the end.

use std::sync::Arc;

use deadpool_postgres::Object;
use memory_core::{Embedding, EmbeddingProvider, embed_passages, embeds_head_only, head_passage};

use crate::error::{Cells, InSchema, PostgresError};
use crate::schema::{create_passages, space_key};
use crate::{PostgresBackend, PostgresConfig};

/// What [`reembed`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReembedReport {
    /// Memories with a vector in the new space afterwards (every memory, but those stored or
    /// changed by a process of the old space after the move: they get theirs when a process
    /// of the new space connects).
    pub memories: u64,
    /// Memories whose new vectors an earlier, interrupted run had computed already.
    pub resumed: u64,
    /// The space the store was in before, if any.
    pub previous_space: Option<String>,
    /// The space it is in now.
    pub space: String,
}

/// The staging table's name (unqualified) and the `meta` key recording its space.
const STAGE: &str = "reembed_stage";
const STAGE_SPACE_KEY: &str = "reembed_space";

/// Memories embedded per staged batch.
const BATCH: i64 = 256;

/// Re-embeds every memory of the store at `url` (see [`PostgresBackend::connect`] for the
/// URL and `config`) with `embedder` and records its space (see the module docs).
/// `progress` hears (memories with a staged vector, memories) after each batch. Another
/// reembed of the store running at the same time is refused
/// ([`PostgresError::ReembedRunning`]); one cut short is resumed by running this again with
/// the same embedder (with another, its staged vectors are dropped).
pub async fn reembed(
    url: &str,
    embedder: Arc<dyn EmbeddingProvider>,
    config: PostgresConfig,
    progress: impl FnMut(u64, u64) + Send,
) -> Result<ReembedReport, PostgresError> {
    let store = PostgresBackend::connect(url, None, config.clone()).await?;
    let previous_space = store.space.as_ref().map(ToString::to_string);
    let moved = store.reembed_into(embedder.as_ref(), progress).await;
    store.close();
    let resumed = moved?;
    // What processes of the old space stored or changed while the store moved is embedded
    // by connecting with the new embedder.
    let store = PostgresBackend::connect(url, Some(Arc::clone(&embedder)), config).await?;
    let stats = store.stats().await;
    store.close();
    Ok(ReembedReport {
        memories: stats?.embedded,
        resumed,
        previous_space,
        space: embedder.space().to_string(),
    })
}

impl PostgresBackend {
    /// Stages the new vectors and moves the store; returns how many memories were staged by
    /// an earlier run. Holds the store's reembed lock (a session advisory lock) throughout.
    async fn reembed_into(
        &self,
        embedder: &dyn EmbeddingProvider,
        progress: impl FnMut(u64, u64) + Send,
    ) -> Result<u64, PostgresError> {
        let c = self.client().await?;
        let lock = format!("{}/reembed", self.schema);
        let locked: bool = c
            .query_one(
                "SELECT pg_try_advisory_lock(hashtextextended($1, 0))",
                &[&lock],
            )
            .await
            .and_then(|r| r.try_get(0))
            .in_schema(&self.schema)?;
        if !locked {
            return Err(PostgresError::ReembedRunning {
                server: self.server.clone(),
                schema: self.schema.clone(),
            });
        }
        let result = self.stage_and_move(&c, embedder, progress).await;
        let unlocked = c
            .execute(
                "SELECT pg_advisory_unlock(hashtextextended($1, 0))",
                &[&lock],
            )
            .await;
        if unlocked.is_err() {
            // The lock must not outlive this call: closing the session releases it.
            drop(Object::take(c));
        }
        result
    }

    async fn stage_and_move(
        &self,
        c: &Object,
        embedder: &dyn EmbeddingProvider,
        mut progress: impl FnMut(u64, u64) + Send,
    ) -> Result<u64, PostgresError> {
        let space = embedder.space();
        let (m, s) = (&self.names.memories, &self.names.schema);
        let stage = format!("{s}.{STAGE}");
        self.prepare_stage(c, &stage, &space_key(&space), space.dims)
            .await?;
        let row = c
            .query_one(
                &format!(
                    "SELECT (SELECT count(*) FROM {m}), \
                     (SELECT count(*) FROM {stage} st JOIN {m} m \
                     ON m.tenant = st.tenant AND m.pk = st.pk \
                     WHERE st.k = 0 AND st.digest = md5(m.content))"
                ),
                &[],
            )
            .await
            .in_schema(&self.schema)?;
        let cells = Cells::new(&row, &self.schema);
        let total = u64::try_from(cells.get::<i64>(0)?).unwrap_or(0);
        let resumed = u64::try_from(cells.get::<i64>(1)?).unwrap_or(0);
        let mut done = resumed;
        progress(done, total);
        // In key order, each batch after the last; memories staged from their current
        // content are passed over.
        let select = format!(
            "SELECT m.tenant, m.pk, m.content, md5(m.content), m.tags FROM {m} m \
             WHERE (m.tenant, m.pk) > ($1, $2) AND NOT EXISTS (SELECT 1 FROM {stage} st \
             WHERE st.tenant = m.tenant AND st.pk = m.pk AND st.k = 0 \
             AND st.digest = md5(m.content)) ORDER BY m.tenant, m.pk LIMIT {BATCH}"
        );
        let replace = format!(
            "DELETE FROM {stage} st USING unnest($1::text[], $2::int8[]) \
             AS u(tenant, pk) WHERE st.tenant = u.tenant AND st.pk = u.pk"
        );
        let insert = format!(
            "INSERT INTO {stage} (tenant, pk, k, digest, embedding) \
             SELECT * FROM unnest($1::text[], $2::int8[], $3::int4[], $4::text[], $5::{}[])",
            self.names.vector
        );
        let mut after = (String::new(), 0i64);
        loop {
            let rows = c
                .query(&select, &[&after.0, &after.1])
                .await
                .in_schema(&self.schema)?;
            let Some(last) = rows.last() else { break };
            after = (
                last.try_get(0).in_schema(&self.schema)?,
                last.try_get(1).in_schema(&self.schema)?,
            );
            let mut memories = Vec::with_capacity(rows.len());
            let mut head_only = Vec::with_capacity(rows.len());
            for r in &rows {
                let cells = Cells::new(r, &self.schema);
                memories.push((
                    cells.get::<String>(0)?,
                    cells.get::<i64>(1)?,
                    cells.get::<String>(2)?,
                    cells.get::<String>(3)?,
                ));
                let tags: Vec<String> = cells.get(4)?;
                head_only.push(embeds_head_only(tags.iter().map(String::as_str)));
            }
            // A later part of a message is embedded by its head, as when it is stored.
            let window = embedder.window_bytes();
            let texts: Vec<&str> = memories
                .iter()
                .zip(&head_only)
                .map(|((_, _, t, _), &head)| match head {
                    true => head_passage(t, window),
                    false => t.as_str(),
                })
                .collect();
            let embedded = embed_passages(embedder, &texts)
                .await
                .map_err(PostgresError::Embedder)?;
            let (mut tenants, mut pks, mut ks, mut digests, mut vectors) =
                (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
            for ((tenant, pk, _, digest), passages) in memories.iter().zip(embedded) {
                for (k, v) in passages.into_iter().map(Embedding::into_vector).enumerate() {
                    tenants.push(tenant.clone());
                    pks.push(*pk);
                    ks.push(i32::try_from(k).unwrap_or(i32::MAX));
                    digests.push(digest.clone());
                    vectors.push(pgvector::Vector::from(v));
                }
            }
            let stale_tenants: Vec<&String> = memories.iter().map(|(t, ..)| t).collect();
            let stale_pks: Vec<i64> = memories.iter().map(|(_, pk, ..)| *pk).collect();
            // Each batch commits on its own: a run cut short keeps what it staged.
            c.batch_execute("BEGIN").await.in_schema(&self.schema)?;
            let staged = async {
                c.execute(&replace, &[&stale_tenants, &stale_pks]).await?;
                c.execute(&insert, &[&tenants, &pks, &ks, &digests, &vectors])
                    .await?;
                c.batch_execute("COMMIT").await
            }
            .await;
            if let Err(e) = staged {
                let _ = c.batch_execute("ROLLBACK").await;
                return Err(crate::error::query_error(&self.schema, e));
            }
            done += u64::try_from(memories.len()).unwrap_or(0);
            progress(done.min(total), total);
        }
        self.move_store(c, &stage, &space).await?;
        Ok(resumed)
    }

    /// Makes the staging table for vectors of `dims` dimensions of the space `key`: the one
    /// an earlier run left if it was for this space, else a new one.
    async fn prepare_stage(
        &self,
        c: &Object,
        stage: &str,
        key: &str,
        dims: usize,
    ) -> Result<(), PostgresError> {
        let meta = &self.names.meta;
        let row = c
            .query_opt(
                &format!("SELECT value FROM {meta} WHERE key = $1"),
                &[&STAGE_SPACE_KEY],
            )
            .await
            .in_schema(&self.schema)?;
        let staged_for: Option<String> = match &row {
            Some(r) => Some(Cells::new(r, &self.schema).get(0)?),
            None => None,
        };
        let fresh = if staged_for.as_deref() == Some(key) {
            String::new()
        } else {
            format!("DROP TABLE IF EXISTS {stage};")
        };
        let vector = &self.names.vector;
        c.batch_execute(&format!(
            "BEGIN; {fresh}
             CREATE TABLE IF NOT EXISTS {stage} (
                 tenant    text NOT NULL,
                 pk        bigint NOT NULL,
                 k         integer NOT NULL,
                 digest    text NOT NULL,
                 embedding {vector}({dims}) NOT NULL,
                 PRIMARY KEY (tenant, pk, k)
             );"
        ))
        .await
        .in_schema(&self.schema)?;
        let recorded = c
            .execute(
                &format!(
                    "INSERT INTO {meta} (key, value) VALUES ($1, $2) \
                     ON CONFLICT (key) DO UPDATE SET value = excluded.value"
                ),
                &[&STAGE_SPACE_KEY, &key],
            )
            .await;
        let done = match recorded {
            Ok(_) => c.batch_execute("COMMIT").await,
            Err(e) => Err(e),
        };
        if let Err(e) = done {
            let _ = c.batch_execute("ROLLBACK").await;
            return Err(crate::error::query_error(&self.schema, e));
        }
        Ok(())
    }

    /// The move, in one transaction: the vector column and the passages replaced by the
    /// staged vectors of the memories whose content is the one embedded, the new space
    /// recorded, the stage dropped.
    async fn move_store(
        &self,
        c: &Object,
        stage: &str,
        space: &memory_core::EmbeddingSpace,
    ) -> Result<(), PostgresError> {
        let n = &self.names;
        let (m, p, meta) = (&n.memories, &n.passages, &n.meta);
        let dims = space.dims;
        // `vector` is `ext.vector`: the extension's schema is what precedes `.vector`.
        let ext = n.vector.strip_suffix(".vector").unwrap_or("public");
        let passages = create_passages(&n.schema, ext, dims, self.partitions);
        let sql = format!(
            "BEGIN;
             SET LOCAL statement_timeout = 0;
             LOCK TABLE {m} IN ACCESS EXCLUSIVE MODE;
             DO $$ BEGIN
                 IF to_regclass('{p_lit}') IS NOT NULL THEN
                     LOCK TABLE {p} IN ACCESS EXCLUSIVE MODE;
                 END IF;
             END $$;
             ALTER TABLE {m} DROP COLUMN IF EXISTS embedding;
             DROP TABLE IF EXISTS {p};
             ALTER TABLE {m} ADD COLUMN embedding {vector}({dims});
             UPDATE {m} m SET embedding = st.embedding, embedded = true FROM {stage} st
                 WHERE st.tenant = m.tenant AND st.pk = m.pk AND st.k = 0
                 AND st.digest = md5(m.content);
             UPDATE {m} SET embedded = false WHERE embedded AND embedding IS NULL;
             CREATE INDEX memories_embedded_by_scope ON {m} (tenant, scope_id)
                 WHERE embedding IS NOT NULL;
             {passages}
             INSERT INTO {p} (tenant, memory, scope_id, k, embedding)
                 SELECT m.tenant, m.pk, m.scope_id, st.k, st.embedding FROM {stage} st
                 JOIN {m} m ON m.tenant = st.tenant AND m.pk = st.pk
                 WHERE st.k >= 1 AND m.embedded AND st.digest = md5(m.content);
             DELETE FROM {meta} WHERE key = '{STAGE_SPACE_KEY}';
             DROP TABLE {stage};",
            p_lit = p.replace('\'', "''"),
            vector = n.vector,
        );
        let moved = async {
            c.batch_execute(&sql).await?;
            for (k, v) in [
                ("embedding_provider", space.provider.clone()),
                ("embedding_model", space.model.clone()),
                ("embedding_dims", dims.to_string()),
            ] {
                c.execute(
                    &format!(
                        "INSERT INTO {meta} (key, value) VALUES ($1, $2) \
                         ON CONFLICT (key) DO UPDATE SET value = excluded.value"
                    ),
                    &[&k, &v],
                )
                .await?;
            }
            c.batch_execute("COMMIT").await
        }
        .await;
        if let Err(e) = moved {
            let _ = c.batch_execute("ROLLBACK").await;
            return Err(crate::error::query_error(&self.schema, e));
        }
        tracing::info!(schema = %self.schema, space = %space, "the store moved to another embedding space");
        Ok(())
    }
}
