//! Write throughput of one store file shared by several OS processes: the same 800
//! single-memory stores (one transaction each, as the bot and `ava remember` write) made by
//! one process, then split over 2 and 4 processes writing at once. Each process is this
//! bench binary re-executed; it opens the store, waits for a common start time, stores its
//! share and reports when it started and finished. A measurement is the window from the
//! first start to the last finish, so process start-up and opening are not counted.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use criterion::{Criterion, Throughput};
use memory_core::{HashingEmbedder, MemoryBackend, NewMemory, Scope};
use memory_sqlite::{SqliteBackend, SqliteConfig};

/// In a child: `path|count|index|start_at_unix_nanos`.
const CHILD_ENV: &str = "AVA_BENCH_WRITER";
const TOTAL: usize = 800;

fn nanos_now() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// A child: open, wait for the start time, store `count` memories one by one in its own
/// chat, print `start end` in Unix nanoseconds.
fn child(spec: &str) {
    let parts: Vec<&str> = spec.split('|').collect();
    let [path, count, index, start_at] = parts[..] else {
        eprintln!("bad {CHILD_ENV}: {spec}");
        std::process::exit(2);
    };
    let (count, start_at): (usize, u128) = match (count.parse(), start_at.parse()) {
        (Ok(c), Ok(s)) => (c, s),
        _ => std::process::exit(2),
    };
    let rt = match tokio::runtime::Builder::new_current_thread().build() {
        Ok(rt) => rt,
        Err(_) => std::process::exit(2),
    };
    let result = rt.block_on(async {
        let embedder = Arc::new(HashingEmbedder::new(384)?);
        let store = SqliteBackend::open(path, Some(embedder), SqliteConfig::default()).await?;
        let scope = Scope::for_user(format!("writer-{index}"))?.in_chat("bench")?;
        while nanos_now() < start_at {
            std::thread::sleep(Duration::from_micros(200));
        }
        let start = nanos_now();
        for i in 0..count {
            let text = format!("message {i} of writer {index} about the weekend plans");
            store.store(&scope, NewMemory::new(text)).await?;
        }
        let end = nanos_now();
        store.close().await;
        Ok::<_, memory_core::MemoryError>((start, end))
    });
    match result {
        Ok((start, end)) => println!("{start} {end}"),
        Err(e) => {
            eprintln!("writer {index} failed: {e}");
            std::process::exit(1);
        }
    }
}

/// One measurement: `processes` writers sharing `TOTAL` stores on a fresh file in `dir`.
fn run_once(exe: &Path, dir: &Path, round: usize, processes: usize) -> Duration {
    let path: PathBuf = dir.join(format!("w{processes}-{round}.db"));
    // The file and its embedding space exist before the writers start, as for a bot.
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap_or_else(|e| panic!("runtime: {e}"));
    rt.block_on(async {
        let embedder = Arc::new(HashingEmbedder::new(384).unwrap_or_else(|e| panic!("{e}")));
        SqliteBackend::open(&path, Some(embedder), SqliteConfig::default())
            .await
            .unwrap_or_else(|e| panic!("open: {e}"))
            .close()
            .await;
    });
    // Far enough ahead for every child to have opened the store.
    let start_at = nanos_now() + 400_000_000;
    let children: Vec<_> = (0..processes)
        .map(|i| {
            Command::new(exe)
                .env(
                    CHILD_ENV,
                    format!("{}|{}|{i}|{start_at}", path.display(), TOTAL / processes),
                )
                .stdout(Stdio::piped())
                .spawn()
                .unwrap_or_else(|e| panic!("spawn a writer: {e}"))
        })
        .collect();
    let mut first = u128::MAX;
    let mut last = 0;
    for c in children {
        let out = c
            .wait_with_output()
            .unwrap_or_else(|e| panic!("wait for a writer: {e}"));
        assert!(out.status.success(), "a writer failed");
        let text = String::from_utf8_lossy(&out.stdout);
        let mut t = text
            .split_whitespace()
            .map(|n| n.parse::<u128>().unwrap_or(0));
        let (s, e) = (t.next().unwrap_or(0), t.next().unwrap_or(0));
        first = first.min(s);
        last = last.max(e);
    }
    let _ = std::fs::remove_file(&path);
    Duration::from_nanos(u64::try_from(last.saturating_sub(first)).unwrap_or(u64::MAX))
}

fn main() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        child(&spec);
        return;
    }
    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("current exe: {e}"));
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("temp dir: {e}"));
    let mut c = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(100))
        .configure_from_args();
    let mut group = c.benchmark_group("sqlite/concurrent_writers");
    group.throughput(Throughput::Elements(TOTAL as u64));
    for processes in [1, 2, 4] {
        let mut round = 0;
        group.bench_function(
            format!("{TOTAL}_single_stores_by_{processes}_processes"),
            |b| {
                b.iter_custom(|iters| {
                    (0..iters)
                        .map(|_| {
                            round += 1;
                            run_once(&exe, dir.path(), round, processes)
                        })
                        .sum()
                })
            },
        );
    }
    group.finish();
    c.final_summary();
}
