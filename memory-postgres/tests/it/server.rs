//! Connecting and opening: a server that is down, bad connection strings, a schema of a
//! newer Ava or of another application (refused and left untouched), another embedding
//! space, and a database where pgvector cannot be created; TLS (`tls`). The first three need
//! no server; the rest need `MEMORY_PG_URL` (TLS: `MEMORY_PG_TLS_URL`) and skip with one line
//! on stderr without it.

use crate::common;
mod tls;

use std::sync::Arc;

use memory_core::{
    EmbeddingProvider, ErrorChain, HashingEmbedder, MemoryBackend, MemoryError, MemoryId,
    NewMemory, Scope, SearchRequest, repeated_cause,
};
use memory_postgres::{
    PostgresBackend, PostgresConfig, PostgresError, StoreStats, UrlParams, split_params,
};

fn embedder(dims: usize) -> Option<Arc<dyn EmbeddingProvider>> {
    Some(Arc::new(HashingEmbedder::new(dims).unwrap()))
}

fn config(schema: &str) -> PostgresConfig {
    PostgresConfig {
        schema: schema.to_owned(),
        pool_size: 2,
        ..PostgresConfig::default()
    }
}

/// The error's whole chain as text, checking that no level repeats its cause's text.
fn chain(e: &PostgresError) -> String {
    assert_eq!(repeated_cause(e), None, "a cause said twice: {e:?}");
    ErrorChain(e).to_string()
}

#[tokio::test]
async fn unreachable_server_names_host_and_port() {
    // A port that was just free: nothing listens there.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let url = format!("postgres://ava:hunter2@127.0.0.1:{port}/memories");
    let err = PostgresBackend::connect(&url, embedder(8), PostgresConfig::default())
        .await
        .expect_err("nothing listens there");
    let msg = chain(&err);
    assert!(matches!(&err, PostgresError::Unreachable { .. }), "{err:?}");
    assert!(
        msg.contains(&format!("127.0.0.1:{port}")),
        "names host and port: {msg}"
    );
    assert!(msg.contains("unreachable"), "says unreachable: {msg}");
    assert!(!msg.contains("hunter2"), "never shows the password: {msg}");
    // What the OS said is the source, said once, after the server's name.
    assert!(msg.contains("refused"), "keeps the OS's words: {msg}");
    let memory = MemoryError::from(err);
    assert_eq!(repeated_cause(&memory), None);
    assert_eq!(
        ErrorChain(&memory).to_string(),
        format!("memory-postgres failed: {msg}")
    );
}

#[tokio::test]
async fn bad_connection_strings_and_schema_names_are_clear_errors() {
    let err = PostgresBackend::connect(
        "postgres://ava:hunter2@127.0.0.1:notaport/db",
        None,
        PostgresConfig::default(),
    )
    .await
    .expect_err("a bad port");
    assert!(matches!(&err, PostgresError::BadUrl { .. }), "{err:?}");
    let msg = chain(&err);
    assert!(msg.contains("invalid Postgres connection string"), "{msg}");
    assert!(!msg.contains("hunter2"), "never shows the password: {msg}");

    for bad in ["", "Ava", "1abc", "a-b", "a\"b", &"x".repeat(64)] {
        let err = PostgresBackend::connect(
            "postgres://127.0.0.1:1/db",
            None,
            PostgresConfig {
                schema: bad.to_owned(),
                ..PostgresConfig::default()
            },
        )
        .await
        .expect_err("a bad schema name");
        assert!(
            matches!(&err, PostgresError::BadSchemaName { .. }),
            "`{bad}`: {err:?}"
        );
    }
    let err = PostgresBackend::connect(
        "postgres://127.0.0.1:1/db?tenant_partitions=5000",
        None,
        PostgresConfig::default(),
    )
    .await
    .expect_err("too many partitions");
    let msg = chain(&err);
    assert!(
        matches!(&err, PostgresError::InvalidConfig(_)) && msg.contains("at most 1024"),
        "{msg}"
    );
}

#[test]
fn avas_query_parameters_are_split_off() {
    let params = |schema: Option<&str>, tenant_partitions| UrlParams {
        schema: schema.map(str::to_owned),
        tenant_partitions,
        ..UrlParams::default()
    };
    assert_eq!(
        split_params("postgres://u@h:5/db?schema=bot&application_name=x").unwrap(),
        (
            "postgres://u@h:5/db?application_name=x".to_owned(),
            params(Some("bot"), None)
        )
    );
    assert_eq!(
        split_params("postgresql://h/db?schema=s1&tenant_partitions=8").unwrap(),
        ("postgresql://h/db".to_owned(), params(Some("s1"), Some(8)))
    );
    assert_eq!(
        split_params("host=h dbname=db").unwrap(),
        ("host=h dbname=db".to_owned(), params(None, None))
    );
    assert_eq!(
        split_params("postgres://h/db").unwrap(),
        ("postgres://h/db".to_owned(), params(None, None))
    );
    let err = split_params("postgres://u:secret@h/db?tenant_partitions=many").unwrap_err();
    let msg = chain(&err);
    assert!(
        msg.contains("tenant_partitions is `many`") && !msg.contains("secret"),
        "{msg}"
    );
}

/// Tables, meta rows and memory count of a schema, to show it was not modified.
async fn snapshot(url: &str, schema: &str) -> String {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let mut out = String::new();
    for r in client
        .query(
            "SELECT table_name::text FROM information_schema.tables WHERE table_schema = $1 ORDER BY 1",
            &[&schema],
        )
        .await
        .unwrap()
    {
        out.push_str(&r.get::<_, String>(0));
        out.push(' ');
    }
    if out.contains("meta") {
        for r in client
            .query(
                &format!("SELECT t::text FROM \"{schema}\".meta t ORDER BY 1"),
                &[],
            )
            .await
            .unwrap()
        {
            out.push_str(&r.get::<_, String>(0));
            out.push(' ');
        }
    }
    if out.contains("memories") {
        let n: i64 = client
            .query_one(&format!("SELECT count(*) FROM \"{schema}\".memories"), &[])
            .await
            .unwrap()
            .get(0);
        out.push_str(&format!("memories={n}"));
    }
    out
}

#[tokio::test]
async fn newer_schema_is_refused_and_left_untouched() {
    let Some(url) = common::pg_url() else { return };
    let (schema, _guard) = common::DropSchema::fresh(&url);
    let store = PostgresBackend::connect(&url, embedder(16), config(&schema))
        .await
        .unwrap();
    let scope = Scope::for_user("u").unwrap();
    store
        .store(&scope, NewMemory::new("kept as it is"))
        .await
        .unwrap();
    store.close();
    common::run_sql(
        &url,
        &format!("UPDATE \"{schema}\".meta SET value = '99' WHERE key = 'schema_version'"),
    )
    .unwrap();
    let before = snapshot(&url, &schema).await;
    for e in [embedder(16), embedder(32), None] {
        let err = PostgresBackend::connect(&url, e, config(&schema))
            .await
            .expect_err("a newer store");
        let msg = chain(&err);
        assert!(
            matches!(
                &err,
                PostgresError::NewerSchema {
                    found: 99,
                    supported: 7,
                    ..
                }
            ),
            "{msg}"
        );
        assert!(
            msg.contains("99") && msg.contains("upgrade Ava") && msg.contains(&schema),
            "{msg}"
        );
    }
    assert_eq!(snapshot(&url, &schema).await, before, "left untouched");
}

