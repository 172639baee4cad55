//! The facade: [`Memory`] (a store opened as `ava` opens it, with the product's hydration
//! config) and [`Conversation`] (one scope of it, private or shared): `context` for the next
//! model call, `remember` an exchange or a fact, `facts`, `recall`, `forget`, `erase`.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use hydrate::product::{chat_turn, in_reply_to};
use hydrate::{ChatMessage, ExplainReport, HydrationConfig, Ops, Reach, SessionState};
use memory_core::{
    EmbeddingProvider, Filter, MemoryBackend, MemoryEntry, MemoryId, MemoryKind, NewMemory, Role,
    Scope, ScoredMemory, SearchRequest, Tag, TagQuery, Timestamp,
};
use prompt_ir::{ContextRequest, TokenBudget};

use crate::erase::{Erased, GROUP_USER, erase_person};
use crate::error::{Error, Result};
use crate::open::{EmbedderSettings, Location, choose_embedder, open_store};
use crate::prompts::{self, Builder, Built};

/// The system prompt of the facade's prompts unless the program sets its own
/// ([`Memory::with_system_prompt`]): the product's, less what it says of the memory tools,
/// which the facade does not offer (a program keeps facts with
/// [`Conversation::remember_fact`]).
pub const DEFAULT_SYSTEM_PROMPT: &str = "You are a friendly assistant with long-term memory. \
Use what you recall about the user when it helps, say so when you do not know, and answer \
briefly.";

/// Where stored memories say they came from unless the program names itself
/// ([`Memory::with_source`]).
pub const DEFAULT_SOURCE: &str = "app";

/// At most this many facts are listed by [`Conversation::facts`]: the newest.
pub const MAX_FACTS_LISTED: usize = 100;

/// How many prompts built by [`Conversation::context`] wait for their question to be
/// remembered, across conversations; past it the oldest waiting is dropped (its
/// conversation's next prompt then starts a new stable prefix).
const PENDING_PROMPTS: usize = 1024;

/// Ava's memory over one store: what a program opens once and shares (cheap to clone).
/// Each person's conversation is a [`Conversation`] of it.
#[derive(Clone)]
pub struct Memory {
    inner: Arc<Inner>,
}

struct Inner {
    store: Arc<dyn MemoryBackend>,
    embedder: Option<Arc<dyn EmbeddingProvider>>,
    embedder_note: String,
    config: Arc<HydrationConfig>,
    /// The store's embedder's window, for recall ([`Ops::with_embedder_window`]).
    window: Option<usize>,
    source: String,
    /// The newest prompt built for each conversation and its question, kept as the
    /// conversation's record once the question is remembered (as the bot does), so that the
    /// record names the question it quotes and goes when it is deleted.
    pending: Mutex<HashMap<Scope, Pending>>,
}

struct Pending {
    question: String,
    built: Built,
    at: Timestamp,
}

impl std::fmt::Debug for Memory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Memory")
            .field("store", &self.inner.store.info().name)
            .field("embedder", &self.inner.embedder_note)
            .field("source", &self.inner.source)
            .finish()
    }
}

impl Memory {
    /// Opens (or creates) the store at `path_or_url` (a SQLite file, or a `postgres://` URL
    /// in a build with the `postgres` feature) with the embedder `ava` would choose from the
    /// environment ([`EmbedderSettings::from_env`]: the local model when it is installed,
    /// else keyword search only, unless `AVA_EMBEDDER` says otherwise).
    pub async fn open(path_or_url: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(
            &Location::parse(path_or_url),
            &EmbedderSettings::from_env()?,
        )
        .await
    }

    /// Opens (or creates) the store at `location` with the embedder `settings` choose.
    pub async fn open_with(location: &Location, settings: &EmbedderSettings) -> Result<Self> {
        let chosen = choose_embedder(settings).await?;
        let opened = open_store(location, chosen.embedder, true).await?;
        Self::build(opened.store, opened.embedder, chosen.note)
    }

    /// Ava's memory over a store opened elsewhere (an in-memory one for tests, a store the
    /// program configured itself); `embedder` is the store's own, if it has one.
    pub fn over(
        store: Arc<dyn MemoryBackend>,
        embedder: Option<Arc<dyn EmbeddingProvider>>,
    ) -> Result<Self> {
        let note = match &embedder {
            Some(e) => format!("embedder {}", e.space()),
            None => "no embedder: keyword search only".to_owned(),
        };
        Self::build(store, embedder, note)
    }

