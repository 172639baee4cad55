//! Context sources: what a source is asked ([`SourceQuery`]), what it hands back
//! ([`SourceItem`]s pushed into a [`SourceOutput`], with any [`Degradation`] it met), and the
//! object-safe [`ContextSource`] trait.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use memory_core::{
    Embedding, EmbeddingProvider, EmbeddingSpace, MemoryEntry, MemoryId, MemoryKind, Role, Scope,
    ScoreBreakdown, ScoredMemory, Timestamp,
};
use prompt_ir::{ContextStrategy, Relevance, SectionSource};
use serde::{Deserialize, Serialize};

use crate::cues::QueryCues;
use crate::error::Result;
use crate::reach::{MemoryTuning, Reach};

/// What kind of context a source supplies.
///
/// The order is precedence: when two sources return the same memory, the earlier kind keeps
/// it (a message in the recent conversation is not repeated as a related past message).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum SourceKind {
    /// The recent conversation, newest messages of the scope.
    Temporal,
    /// Long-term facts about the user.
    Knowledge,
    /// Related past messages, found by similarity to the observation.
    Semantic,
    /// Facts from a knowledge graph.
    Graph,
    /// Passages from a document vector store.
    Vector,
    /// Web search results.
    Web,
}

impl SourceKind {
    /// The three kinds a memory backend supplies.
    pub const MEMORY: [SourceKind; 3] = [Self::Temporal, Self::Knowledge, Self::Semantic];

    /// The lowercase name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Temporal => "temporal",
            Self::Knowledge => "knowledge",
            Self::Semantic => "semantic",
            Self::Graph => "graph",
            Self::Vector => "vector",
            Self::Web => "web",
        }
    }

    /// Where a section of this kind comes from, for the Prompt IR (which decides its default
    /// priority: knowledge Medium, the conversation Medium, similarity hits Low). What a
    /// condition brought rather than a search's score (a web result for the question, a
    /// graph path from an entity it names) is conditional: no relevance floor applies to it.
    pub fn section_source(self, relevance: Relevance) -> SectionSource {
        match self {
            Self::Temporal => SectionSource::Temporal,
            Self::Knowledge => SectionSource::Knowledge,
            Self::Semantic | Self::Vector => SectionSource::Semantic(relevance),
            Self::Graph => SectionSource::Conditional("graph".into()),
            Self::Web => SectionSource::Conditional("web".into()),
        }
    }

    /// Position of this kind's block in a compiled prompt: background first, the recent
    /// conversation last, right before the observation.
    pub(crate) fn render_rank(self) -> u8 {
        match self {
            Self::Knowledge => 0,
            Self::Graph => 1,
            Self::Semantic => 2,
            Self::Vector => 3,
            Self::Web => 4,
            Self::Temporal => 5,
        }
    }
}

impl fmt::Display for SourceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which of the common parameters a source applies itself. Hydrate applies the others to
/// what the source returns, so a source that honours nothing is still correct, only slower.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Honours {
    /// Leaves out items whose similarity is below [`SourceParams::threshold`].
    pub threshold: bool,
    /// Returns at most [`SourceParams::max_tokens`] tokens.
    pub max_tokens: bool,
    /// Returns at most [`SourceParams::max_items`] items.
    pub max_items: bool,
}

impl Honours {
    /// Honours nothing: hydrate enforces every parameter.
    pub const NONE: Honours = Honours {
        threshold: false,
        max_tokens: false,
        max_items: false,
    };
    /// Honours every parameter.
    pub const ALL: Honours = Honours {
        threshold: true,
        max_tokens: true,
        max_items: true,
    };
}

/// The parameters every source takes besides the observation.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct SourceParams {
    /// At most this many items survive (after de-duplication across sources).
    pub max_items: usize,
    /// At most this many tokens of rendered items survive.
    pub max_tokens: u32,
    /// Least similarity an item found by similarity needs, if any.
    #[serde(serialize_with = "rounded")]
    pub threshold: Option<f32>,
}

/// Writes an `f32` as the shortest `f64` with the same 6 decimals (0.1, not
/// 0.10000000149011612), so reports read as they were configured.
fn rounded<S: serde::Serializer>(value: &Option<f32>, s: S) -> Result<S::Ok, S::Error> {
    match value {
        Some(v) => s.serialize_some(&((f64::from(*v) * 1e6).round() / 1e6)),
        None => s.serialize_none(),
    }
}

/// Query embeddings shared by every source of one hydration, so the observation is embedded
/// at most once per embedding space, however many sources search by similarity.
#[derive(Debug)]
pub struct QueryEmbeddings {
    text: String,
    cache: tokio::sync::Mutex<Vec<Embedding>>,
}

