//! Opening a store safely: inspection of the Postgres schema before any write, the pgvector
//! extension, schema creation and migrations (the `meta` table's `schema_version`), and the
//! recorded embedding space. All of it runs in one transaction under an advisory lock, so
//! two processes opening the same store at once do not race.
//!
//! The tenant leads every key and index of a person's data (scopes, memories, recall counts,
//! passages, records), so a store can be split by tenant: into hash partitions here
//! (`PostgresConfig::tenant_partitions`), or into shards by an engine that distributes tables
//! by a column (ARCHITECTURE.md, "Sharding by tenant").

use memory_core::EmbeddingSpace;
use tokio_postgres::Transaction;

use crate::error::{InSchema, PostgresError};

/// The schema version this build writes and understands.
pub(crate) const SCHEMA_VERSION: i64 = 7;

/// `meta.format` of Ava stores.
pub(crate) const FORMAT: &str = "ava-memory-store";

/// Advisory lock key taken while a store is opened (ASCII "AVAMEMPG").
const SETUP_LOCK: i64 = 0x4156_414d_454d_5047;

/// One step of [`MIGRATIONS`].
enum Migration {
    /// Statements; `{s}` stands for the quoted schema name.
    Sql(&'static str),
    /// The passages table as version 3 made it ([`create_passages_v3`]), in a store that
    /// has vectors; a store without gets it when it adopts a space ([`adopt_space`]).
    Passages,
    /// The tenant into every key and index ([`TENANT_FIRST`]; the passages' part only where
    /// the table exists).
    TenantFirst,
    /// The records' table ([`create_records`]), in the store's hash partitions if it has any.
    Records,
}

/// Migrations: entry `i` upgrades a store from version `i + 1` to `i + 2`. A new store is
/// created at version 1 by [`schema_v1`] and migrated from there, so every migration runs
/// on every new store too.
const MIGRATIONS: &[Migration] = &[
    // 2: one HNSW index per large scope (built in the background, see index.rs) instead of
    // one over the whole table, whose upkeep made every write ~40x slower while scopes under
    // `exact_scan_max` never used it. `stored` counts the memories ever stored in a scope,
    // so a write knows when the scope outgrows exact scans without counting rows.
    Migration::Sql(
        "DROP INDEX IF EXISTS {s}.memories_embedding_hnsw;
         ALTER TABLE {s}.scopes ADD COLUMN stored bigint NOT NULL DEFAULT 0;
         UPDATE {s}.scopes sc SET stored = (SELECT count(*) FROM {s}.memories m WHERE m.scope_id = sc.id);",
    ),
    // 3: a memory longer than the embedder's window has one vector per passage: the first
    // in `memories.embedding`, the others in `memory_passages`. Memories embedded before
    // keep their one vector. (Older builds, which would leave a changed memory's old
    // passages behind, refuse a version 3 store as newer.)
    Migration::Passages,
    // 4: leases, by which replicas sharing the store take turns (`MemoryBackend::try_lease`);
    // `until_ms` is on the server's clock, so replicas' clocks need not agree.
    Migration::Sql(
        "CREATE TABLE {s}.leases (
             name     text PRIMARY KEY,
             holder   text NOT NULL,
             until_ms bigint NOT NULL
         );",
    ),
    // 5: the tenant leads every key and index (memory ids are unique per tenant), so a
    // store can be partitioned or sharded by tenant. Rewrites the tables once.
    Migration::TenantFirst,
    // 6: records, each scope's newest notes of each kind (`MemoryBackend::keep_record`).
    // (Older builds would delete a scope's memories and leave its records, which may quote
    // them; they refuse a version 6 store as newer.)
    Migration::Records,
    // 7: each record names the memories it quotes, so deleting one memory removes the
    // records that quote it (or name none), not every record of its scope, and pruning
    // removes the records of what it pruned. (Older builds would keep a record quoting a
    // pruned memory; they refuse a version 7 store as newer.)
        // (`IF NOT EXISTS`: a store created at version 6 or later got the column with the table.)
    Migration::Sql(
        "ALTER TABLE {s}.records ADD COLUMN IF NOT EXISTS quotes uuid[] NOT NULL DEFAULT '{}';",
    ),
];

