//! The web inspector of `ava serve` (`/inspect`): a page that shows what Ava remembers for
//! the identity of a bearer token, and why a prompt holds what it holds.
//!
//! The page, its script and its style are compiled into the binary and served to anyone (they
//! hold no data); everything else is JSON under `/inspect/api/`, answered only for a token
//! of the server's token file and only about the scopes that token may read: its chat and
//! its user-wide facts, or, for an operator's token (`"operator": true`), every scope of its
//! tenant. The script renders memory text with `textContent` only, never as HTML, and the
//! page's Content-Security-Policy allows nothing but this server's own script, style and
//! JSON. The API reads a token from the `Authorization` header, never from a cookie, so
//! another site's page cannot make a browser call it (and the gate refuses foreign
//! `Origin`s as well).

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::Arc;

use anyhow::Context;
use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use memory_core::{
    ErrorChain, Filter, MemoryBackend, MemoryEntry, MemoryError, MemoryId, MemoryKind, Scope,
    SearchRequest, Tag, TagQuery,
};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::agent::{Agent, find_memory};
use crate::mcp::tokens::Grant;

/// Most memories one listing or search returns.
const MAX_LIMIT: usize = 200;

/// Longest message a prompt is explained for, in bytes.
const MAX_MESSAGE_BYTES: usize = 16 * 1024;

/// The largest request body read.
const MAX_BODY: usize = 64 * 1024;

const INDEX: &str = include_str!("index.html");
const SCRIPT: &str = include_str!("app.js");
const STYLE: &str = include_str!("app.css");

/// What every page and answer of the inspector is sent with: nothing but this server's own
/// script, style and JSON, never framed, no referrer.
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
                      connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; \
                      frame-ancestors 'none'";

type Body = BoxBody<Bytes, Infallible>;

/// What the inspector reads: the store, an agent that builds prompts without counting
/// recalls, and the settings in force.
pub(crate) struct Inspector {
    store: Arc<dyn MemoryBackend>,
    agent: Agent,
    /// The settings in force, secrets left out.
    settings: Value,
}

/// A page of the inspector that needs no token: the page itself, its script, its style.
pub(crate) fn is_page(path: &str) -> bool {
    matches!(
        path,
        "/inspect" | "/inspect/" | "/inspect/app.js" | "/inspect/app.css"
    )
}

/// Whether `path` is the inspector's API.
pub(crate) fn is_api(path: &str) -> bool {
    path.starts_with("/inspect/api/")
}

/// The page, script or style at `path` (see [`is_page`]).
pub(crate) fn page(request: &Request<Incoming>) -> Response<Body> {
    if request.method() != Method::GET && request.method() != Method::HEAD {
        return answer(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "use GET\n".into(),
        );
    }
    let (kind, text) = match request.uri().path() {
        "/inspect/app.js" => ("text/javascript; charset=utf-8", SCRIPT),
        "/inspect/app.css" => ("text/css; charset=utf-8", STYLE),
        _ => ("text/html; charset=utf-8", INDEX),
    };
    answer(StatusCode::OK, kind, Bytes::from_static(text.as_bytes()))
}

fn answer(status: StatusCode, kind: &'static str, body: Bytes) -> Response<Body> {
    let mut response = Response::new(Full::new(body).boxed());
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, header::HeaderValue::from_static(kind));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        header::HeaderValue::from_static(POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        header::HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        header::HeaderValue::from_static("no-referrer"),
    );
    headers.insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("no-store"),
    );
    headers.insert(
        header::X_FRAME_OPTIONS,
        header::HeaderValue::from_static("DENY"),
    );
    response
}

fn json_answer(status: StatusCode, value: &Value) -> Response<Body> {
    answer(
        status,
        "application/json",
        Bytes::from(value.to_string().into_bytes()),
    )
}

/// An API refusal: `{"error": "..."}` with `status`.
fn refused(status: StatusCode, why: impl Into<String>) -> Response<Body> {
    json_answer(status, &json!({ "error": why.into() }))
}

