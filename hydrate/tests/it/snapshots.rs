//! Snapshots of compiled prompts (messages and explain report) for a normal turn, a tight
//! budget, a missing provider, a slow source hitting its deadline, and a store without
//! vectors. Timestamps are fixed by the fixtures; memory ids and timings are redacted.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use common::{OBSERVATION, chat_scope, config, embedder, input, redacted, request, seed_alice};
use hydrate::{
    ContextSource, DegradationKind, ExplainReport, SourceItem, SourceKind, SourceOutput,
    SourceQuery, SourceStatus, compile, hydrate,
};
use memory_core::{MemoryBackend, MemoryKind};
use memory_inmem::InMemoryBackend;
use prompt_ir::Action;

/// The report reads back from its JSON as it was written (an app keeps it so, e.g. `ava`'s
/// prompt records), every field of it.
fn reads_back(report: &ExplainReport) {
    let json = serde_json::to_string(report).unwrap();
    let back: ExplainReport = serde_json::from_str(&json).unwrap();
    assert_eq!(
        serde_json::to_value(&back).unwrap(),
        serde_json::from_str::<serde_json::Value>(&json).unwrap()
    );
}

async fn alice(with_vectors: bool) -> Arc<dyn MemoryBackend> {
    let backend: Arc<dyn MemoryBackend> =
        Arc::new(InMemoryBackend::new(with_vectors.then(embedder)));
    seed_alice(backend.as_ref()).await;
    backend
}

/// Every kind served by the memory provider with hybrid search; everything fits.
#[tokio::test]
async fn normal_turn() {
    let backend = alice(true).await;
    let config = config(Arc::clone(&backend), Some(embedder()));
    let hydrated = hydrate(
        &config,
        &input(chat_scope("alice"), request(OBSERVATION, 8000)),
    )
    .await
    .unwrap();
    let prompt = compile(&config, &hydrated).unwrap();
    let report = &prompt.report;
    assert!(report.fits);
    assert!(report.degradations.is_empty(), "{:?}", report.degradations);
    assert!(
        report
            .sections
            .iter()
            .all(|s| matches!(s.action, Action::Kept { .. }))
    );
    for kind in SourceKind::MEMORY {
        assert_eq!(report.source(kind).unwrap().status, SourceStatus::Complete);
    }
    // The lentil dal recipe is found as a related message; the recent window is not repeated.
    let semantic = &prompt
        .messages
        .iter()
        .find(|m| m.content.contains("kind=\"semantic\""))
        .unwrap()
        .content;
    assert!(semantic.contains("red lentil dal"), "{semantic}");
    assert!(!semantic.contains("porridge"), "{semantic}");
    reads_back(report);
    insta::assert_yaml_snapshot!("normal_turn", redacted(&prompt));
}

/// A budget that cannot hold everything: low-value related messages and old knowledge go
/// first; the prefix, state and observation stay.
#[tokio::test]
async fn tight_budget() {
    let backend = alice(true).await;
    let config = config(Arc::clone(&backend), Some(embedder()));
    let hydrated = hydrate(
        &config,
        &input(chat_scope("alice"), request(OBSERVATION, TIGHT)),
    )
    .await
    .unwrap();
    let prompt = compile(&config, &hydrated).unwrap();
    let report = &prompt.report;
    assert!(report.fits, "{report:#?}");
    assert!(report.estimated_prompt_tokens <= TIGHT);
    // The estimate covers the messages as sent.
    let sent = common::sent_message_tokens(&prompt);
    assert!(sent <= report.estimated_prompt_tokens, "{sent}");
    assert!(
        report
            .sections
            .iter()
            .any(|s| matches!(s.action, Action::Dropped { .. }))
    );
    assert!(
        report
            .section("system")
            .is_some_and(|s| matches!(s.action, Action::Kept { .. }))
    );
    assert_eq!(prompt.messages.last().unwrap().content, OBSERVATION);
    reads_back(report);
    insta::assert_yaml_snapshot!("tight_budget", redacted(&prompt));
}

const TIGHT: u32 = 540;