#[tokio::test]
async fn foreign_schema_is_refused_and_left_untouched() {
    let Some(url) = common::pg_url() else { return };
    let (schema, _guard) = common::DropSchema::fresh(&url);
    common::run_sql(
        &url,
        &format!(
            "CREATE SCHEMA \"{schema}\"; CREATE TABLE \"{schema}\".orders (id int); \
             CREATE TABLE \"{schema}\".meta (k int, v int);"
        ),
    )
    .unwrap();
    let before = snapshot(&url, &schema).await;
    let err = PostgresBackend::connect(&url, embedder(16), config(&schema))
        .await
        .expect_err("another application's schema");
    assert!(matches!(&err, PostgresError::Foreign { .. }), "{err:?}");
    assert!(chain(&err).contains("orders"), "{err}");
    assert_eq!(snapshot(&url, &schema).await, before, "left untouched");
}

#[tokio::test]
async fn another_embedding_space_is_refused() {
    let Some(url) = common::pg_url() else { return };
    let (schema, _guard) = common::DropSchema::fresh(&url);
    let store = PostgresBackend::connect(&url, embedder(64), config(&schema))
        .await
        .unwrap();
    let scope = Scope::for_user("u").unwrap();
    store
        .store(&scope, NewMemory::new("stored with 64 dimensions"))
        .await
        .unwrap();
    store.close();
    let err = PostgresBackend::connect(&url, embedder(32), config(&schema))
        .await
        .expect_err("other dims");
    assert!(
        matches!(&err, PostgresError::SpaceChanged { .. }),
        "{err:?}"
    );
    let msg = chain(&err);
    assert!(msg.contains("64") && msg.contains("32"), "{msg}");

    // Without an embedder the store still opens, for keyword search.
    let plain = PostgresBackend::connect(&url, None, config(&schema))
        .await
        .unwrap();
    let hits = plain
        .search(&scope, &SearchRequest::keyword("dimensions"))
        .await
        .unwrap();
    assert_eq!(hits.len(), 1);
    // Memories stored without an embedder are embedded by the next connection with one.
    plain
        .store(&scope, NewMemory::new("stored while keyword only"))
        .await
        .unwrap();
    plain.close();
    let again = PostgresBackend::connect(&url, embedder(64), config(&schema))
        .await
        .unwrap();
    let hits = again
        .search(
            &scope,
            &SearchRequest::semantic("stored while keyword only").threshold(0.99),
        )
        .await
        .unwrap();
    assert_eq!(hits.len(), 1, "backfilled: {hits:?}");
    assert!(hits[0].entry.embedded);
}

#[tokio::test]
async fn missing_pgvector_is_a_clear_error() {
    let Some(url) = common::pg_url() else { return };
    // A fresh database (no extension yet) and a role that may not create the extension:
    // pgvector is not a trusted extension, so only a superuser can install it.
    let tag = common::fresh_schema();
    let (db, role) = (format!("{tag}_db"), format!("{tag}_role"));
    // Two calls: CREATE DATABASE may not run in the implicit transaction of a batch.
    let setup = common::run_sql(&url, &format!("CREATE ROLE \"{role}\" LOGIN")).and_then(|()| {
        common::run_sql(&url, &format!("CREATE DATABASE \"{db}\" OWNER \"{role}\""))
    });
    if let Err(e) = setup {
        // Needs a role allowed to create roles and databases (CI's server has one).
        memory_core::testing::skip_or_fail(
            "missing_pgvector_is_a_clear_error",
            &format!("cannot create a test database and role ({e})"),
            "point MEMORY_PG_URL at a role that may create roles and databases",
        );
        return;
    }
    let mut pg: tokio_postgres::Config = url.parse().unwrap();
    pg.dbname(&db).user(&role);
    let result = PostgresBackend::connect_with(pg, embedder(8), config("ava")).await;
    let _ = common::run_sql(
        &url,
        &format!("DROP DATABASE IF EXISTS \"{db}\" WITH (FORCE)"),
    );
    let _ = common::run_sql(&url, &format!("DROP ROLE IF EXISTS \"{role}\""));
    let err = result.expect_err("the role may not create pgvector");
    assert!(
        matches!(&err, PostgresError::ExtensionMissing { .. }),
        "{err:?}"
    );
    let msg = chain(&err);
    assert!(
        msg.contains("pgvector") && msg.contains("CREATE EXTENSION vector"),
        "{msg}"
    );
    assert!(msg.contains(&db), "names the database: {msg}");
    // What the server said is the source, after the hint, not copied into it.
    assert!(
        msg.len() > err.to_string().len() + 2,
        "keeps its source: {msg}"
    );
}

/// `url` with session settings under which the planner takes an index that yields rows in
/// order over any sort, as it does for large scopes: at the few rows a test stores, a scan
/// and a sort cost less and would hide whether a scope's index can serve its searches.
fn preferring_ordered_indexes(url: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}options=-c%20enable_seqscan%3Doff%20-c%20enable_sort%3Doff")
}

/// A plain connection for looking at the catalog.
async fn sql_client(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
}

/// The scope's id in the store.
async fn scope_id(client: &tokio_postgres::Client, schema: &str, scope: &Scope) -> i64 {
    client
        .query_one(
            &format!("SELECT id FROM \"{schema}\".scopes WHERE key = $1"),
            &[&scope.key()],
        )
        .await
        .unwrap()
        .get(0)
}

/// The definition of index `name` in `schema` and whether it is valid, if it exists.
async fn index_state(
    client: &tokio_postgres::Client,
    schema: &str,
    name: &str,
) -> Option<(String, bool)> {
    client
        .query_opt(
            "SELECT pg_get_indexdef(c.oid), i.indisvalid FROM pg_class c \
             JOIN pg_namespace n ON n.oid = c.relnamespace JOIN pg_index i ON i.indexrelid = c.oid \
             WHERE n.nspname = $1 AND c.relname = $2",
            &[&schema, &name],
        )
        .await
        .unwrap()
        .map(|r| (r.get(0), r.get(1)))
}

