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

/// Starts `ava serve` on a fresh store in `dir` in front of `upstream`; returns the child,
/// its base URL and the embedder line it printed.
async fn serve(
    dir: &Path,
    upstream: std::net::SocketAddr,
) -> (tokio::process::Child, String, String) {
    use std::os::unix::fs::PermissionsExt;
    let tokens: Vec<serde_json::Value> = (0..*LEVELS.iter().max().unwrap_or(&1))
        .map(
            |i| serde_json::json!({"token": token(i), "user": format!("user{i}"), "chat": "bench"}),
        )
        .collect();
    let file = dir.join("tokens.json");
    std::fs::write(&file, serde_json::json!({"tokens": tokens}).to_string())
        .unwrap_or_else(|e| panic!("write the tokens: {e}"));
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600))
        .unwrap_or_else(|e| panic!("chmod: {e}"));
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_ava"))
        .env("AVA_DB", dir.join("bench.db"))
        .env(
            "AVA_EMBEDDER",
            std::env::var("AVA_EMBEDDER").unwrap_or_else(|_| "auto".into()),
        )
        .env("RUST_LOG", "error")
        .args([
            "serve",
            "--addr",
            "127.0.0.1:0",
            "--no-facts",
            "--no-prune",
            "--tokens",
        ])
        .arg(&file)
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

/// Runs `clients` clients against `url` (as users 0..clients) until `total` requests or
/// [`LEVEL_TIME`]; returns each request's latency and the wall time.
async fn level(url: &str, clients: usize, total: usize) -> (Vec<Duration>, Duration) {
    let client = reqwest::Client::new();
    let url = Arc::new(url.to_owned());
    let issued = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for user in 0..clients {
        let (client, url, issued) = (client.clone(), Arc::clone(&url), Arc::clone(&issued));
        tasks.push(tokio::spawn(async move {
            let mut times = Vec::new();
            loop {
                let n = issued.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if n >= total || start.elapsed() >= LEVEL_TIME {
                    return times;
                }
                let t = Instant::now();
                let response = client
                    .post(url.as_str())
                    .bearer_auth(token(user))
                    .header("content-type", "application/json")
                    .body(body(user, n))
                    .send()
                    .await
                    .unwrap_or_else(|e| panic!("request: {e}"));
                assert!(
                    response.status().is_success(),
                    "status {}",
                    response.status()
                );
                let _ = response.bytes().await;
                times.push(t.elapsed());
            }
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap_or_else(|e| panic!("client: {e}")));
    }
    (all, start.elapsed())
}

fn percentile(sorted: &[Duration], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[i.min(sorted.len() - 1)].as_secs_f64() * 1e3
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
        let (_child, url, embedder) = serve(dir.path(), upstream).await;
        let proxy = format!("{url}/v1/chat/completions");
        let direct = format!("http://{upstream}/v1/chat/completions");
        // Each user's history, stored through the proxy.
        let max = *LEVELS.iter().max().unwrap_or(&1);
        level(&proxy, max, max * HISTORY).await;
        for clients in LEVELS {
            let mut p50s = Vec::new();
            for (path, url) in [("direct", &direct), ("proxy", &proxy)] {
                let (mut times, wall) = level(url, clients, total).await;
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
    });
}
