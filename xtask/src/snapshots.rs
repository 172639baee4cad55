//! `cargo xtask snapshots`: runs the workspace's insta snapshot tests and checks, reviews or
//! accepts their snapshots, without needing `cargo-insta` installed.
//!
//! The snapshot tests are the integration-test targets of every workspace crate that
//! dev-depends on `insta` (today `tests/it` of `prompt-ir` and of `hydrate`, whose
//! `snapshots` modules hold their snapshots). They are run with `cargo test
//! --workspace --all-features --test <name>…`, so the build shares the feature set (and the
//! compiled artefacts) of the README's test command.
//!
//! - `--check` (CI): fails if a snapshot differs or is missing, if a pending `.snap.new`
//!   is lying around, or if a `.snap` file is no longer asserted by any test (unreferenced).
//! - `--review`: shows each changed snapshot as a diff and asks to accept, reject or skip;
//!   then offers to delete unreferenced snapshots.
//! - `--accept`: accepts every new or changed snapshot and deletes unreferenced ones.
//! - no flag: runs the tests and lists what is pending, changing nothing that is committed.

use std::collections::BTreeSet;
use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

/// What to do with the snapshots.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Review each new or changed snapshot interactively (accept, reject or skip).
    #[arg(long, conflicts_with_all = ["accept", "check"])]
    review: bool,
    /// Accept every new or changed snapshot and delete unreferenced ones.
    #[arg(long, conflicts_with = "check")]
    accept: bool,
    /// Fail on a differing, missing, pending or unreferenced snapshot (what CI runs).
    #[arg(long)]
    check: bool,
}

pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    let root = workspace_root();
    let targets = snapshot_test_targets(&root)?;
    if targets.is_empty() {
        bail!("no workspace crate dev-depends on insta: there are no snapshot tests to run");
    }
    if args.check {
        return check(&root, &targets);
    }
    // Every other mode runs the tests once in "write pending files" mode, then works on them.
    let refs = run_tests(&root, &targets, Update::WritePending)?;
    let files = SnapshotFiles::scan(&root)?;
    let unreferenced = files.unreferenced(&refs);
    if args.accept {
        for new in &files.pending {
            accept(new)?;
            println!("accepted  {}", rel(&root, &snap_path(new)));
        }
        for old in &unreferenced {
            std::fs::remove_file(old).with_context(|| format!("delete {}", old.display()))?;
            println!("deleted   {} (no test asserts it)", rel(&root, old));
        }
    } else if args.review {
        review(&root, &files.pending, &unreferenced)?;
    } else {
        status(&root, &files, &unreferenced);
    }
    Ok(())
}

/// `--check`: nothing pending before, every assertion matches, nothing unreferenced after.
fn check(root: &Path, targets: &[String]) -> anyhow::Result<()> {
    let before = SnapshotFiles::scan(root)?;
    let mut problems = Vec::new();
    for p in &before.pending {
        problems.push(format!("pending snapshot not reviewed: {}", rel(root, p)));
    }
    let refs = match run_tests(root, targets, Update::Never) {
        Ok(refs) => refs,
        Err(e) => {
            problems.push(format!(
                "{e:#}: a snapshot differs from its .snap file or has none; \
                 run `cargo xtask snapshots --review`"
            ));
            BTreeSet::new()
        }
    };
    if problems.is_empty() {
        for old in SnapshotFiles::scan(root)?.unreferenced(&refs) {
            problems.push(format!(
                "unreferenced snapshot (no test asserts it): {}; \
                 delete it or run `cargo xtask snapshots --accept`",
                rel(root, &old)
            ));
        }
    }
    if problems.is_empty() {
        println!(
            "snapshots: all {} snapshot files match and are referenced",
            before.committed.len()
        );
        return Ok(());
    }
    for p in &problems {
        eprintln!("snapshots: {p}");
    }
    bail!("snapshot check failed ({} problem(s))", problems.len())
}

/// No flag: say what is pending and how to deal with it.
fn status(root: &Path, files: &SnapshotFiles, unreferenced: &[PathBuf]) {
    if files.pending.is_empty() && unreferenced.is_empty() {
        println!(
            "snapshots: all {} snapshot files match and are referenced",
            files.committed.len()
        );
        return;
    }
    for p in &files.pending {
        println!("pending       {}", rel(root, p));
    }
    for p in unreferenced {
        println!("unreferenced  {}", rel(root, p));
    }
    println!("review with `cargo xtask snapshots --review`, or take all with `--accept`");
}

