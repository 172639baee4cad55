//! Capabilities as values: what a backend can do, and the `BackendInfo` it reports.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::embedding::EmbeddingSpace;
use crate::error::{MemoryError, Result};

/// One thing a backend may or may not do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Capability {
    /// Vector similarity search (needs an embedding space).
    SemanticSearch,
    /// Full-text keyword search (BM25 or similar).
    KeywordSearch,
    /// Fused semantic + keyword search.
    HybridSearch,
    /// Filtering by tags (any / all).
    TagFilter,
    /// Filtering by creation time.
    TimeFilter,
    /// Changing stored memories in place.
    Update,
    /// Pruning by age.
    PruneTtl,
    /// Pruning down to a maximum count per scope.
    PruneMaxCount,
    /// Pruning by decayed strength.
    PruneDecay,
    /// Memories survive a restart.
    Persistence,
    /// The lifecycle of facts: duplicates merged, facts superseded or invalidated, each
    /// kept with its history (`memory_core::consolidate`, `supersede`, `invalidate`).
    Lifecycle,
    /// Records kept beside a scope's memories, the newest few of each kind
    /// (`MemoryBackend::keep_record`, `MemoryBackend::records`).
    Records,
    /// Leases: named, expiring turns that processes sharing a store take
    /// (`MemoryBackend::try_lease`, `release_lease`, `end_lease`).
    Leases,
}

impl Capability {
    /// Every capability, in a stable order.
    pub const ALL: [Capability; 13] = [
        Self::SemanticSearch,
        Self::KeywordSearch,
        Self::HybridSearch,
        Self::TagFilter,
        Self::TimeFilter,
        Self::Update,
        Self::PruneTtl,
        Self::PruneMaxCount,
        Self::PruneDecay,
        Self::Persistence,
        Self::Lifecycle,
        Self::Records,
        Self::Leases,
    ];

    /// A short human name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::SemanticSearch => "semantic search",
            Self::KeywordSearch => "keyword search",
            Self::HybridSearch => "hybrid search",
            Self::TagFilter => "tag filters",
            Self::TimeFilter => "time filters",
            Self::Update => "updates",
            Self::PruneTtl => "TTL pruning",
            Self::PruneMaxCount => "max-count pruning",
            Self::PruneDecay => "decay pruning",
            Self::Persistence => "persistence",
            Self::Lifecycle => "fact lifecycle",
            Self::Records => "records",
            Self::Leases => "leases",
        }
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The set of capabilities a backend advertises. Callers plan from it; asking for anything
/// outside it yields [`MemoryError::Unsupported`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Capabilities(BTreeSet<Capability>);

impl Capabilities {
    /// No capabilities.
    pub fn none() -> Self {
        Self::default()
    }

    /// What a complete store offers: keyword search, tag and time filters, updates, every
    /// prune policy and the fact lifecycle, plus semantic and hybrid search when it has an embedder.
    pub fn full_store(with_embedder: bool) -> Self {
        let base = [
            Capability::KeywordSearch,
            Capability::TagFilter,
            Capability::TimeFilter,
            Capability::Update,
            Capability::PruneTtl,
            Capability::PruneMaxCount,
            Capability::PruneDecay,
            Capability::Lifecycle,
        ];
        let vectors = [Capability::SemanticSearch, Capability::HybridSearch];
        let extra: &[Capability] = if with_embedder { &vectors } else { &[] };
        base.iter().chain(extra).copied().collect()
    }

    /// This set plus `cap`.
    pub fn with(mut self, cap: Capability) -> Self {
        self.0.insert(cap);
        self
    }

    /// This set without `cap`.
    pub fn without(mut self, cap: Capability) -> Self {
        self.0.remove(&cap);
        self
    }

    /// Whether `cap` is advertised.
    pub fn supports(&self, cap: Capability) -> bool {
        self.0.contains(&cap)
    }

