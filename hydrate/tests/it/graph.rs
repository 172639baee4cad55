//! The entity graph as the graph kind: memories tagged with the names they mention
//! (`with_entity_tags`, as hydrate's write paths do, or `index_entities` afterwards) are
//! found from the question's names and one hop further, each with how it was reached; one
//! user's prompt never holds another's memories, though they name the same place; a
//! question without a name finds nothing; the source keeps the `source_contract`.
//! Needs the `graph` feature (on in `--all-features`); the build without it is checked by
//! the unit test in `src/graph.rs`, which `cargo test -p hydrate --lib` runs.

#![cfg(feature = "graph")]
use crate::common;

use std::sync::Arc;

use common::{at, chat_scope, config, input, now, request};
use hydrate::testing::source_contract_asking;
use hydrate::{
    ContextSource, GraphSource, HydrationConfig, QueryCues, QueryEmbeddings, SourceItem,
    SourceKind, SourceOutput, SourceParams, SourceQuery, SourceReport, compile, hydrate,
    index_entities, with_entity_tags,
};
use memory_core::{MemoryBackend, NewMemory, Scope};
use memory_inmem::InMemoryBackend;
use prompt_ir::ContextStrategy;

const PORTO: &str = "Bob moved to Porto last spring.";
const BAKERY: &str = "Bob's sister runs a bakery near the river.";
const OSLO: &str = "The night train to Oslo leaves at nine.";

fn store() -> Arc<dyn MemoryBackend> {
    Arc::new(InMemoryBackend::new(None))
}

async fn remember(store: &dyn MemoryBackend, scope: &Scope, texts: &[&str]) {
    for t in texts {
        store
            .store(
                scope,
                with_entity_tags(NewMemory::new(*t)).at(at("2026-03-01T10:00:00Z")),
            )
            .await
            .unwrap();
    }
}

/// The graph source's queries are for a private context.
static PRIVATE: hydrate::Reach = hydrate::Reach::Private;

/// What the graph source finds for `question` in `scope`.
async fn fetch(source: &GraphSource, scope: &Scope, question: &str) -> Vec<SourceItem> {
    let strategy = ContextStrategy::default();
    let embeddings = QueryEmbeddings::new(question);
    let cues = QueryCues::read(question, now());
    let query = SourceQuery {
        kind: SourceKind::Graph,
        scope,
        observation: question,
        goal: None,
        params: SourceParams {
            max_items: 10,
            max_tokens: 4000,
            threshold: None,
        },
        strategy: &strategy,
        now: now(),
        embeddings: &embeddings,
        cues: &cues,
        reach: &PRIVATE,
        record_access: true,
        tuning: hydrate::MemoryTuning::default(),
    };
    let mut out = SourceOutput::new();
    source.fetch(&query, &mut out).await.unwrap();
    out.items().to_vec()
}

/// A config with the memory provider and the graph source over `store`.
fn with_graph(store: &Arc<dyn MemoryBackend>) -> HydrationConfig {
    let graph = GraphSource::new(Arc::clone(store)).unwrap();
    config(Arc::clone(store), None).with_source(SourceKind::Graph, Arc::new(graph))
}

/// Hydrates `question` for `scope`: the graph's report, and the compiled prompt's text.
/// Without the recent conversation (which would hold every memory of these small scopes
/// and, as the earlier kind, keep them), so the prompt shows what the graph found.
async fn prompt(cfg: &HydrationConfig, scope: &Scope, question: &str) -> (SourceReport, String) {
    let mut request = request(question, 8000);
    request.strategy.temporal_window = 0;
    let h = hydrate(cfg, &input(scope.clone(), request)).await.unwrap();
    let report = h
        .sources
        .iter()
        .find(|s| s.kind == SourceKind::Graph)
        .unwrap()
        .clone();
    let text = compile(cfg, &h)
        .unwrap()
        .messages
        .iter()
        .map(|m| format!("{}\n", m.content))
        .collect();
    (report, text)
}

