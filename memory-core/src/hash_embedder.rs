//! `HashingEmbedder`: a deterministic, model-free embedder for tests and offline fallback.

use std::sync::Arc;

use async_trait::async_trait;

use crate::embedding::{Embedding, EmbeddingProvider, EmbeddingSpace, normalize};
use crate::error::Result;
use crate::keyword::tokenize;

/// Deterministic feature-hashing embedder. **Not a language model.**
///
/// Each word (lowercased, stopwords dropped) is hashed with FNV-1a into one of `dims`
/// buckets with a hashed sign; the vector is L2-normalised. Texts that share words are
/// close; synonyms are not. It exists so tests, benches and machines without a model get
/// stable vectors with no I/O. Its space is `hash/fnv1a-words-v1`.
///
/// With [`HashingEmbedder::with_window`] it reads only the head of a text, as a model with
/// a fixed number of tokens does, and says so ([`EmbeddingProvider::window_bytes`]): what
/// tests of long memories need.
#[derive(Clone, Debug)]
pub struct HashingEmbedder {
    space: Arc<EmbeddingSpace>,
    window: Option<usize>,
}

impl HashingEmbedder {
    /// Provider name recorded in the embedding space.
    pub const PROVIDER: &'static str = "hash";
    /// Model name recorded in the embedding space.
    pub const MODEL: &'static str = "fnv1a-words-v1";

    /// An embedder producing `dims`-long vectors (`dims` ≥ 1).
    pub fn new(dims: usize) -> Result<Self> {
        Ok(Self {
            space: Arc::new(EmbeddingSpace::new(Self::PROVIDER, Self::MODEL, dims)?),
            window: None,
        })
    }

    /// The same embedder reading only the first `bytes` of a text (cut back to a character
    /// boundary) and declaring that window. Its vectors are in the same space: a text that
    /// fits gets the same vector.
    pub fn with_window(mut self, bytes: usize) -> Self {
        self.window = Some(bytes);
        self
    }

    /// Embeds one text synchronously.
    pub fn embed_sync(&self, text: &str) -> Embedding {
        let dims = self.space.dims;
        let mut v = vec![0.0f32; dims];
        let mut end = self.window.unwrap_or(text.len()).min(text.len());
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        for word in tokenize(&text[..end]) {
            let h = fnv1a(word.as_bytes());
            // dims >= 1 by construction, so the modulo is defined.
            let bucket = (h % dims as u64) as usize;
            v[bucket] += if h >> 63 == 0 { 1.0 } else { -1.0 };
        }
        normalize(&mut v);
        // `dims` finite components by construction.
        Embedding::new_unchecked(Arc::clone(&self.space), v)
    }
}

fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

#[async_trait]
impl EmbeddingProvider for HashingEmbedder {
    fn space(&self) -> Arc<EmbeddingSpace> {
        Arc::clone(&self.space)
    }

    async fn embed_batch(&self, texts: &[&str]) -> Result<Vec<Embedding>> {
        Ok(texts.iter().map(|t| self.embed_sync(t)).collect())
    }

    fn max_batch(&self) -> usize {
        1024
    }

    fn window_bytes(&self) -> Option<usize> {
        self.window
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embedding::cosine;

    #[cfg(feature = "testing")]
    #[tokio::test]
    async fn keeps_the_embedder_contract() {
        crate::testing::embedder_contract(&HashingEmbedder::new(64).unwrap()).await;
    }

    #[test]
    fn shared_words_make_texts_close_and_output_is_stable() {
        let e = HashingEmbedder::new(256).unwrap();
        let a = e.embed_sync("the cat sat on the mat");
        let b = e.embed_sync("a cat on a mat");
        let c = e.embed_sync("quarterly stock market report");
        assert!(cosine(a.vector(), b.vector()) > 0.8);
        assert!(cosine(a.vector(), c.vector()) < 0.3);
        assert_eq!(a, e.embed_sync("the cat sat on the mat"));
        assert_eq!(a.vector().len(), 256);
    }

    /// With a window, a long text is one vector per passage, and its tail is found by the
    /// passage that holds it; without one it stays a single vector.
    #[tokio::test]
    async fn a_window_embeds_long_texts_as_passages() {
        let filler = "We compared the quarterly budget figures line by line. ".repeat(12);
        let long = format!("{filler}\n\nThe lighthouse keeper feeds seven gulls.");
        let plain = HashingEmbedder::new(64).unwrap();
        let windowed = plain.clone().with_window(200);
        assert_eq!(windowed.window_bytes(), Some(200));
        assert_eq!(windowed.embed_sync("short"), plain.embed_sync("short"));

        let out = crate::embed_passages(&windowed, &[long.as_str(), "short"])
            .await
            .unwrap();
        assert_eq!(out[1].len(), 1);
        let passages = crate::split_text(&long, 200);
        assert!(passages.len() >= 4, "{passages:?}");
        assert_eq!(out[0].len(), passages.len());
        let q = plain.embed_sync("lighthouse keeper gulls");
        let best = |vs: &[Embedding]| {
            vs.iter()
                .map(|v| cosine(v.vector(), q.vector()))
                .fold(f32::MIN, f32::max)
        };
        assert!(best(&out[0]) > 0.7, "{}", best(&out[0]));
        // Read whole by one vector, the head alone misses the tail.
        let head = windowed.embed_sync(&long);
        assert!(cosine(head.vector(), q.vector()) < 0.3);
        let whole = crate::embed_passages(&plain, &[long.as_str()])
            .await
            .unwrap();
        assert_eq!(whole[0].len(), 1);
    }
}
