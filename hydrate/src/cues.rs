//! Question understanding without a model: the time a question asks about, the phrases it
//! quotes and the names it mentions, read from the observation so hydrate can widen its
//! search to that time and weigh the candidates that match.
//!
//! Everything here is English and rule-based, and "now" is read in UTC: a question in
//! another language simply has no cues, and retrieval works as without them.

use memory_core::{Role, Timestamp};
use serde::{Deserialize, Serialize};

use crate::when::{TimeWindow, month, weekday, window};

/// What a question says beyond its words' meaning.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct QueryCues {
    /// The time it asks about ("yesterday", "last week", "in June"), resolved against now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window: Option<TimeWindow>,
    /// Phrases it quotes, lowercased.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub phrases: Vec<String>,
    /// Names it mentions (capitalised words that are not common words), as written.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub names: Vec<String>,
    /// It is the user speaking of themselves ("I", "me", "my"): what they told about
    /// themselves is in their own messages, not in the agent's answers.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub first_person: bool,
    /// It asks nothing to look up: every word is a greeting, thanks, an acknowledgement or
    /// a common word ("hi", "thanks!", "ok, cool"), or it has no words at all (an emoji).
    /// Such a message gets the stable part of a prompt and nothing recalled for it.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub small_talk: bool,
}

/// How much each kind of cue lifts a candidate that matches it: relevance `r` becomes
/// `r + w·(1 − r)` for each matched cue, so a lift never passes 1 and never lowers anything.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct CueWeights {
    /// For a memory from the time the question asks about. Default 0.3.
    pub time: f64,
    /// For a memory holding a phrase the question quotes. Default 0.3.
    pub phrase: f64,
    /// For a memory naming someone or something the question names, when fewer than half
    /// of the candidates do (a name every candidate has tells nothing). Default 0: on the
    /// LoCoMo dev file a 0.15 lift cost 0.01 to 0.05 of evidence in the prompt (questions
    /// name the people of the chat, and turns that merely address them rose); keyword
    /// search already weighs a rare name.
    pub name: f64,
    /// For one of the user's own messages, when the question is in the first person ("what
    /// did I say", "my plan"): in a chat with the agent, what the user told about themselves
    /// is in their messages, while the agent's answers repeat the question's words at
    /// length. Default 0.3, as time and phrase (on the BEAM dev file, 0.15 and 0.3 gave
    /// +0.02 to +0.04 and +0.03 to +0.07 of evidence coverage; LoCoMo's questions name
    /// people in the third person and are unchanged).
    pub own_words: f64,
}

impl Default for CueWeights {
    fn default() -> Self {
        Self {
            time: 0.3,
            phrase: 0.3,
            name: 0.0,
            own_words: 0.3,
        }
    }
}

impl CueWeights {
    /// No lift: cues are still read and reported, and a time window still widens search.
    pub const OFF: Self = Self {
        time: 0.0,
        phrase: 0.0,
        name: 0.0,
        own_words: 0.0,
    };
}

/// Which cues one candidate matched.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CueMatch {
    /// It is from the asked time.
    pub time: bool,
    /// The quoted phrases it holds.
    pub phrases: usize,
    /// The (informative) names it holds.
    pub names: Vec<String>,
    /// It is the user's own message, and the question is in the first person.
    pub own_words: bool,
}

impl CueMatch {
    /// Whether it matched anything.
    pub fn any(&self) -> bool {
        self.time || self.phrases > 0 || !self.names.is_empty() || self.own_words
    }

    /// `relevance` lifted by what matched (see [`CueWeights`]).
    pub fn lift(&self, relevance: f64, w: CueWeights) -> f64 {
        let mut r = relevance.clamp(0.0, 1.0);
        let mut up = |w: f64| r += w.clamp(0.0, 1.0) * (1.0 - r);
        if self.time {
            up(w.time);
        }
        if self.phrases > 0 {
            up(w.phrase);
        }
        if !self.names.is_empty() {
            up(w.name);
        }
        if self.own_words {
            up(w.own_words);
        }
        r
    }

