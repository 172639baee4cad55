//! Leases and records in Postgres, beside the memories: leases taken by the server's clock,
//! a bounded ring of records per scope and kind, and vacuuming what deletions left.

use std::time::Duration;

use memory_core::{
    MemoryId, Record, Result, Scope, Timestamp, check_lease, check_limit, check_record_kind,
};
use uuid::Uuid;

use crate::PostgresBackend;
use crate::error::{Cells, InSchema, PostgresError};
use crate::sql::Query;

impl PostgresBackend {
    /// Expiry by the server's clock, so replicas on machines whose clocks differ agree.
    pub(crate) async fn take_lease(&self, name: &str, holder: &str, ttl: Duration) -> Result<bool> {
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

    pub(crate) async fn give_up_lease(&self, name: &str, holder: &str) -> Result<()> {
        let c = self.client().await?;
        let sql = format!(
            "DELETE FROM {} WHERE name = $1 AND holder = $2",
            self.names.leases
        );
        self.on(&c).execute(&sql, &[&name, &holder]).await?;
        Ok(())
    }

    pub(crate) async fn drop_lease(&self, name: &str) -> Result<()> {
        let c = self.client().await?;
        let sql = format!("DELETE FROM {} WHERE name = $1", self.names.leases);
        self.on(&c).execute(&sql, &[&name]).await?;
        Ok(())
    }

    /// One transaction, the ring trimmed in it. Keepers of one scope take turns on the
    /// scope's row (its upsert locks it), so concurrent keeps leave exactly the newest.
    pub(crate) async fn keep_one_record(
        &self,
        scope: &Scope,
        record: Record,
        keep: usize,
    ) -> Result<()> {
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
    pub(crate) async fn vacuum_tables(&self) -> Result<()> {
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

    pub(crate) async fn newest_records(
        &self,
        scope: &Scope,
        kind: &str,
        limit: usize,
    ) -> Result<Vec<Record>> {
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
}
