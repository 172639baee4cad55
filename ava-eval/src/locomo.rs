//! LoCoMo retrieval evaluation: every dialog turn becomes one memory of its conversation's
//! scope (dated by its session), every QA question is a query, and recall@k measures how
//! many of the question's evidence turns come back in the top k. With `--context-budget`,
//! the same file measures what reaches the compiled prompt instead (`super::context`).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use chrono::NaiveDateTime;
use memory_core::{
    EmbeddingProvider, HashingEmbedder, HybridWeights, MemoryBackend, MemoryEntry, MemoryId,
    NewMemory, Role, Scope, SearchMode, SearchRequest, Timestamp,
};
use serde_json::Value;

use super::cache::CachedEmbedder;
use super::{Backend, Embedder, Mode};

/// `cargo xtask eval locomo FILE ...`
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// A LoCoMo-format JSON file (a list of samples with `conversation` and `qa`).
    pub(crate) file: PathBuf,
    /// Backend holding the memories.
    #[arg(long, value_enum, default_value_t = Backend::Sqlite)]
    pub(crate) backend: Backend,
    /// Search mode.
    #[arg(long, value_enum, default_value_t = Mode::Hybrid)]
    pub(crate) mode: Mode,
    /// Cut-offs for recall@k, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "5,10")]
    k: Vec<usize>,
    /// Embedder for semantic and hybrid modes.
    #[arg(long, value_enum, default_value_t = Embedder::Local)]
    pub(crate) embedder: Embedder,
    /// Semantic weight of hybrid fusion (keyword weight is 1 minus this) [default: the
    /// product's, `HybridWeights::default()`].
    #[arg(long)]
    pub(crate) semantic_weight: Option<f32>,
    /// Store turns without the turn they answer as context (the bot stores a chat with it;
    /// this shows what that is worth).
    #[arg(long)]
    pub(crate) no_reply_context: bool,
    /// Rank the search's best 4 x (largest k) hits again as the product's semantic source
    /// does, each lifted by the talk around it by this much (`hydrate::lift_by_nearby`; the
    /// product's is `hydrate::NEARBY_LIFT`), and measure recall on that order.
    #[arg(long)]
    pub(crate) nearby_lift: Option<f32>,
    /// Measure evidence in the compiled prompt instead of retrieval recall: for each of these
    /// token budgets (comma separated), store each conversation as `ava` stores a chat and
    /// build every question's prompt with the product's hydration config. `--backend`,
    /// `--mode`, `--k`, `--semantic-weight` and `--no-reply-context` do not apply.
    #[arg(long, value_delimiter = ',')]
    pub(crate) context_budget: Vec<u32>,
    /// With `--context-budget`: print up to this many missed evidence turns per budget, with
    /// where each was lost (stderr).
    #[arg(long, default_value_t = 0)]
    pub(crate) explain_misses: usize,
    /// Print the results as JSON instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
    /// With `--context-budget`: play each conversation through the product as the bot does
    /// (each of the first speaker's turns is a prompt built after the one before, then the
    /// turn and the answers to it are stored), report each budget's mean prompt tokens and
    /// the share of each prompt that repeats the start of the one before (what a provider's
    /// prompt cache can serve), then ask the questions one after another.
    #[arg(long)]
    pub(crate) replay: bool,
    /// With `--context-budget`, an experiment: a setting other than the product's
    /// (repeatable), one of `semantic_threshold`, `semantic_limit`, `semantic_weight`, `neighbours`,
    /// `nearby_lift`, `temporal_window`, `keep_recent`, `item_tokens`, `unmatched_relevance`, `decay_floor`,
    /// `cue_time`, `cue_phrase`, `cue_name`, `cue_own_words`, `near_duplicate`,
    /// `long_item_tokens` (numbers; `long_item_tokens=0` ranks long sections by value alone),
    /// `excerpts=0` (long memories cut at their head), `graph=0` (no graph family), or
    /// `allocation` (`relevance`,
    /// `information`, `fixed:SYSTEM,CONTEXT,OBSERVATION`). The output says it is an
    /// experiment.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub(crate) set: Vec<String>,
}

pub(super) const CATEGORIES: [(u64, &str); 5] = [
    (1, "multi-hop"),
    (2, "temporal"),
    (3, "open-domain"),
    (4, "single-hop"),
    (5, "adversarial"),
];

