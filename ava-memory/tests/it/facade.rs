//! The facade over a real SQLite file: opening as `ava` opens, keeping exchanges and facts,
//! forgetting, erasing a conversation and a person, and refusing what it cannot do.

use ava_memory::erase::GROUP_USER;
use ava_memory::prompts;
use ava_memory::{EmbedderChoice, EmbedderSettings, Error, Location, Memory, Scope};

use crate::common::Store;

#[tokio::test]
async fn a_store_opened_by_path_keeps_what_it_was_told_across_opens() {
    let store = Store::new();
    let Location::Sqlite(path) = store.location() else {
        unreachable!("a path is a SQLite store")
    };
    let memory = store.open().await;
    assert!(
        memory.embedder_note().contains("hash"),
        "{}",
        memory.embedder_note()
    );
    let chat = memory.person("42", "7").unwrap();
    let kept = chat
        .remember("I moved to Lisbon", Some("Nice!"))
        .await
        .unwrap();
    assert_eq!((kept.message_ids.len(), kept.answer_ids.len()), (1, 1));
    let second = chat.remember("It is sunny here", None).await.unwrap();
    drop((chat, memory));

    // By path, as `Memory::open` is given it.
    let settings = EmbedderSettings::default().with_choice(EmbedderChoice::Hash);
    let memory = Memory::open_with(&Location::parse(&path), &settings)
        .await
        .unwrap();
    let chat = memory.person("42", "7").unwrap();
    let said = chat.history(4000).await.unwrap();
    let texts: Vec<&str> = said.iter().map(|m| m.content.as_str()).collect();
    assert_eq!(texts, ["I moved to Lisbon", "Nice!", "It is sunny here"]);
    // A message answers the last turn kept before it.
    assert_eq!(said[2].context.as_deref(), Some("in reply to: Nice!"));
    assert_eq!(said[2].id, second.message_ids[0]);
    // A history budget keeps the newest that fit.
    let short = chat.history(12).await.unwrap();
    assert_eq!(
        short.last().map(|m| m.content.as_str()),
        Some("It is sunny here")
    );
    assert!(short.len() < 3, "{short:?}");
}

#[tokio::test]
async fn an_embedder_choice_that_cannot_be_met_is_an_error_not_another_embedder() {
    let store = Store::new();
    let missing = tempfile::tempdir().unwrap();
    let settings = EmbedderSettings {
        model_dir: Some(missing.path().join("no-model-here")),
        ..EmbedderSettings::default().with_choice(EmbedderChoice::Local)
    };
    let err = Memory::open_with(&store.location(), &settings)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::ModelMissing { .. }), "{err:?}");
    // Automatic: keyword search only, and it says why.
    let settings = EmbedderSettings {
        model_dir: Some(missing.path().join("no-model-here")),
        ..EmbedderSettings::default()
    };
    let memory = Memory::open_with(&store.location(), &settings)
        .await
        .unwrap();
    assert!(memory.embedder().is_none());
    assert!(
        memory.embedder_note().contains("keywords only"),
        "{}",
        memory.embedder_note()
    );
}

#[tokio::test]
async fn empty_messages_and_a_zero_budget_are_refused_before_anything_is_stored() {
    let store = Store::new();
    let memory = store.open().await;
    let chat = memory.person("42", "7").unwrap();
    for err in [
        chat.context("  ", 100).await.unwrap_err(),
        chat.context("hello", 0).await.unwrap_err(),
        chat.remember("\n", Some("answer")).await.err().unwrap(),
        chat.remember_fact(" ").await.unwrap_err(),
    ] {
        assert!(matches!(err, Error::Invalid { .. }), "{err:?}");
    }
    assert!(chat.history(4000).await.unwrap().is_empty());
    assert!(
        memory.person("", "7").is_err(),
        "an empty user key is no person"
    );
}

#[tokio::test]
async fn a_fact_told_twice_is_kept_once_and_forgetting_it_ends_it() {
    let store = Store::new();
    let memory = store.open().await;
    let web = memory.person("42", "web").unwrap();
    let first = web.remember_fact("My sister is called Ines").await.unwrap();
    let again = memory
        .person("42", "phone")
        .unwrap()
        .remember_fact("My sister is called Ines")
        .await
        .unwrap();
    assert_eq!(
        first.id, again.id,
        "the same fact, told in another chat, merges"
    );
    assert_eq!(web.facts().await.unwrap().len(), 1);
    web.forget(first.id).await.unwrap();
    assert!(web.facts().await.unwrap().is_empty());
}

