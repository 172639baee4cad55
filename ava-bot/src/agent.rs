//! The conversation pipeline `ava chat` and `ava run` share: hydrate + compile a prompt for a
//! message, let the model answer (running its memory tool calls), store both turns, then in
//! the background learn facts from the exchange and prune the chat; and the dry run
//! `ava context` prints.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;

use anyhow::Context;
use hydrate::preview;
use hydrate::product::{chat_turn, in_reply_to};
use hydrate::{
    ChatModel, CompiledPrompt, Exchange, ExplainReport, FactExtractor, HydrateInput,
    HydrationConfig, Inference, Ops, SessionState, product,
};
use memory_core::{
    ConsolidationReport, EmbeddingProvider, Filter, MemoryBackend, MemoryError, MemoryId,
    MemoryKind, MemoryPatch, NewMemory, Role, Scope, Timestamp,
};
use prompt_ir::{Action, BudgetAllocation, ContextRequest, TokenBudget};

use crate::upkeep::Upkeep;

/// Ends a stored answer of which only the text before it reached the user.
pub(crate) const UNDELIVERED: &str = "[the rest of this answer did not reach the user]";

/// Default token budget of one prompt (the product's, [`product::DEFAULT_BUDGET`]).
pub(crate) use hydrate::product::DEFAULT_BUDGET;

/// A store, a hydration config over it, and (for answering) a chat model.
#[derive(Debug, Clone)]
pub(crate) struct Agent {
    store: Arc<dyn MemoryBackend>,
    config: Arc<HydrationConfig>,
    budget: TokenBudget,
    /// The store's embedder's window, for `recall` ([`Ops::with_embedder_window`]).
    window: Option<usize>,
    /// Prunes each chat as it is used (`ava run`, `ava chat`), unless turned off.
    upkeep: Option<Arc<Upkeep>>,
    /// Learns facts from each exchange, unless turned off: one exchange at a time per
    /// place facts are kept (a person, or a group), different people at once.
    facts: Option<FactExtractor>,
    /// One learner at a time per place facts are kept, whichever extractor learns.
    learners: Arc<Learners>,
    /// Work started after a reply: fact learning and pruning.
    background: Arc<Background>,
    /// Only looking ([`Agent::looking_only`]): its searches count nothing as recalled.
    looking: bool,
}

/// What `/undo` can take back of one learning, kept in the store as a record of kind
/// [`LEARNED_KIND`] where the facts are kept (so it survives a restart and reaches every
/// replica): the facts to end and those to hold again, and in a group the member whose
/// message taught them (only they may take it back). A record with nothing to do marks the
/// member's last learning as taken back.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
struct Learned {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    member: Option<String>,
    #[serde(default)]
    end: Vec<MemoryId>,
    #[serde(default)]
    restore: Vec<MemoryId>,
}

impl Learned {
    /// What undoing `report` takes: added and replacing facts end, replaced and ended ones
    /// hold again.
    fn of(report: &ConsolidationReport, member: Option<&memory_core::Tag>) -> Self {
        Self {
            member: member.map(|t| t.as_str().to_owned()),
            end: report
                .added
                .iter()
                .copied()
                .chain(report.superseded.iter().map(|s| s.new))
                .collect(),
            restore: report
                .superseded
                .iter()
                .map(|s| s.old)
                .chain(report.invalidated.iter().map(|i| i.id))
                .collect(),
        }
    }

    /// The facts it names: those it would end and those it would restore.
    fn facts(&self) -> Vec<MemoryId> {
        self.end.iter().chain(&self.restore).copied().collect()
    }

    /// Keeps it as the newest learning of `scope`, quoting `facts` (a learning's record goes
    /// when one of its facts is deleted: then there is nothing whole to take back); a
    /// failure is logged (only `/undo` loses).
    async fn keep(&self, store: &dyn MemoryBackend, scope: &Scope, facts: &[MemoryId]) {
        let kept = match serde_json::to_string(self) {
            Ok(body) => store
                .keep_record(
                    scope,
                    memory_core::Record::new(LEARNED_KIND, Timestamp::now(), body)
                        .quoting(facts.iter().copied()),
                    LEARNED_KEPT,
                )
                .await
                .map_err(|e| memory_core::ErrorChain(&e).to_string()),
            Err(e) => Err(e.to_string()),
        };
        if let Err(e) = kept {
            tracing::warn!(scope = %scope, error = %e, "could not note what was learned; /undo cannot take it back");
        }
    }
}

/// The record kind of what learning changed ([`Learned`]).
const LEARNED_KIND: &str = "learned";

/// How many learnings a place facts are kept remembers for `/undo` (members of a group
/// each take back their own newest).
const LEARNED_KEPT: usize = 50;

/// At most this many facts are listed (`/facts`, `ava facts`, MCP `facts`): the newest.
pub(crate) const MAX_FACTS_LISTED: usize = 100;

/// The facts that hold now in `scopes`, oldest first: what `/facts`, `ava facts` and MCP's
/// `facts` number from 1.
pub(crate) async fn current_facts(
    store: &dyn MemoryBackend,
    scopes: &[Scope],
) -> anyhow::Result<Vec<memory_core::MemoryEntry>> {
    let now = Timestamp::now();
    let filter = Filter {
        kinds: vec![MemoryKind::Fact],
        ..Filter::default()
    };
    let mut facts = Vec::new();
    for scope in scopes {
        // The newest first, then only those that hold now (whatever the store filters).
        let recent = store
            .recent(scope, MAX_FACTS_LISTED.saturating_mul(2), &filter)
            .await
            .context("read the facts")?;
        facts.extend(recent.into_iter().filter(|f| f.is_valid_at(now)));
    }
    facts.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.id.cmp(&b.id)));
    let excess = facts.len().saturating_sub(MAX_FACTS_LISTED);
    facts.drain(..excess);
    Ok(facts)
}

