//! Per-scope HNSW indexes. A scope that outgrows exact scans (`exact_scan_max` memories) gets
//! its own partial HNSW index (`memories_hnsw_<scope id>`, `WHERE scope_id = <id>`), built
//! with `CREATE INDEX CONCURRENTLY` in the background on the table that holds the scope's
//! rows (`memories`, or in a partitioned store the tenant's partition). Writes into every
//! other scope pay for no graph upkeep, and searches learn which scopes have a ready index.
//!
//! Builds are serialised across processes by an advisory lock per scope. A build cut short
//! leaves an invalid index, which the next build drops and starts over.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};

use deadpool_postgres::{Object, Pool};

use crate::error::{InSchema, PostgresError};
use crate::{Names, PostgresConfig, pooled};

/// The name (unqualified) of a scope's index.
pub(crate) fn index_name(scope_id: i64) -> String {
    format!("memories_hnsw_{scope_id}")
}

/// What this process knows of the per-scope indexes of one store.
#[derive(Debug)]
pub(crate) struct Indexes {
    pool: Pool,
    /// `host:port/database`, for connection errors.
    server: String,
    /// The schema's bare name.
    schema: String,
    /// The store's qualified names.
    names: Names,
    /// pgvector's cosine operator class, qualified.
    ops: String,
    /// The store's config: `exact_scan_max` (scopes of more memories are indexed),
    /// `hnsw_build_mib`, and what getting a connection is bounded by.
    config: PostgresConfig,
    /// Whether large scopes get an index at all (`hnsw_index`, a space pgvector can index).
    enabled: bool,
    /// Background builds run one at a time, so they hold at most one pooled connection.
    background: tokio::sync::Semaphore,
    /// The session settings a pooled connection has (`connect::session_settings`), put
    /// back after a build changed them.
    settings: Arc<str>,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Scope key -> scope id, for the scopes whose index is ready.
    ready: HashMap<String, i64>,
    /// Scope ids with a build under way in this process.
    building: HashSet<i64>,
}

