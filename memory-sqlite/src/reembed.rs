//! `reembed`: moves a store to a new embedding space without losing a memory.

use std::path::Path;
use std::sync::Arc;

use memory_core::{EmbeddingProvider, Result, embed_all};

use crate::error::sql_error;
use crate::sql::Sql;
use crate::{SqliteConfig, open_store, schema};

/// What [`reembed`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReembedReport {
    /// Memories that got a new vector (every memory in the store).
    pub memories: u64,
    /// The space the store was in before, if any.
    pub previous_space: Option<String>,
    /// The space it is in now.
    pub space: String,
}

/// Re-embeds every memory of the store at `path` with `embedder` and records its space.
///
/// All vectors are computed first; then one transaction replaces the vector table, so a
/// failure at any point (embedder down, process killed) leaves the store as it was.
/// Memories themselves are never touched.
pub async fn reembed(
    path: impl AsRef<Path>,
    embedder: Arc<dyn EmbeddingProvider>,
    config: SqliteConfig,
) -> Result<ReembedReport> {
    let path = path.as_ref().to_owned();
    let (worker, previous) = open_store(&path, &config)?;
    let p = path.clone();
    let rows: Vec<(i64, i64, String)> = worker
        .call(move |conn| {
            let mut stmt = conn
                .prepare("SELECT pk, scope_id, content FROM memories ORDER BY pk")
                .map_err(|e| sql_error(&p, e))?;
            let rows = stmt
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
                .map_err(|e| sql_error(&p, e))?;
            Ok(rows)
        })
        .await?;
    let texts: Vec<&str> = rows.iter().map(|(_, _, c)| c.as_str()).collect();
    let vectors = embed_all(embedder.as_ref(), &texts).await?;
    let space = embedder.space();
    let report = ReembedReport {
        memories: rows.len() as u64,
        previous_space: previous.as_ref().map(ToString::to_string),
        space: space.to_string(),
    };
    let p = path.clone();
    worker
        .call(move |conn| {
            let tx = conn.transaction().map_err(|e| sql_error(&p, e))?;
            {
                tx.execute_batch("DROP TABLE IF EXISTS memory_vec")
                    .map_err(|e| sql_error(&p, e))?;
                schema::create_vec_table(&tx, space.dims).map_err(|e| sql_error(&p, e))?;
                let sql = Sql {
                    conn: &tx,
                    path: &p,
                };
                for ((pk, scope_id, _), v) in rows.iter().zip(&vectors) {
                    sql.insert_vec(*pk, *scope_id, v.vector())?;
                }
                tx.execute("UPDATE memories SET embedded = 1", [])
                    .map_err(|e| sql_error(&p, e))?;
                schema::record_space(&tx, &space).map_err(|e| sql_error(&p, e))?;
            }
            tx.commit().map_err(|e| sql_error(&p, e))?;
            Ok(())
        })
        .await?;
    worker.close();
    Ok(report)
}
