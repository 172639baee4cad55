//! `ava serve`'s proxy under load: requests per second and the latency it adds over calling
//! the same loopback fake upstream directly, at 1, 8 and 32 concurrent clients.
//!
//! The fake upstream (hyper, in this process) answers every chat completion at once with the
//! same small completion. `ava serve` (this build's binary) runs on a fresh store with the
//! embedder `AVA_EMBEDDER` names (default `auto`: the local model when installed), no fact
//! learning and no pruning; each client is a user of its own with a short history stored
//! through the proxy first. Each level runs at most `AVA_BENCH_REQUESTS` requests (default
//! 400) or 20 s, first directly, then through the proxy. Printed for `cargo xtask bench`:
//! percentiles per path and level, and notes with requests/s and the added p50/p95.
//!
//! Then replicas (issue 56, item 5): `ava serve` processes on one store, the clients'
//! requests shared between them in turn (a load balancer), each request hydrating a prompt and
//! storing its exchange: `AVA_BENCH_CLIENTS` clients (default 16) of `AVA_BENCH_CALLS` calls
//! each (default 100), beside the same clients calling the upstream alone; one process on a
//! SQLite file, and 1, 2 and 4 on one Postgres when `MEMORY_PG_URL` is set (a fresh schema
//! each, dropped afterwards), over TLS when `MEMORY_PG_TLS_URL` is set too (the server behind
//! `.ci/pgbouncer-tls.sh`). After each run the store is counted: every answered request must
//! have left its two turns (`lost` is what is missing).
//!
//! Between the two, one client's message of `AVA_BENCH_HUGE_MIB` MiB (default 4) of
//! distinct words, and another client's latency while it runs (issue 54, D1).

use std::convert::Infallible;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncBufReadExt, BufReader};

/// Longest a level runs, per path.
const LEVEL_TIME: Duration = Duration::from_secs(20);
const LEVELS: [usize; 3] = [1, 8, 32];
/// Exchanges stored for each user before measuring.
const HISTORY: usize = 12;

const ANSWER: &str = r#"{"id":"chatcmpl-bench","object":"chat.completion","created":1767225600,"model":"gpt-bench","choices":[{"index":0,"message":{"role":"assistant","content":"Sure, your sister Maya lives in Lisbon and you planned to visit her in May."},"finish_reason":"stop"}],"usage":{"prompt_tokens":120,"completion_tokens":18,"total_tokens":138}}"#;

fn token(i: usize) -> String {
    format!("bench-token-{i:04}-0123456789abcdef0123456789")
}

/// The fake upstream: every request is answered with [`ANSWER`] after its body is read.
async fn upstream() -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("bind the fake upstream: {e}"));
    let addr = listener
        .local_addr()
        .unwrap_or_else(|e| panic!("address: {e}"));
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            tokio::spawn(async move {
                let service = service_fn(
                    |request: hyper::Request<hyper::body::Incoming>| async move {
                        let _ = request.into_body().collect().await;
                        let mut response =
                            hyper::Response::new(Full::new(Bytes::from_static(ANSWER.as_bytes())));
                        response.headers_mut().insert(
                            hyper::header::CONTENT_TYPE,
                            hyper::header::HeaderValue::from_static("application/json"),
                        );
                        Ok::<_, Infallible>(response)
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

/// The token file of users `0..n` (token [`token`]`(i)`, user `user<i>`) in `dir`.
fn tokens(dir: &Path, n: usize) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let tokens: Vec<serde_json::Value> = (0..n)
        .map(
            |i| serde_json::json!({"token": token(i), "user": format!("user{i}"), "chat": "bench"}),
        )
        .collect();
    let file = dir.join("tokens.json");
    std::fs::write(&file, serde_json::json!({"tokens": tokens}).to_string())
        .unwrap_or_else(|e| panic!("write the tokens: {e}"));
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600))
        .unwrap_or_else(|e| panic!("chmod: {e}"));
    file
}

/// `ava` on the store `db` with the embedder `AVA_EMBEDDER` names (default `auto`).
fn ava(db: &str) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_ava"));
    command.env("AVA_DB", db).env(
        "AVA_EMBEDDER",
        std::env::var("AVA_EMBEDDER").unwrap_or_else(|_| "auto".into()),
    );
    command
}