/// Migration 5 on the memories, recall counts and scopes. Constraint names are Postgres's
/// defaults of versions 1-4.
const TENANT_FIRST: &str = "
ALTER TABLE {s}.memories ADD COLUMN tenant text;
UPDATE {s}.memories m SET tenant = sc.tenant FROM {s}.scopes sc WHERE sc.id = m.scope_id;
ALTER TABLE {s}.memories ALTER COLUMN tenant SET NOT NULL;
ALTER TABLE {s}.memory_access ADD COLUMN tenant text;
UPDATE {s}.memory_access a SET tenant = m.tenant FROM {s}.memories m WHERE m.pk = a.pk;
ALTER TABLE {s}.memory_access ALTER COLUMN tenant SET NOT NULL;
ALTER TABLE {s}.memory_access DROP CONSTRAINT memory_access_pk_fkey;
ALTER TABLE {s}.memories DROP CONSTRAINT memories_scope_id_fkey;
ALTER TABLE {s}.scopes DROP CONSTRAINT scopes_pkey, DROP CONSTRAINT scopes_key_key,
    ADD PRIMARY KEY (tenant, id), ADD UNIQUE (tenant, key);
ALTER TABLE {s}.memories DROP CONSTRAINT memories_pkey, DROP CONSTRAINT memories_id_key,
    ADD PRIMARY KEY (tenant, pk), ADD UNIQUE (tenant, id),
    ADD FOREIGN KEY (tenant, scope_id) REFERENCES {s}.scopes (tenant, id);
ALTER TABLE {s}.memory_access DROP CONSTRAINT memory_access_pkey, ADD PRIMARY KEY (tenant, pk),
    ADD FOREIGN KEY (tenant, pk) REFERENCES {s}.memories (tenant, pk) ON DELETE CASCADE;
DROP INDEX {s}.memories_by_scope_time;
CREATE INDEX memories_by_scope_time ON {s}.memories (tenant, scope_id, created_at DESC, id DESC);
DROP INDEX IF EXISTS {s}.memories_embedded_by_scope;
";

/// Migration 5 on the passages table (a store with vectors; its old keys dropped before
/// [`TENANT_FIRST`]) and the index of embedded rows.
const TENANT_FIRST_VECTORS: &str = "
ALTER TABLE {s}.memory_passages ADD COLUMN tenant text;
UPDATE {s}.memory_passages p SET tenant = m.tenant FROM {s}.memories m WHERE m.pk = p.memory;
ALTER TABLE {s}.memory_passages ALTER COLUMN tenant SET NOT NULL;
ALTER TABLE {s}.memory_passages ADD PRIMARY KEY (tenant, memory, k),
    ADD FOREIGN KEY (tenant, memory) REFERENCES {s}.memories (tenant, pk) ON DELETE CASCADE,
    ADD FOREIGN KEY (tenant, scope_id) REFERENCES {s}.scopes (tenant, id);
DROP INDEX {s}.memory_passages_by_scope;
CREATE INDEX memory_passages_by_scope ON {s}.memory_passages (tenant, scope_id);
CREATE INDEX memories_embedded_by_scope ON {s}.memories (tenant, scope_id) WHERE embedding IS NOT NULL;
";

/// pgvector's HNSW index handles `vector` columns of at most this many dimensions.
pub(crate) const HNSW_MAX_DIMS: usize = 2000;

/// Schema version 1 in schema `s` (already quoted).
fn schema_v1(s: &str) -> String {
    format!(
        "CREATE SCHEMA IF NOT EXISTS {s};

CREATE TABLE {s}.meta (
    key   text PRIMARY KEY,
    value text NOT NULL
);

CREATE TABLE {s}.scopes (
    id      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    key     text NOT NULL UNIQUE,
    tenant  text NOT NULL,
    user_id text NOT NULL,
    chat    text,
    thread  text
);
CREATE INDEX scopes_by_user ON {s}.scopes (tenant, user_id);

CREATE TABLE {s}.memories (
    pk            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id            uuid NOT NULL UNIQUE,
    scope_id      bigint NOT NULL REFERENCES {s}.scopes (id),
    kind          text NOT NULL,
    content       text NOT NULL,
    context       text,
    role          text,
    source        text,
    tags          text[] NOT NULL DEFAULT '{{}}',
    importance    real NOT NULL,
    pinned        boolean NOT NULL,
    created_at    bigint NOT NULL,
    accessed_at   bigint NOT NULL,
    access_count  bigint NOT NULL,
    valid_from    bigint,
    valid_until   bigint,
    superseded_by uuid,
    embedded      boolean NOT NULL,
    -- What keyword search matches: the content (weight A) and how the memory was learned
    -- (its context, e.g. the message a reply answered; weight B, ranked at 0.3 of A).
    fts tsvector GENERATED ALWAYS AS (
        setweight(to_tsvector('english', content), 'A') ||
        setweight(to_tsvector('english', coalesce(context, '')), 'B')
    ) STORED
);
CREATE INDEX memories_by_scope_time ON {s}.memories (scope_id, created_at DESC, id DESC);
CREATE INDEX memories_fts ON {s}.memories USING gin (fts);

-- Recalls (search hits) are counted here, not in `memories`: updating a wide row with a
-- vector is not a HOT update, so it would insert into every index, HNSW included.
CREATE TABLE {s}.memory_access (
    pk           bigint PRIMARY KEY REFERENCES {s}.memories (pk) ON DELETE CASCADE,
    accessed_at  bigint NOT NULL,
    access_count bigint NOT NULL
);
"
    )
}

