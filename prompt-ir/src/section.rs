//! [`Section`]: one labeled piece of a prompt with its provenance, priority, relevance,
//! recency, composition mode and cached token count.

use std::fmt;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::{Error, Result};
use crate::excerpt::{self, Passage};
use crate::tokenizer::Tokenizer;
use crate::truncate;
use crate::unit::Relevance;
use crate::words::{Information, information};

/// How much a section matters when the budget is tight. Ordered `Low < Medium < High <
/// Critical`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Priority {
    /// First to go.
    Low,
    /// Useful background.
    Medium,
    /// Important; goes only after everything Low and Medium.
    High,
    /// The prompt is wrong without it: never truncated, never dropped.
    Critical,
}

impl Priority {
    /// The weight used when ranking sections: 1, 2, 4 and 8.
    pub fn weight(self) -> f64 {
        match self {
            Priority::Low => 1.0,
            Priority::Medium => 2.0,
            Priority::High => 4.0,
            Priority::Critical => 8.0,
        }
    }
}

/// How a section combines with others; see the [`compose`](crate::compose()) docs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CompositionMode {
    /// The hyperprior: system prompt, base instructions. The first IR's win.
    Hierarchical,
    /// Must all hold together (a product of experts): state such as time, project, user.
    Constraint,
    /// Adds information and may be dropped (a mixture): knowledge, related past messages.
    Additive,
    /// Observations applied in order (a Bayesian update): the recent conversation.
    Contextual,
}

impl CompositionMode {
    /// The four modes in the order composed prompts list them.
    pub const ALL: [CompositionMode; 4] = [
        CompositionMode::Hierarchical,
        CompositionMode::Constraint,
        CompositionMode::Additive,
        CompositionMode::Contextual,
    ];
}

/// How often a section's content changes from one prompt of a conversation to the next.
/// Compile lays a prompt out in this order, so what changes least comes first and each
/// prompt extends the previous one's prefix, which providers cache and bill at a fraction of
/// its price; compression gives the stable part (everything but [`Stability::Volatile`])
/// room before what is chosen per message. Ordered `Fixed < Slow < Growing < Volatile`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stability {
    /// Never changes within a conversation: the system prompt, constraints, tools.
    Fixed,
    /// Changes rarely, and is rendered in a stable order: the person's facts, standing
    /// instructions, who is talking.
    Slow,
    /// Grows by appending: the conversation, oldest first.
    Growing,
    /// Chosen for this message: what is recalled for it, the clock.
    Volatile,
}

impl Stability {
    /// Whether it belongs to the part of a prompt kept from one call to the next.
    pub fn is_stable(self) -> bool {
        self != Stability::Volatile
    }

    /// Its name: `fixed`, `slow`, `growing` or `volatile`.
    pub fn as_str(self) -> &'static str {
        match self {
            Stability::Fixed => "fixed",
            Stability::Slow => "slow",
            Stability::Growing => "growing",
            Stability::Volatile => "volatile",
        }
    }
}

/// Where a section came from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SectionSource {
    /// Fixed text, e.g. `Static("base_instructions")`.
    Static(String),
    /// The recent conversation, in time order.
    Temporal,
    /// Retrieved by similarity, with the retrieval score.
    Semantic(Relevance),
    /// A stored knowledge memory.
    Knowledge,
    /// Current state such as `State("time")`, `State("project")`, `State("user")`.
    State(String),
    /// Included because a named condition held.
    Conditional(String),
}

impl SectionSource {
    /// The composition mode and priority a section from this source gets unless told
    /// otherwise: static text is a Critical hyperprior, state a High constraint, the
    /// conversation Medium contextual, knowledge Medium additive, semantic hits and
    /// conditional text Low additive.
    pub fn defaults(&self) -> (CompositionMode, Priority) {
        match self {
            SectionSource::Static(_) => (CompositionMode::Hierarchical, Priority::Critical),
            SectionSource::State(_) => (CompositionMode::Constraint, Priority::High),
            SectionSource::Temporal => (CompositionMode::Contextual, Priority::Medium),
            SectionSource::Knowledge => (CompositionMode::Additive, Priority::Medium),
            SectionSource::Semantic(_) | SectionSource::Conditional(_) => {
                (CompositionMode::Additive, Priority::Low)
            }
        }
    }

