//! `cargo xtask`: project automation (snapshots, benchmarks, evaluation, model fetching).
//!
//! No subcommand exists yet; each arrives with its issue as a module of its own.

fn main() -> anyhow::Result<()> {
    let cmd = std::env::args().nth(1);
    anyhow::bail!(
        "unknown xtask command {:?}: no xtask commands exist yet (snapshots, bench, eval and \
         fetch-model are planned)",
        cmd.unwrap_or_default()
    )
}
