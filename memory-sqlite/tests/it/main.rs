//! memory-sqlite's integration tests, one crate: the conformance suite (with and without the
//! vector cache), the store as a file, odd paths, durability, several OS processes on one
//! file, erasure down to the file's bytes, and the search paths.
//!
//! Tests that re-run this binary as a child name themselves by their path here
//! (`module::test`), as the test harness does.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test's helpers fail loudly on an unexpected error"
)]

mod conformance;
mod conformance_vec0;
mod durability;
mod erased;
mod open_paths;
mod processes;
mod search_paths;
mod store_file;
