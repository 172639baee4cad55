//! What a running `ava` counts, for Prometheus: one process-wide set of counters and
//! histograms the front doors add to, rendered in Prometheus' text format by [`render`].
//! No label names a person: the labels are the front door and the outcome class.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A front door a request came in by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Door {
    /// The OpenAI-compatible proxy (`/v1/`).
    Proxy,
    /// MCP over HTTP (`/mcp`).
    Mcp,
    /// The inspector (`/inspect`).
    Inspector,
    /// Anything else (refused before a door: a wrong host, no token, an unknown path).
    Other,
    /// A Telegram message answered by `ava run` (refused: `client_error`; the model or the
    /// memory failed: `server_error`).
    Telegram,
}

impl Door {
    const ALL: [Door; 5] = [
        Door::Proxy,
        Door::Mcp,
        Door::Inspector,
        Door::Other,
        Door::Telegram,
    ];

    fn name(self) -> &'static str {
        match self {
            Door::Proxy => "proxy",
            Door::Mcp => "mcp",
            Door::Inspector => "inspector",
            Door::Other => "other",
            Door::Telegram => "telegram",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// How a request ended, by its HTTP status.
const OUTCOMES: [&str; 3] = ["ok", "client_error", "server_error"];

fn outcome(status: u16) -> usize {
    match status {
        ..400 => 0,
        400..500 => 1,
        _ => 2,
    }
}

/// Upper bounds of the latency buckets, in seconds.
const BUCKETS: [f64; 14] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
];

/// A latency histogram: a count per bucket (not cumulative; [`render`] sums them), the count
/// and the sum in microseconds.
struct Histogram {
    buckets: [AtomicU64; BUCKETS.len()],
    count: AtomicU64,
    sum_micros: AtomicU64,
}

impl Histogram {
    const fn new() -> Self {
        Self {
            buckets: [const { AtomicU64::new(0) }; BUCKETS.len()],
            count: AtomicU64::new(0),
            sum_micros: AtomicU64::new(0),
        }
    }

