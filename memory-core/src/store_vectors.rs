//! `StoreVectors`: the vector rules every backend applies the same way: checking vectors
//! callers offer, choosing the query vector, and embedding memories that came without one.

use std::borrow::Cow;
use std::fmt;

use crate::capability::Capability;
use crate::embedding::{
    Embedding, EmbeddingProvider, EmbeddingSpace, embed_passages, head_passage,
};
use crate::entry::{MemoryEntry, NewMemory, Tag, embeds_head_only};
use crate::error::{MemoryError, Result};
use crate::query::SearchRequest;
use crate::scope::Scope;
use crate::time::Timestamp;

/// A store's embedding side, borrowed for one call: its embedder, the space its vectors
/// live in, and the names its errors use.
///
/// A backend builds one where it needs it and leaves the vector rules to it, so every
/// backend refuses the same vectors with the same errors.
///
/// ```
/// # async fn demo() -> memory_core::Result<()> {
/// use memory_core::{EmbeddingProvider, HashingEmbedder, SearchRequest, StoreVectors};
/// let embedder = HashingEmbedder::new(8)?;
/// let space = embedder.space();
/// let vectors = StoreVectors {
///     backend: "my-backend",
///     store: "store `notes`".into(),
///     embedder: Some(&embedder),
///     space: Some(&space),
/// };
/// let q = vectors.query_vector(&SearchRequest::semantic("cat")).await?;
/// assert_eq!(q.len(), 8);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct StoreVectors<'a> {
    /// The backend's name (`memory-sqlite`), for the error when the store takes no vectors.
    pub backend: &'a str,
    /// The store, for the error about a vector of another space (``store `bot.db` ``).
    pub store: Cow<'a, str>,
    /// The store's embedder; `None` for a keyword-only store, which takes no vectors.
    pub embedder: Option<&'a dyn EmbeddingProvider>,
    /// The space the store's vectors live in. Vectors are taken only when there is both an
    /// embedder and a space.
    pub space: Option<&'a EmbeddingSpace>,
}

impl fmt::Debug for StoreVectors<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoreVectors")
            .field("backend", &self.backend)
            .field("store", &self.store)
            .field("embedder", &self.embedder.map(|_| ".."))
            .field("space", &self.space)
            .finish()
    }
}