/// Starts `ava serve` on the store `db` with the token file `tokens` in front of
/// `upstream`; returns the child, its base URL and the embedder line it printed.
async fn serve(
    db: &str,
    tokens: &Path,
    upstream: std::net::SocketAddr,
) -> (tokio::process::Child, String, String) {
    let mut child = ava(db)
        .env("RUST_LOG", "error")
        .args([
            "serve",
            "--addr",
            "127.0.0.1:0",
            "--no-facts",
            "--no-prune",
            "--tokens",
        ])
        .arg(tokens)
        .arg("--upstream")
        .arg(format!("http://{upstream}/v1"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("start ava serve: {e}"));
    let Some(stderr) = child.stderr.take() else {
        panic!("no stderr");
    };
    let mut lines = BufReader::new(stderr).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        if let Some((_, rest)) = line.split_once("listening on ") {
            let url = rest
                .split_whitespace()
                .next()
                .unwrap_or_default()
                .to_owned();
            let embedder = line.rsplit("; ").next().unwrap_or_default().to_owned();
            tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
            return (child, url, embedder);
        }
    }
    panic!("ava serve did not start");
}

fn body(user: usize, n: usize) -> String {
    serde_json::json!({"model": "gpt-bench", "messages": [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": format!("Message {n} of user {user}: what did I say about my sister Maya and the trip to Lisbon in May?")},
    ]})
    .to_string()
}

/// What one level measured.
struct Level {
    /// Each answered request's latency.
    times: Vec<Duration>,
    wall: Duration,
    /// Requests that got an error or a status other than success.
    failed: usize,
}

/// Runs `clients` clients (as users 0..clients) until `total` requests or [`LEVEL_TIME`],
/// request `n` going to `urls[n % urls.len()]` (a load balancer taking them in turn).
async fn level(urls: &[String], clients: usize, total: usize) -> Level {
    let client = reqwest::Client::new();
    let urls = Arc::new(urls.to_vec());
    let issued = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for user in 0..clients {
        let (client, urls, issued) = (client.clone(), Arc::clone(&urls), Arc::clone(&issued));
        tasks.push(tokio::spawn(async move {
            let (mut times, mut failed) = (Vec::new(), 0);
            loop {
                let n = issued.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if n >= total || start.elapsed() >= LEVEL_TIME {
                    return (times, failed);
                }
                let t = Instant::now();
                let response = client
                    .post(urls[n % urls.len()].as_str())
                    .bearer_auth(token(user))
                    .header("content-type", "application/json")
                    .body(body(user, n))
                    .send()
                    .await;
                match response {
                    Ok(r) if r.status().is_success() => {
                        let _ = r.bytes().await;
                        times.push(t.elapsed());
                    }
                    _ => failed += 1,
                }
            }
        }));
    }
    let (mut times, mut failed) = (Vec::new(), 0);
    for t in tasks {
        let (t, f) = t.await.unwrap_or_else(|e| panic!("client: {e}"));
        times.extend(t);
        failed += f;
    }
    Level {
        times,
        wall: start.elapsed(),
        failed,
    }
}

fn percentile(sorted: &[Duration], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[i.min(sorted.len() - 1)].as_secs_f64() * 1e3
}

/// A request whose user message is `bytes` bytes of distinct words (`w<hex>`), and how
/// many words it holds.
fn huge_body(bytes: usize) -> (String, usize) {
    use std::fmt::Write as _;
    let mut text = String::with_capacity(bytes + 32);
    let mut words = 0_u64;
    while text.len() < bytes {
        let _ = write!(
            text,
            "w{:x} ",
            words.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 24
        );
        words += 1;
    }
    let body = serde_json::json!({"model": "gpt-bench", "messages": [
        {"role": "user", "content": text},
    ]});
    (
        body.to_string(),
        usize::try_from(words).unwrap_or(usize::MAX),
    )
}

