//! `--metrics-addr` (`ava serve`, `ava run`): a small listener of its own for a load balancer
//! and Prometheus, off unless asked for. `/healthz` answers while the process serves;
//! `/readyz` answers 200 when the store answers a read (and its file, if any, is still there), the embedder embeds and the model's
//! server (the proxy's upstream, the bot's chat model) answers at all (any HTTP status), else
//! 503 naming what failed; `/metrics` is [`crate::shared::metrics`] in
//! Prometheus' text format. No token: bind it where only the balancer and the scraper reach.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use memory_core::{EmbeddingProvider, MemoryBackend, Scope};
use serde_json::json;
use tokio::net::TcpListener;

use crate::shared::body::Body;
use crate::shared::listen::accept_until;
use crate::shared::metrics;

/// How long each readiness check may take.
const CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// What readiness checks.
#[derive(Debug, Clone)]
pub(crate) struct Probes {
    /// The store, asked for a count.
    pub(crate) store: Arc<dyn MemoryBackend>,
    /// The store's file, when it is one: a file removed under a running process still
    /// answers through its open handle, but nothing written there survives the process.
    pub(crate) store_file: Option<std::path::PathBuf>,
    /// The embedder, asked to embed a word (none: not checked).
    pub(crate) embedder: Option<Arc<dyn EmbeddingProvider>>,
    /// The model's server, asked for a page (none: not checked).
    pub(crate) model: Option<Reach>,
    /// The store's totals, for the `ava_memories` gauges (none: not reported).
    pub(crate) totals: Option<Totals>,
}

/// Where the store's totals come from: its own statistics, read at most once a minute (they
/// count whole tables).
#[derive(Debug, Clone)]
pub(crate) enum Totals {
    /// A SQLite file.
    Sqlite(Arc<memory_sqlite::SqliteBackend>),
    /// A Postgres schema.
    #[cfg(feature = "postgres")]
    Postgres(Arc<memory_postgres::PostgresBackend>),
}

/// How long the totals are reused before they are counted again.
const TOTALS_FOR: Duration = Duration::from_secs(60);

impl Totals {
    /// The gauges' lines: memories, facts, scopes and users; what failed, as text.
    async fn read(&self) -> Result<String, String> {
        let t = match self {
            Totals::Sqlite(s) => s.stats().await.map_err(|e| e.to_string())?,
            #[cfg(feature = "postgres")]
            Totals::Postgres(p) => p.stats().await.map_err(|e| e.to_string())?,
        };
        let (memories, facts, scopes, users) = (t.memories, t.facts, t.scopes, t.users);
        let mut out = String::new();
        for (name, help, value) in [
            ("ava_memories", "Memories in the store.", memories),
            ("ava_facts", "Memories of kind fact in the store.", facts),
            ("ava_scopes", "Scopes holding memories.", scopes),
            (
                "ava_users",
                "Distinct (tenant, user) pairs holding memories.",
                users,
            ),
        ] {
            out.push_str(&format!(
                "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}\n"
            ));
        }
        Ok(out)
    }
}

/// The totals' lines as last read, and when.
static TOTALS: std::sync::Mutex<Option<(std::time::Instant, String)>> = std::sync::Mutex::new(None);

/// The totals' gauge lines, counted again when older than [`TOTALS_FOR`]; nothing when they
/// cannot be read (the log says why).
async fn totals(totals: &Totals) -> String {
    let fresh = |t: &std::time::Instant| t.elapsed() < TOTALS_FOR;
    if let Some((at, lines)) = TOTALS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .as_ref()
        && fresh(at)
    {
        return lines.clone();
    }
    match totals.read().await {
        Ok(lines) => {
            *TOTALS
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) =
                Some((std::time::Instant::now(), lines.clone()));
            lines
        }
        Err(e) => {
            tracing::warn!(error = e, "could not count the store's totals for /metrics");
            String::new()
        }
    }
}

/// A server readiness asks for a page, any answer will do.
#[derive(Debug, Clone)]
pub(crate) struct Reach {
    /// What it is, as the check is named: `upstream`, `chat model`.
    pub(crate) name: &'static str,
    /// The page asked for (`.../models`, Ollama's `/api/tags`).
    url: String,
    /// The client every probe asks with (built once: a probe comes every few seconds).
    client: reqwest::Client,
}

impl Reach {
    /// `name`'s server, asked for `url`.
    pub(crate) fn new(name: &'static str, url: String) -> anyhow::Result<Self> {
        let client = reqwest::Client::builder()
            .connect_timeout(CHECK_TIMEOUT)
            .build()
            .map_err(|e| anyhow::anyhow!("build the readiness probe's HTTP client: {e}"))?;
        Ok(Self { name, url, client })
    }

    /// Whether it answers at all within [`CHECK_TIMEOUT`]; what failed otherwise.
    async fn reachable(&self) -> Result<(), String> {
        match tokio::time::timeout(CHECK_TIMEOUT, self.client.get(&self.url).send()).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(format!(
                "{} cannot be reached: {}",
                self.url,
                memory_core::ErrorChain(&e)
            )),
            Err(_) => Err(format!(
                "{} did not answer in {} s",
                self.url,
                CHECK_TIMEOUT.as_secs()
            )),
        }
    }
}