/// The memory `id` as the first of `scopes` that holds it has it (an id belongs to one
/// scope); `None` when none does.
pub(crate) async fn find_memory(
    store: &dyn MemoryBackend,
    scopes: &[Scope],
    id: MemoryId,
) -> Option<memory_core::MemoryEntry> {
    for scope in scopes {
        if let Ok(entry) = store.get(scope, id).await {
            return Some(entry);
        }
    }
    None
}

/// Facts for people, numbered from 1: the text, the day, and where each came from.
pub(crate) fn render_facts(facts: &[memory_core::MemoryEntry]) -> String {
    if facts.is_empty() {
        return "I hold no facts about you here.".to_owned();
    }
    let mut out = String::new();
    for (i, f) in facts.iter().enumerate() {
        let how = match f.context.as_deref() {
            Some(c) if c.starts_with("learned from") => "learned from a message of yours",
            Some(c) if !c.trim().is_empty() => c,
            _ => f.source.as_deref().unwrap_or("told"),
        };
        let place = if f.scope.is_user_wide() {
            "yours in every private chat"
        } else {
            "this chat only"
        };
        let _ = writeln!(
            out,
            "{}. {} ({}, {}; {place})",
            i + 1,
            preview(&f.content, 200),
            f.created_at.to_datetime().format("%Y-%m-%d"),
            preview(how, 60)
        );
    }
    out
}

/// Tasks that run after a reply, awaited before a one-shot process exits.
#[derive(Debug, Default)]
struct Background {
    running: tokio::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

/// Longest display name, chat title or language shown in a prompt's state, in characters.
pub(crate) const MAX_STATE_CHARS: usize = 64;

/// Longest goal a caller may set, in characters.
pub(crate) const MAX_GOAL_CHARS: usize = 300;

/// `text` as one line of at most `max` characters for a prompt's state section: control
/// characters (line breaks included) become spaces, runs of spaces one, and a cut ends in
/// `…`. What people call themselves and their groups is theirs to choose, so it is kept
/// short and on its own line.
pub(crate) fn state_line(text: &str, max: usize) -> String {
    let clean: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let words: Vec<&str> = clean.split_whitespace().collect();
    let line = words.join(" ");
    if line.chars().count() <= max {
        return line;
    }
    let mut cut: String = line.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// The state of a private context whose user goes by `name` (the CLI's and MCP's
/// `--name`), if any.
pub(crate) fn named(name: Option<&str>) -> SessionState {
    SessionState {
        user: name
            .map(|n| state_line(n, MAX_STATE_CHARS))
            .filter(|n| !n.is_empty()),
        ..SessionState::default()
    }
}

/// The user key of a group's shared conversation: its messages, the answers and the
/// group's own facts are kept in (this key, the group's chat id). Telegram user ids are
/// numbers, so no user has it.
pub(crate) const GROUP_USER: &str = "group";

/// Who says a message, and where: the scope the conversation is kept in, who else hears
/// it, what the prompt says about the speaker, and in a shared conversation the member.
#[derive(Clone, Debug)]
pub(crate) struct Speaker {
    /// Where the conversation is kept: the user's chat, or a group's shared scope.
    pub(crate) scope: Scope,
    /// Who else hears it.
    pub(crate) audience: Audience,
    /// What the prompt's state lines say (who is talking, the chat, the language).
    pub(crate) state: SessionState,
    /// In a shared conversation, the member who speaks.
    pub(crate) member: Option<Member>,
}

impl Speaker {
    /// The user of `scope` alone (the CLI, a private chat), described by `state`.
    pub(crate) fn private(scope: Scope, state: SessionState) -> Self {
        Self {
            scope,
            audience: Audience::Private,
            state,
            member: None,
        }
    }
}

/// A member of a shared conversation, as what is stored for them says.
#[derive(Clone, Debug)]
pub(crate) struct Member {
    /// On every memory stored for their messages and the answers to them (`from:<id>`), so
    /// their part of the conversation can be found and deleted.
    pub(crate) tag: memory_core::Tag,
    /// How stored lines name them (`Alice (@alice)`).
    pub(crate) name: String,
    /// Their user key, and whether they share their user-wide facts in this conversation
    /// (`/share`): then the prompts answering them hold those facts.
    pub(crate) user: String,
    pub(crate) shares: bool,
}

/// Who is in a chat: the user alone (a private chat, the CLI, an MCP client), or others too
/// (a group). A private context reads the user's user-wide facts and keeps what it learns
/// there; a group never reads them ([`Ops::in_shared_chat`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Audience {
    /// The user alone.
    Private,
    /// Others share the chat.
    Group,
}

/// One learning lock per place facts are kept, made when first needed and dropped when
/// idle, so exchanges of one person are learned in order and different people in parallel.
/// Across processes sharing the store the turn is a lease in it (`learn:<scope>`, see
/// `learn`).
#[derive(Debug, Default)]
pub(crate) struct Learners(std::sync::Mutex<HashMap<Scope, Arc<tokio::sync::Mutex<()>>>>);

impl Learners {
    fn lock_for(&self, scope: &Scope) -> Arc<tokio::sync::Mutex<()>> {
        let mut map = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // A lock no learner holds or waits for is idle.
        map.retain(|_, lock| Arc::strong_count(lock) > 1);
        Arc::clone(map.entry(scope.clone()).or_default())
    }
}

impl Background {
    async fn push(&self, task: tokio::task::JoinHandle<()>) {
        let mut running = self.running.lock().await;
        running.retain(|t| !t.is_finished());
        running.push(task);
    }

