//! Keyword scoring shared by backends that score in process: a tokenizer and Okapi BM25.

/// Common English words that carry no topic and are left out of keyword scoring.
const STOPWORDS: &[&str] = &[
    "a", "about", "after", "all", "also", "am", "an", "and", "any", "are", "as", "at", "be",
    "been", "but", "by", "can", "could", "did", "do", "does", "for", "from", "had", "has", "have",
    "he", "her", "him", "his", "how", "i", "if", "in", "into", "is", "it", "its", "me", "my", "no",
    "not", "of", "on", "or", "our", "she", "so", "than", "that", "the", "their", "them", "then",
    "there", "these", "they", "this", "to", "was", "we", "were", "what", "when", "where", "which",
    "who", "why", "will", "with", "would", "you", "your",
];

/// Whether `word` (lowercase) is a stopword.
pub fn is_stopword(word: &str) -> bool {
    STOPWORDS.binary_search(&word).is_ok()
}

/// Splits text into lowercase alphanumeric words, stopwords removed.
pub fn tokenize(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .filter(|w| !is_stopword(w))
        .collect()
}

/// Most words a keyword query searches for. A query of more distinct words searches for
/// the [`MAX_QUERY_TERMS`] rarest of those the store holds ([`rarest`]): a full-text engine
/// parses an expression of thousands of alternatives in quadratic time (SQLite FTS5 took
/// 29-56 s for 80 000), so an unbounded one would let any caller hold the store. A query of
/// at most this many distinct words is searched as it is.
pub const MAX_QUERY_TERMS: usize = 64;

/// Most bytes of a query's text a keyword search reads (1 MiB): the rest is not
/// tokenized. Cut at a character boundary.
pub const MAX_QUERY_BYTES: usize = 1 << 20;

/// Most distinct words of one query whose document counts a store looks up ([`rarest`]):
/// of more, the longest are kept (ties by word). Longer words are the rarer ones (Zipf's law
/// of abbreviation), and a look-up costs each store a probe of its index per word (SQLite
/// took 29 s for the 150 000 words of a 1 MiB query, 200 µs a word); this bounds that to
/// a fraction of a second.
pub const MAX_LOOKUP_WORDS: usize = 2048;

/// The distinct words of a keyword query, sorted: [`tokenize`] of its first
/// [`MAX_QUERY_BYTES`] bytes, at most [`MAX_LOOKUP_WORDS`] of them (the longest).
pub fn query_words(text: &str) -> Vec<String> {
    let mut end = text.len().min(MAX_QUERY_BYTES);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let mut words = tokenize(&text[..end]);
    words.sort_unstable();
    words.dedup();
    if words.len() > MAX_LOOKUP_WORDS {
        words.sort_unstable_by(|a, b| b.chars().count().cmp(&a.chars().count()).then(a.cmp(b)));
        words.truncate(MAX_LOOKUP_WORDS);
        words.sort_unstable();
    }
    words
}

/// The words to search for of a query's distinct `words` ([`query_words`]): all of them
/// when there are at most [`MAX_QUERY_TERMS`]; else the [`MAX_QUERY_TERMS`] rarest of those
/// some document holds, by `documents` (how many documents hold a word; ties by word), the
/// others left out. A word no document holds matches nothing, so leaving it out changes no
/// score; the rarest are those BM25 weighs most. Returned sorted.
///
/// `documents` is called only when there are more than [`MAX_QUERY_TERMS`] words, so an
/// ordinary query costs no look-up.
pub fn rarest(words: Vec<String>, mut documents: impl FnMut(&str) -> u64) -> Vec<String> {
    if words.len() <= MAX_QUERY_TERMS {
        return words;
    }
    let mut held: Vec<(u64, String)> = words
        .into_iter()
        .filter_map(|w| {
            let n = documents(&w);
            (n > 0).then_some((n, w))
        })
        .collect();
    held.sort_unstable();
    held.truncate(MAX_QUERY_TERMS);
    let mut out: Vec<String> = held.into_iter().map(|(_, w)| w).collect();
    out.sort_unstable();
    out
}

/// Okapi BM25 parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bm25 {
    /// Term-frequency saturation.
    pub k1: f32,
    /// Length normalisation.
    pub b: f32,
}

impl Default for Bm25 {
    /// The usual k1 = 1.2, b = 0.75 (the same defaults as SQLite FTS5's `bm25()`).
    fn default() -> Self {
        Self { k1: 1.2, b: 0.75 }
    }
}

