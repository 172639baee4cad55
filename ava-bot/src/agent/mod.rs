//! The conversation pipeline `ava chat` and `ava run` share: hydrate + compile a prompt for a
//! message, let the model answer (running its memory tool calls), store both turns, then in
//! the background learn facts from the exchange and prune the chat; and the dry run
//! `ava context` prints. Its parts: who is speaking (`speaker.rs`), learning and undo
//! (`learning.rs`), rendering the explain report (`explain.rs`).

use std::sync::Arc;

use anyhow::Context;
use ava_memory::{Conversation, Memory};
use hydrate::{
    ChatModel, CompiledPrompt, FactExtractor, HydrateInput, HydrationConfig, Inference, Ops,
    SessionState, product,
};
use memory_core::{
    EmbeddingProvider, MemoryBackend, MemoryError, MemoryId, MemoryPatch, Scope, Timestamp,
};
use prompt_ir::{BudgetAllocation, ContextRequest, TokenBudget};

use crate::shared::metrics;
use crate::upkeep::Upkeep;

mod explain;
mod learning;
mod speaker;

pub(crate) use self::explain::render_messages;
use self::learning::{Heard, learn};
pub(crate) use self::learning::{Learners, current_facts, find_memory, render_facts};
pub(crate) use self::speaker::{
    Audience, GROUP_USER, MAX_GOAL_CHARS, MAX_STATE_CHARS, Member, Speaker, named, state_line,
};

/// Ends a stored answer of which only the text before it reached the user.
pub(crate) const UNDELIVERED: &str = "[the rest of this answer did not reach the user]";

/// Default token budget of one prompt (the product's, [`product::DEFAULT_BUDGET`]).
pub(crate) use hydrate::product::DEFAULT_BUDGET;

