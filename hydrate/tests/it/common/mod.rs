//! Shared fixtures: a fixed clock, Alice's memories, configs, and the redaction used by
//! snapshots (memory ids and timings replaced, keys sorted so `preserve_order` does not matter).

#![allow(
    dead_code,
    reason = "each test binary uses a different part of the shared helpers"
)]

use std::sync::Arc;

use hydrate::{CompiledPrompt, HydrateInput, HydrationConfig, SessionState, memory_provider};
use memory_core::{
    EmbeddingProvider, HashingEmbedder, Importance, MemoryBackend, MemoryKind, NewMemory, Role,
    Scope, Timestamp,
};
use prompt_ir::{ContextRequest, Relevance, TiktokenTokenizer, TokenBudget, Tokenizer};
use serde_json::Value;

pub(crate) const DIMS: usize = 256;

pub(crate) fn at(text: &str) -> Timestamp {
    Timestamp::parse_rfc3339(text).unwrap()
}

/// "Now" in every fixture: Tuesday 2026-03-10 09:30 UTC.
pub(crate) fn now() -> Timestamp {
    at("2026-03-10T09:30:00Z")
}

/// The prompt for `question` in `scope` at [`now`], in at most `budget` tokens.
pub(crate) async fn prompt_now(
    config: &HydrationConfig,
    scope: Scope,
    question: &str,
    budget: u32,
) -> CompiledPrompt {
    let request = ContextRequest::new(question, TokenBudget::new(budget).unwrap());
    let input = HydrateInput::new(scope, request).at(now());
    hydrate::compile(config, &hydrate::hydrate(config, &input).await.unwrap()).unwrap()
}

/// The text of a prompt's messages between its first (the system prompt) and its last (the
/// question).
pub(crate) fn data(prompt: &CompiledPrompt) -> String {
    prompt.messages[1..prompt.messages.len() - 1]
        .iter()
        .map(|m| m.content.as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

pub(crate) fn chat_scope(user: &str) -> Scope {
    Scope::for_user(user).unwrap().in_chat("tg-7").unwrap()
}

pub(crate) fn user_scope(user: &str) -> Scope {
    Scope::for_user(user).unwrap()
}

pub(crate) fn embedder() -> Arc<dyn EmbeddingProvider> {
    Arc::new(HashingEmbedder::new(DIMS).unwrap())
}

/// A fresh SQLite store in `dir`, with [`embedder`].
pub(crate) async fn sqlite_store(dir: &tempfile::TempDir) -> Arc<dyn MemoryBackend> {
    Arc::new(
        memory_sqlite::SqliteBackend::open(
            &dir.path().join("ava.db"),
            Some(embedder()),
            memory_sqlite::SqliteConfig::default(),
        )
        .await
        .unwrap(),
    )
}

pub(crate) fn tokenizer() -> Arc<dyn Tokenizer> {
    Arc::new(TiktokenTokenizer::for_model("gpt-4o").unwrap())
}

/// The prompt's messages as they would be sent: each message's tokens (o200k) plus the
/// per-message overhead, summed.
pub(crate) fn sent_message_tokens(prompt: &CompiledPrompt) -> u32 {
    let tok = tokenizer();
    prompt
        .messages
        .iter()
        .map(|m| tok.count(&m.content) + hydrate::MESSAGE_OVERHEAD_TOKENS)
        .sum()
}

fn message(role: Role, text: &str, when: &str) -> NewMemory {
    NewMemory::new(text).with_role(role).at(at(when))
}

fn fact(text: &str, when: &str, importance: f32) -> NewMemory {
    NewMemory::new(text)
        .with_kind(MemoryKind::Fact)
        .with_importance(Importance::new(importance).unwrap())
        .at(at(when))
}

/// Alice's memories: facts in her chat and user scopes, an old conversation about lentils
/// and her cat, and this morning's conversation.
pub(crate) async fn seed_alice(backend: &dyn MemoryBackend) {
    let chat = chat_scope("alice");
    backend
        .store_batch(
            &chat,
            vec![
                fact("Alice's cat is called Miso.", "2025-11-02T10:00:00Z", 0.9).pinned(),
                fact("Alice is vegetarian.", "2026-01-15T19:00:00Z", 0.8),
                message(Role::User, "Can you suggest a quick dinner? Something with lentils.", "2026-02-01T18:02:00Z"),
                message(Role::Assistant, "Try a red lentil dal: red lentils, onion, garlic, cumin and a tin of tomatoes, about 25 minutes.", "2026-02-01T18:03:00Z"),
                message(Role::User, "Miso knocked my coffee over again this morning.", "2026-02-20T08:15:00Z"),
                message(Role::Assistant, "Cats love that game. A mug with a lid might save the next one.", "2026-02-20T08:16:00Z"),
                message(Role::User, "Good morning! I just got home from my shift.", "2026-03-10T09:20:00Z"),
                message(Role::Assistant, "Welcome home. Long night?", "2026-03-10T09:21:00Z"),
                message(Role::User, "Very. I want something warm to eat before I sleep.", "2026-03-10T09:25:00Z"),
                message(Role::Assistant, "How about a soup, or a bowl of porridge?", "2026-03-10T09:26:00Z"),
            ],
        )
        .await
        .unwrap();
    backend
        .store(
            &user_scope("alice"),
            fact(
                "Alice works night shifts as a nurse.",
                "2025-12-01T12:00:00Z",
                0.7,
            ),
        )
        .await
        .unwrap();
}

pub(crate) const OBSERVATION: &str = "Could I make that lentil dal again? What did it need?";

/// A request with a 4-message window, 3 related messages at similarity 0.1 or more.
pub(crate) fn request(observation: &str, budget: u32) -> ContextRequest {
    let mut r = ContextRequest::new(observation, TokenBudget::new(budget).unwrap());
    r.strategy.temporal_window = 4;
    r.strategy.semantic_limit = 3;
    r.strategy.semantic_threshold = Relevance::new(0.1).unwrap();
    r
}

pub(crate) fn input(scope: Scope, request: ContextRequest) -> HydrateInput {
    HydrateInput::new(scope, request)
        .at(now())
        .with_state(SessionState {
            user: Some("Alice, prefers short answers".into()),
            ..SessionState::default()
        })
}

pub(crate) const SYSTEM_PROMPT: &str =
    "You are Ava, a friendly assistant with long-term memory. Answer briefly.";

pub(crate) fn config(
    backend: Arc<dyn MemoryBackend>,
    embedder: Option<Arc<dyn EmbeddingProvider>>,
) -> HydrationConfig {
    let mut c = HydrationConfig::new(SYSTEM_PROMPT, tokenizer())
        .with_provider(memory_provider(backend, embedder));
    // A conversation block of the newest few messages (about 80 tokens of an 8,000-token
    // prompt when it starts), so the fixtures' older talk is searched for.
    c.conversation_share = 0.02;
    c
}

/// What a snapshot shows: the messages and the explain report, memory ids replaced by
/// `[id-N]` (numbered by first appearance), timings by `[elapsed]`, keys sorted.
pub(crate) fn redacted(prompt: &CompiledPrompt) -> Value {
    let value = serde_json::json!({ "messages": prompt.messages, "report": prompt.report });
    let mut ids = Vec::new();
    walk(value, None, &mut ids)
}

fn walk(value: Value, key: Option<&str>, ids: &mut Vec<String>) -> Value {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(String, Value)> = map.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(
                entries
                    .into_iter()
                    .map(|(k, v)| {
                        let v = walk(v, Some(&k), ids);
                        (k, v)
                    })
                    .collect(),
            )
        }
        Value::Array(items) => Value::Array(items.into_iter().map(|v| walk(v, key, ids)).collect()),
        Value::Number(_) if key == Some("elapsed_ms") => Value::String("[elapsed]".into()),
        Value::String(s) => Value::String(redact_uuids(&s, ids)),
        other => other,
    }
}

