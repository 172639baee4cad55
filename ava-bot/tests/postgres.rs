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

use common::{ava, exported, fresh_schema, ok};

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
    let layout = match partitions {
        0 => String::new(),
        n => format!(", {n} tenant partitions"),
    };
    assert!(
        stats.contains(&format!("schema {schema}{layout} (server, durable)")),
        "{stats}"
    );
    assert!(stats.contains("not supported on postgres yet"), "{stats}");
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
