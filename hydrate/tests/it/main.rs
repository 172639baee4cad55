//! hydrate's integration tests, one crate (one link) with a module per subject: each
//! module's own `//!` says what it covers. Shared fixtures are in `common`. (The tracing
//! test is a crate of its own, `tests/tracing_fields.rs`: tracing caches which callsites
//! interest a subscriber process-wide, and the other tests reach the same ones at once
//! without one.)

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test fails loudly on an unexpected error"
)]

mod common;

mod cache;
mod cues;
mod documents;
mod end_to_end;
mod families;
mod graph;
mod instructions;
mod ops;
mod own_conversations;
mod precedence;
mod prompt_safety;
mod rerank;
mod snapshots;
mod sources;
mod web;