impl QueryEmbeddings {
    /// Embeddings of `text`, none computed yet.
    pub fn new(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            cache: tokio::sync::Mutex::new(Vec::new()),
        }
    }

    /// Seeds a precomputed vector of the text (e.g. one the caller already had).
    pub fn with_vector(self, vector: Embedding) -> Self {
        let mut cache = self.cache.into_inner();
        cache.retain(|e| e.space() != vector.space());
        cache.push(vector);
        Self {
            text: self.text,
            cache: tokio::sync::Mutex::new(cache),
        }
    }

    /// The embedded text.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The text's vector in `space`, if one was seeded or computed already.
    pub async fn cached(&self, space: &EmbeddingSpace) -> Option<Embedding> {
        let cache = self.cache.lock().await;
        cache.iter().find(|e| **e.space() == *space).cloned()
    }

    /// The text's vector from `embedder`: cached, or computed now and cached.
    pub async fn get(&self, embedder: &dyn EmbeddingProvider) -> Result<Embedding> {
        let space = embedder.space();
        // Held across the embedding call on purpose: a second source asking for the same
        // space waits for the first result instead of embedding again.
        let mut cache = self.cache.lock().await;
        if let Some(e) = cache.iter().find(|e| **e.space() == *space) {
            return Ok(e.clone());
        }
        let e = embedder.embed(&self.text).await?;
        cache.push(e.clone());
        Ok(e)
    }
}

/// What one source is asked for.
#[derive(Debug)]
pub struct SourceQuery<'a> {
    /// The kind of context wanted (a source may serve several kinds).
    pub kind: SourceKind,
    /// The scope the request is for. Memory sources read this scope (and, for knowledge,
    /// the user-level scopes [`Self::reach`] allows) and nothing else.
    pub scope: &'a Scope,
    /// The new observation (usually the user's message).
    pub observation: &'a str,
    /// What the agent is trying to do, if known.
    pub goal: Option<&'a str>,
    /// The common parameters.
    pub params: SourceParams,
    /// The request's strategy (temporal window, semantic limit, decay, ...).
    pub strategy: &'a ContextStrategy,
    /// "Now" for this request.
    pub now: Timestamp,
    /// Shared query embeddings of the observation.
    pub embeddings: &'a QueryEmbeddings,
    /// What the observation says beyond its meaning: the time it asks about, quoted
    /// phrases, names. A source may use the time window to widen its search.
    pub cues: &'a QueryCues,
    /// Whose memories beyond the scope may be read ([`HydrateInput::reach`](crate::HydrateInput::reach)).
    pub reach: &'a Reach,
    /// Whether searches count what they find as recalled
    /// ([`HydrateInput::record_access`](crate::HydrateInput::record_access)).
    pub record_access: bool,
    /// How the memory source searches ([`HydrationConfig::memory`](crate::HydrationConfig::memory)).
    pub tuning: MemoryTuning,
}

/// One thing a source found: a memory, or a passage from elsewhere.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SourceItem {
    /// Unique within the source: the memory id for memories.
    pub key: String,
    /// The memory, when the item is one; items are de-duplicated across sources by it.
    pub memory_id: Option<MemoryId>,
    /// The text.
    pub content: String,
    /// Who said it, for messages.
    pub role: Option<Role>,
    /// The memory's kind, for memories.
    pub memory_kind: Option<MemoryKind>,
    /// When it was said or learned.
    pub created_at: Option<Timestamp>,
    /// How much it matters (0..=1), if known.
    pub importance: Option<f32>,
    /// How often it was recalled before.
    pub access_count: u64,
    /// Pinned memories do not decay.
    pub pinned: bool,
    /// Similarity to the observation (0..=1), when the item was found by a search.
    pub similarity: Option<f32>,
    /// How the item scored; hydrate fills `recency`, `importance` and `access`.
    pub breakdown: ScoreBreakdown,
    /// The combined score (see the `scoring` module); set by hydrate.
    pub score: f32,
    /// A short note shown with the item, e.g. `user-wide` for a fact from the user's scope.
    pub note: Option<String>,
    /// The similarity its search gave it, when the source lifted that by the talk around it
    /// ([`NEARBY_LIFT`](crate::NEARBY_LIFT)); `None` when `similarity` is the search's own.
    pub lifted_from: Option<f32>,
}

impl SourceItem {
    /// An item for a memory that was not found by a search (no similarity).
    pub fn from_memory(entry: &MemoryEntry) -> Self {
        Self {
            key: entry.id.to_string(),
            memory_id: Some(entry.id),
            content: entry.content.clone(),
            role: entry.role,
            memory_kind: Some(entry.kind),
            created_at: Some(entry.created_at),
            importance: Some(entry.importance.get()),
            access_count: entry.access_count,
            pinned: entry.pinned,
            similarity: None,
            breakdown: ScoreBreakdown::default(),
            score: 0.0,
            note: None,
            lifted_from: None,
        }
    }

    /// An item for a search hit: its similarity is the hit's score clamped to `0..=1`.
    pub fn from_hit(hit: &ScoredMemory) -> Self {
        Self {
            similarity: Some(hit.score.clamp(0.0, 1.0)),
            breakdown: hit.breakdown.clone(),
            ..Self::from_memory(&hit.entry)
        }
    }

