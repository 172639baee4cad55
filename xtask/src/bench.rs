//! `cargo xtask bench`: runs the workspace's criterion benches and writes their numbers into
//! `BENCHMARKS.md` as generated Markdown tables, so numbers are regenerated, never typed in.
//!
//! Each bench target owns one block of `BENCHMARKS.md` between
//! `<!-- xtask bench: KEY -->` and `<!-- /xtask bench: KEY -->` (appended at the end when the
//! markers are missing); prose around the blocks is left alone. A block records the machine,
//! date, commit, load average, the exact command and one row per benchmark:
//!
//! - criterion's mean with its 95% interval and throughput, read from criterion's own JSON
//!   (`target/criterion/**/new/{benchmark,estimates,sample}.json`);
//! - p50/p95 from lines the bench prints, `ava-bench: percentiles ID p50=0.12ms p95=0.3ms
//!   n=1000` (single timed calls), otherwise over criterion's per-sample means (marked `~`);
//! - the brute-force bound where the bench prints `ava-bench: scanned ID bytes=N`: N bytes
//!   over this machine's single-thread memory bandwidth, measured here before the run;
//! - free notes from `ava-bench: note ID text` (e.g. an index's recall).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Instant, SystemTime};

use anyhow::{Context, bail};

/// Which benches, how long.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Shorter measurements and the small cases only (numbers are marked as quick).
    #[arg(long)]
    quick: bool,
    /// Only the benches whose key contains this (repeatable), e.g. `--only sqlite`.
    #[arg(long)]
    only: Vec<String>,
    /// Print the tables instead of writing them into BENCHMARKS.md.
    #[arg(long)]
    no_write: bool,
}

/// One criterion bench target and how to run it.
#[derive(Debug)]
struct Spec {
    key: &'static str,
    package: &'static str,
    bench: &'static str,
    features: &'static [&'static str],
    /// Environment for the bench: (name, full-run value, quick-run value).
    env: &'static [(&'static str, &'static str, &'static str)],
    /// A variable the bench needs (it skips without it), e.g. a server URL.
    needs: Option<&'static str>,
    /// A cargo profile other than `bench`: `eval` reuses `cargo xtask eval`'s optimised
    /// build of the stack instead of compiling it once more.
    profile: Option<&'static str>,
}

const SPECS: &[Spec] = &[
    Spec {
        key: "prompt-ir/compress",
        package: "prompt-ir",
        bench: "compress",
        features: &[],
        env: &[],
        needs: None,
        profile: None,
    },
    Spec {
        key: "memory-embedders/embed_local",
        package: "memory-embedders",
        bench: "embed_local",
        features: &["local"],
        env: &[("RAYON_NUM_THREADS", "1", "1")],
        needs: None,
        profile: None,
    },
    Spec {
        key: "memory-sqlite/retrieval",
        package: "memory-sqlite",
        bench: "retrieval",
        features: &[],
        env: &[("AVA_BENCH_CASES", "ingest,10k,100k,1m", "ingest,10k")],
        needs: None,
        profile: None,
    },
    Spec {
        key: "memory-sqlite/processes",
        package: "memory-sqlite",
        bench: "processes",
        features: &[],
        env: &[],
        needs: None,
        profile: None,
    },
    Spec {
        key: "memory-postgres/retrieval",
        package: "memory-postgres",
        bench: "retrieval",
        features: &[],
        env: &[("AVA_BENCH_CASES", "ingest,100k,large", "ingest")],
        needs: Some("MEMORY_PG_URL"),
        profile: None,
    },
    Spec {
        key: "ava-bot/serve",
        package: "ava-bot",
        bench: "serve",
        // The Postgres replicas run when MEMORY_PG_URL is set.
        features: &["postgres"],
        env: &[
            ("AVA_BENCH_REQUESTS", "400", "100"),
            ("RAYON_NUM_THREADS", "1", "1"),
        ],
        needs: None,
        profile: Some("eval"),
    },
    Spec {
        key: "hydrate/hydrate",
        package: "hydrate",
        bench: "hydrate",
        features: &[],
        env: &[],
        needs: None,
        profile: None,
    },
];

pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let specs: Vec<&Spec> = SPECS
        .iter()
        .filter(|s| args.only.is_empty() || args.only.iter().any(|o| s.key.contains(o.as_str())))
        .collect();
    if specs.is_empty() {
        let keys: Vec<&str> = SPECS.iter().map(|s| s.key).collect();
        bail!(
            "no bench matches --only {:?}; the benches are {}",
            args.only,
            keys.join(", ")
        );
    }
    let machine = Machine::read();
    let bandwidth = measure_bandwidth();
    println!(
        "bench: {} ; memory bandwidth (one thread) {:.1} GB/s",
        machine.describe(),
        bandwidth / 1e9
    );
    let criterion_home = target_dir(&root).join("criterion");
    let mut blocks = Vec::new();
    for spec in specs {
        if let Some(var) = spec.needs
            && std::env::var(var).map_or(true, |v| v.is_empty())
        {
            println!("bench: SKIPPED {}: {var} is not set", spec.key);
            continue;
        }
        let started = SystemTime::now();
        let load = machine_load();
        let (command, lines) = run_bench(&root, &criterion_home, spec, args.quick)?;
        let results = read_criterion(&criterion_home, started)?;
        let printed = Printed::parse(&lines);
        if results.is_empty() && printed.percentiles.is_empty() {
            println!(
                "bench: {} produced no measurements (it may have skipped; its output is above)",
                spec.key
            );
            continue;
        }
        let block = render(
            &machine, load, bandwidth, &command, args.quick, &results, &printed,
        );
        println!("\n{block}");
        blocks.push((spec.key, block));
    }
    if args.no_write || blocks.is_empty() {
        return Ok(());
    }
    let path = root.join("BENCHMARKS.md");
    let mut doc = std::fs::read_to_string(&path).unwrap_or_else(|_| "# Benchmarks\n".into());
    for (key, block) in &blocks {
        doc = splice(&doc, key, block);
    }
    std::fs::write(&path, doc).with_context(|| format!("write {}", path.display()))?;
    println!(
        "bench: wrote {} block(s) into {}",
        blocks.len(),
        path.display()
    );
    Ok(())
}

/// Runs one bench, echoing its output, and returns the command line and stdout lines.
fn run_bench(
    root: &Path,
    criterion_home: &Path,
    spec: &Spec,
    quick: bool,
) -> anyhow::Result<(String, Vec<String>)> {
    let mut cmd = crate::cargo();
    let mut shown = Vec::new();
    cmd.current_dir(root).env("CRITERION_HOME", criterion_home);
    for (name, full, short) in spec.env {
        let value = if quick { short } else { full };
        cmd.env(name, value);
        shown.push(format!("{name}={value}"));
    }
    let mut args: Vec<String> = vec![
        "bench".into(),
        "-p".into(),
        spec.package.into(),
        "--bench".into(),
        spec.bench.into(),
    ];
    if let Some(profile) = spec.profile {
        args.push("--profile".into());
        args.push(profile.into());
    }
    if !spec.features.is_empty() {
        args.push("--features".into());
        args.push(spec.features.join(","));
    }
    args.push("--".into());
    let timing: &[&str] = if quick {
        &["--warm-up-time", "1", "--measurement-time", "1"]
    } else {
        &["--warm-up-time", "1", "--measurement-time", "3"]
    };
    args.extend(timing.iter().map(|s| (*s).to_owned()));
    cmd.args(&args).stdout(Stdio::piped());
    shown.push("cargo".into());
    shown.extend(args);
    let command = shown.join(" ");
    println!("bench: running {command}");
    let t = Instant::now();
    let mut child = cmd.spawn().context("run cargo bench")?;
    let mut lines = Vec::new();
    if let Some(out) = child.stdout.take() {
        for line in BufReader::new(out).lines() {
            let line = line.context("read the bench's output")?;
            println!("{line}");
            lines.push(line);
        }
    }
    let status = child.wait().context("wait for cargo bench")?;
    if !status.success() {
        bail!("`{command}` failed ({status})");
    }
    println!(
        "bench: {} took {:.0} s",
        spec.key,
        t.elapsed().as_secs_f64()
    );
    Ok((command, lines))
}

/// One criterion benchmark's numbers (times in nanoseconds).
#[derive(Debug, Clone, PartialEq)]
struct Measured {
    id: String,
    mean: f64,
    lower: f64,
    upper: f64,
    /// Percentiles over per-sample means (criterion's samples, not single calls).
    sample_p50: f64,
    sample_p95: f64,
    throughput: Option<Throughput>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Throughput {
    Elements(f64),
    Bytes(f64),
}

/// Every benchmark criterion wrote (re)measured since `since`, sorted by id.
fn read_criterion(home: &Path, since: SystemTime) -> anyhow::Result<Vec<Measured>> {
    let mut found = Vec::new();
    let mut dirs = vec![home.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.file_name().is_some_and(|n| n == "benchmark.json")
                && path.parent().is_some_and(|p| p.ends_with("new"))
            {
                let fresh = entry
                    .metadata()
                    .and_then(|m| m.modified())
                    .is_ok_and(|m| m >= since);
                if fresh {
                    found.push(read_one(&path)?);
                }
            }
        }
    }
    found.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(found)
}

