//! Embedding spaces, vectors, and the `EmbeddingProvider` trait every embedder implements.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::entry::{cut_end, split_text};
use crate::error::{MemoryError, Result};

/// The identity of an embedding space: vectors are only comparable within one.
///
/// A store records the space it was created with and refuses vectors of any other, even
/// when the dimensions happen to agree.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct EmbeddingSpace {
    /// Who computes the vectors (`ollama`, `openai`, `local`, `hash`).
    pub provider: String,
    /// The model name as the provider knows it.
    pub model: String,
    /// Vector length.
    pub dims: usize,
}

impl EmbeddingSpace {
    /// Builds a space description; `dims` must be at least 1.
    pub fn new(provider: impl Into<String>, model: impl Into<String>, dims: usize) -> Result<Self> {
        if dims == 0 {
            return Err(MemoryError::invalid(
                "embedding dimensions",
                "must be at least 1",
            ));
        }
        Ok(Self {
            provider: provider.into(),
            model: model.into(),
            dims,
        })
    }

    /// Checks that `embedding` belongs to this space; `what` names the refusing party in
    /// the error ("store `bot.db`", "query").
    pub fn check(&self, embedding: &Embedding, what: &str) -> Result<()> {
        let got = embedding.space();
        if got.dims != self.dims || embedding.vector().len() != self.dims {
            return Err(MemoryError::DimensionMismatch {
                got: embedding.vector().len(),
                expected: self.dims,
                space: Arc::new(self.clone()),
                what: what.to_owned(),
            });
        }
        if got.provider != self.provider || got.model != self.model {
            return Err(MemoryError::SpaceMismatch {
                got: Arc::clone(got),
                expected: Arc::new(self.clone()),
                what: what.to_owned(),
            });
        }
        Ok(())
    }
}

impl fmt::Display for EmbeddingSpace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{} ({} dims)", self.provider, self.model, self.dims)
    }
}

/// A vector together with the space it lives in.
///
/// Construction checks that the length matches the space and that every component is
/// finite, so an `Embedding` is always well formed.
#[derive(Clone, PartialEq)]
pub struct Embedding {
    space: Arc<EmbeddingSpace>,
    vector: Vec<f32>,
}

impl Embedding {
    /// Wraps a vector computed in `space`.
    pub fn new(space: Arc<EmbeddingSpace>, vector: Vec<f32>) -> Result<Self> {
        if vector.len() != space.dims {
            return Err(MemoryError::DimensionMismatch {
                got: vector.len(),
                expected: space.dims,
                what: format!("embedding space {space}"),
                space,
            });
        }
        if let Some(i) = vector.iter().position(|x| !x.is_finite()) {
            return Err(MemoryError::invalid(
                "embedding",
                format!(
                    "component {i} is {} (NaN or infinite); every component must be finite",
                    vector[i]
                ),
            ));
        }
        Ok(Self { space, vector })
    }

    /// For callers inside this crate that built a vector of the right length from finite
    /// values.
    pub(crate) fn new_unchecked(space: Arc<EmbeddingSpace>, vector: Vec<f32>) -> Self {
        debug_assert_eq!(vector.len(), space.dims);
        Self { space, vector }
    }

    /// The space the vector lives in.
    pub fn space(&self) -> &Arc<EmbeddingSpace> {
        &self.space
    }

    /// The components.
    pub fn vector(&self) -> &[f32] {
        &self.vector
    }

    /// Takes the components out.
    pub fn into_vector(self) -> Vec<f32> {
        self.vector
    }
}

impl fmt::Debug for Embedding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Embedding({}, {} components)",
            self.space,
            self.vector.len()
        )
    }
}

/// Cosine similarity of two equally long vectors; 0 when either is all zeros.
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let (mut dot, mut na, mut nb) = (0.0f32, 0.0f32, 0.0f32);
    for (x, y) in a.iter().zip(b) {
        dot += x * y;
        na += x * x;
        nb += y * y;
    }
    if na == 0.0 || nb == 0.0 {
        0.0
    } else {
        dot / (na.sqrt() * nb.sqrt())
    }
}

/// Scales a vector to unit length in place (all-zero vectors stay zero).
pub fn normalize(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
}

/// Turns texts into vectors.
///
/// Implementations report their [`EmbeddingSpace`]; stores record it and refuse vectors of
/// any other space. Only [`EmbeddingProvider::space`] and [`EmbeddingProvider::embed_batch`]
/// are required.
#[async_trait]
pub trait EmbeddingProvider: Send + Sync + fmt::Debug {
    /// The space this provider's vectors live in.
    fn space(&self) -> Arc<EmbeddingSpace>;

    /// Embeds texts, returning exactly one vector per text, in order.
    ///
    /// Callers should prefer [`embed_all`], which splits work into batches of at most
    /// [`EmbeddingProvider::max_batch`] and checks what the provider returned.
    async fn embed_batch(&self, texts: &[&str]) -> Result<Vec<Embedding>>;

    /// Embeds one text.
    async fn embed(&self, text: &str) -> Result<Embedding> {
        let mut out = embed_all(self, &[text]).await?;
        out.pop().ok_or_else(|| {
            MemoryError::embedding(
                self.space().provider.clone(),
                "returned no vector for one text",
            )
        })
    }

    /// Vector length.
    fn dimensions(&self) -> usize {
        self.space().dims
    }

    /// Largest batch one [`EmbeddingProvider::embed_batch`] call should get.
    fn max_batch(&self) -> usize {
        64
    }

