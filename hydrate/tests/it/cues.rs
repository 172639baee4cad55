//! Question understanding on the durable store (memory-sqlite, `HashingEmbedder`): a
//! question about a time finds what was said then even when nothing else matches it,
//! quoted phrases and informative names lift what holds them, one fact said several
//! times takes one place in the prompt, a reply the question's words find brings the
//! message it answers, and a message amid talk that matches is lifted above a stray match.

use crate::common;

use std::sync::Arc;

use common::{at, chat_scope, now, tokenizer};
use hydrate::{
    CompiledPrompt, CueWeights, HydrateInput, HydrationConfig, SourceKind, compile, hydrate,
    memory_provider,
};
use memory_core::{MemoryBackend, NewMemory, Role};
use prompt_ir::{ContextRequest, TokenBudget};

async fn store(dir: &tempfile::TempDir) -> Arc<dyn MemoryBackend> {
    common::sqlite_store(dir).await
}

fn cfg(backend: &Arc<dyn MemoryBackend>) -> HydrationConfig {
    let mut c = HydrationConfig::new(common::SYSTEM_PROMPT, tokenizer()).with_provider(
        memory_provider(Arc::clone(backend), Some(common::embedder())),
    );
    c.memory_tools = false;
    // How cues rank what is recalled: no conversation block, so every message competes.
    c.conversation_share = 0.0;
    c
}

/// [`cfg`] with the memory source's tuning changed by `tune`.
fn cfg_with(
    backend: &Arc<dyn MemoryBackend>,
    tune: impl FnOnce(&mut hydrate::MemoryTuning),
) -> HydrationConfig {
    let mut c = cfg(backend);
    tune(&mut c.memory);
    c
}

async fn said(backend: &Arc<dyn MemoryBackend>, lines: &[(&str, &str)]) {
    let memories = lines
        .iter()
        .map(|(when, text)| NewMemory::new(*text).with_role(Role::User).at(at(when)))
        .collect();
    backend
        .store_batch(&chat_scope("alice"), memories)
        .await
        .unwrap();
}

async fn prompt(config: &HydrationConfig, question: &str, budget: u32) -> CompiledPrompt {
    let mut request = ContextRequest::new(question, TokenBudget::new(budget).unwrap());
    request.strategy.temporal_window = 2;
    request.strategy.include_knowledge = false;
    let input = HydrateInput::new(chat_scope("alice"), request).at(now());
    compile(config, &hydrate(config, &input).await.unwrap()).unwrap()
}