/// The query parameters of a request, decoded.
fn query(request: &Request<Incoming>) -> BTreeMap<String, String> {
    request
        .uri()
        .query()
        .map(|q| {
            url::form_urlencoded::parse(q.as_bytes())
                .into_owned()
                .collect()
        })
        .unwrap_or_default()
}

/// What `POST /inspect/api/explain` takes.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ExplainArgs {
    /// The scope key (one of `/me`'s).
    scope: String,
    /// The message to build a prompt for.
    message: String,
}

impl std::fmt::Debug for Inspector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inspector")
            .field("store", &self.store.info().name)
            .finish_non_exhaustive()
    }
}

impl Inspector {
    /// An inspector over `store`, explaining prompts with `agent` (which should not count
    /// recalls: [`Agent::dry_run`]) and showing `settings`.
    pub(crate) fn new(store: Arc<dyn MemoryBackend>, agent: Agent, settings: Value) -> Self {
        Self {
            store,
            agent,
            settings,
        }
    }

    /// Answers an API request of the token whose grant is `grant`.
    pub(crate) async fn api(&self, request: Request<Incoming>, grant: &Grant) -> Response<Body> {
        let path = request.uri().path().to_owned();
        let route = path.trim_start_matches("/inspect/api/");
        let result = match (request.method().clone(), route) {
            (Method::GET, "me") => self.me(grant).await,
            (Method::GET, "memories") => self.memories(grant, &query(&request)).await,
            (Method::GET, "history") => self.history(grant, &query(&request)).await,
            (Method::GET, "store") => self.overview(grant).await,
            (Method::POST, "explain") => match json_body::<ExplainArgs>(request).await {
                Ok(args) => self.explain(grant, args).await,
                Err(response) => return response,
            },
            (_, "me" | "memories" | "history" | "store" | "explain") => {
                return refused(StatusCode::METHOD_NOT_ALLOWED, "wrong method for this path");
            }
            _ => return refused(StatusCode::NOT_FOUND, format!("no such API: {path}")),
        };
        match result {
            Ok(value) => json_answer(StatusCode::OK, &value),
            Err(Refusal(status, why)) => refused(status, why),
        }
    }

    /// The scopes `grant` may read: its chat and its user-wide scope, or every scope of its
    /// tenant for an operator.
    async fn readable(&self, grant: &Grant) -> Result<Vec<Scope>, Refusal> {
        if grant.operator {
            let mut scopes = self
                .store
                .scopes(Some(grant.scope.tenant()), None)
                .await
                .map_err(Refusal::store)?;
            if !scopes.contains(&grant.scope) {
                scopes.insert(0, grant.scope.clone());
            }
            Ok(scopes)
        } else {
            Ok(grant.scope.private_context())
        }
    }

    /// The scope a request names (`scope`, a key), if `grant` may read it; its own chat
    /// when it names none.
    async fn scope(&self, grant: &Grant, key: Option<&String>) -> Result<Scope, Refusal> {
        let Some(key) = key.filter(|k| !k.is_empty()) else {
            return Ok(grant.scope.clone());
        };
        self.readable(grant)
            .await?
            .into_iter()
            .find(|s| s.key() == *key)
            .ok_or_else(|| {
                Refusal(
                    StatusCode::FORBIDDEN,
                    "this token may not read that scope".into(),
                )
            })
    }

    async fn me(&self, grant: &Grant) -> Result<Value, Refusal> {
        let scopes: Vec<Value> = self
            .readable(grant)
            .await?
            .iter()
            .map(|s| json!({ "key": s.key(), "label": label(s) }))
            .collect();
        Ok(json!({
            "tenant": grant.scope.tenant(),
            "user": grant.scope.user(),
            "chat": grant.scope.chat(),
            "scope": grant.scope.key(),
            "operator": grant.operator,
            "read_only": grant.read_only,
            "scopes": scopes,
        }))
    }

