//! `ava remember` then `ava recall` against a Postgres store (feature `postgres`), in a
//! fresh schema chosen with the URL's `?schema=` parameter. Needs `MEMORY_PG_URL`; without
//! it the test prints one skip line and passes.

#![cfg(feature = "postgres")]
use crate::common;

use common::{ava, command, exported, fresh_schema, ok};

#[test]
fn remember_then_recall_on_postgres() {
    for partitions in [0, 2] {
        let Some((db, schema, _guard)) = fresh_schema(&format!("cli_test{partitions}")) else {
            return;
        };
        let db = format!("{db}&tenant_partitions={partitions}");
        remember_then_recall(&db, &schema, partitions);
    }
}

/// `remember` and `recall` in the store at `db`, made with `partitions` hash partitions of
/// the tenant.
fn remember_then_recall(db: &str, schema: &str, partitions: u16) {
    let db = db.to_owned();

    let id = ok(ava(
        &db,
        &common::in_chat_7("remember", &["--tag", "pets", "My cat is called Pixel"]),
    ));
    assert!(!id.trim().is_empty());
    ok(ava(
        &db,
        &common::in_chat("43", "7", "remember", &["My cat is called Shadow"]),
    ));
    let out = ok(ava(&db, &common::in_chat_7("recall", &["cat"])));
    assert!(out.contains("My cat is called Pixel"), "{out}");
    assert!(out.contains(id.trim()), "{out}");
    assert!(
        !out.contains("Shadow"),
        "another user's memory leaked: {out}"
    );

    // The store landed in the chosen schema, not in the default one.
    let stats = ok(ava(&db, &["stats", "--user", "42"]));
    let layout = match partitions {
        0 => String::new(),
        n => format!(", {n} tenant partitions"),
    };
    assert!(
        stats.contains(&format!("schema {schema}{layout} (server, durable)")),
        "{stats}"
    );
    assert!(
        stats.contains("memories: 2 (2 facts, 2 with vectors)") && stats.contains("users: 2"),
        "{stats}"
    );
}

/// `ava stats` totals and `ava reembed` on Postgres: a store written without an embedder
/// moves into the hashing embedder's space; a memory a keyword-only process stores then has
/// no vector until `ava reembed --missing`; the store is reached over TLS as well
/// (`MEMORY_PG_TLS_URL`, verify-full) when that is set.
#[test]
fn stats_and_reembed_on_postgres() {
    let Some((db, schema, _guard)) = fresh_schema("reembed_test") else {
        return;
    };
    let keyword_only = |args: &[&str]| {
        ok(command(&db)
            .env("AVA_EMBEDDER", "none")
            .args(args)
            .output()
            .unwrap())
    };
    for text in ["the ferry leaves at nine", "my cat is called Pixel"] {
        keyword_only(&["remember", "--user", "42", text]);
    }
    // (Read without an embedder: a process with one gives a store without a space its own.)
    let stats = keyword_only(&["stats"]);
    assert!(
        stats.contains("memories: 2 (2 facts, 0 with vectors)")
            && stats.contains("embedding space: none (keyword only)")
            && stats.contains("(its tables and indexes)"),
        "{stats}"
    );
    let out = ok(ava(&db, &["reembed"]));
    assert_eq!(
        out.trim(),
        "re-embedded 2 memories: none -> hash/fnv1a-words-v1 (384 dims)"
    );
    keyword_only(&[
        "remember",
        "--user",
        "42",
        "the night bus stops at the pier",
    ]);
    let stats = keyword_only(&["stats"]);
    assert!(
        stats.contains("memories: 3 (3 facts, 2 with vectors)")
            && stats.contains("1 have no vector yet")
            && stats.contains("embedding space: hash/fnv1a-words-v1 (384 dims)"),
        "{stats}"
    );
    // Any process with the embedder embeds it as it connects; `--missing` says so.
    let out = ok(ava(&db, &["reembed", "--missing"]));
    assert_eq!(out.trim(), "embedded 1 memories; 0 still without a vector");
    let stats = ok(ava(&db, &["stats"]));
    assert!(stats.contains("3 with vectors"), "{stats}");
    let out = ok(ava(&db, &common::in_chat_7("recall", &["night bus pier"])));
    assert!(out.contains("the night bus stops at the pier"), "{out}");

    let Some(tls) = memory_core::testing::env_or_skip(
        "MEMORY_PG_TLS_URL",
        "ava-bot's Postgres TLS part",
        "the TLS front of .ci/pgbouncer-tls.sh",
    ) else {
        return;
    };
    let over_tls = format!("{tls}&schema={schema}");
    let stats = ok(ava(&over_tls, &["stats"]));
    assert!(
        stats.contains("memories: 3 (3 facts, 3 with vectors)"),
        "{stats}"
    );
}