    /// The stability a section from this source gets unless told otherwise: static text is
    /// fixed, state and knowledge slow, the conversation growing, semantic hits and
    /// conditional text volatile. A caller marks what it chose for one message (a fact found
    /// by a search, the clock) [`Stability::Volatile`].
    pub fn stability(&self) -> Stability {
        match self {
            SectionSource::Static(_) => Stability::Fixed,
            SectionSource::State(_) | SectionSource::Knowledge => Stability::Slow,
            SectionSource::Temporal => Stability::Growing,
            SectionSource::Semantic(_) | SectionSource::Conditional(_) => Stability::Volatile,
        }
    }
}

/// A 128-bit FNV-1a hash of a section's exact content: stable across runs, platforms and
/// versions, so it can deduplicate and identify content. Serialized as 32 hex digits.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ContentHash(u128);

impl ContentHash {
    /// The hash of `content`.
    pub fn of(content: &str) -> Self {
        const OFFSET: u128 = 0x6c62272e07bb014262b821756295c58d;
        const PRIME: u128 = 0x0000000001000000000000000000013B;
        let mut h = OFFSET;
        for &b in content.as_bytes() {
            h ^= u128::from(b);
            h = h.wrapping_mul(PRIME);
        }
        ContentHash(h)
    }

    /// The first 8 hex digits, for short derived ids.
    pub fn short(self) -> String {
        format!("{:08x}", (self.0 >> 96) as u32)
    }
}

impl fmt::Display for ContentHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

impl fmt::Debug for ContentHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ContentHash({self})")
    }
}

impl Serialize for ContentHash {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ContentHash {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        if text.len() != 32 {
            return Err(serde::de::Error::custom(format!(
                "content hash `{text}` has {} characters, expected 32 hex digits",
                text.len()
            )));
        }
        u128::from_str_radix(&text, 16)
            .map(ContentHash)
            .map_err(|_| {
                serde::de::Error::custom(format!(
                    "content hash `{text}` is not hexadecimal, expected 32 hex digits"
                ))
            })
    }
}

/// An embedding vector: at least one dimension, every component finite.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "Vec<f32>", into = "Vec<f32>")]
pub struct Embedding(Vec<f32>);

impl Embedding {
    /// Checks and wraps a vector.
    pub fn new(values: Vec<f32>) -> Result<Self> {
        if values.is_empty() {
            return Err(Error::EmptyEmbedding);
        }
        if let Some((index, &value)) = values.iter().enumerate().find(|(_, v)| !v.is_finite()) {
            return Err(Error::NonFiniteEmbedding { index, value });
        }
        Ok(Embedding(values))
    }

    /// The components.
    pub fn as_slice(&self) -> &[f32] {
        &self.0
    }

    /// Number of dimensions.
    pub fn dims(&self) -> usize {
        self.0.len()
    }

    /// Cosine similarity with `other` (0 when either is all zeros), or `None` when the
    /// dimensions differ.
    pub fn cosine(&self, other: &Embedding) -> Option<f64> {
        if self.dims() != other.dims() {
            return None;
        }
        let (mut dot, mut na, mut nb) = (0f64, 0f64, 0f64);
        for (&a, &b) in self.0.iter().zip(&other.0) {
            let (a, b) = (f64::from(a), f64::from(b));
            dot += a * b;
            na += a * a;
            nb += b * b;
        }
        let norm = (na * nb).sqrt();
        Some(if norm == 0.0 { 0.0 } else { dot / norm })
    }
}

impl TryFrom<Vec<f32>> for Embedding {
    type Error = Error;
    fn try_from(values: Vec<f32>) -> Result<Self> {
        Embedding::new(values)
    }
}

impl From<Embedding> for Vec<f32> {
    fn from(e: Embedding) -> Vec<f32> {
        e.0
    }
}