/// How many scans index `name` has served, as the statistics report it once they have
/// been flushed: waits (up to 10 s) for the count to reach `at_least`.
async fn index_scans(
    client: &tokio_postgres::Client,
    schema: &str,
    name: &str,
    at_least: i64,
) -> i64 {
    let mut n = 0;
    for _ in 0..100 {
        client
            .batch_execute("SELECT pg_stat_clear_snapshot()")
            .await
            .unwrap();
        n = client
            .query_one(
                "SELECT coalesce(sum(idx_scan), 0)::int8 FROM pg_stat_user_indexes \
                 WHERE schemaname = $1 AND indexrelname = $2",
                &[&schema, &name],
            )
            .await
            .unwrap()
            .get(0);
        if n >= at_least {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    n
}

#[tokio::test]
async fn large_scopes_use_their_own_hnsw_index_and_stay_in_scope() {
    let Some(url) = common::pg_url() else { return };
    let (schema, _guard) = common::DropSchema::fresh(&url);
    // Every scope of more than 5 memories gets an index.
    let store = PostgresBackend::connect(
        &preferring_ordered_indexes(&url),
        embedder(64),
        PostgresConfig {
            exact_scan_max: 5,
            ..config(&schema)
        },
    )
    .await
    .unwrap();
    let (mine, other, small) = (
        Scope::for_user("u").unwrap().in_chat("1").unwrap(),
        Scope::for_user("u").unwrap().in_chat("2").unwrap(),
        Scope::for_user("u").unwrap().in_chat("3").unwrap(),
    );
    let topics = ["garden", "violin", "harbour", "glacier", "orchard", "comet"];
    for s in [&mine, &other] {
        let batch = (0..40)
            .map(|i| {
                NewMemory::new(format!("note {i} about the {}", topics[i % topics.len()]))
                    .with_tag(memory_core::Tag::new(format!("t{}", i % 2)).unwrap())
            })
            .collect();
        store.store_batch(s, batch).await.unwrap();
    }
    store
        .store(&small, NewMemory::new("a small scope"))
        .await
        .unwrap();
    // The writes started builds in the background; this waits for them.
    store.index_large_scopes().await.unwrap();
    let client = sql_client(&url).await;
    let (mine_id, other_id, small_id) = (
        scope_id(&client, &schema, &mine).await,
        scope_id(&client, &schema, &other).await,
        scope_id(&client, &schema, &small).await,
    );
    let (mine_idx, other_idx) = (
        format!("memories_hnsw_{mine_id}"),
        format!("memories_hnsw_{other_id}"),
    );
    for (name, id) in [(&mine_idx, mine_id), (&other_idx, other_id)] {
        let (def, valid) = index_state(&client, &schema, name)
            .await
            .unwrap_or_else(|| panic!("{name} exists"));
        assert!(valid, "{def}");
        assert!(
            def.contains("hnsw")
                && def.contains("vector_cosine_ops")
                && def.contains(&format!("WHERE (scope_id = {id})")),
            "{def}"
        );
    }
    assert!(
        index_state(&client, &schema, &format!("memories_hnsw_{small_id}"))
            .await
            .is_none(),
        "a small scope has no index"
    );
    assert!(
        index_state(&client, &schema, "memories_embedding_hnsw")
            .await
            .is_none(),
        "no index over the whole table"
    );

    let hits = store
        .search(
            &mine,
            &SearchRequest::semantic("note 7 about the violin").limit(5),
        )
        .await
        .unwrap();
    assert_eq!(hits.len(), 5);
    assert_eq!(hits[0].entry.content, "note 7 about the violin");
    assert!(hits.iter().all(|h| h.entry.scope == mine), "{hits:?}");
    let filtered = memory_core::Filter {
        tags: Some(memory_core::TagQuery::any([
            memory_core::Tag::new("t0").unwrap()
        ])),
        ..memory_core::Filter::default()
    };
    let hits = store
        .search(
            &mine,
            &SearchRequest::hybrid("garden").filter(filtered).limit(40),
        )
        .await
        .unwrap();
    // Gardens are the notes 0, 6, 12, ... of 40, all tagged t0.
    assert_eq!(hits.len(), 7, "{hits:?}");
    assert!(
        hits.iter().all(|h| h.entry.scope == mine
            && h.entry.tags.contains(&memory_core::Tag::new("t0").unwrap())),
        "{hits:?}"
    );
    // Both searches went through this scope's index, none through the other's.
    assert_eq!(index_scans(&client, &schema, &mine_idx, 2).await, 2);
    // (Read after the first count is in: the same flushes carried any scan of this one.)
    assert_eq!(index_scans(&client, &schema, &other_idx, 0).await, 0);
    let hits = store
        .search(&small, &SearchRequest::semantic("note 7 about the violin"))
        .await
        .unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].entry.scope, small);
}