    /// A short description for the explain report: `time, phrase, name Oscar`.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if self.time {
            parts.push("time".to_owned());
        }
        if self.phrases > 0 {
            parts.push("phrase".to_owned());
        }
        if !self.names.is_empty() {
            parts.push(format!("name {}", self.names.join(" ")));
        }
        if self.own_words {
            parts.push("own words".to_owned());
        }
        parts.join(", ")
    }
}

impl QueryCues {
    /// Reads the cues of `text`, resolving times against `now`.
    pub fn read(text: &str, now: Timestamp) -> Self {
        let words = words(text);
        let lower: Vec<&str> = words.iter().map(|w| w.lower.as_str()).collect();
        let window = window(&lower, now.to_datetime());
        let has_time = window.is_some();
        Self {
            phrases: phrases(text),
            names: names(&words),
            window,
            first_person: words
                .iter()
                .any(|w| FIRST_PERSON.contains(&w.lower.as_str())),
            // A time it asks about is something to look up ("what about this morning?").
            small_talk: !has_time
                && words.iter().all(|w| {
                    memory_core::keyword::is_stopword(&w.lower)
                        || SMALL_TALK.binary_search(&w.lower.as_str()).is_ok()
                }),
        }
    }

    /// Whether there is nothing to use.
    pub fn is_empty(&self) -> bool {
        self.window.is_none()
            && self.phrases.is_empty()
            && self.names.is_empty()
            && !self.first_person
    }

    /// What `content` (created at `at`) matches. Names are returned as matched; whether
    /// they are informative among the candidates is the caller's call.
    pub fn matches(&self, content: &str, at: Option<Timestamp>) -> CueMatch {
        self.matching(content, at, [true; 3])
    }

    /// What a memory (`content`, said at `at` by `role`) matches of the cues that lift under
    /// `w` (weight above 0): its time, the phrases and names it holds, and whether it is the
    /// user's own message answering a first-person question. Whether a name is informative
    /// among the candidates is the caller's call.
    pub fn lifting(
        &self,
        content: &str,
        at: Option<Timestamp>,
        role: Option<Role>,
        w: CueWeights,
    ) -> CueMatch {
        let mut m = self.matching(content, at, [w.time > 0.0, w.phrase > 0.0, w.name > 0.0]);
        m.own_words = self.first_person && w.own_words > 0.0 && role == Some(Role::User);
        m
    }

    /// [`QueryCues::matches`] for the kinds of cue `[time, phrases, names]` asks, the others
    /// left unread (a long text is only lowercased or split into words when one asks).
    fn matching(
        &self,
        content: &str,
        at: Option<Timestamp>,
        [time, phrases, names]: [bool; 3],
    ) -> CueMatch {
        let time = time
            && match (&self.window, at) {
                (Some(w), Some(at)) => w.reaches(at),
                _ => false,
            };
        let phrases = if !phrases || self.phrases.is_empty() {
            0
        } else {
            let lower = content.to_lowercase();
            self.phrases
                .iter()
                .filter(|p| lower.contains(p.as_str()))
                .count()
        };
        let names = if !names || self.names.is_empty() {
            Vec::new()
        } else {
            let have: Vec<String> = words(content).into_iter().map(|w| w.lower).collect();
            self.names
                .iter()
                .filter(|n| {
                    let n = n.to_lowercase();
                    have.contains(&n)
                })
                .cloned()
                .collect()
        };
        CueMatch {
            time,
            phrases,
            names,
            own_words: false,
        }
    }

    /// One line for the explain report, or `None` when there are no cues.
    pub fn describe(&self) -> Option<String> {
        let mut parts = Vec::new();
        if let Some(w) = &self.window {
            let day = |t: Timestamp| t.to_datetime().format("%Y-%m-%d").to_string();
            let last = |t: Timestamp| day(t.minus(std::time::Duration::from_secs(1)));
            let (first, end) = (day(w.start), last(w.end));
            let mut text = if first == end {
                format!("time \"{}\" = {first}", w.said)
            } else {
                format!("time \"{}\" = {first} to {end}", w.said)
            };
            if w.until != w.end {
                text.push_str(&format!(
                    " (and what was said of it until {})",
                    last(w.until)
                ));
            }
            parts.push(text);
        }
        if !self.phrases.is_empty() {
            let quoted: Vec<String> = self.phrases.iter().map(|p| format!("\"{p}\"")).collect();
            parts.push(format!("phrases {}", quoted.join(" ")));
        }
        if !self.names.is_empty() {
            parts.push(format!("names {}", self.names.join(" ")));
        }
        if self.small_talk {
            parts.push("small talk: nothing to recall for it".to_owned());
        }
        (!parts.is_empty()).then(|| parts.join("; "))
    }
}

