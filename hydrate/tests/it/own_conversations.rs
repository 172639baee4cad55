//! An agent's own conversations in a tight prompt (memory-sqlite, `HashingEmbedder`): an
//! assistant's answer of 5,000 characters whose answering sentence is near its end reaches a
//! 600-token prompt as an excerpt holding that sentence, in order, gaps marked, and the
//! explain report names the memory and the character ranges it kept (with excerpts off it
//! is cut at its head and the sentence is lost); and a fact that changed reaches a tight
//! prompt ahead of the one it changed (said alike, the newer wins the tie), both dated when
//! there is room. (The same answer found by meaning with the local model is
//! `ava-bot/tests/long_answers.rs`: the app builds that model, hydrate's tests need not.)

use crate::common;

use std::sync::Arc;

use common::{at, chat_scope, data, now, tokenizer};
use hydrate::testing::{LONG_ANSWER_QUESTION, LONG_ANSWER_SENTENCE, long_answer};
use hydrate::{
    CompiledPrompt, HydrateInput, HydrationConfig, SectionExplain, compile, hydrate,
    memory_provider,
};
use memory_core::{MemoryBackend, MemoryId, NewMemory, Role};
use prompt_ir::{Action, ContextRequest, TokenBudget};

const ANSWERING: &str = LONG_ANSWER_SENTENCE;
const QUESTION: &str = LONG_ANSWER_QUESTION;

/// [`long_answer`] between three short turns, in a SQLite store in `dir`; returns the store
/// and the answer's id.
async fn seeded(dir: &tempfile::TempDir) -> (Arc<dyn MemoryBackend>, MemoryId) {
    let store = common::sqlite_store(dir).await;
    let answer = long_answer();
    assert!((4_800..5_400).contains(&answer.len()), "{}", answer.len());
    let scope = chat_scope("alice");
    let turns = vec![
        NewMemory::new("Can you summarise everything we changed before the launch?")
            .with_role(Role::User)
            .at(at("2026-03-01T10:00:00Z")),
        NewMemory::new(answer)
            .with_role(Role::Assistant)
            .at(at("2026-03-01T10:01:00Z")),
        NewMemory::new("Thanks! Now something else: what should I cook tonight?")
            .with_role(Role::User)
            .at(at("2026-03-09T18:00:00Z")),
        NewMemory::new("How about a red lentil dal with rice?")
            .with_role(Role::Assistant)
            .at(at("2026-03-09T18:01:00Z")),
    ];
    let stored = store.store_batch(&scope, turns).await.unwrap();
    (store, stored[1].id)
}

async fn prompt(config: &HydrationConfig, budget: u32) -> CompiledPrompt {
    common::prompt_now(config, chat_scope("alice"), QUESTION, budget).await
}

fn section(prompt: &CompiledPrompt, id: MemoryId) -> &SectionExplain {
    prompt
        .report
        .sections
        .iter()
        .find(|s| s.memory_id == Some(id))
        .expect("the long answer was retrieved")
}