fn read_json(path: &Path) -> anyhow::Result<serde_json::Value> {
    let text = std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("parse {}", path.display()))
}

fn read_one(benchmark_json: &Path) -> anyhow::Result<Measured> {
    let dir = benchmark_json.parent().unwrap_or(Path::new("."));
    let meta = read_json(benchmark_json)?;
    let est = read_json(&dir.join("estimates.json"))?;
    let sample = read_json(&dir.join("sample.json"))?;
    let num = |v: &serde_json::Value, what: &str| {
        v.as_f64()
            .with_context(|| format!("{what} missing in {}", dir.display()))
    };
    let mean = &est["mean"];
    let mut per_iter: Vec<f64> = sample["iters"]
        .as_array()
        .into_iter()
        .flatten()
        .zip(sample["times"].as_array().into_iter().flatten())
        .filter_map(|(i, t)| Some(t.as_f64()? / i.as_f64()?.max(1.0)))
        .collect();
    per_iter.sort_by(f64::total_cmp);
    let throughput = match &meta["throughput"] {
        serde_json::Value::Object(m) => m
            .get("Elements")
            .and_then(serde_json::Value::as_f64)
            .map(Throughput::Elements)
            .or_else(|| {
                m.get("Bytes")
                    .and_then(serde_json::Value::as_f64)
                    .map(Throughput::Bytes)
            }),
        _ => None,
    };
    Ok(Measured {
        id: meta["full_id"]
            .as_str()
            .map(str::to_owned)
            .with_context(|| format!("full_id missing in {}", benchmark_json.display()))?,
        mean: num(&mean["point_estimate"], "mean")?,
        lower: num(
            &mean["confidence_interval"]["lower_bound"],
            "mean lower bound",
        )?,
        upper: num(
            &mean["confidence_interval"]["upper_bound"],
            "mean upper bound",
        )?,
        sample_p50: quantile(&per_iter, 0.50),
        sample_p95: quantile(&per_iter, 0.95),
        throughput,
    })
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 * q) as usize).min(sorted.len() - 1);
    sorted[i]
}

/// What a bench printed for xtask: `ava-bench: <kind> <id> ...` lines.
#[derive(Debug, Default, PartialEq)]
struct Printed {
    /// id -> (p50 ns, p95 ns, calls)
    percentiles: BTreeMap<String, (f64, f64, u64)>,
    /// id -> bytes a brute-force pass reads
    scanned: BTreeMap<String, f64>,
    notes: BTreeMap<String, Vec<String>>,
}

impl Printed {
    fn parse(lines: &[String]) -> Self {
        let mut out = Self::default();
        for line in lines {
            let Some(rest) = line.trim().strip_prefix("ava-bench:") else {
                continue;
            };
            let mut words = rest.split_whitespace();
            let (Some(kind), Some(id)) = (words.next(), words.next()) else {
                continue;
            };
            let fields: Vec<&str> = words.collect();
            let field = |name: &str| {
                fields
                    .iter()
                    .find_map(|f| f.strip_prefix(name)?.strip_prefix('='))
            };
            let ms = |v: Option<&str>| -> Option<f64> {
                Some(v?.strip_suffix("ms")?.parse::<f64>().ok()? * 1e6)
            };
            match kind {
                "percentiles" => {
                    if let (Some(p50), Some(p95)) = (ms(field("p50")), ms(field("p95"))) {
                        let n = field("n").and_then(|n| n.parse().ok()).unwrap_or(0);
                        out.percentiles.insert(id.to_owned(), (p50, p95, n));
                    }
                }
                "scanned" => {
                    if let Some(b) = field("bytes").and_then(|b| b.parse().ok()) {
                        out.scanned.insert(id.to_owned(), b);
                    }
                }
                "note" => out
                    .notes
                    .entry(id.to_owned())
                    .or_default()
                    .push(fields.join(" ")),
                _ => {}
            }
        }
        out
    }
}