impl StoreVectors<'_> {
    /// Checks a vector offered to the store, with a memory or as a query: it must be of
    /// the store's space ([`MemoryError::DimensionMismatch`], [`MemoryError::SpaceMismatch`]);
    /// a store without an embedder takes none ([`MemoryError::Unsupported`], naming the
    /// backend).
    pub fn check(&self, embedding: &Embedding) -> Result<()> {
        match (self.space, self.embedder) {
            (Some(space), Some(_)) => space.check(embedding, &self.store),
            _ => Err(MemoryError::Unsupported {
                capability: Capability::SemanticSearch,
                provider: format!(
                    "{} (without an embedder, so it takes no vectors)",
                    self.backend
                ),
            }),
        }
    }

    /// The vector a semantic or hybrid search ranks by: the request's own vector (checked
    /// with [`StoreVectors::check`]), else its query text embedded by the store's embedder.
    ///
    /// Fails with [`MemoryError::InvalidInput`] when there is neither a vector nor text to
    /// embed with an embedder.
    pub async fn query_vector(&self, request: &SearchRequest) -> Result<Vec<f32>> {
        if let Some(v) = &request.vector {
            self.check(v)?;
            return Ok(v.vector().to_vec());
        }
        match (self.embedder, request.query_text()) {
            (Some(e), Some(text)) => Ok(e.embed(text).await?.into_vector()),
            _ => Err(MemoryError::invalid(
                "query",
                "semantic search needs query text or a query vector",
            )),
        }
    }

    /// The vectors of a memory's new text (an update): one per passage, as
    /// [`StoreVectors::embed_missing`] computes them; empty without an embedder.
    pub async fn embed_text(&self, text: &str) -> Result<Vec<Vec<f32>>> {
        match self.embedder {
            Some(embedder) => Ok(embed_passages(embedder, &[text])
                .await?
                .into_iter()
                .flatten()
                .map(Embedding::into_vector)
                .collect()),
            None => Ok(Vec::new()),
        }
    }

    /// Takes each memory's given vector and embeds the content of those without one, in
    /// batches: one entry per memory, in order, holding its vectors (empty where the store
    /// has no embedder). A given vector is the memory's only one; a computed one is one
    /// per passage ([`embed_passages`]: a memory longer than the embedder's window gets
    /// one vector per passage that fits it, the head's first), except for a later part of a
    /// message kept in parts, which gets one, its head's ([`embeds_head_only`],
    /// [`head_passage`]): so what one message costs the embedder is bounded.
    ///
    /// Given vectors are not checked here: check the batch first
    /// ([`NewMemory::validate_batch`] with [`StoreVectors::check`]).
    pub async fn embed_missing(&self, memories: &mut [NewMemory]) -> Result<Vec<Vec<Vec<f32>>>> {
        let mut vectors: Vec<Vec<Vec<f32>>> = memories
            .iter_mut()
            .map(|m| {
                m.embedding
                    .take()
                    .map(|e| vec![e.into_vector()])
                    .unwrap_or_default()
            })
            .collect();
        if let Some(embedder) = self.embedder {
            let missing: Vec<usize> = (0..memories.len())
                .filter(|i| vectors[*i].is_empty())
                .collect();
            let window = embedder.window_bytes();
            let texts: Vec<&str> = missing
                .iter()
                .map(|i| {
                    let m = &memories[*i];
                    match embeds_head_only(m.tags.iter().map(Tag::as_str)) {
                        true => head_passage(&m.content, window),
                        false => m.content.as_str(),
                    }
                })
                .collect();
            let computed = embed_passages(embedder, &texts).await?;
            for (i, e) in missing.into_iter().zip(computed) {
                vectors[i] = e.into_iter().map(Embedding::into_vector).collect();
            }
        }
        Ok(vectors)
    }

    /// The opening every backend's `store_batch` shares: the batch checked
    /// ([`NewMemory::validate_batch`] with [`StoreVectors::check`]), what came without a
    /// vector embedded ([`StoreVectors::embed_missing`]), and each memory made the entry it
    /// will be in `scope`, stamped now; with each entry's vectors, in order. Nothing is
    /// written.
    pub async fn prepare_batch(
        &self,
        scope: &Scope,
        mut memories: Vec<NewMemory>,
        max_content_bytes: usize,
    ) -> Result<(Vec<MemoryEntry>, Vec<Vec<Vec<f32>>>)> {
        NewMemory::validate_batch(&memories, max_content_bytes, |e| self.check(e))?;
        let vectors = self.embed_missing(&mut memories).await?;
        let now = Timestamp::now();
        let entries = memories
            .into_iter()
            .zip(&vectors)
            .map(|(m, v)| m.into_entry(scope, now, !v.is_empty()))
            .collect();
        Ok((entries, vectors))
    }

    /// One memory checked as a batch of one ([`NewMemory::validate_batch`] with
    /// [`StoreVectors::check`]: content of at most `max_content_bytes`, a given vector of the
    /// store's space) and embedded as [`StoreVectors::embed_missing`] embeds: the memory, its
    /// given vector taken out, and its vectors (one per passage; none without an embedder).
    pub async fn check_and_embed_one(
        &self,
        memory: NewMemory,
        max_content_bytes: usize,
    ) -> Result<(NewMemory, Vec<Vec<f32>>)> {
        NewMemory::validate_batch(std::slice::from_ref(&memory), max_content_bytes, |e| {
            self.check(e)
        })?;
        let mut memories = [memory];
        let mut vectors = self.embed_missing(&mut memories).await?;
        let [memory] = memories;
        Ok((memory, vectors.pop().unwrap_or_default()))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::HashingEmbedder;

    const STORE: &str = "store `test.db`";

    fn with<'a>(embedder: &'a HashingEmbedder, space: &'a EmbeddingSpace) -> StoreVectors<'a> {
        StoreVectors {
            backend: "test-backend",
            store: STORE.into(),
            embedder: Some(embedder),
            space: Some(space),
        }
    }

    fn without<'a>(space: Option<&'a EmbeddingSpace>) -> StoreVectors<'a> {
        StoreVectors {
            backend: "test-backend",
            store: STORE.into(),
            embedder: None,
            space,
        }
    }

    fn vector(provider: &str, model: &str, dims: usize) -> Embedding {
        let space = Arc::new(EmbeddingSpace::new(provider, model, dims).unwrap());
        Embedding::new(space, vec![0.5; dims]).unwrap()
    }

    #[test]
    fn vectors_must_be_of_the_store_space() {
        let embedder = HashingEmbedder::new(4).unwrap();
        let space = embedder.space();
        let vectors = with(&embedder, &space);
        let own = vector(HashingEmbedder::PROVIDER, HashingEmbedder::MODEL, 4);
        assert!(vectors.check(&own).is_ok());

        let err = vectors
            .check(&vector(
                HashingEmbedder::PROVIDER,
                HashingEmbedder::MODEL,
                3,
            ))
            .unwrap_err();
        assert!(
            matches!(&err, MemoryError::DimensionMismatch { got: 3, expected: 4, what, .. } if what == STORE),
            "{err:?}"
        );
        let msg = err.to_string();
        assert!(
            msg.contains("3 dimensions") && msg.contains("expects 4"),
            "{msg}"
        );

        let err = vectors.check(&vector("other", "model", 4)).unwrap_err();
        assert!(
            matches!(&err, MemoryError::SpaceMismatch { what, .. } if what == STORE),
            "{err:?}"
        );
    }

    #[test]
    fn a_store_without_an_embedder_takes_no_vectors_and_says_which_store() {
        let space = EmbeddingSpace::new("p", "m", 4).unwrap();
        // A recorded space alone does not make the store take vectors.
        for vectors in [without(None), without(Some(&space))] {
            let err = vectors.check(&vector("p", "m", 4)).unwrap_err();
            assert!(
                matches!(
                    &err,
                    MemoryError::Unsupported { capability: Capability::SemanticSearch, provider }
                        if provider.contains("test-backend") && provider.contains("without an embedder")
                ),
                "{err:?}"
            );
        }
    }

    #[tokio::test]
    async fn query_vectors_come_from_the_request_or_the_embedder() {
        let embedder = HashingEmbedder::new(4).unwrap();
        let space = embedder.space();
        let vectors = with(&embedder, &space);

        let given = Embedding::new(Arc::clone(&space), vec![0.0, 1.0, 0.0, 0.0]).unwrap();
        let q = vectors
            .query_vector(&SearchRequest::vector(given))
            .await
            .unwrap();
        assert_eq!(q, [0.0, 1.0, 0.0, 0.0]);

        let q = vectors
            .query_vector(&SearchRequest::semantic("cats purr"))
            .await
            .unwrap();
        assert_eq!(q, embedder.embed_sync("cats purr").into_vector());

        let foreign = SearchRequest::vector(vector(HashingEmbedder::PROVIDER, "m", 2));
        assert!(matches!(
            vectors.query_vector(&foreign).await,
            Err(MemoryError::DimensionMismatch {
                got: 2,
                expected: 4,
                ..
            })
        ));
    }

    #[tokio::test]
    async fn a_query_needs_text_or_a_vector() {
        let embedder = HashingEmbedder::new(4).unwrap();
        let space = embedder.space();
        let blank = SearchRequest::semantic("   ");
        for vectors in [with(&embedder, &space), without(Some(&space))] {
            assert!(matches!(
                vectors.query_vector(&blank).await,
                Err(MemoryError::InvalidInput { field: "query", .. })
            ));
        }
        // Text alone is not enough without an embedder to embed it.
        assert!(matches!(
            without(Some(&space))
                .query_vector(&SearchRequest::semantic("cats"))
                .await,
            Err(MemoryError::InvalidInput { field: "query", .. })
        ));
    }

    #[tokio::test]
    async fn missing_vectors_are_embedded_and_given_ones_kept() {
        let embedder = HashingEmbedder::new(4).unwrap();
        let space = embedder.space();
        let given = Embedding::new(Arc::clone(&space), vec![1.0, 0.0, 0.0, 0.0]).unwrap();
        let batch = || {
            vec![
                NewMemory::new("cats purr"),
                NewMemory::new("dogs bark").with_embedding(given.clone()),
            ]
        };

        let mut memories = batch();
        let out = with(&embedder, &space)
            .embed_missing(&mut memories)
            .await
            .unwrap();
        assert_eq!(
            out,
            [
                vec![embedder.embed_sync("cats purr").into_vector()],
                vec![vec![1.0, 0.0, 0.0, 0.0]],
            ]
        );
        assert!(memories.iter().all(|m| m.embedding.is_none()));

        let mut memories = vec![NewMemory::new("cats purr")];
        let out = without(None).embed_missing(&mut memories).await.unwrap();
        assert_eq!(out, [Vec::<Vec<f32>>::new()]);
    }

    #[tokio::test]
    async fn a_message_in_parts_is_embedded_passage_by_passage_in_its_first_part_only() {
        let embedder = HashingEmbedder::new(16).unwrap().with_window(200);
        let space = embedder.space();
        let text: String = (0..600)
            .map(|i| format!("Sentence {i} is here. "))
            .collect();
        let mut parts = NewMemory::new(text).split_to_fit(2000);
        assert!(parts.len() >= 6, "{}", parts.len());
        let heads: Vec<String> = parts
            .iter()
            .map(|p| head_passage(&p.content, Some(200)).to_owned())
            .collect();
        let out = with(&embedder, &space)
            .embed_missing(&mut parts)
            .await
            .unwrap();
        // The first part by every passage that fits the window...
        assert!(out[0].len() >= 10, "{}", out[0].len());
        assert_eq!(out[0][0], embedder.embed_sync(&heads[0]).into_vector());
        // ...each later one by its head: one vector.
        for (vectors, head) in out[1..].iter().zip(&heads[1..]) {
            assert_eq!(*vectors, [embedder.embed_sync(head).into_vector()]);
        }
    }
}
