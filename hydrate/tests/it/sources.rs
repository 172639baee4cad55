//! How hydrate treats what sources return: parameters a source does not honour are applied
//! for it, a memory found by several kinds is one section with its best relevance (the
//! recent conversation is not repeated as related messages, and never loses a message to
//! a weaker copy of it), failures and rerankers are reported, never fatal.

use crate::common;

use std::sync::Arc;

use async_trait::async_trait;
use common::{chat_scope, config, embedder, input, request, seed_alice};
use hydrate::{
    ContextSource, DegradationKind, Reranker, SourceItem, SourceKind, SourceOutput, SourceQuery,
    SourceStatus, hydrate,
};
use memory_core::{MemoryBackend, MemoryError};
use memory_inmem::InMemoryBackend;
use prompt_ir::Relevance;

async fn alice() -> Arc<dyn MemoryBackend> {
    let backend: Arc<dyn MemoryBackend> = Arc::new(InMemoryBackend::new(Some(embedder())));
    seed_alice(backend.as_ref()).await;
    backend
}

/// A vector-store stand-in that honours nothing: ten passages with falling similarity, one
/// of them twice.
#[derive(Debug)]
struct Careless;

#[async_trait]
impl ContextSource for Careless {
    fn name(&self) -> &str {
        "careless"
    }

    async fn fetch(&self, _q: &SourceQuery<'_>, out: &mut SourceOutput) -> hydrate::Result<()> {
        for i in 0..10u8 {
            let item = SourceItem::text(
                format!("p{i}"),
                format!("Passage {i}. ").repeat(usize::from(i) * 40 + 1),
            );
            out.push(item.with_similarity(1.0 - f32::from(i) / 10.0));
        }
        out.push(SourceItem::text("p0", "Passage 0 again.").with_similarity(1.0));
        Ok(())
    }
}

#[tokio::test]
async fn unhonoured_parameters_are_applied_by_hydrate() {
    let backend = alice().await;
    let mut cfg = config(Arc::clone(&backend), Some(embedder()))
        .with_source(SourceKind::Vector, Arc::new(Careless));
    cfg.extra_limit = 4;
    cfg.source_token_share = 0.2;
    let mut req = request("passages", 2000);
    req.strategy.semantic_threshold = Relevance::new(0.45).unwrap();
    let h = hydrate(&cfg, &input(chat_scope("alice"), req))
        .await
        .unwrap();
    let r = h
        .sources
        .iter()
        .find(|s| s.kind == SourceKind::Vector)
        .unwrap();
    assert_eq!(r.returned, 11);
    assert_eq!(r.duplicates, 1, "p0 twice");
    // Threshold 0.45 leaves p0..p5 (4 cut); within 400 tokens only p0 and p1 fit (4 cut).
    assert_eq!((r.kept, r.over_limits), (2, 8), "{r:?}");
    assert!(r.tokens <= 400, "{r:?}");
    let ids: Vec<_> =
        h.ir.sections()
            .iter()
            .map(|s| s.id())
            .filter(|id| id.starts_with("vector:"))
            .collect();
    assert_eq!(ids, ["vector:p0", "vector:p1"], "best first");
}

#[tokio::test]
async fn related_messages_do_not_repeat_the_recent_conversation() {
    let backend = alice().await;
    let cfg = config(Arc::clone(&backend), Some(embedder()));
    let mut req = request("something warm to eat, a soup or porridge?", 8000);
    req.strategy.semantic_threshold = Relevance::ZERO;
    let h = hydrate(&cfg, &input(chat_scope("alice"), req))
        .await
        .unwrap();
    let semantic = h
        .sources
        .iter()
        .find(|s| s.kind == SourceKind::Semantic)
        .unwrap();
    assert!(semantic.duplicates >= 2, "{semantic:?}");
    let ids: Vec<_> = h.sections.values().filter_map(|i| i.memory_id).collect();
    let mut unique = ids.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(ids.len(), unique.len(), "a memory appears once");
    // Related messages are there, none of them in the conversation block too.
    let of = |prefix: &str| -> Vec<_> {
        h.ir.sections()
            .iter()
            .filter(|s| s.id().starts_with(prefix))
            .filter_map(|s| h.sections.get(s.id()).and_then(|i| i.memory_id))
            .collect()
    };
    let (related, conversation) = (of("semantic:"), of("temporal:"));
    assert!(!related.is_empty() && !conversation.is_empty());
    assert!(related.iter().all(|id| !conversation.contains(id)));
}

