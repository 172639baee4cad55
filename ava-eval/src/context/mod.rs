//! `cargo xtask eval locomo FILE --context-budget 1000,2000,4000`: how much of each question's
//! evidence reaches the prompt the model gets.
//!
//! Protocol: each conversation is stored as `ava` stores a chat (one SQLite store per
//! conversation, one user + chat scope, one memory per turn with the raw message text, role
//! `User` for `speaker_a` and `Assistant` for the other speaker, the turn it answers as
//! context, dated by its session with turns a minute apart). Each question is hydrated and
//! compiled with the product's own config (`hydrate::product::config`) at each budget, "now"
//! one hour after the last turn. An evidence turn counts when its rendered line (the escaped
//! text, as `compile` writes it into a `<recalled-memory>` block) is in the compiled
//! messages; a question scores the share of its evidence turns found. The baseline is the
//! same prompt holding only the newest turns that fit the same budget.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use hydrate::{
    CompiledPrompt, HydrateInput, HydrationConfig, PreviousPrompt, SourceKind, prepare, product,
};
use memory_core::{
    Embedding, EmbeddingProvider, Filter, HashingEmbedder, MemoryBackend, MemoryId, MemoryKind,
    Scope, SearchRequest, Timestamp,
};
use prompt_ir::{Action, ContextRequest, ContextStrategy, TokenBudget};

mod evidence;
mod report;
mod tally;

use super::Embedder;
use super::cache::CachedEmbedder;
use super::locomo::{CATEGORIES, Question, Sample, Turn, store_turns, vector_cache_dir};
use evidence::{Part, in_prompt, parts_coverage, report_action};
use tally::{ByCategory, Lost};

/// What to measure (from `cargo xtask eval locomo` arguments).
pub(super) struct Options {
    pub(super) file: PathBuf,
    pub(super) budgets: Vec<u32>,
    pub(super) embedder: Embedder,
    pub(super) explain_misses: usize,
    pub(super) json: bool,
    /// Replay each conversation through the product before the questions (`--replay`).
    pub(super) replay: bool,
    /// Experiments: settings that differ from the product's (`--set KEY=VALUE`).
    pub(super) overrides: Overrides,
}

/// What an experiment changes from the product config; empty means the product as it ships.
#[derive(Clone, Debug, Default)]
pub(super) struct Overrides {
    set: Vec<(String, String)>,
}

impl Overrides {
    /// Parses `KEY=VALUE` pairs, refusing unknown keys and unreadable values.
    pub(super) fn parse(pairs: &[String]) -> anyhow::Result<Self> {
        let mut set = Vec::new();
        for pair in pairs {
            let Some((k, v)) = pair.split_once('=') else {
                anyhow::bail!("--set {pair}: expected KEY=VALUE");
            };
            if !Self::KEYS.contains(&k) {
                anyhow::bail!("--set {k}: unknown; one of {}", Self::KEYS.join(", "));
            }
            if k == "allocation" {
                v.parse::<prompt_ir::BudgetAllocation>()
                    .with_context(|| format!("--set {k}={v}"))?;
            } else {
                let x = v
                    .parse::<f64>()
                    .with_context(|| format!("--set {k}={v}: expected a number"))?;
                let share = matches!(k, "semantic_weight" | "nearby_lift");
                if share && !(0.0..=1.0).contains(&x) {
                    anyhow::bail!("--set {k}={v}: expected a number from 0 to 1");
                }
                if k == "neighbours" && (x.fract() != 0.0 || !(0.0..=100.0).contains(&x)) {
                    anyhow::bail!("--set {k}={v}: expected a whole number from 0 to 100");
                }
            }
            set.push((k.to_owned(), v.to_owned()));
        }
        Ok(Self { set })
    }