/// A word of the text: as written and lowercased, and whether it starts a sentence.
struct Word {
    text: String,
    lower: String,
    initial: bool,
}

/// The words of `text`: runs of letters and digits (an apostrophe inside a word is kept,
/// a trailing possessive `'s` dropped).
fn words(text: &str) -> Vec<Word> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut initial = true;
    let mut next_initial = true;
    let flush = |current: &mut String, out: &mut Vec<Word>, initial: bool| {
        if current.is_empty() {
            return;
        }
        let trimmed = current.trim_end_matches('\'');
        let trimmed = trimmed
            .strip_suffix("'s")
            .or_else(|| trimmed.strip_suffix("’s"))
            .unwrap_or(trimmed);
        if !trimmed.is_empty() {
            out.push(Word {
                text: trimmed.to_owned(),
                lower: trimmed.to_lowercase(),
                initial,
            });
        }
        current.clear();
    };
    for c in text.chars() {
        if c.is_alphanumeric() || ((c == '\'' || c == '’') && !current.is_empty()) {
            if current.is_empty() {
                initial = next_initial;
                next_initial = false;
            }
            current.push(c);
        } else {
            flush(&mut current, &mut out, initial);
            if matches!(c, '.' | '?' | '!' | '\n' | ':' | ';') {
                next_initial = true;
            }
        }
    }
    flush(&mut current, &mut out, initial);
    out
}

/// Text between double quotes (straight, curly or guillemets), lowercased, 3 characters
/// or more.
fn phrases(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut open: Option<(usize, char)> = None;
    for (i, c) in text.char_indices() {
        match (open, c) {
            (None, '"' | '“' | '«' | '„') => {
                let close = match c {
                    '“' | '„' => '”',
                    '«' => '»',
                    _ => '"',
                };
                open = Some((i + c.len_utf8(), close));
            }
            (Some((start, close)), c) if c == close || (close == '”' && c == '"') => {
                let p = text[start..i].trim().to_lowercase();
                if p.chars().count() >= 3 && !out.contains(&p) {
                    out.push(p);
                }
                open = None;
            }
            _ => {}
        }
    }
    out
}

/// The words of a speaker naming themselves (lowercased, as [`words`] reads them).
/// Words of greeting, thanks, acknowledgement, farewell and laughter, and the fillers
/// around them: a message of these and stopwords only is small talk
/// ([`QueryCues::small_talk`]). Sorted, for a binary search.
const SMALL_TALK: &[&str] = &[
    "agreed",
    "ah",
    "ahh",
    "alright",
    "appreciate",
    "awesome",
    "aww",
    "bye",
    "cheers",
    "cool",
    "cya",
    "exactly",
    "fine",
    "good",
    "goodbye",
    "great",
    "ha",
    "haha",
    "hahaha",
    "hehe",
    "hello",
    "hey",
    "heya",
    "hi",
    "hiya",
    "hm",
    "hmm",
    "howdy",
    "indeed",
    "k",
    "kk",
    "lol",
    "lot",
    "lots",
    "much",
    "nah",
    "nice",
    "np",
    "oh",
    "ok",
    "okay",
    "ooh",
    "perfect",
    "please",
    "really",
    "right",
    "see",
    "so",
    "sounds",
    "sure",
    "ta",
    "thank",
    "thanks",
    "thx",
    "true",
    "ty",
    "uh",
    "um",
    "very",
    "welcome",
    "well",
    "wow",
    "yay",
    "yeah",
    "yep",
    "yes",
    "yo",
    "yup",
];

const FIRST_PERSON: &[&str] = &[
    "i", "i'm", "i've", "i'd", "i'll", "me", "my", "mine", "myself", "i’m", "i’ve", "i’d", "i’ll",
];