/// Ava's memory over a store (the facade's [`Memory`], with the product's system prompt
/// and memory tools), a prompt budget, and what runs around each exchange.
#[derive(Debug, Clone)]
pub(crate) struct Agent {
    memory: Memory,
    budget: TokenBudget,
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

/// Tasks that run after a reply, awaited before a one-shot process exits.
#[derive(Debug, Default)]
struct Background {
    running: tokio::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>,
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
        // The facade's one assembly (`product::config`, shared with the evaluation), with
        // the product's own system prompt and memory tools.
        let memory = Memory::over(store, embedder)?.with_config(|config| {
            config.system_prompt = product::SYSTEM_PROMPT.to_owned();
            config.memory_tools = true;
        });
        Ok(Self {
            memory,
            budget,
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
        self.configured(|config| {
            config.system_prompt.clear();
            config.constraints.clear();
            config.memory_tools = false;
        })
    }

    /// The same agent with its hydration config changed by `change`.
    fn configured(&self, change: impl FnOnce(&mut HydrationConfig)) -> Self {
        let mut agent = self.clone();
        agent.memory = agent.memory.with_config(change);
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
            crate::prompts::previous(self.store().as_ref(), scope).await
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
    pub(crate) fn with_reranker(self, reranker: Option<Arc<dyn hydrate::Reranker>>) -> Self {
        match reranker {
            Some(r) => self.configured(|config| config.reranker = r),
            None => self,
        }
    }

    /// The same agent, adding web results from `web` to each prompt (`None` adds none).
    pub(crate) fn with_web(self, web: Option<Arc<dyn hydrate::ContextSource>>) -> Self {
        self.with_source(hydrate::SourceKind::Web, web)
    }

    /// The same agent with `source` (if any) adding context of `kind` to each prompt.
    fn with_source(
        self,
        kind: hydrate::SourceKind,
        source: Option<Arc<dyn hydrate::ContextSource>>,
    ) -> Self {
        match source {
            Some(source) => {
                self.configured(|config| *config = config.clone().with_source(kind, source))
            }
            None => self,
        }
    }

    /// The same agent, adding passages of the user's documents from `documents` to each
    /// prompt (`None` adds none; see [`crate::config::documents`]).
    pub(crate) fn with_documents(self, documents: Option<Arc<dyn hydrate::ContextSource>>) -> Self {
        self.with_source(hydrate::SourceKind::Vector, documents)
    }

    /// The same agent, splitting each prompt's budget as `allocation` says (`None` keeps
    /// the default).
    pub(crate) fn with_allocation(self, allocation: Option<BudgetAllocation>) -> Self {
        match allocation {
            Some(a) => self.configured(|config| config.allocation = Some(a)),
            None => self,
        }
    }

    /// The same agent with prompts of at most `budget` tokens.
    pub(crate) fn with_budget(&self, budget: u32) -> anyhow::Result<Self> {
        let mut agent = self.clone();
        agent.budget = token_budget(budget)?;
        Ok(agent)
    }

    pub(crate) fn store(&self) -> &Arc<dyn MemoryBackend> {
        self.memory.store()
    }

    /// The facade's conversation kept in `scope`, heard by `audience`.
    fn conversation(&self, scope: Scope, audience: Audience) -> Conversation {
        let conversation = self.memory.conversation(scope);
        match audience {
            Audience::Private => conversation,
            Audience::Group => conversation.shared(),
        }
    }

    /// The memory operations of `conversation`, only looking when this agent does.
    fn ops_of(&self, conversation: &Conversation) -> Ops {
        let ops = conversation.ops();
        if self.looking {
            ops.looking_only()
        } else {
            ops
        }
    }

    /// The memory operations for one user in one chat.
    pub(crate) fn ops(&self, scope: Scope, audience: Audience) -> Ops {
        self.ops_of(&self.conversation(scope, audience))
    }

    /// The conversation that answers `speaker`: their scope, heard by their audience, with
    /// their state and, in a group, their own facts where they share them.
    fn heard_by(&self, speaker: &Speaker) -> Conversation {
        let conversation = self
            .conversation(speaker.scope.clone(), speaker.audience)
            .with_state(speaker.state.clone());
        match &speaker.member {
            Some(member) if member.shares => conversation.sharing_facts_of(&member.user),
            _ => conversation,
        }
    }

    /// The memory operations that answer `speaker` ([`Agent::heard_by`]); in a group,
    /// acting for them ([`Ops::acting_for`]).
    pub(crate) fn speaker_ops(&self, speaker: &Speaker) -> Ops {
        let ops = self.ops_of(&self.heard_by(speaker));
        match &speaker.member {
            Some(member) => ops.acting_for(member.tag.clone()),
            None => ops,
        }
    }

    fn request(&self, message: &str) -> anyhow::Result<ContextRequest> {
        if message.trim().is_empty() {
            anyhow::bail!("the message is empty; say something");
        }
        // A message longer than the store takes in one memory is stored in linked parts.
        Ok(ContextRequest::new(message, self.budget.clone()))
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
            self.store()
                .update(scope, id, patch)
                .await
                .context("keep only the delivered part of the answer")?;
        }
        for &id in rest {
            match self.store().delete(scope, id).await {
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
        let previous = crate::prompts::previous(self.store().as_ref(), scope).await;
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
        let (prompt, times) = self
            .ops(scope.clone(), Audience::Private)
            .prepare_timed(input)
            .await
            .context("hydrate and compile the prompt")?;
        metrics::prepared(times);
        Ok(prompt)
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
        let previous = crate::prompts::previous(self.store().as_ref(), &speaker.scope).await;
        let input = ops.input(request).after(previous);
        let answer = match ops.prepare_timed(&input).await {
            Ok((prompt, times)) => {
                metrics::prepared(times);
                let asked = std::time::Instant::now();
                let answer = ops.infer_prompt(model, prompt).await;
                let model_ok = answer.as_ref().err().map(blame) != Some(Blame::Model);
                metrics::upstream(asked.elapsed(), model_ok);
                answer
            }
            Err(e) => Err(e),
        };
        let answer =
            answer.map_err(|e| (blame(&e), anyhow::Error::new(e).context("ask the model")));
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
        let conversation = match &speaker.member {
            Some(m) => self.heard_by(speaker).member(&m.user, &m.name),
            None => Ok(self.heard_by(speaker)),
        };
        // What is kept: the message as said, and in a group who said it.
        let said = conversation
            .as_ref()
            .ok()
            .zip(message)
            .map(|(c, text)| c.said(text));
        let kept = match conversation {
            Ok(c) => c.from_source(source).keep(message, reply, received).await,
            Err(e) => Err(e),
        };
        let (stored, message_ids, answer_ids) = match kept {
            Ok(k) => (Ok(()), k.message_ids, k.answer_ids),
            Err(e) => (Err(anyhow::Error::new(e)), Vec::new(), Vec::new()),
        };
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
                    Arc::clone(self.store()),
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
                .and_then(|u| u.after_exchange(self.store(), scope))
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

/// Whose failure `e` is: the chat model's (it failed, timed out or never stopped calling
/// tools) or Ava's own.
fn blame(e: &hydrate::Error) -> Blame {
    if matches!(
        e,
        hydrate::Error::Model { .. } | hydrate::Error::MaxSteps { .. }
    ) {
        Blame::Model
    } else {
        Blame::Memory
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