#[tokio::test]
async fn a_write_past_the_threshold_indexes_its_scope_in_the_background() {
    let Some(url) = common::pg_url() else { return };
    let (schema, _guard) = common::DropSchema::fresh(&url);
    let cfg = PostgresConfig {
        exact_scan_max: 30,
        ..config(&schema)
    };
    let store = PostgresBackend::connect(&url, embedder(32), cfg.clone())
        .await
        .unwrap();
    let scope = Scope::for_user("u").unwrap();
    let batch = |from: usize| {
        (from..from + 20)
            .map(|i| NewMemory::new(format!("memory number {i}")))
            .collect::<Vec<_>>()
    };
    store.store_batch(&scope, batch(0)).await.unwrap();
    let client = sql_client(&url).await;
    let id = scope_id(&client, &schema, &scope).await;
    let name = format!("memories_hnsw_{id}");
    assert!(
        index_state(&client, &schema, &name).await.is_none(),
        "20 of 30"
    );

    // A second process (its own store and pool) searches exactly meanwhile.
    let reader = PostgresBackend::connect(&preferring_ordered_indexes(&url), embedder(32), cfg)
        .await
        .unwrap();
    let exact = reader
        .search(&scope, &SearchRequest::semantic("memory number 3").limit(3))
        .await
        .unwrap();
    assert_eq!(exact[0].entry.content, "memory number 3");

    store.store_batch(&scope, batch(20)).await.unwrap();
    // 40 > 30: the build runs in the background, with no call to wait for it.
    let mut state = None;
    for _ in 0..600 {
        state = index_state(&client, &schema, &name).await;
        if state.as_ref().is_some_and(|(_, valid)| *valid) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let (def, valid) = state.expect("the index was created");
    assert!(valid, "{def}");
    // The other process learns of the index from its next (exact) search and then uses it.
    for _ in 0..2 {
        let hits = reader
            .search(
                &scope,
                &SearchRequest::semantic("memory number 33").limit(3),
            )
            .await
            .unwrap();
        assert_eq!(hits[0].entry.content, "memory number 33");
    }
    assert_eq!(index_scans(&client, &schema, &name, 1).await, 1);
}

#[tokio::test]
async fn a_version_1_store_is_migrated_and_its_large_scopes_indexed() {
    let Some(url) = common::pg_url() else { return };
    let (schema, _guard) = common::DropSchema::fresh(&url);
    let (big, small) = (
        Scope::for_user("u").unwrap().in_chat("big").unwrap(),
        Scope::for_user("u").unwrap().in_chat("small").unwrap(),
    );
    {
        let store = PostgresBackend::connect(
            &url,
            embedder(16),
            PostgresConfig {
                hnsw_index: false,
                ..config(&schema)
            },
        )
        .await
        .unwrap();
        let many = (0..25)
            .map(|i| NewMemory::new(format!("fact {i}")))
            .collect();
        store.store_batch(&big, many).await.unwrap();
        store
            .store(&small, NewMemory::new("one fact"))
            .await
            .unwrap();
        store.close();
    }
    // Version 1 as it was: no `stored` count, one HNSW index over the whole table, no
    // passages, no leases, no records.
    common::run_sql(
        &url,
        &format!(
            "DROP TABLE \"{schema}\".records;
             {}
             UPDATE \"{schema}\".meta SET value = '1' WHERE key = 'schema_version';
             DROP TABLE \"{schema}\".leases;
             ALTER TABLE \"{schema}\".scopes DROP COLUMN stored;
             CREATE INDEX memories_embedding_hnsw ON \"{schema}\".memories USING hnsw (embedding vector_cosine_ops);",
            common::undo_tenant_first(&schema)
        ),
    )
    .unwrap();
    let store = PostgresBackend::connect(
        &url,
        embedder(16),
        PostgresConfig {
            exact_scan_max: 20,
            ..config(&schema)
        },
    )
    .await
    .unwrap();
    // Connect started the big scope's build; this waits for it.
    store.index_large_scopes().await.unwrap();
    let client = sql_client(&url).await;
    let version: String = client
        .query_one(
            &format!("SELECT value FROM \"{schema}\".meta WHERE key = 'schema_version'"),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(version, "7");
    assert!(has_passages(&client, &schema).await);
    assert!(
        store
            .try_lease("upkeep", "a", std::time::Duration::from_secs(60))
            .await
            .unwrap(),
        "the leases' table came with the migration"
    );
    let note = memory_core::Record::new("prompt", memory_core::Timestamp::now(), "{}");
    store.keep_record(&big, note.clone(), 1).await.unwrap();
    assert_eq!(
        store.records(&big, "prompt", 5).await.unwrap(),
        [note],
        "and the records'"
    );
    let counts: Vec<(String, i64)> = client
        .query(
            &format!("SELECT chat, stored FROM \"{schema}\".scopes ORDER BY chat"),
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(counts, [("big".to_owned(), 25), ("small".to_owned(), 1)]);
    assert!(
        index_state(&client, &schema, "memories_embedding_hnsw")
            .await
            .is_none(),
        "the whole-table index is gone"
    );
    let id = scope_id(&client, &schema, &big).await;
    let (def, valid) = index_state(&client, &schema, &format!("memories_hnsw_{id}"))
        .await
        .expect("the big scope is indexed");
    assert!(valid, "{def}");
    let hits = store
        .search(&big, &SearchRequest::semantic("fact 12").limit(1))
        .await
        .unwrap();
    assert_eq!(hits[0].entry.content, "fact 12");
}

/// A server that answers but refuses the session (an unknown role, an unknown database)
/// says so once: the server's name in our words, then what the server said, as the source.
/// (The test server trusts every role, so a wrong password cannot be provoked here; it is
/// refused the same way.)
#[tokio::test]
async fn a_refused_session_names_the_server_and_keeps_what_it_said() {
    let Some(url) = common::pg_url() else { return };
    let base: tokio_postgres::Config = url.parse().unwrap();
    let tag = common::fresh_schema();
    let mut no_role = base.clone();
    no_role.user(format!("{tag}_nobody"));
    let mut no_db = base.clone();
    no_db.dbname(format!("{tag}_nowhere"));
    for (pg, said) in [(no_role, "does not exist"), (no_db, "does not exist")] {
        let err = PostgresBackend::connect_with(pg, None, config("ava"))
            .await
            .expect_err("refused");
        assert!(matches!(err, PostgresError::Refused { .. }), "{err:?}");
        let msg = chain(&err);
        assert!(msg.contains("refused the connection"), "{msg}");
        assert!(msg.contains(said), "keeps the server's words: {msg}");
        assert!(msg.contains(&tag), "names what was missing: {msg}");
        let memory = MemoryError::from(err);
        assert_eq!(repeated_cause(&memory), None);
        assert_eq!(
            memory
                .backend_error::<PostgresError>()
                .map(ToString::to_string),
            Some(msg.split(": ").next().unwrap().to_owned()),
        );
    }
}

/// A batch whose third id is taken writes nothing, and the conflict names that id.
#[tokio::test]
async fn a_taken_id_in_a_batch_is_the_one_reported() {
    let Some(url) = common::pg_url() else { return };
    let (schema, _guard) = common::DropSchema::fresh(&url);
    let store = PostgresBackend::connect(&url, embedder(16), config(&schema))
        .await
        .unwrap();
    let scope = Scope::for_user("u").unwrap();
    let taken = MemoryId::new();
    store
        .store(&scope, NewMemory::new("first").with_id(taken))
        .await
        .unwrap();
    let batch = vec![
        NewMemory::new("a").with_id(MemoryId::new()),
        NewMemory::new("b"),
        NewMemory::new("c").with_id(taken),
        NewMemory::new("d"),
    ];
    match store.store_batch(&scope, batch).await {
        Err(MemoryError::Conflict { id }) => assert_eq!(id, taken),
        other => panic!("expected a conflict on {taken}, got {other:?}"),
    }
    assert_eq!(store.count(&scope).await.unwrap(), 1, "nothing was written");
    store.close();
}

/// Whether the store has its table of long memories' further passages.
async fn has_passages(client: &tokio_postgres::Client, schema: &str) -> bool {
    client
        .query_one(
            "SELECT to_regclass(format('%I.memory_passages', $1::text)) IS NOT NULL",
            &[&schema],
        )
        .await
        .unwrap()
        .get(0)
}

/// How many further passages (after the first) the memory `id` has.
async fn passages_of(client: &tokio_postgres::Client, schema: &str, id: MemoryId) -> i64 {
    client
        .query_one(
            &format!(
                "SELECT count(*) FROM \"{schema}\".memory_passages p \
                 JOIN \"{schema}\".memories m ON m.pk = p.memory WHERE m.id = $1"
            ),
            &[id.as_uuid()],
        )
        .await
        .unwrap()
        .get(0)
}

/// A long text whose tail only a passage holds: filler the width of several windows of
/// 200 bytes, then `tail`.
fn long_text(tail: &str) -> String {
    let filler = "We compared the quarterly budget figures line by line. ".repeat(12);
    format!("{filler}\n\n{tail}")
}

/// Each memory's similarity to `query`, computed from its passages, best first
/// ([`memory_core::testing::passage_truth`]; `memories` are the whole scope).
async fn passage_truth(
    embedder: &HashingEmbedder,
    memories: &[(MemoryId, String)],
    query: &str,
) -> Vec<(MemoryId, f32)> {
    let texts: Vec<&str> = memories.iter().map(|(_, t)| t.as_str()).collect();
    let truth = memory_core::testing::passage_truth(embedder, &texts, query).await;
    best_first(memories, truth.similarities)
}

/// `memories` with their `similarities`, best first (ties by id).
fn best_first(memories: &[(MemoryId, String)], similarities: Vec<f32>) -> Vec<(MemoryId, f32)> {
    let mut truth: Vec<(MemoryId, f32)> = memories
        .iter()
        .map(|(id, _)| *id)
        .zip(similarities)
        .collect();
    truth.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    truth
}

/// `hits` are the top `limit` of `truth`: one per memory, each scored by its passages,
/// and every memory that clearly belongs in the top (ties at the edge may go either way)
/// is there.
fn same_as_truth(
    hits: &[memory_core::ScoredMemory],
    truth: &[(MemoryId, f32)],
    limit: usize,
    what: &str,
) {
    let want = &truth[..limit.min(truth.len())];
    assert_eq!(hits.len(), want.len(), "{what}: {hits:#?}");
    for (h, (_, s)) in hits.iter().zip(want) {
        let got = h.breakdown.semantic.unwrap();
        assert!((got - s).abs() < 1e-4, "{what}: {got} where {s}: {hits:#?}");
    }
    let edge = want.last().map_or(0.0, |w| w.1) + 1e-4;
    for (id, s) in want.iter().filter(|w| w.1 > edge) {
        let hit = hits.iter().find(|h| h.entry.id == *id);
        assert!(hit.is_some(), "{what}: {id} ({s}) missing: {hits:#?}");
    }
}

/// Stores from before passages (version 2): one with vectors gets the passages table when
/// it is migrated, one without gets it when it adopts a space, and a long memory stored
/// while no embedder was given is embedded as passages when a windowed embedder connects,
/// so that its tail is found by meaning.
#[tokio::test]
async fn stores_from_before_passages_embed_long_memories_as_passages() {
    let Some(url) = common::pg_url() else { return };
    let scope = Scope::for_user("u").unwrap();
    let long = long_text("The lighthouse keeper feeds seven gulls at dawn.");
    let windowed = HashingEmbedder::new(64).unwrap().with_window(200);
    let client = sql_client(&url).await;
    for with_space in [true, false] {
        let (schema, _guard) = common::DropSchema::fresh(&url);
        let first = if with_space { embedder(64) } else { None };
        let store = PostgresBackend::connect(&url, first, config(&schema))
            .await
            .unwrap();
        let short = store
            .store(&scope, NewMemory::new("Dinner plans for friday night"))
            .await
            .unwrap();
        store.close();
        common::run_sql(
            &url,
            &format!(
                "DROP TABLE \"{schema}\".records;
                 {}
                 UPDATE \"{schema}\".meta SET value = '2' WHERE key = 'schema_version';
                 DROP TABLE \"{schema}\".leases;",
                common::undo_tenant_first(&schema)
            ),
        )
        .unwrap();

        // Migrated without an embedder: the long memory waits for its vectors.
        let store = PostgresBackend::connect(&url, None, config(&schema))
            .await
            .unwrap();
        assert_eq!(has_passages(&client, &schema).await, with_space);
        let stored = store
            .store(&scope, NewMemory::new(long.clone()))
            .await
            .unwrap();
        assert!(!stored.embedded);
        store.close();

        // A windowed embedder of the same space embeds it as its passages.
        let store =
            PostgresBackend::connect(&url, Some(Arc::new(windowed.clone())), config(&schema))
                .await
                .unwrap();
        assert!(has_passages(&client, &schema).await, "with {with_space}");
        let want = memory_core::split_text(&long, 200).len() - 1;
        assert!(want >= 3, "{want}");
        assert_eq!(
            passages_of(&client, &schema, stored.id).await,
            i64::try_from(want).unwrap()
        );
        let query = "lighthouse keeper feeds gulls";
        let truth = passage_truth(
            &windowed,
            &[(stored.id, long.clone()), (short.id, short.content.clone())],
            query,
        )
        .await;
        let hits = store
            .search(&scope, &SearchRequest::semantic(query).limit(2))
            .await
            .unwrap();
        assert_eq!(hits[0].entry.id, stored.id, "{hits:#?}");
        assert!(hits[0].entry.embedded);
        same_as_truth(&hits, &truth, 2, &format!("with space {with_space}"));
        store.close();
    }
}

/// Searches `query` in `scope` of both `stores` (semantic at several limits, with and
/// without `only_long`, and hybrid) and checks the hits against the passages of
/// `memories`, which are the scope's; returns the truth without the filter.
async fn search_both(
    stores: [(&PostgresBackend, &str); 2],
    scope: &Scope,
    windowed: &HashingEmbedder,
    memories: Vec<(MemoryId, String)>,
    query: &str,
    only_long: &memory_core::Filter,
) -> Vec<(MemoryId, f32)> {
    let truth = passage_truth(windowed, &memories, query).await;
    let long: Vec<(MemoryId, f32)> = truth
        .iter()
        .filter(|(id, _)| {
            memories
                .iter()
                .any(|(m, t)| m == id && t.starts_with("We compared"))
        })
        .copied()
        .collect();
    for limit in [1, 5, 20] {
        for (store, name) in stores {
            let req = SearchRequest::semantic(query)
                .limit(limit)
                .without_access_tracking();
            let hits = store.search(scope, &req).await.unwrap();
            same_as_truth(&hits, &truth, limit, &format!("{query} ({name}, {limit})"));
            let req = req.filter(only_long.clone());
            let hits = store.search(scope, &req).await.unwrap();
            let what = format!("{query} ({name}, long ones, {limit})");
            same_as_truth(&hits, &long, limit, &what);
            let hits = store
                .search(scope, &SearchRequest::hybrid(query).limit(limit))
                .await
                .unwrap();
            let ids: std::collections::HashSet<_> = hits.iter().map(|h| h.entry.id).collect();
            assert_eq!(ids.len(), hits.len(), "one hit per memory: {hits:#?}");
        }
    }
    truth
}

/// Two stores over one schema, embedding with the 64-dimension hashing embedder that cuts
/// passages at 200 bytes (returned too): one searching a scope through its HNSW index once
/// `indexed` lets it (planner settings that prefer the index), one always exactly.
async fn indexed_and_exact(
    url: &str,
    schema: &str,
    indexed: impl FnOnce(PostgresConfig) -> PostgresConfig,
) -> (HashingEmbedder, PostgresBackend, PostgresBackend) {
    let windowed = HashingEmbedder::new(64).unwrap().with_window(200);
    let shared: Arc<dyn EmbeddingProvider> = Arc::new(windowed.clone());
    let through_index = PostgresBackend::connect(
        &preferring_ordered_indexes(url),
        Some(shared.clone()),
        indexed(config(schema)),
    )
    .await
    .unwrap();
    let exact = PostgresBackend::connect(
        url,
        Some(shared),
        PostgresConfig {
            hnsw_index: false,
            ..config(schema)
        },
    )
    .await
    .unwrap();
    (windowed, through_index, exact)
}

/// In a scope searched through its HNSW index and in the same scope searched exactly, a
/// long memory is one hit scored by its passages (the best less what their number adds;
/// with a filter too), the same as the passages themselves say; changing it replaces its
/// passages and deleting it removes them.
#[tokio::test]
async fn long_memories_rank_by_their_best_passage_through_a_scopes_index() {
    let Some(url) = common::pg_url() else { return };
    let (schema, _guard) = common::DropSchema::fresh(&url);
    let (windowed, indexed, exact) = indexed_and_exact(&url, &schema, |c| PostgresConfig {
        exact_scan_max: 5,
        ..c
    })
    .await;
    let scope = Scope::for_user("u").unwrap().in_chat("big").unwrap();
    let topics = ["garden", "violin", "harbour", "glacier", "orchard", "comet"];
    let long_tag = memory_core::Tag::new("long").unwrap();
    let mut batch: Vec<NewMemory> = (0..30)
        .map(|i| NewMemory::new(format!("note {i} about the {}", topics[i % topics.len()])))
        .collect();
    for tail in [
        "The lighthouse keeper feeds seven gulls at dawn.",
        "The violin maker sold the orchard with its pear trees.",
        "A comet passed over the glacier and the harbour.",
    ] {
        batch.push(NewMemory::new(long_text(tail)).with_tag(long_tag.clone()));
    }
    let stored = indexed.store_batch(&scope, batch).await.unwrap();
    let mut memories: Vec<(MemoryId, String)> =
        stored.iter().map(|e| (e.id, e.content.clone())).collect();
    indexed.index_large_scopes().await.unwrap();
    let client = sql_client(&url).await;
    let index = format!("memories_hnsw_{}", scope_id(&client, &schema, &scope).await);
    let only_long = memory_core::Filter {
        tags: Some(memory_core::TagQuery::any([long_tag.clone()])),
        ..memory_core::Filter::default()
    };
    let stores = [(&indexed, "indexed"), (&exact, "exact")];
    let check = |memories: Vec<(MemoryId, String)>, query: &'static str| {
        search_both(stores, &scope, &windowed, memories, query, &only_long)
    };
    for query in [
        "lighthouse keeper feeds gulls",
        "violin orchard pear trees",
        "quarterly budget figures",
    ] {
        check(memories.clone(), query).await;
    }
    let truth = check(memories.clone(), "lighthouse keeper feeds gulls").await;
    assert_eq!(truth[0].0, stored[30].id);
    assert!(index_scans(&client, &schema, &index, 1).await >= 1);

    // A new text replaces the passages; deleting the memory removes them.
    let lighthouse = stored[30].id;
    let changed = long_text("The ferry leaves the island at noon.");
    exact
        .update(
            &scope,
            lighthouse,
            memory_core::MemoryPatch {
                content: Some(changed.clone()),
                ..memory_core::MemoryPatch::default()
            },
        )
        .await
        .unwrap();
    memories[30].1 = changed;
    let truth = check(memories.clone(), "ferry leaves the island").await;
    assert_eq!(truth[0].0, lighthouse);
    check(memories.clone(), "lighthouse keeper feeds gulls").await;
    assert!(passages_of(&client, &schema, lighthouse).await >= 3);
    indexed.delete(&scope, lighthouse).await.unwrap();
    assert_eq!(passages_of(&client, &schema, lighthouse).await, 0);
    memories.remove(30);
    check(memories.clone(), "ferry leaves the island").await;
    let left: i64 = client
        .query_one(
            &format!("SELECT count(*) FROM \"{schema}\".memory_passages"),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(left >= 6, "the other long memories keep theirs: {left}");
    indexed.delete_scope(&scope).await.unwrap();
    let left: i64 = client
        .query_one(
            &format!("SELECT count(*) FROM \"{schema}\".memory_passages"),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(left, 0);
    indexed.close();
    exact.close();
}

/// Short notes on a few topics, `n` of them, from `from` on.
fn notes(from: usize, n: usize) -> Vec<NewMemory> {
    let topics = ["garden", "violin", "harbour", "glacier", "orchard", "comet"];
    let things = [
        "letters", "bread", "rain", "trains", "lamps", "maps", "boats",
    ];
    (from..from + n)
        .map(|i| {
            NewMemory::new(format!(
                "note {i} about the {} and the {}",
                topics[i % topics.len()],
                things[(i / topics.len()) % things.len()]
            ))
        })
        .collect()
}

/// A hybrid search fuses on the spread of the whole scope, measured by the store's
/// statements: of the similarities of every vector of the scope (long memories have
/// several), and of the keyword ranks over every memory (0 where one does not match or
/// pass the filter). Each hit's fused score is what `memory_core::fuse` gives with the
/// spreads computed here from the embedder and from the hits' own keyword ranks (every
/// match is a hit at this limit), filtered or not, on the exact path and through the
/// scope's index (whose head sample covers a scope this small); and it is not what the
/// candidates alone would give. One memory has more passages than the `expected_max` values
/// a search passes at first.
#[tokio::test]
async fn hybrid_search_fuses_on_the_spread_of_the_whole_scope() {
    let Some(url) = common::pg_url() else { return };
    let (schema, _guard) = common::DropSchema::fresh(&url);
    let (windowed, indexed, exact) = indexed_and_exact(&url, &schema, |c| PostgresConfig {
        exact_scan_max: 5,
        ..c
    })
    .await;
    let scope = Scope::for_user("u").unwrap().in_chat("fused").unwrap();
    let long_tag = memory_core::Tag::new("long").unwrap();
    let mut batch = notes(0, 36);
    for tail in [
        "The lighthouse keeper feeds seven gulls at dawn in the harbour.",
        "The violin maker sold the orchard with its pear trees.",
        "A comet passed over the glacier and the harbour.",
    ] {
        batch.push(NewMemory::new(long_text(tail)).with_tag(long_tag.clone()));
    }
    // More vectors than the `expected_max` values a search first passes: it runs again.
    let longest = format!(
        "{}\n\nThe harbour master counts the boats at dusk.",
        "We compared the quarterly budget figures line by line. ".repeat(300)
    );
    assert!(memory_core::split_text(&longest, 200).len() > 64);
    batch.push(NewMemory::new(longest).with_tag(long_tag.clone()));
    let stored = indexed.store_batch(&scope, batch).await.unwrap();
    let memories: Vec<(MemoryId, String)> =
        stored.iter().map(|e| (e.id, e.content.clone())).collect();
    indexed.index_large_scopes().await.unwrap();
    let only_long = memory_core::Filter {
        tags: Some(memory_core::TagQuery::any([long_tag.clone()])),
        ..memory_core::Filter::default()
    };
    let texts: Vec<&str> = memories.iter().map(|(_, t)| t.as_str()).collect();
    // Under the filter, a query may leave one candidate that stands out either way.
    let mut filtered_moved = std::collections::HashSet::new();
    for query in [
        "harbour gulls at dawn",
        "violin and the bread",
        "comet glacier",
    ] {
        let reference = memory_core::testing::passage_truth(&windowed, &texts, query).await;
        let semantic_spread = reference.spread;
        // How many passages each memory is stored as: fusion corrects a long one's BM25 by it.
        let counts: std::collections::HashMap<MemoryId, usize> = memories
            .iter()
            .map(|(id, _)| *id)
            .zip(reference.passages)
            .collect();
        let truth = best_first(&memories, reference.similarities);
        for (filter, name) in [
            (memory_core::Filter::default(), "all"),
            (only_long.clone(), "long ones"),
        ] {
            let passing = |id: &MemoryId| {
                name == "all"
                    || stored
                        .iter()
                        .any(|e| e.id == *id && e.tags.contains(&long_tag))
            };
            let semantic: Vec<(MemoryId, f32)> = truth
                .iter()
                .filter(|(id, _)| passing(id))
                .copied()
                .collect();
            for (store, path) in [(&exact, "exact"), (&indexed, "indexed")] {
                let what = format!("{query} ({path}, {name})");
                let req = SearchRequest::hybrid(query)
                    .filter(filter.clone())
                    .limit(50)
                    .without_access_tracking();
                let hits = store.search(&scope, &req).await.unwrap();
                let keyword: Vec<(MemoryId, f32, usize)> = hits
                    .iter()
                    .filter_map(|h| {
                        let n = counts[&h.entry.id];
                        h.breakdown.keyword_raw.map(|k| (h.entry.id, k, n))
                    })
                    .collect();
                assert!(!keyword.is_empty(), "{what}: some word matches");
                let spread = memory_core::ScopeSpread {
                    semantic: semantic_spread,
                    keyword: memory_core::Spread::of(keyword.iter().map(|k| k.1), memories.len()),
                };
                let weights = memory_core::HybridWeights::default();
                let want = memory_core::fuse(&semantic, &keyword, weights, spread);
                assert_eq!(hits.len(), want.len(), "{what}: {hits:#?}");
                assert!((hits[0].score - 1.0).abs() < 1e-6, "{what}: {hits:#?}");
                for h in &hits {
                    let w = want.iter().find(|w| w.id == h.entry.id).unwrap();
                    assert!(
                        (h.score - w.score).abs() < 1e-3,
                        "{what}: {} scored {} where fuse gives {}",
                        h.entry.content,
                        h.score,
                        w.score
                    );
                }
                // The candidates alone would say otherwise: the spreads were the scope's.
                let alone = memory_core::fuse(
                    &semantic,
                    &keyword,
                    weights,
                    memory_core::ScopeSpread::default(),
                );
                let moved = alone.iter().any(|a| {
                    want.iter()
                        .find(|w| w.id == a.id)
                        .is_some_and(|w| (w.score - a.score).abs() > 1e-2)
                });
                if name == "all" {
                    assert!(moved, "{what}: the scope's spreads make no difference");
                } else if moved {
                    filtered_moved.insert(path);
                }
            }
        }
    }
    assert_eq!(filtered_moved.len(), 2, "under the filter too");
    indexed.close();
    exact.close();
}

/// In a scope of more heads than the store samples for the spread of similarities when it
/// searches through the scope's HNSW index, that estimate ranks as the exact scan does: the
/// same top hits, long memories among them, semantic and hybrid, with scores close to the
/// exact ones.
#[tokio::test]
async fn a_large_scope_searched_through_its_index_ranks_as_its_exact_scan() {
    let Some(url) = common::pg_url() else { return };
    let (schema, _guard) = common::DropSchema::fresh(&url);
    let (_, indexed, exact) = indexed_and_exact(&url, &schema, |c| PostgresConfig {
        exact_scan_max: 100,
        // What is compared is the spread's estimate, not the graph's recall: a wide search
        // keeps the index from missing a hit of a query nearly orthogonal to most notes.
        hnsw_ef_search: 1000,
        ..c
    })
    .await;
    let scope = Scope::for_user("u").unwrap().in_chat("large").unwrap();
    // Notes of eight words drawn from four hundred, so that similarities vary.
    let mut rng = memory_core::testing::Rng::new(7);
    for _ in 0..6 {
        let batch = (0..400)
            .map(|_| {
                let words: Vec<String> = (0..8).map(|_| format!("w{}", rng.below(400))).collect();
                NewMemory::new(words.join(" "))
            })
            .collect();
        indexed.store_batch(&scope, batch).await.unwrap();
    }
    let tails = [
        "The lighthouse keeper feeds seven gulls at dawn.",
        "The violin maker sold the orchard with its pear trees.",
        "A comet passed over the glacier at midnight.",
        "Grandmother's recipe for plum dumplings needs cinnamon.",
        "The night ferry to the island leaves at eleven.",
        "Our tandem bicycle has a squeaky rear brake.",
    ];
    let long: Vec<NewMemory> = tails
        .iter()
        .map(|tail| NewMemory::new(long_text(tail)))
        .collect();
    let long = indexed.store_batch(&scope, long).await.unwrap();
    indexed.index_large_scopes().await.unwrap();
    let client = sql_client(&url).await;
    let index = format!("memories_hnsw_{}", scope_id(&client, &schema, &scope).await);
    for (query, lead) in [
        ("lighthouse keeper feeds gulls", Some(long[0].id)),
        ("plum dumplings with cinnamon", Some(long[3].id)),
        ("quarterly budget figures", None),
        ("w3 w77 w150", None),
        ("w12 w310 the dawn", None),
    ] {
        for req in [
            SearchRequest::semantic(query).limit(10),
            SearchRequest::hybrid(query).limit(10),
        ] {
            let req = req.without_access_tracking();
            let what = format!("{query} ({:?})", req.mode);
            let want = exact.search(&scope, &req).await.unwrap();
            let got = indexed.search(&scope, &req).await.unwrap();
            if let Some(lead) = lead {
                assert_eq!(want[0].entry.id, lead, "{what}: {want:#?}");
            }
            assert_eq!(got.len(), want.len(), "{what}");
            // Clear hits (not within 0.02 of the last) are the same; scores are close (the
            // estimate moves long memories' similarities by about 0.007 here).
            let edge = want.last().map_or(0.0, |w| w.score) + 0.02;
            for w in want.iter().filter(|w| w.score > edge) {
                let g = got.iter().find(|g| g.entry.id == w.entry.id);
                let g =
                    g.unwrap_or_else(|| panic!("{what}: {} missing: {got:#?}", w.entry.content));
                assert!(
                    (g.score - w.score).abs() < 0.02,
                    "{what}: {} scored {} through the index, {} exactly",
                    w.entry.content,
                    g.score,
                    w.score
                );
            }
        }
    }
    assert!(index_scans(&client, &schema, &index, 1).await >= 1);
    indexed.close();
    exact.close();
}

/// The tables that hold a tenant's data.
const TENANT_TABLES: [&str; 5] = [
    "scopes",
    "memories",
    "memory_access",
    "memory_passages",
    "records",
];

/// A store's layout as the catalog tells it (columns, constraints, indexes of its tables, not
/// of their partitions nor the keys Postgres derives for them), with the schema's name taken
/// out, sorted.
async fn layout(client: &tokio_postgres::Client, schema: &str) -> Vec<String> {
    let tables = [
        "meta",
        "scopes",
        "memories",
        "memory_access",
        "memory_passages",
        "leases",
        "records",
    ];
    let mut out = Vec::new();
    let text = |r: &tokio_postgres::Row| -> String {
        (0..r.len())
            .map(|i| r.get::<_, Option<String>>(i).unwrap_or_default())
            .collect::<Vec<_>>()
            .join(" | ")
    };
    for sql in [
        "SELECT table_name::text, column_name::text, data_type::text, is_nullable::text, \
         generation_expression::text FROM information_schema.columns \
         WHERE table_schema = $1 AND table_name = ANY($2)",
        "SELECT r.relname::text, pg_get_constraintdef(c.oid) FROM pg_constraint c \
         JOIN pg_class r ON r.oid = c.conrelid JOIN pg_namespace n ON n.oid = r.relnamespace \
         WHERE n.nspname = $1 AND r.relname = ANY($2) AND c.conparentid = 0",
        "SELECT tablename::text, indexname::text, indexdef FROM pg_indexes \
         WHERE schemaname = $1 AND tablename = ANY($2)",
    ] {
        for r in client.query(sql, &[&schema, &&tables[..]]).await.unwrap() {
            out.push(
                text(&r)
                    .replace(&format!("\"{schema}\"."), "")
                    .replace(&format!("{schema}."), "")
                    .replace(" ON ONLY ", " ON "),
            );
        }
    }
    out.sort();
    out
}

/// The first column of every key (primary, unique, foreign) and every b-tree index of the
/// tables holding a tenant's data, by name; and the other indexes, with their method.
async fn leading_columns(
    client: &tokio_postgres::Client,
    schema: &str,
) -> (Vec<(String, String)>, Vec<(String, String)>) {
    let keys = client
        .query(
            "SELECT c.conname::text, a.attname::text FROM pg_constraint c \
             JOIN pg_class r ON r.oid = c.conrelid JOIN pg_namespace n ON n.oid = r.relnamespace \
             JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = c.conkey[1] \
             WHERE n.nspname = $1 AND r.relname = ANY($2) AND c.contype IN ('p', 'u', 'f')",
            &[&schema, &&TENANT_TABLES[..]],
        )
        .await
        .unwrap();
    let indexes = client
        .query(
            "SELECT ic.relname::text, am.amname::text, a.attname::text FROM pg_index i \
             JOIN pg_class r ON r.oid = i.indrelid JOIN pg_namespace n ON n.oid = r.relnamespace \
             JOIN pg_class ic ON ic.oid = i.indexrelid JOIN pg_am am ON am.oid = ic.relam \
             LEFT JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0] \
             WHERE n.nspname = $1 AND r.relname = ANY($2)",
            &[&schema, &&TENANT_TABLES[..]],
        )
        .await
        .unwrap();
    let mut leading: Vec<(String, String)> = keys.iter().map(|r| (r.get(0), r.get(1))).collect();
    let mut others = Vec::new();
    for r in &indexes {
        let (name, method): (String, String) = (r.get(0), r.get(1));
        if method == "btree" {
            leading.push((name, r.get::<_, Option<String>>(2).unwrap_or_default()));
        } else {
            others.push((name, method));
        }
    }
    leading.sort();
    others.sort();
    (leading, others)
}

/// The tenant leads every key and b-tree index of the tables holding a person's data, in a
/// store migrated from version 1 (every unpartitioned store is) and in one made partitioned
/// by tenant; both have the same layout, but for the partitions, also once a partitioned
/// store of version 5 is migrated.
#[tokio::test]
async fn the_tenant_leads_every_key_and_a_partitioned_store_has_the_same_layout() {
    let Some(url) = common::pg_url() else { return };
    let client = sql_client(&url).await;
    let (plain, _g1) = common::DropSchema::fresh(&url);
    let (parted, _g2) = common::DropSchema::fresh(&url);
    let scope = Scope::for_user("u").unwrap();
    for (schema, partitions) in [(&plain, 0), (&parted, 4)] {
        let store = PostgresBackend::connect(
            &url,
            embedder(16),
            PostgresConfig {
                tenant_partitions: partitions,
                ..config(schema)
            },
        )
        .await
        .unwrap();
        store
            .store(&scope, NewMemory::new("a memory to hold"))
            .await
            .unwrap();
        store.close();
    }
    let want = layout(&client, &plain).await;
    assert!(want.len() > 40, "{want:#?}");
    assert_eq!(layout(&client, &parted).await, want);
    // A partitioned store of version 5 (before records) gets its records partitioned too.
    common::run_sql(
        &url,
        &format!(
            "DROP TABLE \"{parted}\".records;
             UPDATE \"{parted}\".meta SET value = '5' WHERE key = 'schema_version';"
        ),
    )
    .unwrap();
    PostgresBackend::connect(&url, embedder(16), config(&parted))
        .await
        .unwrap()
        .close();
    assert_eq!(layout(&client, &parted).await, want);
    for schema in [&plain, &parted] {
        let (leading, others) = leading_columns(&client, schema).await;
        assert!(leading.len() >= 17, "{leading:?}");
        let astray: Vec<_> = leading.iter().filter(|(_, col)| col != "tenant").collect();
        assert!(astray.is_empty(), "keys not led by the tenant: {astray:?}");
        // Full-text search's GIN index cannot take a text column first without the
        // btree_gin extension; in a partitioned store it is one per partition.
        assert_eq!(others, [("memories_fts".to_owned(), "gin".to_owned())]);
    }
    let partitions = |table: &'static str| {
        let schema = parted.clone();
        let client = &client;
        async move {
            let n: i64 = client
                .query_one(
                    "SELECT count(*) FROM pg_inherits WHERE inhparent = to_regclass($1)",
                    &[&format!("\"{schema}\".{table}")],
                )
                .await
                .unwrap()
                .get(0);
            n
        }
    };
    for table in ["memories", "memory_access", "memory_passages", "records"] {
        assert_eq!(partitions(table).await, 4, "{table}");
    }
}

/// In a store partitioned by tenant, a large scope's HNSW index is built on its tenant's
/// partition, its searches use it, and a scope of the same user and chat in another tenant
/// sees none of its memories.
#[tokio::test]
async fn a_partitioned_store_indexes_a_large_scope_in_its_partition() {
    let Some(url) = common::pg_url() else { return };
    let (schema, _guard) = common::DropSchema::fresh(&url);
    let store = PostgresBackend::connect(
        &preferring_ordered_indexes(&url),
        embedder(16),
        PostgresConfig {
            tenant_partitions: 3,
            exact_scan_max: 20,
            ..config(&schema)
        },
    )
    .await
    .unwrap();
    let acme = Scope::for_user("u").unwrap().in_tenant("acme").unwrap();
    let globex = Scope::for_user("u").unwrap().in_tenant("globex").unwrap();
    let many = (0..25)
        .map(|i| NewMemory::new(format!("acme fact number {i}")))
        .collect();
    store.store_batch(&acme, many).await.unwrap();
    store
        .store(&globex, NewMemory::new("globex fact number 12"))
        .await
        .unwrap();
    assert_eq!(store.index_large_scopes().await.unwrap(), 1);
    let client = sql_client(&url).await;
    let id = scope_id(&client, &schema, &acme).await;
    let name = format!("memories_hnsw_{id}");
    let (def, valid) = index_state(&client, &schema, &name)
        .await
        .expect("the large scope is indexed");
    assert!(valid, "{def}");
    assert!(def.contains(".memories_p"), "on a partition: {def}");
    for _ in 0..2 {
        let hits = store
            .search(
                &acme,
                &SearchRequest::semantic("acme fact number 12").limit(3),
            )
            .await
            .unwrap();
        assert_eq!(hits[0].entry.content, "acme fact number 12");
        assert!(hits.iter().all(|h| h.entry.content.starts_with("acme")));
    }
    assert!(index_scans(&client, &schema, &name, 2).await >= 2);
    let theirs = store
        .search(
            &globex,
            &SearchRequest::hybrid("acme fact number 12").limit(30),
        )
        .await
        .unwrap();
    assert_eq!(theirs.len(), 1, "{theirs:#?}");
    assert_eq!(theirs[0].entry.content, "globex fact number 12");
    store.close();
}

/// `stats` counts the whole store: memories, facts, those with a vector, scopes and users
/// holding memories, the space it records and what its tables take.
#[tokio::test]
async fn stats_total_the_whole_store() {
    let Some(url) = common::pg_url() else { return };
    let (schema, _guard) = common::DropSchema::fresh(&url);
    let store = PostgresBackend::connect(&url, embedder(8), config(&schema))
        .await
        .unwrap();
    let ann = Scope::for_user("ann").unwrap();
    let ann_chat = ann.clone().in_chat("c1").unwrap();
    let bob = Scope::for_user("bob").unwrap().in_tenant("t2").unwrap();
    store
        .store(
            &ann,
            NewMemory::new("Ann's cat is Pixel").with_kind(memory_core::MemoryKind::Fact),
        )
        .await
        .unwrap();
    store
        .store(&ann_chat, NewMemory::new("hello"))
        .await
        .unwrap();
    store.store(&bob, NewMemory::new("hi")).await.unwrap();
    // A scope emptied holds nothing.
    let gone = store
        .store(&Scope::for_user("cy").unwrap(), NewMemory::new("bye"))
        .await
        .unwrap();
    store
        .delete(&Scope::for_user("cy").unwrap(), gone.id)
        .await
        .unwrap();
    let s = store.stats().await.unwrap();
    assert_eq!(
        (s.memories, s.embedded, s.facts, s.scopes, s.users),
        (3, 3, 1, 3, 2),
        "{s:?}"
    );
    assert_eq!(
        s.embedding_space.as_deref(),
        Some(embedder(8).unwrap().space().to_string().as_str())
    );
    assert!(s.bytes > 0, "{s:?}");
    store.close();
    let keyword_only = PostgresBackend::connect(&url, None, config(&schema))
        .await
        .unwrap();
    // The same totals for a process without an embedder (what the server's files take may
    // change meanwhile: autovacuum).
    let again = keyword_only.stats().await.unwrap();
    assert_eq!(
        StoreStats {
            bytes: s.bytes,
            ..again
        },
        s
    );
    keyword_only.close();
}