    const KEYS: [&'static str; 22] = [
        "conversation_share",
        "relevance_floor",
        "allocation",
        "neighbours",
        "nearby_lift",
        "long_item_tokens",
        "excerpts",
        "graph",
        "passages",
        "semantic_threshold",
        "semantic_limit",
        "semantic_weight",
        "temporal_window",
        "keep_recent",
        "item_tokens",
        "unmatched_relevance",
        "decay_floor",
        "cue_time",
        "cue_phrase",
        "cue_name",
        "cue_own_words",
        "near_duplicate",
    ];

    fn get(&self, key: &str) -> Option<f64> {
        self.set
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .and_then(|(_, v)| v.parse().ok())
    }

    /// The product config with the config-level overrides applied.
    fn config(&self, mut config: HydrationConfig) -> HydrationConfig {
        if let Some((_, v)) = self.set.iter().rev().find(|(k, _)| k == "allocation") {
            // Checked when parsed.
            config.allocation = v.parse().ok();
        }
        if let Some(v) = self.get("keep_recent") {
            config.keep_recent = v as usize;
        }
        if let Some(v) = self.get("conversation_share") {
            config.conversation_share = v;
        }
        if let Some(v) = self.get("relevance_floor") {
            config.relevance_floor = v;
        }
        if let Some(v) = self.get("item_tokens") {
            config.item_tokens = v as u32;
        }
        if let Some(v) = self.get("unmatched_relevance") {
            config.unmatched_relevance = v;
        }
        if let Some(w) = self.get("semantic_weight") {
            // Checked when parsed: a share from 0 to 1.
            if let Ok(weights) = memory_core::HybridWeights::new(w as f32, 1.0 - w as f32) {
                config.memory.weights = weights;
            }
        }
        if let Some(n) = self.get("neighbours") {
            config.memory.neighbours = (n as usize).min(hydrate::MAX_NEIGHBOURS);
        }
        if let Some(l) = self.get("nearby_lift") {
            config.memory.nearby_lift = prompt_ir::Ratio::clamped(l);
        }
        if let Some(v) = self.get("cue_time") {
            config.cue_weights.time = v;
        }
        if let Some(v) = self.get("cue_phrase") {
            config.cue_weights.phrase = v;
        }
        if let Some(v) = self.get("cue_name") {
            config.cue_weights.name = v;
        }
        if let Some(v) = self.get("cue_own_words") {
            config.cue_weights.own_words = v;
        }
        if let Some(v) = self.get("near_duplicate") {
            // Above 1 nothing is a near-duplicate: off.
            config.near_duplicate = (v <= 1.0).then_some(v);
        }
        if self.get("excerpts") == Some(0.0) {
            config.excerpts = false;
        }
        if self.get("graph") == Some(0.0) {
            config.kinds.remove(&SourceKind::Graph);
        }
        config
    }

    /// The product strategy with the request-level overrides applied.
    fn strategy(&self, mut s: ContextStrategy) -> ContextStrategy {
        if let Some(v) = self.get("semantic_threshold") {
            s.semantic_threshold = prompt_ir::Relevance::clamped(v);
        }
        if let Some(v) = self.get("semantic_limit") {
            s.semantic_limit = v as u32;
        }
        if let Some(v) = self.get("temporal_window") {
            s.temporal_window = v as u32;
        }
        if let Some(v) = self.get("long_item_tokens") {
            s.long_item_tokens = v as u32;
        }
        if let Some(v) = self.get("decay_floor")
            && let prompt_ir::RecencyDecay::HalfLife { seconds, .. } = s.recency_decay
        {
            s.recency_decay = prompt_ir::RecencyDecay::HalfLife {
                seconds,
                floor: prompt_ir::Ratio::clamped(v),
            };
        }
        s
    }

    /// For the report: `product` or the changes.
    fn describe(&self) -> String {
        if self.set.is_empty() {
            return "product config (hydrate::product)".into();
        }
        let changes: Vec<String> = self.set.iter().map(|(k, v)| format!("{k}={v}")).collect();
        format!("EXPERIMENT: product config with {}", changes.join(", "))
    }
}

