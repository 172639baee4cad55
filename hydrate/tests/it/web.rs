//! Web search against a loopback server speaking SearxNG's JSON API: results reach the
//! prompt as a web block with their URLs, scored against the question; a slow, refusing or
//! garbled server degrades the request instead of failing it. Last, every family at once
//! (memories, web, an HTTP reranker) under a tight budget and deadlines.
//! Needs the `web-search` and `rerank-http` features (on in `--all-features`).

#![cfg(all(feature = "web-search", feature = "rerank-http"))]
use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::{chat_scope, config, embedder, input, request, seed_alice};
use hydrate::{
    Hydrated, HydrationConfig, SourceKind, SourceStatus, WebSearchConfig, WebSearchSource, compile,
    hydrate,
};
use memory_inmem::InMemoryBackend;
use serde_json::{Value, json};
use wiremock::matchers::{method, path, query_param};
use wiremock::{Mock, MockServer, ResponseTemplate};

/// SearxNG's answer shape, trimmed to what matters plus the fields it also sends.
fn answer() -> Value {
    json!({
        "query": "lentil dal",
        "number_of_results": 3,
        "results": [
            {"url": "https://example.org/dal", "title": "Red lentil dal",
             "content": "Simmer red lentils with onion, garlic, cumin and turmeric.",
             "engine": "duckduckgo", "score": 4.0, "category": "general"},
            {"url": "https://example.org/dal", "title": "Red lentil dal (mirror)",
             "content": "The same page again.", "engine": "bing", "score": 1.0},
            {"url": "https://example.org/tax", "title": "Tax forms 2024",
             "content": "Download the forms.", "engine": "bing", "score": 0.5},
        ],
        "answers": [], "suggestions": [], "infoboxes": [],
    })
}

async fn memories() -> Arc<dyn memory_core::MemoryBackend> {
    let backend: Arc<dyn memory_core::MemoryBackend> =
        Arc::new(InMemoryBackend::new(Some(embedder())));
    seed_alice(backend.as_ref()).await;
    backend
}

/// The usual config plus web search at `server` (web deadline `deadline`).
async fn with_web(server: &MockServer, deadline: Duration) -> HydrationConfig {
    let web = WebSearchSource::new(
        WebSearchConfig {
            language: Some("en".into()),
            ..WebSearchConfig::new(server.uri())
        },
        Some(embedder()),
    )
    .unwrap();
    config(memories().await, Some(embedder()))
        .with_source(SourceKind::Web, Arc::new(web))
        .with_deadline_for(SourceKind::Web, deadline)
}

async fn run(cfg: &HydrationConfig, budget: u32) -> Hydrated {
    hydrate(
        cfg,
        &input(chat_scope("alice"), request(common::OBSERVATION, budget)),
    )
    .await
    .unwrap()
}

fn web_report(h: &Hydrated) -> (SourceStatus, usize) {
    let w = h
        .sources
        .iter()
        .find(|s| s.kind == SourceKind::Web)
        .unwrap();
    (w.status, w.kept)
}

#[tokio::test]
async fn results_reach_the_prompt_with_their_urls() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/search"))
        .and(query_param("q", common::OBSERVATION))
        .and(query_param("format", "json"))
        .and(query_param("language", "en"))
        .respond_with(ResponseTemplate::new(200).set_body_json(answer()))
        .expect(1)
        .mount(&server)
        .await;
    let cfg = with_web(&server, Duration::from_secs(2)).await;
    let h = run(&cfg, 8000).await;
    // Two distinct pages: the mirror of the first URL is left out.
    assert_eq!(web_report(&h), (SourceStatus::Complete, 2));
    let prompt = compile(&cfg, &h).unwrap();
    let text: String = prompt.messages.iter().map(|m| m.content.as_str()).collect();
    assert!(text.contains("<recalled-memory kind=\"web\">"), "{text}");
    assert!(
        text.contains(
            "- Red lentil dal: Simmer red lentils with onion, garlic, cumin and turmeric. \
             (https://example.org/dal)"
        ),
        "{text}"
    );
    assert!(!text.contains("mirror"), "{text}");
    // Memories are still there beside the web results.
    assert!(text.contains("lentil"), "{text}");
    // Scored against the question: the dal page above the tax forms.
    let sim = |url: &str| -> f64 {
        h.sections
            .iter()
            .filter(|(_, info)| info.found_by.contains(&SourceKind::Web))
            .find(|(id, _)| {
                h.ir.sections()
                    .iter()
                    .any(|s| s.id() == id.as_str() && s.content().contains(url))
            })
            .and_then(|(_, info)| info.scores.as_ref()?.similarity)
            .unwrap_or_else(|| panic!("{url} scored"))
    };
    assert!(sim("example.org/dal") > sim("example.org/tax"));
}