/// `--review`: one diff at a time, answered on stdin.
fn review(root: &Path, pending: &[PathBuf], unreferenced: &[PathBuf]) -> anyhow::Result<()> {
    if pending.is_empty() && unreferenced.is_empty() {
        println!("snapshots: nothing to review");
        return Ok(());
    }
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        eprintln!("snapshots: stdin is not a terminal; answers are read from it line by line");
    }
    let mut lines = stdin.lock().lines();
    let mut ask = |question: &str| -> anyhow::Result<char> {
        print!("{question} ");
        std::io::stdout().flush()?;
        Ok(match lines.next().transpose()? {
            Some(answer) => answer.trim().chars().next().unwrap_or('s'),
            None => 's',
        })
    };
    for new in pending {
        let old_path = snap_path(new);
        let old = std::fs::read_to_string(&old_path).unwrap_or_default();
        let fresh =
            std::fs::read_to_string(new).with_context(|| format!("read {}", new.display()))?;
        println!("\n=== {}", rel(root, &old_path));
        if old.is_empty() {
            println!("(new snapshot)");
        }
        print!(
            "{}",
            similar::TextDiff::from_lines(&body(&old), &body(&fresh))
                .unified_diff()
                .context_radius(3)
                .header("committed", "new")
        );
        match ask("[a]ccept, [r]eject, [s]kip?")? {
            'a' => {
                accept(new)?;
                println!("accepted");
            }
            'r' => {
                std::fs::remove_file(new).with_context(|| format!("delete {}", new.display()))?;
                println!("rejected");
            }
            _ => println!("skipped"),
        }
    }
    for old in unreferenced {
        match ask(&format!(
            "\n{} is asserted by no test. [d]elete, [k]eep?",
            rel(root, old)
        ))? {
            'd' => {
                std::fs::remove_file(old).with_context(|| format!("delete {}", old.display()))?;
                println!("deleted");
            }
            _ => println!("kept"),
        }
    }
    Ok(())
}

/// The snapshot content without its metadata header, for diffs.
fn body(snap: &str) -> String {
    match snap
        .strip_prefix("---\n")
        .and_then(|s| s.split_once("\n---\n"))
    {
        Some((_, body)) => body.to_owned(),
        None => snap.to_owned(),
    }
}

/// Moves `x.snap.new` over `x.snap`, dropping insta's `assertion_line:` header line (it
/// changes whenever code above the assertion moves, which is churn, not a change).
fn accept(new: &Path) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(new).with_context(|| format!("read {}", new.display()))?;
    let cleaned: String = text
        .split_inclusive('\n')
        .filter(|line| !line.starts_with("assertion_line:"))
        .collect();
    let target = snap_path(new);
    std::fs::write(&target, cleaned).with_context(|| format!("write {}", target.display()))?;
    std::fs::remove_file(new).with_context(|| format!("delete {}", new.display()))
}

/// `x.snap.new` -> `x.snap`.
fn snap_path(new: &Path) -> PathBuf {
    new.with_extension("")
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Update {
    /// Fail on any mismatch; write nothing.
    Never,
    /// Write `.snap.new` files for mismatches and let the tests pass.
    WritePending,
}

/// Runs the snapshot tests; returns the snapshot files they asserted.
fn run_tests(root: &Path, targets: &[String], update: Update) -> anyhow::Result<BTreeSet<PathBuf>> {
    let refs_dir = tempfile::tempdir().context("create a temp dir")?;
    let refs_file = refs_dir.path().join("references");
    let mut cmd = crate::cargo();
    cmd.current_dir(root)
        .args(["test", "--workspace", "--all-features"])
        // No INSTA_WORKSPACE_ROOT: insta's macros read it at compile time too, so setting it
        // here would rebuild every crate with snapshots that the plain `cargo test` built;
        // insta finds the same root with `cargo metadata`.
        .env("INSTA_SNAPSHOT_REFERENCES_FILE", &refs_file);
    for t in targets {
        cmd.args(["--test", t]);
    }
    match update {
        Update::Never => cmd.env("INSTA_UPDATE", "no").env("INSTA_FORCE_PASS", "0"),
        Update::WritePending => cmd.env("INSTA_UPDATE", "new").env("INSTA_FORCE_PASS", "1"),
    };
    println!("snapshots: running {cmd:?}");
    let status = cmd.status().context("run cargo test")?;
    if !status.success() {
        bail!("the snapshot tests failed ({status})");
    }
    let listed = std::fs::read_to_string(&refs_file).unwrap_or_default();
    Ok(listed
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| canonical(Path::new(l)))
        .collect())
}

/// Snapshot files under the workspace (outside `target/` and hidden directories).
#[derive(Debug, Default)]
struct SnapshotFiles {
    committed: Vec<PathBuf>,
    pending: Vec<PathBuf>,
}