    async fn finish(&self) {
        let tasks = std::mem::take(&mut *self.running.lock().await);
        for t in tasks {
            let _ = t.await;
        }
    }
}

impl Agent {
    /// An agent over `store` whose prompts take at most `budget` tokens; `embedder` is the
    /// store's own, if it has one (see [`product::config`]).
    pub(crate) fn new(
        store: Arc<dyn MemoryBackend>,
        embedder: Option<Arc<dyn EmbeddingProvider>>,
        budget: u32,
    ) -> anyhow::Result<Self> {
        let budget = token_budget(budget)?;
        let window = embedder.as_ref().and_then(|e| e.window_bytes());
        // One definition with the evaluation (`cargo xtask eval locomo --context-budget`).
        let config = product::config(Arc::clone(&store), embedder).context("load the tokenizer")?;
        Ok(Self {
            store,
            config: Arc::new(config),
            budget,
            window,
            upkeep: None,
            facts: None,
            learners: Arc::default(),
            background: Arc::default(),
            looking: false,
        })
    }

    /// An agent that only looks (`ava context`): [`Agent::new`], [`Agent::looking_only`].
    pub(crate) fn dry_run(
        store: Arc<dyn MemoryBackend>,
        embedder: Option<Arc<dyn EmbeddingProvider>>,
        budget: u32,
    ) -> anyhow::Result<Self> {
        Ok(Self::new(store, embedder, budget)?.looking_only())
    }

    /// The same agent (its sources and caches shared), only looking: its searches do not
    /// count as recalls, so a dry run changes nothing the ranking reads.
    pub(crate) fn looking_only(&self) -> Self {
        let mut agent = self.clone();
        agent.looking = true;
        agent
    }

    /// The same agent for a prompt an app builds itself (the proxy, MCP `context`): without
    /// Ava's system prompt, constraints and memory tools, so what it compiles is the
    /// recalled blocks and nothing is compiled to be thrown away.
    pub(crate) fn for_apps(&self) -> Self {
        let mut agent = self.clone();
        let config = Arc::make_mut(&mut agent.config);
        config.system_prompt.clear();
        config.constraints.clear();
        config.memory_tools = false;
        agent
    }

    /// What Ava recalls for `message` of an app's user in `scope`, for the app's own prompt
    /// (see [`Agent::for_apps`]): with `conversation`, the conversation block too (the app
    /// leaves its history to Ava); without, only what is recalled for this message, leaving
    /// out what `present` (the app's own messages) already says.
    pub(crate) async fn recall_for_app(
        &self,
        scope: &Scope,
        message: &str,
        conversation: bool,
        present: Vec<String>,
    ) -> anyhow::Result<CompiledPrompt> {
        let mut request = self.request(message)?;
        let previous = if conversation {
            crate::prompts::previous(self.store.as_ref(), scope).await
        } else {
            request.strategy.temporal_window = 0;
            None
        };
        let input = HydrateInput::new(scope.clone(), request)
            .after(previous)
            .with_present(present);
        self.prepare_input(scope, &input).await
    }

    /// The same agent, pruning each chat after its exchanges as `upkeep` says.
    pub(crate) fn with_upkeep(mut self, upkeep: Option<Arc<Upkeep>>) -> Self {
        self.upkeep = upkeep;
        self
    }

    /// The same agent, learning facts from each exchange with `extractor` (in the
    /// background, after the reply; `None` learns nothing).
    pub(crate) fn with_facts(mut self, extractor: Option<FactExtractor>) -> Self {
        self.facts = extractor;
        self
    }

    /// Waits for the fact learning and pruning under way (before a one-shot process exits).
    pub(crate) async fn finish_background(&self) {
        self.background.finish().await;
    }

    /// The same agent, reranking retrieved memories with `reranker` (`None` keeps the
    /// scored order).
    pub(crate) fn with_reranker(mut self, reranker: Option<Arc<dyn hydrate::Reranker>>) -> Self {
        if let Some(r) = reranker {
            Arc::make_mut(&mut self.config).reranker = r;
        }
        self
    }

    /// The same agent, adding web results from `web` to each prompt (`None` adds none).
    pub(crate) fn with_web(mut self, web: Option<Arc<dyn hydrate::ContextSource>>) -> Self {
        if let Some(source) = web {
            let config = (*self.config).clone();
            self.config = Arc::new(config.with_source(hydrate::SourceKind::Web, source));
        }
        self
    }

    /// The same agent, adding passages of the user's documents from `documents` to each
    /// prompt (`None` adds none; see [`crate::config::documents`]).
    pub(crate) fn with_documents(
        mut self,
        documents: Option<Arc<dyn hydrate::ContextSource>>,
    ) -> Self {
        if let Some(source) = documents {
            let config = (*self.config).clone();
            self.config = Arc::new(config.with_source(hydrate::SourceKind::Vector, source));
        }
        self
    }

    /// The same agent, splitting each prompt's budget as `allocation` says (`None` keeps
    /// the default).
    pub(crate) fn with_allocation(mut self, allocation: Option<BudgetAllocation>) -> Self {
        if allocation.is_some() {
            Arc::make_mut(&mut self.config).allocation = allocation;
        }
        self
    }

    /// The same agent with prompts of at most `budget` tokens.
    pub(crate) fn with_budget(&self, budget: u32) -> anyhow::Result<Self> {
        let mut agent = self.clone();
        agent.budget = token_budget(budget)?;
        Ok(agent)
    }

    pub(crate) fn store(&self) -> &Arc<dyn MemoryBackend> {
        &self.store
    }

    /// The memory operations for one user in one chat.
    pub(crate) fn ops(&self, scope: Scope, audience: Audience) -> Ops {
        let mut ops = Ops::new(Arc::clone(&self.config), Arc::clone(&self.store), scope)
            .with_embedder_window(self.window);
        if self.looking {
            ops = ops.looking_only();
        }
        match audience {
            Audience::Private => ops,
            Audience::Group => ops.in_shared_chat(),
        }
    }

