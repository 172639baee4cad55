//! `reembed`: moves a store to a new embedding space without losing a memory.

use std::path::Path;
use std::sync::Arc;

use memory_core::{Embedding, EmbeddingProvider, Result, embed_passages};
use rusqlite::OptionalExtension;

use crate::sql::{self, Sql};
use crate::worker::Worker;
use crate::{SqliteConfig, schema};

/// What [`reembed`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReembedReport {
    /// Memories that got a new vector (every memory in the store, but those stored or
    /// changed by another process while the vectors were computed: they get theirs later).
    pub memories: u64,
    /// The space the store was in before, if any.
    pub previous_space: Option<String>,
    /// The space it is in now.
    pub space: String,
}

/// Re-embeds every memory of the store at `path` with `embedder` and records its space.
///
/// All vectors are computed first, without holding any lock; then one write transaction
/// replaces the vector table, so a failure at any point (embedder down, process killed)
/// leaves the store as it was. Other processes may go on writing meanwhile: a memory gets
/// its new vector only if it still exists with the content that was embedded; one stored
/// or changed since is left without a vector and embedded by the next search of its scope
/// (or [`crate::SqliteBackend::embed_missing`]), and deleted ones get none. Processes still
/// running with the old embedder notice the new space at their next write or search (see
/// [`crate::SqliteError::SpaceMoved`]). Memories themselves are never touched.
pub async fn reembed(
    path: impl AsRef<Path>,
    embedder: Arc<dyn EmbeddingProvider>,
    config: SqliteConfig,
) -> Result<ReembedReport> {
    let path = path.as_ref().to_owned();
    let config = SqliteConfig {
        create_if_missing: false,
        ..config
    };
    // The worker thread opens the file; this task only awaits it.
    let (worker, opened) = Worker::open(&path, &config, None).await?;
    let result = reembed_on(&worker, embedder.as_ref()).await;
    worker.close().await;
    let memories = result?;
    Ok(ReembedReport {
        memories,
        previous_space: opened.recorded.as_ref().map(ToString::to_string),
        space: embedder.space().to_string(),
    })
}

/// Embeds every memory of the store `worker` holds open and replaces its vectors; returns
/// how many got one.
async fn reembed_on(worker: &Worker, embedder: &dyn EmbeddingProvider) -> Result<u64> {
    let rows: Vec<sql::ToEmbed> = worker
        .call(move |conn| {
            let mut stmt = conn.prepare(&format!(
                "SELECT pk, content, {} FROM memories ORDER BY pk",
                sql::PART_TAGS
            ))?;
            let rows = stmt
                .query_map([], sql::to_embed)?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            Ok(rows)
        })
        .await?;
    let texts = sql::texts_to_embed(embedder, &rows);
    let vectors: Vec<Vec<Vec<f32>>> = embed_passages(embedder, &texts)
        .await?
        .into_iter()
        .map(|v| v.into_iter().map(Embedding::into_vector).collect())
        .collect();
    let space = embedder.space();
    worker
        .call(move |conn| {
            let path = conn.path.clone();
            conn.write(|tx, _, _| {
                tx.execute_batch("DROP TABLE IF EXISTS memory_vec")?;
                schema::create_vec_table(tx, space.dims)?;
                // Everything starts without a vector; a memory gets its new one only if it
                // still holds the text that was embedded.
                tx.execute("UPDATE memories SET embedded = 0", [])?;
                let sql = Sql {
                    conn: tx,
                    path: &path,
                };
                let mut mark =
                    tx.prepare("SELECT scope_id FROM memories WHERE pk = ?1 AND content = ?2")?;
                let mut embedded = 0u64;
                for ((pk, content, _), v) in rows.iter().zip(&vectors) {
                    let scope_id: Option<i64> = mark
                        .query_row(rusqlite::params![pk, content], |r| r.get(0))
                        .optional()?;
                    if let Some(scope_id) = scope_id {
                        sql.insert_vectors(*pk, scope_id, v)?;
                        embedded += 1;
                    }
                }
                schema::record_space(tx, &space)?;
                Ok(embedded)
            })
        })
        .await
}
