//! The graph kind (cargo feature `graph`): an entity index over memories, kept as tags, and
//! [`GraphSource`], which finds the memories that mention the question's entities and then,
//! one hop further, the memories that mention the entities those memories mention.
//!
//! # Entities
//!
//! [`extract_entities`] reads proper names without a model, deterministically:
//!
//! - A name is a run of capitalised words (first character upper case, at least two
//!   characters), e.g. `Porto`, `Red Lentil Dal`, `São Paulo`. A run ends at punctuation
//!   after a word (`,` `.` `;` `:` `!` `?`, a closing quote or bracket) and at a possessive
//!   (`Bob's car` gives `Bob`).
//! - Lowercase particles join a run between two capitalised words (`Rio de Janeiro`,
//!   `Bank of England`): `de`, `da`, `do`, `dos`, `das`, `del`, `della`, `di`, `du`, `van`,
//!   `von`, `der`, `den`, `la`, `le`, `of`.
//! - A title before a name is shown but not part of its key (`Dr. Okafor` and `Okafor` are
//!   one entity): `Dr.`, `Mr.`, `Mrs.`, `Ms.`, `Prof.`, `St.`, `Mt.`.
//! - Never names: `I` and its contractions, `The`, `A`, `An`, `OK`, the days of the week and
//!   the months (so a person called May is missed).
//! - The first word of a sentence (of the text, of a line, or after `.`, `!`, `?`, `:`) is
//!   left out when it is a common word (`What`, `Yesterday`, `My`, ... about 200 of them) or
//!   when the same word appears in lower case elsewhere in the text.
//! - The key is the name's words (titles left out) in lower case joined by `-`: `porto`,
//!   `red-lentil-dal`, `são-paulo`. Names whose key is longer than [`MAX_ENTITY_KEY_BYTES`]
//!   are left out; a text gives at most [`MAX_ENTITIES`], in order of first appearance.
//!
//! Limits: this is English capitalisation, not understanding. A sentence that
//! starts with an uncommon word (`Cooking is fun.`) gives a false name; names written in
//! lower case, in scripts without case (Chinese, Japanese, Arabic), or at a sentence start
//! behind a common word are missed; `Paris` the city and `Paris` the person are one entity.
//! Facts from the fact extractor are memories too and are read the same way.
//!
//! The `ent:` prefix is reserved: [`index_entities`] replaces a memory's `ent:` tags with
//! those its content gives, so a hand-made `ent:` tag does not survive it.
//!
//! # The index
//!
//! Each memory's entities are its tags `ent:<key>` ([`ENTITY_TAG_PREFIX`]), so the index is
//! whatever the store keeps tags in: it works on every backend, is scoped like the memory,
//! goes when the memory goes, and is read as a tag filter ([`MemoryBackend::recent`] with
//! [`Filter::tags`], facts still valid only; [`MemoryBackend::by_tags`] on a store without
//! time filters). hydrate's write
//! paths ([`crate::Ops::remember`], [`crate::FactExtractor`]) add them with
//! [`with_entity_tags`]; [`index_entities`] tags what a store already holds.
//!
//! # Expansion
//!
//! [`GraphSource`], for the request's scope only: the question's entities, the memories
//! tagged with any of them (noted `mentions Porto`), the other entities those memories are
//! tagged with (at most [`HOP_ENTITIES`], the most frequent first), and the memories tagged
//! with those (noted `via Porto → Bob`: the question named Porto, a memory links Porto and
//! Bob, this one mentions Bob). Direct hits rank above hop hits. A question without an
//! entity finds nothing, without asking the store.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use memory_core::{
    Capability, Filter, MAX_TAG_BYTES, MemoryBackend, MemoryEntry, MemoryError, MemoryId,
    MemoryPatch, NewMemory, Scope, Tag, TagQuery, TagSet, Timestamp, ensure_scope,
};

use crate::error::{Error, Result};
use crate::source::{ContextSource, SourceItem, SourceOutput, SourceQuery};

/// The cargo feature that builds the entity index and the graph source.
pub const GRAPH_FEATURE: &str = "graph";

