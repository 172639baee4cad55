//! Who a prompt may read ([`Reach`]) and how the memory source searches ([`MemoryTuning`]):
//! the privacy rule and the memory provider's knobs as values the compiler checks, carried
//! by [`HydrateInput`](crate::HydrateInput) and [`HydrationConfig`](crate::HydrationConfig)
//! to every source through [`SourceQuery`](crate::SourceQuery).

use memory_core::HybridWeights;
use prompt_ir::Ratio;
use serde::Serialize;

/// Whose memories a request may read beyond its own scope.
///
/// A fact belongs to a person, not to the chat it was told in. In a private context (the
/// person alone with the agent: a private chat, the CLI, an MCP client) a prompt reads the
/// chat and the person's user-wide scope (their facts) and their documents. A chat that
/// others share (a group) reads the chat alone: never a member's user-wide facts nor their
/// documents, except the facts of the members who chose to share theirs there.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "reach")]
pub enum Reach {
    /// The person alone: the chat, their user-wide scope and their documents.
    #[default]
    Private,
    /// Others share the chat: the chat alone, and the user-wide facts of `facts_of` (a
    /// member who shares theirs there, by user key), if any.
    Shared {
        /// The member whose user-wide facts this prompt may hold: the speaker, when they
        /// shared them in this chat.
        facts_of: Option<String>,
    },
}

impl Reach {
    /// A shared chat whose prompts hold no member's facts.
    pub const SHARED: Self = Self::Shared { facts_of: None };

    /// Whether others share the chat.
    pub fn is_shared(&self) -> bool {
        matches!(self, Self::Shared { .. })
    }

    /// Whether the person's own user-wide scope and documents may be read (a private
    /// context).
    pub fn reads_user_wide(&self) -> bool {
        matches!(self, Self::Private)
    }

    /// In a shared chat, the member whose user-wide facts may be read.
    pub fn shared_facts_of(&self) -> Option<&str> {
        match self {
            Self::Private => None,
            Self::Shared { facts_of } => facts_of.as_deref().filter(|u| !u.is_empty()),
        }
    }

    /// A shared chat's reach with the member `user`'s user-wide facts readable too: they
    /// chose to share them there. A private reach is returned unchanged (it reads the
    /// person's own facts anyway).
    pub fn sharing_facts_of(self, user: &str) -> Self {
        match self {
            Self::Shared { .. } => Self::Shared {
                facts_of: Some(user.to_owned()),
            },
            Self::Private => Self::Private,
        }
    }
}

/// How the memory source searches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SearchPreference {
    /// Fused semantic and keyword search.
    Hybrid,
    /// Vector similarity only.
    Semantic,
    /// BM25 only.
    Keyword,
}

/// The default of [`MemoryTuning::neighbours`]: the five best related messages each bring
/// the message they follow. A reply ("Yes! Loved it") is often found by the question's
/// words while what it answers holds the fact ("I signed up for the class downtown");
/// measured in BENCHMARKS.md.
pub const NEIGHBOURS: usize = 5;

/// The most [`MemoryTuning::neighbours`] can be.
pub const MAX_NEIGHBOURS: usize = 100;

/// The default of [`MemoryTuning::nearby_lift`]. A message is read in the talk around it:
/// "Yes, I went yesterday!" says little alone, but if the messages around it match the
/// question, it likely answers it. Each hit of the search, with similarity `s`, is lifted as
/// a cue lifts it, `s + lift · n · (1 - s)`, where `n` is the best similarity among the
/// other hits, each weighed down by `e^(-Δt / NEARBY_MINUTES)` for the time `Δt` between
/// the two messages. A hit alone in its stretch of talk keeps `s`. A hit longer than the
/// embedder's window
/// ([`EmbeddingProvider::window_bytes`](memory_core::EmbeddingProvider::window_bytes))
/// keeps `s` too: the store searched it passage by passage, so it was matched on its own
/// words, and lifting it would spend the room of several short ones (in an agent's chat, the
/// answers next to a good question). Measured in BENCHMARKS.md ("Read in the talk around
/// it").
pub const NEARBY_LIFT: f32 = 0.5;

/// The memory source's knobs ([`HydrationConfig::memory`](crate::HydrationConfig::memory)):
/// each field a value that cannot be out of range.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct MemoryTuning {
    /// How to search. Default hybrid (the source falls back to what the backend supports,
    /// and says so).
    pub search: SearchPreference,
    /// The shares of hybrid search. Default [`HybridWeights::default`].
    pub weights: HybridWeights,
    /// How many of the best related messages bring the message before them in the
    /// conversation (what they answer), at most [`MAX_NEIGHBOURS`]. Default [`NEIGHBOURS`].
    pub neighbours: usize,
    /// How far a related message is lifted toward the best other hit said near it in time.
    /// Default [`NEARBY_LIFT`].
    pub nearby_lift: Ratio,
}

impl Default for MemoryTuning {
    fn default() -> Self {
        Self {
            search: SearchPreference::Hybrid,
            weights: HybridWeights::default(),
            neighbours: NEIGHBOURS,
            nearby_lift: Ratio::clamped(f64::from(NEARBY_LIFT)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shared_chat_reads_no_user_wide_scope_and_only_the_named_members_facts() {
        assert!(Reach::Private.reads_user_wide());
        assert_eq!(Reach::Private.shared_facts_of(), None);
        assert!(!Reach::SHARED.reads_user_wide());
        assert_eq!(Reach::SHARED.shared_facts_of(), None);
        let sharing = Reach::Shared {
            facts_of: Some("alice".into()),
        };
        assert!(sharing.is_shared() && !sharing.reads_user_wide());
        assert_eq!(sharing.shared_facts_of(), Some("alice"));
        let empty = Reach::Shared {
            facts_of: Some(String::new()),
        };
        assert_eq!(empty.shared_facts_of(), None, "an empty key names no one");
    }
}