fn data(prompt: &CompiledPrompt) -> String {
    prompt
        .messages
        .iter()
        .skip(1)
        .take(prompt.messages.len().saturating_sub(2))
        .map(|m| m.content.as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

/// A month of small talk, yesterday's message about the dentist, and this morning's two
/// messages. "Now" is 2026-03-10 09:30.
async fn month_of_talk(backend: &Arc<dyn MemoryBackend>) {
    let mut lines: Vec<(String, String)> = (1..=28)
        .map(|d| {
            (
                format!("2026-02-{d:02}T12:00:00Z"),
                format!("On day {d} I watered the garden and read a little."),
            )
        })
        .collect();
    lines.push((
        "2026-03-09T18:00:00Z".into(),
        "I booked the dentist for Friday at three.".into(),
    ));
    lines.push(("2026-03-10T09:00:00Z".into(), "Good morning!".into()));
    lines.push(("2026-03-10T09:01:00Z".into(), "Coffee first.".into()));
    let refs: Vec<(&str, &str)> = lines
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    said(backend, &refs).await;
}

const DENTIST: &str = "I booked the dentist for Friday at three.";

#[tokio::test]
async fn a_question_about_yesterday_gets_what_was_said_yesterday() {
    let dir = tempfile::tempdir().unwrap();
    let backend = store(&dir).await;
    month_of_talk(&backend).await;
    let config = cfg(&backend);

    // Without a time, yesterday's message matches the question no better than the garden
    // talk, which fills the prompt.
    let plain = prompt(&config, "What did I tell you?", 260).await;
    assert!(!data(&plain).contains(DENTIST), "{}", data(&plain));
    assert!(
        plain.report.cues.window.is_none(),
        "{:?}",
        plain.report.cues
    );

    let asked = prompt(&config, "What did I tell you yesterday?", 260).await;
    assert!(
        data(&asked).contains(DENTIST),
        "{}\n{:?}",
        data(&asked),
        asked.report.sources
    );
    let window = asked.report.cues.window.as_ref().unwrap();
    assert_eq!(window.said, "yesterday");
    assert_eq!(window.start, at("2026-03-09T00:00:00Z"));
    assert_eq!(window.end, at("2026-03-10T00:00:00Z"));
    let section = asked
        .report
        .sections
        .iter()
        .find(|s| s.id.starts_with("semantic:") && s.scores.as_ref().unwrap().cues.is_some())
        .unwrap();
    // All the talk is the user's and the question is in the first person: every message is
    // the user's own words, and the dentist's is also from the asked time.
    assert_eq!(
        section.scores.as_ref().unwrap().cues.as_deref(),
        Some("time, own words")
    );
    assert!(section.found_by.contains(&SourceKind::Semantic));

    // The time search also runs with the lift off; it is the lift that ranks the match.
    let mut off = cfg(&backend);
    off.cue_weights = CueWeights::OFF;
    let unlifted = prompt(&off, "What did I tell you yesterday?", 260).await;
    let lifted_value = asked.report.section(&section.id).unwrap().value;
    let unlifted_value = unlifted
        .report
        .section(&section.id)
        .map(|s| s.value)
        .unwrap();
    assert!(
        lifted_value > unlifted_value,
        "{lifted_value} <= {unlifted_value}"
    );
}

#[tokio::test]
async fn quoted_phrases_and_rare_names_lift_what_holds_them_and_common_names_do_not() {
    let dir = tempfile::tempdir().unwrap();
    let backend = store(&dir).await;
    said(
        &backend,
        &[
            ("2026-02-01T10:00:00Z", "Caroline said the book was good."),
            (
                "2026-02-02T10:00:00Z",
                "Caroline read a book called Nothing Is Impossible.",
            ),
            (
                "2026-02-03T10:00:00Z",
                "Caroline and Oscar read a book together.",
            ),
            (
                "2026-02-04T10:00:00Z",
                "Caroline likes books about the sea.",
            ),
            (
                "2026-02-05T10:00:00Z",
                "Caroline gave me a book for my birthday.",
            ),
        ],
    )
    .await;
    // Names lift nothing by default (measured on LoCoMo); the mechanism, turned on.
    let mut config = cfg(&backend);
    config.cue_weights.name = 0.15;
    let p = prompt(
        &config,
        "Which book did Caroline and Oscar read, \"nothing is impossible\"?",
        2000,
    )
    .await;
    assert_eq!(p.report.cues.phrases, vec!["nothing is impossible"]);
    assert_eq!(p.report.cues.names, vec!["Caroline", "Oscar"]);
    let cues_of = cues_by_content(&backend, &p).await;
    let of = |needle: &str| {
        cues_of
            .iter()
            .find(|(content, _)| content.contains(needle))
            .map(|(_, cues)| cues.clone())
            .unwrap()
    };
    assert_eq!(of("Nothing Is Impossible").as_deref(), Some("phrase"));
    // Every memory names Caroline: her name tells them apart no more than it lifts them.
    assert_eq!(of("Oscar").as_deref(), Some("name Oscar"));
    assert_eq!(of("birthday"), None);
}

/// Each retrieved memory's content with the cues its explain entry names.
async fn cues_by_content(
    backend: &Arc<dyn MemoryBackend>,
    p: &CompiledPrompt,
) -> Vec<(String, Option<String>)> {
    let mut out = Vec::new();
    for s in &p.report.sections {
        if let Some(id) = s.memory_id {
            let entry = backend.get(&chat_scope("alice"), id).await.unwrap();
            out.push((
                entry.content,
                s.scores.as_ref().and_then(|x| x.cues.clone()),
            ));
        }
    }
    out
}

#[tokio::test]
async fn one_fact_said_three_times_takes_one_place() {
    let dir = tempfile::tempdir().unwrap();
    let backend = store(&dir).await;
    said(
        &backend,
        &[
            (
                "2026-01-05T10:00:00Z",
                "My manager at work is called Tomás.",
            ),
            (
                "2026-02-05T10:00:00Z",
                "My manager at work is called Tomás!",
            ),
            ("2026-02-20T10:00:00Z", "my manager at work is called Tomás"),
            (
                "2026-02-21T10:00:00Z",
                "My manager likes long meetings at work.",
            ),
            ("2026-03-10T09:00:00Z", "Good morning!"),
            ("2026-03-10T09:01:00Z", "Coffee first."),
        ],
    )
    .await;
    let config = cfg(&backend);
    let p = prompt(&config, "Who is my manager at work?", 2000).await;
    let text = data(&p);
    assert_eq!(
        text.to_lowercase().matches("is called tomás").count(),
        1,
        "{text}"
    );
    assert!(text.contains("long meetings"), "{text}");
    let semantic = p.report.source(SourceKind::Semantic).unwrap();
    assert_eq!(semantic.near_duplicates, 2, "{semantic:?}");
    // The newest telling is the one kept (equal relevance: newer wins).
    assert!(
        text.contains("my manager at work is called Tomás\n"),
        "{text}"
    );

    let mut all = cfg(&backend);
    all.near_duplicate = None;
    let every = prompt(&all, "Who is my manager at work?", 2000).await;
    assert_eq!(
        data(&every)
            .to_lowercase()
            .matches("is called tomás")
            .count(),
        3
    );
}

/// A reply holds the question's word while the message it answers holds the fact: the
/// reply brings it (with `neighbours` 0 it is not found at all).
#[tokio::test]
async fn a_reply_the_question_finds_brings_the_message_it_answers() {
    let dir = tempfile::tempdir().unwrap();
    let backend = store(&dir).await;
    month_of_talk(&backend).await;
    const SIGNED_UP: &str = "I finally signed up for the evening class at the studio downtown.";
    let exchange = vec![
        NewMemory::new(SIGNED_UP)
            .with_role(Role::User)
            .at(at("2026-02-14T10:00:00Z")),
        NewMemory::new("Pottery at last! You have wanted to try it for years.")
            .with_role(Role::Assistant)
            .at(at("2026-02-14T10:01:00Z")),
    ];
    backend
        .store_batch(&chat_scope("alice"), exchange)
        .await
        .unwrap();
    let question = "Since when am I doing pottery?";

    let config = cfg(&backend);
    let p = prompt(&config, question, 400).await;
    assert!(data(&p).contains("Pottery at last!"), "{}", data(&p));
    assert!(data(&p).contains(SIGNED_UP), "{}", data(&p));

    let off = cfg_with(&backend, |t| t.neighbours = 0);
    let p = prompt(&off, question, 400).await;
    assert!(data(&p).contains("Pottery at last!"), "{}", data(&p));
    assert!(!data(&p).contains(SIGNED_UP), "{}", data(&p));
}

/// A message is read in the talk around it: "My sister is coming too." matches "Who is
/// coming on the Lisbon trip?" no better than a stray "The plumber is coming now." said
/// alone, later, but the messages said just before it match the question well, so it is
/// lifted above the stray one: as the budget grows, it is the first of the two to get room.
/// With `nearby_lift` 0 the newer, stray one is.
#[tokio::test]
async fn a_message_amid_talk_that_matches_is_lifted_above_a_stray_match() {
    let dir = tempfile::tempdir().unwrap();
    let backend = store(&dir).await;
    month_of_talk(&backend).await;
    const SISTER: &str = "My sister is coming too.";
    const PLUMBER: &str = "The plumber is coming now.";
    said(
        &backend,
        &[
            (
                "2026-02-14T10:00:00Z",
                "We fly to Lisbon for the trip in May.",
            ),
            (
                "2026-02-14T10:01:00Z",
                "The Lisbon flat for the trip has a balcony over the river.",
            ),
            ("2026-02-14T10:02:00Z", SISTER),
            ("2026-02-25T16:00:00Z", PLUMBER),
        ],
    )
    .await;
    let question = "Who is coming on the Lisbon trip?";
    let first_in = async |config: &HydrationConfig| {
        for budget in (150..=600).step_by(10) {
            let p = prompt(config, question, budget).await;
            let text = data(&p);
            match (text.contains(SISTER), text.contains(PLUMBER)) {
                (false, false) => continue,
                (true, false) => return SISTER,
                (false, true) => return PLUMBER,
                (true, true) => panic!("both got room at once at {budget} tokens: {text}"),
            }
        }
        panic!("neither got room up to 600 tokens");
    };
    assert_eq!(first_in(&cfg(&backend)).await, SISTER);
    // The explain report says what lifted it, and from what.
    let lifted = async |config: &HydrationConfig| {
        let p = prompt(config, question, 600).await;
        let mut found = None;
        for s in &p.report.sections {
            let Some(id) = s.memory_id else { continue };
            if backend.get(&chat_scope("alice"), id).await.unwrap().content == SISTER {
                let scores = s.scores.clone().expect("a scored memory");
                found = Some((scores.lifted_from, scores.similarity));
            }
        }
        found.expect("the sister's message is a candidate")
    };
    let (from, to) = lifted(&cfg(&backend)).await;
    assert!(
        from.zip(to).is_some_and(|(f, t)| f < t),
        "{from:?} -> {to:?}"
    );

    let off = cfg_with(&backend, |t| t.nearby_lift = prompt_ir::Ratio::ZERO);
    assert_eq!(first_in(&off).await, PLUMBER);
    assert_eq!(lifted(&off).await.0, None);
}
