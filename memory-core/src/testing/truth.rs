//! What a semantic search of long memories should give, computed from the memories' own
//! passages: the reference that the conformance scenarios and a backend's own tests check
//! its scores against.

use crate::{HashingEmbedder, Spread};

/// Each memory's similarity to a query as [`passage_truth`] computes it.
#[derive(Debug)]
pub struct PassageTruth {
    /// Per memory, in the order given: its best passage's cosine less what their number
    /// adds by chance ([`crate::passage_similarity`]).
    pub similarities: Vec<f32>,
    /// Per memory, its number of vectors (passages; 1 for a short memory).
    pub passages: Vec<usize>,
    /// The spread of the similarities of every vector of the memories, which are taken to
    /// be the whole scope.
    pub spread: Option<Spread>,
}

/// The similarities a backend embedding with `embedder` should give `texts` (the whole
/// scope) for `query`: each text cut into the passages `embedder`'s window takes
/// ([`crate::embed_passages`]), each passage's cosine to the query, the scope's spread over
/// all of them, and each memory's best passage less what their number adds by chance.
pub async fn passage_truth(
    embedder: &HashingEmbedder,
    texts: &[&str],
    query: &str,
) -> PassageTruth {
    let vectors = crate::embed_passages(embedder, texts).await.unwrap();
    let q = embedder.embed_sync(query);
    let cosines: Vec<Vec<f32>> = vectors
        .iter()
        .map(|p| {
            p.iter()
                .map(|v| crate::cosine(v.vector(), q.vector()))
                .collect()
        })
        .collect();
    let count = cosines.iter().map(Vec::len).sum();
    let spread = Spread::of(cosines.iter().flatten().copied(), count);
    let deviation = spread.map_or(0.0, Spread::std);
    PassageTruth {
        similarities: cosines
            .iter()
            .map(|c| {
                let best = c.iter().copied().fold(f32::MIN, f32::max);
                crate::passage_similarity(best, c.len(), deviation)
            })
            .collect(),
        passages: cosines.iter().map(|c| c.len().max(1)).collect(),
        spread,
    }
}
