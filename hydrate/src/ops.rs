//! The agent-facing layer: `infer` (hydrate, compile, call the model, run its tool calls,
//! memory tools and the application's own, repeat until it answers), and the memory
//! operations `remember`, `recall` and `forget`, also offered to the model as tools (defined
//! in `tools`). Every operation acts on one scope.
//!
//! # Whose facts
//!
//! A fact belongs to the person, not to the chat it was said in: in a private context
//! (the default) `remember` keeps it in the user-wide scope ([`Scope::user_wide`]), and
//! the prompt, `recall` and `forget` read both the chat and the user-wide scope, so it
//! follows the user into every private context. A shared chat (a group,
//! [`Ops::in_shared_chat`]) never reads the user-wide scope nor the user's documents (the
//! people in it must not see a member's private facts), and what is remembered there stays
//! in the chat. Which of the two an `Ops` is, is its [`Reach`], which it puts on every input
//! it prepares, whatever the input said.

use std::sync::Arc;

use memory_core::{
    ErrorChain, MemoryBackend, MemoryEntry, MemoryId, MemoryKind, NewMemory, Remembered, Scope,
    ScoredMemory, SearchRequest, tags,
};
use prompt_ir::{ContextRequest, RecencyDecay};
use serde::Serialize;
use serde_json::{Value, json};
use tracing::Instrument;

use crate::chat::{ChatMessage, ChatModel, ToolCall};
use crate::compile::{CompiledPrompt, compile};
use crate::config::{HydrateInput, HydrationConfig, SessionState, canonical_json};
use crate::error::{Error, Result};
use crate::hydrate::hydrate;
use crate::reach::Reach;
use crate::recall::RecallRanking;
use crate::render::memory_block;
use crate::tools::{FORGET, MAX_RECALL, RECALL, REMEMBER};

/// Default bound on model calls in one `infer`.
pub const DEFAULT_MAX_STEPS: usize = 4;

/// One tool call that `infer` ran.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ToolRun {
    /// The call's id.
    pub call_id: String,
    /// The tool.
    pub name: String,
    /// Whether it succeeded.
    pub ok: bool,
    /// What the model was told (a JSON object, or a recalled-data block).
    pub output: String,
}

/// The result of [`Ops::infer`].
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Inference {
    /// The model's final answer.
    pub reply: String,
    /// The model that gave it.
    pub model: String,
    /// How many model calls it took.
    pub steps: usize,
    /// The tool calls run on the way, in order.
    pub tool_runs: Vec<ToolRun>,
    /// The compiled prompt the first call was given, with its explain report.
    pub prompt: CompiledPrompt,
}

/// How long building one prompt took, by part ([`Ops::prepare_timed`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PrepareTimes {
    /// Gathering and ranking the context ([`crate::hydrate()`]).
    pub hydrate: std::time::Duration,
    /// Fitting it to the budget and laying out the messages ([`crate::compile()`]).
    pub compile: std::time::Duration,
}

/// Agent operations over one scope of a backend. Cheap to clone; make one per chat.
#[derive(Clone, Debug)]
pub struct Ops {
    config: Arc<HydrationConfig>,
    backend: Arc<dyn MemoryBackend>,
    scope: Scope,
    state: SessionState,
    max_steps: usize,
    /// Whose memories beyond the scope its prompts may read: a private context, or a chat
    /// others share (a group), which the user-wide scope stays out of.
    reach: Reach,
    /// Whether its searches count what they find as recalled.
    record_access: bool,
    /// The store's embedder's window ([`memory_core::EmbeddingProvider::window_bytes`]):
    /// recall does not lift a hit longer than this, as the semantic source does not.
    window: Option<usize>,
    /// In a shared chat, the tag of the member these operations act for
    /// ([`Ops::acting_for`]).
    member: Option<memory_core::Tag>,
}

impl Ops {
    /// Operations on `scope` of `backend`, hydrating with `config`.
    pub fn new(
        config: Arc<HydrationConfig>,
        backend: Arc<dyn MemoryBackend>,
        scope: Scope,
    ) -> Self {
        Self {
            config,
            backend,
            scope,
            state: SessionState::default(),
            max_steps: DEFAULT_MAX_STEPS,
            reach: Reach::Private,
            record_access: true,
            window: None,
            member: None,
        }
    }