/// A new store's tables in their current layout, in schema `s` (quoted), the memories and
/// their recall counts in `partitions` hash partitions of the tenant. A store made
/// unpartitioned is instead created at version 1 and migrated, so every migration runs on
/// every such store; a test checks that both ways end in the same layout.
fn schema_partitioned(s: &str, partitions: u16) -> String {
    format!(
        "CREATE SCHEMA IF NOT EXISTS {s};

CREATE TABLE {s}.meta (
    key   text PRIMARY KEY,
    value text NOT NULL
);

CREATE TABLE {s}.scopes (
    id      bigint GENERATED ALWAYS AS IDENTITY,
    key     text NOT NULL,
    tenant  text NOT NULL,
    user_id text NOT NULL,
    chat    text,
    thread  text,
    stored  bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, id),
    UNIQUE (tenant, key)
);
CREATE INDEX scopes_by_user ON {s}.scopes (tenant, user_id);

CREATE TABLE {s}.memories (
    pk            bigint GENERATED ALWAYS AS IDENTITY,
    id            uuid NOT NULL,
    scope_id      bigint NOT NULL,
    kind          text NOT NULL,
    content       text NOT NULL,
    context       text,
    role          text,
    source        text,
    tags          text[] NOT NULL DEFAULT '{{}}',
    importance    real NOT NULL,
    pinned        boolean NOT NULL,
    created_at    bigint NOT NULL,
    accessed_at   bigint NOT NULL,
    access_count  bigint NOT NULL,
    valid_from    bigint,
    valid_until   bigint,
    superseded_by uuid,
    embedded      boolean NOT NULL,
    fts tsvector GENERATED ALWAYS AS (
        setweight(to_tsvector('english', content), 'A') ||
        setweight(to_tsvector('english', coalesce(context, '')), 'B')
    ) STORED,
    tenant        text NOT NULL,
    PRIMARY KEY (tenant, pk),
    UNIQUE (tenant, id),
    FOREIGN KEY (tenant, scope_id) REFERENCES {s}.scopes (tenant, id)
) PARTITION BY HASH (tenant);
{memories}
CREATE INDEX memories_by_scope_time ON {s}.memories (tenant, scope_id, created_at DESC, id DESC);
CREATE INDEX memories_fts ON {s}.memories USING gin (fts);

CREATE TABLE {s}.memory_access (
    pk           bigint NOT NULL,
    accessed_at  bigint NOT NULL,
    access_count bigint NOT NULL,
    tenant       text NOT NULL,
    PRIMARY KEY (tenant, pk),
    FOREIGN KEY (tenant, pk) REFERENCES {s}.memories (tenant, pk) ON DELETE CASCADE
) PARTITION BY HASH (tenant);
{access}
CREATE TABLE {s}.leases (
    name     text PRIMARY KEY,
    holder   text NOT NULL,
    until_ms bigint NOT NULL
);
{records}",
        memories = hash_partitions(s, "memories", partitions),
        access = hash_partitions(s, "memory_access", partitions),
        records = create_records(s, partitions),
    )
}

