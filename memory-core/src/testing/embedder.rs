//! The contract every [`EmbeddingProvider`] keeps, as one function each implementation's
//! tests call ([`embedder_contract`]): its space and dimensions agree, vectors have that
//! many finite, not all-zero components, a batch is one vector per text in order and equal
//! to embedding each text alone, the same text gives the same vector, different texts give
//! different ones, and an empty batch is empty.

use crate::{EmbeddingProvider, embed_all};

/// Least cosine between two embeddings of the same text (a model computes in floating
/// point, and a batch pads its shorter texts).
const SAME: f32 = 0.9999;

/// Cosine similarity of two vectors of one space.
fn cos(a: &[f32], b: &[f32]) -> f32 {
    crate::cosine(a, b)
}

/// Checks `provider` against the contract; panics naming the first broken rule.
pub async fn embedder_contract(provider: &dyn EmbeddingProvider) {
    let space = provider.space();
    let who = space.to_string();
    assert_eq!(
        provider.dimensions(),
        space.dims,
        "{who}: dimensions() must be the space's dims"
    );
    assert!(
        provider.max_batch() >= 1,
        "{who}: max_batch() must be at least 1"
    );

    let texts = [
        "My cat is called Pixel.",
        "The train to Oslo leaves at nine.",
        "Pixel sleeps on the red sofa.",
    ];
    let batch = provider
        .embed_batch(&texts)
        .await
        .unwrap_or_else(|e| panic!("{who}: embed_batch failed: {}", crate::ErrorChain(&e)));
    assert_eq!(batch.len(), texts.len(), "{who}: one vector per text");
    for (text, e) in texts.iter().zip(&batch) {
        assert_eq!(**e.space(), *space, "{who}: a vector of another space");
        assert_eq!(e.vector().len(), space.dims, "{who}: wrong length");
        assert!(
            e.vector().iter().all(|x| x.is_finite()),
            "{who}: a non-finite component for {text:?}"
        );
        assert!(
            e.vector().iter().any(|x| *x != 0.0),
            "{who}: an all-zero vector for {text:?}"
        );
        // In order: each batch vector is the text's own vector.
        let alone = provider
            .embed(text)
            .await
            .unwrap_or_else(|e| panic!("{who}: embed failed: {}", crate::ErrorChain(&e)));
        let same = cos(alone.vector(), e.vector());
        assert!(
            same >= SAME,
            "{who}: {text:?} embedded alone is not its batch vector (cosine {same})"
        );
    }
    let again = provider.embed(texts[0]).await.unwrap();
    assert_eq!(
        again.vector().len(),
        batch[0].vector().len(),
        "{who}: same text, another length"
    );
    assert!(
        cos(again.vector(), batch[0].vector()) >= SAME,
        "{who}: the same text gave another vector"
    );
    assert!(
        batch[0].vector() != batch[1].vector(),
        "{who}: different texts gave the same vector"
    );
    assert!(
        provider.embed_batch(&[]).await.unwrap().is_empty(),
        "{who}: an empty batch must give no vectors"
    );
    // More texts than one batch holds still come back one per text, in order.
    let many: Vec<String> = (0..provider.max_batch().min(64) + 1)
        .map(|i| format!("note number {i}"))
        .collect();
    let refs: Vec<&str> = many.iter().map(String::as_str).collect();
    let all = embed_all(provider, &refs).await.unwrap();
    assert_eq!(all.len(), refs.len(), "{who}: embed_all lost texts");
}