/// Capitalised words that are not common words, months or days; at most 8.
fn names(words: &[Word]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for w in words {
        let mut chars = w.text.chars();
        let capital = chars.next().is_some_and(char::is_uppercase);
        if !capital
            || w.text.chars().count() < 2
            || w.text.chars().all(|c| c.is_ascii_digit())
            || COMMON.contains(&w.lower.as_str())
            || month(&w.lower).is_some()
            || weekday(&w.lower).is_some()
        {
            continue;
        }
        // A sentence's first word is capitalised anyway: a name only if it is not a
        // common word (checked above) and not a word the sentence would start with.
        if w.initial && STARTERS.contains(&w.lower.as_str()) {
            continue;
        }
        if !out.iter().any(|n| n.to_lowercase() == w.lower) {
            out.push(w.text.clone());
        }
        if out.len() == 8 {
            break;
        }
    }
    out
}

/// Words that are capitalised for reasons other than being names.
const COMMON: &[&str] = &[
    "i", "i'm", "i've", "i'll", "i'd", "ok", "okay", "yes", "no", "hey", "hi", "hello", "thanks",
    "please", "ava", "mr", "mrs", "ms", "dr",
];

/// Words a sentence may start with that are not names.
const STARTERS: &[&str] = &[
    "what",
    "when",
    "where",
    "who",
    "whom",
    "whose",
    "which",
    "why",
    "how",
    "did",
    "do",
    "does",
    "is",
    "are",
    "was",
    "were",
    "will",
    "would",
    "should",
    "could",
    "can",
    "may",
    "might",
    "have",
    "has",
    "had",
    "tell",
    "remind",
    "remember",
    "recall",
    "find",
    "show",
    "list",
    "give",
    "let",
    "the",
    "a",
    "an",
    "my",
    "our",
    "your",
    "his",
    "her",
    "their",
    "its",
    "we",
    "you",
    "he",
    "she",
    "they",
    "it",
    "this",
    "that",
    "these",
    "those",
    "there",
    "and",
    "but",
    "or",
    "so",
    "if",
    "in",
    "on",
    "at",
    "for",
    "from",
    "to",
    "of",
    "with",
    "about",
    "after",
    "before",
    "during",
    "since",
    "last",
    "next",
    "yesterday",
    "today",
    "tonight",
    "tomorrow",
    "any",
    "some",
    "all",
    "every",
    "not",
    "also",
    "just",
    "then",
    "now",
    "well",
    "oh",
    "sure",
    "great",
    "good",
    "nice",
    "cool",
    "wow",
    "sorry",
    "actually",
    "anyway",
    "by",
    "as",
    "be",
    "been",
    "being",
    "go",
    "went",
    "get",
    "got",
    "make",
    "made",
    "me",
    "us",
    "him",
    "them",
    "one",
    "two",
    "three",
    "much",
    "many",
    "more",
    "most",
    "other",
    "another",
    "such",
    "same",
    "very",
    "really",
    "still",
    "yet",
    "again",
    "ever",
    "never",
    "always",
    "often",
    "maybe",
    "perhaps",
    "please",
    "thank",
    "thanks",
    "describe",
    "explain",
    "summarize",
    "summarise",
    "compare",
    "according",
    "based",
    "considering",
    "would've",
    "could've",
];

#[cfg(test)]
mod tests {
    use chrono::{TimeZone, Utc};

    use super::*;

    #[test]
    fn small_talk_is_a_message_with_nothing_to_look_up() {
        assert!(SMALL_TALK.windows(2).all(|w| w[0] < w[1]), "sorted");
        let now = Timestamp::from_millis(1_767_225_600_000).unwrap();
        for said in [
            "hi",
            "Thanks!",
            "ok",
            "ok, cool",
            "Thank you so much!",
            "👍",
            "lol yes",
            "hey there",
        ] {
            assert!(QueryCues::read(said, now).small_talk, "{said}");
        }
        for said in [
            "What is my cat called?",
            "thanks, and where did I park?",
            "ok what happened yesterday?",
            "Pixel",
        ] {
            assert!(!QueryCues::read(said, now).small_talk, "{said}");
        }
        let cues = QueryCues::read("thanks!", now);
        assert!(cues.is_empty(), "small talk lifts nothing");
        assert_eq!(
            cues.describe().as_deref(),
            Some("small talk: nothing to recall for it")
        );
    }