fn note_of<'a>(items: &'a [SourceItem], content: &str) -> Option<&'a str> {
    items
        .iter()
        .find(|i| i.content == content)
        .and_then(|i| i.note.as_deref())
}

#[tokio::test]
async fn one_hop_finds_a_memory_that_mentions_only_the_hop_entity() {
    let store = store();
    let alice = chat_scope("alice");
    remember(store.as_ref(), &alice, &[PORTO, BAKERY, OSLO]).await;
    let source = GraphSource::new(Arc::clone(&store)).unwrap();
    let items = fetch(&source, &alice, "What should we do in Porto?").await;
    assert_eq!(items.len(), 2, "{items:#?}");
    assert_eq!(note_of(&items, PORTO), Some("mentions Porto"));
    // The bakery memory never names Porto: it is reached through Bob.
    assert_eq!(note_of(&items, BAKERY), Some("via Porto → Bob"));
    let direct = items.iter().find(|i| i.content == PORTO).unwrap();
    let hop = items.iter().find(|i| i.content == BAKERY).unwrap();
    assert!(
        direct.similarity > hop.similarity,
        "a direct hit ranks above a hop: {direct:?} {hop:?}"
    );
    assert!(
        note_of(&items, OSLO).is_none(),
        "Oslo is not linked to Porto"
    );

    // Through hydrate and compile, the hop memory reaches the prompt with its path.
    let (report, text) = prompt(&with_graph(&store), &alice, "What should we do in Porto?").await;
    assert_eq!(report.search.as_deref(), Some("entities"), "{report:?}");
    assert_eq!(report.returned, 2, "{report:?}");
    assert!(
        text.contains(&format!("{BAKERY} (via Porto → Bob)")),
        "{text}"
    );
}

#[tokio::test]
async fn a_question_without_a_name_finds_nothing() {
    let store = store();
    let alice = chat_scope("alice");
    remember(store.as_ref(), &alice, &[PORTO, BAKERY]).await;
    let source = GraphSource::new(Arc::clone(&store)).unwrap();
    let question = "what did my brother say yesterday?";
    let items = fetch(&source, &alice, question).await;
    assert!(items.is_empty(), "{items:#?}");
    let (report, _) = prompt(&with_graph(&store), &alice, question).await;
    assert_eq!(report.search, None, "no entity, no search: {report:?}");
    assert_eq!(report.returned, 0, "{report:?}");
}

#[tokio::test]
async fn users_sharing_an_entity_name_never_see_each_other() {
    let store = store();
    let alice = chat_scope("alice");
    let mallory = chat_scope("mallory");
    remember(
        store.as_ref(),
        &alice,
        &["Carol lives in Porto.", "Carol's cat is called Miso."],
    )
    .await;
    remember(
        store.as_ref(),
        &mallory,
        &[
            "Dave hides the spare key in Porto.",
            "Dave's bank password is hunter2.",
            "Carol owes Mallory money.",
        ],
    )
    .await;
    let question = "Any news from Porto and Carol?";
    let (report, text) = prompt(&with_graph(&store), &alice, question).await;
    assert_eq!(report.returned, 2, "{report:?}");
    assert!(text.contains("Carol lives in Porto."), "{text}");
    assert!(text.contains("Carol's cat is called Miso."), "{text}");
    for foreign in ["Dave", "hunter2", "Mallory", "spare key"] {
        assert!(!text.contains(foreign), "{foreign} leaked: {text}");
    }

    // The source alone, for each user: only their own memories.
    let source = GraphSource::new(Arc::clone(&store)).unwrap();
    for (scope, own) in [(&alice, 2), (&mallory, 3)] {
        let items = fetch(&source, scope, question).await;
        assert_eq!(items.len(), own, "{scope}: {items:#?}");
        for item in &items {
            let id = item.memory_id.unwrap();
            assert_eq!(store.get(scope, id).await.unwrap().scope, *scope);
        }
    }
}