#[derive(Debug)]
struct Broken;

#[async_trait]
impl ContextSource for Broken {
    fn name(&self) -> &str {
        "broken"
    }

    async fn fetch(&self, _q: &SourceQuery<'_>, out: &mut SourceOutput) -> hydrate::Result<()> {
        out.push(SourceItem::text(
            "w1",
            "A result that arrived before the failure.",
        ));
        Err(hydrate::Error::source_failed("broken", "connection reset"))
    }
}

#[derive(Debug)]
struct FailingReranker;

#[async_trait]
impl Reranker for FailingReranker {
    fn name(&self) -> &str {
        "failing"
    }

    async fn rerank(
        &self,
        _q: &SourceQuery<'_>,
        _items: Vec<SourceItem>,
    ) -> hydrate::Result<Vec<SourceItem>> {
        Err(hydrate::Error::source_failed("failing", "model not loaded"))
    }
}

#[tokio::test]
async fn failures_degrade_instead_of_failing_the_request() {
    let backend = alice().await;
    let mut cfg = config(Arc::clone(&backend), Some(embedder()))
        .with_source(SourceKind::Web, Arc::new(Broken));
    cfg.reranker = Arc::new(FailingReranker);
    let h = hydrate(
        &cfg,
        &input(chat_scope("alice"), request(common::OBSERVATION, 8000)),
    )
    .await
    .unwrap();
    let web = h
        .sources
        .iter()
        .find(|s| s.kind == SourceKind::Web)
        .unwrap();
    assert_eq!((web.status, web.kept), (SourceStatus::Partial, 1));
    assert!(h.partial.contains(&SourceKind::Web));
    let kinds: Vec<_> = h.degradations.iter().map(|d| d.kind).collect();
    assert!(kinds.contains(&DegradationKind::SourceFailed), "{kinds:?}");
    assert!(kinds.contains(&DegradationKind::RerankFailed), "{kinds:?}");
    assert!(
        h.degradations
            .iter()
            .any(|d| d.message.contains("connection reset"))
    );
}

#[tokio::test]
async fn the_strategy_can_turn_kinds_off() {
    let backend = alice().await;
    let cfg = config(Arc::clone(&backend), Some(embedder()));
    let mut req = request(common::OBSERVATION, 8000);
    req.strategy.include_knowledge = false;
    req.strategy.semantic_limit = 0;
    let h = hydrate(&cfg, &input(chat_scope("alice"), req))
        .await
        .unwrap();
    let status: Vec<_> = h.sources.iter().map(|s| (s.kind, s.status)).collect();
    assert_eq!(
        status,
        [
            (SourceKind::Temporal, SourceStatus::Complete),
            (SourceKind::Knowledge, SourceStatus::Skipped),
            (SourceKind::Semantic, SourceStatus::Skipped),
        ]
    );
    assert!(h.degradations.is_empty());
}

/// Hydration is `Send`: it can run on a spawned task of a multi-threaded runtime, as a bot
/// serving many chats does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hydrate_runs_on_a_spawned_task() {
    let backend = alice().await;
    let cfg = Arc::new(config(Arc::clone(&backend), Some(embedder())));
    let req = input(chat_scope("alice"), request(common::OBSERVATION, 8000));
    let task_cfg = Arc::clone(&cfg);
    let hydrated = tokio::spawn(async move { hydrate(&task_cfg, &req).await })
        .await
        .unwrap()
        .unwrap();
    let prompt = hydrate::compile(&cfg, &hydrated).unwrap();
    assert!(prompt.report.fits);
    assert_eq!(prompt.messages.len(), prompt.layout.len());
}