    /// An item that is not a memory (a web result, a graph fact).
    pub fn text(key: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            key: key.into(),
            memory_id: None,
            content: content.into(),
            role: None,
            memory_kind: None,
            created_at: None,
            importance: None,
            access_count: 0,
            pinned: false,
            similarity: None,
            breakdown: ScoreBreakdown::default(),
            score: 0.0,
            note: None,
            lifted_from: None,
        }
    }

    /// Sets the similarity (clamped to `0..=1`).
    pub fn with_similarity(mut self, similarity: f32) -> Self {
        self.lifted_from = None;
        self.similarity = Some(if similarity.is_nan() {
            0.0
        } else {
            similarity.clamp(0.0, 1.0)
        });
        self
    }

    /// Sets the note.
    pub fn with_note(mut self, note: impl Into<String>) -> Self {
        self.note = Some(note.into());
        self
    }
}

/// Where a source puts what it finds. Push items as soon as they are known: when a source
/// misses its deadline, what it pushed so far is kept as a partial result.
#[derive(Debug, Default)]
pub struct SourceOutput {
    items: Vec<SourceItem>,
    degradations: Vec<Degradation>,
    search: Option<String>,
}

impl SourceOutput {
    /// An empty output.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds an item.
    pub fn push(&mut self, item: SourceItem) {
        self.items.push(item);
    }

    /// Adds items.
    pub fn extend(&mut self, items: impl IntoIterator<Item = SourceItem>) {
        self.items.extend(items);
    }

    /// Records that the source did less than it was asked (a fallback, a skipped part).
    pub fn degrade(&mut self, kind: DegradationKind, message: impl Into<String>) {
        self.degradations.push(Degradation::new(kind, message));
    }

    /// Records how the source searched (`hybrid`, `keyword`, ...), for the report.
    pub fn set_search(&mut self, mode: impl Into<String>) {
        self.search = Some(mode.into());
    }

    /// The items so far.
    pub fn items(&self) -> &[SourceItem] {
        &self.items
    }

    pub(crate) fn into_parts(self) -> (Vec<SourceItem>, Vec<Degradation>, Option<String>) {
        (self.items, self.degradations, self.search)
    }
}

/// A supplier of context for one request.
///
/// Object safe: held as `Arc<dyn ContextSource>`. One method is required; [`honours`] says
/// which common parameters the source applies itself and defaults to none, which is never
/// wrong (hydrate then applies them).
///
/// [`honours`]: ContextSource::honours
#[async_trait]
pub trait ContextSource: Send + Sync + fmt::Debug {
    /// A short name for reports and traces (never a secret).
    fn name(&self) -> &str;

    /// Which common parameters the source applies itself.
    fn honours(&self) -> Honours {
        Honours::NONE
    }

    /// Finds context for `query`, pushing items into `out` as they are found.
    ///
    /// Runs under a deadline: if it is cut off, the items already pushed are used and the
    /// report marks the result partial. An error is reported as a degradation too; the
    /// request goes on without this source.
    async fn fetch(&self, query: &SourceQuery<'_>, out: &mut SourceOutput) -> Result<()>;
}

macro_rules! forward_source {
    ($($ty:ty),*) => {$(
        #[async_trait]
        impl<T: ContextSource + ?Sized> ContextSource for $ty {
            fn name(&self) -> &str {
                (**self).name()
            }
            fn honours(&self) -> Honours {
                (**self).honours()
            }
            async fn fetch(&self, query: &SourceQuery<'_>, out: &mut SourceOutput) -> Result<()> {
                (**self).fetch(query, out).await
            }
        }
    )*};
}

forward_source!(Arc<T>, Box<T>, &T);

/// How a request was served less well than asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum DegradationKind {
    /// No explicit source and no provider supplies a wanted kind: its branch was skipped.
    MissingProvider,
    /// A provider could not build its source (a failed setup).
    ProviderFailed,
    /// A source searched in a weaker mode than asked (asked hybrid, got keyword).
    SearchFallback,
    /// Embedding the observation failed; the source searched without vectors.
    EmbeddingFailed,
    /// A source missed its deadline; what it found before is kept, marked partial.
    Timeout,
    /// A source failed; what it found before the failure, if anything, is kept.
    SourceFailed,
    /// The reranker failed; the scored order was kept.
    RerankFailed,
    /// What may not be cut (system prompt, critical tools, the observation) exceeds the
    /// budget on its own.
    OverBudget,
}

/// One degradation, with the source it concerns and a message for people.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Degradation {
    /// What kind.
    pub kind: DegradationKind,
    /// The kind of context it concerns, if one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<SourceKind>,
    /// What happened, e.g. "asked hybrid, got keyword: memory-inmem does not support hybrid
    /// search".
    pub message: String,
}

impl Degradation {
    /// A degradation not tied to a source yet.
    pub fn new(kind: DegradationKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            source: None,
            message: message.into(),
        }
    }

    /// Ties it to a kind of context.
    pub fn for_source(mut self, kind: SourceKind) -> Self {
        self.source = Some(kind);
        self
    }
}

impl fmt::Display for Degradation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.source {
            Some(s) => write!(f, "{s}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}