/// The chat every conversation is filed under (the user is the sample id).
const CHAT: &str = "locomo";
/// "Now" is this long after the last turn.
const NOW_AFTER_LAST_TURN: Duration = Duration::from_secs(3600);

/// One conversation stored as a chat, with the product's config over it.
struct Conversation {
    scope: Scope,
    store: Arc<dyn MemoryBackend>,
    config: HydrationConfig,
    /// The product's config with only the recent conversation, free to fill the budget.
    newest: HydrationConfig,
    /// Each turn's memory, or the first of its parts.
    ids: HashMap<String, MemoryId>,
    /// Each turn's memories: one, or its linked parts.
    parts: HashMap<String, Vec<Part>>,
    turns: usize,
    now: Timestamp,
    overrides: Overrides,
}

/// Stores `sample` as `ava` stores a chat (see the module docs) in `store`: all at once, or
/// with `replay`, turn by turn, each of the first speaker's turns asked first at every
/// budget of `replay` as the bot asks a message.
async fn ingest(
    sample: &Sample,
    store: Arc<dyn MemoryBackend>,
    embedder: Arc<dyn EmbeddingProvider>,
    overrides: &Overrides,
    replay: Option<&mut [Replayed]>,
) -> anyhow::Result<Conversation> {
    let scope = Scope::for_user(&sample.id)?.in_chat(CHAT)?;
    let mut previous: Option<&str> = None;
    let mut memories = Vec::with_capacity(sample.turns.len());
    for t in &sample.turns {
        // As `ava` stores a turn.
        let mut m = product::chat_turn(&t.text, t.role)
            .with_source("locomo")
            .at(t.chat_at);
        // As `Agent::answer`: the previous message of the chat, whatever its session.
        if let Some(p) = previous {
            m = m.with_context(product::in_reply_to(p));
        }
        previous = Some(&t.text);
        memories.push(m);
    }
    let last = sample
        .turns
        .iter()
        .map(|t| t.chat_at)
        .max()
        .context("a conversation without turns")?;
    let product =
        product::config(Arc::clone(&store), Some(embedder)).context("the product's config")?;
    let config = overrides.config(product.clone());
    // The baseline is the product's, whatever the experiment: the newest turns, each
    // competing on recency alone.
    let mut newest = product;
    newest.kinds = [SourceKind::Temporal].into_iter().collect();
    newest.source_token_share = 1.0;
    newest.conversation_share = 0.0;
    newest.relevance_floor = 0.0;
    let mut conv = Conversation {
        scope,
        store,
        config,
        newest,
        ids: HashMap::new(),
        parts: HashMap::new(),
        turns: sample.turns.len(),
        now: last.plus(NOW_AFTER_LAST_TURN),
        overrides: overrides.clone(),
    };
    let stored = match replay {
        None => store_turns(conv.store.as_ref(), &conv.scope, memories)
            .await
            .with_context(|| format!("store the turns of {}", sample.id))?,
        Some(replayed) => {
            let mut out = Vec::with_capacity(memories.len());
            for (i, m) in memories.into_iter().enumerate() {
                let t = &sample.turns[i];
                if t.role == memory_core::Role::User {
                    for r in replayed.iter_mut() {
                        r.call(&conv, &t.text, t.chat_at).await?;
                    }
                }
                let one = store_turns(conv.store.as_ref(), &conv.scope, vec![m])
                    .await
                    .with_context(|| format!("store turn {} of {}", t.dia_id, sample.id))?;
                out.extend(one.into_iter().map(|(_, e)| (i, e)));
            }
            out
        }
    };
    for (i, e) in stored {
        let t = &sample.turns[i];
        conv.ids.entry(t.dia_id.clone()).or_insert(e.id);
        conv.parts.entry(t.dia_id.clone()).or_default().push(Part {
            id: e.id,
            text: e.content,
            role: t.role,
            at: e.created_at,
        });
    }
    Ok(conv)
}