/// The Markdown block for one bench target.
fn render(
    machine: &Machine,
    load: Option<f64>,
    bandwidth: f64,
    command: &str,
    quick: bool,
    results: &[Measured],
    printed: &Printed,
) -> String {
    let mut s = String::new();
    let load = load.map_or("unknown".into(), |l| format!("{l:.2}"));
    let _ = writeln!(
        s,
        "Generated by `cargo xtask bench{}` on {} (commit {}). Machine: {}; load average {} \
         at the start; memory bandwidth {:.1} GB/s (one thread, measured by xtask).\n",
        if quick { " --quick" } else { "" },
        chrono::Utc::now().format("%Y-%m-%d %H:%M UTC"),
        git_commit(),
        machine.describe(),
        load,
        bandwidth / 1e9,
    );
    let _ = writeln!(s, "Command: `{command}`\n");
    s.push_str("| benchmark | p50 | p95 | criterion mean [95% CI] | throughput | brute-force bound | notes |\n");
    s.push_str("| --- | --- | --- | --- | --- | --- | --- |\n");
    let mut ids: Vec<&str> = results.iter().map(|m| m.id.as_str()).collect();
    for id in printed
        .percentiles
        .keys()
        .chain(printed.scanned.keys())
        .chain(printed.notes.keys())
    {
        if !ids.contains(&id.as_str()) {
            ids.push(id);
        }
    }
    ids.sort_unstable();
    ids.dedup();
    for id in ids {
        let m = results.iter().find(|m| m.id == id);
        let (p50, p95) = match (printed.percentiles.get(id), m) {
            (Some((p50, p95, _)), _) => (time(*p50), time(*p95)),
            (None, Some(m)) => (
                format!("~{}", time(m.sample_p50)),
                format!("~{}", time(m.sample_p95)),
            ),
            (None, None) => (String::new(), String::new()),
        };
        let mean = m.map_or(String::new(), |m| {
            format!("{} [{}, {}]", time(m.mean), time(m.lower), time(m.upper))
        });
        let thrpt = match m.and_then(|m| m.throughput.map(|t| (t, m.mean))) {
            Some((Throughput::Elements(n), mean)) => format!("{}/s", count(n / (mean / 1e9))),
            Some((Throughput::Bytes(b), mean)) => format!("{:.2} GB/s", b / mean),
            None => String::new(),
        };
        let bound = printed.scanned.get(id).map_or(String::new(), |bytes| {
            let ns = bytes / bandwidth * 1e9;
            let measured = printed
                .percentiles
                .get(id)
                .map(|p| p.0)
                .or(m.map(|m| m.mean));
            match measured {
                Some(t) => format!("{} ({:.1}x)", time(ns), t / ns),
                None => time(ns),
            }
        });
        let mut notes: Vec<String> = printed.notes.get(id).cloned().unwrap_or_default();
        if let Some((_, _, n)) = printed.percentiles.get(id) {
            notes.push(format!("p50/p95 of {n} single calls"));
        }
        let _ = writeln!(
            s,
            "| {id} | {p50} | {p95} | {mean} | {thrpt} | {bound} | {} |",
            notes.join("; ")
        );
    }
    if printed.percentiles.len() < results.len() {
        s.push_str(
            "\n`~`: p50/p95 over criterion's per-sample means (each sample averages many \
             iterations), not over single calls.\n",
        );
    }
    s
}

/// Replaces (or appends) the generated block of `key` in `doc`.
fn splice(doc: &str, key: &str, block: &str) -> String {
    let begin = format!("<!-- xtask bench: {key} -->");
    let end = format!("<!-- /xtask bench: {key} -->");
    let fresh = format!("{begin}\n{}\n{end}", block.trim_end());
    match (doc.find(&begin), doc.find(&end)) {
        (Some(b), Some(e)) if b < e => {
            format!("{}{fresh}{}", &doc[..b], &doc[e + end.len()..])
        }
        _ => format!("{}\n\n## {key}\n\n{fresh}\n", doc.trim_end()),
    }
}

fn time(ns: f64) -> String {
    if !ns.is_finite() {
        return "n/a".into();
    }
    if ns >= 1e9 {
        format!("{:.2} s", ns / 1e9)
    } else if ns >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.1} µs", ns / 1e3)
    } else {
        format!("{ns:.0} ns")
    }
}

fn count(per_s: f64) -> String {
    if per_s >= 1e6 {
        format!("{:.2}M", per_s / 1e6)
    } else if per_s >= 1e3 {
        format!("{:.1}k", per_s / 1e3)
    } else {
        format!("{per_s:.1}")
    }
}