/// What starts every entity tag: `ent:porto`.
pub const ENTITY_TAG_PREFIX: &str = "ent:";

/// The longest entity key, in bytes: what a tag holds after [`ENTITY_TAG_PREFIX`].
pub const MAX_ENTITY_KEY_BYTES: usize = MAX_TAG_BYTES - ENTITY_TAG_PREFIX.len();

/// At most this many entities are read from one text (and tagged on one memory).
pub const MAX_ENTITIES: usize = 16;

/// At most this many entities are followed one hop from the question's.
pub const HOP_ENTITIES: usize = 8;

/// The similarity of a memory that mentions one of the question's entities (plus 0.1 for
/// each further one it mentions, up to 0.9). Graph relevance, not a cosine: it orders the
/// graph's own items under its limit; `hydrate` ranks them against other candidates as
/// memories the searches saw and did not match.
const DIRECT_SIMILARITY: f32 = 0.7;

/// The similarity of a memory reached one hop away: below every direct hit.
const HOP_SIMILARITY: f32 = 0.4;

/// `Ok` when this build has the `graph` feature, else [`Error::Unavailable`] naming it.
pub fn graph_available() -> Result<()> {
    if cfg!(feature = "graph") {
        Ok(())
    } else {
        Err(Error::Unavailable {
            what: "the entity graph",
            feature: GRAPH_FEATURE,
        })
    }
}

/// A proper name read from a text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entity {
    /// As written, titles included: `Dr. Okafor`.
    pub name: String,
    /// Lower case, words joined by `-`, titles left out: `okafor`.
    pub key: String,
}

impl Entity {
    /// The entity's tag: `ent:<key>`.
    pub fn tag(&self) -> Result<Tag> {
        Ok(Tag::new(format!("{ENTITY_TAG_PREFIX}{}", self.key))?)
    }
}

/// The key of an entity tag (`ent:porto` -> `porto`), or `None` for any other tag.
pub fn entity_key(tag: &Tag) -> Option<&str> {
    tag.as_str().strip_prefix(ENTITY_TAG_PREFIX)
}

const TITLES: [&str; 7] = ["dr", "mr", "mrs", "ms", "prof", "st", "mt"];

const PARTICLES: [&str; 16] = [
    "de", "da", "do", "dos", "das", "del", "della", "di", "du", "van", "von", "der", "den", "la",
    "le", "of",
];

/// Never names, wherever they are.
#[rustfmt::skip]
const NEVER: [&str; 28] = [
    "i", "i'm", "i've", "i'll", "i'd", "the", "a", "an", "ok", "monday", "tuesday", "wednesday",
    "thursday", "friday", "saturday", "sunday", "january", "february", "march", "april", "may",
    "june", "july", "august", "september", "october", "november", "december",
];

/// Common words that start sentences, imperatives among them ("Ask Bob about Porto"): not
/// names there.
#[rustfmt::skip]
const COMMON: &[&str] = &[
    "about", "actually", "add", "after", "again", "all", "also", "although", "always", "am",
    "and", "another", "any", "anyway", "are", "as", "ask", "at", "awesome", "be", "because",
    "been", "before", "besides", "book", "both", "btw", "but", "buy", "by", "call", "can",
    "can't", "check", "compare", "cool", "could", "describe", "did", "didn't", "do", "does",
    "don't", "during", "each", "email", "even", "every", "everyone", "everything", "explain",
    "few", "finally", "find", "first", "for", "from", "get", "give", "go", "good", "got",
    "great", "guess", "had", "haha", "has", "have", "he", "hello", "help", "her", "here", "hey",
    "hi", "his", "honestly", "how", "if", "in", "into", "invite", "is", "isn't", "it", "it's",
    "its", "just", "last", "later", "let", "let's", "like", "list", "lol", "look", "luckily",
    "made", "make", "many", "maybe", "me", "meet", "message", "might", "more", "most", "much",
    "must", "my", "never", "next", "nice", "no", "not", "now", "of", "oh", "okay", "on", "once",
    "one", "only", "or", "other", "our", "over", "perhaps", "plan", "please", "really",
    "recommend", "remember", "remind", "right", "sadly", "see", "send", "she", "should", "show",
    "since", "so", "some", "someone", "something", "sometimes", "soon", "sorry", "still",
    "suggest", "summarise", "summarize", "sure", "tell", "text", "thank", "thanks", "that",
    "that's", "their", "them", "then", "there", "there's", "these", "they", "they're", "this",
    "those", "though", "to", "today", "tomorrow", "tonight", "too", "two", "under", "until",
    "us", "very", "visit", "wait", "was", "we", "we're", "well", "went", "were", "what",
    "what's", "when", "where", "which", "while", "who", "whose", "why", "will", "with",
    "without", "won't", "would", "wow", "write", "yeah", "yes", "yesterday", "yet", "you",
    "you're", "your",
];

