//! `ava remember` then `ava recall` against a Postgres store (feature `postgres`), in a
//! fresh schema chosen with the URL's `?schema=` parameter. Needs `MEMORY_PG_URL`; without
//! it the test prints one skip line and passes.

#![cfg(feature = "postgres")]
#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "a test fails loudly on an unexpected error"
)]

mod common;

use std::io::Write;

use common::{ava, ok};

/// Runs `sql` on the server (on a runtime of its own).
fn run_sql(url: &str, sql: &str) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .unwrap();
        let task = tokio::spawn(conn);
        client.batch_execute(sql).await.unwrap();
        drop(client);
        let _ = task.await;
    });
}

/// Drops its schema when the test ends, passed or not.
struct SchemaGuard(String, String);

impl Drop for SchemaGuard {
    fn drop(&mut self) {
        run_sql(
            &self.0,
            &format!("DROP SCHEMA IF EXISTS \"{}\" CASCADE", self.1),
        );
    }
}

/// A store URL in a fresh schema named after `tag` and this process, with the guard that
/// drops it; `None` (after one skip line) when `MEMORY_PG_URL` is not set.
fn fresh_schema(tag: &str) -> Option<(String, String, SchemaGuard)> {
    let url = match std::env::var("MEMORY_PG_URL") {
        Ok(u) if !u.trim().is_empty() => u,
        // CI sets AVA_REQUIRE_SERVICES=1: there a missing server is a failure, not a skip.
        _ if std::env::var("AVA_REQUIRE_SERVICES").is_ok_and(|v| v == "1") => {
            panic!("MEMORY_PG_URL is not set but AVA_REQUIRE_SERVICES=1 requires it")
        }
        _ => {
            // Straight to stderr, past libtest's capture, so the skip shows in every run.
            let _ = writeln!(
                std::io::stderr(),
                "ava-bot: SKIPPED: MEMORY_PG_URL is not set; set it to a Postgres URL whose \
                 server has pgvector (e.g. start one with .ci/postgres.sh start) to run these tests"
            );
            return None;
        }
    };
    let schema = format!("ava_{tag}_{}", std::process::id());
    let sep = if url.contains('?') { '&' } else { '?' };
    let db = format!("{url}{sep}schema={schema}");
    let guard = SchemaGuard(url, schema.clone());
    Some((db, schema, guard))
}

#[test]
fn remember_then_recall_on_postgres() {
    let Some((db, schema, _guard)) = fresh_schema("cli_test") else {
        return;
    };

    let id = ok(ava(
        &db,
        &[
            "remember",
            "--user",
            "42",
            "--chat",
            "7",
            "--tag",
            "pets",
            "My cat is called Pixel",
        ],
    ));
    assert!(!id.trim().is_empty());
    ok(ava(
        &db,
        &[
            "remember",
            "--user",
            "43",
            "--chat",
            "7",
            "My cat is called Shadow",
        ],
    ));
    let out = ok(ava(&db, &["recall", "--user", "42", "--chat", "7", "cat"]));
    assert!(out.contains("My cat is called Pixel"), "{out}");
    assert!(out.contains(id.trim()), "{out}");
    assert!(
        !out.contains("Shadow"),
        "another user's memory leaked: {out}"
    );

    // The store landed in the chosen schema, not in the default one.
    let stats = ok(ava(&db, &["stats", "--user", "42"]));
    assert!(
        stats.contains(&format!("schema {schema} (server, durable)")),
        "{stats}"
    );
    assert!(stats.contains("not supported on postgres yet"), "{stats}");
}

/// SQLite -> Postgres -> SQLite with `ava migrate`: both copies export the same memories,
/// field for field, as the original.
#[test]
fn migrate_round_trips_sqlite_postgres_sqlite() {
    let Some((pg, _, _guard)) = fresh_schema("migrate_test") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.db"), dir.path().join("b.db"));
    let old = ok(ava(
        &a,
        &[
            "remember",
            "--user",
            "42",
            "--chat",
            "7",
            "the door code is 4711",
        ],
    ));
    ok(ava(
        &a,
        &[
            "remember",
            "--user",
            "42",
            "--chat",
            "7",
            "--replaces",
            old.trim(),
            "the door code is 1234",
        ],
    ));
    ok(ava(
        &a,
        &["remember", "--user", "42", "my cat is called Pixel"],
    ));
    ok(ava(
        &a,
        &["remember", "--user", "43", "my dog is called Rex"],
    ));
    let exported = |db: &str, user: &str| -> Vec<String> {
        ok(ava(db, &["export", "--user", user]))
            .lines()
            .skip(1)
            .map(str::to_owned)
            .collect()
    };
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