#[tokio::test]
async fn a_kept_prompt_goes_with_its_question() {
    let store = Store::new();
    let memory = store.open().await;
    let chat = memory.person("42", "7").unwrap();
    let scope = chat.scope().clone();
    let question = "Where does Pixel sleep?";
    chat.context(question, 2000).await.unwrap();
    // Built, but its question is not stored: nothing kept.
    let kept = |memory: Memory, scope: Scope| async move {
        prompts::newest(memory.store().as_ref(), &scope)
            .await
            .unwrap()
            .len()
    };
    assert_eq!(kept(memory.clone(), scope.clone()).await, 0);
    // Another message remembered: not the prompt's question, so it is not kept either.
    chat.remember("something else", None).await.unwrap();
    assert_eq!(kept(memory.clone(), scope.clone()).await, 0);
    chat.context(question, 2000).await.unwrap();
    let ids = chat
        .remember(question, Some("On the window seat"))
        .await
        .unwrap();
    assert_eq!(kept(memory.clone(), scope.clone()).await, 1);
    chat.forget(ids.message_ids[0]).await.unwrap();
    assert_eq!(
        kept(memory, scope).await,
        0,
        "forgetting the question takes its prompt"
    );
}

#[tokio::test]
async fn erasing_a_conversation_keeps_the_persons_facts_and_erasing_the_person_takes_all() {
    let store = Store::new();
    let memory = store.open().await;
    let web = memory.person("42", "web").unwrap();
    web.remember_fact("My cat is called Pixel").await.unwrap();
    web.remember("hello", Some("hi")).await.unwrap();
    let group = memory.group("g1").unwrap().member("42", "Maya").unwrap();
    group
        .remember("I am bringing cake", Some("Lovely"))
        .await
        .unwrap();
    let other = memory.group("g1").unwrap().member("43", "Noor").unwrap();
    other.remember("I am bringing tea", None).await.unwrap();

    assert_eq!(web.erase().await.unwrap(), 2);
    assert!(web.history(4000).await.unwrap().is_empty());
    assert_eq!(
        web.facts().await.unwrap().len(),
        1,
        "the person's facts stay"
    );

    let erased = memory
        .erase_person(memory_core::DEFAULT_TENANT, "42")
        .await
        .unwrap();
    assert_eq!(erased.total(), 3, "{erased:?}");
    assert!(web.facts().await.unwrap().is_empty());
    let left = memory.group("g1").unwrap().history(4000).await.unwrap();
    let texts: Vec<&str> = left.iter().map(|m| m.content.as_str()).collect();
    assert_eq!(
        texts,
        ["Noor: I am bringing tea"],
        "only the other member's part is left"
    );
    assert_eq!(memory.group("g1").unwrap().scope().user(), GROUP_USER);
}

#[tokio::test]
async fn a_long_exchange_is_kept_in_linked_parts_the_answer_after_the_message() {
    use std::sync::Arc;

    use memory_core::{Limits, MemoryBackend, Role};
    // A store that takes at most 64 bytes in one memory, so both turns come in parts.
    let store: Arc<dyn MemoryBackend> = Arc::new(
        memory_inmem::InMemoryBackend::new(None).with_limits(Limits {
            max_content_bytes: 64,
            ..Limits::default()
        }),
    );
    let memory = Memory::over(store, None).unwrap();
    let chat = memory.person("42", "7").unwrap();
    let message = "word ".repeat(40);
    let answer = "reply ".repeat(30);
    let kept = chat
        .remember(message.trim(), Some(answer.trim()))
        .await
        .unwrap();
    assert!(kept.message_ids.len() > 1, "{kept:?}");
    assert!(kept.answer_ids.len() > 1, "{kept:?}");

    let said = chat.history(100_000).await.unwrap();
    let ids: Vec<_> = said.iter().map(|m| m.id).collect();
    let expected: Vec<_> = kept
        .message_ids
        .iter()
        .chain(&kept.answer_ids)
        .copied()
        .collect();
    assert_eq!(
        ids, expected,
        "the message's parts, then the answer's, in order"
    );
    for m in &said {
        let role = if kept.message_ids.contains(&m.id) {
            Role::User
        } else {
            Role::Assistant
        };
        assert_eq!(m.role, Some(role), "{m:?}");
    }
    let answer_first = &said[kept.message_ids.len()];
    assert!(
        answer_first
            .context
            .as_deref()
            .is_some_and(|c| c.starts_with("in reply to: word word")),
        "the answer's context is the message it answers: {:?}",
        answer_first.context
    );
}
