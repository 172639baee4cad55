//! Excerpts: a section whose content is marked out in scored passages can shrink by leaving
//! out its least relevant passages, keeping the rest in their order with each gap marked by
//! [`ELISION`], instead of being cut at its head.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::tokenizer::Tokenizer;

/// What stands for left-out text between two kept passages.
pub const ELISION: &str = " […] ";
/// What stands for left-out text before the first kept passage.
const LEADING: &str = "[…] ";
/// What stands for left-out text after the last kept passage.
const TRAILING: &str = " […]";

/// A part of a section's content that compression may keep without the rest: a byte range
/// of the content and how well it answers the prompt (higher is kept longer).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Passage {
    /// Byte offset of its first byte in the section's content.
    pub start: usize,
    /// Byte offset just past its last byte.
    pub end: usize,
    /// Its relevance to the prompt, any finite number; ties go to the earlier passage.
    pub score: f64,
}

/// Checks that `passages` are in order, do not overlap, lie on character boundaries of
/// `content` and are not empty, with finite scores.
pub(crate) fn validate(id: &str, content: &str, passages: &[Passage]) -> Result<()> {
    let mut after = 0;
    for (i, p) in passages.iter().enumerate() {
        let ok = p.start >= after
            && p.start < p.end
            && p.end <= content.len()
            && content.is_char_boundary(p.start)
            && content.is_char_boundary(p.end)
            && p.score.is_finite();
        if !ok {
            return Err(Error::InvalidPassage {
                id: id.to_owned(),
                index: i,
                start: p.start,
                end: p.end,
                len: content.len(),
            });
        }
        after = p.end;
    }
    Ok(())
}

/// The text of an excerpt of `content` that keeps the passages at `kept` (indices into
/// `passages`, ascending): the text before the first passage and after the last always,
/// the original text between two neighbouring kept passages, and [`ELISION`] for each gap.
pub(crate) fn render(content: &str, passages: &[Passage], kept: &[usize]) -> String {
    let (Some(first), Some(last)) = (passages.first(), passages.last()) else {
        return content.to_owned();
    };
    let mut out = String::with_capacity(content.len());
    out.push_str(&content[..first.start]);
    let mut previous: Option<usize> = None;
    for &k in kept {
        let Some(p) = passages.get(k) else { continue };
        match previous {
            None if k > 0 => out.push_str(LEADING),
            Some(q) if q + 1 == k => out.push_str(&content[passages[q].end..p.start]),
            Some(_) => out.push_str(ELISION),
            None => {}
        }
        out.push_str(&content[p.start..p.end]);
        previous = Some(k);
    }
    if previous.is_some_and(|q| q + 1 < passages.len()) {
        out.push_str(TRAILING);
    }
    out.push_str(&content[last.end..]);
    out
}

/// Passage indices, most relevant first (ties: the earlier first).
fn by_score(passages: &[Passage]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..passages.len()).collect();
    order.sort_by(|&a, &b| {
        passages[b]
            .score
            .total_cmp(&passages[a].score)
            .then(a.cmp(&b))
    });
    order
}

/// The fewest tokens an excerpt can have: its most relevant passage alone.
pub(crate) fn floor(content: &str, passages: &[Passage], tokenizer: &dyn Tokenizer) -> u32 {
    match by_score(passages).first() {
        Some(&best) => tokenizer.count(&render(content, passages, &[best])),
        None => tokenizer.count(content),
    }
}