    /// Monday 2023-10-16 15:00 UTC.
    fn now() -> Timestamp {
        Utc.with_ymd_and_hms(2023, 10, 16, 15, 0, 0).unwrap().into()
    }

    fn days(text: &str) -> Option<(String, String, String)> {
        QueryCues::read(text, now()).window.map(|w| {
            (
                w.start.to_datetime().format("%Y-%m-%d").to_string(),
                w.end.to_datetime().format("%Y-%m-%d").to_string(),
                w.said,
            )
        })
    }

    fn span(start: &str, end: &str, said: &str) -> Option<(String, String, String)> {
        Some((start.into(), end.into(), said.into()))
    }

    #[test]
    fn relative_days_and_weeks_resolve_against_now() {
        assert_eq!(
            days("What did I say yesterday?"),
            span("2023-10-15", "2023-10-16", "yesterday")
        );
        assert_eq!(
            days("what did we plan today"),
            span("2023-10-16", "2023-10-17", "today")
        );
        assert_eq!(
            days("and the day before yesterday?"),
            span("2023-10-14", "2023-10-15", "day before yesterday")
        );
        assert_eq!(
            days("What did I do last week?"),
            span("2023-10-09", "2023-10-16", "last week")
        );
        assert_eq!(
            days("this week"),
            span("2023-10-16", "2023-10-23", "this week")
        );
        assert_eq!(
            days("last weekend"),
            span("2023-10-14", "2023-10-16", "last weekend")
        );
        assert_eq!(
            days("three days ago"),
            span("2023-10-13", "2023-10-14", "three days ago")
        );
        assert_eq!(
            days("2 days ago"),
            span("2023-10-14", "2023-10-15", "2 days ago")
        );
        assert_eq!(
            days("What happened last Friday?"),
            span("2023-10-13", "2023-10-14", "last friday")
        );
        // Today is Monday: "on Monday" is the one before.
        assert_eq!(
            days("the call on Monday"),
            span("2023-10-09", "2023-10-10", "on monday")
        );
        assert_eq!(
            days("last month"),
            span("2023-09-01", "2023-10-01", "last month")
        );
        assert_eq!(
            days("last year"),
            span("2022-01-01", "2023-01-01", "last year")
        );
    }

    #[test]
    fn months_and_years_resolve_to_the_latest_that_began() {
        // December has not begun this year: last year's.
        for (text, from, to, said) in [
            (
                "When did Melanie go camping in June?",
                "2023-06-01",
                "2023-07-01",
                "june",
            ),
            (
                "the party in December",
                "2022-12-01",
                "2023-01-01",
                "december",
            ),
            ("in May 2021", "2021-05-01", "2021-06-01", "may 2021"),
            ("on July 4", "2023-07-04", "2023-07-05", "july 4"),
            (
                "on March 3, 2020",
                "2020-03-03",
                "2020-03-04",
                "march 3 2020",
            ),
            (
                "How many times has Melanie gone to the beach in 2023?",
                "2023-01-01",
                "2024-01-01",
                "2023",
            ),
        ] {
            assert_eq!(days(text), span(from, to, said), "{text}");
        }
    }

    #[test]
    fn words_that_only_look_like_times_are_not() {
        assert_eq!(days("May I ask what my cat is called?"), None);
        assert_eq!(days("They march every day"), None);
        assert_eq!(days("Who is my manager?"), None);
        assert_eq!(days("I have 20 cats"), None);
        assert_eq!(days("the last time"), None);
    }

