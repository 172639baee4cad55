//! `ava serve` (and `ava mcp --http`, the same server without an upstream): MCP's streamable
//! HTTP transport (rmcp's, stateless with JSON answers) at `/mcp`, the inspector at
//! `/inspect` ([`inspect`]) and, with an upstream, the OpenAI-compatible proxy under
//! `/v1/` ([`proxy`]), on hyper's HTTP/1 server, behind a bearer-token gate that gives
//! each request its identity.
//!
//! Every request must carry `Authorization: Bearer <token>` with a token of the token file;
//! without one it gets 401 before anything else looks at it. The token picks the handler,
//! and with it the scope: each identity has its own rmcp service whose handler was built for
//! that scope, so nothing a request says (body, session id, arguments) can change whose
//! memories it reaches. The token file is read again when it changes (or on SIGHUP), so a
//! token removed from it stops working at once. A request whose `Host` does not name this
//! server (a loopback name at its port, or an `--allow-host` name), or that comes from a web
//! page (`Origin`) that is not this server's (scheme, host and port), is refused (403), and a
//! body that is not JSON-RPC is answered as JSON-RPC says (400 with -32700 or -32600). Refused requests are logged at debug level, and counted
//! in at most one warning a minute, so no client can flood the log.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::SystemTime;

use anyhow::Context;
use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::mcp::{AvaMcp, Memory};
use crate::shared::body::{Body, BodyError, read_whole};
use crate::shared::error_chain;
use crate::shared::listen::{Refusals, accept_until};
use crate::shared::metrics::{self, Door};

use self::inspect::Inspector;
use self::proxy::Proxy;
use self::tokens::TokenTable;

pub(crate) mod health;
pub(crate) mod inspect;
pub(crate) mod proxy;
pub(crate) mod tokens;

/// The path MCP is served at.
pub(crate) const PATH: &str = "/mcp";

/// The largest request body read (rmcp's own limit).
const MAX_BODY: usize = 4 * 1024 * 1024;

type Service = StreamableHttpService<AvaMcp, NeverSessionManager>;

/// The tokens in force, and one MCP service per token, in the same order.
struct Table {
    tokens: TokenTable,
    services: Vec<Service>,
}

/// One version of the token file: when any part changes, the file is read again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    modified: Option<SystemTime>,
    len: u64,
    inode: u64,
}

impl Stamp {
    /// The version of the file at `path` now; `None` when it cannot be read.
    fn of_file(path: &std::path::Path) -> Option<Self> {
        std::fs::metadata(path).ok().map(|m| Self::of(&m))
    }

    fn of(meta: &std::fs::Metadata) -> Self {
        #[cfg(unix)]
        let inode = std::os::unix::fs::MetadataExt::ino(meta);
        #[cfg(not(unix))]
        let inode = 0;
        Self {
            modified: meta.modified().ok(),
            len: meta.len(),
            inode,
        }
    }
}

/// The gate in front of the MCP services.
struct Gate {
    /// The tokens in force, and the version of the file they were read from.
    table: RwLock<(Option<Stamp>, Arc<Table>)>,
    /// The token file, read again when it changes.
    file: PathBuf,
    memory: Arc<Memory>,
    rmcp_config: StreamableHttpServerConfig,
    /// The names (and port) a request's `Host` and a web page's `Origin` may name.
    names: Names,
    wrong_host: Refusals,
    unauthenticated: Refusals,
    cross_origin: Refusals,
    /// The OpenAI-compatible proxy under `/v1/`, when there is an upstream.
    proxy: Option<Arc<Proxy>>,
    /// The web inspector under `/inspect`.
    inspector: Arc<Inspector>,
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

/// The names this server answers to: its loopback names at the port it listens on, and the
/// names `--allow-host` gives (`name`, any port, or `name:port`), for a TLS proxy in front.
struct Names {
    /// The port the server listens on.
    port: u16,
    /// `--allow-host` entries: a lowercase name, and the port when the entry names one.
    extra: Vec<(String, Option<u16>)>,
}

/// The loopback names a request may call this server by (at its own port).
const LOOPBACK: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// `authority` (`host[:port]`, an IPv6 host in brackets) as a lowercase host without
/// brackets and the port it names; `None` when it is not one.
fn authority(text: &str) -> Option<(String, Option<u16>)> {
    let parsed = http::uri::Authority::try_from(text.trim()).ok()?;
    if parsed.as_str().contains('@') {
        return None;
    }
    let host = parsed.host().trim_start_matches('[').trim_end_matches(']');
    Some((host.to_ascii_lowercase(), parsed.port_u16()))
}

impl Names {
    fn new(port: u16, extra: &[String]) -> Self {
        let extra = extra
            .iter()
            .map(|e| authority(e).unwrap_or_else(|| (e.trim().to_ascii_lowercase(), None)))
            .collect();
        Self { port, extra }
    }