    /// The same operations knowing the store's embedder's window (its
    /// [`window_bytes`](memory_core::EmbeddingProvider::window_bytes)): a memory longer than
    /// that was searched passage by passage, so `recall` keeps its own score instead of
    /// lifting it by the talk around it, as the prompt's semantic source does. Without it
    /// every hit may be lifted.
    pub fn with_embedder_window(mut self, bytes: Option<usize>) -> Self {
        self.window = bytes;
        self
    }

    /// The same operations for a chat that others share (a group): prompts, `recall` and
    /// `forget` never read the user's user-wide scope (their private facts) nor their
    /// documents, and `remember` keeps what it is told in the chat. See the module docs.
    pub fn in_shared_chat(mut self) -> Self {
        self.reach = Reach::SHARED;
        self
    }

    /// In a shared chat, the same operations with the speaker `user`'s user-wide facts in
    /// the prompt: they chose to share them there. It is these operations' [`Reach`], which
    /// no input can widen. `recall` and `forget` stay within the chat. Outside a shared chat
    /// it changes nothing (a private context reads the user's own facts anyway).
    pub fn sharing_facts_of(mut self, user: &str) -> Self {
        self.reach = self.reach.sharing_facts_of(user);
        self
    }

    /// The same operations reading what `reach` allows (a private context, or a shared
    /// chat and whose facts it may hold): [`Ops::in_shared_chat`] and
    /// [`Ops::sharing_facts_of`] in one value.
    pub fn with_reach(mut self, reach: Reach) -> Self {
        self.reach = reach;
        self
    }

    /// The same operations only looking: their prompts' searches count nothing as
    /// recalled (a dry run, a replay, a read-only caller), so they change nothing the
    /// ranking reads.
    pub fn looking_only(mut self) -> Self {
        self.record_access = false;
        self
    }

    /// Whose memories beyond the scope these operations read.
    pub fn reach(&self) -> &Reach {
        &self.reach
    }

    /// In a shared chat, the same operations acting for the member whose memories carry
    /// `tag` (the bot's `from:<id>`): what `remember` keeps is tagged with them, so that
    /// erasing the member erases it, and `forget` ends only memories tagged with them (a
    /// member acts on their own part of the chat, not on another's). Outside a shared chat
    /// it changes nothing.
    pub fn acting_for(mut self, tag: memory_core::Tag) -> Self {
        if self.reach.is_shared() {
            self.member = Some(tag);
        }
        self
    }

    /// The member these operations act for in a shared chat ([`Ops::acting_for`]).
    pub fn member(&self) -> Option<&memory_core::Tag> {
        self.member.as_ref()
    }

    /// Where a fact told here is kept: the user-wide scope in a private context, the chat
    /// itself in a shared one.
    pub fn facts_scope(&self) -> Scope {
        if self.reach.is_shared() {
            self.scope.clone()
        } else {
            self.scope.user_wide()
        }
    }

    /// The scopes this context reads memories from: its own, then (in a private context
    /// narrowed to a chat) the user-wide one.
    pub fn readable_scopes(&self) -> Vec<Scope> {
        if self.reach.is_shared() {
            vec![self.scope.clone()]
        } else {
            self.scope.private_context()
        }
    }

    /// Sets the state shown in prompts.
    pub fn with_state(mut self, state: SessionState) -> Self {
        self.state = state;
        self
    }

    /// Sets the bound on model calls per `infer` (at least 1).
    pub fn with_max_steps(mut self, max_steps: usize) -> Result<Self> {
        if max_steps == 0 {
            return Err(Error::invalid(
                "max steps",
                "is 0; at least one model call is needed",
            ));
        }
        self.max_steps = max_steps;
        Ok(self)
    }

    /// The scope every operation acts on.
    pub fn scope(&self) -> &Scope {
        &self.scope
    }

