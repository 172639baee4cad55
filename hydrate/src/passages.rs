//! Long memories in passages: where a memory's text may be split so that a prompt can carry
//! an excerpt of it, and how well each passage answers the question (its words, weighed as
//! BM25 weighs them among the memory's passages; no model, no I/O).

use std::ops::Range;

use memory_core::keyword::{Bm25, tokenize};

/// The length a passage grows to, in bytes (about 40 tokens of English, a sentence or two):
/// small enough that a tight prompt can hold the one that answers, large enough to read on
/// its own.
pub const PASSAGE_BYTES: usize = 160;

/// A sentence or line longer than this is split at a space.
const MAX_PIECE_BYTES: usize = 2 * PASSAGE_BYTES;

/// The passages of `text`, as byte ranges in order: runs of whole sentences and lines,
/// each grown up to [`PASSAGE_BYTES`] (a sentence or line longer than twice that is split at
/// a space), a new passage at each blank line once the current one is half grown. Each range
/// is trimmed of surrounding whitespace, and together they hold every other character of
/// `text`. Text without a break gives one passage; blank text none.
pub fn passages(text: &str) -> Vec<Range<usize>> {
    let mut out: Vec<Range<usize>> = Vec::new();
    let mut current: Option<Range<usize>> = None;
    for (piece, paragraph) in pieces(text) {
        if let Some(c) = &mut current {
            let grown = piece.end - c.start;
            let half = c.end - c.start >= PASSAGE_BYTES / 2;
            if grown <= PASSAGE_BYTES && !(paragraph && half) {
                c.end = piece.end;
                continue;
            }
            out.push(c.clone());
        }
        current = Some(piece);
    }
    out.extend(current);
    out
}

/// The sentences and lines of `text`, trimmed, each with whether a blank line comes before it;
/// any longer than [`MAX_PIECE_BYTES`] split at spaces (or, without one, at a character).
fn pieces(text: &str) -> Vec<(Range<usize>, bool)> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut newlines = 0usize;
    let push = |from: usize, to: usize, breaks: usize, out: &mut Vec<(Range<usize>, bool)>| {
        let raw = &text[from..to];
        let lead = raw.len() - raw.trim_start().len();
        let trimmed = raw.trim();
        if trimmed.is_empty() {
            return;
        }
        let (mut a, end) = (from + lead, from + lead + trimmed.len());
        let mut first = true;
        while end - a > MAX_PIECE_BYTES {
            // At the last space within a passage's length, or at a character without one.
            let mut limit = a + PASSAGE_BYTES;
            while !text.is_char_boundary(limit) {
                limit -= 1;
            }
            let cut = match text[a..limit].rfind(' ') {
                Some(i) if i > 0 => a + i,
                _ => limit,
            };
            out.push((a..cut, first && breaks >= 2));
            first = false;
            a = cut + (text[cut..end].len() - text[cut..end].trim_start().len());
        }
        if a < end {
            out.push((a..end, first && breaks >= 2));
        }
    };
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c == b'\n' {
            push(start, i, newlines, &mut out);
            start = i + 1;
            // Blank lines between this line and the next count as a paragraph break.
            newlines = 1;
            let mut j = i + 1;
            while j < bytes.len() && matches!(bytes[j], b' ' | b'\t' | b'\r' | b'\n') {
                if bytes[j] == b'\n' {
                    newlines += 1;
                }
                j += 1;
            }
            i = j;
            start = start.max(i.min(bytes.len()));
            continue;
        }
        if matches!(c, b'.' | b'!' | b'?')
            && bytes.get(i + 1).is_some_and(|d| matches!(d, b' ' | b'\t'))
        {
            push(start, i + 1, newlines, &mut out);
            newlines = 0;
            start = i + 1;
        }
        i += 1;
    }
    push(start, bytes.len(), newlines, &mut out);
    out
}

