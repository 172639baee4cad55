//! ava-bot's integration tests, one module per front door or theme, in one test crate (one
//! link instead of thirteen). Most run the `ava` binary (`common::command`); the Telegram
//! dispatcher's own tests are unit tests in `src/telegram/tests.rs`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test's helpers fail loudly on an unexpected error"
)]

mod common;

mod check;
mod cli;
mod docs;
mod facts;
mod graph;
mod inspector;
#[cfg(feature = "local")]
mod long_answers;
mod mcp;
mod postgres;
mod providers;
mod replicas;
mod serve;
mod shared_store;
