//! Prompts a provider can cache: a conversation's prompts, built one after another as the bot
//! builds them, each repeat the start of the one before (the system prompt, who is talking,
//! the facts, the conversation so far); what is recalled for one message and the clock come
//! last; small talk gets nothing recalled; the report counts the prefix two prompts share as
//! a direct comparison of their text does.

use crate::common;

use std::sync::Arc;

use common::{at, chat_scope, embedder, input, request, tokenizer};
use hydrate::{
    Block, ChatRole, CompiledPrompt, HydrationConfig, MESSAGE_OVERHEAD_TOKENS, PreviousPrompt,
    SourceKind, compile, hydrate, memory_provider,
};
use memory_core::{MemoryBackend, MemoryKind, NewMemory, Role, Timestamp};
use memory_inmem::InMemoryBackend;
use prompt_ir::{Stability, Tokenizer};

fn cfg(backend: &Arc<dyn MemoryBackend>) -> HydrationConfig {
    let mut c = HydrationConfig::new(common::SYSTEM_PROMPT, tokenizer())
        .with_provider(memory_provider(Arc::clone(backend), Some(embedder())));
    c.relevance_floor = 0.5;
    c
}

/// The `i`th message of a long chat about many things, and its answer.
fn exchange(i: usize) -> (String, String) {
    const TOPICS: [&str; 6] = ["garden", "cello", "Lisbon trip", "dentist", "bike", "novel"];
    let topic = TOPICS[i % TOPICS.len()];
    (
        format!("Day {i}: more about the {topic}, item {i} of my list, with detail number {i}."),
        format!("Noted about the {topic} (item {i}); anything else for today?"),
    )
}

async fn prompt_after(
    config: &HydrationConfig,
    message: &str,
    budget: u32,
    now: Timestamp,
    previous: Option<PreviousPrompt>,
) -> CompiledPrompt {
    let input = input(chat_scope("alice"), request(message, budget))
        .at(now)
        .after(previous);
    compile(config, &hydrate(config, &input).await.unwrap()).unwrap()
}

/// The tokens two prompts share from their start, by comparing their text: each message's
/// role and each of its lines, as a provider sees them, up to the first that differs.
fn shared_by_text(a: &CompiledPrompt, b: &CompiledPrompt, tok: &dyn Tokenizer) -> u32 {
    let mut shared = 0;
    for (x, y) in a.messages.iter().zip(&b.messages) {
        if x.role != y.role {
            return shared;
        }
        shared += MESSAGE_OVERHEAD_TOKENS;
        let (xs, ys): (Vec<&str>, Vec<&str>) = (
            x.content.split('\n').collect(),
            y.content.split('\n').collect(),
        );
        for (i, line) in xs.iter().enumerate() {
            if ys.get(i) != Some(line) {
                return shared;
            }
            shared += tok.count(line) + 1;
        }
        if xs.len() != ys.len() {
            return shared;
        }
    }
    shared
}

/// Thirty messages of one chat, each prompt built after the one before and then the message
/// and its answer stored, as the bot does: the stable part never changes, the conversation
/// is extended rather than slid, and the report's shared prefix is what a comparison of the
/// two prompts finds.
#[tokio::test]
async fn each_prompt_of_a_chat_extends_the_one_before() {
    let backend: Arc<dyn MemoryBackend> = Arc::new(InMemoryBackend::new(Some(embedder())));
    let scope = chat_scope("alice");
    backend
        .store(
            &common::user_scope("alice"),
            NewMemory::new("Alice's cat is called Miso.")
                .with_kind(MemoryKind::Fact)
                .at(at("2026-01-01T09:00:00Z")),
        )
        .await
        .unwrap();
    let config = cfg(&backend);
    let tok = tokenizer();
    let start = at("2026-03-01T09:00:00Z");
    let mut previous: Option<CompiledPrompt> = None;
    let (mut kept, mut restarted, mut shared_total, mut tokens_total) = (0, 0, 0u32, 0u32);
    for i in 0..30 {
        let (said, answer) = exchange(i);
        let now = start.plus(std::time::Duration::from_secs(120 * i as u64));
        let p = prompt_after(
            &config,
            &said,
            1500,
            now,
            previous.as_ref().map(CompiledPrompt::previous),
        )
        .await;
        // What changes least first; the clock and the message last.
        let n = p.messages.len();
        assert_eq!(p.layout[n - 1], Block::Observation);
        assert_eq!(p.layout[n - 2], Block::State);
        assert!(p.messages[n - 2].content.starts_with("Current time:"));
        assert!(
            p.stability.windows(2).all(|w| w[0] <= w[1]),
            "{:?}",
            p.stability
        );
        assert!(p.report.fits, "{:#?}", p.report);
        if let Some(before) = &previous {
            let cache = &p.report.cache;
            // The stable part (system prompt, who is talking, the fact) is the same.
            let stable = before.report.cache.stable_messages;
            assert!(stable >= 3, "{:?}", before.stability);
            assert_eq!(before.messages[..stable], p.messages[..stable]);
            assert!(cache.hit, "{cache:?}");
            assert!(p.meta.cache_hit, "the IR's meta says so too");
            // The report's count is what comparing the text finds.
            let direct = shared_by_text(&p, before, tok.as_ref());
            assert_eq!(cache.shared_prefix_tokens, Some(direct));
            assert!(direct >= before.report.cache.stable_tokens);
            // The conversation starts where it did, and grows, unless it outgrew its room.
            let talk = |q: &CompiledPrompt| {
                q.layout
                    .iter()
                    .position(|b| *b == Block::Data(SourceKind::Temporal))
                    .map(|i| q.messages[i].content.clone())
            };
            if cache.conversation_kept {
                kept += 1;
                let (old, new) = (talk(before).unwrap(), talk(&p).unwrap());
                let open = old.strip_suffix("\n</recalled-memory>").unwrap();
                assert!(new.starts_with(open), "{old}\n---\n{new}");
                assert!(new.len() > old.len());
            } else {
                restarted += 1;
                // It starts again holding at most half its room.
                let room = config.conversation_room(1500);
                let section_tokens: u32 = p
                    .report
                    .sections
                    .iter()
                    .filter(|s| s.stability == Stability::Growing)
                    .map(|s| match s.action {
                        prompt_ir::Action::Kept { tokens } => tokens,
                        _ => 0,
                    })
                    .sum();
                assert!(section_tokens <= room / 2, "{section_tokens} of {room}");
            }
            shared_total += direct;
            tokens_total += cache.prompt_tokens;
        }
        previous = Some(p);
        backend
            .store_batch(
                &scope,
                vec![
                    NewMemory::new(said).with_role(Role::User).at(now),
                    NewMemory::new(answer)
                        .with_role(Role::Assistant)
                        .at(now.plus(std::time::Duration::from_secs(30))),
                ],
            )
            .await
            .unwrap();
    }
    // The conversation is extended far more often than it starts again: it starts again
    // holding half its room, which exchanges of about 50 tokens take some four calls to fill.
    assert!(restarted >= 1, "30 exchanges outgrow 450 tokens");
    assert!(kept >= 3 * restarted, "kept {kept}, restarted {restarted}");
    let share = f64::from(shared_total) / f64::from(tokens_total);
    assert!(share >= 0.7, "shared prefix {share:.2}");
}