/// SQLite -> Postgres (a store partitioned by tenant) -> SQLite with `ava migrate`: both
/// copies export the same memories, field for field, as the original.
#[test]
fn migrate_round_trips_sqlite_postgres_sqlite() {
    let Some((pg, _, _guard)) = fresh_schema("migrate_test") else {
        return;
    };
    let pg = format!("{pg}&tenant_partitions=3");
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.db"), dir.path().join("b.db"));
    let old = ok(ava(
        &a,
        &common::in_chat_7("remember", &["the door code is 4711"]),
    ));
    ok(ava(
        &a,
        &common::in_chat_7(
            "remember",
            &["--replaces", old.trim(), "the door code is 1234"],
        ),
    ));
    ok(ava(
        &a,
        &["remember", "--user", "42", "my cat is called Pixel"],
    ));
    ok(ava(
        &a,
        &["remember", "--user", "43", "my dog is called Rex"],
    ));
    let (a, b) = (a.to_str().unwrap(), b.to_str().unwrap());
    for (from, to) in [(a, pg.as_str()), (pg.as_str(), b)] {
        let out = ok(ava(a, &["migrate", "--from", from, "--to", to]));
        assert!(
            out.contains("copied 3 scopes") && out.contains("every scope's count matches"),
            "{out}"
        );
    }
    for user in ["42", "43"] {
        let original = exported(a, user);
        assert!(!original.is_empty());
        assert_eq!(exported(&pg, user), original, "sqlite -> postgres");
        assert_eq!(exported(b, user), original, "postgres -> sqlite");
    }
}

/// `ava erase --user --yes` on Postgres: no row of the store's schema holds the person's
/// words afterwards (every text column of every table read), another user's stay, and the
/// erase vacuumed the tables (what the server keeps beyond them: see docs/memory.md, "Erasing").
#[test]
fn erase_on_postgres_leaves_no_row_with_the_persons_words() {
    let Some((db, schema, _guard)) = fresh_schema("erase_test") else {
        return;
    };
    for (user, chat, text) in [
        ("alice", Some("7"), "the door code is 4711"),
        ("alice", None, "my cat is called Pixel"),
        ("bob", None, "my dog is called Rex"),
    ] {
        let mut args = vec!["remember", "--user", user];
        if let Some(chat) = chat {
            args.extend(["--chat", chat]);
        }
        args.push(text);
        ok(ava(&db, &args));
    }
    let url = std::env::var("MEMORY_PG_URL").unwrap();
    let rows_holding = |needle: &str| -> Vec<String> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                .await
                .unwrap();
            let task = tokio::spawn(conn);
            let columns = client
                .query(
                    "SELECT table_name::text, column_name::text FROM information_schema.columns \
                     WHERE table_schema = $1 AND data_type IN ('text', 'jsonb', 'json', \
                     'character varying', 'bytea')",
                    &[&schema],
                )
                .await
                .unwrap();
            assert!(!columns.is_empty(), "no text column in {schema}");
            let mut found = Vec::new();
            for row in columns {
                let (table, column): (String, String) = (row.get(0), row.get(1));
                let sql = format!(
                    "SELECT count(*) FROM \"{schema}\".\"{table}\" \
                     WHERE position($1 in \"{column}\"::text) > 0"
                );
                let n: i64 = client.query_one(&sql, &[&needle]).await.unwrap().get(0);
                if n > 0 {
                    found.push(format!("{table}.{column}"));
                }
            }
            drop(client);
            let _ = task.await;
            found
        })
    };
    assert!(!rows_holding("4711").is_empty(), "the check sees the rows");
    let out = ok(ava(&db, &["erase", "--user", "alice", "--yes"]));
    assert!(out.contains("erased"), "{out}");
    for hers in ["4711", "Pixel"] {
        assert_eq!(
            rows_holding(hers),
            Vec::<String>::new(),
            "{hers} is still in a row"
        );
    }
    assert!(!rows_holding("dog is called Rex").is_empty(), "Bob's stays");
    // The erase vacuumed the store's tables (Postgres notes when a table was last
    // vacuumed by hand; autovacuum never runs on tables this small).
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let vacuumed = runtime.block_on(async {
        let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .unwrap();
        let task = tokio::spawn(conn);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut vacuumed = Vec::new();
        while vacuumed.is_empty() && std::time::Instant::now() < deadline {
            client
                .batch_execute("SELECT pg_stat_clear_snapshot()")
                .await
                .unwrap();
            vacuumed = client
                .query(
                    "SELECT relname::text FROM pg_stat_user_tables \
                     WHERE schemaname = $1 AND last_vacuum IS NOT NULL",
                    &[&schema],
                )
                .await
                .unwrap()
                .into_iter()
                .map(|r| r.get::<_, String>(0))
                .collect();
            if vacuumed.is_empty() {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
        drop(client);
        let _ = task.await;
        vacuumed
    });
    assert!(
        vacuumed.iter().any(|t| t.contains("memories")),
        "the erase vacuumed: {vacuumed:?}"
    );
}