    /// The memory operations that answer `speaker`: their scope, heard by their audience,
    /// with their state; in a group, acting for them ([`Ops::acting_for`]) and with their
    /// own facts where they share them.
    pub(crate) fn speaker_ops(&self, speaker: &Speaker) -> Ops {
        let ops = self
            .ops(speaker.scope.clone(), speaker.audience)
            .with_state(speaker.state.clone());
        let Some(member) = &speaker.member else {
            return ops;
        };
        let ops = ops.acting_for(member.tag.clone());
        if member.shares {
            ops.sharing_facts_of(&member.user)
        } else {
            ops
        }
    }

    fn request(&self, message: &str) -> anyhow::Result<ContextRequest> {
        if message.trim().is_empty() {
            anyhow::bail!("the message is empty; say something");
        }
        // A message longer than the store takes in one memory is stored in linked parts.
        Ok(ContextRequest::new(message, self.budget.clone()))
    }

    /// Stores `memory` whatever its length: in linked parts when it is longer than the store
    /// takes in one memory ([`NewMemory::split_to_fit`]).
    async fn store_whole(
        &self,
        scope: &Scope,
        memory: NewMemory,
    ) -> memory_core::Result<Vec<MemoryId>> {
        let max = self.store.info().limits.max_content_bytes;
        let stored = self
            .store
            .store_batch(scope, memory.split_to_fit(max))
            .await?;
        Ok(stored.into_iter().map(|e| e.id).collect())
    }

    /// Corrects the stored answer (`ids`, its parts) after only `delivered` of it reached the
    /// user: with nothing delivered it is deleted; otherwise it keeps what was delivered,
    /// marked as cut, so later prompts never hold words the user did not see as said.
    pub(crate) async fn undelivered(
        &self,
        scope: &Scope,
        ids: &[MemoryId],
        delivered: &str,
    ) -> anyhow::Result<()> {
        let (first, rest) = match ids.split_first() {
            Some((first, rest)) if !delivered.trim().is_empty() => (Some(*first), rest),
            _ => (None, ids),
        };
        if let Some(id) = first {
            let patch = MemoryPatch {
                content: Some(format!("{delivered}\n{UNDELIVERED}")),
                ..MemoryPatch::default()
            };
            self.store
                .update(scope, id, patch)
                .await
                .context("keep only the delivered part of the answer")?;
        }
        for &id in rest {
            match self.store.delete(scope, id).await {
                Ok(()) | Err(MemoryError::NotFound { .. }) => {}
                Err(e) => return Err(e).context("delete the undelivered answer"),
            }
        }
        Ok(())
    }

    /// The prompt the model would get for `message` now, in a private context, with
    /// `state` (who is talking) and `goal` (what they are after) when the caller has them;
    /// nothing stored, no model called.
    pub(crate) async fn prepare(
        &self,
        scope: &Scope,
        state: SessionState,
        goal: Option<&str>,
        message: &str,
    ) -> anyhow::Result<CompiledPrompt> {
        let mut request = self.request(message)?;
        request.goal = goal
            .map(|g| state_line(g, MAX_GOAL_CHARS))
            .filter(|g| !g.is_empty());
        let previous = crate::prompts::previous(self.store.as_ref(), scope).await;
        let input = HydrateInput::new(scope.clone(), request)
            .with_state(state)
            .after(previous);
        self.prepare_input(scope, &input).await
    }

    /// The prompt the model would get for `message` at `now` (what "recent" and the
    /// prompt's current time are measured against). Its searches do not count what they find
    /// as recalled: a prompt built for another time is a replay (the demo's), and the store
    /// records recalls in the background, so counting them would make each replayed prompt
    /// depend on whether the previous one's were written yet.
    pub(crate) async fn prepare_at(
        &self,
        scope: &Scope,
        message: &str,
        now: Timestamp,
    ) -> anyhow::Result<CompiledPrompt> {
        let input = HydrateInput::new(scope.clone(), self.request(message)?)
            .at(now)
            .without_access_tracking();
        self.prepare_input(scope, &input).await
    }

    async fn prepare_input(
        &self,
        scope: &Scope,
        input: &HydrateInput,
    ) -> anyhow::Result<CompiledPrompt> {
        self.ops(scope.clone(), Audience::Private)
            .prepare(input)
            .await
            .context("hydrate and compile the prompt")
    }

    /// Answers `message` of `speaker` with `model`, then stores the message and (if there is
    /// one) the answer in the speaker's scope; in a shared conversation both are stored
    /// naming the member and tagged with their tag.
    ///
    /// The message is stored after the prompt is built, at the time it arrived, so the
    /// prompt shows it once (as the observation) rather than also as recent conversation;
    /// it is stored even when the model fails, so nothing the user said is lost. An `Err`
    /// means the message was refused before anything happened (empty, too long); otherwise
    /// the [`Turn`] says separately whether there is an answer and whether it was stored,
    /// so a reply never claims what did not happen.
    pub(crate) async fn answer(
        &self,
        model: &dyn ChatModel,
        speaker: &Speaker,
        message: &str,
        source: &str,
    ) -> anyhow::Result<Turn> {
        let ops = self.speaker_ops(speaker);
        let request = self.request(message)?;
        let received = Timestamp::now();
        // The prompt extends the previous one of this conversation (see `prompts`).
        let previous = crate::prompts::previous(self.store.as_ref(), &speaker.scope).await;
        let input = ops.input(request).after(previous);
        let answer = ops.infer_with(model, input).await.map_err(|e| {
            let blame = if matches!(
                e,
                hydrate::Error::Model { .. } | hydrate::Error::MaxSteps { .. }
            ) {
                Blame::Model
            } else {
                Blame::Memory
            };
            (blame, anyhow::Error::new(e).context("ask the model"))
        });
        let reply = answer.as_ref().ok().map(|i| i.reply.as_str());
        let extractor = self.facts.as_ref();
        let Kept {
            stored,
            message_ids,
            answer_ids,
            learning,
        } = self
            .keep(
                &ops,
                speaker,
                Some(message),
                reply,
                received,
                source,
                extractor,
            )
            .await;
        Ok(Turn {
            answer,
            stored,
            message_ids,
            answer_ids,
            learning,
        })
    }