    /// Hydrates and compiles a request for this scope without calling a model. The prompt
    /// reads what these operations' [`Reach`] allows, whatever `input` says, and records
    /// access only when both these operations and the input do.
    pub async fn prepare(&self, input: &HydrateInput) -> Result<CompiledPrompt> {
        Ok(self.prepare_timed(input).await?.0)
    }

    /// [`Ops::prepare`], saying how long hydrating and compiling each took (for metrics).
    pub async fn prepare_timed(
        &self,
        input: &HydrateInput,
    ) -> Result<(CompiledPrompt, PrepareTimes)> {
        self.check_scope(input)?;
        let started = std::time::Instant::now();
        let record_access = input.record_access && self.record_access;
        let hydrated = if input.reach == self.reach && input.record_access == record_access {
            hydrate(&self.config, input).await?
        } else {
            let mut own = input.clone();
            own.reach = self.reach.clone();
            own.record_access = record_access;
            hydrate(&self.config, &own).await?
        };
        let hydrated_at = std::time::Instant::now();
        let prompt = compile(&self.config, &hydrated)?;
        let times = PrepareTimes {
            hydrate: hydrated_at.duration_since(started),
            compile: hydrated_at.elapsed(),
        };
        Ok((prompt, times))
    }

    /// Answers `request`: hydrate and compile now, then [`Ops::infer_with`].
    pub async fn infer(&self, model: &dyn ChatModel, request: ContextRequest) -> Result<Inference> {
        self.infer_with(model, self.input(request)).await
    }

    /// The hydrate input of `request` in this scope, now, with this state and reach.
    pub fn input(&self, request: ContextRequest) -> HydrateInput {
        let input = HydrateInput::new(self.scope.clone(), request)
            .with_state(self.state.clone())
            .with_reach(self.reach.clone());
        match self.record_access {
            true => input,
            false => input.without_access_tracking(),
        }
    }

    /// Answers a fully specified request: compile it, call the model, run the tools it calls
    /// (memory tools, and application tools with a handler) and call it again with their results, until it answers without tool calls or the
    /// step bound is reached ([`Error::MaxSteps`]). Unknown tools and bad arguments are
    /// reported to the model as tool errors, not returned.
    pub async fn infer_with(
        &self,
        model: &dyn ChatModel,
        input: HydrateInput,
    ) -> Result<Inference> {
        let prompt = self.prepare(&input).await?;
        self.infer_prompt(model, prompt).await
    }

    /// [`Ops::infer_with`] from a prompt already prepared ([`Ops::prepare_timed`]).
    pub async fn infer_prompt(
        &self,
        model: &dyn ChatModel,
        prompt: CompiledPrompt,
    ) -> Result<Inference> {
        let span = tracing::info_span!(
            "chat",
            gen_ai.operation.name = "chat",
            gen_ai.request.model = model.name(),
            gen_ai.response.model = tracing::field::Empty,
            gen_ai.agent.steps = tracing::field::Empty,
            gen_ai.agent.tool_calls = tracing::field::Empty,
        );
        let recorded = span.clone();
        async move {
            let span = recorded;
            let mut messages = prompt.messages.clone();
            let mut tool_runs = Vec::new();
            for step in 1..=self.max_steps {
                let response = model.chat(&messages, &prompt.tools).await?;
                span.record("gen_ai.response.model", response.model.as_str());
                span.record("gen_ai.agent.steps", step);
                if response.tool_calls.is_empty() {
                    span.record("gen_ai.agent.tool_calls", tool_runs.len());
                    return Ok(Inference {
                        reply: response.content.unwrap_or_default(),
                        model: response.model,
                        steps: step,
                        tool_runs,
                        prompt,
                    });
                }
                messages.push(ChatMessage::assistant_calls(
                    response.content,
                    response.tool_calls.clone(),
                ));
                for call in &response.tool_calls {
                    let run = self.call_tool(call).await;
                    messages.push(ChatMessage::tool_result(call, run.output.clone()));
                    tool_runs.push(run);
                }
            }
            Err(Error::MaxSteps {
                model: model.name().to_owned(),
                steps: self.max_steps,
            })
        }
        .instrument(span)
        .await
    }