    fn build(
        store: Arc<dyn MemoryBackend>,
        embedder: Option<Arc<dyn EmbeddingProvider>>,
        embedder_note: String,
    ) -> Result<Self> {
        // One definition with the bot and the evaluation.
        let mut config = hydrate::product::config(Arc::clone(&store), embedder.clone())
            .map_err(Error::hydrate("load the tokenizer"))?;
        config.system_prompt = DEFAULT_SYSTEM_PROMPT.to_owned();
        config.memory_tools = false;
        Ok(Self {
            inner: Arc::new(Inner {
                window: embedder.as_ref().and_then(|e| e.window_bytes()),
                store,
                embedder,
                embedder_note,
                config: Arc::new(config),
                source: DEFAULT_SOURCE.to_owned(),
                pending: Mutex::default(),
            }),
        })
    }

    /// The same memory with another system prompt opening every prompt (empty: none, for a
    /// program that sends its own first, such as a rig agent's preamble). Call it before
    /// sharing the memory: a clone made before keeps the old one.
    pub fn with_system_prompt(self, prompt: impl Into<String>) -> Self {
        let prompt = prompt.into();
        self.with_config(|config| config.system_prompt = prompt)
    }

    /// The same memory naming `source` as where what it stores came from (default
    /// [`DEFAULT_SOURCE`]).
    pub fn with_source(self, source: impl Into<String>) -> Self {
        let source = source.into();
        self.changed(|inner| inner.source = source)
    }

    /// The same memory with its hydration config changed by `change` (another system
    /// prompt, the memory tools, more context sources, a reranker, the budget's split), for
    /// a program that needs what the defaults leave out. Call it before sharing the memory:
    /// a clone made before keeps the old config.
    pub fn with_config(self, change: impl FnOnce(&mut HydrationConfig)) -> Self {
        self.changed(|inner| change(Arc::make_mut(&mut inner.config)))
    }