impl Bm25 {
    /// Scores every document that shares a term with the query; documents are token lists
    /// from [`tokenize`]. Returns `(index into docs, score)` for positive scores only.
    pub fn score<'a>(
        &self,
        query: &[String],
        docs: impl IntoIterator<Item = &'a [String]>,
    ) -> Vec<(usize, f32)> {
        let docs: Vec<&[String]> = docs.into_iter().collect();
        if docs.is_empty() || query.is_empty() {
            return Vec::new();
        }
        let mut terms: Vec<&str> = query.iter().map(String::as_str).collect();
        terms.sort_unstable();
        terms.dedup();
        let n = docs.len() as f32;
        let avg_len = docs.iter().map(|d| d.len()).sum::<usize>() as f32 / n;
        // One pass over each document: how often it holds each query term.
        let tfs: Vec<Vec<u32>> = docs
            .iter()
            .map(|doc| {
                let mut tf = vec![0u32; terms.len()];
                for w in doc.iter() {
                    if let Ok(k) = terms.binary_search(&w.as_str()) {
                        tf[k] += 1;
                    }
                }
                tf
            })
            .collect();
        let df: Vec<f32> = (0..terms.len())
            .map(|k| tfs.iter().filter(|tf| tf[k] > 0).count() as f32)
            .collect();
        let mut out = Vec::new();
        for (i, (doc, tf)) in docs.iter().zip(&tfs).enumerate() {
            let len_norm = 1.0 - self.b + self.b * doc.len() as f32 / avg_len.max(1.0);
            let mut score = 0.0;
            for (&count, &dft) in tf.iter().zip(&df) {
                if count == 0 {
                    continue;
                }
                let tf = count as f32;
                // The +1 inside the log keeps idf positive for very common terms (as Lucene does).
                let idf = ((n - dft + 0.5) / (dft + 0.5) + 1.0).ln();
                score += idf * tf * (self.k1 + 1.0) / (tf + self.k1 * len_norm);
            }
            if score > 0.0 {
                out.push((i, score));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stopwords_are_sorted_for_binary_search() {
        assert!(STOPWORDS.windows(2).all(|w| w[0] < w[1]));
        assert!(is_stopword("the") && !is_stopword("cat"));
    }

    #[test]
    fn tokenizer_lowercases_and_keeps_unicode_words() {
        assert_eq!(
            tokenize("The Cat's mat, Zoë 北京!"),
            ["cat", "s", "mat", "zoë", "北京"]
        );
    }

    #[test]
    fn a_long_query_keeps_its_rarest_held_words() {
        // At most the bound: as given, with no look-up.
        let few: Vec<String> = (0..MAX_QUERY_TERMS).map(|i| format!("w{i}")).collect();
        let kept = rarest(few.clone(), |_| panic!("no look-up for a short query"));
        assert_eq!(kept, few);
        // Above it: words no document holds go, then the rarest are kept.
        let many: Vec<String> = (0..10 * MAX_QUERY_TERMS)
            .map(|i| format!("w{i:04}"))
            .collect();
        let kept = rarest(many, |w| {
            let i: u64 = w[1..].parse().unwrap_or(0);
            if i.is_multiple_of(2) { 0 } else { 1000 - i }
        });
        assert_eq!(kept.len(), MAX_QUERY_TERMS);
        assert!(
            kept.iter()
                .all(|w| w[1..].parse::<u64>().unwrap_or(0) % 2 == 1)
        );
        assert!(kept.contains(&"w0639".to_owned()) && !kept.contains(&"w0001".to_owned()));
    }

    #[test]
    fn a_query_is_read_up_to_its_bound() {
        let text = format!("a{} zebra", "é".repeat(MAX_QUERY_BYTES / 2));
        // The bound falls inside the last two-byte character: cut before it, no panic.
        assert_eq!(query_words(&text).len(), 1);
        assert!(!query_words(&text).contains(&"zebra".to_owned()));
        assert_eq!(query_words("b a b c"), ["b", "c"]);
        // Of more words than are looked up, the longest.
        let mut text: String = (0..3 * MAX_LOOKUP_WORDS)
            .map(|i| format!("w{i:05} "))
            .collect();
        text.push_str("quetzalcoatl zz");
        let words = query_words(&text);
        assert_eq!(words.len(), MAX_LOOKUP_WORDS);
        assert!(words.contains(&"quetzalcoatl".to_owned()) && !words.contains(&"zz".to_owned()));
        assert_eq!(words[1], "w00000", "ties by word");
    }

    #[test]
    fn rarer_terms_and_shorter_docs_score_higher() {
        let docs: Vec<Vec<String>> = ["cat sat mat", "dog sat log", "cat cat dog long long text"]
            .iter()
            .map(|d| tokenize(d))
            .collect();
        let hits = Bm25::default().score(&tokenize("cat mat"), docs.iter().map(Vec::as_slice));
        assert_eq!(hits.len(), 2);
        let best = hits.iter().max_by(|a, b| a.1.total_cmp(&b.1)).unwrap();
        assert_eq!(best.0, 0);
    }

    #[test]
    fn scores_are_okapi_bm25_to_the_digit() {
        let docs: Vec<Vec<String>> = [
            "cat sat on the mat with another cat",
            "dog sat on a log",
            "a very long text about a cat and a dog and a bird and more",
            "nothing shared",
        ]
        .iter()
        .map(|d| tokenize(d))
        .collect();
        let query = tokenize("cat dog cat bird");
        let (k1, b) = (1.2f32, 0.75f32);
        let n = docs.len() as f32;
        let avg = docs.iter().map(Vec::len).sum::<usize>() as f32 / n;
        let mut terms: Vec<&String> = query.iter().collect();
        terms.sort();
        terms.dedup();
        let expected: Vec<(usize, f32)> = docs
            .iter()
            .enumerate()
            .filter_map(|(i, d)| {
                let mut score = 0.0f32;
                for t in &terms {
                    let tf = d.iter().filter(|w| w == t).count() as f32;
                    if tf == 0.0 {
                        continue;
                    }
                    let df = docs.iter().filter(|d| d.contains(t)).count() as f32;
                    let idf = ((n - df + 0.5) / (df + 0.5) + 1.0).ln();
                    let norm = 1.0 - b + b * d.len() as f32 / avg;
                    score += idf * tf * (k1 + 1.0) / (tf + k1 * norm);
                }
                (score > 0.0).then_some((i, score))
            })
            .collect();
        let got = Bm25::default().score(&query, docs.iter().map(Vec::as_slice));
        assert_eq!(got, expected);
        assert_eq!(got.len(), 3, "the document sharing no term is not a hit");
    }
}
