//! Token counting: the object-safe [`Tokenizer`] trait, the `tiktoken-rs` implementation chosen
//! by model name, [`CountCache`] (remembered counts of texts seen before), and a clearly
//! approximate whitespace counter for tests.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, Mutex, OnceLock};

use tiktoken_rs::CoreBPE;

use crate::encoding::Encoding;
use crate::error::{Error, Result};

/// Counts tokens and tells where they end.
///
/// Object safe: held as `&dyn Tokenizer` or `Arc<dyn Tokenizer>`, so any counter can be
/// plugged in. Two methods are required; [`count`](Tokenizer::count) has a default.
///
/// Contract: `token_ends(text)` has one offset per token, strictly increasing, and
/// `count(text) == token_ends(text).len()`. A byte-level BPE token may end inside a
/// multi-byte character; such an offset is never used as a cut point.
pub trait Tokenizer: Send + Sync {
    /// A stable name for the encoding (e.g. `o200k_base`). Cached counts are tagged with it,
    /// so a section counted by one tokenizer is recounted, never trusted, by another.
    fn name(&self) -> &str;

    /// Byte offsets into `text` at which each token ends, in order. Truncation cuts only at
    /// these offsets, which is how it never splits a token.
    fn token_ends(&self, text: &str) -> Vec<usize>;

    /// Number of tokens in `text`. Defaults to `token_ends(text).len()`; override when
    /// counting is cheaper than locating.
    fn count(&self, text: &str) -> u32 {
        saturate(self.token_ends(text).len())
    }
}

/// Token counts are `u32`; a text of more than four billion tokens saturates.
pub(crate) fn saturate(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// A reference, a box or an `Arc` of a tokenizer is one, forwarding every method.
macro_rules! forward_tokenizer {
    ($($pointer:ty),*) => {$(
        impl<T: Tokenizer + ?Sized> Tokenizer for $pointer {
            fn name(&self) -> &str {
                (**self).name()
            }
            fn token_ends(&self, text: &str) -> Vec<usize> {
                (**self).token_ends(text)
            }
            fn count(&self, text: &str) -> u32 {
                (**self).count(text)
            }
        }
    )*};
}

forward_tokenizer!(&T, Box<T>, Arc<T>);

impl Encoding {
    /// The process-wide BPE tables, built on first use and shared afterwards.
    fn bpe(self) -> Result<&'static CoreBPE> {
        // Built once each: loading a vocabulary takes tens of milliseconds.
        static O200K: OnceLock<Result<CoreBPE, String>> = OnceLock::new();
        static CL100K: OnceLock<Result<CoreBPE, String>> = OnceLock::new();
        let cell = match self {
            Encoding::O200kBase => {
                O200K.get_or_init(|| tiktoken_rs::o200k_base().map_err(|e| format!("{e:#}")))
            }
            Encoding::Cl100kBase => {
                CL100K.get_or_init(|| tiktoken_rs::cl100k_base().map_err(|e| format!("{e:#}")))
            }
        };
        cell.as_ref().map_err(|message| Error::TokenizerLoad {
            encoding: self,
            message: message.clone(),
        })
    }
}

impl FromStr for Encoding {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "o200k_base" => Ok(Encoding::O200kBase),
            "cl100k_base" => Ok(Encoding::Cl100kBase),
            other => Err(Error::UnknownEncoding {
                name: other.to_owned(),
            }),
        }
    }
}

/// Counts tokens exactly as OpenAI models do, with the BPE tables bundled in `tiktoken-rs`.
///
/// Cheap to create and copy: the tables are built once per process and shared.
#[derive(Clone, Copy)]
pub struct TiktokenTokenizer {
    encoding: Encoding,
    bpe: &'static CoreBPE,
}

impl TiktokenTokenizer {
    /// A tokenizer for `encoding`.
    pub fn new(encoding: Encoding) -> Result<Self> {
        Ok(Self {
            encoding,
            bpe: encoding.bpe()?,
        })
    }