/// A cached token count, tagged with the tokenizer that produced it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenCount {
    /// [`Tokenizer::name`] of the counter.
    pub tokenizer: String,
    /// Tokens in the content.
    pub tokens: u32,
    /// The smallest size the content can be truncated to at a sentence or line boundary
    /// while keeping `min_tokens`; equal to `tokens` when it cannot be shrunk.
    pub floor: u32,
}

impl TokenCount {
    /// The count in `slot` when `tokenizer` made it; otherwise `count()`, kept in `slot`.
    pub(crate) fn cached(
        slot: &mut Option<TokenCount>,
        tokenizer: &dyn Tokenizer,
        count: impl FnOnce() -> TokenCount,
    ) -> u32 {
        if let Some(c) = slot
            && c.tokenizer == tokenizer.name()
        {
            return c.tokens;
        }
        let count = count();
        let tokens = count.tokens;
        *slot = Some(count);
        tokens
    }

    /// `text` counted by `tokenizer`, which cannot be shrunk.
    pub(crate) fn whole(tokenizer: &dyn Tokenizer, text: &str) -> Self {
        let tokens = tokenizer.count(text);
        TokenCount {
            tokenizer: tokenizer.name().to_owned(),
            tokens,
            floor: tokens,
        }
    }
}

/// One labeled piece of a prompt.
///
/// Content is fixed at construction, so the content hash and the cached token count always
/// describe it. Token counts are computed once by [`Section::count_tokens`] and cached, tagged
/// with the tokenizer's name; another tokenizer recounts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "SectionRepr")]
pub struct Section {
    id: String,
    label: String,
    source: SectionSource,
    mode: CompositionMode,
    priority: Priority,
    stability: Stability,
    relevance: Relevance,
    #[serde(skip_serializing_if = "Option::is_none")]
    recency: Option<DateTime<Utc>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    min_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tokens: Option<TokenCount>,
    hash: ContentHash,
    #[serde(skip_serializing_if = "Option::is_none")]
    embedding: Option<Embedding>,
    /// Scored parts of the content that compression may keep without the rest.
    #[serde(skip_serializing_if = "Option::is_none")]
    passages: Option<Vec<Passage>>,
    /// After compression kept an excerpt: the indices of the passages the content now holds.
    #[serde(skip_serializing_if = "Option::is_none")]
    excerpt: Option<Vec<usize>>,
    content: String,
    /// Derived from `content`; recomputed on deserialization.
    #[serde(skip)]
    information: Information,
}

/// The serialized form, checked before it becomes a [`Section`].
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SectionRepr {
    id: String,
    label: String,
    source: SectionSource,
    mode: CompositionMode,
    priority: Priority,
    /// Absent in IRs written before sections carried it: the source's default.
    #[serde(default)]
    stability: Option<Stability>,
    relevance: Relevance,
    #[serde(default)]
    recency: Option<DateTime<Utc>>,
    #[serde(default)]
    min_tokens: Option<u32>,
    #[serde(default)]
    tokens: Option<TokenCount>,
    #[serde(default)]
    hash: Option<ContentHash>,
    #[serde(default)]
    embedding: Option<Embedding>,
    #[serde(default)]
    passages: Option<Vec<Passage>>,
    #[serde(default)]
    excerpt: Option<Vec<usize>>,
    content: String,
}

impl TryFrom<SectionRepr> for Section {
    type Error = Error;
    fn try_from(r: SectionRepr) -> Result<Self> {
        let mut s = Section::new(r.id, r.label, r.source, r.content)?
            .with_mode(r.mode)
            .with_priority(r.priority)
            .with_relevance(r.relevance);
        if let Some(stability) = r.stability {
            s.stability = stability;
        }
        if let Some(stored) = r.hash
            && stored != s.hash
        {
            return Err(Error::HashMismatch {
                id: s.id,
                stored: stored.to_string(),
                actual: s.hash.to_string(),
            });
        }
        s.recency = r.recency;
        s.min_tokens = r.min_tokens;
        s.tokens = r.tokens;
        s.embedding = r.embedding;
        if let Some(passages) = r.passages {
            excerpt::validate(&s.id, &s.content, &passages)?;
            s.passages = Some(passages);
        }
        s.excerpt = r.excerpt;
        Ok(s)
    }
}