/// A ten-turn conversation whose older half holds the answer to "Who is my manager at
/// work?"; the newest turns are small talk.
async fn maya_chat() -> (Arc<dyn MemoryBackend>, memory_core::Scope) {
    use memory_core::{NewMemory, Role};
    let backend: Arc<dyn MemoryBackend> = Arc::new(InMemoryBackend::new(Some(embedder())));
    let scope = chat_scope("maya");
    let turns = [
        "I just moved to Lisbon for a new job.",
        "My manager at work is called Tomás.",
        "The office is near the river.",
        "I adopted a grey cat named Pixel.",
        "Pixel hates the vacuum cleaner.",
        "I am learning the cello in the evenings.",
        "Scales every evening for twenty minutes.",
        "The weather is lovely this week.",
        "I might go to the beach on Sunday.",
        "Do you like the sea?",
    ];
    let batch = turns
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let when = format!("2026-03-09T10:{:02}:00Z", i * 2);
            NewMemory::new(*t)
                .with_role(if i % 2 == 0 {
                    Role::User
                } else {
                    Role::Assistant
                })
                .at(common::at(&when))
        })
        .collect();
    backend.store_batch(&scope, batch).await.unwrap();
    (backend, scope)
}

#[tokio::test]
async fn a_memory_found_by_the_conversation_and_by_search_survives_a_tight_budget() {
    use hydrate::compile;
    let (backend, scope) = maya_chat().await;
    let cfg = config(Arc::clone(&backend), Some(embedder()));
    // The whole window (10 turns) does not fit: some of it must go.
    let mut req = request("Who is my manager at work?", 470);
    req.strategy.temporal_window = 10;
    let hydrated = hydrate(&cfg, &input(scope.clone(), req)).await.unwrap();
    let prompt = compile(&cfg, &hydrated).unwrap();
    let text: String = prompt.messages.iter().map(|m| m.content.as_str()).collect();
    assert!(
        text.contains("My manager at work is called Tomás."),
        "the answer is in the prompt: {text}"
    );
    let tomas = backend
        .recent(&scope, 100, &memory_core::Filter::default())
        .await
        .unwrap()
        .into_iter()
        .find(|m| m.content.contains("Tomás"))
        .unwrap()
        .id;
    let answer: Vec<_> = prompt
        .report
        .sections
        .iter()
        .filter(|s| s.memory_id == Some(tomas))
        .collect();
    assert_eq!(
        answer.len(),
        1,
        "one section, found by both: {:#?}",
        prompt.report.sections
    );
    assert_eq!(
        answer[0].found_by,
        [SourceKind::Temporal, SourceKind::Semantic]
    );
    let dropped = prompt
        .report
        .sections
        .iter()
        .filter(|s| matches!(s.action, prompt_ir::Action::Dropped { .. }))
        .count();
    assert!(dropped > 0, "the budget was tight enough to drop something");
    // The newest turns stay, whatever they match.
    assert!(text.contains("Do you like the sea?"), "{text}");
}

#[tokio::test]
async fn an_older_turn_no_search_matched_ranks_below_every_search_hit() {
    let (backend, scope) = maya_chat().await;
    let mut cfg = config(Arc::clone(&backend), Some(embedder()));
    // Fixed search limits, so the search returns 3 of the 10 turns and passes over the rest;
    // and a configured relevance for unmatched items above any similarity, so only the rule
    // under test can bring them below the hits.
    cfg.item_tokens = 0;
    cfg.unmatched_relevance = 1.0;
    // The rule holds before cues lift: the question is in the first person, and the own-words
    // cue would lift the user's turns, found or not, over the agent's (see tests/cues.rs).
    cfg.cue_weights = hydrate::CueWeights::OFF;
    let mut req = request("Who is my manager at work?", 8000);
    req.strategy.temporal_window = 10;
    req.strategy.semantic_limit = 3;
    req.strategy.semantic_threshold = Relevance::ZERO;
    let hydrated = hydrate(&cfg, &input(scope, req)).await.unwrap();
    let relevance = |found: &dyn Fn(&[SourceKind]) -> bool| -> Vec<f64> {
        hydrated
            .ir
            .sections()
            .iter()
            .filter(|s| s.priority() == prompt_ir::Priority::Medium)
            .filter(|s| {
                hydrated
                    .sections
                    .get(s.id())
                    .is_some_and(|i| found(&i.found_by))
            })
            .map(|s| s.relevance().get())
            .collect()
    };
    let hits = relevance(&|f| f.contains(&SourceKind::Semantic));
    let unmatched = relevance(&|f| f == [SourceKind::Temporal]);
    assert!(!hits.is_empty(), "the search found older turns");
    assert!(!unmatched.is_empty(), "older turns the search passed over");
    let weakest = hits.iter().copied().fold(f64::INFINITY, f64::min);
    assert!(weakest < 1.0, "{hits:?}");
    assert!(
        unmatched.iter().all(|r| *r <= weakest),
        "the search saw these turns and ranked them lower: {unmatched:?} vs hits {hits:?}"
    );
}