    /// Stores a fact in [`Ops::facts_scope`] (user-wide unless the chat is shared), or, when
    /// the same fact (same normalised content) is already there, merges into it
    /// ([`memory_core::remember_once`]); says which. The fact is tagged with the entities it
    /// mentions ([`crate::with_entity_tags`]) and, in a shared chat, with the member who told
    /// it ([`Ops::acting_for`]).
    pub async fn remember(
        &self,
        content: &str,
        context: Option<&str>,
        tag_names: &[&str],
    ) -> Result<Remembered> {
        let mut memory = NewMemory::new(content)
            .with_kind(MemoryKind::Fact)
            .with_source(format!("tool:{REMEMBER}"))
            .with_tags(tags(tag_names)?)
            .with_tags(self.member.clone());
        if let Some(c) = context {
            memory = memory.with_context(c);
        }
        let memory = crate::graph::with_entity_tags(memory);
        let kept = memory_core::keep_fact(
            self.backend.as_ref(),
            &self.facts_scope(),
            &[],
            memory,
            None,
            memory_core::Timestamp::now(),
        )
        .await?;
        let merged = matches!(&kept, memory_core::FactKept::Once(r) if r.merged);
        // A fact longer than one memory is kept in linked parts, named by the first.
        let entry = kept
            .entry()
            .cloned()
            .ok_or_else(|| Error::invalid("remember", "the store kept none of the fact's parts"))?;
        Ok(Remembered { entry, merged })
    }

    /// The memories of [`Ops::readable_scopes`] that best match `query` (1 to
    /// [`MAX_RECALL`]), best first: [`Ops::recall_with`] the best search the backend has
    /// (hybrid, else keyword, else semantic).
    pub async fn recall(&self, query: &str, limit: usize) -> Result<Vec<MemoryEntry>> {
        if !(1..=MAX_RECALL).contains(&limit) {
            return Err(Error::invalid(
                "recall limit",
                format!("{limit} is outside 1..={MAX_RECALL}"),
            ));
        }
        if query.trim().is_empty() {
            return Err(Error::invalid(
                "recall query",
                "is empty; say what to look for",
            ));
        }
        let request = SearchRequest::best(&self.backend.capabilities(), query).limit(limit);
        let hits = self.recall_with(request).await?;
        Ok(hits.into_iter().map(|h| h.entry).collect())
    }

    /// The memories of [`Ops::readable_scopes`] that best match `request` (its mode, filter
    /// and limit as the caller shaped them), ranked by the one recall ranking
    /// ([`crate::recall()`]) with this config's lift and scoring: what every door's lookup
    /// gives. Operations only looking ([`Ops::looking_only`]) count nothing as recalled.
    pub async fn recall_with(&self, mut request: SearchRequest) -> Result<Vec<ScoredMemory>> {
        if !self.record_access {
            request = request.without_access_tracking();
        }
        let ranking = RecallRanking {
            nearby_lift: self.config.memory.nearby_lift,
            window: self.window,
            scoring: self.config.scoring,
            decay: RecencyDecay::default(),
        };
        let scopes = self.readable_scopes();
        let now = memory_core::Timestamp::now();
        crate::recall::recall(self.backend.as_ref(), &scopes, &request, &ranking, now).await
    }

    /// Deletes a memory of [`Ops::readable_scopes`] (an id of any other scope is not found).
    /// Acting for a member of a shared chat ([`Ops::acting_for`]), a memory not tagged with
    /// them is refused ([`Error::InvalidInput`]) and stays.
    pub async fn forget(&self, id: MemoryId) -> Result<()> {
        let mut result = Ok(());
        for scope in self.readable_scopes() {
            result = match &self.member {
                None => self.backend.delete(&scope, id).await,
                Some(member) => match self.backend.get(&scope, id).await {
                    Ok(m) if !m.tags.contains(member) => {
                        return Err(Error::invalid(
                            "forget",
                            format!(
                                "memory {id} is not yours in this shared chat; a member \
                                 forgets only their own part of it"
                            ),
                        ));
                    }
                    Ok(_) => self.backend.delete(&scope, id).await,
                    Err(e) => Err(e),
                },
            };
            if !matches!(result, Err(memory_core::MemoryError::NotFound { .. })) {
                break;
            }
        }
        Ok(result?)
    }

