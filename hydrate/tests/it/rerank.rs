//! The HTTP reranker against a loopback server speaking the `/rerank` wire formats (Cohere
//! shape and text-embeddings-inference shape): it reorders, rescores and filters a source's
//! items, and a slow, failing or garbled server degrades the request instead of failing it.
//! Needs the `rerank-http` feature (on in the workspace's `--all-features` test run).

#![cfg(feature = "rerank-http")]
use crate::common;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use common::{chat_scope, config, embedder, input, request};
use hydrate::{
    ContextSource, DegradationKind, HttpReranker, HttpRerankerConfig, Hydrated, RerankApi, Secret,
    SourceItem, SourceKind, SourceOutput, SourceQuery, hydrate,
};
use memory_inmem::InMemoryBackend;
use serde_json::json;
use wiremock::matchers::{body_partial_json, header, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

/// Three web results, in the order (and with the similarity) a search engine gave them.
#[derive(Debug)]
struct Pages;

const PAGES: [(&str, &str, f32); 3] = [
    ("a", "Lentil dal needs red lentils, onion and cumin.", 0.9),
    ("b", "A history of the lentil in ancient Egypt.", 0.8),
    (
        "c",
        "Dal recipe: rinse the lentils, simmer with turmeric.",
        0.7,
    ),
];

#[async_trait]
impl ContextSource for Pages {
    fn name(&self) -> &str {
        "pages"
    }

    async fn fetch(&self, _q: &SourceQuery<'_>, out: &mut SourceOutput) -> hydrate::Result<()> {
        for (key, text, sim) in PAGES {
            let mut item = SourceItem::text(key, text);
            item.similarity = Some(sim);
            out.push(item);
        }
        Ok(())
    }
}

/// Hydrates the usual request with the pages as web results and `reranker`.
async fn run(reranker: HttpReranker) -> Hydrated {
    let backend: Arc<dyn memory_core::MemoryBackend> =
        Arc::new(InMemoryBackend::new(Some(embedder())));
    let mut cfg = config(backend, Some(embedder())).with_source(SourceKind::Web, Arc::new(Pages));
    cfg.reranker = Arc::new(reranker);
    hydrate(
        &cfg,
        &input(chat_scope("alice"), request(common::OBSERVATION, 8000)),
    )
    .await
    .unwrap()
}

/// The web items that made it, best first, with their similarity.
fn web_items(h: &Hydrated) -> Vec<(String, f64)> {
    let text_of = |id: &str| {
        h.ir.sections()
            .iter()
            .find(|s| s.id() == id)
            .map(|s| s.content().to_owned())
            .unwrap()
    };
    let mut out: Vec<(String, f64, f64)> = h
        .sections
        .iter()
        .filter(|(_, info)| info.found_by.contains(&SourceKind::Web))
        .map(|(id, info)| {
            let s = info.scores.as_ref().unwrap();
            (text_of(id), s.score, s.similarity.unwrap())
        })
        .collect();
    out.sort_by(|a, b| b.1.total_cmp(&a.1));
    out.into_iter().map(|(t, _, s)| (t, s)).collect()
}

fn cohere(url: &str) -> HttpRerankerConfig {
    HttpRerankerConfig {
        model: Some("rerank-v3.5".into()),
        ..HttpRerankerConfig::new(url)
    }
}

#[tokio::test]
async fn a_cohere_shaped_reranker_reorders_rescores_and_filters() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v2/rerank"))
        .and(header("authorization", "Bearer k-123"))
        .and(body_partial_json(json!({
            "model": "rerank-v3.5",
            "query": common::OBSERVATION,
            "documents": [PAGES[0].1, PAGES[1].1, PAGES[2].1],
        })))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "id": "r1",
            "results": [
                {"index": 2, "relevance_score": 0.97},
                {"index": 0, "relevance_score": 0.55},
                {"index": 1, "relevance_score": 0.02},
            ],
            "meta": {"billed_units": {"search_units": 1}},
        })))
        .expect(1)
        .mount(&server)
        .await;
    let reranker = HttpReranker::new(HttpRerankerConfig {
        api_key: Some(Secret::new("k-123")),
        min_score: Some(0.1),
        ..cohere(&format!("{}/v2/rerank", server.uri()))
    })
    .unwrap();
    assert_eq!(hydrate::Reranker::name(&reranker), "http:rerank-v3.5");
    let h = run(reranker).await;
    let items = web_items(&h);
    let texts: Vec<&str> = items.iter().map(|(t, _)| t.as_str()).collect();
    // The recipe first now, the history page dropped under the minimum score.
    assert_eq!(texts.len(), 2, "{items:?}");
    assert!(texts[0].contains("rinse the lentils"), "{items:?}");
    assert!(texts[1].contains("red lentils"), "{items:?}");
    assert!((items[0].1 - 0.97).abs() < 1e-6 && (items[1].1 - 0.55).abs() < 1e-6);
    let web = h
        .sources
        .iter()
        .find(|s| s.kind == SourceKind::Web)
        .unwrap();
    assert_eq!(web.kept, 2);
    assert!(h.degradations.is_empty(), "{:?}", h.degradations);
}