impl Section {
    /// A section with the composition mode, priority and stability its source implies
    /// ([`SectionSource::defaults`], [`SectionSource::stability`]), relevance 1 (or the score of a `Semantic` source), no
    /// recency, no embedding, and no `min_tokens` (it is kept whole or dropped).
    ///
    /// Fails when `id` is empty.
    pub fn new(
        id: impl Into<String>,
        label: impl Into<String>,
        source: SectionSource,
        content: impl Into<String>,
    ) -> Result<Self> {
        let id = id.into();
        if id.is_empty() {
            return Err(Error::EmptyId { what: "section id" });
        }
        let content = content.into();
        let (mode, priority) = source.defaults();
        let stability = source.stability();
        let relevance = match &source {
            SectionSource::Semantic(score) => *score,
            _ => Relevance::ONE,
        };
        Ok(Section {
            id,
            label: label.into(),
            source,
            mode,
            priority,
            stability,
            relevance,
            recency: None,
            min_tokens: None,
            tokens: None,
            hash: ContentHash::of(&content),
            embedding: None,
            passages: None,
            excerpt: None,
            information: information(&content),
            content,
        })
    }

    /// Sets the composition mode.
    pub fn with_mode(mut self, mode: CompositionMode) -> Self {
        self.mode = mode;
        self
    }

    /// Sets the priority.
    pub fn with_priority(mut self, priority: Priority) -> Self {
        self.priority = priority;
        self
    }

    /// Sets how often the content changes between prompts of one conversation.
    pub fn with_stability(mut self, stability: Stability) -> Self {
        self.stability = stability;
        self
    }

    /// Sets the relevance.
    pub fn with_relevance(mut self, relevance: Relevance) -> Self {
        self.relevance = relevance;
        self
    }

    /// Sets when the content was written or observed; older sections rank lower under a
    /// recency decay.
    pub fn with_recency(mut self, at: DateTime<Utc>) -> Self {
        self.recency = Some(at);
        self
    }

    /// Sets the smallest useful size: compression may truncate the section, at a sentence or
    /// line boundary, but never below this many tokens. Clears a cached count, whose floor
    /// depends on it.
    pub fn with_min_tokens(mut self, min_tokens: u32) -> Self {
        self.min_tokens = Some(min_tokens);
        self.tokens = None;
        self
    }

    /// Marks the content out in scored passages (at least two): compression may then shrink
    /// the section to an excerpt of its most relevant passages, in their order, each gap
    /// marked with [`ELISION`](crate::ELISION), instead of cutting it at its head; the
    /// smallest excerpt is the best passage alone. Passages take precedence over
    /// [`with_min_tokens`](Self::with_min_tokens). Clears a cached count. Fails when a
    /// passage is empty, out of order, overlapping, outside the content, off a character
    /// boundary, or scored with a number that is not finite.
    pub fn with_passages(mut self, passages: Vec<Passage>) -> Result<Self> {
        excerpt::validate(&self.id, &self.content, &passages)?;
        self.passages = (passages.len() >= 2).then_some(passages);
        self.tokens = None;
        Ok(self)
    }

    /// The scored passages, if the section may shrink to an excerpt.
    pub fn passages(&self) -> Option<&[Passage]> {
        self.passages.as_deref()
    }

    /// When compression shrank the section to an excerpt: the indices of the passages (as
    /// given to [`with_passages`](Self::with_passages)) its content now holds, ascending.
    pub fn excerpt(&self) -> Option<&[usize]> {
        self.excerpt.as_deref()
    }

    /// Attaches an embedding of the content.
    pub fn with_embedding(mut self, embedding: Embedding) -> Self {
        self.embedding = Some(embedding);
        self
    }

    /// The stable id, unique within one [`PromptIR`](crate::PromptIR).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The human-readable label, e.g. "Base instructions".
    pub fn label(&self) -> &str {
        &self.label
    }

    /// Where the section came from.
    pub fn source(&self) -> &SectionSource {
        &self.source
    }

    /// How the section composes.
    pub fn mode(&self) -> CompositionMode {
        self.mode
    }

    /// Its priority.
    pub fn priority(&self) -> Priority {
        self.priority
    }

