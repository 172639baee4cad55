//! ava-memory's integration tests, one crate: the facade over a real SQLite file, its
//! examples run against loopback fakes of an OpenAI-compatible server, and the privacy rule
//! through the facade and the rig index.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test fails loudly on an unexpected error"
)]

mod common;

mod async_openai;
mod facade;
mod isolation;
mod quickstart;
#[cfg(feature = "rig")]
mod rig;