    /// A memory like this one with `change` made (the prompts waiting for their question
    /// stay with this one).
    fn changed(&self, change: impl FnOnce(&mut Inner)) -> Self {
        let i = &self.inner;
        let mut inner = Inner {
            store: Arc::clone(&i.store),
            embedder: i.embedder.clone(),
            embedder_note: i.embedder_note.clone(),
            config: Arc::clone(&i.config),
            window: i.window,
            source: i.source.clone(),
            pending: Mutex::default(),
        };
        change(&mut inner);
        Self {
            inner: Arc::new(inner),
        }
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn MemoryBackend> {
        &self.inner.store
    }

    /// The embedder the store searches with, if any.
    pub fn embedder(&self) -> Option<&Arc<dyn EmbeddingProvider>> {
        self.inner.embedder.as_ref()
    }

    /// One line on the embedder in use, or why there is none.
    pub fn embedder_note(&self) -> &str {
        &self.inner.embedder_note
    }

    /// The hydration config every prompt is built with (`hydrate::product::config`, this
    /// memory's system prompt, no memory tools).
    pub fn config(&self) -> &HydrationConfig {
        &self.inner.config
    }

    /// The conversation kept in `scope`, private to its user (see [`Conversation::shared`]).
    pub fn conversation(&self, scope: Scope) -> Conversation {
        Conversation {
            memory: self.clone(),
            scope,
            reach: Reach::Private,
            state: SessionState::default(),
            member: None,
            source: None,
        }
    }

    /// The private conversation `conversation` of the person `user` (default tenant): what
    /// they said there and were answered, and, in its prompts, their facts from every
    /// private conversation of theirs.
    pub fn person(&self, user: &str, conversation: &str) -> Result<Conversation> {
        let scope = Scope::for_user(user)
            .and_then(|s| s.in_chat(conversation))
            .map_err(|e| Error::invalid("person", memory_core::ErrorChain(&e).to_string()))?;
        Ok(self.conversation(scope))
    }

    /// The shared conversation of the group `chat` (default tenant), kept where the bot
    /// keeps a group's: its prompts read the group's memories only, never a member's own
    /// facts ([`Reach::SHARED`]). Each member speaks through [`Conversation::member`].
    pub fn group(&self, chat: &str) -> Result<Conversation> {
        let scope = Scope::for_user(GROUP_USER)
            .and_then(|s| s.in_chat(chat))
            .map_err(|e| Error::invalid("group", memory_core::ErrorChain(&e).to_string()))?;
        Ok(self.conversation(scope).shared())
    }

    /// Erases everything of `user` in `tenant` ([`memory_core::DEFAULT_TENANT`] unless the
    /// program uses tenants): every conversation of theirs, their facts, their documents and
    /// their part of every group, the prompts kept of them, and the leases that name them;
    /// says what, per scope ([`crate::erase::erase_person`]).
    pub async fn erase_person(&self, tenant: &str, user: &str) -> Result<Erased> {
        erase_person(self.inner.store.as_ref(), tenant, user, true).await
    }

    /// Drops the prompt waiting for its question in `scope`, returning it.
    fn take_pending(&self, scope: &Scope) -> Option<Pending> {
        self.inner
            .pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(scope)
    }

    fn put_pending(&self, scope: Scope, pending: Pending) {
        let mut map = self
            .inner
            .pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if map.len() >= PENDING_PROMPTS && !map.contains_key(&scope) {
            let oldest = map.iter().min_by_key(|(_, p)| p.at).map(|(s, _)| s.clone());
            if let Some(oldest) = oldest {
                map.remove(&oldest);
            }
        }
        map.insert(scope, pending);
    }
}

/// A member of a shared conversation, as what is stored for them says.
#[derive(Clone, Debug)]
struct Member {
    /// On every memory stored for their messages and the answers to them (`from:<id>`), so
    /// erasing them finds their part.
    tag: Tag,
    /// How stored lines name them.
    name: String,
}

/// One conversation of a [`Memory`]: a scope and who may read what from it. Cheap to clone;
/// make one per conversation and turn.
#[derive(Clone, Debug)]
pub struct Conversation {
    memory: Memory,
    scope: Scope,
    reach: Reach,
    state: SessionState,
    member: Option<Member>,
    /// Where what it stores came from, when not its memory's ([`Conversation::from_source`]).
    source: Option<String>,
}

/// The messages to send for one message, and why they are what they are.
#[derive(Clone, Debug)]
pub struct Context {
    /// The chat messages to send, the stable prefix first and the message last.
    pub messages: Vec<ChatMessage>,
    /// What went in, what was cut or left out and why, the budget, the sources, and how
    /// much of the prompt repeats the previous one's start (`report.cache`).
    pub report: ExplainReport,
}

/// What [`Conversation::remember`] stored.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Kept {
    /// The message's memories (one, or its linked parts).
    pub message_ids: Vec<MemoryId>,
    /// The answer's memories (one, or its linked parts); empty without an answer.
    pub answer_ids: Vec<MemoryId>,
}

impl Conversation {
    /// The scope it is kept in.
    pub fn scope(&self) -> &Scope {
        &self.scope
    }

    /// Whose memories beyond the scope its prompts may read.
    pub fn reach(&self) -> &Reach {
        &self.reach
    }

    /// The same conversation shared with others (a group): its prompts, recall and forget
    /// never read the user-wide scope of its user (their private facts) nor their documents,
    /// and facts told here stay here.
    pub fn shared(mut self) -> Self {
        self.reach = Reach::SHARED;
        self
    }

    /// In a shared conversation, the same conversation with `user`'s own facts in its
    /// prompts: they chose to share them there. Outside a shared one it changes nothing.
    pub fn sharing_facts_of(mut self, user: &str) -> Self {
        self.reach = self.reach.sharing_facts_of(user);
        self
    }

    /// In a shared conversation, the same conversation spoken by the member `user`, called
    /// `name`: what they say is stored as `name: text` and tagged `from:<user>` (so erasing
    /// them finds it), and they forget only their own part. Outside a shared one it changes
    /// nothing.
    pub fn member(mut self, user: &str, name: &str) -> Result<Self> {
        if self.reach.is_shared() {
            let tag = Tag::new(format!("from:{user}"))
                .map_err(|e| Error::invalid("member", memory_core::ErrorChain(&e).to_string()))?;
            self.member = Some(Member {
                tag,
                name: name.to_owned(),
            });
        }
        Ok(self)
    }