/// One dialog turn.
pub(super) struct Turn {
    pub(super) dia_id: String,
    /// "Speaker: text", plus " [shares CAPTION]" (the retrieval protocol's memory).
    content: String,
    /// The previous turn of the same session, if any.
    previous: Option<String>,
    at: Timestamp,
    /// The message as a chat stores it: the text, plus " [shares CAPTION]".
    pub(super) text: String,
    /// `User` for the conversation's `speaker_a`, `Assistant` for anyone else.
    pub(super) role: Role,
    /// When a chat received it: its session's start plus one minute per earlier turn.
    pub(super) chat_at: Timestamp,
}

/// One question with its usable evidence.
pub(super) struct Question {
    pub(super) text: String,
    pub(super) category: u64,
    pub(super) evidence: Vec<String>,
    /// BEAM's own category (`knowledge_update`, ...), when the file has one.
    pub(super) beam_category: Option<String>,
    /// For a knowledge update: the evidence messages holding the current value.
    pub(super) updated_evidence: Vec<String>,
}

pub(super) struct Sample {
    pub(super) id: String,
    pub(super) turns: Vec<Turn>,
    pub(super) questions: Vec<Question>,
    /// Questions dropped because none of their evidence ids names a turn.
    pub(super) unusable: usize,
}

/// Normalises an evidence id: `D:11:26` -> `D11:26`, `D30:05` -> `D30:5`. `None` when the
/// text is not of the form `D<session>:<turn>`.
fn normalize_dia_id(raw: &str) -> Option<String> {
    let rest = raw.trim().strip_prefix('D')?.trim_start_matches(':');
    let (session, turn) = rest.split_once(':')?;
    let session: u32 = session.trim().parse().ok()?;
    let turn: u32 = turn.trim().parse().ok()?;
    Some(format!("D{session}:{turn}"))
}

/// Splits and normalises a question's evidence list (`"D8:6; D9:17"` holds two ids).
fn evidence_ids(raw: &[Value]) -> Vec<String> {
    raw.iter()
        .filter_map(Value::as_str)
        .flat_map(|s| s.split([';', ',']))
        .flat_map(str::split_whitespace)
        .filter_map(normalize_dia_id)
        .collect()
}

/// Parses LoCoMo's session dates, e.g. `1:56 pm on 8 May, 2023`.
fn session_time(text: &str) -> Option<Timestamp> {
    let t = text.trim().to_uppercase();
    NaiveDateTime::parse_from_str(&t, "%I:%M %p ON %d %B, %Y")
        .ok()
        .map(|dt| Timestamp::from(dt.and_utc()))
}