    /// Whether `host` at `port` (the one given, or `default` when none is) names this server:
    /// a loopback name at the port it listens on (reached as `http`, so `loopback_ok`), or an
    /// `--allow-host` name at the port its entry names, if any.
    fn names(&self, host: &str, port: Option<u16>, default: u16, loopback_ok: bool) -> bool {
        if LOOPBACK.contains(&host) {
            return loopback_ok && port.unwrap_or(default) == self.port;
        }
        self.extra
            .iter()
            .any(|(name, at)| name == host && at.is_none_or(|at| port.unwrap_or(default) == at))
    }

    /// Whether the request's `Host` names this server (a guard against DNS rebinding: a page
    /// of another site whose name resolves to this address names that site).
    fn host_allowed(&self, request: &Request<Incoming>) -> bool {
        let Some((host, port)) = request
            .headers()
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .and_then(authority)
        else {
            return false;
        };
        self.names(&host, port, 80, true)
    }

    /// Whether a request's `Origin` (sent by browsers) is a page of this server: its scheme,
    /// host and port; a request without one (any other client) passes. `null` and anything
    /// unreadable do not.
    fn origin_allowed(&self, request: &Request<Incoming>) -> bool {
        let Some(origin) = request.headers().get(header::ORIGIN) else {
            return true;
        };
        let Some((scheme, rest)) = origin.to_str().ok().and_then(|o| o.split_once("://")) else {
            return false;
        };
        let default = match scheme.to_ascii_lowercase().as_str() {
            "http" => 80,
            "https" => 443,
            _ => return false,
        };
        if rest.contains('/') {
            return false;
        }
        let Some((host, port)) = authority(rest) else {
            return false;
        };
        // This server speaks plain HTTP: a page of its own on a loopback name is `http`; an
        // `--allow-host` name may sit behind a TLS proxy.
        self.names(&host, port, default, default == 80)
    }
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

/// A JSON-RPC error answer with HTTP status 400.
fn json_rpc_error(id: Value, code: i64, message: String) -> Response<Body> {
    let body = json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}});
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())).boxed());
    *response.status_mut() = StatusCode::BAD_REQUEST;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    response
}

/// The request with its body read, or the answer to a body that is too large, unreadable,
/// not JSON (-32700) or not a JSON-RPC message MCP knows (-32600, with its id if it has one).
async fn read_body(request: Request<Incoming>) -> Result<Request<Full<Bytes>>, Response<Body>> {
    let (parts, body) = request.into_parts();
    let bytes = match read_whole(body, MAX_BODY).await {
        Ok(bytes) => bytes,
        Err(e @ BodyError::TooLarge) => {
            return Err(plain(e.status(), "the request body is larger than 4 MiB\n"));
        }
        Err(e @ BodyError::Unreadable) => {
            return Err(plain(e.status(), "the request body could not be read\n"));
        }
    };
    if parts.method == Method::POST {
        let value = match serde_json::from_slice::<Value>(&bytes) {
            Ok(value) => value,
            Err(e) => {
                return Err(json_rpc_error(
                    Value::Null,
                    -32700,
                    format!("Parse error: the body is not JSON ({e})"),
                ));
            }
        };
        if let Err(e) = serde_json::from_slice::<ClientJsonRpcMessage>(&bytes) {
            let id = value
                .get("id")
                .filter(|id| id.is_string() || id.is_number())
                .cloned()
                .unwrap_or(Value::Null);
            return Err(json_rpc_error(
                id,
                -32600,
                format!("Invalid Request: not an MCP request, notification or response ({e})"),
            ));
        }
    }
    Ok(Request::from_parts(parts, Full::new(bytes)))
}

impl Gate {
    /// A table of `tokens`, each with its own service.
    fn table(
        memory: &Arc<Memory>,
        rmcp_config: &StreamableHttpServerConfig,
        tokens: TokenTable,
    ) -> Arc<Table> {
        let services = tokens
            .grants()
            .map(|grant| {
                let handler =
                    AvaMcp::new(Arc::clone(memory), grant.scope.clone()).read_only(grant.read_only);
                StreamableHttpService::new(
                    move || Ok(handler.clone()),
                    Arc::new(NeverSessionManager::default()),
                    rmcp_config.clone(),
                )
            })
            .collect();
        Arc::new(Table { tokens, services })
    }

