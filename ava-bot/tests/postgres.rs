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

#[test]
fn remember_then_recall_on_postgres() {
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
            return;
        }
    };
    let schema = format!("ava_cli_test_{}", std::process::id());
    let sep = if url.contains('?') { '&' } else { '?' };
    let db = format!("{url}{sep}schema={schema}");
    struct SchemaGuard(String, String);
    impl Drop for SchemaGuard {
        fn drop(&mut self) {
            run_sql(
                &self.0,
                &format!("DROP SCHEMA IF EXISTS \"{}\" CASCADE", self.1),
            );
        }
    }
    let _guard = SchemaGuard(url.clone(), schema.clone());

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