pub(super) fn parse_samples(data: &Value) -> anyhow::Result<(Vec<Sample>, Vec<String>)> {
    let list = data.as_array().context("expected a JSON list of samples")?;
    let mut samples = Vec::new();
    let mut problems = Vec::new();
    for (i, s) in list.iter().enumerate() {
        let id = s
            .get("sample_id")
            .and_then(Value::as_str)
            .map_or_else(|| format!("sample-{i}"), str::to_owned);
        let Some(conv) = s.get("conversation").and_then(Value::as_object) else {
            problems.push(format!("{id}: no conversation, skipped"));
            continue;
        };
        let mut sessions: Vec<(u32, &Vec<Value>)> = conv
            .iter()
            .filter_map(|(k, v)| {
                let n = k.strip_prefix("session_")?.parse::<u32>().ok()?;
                Some((n, v.as_array()?))
            })
            .collect();
        sessions.sort_by_key(|(n, _)| *n);
        let speaker_a = conv.get("speaker_a").and_then(Value::as_str);
        let mut turns = Vec::new();
        // Sessions without a readable date continue a day after the previous one.
        let mut clock = Timestamp::from_millis(1_600_000_000_000).unwrap_or(Timestamp::MIN);
        for (n, session) in sessions {
            let date = conv
                .get(&format!("session_{n}_date_time"))
                .and_then(Value::as_str);
            let start = match date.and_then(session_time) {
                Some(t) => t,
                None => {
                    problems.push(format!("{id}: session {n} has no readable date ({date:?})"));
                    clock.plus(Duration::from_secs(86_400))
                }
            };
            for (j, t) in session.iter().enumerate() {
                let (Some(speaker), Some(dia_id), Some(text)) = (
                    t.get("speaker").and_then(Value::as_str),
                    t.get("dia_id")
                        .and_then(Value::as_str)
                        .and_then(normalize_dia_id),
                    t.get("text").and_then(Value::as_str),
                ) else {
                    problems.push(format!("{id}: malformed turn {j} in session {n}, skipped"));
                    continue;
                };
                let mut chat_text = text.to_owned();
                if let Some(caption) = t.get("blip_caption").and_then(Value::as_str) {
                    chat_text.push_str(&format!(" [shares {caption}]"));
                }
                let content = format!("{speaker}: {chat_text}");
                let role = if Some(speaker) == speaker_a {
                    Role::User
                } else {
                    Role::Assistant
                };
                let at = start.plus(Duration::from_secs(j as u64 * 30));
                let chat_at = start.plus(Duration::from_secs(j as u64 * 60));
                // The turn this one answers: the previous turn of the same session.
                let previous = (j > 0)
                    .then(|| turns.last().map(|t: &Turn| t.content.clone()))
                    .flatten();
                turns.push(Turn {
                    dia_id,
                    content,
                    previous,
                    at,
                    text: chat_text,
                    role,
                    chat_at,
                });
            }
            clock = start;
        }
        let known: HashSet<&str> = turns.iter().map(|t| t.dia_id.as_str()).collect();
        let mut questions = Vec::new();
        let mut unusable = 0;
        for q in s.get("qa").and_then(Value::as_array).into_iter().flatten() {
            let (Some(text), Some(category)) = (
                q.get("question").and_then(Value::as_str),
                q.get("category").and_then(Value::as_u64),
            ) else {
                problems.push(format!("{id}: malformed question skipped"));
                continue;
            };
            let raw = q
                .get("evidence")
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or_default();
            let mut evidence: Vec<String> = evidence_ids(raw)
                .into_iter()
                .filter(|e| known.contains(e.as_str()))
                .collect();
            evidence.sort();
            evidence.dedup();
            if evidence.is_empty() {
                unusable += 1;
                continue;
            }
            let updated = q
                .get("updated_evidence")
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or_default();
            let updated_evidence: Vec<String> = evidence_ids(updated)
                .into_iter()
                .filter(|e| evidence.contains(e))
                .collect();
            questions.push(Question {
                text: text.to_owned(),
                category,
                evidence,
                beam_category: q
                    .get("beam_category")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
                updated_evidence,
            });
        }
        samples.push(Sample {
            id,
            turns,
            questions,
            unusable,
        });
    }
    Ok((samples, problems))
}

/// Stores one memory per turn as `ava` stores a message (one longer than the store takes in
/// one memory goes in as linked parts, `NewMemory::split_to_fit`), in batches of 256; returns
/// every stored memory, in order, with the index of the turn it belongs to.
pub(super) async fn store_turns(
    store: &dyn MemoryBackend,
    scope: &Scope,
    turns: Vec<NewMemory>,
) -> memory_core::Result<Vec<(usize, MemoryEntry)>> {
    let max = store.info().limits.max_content_bytes;
    let mut owners: Vec<usize> = Vec::with_capacity(turns.len());
    let mut parts: Vec<NewMemory> = Vec::with_capacity(turns.len());
    for (i, m) in turns.into_iter().enumerate() {
        for p in m.split_to_fit(max) {
            owners.push(i);
            parts.push(p);
        }
    }
    let mut out = Vec::with_capacity(parts.len());
    let mut owners = owners.into_iter();
    let mut parts = parts.into_iter().peekable();
    while parts.peek().is_some() {
        let batch: Vec<NewMemory> = parts.by_ref().take(256).collect();
        let stored = store.store_batch(scope, batch).await?;
        out.extend(owners.by_ref().zip(stored));
    }
    Ok(out)
}

/// Where evaluation vectors are cached: `target/eval-cache` of this workspace.
pub(super) fn vector_cache_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/eval-cache")
}