/// The web source's degradation message when the server answers `response`; the
/// memories still make the prompt.
async fn degraded(response: ResponseTemplate, deadline: Duration) -> (SourceStatus, String) {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(response)
        .mount(&server)
        .await;
    let cfg = with_web(&server, deadline).await;
    let h = run(&cfg, 8000).await;
    let prompt = compile(&cfg, &h).unwrap();
    let text: String = prompt.messages.iter().map(|m| m.content.as_str()).collect();
    assert!(text.contains("lentil"), "memories kept: {text}");
    let d: Vec<_> = h
        .degradations
        .iter()
        .filter(|d| d.source == Some(SourceKind::Web))
        .collect();
    assert_eq!(d.len(), 1, "{:?}", h.degradations);
    (
        web_report(&h).0,
        format!("{:?}: {}", d[0].kind, d[0].message),
    )
}

#[tokio::test]
async fn a_slow_server_is_cut_off_at_the_web_deadline() {
    let (status, msg) = degraded(
        ResponseTemplate::new(200)
            .set_body_json(answer())
            .set_delay(Duration::from_secs(5)),
        Duration::from_millis(300),
    )
    .await;
    assert_ne!(status, SourceStatus::Complete);
    assert!(msg.starts_with("Timeout"), "{msg}");
}

#[tokio::test]
async fn a_server_without_json_says_how_to_enable_it() {
    let (status, msg) = degraded(
        ResponseTemplate::new(403).set_body_string("Forbidden"),
        Duration::from_secs(2),
    )
    .await;
    assert_eq!(status, SourceStatus::Failed);
    assert!(msg.contains("formats: [html, json]"), "{msg}");
}

#[tokio::test]
async fn a_garbled_answer_says_what_was_expected() {
    let (_, msg) = degraded(
        ResponseTemplate::new(200).set_body_string("<html>results</html>"),
        Duration::from_secs(2),
    )
    .await;
    assert!(
        msg.contains("not a search result") && msg.contains("\"results\""),
        "{msg}"
    );
    let (_, msg) = degraded(
        ResponseTemplate::new(502).set_body_string("bad gateway"),
        Duration::from_secs(2),
    )
    .await;
    assert!(msg.contains("502") && msg.contains("bad gateway"), "{msg}");
}

#[tokio::test]
async fn every_family_at_once_under_a_tight_budget_and_deadlines() {
    let web = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(200).set_body_json(answer()))
        .mount(&web)
        .await;
    // The reranker puts whatever mentions turmeric or cumin first and drops the tax forms.
    let rerank = common::spice_reranker().await;
    let mut cfg = with_web(&web, Duration::from_secs(2))
        .await
        .with_deadline(Duration::from_secs(2));
    cfg.reranker = common::reranker_of(&rerank);
    // At 620 the facts, the newest turns and the best of the rest fit. At 420 the whole
    // framing would not leave room for what may not be cut, so compile must reserve less (it
    // reported `fits: false` there before) and keeps little beyond the newest turns.
    for tight in [620u32, 420] {
        let h = run(&cfg, tight).await;
        assert!(h.degradations.is_empty(), "{:?}", h.degradations);
        // Every kind was served in time.
        for s in &h.sources {
            assert!(
                matches!(s.status, SourceStatus::Complete | SourceStatus::Skipped),
                "{s:?}"
            );
        }
        let prompt = compile(&cfg, &h).unwrap();
        let report = &prompt.report;
        assert!(
            report.fits && report.estimated_prompt_tokens <= tight,
            "{tight}: {report:#?}"
        );
        // The estimate covers the messages as sent.
        let sent = common::sent_message_tokens(&prompt);
        assert!(sent <= report.estimated_prompt_tokens, "{tight}: {sent}");
        assert!(
            report
                .sections
                .iter()
                .any(|s| matches!(s.action, prompt_ir::Action::Dropped { .. })),
            "the budget was tight: {report:#?}"
        );
        let text: String = prompt.messages.iter().map(|m| m.content.as_str()).collect();
        assert!(
            !text.contains("Tax forms"),
            "the reranker dropped it: {text}"
        );
        if tight == 620 {
            // Memories and the web page both fit, and something was cut for them.
            assert!(text.contains("example.org/dal"), "{text}");
            assert!(
                h.sections
                    .values()
                    .any(|i| !i.found_by.contains(&SourceKind::Web) && !i.found_by.is_empty()),
                "memories were retrieved"
            );
        }
    }
}

#[tokio::test]
async fn web_search_keeps_the_source_contract() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/search"))
        .respond_with(ResponseTemplate::new(200).set_body_json(answer()))
        .mount(&server)
        .await;
    for embedder in [None, Some(embedder())] {
        let web = WebSearchSource::new(WebSearchConfig::new(server.uri()), embedder).unwrap();
        hydrate::testing::source_contract(&web, SourceKind::Web, &chat_scope("alice"), None).await;
    }
}