/// The records' table in schema `s` (quoted), in `partitions` hash partitions of the tenant
/// if any: a scope's records (`kind`, `at` in Unix milliseconds, `body`, the ids of the
/// memories it `quotes`) in the order kept
/// (`id`), read and trimmed newest first through their index by scope and kind.
fn create_records(s: &str, partitions: u16) -> String {
    let (by, parts) = if partitions > 0 {
        (
            " PARTITION BY HASH (tenant)",
            hash_partitions(s, "records", partitions),
        )
    } else {
        ("", String::new())
    };
    format!(
        "CREATE TABLE {s}.records (
             id       bigint GENERATED ALWAYS AS IDENTITY,
             tenant   text NOT NULL,
             scope_id bigint NOT NULL,
             kind     text NOT NULL,
             at       bigint NOT NULL,
             body     text NOT NULL,
             quotes   uuid[] NOT NULL DEFAULT '{{}}',
             PRIMARY KEY (tenant, id),
             FOREIGN KEY (tenant, scope_id) REFERENCES {s}.scopes (tenant, id)
         ){by};
         {parts}
         CREATE INDEX records_by_scope ON {s}.records (tenant, scope_id, kind, at DESC, id DESC);"
    )
}

/// `CREATE TABLE <table>_p<i> PARTITION OF <table> ...` for each of `n` hash partitions.
fn hash_partitions(s: &str, table: &str, n: u16) -> String {
    (0..n)
        .map(|i| {
            format!(
                "CREATE TABLE {s}.{table}_p{i} PARTITION OF {s}.{table} \
                 FOR VALUES WITH (MODULUS {n}, REMAINDER {i});\n"
            )
        })
        .collect()
}

/// Quotes an identifier for SQL.
pub(crate) fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Whether `name` is a schema name Ava accepts: a plain lowercase identifier.
pub(crate) fn valid_schema_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_lowercase() || c == '_')
        && name.len() <= 63
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// What opening found and settled.
pub(crate) struct Opened {
    /// The schema pgvector lives in (quoted), for qualified type and operator names.
    pub(crate) ext_schema: String,
    /// The store's embedding space after opening (recorded, or adopted now).
    pub(crate) space: Option<EmbeddingSpace>,
    /// The hash partitions of the tenant the store's memory tables have (0: none).
    pub(crate) partitions: u16,
}

/// What a look at the schema found.
enum Existing {
    /// No schema, or an empty one: create the store.
    Fresh,
    /// An Ava store of this schema version or an older one.
    Store { version: i64 },
}

/// Where errors say we are.
pub(crate) struct Target<'a> {
    pub(crate) server: &'a str,
    pub(crate) schema: &'a str,
}

/// Inspects, creates or migrates the store in `tx`, makes sure pgvector is there, and
/// settles the embedding space against `given`. The caller commits.
pub(crate) async fn open(
    tx: &mut Transaction<'_>,
    t: &Target<'_>,
    given: Option<&EmbeddingSpace>,
    partitions: u16,
) -> Result<Opened, PostgresError> {
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&SETUP_LOCK])
        .await
        .in_schema(t.schema)?;
    let s = quote_ident(t.schema);
    // Nothing is written before this look says the schema is ours (or empty) and not newer.
    let existing = inspect(tx, t, &s).await?;
    let ext_schema = ensure_vector_extension(tx, t).await?;
    match existing {
        Existing::Fresh if partitions > 0 => {
            tx.batch_execute(&schema_partitioned(&s, partitions))
                .await
                .in_schema(t.schema)?;
            let (version, n) = (SCHEMA_VERSION.to_string(), partitions.to_string());
            let meta = [
                ("format", FORMAT),
                ("schema_version", version.as_str()),
                (PARTITIONS_KEY, n.as_str()),
            ];
            record_meta(tx, t, &s, &meta).await?;
        }
        Existing::Fresh => {
            tx.batch_execute(&schema_v1(&s)).await.in_schema(t.schema)?;
            record_meta(tx, t, &s, &[("format", FORMAT), ("schema_version", "1")]).await?;
            migrate(tx, t, &s, &ext_schema, 1).await?;
        }
        Existing::Store { version } => migrate(tx, t, &s, &ext_schema, version).await?,
    }
    let stored = stored_space(tx, t, &s).await?;
    let space = match (stored, given) {
        (Some(stored), Some(given)) if stored != *given => {
            return Err(PostgresError::SpaceChanged {
                server: t.server.to_owned(),
                schema: t.schema.to_owned(),
                stored: stored.to_string(),
                given: given.to_string(),
            });
        }
        (Some(stored), _) => Some(stored),
        (None, Some(given)) => {
            adopt_space(tx, t, &s, &ext_schema, given).await?;
            Some(given.clone())
        }
        (None, None) => None,
    };
    let partitions = partitions_of(tx, t, &s).await?;
    Ok(Opened {
        ext_schema,
        space,
        partitions,
    })
}