/// A word cut to a rough stem, so "launched", "launching" and "launches" meet "launch".
fn stem(word: &str) -> String {
    for suffix in ["ies", "ing", "ed", "es", "ly", "s"] {
        if word.len() > suffix.len() + 3
            && let Some(base) = word.strip_suffix(suffix)
        {
            return if suffix == "ies" {
                format!("{base}y")
            } else {
                base.to_owned()
            };
        }
    }
    word.to_owned()
}

/// The words of `text` as passages are scored by: stopwords out, lowercased, roughly stemmed.
pub(crate) fn terms(text: &str) -> Vec<String> {
    tokenize(text).iter().map(|w| stem(w)).collect()
}

/// Scores `ranges` of `text` against `question`: BM25 of the question's words (stopwords out,
/// roughly stemmed) among the passages, so a word that every passage holds counts little.
/// One score per range, 0 for a passage that holds none of the question's words.
pub fn score_passages(question: &str, text: &str, ranges: &[Range<usize>]) -> Vec<f64> {
    let docs: Vec<Vec<String>> = ranges
        .iter()
        .map(|r| terms(text.get(r.clone()).unwrap_or("")))
        .collect();
    score_terms(&terms(question), &docs)
}

/// [`score_passages`] over terms already read: the question's, and each passage's.
pub(crate) fn score_terms(question: &[String], passages: &[Vec<String>]) -> Vec<f64> {
    let mut scores = vec![0.0; passages.len()];
    for (i, s) in Bm25::default().score(question, passages.iter().map(Vec::as_slice)) {
        if let Some(x) = scores.get_mut(i) {
            *x = f64::from(s);
        }
    }
    scores
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts<'a>(text: &'a str, ranges: &[Range<usize>]) -> Vec<&'a str> {
        ranges.iter().map(|r| &text[r.clone()]).collect()
    }

    #[test]
    fn short_text_is_one_passage_and_blank_text_none() {
        assert_eq!(
            passages("  Just one line.  "),
            vec![Range { start: 2, end: 16 }]
        );
        assert!(passages(" \n\n ").is_empty());
    }

    #[test]
    fn passages_hold_every_word_in_order_and_stay_short() {
        let sentence = "The migration plan moves the billing tables first. ";
        let mut text = String::new();
        for i in 0..40 {
            text.push_str(&format!("{i}: {sentence}"));
            if i % 7 == 6 {
                text.push_str("\n\n```\nlet x = 1;\n```\n\n");
            }
        }
        text.push_str(&"word ".repeat(400));
        let ranges = passages(&text);
        assert!(ranges.len() > 5, "{}", ranges.len());
        for w in ranges.windows(2) {
            assert!(w[0].end <= w[1].start);
        }
        for r in &ranges {
            assert!(r.end - r.start <= MAX_PIECE_BYTES, "{}", r.end - r.start);
            assert_eq!(text[r.clone()].trim(), &text[r.clone()]);
        }
        // Nothing but whitespace is outside the passages.
        let mut outside = String::new();
        let mut at = 0;
        for r in &ranges {
            outside.push_str(&text[at..r.start]);
            at = r.end;
        }
        outside.push_str(&text[at..]);
        assert!(outside.trim().is_empty(), "{outside:?}");
    }

    #[test]
    fn multibyte_text_splits_on_character_boundaries() {
        let text = "é".repeat(1000);
        let ranges = passages(&text);
        assert!(ranges.len() >= 2);
        for r in &ranges {
            assert!(text.get(r.clone()).is_some());
        }
    }

    #[test]
    fn the_passage_that_answers_scores_best() {
        let setup = "We set up the project skeleton and its directories. ".repeat(2);
        let text = format!(
            "{}\n\nLater we chose PostgreSQL 16 for the launch database, with nightly backups.",
            setup.trim_end()
        );
        let ranges = passages(&text);
        let parts = texts(&text, &ranges);
        assert_eq!(parts.len(), 2, "{parts:?}");
        assert!(
            parts[1].starts_with("Later we chose PostgreSQL"),
            "{parts:?}"
        );
        let scores = score_passages(
            "Which database did we choose for launching?",
            &text,
            &ranges,
        );
        assert!(scores[1] > scores[0], "{scores:?}");
        assert_eq!(scores[0], 0.0);
    }
}
