//! Backend-agnostic memory for LLM agents: types, the `MemoryBackend` and
//! `EmbeddingProvider` traits, capabilities, errors, and (feature `testing`) the backend
//! conformance suite.
//!
//! A memory ([`MemoryEntry`]) always belongs to one [`Scope`] (tenant, user, chat, thread),
//! and every backend call names the scope it works in. Backends are held as
//! `Arc<dyn MemoryBackend>` and chosen at run time; what each can do is a value
//! ([`Capabilities`]), and asking for anything else is a typed [`MemoryError::Unsupported`].
//!
//! ```
//! # async fn demo(backend: std::sync::Arc<dyn memory_core::MemoryBackend>) -> memory_core::Result<()> {
//! use memory_core::{NewMemory, Scope, SearchRequest};
//! let scope = Scope::for_user("42")?.in_chat("7")?;
//! backend.store(&scope, NewMemory::new("Alice's cat is called Miso")).await?;
//! let hits = backend.search(&scope, &SearchRequest::keyword("cat name").limit(3)).await?;
//! # let _ = hits; Ok(()) }
//! ```

mod backend;
mod capability;
mod embedding;
mod entry;
mod error;
mod hash_embedder;
pub mod keyword;
mod lifecycle;
mod prune;
mod query;
mod record;
mod remember;
mod same_fact;
mod scope;
mod secret;
mod spread;
mod store_vectors;
mod time;

#[cfg(feature = "testing")]
pub mod testing;

pub use backend::{
    Ingested, MAX_LEASE_NAME_BYTES, MAX_LEASE_TTL, MemoryBackend, Remembered, check_lease,
    ensure_scope, process_holder,
};
pub use capability::{BackendInfo, Capabilities, Capability, Limits, StoreStats, Topology};
pub use embedding::{
    Embedding, EmbeddingProvider, EmbeddingSpace, cosine, embed_all, embed_passages, head_passage,
    normalize,
};
pub use entry::{
    DEFAULT_MAX_CONTENT_BYTES, Importance, MAX_MESSAGE_BYTES, MAX_TAG_BYTES, MemoryEntry, MemoryId,
    MemoryKind, MemoryPatch, MessageCut, NewMemory, PART_OF_TAG_PREFIX, Role,
    SUPERSEDER_NOT_IN_SCOPE, Tag, TagSet, embeds_head_only, split_text, superseded_by_refused,
    tags, validate_content,
};
pub use error::{BoxError, ErrorChain, MemoryError, Result, repeated_cause};
pub use hash_embedder::HashingEmbedder;
pub use lifecycle::{
    Consolidation, ConsolidationReport, Invalidated, Merged, Superseded, consolidate, invalidate,
    restore,
};
pub use prune::{DecayPolicy, PrunePolicy, PruneReason, PruneReport, decay_strength, plan_prune};
pub use query::{
    BELOW_AVERAGE, Filter, Fused, HybridWeights, ScoreBreakdown, ScoredMemory, SearchMode,
    SearchRequest, TagMatch, TagQuery, check_limit, fuse, rank,
};
pub use record::{
    MAX_RECORD_BYTES, MAX_RECORD_KIND_BYTES, MAX_RECORD_QUOTES, MAX_RECORDS_KEPT, Record,
    check_record_kind,
};
pub use remember::{FactKept, history, keep_fact, remember_once, supersede};
pub use same_fact::{merge_patch, normalise, same_fact};
pub use scope::{DEFAULT_TENANT, MAX_SCOPE_KEY_BYTES, Scope};
pub use secret::Secret;
pub use spread::{ScopeSpread, Spread, expected_max, passage_similarity};
pub use store_vectors::StoreVectors;
pub use time::Timestamp;
