//! The privacy rule through the facade and (feature `rig`) its rig index, as the bot's
//! property test checks it through the bot: random people in random private conversations
//! and groups keep facts and chatter, and ask; no prompt, recall or rig context of a question
//! holds what its conversation may not see. Seeds from `AVA_PROPERTY_SEEDS` (comma
//! separated) replay or widen it; a failure names its seed.

use ava_memory::{Conversation, Memory};

use crate::common::Store;

const USERS: [&str; 3] = ["ana", "ben", "caro"];
const CHATS: [&str; 2] = ["web", "phone"];
const GROUPS: [&str; 2] = ["club", "choir"];

/// Where a step happens: a person's private conversation, or a group (by index).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Place {
    Private(usize),
    Group(usize),
}

/// A marker, and who may see it.
#[derive(Debug)]
enum Marker {
    /// A person's fact: every private conversation of theirs.
    Fact { user: usize },
    /// Said in a person's private conversation: that conversation.
    Said { user: usize, chat: usize },
    /// Told or said in a group: that group.
    Group { group: usize },
}

impl Marker {
    fn may_be_seen(&self, user: usize, place: Place) -> bool {
        match (self, place) {
            (Self::Fact { user: owner }, Place::Private(_)) => *owner == user,
            (Self::Said { user: owner, chat }, Place::Private(c)) => *owner == user && *chat == c,
            (Self::Group { group }, Place::Group(g)) => *group == g,
            _ => false,
        }
    }
}

fn conversation(memory: &Memory, user: usize, place: Place) -> Conversation {
    match place {
        Place::Private(chat) => memory.person(USERS[user], CHATS[chat]).unwrap(),
        Place::Group(g) => memory
            .group(GROUPS[g])
            .unwrap()
            .member(USERS[user], USERS[user])
            .unwrap(),
    }
}

/// What a question in `conversation` shows: the prompt built for it, what is recalled for it
/// and, with the `rig` feature, what its rig index gives an agent's dynamic context.
async fn shown(conversation: &Conversation, question: &str) -> Vec<(&'static str, String)> {
    let context = conversation.context(question, 4000).await.unwrap();
    let prompt: String = context
        .messages
        .iter()
        .map(|m| format!("{}\n", m.content))
        .collect();
    let recalled = conversation.recall(question, 20).await.unwrap();
    let recall: String = recalled
        .iter()
        .map(|h| format!("{}\n", h.entry.content))
        .collect();
    #[cfg_attr(not(feature = "rig"), expect(unused_mut, reason = "rig adds to it"))]
    let mut out = vec![("prompt", prompt), ("recall", recall)];
    #[cfg(feature = "rig")]
    {
        use rig_core::vector_store::{VectorSearchRequest, VectorStoreIndex};
        let request = VectorSearchRequest::builder()
            .query(question)
            .samples(20)
            .build();
        let docs: Vec<(f64, String, serde_json::Value)> =
            conversation.index().top_n(request).await.unwrap();
        out.push(("rig context", serde_json::to_string(&docs).unwrap()));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_prompt_recall_or_rig_context_holds_what_its_conversation_may_not_see() {
    for seed in memory_core::testing::property_seeds(&[0x5eed_0003, 0x5eed_0004]) {
        privacy_property(seed, 36).await;
    }
}

async fn privacy_property(seed: u64, steps: usize) {
    let mut state = seed | 1;
    let mut below = |n: usize| {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        usize::try_from((state.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 33) % n as u64).unwrap()
    };
    let store = Store::new();
    let memory = store.open().await;
    let mut markers: Vec<(String, Marker)> = Vec::new();
    // How often a question showed a marker it may see: the check cannot pass by showing
    // nothing.
    let mut held = 0;
    for step in 0..steps {
        let user = below(USERS.len());
        let place = if below(2) == 0 {
            Place::Private(below(CHATS.len()))
        } else {
            Place::Group(below(GROUPS.len()))
        };
        let conversation = conversation(&memory, user, place);
        // Ended by `z`, so that no marker is a prefix of another.
        match below(3) {
            0 => {
                let marker = format!("secret{seed:x}s{step}z");
                conversation
                    .remember_fact(&format!("the code word is {marker}"))
                    .await
                    .unwrap();
                let who = match place {
                    Place::Private(_) => Marker::Fact { user },
                    Place::Group(group) => Marker::Group { group },
                };
                markers.push((marker, who));
            }
            1 => {
                let marker = format!("chatter{seed:x}s{step}z");
                conversation
                    .remember(
                        &format!("by the way, the code word {marker} happened"),
                        None,
                    )
                    .await
                    .unwrap();
                let who = match place {
                    Place::Private(chat) => Marker::Said { user, chat },
                    Place::Group(group) => Marker::Group { group },
                };
                markers.push((marker, who));
            }
            _ => {
                let question = format!("question q{step}x: what is the code word?");
                for (what, text) in shown(&conversation, &question).await {
                    for (marker, who) in &markers {
                        let may = who.may_be_seen(user, place);
                        let seen = text.contains(marker.as_str());
                        assert!(
                            may || !seen,
                            "seed {seed:#x} step {step}: {} in {place:?}'s {what} holds \
                             {marker} ({who:?}):\n{text}",
                            USERS[user]
                        );
                        held += usize::from(seen);
                    }
                }
                conversation.remember(&question, Some("ok")).await.unwrap();
            }
        }
    }
    assert!(held > 0, "seed {seed:#x}: no question saw anything it may");
}