    /// The tokens in force: the token file read again first if it changed since (or, with
    /// `force`, whatever). A file that cannot be used leaves the tokens as they were, with an
    /// error in the log.
    fn current(&self, force: bool) -> Arc<Table> {
        let (stamp, table) = self
            .table
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let now = Stamp::of_file(&self.file);
        if !force && now == stamp {
            return table;
        }
        let mut slot = self.table.write().unwrap_or_else(PoisonError::into_inner);
        if !force && slot.0 != stamp {
            // Another request reloaded it meanwhile.
            return Arc::clone(&slot.1);
        }
        match TokenTable::load(&self.file) {
            Ok(tokens) => {
                tracing::info!(tokens = tokens.len(), "read the token file again");
                *slot = (now, Self::table(&self.memory, &self.rmcp_config, tokens));
            }
            Err(e) => {
                tracing::error!(
                    error = error_chain(&e),
                    "the token file changed but cannot be used; the tokens read before stay"
                );
                slot.0 = now;
            }
        }
        Arc::clone(&slot.1)
    }

    async fn route(&self, request: Request<Incoming>, peer: SocketAddr) -> Response<Body> {
        if !self.names.host_allowed(&request) {
            self.wrong_host.note(peer);
            return plain(
                StatusCode::FORBIDDEN,
                "the Host header does not name this server (localhost, 127.0.0.1 or [::1] at \
                 its port, or an --allow-host name)\n",
            );
        }
        if !self.names.origin_allowed(&request) {
            self.cross_origin.note(peer);
            return plain(
                StatusCode::FORBIDDEN,
                "requests from web pages of other sites are refused (Origin)\n",
            );
        }
        let path = request.uri().path();
        if inspect::is_page(path) {
            return inspect::page(&request);
        }
        let table = self.current(false);
        let Some(i) = bearer(&request).and_then(|t| table.tokens.identify(t)) else {
            self.unauthenticated.note(peer);
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
        if inspect::is_api(request.uri().path()) {
            return match table.tokens.grant(i) {
                Some(grant) => self.inspector.api(request, grant).await,
                None => plain(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "no grant for this token\n",
                ),
            };
        }
        if request.uri().path().starts_with(proxy::PREFIX) {
            return match (&self.proxy, table.tokens.grant(i)) {
                (Some(_), Some(grant)) if grant.read_only => plain(
                    StatusCode::FORBIDDEN,
                    "this token is read-only, and the proxy stores every exchange\n",
                ),
                (Some(proxy), Some(grant)) => proxy.handle(request, grant).await,
                (None, _) => plain(
                    StatusCode::NOT_FOUND,
                    "not found; this server has no upstream, so no OpenAI-compatible proxy \
                     (start it with `ava serve --upstream URL`)\n",
                ),
                (_, None) => plain(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "no grant for this token\n",
                ),
            };
        }
        if request.uri().path() != PATH {
            return plain(StatusCode::NOT_FOUND, "not found; MCP is served at /mcp\n");
        }
        let request = match read_body(request).await {
            Ok(request) => request,
            Err(answer) => return answer,
        };
        match table.services.get(i) {
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
    /// The file they were read from, read again when it changes.
    pub(crate) token_file: PathBuf,
    /// `Host` names accepted besides the loopback ones (a guard against DNS rebinding).
    pub(crate) extra_hosts: Vec<String>,
    /// The OpenAI-compatible proxy served beside MCP, when there is an upstream.
    pub(crate) proxy: Option<Arc<Proxy>>,
    /// The web inspector.
    pub(crate) inspector: Arc<Inspector>,
}

/// Serves MCP on `listener` until `shutdown` resolves, then lets the requests in flight
/// finish (up to ten seconds, `shared::listen`'s `DRAIN`) and returns.
pub(crate) async fn serve(
    listener: TcpListener,
    memory: Arc<Memory>,
    config: HttpConfig,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let sessions_end = CancellationToken::new();
    let port = listener
        .local_addr()
        .context("read the address listened on")?
        .port();
    let names = Names::new(port, &config.extra_hosts);
    let mut hosts: Vec<String> = LOOPBACK.map(str::to_owned).into();
    hosts.extend(config.extra_hosts);
    let rmcp_config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(None)
        .with_allowed_hosts(hosts)
        .with_cancellation_token(sessions_end.clone());
    let stamp = Stamp::of_file(&config.token_file);
    let table = Gate::table(&memory, &rmcp_config, config.tokens);
    let gate = Arc::new(Gate {
        table: RwLock::new((stamp, table)),
        file: config.token_file,
        memory,
        rmcp_config,
        names,
        wrong_host: Refusals::new("the Host header does not name this server"),
        unauthenticated: Refusals::new("no known bearer token"),
        cross_origin: Refusals::new("a web page's Origin is not this server's"),
        proxy: config.proxy,
        inspector: config.inspector,
    });
    let mut hangups = hangups()?;
    let reload = tokio::spawn({
        let gate = Arc::clone(&gate);
        async move {
            while hangup(&mut hangups).await.is_some() {
                tracing::info!("SIGHUP: reading the token file again");
                gate.current(true);
            }
        }
    });
    accept_until(listener, shutdown, "HTTP", move |request, peer| {
        let gate = Arc::clone(&gate);
        async move {
            let started = std::time::Instant::now();
            let door = door_of(request.uri().path());
            let response = gate.route(request, peer).await;
            metrics::request(door, response.status().as_u16(), started.elapsed());
            response
        }
    })
    .await;
    reload.abort();
    sessions_end.cancel();
    Ok(())
}

/// The front door a path belongs to, for the metrics.
fn door_of(path: &str) -> Door {
    if path == PATH {
        Door::Mcp
    } else if path.starts_with(proxy::PREFIX) {
        Door::Proxy
    } else if inspect::is_page(path) || inspect::is_api(path) {
        Door::Inspector
    } else {
        Door::Other
    }
}

#[cfg(unix)]
type Hangups = tokio::signal::unix::Signal;
#[cfg(not(unix))]
type Hangups = ();

/// SIGHUPs to come (none where there are no signals).
fn hangups() -> anyhow::Result<Hangups> {
    #[cfg(unix)]
    return tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        .context("listen for SIGHUP");
    #[cfg(not(unix))]
    Ok(())
}

/// The next SIGHUP.
async fn hangup(signals: &mut Hangups) -> Option<()> {
    #[cfg(unix)]
    return signals.recv().await;
    #[cfg(not(unix))]
    {
        let () = signals;
        std::future::pending().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_docs_snippets_are_what_the_server_accepts() {
        use clap::Parser;
        let page = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/mcp.md"));
        let blocks: Vec<Value> = page
            .split("```json\n")
            .skip(1)
            .map(|b| serde_json::from_str(b.split("```").next().unwrap()).unwrap())
            .collect();
        assert_eq!(blocks.len(), 3, "stdio client, token file, HTTP client");
        let stdio = &blocks[0]["mcpServers"]["ava"];
        assert_eq!(stdio["command"], "ava");
        let args = stdio["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap());
        let cli = crate::Cli::try_parse_from(std::iter::once("ava").chain(args)).unwrap();
        assert!(matches!(cli.command, crate::Command::Mcp(_)));
        let table = TokenTable::parse(&blocks[1].to_string()).unwrap();
        assert_eq!(table.len(), 2);
        let remote = &blocks[2]["mcpServers"]["ava"];
        assert!(remote["url"].as_str().unwrap().ends_with(PATH));
        let header = remote["headers"]["Authorization"].as_str().unwrap();
        let token = header.strip_prefix("Bearer ").unwrap();
        assert_eq!(table.identify(token), Some(0));
    }

    #[test]
    fn a_name_is_this_servers_at_its_port_and_scheme() {
        let names = Names::new(
            8765,
            &["ava.example.org".to_owned(), "b.example:8443".to_owned()],
        );
        let ok = |host: &str, port: Option<u16>, default: u16, loopback: bool| {
            names.names(host, port, default, loopback)
        };
        assert!(ok("127.0.0.1", Some(8765), 80, true));
        assert!(ok("::1", Some(8765), 80, true));
        assert!(!ok("localhost", Some(3000), 80, true), "another port");
        assert!(!ok("localhost", None, 80, true), "port 80 is not this one");
        assert!(
            !ok("localhost", Some(8765), 443, false),
            "https is not this server"
        );
        assert!(
            ok("ava.example.org", None, 443, false),
            "behind a TLS proxy"
        );
        assert!(ok("ava.example.org", Some(1234), 80, true));
        assert!(ok("b.example", Some(8443), 443, false));
        assert!(!ok("b.example", None, 443, false), "its entry names a port");
        assert!(!ok("evil.example", Some(8765), 80, true));
        assert_eq!(
            authority("[::1]:8765"),
            Some(("::1".to_owned(), Some(8765)))
        );
        assert_eq!(authority("LocalHost"), Some(("localhost".to_owned(), None)));
        assert_eq!(authority("user@localhost:8765"), None);
    }
}