#[tokio::test]
async fn index_entities_tags_what_the_store_already_holds() {
    let store = store();
    let alice = chat_scope("alice");
    for t in [PORTO, BAKERY, OSLO, "no names here at all"] {
        let m = NewMemory::new(t).at(at("2026-03-01T10:00:00Z"));
        store.store(&alice, m).await.unwrap();
    }
    let source = GraphSource::new(Arc::clone(&store)).unwrap();
    let before = fetch(&source, &alice, "What should we do in Porto?").await;
    assert!(before.is_empty(), "untagged memories: {before:#?}");

    let first = index_entities(store.as_ref(), &alice).await.unwrap();
    assert_eq!(first.scanned, 4);
    assert_eq!(first.tagged, 3, "{first:?}");
    assert_eq!(first.entities, 3, "bob, porto, oslo: {first:?}");
    assert!(first.complete);
    let again = index_entities(store.as_ref(), &alice).await.unwrap();
    assert_eq!(again.tagged, 0, "a second run changes nothing: {again:?}");

    let after = fetch(&source, &alice, "What should we do in Porto?").await;
    assert_eq!(
        note_of(&after, BAKERY),
        Some("via Porto → Bob"),
        "{after:#?}"
    );
}

#[tokio::test]
async fn the_graph_source_keeps_the_source_contract() {
    let store = store();
    let scope = chat_scope("contract");
    remember(
        store.as_ref(),
        &scope,
        &[
            "My cat Pixel sleeps on the red sofa.",
            "Pixel was adopted from the shelter in Braga.",
            "Braga has a cat café we like.",
        ],
    )
    .await;
    let source = GraphSource::new(Arc::clone(&store)).unwrap();
    source_contract_asking(
        &source,
        SourceKind::Graph,
        &scope,
        Some(store.as_ref()),
        "Where does Pixel sleep?",
    )
    .await;
}

/// The graph's own ordering (direct mentions, then hops) is not a match to the question: a
/// memory only the graph found ranks below every memory a search matched, and one both found
/// keeps the search's similarity.
#[tokio::test]
async fn a_memory_only_the_graph_found_ranks_below_every_search_hit() {
    let store = store();
    let alice = chat_scope("alice");
    let ideas = "Porto trip ideas: a river cruise and the tile museum.";
    remember(store.as_ref(), &alice, &[PORTO, BAKERY, OSLO, ideas]).await;
    let cfg = with_graph(&store);
    let mut request = request("What should we do in Porto?", 8000);
    request.strategy.temporal_window = 0;
    let h = hydrate(&cfg, &input(alice.clone(), request)).await.unwrap();
    let report = compile(&cfg, &h).unwrap().report;
    let section = |text: &str| {
        let id =
            h.ir.sections()
                .iter()
                .find(|s| s.content().contains(text))
                .unwrap_or_else(|| panic!("{text} is a candidate"))
                .id()
                .to_owned();
        report.sections.iter().find(|s| s.id == id).unwrap().clone()
    };
    let bakery = section(BAKERY);
    assert_eq!(bakery.found_by, [SourceKind::Graph]);
    assert_eq!(bakery.scores.as_ref().unwrap().similarity, None);
    let hits: Vec<_> = report
        .sections
        .iter()
        .filter(|s| s.found_by.contains(&SourceKind::Semantic))
        .collect();
    assert!(hits.len() >= 2, "{hits:#?}");
    for hit in &hits {
        assert!(hit.value > bakery.value, "{hit:#?} {bakery:#?}");
    }
    // Found by the search and the graph: one section, the search's similarity.
    let porto = section(PORTO);
    assert_eq!(porto.found_by, [SourceKind::Semantic, SourceKind::Graph]);
    assert!(porto.scores.as_ref().unwrap().similarity.is_some());
}
