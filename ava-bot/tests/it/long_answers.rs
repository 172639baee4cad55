//! A long answer found by meaning with the local model (all-MiniLM-L6-v2), as `ava` ships
//! it: the model reads 256 word pieces, about the first 1,000 characters, so a memory
//! longer than that is embedded as passages, and its semantic score is its best passage's.
//! Here, in the app that builds the model (hydrate's own tests use the hashing embedder).

use crate::common;

use std::sync::Arc;

use hydrate::testing::{LONG_ANSWER_QUESTION, LONG_ANSWER_SENTENCE, long_answer};
use hydrate::{HydrateInput, HydrationConfig, compile, hydrate};
use memory_core::{EmbeddingProvider, MemoryBackend, NewMemory, Role, Scope, Timestamp};
use prompt_ir::{ContextRequest, TokenBudget};

fn at(text: &str) -> Timestamp {
    Timestamp::parse_rfc3339(text).unwrap()
}

/// Stored as passages, the answer is found by meaning alone (a semantic search, no
/// keywords) through its last passage, at a similarity above its head's, and the
/// shipped config brings it into a 600-token prompt as an excerpt that holds the answering
/// sentence.
#[tokio::test]
async fn the_local_model_finds_a_long_answer_by_meaning_through_its_last_passage() {
    let Some(dir) = common::local_model() else {
        return;
    };
    let local =
        memory_embedders::LocalEmbedder::load(&memory_embedders::LocalConfig::in_dir(&dir.path))
            .unwrap();
    let embedder: Arc<dyn EmbeddingProvider> = Arc::new(local);
    let tmp = tempfile::tempdir().unwrap();
    let store: Arc<dyn MemoryBackend> = Arc::new(
        memory_sqlite::SqliteBackend::open(
            tmp.path().join("ava.db"),
            Some(Arc::clone(&embedder)),
            memory_sqlite::SqliteConfig::default(),
        )
        .await
        .unwrap(),
    );
    let scope = Scope::for_user("alice").unwrap().in_chat("tg-7").unwrap();
    let answer = long_answer();
    let mut turns = vec![
        NewMemory::new("Can you summarise everything we changed before the launch?")
            .with_role(Role::User)
            .at(at("2026-03-01T10:00:00Z")),
        NewMemory::new(answer.clone())
            .with_role(Role::Assistant)
            .at(at("2026-03-01T10:01:00Z")),
    ];
    for said in [
        "My sister's birthday is in May.",
        "The train to Porto leaves at nine.",
        "I bought new running shoes yesterday.",
        "The cat knocked over the plant again.",
    ] {
        turns.push(
            NewMemory::new(said)
                .with_role(Role::User)
                .at(at("2026-03-05T12:00:00Z")),
        );
    }
    let id = store.store_batch(&scope, turns).await.unwrap()[1].id;
    let window = embedder
        .window_bytes()
        .expect("the local model has a window");
    assert!(
        answer.len() > 4 * window,
        "{} bytes, window {window}",
        answer.len()
    );

    let hits = store
        .search(
            &scope,
            &memory_core::SearchRequest::semantic(LONG_ANSWER_QUESTION).limit(4),
        )
        .await
        .unwrap();
    // The user's own question about the launch may come first; the answer is next, ahead
    // of every unrelated turn.
    let rank = hits.iter().position(|h| h.entry.id == id);
    assert!(rank.is_some_and(|i| i < 2), "{hits:#?}");
    let found = hits[rank.unwrap_or(0)]
        .breakdown
        .semantic
        .expect("a semantic hit");
    let q = embedder.embed(LONG_ANSWER_QUESTION).await.unwrap();
    let head = memory_core::cosine(q.vector(), embedder.embed(&answer).await.unwrap().vector());
    // The hit's similarity is its best passage's less what its number of passages adds
    // (memory_core::passage_similarity), so it is above the head's own only if a later
    // passage matched better than the head by more than that.
    assert!(
        found > head,
        "found through a passage at {found}, the head alone is at {head}"
    );

    // The user's own question about the launch matches every keyword and sets the scale of
    // the fused scores, so the answer's relevance is below the product's floor: the prompt
    // leaves it out (it is not worth its tokens by that measure). Without the floor, the part
    // of it that answers the question reaches the prompt as an excerpt.
    let product = hydrate::product::config(Arc::clone(&store), Some(embedder)).unwrap();
    let request = ContextRequest::new(LONG_ANSWER_QUESTION, TokenBudget::new(600).unwrap());
    let input = HydrateInput::new(scope.clone(), request).at(at("2026-03-10T09:30:00Z"));
    let floored = compile(&product, &hydrate(&product, &input).await.unwrap()).unwrap();
    let answer = floored
        .report
        .sections
        .iter()
        .find(|s| s.memory_id == Some(id))
        .expect("the long answer was retrieved");
    assert_eq!(
        answer.reason,
        prompt_ir::Reason::BelowRelevanceFloor.to_string(),
        "{answer:?}"
    );
    let config = HydrationConfig {
        memory_tools: false,
        relevance_floor: 0.0,
        ..product
    };
    let request = ContextRequest::new(LONG_ANSWER_QUESTION, TokenBudget::new(600).unwrap());
    let input = HydrateInput::new(scope, request).at(at("2026-03-10T09:30:00Z"));
    let p = compile(&config, &hydrate(&config, &input).await.unwrap()).unwrap();
    assert!(p.report.fits, "{:#?}", p.report);
    let data: String = p.messages[1..p.messages.len() - 1]
        .iter()
        .map(|m| m.content.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        data.contains(LONG_ANSWER_SENTENCE),
        "{data}\n{:#?}",
        p.report.sections
    );
    let section = p
        .report
        .sections
        .iter()
        .find(|s| s.memory_id == Some(id))
        .expect("the long answer was retrieved");
    assert!(section.excerpt.is_some(), "{section:?}");
}
