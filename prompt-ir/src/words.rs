//! Word statistics of a text ([`Information`], [`word_hashes`]): the cheap,
//! tokenizer-independent measures that sections cache and compression ranks by, and the
//! rounding that keeps float results identical across platforms.

use serde::{Deserialize, Serialize};

/// Word statistics of a text: a cheap, tokenizer-independent information estimate.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Information {
    /// Number of words (runs of letters and digits, case-folded).
    pub words: u32,
    /// Estimated information in bits: words times the empirical unigram entropy of the
    /// text's own words. Repetitive text scores low; varied text scores high.
    pub bits: f64,
}

impl Information {
    /// Lexical diversity from 0 to 1: entropy per word relative to the most a text of this
    /// length could have (every word distinct). 1 for one word, 0 for none.
    pub fn diversity(self) -> f64 {
        match self.words {
            0 => 0.0,
            1 => 1.0,
            n => round6((self.bits / f64::from(n)) / f64::from(n).log2()),
        }
    }
}

/// Rounds to 6 decimals so floating-point results are identical across platforms' libm.
pub(crate) fn round6(x: f64) -> f64 {
    (x * 1e6).round() / 1e6 + 0.0
}

/// Every word of `text` (a run of letters and digits), in order, as a hash of its lowercased
/// form: FNV-1a over the lowercased UTF-8, read as the text is, ASCII without a Unicode
/// lookup and no string built per word. Equal words (whatever their case) hash alike; the
/// one word splitter of the Prompt IR's statistics and of hydrate's near-duplicate sets.
pub fn word_hashes(text: &str) -> Vec<u64> {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut hashes: Vec<u64> = Vec::new();
    let (mut h, mut in_word) = (OFFSET, false);
    let mut buf = [0u8; 4];
    for c in text.chars() {
        if c.is_ascii_alphanumeric() {
            in_word = true;
            h = (h ^ u64::from(c.to_ascii_lowercase() as u8)).wrapping_mul(PRIME);
        } else if !c.is_ascii() && c.is_alphanumeric() {
            in_word = true;
            for l in c.to_lowercase() {
                for &b in l.encode_utf8(&mut buf).as_bytes() {
                    h = (h ^ u64::from(b)).wrapping_mul(PRIME);
                }
            }
        } else if in_word {
            hashes.push(h);
            (h, in_word) = (OFFSET, false);
        }
    }
    if in_word {
        hashes.push(h);
    }
    hashes
}

/// Word statistics of `text`.
pub(crate) fn information(text: &str) -> Information {
    // This runs on every section, long memories included: the words' hashes are counted by
    // sorting rather than in a map.
    let mut hashes = word_hashes(text);
    let words = u32::try_from(hashes.len()).unwrap_or(u32::MAX);
    if words == 0 {
        return Information::default();
    }
    hashes.sort_unstable();
    // Summed in a fixed order (counts ascending), so the float sum is the same every run.
    let mut freq: Vec<u32> = hashes
        .chunk_by(|a, b| a == b)
        .map(|run| u32::try_from(run.len()).unwrap_or(u32::MAX))
        .collect();
    freq.sort_unstable();
    let n = f64::from(words);
    let entropy: f64 = freq
        .iter()
        .map(|&c| {
            let p = f64::from(c) / n;
            -p * p.log2()
        })
        .sum();
    Information {
        words,
        bits: round6(entropy * n),
    }
}