/// Reads a streaming pass over 256 MiB the way a vector scan does (eight independent sums),
/// best of five: bytes per second on one thread.
fn measure_bandwidth() -> f64 {
    let data: Vec<f32> = (0..64 * 1024 * 1024).map(|i| (i % 7) as f32).collect();
    let mut best = f64::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        let mut acc = [0.0f32; 8];
        for c in data.chunks_exact(8) {
            for i in 0..8 {
                acc[i] += c[i];
            }
        }
        std::hint::black_box(acc);
        best = best.min(t.elapsed().as_secs_f64());
    }
    (data.len() * 4) as f64 / best
}

/// What the table says about the machine.
#[derive(Debug)]
struct Machine {
    cpu: String,
    cores: usize,
    memory_gib: f64,
}

impl Machine {
    fn read() -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name")?.split_once(':'))
            .map_or("unknown CPU".into(), |(_, v)| v.trim().to_owned());
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let kib: f64 = meminfo
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0.0);
        Self {
            cpu,
            cores: std::thread::available_parallelism().map_or(0, usize::from),
            memory_gib: kib / 1024.0 / 1024.0,
        }
    }

    fn describe(&self) -> String {
        format!(
            "{}, {} cores, {:.0} GiB",
            self.cpu, self.cores, self.memory_gib
        )
    }
}

fn machine_load() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn git_commit() -> String {
    let out = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    let head = out(&["rev-parse", "--short", "HEAD"]).unwrap_or_else(|| "unknown".into());
    let dirty =
        out(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    if dirty {
        format!("{head}, with uncommitted changes")
    } else {
        head
    }
}

fn target_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printed_lines_are_parsed_and_other_lines_ignored() {
        let lines: Vec<String> = [
            "built 10k: 10000 memories",
            "ava-bench: percentiles a/b/semantic p50=0.117ms p95=0.157ms n=1000",
            "ava-bench: scanned a/b/semantic bytes=1536000",
            "ava-bench: note a/b/semantic recall@10=0.98 (HNSW vs exact)",
            "ava-bench: percentiles broken p50=x",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        let p = Printed::parse(&lines);
        assert_eq!(p.percentiles["a/b/semantic"], (117_000.0, 157_000.0, 1000));
        assert_eq!(p.scanned["a/b/semantic"], 1_536_000.0);
        assert_eq!(
            p.notes["a/b/semantic"],
            vec!["recall@10=0.98 (HNSW vs exact)".to_owned()]
        );
        assert!(!p.percentiles.contains_key("broken"));
    }

    #[test]
    fn splice_replaces_its_own_block_and_appends_a_missing_one() {
        let doc = "# B\n\nintro\n<!-- xtask bench: k -->\nold\n<!-- /xtask bench: k -->\nafter\n";
        let out = splice(doc, "k", "new table\n");
        assert_eq!(
            out,
            "# B\n\nintro\n<!-- xtask bench: k -->\nnew table\n<!-- /xtask bench: k -->\nafter\n"
        );
        let appended = splice(&out, "other", "t");
        assert!(appended.starts_with(&out.trim_end().to_owned()));
        assert!(appended.ends_with(
            "## other\n\n<!-- xtask bench: other -->\nt\n<!-- /xtask bench: other -->\n"
        ));
    }

    #[test]
    fn rows_show_percentiles_bound_and_throughput() {
        let machine = Machine {
            cpu: "CPU".into(),
            cores: 2,
            memory_gib: 24.0,
        };
        let results = vec![
            Measured {
                id: "s/ingest".into(),
                mean: 200e6,
                lower: 190e6,
                upper: 210e6,
                sample_p50: 199e6,
                sample_p95: 209e6,
                throughput: Some(Throughput::Elements(10_000.0)),
            },
            Measured {
                id: "s/semantic".into(),
                mean: 130e3,
                lower: 120e3,
                upper: 140e3,
                sample_p50: 125e3,
                sample_p95: 139e3,
                throughput: None,
            },
        ];
        let printed = Printed::parse(&[
            "ava-bench: percentiles s/semantic p50=0.120ms p95=0.200ms n=1000".to_owned(),
            "ava-bench: scanned s/semantic bytes=1500000".to_owned(),
        ]);
        let out = render(
            &machine,
            Some(0.5),
            15e9,
            "cargo bench",
            false,
            &results,
            &printed,
        );
        assert!(
            out.contains("| s/ingest | ~199.00 ms | ~209.00 ms | 200.00 ms [190.00 ms, 210.00 ms] | 50.0k/s |"),
            "{out}"
        );
        assert!(
            out.contains("| s/semantic | 120.0 µs | 200.0 µs | 130.0 µs [120.0 µs, 140.0 µs] |  | 100.0 µs (1.2x) | p50/p95 of 1000 single calls |"),
            "{out}"
        );
    }
}