/// One budget's replay of the conversations: the prompts built one after another, and what
/// each shares with the one before.
#[derive(Default)]
struct Replayed {
    budget: u32,
    /// The last prompt of the conversation under way.
    previous: Option<PreviousPrompt>,
    /// Per prompt of the turns: its tokens, and the share of them that repeat the start of
    /// the prompt before (the first of each conversation has none).
    tokens: Vec<u32>,
    shared: Vec<f64>,
    /// Prompts that start with the whole stable part of the one before.
    hits: usize,
    /// The same of the questions, asked one after another after the conversation.
    question_shared: Vec<f64>,
}

impl Replayed {
    fn new(budget: u32) -> Self {
        Self {
            budget,
            ..Self::default()
        }
    }

    /// The bot's prompt for `text` said at `at`, after the previous one.
    async fn call(&mut self, conv: &Conversation, text: &str, at: Timestamp) -> anyhow::Result<()> {
        let prompt = conv
            .prompt_after(text, self.budget, at, self.previous.take(), None)
            .await?;
        let cache = &prompt.report.cache;
        self.tokens.push(cache.prompt_tokens);
        if let Some(shared) = cache.shared_prefix_tokens {
            self.shared
                .push(f64::from(shared) / f64::from(cache.prompt_tokens.max(1)));
        }
        self.hits += usize::from(cache.hit);
        self.previous = Some(prompt.previous());
        Ok(())
    }
}

impl Conversation {
    /// A question's input: at the conversation's "now", counting nothing as recalled (a
    /// question must not change what the next one ranks).
    fn input(&self, request: ContextRequest) -> HydrateInput {
        HydrateInput::new(self.scope.clone(), request)
            .at(self.now)
            .without_access_tracking()
    }

    /// The prompt `ava` would build for `question` within `budget` (the backend embeds the
    /// question unless `vector` is given).
    async fn prompt(
        &self,
        question: &str,
        budget: u32,
        vector: Option<Embedding>,
    ) -> anyhow::Result<CompiledPrompt> {
        self.prompt_after(question, budget, self.now, None, vector)
            .await
    }

    /// [`Conversation::prompt`] at `now`, after `previous` (the conversation's last prompt).
    async fn prompt_after(
        &self,
        question: &str,
        budget: u32,
        now: Timestamp,
        previous: Option<PreviousPrompt>,
        vector: Option<Embedding>,
    ) -> anyhow::Result<CompiledPrompt> {
        let mut request = ContextRequest::new(question, TokenBudget::new(budget)?);
        request.strategy = self.overrides.strategy(request.strategy);
        let mut input = self.input(request).at(now).after(previous);
        if let Some(v) = vector {
            input = input.with_query_vector(v);
        }
        Ok(prepare(&self.config, &input).await?)
    }

    /// The baseline: the same prompt with only the newest turns, as many as fit `budget`.
    async fn newest_turns(&self, question: &str, budget: u32) -> anyhow::Result<CompiledPrompt> {
        let mut request = ContextRequest::new(question, TokenBudget::new(budget)?);
        let window = self.turns.min(self.store.info().limits.max_results);
        request.strategy = ContextStrategy {
            temporal_window: u32::try_from(window)?,
            semantic_limit: 0,
            include_knowledge: false,
            ..ContextStrategy::default()
        };
        Ok(prepare(&self.newest, &self.input(request)).await?)
    }
}

