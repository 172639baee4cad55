//! Listening: every HTTP listener of `ava` (`ava serve`'s, Telegram's webhook) binds, accepts
//! and drains its connections here, counts the requests it refuses ([`Refusals`]), and stops
//! on the same signal as every long-running command ([`shutdown_signal`]).

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::Context;
use http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::body::Body;

/// How long requests in flight get to finish once shutdown starts.
const DRAIN: Duration = Duration::from_secs(10);

/// The shortest time between two warnings about refused requests.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// Requests refused for one reason, logged at debug level each and counted in at most one
/// warning per [`WARN_EVERY`] (every listener of `ava` that faces clients uses these).
pub(crate) struct Refusals {
    what: &'static str,
    count: AtomicU64,
    warned: Mutex<Option<Instant>>,
}

impl Refusals {
    pub(crate) const fn new(what: &'static str) -> Self {
        Self {
            what,
            count: AtomicU64::new(0),
            warned: Mutex::new(None),
        }
    }

    pub(crate) fn note(&self, peer: SocketAddr) {
        tracing::debug!(%peer, "refused a request: {}", self.what);
        self.count.fetch_add(1, Ordering::Relaxed);
        let mut warned = self.warned.lock().unwrap_or_else(PoisonError::into_inner);
        if warned.is_none_or(|at| at.elapsed() >= WARN_EVERY) {
            *warned = Some(Instant::now());
            let refused = self.count.swap(0, Ordering::Relaxed);
            tracing::warn!(
                refused,
                last_peer = %peer,
                "refused requests: {} (counted here at most once a minute)",
                self.what
            );
        }
    }
}

/// Serves each connection accepted on `listener` with `handle` until `shutdown` resolves;
/// then lets the requests in flight finish (up to [`DRAIN`]) and cuts the connections still
/// open. Every listener of `ava` runs this way (MCP, the proxy and the inspector here,
/// Telegram's webhook), `what` naming it in the log.
pub(crate) async fn accept_until<H, F>(
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
    what: &'static str,
    handle: H,
) where
    H: Fn(Request<Incoming>, SocketAddr) -> F + Clone + Send + 'static,
    F: Future<Output = Response<Body>> + Send + 'static,
{
    let stop = CancellationToken::new();
    let mut connections = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    // Answers go out in small pieces (a stream's events): each at once, not
                    // held back for the client's acknowledgement of the one before (Nagle).
                    if let Err(e) = stream.set_nodelay(true) {
                        tracing::debug!(%peer, error = %e, "could not set TCP_NODELAY");
                    }
                    let handle = handle.clone();
                    let service = hyper::service::service_fn(move |request| {
                        let answer = handle(request, peer);
                        async move { Ok::<_, Infallible>(answer.await) }
                    });
                    connections.spawn(serve_connection(stream, peer, service, stop.clone()));
                }
                Err(e) => {
                    // Out of file descriptors, a connection reset before accept: wait a little.
                    tracing::warn!(error = %e, "could not accept a connection ({what})");
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
    if drained.is_err() {
        tracing::warn!(
            open = connections.len(),
            "{what} connections still open {DRAIN:?} after the stop; closed"
        );
        connections.shutdown().await;
    }
}

/// Serves one HTTP/1 connection with `service` until the client closes it or `stop` is
/// cancelled (then the request in flight, if any, is finished first). Every listener of
/// `ava` serves its connections this way ([`accept_until`]).
async fn serve_connection<S>(
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    service: S,
    stop: CancellationToken,
) where
    S: hyper::service::HttpService<Incoming>,
    S::ResBody: 'static,
    <S::ResBody as hyper::body::Body>::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(Duration::from_secs(30))
        .serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    let result = tokio::select! {
        r = conn.as_mut() => r,
        () = stop.cancelled() => {
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

/// Resolves on Ctrl-C or SIGTERM (what an MCP client sends a stdio server that does not exit
/// when its stdin closes). The handlers are installed when this is called, not when the future
/// is first polled: a signal that comes while the server is still starting (or before the task
/// that awaits it next runs) stops it cleanly instead of killing it.
pub(crate) fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    let listening = {
        use tokio::signal::unix::{SignalKind, signal};
        (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        )
    };
    async move {
        #[cfg(unix)]
        match listening {
            (Ok(mut int), Ok(mut term)) => {
                tokio::select! {
                    _ = int.recv() => {}
                    _ = term.recv() => {}
                }
                return;
            }
            (Ok(mut int), Err(e)) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM; Ctrl-C still stops");
                int.recv().await;
                return;
            }
            (Err(e), _) => tracing::warn!(error = %e, "cannot listen for Ctrl-C"),
        }
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::warn!(error = %e, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    }
}