    /// The same conversation with `state` in its prompts (who is talking, the project).
    pub fn with_state(mut self, state: SessionState) -> Self {
        self.state = state;
        self
    }

    /// The same conversation naming `source` as where what it stores came from (the door
    /// it is spoken through), instead of its memory's ([`Memory::with_source`]).
    pub fn from_source(mut self, source: impl Into<String>) -> Self {
        self.source = Some(source.into());
        self
    }

    /// `text` as this conversation stores it: in a shared conversation spoken by a member,
    /// `name: text`; otherwise as it is.
    pub fn said(&self, text: &str) -> String {
        match &self.member {
            Some(m) => format!("{}: {text}", m.name),
            None => text.to_owned(),
        }
    }

    /// Where what this conversation stores says it came from.
    fn source_name(&self) -> &str {
        self.source.as_deref().unwrap_or(&self.memory.inner.source)
    }

    /// The memory operations of this conversation (hydrate's [`Ops`]: its scope, who may
    /// read what, its state, acting for its member), for a program that drives the lower
    /// layer itself (a model with tools, the explain endpoints).
    pub fn ops(&self) -> Ops {
        let inner = &self.memory.inner;
        let mut ops = Ops::new(
            Arc::clone(&inner.config),
            Arc::clone(&inner.store),
            self.scope.clone(),
        )
        .with_embedder_window(inner.window)
        .with_state(self.state.clone())
        .with_reach(self.reach.clone());
        if let Some(member) = &self.member {
            ops = ops.acting_for(member.tag.clone());
        }
        ops
    }

    /// The scopes its prompts and lookups read: its own, and in a private conversation
    /// its user's user-wide scope.
    pub fn readable_scopes(&self) -> Vec<Scope> {
        self.ops().readable_scopes()
    }

    /// The messages to send the model for `message` now, in at most `budget` tokens: the
    /// system prompt, who is talking and the person's newest facts, the memories that best
    /// answer it in escaped data blocks, the recent conversation, and the message; laid out
    /// so that it extends this conversation's previous prompt (what a provider's prompt
    /// cache can reuse). Nothing is stored: [`Conversation::remember`] the exchange after
    /// the model answers, which also keeps this prompt as the one the next extends.
    pub async fn context(&self, message: &str, budget: u32) -> Result<Context> {
        if message.trim().is_empty() {
            return Err(Error::invalid("message", "is empty; say something"));
        }
        let budget = TokenBudget::new(budget)
            .map_err(|e| Error::invalid("token budget", format!("{e}; expected at least 1")))?;
        let ops = self.ops();
        let store = self.memory.inner.store.as_ref();
        let previous = prompts::previous(store, &self.scope).await;
        let input = ops
            .input(ContextRequest::new(message, budget))
            .after(previous);
        let at = input.now;
        let prompt = ops
            .prepare(&input)
            .await
            .map_err(Error::hydrate("hydrate and compile the prompt"))?;
        let member = self.member.as_ref().map(|m| m.tag.as_str().to_owned());
        let built = Built::new(Builder::Library, member, prompt.report.clone())
            .with_next(prompt.previous());
        self.memory.put_pending(
            self.scope.clone(),
            Pending {
                question: message.to_owned(),
                built,
                at,
            },
        );
        Ok(Context {
            messages: prompt.messages,
            report: prompt.report,
        })
    }

    /// Stores one exchange as the bot stores chat turns: `message` (what the person said),
    /// then `answer` (the model's reply, when there is one), each a chat turn
    /// ([`hydrate::product::chat_turn`]: tagged with the names it mentions, a standing
    /// instruction marked) whose context is the turn it answers
    /// ([`hydrate::product::in_reply_to`]); a long one in linked parts; both in one write
    /// ([`Conversation::keep`]). When the prompt [`Conversation::context`] last built here
    /// was for this message, it is kept as the conversation's newest, naming the message it
    /// quotes, so the next prompt extends it.
    pub async fn remember(&self, message: &str, answer: Option<&str>) -> Result<Kept> {
        if message.trim().is_empty() {
            return Err(Error::invalid("message", "is empty; nothing to remember"));
        }
        let kept = self.keep(Some(message), answer, Timestamp::now()).await?;
        let store = self.memory.inner.store.as_ref();
        if let Some(pending) = self.memory.take_pending(&self.scope)
            && pending.question == message
        {
            prompts::keep(
                store,
                &self.scope,
                pending.at,
                &pending.built,
                &kept.message_ids,
            )
            .await;
        }
        Ok(kept)
    }