    /// A tokenizer for the encoding `model` uses; see [`Encoding::for_model`].
    pub fn for_model(model: &str) -> Result<Self> {
        Self::new(Encoding::for_model(model))
    }

    /// The encoding in use.
    pub fn encoding(&self) -> Encoding {
        self.encoding
    }
}

impl fmt::Debug for TiktokenTokenizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TiktokenTokenizer")
            .field("encoding", &self.encoding)
            .finish_non_exhaustive()
    }
}

impl Tokenizer for TiktokenTokenizer {
    fn name(&self) -> &str {
        self.encoding.name()
    }

    fn token_ends(&self, text: &str) -> Vec<usize> {
        let tokens = self.bpe.encode_ordinary(text);
        let mut ends = Vec::with_capacity(tokens.len());
        let mut at = 0usize;
        for token in tokens {
            // Every ordinary token decodes; an unknown one would only lose a cut point.
            let len = self
                .bpe
                .decode_bytes(&[token])
                .map(|b| b.len())
                .unwrap_or(0);
            at += len;
            ends.push(at);
        }
        ends
    }

    fn count(&self, text: &str) -> u32 {
        saturate(self.bpe.encode_ordinary(text).len())
    }
}

/// A tokenizer that remembers the counts of the texts it has counted: an agent counts the
/// same memories for every prompt of a chat (the recent turns, the facts), and BPE over a
/// regex is most of what counting costs. Same name and same answers as the inner
/// tokenizer; `token_ends` is not cached. At most `capacity` texts are held; when full, the
/// memory is cleared and refills.
pub struct CountCache {
    inner: Arc<dyn Tokenizer>,
    capacity: usize,
    counts: Mutex<HashMap<Box<str>, u32>>,
}

impl CountCache {
    /// Counts of at most `capacity` texts, counted by `inner`.
    pub fn new(inner: Arc<dyn Tokenizer>, capacity: usize) -> Self {
        Self {
            inner,
            capacity,
            counts: Mutex::new(HashMap::new()),
        }
    }

    /// How many counts are held.
    pub fn len(&self) -> usize {
        self.counts.lock().map_or(0, |c| c.len())
    }

    /// Whether no count is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl fmt::Debug for CountCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CountCache")
            .field("inner", &self.inner.name())
            .field("capacity", &self.capacity)
            .field("held", &self.len())
            .finish()
    }
}

impl Tokenizer for CountCache {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn token_ends(&self, text: &str) -> Vec<usize> {
        self.inner.token_ends(text)
    }

    fn count(&self, text: &str) -> u32 {
        if let Ok(counts) = self.counts.lock()
            && let Some(n) = counts.get(text)
        {
            return *n;
        }
        // Counted outside the lock: another thread may count the same text meanwhile.
        let n = self.inner.count(text);
        if let Ok(mut counts) = self.counts.lock() {
            if counts.len() >= self.capacity {
                counts.clear();
            }
            if self.capacity > 0 {
                counts.insert(text.into(), n);
            }
        }
        n
    }
}

/// **Not a model tokenizer.** Counts one token per whitespace-separated word; whitespace
/// belongs to the word after it. Deterministic and dependency-free, for tests and rough
/// offline estimates; real prompts should use [`TiktokenTokenizer`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WhitespaceTokenizer;

impl Tokenizer for WhitespaceTokenizer {
    fn name(&self) -> &str {
        "whitespace-words"
    }

    fn token_ends(&self, text: &str) -> Vec<usize> {
        let mut ends = Vec::new();
        let mut in_word = false;
        for (i, c) in text.char_indices() {
            let space = c.is_whitespace();
            if in_word && space {
                ends.push(i);
            }
            in_word = !space;
        }
        if in_word {
            ends.push(text.len());
        }
        ends
    }