    /// Keeps one exchange of `speaker` in their scope: `message` (what they said at
    /// `received`; `None` when this answer continues a turn already kept, after tool
    /// results) and `reply` (the answer, when there is one); then, in the background,
    /// learns facts from it with `extractor` and prunes the chat. Nothing of the reply is
    /// kept when the message could not be.
    #[expect(
        clippy::too_many_arguments,
        reason = "one exchange's parts, each needed once; a struct would only rename them"
    )]
    pub(crate) async fn keep(
        &self,
        ops: &Ops,
        speaker: &Speaker,
        message: Option<&str>,
        reply: Option<&str>,
        received: Timestamp,
        source: &str,
        extractor: Option<&FactExtractor>,
    ) -> Kept {
        let scope = &speaker.scope;
        // What is kept: the message as said, and in a group who said it.
        let said = message.map(|text| match &speaker.member {
            Some(m) => format!("{}: {text}", m.name),
            None => text.to_owned(),
        });
        let member_tag = speaker.member.as_ref().map(|m| m.tag.clone());
        // The turn this message answers (usually Ava's last reply), kept as its context so
        // keyword search also finds a reply by what it was about. Not worth losing the
        // message over: without it the message is stored without that context. In a group,
        // the member's own part only: a member's message never quotes another's words,
        // which erasing that other member could not find.
        let messages_only = Filter {
            kinds: vec![MemoryKind::Message],
            tags: member_tag.clone().map(|t| memory_core::TagQuery::any([t])),
            ..Filter::default()
        };
        let previous = match self.store.recent(scope, 1, &messages_only).await {
            Ok(mut last) => last.pop(),
            Err(e) => {
                tracing::warn!(
                    error = %memory_core::ErrorChain(&e),
                    "could not read the previous message"
                );
                None
            }
        };
        let mut stored = Ok(());
        let mut message_ids = Vec::new();
        if let Some(said) = &said {
            // Tagged with the names it mentions (the graph source's index); a standing
            // instruction ("always ...") is marked so that every prompt carries it.
            let mut user_turn = chat_turn(said.as_str(), Role::User)
                .with_source(source)
                .with_tags(member_tag.clone())
                .at(received);
            if let Some(previous) = &previous {
                user_turn = user_turn.with_context(in_reply_to(&previous.content));
            }
            stored = match self.store_whole(scope, user_turn).await {
                Ok(ids) => {
                    message_ids = ids;
                    Ok(())
                }
                Err(e) => Err(anyhow::Error::new(e).context("store the message")),
            };
        }
        // What the reply answers: this message, or (continuing a turn) the last one kept.
        let answered = said
            .as_deref()
            .or(previous.as_ref().map(|p| p.content.as_str()));
        let mut answer_ids = Vec::new();
        if stored.is_ok()
            && let Some(reply) = reply.filter(|r| !r.trim().is_empty())
        {
            let mut turn = chat_turn(reply, Role::Assistant)
                .with_source(source)
                .with_tags(member_tag);
            if let Some(answered) = answered {
                turn = turn.with_context(in_reply_to(answered));
            }
            stored = match self.store_whole(scope, turn).await {
                Ok(ids) => {
                    answer_ids = ids;
                    Ok(())
                }
                Err(e) => Err(anyhow::Error::new(e).context("store the answer")),
            };
        }
        let mut learning = None;
        if stored.is_ok() {
            if let (Some(extractor), Some(said)) = (extractor, said) {
                // The person's facts, or the group's: where this context keeps them, then
                // the other scopes whose facts it reads (a chat's, from an older store).
                let home = ops.facts_scope();
                let lock = self.learners.lock_for(&home);
                let mut scopes = vec![home.clone()];
                scopes.extend(ops.readable_scopes().into_iter().filter(|s| *s != home));
                let (told, heard) = tokio::sync::oneshot::channel();
                learning = Some(heard);
                let task = learn(
                    extractor.clone(),
                    lock,
                    Arc::clone(&self.store),
                    told,
                    scopes,
                    Heard {
                        message: message_ids.first().map(|id| (scope.clone(), *id)),
                        member: speaker.member.as_ref().map(|m| m.tag.clone()),
                        user: said,
                        reply: reply.map(str::to_owned),
                        at: received,
                        source: source.to_owned(),
                    },
                );
                self.background.push(tokio::spawn(task)).await;
            }
            if let Some(task) = self
                .upkeep
                .as_ref()
                .and_then(|u| u.after_exchange(&self.store, scope))
            {
                self.background.push(task).await;
            }
        }
        Kept {
            stored,
            message_ids,
            answer_ids,
            learning,
        }
    }
}

/// What became of an exchange kept ([`Agent::keep`]).
#[derive(Debug)]
pub(crate) struct Kept {
    /// `Ok` when the message, and the answer if there is one, are in the store.
    pub(crate) stored: anyhow::Result<()>,
    /// The stored message's memories (one, or its linked parts); empty when none was stored.
    pub(crate) message_ids: Vec<MemoryId>,
    /// The stored answer's memories (one, or its linked parts); empty when none was stored.
    pub(crate) answer_ids: Vec<MemoryId>,
    /// Whether learning changed a fact, once it has run (`None` when nothing is learned).
    pub(crate) learning: Option<tokio::sync::oneshot::Receiver<bool>>,
}