/// Day headers are framing compile pays for: over many days and budgets, the messages as
/// sent fit, every line sits under the header of its own day, and the budget is used.
#[tokio::test]
async fn day_headers_are_counted_and_lines_sit_under_their_day() {
    use hydrate::{compile, day_header};
    use memory_core::{NewMemory, Role};
    let backend: Arc<dyn MemoryBackend> = Arc::new(InMemoryBackend::new(Some(embedder())));
    let scope = chat_scope("dora");
    // 60 turns over 20 days, three a day, all about the garden.
    let turns: Vec<(String, memory_core::Timestamp)> = (0..60u32)
        .map(|i| {
            let day = i / 3 + 1;
            let when = common::at(&format!("2026-02-{day:02}T1{}:00:00Z", i % 3));
            (
                format!(
                    "Garden note {i}: planted {} rows of beans today.",
                    i % 7 + 1
                ),
                when,
            )
        })
        .collect();
    let batch = turns
        .iter()
        .enumerate()
        .map(|(i, (t, when))| {
            NewMemory::new(t.clone())
                .with_role(if i % 2 == 0 {
                    Role::User
                } else {
                    Role::Assistant
                })
                .at(*when)
        })
        .collect();
    backend.store_batch(&scope, batch).await.unwrap();
    let cfg = config(Arc::clone(&backend), Some(embedder()));
    let mut kept_at = Vec::new();
    for budget in (450..=1800).step_by(45) {
        let req = request("What did I plant in the garden?", budget);
        let hydrated = hydrate(&cfg, &input(scope.clone(), req)).await.unwrap();
        let prompt = compile(&cfg, &hydrated).unwrap();
        let report = &prompt.report;
        assert!(report.fits, "{budget}: {report:#?}");
        let sent = common::sent_message_tokens(&prompt);
        assert!(
            sent <= report.estimated_prompt_tokens,
            "{budget}: {sent} tokens sent, {} estimated",
            report.estimated_prompt_tokens
        );
        let data: String = prompt
            .messages
            .iter()
            .zip(&prompt.layout)
            .filter(|(_, b)| matches!(b, hydrate::Block::Data(_)))
            .map(|(m, _)| format!("{}\n", m.content))
            .collect();
        let mut kept = 0;
        for (text, when) in &turns {
            let Some(at) = data.find(&format!(": {text}\n")) else {
                continue;
            };
            kept += 1;
            let header = data[..at].rfind("\n[").map(|h| {
                data[h + 1..]
                    .split('\n')
                    .next()
                    .unwrap_or_default()
                    .to_owned()
            });
            assert_eq!(header, Some(day_header(*when)), "{budget}: {text}\n{data}");
        }
        // What is left is less than the next item would cost: its line, its day's header
        // and, when it is the first of its kind, its block's framing.
        assert!(
            report.budget.available - report.estimated_prompt_tokens < 70
                || report.tokens_after == report.tokens_before,
            "{budget}: {} of {} used, {kept} turns kept\n{data}\n{report:#?}",
            report.estimated_prompt_tokens,
            report.budget.available
        );
        kept_at.push(kept);
    }
    assert!(kept_at.windows(2).all(|w| w[0] <= w[1]), "{kept_at:?}");
    assert!(kept_at.first() < kept_at.last(), "{kept_at:?}");
}

/// The memory source keeps the source contract for each kind it serves, and every memory
/// it returns is the scope's own (Bob's store holds memories too).
#[tokio::test]
async fn the_memory_source_keeps_the_source_contract() {
    let backend = alice().await;
    backend
        .store(
            &chat_scope("bob"),
            memory_core::NewMemory::new("Bob's cat is called Pixel too"),
        )
        .await
        .unwrap();
    let source = hydrate::MemorySource::new(Arc::clone(&backend), Some(embedder()));
    for kind in [
        SourceKind::Temporal,
        SourceKind::Knowledge,
        SourceKind::Semantic,
    ] {
        hydrate::testing::source_contract(
            &source,
            kind,
            &chat_scope("alice"),
            Some(backend.as_ref()),
        )
        .await;
    }
}