    /// Stores one exchange in one write (all of it or, on error, none): `message` as said
    /// at `received` (in a shared conversation, naming the member and tagged with their
    /// tag; `None` when `answer` continues a turn already kept, after tool results), then
    /// `answer` when there is one, each a chat turn whose context is the turn it answers.
    /// What [`Conversation::remember`] and every door of `ava` keep an exchange with; it
    /// keeps no prompt record. An empty `answer` is not kept.
    pub async fn keep(
        &self,
        message: Option<&str>,
        answer: Option<&str>,
        received: Timestamp,
    ) -> Result<Kept> {
        let inner = &self.memory.inner;
        let store = inner.store.as_ref();
        let scope = &self.scope;
        let source = self.source_name();
        let said = message.map(|text| self.said(text));
        let member_tag = self.member.as_ref().map(|m| m.tag.clone());
        // The turn this message answers (usually the last reply), kept as its context so
        // keyword search also finds a reply by what it was about. Not worth losing the
        // message over: without it the message is kept without that context. In a shared
        // conversation, the member's own part only: a member's message never quotes
        // another's words, which erasing that other member could not find.
        let messages_only = Filter {
            kinds: vec![MemoryKind::Message],
            tags: member_tag.clone().map(|t| TagQuery::any([t])),
            ..Filter::default()
        };
        let previous = match store.recent(scope, 1, &messages_only).await {
            Ok(mut last) => last.pop(),
            Err(e) => {
                tracing::warn!(
                    error = %memory_core::ErrorChain(&e),
                    "could not read the previous message"
                );
                None
            }
        };
        let max = store.info().limits.max_content_bytes;
        let mut turns = Vec::new();
        if let Some(said) = &said {
            let mut turn = chat_turn(said.as_str(), Role::User)
                .with_source(source)
                .with_tags(member_tag.clone())
                .at(received);
            if let Some(previous) = &previous {
                turn = turn.with_context(in_reply_to(&previous.content));
            }
            turns = turn.split_to_fit(max);
        }
        let message_parts = turns.len();
        // What the answer answers: this message, or (continuing a turn) the last one kept.
        let answered = said
            .as_deref()
            .or(previous.as_ref().map(|p| p.content.as_str()));
        if let Some(reply) = answer.filter(|r| !r.trim().is_empty()) {
            // After every part of the message, whose parts are a millisecond apart.
            let after = received.plus(std::time::Duration::from_millis(message_parts as u64));
            let mut turn = chat_turn(reply, Role::Assistant)
                .with_source(source)
                .with_tags(member_tag)
                .at(Timestamp::now().max(after));
            if let Some(answered) = answered {
                turn = turn.with_context(in_reply_to(answered));
            }
            turns.extend(turn.split_to_fit(max));
        }
        if turns.is_empty() {
            return Ok(Kept::default());
        }
        let what = if message_parts == 0 {
            "store the answer"
        } else if turns.len() > message_parts {
            "store the message and the answer"
        } else {
            "store the message"
        };
        let stored = store
            .store_batch(scope, turns)
            .await
            .map_err(Error::store(what))?;
        let mut message_ids: Vec<MemoryId> = stored.into_iter().map(|e| e.id).collect();
        let answer_ids = message_ids.split_off(message_parts.min(message_ids.len()));
        Ok(Kept {
            message_ids,
            answer_ids,
        })
    }

    /// Keeps `fact` as every door keeps one ([`memory_core::keep_fact`]): once (the same
    /// fact told again merges), tagged with the names it mentions, where this conversation
    /// keeps facts: the person's user-wide scope in a private conversation (every private
    /// conversation of theirs reads it), the conversation itself in a shared one. Returns
    /// the memory that holds it.
    pub async fn remember_fact(&self, fact: &str) -> Result<MemoryEntry> {
        if fact.trim().is_empty() {
            return Err(Error::invalid("fact", "is empty; nothing to remember"));
        }
        let ops = self.ops();
        let memory = NewMemory::new(fact)
            .with_kind(MemoryKind::Fact)
            .with_source(self.source_name())
            .with_tags(self.member.as_ref().map(|m| m.tag.clone()));
        let memory = hydrate::with_entity_tags(memory);
        let kept = memory_core::keep_fact(
            self.memory.inner.store.as_ref(),
            &ops.facts_scope(),
            &[],
            memory,
            None,
            Timestamp::now(),
        )
        .await
        .map_err(Error::store("keep the fact"))?;
        kept.entry()
            .cloned()
            .ok_or_else(|| Error::invalid("fact", "the store kept none of its parts"))
    }

