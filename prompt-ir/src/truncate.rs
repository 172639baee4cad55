//! Where a section may be cut: sentence and line boundaries that are also token boundaries.

use crate::tokenizer::{Tokenizer, saturate};

/// A place where a section's content may be cut, and the size of what is left.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Cut {
    /// Length of the kept prefix, `content[..keep]`: the text up to a cut point at a token
    /// end, without trailing whitespace.
    pub(crate) keep: usize,
    /// Tokens up to the cut point, as the full text's encoding places them; the kept prefix
    /// is recounted before it is used.
    pub(crate) tokens: u32,
}

/// Sentence-ending punctuation.
fn is_terminal(c: char) -> bool {
    matches!(c, '.' | '!' | '?' | '…' | '。' | '！' | '？')
}

/// Characters that may close a sentence after its punctuation: `."` or `!)`.
fn is_closer(c: char) -> bool {
    matches!(c, '"' | '\'' | '”' | '’' | ')' | ']' | '»')
}

/// Byte offsets, ascending, at which `text` may be cut: after a sentence's punctuation when
/// whitespace follows, and on either side of each line break (tokenizers often merge a
/// line's final punctuation with the newline, so the place after it may be the token end).
/// Neither 0 nor the whole text is included.
pub(crate) fn boundaries(text: &str) -> Vec<usize> {
    let mut out = Vec::new();
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if c == '\n' {
            let before = text
                .get(..i)
                .unwrap_or("")
                .trim_end_matches([' ', '\t', '\r'])
                .len();
            out.push(before);
            out.push(i + 1);
        } else if is_terminal(c) {
            let mut end = i + c.len_utf8();
            while let Some(&(j, d)) = chars.peek() {
                if !is_closer(d) {
                    break;
                }
                end = j + d.len_utf8();
                chars.next();
            }
            if chars.peek().is_some_and(|&(_, d)| d.is_whitespace()) {
                out.push(end);
            }
        }
    }
    out.sort_unstable();
    out.dedup();
    out.retain(|&o| o > 0 && o < text.len());
    out
}

/// Every boundary of `text` that is also a token end, with the token count up to it. Cuts
/// that keep nothing but whitespace are left out; cuts keeping the same prefix are merged,
/// keeping the smaller count.
pub(crate) fn cuts(text: &str, tokenizer: &dyn Tokenizer) -> (Vec<Cut>, u32) {
    let ends = tokenizer.token_ends(text);
    let mut cuts: Vec<Cut> = Vec::new();
    for offset in boundaries(text) {
        let Ok(i) = ends.binary_search(&offset) else {
            continue;
        };
        let keep = text.get(..offset).unwrap_or("").trim_end().len();
        if keep == 0 || cuts.last().is_some_and(|c| c.keep == keep) {
            continue;
        }
        cuts.push(Cut {
            keep,
            tokens: saturate(i + 1),
        });
    }
    (cuts, saturate(ends.len()))
}

/// The smallest size a text of `total` tokens can be cut to while keeping at least
/// `min_tokens` (and at least one) token: the first cut at or above that size, or `total`
/// when no cut qualifies.
pub(crate) fn floor(cuts: &[Cut], min_tokens: u32, total: u32) -> u32 {
    let min = min_tokens.max(1);
    cuts.iter()
        .map(|c| c.tokens)
        .find(|&t| t >= min && t < total)
        .unwrap_or(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encoding::Encoding;
    use crate::tokenizer::{TiktokenTokenizer, WhitespaceTokenizer};

    fn kept(text: &str, tok: &dyn Tokenizer) -> Vec<String> {
        cuts(text, tok)
            .0
            .iter()
            .map(|c| text[..c.keep].to_owned())
            .collect()
    }

    #[test]
    fn finds_sentence_and_line_ends() {
        let text = "First one. Second \"quoted.\" Third?\nA line  \n\nv3.5 is a version. End.";
        assert_eq!(
            kept(text, &WhitespaceTokenizer),
            vec![
                "First one.",
                "First one. Second \"quoted.\"",
                "First one. Second \"quoted.\" Third?",
                "First one. Second \"quoted.\" Third?\nA line",
                "First one. Second \"quoted.\" Third?\nA line  \n\nv3.5 is a version.",
            ]
        );
    }

    #[test]
    fn no_boundary_in_a_single_sentence() {
        assert!(boundaries("just words without an end").is_empty());
        assert!(boundaries("Ends here.").is_empty());
        assert!(kept("\n\nleading newlines only", &WhitespaceTokenizer).is_empty());
    }

    #[test]
    fn cuts_are_token_ends_and_counted() {
        let tok = TiktokenTokenizer::new(Encoding::O200kBase).unwrap();
        let text = "The cat sat. The dog ran away quickly.\nNew line here.\nAnd a last one.";
        let (cuts, total) = cuts(text, &tok);
        assert_eq!(total, tok.count(text));
        // Both line ends are usable even where "." and "\n" share a token.
        assert_eq!(cuts.len(), 3);
        for c in &cuts {
            assert!(
                tok.count(&text[..c.keep]) <= c.tokens,
                "{:?}",
                &text[..c.keep]
            );
        }
    }

    #[test]
    fn floor_respects_min_tokens() {
        let (c, total) = cuts("a b. c d e. f g h i.", &WhitespaceTokenizer);
        assert_eq!(total, 9);
        assert_eq!(c.iter().map(|c| c.tokens).collect::<Vec<_>>(), vec![2, 5]);
        assert_eq!(floor(&c, 0, total), 2);
        assert_eq!(floor(&c, 3, total), 5);
        assert_eq!(floor(&c, 6, total), 9);
    }
}