impl Probes {
    /// Each check's name and `Ok` or what failed.
    async fn check(&self) -> Vec<(&'static str, Result<(), String>)> {
        let store = async {
            if let Some(file) = &self.store_file
                && !file.exists()
            {
                return Err(format!("the store file {} is gone", file.display()));
            }
            let probe = Scope::for_user("ava-readiness").map_err(|e| e.to_string())?;
            within(self.store.count(&probe)).await.map(drop)
        };
        let embedder = async {
            match &self.embedder {
                Some(e) => within(e.embed("ready")).await.map(drop),
                None => Ok(()),
            }
        };
        let model = async {
            match &self.model {
                Some(m) => m.reachable().await,
                None => Ok(()),
            }
        };
        let (store, embedder, model) = tokio::join!(store, embedder, model);
        let mut checks = vec![("store", store), ("embedder", embedder)];
        if let Some(m) = &self.model {
            checks.push((m.name, model));
        }
        checks
    }
}

/// `call`'s outcome within [`CHECK_TIMEOUT`], its error as text.
async fn within<T, E: std::error::Error + 'static>(
    call: impl Future<Output = Result<T, E>>,
) -> Result<T, String> {
    match tokio::time::timeout(CHECK_TIMEOUT, call).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(memory_core::ErrorChain(&e).to_string()),
        Err(_) => Err(format!("no answer in {} s", CHECK_TIMEOUT.as_secs())),
    }
}

fn answer(status: StatusCode, kind: &'static str, body: String) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(body)).boxed());
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, header::HeaderValue::from_static(kind));
    response
}

async fn route(probes: &Probes, request: &Request<Incoming>) -> Response<Body> {
    const TEXT: &str = "text/plain; charset=utf-8";
    if request.method() != Method::GET {
        return answer(StatusCode::METHOD_NOT_ALLOWED, TEXT, "GET only\n".into());
    }
    match request.uri().path() {
        "/healthz" => answer(StatusCode::OK, TEXT, "ok\n".into()),
        "/readyz" => {
            let checks = probes.check().await;
            let ready = checks.iter().all(|(_, r)| r.is_ok());
            let named: serde_json::Map<String, serde_json::Value> = checks
                .into_iter()
                .map(|(name, r)| {
                    (
                        name.to_owned(),
                        r.err().unwrap_or_else(|| "ok".into()).into(),
                    )
                })
                .collect();
            let status = if ready {
                StatusCode::OK
            } else {
                StatusCode::SERVICE_UNAVAILABLE
            };
            let body = json!({"ready": ready, "checks": named});
            answer(status, "application/json", format!("{body}\n"))
        }
        "/metrics" => {
            let extra = match &probes.totals {
                Some(t) => totals(t).await,
                None => String::new(),
            };
            answer(
                StatusCode::OK,
                "text/plain; version=0.0.4; charset=utf-8",
                metrics::render(&extra),
            )
        }
        _ => answer(
            StatusCode::NOT_FOUND,
            TEXT,
            "not found; this listener serves /healthz, /readyz and /metrics\n".into(),
        ),
    }
}

/// The totals of the store `opened`, when it keeps statistics.
pub(crate) fn totals_of(opened: &crate::config::Opened) -> Option<Totals> {
    if let Some(s) = &opened.sqlite {
        return Some(Totals::Sqlite(Arc::clone(s)));
    }
    #[cfg(feature = "postgres")]
    if let Some(p) = &opened.postgres {
        return Some(Totals::Postgres(Arc::clone(p)));
    }
    None
}

/// Starts the probes on `addr` (saying where, as `who`) until the token returned is
/// cancelled; the task ends then.
pub(crate) async fn start(
    addr: SocketAddr,
    who: &str,
    probes: Probes,
) -> anyhow::Result<(
    tokio::task::JoinHandle<()>,
    tokio_util::sync::CancellationToken,
)> {
    use anyhow::Context as _;
    let listener = crate::shared::listen::bind(addr)
        .await
        .context("--metrics-addr")?;
    let at = listener
        .local_addr()
        .context("read the metrics listener's address")?;
    crate::shared::logs::announce(
        "INFO",
        &format!("{who}: probes and metrics at http://{at} (/healthz, /readyz, /metrics)"),
    );
    let stop = tokio_util::sync::CancellationToken::new();
    let task = tokio::spawn(serve(listener, probes, stop.clone().cancelled_owned()));
    Ok((task, stop))
}

/// Serves the probes on `listener` until `shutdown` resolves.
pub(crate) async fn serve(
    listener: TcpListener,
    probes: Probes,
    shutdown: impl Future<Output = ()>,
) {
    let probes = Arc::new(probes);
    accept_until(
        listener,
        shutdown,
        "metrics",
        move |request, _peer: SocketAddr| {
            let probes = Arc::clone(&probes);
            async move { route(&probes, &request).await }
        },
    )
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_totals_are_gauges_the_docs_list() {
        let dir = tempfile::tempdir().unwrap();
        let store = memory_sqlite::SqliteBackend::open(
            dir.path().join("m.db"),
            None,
            memory_sqlite::SqliteConfig::default(),
        )
        .await
        .unwrap();
        let scope = Scope::for_user("u").unwrap();
        store
            .store(
                &scope,
                memory_core::NewMemory::new("the key is under the mat"),
            )
            .await
            .unwrap();
        let lines = Totals::Sqlite(Arc::new(store)).read().await.unwrap();
        let docs = include_str!("../../../docs/serve.md");
        for (name, value) in [
            ("ava_memories", 1),
            ("ava_facts", 0),
            ("ava_scopes", 1),
            ("ava_users", 1),
        ] {
            assert!(
                lines.contains(&format!("# TYPE {name} gauge\n{name} {value}\n")),
                "{lines}"
            );
            assert!(
                docs.contains(&format!("`{name}`")),
                "docs/serve.md lists {name}"
            );
        }
    }
}