/// Web search is wanted but no provider supplies it: the branch is skipped and reported.
#[tokio::test]
async fn missing_provider() {
    let backend = alice(true).await;
    let config = config(Arc::clone(&backend), Some(embedder())).with_kind(SourceKind::Web);
    let hydrated = hydrate(
        &config,
        &input(chat_scope("alice"), request(OBSERVATION, 8000)),
    )
    .await
    .unwrap();
    let prompt = compile(&config, &hydrated).unwrap();
    let report = &prompt.report;
    assert_eq!(
        report.source(SourceKind::Web).unwrap().status,
        SourceStatus::Missing
    );
    assert!(report.degraded(DegradationKind::MissingProvider));
    assert!(
        !prompt
            .messages
            .iter()
            .any(|m| m.content.contains("kind=\"web\""))
    );
    insta::assert_yaml_snapshot!("missing_provider", redacted(&prompt));
}

/// A knowledge source that finds one fact, then stalls.
#[derive(Debug)]
struct StallingKnowledge;

#[async_trait]
impl ContextSource for StallingKnowledge {
    fn name(&self) -> &str {
        "stalling-knowledge"
    }

    async fn fetch(&self, query: &SourceQuery<'_>, out: &mut SourceOutput) -> hydrate::Result<()> {
        let mut first = SourceItem::text("vegetarian", "Alice is vegetarian.");
        first.created_at = Some(common::at("2026-01-15T19:00:00Z"));
        first.memory_kind = Some(MemoryKind::Fact);
        out.push(first);
        tokio::time::sleep(Duration::from_secs(30)).await;
        out.push(SourceItem::text(
            "never",
            format!("found too late for {}", query.observation),
        ));
        Ok(())
    }
}

/// The knowledge source misses its 250 ms deadline: the fact it found before is kept, the
/// block says the result is partial, the report records the timeout; the other sources are
/// unaffected. (Tokio's paused clock makes the wait instant and deterministic.)
#[tokio::test(start_paused = true)]
async fn slow_source_hits_its_deadline() {
    let backend = alice(true).await;
    let config = config(Arc::clone(&backend), Some(embedder()))
        .with_source(SourceKind::Knowledge, Arc::new(StallingKnowledge))
        .with_deadline_for(SourceKind::Knowledge, Duration::from_millis(250));
    let hydrated = hydrate(
        &config,
        &input(chat_scope("alice"), request(OBSERVATION, 8000)),
    )
    .await
    .unwrap();
    let prompt = compile(&config, &hydrated).unwrap();
    let report = &prompt.report;
    let knowledge = report.source(SourceKind::Knowledge).unwrap();
    assert_eq!(knowledge.status, SourceStatus::Partial);
    assert_eq!((knowledge.returned, knowledge.kept), (1, 1));
    assert!(report.degraded(DegradationKind::Timeout));
    assert_eq!(
        report.source(SourceKind::Temporal).unwrap().status,
        SourceStatus::Complete
    );
    let block = &prompt
        .messages
        .iter()
        .find(|m| m.content.contains("kind=\"knowledge\""))
        .unwrap()
        .content;
    assert!(
        block.contains("Partial:") && block.contains("Alice is vegetarian."),
        "{block}"
    );
    assert!(!block.contains("too late"));
    insta::assert_yaml_snapshot!("slow_source", redacted(&prompt));
}

/// A store without vectors (no embedder): hybrid is not advertised, so knowledge and
/// semantic fall back to keyword search and the report says "asked hybrid, got keyword".
#[tokio::test]
async fn store_without_vectors() {
    let backend = alice(false).await;
    let config = config(Arc::clone(&backend), None);
    let hydrated = hydrate(
        &config,
        &input(chat_scope("alice"), request(OBSERVATION, 8000)),
    )
    .await
    .unwrap();
    let prompt = compile(&config, &hydrated).unwrap();
    let report = &prompt.report;
    let fallbacks: Vec<_> = report
        .degradations
        .iter()
        .filter(|d| d.kind == DegradationKind::SearchFallback)
        .collect();
    assert_eq!(fallbacks.len(), 2, "{fallbacks:?}");
    assert!(
        fallbacks
            .iter()
            .all(|d| d.message.starts_with("asked hybrid, got keyword"))
    );
    assert_eq!(common::semantic_search(report), Some("keyword"));
    reads_back(report);
    insta::assert_yaml_snapshot!("store_without_vectors", redacted(&prompt));
}
