//! The contracts every [`Reranker`] and [`ContextSource`] keeps (cargo feature `testing`),
//! each one function that an implementation's tests call with it, as memory-core's
//! `backend_conformance!` does for backends.
//!
//! - [`reranker_contract`]: nothing in, nothing out; what comes out is some of what went
//!   in (no item invented, none twice); a similarity it sets is within 0..=1.
//! - [`source_contract`]: items have content and keys unique within the answer; a
//!   similarity is within 0..=1; a memory item belongs to the query's scope or to its
//!   user's user-wide scope (checked through `backend`, when given), never to anyone
//!   else; asking again gives the same items. [`source_contract_asking`] is the same
//!   contract with a question of the caller's (a source that answers only some questions,
//!   such as the graph's, which needs a name in it).
//!
//! And fixtures several crates' tests share: [`long_answer`], an agent's answer of about
//! 5,000 characters whose answering sentence ([`LONG_ANSWER_SENTENCE`]) is near its end, and
//! [`openai_completion`], what an OpenAI-compatible server answers a chat call with.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "a test fails loudly on an unexpected error"
)]

use std::collections::HashSet;

use memory_core::{MemoryBackend, Scope, Timestamp};
use prompt_ir::ContextStrategy;

use crate::cues::QueryCues;
use crate::provider::Reranker;
use crate::reach::{MemoryTuning, Reach};
use crate::source::{
    ContextSource, QueryEmbeddings, SourceItem, SourceKind, SourceOutput, SourceParams, SourceQuery,
};

/// The question both contracts ask.
pub const QUESTION: &str = "What is my cat called, and where does it sleep?";

fn query<'a>(
    kind: SourceKind,
    scope: &'a Scope,
    strategy: &'a ContextStrategy,
    embeddings: &'a QueryEmbeddings,
    cues: &'a QueryCues,
    now: Timestamp,
    observation: &'a str,
) -> SourceQuery<'a> {
    SourceQuery {
        kind,
        scope,
        observation,
        goal: None,
        params: SourceParams {
            max_items: 20,
            max_tokens: 4000,
            threshold: None,
        },
        strategy,
        now,
        embeddings,
        cues,
        reach: &PRIVATE,
        record_access: true,
        tuning: MemoryTuning::default(),
    }
}

/// Every contract query is for a private context.
static PRIVATE: Reach = Reach::Private;

/// Items for a reranker to judge.
fn candidates() -> Vec<SourceItem> {
    [
        ("a", "My cat is called Pixel."),
        ("b", "The train to Oslo leaves at nine."),
        ("c", "Pixel sleeps on the red sofa."),
        ("d", "I bought cat food on Monday."),
    ]
    .into_iter()
    .map(|(k, t)| SourceItem::text(k, t).with_similarity(0.5))
    .collect()
}

/// Checks `reranker` against the contract; panics naming the first broken rule.
pub async fn reranker_contract(reranker: &dyn Reranker) {
    let who = reranker.name().to_owned();
    let scope = Scope::for_user("contract").unwrap();
    let strategy = ContextStrategy::default();
    let embeddings = QueryEmbeddings::new(QUESTION);
    let now = Timestamp::now();
    let cues = QueryCues::read(QUESTION, now);
    let q = query(
        SourceKind::Semantic,
        &scope,
        &strategy,
        &embeddings,
        &cues,
        now,
        QUESTION,
    );
    let none = reranker
        .rerank(&q, Vec::new())
        .await
        .unwrap_or_else(|e| panic!("reranker {who}: failed on no items: {e}"));
    assert!(none.is_empty(), "reranker {who}: invented items from none");
    let given = candidates();
    let keys: HashSet<String> = given.iter().map(|i| i.key.clone()).collect();
    let out = reranker
        .rerank(&q, given.clone())
        .await
        .unwrap_or_else(|e| panic!("reranker {who}: failed: {e}"));
    let mut seen = HashSet::new();
    for item in &out {
        assert!(
            keys.contains(&item.key),
            "reranker {who}: returned an item it was not given: {:?}",
            item.key
        );
        assert!(
            seen.insert(item.key.clone()),
            "reranker {who}: returned {:?} twice",
            item.key
        );
        let original = given.iter().find(|g| g.key == item.key).unwrap();
        assert_eq!(
            item.content, original.content,
            "reranker {who}: changed an item's text"
        );
        if let Some(s) = item.similarity {
            assert!(
                (0.0..=1.0).contains(&s),
                "reranker {who}: similarity {s} for {:?} is outside 0..=1",
                item.key
            );
        }
    }
}

/// Checks `source` serving `kind` for `scope` against the contract; `backend`, when given,
/// is the store the source reads, to check that every memory it returns is the scope's.
/// Panics naming the first broken rule.
pub async fn source_contract(
    source: &dyn ContextSource,
    kind: SourceKind,
    scope: &Scope,
    backend: Option<&dyn MemoryBackend>,
) {
    source_contract_asking(source, kind, scope, backend, QUESTION).await;
}

