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
use std::sync::Arc;

use anyhow::Context;
use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use memory_core::{
    Consolidation, ErrorChain, Filter, MemoryBackend, MemoryEntry, MemoryError, MemoryId,
    MemoryKind, Scope, SearchRequest, Tag, TagQuery, Timestamp,
};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::agent::{Agent, Audience, find_memory};
use crate::mcp::MemoryView;
use crate::prompts;
use crate::serve::tokens::Grant;
use crate::shared::body::{Body, BodyError, read_whole};
use crate::shared::dates::{DayEdge, parse_day_or_time};
use crate::shared::error_chain;

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

/// What the inspector reads: the store, an agent that builds prompts without counting
/// recalls, and the settings in force.
pub(crate) struct Inspector {
    /// The store of `live`.
    store: Arc<dyn MemoryBackend>,
    /// `live`, only looking: builds the prompts it explains, counts no recall.
    agent: Agent,
    /// The agent that serves the apps (its last learning is what "undo" reverts).
    live: Agent,
    /// The settings in force, secrets left out.
    settings: Value,
    /// The SQLite store itself, for its totals (operators only: they count everyone).
    sqlite: Option<Arc<memory_sqlite::SqliteBackend>>,
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
    let sent = [
        (header::CONTENT_TYPE, kind),
        (header::CONTENT_SECURITY_POLICY, POLICY),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::CACHE_CONTROL, "no-store"),
        (header::X_FRAME_OPTIONS, "DENY"),
    ];
    for (name, value) in sent {
        response
            .headers_mut()
            .insert(name, header::HeaderValue::from_static(value));
    }
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

/// What the changing calls take: the scope, and the memory for `restore` and `end`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ChangeArgs {
    /// The scope key (one of `/me`'s).
    scope: String,
    /// The memory (`restore`, `end`).
    #[serde(default)]
    id: Option<String>,
}

/// How many facts the lifecycle view lists.
const RECENT_FACTS: usize = 50;

impl std::fmt::Debug for Inspector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inspector")
            .field("store", &self.store.info().name)
            .finish_non_exhaustive()
    }
}

impl Inspector {
    /// An inspector of what `live` (the server's agent) remembers: it explains prompts as
    /// `live` builds them, only looking ([`Agent::looking_only`]), undoes what `live` learned
    /// last, and shows `settings`.
    pub(crate) fn new(live: Agent, settings: Value) -> Self {
        Self {
            store: Arc::clone(live.store()),
            agent: live.looking_only(),
            live,
            settings,
            sqlite: None,
        }
    }