/// `meta.key` of the number of hash partitions a partitioned store was made with.
const PARTITIONS_KEY: &str = "tenant_partitions";

async fn record_meta(
    tx: &mut Transaction<'_>,
    t: &Target<'_>,
    s: &str,
    pairs: &[(&str, &str)],
) -> Result<(), PostgresError> {
    for (k, v) in pairs {
        tx.execute(
            &format!("INSERT INTO {s}.meta (key, value) VALUES ($1, $2)"),
            &[k, v],
        )
        .await
        .in_schema(t.schema)?;
    }
    Ok(())
}

/// How many hash partitions of the tenant the store's tables have (0: none).
async fn partitions_of(
    tx: &mut Transaction<'_>,
    t: &Target<'_>,
    s: &str,
) -> Result<u16, PostgresError> {
    let row = tx
        .query_opt(
            &format!("SELECT value FROM {s}.meta WHERE key = $1"),
            &[&PARTITIONS_KEY],
        )
        .await
        .in_schema(t.schema)?;
    let Some(row) = row else { return Ok(0) };
    let value: String = row.try_get(0).in_schema(t.schema)?;
    value.parse().map_err(|_| PostgresError::InvalidData {
        schema: t.schema.to_owned(),
        what: format!("{PARTITIONS_KEY} is `{value}`, not a number of partitions"),
    })
}

async fn inspect(
    tx: &mut Transaction<'_>,
    t: &Target<'_>,
    s: &str,
) -> Result<Existing, PostgresError> {
    let tables: Vec<String> = tx
        .query(
            "SELECT c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = $1 AND c.relkind IN ('r', 'p', 'v', 'm', 'f') ORDER BY 1",
            &[&t.schema],
        )
        .await
        .in_schema(t.schema)?
        .iter()
        .map(|r| r.try_get(0))
        .collect::<Result<_, _>>()
        .in_schema(t.schema)?;
    if tables.is_empty() {
        return Ok(Existing::Fresh);
    }
    let foreign = || PostgresError::Foreign {
        server: t.server.to_owned(),
        schema: t.schema.to_owned(),
        tables: tables
            .iter()
            .take(6)
            .cloned()
            .collect::<Vec<_>>()
            .join(", "),
    };
    if !tables.iter().any(|n| n == "meta") {
        return Err(foreign());
    }
    // Another application's `meta` may have other columns: read it under a savepoint so a
    // failed read leaves the transaction usable.
    let sp = tx.savepoint("ava_inspect").await.in_schema(t.schema)?;
    let rows = sp
        .query(
            &format!(
                "SELECT key::text, value::text FROM {s}.meta WHERE key IN ('format', 'schema_version')"
            ),
            &[],
        )
        .await;
    let rows = match rows {
        Ok(rows) => {
            sp.commit().await.in_schema(t.schema)?;
            rows
        }
        Err(_) => {
            sp.rollback().await.in_schema(t.schema)?;
            return Err(foreign());
        }
    };
    let mut format = None;
    let mut version = None;
    for r in &rows {
        let key: String = r.try_get(0).in_schema(t.schema)?;
        let value: String = r.try_get(1).in_schema(t.schema)?;
        match key.as_str() {
            "format" => format = Some(value),
            _ => version = Some(value),
        }
    }
    if format.as_deref() != Some(FORMAT) {
        return Err(foreign());
    }
    let version: i64 = version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| PostgresError::InvalidData {
            schema: t.schema.to_owned(),
            what: format!("schema_version is {version:?}, not a number"),
        })?;
    if version > SCHEMA_VERSION {
        return Err(PostgresError::NewerSchema {
            server: t.server.to_owned(),
            schema: t.schema.to_owned(),
            found: version,
            supported: SCHEMA_VERSION,
        });
    }
    Ok(Existing::Store { version })
}

