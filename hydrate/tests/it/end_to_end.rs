//! End to end on the durable store: memory-sqlite with the deterministic `HashingEmbedder`,
//! hydrate and compile. Two users share one file: each prompt holds only its own user's
//! memories. The compiled prompt, counted for real, fits the budget; a store opened without
//! an embedder falls back to keyword search and says so.

use crate::common;

use std::sync::Arc;

use common::{OBSERVATION, chat_scope, input, request, seed_alice, tokenizer, user_scope};
use hydrate::{
    CompiledPrompt, DegradationKind, HydrationConfig, SessionState, SourceKind, SourceStatus,
    compile, hydrate, memory_provider,
};
use memory_core::{MemoryBackend, MemoryKind, NewMemory, Role, Scope};
use memory_sqlite::{SqliteBackend, SqliteConfig};

async fn open(path: &std::path::Path, with_embedder: bool) -> Arc<dyn MemoryBackend> {
    let embedder = with_embedder.then(common::embedder);
    Arc::new(
        SqliteBackend::open(path, embedder, SqliteConfig::default())
            .await
            .unwrap(),
    )
}

const BOB: [&str; 3] = [
    "Bob's lentil dal secret is smoked paprika and a lot of ginger.",
    "Bob is allergic to peanuts.",
    "Could I make that lentil dal again? Bob asked this last week too.",
];

async fn seed_bob(backend: &dyn MemoryBackend) {
    let chat = chat_scope("bob");
    backend
        .store_batch(
            &chat,
            vec![
                NewMemory::new(BOB[0])
                    .with_role(Role::User)
                    .at(common::at("2026-03-01T12:00:00Z")),
                NewMemory::new(BOB[2])
                    .with_role(Role::User)
                    .at(common::at("2026-03-03T12:00:00Z")),
            ],
        )
        .await
        .unwrap();
    backend
        .store(
            &user_scope("bob"),
            NewMemory::new(BOB[1]).with_kind(MemoryKind::Fact),
        )
        .await
        .unwrap();
}

fn cfg(backend: &Arc<dyn MemoryBackend>, with_embedder: bool) -> HydrationConfig {
    let mut c = HydrationConfig::new(common::SYSTEM_PROMPT, tokenizer()).with_provider(
        memory_provider(Arc::clone(backend), with_embedder.then(common::embedder)),
    );
    // A conversation block of the newest few messages, so the older ones are searched for.
    c.conversation_share = 0.02;
    c
}

async fn prompt_for(config: &HydrationConfig, scope: Scope, budget: u32) -> CompiledPrompt {
    // No state lines: the fixture's state names Alice.
    let input = input(scope, request(OBSERVATION, budget)).with_state(SessionState::default());
    let hydrated = hydrate(config, &input).await.unwrap();
    compile(config, &hydrated).unwrap()
}

fn text(prompt: &CompiledPrompt) -> String {
    prompt
        .messages
        .iter()
        .map(|m| m.content.as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Counts the prompt as it would be sent: every message, the per-message overhead, tools.
fn real_tokens(prompt: &CompiledPrompt) -> u32 {
    let tok = tokenizer();
    let messages = common::sent_message_tokens(prompt);
    let tools: u32 = prompt
        .tools
        .iter()
        .map(|t| tok.count(&format!("{}\n{}\n{}", t.name, t.description, t.parameters)))
        .sum();
    messages + tools
}

#[tokio::test]
async fn sqlite_hashing_embedder_hydrate_compile() {
    let dir = tempfile::tempdir().unwrap();
    let backend = open(&dir.path().join("ava.db"), true).await;
    seed_alice(backend.as_ref()).await;
    seed_bob(backend.as_ref()).await;
    let config = cfg(&backend, true);

    let alice = prompt_for(&config, chat_scope("alice"), 8000).await;
    let report = &alice.report;
    assert!(report.degradations.is_empty(), "{:?}", report.degradations);
    for kind in SourceKind::MEMORY {
        let s = report.source(kind).unwrap();
        assert_eq!(s.status, SourceStatus::Complete, "{s:?}");
        assert!(s.kept > 0, "{s:?}");
    }
    assert_eq!(common::semantic_search(report), Some("hybrid"));
    let all = text(&alice);
    assert!(all.contains("Try a red lentil dal"), "{all}");
    assert!(
        all.contains("Alice works night shifts as a nurse. (user-wide)"),
        "{all}"
    );
    for bob in BOB {
        assert!(!all.contains(bob), "Bob's memory in Alice's prompt: {bob}");
    }

    // Two users, same question, same store: Bob's prompt holds none of Alice's memories,
    // and every memory in his report is his.
    let bob = prompt_for(&config, chat_scope("bob"), 8000).await;
    let bob_text = text(&bob);
    assert!(bob_text.contains("smoked paprika") && bob_text.contains("allergic to peanuts"));
    for forbidden in [
        "Miso",
        "vegetarian",
        "nurse",
        "red lentils, onion",
        "porridge",
        "Alice",
    ] {
        assert!(
            !bob_text.contains(forbidden),
            "Alice's `{forbidden}` in Bob's prompt"
        );
    }
    for s in bob.report.sections.iter().filter_map(|s| s.memory_id) {
        let mine = backend.get(&chat_scope("bob"), s).await.is_ok()
            || backend.get(&user_scope("bob"), s).await.is_ok();
        assert!(mine, "memory {s} in Bob's prompt is not Bob's");
    }

    // Searches counted as recalls: the related dal message was recalled once.
    let mut dal = None;
    for id in alice
        .report
        .sections
        .iter()
        .filter(|s| s.id.starts_with("semantic:"))
        .filter_map(|s| s.memory_id)
    {
        let e = backend.get(&chat_scope("alice"), id).await.unwrap();
        if e.content.starts_with("Try a red lentil dal") {
            dal = Some(id);
        }
    }
    let dal = dal.expect("the dal message is a related message");
    assert_eq!(
        backend
            .get(&chat_scope("alice"), dal)
            .await
            .unwrap()
            .access_count,
        1
    );

    // Counted for real, the prompt fits, at a roomy and at a tight budget.
    for budget in [8000, 520] {
        let p = prompt_for(&config, chat_scope("alice"), budget).await;
        assert!(p.report.fits, "{budget}: {:?}", p.report.budget);
        let real = real_tokens(&p);
        assert!(
            real <= p.report.budget.available,
            "{budget}: {real} tokens sent"
        );
        assert!(
            real <= p.report.estimated_prompt_tokens,
            "{budget}: estimate {} < real {real}",
            p.report.estimated_prompt_tokens
        );
    }
}

#[tokio::test]
async fn sqlite_without_embedder_falls_back_to_keyword() {
    let dir = tempfile::tempdir().unwrap();
    let backend = open(&dir.path().join("keyword-only.db"), false).await;
    seed_alice(backend.as_ref()).await;
    let prompt = prompt_for(&cfg(&backend, false), chat_scope("alice"), 8000).await;
    let report = &prompt.report;
    let fallback: Vec<_> = report
        .degradations
        .iter()
        .filter(|d| d.kind == DegradationKind::SearchFallback)
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        fallback,
        [
            "knowledge: asked hybrid, got keyword: memory-sqlite does not support hybrid search",
            "semantic: asked hybrid, got keyword: memory-sqlite does not support hybrid search",
        ]
    );
    assert!(text(&prompt).contains("Try a red lentil dal"));
}