impl SnapshotFiles {
    fn scan(root: &Path) -> anyhow::Result<Self> {
        let mut files = Self::default();
        let mut dirs = vec![root.to_path_buf()];
        while let Some(dir) = dirs.pop() {
            for entry in
                std::fs::read_dir(&dir).with_context(|| format!("list {}", dir.display()))?
            {
                let entry = entry?;
                let path = entry.path();
                let name = entry.file_name().to_string_lossy().into_owned();
                if entry.file_type()?.is_dir() {
                    let skipped = name.starts_with('.') || (dir == root && name == "target");
                    if !skipped {
                        dirs.push(path);
                    }
                } else if name.ends_with(".snap") {
                    files.committed.push(path);
                } else if name.ends_with(".snap.new") || name.ends_with(".pending-snap") {
                    files.pending.push(path);
                }
            }
        }
        files.committed.sort();
        files.pending.sort();
        if let Some(inline) = files
            .pending
            .iter()
            .find(|p| p.to_string_lossy().ends_with(".pending-snap"))
        {
            bail!(
                "{} holds a pending inline snapshot; this project keeps snapshots in .snap files \
                 (use assert_yaml_snapshot!(value) without an inline literal)",
                inline.display()
            );
        }
        Ok(files)
    }

    fn unreferenced(&self, refs: &BTreeSet<PathBuf>) -> Vec<PathBuf> {
        self.committed
            .iter()
            .filter(|p| !refs.contains(&canonical(p)))
            .cloned()
            .collect()
    }
}

/// The integration-test targets of workspace packages that dev-depend on insta.
fn snapshot_test_targets(root: &Path) -> anyhow::Result<Vec<String>> {
    let out = crate::cargo()
        .current_dir(root)
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .output()
        .context("run cargo metadata")?;
    if !out.status.success() {
        bail!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let meta: serde_json::Value =
        serde_json::from_slice(&out.stdout).context("parse cargo metadata output")?;
    let mut targets = BTreeSet::new();
    for pkg in meta["packages"].as_array().into_iter().flatten() {
        let uses_insta = pkg["dependencies"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|d| d["name"] == "insta");
        if !uses_insta {
            continue;
        }
        for t in pkg["targets"].as_array().into_iter().flatten() {
            let is_test = t["kind"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|k| k == "test");
            if let (true, Some(name)) = (is_test, t["name"].as_str()) {
                targets.insert(name.to_owned());
            }
        }
    }
    Ok(targets.into_iter().collect())
}

fn workspace_root() -> PathBuf {
    canonical(&Path::new(env!("CARGO_MANIFEST_DIR")).join(".."))
}

fn canonical(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())
}

fn rel(root: &Path, p: &Path) -> String {
    p.strip_prefix(root).unwrap_or(p).display().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_strips_assertion_line_and_replaces_the_old_file() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let new = dir.path().join("a__b.snap.new");
        std::fs::write(
            &new,
            "---\nsource: t.rs\nassertion_line: 42\nexpression: x\n---\nhello\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(dir.path().join("a__b.snap"), "old").unwrap_or_else(|e| panic!("{e}"));
        accept(&new).unwrap_or_else(|e| panic!("{e}"));
        let got =
            std::fs::read_to_string(dir.path().join("a__b.snap")).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(got, "---\nsource: t.rs\nexpression: x\n---\nhello\n");
        assert!(!new.exists());
    }

    #[test]
    fn scan_sorts_committed_from_pending_and_unreferenced_is_a_set_difference() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let snaps = dir.path().join("c/tests/snapshots");
        std::fs::create_dir_all(&snaps).unwrap_or_else(|e| panic!("{e}"));
        std::fs::create_dir_all(dir.path().join("target/x")).unwrap_or_else(|e| panic!("{e}"));
        for f in ["s__one.snap", "s__two.snap", "s__two.snap.new"] {
            std::fs::write(snaps.join(f), "x").unwrap_or_else(|e| panic!("{e}"));
        }
        std::fs::write(dir.path().join("target/x/s.snap"), "x").unwrap_or_else(|e| panic!("{e}"));
        let files = SnapshotFiles::scan(dir.path()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(files.committed.len(), 2, "target/ is skipped: {files:?}");
        assert_eq!(files.pending, vec![snaps.join("s__two.snap.new")]);
        let refs: BTreeSet<PathBuf> = [canonical(&snaps.join("s__one.snap"))].into();
        assert_eq!(files.unreferenced(&refs), vec![snaps.join("s__two.snap")]);
    }

    #[test]
    fn body_drops_the_metadata_header() {
        assert_eq!(body("---\nsource: a\n---\nline\n"), "line\n");
        assert_eq!(body("no header"), "no header");
    }
}