/// [`source_contract`], asking `question` instead of [`QUESTION`].
pub async fn source_contract_asking(
    source: &dyn ContextSource,
    kind: SourceKind,
    scope: &Scope,
    backend: Option<&dyn MemoryBackend>,
    question: &str,
) {
    let who = source.name().to_owned();
    assert!(!who.is_empty(), "a source needs a name for reports");
    let strategy = ContextStrategy::default();
    let now = Timestamp::now();
    let cues = QueryCues::read(question, now);
    let mut answers = Vec::new();
    for _ in 0..2 {
        let embeddings = QueryEmbeddings::new(question);
        let q = query(kind, scope, &strategy, &embeddings, &cues, now, question);
        let mut out = SourceOutput::new();
        source
            .fetch(&q, &mut out)
            .await
            .unwrap_or_else(|e| panic!("source {who}: failed: {e}"));
        answers.push(out.items().to_vec());
    }
    let items = &answers[0];
    assert!(
        !items.is_empty(),
        "source {who}: the contract needs a source that finds something"
    );
    let mut keys = HashSet::new();
    for item in items {
        assert!(
            !item.content.trim().is_empty(),
            "source {who}: an item without text"
        );
        assert!(
            keys.insert(item.key.clone()),
            "source {who}: two items with the key {:?}",
            item.key
        );
        if let Some(s) = item.similarity {
            assert!(
                (0.0..=1.0).contains(&s),
                "source {who}: similarity {s} for {:?} is outside 0..=1",
                item.key
            );
        }
        if let (Some(id), Some(backend)) = (item.memory_id, backend) {
            // The scope's own, or its user's user-wide facts: never another user's.
            let user_wide = Scope::for_user(scope.user())
                .and_then(|s| s.in_tenant(scope.tenant()))
                .unwrap();
            if backend.get(scope, id).await.is_err() {
                backend.get(&user_wide, id).await.unwrap_or_else(|e| {
                    panic!("source {who}: memory {id} is neither {scope}'s nor its user's: {e}")
                });
            }
        }
    }
    let keys_of = |items: &[SourceItem]| -> Vec<String> {
        let mut k: Vec<String> = items.iter().map(|i| i.key.clone()).collect();
        k.sort();
        k
    };
    assert_eq!(
        keys_of(&answers[0]),
        keys_of(&answers[1]),
        "source {who}: the same question gave other items"
    );
}

/// The sentence of [`long_answer`] that answers [`LONG_ANSWER_QUESTION`], in its last
/// paragraph.
pub const LONG_ANSWER_SENTENCE: &str = "For the launch database we settled on PostgreSQL 16, with nightly backups to the Lisbon bucket.";

/// The question [`LONG_ANSWER_SENTENCE`] answers; it shares few words with the rest of
/// [`long_answer`].
pub const LONG_ANSWER_QUESTION: &str = "Which database did we settle on for the launch?";

/// An agent's answer of about 5,000 characters: a plan in eleven paragraphs, with
/// [`LONG_ANSWER_SENTENCE`] in the last one (far past the first 256 word pieces a small
/// embedding model reads).
pub fn long_answer() -> String {
    let topics = [
        "the onboarding screens",
        "the billing page",
        "the notification settings",
        "the search bar",
        "the export feature",
        "the settings sync",
        "the offline mode",
        "the help centre",
        "the team invitations",
        "the audit log",
        "the admin dashboard",
    ];
    let mut text = String::new();
    for (i, t) in topics.iter().enumerate() {
        text.push_str(&format!(
            "Step {}: we reworked {t}. The layout now follows the style guide, spacing and \
             colours were aligned, and the copy was shortened so that a first-time visitor \
             understands it at a glance. We also wrote tests for {t} and measured how long \
             each screen takes to render on an older phone. Feedback from the beta group \
             was collected in a shared spreadsheet, and each item was either fixed at once \
             or filed for the next release.\n\n",
            i + 1
        ));
    }
    text.push_str(&format!(
        "Finally, the infrastructure. {LONG_ANSWER_SENTENCE} The staging copy is refreshed \
         every Monday."
    ));
    text
}

/// The body an OpenAI-compatible server answers a chat completion with: `message` (an
/// assistant message object) from the model `gpt-test`, finished with `stop`.
pub fn openai_completion(message: serde_json::Value) -> serde_json::Value {
    serde_json::json!({
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1_773_000_000,
        "model": "gpt-test",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    })
}

/// [`openai_completion`] of an assistant message saying `content`.
pub fn openai_answer(content: &str) -> serde_json::Value {
    openai_completion(serde_json::json!({"role": "assistant", "content": content}))
}