/// A prompt's token budget of `tokens`, refused when 0.
fn token_budget(tokens: u32) -> anyhow::Result<TokenBudget> {
    TokenBudget::new(tokens).with_context(|| format!("token budget {tokens}: expected at least 1"))
}

/// One exchange as the learner takes it ([`learn`]).
struct Heard {
    /// Where the message was kept and its id (its first part): learning waits its turn, and
    /// a message forgotten or erased meanwhile teaches nothing.
    message: Option<(Scope, MemoryId)>,
    /// In a group, the member who said it: what is learned is tagged as theirs.
    member: Option<memory_core::Tag>,
    user: String,
    reply: Option<String>,
    at: Timestamp,
    source: String,
}

/// Learns facts from one exchange into the first of `scopes` (after the exchanges before
/// it there; see [`FactExtractor::learn`]) and logs what changed and how long it waited for
/// its turn; a failure changes nothing and is logged. Its turn is the scope's learning
/// lease, which erasing takes too ([`crate::erase`]): when the message is gone once the
/// turn comes (forgotten, wiped, erased), nothing is learned from it.
async fn learn(
    extractor: FactExtractor,
    one_at_a_time: Arc<tokio::sync::Mutex<()>>,
    store: Arc<dyn MemoryBackend>,
    told: tokio::sync::oneshot::Sender<bool>,
    scopes: Vec<Scope>,
    heard: Heard,
) {
    let Heard {
        message,
        member,
        user,
        reply,
        at,
        source,
    } = heard;
    let Some(scope) = scopes.first() else {
        return;
    };
    let queued = std::time::Instant::now();
    let _turn = one_at_a_time.lock().await;
    // Other processes on the store (replicas, a CLI beside a bot) take turns through it.
    let lease = learning_lease(scope);
    let ttl =
        (extractor.timeout().saturating_mul(2) + LEARNING_MARGIN).min(memory_core::MAX_LEASE_TTL);
    let Some(leased) = take_turn(&*store, &lease, ttl).await else {
        tracing::warn!(
            scope = %scope,
            "another process kept learning this person's facts too long; this exchange's facts were not learned"
        );
        let _ = told.send(false);
        return;
    };
    let waited_ms = u64::try_from(queued.elapsed().as_millis()).unwrap_or(u64::MAX);
    tracing::debug!(scope = %scope, waited_ms, "learning facts from an exchange");
    let exchange = Exchange {
        user: &user,
        assistant: reply.as_deref(),
        at,
        source: &source,
        member: member.as_ref(),
    };
    let gone = match &message {
        Some((kept_in, id)) => matches!(
            store.get(kept_in, *id).await,
            Err(memory_core::MemoryError::NotFound { .. })
        ),
        None => false,
    };
    let mut changed = false;
    let outcome = if gone {
        tracing::info!(scope = %scope, "the message was deleted before its facts were learned; nothing learned");
        Ok(memory_core::ConsolidationReport::default())
    } else {
        extractor.learn(&*store, &scopes, exchange).await
    };
    match outcome {
        Ok(report) if report.is_empty() => {}
        Ok(report) => {
            changed = !(report.added.is_empty()
                && report.superseded.is_empty()
                && report.invalidated.is_empty());
            tracing::info!(
                scope = %scope,
                waited_ms,
                added = report.added.len(),
                superseded = report.superseded.len(),
                invalidated = report.invalidated.len(),
                "learned facts from the exchange"
            );
            for f in &report.failed {
                tracing::warn!(scope = %scope, "a learned fact was not saved: {f}");
            }
            if changed {
                let learned = Learned::of(&report, member.as_ref());
                learned.keep(&*store, scope, &learned.facts()).await;
            }
        }
        Err(e) => tracing::warn!(
            scope = %scope,
            error = %memory_core::ErrorChain(&e),
            "fact extraction failed; no memory was changed"
        ),
    }
    if leased
        && let Err(e) = store
            .release_lease(&lease, memory_core::process_holder())
            .await
    {
        // It runs out by itself.
        tracing::warn!(scope = %scope, error = %memory_core::ErrorChain(&e), "could not end the learning lease");
    }
    // Nobody may be listening (the CLI, a bot that does not react).
    let _ = told.send(changed);
}

/// The lease under which one process at a time learns the facts of `scope`'s exchanges.
pub(crate) fn learning_lease(scope: &Scope) -> String {
    format!("learn:{}", scope.key())
}

/// What a learning lease allows beyond its two model calls (reading and writing facts).
const LEARNING_MARGIN: std::time::Duration = std::time::Duration::from_secs(30);

/// Waits until this process holds the lease `name` (for `ttl`), polling the store, for at
/// most four `ttl`s (a holder that died loses it after one). `Some(true)` once held;
/// `Some(false)` when the store cannot lease (it is read-only or failing: the write that
/// follows says why), so the in-process turn alone orders learning; `None` when others
/// kept it the whole time.
async fn take_turn(
    store: &dyn MemoryBackend,
    name: &str,
    ttl: std::time::Duration,
) -> Option<bool> {
    let deadline = std::time::Instant::now() + ttl.saturating_mul(4);
    let mut pause = std::time::Duration::from_millis(20);
    loop {
        match store
            .try_lease(name, memory_core::process_holder(), ttl)
            .await
        {
            Ok(true) => return Some(true),
            Ok(false) if std::time::Instant::now() < deadline => {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(std::time::Duration::from_millis(500));
            }
            Ok(false) => return None,
            Err(e) => {
                tracing::warn!(lease = name, error = %memory_core::ErrorChain(&e), "could not take a lease");
                return Some(false);
            }
        }
    }
}