impl Indexes {
    /// The indexes of the store `names` name on `server`, pgvector living in `ext_schema`
    /// (quoted), whose pooled connections have the session `settings`.
    pub(crate) fn new(
        pool: Pool,
        server: &str,
        names: &Names,
        ext_schema: &str,
        config: &PostgresConfig,
        enabled: bool,
        settings: Arc<str>,
    ) -> Self {
        Self {
            pool,
            server: server.to_owned(),
            schema: config.schema.clone(),
            names: names.clone(),
            ops: format!("{ext_schema}.vector_cosine_ops"),
            config: config.clone(),
            enabled,
            background: tokio::sync::Semaphore::new(1),
            settings,
            state: Mutex::new(State::default()),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // The state is a cache: a panic elsewhere cannot leave it inconsistent.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The id of the scope with key `key`, if its index is ready to search through.
    pub(crate) fn ready(&self, key: &str) -> Option<i64> {
        self.state().ready.get(key).copied()
    }

    /// Records what a search saw of a scope's index. With indexes off, none is ever used.
    pub(crate) fn learn(&self, key: &str, scope_id: i64, ready: bool) {
        if !self.enabled {
            return;
        }
        let mut state = self.state();
        if ready {
            state.ready.insert(key.to_owned(), scope_id);
        } else {
            state.ready.remove(key);
        }
    }

    /// Whether a scope that holds `stored` memories (and has no ready index) wants one.
    pub(crate) fn wants(&self, key: &str, stored: i64) -> bool {
        self.enabled
            && usize::try_from(stored).is_ok_and(|n| n > self.config.exact_scan_max)
            && self.ready(key).is_none()
    }

    /// SQL for "is this scope's index ready" over a scope id expression, with `schema` the
    /// placeholder bound to the bare schema name.
    pub(crate) fn ready_sql(id: &str, schema: &str) -> String {
        format!(
            "coalesce((SELECT i.indisvalid FROM pg_index i WHERE i.indexrelid = \
             to_regclass(format('%I.%I', {schema}::text, 'memories_hnsw_' || {id}))), false)"
        )
    }

    /// Reads which scopes have a ready index (at connect).
    pub(crate) async fn load(&self, c: &Object) -> Result<(), PostgresError> {
        if !self.enabled {
            return Ok(());
        }
        let rows = c
            .query(
                &format!(
                    "SELECT sc.key, sc.id FROM {} sc WHERE {}",
                    self.names.scopes,
                    Self::ready_sql("sc.id", "$1")
                ),
                &[&self.schema],
            )
            .await
            .in_schema(&self.schema)?;
        let mut state = self.state();
        for r in &rows {
            let key: String = r.try_get(0).in_schema(&self.schema)?;
            let id: i64 = r.try_get(1).in_schema(&self.schema)?;
            state.ready.insert(key, id);
        }
        Ok(())
    }

    /// The scopes that hold more memories than the threshold and have no ready index: key,
    /// tenant and id of each.
    pub(crate) async fn wanting(
        &self,
        c: &Object,
    ) -> Result<Vec<(String, String, i64)>, PostgresError> {
        if !self.enabled {
            return Ok(Vec::new());
        }
        let threshold = i64::try_from(self.config.exact_scan_max).unwrap_or(i64::MAX);
        let rows = c
            .query(
                &format!(
                    "SELECT sc.key, sc.tenant, sc.id FROM {} sc WHERE sc.stored > $2 AND NOT {} \
                     ORDER BY sc.tenant, sc.id",
                    self.names.scopes,
                    Self::ready_sql("sc.id", "$1")
                ),
                &[&self.schema, &threshold],
            )
            .await
            .in_schema(&self.schema)?;
        rows.iter()
            .map(|r| {
                Ok((
                    r.try_get(0).in_schema(&self.schema)?,
                    r.try_get(1).in_schema(&self.schema)?,
                    r.try_get(2).in_schema(&self.schema)?,
                ))
            })
            .collect()
    }

    /// Starts building the scope's index in the background, unless this process is already
    /// building it or there is no runtime to build on. Failures are logged; searches stay
    /// exact until an index is ready.
    pub(crate) fn spawn_build(self: &Arc<Self>, key: String, tenant: String, scope_id: i64) {
        if !self.enabled || !self.state().building.insert(scope_id) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.state().building.remove(&scope_id);
            return;
        };
        let this = Arc::clone(self);
        runtime.spawn(async move {
            let turn = this.background.acquire().await;
            if let Err(e) = this.build(&key, &tenant, scope_id, false).await {
                tracing::warn!(
                    schema = %this.schema,
                    scope_id,
                    error = %memory_core::ErrorChain(&e),
                    "building a scope's HNSW index failed; its searches stay exact scans"
                );
            }
            this.state().building.remove(&scope_id);
            drop(turn);
        });
    }

    /// Builds the scope's index now, unless the scope turns out not to need one. If another
    /// session is building it, `wait` waits for that build, and otherwise this returns at
    /// once. Returns whether the index is ready.
    pub(crate) async fn build(
        &self,
        key: &str,
        tenant: &str,
        scope_id: i64,
        wait: bool,
    ) -> Result<bool, PostgresError> {
        let c = pooled(&self.pool, &self.server, &self.config).await?;
        let lock_key = format!("{}/{}", self.schema, index_name(scope_id));
        let built = self
            .lock_and_build(&c, &lock_key, (key, tenant, scope_id), wait)
            .await;
        // Settings and the lock belong to the session: undo them before the connection goes
        // back to the pool, or close it. (Unlocking a lock not held only warns.) RESET goes
        // back to the startup value; the session's own settings are then set again.
        let reset = match c
            .batch_execute(&format!(
                "RESET maintenance_work_mem; RESET statement_timeout; {}",
                self.settings
            ))
            .await
        {
            Ok(()) => c
                .execute(
                    "SELECT pg_advisory_unlock(hashtextextended($1, 0))",
                    &[&lock_key],
                )
                .await
                .map(drop),
            Err(e) => Err(e),
        };
        if reset.is_err() {
            drop(Object::take(c));
        }
        let ready = built?;
        if ready {
            self.learn(key, scope_id, true);
        }
        Ok(ready)
    }

    async fn lock_and_build(
        &self,
        c: &Object,
        lock_key: &str,
        scope: (&str, &str, i64),
        wait: bool,
    ) -> Result<bool, PostgresError> {
        // Waiting means trying again: a statement blocked on the lock would be a
        // transaction that the other session's CREATE INDEX CONCURRENTLY waits for.
        loop {
            let locked: bool = c
                .query_one(
                    "SELECT pg_try_advisory_lock(hashtextextended($1, 0))",
                    &[&lock_key],
                )
                .await
                .and_then(|r| r.try_get(0))
                .in_schema(&self.schema)?;
            if locked {
                return self.build_locked(c, scope).await;
            }
            if !wait {
                return Ok(false);
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }

    /// Builds the index of the scope `(key, tenant, id)`, this session holding its lock.
    async fn build_locked(
        &self,
        c: &Object,
        (key, tenant, scope_id): (&str, &str, i64),
    ) -> Result<bool, PostgresError> {
        // `stored` counts memories ever stored: check what the scope holds now.
        let cap = i64::try_from(self.config.exact_scan_max)
            .unwrap_or(i64::MAX - 1)
            .saturating_add(1);
        let n: i64 = c
            .query_one(
                &format!(
                    "SELECT count(*) FROM (SELECT 1 FROM {} m WHERE m.tenant = $3 \
                     AND m.scope_id = $1 AND m.embedding IS NOT NULL LIMIT $2) x",
                    self.names.memories
                ),
                &[&scope_id, &cap, &tenant],
            )
            .await
            .and_then(|r| r.try_get(0))
            .in_schema(&self.schema)?;
        if n < cap {
            c.execute(
                &format!(
                    "UPDATE {} SET stored = LEAST(stored, $2) WHERE tenant = $3 AND id = $1",
                    self.names.scopes
                ),
                &[&scope_id, &n, &tenant],
            )
            .await
            .in_schema(&self.schema)?;
            return Ok(false);
        }
        let name = index_name(scope_id);
        let qualified = format!("{}.{name}", self.names.schema);
        let valid: Option<bool> = c
            .query_opt(
                "SELECT i.indisvalid FROM pg_index i WHERE i.indexrelid = to_regclass($1)",
                &[&qualified],
            )
            .await
            .in_schema(&self.schema)?
            .map(|r| r.try_get(0))
            .transpose()
            .in_schema(&self.schema)?;
        match valid {
            Some(true) => return Ok(true),
            // A build that was cut short: we hold the lock, so nobody is finishing it.
            Some(false) => c
                .batch_execute(&format!("DROP INDEX CONCURRENTLY IF EXISTS {qualified}"))
                .await
                .in_schema(&self.schema)?,
            None => {}
        }
        // The table holding the scope's rows: `memories`, or the tenant's partition of it
        // (an index cannot be built concurrently on a partitioned table as a whole; a search
        // pruned to the partition uses the partition's index).
        let table: String = c
            .query_one(
                &format!(
                    "SELECT tableoid::regclass::text FROM {} WHERE tenant = $1 AND scope_id = $2 LIMIT 1",
                    self.names.memories
                ),
                &[&tenant, &scope_id],
            )
            .await
            .and_then(|r| r.try_get(0))
            .in_schema(&self.schema)?;
        tracing::info!(schema = %self.schema, scope = key, scope_id, table, "building the scope's HNSW index");
        // Not bound by the statement timeout; a graph that fits in maintenance_work_mem
        // builds many times faster. CONCURRENTLY: writes go on meanwhile.
        // (CONCURRENTLY must be a statement of its own: several in one string are one
        // transaction.)
        c.batch_execute(&format!(
            "SET maintenance_work_mem = '{}MB'; SET statement_timeout = 0",
            self.config.hnsw_build_mib
        ))
        .await
        .in_schema(&self.schema)?;
        c.batch_execute(&format!(
            "CREATE INDEX CONCURRENTLY IF NOT EXISTS {name} ON {table} \
             USING hnsw (embedding {}) WHERE scope_id = {scope_id}",
            self.ops
        ))
        .await
        .in_schema(&self.schema)?;
        Ok(true)
    }
}