/// One word of a text, as the extractor sees it.
#[derive(Debug)]
struct Word<'a> {
    /// Without surrounding punctuation or a possessive `'s`.
    core: &'a str,
    /// A title (`Dr.`): shown in the name, left out of the key.
    title: bool,
    /// First of its sentence.
    sentence_start: bool,
    /// Punctuation before it ends any run.
    break_before: bool,
    /// Punctuation after it ends its run.
    break_after: bool,
}

impl Word<'_> {
    /// Lower case, with a typographic apostrophe made `'` (`Don’t` is `don't`).
    fn lower(&self) -> String {
        self.core.to_lowercase().replace('’', "'")
    }

    fn capitalised(&self) -> bool {
        self.core.chars().next().is_some_and(char::is_uppercase)
            && self.core.chars().nth(1).is_some()
    }

    /// Capitalised and not one of the words that are never names.
    fn name_like(&self) -> bool {
        self.capitalised() && !NEVER.contains(&self.lower().as_str())
    }

    fn particle(&self) -> bool {
        PARTICLES.contains(&self.core)
    }
}

/// The words of `text`, line by line, with sentence starts and run breaks.
fn words(text: &str) -> Vec<Word<'_>> {
    let mut out: Vec<Word<'_>> = Vec::new();
    for line in text.lines() {
        let mut sentence_start = true;
        for raw in line.split_whitespace() {
            let Some(first) = raw.find(char::is_alphanumeric) else {
                // Punctuation on its own (`-`, `...`) breaks a run; `.` etc. end a sentence.
                if let Some(last) = out.last_mut() {
                    last.break_after = true;
                }
                if raw.contains(['.', '!', '?', ':']) {
                    sentence_start = true;
                }
                continue;
            };
            let last = raw
                .char_indices()
                .rev()
                .find(|(_, c)| c.is_alphanumeric())
                .map_or(raw.len(), |(i, c)| i + c.len_utf8());
            let (lead, rest) = raw.split_at(first);
            let (mut core, trail) = rest.split_at(last - first);
            let mut possessive = false;
            for s in ["'s", "’s"] {
                if let Some(c) = core.strip_suffix(s) {
                    core = c;
                    possessive = true;
                }
            }
            let title = trail.starts_with('.') && TITLES.contains(&core.to_lowercase().as_str());
            let trail_rest = if title { &trail[1..] } else { trail };
            out.push(Word {
                core,
                title,
                sentence_start,
                break_before: !lead.is_empty(),
                break_after: possessive || !trail_rest.is_empty(),
            });
            sentence_start = trail_rest.contains(['.', '!', '?', ':']);
        }
        if let Some(last) = out.last_mut() {
            last.break_after = true;
        }
    }
    out
}