    /// The longest text, in UTF-8 bytes, whose whole meaning this embedder surely takes in
    /// (a model reads a fixed number of tokens and drops the rest). Stores embed a longer
    /// memory as passages of at most this many bytes ([`embed_passages`]), so that its end
    /// is found by meaning as well as its head. `None` (the default): no limit that
    /// matters; every text is one vector.
    fn window_bytes(&self) -> Option<usize> {
        None
    }
}

/// Embeds each text as the passages that fit `provider`'s window
/// ([`EmbeddingProvider::window_bytes`], cut by [`split_text`]): one vector for a text that
/// fits, one per passage, in order, for a longer one. Every passage of every text goes
/// through [`embed_all`] together, in batches. A text that is empty or only whitespace gets
/// one vector of the whole text, as [`embed_all`] would give it.
///
/// A store ranks a memory by its best passage's similarity (less what the number of its
/// passages adds: [`passage_similarity`](crate::passage_similarity)); its first vector is
/// its head's.
pub async fn embed_passages<P: EmbeddingProvider + ?Sized>(
    provider: &P,
    texts: &[&str],
) -> Result<Vec<Vec<Embedding>>> {
    let window = provider.window_bytes();
    let mut pieces: Vec<&str> = Vec::with_capacity(texts.len());
    let mut counts: Vec<usize> = Vec::with_capacity(texts.len());
    for text in texts {
        let cut: Vec<&str> = match window {
            Some(w) if text.len() > w => split_text(text, w)
                .into_iter()
                .filter_map(|r| text.get(r))
                .collect(),
            _ => Vec::new(),
        };
        if cut.is_empty() {
            pieces.push(text);
            counts.push(1);
        } else {
            counts.push(cut.len());
            pieces.extend(cut);
        }
    }
    let mut vectors = embed_all(provider, &pieces).await?.into_iter();
    Ok(counts
        .into_iter()
        .map(|n| vectors.by_ref().take(n).collect())
        .collect())
}

/// The passage `text` starts with under a window of `window` bytes
/// ([`EmbeddingProvider::window_bytes`]): the first piece [`split_text`] cuts, or the whole
/// text when it fits (or there is no window). Embedding it gives a memory embedded by its
/// head only ([`embeds_head_only`](crate::embeds_head_only)) its one vector.
pub fn head_passage(text: &str, window: Option<usize>) -> &str {
    match window {
        Some(w) => text.get(..cut_end(text, 0, w)).unwrap_or(text),
        None => text,
    }
}

/// Embeds any number of texts with `provider`, in batches of at most its `max_batch`,
/// checking that it returned one vector per text, in its own space.
pub async fn embed_all<P: EmbeddingProvider + ?Sized>(
    provider: &P,
    texts: &[&str],
) -> Result<Vec<Embedding>> {
    let space = provider.space();
    let mut out = Vec::with_capacity(texts.len());
    for chunk in texts.chunks(provider.max_batch().max(1)) {
        let batch = provider.embed_batch(chunk).await?;
        if batch.len() != chunk.len() {
            return Err(MemoryError::embedding(
                space.provider.clone(),
                format!("returned {} vectors for {} texts", batch.len(), chunk.len()),
            ));
        }
        for e in &batch {
            space.check(e, &format!("provider {}", space.provider))?;
        }
        out.extend(batch);
    }
    Ok(out)
}

macro_rules! forward_embedder {
    ($($ty:ty),*) => {$(
        #[async_trait]
        impl<T: EmbeddingProvider + ?Sized> EmbeddingProvider for $ty {
            fn space(&self) -> Arc<EmbeddingSpace> {
                (**self).space()
            }
            async fn embed_batch(&self, texts: &[&str]) -> Result<Vec<Embedding>> {
                (**self).embed_batch(texts).await
            }
            async fn embed(&self, text: &str) -> Result<Embedding> {
                (**self).embed(text).await
            }
            fn dimensions(&self) -> usize {
                (**self).dimensions()
            }
            fn max_batch(&self) -> usize {
                (**self).max_batch()
            }
            fn window_bytes(&self) -> Option<usize> {
                (**self).window_bytes()
            }
        }
    )*};
}

forward_embedder!(Arc<T>, Box<T>, &T);

#[cfg(test)]
mod tests {
    use super::*;

    fn space(model: &str, dims: usize) -> Arc<EmbeddingSpace> {
        Arc::new(EmbeddingSpace::new("test", model, dims).unwrap())
    }

    #[test]
    fn embeddings_check_length_and_finiteness() {
        let err = Embedding::new(space("m", 3), vec![1.0, 2.0]).unwrap_err();
        assert!(matches!(
            err,
            MemoryError::DimensionMismatch {
                got: 2,
                expected: 3,
                ..
            }
        ));
        assert!(Embedding::new(space("m", 2), vec![1.0, f32::NAN]).is_err());
        assert!(EmbeddingSpace::new("p", "m", 0).is_err());
    }

    #[test]
    fn spaces_refuse_foreign_vectors_with_both_numbers() {
        let store = space("small", 4);
        let other = Embedding::new(space("big", 8), vec![0.5; 8]).unwrap();
        let msg = store.check(&other, "store `x`").unwrap_err().to_string();
        assert!(
            msg.contains("8 dimensions") && msg.contains("expects 4") && msg.contains("small"),
            "{msg}"
        );
        let same_dims = Embedding::new(space("other-model", 4), vec![0.5; 4]).unwrap();
        assert!(matches!(
            store.check(&same_dims, "store"),
            Err(MemoryError::SpaceMismatch { .. })
        ));
    }

    #[test]
    fn cosine_handles_zero_vectors() {
        assert_eq!(cosine(&[0.0, 0.0], &[1.0, 0.0]), 0.0);
        assert!((cosine(&[1.0, 1.0], &[2.0, 2.0]) - 1.0).abs() < 1e-6);
    }
}