/// A source that returns two items with one key: the first (and best) is kept, the other is
/// counted as a duplicate, and the request goes on.
#[derive(Debug)]
struct Repeating;

#[async_trait]
impl ContextSource for Repeating {
    fn name(&self) -> &str {
        "repeating"
    }

    async fn fetch(&self, _q: &SourceQuery<'_>, out: &mut SourceOutput) -> hydrate::Result<()> {
        let first = SourceItem {
            memory_id: Some(memory_core::MemoryId::new()),
            ..SourceItem::text("dup", "The first passage under this key.")
        };
        let second = SourceItem {
            memory_id: Some(memory_core::MemoryId::new()),
            ..SourceItem::text("dup", "Another passage under the same key.")
        };
        out.push(first.with_similarity(0.9));
        out.push(second.with_similarity(0.8));
        out.push(SourceItem::text("other", "A passage of its own.").with_similarity(0.7));
        Ok(())
    }
}

#[tokio::test]
async fn two_items_with_one_key_keep_the_first_and_do_not_fail_the_request() {
    let backend = alice().await;
    let cfg = config(Arc::clone(&backend), Some(embedder()))
        .with_source(SourceKind::Vector, Arc::new(Repeating));
    let mut req = request("passages", 8000);
    req.strategy.semantic_threshold = Relevance::ZERO;
    let h = hydrate(&cfg, &input(chat_scope("alice"), req))
        .await
        .expect("a repeated key is not an error");
    let vector = h
        .sources
        .iter()
        .find(|s| s.kind == SourceKind::Vector)
        .unwrap();
    assert_eq!((vector.returned, vector.duplicates, vector.kept), (3, 1, 2));
    let dup = h.ir.section("vector:dup").expect("the first is kept");
    assert!(dup.content().contains("The first passage"), "{dup:?}");
}

/// A store's typed error, as `MemoryError::from_backend` keeps it: its own words, and a
/// cause of its own.
#[derive(Debug)]
struct Corrupt(std::io::Error);

impl std::fmt::Display for Corrupt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("page 7 of flaky.db is corrupt")
    }
}

impl std::error::Error for Corrupt {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

fn corrupt() -> MemoryError {
    MemoryError::from_backend(
        "memory-flaky",
        Corrupt(std::io::Error::other("checksum mismatch")),
    )
}

/// A failing store's degradation says the store's own words and their cause, each exactly
/// once: nothing lost to a short `Display` (`memory-flaky failed`), nothing repeated by a
/// wrapper, and the store named once (by its source, `memory:memory-flaky`).
#[tokio::test]
async fn a_failing_store_is_reported_in_its_own_words_once() {
    // A store whose reads fail with [`Corrupt`].
    let flaky: Arc<dyn MemoryBackend> = Arc::new(common::TroubledStore {
        inner: alice().await,
        name: Some("memory-flaky"),
        delay: std::time::Duration::ZERO,
        error: Some(corrupt),
    });
    let cfg = config(Arc::clone(&flaky), Some(embedder()));
    let h = hydrate(
        &cfg,
        &input(chat_scope("alice"), request(common::OBSERVATION, 8000)),
    )
    .await
    .expect("a failing store does not fail the request");
    let failed: Vec<_> = h
        .degradations
        .iter()
        .filter(|d| d.kind == DegradationKind::SourceFailed)
        .collect();
    assert_eq!(failed.len(), 3, "{:?}", h.degradations);
    for d in failed {
        for words in [
            "memory-flaky",
            "page 7 of flaky.db is corrupt",
            "checksum mismatch",
        ] {
            assert_eq!(
                d.message.matches(words).count(),
                1,
                "{words:?} in {}",
                d.message
            );
        }
        assert!(
            d.message.starts_with(
                "memory:memory-flaky failed: page 7 of flaky.db is corrupt: checksum mismatch; "
            ),
            "{}",
            d.message
        );
    }
    let e = hydrate::Error::from(corrupt());
    assert_eq!(memory_core::repeated_cause(&e), None);
    assert_eq!(
        memory_core::ErrorChain(&e).to_string(),
        "memory-flaky failed: page 7 of flaky.db is corrupt: checksum mismatch"
    );
}