#[tokio::test]
async fn a_long_answer_reaches_a_tight_prompt_by_the_passage_that_answers() {
    let dir = tempfile::tempdir().unwrap();
    let (store, id) = seeded(&dir).await;
    let mut config = HydrationConfig::new(common::SYSTEM_PROMPT, tokenizer()).with_provider(
        memory_provider(Arc::clone(&store), Some(common::embedder())),
    );
    config.memory_tools = false;
    let answer = long_answer();

    let p = prompt(&config, 600).await;
    assert!(p.report.fits, "{:#?}", p.report);
    assert!(p.report.estimated_prompt_tokens <= 600);
    let text = data(&p);
    assert!(text.contains(ANSWERING), "{text}");
    assert!(text.contains("[…]"), "gaps are marked: {text}");
    // Not the whole answer: compile kept what fits, the passages that answer first.
    assert!(!text.contains(&hydrate::escape_data(&answer)), "{text}");
    let s = section(&p, id);
    assert!(matches!(s.action, Action::Truncated { .. }), "{s:?}");
    assert!(s.reason.contains("excerpt"), "{}", s.reason);
    let kept = s
        .excerpt
        .as_ref()
        .expect("the report names the kept ranges");
    let chars: Vec<char> = answer.chars().collect();
    let pieces: Vec<String> = kept
        .iter()
        .map(|&(a, b)| chars[a..b].iter().collect())
        .collect();
    assert!(pieces.iter().any(|p| p.contains(ANSWERING)), "{pieces:?}");
    // In order, each in the prompt.
    assert!(kept.windows(2).all(|w| w[0].1 <= w[1].0), "{kept:?}");
    for piece in &pieces {
        assert!(text.contains(&hydrate::escape_data(piece)), "{piece}");
    }

    // With room for it, the answer is whole, with no excerpt named.
    let roomy = prompt(&config, 4000).await;
    assert!(data(&roomy).contains(&hydrate::escape_data(&answer)));
    assert!(section(&roomy, id).excerpt.is_none());

    // Excerpts off: the same budget cuts the answer at its head, and the sentence is lost.
    config.excerpts = false;
    let cut = prompt(&config, 600).await;
    assert!(!data(&cut).contains(ANSWERING), "{}", data(&cut));
    assert!(section(&cut, id).excerpt.is_none());
}

/// Weeks of talk about a project, in which the dashboard's response time was said once and
/// changed later; returns the store and the ids of the older and the newer statement.
async fn changed_fact(dir: &tempfile::TempDir) -> (Arc<dyn MemoryBackend>, MemoryId, MemoryId) {
    let store = common::sqlite_store(dir).await;
    let scope = chat_scope("alice");
    let mut turns = Vec::new();
    for day in 1..=20 {
        turns.push(
            NewMemory::new(format!(
                "Day {day}: I fixed ticket {} in the importer and renamed variable v{day}.",
                day * 7
            ))
            .with_role(Role::User)
            .at(at(&format!("2026-02-{day:02}T10:00:00Z"))),
        );
    }
    // Said alike, so they match the question alike: what tells them apart is when.
    let older =
        NewMemory::new("In January the average response time of the dashboard API was 400ms.")
            .with_role(Role::User)
            .at(at("2026-02-03T11:00:00Z"));
    let newer =
        NewMemory::new("In February the average response time of the dashboard API was 250ms.")
            .with_role(Role::User)
            .at(at("2026-02-17T11:00:00Z"));
    turns.push(older);
    turns.push(newer);
    turns.push(
        NewMemory::new("Let us plan the release notes next.")
            .with_role(Role::User)
            .at(at("2026-03-09T18:00:00Z")),
    );
    turns.push(
        NewMemory::new("Sure, start with the importer fixes.")
            .with_role(Role::Assistant)
            .at(at("2026-03-09T18:01:00Z")),
    );
    let stored = store.store_batch(&scope, turns).await.unwrap();
    (store, stored[20].id, stored[21].id)
}

fn holds(prompt: &CompiledPrompt, id: MemoryId) -> bool {
    prompt
        .report
        .sections
        .iter()
        .any(|s| s.memory_id == Some(id) && !matches!(s.action, Action::Dropped { .. }))
}

