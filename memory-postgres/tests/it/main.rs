//! memory-postgres's integration tests, one crate: the conformance suite (plain, partitioned
//! by tenant, over TLS), the server's own behaviour (schemas, migrations, errors, TLS), and
//! several OS processes on one store (sharing, re-embedding). Each needs `MEMORY_PG_URL`
//! (the TLS ones `MEMORY_PG_TLS_URL`); without it, it says so on stderr and skips, unless
//! `AVA_REQUIRE_SERVICES` is set.
//!
//! Tests that re-run this binary as a child name themselves by their path here
//! (`module::test`), as the test harness does.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test's helpers fail loudly on an unexpected error"
)]

mod common;
mod conformance;
mod processes;
mod server;