    /// How often its content changes between prompts of one conversation.
    pub fn stability(&self) -> Stability {
        self.stability
    }

    /// Its relevance.
    pub fn relevance(&self) -> Relevance {
        self.relevance
    }

    /// When it was written or observed, if known.
    pub fn recency(&self) -> Option<DateTime<Utc>> {
        self.recency
    }

    /// The smallest useful size, if the section may be truncated at all.
    pub fn min_tokens(&self) -> Option<u32> {
        self.min_tokens
    }

    /// The text.
    pub fn content(&self) -> &str {
        &self.content
    }

    /// Hash of the text.
    pub fn hash(&self) -> ContentHash {
        self.hash
    }

    /// The embedding, if one was attached.
    pub fn embedding(&self) -> Option<&Embedding> {
        self.embedding.as_ref()
    }

    /// Word statistics of the content.
    pub fn information(&self) -> Information {
        self.information
    }

    /// The cached token count, whichever tokenizer produced it.
    pub fn token_count(&self) -> Option<&TokenCount> {
        self.tokens.as_ref()
    }

    /// Cached number of tokens, if counted.
    pub fn tokens(&self) -> Option<u32> {
        self.tokens.as_ref().map(|t| t.tokens)
    }

    /// Counts the tokens with `tokenizer`, or returns the cached count if this tokenizer
    /// already counted them.
    pub fn count_tokens(&mut self, tokenizer: &dyn Tokenizer) -> u32 {
        TokenCount::cached(&mut self.tokens, tokenizer, || {
            match (&self.passages, self.min_tokens) {
                // An excerpt keeps whole passages: no cut points needed.
                (Some(passages), _) => {
                    let total = tokenizer.count(&self.content);
                    TokenCount {
                        tokenizer: tokenizer.name().to_owned(),
                        tokens: total,
                        floor: excerpt::floor(&self.content, passages, tokenizer).min(total),
                    }
                }
                // Only sections that may shrink need their cut points.
                (None, Some(min)) => {
                    let (cuts, total) = truncate::cuts(&self.content, tokenizer);
                    TokenCount {
                        tokenizer: tokenizer.name().to_owned(),
                        tokens: total,
                        floor: truncate::floor(&cuts, min, total),
                    }
                }
                (None, None) => TokenCount::whole(tokenizer, &self.content),
            }
        })
    }

    /// Replaces the content with a truncated prefix whose count is already known.
    pub(crate) fn truncate_to(&mut self, offset: usize, count: TokenCount) {
        self.content.truncate(offset);
        self.hash = ContentHash::of(&self.content);
        self.information = information(&self.content);
        self.tokens = Some(count);
    }

    /// Replaces the content with an excerpt of its passages whose count is already known.
    pub(crate) fn excerpt_to(&mut self, kept: Vec<usize>, text: String, count: TokenCount) {
        self.content = text;
        self.hash = ContentHash::of(&self.content);
        self.information = information(&self.content);
        self.tokens = Some(count);
        self.passages = None;
        self.excerpt = Some(kept);
    }

    /// Gives the section another id (used by `compose` to keep both sides of a collision).
    pub(crate) fn rename(&mut self, id: String) {
        self.id = id;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokenizer::WhitespaceTokenizer;

    #[test]
    fn empty_id_is_rejected() {
        let err = Section::new("", "x", SectionSource::Knowledge, "text").unwrap_err();
        assert_eq!(
            err.to_string(),
            "section id is empty, expected a non-empty string"
        );
    }

    #[test]
    fn defaults_follow_the_source() {
        let s = Section::new(
            "p",
            "Base",
            SectionSource::Static("base".into()),
            "Be kind.",
        )
        .unwrap();
        assert_eq!(
            (s.mode(), s.priority()),
            (CompositionMode::Hierarchical, Priority::Critical)
        );
        let score = Relevance::new(0.4).unwrap();
        let s = Section::new("m", "Past", SectionSource::Semantic(score), "hi").unwrap();
        assert_eq!(s.relevance(), score);
        assert_eq!(s.priority(), Priority::Low);
        assert_eq!(s.stability(), Stability::Volatile);
        let state = Section::new("t", "Time", SectionSource::State("time".into()), "9:00").unwrap();
        assert_eq!(state.stability(), Stability::Slow);
        assert_eq!(
            state.with_stability(Stability::Volatile).stability(),
            Stability::Volatile
        );
        let talk = Section::new("c", "Talk", SectionSource::Temporal, "hi").unwrap();
        assert_eq!(talk.stability(), Stability::Growing);
        assert!(Stability::Fixed < Stability::Slow && Stability::Growing < Stability::Volatile);
    }

    #[test]
    fn stability_round_trips_and_defaults_to_the_sources_when_absent() {
        let s = Section::new("k", "K", SectionSource::Knowledge, "Miso is a cat.")
            .unwrap()
            .with_stability(Stability::Volatile);
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["stability"], "volatile");
        let back: Section = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(back.stability(), Stability::Volatile);
        let mut older = json;
        older.as_object_mut().unwrap().remove("stability");
        let back: Section = serde_json::from_value(older).unwrap();
        assert_eq!(back.stability(), Stability::Slow, "knowledge's default");
    }