/// Makes sure the `vector` extension exists in the database; returns its schema, quoted.
async fn ensure_vector_extension(
    tx: &mut Transaction<'_>,
    t: &Target<'_>,
) -> Result<String, PostgresError> {
    let find = "SELECT n.nspname::text FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace \
                WHERE e.extname = 'vector'";
    if let Some(row) = tx.query_opt(find, &[]).await.in_schema(t.schema)? {
        let name: String = row.try_get(0).in_schema(t.schema)?;
        return Ok(quote_ident(&name));
    }
    // Under a savepoint, so the error can be reported cleanly.
    let sp = tx.savepoint("ava_extension").await.in_schema(t.schema)?;
    if let Err(source) = sp
        .batch_execute("CREATE EXTENSION IF NOT EXISTS vector")
        .await
    {
        return Err(PostgresError::ExtensionMissing {
            server: t.server.to_owned(),
            source,
        });
    }
    sp.commit().await.in_schema(t.schema)?;
    let row = tx.query_one(find, &[]).await.in_schema(t.schema)?;
    let name: String = row.try_get(0).in_schema(t.schema)?;
    Ok(quote_ident(&name))
}

/// Brings an older store up to [`SCHEMA_VERSION`], one version at a time; `ext` is
/// pgvector's schema (quoted).
async fn migrate(
    tx: &mut Transaction<'_>,
    t: &Target<'_>,
    s: &str,
    ext: &str,
    from: i64,
) -> Result<(), PostgresError> {
    for version in from..SCHEMA_VERSION {
        let idx = usize::try_from(version - 1).unwrap_or(usize::MAX);
        let sql = match MIGRATIONS.get(idx) {
            Some(Migration::Sql(sql)) => sql.replace("{s}", s),
            Some(Migration::Passages) => match stored_space(tx, t, s).await? {
                Some(space) => create_passages_v3(s, ext, space.dims),
                None => String::new(),
            },
            Some(Migration::Records) => create_records(s, partitions_of(tx, t, s).await?),
            Some(Migration::TenantFirst) => {
                if stored_space(tx, t, s).await?.is_some() {
                    // The passages' keys go first: they hang on the keys replaced.
                    format!(
                        "ALTER TABLE {s}.memory_passages DROP CONSTRAINT memory_passages_pkey,
                             DROP CONSTRAINT memory_passages_memory_fkey,
                             DROP CONSTRAINT memory_passages_scope_id_fkey;
                         {}{}",
                        TENANT_FIRST.replace("{s}", s),
                        TENANT_FIRST_VECTORS.replace("{s}", s)
                    )
                } else {
                    TENANT_FIRST.replace("{s}", s)
                }
            }
            None => {
                return Err(PostgresError::InvalidData {
                    schema: t.schema.to_owned(),
                    what: format!("no migration from schema version {version}"),
                });
            }
        };
        tx.batch_execute(&sql).await.in_schema(t.schema)?;
        let next = (version + 1).to_string();
        tx.execute(
            &format!("UPDATE {s}.meta SET value = $1 WHERE key = 'schema_version'"),
            &[&next],
        )
        .await
        .in_schema(t.schema)?;
    }
    Ok(())
}

async fn stored_space(
    tx: &mut Transaction<'_>,
    t: &Target<'_>,
    s: &str,
) -> Result<Option<EmbeddingSpace>, PostgresError> {
    let rows = tx
        .query(
            &format!("SELECT key, value FROM {s}.meta WHERE key LIKE 'embedding\\_%'"),
            &[],
        )
        .await
        .in_schema(t.schema)?;
    let (mut provider, mut model, mut dims) = (None, None, None);
    for r in &rows {
        let key: String = r.try_get(0).in_schema(t.schema)?;
        let value: String = r.try_get(1).in_schema(t.schema)?;
        match key.as_str() {
            "embedding_provider" => provider = Some(value),
            "embedding_model" => model = Some(value),
            "embedding_dims" => dims = Some(value),
            _ => {}
        }
    }
    let (Some(provider), Some(model), Some(dims)) = (provider, model, dims) else {
        return Ok(None);
    };
    let invalid = |what: String| PostgresError::InvalidData {
        schema: t.schema.to_owned(),
        what,
    };
    let dims: usize = dims
        .parse()
        .map_err(|_| invalid(format!("embedding_dims `{dims}` is not a number")))?;
    EmbeddingSpace::new(provider, model, dims)
        .map(Some)
        .map_err(|e| invalid(e.to_string()))
}

/// The recorded space as one string ([`space_is`]), for comparing it in SQL: its `meta`
/// values in the order of their keys (dims, model, provider), joined by U+001F.
pub(crate) fn space_key(space: &EmbeddingSpace) -> String {
    format!(
        "{}\u{1f}{}\u{1f}{}",
        space.dims, space.model, space.provider
    )
}

