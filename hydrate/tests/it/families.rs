//! Every provider family in one request: memories (temporal, knowledge, semantic), a
//! user's documents (vector), the entity graph, web search on a loopback SearxNG and an
//! HTTP reranker, first with room for all of them, then under a tight budget and deadlines;
//! then with the documents and graph behind a slow, then a failing, store.
//! Needs the `documents`, `graph`, `web-search` and `rerank-http` features (all on in
//! `--all-features`).

#![cfg(all(
    feature = "documents",
    feature = "graph",
    feature = "web-search",
    feature = "rerank-http"
))]
use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::{chat_scope, config, embedder, input, request, seed_alice};
use hydrate::{
    DegradationKind, DocumentSource, GraphSource, HydrationConfig, SourceKind, SourceStatus,
    WebSearchConfig, WebSearchSource, add_document, compile, hydrate, with_entity_tags,
};
use memory_core::{MemoryBackend, MemoryError, NewMemory};
use memory_inmem::InMemoryBackend;
use serde_json::json;
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

/// The usual question, naming someone the graph knows.
const QUESTION: &str = "Could Priya make that lentil dal again? What did it need?";
/// Names Priya and Chennai: a direct graph hit.
const DIRECT: &str = "Priya brought her dal recipe back from Chennai.";
/// Names only Chennai: reached one hop from Priya.
const HOP: &str = "The spice market in Chennai sells whole cumin by the kilo.";

async fn servers() -> (MockServer, MockServer) {
    let web = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "results": [
                {"url": "https://example.org/dal", "title": "Red lentil dal",
                 "content": "Simmer red lentils with onion, garlic, cumin and turmeric."},
                {"url": "https://example.org/tax", "title": "Tax forms 2024",
                 "content": "Download the forms."},
            ]
        })))
        .mount(&web)
        .await;
    // Whatever mentions cumin or turmeric first; the tax forms dropped.
    let rerank = common::spice_reranker().await;
    (web, rerank)
}

async fn setup(
    web: &MockServer,
    rerank: &MockServer,
    dir: &std::path::Path,
) -> (HydrationConfig, Arc<dyn MemoryBackend>) {
    let store: Arc<dyn MemoryBackend> = Arc::new(InMemoryBackend::new(Some(embedder())));
    let alice = chat_scope("alice");
    seed_alice(store.as_ref()).await;
    // Older than the conversation window, so the graph (not the recent turns) finds them.
    for (text, when) in [
        (DIRECT, "2025-12-01T12:00:00Z"),
        (HOP, "2025-12-02T12:00:00Z"),
    ] {
        store
            .store(
                &alice,
                with_entity_tags(NewMemory::new(text).at(common::at(when))),
            )
            .await
            .unwrap();
    }
    // Bob's memory names Priya too: it must not reach Alice.
    store
        .store(
            &chat_scope("bob"),
            with_entity_tags(NewMemory::new("Priya owes Bob the secret garam masala.")),
        )
        .await
        .unwrap();
    let doc = dir.join("dal.md");
    std::fs::write(
        &doc,
        "# Dal\n\nToast cumin seeds, add turmeric and red lentils, simmer 25 minutes.\n",
    )
    .unwrap();
    add_document(store.as_ref(), &alice, &doc).await.unwrap();
    let web = WebSearchSource::new(WebSearchConfig::new(web.uri()), Some(embedder())).unwrap();
    let mut cfg = config(Arc::clone(&store), Some(embedder()))
        .with_source(SourceKind::Web, Arc::new(web))
        .with_source(
            SourceKind::Vector,
            Arc::new(DocumentSource::new(Arc::clone(&store), Some(embedder())).unwrap()),
        )
        .with_source(
            SourceKind::Graph,
            Arc::new(GraphSource::new(Arc::clone(&store)).unwrap()),
        )
        .with_deadline(Duration::from_secs(2));
    cfg.reranker = common::reranker_of(rerank);
    (cfg, store)
}

