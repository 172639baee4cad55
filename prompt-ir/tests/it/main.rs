//! prompt-ir's integration tests, one crate (one link): properties of compress and compile
//! under random inputs (`properties`), and the compiled seed prompts as snapshots
//! (`snapshots`). Shared fixtures are in `common`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test fails loudly on an unexpected error"
)]

mod common;

mod properties;
mod snapshots;