    /// The same inspector, showing operators the totals of this SQLite store.
    pub(crate) fn with_sqlite(mut self, sqlite: Option<Arc<memory_sqlite::SqliteBackend>>) -> Self {
        self.sqlite = sqlite;
        self
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
            (Method::GET, "lifecycle") => self.lifecycle(grant, &query(&request)).await,
            (Method::GET, "prompts") => self.prompts(grant, &query(&request)).await,
            (Method::POST, "restore" | "end" | "consolidate" | "undo") => {
                if grant.read_only {
                    return refused(
                        StatusCode::FORBIDDEN,
                        "this token is read-only; it may not change anything",
                    );
                }
                match json_body::<ChangeArgs>(request).await {
                    Ok(args) => self.change(grant, route, args).await,
                    Err(response) => return response,
                }
            }
            (
                _,
                "me" | "memories" | "history" | "store" | "explain" | "lifecycle" | "prompts"
                | "restore" | "end" | "consolidate" | "undo",
            ) => {
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
        // Time: created from `after`, before `before`; or everything as it stood at `as_of`
        // (created by then and valid then, replaced since or not).
        // A day alone is the end of it for `as_of` (as `ava recall --as-of` reads it) and
        // its start for the bounds.
        let time = |key: &str, edge: DayEdge| -> Result<Option<Timestamp>, Refusal> {
            args.get(key)
                .map(|t| t.trim())
                .filter(|t| !t.is_empty())
                .map(|t| {
                    parse_day_or_time(t, edge).map_err(|e| Refusal::bad(format!("{key}: {e}")))
                })
                .transpose()
        };
        if let Some(at) = time("as_of", DayEdge::End)? {
            let as_of = Filter::as_of(at);
            filter.created_before = as_of.created_before;
            filter.valid_at = as_of.valid_at;
            filter.include_superseded = true;
        }
        if let Some(after) = time("after", DayEdge::Start)? {
            filter.created_after = Some(after);
        }
        if let Some(before) = time("before", DayEdge::Start)? {
            filter.created_before = Some(filter.created_before.map_or(before, |b| b.min(before)));
        }
        let q = args.get("q").map(|q| q.trim()).unwrap_or_default();
        if q.len() > MAX_MESSAGE_BYTES {
            return Err(Refusal::bad(format!(
                "q: {} bytes; at most {MAX_MESSAGE_BYTES}",
                q.len()
            )));
        }
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
            .map_err(|e| Refusal(StatusCode::INTERNAL_SERVER_ERROR, error_chain(&e)))?;
        let messages: Vec<Value> = prompt
            .messages
            .iter()
            .zip(&prompt.layout)
            .map(|(m, block)| {
                json!({ "role": m.role, "content": m.content, "block": format!("{block:?}") })
            })
            .collect();
        let ms = started.elapsed().as_secs_f64() * 1e3;
        Ok(json!({
            "scope": scope.key(),
            "ms": ms,
            "messages": messages,
            "memories": self.candidates(&scope, &prompt.report).await,
            "report": prompt.report,
        }))
    }

    /// Each candidate memory's text, so that what was cut or dropped can be read too (the
    /// prompt holds only what was kept), looked up where the prompt read.
    async fn candidates(&self, scope: &Scope, report: &hydrate::ExplainReport) -> Value {
        let scopes = scope.private_context();
        let mut memories = serde_json::Map::new();
        for id in report.sections.iter().filter_map(|s| s.memory_id) {
            if let Some(e) = find_memory(self.store.as_ref(), &scopes, id).await {
                memories.insert(id.to_string(), row(&e, None));
            }
        }
        Value::Object(memories)
    }

    /// `GET /inspect/api/prompts?scope=`: the last prompts the bot or the proxy built for
    /// the scope, by any process sharing the store (newest first, of the newest it keeps),
    /// each with who built it, for whom in a group, and its explain report.
    async fn prompts(
        &self,
        grant: &Grant,
        args: &BTreeMap<String, String>,
    ) -> Result<Value, Refusal> {
        let scope = self.scope(grant, args.get("scope")).await?;
        let mut out = Vec::new();
        let kept = prompts::newest(self.store.as_ref(), &scope)
            .await
            .map_err(Refusal::store)?;
        for (at, p) in kept {
            out.push(json!({
                "id": p.id,
                "at": at.to_string(),
                "by": p.by,
                "member": p.member,
                "memories": self.candidates(&scope, &p.report).await,
                "report": p.report,
            }));
        }
        Ok(json!({ "scope": scope.key(), "prompts": out }))
    }

    /// `GET /inspect/api/lifecycle?scope=`: what consolidating the scope would merge (a dry
    /// run), and its facts newest first with what became of each (current, replaced,
    /// ended), so that a token that may write can restore or end one.
    async fn lifecycle(
        &self,
        grant: &Grant,
        args: &BTreeMap<String, String>,
    ) -> Result<Value, Refusal> {
        let scope = self.scope(grant, args.get("scope")).await?;
        let dry_run = Consolidation {
            dry_run: true,
            ..Consolidation::new()
        };
        let report = memory_core::consolidate(self.store.as_ref(), &scope, &dry_run)
            .await
            .map_err(Refusal::store)?;
        let mut merges = Vec::new();
        for m in &report.merged {
            let mut merged = Vec::new();
            for &id in &m.merged {
                merged
                    .push(json!({ "id": id.to_string(), "content": self.text(&scope, id).await }));
            }
            merges.push(json!({
                "kept": { "id": m.kept.to_string(), "content": self.text(&scope, m.kept).await },
                "merged": merged,
                "why": m.why,
            }));
        }
        let filter = Filter {
            kinds: vec![MemoryKind::Fact],
            include_superseded: true,
            ..Filter::default()
        };
        let now = Timestamp::now();
        let facts: Vec<Value> = self
            .store
            .recent(&scope, RECENT_FACTS, &filter)
            .await
            .map_err(Refusal::store)?
            .iter()
            .map(|e| {
                let mut r = row(e, None);
                r["state"] = json!(if e.superseded_by.is_some() {
                    "replaced"
                } else if !e.is_valid_at(now) {
                    "ended"
                } else {
                    "current"
                });
                r
            })
            .collect();
        Ok(json!({
            "scope": scope.key(),
            "may_write": !grant.read_only,
            "would_merge": merges,
            "failed": report.failed,
            "facts": facts,
        }))
    }

    /// The text of memory `id` of `scope` (empty if it is gone).
    async fn text(&self, scope: &Scope, id: MemoryId) -> String {
        self.store
            .get(scope, id)
            .await
            .map(|e| e.content)
            .unwrap_or_default()
    }

    /// The changing calls (never for a read-only token): `restore` makes a replaced or ended
    /// memory current again, `end` ends a current one now, `consolidate` merges what the
    /// dry run showed, `undo` reverts the last change fact learning made in the scope.
    async fn change(&self, grant: &Grant, what: &str, args: ChangeArgs) -> Result<Value, Refusal> {
        let scope = self.scope(grant, Some(&args.scope)).await?;
        let id = || {
            args.id
                .as_deref()
                .and_then(|id| id.parse::<MemoryId>().ok())
                .ok_or_else(|| Refusal::bad("id: expected a memory id"))
        };
        let store = self.store.as_ref();
        let done = match what {
            "restore" => {
                let e = memory_core::restore(store, &scope, id()?)
                    .await
                    .map_err(Refusal::store)?;
                json!({ "restored": row(&e, None) })
            }
            "end" => {
                let now = Timestamp::now();
                let e = memory_core::invalidate(store, &scope, id()?, now)
                    .await
                    .map_err(Refusal::store)?;
                json!({ "ended": row(&e, None) })
            }
            "consolidate" => {
                let report = memory_core::consolidate(store, &scope, &Consolidation::new())
                    .await
                    .map_err(Refusal::store)?;
                json!({ "report": report })
            }
            _ => {
                let lines = self
                    .live
                    .undo_learning(&scope, Audience::Private, None)
                    .await
                    .map_err(|e| Refusal(StatusCode::INTERNAL_SERVER_ERROR, error_chain(&e)))?;
                json!({ "undone": lines })
            }
        };
        tracing::info!(scope = %scope, what, "the inspector changed memory");
        Ok(done)
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
        // The whole store's totals count every identity's memories: an operator's to see.
        let totals = match (&self.sqlite, grant.operator) {
            (Some(sqlite), true) => {
                let t = sqlite.stats().await.map_err(Refusal::store)?;
                json!({
                    "file_bytes": t.bytes,
                    "memories": t.memories,
                    "facts": t.facts,
                    "with_vectors": t.embedded,
                    "without_vectors": t.memories - t.embedded.min(t.memories),
                    "scopes": t.scopes,
                    "users": t.users,
                })
            }
            _ => Value::Null,
        };
        Ok(json!({
            "store": info.name,
            "durable": info.durable,
            "embedding_space": info.embedding_space.as_ref().map(|s| s.to_string()),
            "scopes": counts,
            "totals": totals,
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
    // What MCP shows of a memory, with how often it was recalled and what became of it.
    let mut out = json!(MemoryView::from(e));
    if let Value::Object(map) = &mut out {
        map.insert("access_count".into(), json!(e.access_count));
        map.insert(
            "valid_from".into(),
            json!(e.valid_from.map(|t| t.to_string())),
        );
        map.insert(
            "valid_until".into(),
            json!(e.valid_until.map(|t| t.to_string())),
        );
        map.insert(
            "superseded_by".into(),
            json!(e.superseded_by.map(|id| id.to_string())),
        );
        if let Some(scored) = scored {
            map.insert("search".into(), scored);
        }
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
    let bytes = read_whole(request.into_body(), MAX_BODY)
        .await
        .map_err(|e| match e {
            BodyError::TooLarge => refused(
                e.status(),
                format!("the body is larger than {MAX_BODY} bytes"),
            ),
            BodyError::Unreadable => refused(e.status(), "the body could not be read"),
        })?;
    serde_json::from_slice(&bytes)
        .with_context(|| "the body is not the JSON expected")
        .map_err(|e| refused(StatusCode::BAD_REQUEST, error_chain(&e)))
}