/// Whose failure left a message without an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Blame {
    /// The chat model failed or timed out.
    Model,
    /// Ava's own side: reading memories, building the prompt.
    Memory,
}

/// What became of one message: the answer (or why there is none) and whether the exchange
/// was stored (or why not).
#[derive(Debug)]
pub(crate) struct Turn {
    /// The model's answer, or whose failure it was and the error.
    pub(crate) answer: Result<Inference, (Blame, anyhow::Error)>,
    /// `Ok` when the message, and the answer if there is one, are in the store.
    pub(crate) stored: anyhow::Result<()>,
    /// The stored message's memories (one, or its linked parts); empty when none was stored.
    pub(crate) message_ids: Vec<MemoryId>,
    /// The stored answer's memories (one, or its linked parts); empty when none was stored.
    pub(crate) answer_ids: Vec<MemoryId>,
    /// Whether learning from this exchange changed a fact, once it has run (`None` when
    /// nothing is learned).
    pub(crate) learning: Option<tokio::sync::oneshot::Receiver<bool>>,
}

impl Agent {
    /// The facts a context of `scope` heard by `audience` holds now ([`current_facts`]).
    pub(crate) async fn facts(
        &self,
        scope: &Scope,
        audience: Audience,
    ) -> anyhow::Result<Vec<memory_core::MemoryEntry>> {
        let scopes = self.ops(scope.clone(), audience).readable_scopes();
        current_facts(self.store.as_ref(), &scopes).await
    }

    /// Reverts the last change fact learning made where this context keeps facts (in a
    /// group, from the messages of `member`: a member takes back only what was learned from
    /// them): a fact it added ends, one it replaced holds again (and its replacement ends),
    /// one it ended holds again. Nothing is deleted: the history keeps every version. What
    /// can be taken back is kept in the store ([`Learned`]), so it survives a restart and
    /// any replica can take it back. `None` when learning changed nothing here (among the
    /// newest [`LEARNED_KEPT`] learnings, or since the last undo); otherwise one line per
    /// fact, saying what became of it.
    pub(crate) async fn undo_learning(
        &self,
        scope: &Scope,
        audience: Audience,
        member: Option<&memory_core::Tag>,
    ) -> anyhow::Result<Option<Vec<String>>> {
        let ops = self.ops(scope.clone(), audience);
        let home = ops.facts_scope();
        let store = self.store.as_ref();
        let who = member.map(|t| t.as_str().to_owned());
        let newest = store
            .records(&home, LEARNED_KIND, LEARNED_KEPT)
            .await
            .context("read what I learned")?
            .into_iter()
            .filter_map(|r| serde_json::from_str::<Learned>(&r.body).ok())
            .find(|l| l.member == who);
        let Some(learned) = newest.filter(|l| !(l.end.is_empty() && l.restore.is_empty())) else {
            return Ok(None);
        };
        // Taken back once: the member's newest learning is now this empty one, which goes
        // with the same facts as the one it takes back.
        Learned {
            member: who,
            ..Learned::default()
        }
        .keep(store, &home, &learned.facts())
        .await;
        let scopes = ops.readable_scopes();
        let now = Timestamp::now();
        // Where the fact `id` is, and its text.
        let find = async |id: MemoryId| find_memory(store, &scopes, id).await;
        let mut done = Vec::new();
        for &id in &learned.end {
            if let Some(e) = find(id).await {
                let line = match memory_core::invalidate(store, &e.scope, id, now).await {
                    Ok(_) => format!("no longer: {}", preview(&e.content, 120)),
                    Err(err) => format!("left as it is ({err}): {}", preview(&e.content, 120)),
                };
                done.push(line);
            }
        }
        for &id in &learned.restore {
            if let Some(e) = find(id).await {
                let line = match memory_core::restore(store, &e.scope, id).await {
                    Ok(_) => format!("holds again: {}", preview(&e.content, 120)),
                    Err(err) => format!("left as it is ({err}): {}", preview(&e.content, 120)),
                };
                done.push(line);
            }
        }
        Ok(Some(done))
    }

    /// [`render_report`] with a preview of each memory's text (looked up where a context of
    /// `scope` heard by `audience` reads).
    pub(crate) async fn explain(
        &self,
        scope: &Scope,
        audience: Audience,
        report: &ExplainReport,
    ) -> String {
        let scopes = self.ops(scope.clone(), audience).readable_scopes();
        let mut previews = HashMap::new();
        for id in report.sections.iter().filter_map(|s| s.memory_id) {
            // A memory deleted since just shows without text.
            if let Some(m) = find_memory(self.store.as_ref(), &scopes, id).await {
                previews.insert(id, preview(&m.content, 70));
            }
        }
        render_report(report, &previews)
    }
}

/// `, lifted by the talk around it (similarity 0.31 -> 0.66)` when the talk around a memory
/// lifted its similarity by enough to show at two decimals, else nothing.
fn lift_mark(x: &hydrate::ScoreExplain) -> String {
    x.lifted_from
        .map(|l| {
            (
                format!("{l:.2}"),
                format!("{:.2}", x.similarity.unwrap_or(l)),
            )
        })
        .filter(|(from, to)| from != to)
        .map(|(from, to)| format!(", lifted by the talk around it (similarity {from} -> {to})"))
        .unwrap_or_default()
}