    /// The facts that hold now where this conversation reads, oldest first (at most
    /// [`MAX_FACTS_LISTED`], the newest).
    pub async fn facts(&self) -> Result<Vec<MemoryEntry>> {
        let store = self.memory.inner.store.as_ref();
        let now = Timestamp::now();
        let filter = Filter {
            kinds: vec![MemoryKind::Fact],
            ..Filter::default()
        };
        let mut facts = Vec::new();
        for scope in self.readable_scopes() {
            // The newest first, then only those that hold now (whatever the store filters).
            let recent = store
                .recent(&scope, MAX_FACTS_LISTED.saturating_mul(2), &filter)
                .await
                .map_err(Error::store("read the facts"))?;
            facts.extend(recent.into_iter().filter(|f| f.is_valid_at(now)));
        }
        facts.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.id.cmp(&b.id)));
        let excess = facts.len().saturating_sub(MAX_FACTS_LISTED);
        facts.drain(..excess);
        Ok(facts)
    }

    /// The memories this conversation may read that best match `query` (at most `limit`),
    /// best first, ranked as every door ranks a lookup ([`hydrate::recall()`]).
    pub async fn recall(&self, query: &str, limit: usize) -> Result<Vec<ScoredMemory>> {
        if query.trim().is_empty() {
            return Err(Error::invalid("query", "is empty; say what to look for"));
        }
        if limit == 0 {
            return Err(Error::invalid("limit", "is 0; ask for at least one memory"));
        }
        let store = &self.memory.inner.store;
        let request = SearchRequest::best(&store.capabilities(), query).limit(limit);
        self.ops()
            .recall_with(request)
            .await
            .map_err(Error::hydrate("recall"))
    }

    /// Deletes the memory `id` if this conversation may read it (in a shared conversation
    /// spoken by a member, only their own).
    pub async fn forget(&self, id: MemoryId) -> Result<()> {
        self.ops()
            .forget(id)
            .await
            .map_err(Error::hydrate("forget the memory"))
    }

    /// Deletes this conversation: every memory of its own scope and the prompts kept of it
    /// (not the person's facts, which other conversations read: [`Memory::erase_person`]
    /// erases the person). Says how many memories went.
    pub async fn erase(&self) -> Result<u64> {
        let store = self.memory.inner.store.as_ref();
        self.memory.take_pending(&self.scope);
        let n = store
            .delete_scope(&self.scope)
            .await
            .map_err(Error::in_scope("delete the memories of", &self.scope))?;
        store
            .reclaim_deleted()
            .await
            .map_err(Error::store("clear what was erased from the store's files"))?;
        Ok(n)
    }

    /// The messages of this conversation, oldest first: the newest whose text fits in
    /// `budget` tokens (counted with the prompts' tokenizer), the way a framework that
    /// replays history wants them bounded.
    pub async fn history(&self, budget: u32) -> Result<Vec<MemoryEntry>> {
        let store = self.memory.inner.store.as_ref();
        let filter = Filter {
            kinds: vec![MemoryKind::Message],
            ..Filter::default()
        };
        let most = store.info().limits.max_results;
        let recent = store
            .recent(&self.scope, most, &filter)
            .await
            .map_err(Error::store("read the conversation"))?;
        let tokenizer = &self.memory.inner.config.tokenizer;
        let mut left = budget;
        let mut kept = Vec::new();
        for m in recent {
            let cost = tokenizer
                .count(&m.content)
                .saturating_add(hydrate::MESSAGE_OVERHEAD_TOKENS);
            if cost > left {
                break;
            }
            left -= cost;
            kept.push(m);
        }
        kept.reverse();
        Ok(kept)
    }

    /// The memory this conversation belongs to.
    pub fn memory(&self) -> &Memory {
        &self.memory
    }
}