    fn count(&self, text: &str) -> u32 {
        saturate(text.split_whitespace().count())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts like the inner tokenizer, holds at most `capacity`, and starts over when full.
    #[test]
    fn count_cache_answers_as_the_tokenizer_does() {
        let inner: Arc<dyn Tokenizer> =
            Arc::new(TiktokenTokenizer::new(Encoding::O200kBase).unwrap());
        let cache = CountCache::new(Arc::clone(&inner), 3);
        assert_eq!(cache.name(), inner.name());
        let texts = [
            "Hello, world!",
            "My cat is called Pixel.",
            "ünïcödé ✓ 12345",
            "",
            "a b c",
        ];
        for _ in 0..2 {
            for t in texts {
                assert_eq!(cache.count(t), inner.count(t), "{t:?}");
                assert_eq!(cache.token_ends(t), inner.token_ends(t));
                assert!(cache.len() <= 3);
            }
        }
        assert!(!cache.is_empty());
        let none = CountCache::new(inner, 0);
        assert_eq!(none.count("Hello"), 1);
        assert!(none.is_empty(), "a capacity of 0 holds nothing");
    }

    #[test]
    fn model_names_choose_the_encoding() {
        for m in [
            "gpt-4o",
            "gpt-4o-mini",
            "openai/GPT-4.1",
            "o3-mini",
            "o1",
            "gpt-5",
            "gpt-oss-20b",
        ] {
            assert_eq!(Encoding::for_model(m), Encoding::O200kBase, "{m}");
        }
        for m in [
            "gpt-4",
            "gpt-4-turbo",
            "gpt-3.5-turbo",
            "text-embedding-3-small",
        ] {
            assert_eq!(Encoding::for_model(m), Encoding::Cl100kBase, "{m}");
        }
        for m in ["llama3.2", "qwen2.5:7b", ""] {
            assert_eq!(Encoding::for_model(m), Encoding::O200kBase, "{m}");
        }
    }

    #[test]
    fn encodings_parse_and_print() {
        assert_eq!(
            "cl100k_base".parse::<Encoding>().unwrap(),
            Encoding::Cl100kBase
        );
        assert_eq!(Encoding::O200kBase.to_string(), "o200k_base");
        let err = "p50k".parse::<Encoding>().unwrap_err();
        assert!(err.to_string().contains("`p50k`"));
    }

    #[test]
    fn tiktoken_counts_match_token_ends() {
        for enc in [Encoding::O200kBase, Encoding::Cl100kBase] {
            let tok = TiktokenTokenizer::new(enc).unwrap();
            let text = "Hello, world! Ünïcödé and emoji 🦀 too.\nSecond line.";
            let ends = tok.token_ends(text);
            assert_eq!(ends.len() as u32, tok.count(text));
            assert_eq!(ends.last().copied(), Some(text.len()));
            assert!(ends.windows(2).all(|w| w[0] < w[1]));
            assert!(ends.iter().all(|&e| e <= text.len()));
        }
    }

    #[test]
    fn tiktoken_known_count() {
        let tok = TiktokenTokenizer::for_model("gpt-4o").unwrap();
        assert_eq!(tok.count("hello world"), 2);
        assert_eq!(tok.count(""), 0);
    }

    #[test]
    fn whitespace_tokenizer_counts_words() {
        let tok = WhitespaceTokenizer;
        assert_eq!(tok.count("  one two\nthree  "), 3);
        assert_eq!(tok.token_ends("one two"), vec![3, 7]);
        assert_eq!(tok.token_ends("  one two\nthree  "), vec![5, 9, 15]);
    }

    #[test]
    fn the_trait_is_object_safe_and_forwards() {
        let boxed: Box<dyn Tokenizer> = Box::new(WhitespaceTokenizer);
        let shared: Arc<dyn Tokenizer> = Arc::new(WhitespaceTokenizer);
        assert_eq!(boxed.count("a b c"), 3);
        assert_eq!(shared.name(), "whitespace-words");
        fn generic<T: Tokenizer>(t: T) -> u32 {
            t.count("a b")
        }
        assert_eq!(generic(&boxed), 2);
        assert_eq!(generic(shared), 2);
    }
}