    /// Runs one tool call (a memory tool, or an application tool with a handler); failures
    /// become an `{"error": ...}` output.
    pub async fn call_tool(&self, call: &ToolCall) -> ToolRun {
        let result = self.dispatch(call).await;
        tracing::debug!(gen_ai.tool.name = %call.name, gen_ai.tool.call.id = %call.id, ok = result.is_ok(), "tool call");
        let (ok, output) = match result {
            Ok(output) => (true, output),
            Err(e) => (
                false,
                canonical_json(&json!({ "error": ErrorChain(&e).to_string() })),
            ),
        };
        ToolRun {
            call_id: call.id.clone(),
            name: call.name.clone(),
            ok,
            output,
        }
    }

    async fn dispatch(&self, call: &ToolCall) -> Result<String> {
        // Some APIs send arguments as a JSON string.
        let args = match &call.arguments {
            Value::String(s) => serde_json::from_str(s).unwrap_or(Value::Null),
            other => other.clone(),
        };
        let text = |key: &'static str| -> Result<Option<&str>> {
            match args.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.as_str())),
                Some(other) => Err(Error::invalid(
                    "tool arguments",
                    format!("`{key}` is {other}, expected a string"),
                )),
            }
        };
        let required = |key: &'static str| -> Result<&str> {
            text(key)?.ok_or_else(|| {
                Error::invalid(
                    "tool arguments",
                    format!("`{}` needs a string argument `{key}`", call.name),
                )
            })
        };
        match call.name.as_str() {
            REMEMBER => {
                let tag_names: Vec<&str> = match args.get("tags") {
                    Some(Value::Array(items)) => items.iter().filter_map(Value::as_str).collect(),
                    _ => Vec::new(),
                };
                let done = self
                    .remember(required("content")?, text("context")?, &tag_names)
                    .await?;
                Ok(canonical_json(&json!({
                    "id": done.entry.id.to_string(),
                    "stored": true,
                    "already_known": done.merged,
                })))
            }
            RECALL => {
                let query = required("query")?;
                let limit = args
                    .get("limit")
                    .and_then(Value::as_u64)
                    .map_or(5, |n| usize::try_from(n).unwrap_or(MAX_RECALL))
                    .clamp(1, MAX_RECALL);
                let entries = self.recall(query, limit).await?;
                Ok(render_recall(query, &entries))
            }
            FORGET => {
                let id: MemoryId = required("id")?.parse()?;
                self.forget(id).await?;
                Ok(canonical_json(&json!({ "forgotten": id.to_string() })))
            }
            other => match self.config.tool_handlers.get(other) {
                Some(handler) => {
                    let limit = self.config.tool_timeout;
                    match tokio::time::timeout(limit, handler.call(&self.scope, args)).await {
                        Ok(result) => result,
                        Err(_) => Err(Error::invalid(
                            "tool call",
                            format!("`{other}` did not finish within {limit:?}"),
                        )),
                    }
                }
                None => {
                    let mut names = vec![REMEMBER, RECALL, FORGET];
                    names.extend(self.config.tool_handlers.keys().map(String::as_str));
                    Err(Error::invalid(
                        "tool call",
                        format!(
                            "there is no tool `{other}` that runs; the tools are {}",
                            names.join(", ")
                        ),
                    ))
                }
            },
        }
    }

    fn check_scope(&self, input: &HydrateInput) -> Result<()> {
        if input.scope != self.scope {
            return Err(Error::invalid(
                "hydrate input",
                format!(
                    "is for scope {}, but these ops act on {}; make an Ops for that scope",
                    input.scope, self.scope
                ),
            ));
        }
        Ok(())
    }
}

/// Recall results as a delimited data block, with ids so the model can `forget` one.
fn render_recall(query: &str, entries: &[MemoryEntry]) -> String {
    memory_block(
        "recall",
        &format!("memories matching \"{}\"", query.trim_end()),
        entries,
        "no memories matched",
    )
}