fn is_uuid(b: &[u8]) -> bool {
    b.len() == 36
        && b.iter().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => *c == b'-',
            _ => c.is_ascii_hexdigit(),
        })
}

fn redact_uuids(s: &str, ids: &mut Vec<String>) -> String {
    let bytes = s.as_bytes();
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    while i < bytes.len() {
        if i + 36 <= bytes.len() && is_uuid(&bytes[i..i + 36]) {
            let id = &s[i..i + 36];
            let n = match ids.iter().position(|x| x == id) {
                Some(p) => p + 1,
                None => {
                    ids.push(id.to_owned());
                    ids.len()
                }
            };
            out.push_str(&format!("[id-{n}]"));
            i += 36;
        } else {
            let c = s[i..].chars().next().unwrap();
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

/// A Cohere-shaped `/rerank` server on loopback that puts whatever mentions cumin or
/// turmeric first (0.9), everything else at 0.5, and the tax forms at 0 (dropped by a
/// `min_score`).
pub(crate) async fn spice_reranker() -> wiremock::MockServer {
    let server = wiremock::MockServer::start().await;
    wiremock::Mock::given(wiremock::matchers::method("POST"))
        .respond_with(|req: &wiremock::Request| {
            let body: Value = serde_json::from_slice(&req.body).unwrap();
            let results: Vec<Value> = body["documents"]
                .as_array()
                .unwrap()
                .iter()
                .enumerate()
                .map(|(i, d)| {
                    let d = d.as_str().unwrap();
                    let s = if d.contains("Tax") {
                        0.0
                    } else if d.contains("cumin") || d.contains("turmeric") {
                        0.9
                    } else {
                        0.5
                    };
                    serde_json::json!({"index": i, "relevance_score": s})
                })
                .collect();
            wiremock::ResponseTemplate::new(200)
                .set_body_json(serde_json::json!({"results": results}))
        })
        .mount(&server)
        .await;
    server
}

/// A store in trouble: its reads (search, recent, by tags) take `delay` and then, if `error`
/// is set, fail with what it makes; writes and everything else pass straight through. `name`,
/// if set, is the name its `info()` gives (sources name their store by it).
#[derive(Debug)]
pub(crate) struct TroubledStore {
    pub(crate) inner: Arc<dyn MemoryBackend>,
    pub(crate) name: Option<&'static str>,
    pub(crate) delay: std::time::Duration,
    pub(crate) error: Option<fn() -> memory_core::MemoryError>,
}

impl TroubledStore {
    async fn read<T>(
        &self,
        f: impl Future<Output = memory_core::Result<T>>,
    ) -> memory_core::Result<T> {
        tokio::time::sleep(self.delay).await;
        if let Some(error) = self.error {
            return Err(error());
        }
        f.await
    }
}

#[async_trait::async_trait]
impl MemoryBackend for TroubledStore {
    fn info(&self) -> memory_core::BackendInfo {
        let info = self.inner.info();
        match self.name {
            Some(name) => memory_core::BackendInfo {
                name: name.into(),
                ..info
            },
            None => info,
        }
    }
    fn capabilities(&self) -> memory_core::Capabilities {
        self.inner.capabilities()
    }
    async fn store_batch(
        &self,
        s: &Scope,
        m: Vec<NewMemory>,
    ) -> memory_core::Result<Vec<memory_core::MemoryEntry>> {
        self.inner.store_batch(s, m).await
    }
    async fn get(
        &self,
        s: &Scope,
        id: memory_core::MemoryId,
    ) -> memory_core::Result<memory_core::MemoryEntry> {
        self.inner.get(s, id).await
    }
    async fn search(
        &self,
        s: &Scope,
        r: &memory_core::SearchRequest,
    ) -> memory_core::Result<Vec<memory_core::ScoredMemory>> {
        self.read(self.inner.search(s, r)).await
    }
    async fn recent(
        &self,
        s: &Scope,
        limit: usize,
        f: &memory_core::Filter,
    ) -> memory_core::Result<Vec<memory_core::MemoryEntry>> {
        self.read(self.inner.recent(s, limit, f)).await
    }
    async fn by_tags(
        &self,
        s: &Scope,
        t: &memory_core::TagQuery,
        limit: usize,
    ) -> memory_core::Result<Vec<memory_core::MemoryEntry>> {
        self.read(self.inner.by_tags(s, t, limit)).await
    }
    async fn update(
        &self,
        s: &Scope,
        id: memory_core::MemoryId,
        p: memory_core::MemoryPatch,
    ) -> memory_core::Result<memory_core::MemoryEntry> {
        self.inner.update(s, id, p).await
    }
    async fn delete(&self, s: &Scope, id: memory_core::MemoryId) -> memory_core::Result<()> {
        self.inner.delete(s, id).await
    }
    async fn delete_scope(&self, s: &Scope) -> memory_core::Result<u64> {
        self.inner.delete_scope(s).await
    }
    async fn prune(
        &self,
        s: &Scope,
        p: &memory_core::PrunePolicy,
    ) -> memory_core::Result<memory_core::PruneReport> {
        self.inner.prune(s, p).await
    }
    async fn count(&self, s: &Scope) -> memory_core::Result<u64> {
        self.inner.count(s).await
    }
    async fn scopes(
        &self,
        tenant: Option<&str>,
        user: Option<&str>,
    ) -> memory_core::Result<Vec<Scope>> {
        self.inner.scopes(tenant, user).await
    }
    async fn try_lease(
        &self,
        name: &str,
        holder: &str,
        ttl: std::time::Duration,
    ) -> memory_core::Result<bool> {
        self.inner.try_lease(name, holder, ttl).await
    }
    async fn release_lease(&self, name: &str, holder: &str) -> memory_core::Result<()> {
        self.inner.release_lease(name, holder).await
    }
    async fn end_lease(&self, name: &str) -> memory_core::Result<()> {
        self.inner.end_lease(name).await
    }
}

/// The HTTP reranker (model `rerank-v3.5`, dropping scores under 0.1) of the `/v2/rerank`
/// server at `server` ([`spice_reranker`]).
pub(crate) fn reranker_of(server: &wiremock::MockServer) -> Arc<dyn hydrate::Reranker> {
    Arc::new(
        hydrate::HttpReranker::new(hydrate::HttpRerankerConfig {
            model: Some("rerank-v3.5".into()),
            min_score: Some(0.1),
            ..hydrate::HttpRerankerConfig::new(format!("{}/v2/rerank", server.uri()))
        })
        .unwrap(),
    )
}

/// How the semantic source of `report` searched (`hybrid`, `keyword`, ...).
pub(crate) fn semantic_search(report: &hydrate::ExplainReport) -> Option<&str> {
    report
        .source(hydrate::SourceKind::Semantic)
        .unwrap()
        .search
        .as_deref()
}