#[tokio::test]
async fn a_tei_shaped_reranker_is_understood() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/rerank"))
        .and(body_partial_json(
            json!({"texts": [PAGES[0].1, PAGES[1].1, PAGES[2].1]}),
        ))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!([
            {"index": 1, "score": 0.9},
            {"index": 2, "score": 0.4},
            {"index": 0, "score": 0.3},
        ])))
        .expect(1)
        .mount(&server)
        .await;
    let reranker = HttpReranker::new(HttpRerankerConfig {
        api: RerankApi::Tei,
        ..HttpRerankerConfig::new(format!("{}/rerank", server.uri()))
    })
    .unwrap();
    let items = web_items(&run(reranker).await);
    let sims: Vec<f64> = items
        .iter()
        .map(|(_, s)| (*s * 100.0).round() / 100.0)
        .collect();
    assert_eq!(sims, [0.9, 0.4, 0.3], "{items:?}");
    assert!(items[0].0.contains("ancient Egypt"), "{items:?}");
}

#[tokio::test]
async fn items_the_server_did_not_judge_follow_the_judged_ones() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "results": [{"index": 1, "relevance_score": 0.99}],
        })))
        .mount(&server)
        .await;
    let reranker = HttpReranker::new(cohere(&format!("{}/v1/rerank", server.uri()))).unwrap();
    let h = run(reranker).await;
    let web = h
        .sources
        .iter()
        .find(|s| s.kind == SourceKind::Web)
        .unwrap();
    assert_eq!(web.kept, 3, "none lost");
    let items = web_items(&h);
    assert!(items[0].0.contains("ancient Egypt"), "{items:?}");
    assert!((items[0].1 - 0.99).abs() < 1e-6, "{items:?}");
}

/// Runs a reranker whose server answers with `response`, and returns the degradation
/// message it caused; the web items keep the search engine's order.
async fn degraded(response: ResponseTemplate, timeout: Duration) -> String {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(response)
        .mount(&server)
        .await;
    let reranker = HttpReranker::new(HttpRerankerConfig {
        timeout,
        ..cohere(&format!("{}/v2/rerank", server.uri()))
    })
    .unwrap();
    let h = run(reranker).await;
    let items = web_items(&h);
    let sims: Vec<f64> = items
        .iter()
        .map(|(_, s)| (*s * 10.0).round() / 10.0)
        .collect();
    assert_eq!(sims, [0.9, 0.8, 0.7], "scored order kept: {items:?}");
    let d: Vec<_> = h
        .degradations
        .iter()
        .filter(|d| d.kind == DegradationKind::RerankFailed)
        .collect();
    assert_eq!(d.len(), 1, "{:?}", h.degradations);
    d[0].message.clone()
}

#[tokio::test]
async fn a_slow_reranker_degrades_at_its_timeout() {
    let msg = degraded(
        ResponseTemplate::new(200)
            .set_body_json(json!({"results": []}))
            .set_delay(Duration::from_secs(5)),
        Duration::from_millis(300),
    )
    .await;
    assert!(msg.contains("did not answer within 300ms"), "{msg}");
    assert!(msg.contains("kept the scored order"), "{msg}");
}