/// Everything measured at one budget.
#[derive(Default)]
struct BudgetResult {
    budget: u32,
    product: ByCategory,
    /// The share of each evidence message's text in the prompt, averaged per question.
    coverage: ByCategory,
    /// Knowledge updates: questions whose message holding the current value is (in part)
    /// in the prompt, and those where only an older evidence message is.
    updated_in: usize,
    older_only: usize,
    updates: usize,
    newest: ByCategory,
    tokens: Vec<u32>,
    newest_tokens: Vec<u32>,
    /// hydrate + compile, the question embedded by the store as in `ava`.
    latency: Vec<Duration>,
    /// hydrate + compile with the question's vector given.
    latency_given_vector: Vec<Duration>,
    /// Questions whose prompt with the vector given differs from the product's.
    vector_given_differs: usize,
    /// Texts the model embedded during each product call (local model only).
    embeddings_per_call: Vec<usize>,
    /// Memories each kind of source kept (summed over questions), and how many of them
    /// compile left in the prompt whole.
    kept_by_source: BTreeMap<&'static str, usize>,
    whole_in_prompt: BTreeMap<String, usize>,
    /// Tokens each block of sections holds in the compiled prompt (summed over questions).
    tokens_by_block: BTreeMap<String, usize>,
    lost: BTreeMap<Lost, usize>,
    evidence_turns: usize,
    /// With `--replay`: each prompt of the turns, its tokens and the share that repeats the
    /// start of the one before; how many start with its whole stable part; the same share
    /// for the questions.
    replay_tokens: Vec<u32>,
    replay_shared: Vec<f64>,
    replay_hits: usize,
    question_shared: Vec<f64>,
    /// Evidence turns where the text check and the explain report disagree (should be 0).
    disagreements: usize,
    examples: Vec<String>,
}

/// The semantic source's cut-offs, for telling where a turn was lost.
#[derive(Clone, Copy)]
struct Cutoffs {
    threshold: f32,
    limit: usize,
}

/// One question at one budget: the share of its evidence in the prompt, and where the rest
/// was lost (`candidates`: the semantic source's search, ranked, without threshold).
struct Scored {
    share: f64,
    /// The mean share of each evidence message's text in the prompt.
    coverage: f64,
    /// Per evidence message, its share of text in the prompt.
    covered: HashMap<String, f64>,
    lost: Vec<(String, Lost)>,
    disagreements: usize,
}

fn score(
    conv: &Conversation,
    turns: &HashMap<&str, &Turn>,
    question: &Question,
    prompt: &CompiledPrompt,
    candidates: &[(MemoryId, f32)],
    cutoffs: Cutoffs,
) -> Scored {
    let mut found = 0usize;
    let mut lost = Vec::new();
    let mut disagreements = 0;
    let mut covered = HashMap::new();
    for e in &question.evidence {
        let (Some(turn), Some(&id), Some(parts)) =
            (turns.get(e.as_str()), conv.ids.get(e), conv.parts.get(e))
        else {
            continue;
        };
        let present = if parts.len() == 1 {
            in_prompt(prompt, *turn)
        } else {
            parts.iter().all(|p| in_prompt(prompt, p))
        };
        let (share, missing) = parts_coverage(prompt, parts);
        covered.insert(e.clone(), share);
        let action = report_action(prompt, id);
        let kept = matches!(action, Some((_, Action::Kept { .. }, _, _)));
        if present != kept || missing {
            disagreements += 1;
        }
        if present {
            found += 1;
            continue;
        }
        let why = match action {
            Some((_, Action::Dropped { .. }, _, _)) => Lost::DroppedByCompile,
            Some((_, Action::Truncated { .. }, _, _)) => Lost::TruncatedByCompile,
            _ => match candidates.iter().position(|(c, _)| *c == id) {
                Some(rank) if candidates[rank].1 < cutoffs.threshold => {
                    if rank < cutoffs.limit {
                        Lost::BelowThresholdWithinLimit
                    } else {
                        Lost::BelowThresholdPastLimit
                    }
                }
                Some(_) => Lost::OverSourceLimits,
                None => Lost::NotRetrieved,
            },
        };
        lost.push((e.clone(), why));
    }
    Scored {
        share: found as f64 / question.evidence.len() as f64,
        coverage: covered.values().sum::<f64>() / question.evidence.len() as f64,
        covered,
        lost,
        disagreements,
    }
}