/// Issue 54's D1: one client (user 0) sends a message of `mib` MiB of distinct words
/// through the proxy at `url` while another (user 1) keeps sending small requests; prints
/// the other client's latencies meanwhile, and how long the huge one took.
async fn huge_query(url: &str, mib: usize) {
    let client = reqwest::Client::new();
    let (huge, words) = huge_body(mib << 20);
    let big = {
        let (client, url) = (client.clone(), url.to_owned());
        tokio::spawn(async move {
            let t = Instant::now();
            let status = client
                .post(url)
                .bearer_auth(token(0))
                .header("content-type", "application/json")
                .body(huge)
                .timeout(Duration::from_secs(900))
                .send()
                .await
                .map(|r| r.status().as_u16().to_string())
                .unwrap_or_else(|e| format!("error: {e}"));
            (status, t.elapsed())
        })
    };
    let (mut times, mut failed, mut n) = (Vec::new(), 0, 0);
    while !big.is_finished() {
        let t = Instant::now();
        let response = client
            .post(url)
            .bearer_auth(token(1))
            .header("content-type", "application/json")
            .body(body(1, n))
            .timeout(Duration::from_secs(60))
            .send()
            .await;
        n += 1;
        match response {
            Ok(r) if r.status().is_success() => {
                let _ = r.bytes().await;
                times.push(t.elapsed());
            }
            _ => failed += 1,
        }
    }
    let (status, took) = big
        .await
        .unwrap_or_else(|e| panic!("the huge request: {e}"));
    times.sort_unstable();
    let id = "serve/huge_message_other_client";
    println!(
        "ava-bench: percentiles {id} p50={:.3}ms p95={:.3}ms n={}",
        percentile(&times, 0.5),
        percentile(&times, 0.95),
        times.len()
    );
    println!(
        "ava-bench: note {id} meanwhile one client's {mib} MiB message of {words} distinct words took {:.1} s (status {status}); the other client's slowest call {:.0} ms, {failed} failed",
        took.as_secs_f64(),
        percentile(&times, 1.0)
    );
}

/// `name`'s value in the environment as a number, else `default`.
fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// How many memories the store `db` holds, as `ava export --all` counts them.
async fn stored(db: &str) -> usize {
    let out = ava(db)
        .args(["export", "--all"])
        .stderr(Stdio::inherit())
        .output()
        .await
        .unwrap_or_else(|e| panic!("run ava export: {e}"));
    assert!(out.status.success(), "ava export --all failed");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .count()
        .saturating_sub(1)
}

/// Runs `sql` on the Postgres server at `url`.
async fn run_sql(url: &str, sql: &str) {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("connect to {url}: {e}"));
    let task = tokio::spawn(conn);
    client
        .batch_execute(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    drop(client);
    let _ = task.await;
}

/// What a replica run is measured against: the clients calling the upstream alone.
struct Replicas {
    clients: usize,
    total: usize,
    direct: (f64, f64),
}

