//! `ava mcp --http`: MCP's streamable HTTP transport (rmcp's, stateless with JSON answers) on
//! hyper's HTTP/1 server, behind a bearer-token gate that gives each request its identity.
//!
//! Every request must carry `Authorization: Bearer <token>` with a token of the token file;
//! without one it gets 401 before anything else looks at it. The token picks the handler,
//! and with it the scope: each identity has its own rmcp service whose handler was built for
//! that scope, so nothing a request says (body, session id, arguments) can change whose
//! memories it reaches.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use http::{Request, Response, StatusCode, header};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::tokens::TokenTable;
use super::{AvaMcp, Memory};

/// The path MCP is served at.
pub(crate) const PATH: &str = "/mcp";

/// How long requests in flight get to finish once shutdown starts.
const DRAIN: Duration = Duration::from_secs(10);

type Body = BoxBody<Bytes, Infallible>;
type Service = StreamableHttpService<AvaMcp, NeverSessionManager>;

/// The gate: tokens, and one MCP service per token, in the same order.
struct Gate {
    tokens: TokenTable,
    services: Vec<Service>,
}

/// The token of an `Authorization: Bearer <token>` header.
fn bearer(request: &Request<Incoming>) -> Option<&str> {
    let value = request
        .headers()
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

fn plain(status: StatusCode, text: &'static str) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from_static(text.as_bytes())).boxed());
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

impl Gate {
    async fn route(&self, request: Request<Incoming>, peer: SocketAddr) -> Response<Body> {
        let Some(i) = bearer(&request).and_then(|t| self.tokens.identify(t)) else {
            tracing::info!(%peer, "refused a request without a known bearer token");
            let mut response = plain(
                StatusCode::UNAUTHORIZED,
                "a bearer token from the server's token file is required\n",
            );
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer realm=\"ava\""),
            );
            return response;
        };
        if request.uri().path() != PATH {
            return plain(StatusCode::NOT_FOUND, "not found; MCP is served at /mcp\n");
        }
        match self.services.get(i) {
            Some(service) => service.handle(request).await,
            None => plain(
                StatusCode::INTERNAL_SERVER_ERROR,
                "no service for this token\n",
            ),
        }
    }
}

/// What `serve` needs besides the listener.
#[derive(Debug)]
pub(crate) struct HttpConfig {
    /// Who may connect, and as whom.
    pub(crate) tokens: TokenTable,
    /// `Host` names accepted besides the loopback ones (a guard against DNS rebinding).
    pub(crate) extra_hosts: Vec<String>,
}

/// Serves MCP on `listener` until `shutdown` resolves, then lets the requests in flight
/// finish (up to [`DRAIN`]) and returns.
pub(crate) async fn serve(
    listener: TcpListener,
    memory: Arc<Memory>,
    config: HttpConfig,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let sessions_end = CancellationToken::new();
    let mut hosts: Vec<String> = ["localhost", "127.0.0.1", "::1"].map(str::to_owned).into();
    hosts.extend(config.extra_hosts);
    let rmcp_config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(None)
        .with_allowed_hosts(hosts)
        .with_cancellation_token(sessions_end.clone());
    let services = config
        .tokens
        .scopes()
        .map(|scope| {
            let handler = AvaMcp::new(Arc::clone(&memory), scope.clone());
            StreamableHttpService::new(
                move || Ok(handler.clone()),
                Arc::new(NeverSessionManager::default()),
                rmcp_config.clone(),
            )
        })
        .collect();
    let gate = Arc::new(Gate {
        tokens: config.tokens,
        services,
    });

    let stop = CancellationToken::new();
    let mut connections = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    connections.spawn(connection(stream, peer, Arc::clone(&gate), stop.clone()));
                }
                Err(e) => {
                    // Out of file descriptors, a connection reset before accept: wait a little.
                    tracing::warn!(error = %e, "could not accept a connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    drop(listener);
    stop.cancel();
    let drained = tokio::time::timeout(DRAIN, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    sessions_end.cancel();
    if drained.is_err() {
        tracing::warn!(
            left = connections.len(),
            "connections still open after {DRAIN:?}; closing them"
        );
        connections.shutdown().await;
    }
    Ok(())
}

async fn connection(
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    gate: Arc<Gate>,
    stop: CancellationToken,
) {
    let service = hyper::service::service_fn(move |request| {
        let gate = Arc::clone(&gate);
        async move { Ok::<_, Infallible>(gate.route(request, peer).await) }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(Duration::from_secs(30))
        .serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    let result = tokio::select! {
        r = conn.as_mut() => r,
        () = stop.cancelled() => {
            // Finish the request in flight, if any, then close.
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(e) = result {
        tracing::debug!(%peer, error = %e, "connection ended with an error");
    }
}

/// Binds `addr`, saying clearly what failed.
pub(crate) async fn bind(addr: SocketAddr) -> anyhow::Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .with_context(|| format!("listen on {addr}"))
}