/// A missed evidence turn for people: the question, the turn, and what happened to it.
fn example(
    question: &Question,
    turn: &Turn,
    why: Lost,
    prompt: &CompiledPrompt,
    id: MemoryId,
    candidates: &[(MemoryId, f32)],
) -> String {
    let preview: String = turn.text.chars().take(90).collect();
    let rank = candidates
        .iter()
        .position(|(c, _)| *c == id)
        .map(|r| format!("search rank {} (score {:.3})", r + 1, candidates[r].1))
        .unwrap_or_else(|| format!("not in the search's top {}", candidates.len()));
    let section = report_action(prompt, id)
        .map(|(block, action, score, reason)| {
            format!("; report: [{block}] {action:?} score {score:.3}: {reason}")
        })
        .unwrap_or_default();
    format!(
        "  cat {} \"{}\"\n    {} {:?}: \"{preview}\"\n    {}: {rank}{section}",
        question.category,
        question.text,
        turn.dia_id,
        turn.role,
        why.name()
    )
}

/// The embedder of the evaluation stores, and the vector cache when it is the local model.
struct Embedders {
    store: Arc<dyn EmbeddingProvider>,
    cache: Option<Arc<CachedEmbedder>>,
}

/// The cached local model, or the hashing embedder.
fn embedders(choice: Embedder) -> anyhow::Result<Embedders> {
    Ok(match choice {
        Embedder::Hash => Embedders {
            store: Arc::new(HashingEmbedder::new(384)?),
            cache: None,
        },
        Embedder::Local => {
            let local: Arc<dyn EmbeddingProvider> = Arc::new(super::local_embedder()?);
            let cached = Arc::new(CachedEmbedder::open(local, vector_cache_dir()));
            Embedders {
                store: Arc::clone(&cached) as Arc<dyn EmbeddingProvider>,
                cache: Some(cached),
            }
        }
    })
}

async fn open_store(
    path: &Path,
    embedder: Arc<dyn EmbeddingProvider>,
) -> anyhow::Result<Arc<dyn MemoryBackend>> {
    Ok(Arc::new(
        memory_sqlite::SqliteBackend::open(path, Some(embedder), Default::default())
            .await
            .with_context(|| format!("open {}", path.display()))?,
    ))
}

/// `cargo xtask eval locomo FILE --context-budget ...`: evidence in the compiled prompt,
/// with the product's own config.
pub(crate) fn run(args: &super::locomo::Args) -> anyhow::Result<()> {
    if args.backend != super::Backend::Sqlite
        || args.mode != super::Mode::Hybrid
        || args.semantic_weight.is_some()
        || args.no_reply_context
        || args.nearby_lift.is_some()
    {
        anyhow::bail!(
            "--context-budget measures the product's own config (SQLite, hybrid search, \
             reply context); leave out --backend, --mode, --semantic-weight, \
             --no-reply-context and --nearby-lift (--set nearby_lift=L changes the product's)"
        );
    }
    let options = Options {
        file: args.file.clone(),
        budgets: args.context_budget.clone(),
        embedder: args.embedder,
        explain_misses: args.explain_misses,
        json: args.json,
        replay: args.replay,
        overrides: Overrides::parse(&args.set)?,
    };
    let samples = super::locomo::samples(args)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(evaluate(&options, &samples))
}