#[tokio::test]
async fn a_failing_reranker_degrades_with_its_status() {
    let msg = degraded(
        ResponseTemplate::new(503).set_body_string("model is loading"),
        Duration::from_secs(2),
    )
    .await;
    assert!(
        msg.contains("503") && msg.contains("model is loading"),
        "{msg}"
    );
}

#[tokio::test]
async fn a_garbled_answer_degrades_and_says_what_was_expected() {
    for body in [
        json!({"data": [1, 2]}),
        json!({"results": [{"index": 7, "relevance_score": 0.5}]}),
        json!({"results": [{"index": 0, "relevance_score": 0.5}, {"index": 0, "relevance_score": 0.4}]}),
    ] {
        let msg = degraded(
            ResponseTemplate::new(200).set_body_json(body.clone()),
            Duration::from_secs(2),
        )
        .await;
        let ok = msg.contains("expected {\"results\"") || msg.contains("out of range or repeated");
        assert!(ok, "{body}: {msg}");
    }
    let msg = degraded(
        ResponseTemplate::new(200).set_body_string("<html>not json</html>"),
        Duration::from_secs(2),
    )
    .await;
    assert!(msg.contains("not a rerank result"), "{msg}");
}

#[test]
fn bad_configs_are_refused_before_any_call() {
    let cases: [(HttpRerankerConfig, &str); 4] = [
        (cohere("ftp://x/rerank"), "not an http"),
        (
            HttpRerankerConfig::new("http://127.0.0.1:1/rerank"),
            "need a model",
        ),
        (
            HttpRerankerConfig {
                min_score: Some(1.5),
                ..cohere("http://127.0.0.1:1/rerank")
            },
            "from 0 to 1",
        ),
        (
            HttpRerankerConfig {
                timeout: Duration::ZERO,
                ..cohere("http://127.0.0.1:1/rerank")
            },
            "more than 0",
        ),
    ];
    for (config, want) in cases {
        let err = HttpReranker::new(config).unwrap_err().to_string();
        assert!(err.contains(want), "{err}");
    }
    let err = RerankApi::parse("bm25").unwrap_err().to_string();
    assert!(err.contains("`cohere`") && err.contains("`tei`"), "{err}");
    // The key never shows in debug output.
    let config = HttpRerankerConfig {
        api_key: Some(Secret::new("k-secret")),
        ..cohere("http://127.0.0.1:1/rerank")
    };
    assert!(!format!("{config:?}").contains("k-secret"));
}

/// Both wire shapes, and the no-op default, keep the reranker contract.
#[tokio::test]
async fn rerankers_keep_the_contract() {
    hydrate::testing::reranker_contract(&hydrate::NoopReranker).await;
    let server = MockServer::start().await;
    // Judges by length: a deterministic server for any documents.
    Mock::given(method("POST"))
        .and(path("/v2/rerank"))
        .respond_with(|req: &wiremock::Request| {
            let body: serde_json::Value = serde_json::from_slice(&req.body).unwrap();
            let docs = body["documents"].as_array().unwrap();
            let results: Vec<_> = docs
                .iter()
                .enumerate()
                .map(|(i, d)| json!({"index": i, "relevance_score": 1.0 / (1.0 + d.as_str().unwrap().len() as f64)}))
                .collect();
            ResponseTemplate::new(200).set_body_json(json!({"results": results}))
        })
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/rerank"))
        .respond_with(|req: &wiremock::Request| {
            let body: serde_json::Value = serde_json::from_slice(&req.body).unwrap();
            let n = body["texts"].as_array().unwrap().len();
            let results: Vec<_> = (0..n)
                .rev()
                .map(|i| json!({"index": i, "score": 0.1 * i as f64}))
                .collect();
            ResponseTemplate::new(200).set_body_json(json!(results))
        })
        .mount(&server)
        .await;
    let cohere_shaped = HttpReranker::new(HttpRerankerConfig {
        min_score: Some(0.03),
        ..cohere(&format!("{}/v2/rerank", server.uri()))
    })
    .unwrap();
    hydrate::testing::reranker_contract(&cohere_shaped).await;
    let tei = HttpReranker::new(HttpRerankerConfig {
        api: RerankApi::Tei,
        ..HttpRerankerConfig::new(format!("{}/rerank", server.uri()))
    })
    .unwrap();
    hydrate::testing::reranker_contract(&tei).await;
}