/// The proper names of `text`, each once (by key), in order of first appearance, at most
/// [`MAX_ENTITIES`]; see the module docs for the rules and their limits. Deterministic, no
/// I/O, available in every build.
pub fn extract_entities(text: &str) -> Vec<Entity> {
    let words = words(text);
    let lowercase: HashSet<String> = words
        .iter()
        .filter(|w| w.core.chars().next().is_some_and(char::is_lowercase))
        .map(Word::lower)
        .collect();
    let mut out: Vec<Entity> = Vec::new();
    let mut i = 0;
    while i < words.len() && out.len() < MAX_ENTITIES {
        let w = &words[i];
        if !w.name_like() {
            i += 1;
            continue;
        }
        if w.sentence_start && !w.title {
            let lower = w.lower();
            if COMMON.contains(&lower.as_str()) || lowercase.contains(&lower) {
                i += 1;
                continue;
            }
        }
        let mut run = vec![i];
        let mut j = i;
        loop {
            if words[j].break_after {
                break;
            }
            let next = j + 1;
            match words.get(next) {
                Some(n) if n.name_like() && !n.break_before => {
                    run.push(next);
                    j = next;
                }
                Some(p)
                    if p.particle()
                        && !p.break_before
                        && !p.break_after
                        && words
                            .get(next + 1)
                            .is_some_and(|n| n.name_like() && !n.break_before) =>
                {
                    run.extend([next, next + 1]);
                    j = next + 1;
                }
                _ => break,
            }
        }
        i = j + 1;
        let name = run
            .iter()
            .map(|&k| {
                let w = &words[k];
                if w.title {
                    format!("{}.", w.core)
                } else {
                    w.core.to_owned()
                }
            })
            .collect::<Vec<_>>()
            .join(" ");
        let key = run
            .iter()
            .map(|&k| &words[k])
            .filter(|w| !w.title)
            .map(|w| {
                w.lower()
                    .replace(|c: char| c.is_whitespace() || c.is_control(), "-")
            })
            .collect::<Vec<_>>()
            .join("-");
        if key.is_empty() || key.len() > MAX_ENTITY_KEY_BYTES || out.iter().any(|e| e.key == key) {
            continue;
        }
        out.push(Entity { name, key });
    }
    out
}

/// The entity tags of `text` (see [`extract_entities`]); none in a build without the
/// `graph` feature, so such a build writes no index.
pub fn entity_tags(text: &str) -> Vec<Tag> {
    if graph_available().is_err() {
        return Vec::new();
    }
    extract_entities(text)
        .iter()
        .filter_map(|e| e.tag().ok())
        .collect()
}

/// `memory` with the entity tags of its content added: what hydrate's write paths store.
/// Unchanged in a build without the `graph` feature.
pub fn with_entity_tags(memory: NewMemory) -> NewMemory {
    let tags = entity_tags(&memory.content);
    memory.with_tags(tags)
}

/// `tags` with its entity tags replaced by those of `content`.
fn retagged(tags: &TagSet, content: &str) -> TagSet {
    tags.iter()
        .filter(|t| entity_key(t).is_none())
        .cloned()
        .chain(entity_tags(content))
        .collect()
}

/// What [`index_entities`] did in one scope.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Indexed {
    /// Memories read.
    pub scanned: usize,
    /// Memories whose entity tags changed.
    pub tagged: usize,
    /// Distinct entities the scope's memories mention now.
    pub entities: usize,
    /// False when some memories may have been passed over: more than a listing's limit of
    /// them were created in one millisecond.
    pub complete: bool,
}