/// The explain report for people: budget, sources, what went in (with `previews` of their
/// text where known) and what was left out.
/// What a provider's prompt cache can make of a prompt, in one line for people.
pub(crate) fn cache_line(cache: &hydrate::CacheExplain) -> String {
    let shared = match cache.shared_prefix_tokens {
        Some(shared) => format!(
            "; {shared} of its {} tokens repeat the previous prompt's start{}",
            cache.prompt_tokens,
            if cache.hit {
                " (its stable part whole: a provider's cache can serve it)"
            } else {
                ""
            }
        ),
        None => "; no previous prompt to compare with".to_owned(),
    };
    format!(
        "cache: the stable part is the first {} message(s), {} tokens; with the conversation {} \
         message(s), {} tokens{shared}",
        cache.stable_messages,
        cache.stable_tokens,
        cache.through_conversation,
        cache.through_conversation_tokens,
    )
}

fn render_report(report: &ExplainReport, previews: &HashMap<MemoryId, String>) -> String {
    let mut out = String::new();
    let b = &report.budget;
    let _ = writeln!(
        out,
        "tokens: {} of {} available ({} budget, {} reserved, allocation {}){}",
        report.estimated_prompt_tokens,
        b.available,
        b.total,
        b.reserved,
        b.allocation,
        if report.fits { "" } else { " -- DOES NOT FIT" }
    );
    let _ = writeln!(
        out,
        "sections: {} tokens before compression, {} after",
        report.tokens_before, report.tokens_after
    );
    if let Some(cues) = report.cues.describe() {
        let _ = writeln!(out, "question: {cues}");
    }
    let _ = writeln!(out, "{}", cache_line(&report.cache));
    let _ = writeln!(out, "sources:");
    for s in &report.sources {
        let _ = writeln!(
            out,
            "  {:<10} {:?}{} returned {}, kept {}, duplicates {}, over limits {}{}",
            s.kind.as_str(),
            s.status,
            s.search
                .as_deref()
                .map(|m| format!(" ({m})"))
                .unwrap_or_default(),
            s.returned,
            s.kept,
            s.duplicates,
            s.over_limits,
            match s.near_duplicates {
                0 => String::new(),
                n => format!(", near-duplicates {n}"),
            },
        );
    }
    let mut went_in = Vec::new();
    let mut left_out = Vec::new();
    for s in report.sections.iter().filter(|s| s.memory_id.is_some()) {
        let score = s
            .scores
            .as_ref()
            .map(|x| {
                let cues = x
                    .cues
                    .as_ref()
                    .map(|c| format!(", matches {c}"))
                    .unwrap_or_default();
                format!(", score {:.2}{cues}{}", x.score, lift_mark(x))
            })
            .unwrap_or_default();
        let id = s.memory_id.map(|i| i.to_string()).unwrap_or_default();
        let what = s
            .memory_id
            .and_then(|i| previews.get(&i))
            .map_or_else(|| s.label.clone(), |p| format!("\"{p}\""));
        match s.action {
            Action::Kept { tokens } => went_in.push(format!(
                "  + [{}] {what} ({tokens} tokens{score}, id {id})",
                s.block
            )),
            Action::Truncated { from, to } => went_in.push(match &s.excerpt {
                Some(kept) => {
                    let ranges: Vec<String> =
                        kept.iter().map(|(a, b)| format!("{a}-{b}")).collect();
                    format!(
                        "  ~ [{}] {what} (excerpt {from} -> {to} tokens: characters {}{score}, id {id})",
                        s.block,
                        ranges.join(", ")
                    )
                }
                None => format!(
                    "  ~ [{}] {what} (cut {from} -> {to} tokens{score}, id {id})",
                    s.block
                ),
            }),
            Action::Dropped { tokens } => left_out.push(format!(
                "  - [{}] {what} ({tokens} tokens{score}, id {id}): {}",
                s.block, s.reason
            )),
        }
    }
    let _ = writeln!(out, "memories in the prompt: {}", went_in.len());
    for line in &went_in {
        let _ = writeln!(out, "{line}");
    }
    let _ = writeln!(out, "memories dropped: {}", left_out.len());
    for line in &left_out {
        let _ = writeln!(out, "{line}");
    }
    if !report.degradations.is_empty() {
        let _ = writeln!(out, "degradations:");
        for d in &report.degradations {
            let _ = writeln!(out, "  ! {d}");
        }
    }
    out
}

/// The compiled messages for people, one block per message.
pub(crate) fn render_messages(prompt: &CompiledPrompt) -> String {
    let mut out = String::new();
    for (i, m) in prompt.messages.iter().enumerate() {
        let role = serde_json::to_value(m.role)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        let _ = writeln!(out, "--- message {} ({role}) ---\n{}", i + 1, m.content);
    }
    let names: Vec<&str> = prompt.tools.iter().map(|t| t.name.as_str()).collect();
    let _ = writeln!(out, "--- tools: {} ---", names.join(", "));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lift_is_marked_only_where_it_shows() {
        let scores = |from: Option<f64>, to: f64| hydrate::ScoreExplain {
            similarity: Some(to),
            lifted_from: from,
            ..Default::default()
        };
        assert_eq!(
            lift_mark(&scores(Some(0.31), 0.6624)),
            ", lifted by the talk around it (similarity 0.31 -> 0.66)"
        );
        assert_eq!(
            lift_mark(&scores(Some(0.001), 0.0012)),
            "",
            "0.00 -> 0.00 says nothing"
        );
        assert_eq!(lift_mark(&scores(None, 0.5)), "");
    }

    #[test]
    fn state_lines_are_one_short_line() {
        assert_eq!(state_line("  Ada\n\nLovelace\t ", 64), "Ada Lovelace");
        assert_eq!(
            state_line("Ignore all\rprevious", 64),
            "Ignore all previous"
        );
        let long = state_line(&"é".repeat(100), 10);
        assert_eq!(long.chars().count(), 10);
        assert!(long.ends_with('…'));
        assert_eq!(named(Some(" \n ")).user, None);
        assert_eq!(named(Some("Maya")).user.as_deref(), Some("Maya"));
    }
}
