//! The prompts built for a scope (by the facade, the bot, `ava chat`, the proxy), each kept
//! with its explain report as a record of the scope it read (the newest [`PROMPTS_KEPT`]):
//! the next prompt of the conversation extends the newest ([`previous`], the stable-prefix
//! layout), and `/context`, the proxy's `/v1/ava/explain/<id>` and the inspector read them
//! from the store: after a restart, on another replica, in `ava serve`.
//!
//! What a user deleted does not outlive them here. A report names the memories it weighed
//! by id only (their text is read again when it is shown, so a memory forgotten since shows
//! none), but it quotes its question: the names, phrases and time words read from it. The
//! bot and `ava chat` keep a prompt only once its question is stored in that scope, naming
//! the question and the memories the report weighed as what the record quotes
//! (`Record::quoting`): the store removes it when one of them is deleted or pruned
//! (`MemoryBackend::keep_record`), so forgetting that message, `/wipe`, `/erase` and `ava
//! erase` take the record along, and forgetting another memory of the chat does not. (The
//! proxy keeps its prompt as it sends it, so that the id it returns works at once, before
//! its question is stored: its record names nothing, and any deletion in the scope takes
//! it. A question the upstream then refused is stored nowhere else.) Stripping
//! the question's words from reports instead would leave reports that cannot say why a
//! memory was lifted.

use hydrate::{ExplainReport, PreviousPrompt};
use memory_core::{ErrorChain, MemoryBackend, MemoryId, Record, Scope, Timestamp};
use serde::{Deserialize, Serialize};

/// The kind of the records that hold prompts.
pub const KIND: &str = "prompt";

/// How many of its newest prompts a scope keeps.
pub const PROMPTS_KEPT: usize = 16;

/// Who built a prompt.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Builder {
    /// The Telegram bot, answering a message.
    Bot,
    /// `ava serve`'s proxy, for an app's chat completion.
    Proxy,
    /// `ava chat`, in the terminal.
    Chat,
    /// A program of its own, through the facade ([`crate::Conversation::context`]).
    Library,
}

/// One prompt built, as its record holds it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Built {
    /// Its id (a UUID's 32 hex digits); the proxy's `x-ava-explain-id` names it.
    pub id: String,
    /// Who built it.
    pub by: Builder,
    /// In a group, the member it answered (the group's scope is every member's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member: Option<String>,
    /// Its explain report.
    pub report: ExplainReport,
    /// What the next prompt of the conversation needs of it: its print (hashes of its lines,
    /// no text) and where its conversation block began.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<PreviousPrompt>,
}

impl Built {
    /// A prompt `by` built now, with a fresh id.
    pub fn new(by: Builder, member: Option<String>, report: ExplainReport) -> Self {
        Self {
            id: uuid::Uuid::new_v4().simple().to_string(),
            by,
            member,
            report,
            next: None,
        }
    }

    /// The same, with what the next prompt of the conversation needs of it.
    pub fn with_next(mut self, next: PreviousPrompt) -> Self {
        self.next = Some(next);
        self
    }
}

/// Keeps `built` as the newest prompt of `scope`, built at `at`; says whether it was kept.
/// With `question` (its stored message's memories) the record names what it quotes: the
/// question and the memories its report weighed, and goes when one of them is deleted or
/// pruned; without it (the question is not stored yet) it names nothing, and the deletion
/// of any memory of the scope takes it ([`Record::quoting`]). Never fails its caller: a
/// prompt not kept is one `/context` cannot explain, not a reason to fail an answer, so a
/// failure is logged and passed over.
pub async fn keep(
    store: &dyn MemoryBackend,
    scope: &Scope,
    at: Timestamp,
    built: &Built,
    question: &[MemoryId],
) -> bool {
    let kept = match serde_json::to_string(built) {
        Ok(body) => {
            let mut record = Record::new(KIND, at, body);
            if !question.is_empty() {
                let weighed = built.report.sections.iter().filter_map(|s| s.memory_id);
                record = record.quoting(question.iter().copied().chain(weighed));
            }
            store.keep_record(scope, record, PROMPTS_KEPT).await
        }
        Err(e) => Err(memory_core::MemoryError::invalid(
            "prompt record",
            e.to_string(),
        )),
    };
    match kept {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!(
                scope = %scope,
                error = %ErrorChain(&e),
                "could not keep a prompt's explain report; it cannot be explained later"
            );
            false
        }
    }
}