    #[test]
    fn reach_extends_past_the_window_by_its_length() {
        let cues = QueryCues::read("camping in June", now());
        let w = cues.window.unwrap();
        let july_10: Timestamp = Utc.with_ymd_and_hms(2023, 7, 10, 0, 0, 0).unwrap().into();
        let august_10: Timestamp = Utc.with_ymd_and_hms(2023, 8, 10, 0, 0, 0).unwrap().into();
        let may_31: Timestamp = Utc.with_ymd_and_hms(2023, 5, 31, 0, 0, 0).unwrap().into();
        assert!(w.reaches(july_10));
        assert!(!w.reaches(august_10));
        assert!(!w.reaches(may_31));
        // Counted from now: what was said then, not after.
        let y = QueryCues::read("what did I say yesterday", now())
            .window
            .unwrap();
        assert_eq!(y.reach(), (y.start, y.end));
        let d = QueryCues::read("on July 4", now()).window.unwrap();
        let (start, until) = d.reach();
        assert_eq!(
            until.since(start),
            std::time::Duration::from_secs(2 * 86_400)
        );
    }

    #[test]
    fn quoted_phrases_and_names_are_read() {
        let cues = QueryCues::read(
            "When did Melanie read the book \"nothing is impossible\"? Oscar said “Hello there”.",
            now(),
        );
        assert_eq!(cues.phrases, vec!["nothing is impossible", "hello there"]);
        assert_eq!(cues.names, vec!["Melanie", "Oscar"]);
        let plain = QueryCues::read("What is my cat called? I think it was Tuesday.", now());
        assert!(plain.names.is_empty(), "{:?}", plain.names);
        let start = QueryCues::read("Caroline's mentor: who is it?", now());
        assert_eq!(start.names, vec!["Caroline"]);
        assert!(
            QueryCues::read("wer ist mein Chef?", now())
                .window
                .is_none()
        );
    }

    #[test]
    fn a_first_person_question_lifts_only_the_users_own_messages() {
        for q in [
            "What did I say about the API key?",
            "Can you remind me of my plan?",
            "I'm lost: which one?",
        ] {
            assert!(QueryCues::read(q, now()).first_person, "{q}");
        }
        for q in [
            "What did Caroline say about the trip?",
            "Is it raining in Iceland?",
        ] {
            assert!(!QueryCues::read(q, now()).first_person, "{q}");
        }
        let cues = QueryCues::read("What did I say about my API key?", now());
        assert!(!cues.is_empty());
        let said = |role, w| cues.lifting("the key is in the vault", None, role, w);
        let w = CueWeights::default();
        let mine = said(Some(Role::User), w);
        assert!(mine.own_words && mine.any());
        assert_eq!(mine.describe(), "own words");
        assert!((mine.lift(0.4, w) - (0.4 + w.own_words * 0.6)).abs() < 1e-9);
        assert!(!said(Some(Role::Assistant), w).any());
        assert!(!said(None, w).any());
        assert!(!said(Some(Role::User), CueWeights::OFF).any());
    }

    #[test]
    fn matches_and_lift() {
        let cues = QueryCues::read("Did Oscar like the \"blue lagoon\" in June?", now());
        let june_5: Timestamp = Utc.with_ymd_and_hms(2023, 6, 5, 0, 0, 0).unwrap().into();
        let m = cues.matches("oscar's trip to the Blue Lagoon", Some(june_5));
        assert!(m.time);
        assert_eq!(m.phrases, 1);
        assert_eq!(m.names, vec!["Oscar"]);
        assert_eq!(m.describe(), "time, phrase, name Oscar");
        assert_eq!(
            cues.describe().unwrap(),
            "time \"june\" = 2023-06-01 to 2023-06-30 (and what was said of it until \
             2023-07-30); phrases \"blue lagoon\"; names Oscar"
        );
        assert_eq!(
            QueryCues::read("what did I say yesterday", now())
                .describe()
                .unwrap(),
            "time \"yesterday\" = 2023-10-15"
        );
        let none = cues.matches("nothing here", None);
        assert!(!none.any());
        assert_eq!(none.lift(0.4, CueWeights::default()), 0.4);
        let w = CueWeights::default();
        let lifted = m.lift(0.5, w);
        assert!(lifted > 0.5 && lifted < 1.0, "{lifted}");
        assert_eq!(m.lift(0.5, CueWeights::OFF), 0.5);
        // A name inside a longer word does not match.
        assert!(cues.matches("Oscarsson", None).names.is_empty());
    }
}