    fn observe(&self, took: Duration) {
        let seconds = took.as_secs_f64();
        if let Some(i) = BUCKETS.iter().position(|&le| seconds <= le) {
            self.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        let micros = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        self.sum_micros.fetch_add(micros, Ordering::Relaxed);
    }

    fn render(&self, out: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        let mut cumulative = 0;
        for (le, n) in BUCKETS.iter().zip(&self.buckets) {
            cumulative += n.load(Ordering::Relaxed);
            let _ = writeln!(
                out,
                "{name}_bucket{{{labels}{sep}le=\"{le}\"}} {cumulative}"
            );
        }
        let count = self.count.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {count}");
        let sum = self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        let braces = |s: &str| {
            if s.is_empty() {
                String::new()
            } else {
                format!("{{{s}}}")
            }
        };
        let _ = writeln!(out, "{name}_sum{} {sum}", braces(labels));
        let _ = writeln!(out, "{name}_count{} {count}", braces(labels));
    }
}

/// Every metric of the process.
struct Metrics {
    requests: [[AtomicU64; OUTCOMES.len()]; Door::ALL.len()],
    request_seconds: [Histogram; Door::ALL.len()],
    prompt_seconds: Histogram,
    hydrate_seconds: Histogram,
    compile_seconds: Histogram,
    upstream_seconds: Histogram,
    upstream_errors: AtomicU64,
    prompts: AtomicU64,
    prompt_tokens: AtomicU64,
    cached_prefix_tokens: AtomicU64,
    exchanges_kept: AtomicU64,
    store_write_failures: AtomicU64,
    facts_learned: AtomicU64,
}

static METRICS: Metrics = Metrics {
    requests: [const { [const { AtomicU64::new(0) }; OUTCOMES.len()] }; Door::ALL.len()],
    request_seconds: [const { Histogram::new() }; Door::ALL.len()],
    prompt_seconds: Histogram::new(),
    hydrate_seconds: Histogram::new(),
    compile_seconds: Histogram::new(),
    upstream_seconds: Histogram::new(),
    upstream_errors: AtomicU64::new(0),
    prompts: AtomicU64::new(0),
    prompt_tokens: AtomicU64::new(0),
    cached_prefix_tokens: AtomicU64::new(0),
    exchanges_kept: AtomicU64::new(0),
    store_write_failures: AtomicU64::new(0),
    facts_learned: AtomicU64::new(0),
};

/// A request by `door` ended with HTTP `status` after `took`.
pub(crate) fn request(door: Door, status: u16, took: Duration) {
    METRICS.requests[door.index()][outcome(status)].fetch_add(1, Ordering::Relaxed);
    METRICS.request_seconds[door.index()].observe(took);
}

/// A prompt was built (in `took`, when measured apart), of `tokens` tokens of which `cached`
/// repeat the start of the scope's previous prompt.
pub(crate) fn prompt(took: Option<Duration>, tokens: u32, cached: u32) {
    if let Some(took) = took {
        METRICS.prompt_seconds.observe(took);
    }
    METRICS.prompts.fetch_add(1, Ordering::Relaxed);
    METRICS
        .prompt_tokens
        .fetch_add(u64::from(tokens), Ordering::Relaxed);
    METRICS
        .cached_prefix_tokens
        .fetch_add(u64::from(cached), Ordering::Relaxed);
}

/// A prompt's context was gathered in `times.hydrate` and compiled in `times.compile`.
pub(crate) fn prepared(times: hydrate::PrepareTimes) {
    METRICS.hydrate_seconds.observe(times.hydrate);
    METRICS.compile_seconds.observe(times.compile);
}

/// The upstream (or the chat model) started answering after `took`, or failed (`ok` false).
pub(crate) fn upstream(took: Duration, ok: bool) {
    METRICS.upstream_seconds.observe(took);
    if !ok {
        METRICS.upstream_errors.fetch_add(1, Ordering::Relaxed);
    }
}

/// An exchange was written to the store (`ok`), or writing it failed.
pub(crate) fn exchange_kept(ok: bool) {
    let counter = if ok {
        &METRICS.exchanges_kept
    } else {
        &METRICS.store_write_failures
    };
    counter.fetch_add(1, Ordering::Relaxed);
}

/// `n` facts were learned from an exchange.
pub(crate) fn facts_learned(n: usize) {
    METRICS
        .facts_learned
        .fetch_add(u64::try_from(n).unwrap_or(u64::MAX), Ordering::Relaxed);
}

/// Each metric's name, type and help, in the order [`render`] writes them (the docs list
/// them; a test checks they do).
pub(crate) const NAMES: [(&str, &str, &str); 13] = [
    (
        "ava_requests_total",
        "counter",
        "HTTP requests answered, by front door and outcome (ok, client_error, server_error).",
    ),
    (
        "ava_request_seconds",
        "histogram",
        "Time from a request's arrival to its answer's start (for Telegram, to the reply's delivery), by front door.",
    ),
    (
        "ava_prompt_seconds",
        "histogram",
        "Time to build a prompt: hydrate, compile and lay it out (the proxy's).",
    ),
    (
        "ava_hydrate_seconds",
        "histogram",
        "Time to gather and rank a prompt's context (hydrate), by every door.",
    ),
    (
        "ava_compile_seconds",
        "histogram",
        "Time to fit a prompt's context to its budget and lay out its messages (compile), by every door.",
    ),
    (
        "ava_upstream_seconds",
        "histogram",
        "Time until the upstream started answering, or the chat model answered (or either failed).",
    ),
    (
        "ava_upstream_errors_total",
        "counter",
        "Upstream calls that could not be made or timed out.",
    ),
    ("ava_prompts_total", "counter", "Prompts built."),
    (
        "ava_prompt_tokens_total",
        "counter",
        "Tokens of the prompts built.",
    ),
    (
        "ava_cached_prefix_tokens_total",
        "counter",
        "Tokens of the prompts built that repeat the start of the scope's previous prompt (what a provider's prompt cache can serve).",
    ),
    (
        "ava_exchanges_kept_total",
        "counter",
        "Exchanges written to the store.",
    ),
    (
        "ava_store_write_failures_total",
        "counter",
        "Exchanges the store failed to write.",
    ),
    (
        "ava_facts_learned_total",
        "counter",
        "Facts learned from exchanges and stored.",
    ),
];

/// Every metric in Prometheus' text format (version 0.0.4), then `extra` lines (gauges read
/// at scrape time).
pub(crate) fn render(extra: &str) -> String {
    let m = &METRICS;
    let mut out = String::new();
    let head = |out: &mut String, i: usize| {
        let (name, kind, help) = NAMES[i];
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    };
    let counter = |out: &mut String, i: usize, value: &AtomicU64| {
        head(out, i);
        let _ = writeln!(out, "{} {}", NAMES[i].0, value.load(Ordering::Relaxed));
    };
    head(&mut out, 0);
    for door in Door::ALL {
        for (o, name) in OUTCOMES.iter().enumerate() {
            let n = m.requests[door.index()][o].load(Ordering::Relaxed);
            let _ = writeln!(
                out,
                "ava_requests_total{{door=\"{}\",outcome=\"{name}\"}} {n}",
                door.name()
            );
        }
    }
    head(&mut out, 1);
    for door in Door::ALL {
        m.request_seconds[door.index()].render(
            &mut out,
            "ava_request_seconds",
            &format!("door=\"{}\"", door.name()),
        );
    }
    head(&mut out, 2);
    m.prompt_seconds.render(&mut out, "ava_prompt_seconds", "");
    head(&mut out, 3);
    m.hydrate_seconds
        .render(&mut out, "ava_hydrate_seconds", "");
    head(&mut out, 4);
    m.compile_seconds
        .render(&mut out, "ava_compile_seconds", "");
    head(&mut out, 5);
    m.upstream_seconds
        .render(&mut out, "ava_upstream_seconds", "");
    counter(&mut out, 6, &m.upstream_errors);
    counter(&mut out, 7, &m.prompts);
    counter(&mut out, 8, &m.prompt_tokens);
    counter(&mut out, 9, &m.cached_prefix_tokens);
    counter(&mut out, 10, &m.exchanges_kept);
    counter(&mut out, 11, &m.store_write_failures);
    counter(&mut out, 12, &m.facts_learned);
    out.push_str(extra);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_histogram_renders_cumulative_buckets_its_count_and_sum() {
        let h = Histogram::new();
        for ms in [3, 30, 30, 700, 200_000] {
            h.observe(Duration::from_millis(ms));
        }
        let mut out = String::new();
        h.render(&mut out, "x_seconds", "door=\"mcp\"");
        let value = |series: &str| -> f64 {
            out.lines()
                .find_map(|l| l.strip_prefix(series))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or_else(|| panic!("no {series} in {out}"))
        };
        assert_eq!(value("x_seconds_bucket{door=\"mcp\",le=\"0.005\"}"), 1.0);
        assert_eq!(value("x_seconds_bucket{door=\"mcp\",le=\"0.05\"}"), 3.0);
        assert_eq!(value("x_seconds_bucket{door=\"mcp\",le=\"1\"}"), 4.0);
        // 200 s is beyond the last bound: only +Inf and the count hold it.
        assert_eq!(value("x_seconds_bucket{door=\"mcp\",le=\"120\"}"), 4.0);
        assert_eq!(value("x_seconds_bucket{door=\"mcp\",le=\"+Inf\"}"), 5.0);
        assert_eq!(value("x_seconds_count{door=\"mcp\"}"), 5.0);
        assert!((value("x_seconds_sum{door=\"mcp\"}") - 200.763).abs() < 1e-9);
    }

    #[test]
    fn every_metric_is_rendered_and_listed_in_the_docs() {
        let docs = include_str!("../../../docs/serve.md");
        let text = render("");
        for (name, kind, help) in NAMES {
            assert!(text.contains(&format!("# TYPE {name} {kind}\n")), "{name}");
            assert!(text.contains(&format!("# HELP {name} {help}\n")), "{name}");
            assert!(
                docs.contains(&format!("`{name}`")),
                "docs/serve.md lists {name}"
            );
        }
    }

    #[test]
    fn outcomes_follow_the_status_class() {
        assert_eq!(OUTCOMES[outcome(200)], "ok");
        assert_eq!(OUTCOMES[outcome(304)], "ok");
        assert_eq!(OUTCOMES[outcome(401)], "client_error");
        assert_eq!(OUTCOMES[outcome(502)], "server_error");
    }
}