/// The excerpt of at most `target` tokens that keeps the most relevant passages: passages are
/// taken best first while their estimated cost fits (a passage that does not fit is skipped
/// for a smaller, less relevant one), and the result is counted again, leaving out the least
/// relevant kept passage until it fits. Returns the kept indices (ascending), the text and
/// its tokens, or `None` when not even the best passage fits. An excerpt always leaves at
/// least one passage out.
pub(crate) fn fit(
    content: &str,
    passages: &[Passage],
    target: u32,
    tokenizer: &dyn Tokenizer,
) -> Option<(Vec<usize>, String, u32)> {
    let (first, last) = (passages.first()?, passages.last()?);
    let frame = tokenizer
        .count(&content[..first.start])
        .saturating_add(tokenizer.count(&content[last.end..]));
    let marker = tokenizer.count(ELISION);
    let order = by_score(passages);
    let mut chosen: Vec<usize> = Vec::new();
    let mut estimate = frame;
    for &k in &order {
        let p = &passages[k];
        // Each passage may bring one marker with it; the estimate errs high.
        let cost = tokenizer
            .count(&content[p.start..p.end])
            .saturating_add(marker);
        if estimate.saturating_add(cost) <= target {
            estimate = estimate.saturating_add(cost);
            chosen.push(k);
        }
    }
    if chosen.is_empty() {
        // The estimate errs high: the best passage alone may still fit.
        chosen.push(*order.first()?);
    }
    if chosen.len() == passages.len() {
        // An excerpt leaves something out.
        chosen.pop();
    }
    // `chosen` is best first: the least relevant kept passage is the last.
    let counted = |chosen: &[usize]| {
        let mut kept = chosen.to_vec();
        kept.sort_unstable();
        let text = render(content, passages, &kept);
        let tokens = tokenizer.count(&text);
        (kept, text, tokens)
    };
    let mut best = loop {
        if chosen.is_empty() {
            return None;
        }
        let fitted = counted(&chosen);
        if fitted.2 <= target {
            break fitted;
        }
        chosen.pop();
    };
    // The estimate errs high: the passages it left out, best first, join while the excerpt
    // as counted still fits, so the room it frees is not wasted.
    for &k in &order {
        let p = &passages[k];
        // Only a passage that could fit the room left is counted in (its count is cached).
        let slack = target.saturating_sub(best.2);
        if chosen.contains(&k)
            || chosen.len() + 1 >= passages.len()
            || tokenizer.count(&content[p.start..p.end]) > slack
        {
            continue;
        }
        chosen.push(k);
        let fitted = counted(&chosen);
        if fitted.2 <= target {
            best = fitted;
        } else {
            chosen.pop();
        }
    }
    Some(best)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokenizer::WhitespaceTokenizer;

    /// "- a: " then three sentences as passages, scored 0.1, 0.9, 0.5.
    fn sample() -> (String, Vec<Passage>) {
        let content = "- a: One two three. Four five six seven. Eight nine.".to_owned();
        let spans = ["One two three.", "Four five six seven.", "Eight nine."];
        let scores = [0.1, 0.9, 0.5];
        let passages = spans
            .iter()
            .zip(scores)
            .map(|(s, score)| {
                let start = content.find(s).unwrap();
                Passage {
                    start,
                    end: start + s.len(),
                    score,
                }
            })
            .collect();
        (content, passages)
    }

    #[test]
    fn renders_kept_passages_in_order_with_gaps_marked() {
        let (c, p) = sample();
        assert_eq!(render(&c, &p, &[0, 1, 2]), c);
        assert_eq!(render(&c, &p, &[1]), "- a: […] Four five six seven. […]");
        assert_eq!(
            render(&c, &p, &[0, 2]),
            "- a: One two three. […] Eight nine."
        );
        assert_eq!(
            render(&c, &p, &[1, 2]),
            "- a: […] Four five six seven. Eight nine."
        );
    }

    #[test]
    fn fits_the_most_relevant_passages() {
        let (c, p) = sample();
        let tok = WhitespaceTokenizer;
        // The best passage alone is the floor.
        assert_eq!(
            floor(&c, &p, &tok),
            tok.count("- a: […] Four five six seven. […]")
        );
        let (kept, text, tokens) = fit(&c, &p, 8, &tok).unwrap();
        assert_eq!(kept, [1]);
        assert_eq!(text, "- a: […] Four five six seven. […]");
        assert_eq!(tokens, 8);
        // More room: the second best joins, in text order.
        let (kept, text, _) = fit(&c, &p, 13, &tok).unwrap();
        assert_eq!(kept, [1, 2]);
        assert_eq!(text, "- a: […] Four five six seven. Eight nine.");
        // Too little room for anything: no excerpt; room for everything: the least
        // relevant passage still goes (an excerpt is shorter than the whole).
        assert!(fit(&c, &p, 3, &tok).is_none());
        assert_eq!(fit(&c, &p, 100, &tok).unwrap().0, [1, 2]);
    }

    #[test]
    fn room_the_estimate_left_is_filled() {
        let content = "- a: A b. C d e. F g. H i j k.";
        let passages: Vec<Passage> = [
            ("A b.", 0.9),
            ("C d e.", 0.1),
            ("F g.", 0.8),
            ("H i j k.", 0.2),
        ]
        .iter()
        .map(|(t, score)| {
            let start = content.find(t).unwrap();
            Passage {
                start,
                end: start + t.len(),
                score: *score,
            }
        })
        .collect();
        let tok = WhitespaceTokenizer;
        // The estimate (a marker per passage) takes the two best; neighbours need no marker,
        // so the least relevant passage that fits joins them.
        let (kept, text, tokens) = fit(content, &passages, 11, &tok).unwrap();
        assert_eq!(kept, [0, 1, 2]);
        assert_eq!(text, "- a: A b. C d e. F g. […]");
        assert_eq!(tokens, 10);
    }

    #[test]
    fn bad_passages_are_refused() {
        let (c, p) = sample();
        assert!(validate("s", &c, &p).is_ok());
        let mut overlapping = p.clone();
        overlapping[1].start = overlapping[0].start + 1;
        assert!(validate("s", &c, &overlapping).is_err());
        let mut past_end = p.clone();
        past_end[2].end = c.len() + 1;
        let err = validate("s", &c, &past_end).unwrap_err().to_string();
        assert!(err.contains("passage 2"), "{err}");
        let mut nan = p;
        nan[0].score = f64::NAN;
        assert!(validate("s", &c, &nan).is_err());
        let multibyte = "é and more";
        let split = [Passage {
            start: 1,
            end: 4,
            score: 0.0,
        }];
        assert!(validate("s", multibyte, &split).is_err());
    }
}