/// `replicas` `ava serve` processes on the store `db` (fresh), the clients taking them in
/// turn: prints the percentiles, throughput, overhead over the upstream alone, failures and
/// memories lost.
async fn replicas(
    id: &str,
    db: &str,
    replicas: usize,
    dir: &Path,
    upstream: std::net::SocketAddr,
    run_of: &Replicas,
) {
    let Replicas {
        clients,
        total,
        direct: (d50, d95),
    } = *run_of;
    let tokens = tokens(dir, clients);
    let mut children = Vec::new();
    let mut urls = Vec::new();
    for _ in 0..replicas {
        let (child, url, _) = serve(db, &tokens, upstream).await;
        children.push(child);
        urls.push(format!("{url}/v1/chat/completions"));
    }
    let history = level(&urls, clients, clients * HISTORY).await;
    let run = level(&urls, clients, total).await;
    let mut times = run.times;
    times.sort_unstable();
    let (p50, p95) = (percentile(&times, 0.5), percentile(&times, 0.95));
    for mut child in children {
        let _ = child.kill().await;
    }
    let answered = history.times.len() + times.len();
    let counted = stored(db).await;
    let lost = (2 * answered).saturating_sub(counted);
    println!(
        "ava-bench: percentiles {id} p50={p50:.3}ms p95={p95:.3}ms n={}",
        times.len()
    );
    println!(
        "ava-bench: note {id} {:.0} requests/s; {clients} clients, {replicas} replica(s); adds {:.1} / {:.1} ms (p50 / p95) over the upstream alone; failed {}, lost {lost} ({counted} memories for {answered} answered requests)",
        times.len() as f64 / run.wall.as_secs_f64(),
        p50 - d50,
        p95 - d95,
        history.failed + run.failed,
    );
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("runtime: {e}"));
    let total: usize = std::env::var("AVA_BENCH_REQUESTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(400);
    runtime.block_on(async {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("temp dir: {e}"));
        let upstream = upstream().await;
        let max = *LEVELS.iter().max().unwrap_or(&1);
        let db = dir.path().join("bench.db").display().to_string();
        let (child, url, embedder) = serve(&db, &tokens(dir.path(), max), upstream).await;
        let proxy = vec![format!("{url}/v1/chat/completions")];
        let direct = vec![format!("http://{upstream}/v1/chat/completions")];
        // Each user's history, stored through the proxy.
        level(&proxy, max, max * HISTORY).await;
        for clients in LEVELS {
            let mut p50s = Vec::new();
            for (path, urls) in [("direct", &direct), ("proxy", &proxy)] {
                let Level { mut times, wall, failed } = level(urls, clients, total).await;
                assert_eq!(failed, 0, "{path}: {failed} requests failed");
                times.sort_unstable();
                let (p50, p95) = (percentile(&times, 0.5), percentile(&times, 0.95));
                let id = format!("serve/{path}_{clients:02}_clients");
                println!(
                    "ava-bench: percentiles {id} p50={p50:.3}ms p95={p95:.3}ms n={}",
                    times.len()
                );
                println!(
                    "ava-bench: note {id} {:.0} requests/s",
                    times.len() as f64 / wall.as_secs_f64()
                );
                p50s.push((p50, p95));
            }
            if let [(d50, d95), (p50, p95)] = p50s[..] {
                println!(
                    "ava-bench: note serve/proxy_{clients:02}_clients adds {:.2} ms at p50 and {:.2} ms at p95 over direct",
                    p50 - d50,
                    p95 - d95
                );
            }
        }
        println!("ava-bench: note serve/proxy_01_clients store: {embedder}; {HISTORY} stored exchanges per user before measuring, each proxied request stores 2 more");
        let mib = std::env::var("AVA_BENCH_HUGE_MIB")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(4);
        huge_query(&proxy[0], mib).await;
        drop(child);

        // Replicas on one store, against the same clients calling the upstream alone.
        let clients = env_number("AVA_BENCH_CLIENTS", 16);
        let total = clients * env_number("AVA_BENCH_CALLS", 100);
        let mut alone = level(&direct, clients, total).await;
        alone.times.sort_unstable();
        let run_of = Replicas {
            clients,
            total,
            direct: (percentile(&alone.times, 0.5), percentile(&alone.times, 0.95)),
        };
        println!(
            "ava-bench: note serve/replicas_sqlite_1 the upstream alone: p50 {:.2} ms, p95 {:.2} ms, {:.0} requests/s with {clients} clients",
            run_of.direct.0,
            run_of.direct.1,
            alone.times.len() as f64 / alone.wall.as_secs_f64()
        );
        let one = dir.path().join("replicas.db").display().to_string();
        replicas("serve/replicas_sqlite_1", &one, 1, dir.path(), upstream, &run_of).await;
        match std::env::var("MEMORY_PG_URL") {
            Ok(url) if !url.trim().is_empty() => {
                // Over TLS when the TLS front is there; schemas are dropped through the plain URL.
                let tls = std::env::var("MEMORY_PG_TLS_URL").ok().filter(|u| !u.trim().is_empty());
                let (kind, served) = match &tls {
                    Some(tls) => ("postgres_tls", tls.clone()),
                    None => ("postgres", url.clone()),
                };
                for n in [1, 2, 4] {
                    let schema = format!("ava_bench_replicas_{}_{n}", std::process::id());
                    let sep = if served.contains('?') { '&' } else { '?' };
                    let db = format!("{served}{sep}schema={schema}");
                    replicas(&format!("serve/replicas_{kind}_{n}"), &db, n, dir.path(), upstream, &run_of).await;
                    run_sql(&url, &format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE")).await;
                }
            }
            _ => println!("ava-bench: note serve/replicas_sqlite_1 Postgres replicas skipped: MEMORY_PG_URL is not set"),
        }
    });
}