async fn make_backend(
    args: &Args,
    dir: &tempfile::TempDir,
    cache: &mut Option<Arc<CachedEmbedder>>,
) -> anyhow::Result<(Arc<dyn MemoryBackend>, Option<String>, Option<usize>)> {
    let embedder: Option<Arc<dyn EmbeddingProvider>> = match (args.mode, args.embedder) {
        (Mode::Keyword, _) => None,
        (_, Embedder::Hash) => Some(Arc::new(HashingEmbedder::new(384)?)),
        (_, Embedder::Local) => {
            let local: Arc<dyn EmbeddingProvider> = Arc::new(super::local_embedder()?);
            let cached = Arc::new(CachedEmbedder::open(local, vector_cache_dir()));
            *cache = Some(Arc::clone(&cached));
            Some(cached)
        }
    };
    let space = embedder.as_ref().map(|e| e.space().to_string());
    let window = embedder.as_ref().and_then(|e| e.window_bytes());
    let backend: Arc<dyn MemoryBackend> = match args.backend {
        Backend::Inmem => Arc::new(memory_inmem::InMemoryBackend::new(embedder)),
        Backend::Sqlite => Arc::new(
            memory_sqlite::SqliteBackend::open(
                dir.path().join("locomo.db"),
                embedder,
                Default::default(),
            )
            .await
            .context("open the evaluation store")?,
        ),
    };
    Ok((backend, space, window))
}

#[derive(Default, Clone)]
struct Tally {
    questions: usize,
    recall_sum: BTreeMap<usize, f64>,
}

impl Tally {
    fn add(&mut self, recalls: &BTreeMap<usize, f64>) {
        self.questions += 1;
        for (k, r) in recalls {
            *self.recall_sum.entry(*k).or_default() += r;
        }
    }
    fn recall(&self, k: usize) -> f64 {
        if self.questions == 0 {
            0.0
        } else {
            self.recall_sum.get(&k).copied().unwrap_or(0.0) / self.questions as f64
        }
    }
}

/// The samples of `args.file`, with a note on stderr for each problem found in it.
pub(crate) fn samples(args: &Args) -> anyhow::Result<Vec<Sample>> {
    let text = std::fs::read_to_string(&args.file)
        .with_context(|| format!("read {}", args.file.display()))?;
    let data: Value = serde_json::from_str(&text)
        .with_context(|| format!("{} is not valid JSON", args.file.display()))?;
    let (samples, problems) = parse_samples(&data)?;
    for p in &problems {
        eprintln!("note: {p}");
    }
    Ok(samples)
}

/// The retrieval eval (`--context-budget` is `context::run`'s).
pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    if args.k.is_empty() || args.k.contains(&0) {
        bail!("--k needs positive cut-offs, e.g. --k 5,10");
    }
    let samples = samples(args)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(evaluate(args, &samples))
}