/// Tags every memory of `scope` (superseded and ended ones included) with the entities of
/// its content, replacing entity tags it had, through [`MemoryBackend::update`]: for a store
/// written before the index existed, or by a build without the `graph` feature. Running it
/// again changes nothing. Without the feature this is [`Error::Unavailable`].
pub async fn index_entities(store: &dyn MemoryBackend, scope: &Scope) -> Result<Indexed> {
    graph_available()?;
    let caps = store.capabilities();
    for needed in [Capability::Update, Capability::TimeFilter] {
        if !caps.supports(needed) {
            return Err(MemoryError::Unsupported {
                capability: needed,
                provider: store.info().name,
            }
            .into());
        }
    }
    let limit = store.info().limits.max_results;
    let mut report = Indexed {
        complete: true,
        ..Indexed::default()
    };
    let mut seen: HashSet<MemoryId> = HashSet::new();
    let mut entities: BTreeSet<String> = BTreeSet::new();
    let mut before: Option<Timestamp> = None;
    loop {
        let filter = Filter {
            created_before: before,
            include_superseded: true,
            ..Filter::default()
        };
        let page = store.recent(scope, limit, &filter).await?;
        let Some(oldest) = page.iter().map(|e| e.created_at).min() else {
            break;
        };
        let mut fresh = 0;
        for entry in &page {
            if !seen.insert(entry.id) {
                continue;
            }
            fresh += 1;
            report.scanned += 1;
            let tags = retagged(&entry.tags, &entry.content);
            entities.extend(tags.iter().filter_map(entity_key).map(str::to_owned));
            if tags == entry.tags {
                continue;
            }
            let patch = MemoryPatch {
                tags: Some(tags),
                ..MemoryPatch::default()
            };
            match store.update(scope, entry.id, patch).await {
                Ok(_) => report.tagged += 1,
                // Deleted meanwhile (another process): nothing to tag.
                Err(MemoryError::NotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        if page.len() < limit {
            break;
        }
        // The next page: the oldest millisecond again (memories of it may not have fitted),
        // or, when that brought nothing new, strictly before it.
        before = Some(if fresh > 0 {
            oldest.plus(std::time::Duration::from_millis(1))
        } else {
            report.complete = false;
            oldest
        });
    }
    report.entities = entities.len();
    Ok(report)
}

/// A [`ContextSource`] for [`crate::SourceKind::Graph`]: memories of the request's scope that
/// mention the question's entities, then those one hop away (see the module docs). It
/// reads only the request's scope and refuses an entry of any other.
pub struct GraphSource {
    store: Arc<dyn MemoryBackend>,
}

impl fmt::Debug for GraphSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GraphSource")
            .field("store", &self.store.info().name)
            .finish()
    }
}

impl GraphSource {
    /// A source over `store`. Without the `graph` feature this is [`Error::Unavailable`]
    /// naming it.
    pub fn new(store: Arc<dyn MemoryBackend>) -> Result<Self> {
        graph_available()?;
        Ok(Self { store })
    }

    /// The current memories of `scope` tagged with any of `tags`, newest first.
    async fn tagged(
        &self,
        scope: &Scope,
        tags: impl IntoIterator<Item = Tag>,
        limit: usize,
        now: Timestamp,
    ) -> Result<Vec<MemoryEntry>> {
        let query = TagQuery::any(tags);
        let entries = if self.store.capabilities().supports(Capability::TimeFilter) {
            // Facts that were ended are not mentioned any more.
            let filter = Filter {
                tags: Some(query),
                valid_at: Some(now),
                ..Filter::default()
            };
            self.store.recent(scope, limit, &filter).await?
        } else {
            self.store.by_tags(scope, &query, limit).await?
        };
        // Backends check this already; a memory of anyone else must never get through.
        ensure_scope(&self.store.info().name, scope, &entries)?;
        Ok(entries)
    }
}

/// The name an entity key is written with in `entry`, or the key itself.
fn name_in(entry: &MemoryEntry, key: &str) -> String {
    extract_entities(&entry.content)
        .into_iter()
        .find(|e| e.key == key)
        .map_or_else(|| key.to_owned(), |e| e.name)
}

#[async_trait]
impl ContextSource for GraphSource {
    fn name(&self) -> &str {
        "graph"
    }

    async fn fetch(&self, query: &SourceQuery<'_>, out: &mut SourceOutput) -> Result<()> {
        let asked: BTreeMap<String, String> = extract_entities(query.observation)
            .into_iter()
            .map(|e| (e.key, e.name))
            .collect();
        if asked.is_empty() {
            return Ok(());
        }
        out.set_search("entities");
        let scope = query.scope;
        let limit = query
            .params
            .max_items
            .clamp(1, self.store.info().limits.max_results);
        let tag = |key: &str| Tag::new(format!("{ENTITY_TAG_PREFIX}{key}"));
        let asked_tags = asked
            .keys()
            .map(|k| tag(k))
            .collect::<Result<Vec<_>, _>>()?;
        let direct = self.tagged(scope, asked_tags, limit, query.now).await?;

        let mut seen: HashSet<MemoryId> = HashSet::new();
        // Hop entity key -> (memories linking it, its name, the asked entity it came from).
        let mut hops: BTreeMap<String, (usize, String, String)> = BTreeMap::new();
        for entry in &direct {
            let keys: Vec<&str> = entry.tags.iter().filter_map(entity_key).collect();
            let matched: Vec<&String> = keys.iter().filter_map(|k| asked.get(*k)).collect();
            let Some(first) = matched.first() else {
                continue;
            };
            if !seen.insert(entry.id) {
                continue;
            }
            let similarity = (DIRECT_SIMILARITY + 0.1 * (matched.len() - 1) as f32).min(0.9);
            let names: Vec<&str> = matched.iter().map(|s| s.as_str()).collect();
            out.push(
                SourceItem::from_memory(entry)
                    .with_similarity(similarity)
                    .with_note(format!("mentions {}", names.join(", "))),
            );
            for key in keys.iter().filter(|k| !asked.contains_key(**k)) {
                let hop = hops
                    .entry((*key).to_owned())
                    .or_insert_with(|| (0, name_in(entry, key), (*first).clone()));
                hop.0 += 1;
            }
        }
        if hops.is_empty() {
            return Ok(());
        }
        let mut ranked: Vec<(String, (usize, String, String))> = hops.into_iter().collect();
        // Most linked first; the key breaks ties, so the choice is deterministic.
        ranked.sort_by(|a, b| b.1.0.cmp(&a.1.0).then_with(|| a.0.cmp(&b.0)));
        ranked.truncate(HOP_ENTITIES);
        let hop_tags = ranked
            .iter()
            .map(|(k, _)| tag(k))
            .collect::<Result<Vec<_>, _>>()?;
        let further = self.tagged(scope, hop_tags, limit, query.now).await?;
        for entry in &further {
            if seen.contains(&entry.id) {
                continue;
            }
            // The best-linked hop entity this memory mentions.
            let Some((_, (_, name, from))) = ranked.iter().find(|(k, _)| {
                entry
                    .tags
                    .iter()
                    .filter_map(entity_key)
                    .any(|t| t == k.as_str())
            }) else {
                continue;
            };
            seen.insert(entry.id);
            out.push(
                SourceItem::from_memory(entry)
                    .with_similarity(HOP_SIMILARITY)
                    .with_note(format!("via {from} → {name}")),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(text: &str) -> Vec<String> {
        extract_entities(text).into_iter().map(|e| e.name).collect()
    }

    fn keys(text: &str) -> Vec<String> {
        extract_entities(text).into_iter().map(|e| e.key).collect()
    }

    #[test]
    fn single_names_mid_sentence() {
        assert_eq!(
            names("We flew to Porto with Bob last year."),
            ["Porto", "Bob"]
        );
        assert_eq!(
            keys("We flew to Porto with Bob last year."),
            ["porto", "bob"]
        );
    }

    #[test]
    fn multiword_names_and_titles() {
        assert_eq!(
            names("My favourite is the Red Lentil Dal from Dr. Okafor, really."),
            ["Red Lentil Dal", "Dr. Okafor"]
        );
        assert_eq!(
            keys("My favourite is the Red Lentil Dal from Dr. Okafor, really."),
            ["red-lentil-dal", "okafor"]
        );
        assert_eq!(
            keys("ask Okafor"),
            ["okafor"],
            "one entity with or without the title"
        );
        assert_eq!(
            names("she moved to Rio de Janeiro in 2019"),
            ["Rio de Janeiro"]
        );
        assert_eq!(keys("a Dr. alone"), Vec::<String>::new());
    }

    #[test]
    fn punctuation_and_possessives_end_names() {
        assert_eq!(
            names("we met Alice, Bob and Carol."),
            ["Alice", "Bob", "Carol"]
        );
        assert_eq!(names("we took Bob's car to Lisbon"), ["Bob", "Lisbon"]);
        assert_eq!(names("(see Porto) then \"Braga\""), ["Porto", "Braga"]);
    }

    #[test]
    fn sentence_starts_and_stopwords() {
        assert_eq!(names("What did Bob say?"), ["Bob"]);
        assert_eq!(names("Ask Bob about Porto."), ["Bob", "Porto"]);
        assert_eq!(names("Don’t tell Bob. I’m in Porto"), ["Bob", "Porto"]);
        assert_eq!(
            names("Yesterday I went to Porto. The trip was long."),
            ["Porto"]
        );
        assert!(names("I think so. Monday is fine, or maybe in May.").is_empty());
        // A sentence-initial word that also appears in lower case is a common word.
        assert!(names("Cooking is fun. I like cooking.").is_empty());
        // An uncommon sentence-initial word is taken for a name: a known limit.
        assert_eq!(names("Porto is lovely."), ["Porto"]);
        assert_eq!(
            names("Hi!\nBob is here"),
            ["Bob"],
            "a line starts a sentence"
        );
    }

    #[test]
    fn unicode_names() {
        assert_eq!(names("she lives in São Paulo now"), ["São Paulo"]);
        assert_eq!(keys("she lives in São Paulo now"), ["são-paulo"]);
        assert_eq!(keys("we visited Zürich and Ōsaka"), ["zürich", "ōsaka"]);
        assert!(
            names("我住在东京").is_empty(),
            "no case, no names: a known limit"
        );
    }

    #[test]
    fn names_are_unique_bounded_and_make_valid_tags() {
        assert_eq!(names("Bob met Bob and Bob"), ["Bob"]);
        let many: String = (0..40).map(|i| format!("met Name{i}x, ")).collect();
        assert_eq!(extract_entities(&many).len(), MAX_ENTITIES);
        let long = format!("met {}", ["Averyveryverylongword"; 4].join(" "));
        assert!(
            extract_entities(&long).is_empty(),
            "a key over the tag limit is left out"
        );
        for e in extract_entities("we met Dr. Okafor in São Paulo near the Red Lentil Dal") {
            assert_eq!(e.tag().unwrap().as_str(), format!("ent:{}", e.key));
        }
    }

    #[cfg(feature = "graph")]
    #[test]
    fn write_paths_add_entity_tags_and_retagging_replaces_them() {
        let m = with_entity_tags(NewMemory::new("We met Bob in Porto"));
        let tags: Vec<&str> = m.tags.iter().map(Tag::as_str).collect();
        assert_eq!(tags, ["ent:bob", "ent:porto"]);
        let old: TagSet = [Tag::new("pets").unwrap(), Tag::new("ent:lisbon").unwrap()].into();
        let new = retagged(&old, "We met Bob");
        let tags: Vec<&str> = new.iter().map(Tag::as_str).collect();
        assert_eq!(tags, ["ent:bob", "pets"]);
    }

    #[cfg(not(feature = "graph"))]
    fn names_the_flag(err: &Error) -> bool {
        matches!(
            err,
            Error::Unavailable {
                feature: "graph",
                ..
            }
        )
    }

    /// Runs in `cargo test -p hydrate --lib` (features off; `.ci/run` does so).
    #[cfg(not(feature = "graph"))]
    #[test]
    fn without_the_feature_the_graph_names_the_flag_and_writes_no_tags() {
        let store: Arc<dyn MemoryBackend> = Arc::new(memory_inmem::InMemoryBackend::new(None));
        let err = GraphSource::new(Arc::clone(&store)).unwrap_err();
        assert!(names_the_flag(&err), "{err:?}");
        assert!(err.to_string().contains("cargo feature `graph`"), "{err}");
        assert!(entity_tags("We met Bob in Porto").is_empty());
        let scope = Scope::for_user("u").unwrap();
        let err = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(index_entities(store.as_ref(), &scope))
            .unwrap_err();
        assert!(names_the_flag(&err), "{err:?}");
    }
}