    /// `GET /inspect/api/memories?scope=&q=&kind=&tag=&limit=`: the newest memories of a
    /// scope, or those a search finds with its score breakdown; searches are lookups and
    /// count no recall.
    async fn memories(
        &self,
        grant: &Grant,
        args: &BTreeMap<String, String>,
    ) -> Result<Value, Refusal> {
        let scope = self.scope(grant, args.get("scope")).await?;
        let limit = match args.get("limit").filter(|l| !l.is_empty()) {
            None => 50,
            Some(l) => l
                .parse::<usize>()
                .ok()
                .filter(|n| (1..=MAX_LIMIT).contains(n))
                .ok_or_else(|| Refusal::bad(format!("limit {l:?}: expected 1 to {MAX_LIMIT}")))?,
        };
        let mut filter = Filter::default();
        if let Some(kind) = args.get("kind").filter(|k| !k.is_empty()) {
            filter.kinds =
                vec![MemoryKind::parse(kind).map_err(|e| Refusal::bad(format!("kind: {e}")))?];
        }
        if let Some(tag) = args.get("tag").filter(|t| !t.is_empty()) {
            let tag = Tag::new(tag).map_err(|e| Refusal::bad(format!("tag: {e}")))?;
            filter.tags = Some(TagQuery::any([tag]));
        }
        filter.include_superseded = args.get("replaced").is_some_and(|r| r == "1");
        let q = args.get("q").map(|q| q.trim()).unwrap_or_default();
        let rows: Vec<Value> = if q.is_empty() {
            self.store
                .recent(&scope, limit, &filter)
                .await
                .map_err(Refusal::store)?
                .iter()
                .map(|e| row(e, None))
                .collect()
        } else {
            let request = SearchRequest::best(&self.store.capabilities(), q)
                .limit(limit)
                .filter(filter)
                .without_access_tracking();
            self.store
                .search(&scope, &request)
                .await
                .map_err(Refusal::store)?
                .iter()
                .map(|hit| {
                    row(
                        &hit.entry,
                        Some(json!({ "score": hit.score, "breakdown": hit.breakdown })),
                    )
                })
                .collect()
        };
        Ok(json!({ "scope": scope.key(), "query": q, "memories": rows }))
    }

    /// `GET /inspect/api/history?scope=&id=`: a memory and every version before and after
    /// it, oldest first.
    async fn history(
        &self,
        grant: &Grant,
        args: &BTreeMap<String, String>,
    ) -> Result<Value, Refusal> {
        let scope = self.scope(grant, args.get("scope")).await?;
        let id = args
            .get("id")
            .and_then(|id| id.parse::<MemoryId>().ok())
            .ok_or_else(|| Refusal::bad("id: expected a memory id"))?;
        let versions = memory_core::history(self.store.as_ref(), &scope, id)
            .await
            .map_err(Refusal::store)?;
        let rows: Vec<Value> = versions.iter().map(|e| row(e, None)).collect();
        Ok(json!({ "scope": scope.key(), "id": id.to_string(), "versions": rows }))
    }

    /// `POST /inspect/api/explain {scope, message}`: the prompt the model would get for the
    /// message in that scope now, and its explain report; nothing stored, no recall counted.
    async fn explain(&self, grant: &Grant, args: ExplainArgs) -> Result<Value, Refusal> {
        let scope = self.scope(grant, Some(&args.scope)).await?;
        if args.message.trim().is_empty() {
            return Err(Refusal::bad("message: it is empty; type something"));
        }
        if args.message.len() > MAX_MESSAGE_BYTES {
            return Err(Refusal::bad(format!(
                "message: {} bytes; at most {MAX_MESSAGE_BYTES}",
                args.message.len()
            )));
        }
        let started = std::time::Instant::now();
        let prompt = self
            .agent
            .prepare(
                &scope,
                hydrate::SessionState::default(),
                None,
                &args.message,
            )
            .await
            .map_err(|e| Refusal(StatusCode::INTERNAL_SERVER_ERROR, crate::error_chain(&e)))?;
        let messages: Vec<Value> = prompt
            .messages
            .iter()
            .zip(&prompt.layout)
            .map(|(m, block)| {
                json!({ "role": m.role, "content": m.content, "block": format!("{block:?}") })
            })
            .collect();
        let ms = started.elapsed().as_secs_f64() * 1e3;
        // Each candidate memory's text, so that what was cut or dropped can be read too
        // (the prompt holds only what was kept). The prompt read these same scopes.
        let scopes = scope.private_context();
        let mut memories = serde_json::Map::new();
        for id in prompt.report.sections.iter().filter_map(|s| s.memory_id) {
            if let Some(e) = find_memory(self.store.as_ref(), &scopes, id).await {
                memories.insert(id.to_string(), row(&e, None));
            }
        }
        Ok(json!({
            "scope": scope.key(),
            "ms": ms,
            "messages": messages,
            "report": prompt.report,
            "memories": memories,
        }))
    }

