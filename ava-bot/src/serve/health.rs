//! `--metrics-addr`: a small listener of its own for a load balancer and Prometheus, off
//! unless asked for. `/healthz` answers while the process serves; `/readyz` answers 200 when
//! the store answers a read, the embedder embeds and the upstream answers at all (any HTTP
//! status), else 503 naming what failed; `/metrics` is [`crate::shared::metrics`] in
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

use super::proxy::Upstream;

/// How long each readiness check may take.
const CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// What readiness checks.
#[derive(Debug, Clone)]
pub(crate) struct Probes {
    /// The store, asked for a count.
    pub(crate) store: Arc<dyn MemoryBackend>,
    /// The embedder, asked to embed a word (none: not checked).
    pub(crate) embedder: Option<Arc<dyn EmbeddingProvider>>,
    /// The upstream, asked for its models (none: not checked).
    pub(crate) upstream: Option<Upstream>,
}

impl Probes {
    /// Each check's name and `Ok` or what failed.
    async fn check(&self) -> Vec<(&'static str, Result<(), String>)> {
        let store = async {
            let probe = Scope::for_user("ava-readiness").map_err(|e| e.to_string())?;
            within(self.store.count(&probe)).await.map(drop)
        };
        let embedder = async {
            match &self.embedder {
                Some(e) => within(e.embed("ready")).await.map(drop),
                None => Ok(()),
            }
        };
        let upstream = async {
            match &self.upstream {
                Some(u) => u.reachable(CHECK_TIMEOUT).await,
                None => Ok(()),
            }
        };
        let (store, embedder, upstream) = tokio::join!(store, embedder, upstream);
        let mut checks = vec![("store", store), ("embedder", embedder)];
        if self.upstream.is_some() {
            checks.push(("upstream", upstream));
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
        "/metrics" => answer(
            StatusCode::OK,
            "text/plain; version=0.0.4; charset=utf-8",
            metrics::render(""),
        ),
        _ => answer(
            StatusCode::NOT_FOUND,
            TEXT,
            "not found; this listener serves /healthz, /readyz and /metrics\n".into(),
        ),
    }
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