/// SQL that is true while the store in `meta` (its quoted `meta` table) records the space
/// whose [`space_key`] is bound at `key`. A statement that writes or compares vectors and
/// also touches `memories` reads this after its lock on `memories` is taken, so a `reembed`
/// (which locks `memories` before it moves the store) either finished before it, and this
/// says so, or waits for its transaction to end.
pub(crate) fn space_is(meta: &str, key: &str) -> String {
    format!(
        "(SELECT coalesce(string_agg(value, chr(31) ORDER BY key), '') FROM {meta} \
         WHERE key IN ('embedding_dims', 'embedding_model', 'embedding_provider')) = {key}"
    )
}

/// SQL reading the recorded space's provider, model and dims (each null if missing) from
/// `meta` (quoted).
pub(crate) fn space_sql(meta: &str) -> String {
    format!(
        "SELECT max(value) FILTER (WHERE key = 'embedding_provider'), \
         max(value) FILTER (WHERE key = 'embedding_model'), \
         max(value) FILTER (WHERE key = 'embedding_dims') FROM {meta}"
    )
}

/// The passages table as migration 3 made it (migration 5 puts the tenant in its keys).
fn create_passages_v3(s: &str, ext: &str, dims: usize) -> String {
    format!(
        "CREATE TABLE {s}.memory_passages (
             memory    bigint NOT NULL REFERENCES {s}.memories (pk) ON DELETE CASCADE,
             scope_id  bigint NOT NULL REFERENCES {s}.scopes (id),
             k         integer NOT NULL CHECK (k >= 1),
             embedding {ext}.vector({dims}) NOT NULL,
             PRIMARY KEY (memory, k)
         );
         CREATE INDEX memory_passages_by_scope ON {s}.memory_passages (scope_id);"
    )
}

/// The table of long memories' further passages in schema `s`, pgvector living in `ext`
/// (both quoted), in `partitions` hash partitions of the tenant if any: passage `k` (from
/// 1; the first is `memories.embedding`) of memory `memory`. Semantic search scans a
/// scope's passages through its index on `(tenant, scope_id)`; they go with their memory.
pub(crate) fn create_passages(s: &str, ext: &str, dims: usize, partitions: u16) -> String {
    let (by, parts) = if partitions > 0 {
        (
            " PARTITION BY HASH (tenant)",
            hash_partitions(s, "memory_passages", partitions),
        )
    } else {
        ("", String::new())
    };
    format!(
        "CREATE TABLE {s}.memory_passages (
             memory    bigint NOT NULL,
             scope_id  bigint NOT NULL,
             k         integer NOT NULL CHECK (k >= 1),
             embedding {ext}.vector({dims}) NOT NULL,
             tenant    text NOT NULL,
             PRIMARY KEY (tenant, memory, k),
             FOREIGN KEY (tenant, memory) REFERENCES {s}.memories (tenant, pk) ON DELETE CASCADE,
             FOREIGN KEY (tenant, scope_id) REFERENCES {s}.scopes (tenant, id)
         ){by};
         {parts}
         CREATE INDEX memory_passages_by_scope ON {s}.memory_passages (tenant, scope_id);"
    )
}

/// Gives a store without vectors its embedding space: the vector column, its indexes, the
/// passages table, and the record in `meta`.
async fn adopt_space(
    tx: &mut Transaction<'_>,
    t: &Target<'_>,
    s: &str,
    ext: &str,
    space: &EmbeddingSpace,
) -> Result<(), PostgresError> {
    let dims = space.dims;
    let partitions = partitions_of(tx, t, s).await?;
    tx.batch_execute(&format!(
        "ALTER TABLE {s}.memories ADD COLUMN embedding {ext}.vector({dims});
         CREATE INDEX memories_embedded_by_scope ON {s}.memories (tenant, scope_id) WHERE embedding IS NOT NULL;
         {}",
        create_passages(s, ext, dims, partitions)
    ))
    .await
    .in_schema(t.schema)?;
    let dims = dims.to_string();
    for (k, v) in [
        ("embedding_provider", space.provider.as_str()),
        ("embedding_model", space.model.as_str()),
        ("embedding_dims", dims.as_str()),
    ] {
        tx.execute(
            &format!(
                "INSERT INTO {s}.meta (key, value) VALUES ($1, $2) \
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value"
            ),
            &[&k, &v],
        )
        .await
        .in_schema(t.schema)?;
    }
    Ok(())
}