#[tokio::test]
async fn a_changed_fact_reaches_a_tight_prompt_ahead_of_the_one_it_changed() {
    let dir = tempfile::tempdir().unwrap();
    let (store, older, newer) = changed_fact(&dir).await;
    let config = hydrate::product::config(Arc::clone(&store), Some(common::embedder())).unwrap();
    let config = HydrationConfig {
        memory_tools: false,
        ..config
    };
    let ask = |config: HydrationConfig, budget: u32| async move {
        let request = ContextRequest::new(
            "What is the average response time of the dashboard API?",
            TokenBudget::new(budget).unwrap(),
        );
        let input = HydrateInput::new(chat_scope("alice"), request).at(now());
        compile(&config, &hydrate(&config, &input).await.unwrap()).unwrap()
    };
    // The tightest budget that holds either statement holds the newer one.
    let mut tightest = None;
    for budget in (300..=900).step_by(10) {
        let p = ask(config.clone(), budget).await;
        if holds(&p, older) || holds(&p, newer) {
            tightest = Some((budget, p));
            break;
        }
    }
    let (budget, p) = tightest.expect("some budget up to 900 holds a statement");
    assert!(holds(&p, newer), "at {budget}: {}", data(&p));
    assert!(!holds(&p, older), "at {budget}: {}", data(&p));
    // With room for both, both are there, each under its day.
    let roomy = ask(config.clone(), 4000).await;
    let text = data(&roomy);
    assert!(holds(&roomy, older) && holds(&roomy, newer), "{text}");
    assert!(
        text.contains("[2026-02-03 Tue]") && text.contains("[2026-02-17 Tue]"),
        "{text}"
    );

    // The newer ranks ahead of the older in the report too.
    let value = |p: &CompiledPrompt, id| {
        p.report
            .sections
            .iter()
            .find(|s| s.memory_id == Some(id))
            .map(|s| s.value)
            .unwrap()
    };
    assert!(value(&roomy, newer) > value(&roomy, older));
}

/// Sixty answers of the agent that repeat a question's words, and, older than all of them,
/// the one message where the user said what the question asks about.
async fn said_once_among_answers(dir: &tempfile::TempDir) -> (Arc<dyn MemoryBackend>, MemoryId) {
    let store = common::sqlite_store(dir).await;
    let scope = chat_scope("alice");
    let mut turns = vec![
        NewMemory::new("By the way, peanuts make me ill, so keep them out of anything I cook.")
            .with_role(Role::User)
            .at(at("2026-02-01T09:00:00Z")),
    ];
    for i in 0..60u32 {
        turns.push(
            NewMemory::new(format!(
                "Recipe idea {i}: a dinner to cook tonight. Cook the onions first, then cook \
                 the rice; what you cook for dinner tonight can be kept for lunch."
            ))
            .with_role(Role::Assistant)
            .at(at("2026-02-02T09:00:00Z")
                .plus(std::time::Duration::from_secs(3600 * u64::from(i)))),
        );
    }
    let stored = store.store_batch(&scope, turns).await.unwrap();
    (store, stored[0].id)
}

#[tokio::test]
async fn a_first_person_question_reaches_the_users_own_words_among_the_agents_answers() {
    let dir = tempfile::tempdir().unwrap();
    let (store, said) = said_once_among_answers(&dir).await;
    let config = hydrate::product::config(Arc::clone(&store), Some(common::embedder())).unwrap();
    let config = HydrationConfig {
        memory_tools: false,
        ..config
    };
    let ask = |config: HydrationConfig| async move {
        let request = ContextRequest::new(
            "What should I never cook for my dinner tonight?",
            TokenBudget::new(500).unwrap(),
        );
        let input = HydrateInput::new(chat_scope("alice"), request).at(now());
        compile(&config, &hydrate(&config, &input).await.unwrap()).unwrap()
    };
    let p = ask(config.clone()).await;
    assert!(holds(&p, said), "{}\n{:#?}", data(&p), p.report.sources);
    assert!(data(&p).contains("peanuts make me ill"), "{}", data(&p));
    let s = p
        .report
        .sections
        .iter()
        .find(|s| s.memory_id == Some(said))
        .unwrap();
    let cues = s.scores.as_ref().and_then(|x| x.cues.as_deref());
    assert_eq!(cues, Some("own words"), "{s:?}");

    // Without the cue's lift, the search of the user's own words still brings it: that
    // search's best hit ranks on one scale with the main search's, where the answers,
    // which share more of the question's words, would crowd it out. It is not marked as
    // the user's own words then.
    let plain = ask(HydrationConfig {
        cue_weights: hydrate::CueWeights::OFF,
        ..config
    })
    .await;
    assert!(holds(&plain, said), "{}", data(&plain));
    let s = plain
        .report
        .sections
        .iter()
        .find(|s| s.memory_id == Some(said))
        .unwrap();
    assert_eq!(
        s.scores.as_ref().and_then(|x| x.cues.as_deref()),
        None,
        "{s:?}"
    );
}
