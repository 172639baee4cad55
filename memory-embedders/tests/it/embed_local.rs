//! `LocalEmbedder` against the published all-MiniLM-L6-v2 reference similarities, when the
//! model directory exists (`cargo xtask fetch-model` puts it there; CI runs that first).

// Test helpers outside #[test] fns may unwrap too: a failure is a test failure.
use memory_core::{EmbeddingProvider, MemoryError, cosine, embed_all};
use memory_embedders::{
    FETCH_MODEL_COMMAND, LocalConfig, LocalEmbedder, ModelDir, resolve_model_dir,
};

/// The model directory when it is complete; otherwise prints one line saying the test is
/// skipped and which command fetches the model, or, with `AVA_REQUIRE_SERVICES=1` (CI,
/// which fetches the model first), fails.
fn model_dir(test: &str) -> Option<ModelDir> {
    let dir = resolve_model_dir(None).unwrap();
    if dir.is_complete() {
        Some(dir)
    } else {
        memory_core::testing::skip_or_fail(
            test,
            &format!("no local model in {} ({})", dir.path.display(), dir.source),
            &format!("run `{FETCH_MODEL_COMMAND}`"),
        );
        None
    }
}

fn load(dir: &ModelDir) -> LocalEmbedder {
    LocalEmbedder::load(&LocalConfig::in_dir(&dir.path)).unwrap()
}

#[tokio::test]
async fn matches_the_published_reference_similarities() {
    let Some(dir) = model_dir("matches_the_published_reference_similarities") else {
        return;
    };
    let embedder = load(&dir);
    let texts = [
        "The weather is lovely today.",
        "It's so sunny outside!",
        "He drove to the stadium.",
    ];

    let out = embedder.embed_batch(&texts).await.unwrap();

    let sunny = cosine(out[0].vector(), out[1].vector());
    let stadium = cosine(out[0].vector(), out[2].vector());
    println!("cosine(weather, sunny) = {sunny:.4}; cosine(weather, stadium) = {stadium:.4}");
    assert!(
        (sunny - 0.666).abs() <= 0.005,
        "weather vs sunny: {sunny}, reference 0.666"
    );
    assert!(
        (stadium - 0.105).abs() <= 0.005,
        "weather vs stadium: {stadium}, reference 0.105"
    );
}

#[tokio::test]
async fn vectors_are_unit_length_in_the_minilm_space() {
    let Some(dir) = model_dir("vectors_are_unit_length_in_the_minilm_space") else {
        return;
    };
    let embedder = load(&dir);

    let e = embedder.embed("Alice's cat is called Miso").await.unwrap();

    let space = embedder.space();
    assert_eq!(
        (space.provider.as_str(), space.model.as_str(), space.dims),
        ("local", "all-MiniLM-L6-v2", 384)
    );
    let norm: f32 = e.vector().iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!((norm - 1.0).abs() < 1e-4, "norm {norm}");
}

#[tokio::test]
async fn padding_does_not_change_a_text_s_vector() {
    let Some(dir) = model_dir("padding_does_not_change_a_text_s_vector") else {
        return;
    };
    let embedder = load(&dir);
    let short = "The weather is lovely today.";
    let long = "A considerably longer sentence that forces every shorter text in the same batch \
                to be padded with many extra padding tokens at the end.";

    let alone = embedder.embed(short).await.unwrap();
    let batched = embedder.embed_batch(&[long, short]).await.unwrap();

    let same = cosine(alone.vector(), batched[1].vector());
    assert!(same > 0.9999, "padding changed the vector: cosine {same}");
}

#[tokio::test]
async fn long_texts_are_truncated_and_order_is_kept_across_groups_and_batches() {
    let test = "long_texts_are_truncated_and_order_is_kept_across_groups_and_batches";
    let Some(dir) = model_dir(test) else { return };
    let huge = "memory ".repeat(5000);
    // More than one length-sorted group of 8, in an order unlike sorted order.
    let texts = [
        "cats",
        huge.as_str(),
        "",
        "Remind me to call the dentist on Thursday morning before work.",
        "dogs",
        "the stadium",
        "Bob prefers window seats on long flights and always orders the vegetarian meal.",
        "a",
        "She is allergic to peanuts.",
        "The quarterly report is due next Friday.",
        "He drove to the stadium.",
    ];
    for max_batch in [32, 3] {
        let embedder = LocalEmbedder::load(&LocalConfig {
            max_batch,
            ..LocalConfig::in_dir(&dir.path)
        })
        .unwrap();

        let out = embed_all(&embedder, &texts).await.unwrap();

        assert_eq!(out.len(), texts.len());
        for (text, batched) in texts.iter().zip(&out) {
            let alone = embedder.embed_blocking(&[text]).unwrap();
            let same = cosine(batched.vector(), alone[0].vector());
            assert!(
                same > 0.9999,
                "max_batch {max_batch}, {:.40}: cosine {same}",
                text
            );
        }
    }
}

#[test]
fn an_absent_model_dir_is_a_clear_error_naming_the_fetch_command() {
    let missing = std::env::temp_dir().join("ava-no-model-here");
    let err = LocalEmbedder::load(&LocalConfig::in_dir(&missing)).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, MemoryError::Embedding { .. }), "{err:?}");
    assert!(
        msg.contains("cargo xtask fetch-model") && msg.contains("ava-no-model-here"),
        "{msg}"
    );
}

#[tokio::test]
async fn keeps_the_embedder_contract() {
    let Some(dir) = model_dir("keeps_the_embedder_contract") else {
        return;
    };
    memory_core::testing::embedder_contract(&load(&dir)).await;
}