async fn evaluate(args: &Args, samples: &[Sample]) -> anyhow::Result<()> {
    let semantic_weight = args
        .semantic_weight
        .unwrap_or_else(|| HybridWeights::default().semantic());
    let dir = tempfile::tempdir()?;
    let mut cache = None;
    let (backend, space, window) = make_backend(args, &dir, &mut cache).await?;
    let max_k = args.k.iter().copied().max().unwrap_or(10);
    let mode = match args.mode {
        Mode::Keyword => SearchMode::Keyword,
        Mode::Semantic => SearchMode::Semantic,
        Mode::Hybrid => {
            SearchMode::Hybrid(HybridWeights::new(semantic_weight, 1.0 - semantic_weight)?)
        }
    };
    let turns: usize = samples.iter().map(|s| s.turns.len()).sum();
    let questions: usize = samples.iter().map(|s| s.questions.len()).sum();
    let bar = indicatif::ProgressBar::new((turns + questions) as u64).with_style(
        indicatif::ProgressStyle::with_template("{msg:>10} [{bar:40}] {pos}/{len} ({eta})")?
            .progress_chars("=> "),
    );
    let ingest_start = Instant::now();
    let mut dia_of: HashMap<MemoryId, String> = HashMap::new();
    for s in samples {
        let scope = Scope::for_user(&s.id)?.in_tenant("locomo-eval")?;
        bar.set_message("ingest");
        let memories = s
            .turns
            .iter()
            .map(|t| {
                let m = NewMemory::new(&t.content)
                    .with_role(Role::User)
                    .with_source(&t.dia_id)
                    .at(t.at);
                match (&t.previous, !args.no_reply_context) {
                    (Some(p), true) => m.with_context(format!("in reply to: {p}")),
                    _ => m,
                }
            })
            .collect();
        // A message stored in parts is found as its message through any of them.
        for (i, e) in store_turns(backend.as_ref(), &scope, memories).await? {
            dia_of.insert(e.id, s.turns[i].dia_id.clone());
        }
        bar.inc(s.turns.len() as u64);
    }
    let ingest = ingest_start.elapsed();
    let mut by_cat: BTreeMap<u64, Tally> = BTreeMap::new();
    // BEAM's own categories, when the file has them (per category what each mode finds).
    let mut by_beam: BTreeMap<&str, Tally> = BTreeMap::new();
    let mut overall = Tally::default();
    let mut latencies = Vec::with_capacity(questions);
    bar.set_message("query");
    for s in samples {
        let scope = Scope::for_user(&s.id)?.in_tenant("locomo-eval")?;
        for q in &s.questions {
            let pool = match args.nearby_lift {
                Some(_) => max_k.saturating_mul(4),
                None => max_k,
            };
            let mut req = SearchRequest::keyword(&q.text)
                .limit(pool)
                .without_access_tracking();
            req.mode = mode;
            let t = Instant::now();
            let mut hits = backend.search(&scope, &req).await?;
            if let Some(lift) = args.nearby_lift {
                let lifted = hydrate::lift_by_nearby(&hits, lift, window);
                for (h, s) in hits.iter_mut().zip(lifted) {
                    h.score = s;
                }
                hits.sort_by(|a, b| {
                    b.score
                        .total_cmp(&a.score)
                        .then(a.entry.id.cmp(&b.entry.id))
                });
            }
            latencies.push(t.elapsed());
            // A message stored in parts is one result, at its best part's rank.
            let mut seen = HashSet::new();
            let ranked: Vec<&str> = hits
                .iter()
                .filter_map(|h| dia_of.get(&h.entry.id).map(String::as_str))
                .filter(|d| seen.insert(*d))
                .collect();
            let recalls: BTreeMap<usize, f64> = args
                .k
                .iter()
                .map(|&k| {
                    let top: HashSet<&str> = ranked.iter().take(k).copied().collect();
                    let found = q
                        .evidence
                        .iter()
                        .filter(|e| top.contains(e.as_str()))
                        .count();
                    (k, found as f64 / q.evidence.len() as f64)
                })
                .collect();
            by_cat.entry(q.category).or_default().add(&recalls);
            if let Some(b) = &q.beam_category {
                by_beam.entry(b.as_str()).or_default().add(&recalls);
            }
            overall.add(&recalls);
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    if let Some(c) = &cache {
        c.save()?;
    }
    latencies.sort();
    let pct = |p: f64| {
        latencies
            .get(((latencies.len() as f64 * p) as usize).min(latencies.len().saturating_sub(1)))
            .map_or(0.0, |d| d.as_secs_f64() * 1e3)
    };
    let unusable: usize = samples.iter().map(|s| s.unusable).sum();
    let mode_name = format!("{:?}", args.mode).to_lowercase();
    let backend_name = format!("{:?}", args.backend).to_lowercase();
    if args.json {
        let tally = |t: &Tally| {
            let recall: serde_json::Map<String, Value> = args
                .k
                .iter()
                .map(|k| (format!("r@{k}"), Value::from(t.recall(*k))))
                .collect();
            serde_json::json!({ "questions": t.questions, "recall": recall })
        };
        let cats: serde_json::Map<String, Value> = by_cat
            .iter()
            .map(|(c, t)| (c.to_string(), tally(t)))
            .collect();
        let beam: serde_json::Map<String, Value> = by_beam
            .iter()
            .map(|(c, t)| ((*c).to_owned(), tally(t)))
            .collect();
        let recall: serde_json::Map<String, Value> = args
            .k
            .iter()
            .map(|k| (format!("r@{k}"), Value::from(overall.recall(*k))))
            .collect();
        let out = serde_json::json!({
            "file": args.file.display().to_string(),
            "backend": backend_name,
            "mode": mode_name,
            "embedding_space": space,
            "semantic_weight": semantic_weight,
            "reply_context": !args.no_reply_context,
            "nearby_lift": args.nearby_lift,
            "samples": samples.len(),
            "memories": turns,
            "questions": overall.questions,
            "questions_without_evidence": unusable,
            "overall": { "recall": recall },
            "categories": cats,
            "beam_categories": beam,
            "latency_ms": { "p50": pct(0.5), "p95": pct(0.95) },
            "ingest_seconds": ingest.as_secs_f64(),
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    println!("LoCoMo retrieval eval: {}", args.file.display());
    println!(
        "backend {backend_name}, mode {mode_name}{}, embedder {}, reply context {}{}",
        if args.mode == Mode::Hybrid {
            format!(" (semantic weight {semantic_weight})")
        } else {
            String::new()
        },
        space.as_deref().unwrap_or("none"),
        if args.no_reply_context { "off" } else { "on" },
        match args.nearby_lift {
            Some(l) => format!(
                ", best {} hits lifted by the talk around them ({l})",
                max_k * 4
            ),
            None => String::new(),
        }
    );
    println!(
        "{} conversations, {turns} memories, {} questions ({unusable} without usable evidence left out)\n",
        samples.len(),
        overall.questions
    );
    let header: String = args
        .k
        .iter()
        .map(|k| format!("{:>8}", format!("R@{k}")))
        .collect();
    println!("{:<26}{:>6}{header}", "category", "n");
    for (c, name) in CATEGORIES {
        if let Some(t) = by_cat.get(&c) {
            let cols: String = args
                .k
                .iter()
                .map(|k| format!("{:>8.3}", t.recall(*k)))
                .collect();
            println!("{:<26}{:>6}{cols}", format!("{c} {name}"), t.questions);
        }
    }
    for (name, t) in &by_beam {
        let cols: String = args
            .k
            .iter()
            .map(|k| format!("{:>8.3}", t.recall(*k)))
            .collect();
        println!("{:<26}{:>6}{cols}", name, t.questions);
    }
    let cols: String = args
        .k
        .iter()
        .map(|k| format!("{:>8.3}", overall.recall(*k)))
        .collect();
    println!("{:<26}{:>6}{cols}", "overall", overall.questions);
    println!(
        "\nper-query latency: p50 {:.3} ms, p95 {:.3} ms; ingest {:.1} s",
        pct(0.5),
        pct(0.95),
        ingest.as_secs_f64()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_evidence_ids_are_normalised() {
        let raw: Vec<Value> = vec![
            "D8:6; D9:17".into(),
            "D:11:26".into(),
            "D30:05".into(),
            "nonsense".into(),
            7.into(),
        ];
        assert_eq!(evidence_ids(&raw), ["D8:6", "D9:17", "D11:26", "D30:5"]);
    }

    #[test]
    fn session_dates_parse() {
        let t = session_time("1:56 pm on 8 May, 2023").unwrap();
        assert_eq!(t.to_string(), "2023-05-08T13:56:00.000Z");
        assert!(session_time("yesterday").is_none());
    }

    #[test]
    fn samples_parse_and_count_unusable_questions() {
        let data = serde_json::json!([{
            "sample_id": "s1",
            "conversation": {
                "speaker_a": "A", "speaker_b": "B",
                "session_1_date_time": "10:00 am on 1 June, 2023",
                "session_1": [
                    {"speaker": "A", "dia_id": "D1:1", "text": "hello"},
                    {"speaker": "B", "dia_id": "D1:2", "text": "look", "blip_caption": "a photo of a dog"},
                    {"speaker": "B", "text": "no id"}
                ]
            },
            "qa": [
                {"question": "q1", "answer": "x", "evidence": ["D1:2"], "category": 4},
                {"question": "q2", "answer": "x", "evidence": ["D9:9"], "category": 1}
            ]
        }]);
        let (samples, problems) = parse_samples(&data).unwrap();
        assert_eq!(samples[0].turns.len(), 2);
        assert_eq!(
            samples[0].turns[1].content,
            "B: look [shares a photo of a dog]"
        );
        // As a chat stores it: the text without the speaker, the role by speaker, a minute on.
        let (first, second) = (&samples[0].turns[0], &samples[0].turns[1]);
        assert_eq!(second.text, "look [shares a photo of a dog]");
        assert_eq!((first.role, second.role), (Role::User, Role::Assistant));
        assert_eq!(
            second.chat_at.as_millis() - first.chat_at.as_millis(),
            60_000
        );
        assert_eq!(samples[0].questions.len(), 1);
        assert_eq!(samples[0].unusable, 1);
        assert_eq!(problems.len(), 1, "{problems:?}");
    }
}