/// "thanks!" gets the stable part of a prompt (the facts, the conversation) and nothing
/// recalled for it; a question gets what it asks about.
#[tokio::test]
async fn small_talk_gets_nothing_recalled() {
    let backend: Arc<dyn MemoryBackend> = Arc::new(InMemoryBackend::new(Some(embedder())));
    common::seed_alice(backend.as_ref()).await;
    let mut config = cfg(&backend);
    // A conversation block of the newest few messages, so the older talk must be recalled.
    config.conversation_share = 0.05;
    let now = common::now();
    let thanks = prompt_after(&config, "thanks!", 2000, now, None).await;
    assert!(thanks.report.cues.small_talk);
    assert!(
        !thanks.meta.cache_hit,
        "no previous prompt: nothing to serve from a cache"
    );
    let blocks: Vec<Block> = thanks.layout.clone();
    assert!(
        blocks.contains(&Block::Data(SourceKind::Knowledge)),
        "{blocks:?}"
    );
    assert!(
        !blocks.contains(&Block::Data(SourceKind::Semantic)),
        "{:#?}",
        thanks.messages
    );
    assert!(
        thanks
            .stability
            .iter()
            .zip(&thanks.layout)
            .all(|(s, b)| *s != Stability::Volatile || !matches!(b, Block::Data(_))),
        "nothing recalled for it: {:?}",
        thanks.layout
    );
    let semantic = thanks.report.source(SourceKind::Semantic).unwrap();
    assert_eq!(semantic.status, hydrate::SourceStatus::Skipped);

    let asked = prompt_after(&config, common::OBSERVATION, 2000, now, None).await;
    assert!(!asked.report.cues.small_talk);
    assert!(asked.layout.contains(&Block::Data(SourceKind::Semantic)));
    let text: String = asked.messages.iter().map(|m| m.content.as_str()).collect();
    assert!(text.contains("Try a red lentil dal"), "{text}");
    // The small talk's prompt is the start of the question's, up to its conversation.
    let through = thanks.report.cache.through_conversation;
    assert_eq!(thanks.messages[..through], asked.messages[..through]);
    assert!(thanks.report.estimated_prompt_tokens < asked.report.estimated_prompt_tokens);
}

/// What the caller's prompt already holds (an app's own history) is not recalled again.
#[tokio::test]
async fn what_the_caller_holds_is_not_recalled_again() {
    let backend: Arc<dyn MemoryBackend> = Arc::new(InMemoryBackend::new(Some(embedder())));
    common::seed_alice(backend.as_ref()).await;
    let mut config = cfg(&backend);
    config.relevance_floor = 0.0;
    let held = "Try a red lentil dal: red lentils, onion, garlic, cumin and a tin of tomatoes, \
                about 25 minutes.";
    let mut req = request(common::OBSERVATION, 4000);
    req.strategy.temporal_window = 0;
    let plain = input(chat_scope("alice"), req.clone());
    let p = compile(&config, &hydrate(&config, &plain).await.unwrap()).unwrap();
    let text: String = p.messages.iter().map(|m| m.content.as_str()).collect();
    assert!(text.contains(held), "{text}");
    let present = plain.with_present(vec![format!("  {held}\n")]);
    let p = compile(&config, &hydrate(&config, &present).await.unwrap()).unwrap();
    let text: String = p.messages.iter().map(|m| m.content.as_str()).collect();
    assert!(!text.contains(held), "{text}");
    assert!(text.contains("Can you suggest a quick dinner?"), "{text}");
    // Nothing of the conversation without a window, nor in a system message.
    assert!(!p.layout.contains(&Block::Data(SourceKind::Temporal)));
    for m in p.messages.iter().filter(|m| m.role == ChatRole::System) {
        assert!(
            !m.content.contains("<recalled-memory kind"),
            "{}",
            m.content
        );
    }
}
