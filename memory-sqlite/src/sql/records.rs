//! A scope's records in SQL: the bounded ring per kind, and the records that go with the
//! memories they quote.

use memory_core::{MemoryId, Record, Timestamp};
use rusqlite::params;

use super::*;

impl Sql<'_> {
    /// Keeps `record` in scope `scope_id` and leaves the newest `keep` of its kind there.
    pub(crate) fn keep_record(&self, scope_id: i64, record: &Record, keep: usize) -> R<()> {
        self.conn
            .prepare_cached(
                "INSERT INTO records (scope_id, kind, at, body) VALUES (?1, ?2, ?3, ?4)",
            )?
            .execute(params![
                scope_id,
                record.kind,
                record.at.as_millis(),
                record.body
            ])?;
        if !record.quotes.is_empty() {
            let id = self.conn.last_insert_rowid();
            let mut quote = self.conn.prepare_cached(
                "INSERT INTO record_quotes (record, k, memory) VALUES (?1, ?2, ?3)",
            )?;
            for (k, m) in record.quotes.iter().enumerate() {
                quote.execute(params![id, k as i64, m.as_uuid().as_bytes().as_slice()])?;
            }
        }
        self.conn
            .prepare_cached(
                "DELETE FROM records WHERE scope_id = ?1 AND kind = ?2 AND id NOT IN \
                 (SELECT id FROM records WHERE scope_id = ?1 AND kind = ?2 \
                 ORDER BY at DESC, id DESC LIMIT ?3)",
            )?
            .execute(params![
                scope_id,
                record.kind,
                i64::try_from(keep).unwrap_or(i64::MAX)
            ])?;
        Ok(())
    }

    /// The newest `limit` records of `kind` in scope `scope_id`, newest first.
    pub(crate) fn records(&self, scope_id: i64, kind: &str, limit: usize) -> R<Vec<Record>> {
        let rows: Vec<(i64, String, i64, String)> = self
            .conn
            .prepare_cached(
                "SELECT id, kind, at, body FROM records WHERE scope_id = ?1 AND kind = ?2 \
                 ORDER BY at DESC, id DESC LIMIT ?3",
            )?
            .query_map(
                params![scope_id, kind, i64::try_from(limit).unwrap_or(i64::MAX)],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
            )?
            .collect::<rusqlite::Result<_>>()?;
        let mut quotes = self
            .conn
            .prepare_cached("SELECT memory FROM record_quotes WHERE record = ?1 ORDER BY k")?;
        rows.into_iter()
            .map(|(id, kind, at, body)| {
                let at = Timestamp::from_millis(at)
                    .ok_or_else(|| self.invalid(format!("a record's time {at} is out of range")))?;
                let quoted: Vec<Vec<u8>> = quotes
                    .query_map([id], |r| r.get(0))?
                    .collect::<rusqlite::Result<_>>()?;
                let quoted = quoted
                    .iter()
                    .map(|b| self.id(b))
                    .collect::<R<Vec<MemoryId>>>()?;
                Ok(Record::new(kind, at, body).quoting(quoted))
            })
            .collect()
    }

    /// Deletes the records of scope `scope_id` that quote memory `id`, and with
    /// `unnamed` those that name nothing they quote (`MemoryBackend::keep_record`): on the
    /// deletion (`unnamed`) or the pruning of that memory.
    pub(crate) fn delete_records_quoting(
        &self,
        scope_id: i64,
        id: MemoryId,
        unnamed: bool,
    ) -> R<()> {
        self.conn
            .prepare_cached(
                "DELETE FROM records WHERE scope_id = ?1 AND (id IN \
                 (SELECT record FROM record_quotes WHERE memory = ?2) \
                 OR (?3 AND NOT EXISTS (SELECT 1 FROM record_quotes q WHERE q.record = records.id)))",
            )?
            .execute(params![scope_id, id.as_uuid().as_bytes().as_slice(), unnamed])?;
        Ok(())
    }

    /// Deletes every record of scope `scope_id`, with the scope.
    pub(crate) fn delete_records(&self, scope_id: i64) -> R<()> {
        self.conn
            .prepare_cached("DELETE FROM records WHERE scope_id = ?1")?
            .execute([scope_id])?;
        Ok(())
    }
}