    /// `Ok` if `cap` is advertised, else [`MemoryError::Unsupported`] naming `provider`.
    pub fn require(&self, cap: Capability, provider: &str) -> Result<()> {
        if self.supports(cap) {
            Ok(())
        } else {
            Err(MemoryError::Unsupported {
                capability: cap,
                provider: provider.to_owned(),
            })
        }
    }

    /// The advertised capabilities, in order.
    pub fn iter(&self) -> impl Iterator<Item = Capability> + '_ {
        self.0.iter().copied()
    }
}

impl FromIterator<Capability> for Capabilities {
    fn from_iter<I: IntoIterator<Item = Capability>>(iter: I) -> Self {
        Self(iter.into_iter().collect())
    }
}

/// Size limits a backend enforces.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Largest accepted content, in bytes.
    pub max_content_bytes: usize,
    /// Largest accepted `limit` of one search or listing.
    pub max_results: usize,
}

impl Limits {
    /// Checks that both limits admit something (each at least 1).
    pub fn validate(&self) -> crate::Result<()> {
        if self.max_content_bytes == 0 {
            return Err(crate::MemoryError::invalid(
                "max_content_bytes",
                "must be at least 1 byte",
            ));
        }
        if self.max_results == 0 {
            return Err(crate::MemoryError::invalid(
                "max_results",
                "must be at least 1",
            ));
        }
        Ok(())
    }
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_content_bytes: crate::entry::DEFAULT_MAX_CONTENT_BYTES,
            max_results: 1000,
        }
    }
}

/// Where a backend keeps its data, relative to the process that uses it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Topology {
    /// In this process's memory: nothing outlives it, nothing is shared with another.
    InProcess,
    /// In a local file this process opens itself (other processes may open it too).
    Embedded,
    /// On a database server, reached over a connection.
    Server,
}

impl Topology {
    /// The lowercase name (`in_process`, `embedded`, `server`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InProcess => "in_process",
            Self::Embedded => "embedded",
            Self::Server => "server",
        }
    }
}

impl std::fmt::Display for Topology {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::InProcess => "in-process",
            Self::Embedded => "embedded",
            Self::Server => "server",
        })
    }
}

/// Totals of a store, as a backend that can count them says (`ava stats`, the `/metrics`
/// gauges, the inspector).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreStats {
    /// Memories in the store.
    pub memories: u64,
    /// Memories that have a vector. The others (stored while no embedder was available, or
    /// by a process of the space the store was moved from) get one later, as the backend
    /// says.
    pub embedded: u64,
    /// Memories of kind fact.
    pub facts: u64,
    /// Scopes holding memories.
    pub scopes: u64,
    /// Distinct (tenant, user) pairs holding memories.
    pub users: u64,
    /// What the store takes: a SQLite file's main database file (pages × page size, the
    /// WAL not counted), or a Postgres schema's tables with their indexes and TOAST.
    pub bytes: u64,
    /// The embedding space the store records now, if any.
    pub embedding_space: Option<String>,
}

/// What a backend says about itself.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BackendInfo {
    /// The backend's name (`memory-inmem`, `memory-sqlite`, ...), used in errors.
    pub name: String,
    /// Where the data lives (a file path, a server), if anywhere; never credentials.
    pub location: Option<String>,
    /// In process, in a local file, or on a server.
    pub topology: Topology,
    /// Whether a stored memory survives the process that stored it (a store that keeps it
    /// only in memory is not durable, whatever it is backed by).
    pub durable: bool,
    /// The embedding space the store was created with, if it holds vectors.
    pub embedding_space: Option<Arc<EmbeddingSpace>>,
    /// Size limits.
    pub limits: Limits,
}

impl BackendInfo {
    /// How the store keeps its data, for a status line: `embedded, durable`.
    pub fn kind(&self) -> String {
        format!(
            "{}, {}",
            self.topology,
            if self.durable {
                "durable"
            } else {
                "not durable"
            }
        )
    }
}