pub(super) async fn evaluate(options: &Options, samples: &[Sample]) -> anyhow::Result<()> {
    if options.budgets.is_empty() || options.budgets.contains(&0) {
        anyhow::bail!("--context-budget needs positive token budgets, e.g. 1000,2000,4000");
    }
    let Embedders {
        store: embedder,
        cache,
    } = embedders(options.embedder)?;
    if let Some(c) = &cache {
        c.set_whole_texts(options.overrides.get("passages") == Some(0.0));
    }
    let space = embedder.space().to_string();
    let dir = tempfile::tempdir()?;
    let strategy = ContextStrategy::default();
    // What storing the conversations cost: time (vectors from the cache: SQLite's own
    // work) and the store files' size on disk.
    let mut ingest_time = std::time::Duration::ZERO;
    let mut store_bytes = 0u64;
    let cutoffs = Cutoffs {
        threshold: strategy.semantic_threshold.get() as f32,
        limit: strategy.semantic_limit as usize,
    };
    // What the semantic source asks for: its limit plus the window it de-duplicates against.
    let fetched = (strategy.semantic_limit + strategy.temporal_window) as usize;
    let messages = Filter {
        kinds: vec![MemoryKind::Message],
        ..Filter::default()
    };
    let mut results: Vec<BudgetResult> = options
        .budgets
        .iter()
        .map(|&budget| BudgetResult {
            budget,
            ..BudgetResult::default()
        })
        .collect();
    let questions: usize = samples.iter().map(|s| s.questions.len()).sum();
    let mut embed_latency = Vec::with_capacity(questions);
    let bar = indicatif::ProgressBar::new(questions as u64).with_style(
        indicatif::ProgressStyle::with_template("{msg:>12} [{bar:40}] {pos}/{len} ({eta})")?
            .progress_chars("=> "),
    );
    for sample in samples {
        bar.set_message(sample.id.clone());
        let path = dir
            .path()
            .join(format!("{}.db", sample.id.replace(['/', '\\'], "_")));
        let store = open_store(&path, Arc::clone(&embedder)).await?;
        let started = Instant::now();
        let mut replayed: Vec<Replayed> =
            options.budgets.iter().map(|&b| Replayed::new(b)).collect();
        let replay = options.replay.then_some(replayed.as_mut_slice());
        let conv = ingest(
            sample,
            store,
            Arc::clone(&embedder),
            &options.overrides,
            replay,
        )
        .await?;
        ingest_time += started.elapsed();
        store_bytes += ["", "-wal"]
            .iter()
            .filter_map(|ext| {
                let mut name = path.clone().into_os_string();
                name.push(ext);
                std::fs::metadata(name).ok()
            })
            .map(|m| m.len())
            .sum::<u64>();
        let turns: HashMap<&str, &Turn> = sample
            .turns
            .iter()
            .map(|t| (t.dia_id.as_str(), t))
            .collect();
        for q in &sample.questions {
            // The question's vector, from the cache: for the timing without embedding and the
            // diagnostic search (neither is the product path).
            let vector = embedder
                .embed_batch(&[q.text.as_str()])
                .await?
                .pop()
                .context("the embedder returned no vector")?;
            // What one embedding of the question costs the model, for reading the latencies.
            if let Some(c) = &cache {
                c.set_live(true);
                let started = Instant::now();
                let fresh = embedder.embed_batch(&[q.text.as_str()]).await;
                embed_latency.push(started.elapsed());
                c.set_live(false);
                fresh?;
            }
            let diagnostic = SearchRequest::hybrid(q.text.as_str())
                .limit(fetched)
                .filter(messages.clone())
                .with_vector(vector.clone())
                .without_access_tracking();
            let candidates: Vec<(MemoryId, f32)> = conv
                .store
                .search(&conv.scope, &diagnostic)
                .await?
                .iter()
                .map(|h| (h.entry.id, h.score))
                .collect();
            for (r, played) in results.iter_mut().zip(replayed.iter_mut()) {
                let before = cache.as_ref().map(|c| {
                    c.set_live(true);
                    c.live_texts()
                });
                let started = Instant::now();
                // Replayed: each question after the one before, as a person asks them.
                let after = if options.replay {
                    played.previous.take()
                } else {
                    None
                };
                let prompt = conv
                    .prompt_after(&q.text, r.budget, conv.now, after, None)
                    .await;
                r.latency.push(started.elapsed());
                if let (Some(c), Some(before)) = (&cache, before) {
                    c.set_live(false);
                    r.embeddings_per_call.push(c.live_texts() - before);
                }
                let prompt = prompt?;
                if options.replay {
                    let cache = &prompt.report.cache;
                    if let Some(shared) = cache.shared_prefix_tokens {
                        played
                            .question_shared
                            .push(f64::from(shared) / f64::from(cache.prompt_tokens.max(1)));
                    }
                    played.previous = Some(prompt.previous());
                }
                let started = Instant::now();
                let again = conv.prompt(&q.text, r.budget, Some(vector.clone())).await?;
                r.latency_given_vector.push(started.elapsed());
                // The same work, unless the cached vector differs from the fresh one.
                if again.messages != prompt.messages {
                    r.vector_given_differs += 1;
                }
                let scored = score(&conv, &turns, q, &prompt, &candidates, cutoffs);
                r.product.add(q, scored.share);
                r.coverage.add(q, scored.coverage);
                if !q.updated_evidence.is_empty() {
                    let has = |e: &String| scored.covered.get(e).is_some_and(|&c| c > 0.0);
                    r.updates += 1;
                    if q.updated_evidence.iter().any(has) {
                        r.updated_in += 1;
                    } else if q.evidence.iter().any(has) {
                        r.older_only += 1;
                    }
                }
                r.tokens.push(prompt.report.estimated_prompt_tokens);
                for s in &prompt.report.sources {
                    *r.kept_by_source.entry(s.kind.as_str()).or_default() += s.kept;
                }
                for s in &prompt.report.sections {
                    let tokens = match s.action {
                        Action::Kept { tokens } => tokens,
                        Action::Truncated { to, .. } => to,
                        Action::Dropped { .. } => 0,
                    };
                    *r.tokens_by_block.entry(s.block.clone()).or_default() += tokens as usize;
                    if s.memory_id.is_some() && matches!(s.action, Action::Kept { .. }) {
                        *r.whole_in_prompt.entry(s.block.clone()).or_default() += 1;
                    }
                }
                r.evidence_turns += q.evidence.len();
                r.disagreements += scored.disagreements;
                for (dia, why) in &scored.lost {
                    *r.lost.entry(*why).or_default() += 1;
                    if r.examples.len() < options.explain_misses
                        && let (Some(t), Some(&id)) = (turns.get(dia.as_str()), conv.ids.get(dia))
                    {
                        r.examples
                            .push(example(q, t, *why, &prompt, id, &candidates));
                    }
                }
                let base = conv.newest_turns(&q.text, r.budget).await?;
                let scored = score(&conv, &turns, q, &base, &[], cutoffs);
                r.newest.add(q, scored.share);
                r.newest_tokens.push(base.report.estimated_prompt_tokens);
            }
            bar.inc(1);
        }
        for (r, played) in results.iter_mut().zip(replayed) {
            r.replay_tokens.extend(played.tokens);
            r.replay_shared.extend(played.shared);
            r.replay_hits += played.hits;
            r.question_shared.extend(played.question_shared);
        }
    }
    bar.finish_and_clear();
    if let Some(c) = &cache {
        c.save()?;
    }
    for r in &mut results {
        r.latency.sort();
        r.latency_given_vector.sort();
    }
    embed_latency.sort();

    let measured = Measured {
        conversations: samples.len(),
        memories: samples.iter().map(|s| s.turns.len()).sum(),
        questions,
        unusable: samples.iter().map(|s| s.unusable).sum(),
        space,
        ingest_time,
        store_bytes,
        embed_latency: cache.as_ref().map(|_| embed_latency),
        results,
    };
    if options.json {
        report::json(options, &measured)
    } else {
        report::text(options, &measured);
        Ok(())
    }
}

/// What one run measured, for [`report`] to print.
struct Measured {
    conversations: usize,
    memories: usize,
    questions: usize,
    /// Questions left out: none of their evidence is usable.
    unusable: usize,
    /// The embedding space of the stores.
    space: String,
    /// Storing the conversations (vectors from the cache: SQLite's own work).
    ingest_time: Duration,
    /// The store files' size on disk.
    store_bytes: u64,
    /// What one embedding of a question takes, sorted: with the local model only (the
    /// hashing embedder costs nothing).
    embed_latency: Option<Vec<Duration>>,
    /// One per budget, in the order asked.
    results: Vec<BudgetResult>,
}

#[cfg(test)]
mod tests;