    #[test]
    fn counts_once_and_recounts_for_another_tokenizer() {
        #[derive(Debug)]
        struct Chars;
        impl Tokenizer for Chars {
            fn name(&self) -> &str {
                "chars"
            }
            fn token_ends(&self, text: &str) -> Vec<usize> {
                text.char_indices().map(|(i, c)| i + c.len_utf8()).collect()
            }
        }
        let mut s = Section::new("a", "A", SectionSource::Knowledge, "one two three").unwrap();
        assert_eq!(s.tokens(), None);
        assert_eq!(s.count_tokens(&WhitespaceTokenizer), 3);
        assert_eq!(s.token_count().unwrap().tokenizer, "whitespace-words");
        assert_eq!(s.count_tokens(&Chars), 13);
        assert_eq!(s.tokens(), Some(13));
    }

    #[test]
    fn floor_is_cached_with_the_count() {
        let mut s = Section::new("a", "A", SectionSource::Knowledge, "a b. c d e. f g h i.")
            .unwrap()
            .with_min_tokens(3);
        s.count_tokens(&WhitespaceTokenizer);
        assert_eq!(s.token_count().unwrap().floor, 5);
        let s = s.with_min_tokens(1);
        assert_eq!(s.tokens(), None, "changing min_tokens clears the cache");
    }

    #[test]
    fn serde_round_trip_and_hash_check() {
        let mut s = Section::new("a", "A", SectionSource::State("time".into()), "Tuesday.")
            .unwrap()
            .with_embedding(Embedding::new(vec![0.5, 0.5]).unwrap());
        s.count_tokens(&WhitespaceTokenizer);
        let json = serde_json::to_string(&s).unwrap();
        let back: Section = serde_json::from_str(&json).unwrap();
        assert_eq!(back, s);

        let tampered = json.replace("Tuesday.", "Wednesday.");
        let err = serde_json::from_str::<Section>(&tampered).unwrap_err();
        assert!(
            err.to_string().contains("but its content hashes to"),
            "{err}"
        );
    }

    #[test]
    fn hash_is_stable() {
        // Pinned: the hash must not change between versions or platforms.
        assert_eq!(
            ContentHash::of("").to_string(),
            "6c62272e07bb014262b821756295c58d"
        );
        assert_eq!(ContentHash::of("a").short(), "d228cb69");
    }

    #[test]
    fn embeddings_are_checked() {
        assert_eq!(Embedding::new(vec![]).unwrap_err(), Error::EmptyEmbedding);
        assert!(matches!(
            Embedding::new(vec![1.0, f32::NAN]),
            Err(Error::NonFiniteEmbedding { index: 1, .. })
        ));
        let a = Embedding::new(vec![1.0, 0.0]).unwrap();
        let b = Embedding::new(vec![0.0, 1.0]).unwrap();
        assert_eq!(a.cosine(&b), Some(0.0));
        assert_eq!(a.cosine(&a), Some(1.0));
        assert_eq!(a.cosine(&Embedding::new(vec![1.0]).unwrap()), None);
    }
}