#[tokio::test]
async fn every_family_reaches_the_prompt_and_fits_a_tight_budget() {
    let (web, rerank) = servers().await;
    let dir = tempfile::tempdir().unwrap();
    let (cfg, _) = setup(&web, &rerank, dir.path()).await;
    let run = async |budget: u32| {
        hydrate(&cfg, &input(chat_scope("alice"), request(QUESTION, budget)))
            .await
            .unwrap()
    };

    // Room for everything: every kind served, each family's item in the prompt with its
    // provenance, nothing of Bob's.
    let h = run(8000).await;
    assert!(h.degradations.is_empty(), "{:?}", h.degradations);
    for kind in [
        SourceKind::Temporal,
        SourceKind::Semantic,
        SourceKind::Vector,
        SourceKind::Graph,
        SourceKind::Web,
    ] {
        let s = h.sources.iter().find(|s| s.kind == kind).unwrap();
        assert_eq!(s.status, SourceStatus::Complete, "{s:?}");
        assert!(s.kept > 0, "{kind}: {s:?}");
    }
    let prompt = compile(&cfg, &h).unwrap();
    let text: String = prompt.messages.iter().map(|m| m.content.as_str()).collect();
    assert!(text.contains("dal.md:"), "document provenance: {text}");
    assert!(text.contains("via Priya → Chennai"), "graph hop: {text}");
    assert!(text.contains("example.org/dal"), "web: {text}");
    assert!(
        !text.contains("Tax forms"),
        "the reranker dropped it: {text}"
    );
    assert!(!text.contains("garam masala"), "Bob's memory: {text}");

    // Tight: it fits, something was cut for it, nothing degraded.
    for tight in [540u32, 420] {
        let h = run(tight).await;
        assert!(h.degradations.is_empty(), "{:?}", h.degradations);
        let prompt = compile(&cfg, &h).unwrap();
        let report = &prompt.report;
        assert!(
            report.fits && report.estimated_prompt_tokens <= tight,
            "{tight}: {report:#?}"
        );
        assert!(common::sent_message_tokens(&prompt) <= report.estimated_prompt_tokens);
        assert!(
            report
                .sections
                .iter()
                .any(|s| matches!(s.action, prompt_ir::Action::Dropped { .. })),
            "{tight}: the budget was tight: {report:#?}"
        );
        let text: String = prompt.messages.iter().map(|m| m.content.as_str()).collect();
        assert!(!text.contains("garam masala"), "{text}");
    }
}

/// The failure of a store in trouble, as the document and graph sources see it.
fn disk_gone() -> MemoryError {
    MemoryError::Backend {
        backend: "troubled".into(),
        message: "the disk went away".into(),
        source: None,
    }
}

/// Documents and graph behind a slow store miss their deadline, behind a failing one they
/// fail; either way the request goes on with what the other families found, and each
/// degradation names its kind.
#[tokio::test]
async fn slow_or_failing_documents_and_graph_degrade_the_request() {
    let (web, rerank) = servers().await;
    let dir = tempfile::tempdir().unwrap();
    let (cfg, store) = setup(&web, &rerank, dir.path()).await;
    // A timeout keeps what arrived before it (here nothing): partial; a failure: failed.
    for (delay, fail, expected, status) in [
        (
            Duration::from_millis(400),
            false,
            DegradationKind::Timeout,
            SourceStatus::Partial,
        ),
        (
            Duration::ZERO,
            true,
            DegradationKind::SourceFailed,
            SourceStatus::Failed,
        ),
    ] {
        let troubled: Arc<dyn MemoryBackend> = Arc::new(common::TroubledStore {
            inner: Arc::clone(&store),
            name: None,
            delay,
            error: fail.then_some(disk_gone as fn() -> MemoryError),
        });
        let cfg = cfg
            .clone()
            .with_source(
                SourceKind::Vector,
                Arc::new(DocumentSource::new(Arc::clone(&troubled), Some(embedder())).unwrap()),
            )
            .with_source(
                SourceKind::Graph,
                Arc::new(GraphSource::new(troubled).unwrap()),
            )
            .with_deadline_for(SourceKind::Vector, Duration::from_millis(100))
            .with_deadline_for(SourceKind::Graph, Duration::from_millis(100));
        let h = hydrate(&cfg, &input(chat_scope("alice"), request(QUESTION, 8000)))
            .await
            .unwrap();
        for kind in [SourceKind::Vector, SourceKind::Graph] {
            assert!(
                h.degradations
                    .iter()
                    .any(|d| d.source == Some(kind) && d.kind == expected),
                "{kind} {expected:?}: {:?}",
                h.degradations
            );
            let s = h.sources.iter().find(|s| s.kind == kind).unwrap();
            assert_eq!(s.status, status, "{s:?}");
            assert_eq!(s.kept, 0, "{s:?}");
        }
        let prompt = compile(&cfg, &h).unwrap();
        let text: String = prompt.messages.iter().map(|m| m.content.as_str()).collect();
        assert!(text.contains("example.org/dal"), "web still there: {text}");
        assert!(
            text.contains("red lentil dal"),
            "memories still there: {text}"
        );
        assert!(!text.contains("dal.md:"), "{text}");
    }
}