/// The prompts kept in `scope`, newest first, with when each was built. A record that does
/// not read as one (written by another version) is passed over.
pub async fn newest(
    store: &dyn MemoryBackend,
    scope: &Scope,
) -> memory_core::Result<Vec<(Timestamp, Built)>> {
    let records = store.records(scope, KIND, PROMPTS_KEPT).await?;
    Ok(records
        .into_iter()
        .filter_map(|r| match serde_json::from_str::<Built>(&r.body) {
            Ok(built) => Some((r.at, built)),
            Err(e) => {
                tracing::warn!(scope = %scope, error = %e, "a prompt record does not read as one");
                None
            }
        })
        .collect())
}

/// What the next prompt in `scope` needs of the newest one kept there (see
/// [`hydrate::HydrateInput::after`]); `None` when there is none, or it cannot be read (the
/// next prompt is then built as the first of a conversation is).
pub async fn previous(store: &dyn MemoryBackend, scope: &Scope) -> Option<PreviousPrompt> {
    match store.records(scope, KIND, 1).await {
        Ok(records) => records
            .into_iter()
            .next()
            .and_then(|r| serde_json::from_str::<Built>(&r.body).ok())
            .and_then(|b| b.next),
        Err(e) => {
            tracing::warn!(scope = %scope, error = %ErrorChain(&e), "could not read the last prompt");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use memory_core::{HashingEmbedder, NewMemory};
    use memory_inmem::InMemoryBackend;

    use super::*;

    /// A prompt kept reads back as it was built, newest first, in its scope only; one too
    /// large to keep is refused by the store and said so to the caller, which goes on.
    #[tokio::test]
    async fn a_prompt_kept_reads_back_whole_and_one_too_large_is_passed_over() {
        let embedder = Arc::new(HashingEmbedder::new(64).unwrap());
        let store: Arc<dyn MemoryBackend> = Arc::new(InMemoryBackend::new(Some(embedder)));
        let scope = Scope::for_user("42").unwrap().in_chat("7").unwrap();
        store
            .store(
                &scope,
                NewMemory::new("Pixel sleeps on the window seat in June"),
            )
            .await
            .unwrap();
        let config = hydrate::product::config(Arc::clone(&store), None).unwrap();
        let mut ids = Vec::new();
        for (i, question) in [
            "Where did Pixel sleep last June?",
            "And \"the window seat\"?",
        ]
        .into_iter()
        .enumerate()
        {
            let request = prompt_ir::ContextRequest::new(
                question,
                prompt_ir::TokenBudget::new(4000).unwrap(),
            );
            let input = hydrate::HydrateInput::new(scope.clone(), request);
            let prompt = hydrate::prepare(&config, &input).await.unwrap();
            let built = Built::new(Builder::Bot, None, prompt.report);
            let at = Timestamp::from_millis(1_767_225_600_000 + i as i64).unwrap();
            assert!(keep(store.as_ref(), &scope, at, &built, &[]).await);
            ids.push((at, serde_json::to_value(&built).unwrap()));
        }
        let kept = newest(store.as_ref(), &scope).await.unwrap();
        let read: Vec<(Timestamp, serde_json::Value)> = kept
            .iter()
            .map(|(at, b)| (*at, serde_json::to_value(b).unwrap()))
            .collect();
        ids.reverse();
        assert_eq!(read, ids, "newest first, every field as kept");
        let first = &kept[1].1.report;
        assert!(first.cues.window.is_some() && first.cues.names == ["Pixel"]);
        assert!(first.sections.iter().any(|s| s.memory_id.is_some()));
        let elsewhere = Scope::for_user("42").unwrap().in_chat("8").unwrap();
        assert!(newest(store.as_ref(), &elsewhere).await.unwrap().is_empty());

        // Too large for a record: not kept, and the caller hears so without an error.
        let mut huge = kept[0].1.clone();
        let section = huge.report.sections[0].clone();
        huge.report.sections = vec![section; memory_core::MAX_RECORD_BYTES / 100];
        assert!(!keep(store.as_ref(), &scope, Timestamp::now(), &huge, &[]).await);
        assert_eq!(newest(store.as_ref(), &scope).await.unwrap().len(), 2);
    }

    /// The next prompt of a scope extends what the newest one kept says of itself; a newest
    /// prompt that says nothing (kept by an older version) gives nothing to extend.
    #[tokio::test]
    async fn the_next_prompt_reads_what_the_newest_one_kept_of_itself() {
        let store: Arc<dyn MemoryBackend> = Arc::new(InMemoryBackend::new(None));
        let scope = Scope::for_user("42").unwrap().in_chat("7").unwrap();
        let config = hydrate::product::config(Arc::clone(&store), None).unwrap();
        let request = prompt_ir::ContextRequest::new(
            "hello there",
            prompt_ir::TokenBudget::new(4000).unwrap(),
        );
        let prompt = hydrate::prepare(&config, &hydrate::HydrateInput::new(scope.clone(), request))
            .await
            .unwrap();
        assert_eq!(previous(store.as_ref(), &scope).await, None);
        let first = Timestamp::from_millis(1_767_225_600_000).unwrap();
        let built =
            Built::new(Builder::Bot, None, prompt.report.clone()).with_next(prompt.previous());
        assert!(keep(store.as_ref(), &scope, first, &built, &[]).await);
        assert_eq!(
            previous(store.as_ref(), &scope).await,
            Some(prompt.previous())
        );
        assert!(prompt.previous().print.tokens() > 0);
        let bare = Built::new(Builder::Proxy, None, prompt.report);
        assert!(
            keep(
                store.as_ref(),
                &scope,
                first.plus(std::time::Duration::from_secs(1)),
                &bare,
                &[]
            )
            .await
        );
        assert_eq!(previous(store.as_ref(), &scope).await, None);
    }

    /// A prompt kept with its stored question names what it quotes: forgetting another
    /// memory of the chat leaves it, forgetting the question or a memory it weighed takes it.
    #[tokio::test]
    async fn a_prompt_goes_with_its_question_not_with_any_memory_of_the_chat() {
        let store: Arc<dyn MemoryBackend> = Arc::new(InMemoryBackend::new(None));
        let scope = Scope::for_user("42").unwrap().in_chat("7").unwrap();
        let config = hydrate::product::config(Arc::clone(&store), None).unwrap();
        let store_one = |text: &'static str| {
            let store = Arc::clone(&store);
            let scope = scope.clone();
            async move { store.store(&scope, NewMemory::new(text)).await.unwrap().id }
        };
        let pixel = store_one("Pixel sleeps on the window seat").await;
        let other = store_one("The plumber comes on Tuesday").await;
        let question = "Where does Pixel sleep?";
        let request =
            prompt_ir::ContextRequest::new(question, prompt_ir::TokenBudget::new(4000).unwrap());
        let prompt = hydrate::prepare(&config, &hydrate::HydrateInput::new(scope.clone(), request))
            .await
            .unwrap();
        let weighed: Vec<MemoryId> = prompt
            .report
            .sections
            .iter()
            .filter_map(|s| s.memory_id)
            .collect();
        assert!(
            weighed.contains(&pixel) && weighed.contains(&other),
            "{weighed:?}"
        );
        let asked = store_one("Where does Pixel sleep?").await;
        let built = Built::new(Builder::Bot, None, prompt.report);
        let kept = |at: i64| {
            let (store, scope, built) = (Arc::clone(&store), scope.clone(), built.clone());
            async move {
                let at = Timestamp::from_millis(1_767_225_600_000 + at).unwrap();
                assert!(keep(store.as_ref(), &scope, at, &built, &[asked]).await);
            }
        };
        kept(0).await;
        let unrelated = store_one("Lunch is at noon").await;
        store.delete(&scope, unrelated).await.unwrap();
        assert_eq!(newest(store.as_ref(), &scope).await.unwrap().len(), 1);
        store.delete(&scope, asked).await.unwrap();
        assert!(newest(store.as_ref(), &scope).await.unwrap().is_empty());
        kept(1).await;
        store.delete(&scope, other).await.unwrap();
        assert!(newest(store.as_ref(), &scope).await.unwrap().is_empty());
    }
}