    /// `GET /inspect/api/store`: counts per readable scope, the store and embedder, and the
    /// settings in force.
    async fn overview(&self, grant: &Grant) -> Result<Value, Refusal> {
        let mut counts = Vec::new();
        for scope in self.readable(grant).await? {
            let n = self.store.count(&scope).await.map_err(Refusal::store)?;
            counts.push(json!({ "key": scope.key(), "label": label(&scope), "memories": n }));
        }
        let info = self.store.info();
        Ok(json!({
            "store": info.name,
            "durable": info.durable,
            "capabilities": format!("{:?}", self.store.capabilities()),
            "scopes": counts,
            "settings": self.settings,
        }))
    }
}

/// A scope as people read it.
fn label(scope: &Scope) -> String {
    let mut out = format!("user {}", scope.user());
    if scope.tenant() != memory_core::DEFAULT_TENANT {
        out = format!("{} ({})", out, scope.tenant());
    }
    match scope.chat() {
        Some(chat) => format!("{out}, chat {chat}"),
        None => format!("{out}, their facts (every chat)"),
    }
}

/// One memory as the page shows it, with its search score when it came from one.
fn row(e: &MemoryEntry, scored: Option<Value>) -> Value {
    let mut out = json!({
        "id": e.id.to_string(),
        "kind": e.kind.as_str(),
        "role": e.role.map(|r| r.as_str()),
        "content": e.content,
        "context": e.context,
        "tags": e.tags.iter().map(|t| t.as_str()).collect::<Vec<_>>(),
        "pinned": e.pinned,
        "created_at": e.created_at.to_string(),
        "access_count": e.access_count,
        "valid_from": e.valid_from.map(|t| t.to_string()),
        "valid_until": e.valid_until.map(|t| t.to_string()),
        "superseded_by": e.superseded_by.map(|id| id.to_string()),
    });
    if let (Some(scored), Value::Object(map)) = (scored, &mut out) {
        map.insert("search".into(), scored);
    }
    out
}

/// Why an API request was not answered.
struct Refusal(StatusCode, String);

impl Refusal {
    fn bad(why: impl Into<String>) -> Self {
        Self(StatusCode::BAD_REQUEST, why.into())
    }

    /// A store error: what the caller got wrong is theirs (400, 404); the rest is the
    /// server's, said without the store's path.
    fn store(e: MemoryError) -> Self {
        match e {
            MemoryError::NotFound { .. } => Self(StatusCode::NOT_FOUND, ErrorChain(&e).to_string()),
            MemoryError::InvalidInput { .. } | MemoryError::Unsupported { .. } => {
                Self(StatusCode::BAD_REQUEST, ErrorChain(&e).to_string())
            }
            other => {
                tracing::error!(error = %ErrorChain(&other), "the inspector could not read the store");
                Self(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "the store could not be read; the details are in the server's log".into(),
                )
            }
        }
    }
}

/// The JSON body of a POST, or the answer to one that is not JSON of the expected shape.
async fn json_body<T: for<'de> Deserialize<'de>>(
    request: Request<Incoming>,
) -> Result<T, Response<Body>> {
    let json = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !json {
        return Err(refused(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "send the body as application/json",
        ));
    }
    let bytes = Limited::new(request.into_body(), MAX_BODY)
        .collect()
        .await
        .map(|c| c.to_bytes())
        .map_err(|_| {
            refused(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("the body is unreadable or larger than {MAX_BODY} bytes"),
            )
        })?;
    serde_json::from_slice(&bytes)
        .with_context(|| "the body is not the JSON expected")
        .map_err(|e| refused(StatusCode::BAD_REQUEST, crate::error_chain(&e)))
}
