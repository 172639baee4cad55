//! The `MemoryBackend` trait: the one interface every store implements.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::Serialize;

use crate::capability::Capability;
use crate::capability::{BackendInfo, Capabilities};
use crate::entry::{MemoryEntry, MemoryId, MemoryPatch, NewMemory};
use crate::error::{MemoryError, Result};
use crate::prune::{PrunePolicy, PruneReport};
use crate::query::{Filter, ScoredMemory, SearchRequest, TagQuery};
use crate::record::Record;
use crate::same_fact::{merge_patch, normalise};
use crate::scope::Scope;
use crate::time::Timestamp;

/// What [`MemoryBackend::remember_once`] did.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Remembered {
    /// The memory that holds the content now.
    pub entry: MemoryEntry,
    /// `true` when it was already there (and the new one was merged into it), `false` when
    /// it was stored as a new memory.
    pub merged: bool,
}

/// What became of one memory given to [`MemoryBackend::store_each`].
#[derive(Debug)]
#[expect(
    clippy::large_enum_variant,
    reason = "Stored is the common case; boxing it would allocate once more per memory"
)]
pub enum Ingested {
    /// Stored, as this entry.
    Stored(MemoryEntry),
    /// Its id was already taken; nothing was written for it.
    Exists(MemoryId),
    /// Refused as given (the error says why and what was expected); nothing was written.
    Rejected(MemoryError),
}

impl Ingested {
    /// The stored entry, if it was stored.
    pub fn entry(&self) -> Option<&MemoryEntry> {
        match self {
            Self::Stored(e) => Some(e),
            _ => None,
        }
    }
}

/// A store of memories, partitioned by [`Scope`].
///
/// Object safe: hold it as `Arc<dyn MemoryBackend>` and choose the backend at run time.
/// Every method takes the scope it works in and never sees or touches another scope's
/// memories; a memory of another scope is reported as [`MemoryError::NotFound`].
/// Asking for something [`MemoryBackend::capabilities`] does not list fails with
/// [`MemoryError::Unsupported`] before any work is done.
#[async_trait]
pub trait MemoryBackend: Send + Sync + fmt::Debug {
    /// What the backend is and where its data lives.
    fn info(&self) -> BackendInfo;

    /// What the backend can do.
    fn capabilities(&self) -> Capabilities;

    /// Stores several memories atomically: all of them or, on error, none. Returns the
    /// stored entries in input order. An id given (`NewMemory::with_id`) that a memory of
    /// the scope's tenant holds is a `Conflict` (a store may also refuse ids of other
    /// tenants; one sharded by tenant cannot see them).
    async fn store_batch(
        &self,
        scope: &Scope,
        memories: Vec<NewMemory>,
    ) -> Result<Vec<MemoryEntry>>;

    /// Reads one memory (does not count as a recall).
    async fn get(&self, scope: &Scope, id: MemoryId) -> Result<MemoryEntry>;

    /// Ranked search; see [`SearchRequest`]. Hits are best first.
    async fn search(&self, scope: &Scope, request: &SearchRequest) -> Result<Vec<ScoredMemory>>;

    /// The `limit` most recently created memories that pass `filter`, newest first.
    async fn recent(
        &self,
        scope: &Scope,
        limit: usize,
        filter: &Filter,
    ) -> Result<Vec<MemoryEntry>>;

    /// Changes a memory in place (re-embedding and re-indexing changed content).
    async fn update(&self, scope: &Scope, id: MemoryId, patch: MemoryPatch) -> Result<MemoryEntry>;

    /// Deletes a memory from every index, and the scope's records that quote it or name
    /// nothing they quote (see [`MemoryBackend::keep_record`]).
    async fn delete(&self, scope: &Scope, id: MemoryId) -> Result<()>;

    /// Deletes every memory and record of a scope; returns how many memories there were.
    async fn delete_scope(&self, scope: &Scope) -> Result<u64>;

    /// Applies a prune policy to a scope; the scope's records that quote a memory it
    /// removes go too (see [`MemoryBackend::keep_record`]).
    async fn prune(&self, scope: &Scope, policy: &PrunePolicy) -> Result<PruneReport>;

    /// How many memories a scope holds (superseded ones included).
    async fn count(&self, scope: &Scope) -> Result<u64>;

    /// Every scope that holds memories or records, sorted: of one tenant when `tenant` is
    /// given, of one user (in every tenant, or in `tenant`) when `user` is given, of the
    /// whole store when neither is. For housekeeping and moving stores: finding a memory by
    /// id across a user's chats, wiping everything they own, copying a store whole.
    async fn scopes(&self, tenant: Option<&str>, user: Option<&str>) -> Result<Vec<Scope>>;

    /// Takes the lease `name` for `holder` until `ttl` from now, if no other holder's lease
    /// of that name is unexpired; a holder taking its own lease again extends it. `Ok(true)`
    /// when `holder` holds it now, `Ok(false)` when another does.
    ///
    /// How processes sharing a store take turns (replicas of a bot on one Postgres, several
    /// processes on one SQLite file): one learns a person's facts at a time, one prunes a
    /// chat per interval. A lease lives in the store beside the memories but is not one: no
    /// scope, never searched, exported or counted. A holder that dies loses its lease when
    /// `ttl` runs out. Expiry is judged by one clock for every holder (the database
    /// server's, or the machine's for an embedded store). See [`check_lease`] for the
    /// names and holders accepted.
    ///
    /// Needs [`Capability::Leases`]; the default refuses with [`MemoryError::Unsupported`].
    async fn try_lease(&self, name: &str, holder: &str, ttl: Duration) -> Result<bool> {
        let _ = (name, holder, ttl);
        Err(refused(self, Capability::Leases))
    }

    /// Ends `holder`'s lease `name` before its time; nothing when another holder has it or
    /// nobody does. Needs [`Capability::Leases`]; the default refuses.
    async fn release_lease(&self, name: &str, holder: &str) -> Result<()> {
        let _ = (name, holder);
        Err(refused(self, Capability::Leases))
    }

    /// Ends the lease `name` whoever holds it, and forgets it (nothing when there is none).
    /// For erasing a person, whose leases may name them; taking turns ends a lease with
    /// [`MemoryBackend::release_lease`]. Needs [`Capability::Leases`]; the default refuses.
    async fn end_lease(&self, name: &str) -> Result<()> {
        let _ = name;
        Err(refused(self, Capability::Leases))
    }

    /// Keeps `record` in `scope` and leaves the newest `keep` records of its kind there, the
    /// older ones removed in the same step: a bounded ring per scope and kind, each kind
    /// apart. The newest have the latest [`Record::at`]; of equal times, the one kept last.
    ///
    /// What the bot and the proxy note of each prompt they built (its explain report), so
    /// that another process, or this one after a restart, can explain it. A record is not a
    /// memory: never searched, counted or exported. It may quote what the scope's memories
    /// say (a report quotes its question's words and what was recalled), so it follows
    /// them: a record naming the memories it quotes ([`Record::quoting`]) is removed when
    /// one of them is deleted ([`delete`](Self::delete)) or pruned
    /// ([`prune`](Self::prune)); a record naming none may quote any, so the deletion of any
    /// memory of its scope removes it (pruning leaves it: it removes what is stale, not
    /// what someone asked to forget); [`delete_scope`](Self::delete_scope) removes every
    /// record of the scope, of every kind.
    ///
    /// Needs [`Capability::Records`]; the default refuses with [`MemoryError::Unsupported`].
    /// See [`Record::validate`] for what is accepted.
    async fn keep_record(&self, scope: &Scope, record: Record, keep: usize) -> Result<()> {
        let _ = (scope, record, keep);
        Err(refused(self, Capability::Records))
    }

    /// The newest `limit` records of `kind` in `scope`, newest first (see
    /// [`MemoryBackend::keep_record`]). Needs [`Capability::Records`]; the default refuses
    /// with [`MemoryError::Unsupported`].
    async fn records(&self, scope: &Scope, kind: &str, limit: usize) -> Result<Vec<Record>> {
        let _ = (scope, kind, limit);
        Err(refused(self, Capability::Records))
    }

    /// Makes what deletions removed unreadable where the store still keeps a copy of it, as
    /// far as the store itself can: for an erase, after the deletions. SQLite (which
    /// overwrites what it deletes, and checkpoints its log after [`delete`](Self::delete)
    /// and [`delete_scope`](Self::delete_scope)) copies the log into the file and empties
    /// it; Postgres runs `VACUUM` on its tables, so deleted rows leave the tables and their
    /// indexes (the server's own log and backups, and freed space inside its pages until
    /// reused, are beyond a store's reach). The default does nothing: a store in memory
    /// keeps no copy.
    async fn reclaim_deleted(&self) -> Result<()> {
        Ok(())
    }

    /// Every scope of one user in one tenant that holds memories or records (their chats and
    /// threads, and the user-wide scope), sorted: [`MemoryBackend::scopes`] of that tenant
    /// and user.
    async fn user_scopes(&self, tenant: &str, user: &str) -> Result<Vec<Scope>> {
        self.scopes(Some(tenant), Some(user)).await
    }

    /// Stores what it can of `memories` and says, in input order, what became of each: a
    /// memory that is refused as given (too long, a vector of the wrong length, ...) or
    /// whose id is already taken (also by an earlier memory of the same call) writes
    /// nothing and does not stop the others. An error of the store itself (I/O, a lost
    /// connection) is the call's error; memories stored before it stay stored.
    ///
    /// The default stores the acceptable memories as one [`store_batch`](Self::store_batch),
    /// taking out each one the store reports as a conflict, and falls back to one memory
    /// at a time if the store refuses the batch for another reason.
    async fn store_each(&self, scope: &Scope, memories: Vec<NewMemory>) -> Result<Vec<Ingested>> {
        let max_bytes = self.info().limits.max_content_bytes;
        let mut out: Vec<Option<Ingested>> = Vec::with_capacity(memories.len());
        let mut pending: Vec<(usize, NewMemory)> = Vec::new();
        let mut ids = std::collections::HashSet::new();
        for (i, m) in memories.into_iter().enumerate() {
            if let Err(e) = m.validate(max_bytes) {
                out.push(Some(Ingested::Rejected(e)));
            } else if let Some(id) = m.id.filter(|id| !ids.insert(*id)) {
                out.push(Some(Ingested::Exists(id)));
            } else {
                out.push(None);
                pending.push((i, m));
            }
        }
        let mut one_by_one = false;
        while !pending.is_empty() && !one_by_one {
            let batch: Vec<NewMemory> = pending.iter().map(|(_, m)| m.clone()).collect();
            match self.store_batch(scope, batch).await {
                Ok(entries) if entries.len() == pending.len() => {
                    for ((i, _), e) in pending.drain(..).zip(entries) {
                        out[i] = Some(Ingested::Stored(e));
                    }
                }
                Ok(_) => {
                    return Err(MemoryError::Backend {
                        backend: self.info().name,
                        message: "store_batch returned another number of entries than it was given"
                            .into(),
                        source: None,
                    });
                }
                Err(MemoryError::Conflict { id }) => {
                    match pending.iter().position(|(_, m)| m.id == Some(id)) {
                        Some(at) => {
                            let (i, _) = pending.remove(at);
                            out[i] = Some(Ingested::Exists(id));
                        }
                        None => one_by_one = true,
                    }
                }
                Err(e) if e.is_refusal() => one_by_one = true,
                Err(e) => return Err(e),
            }
        }
        for (i, m) in pending {
            out[i] = Some(match self.store(scope, m).await {
                Ok(e) => Ingested::Stored(e),
                Err(MemoryError::Conflict { id }) => Ingested::Exists(id),
                Err(e) if e.is_refusal() => Ingested::Rejected(e),
                Err(e) => return Err(e),
            });
        }
        Ok(out.into_iter().flatten().collect())
    }

    /// Stores one memory.
    async fn store(&self, scope: &Scope, memory: NewMemory) -> Result<MemoryEntry> {
        let backend = self.info().name;
        self.store_batch(scope, vec![memory])
            .await?
            .pop()
            .ok_or_else(|| MemoryError::Backend {
                backend,
                message: "store_batch returned no entry for one memory".into(),
                source: None,
            })
    }

    /// Stores `memory` unless the scope holds the same fact: a memory of its kind, valid
    /// now, whose content is the same once [`normalise`](crate::normalise)d; then merges
    /// into that one (its tags joined, the higher importance, pinned if either is) and
    /// returns it. What [`remember_once`](crate::remember_once) does.
    ///
    /// A backend that can should look and store in one step (a transaction, a lock), so
    /// that concurrent calls telling one fact leave one memory; the conformance suite checks
    /// it. This default looks with a search and then stores: two steps, between which a
    /// concurrent call can store the same fact too.
    async fn remember_once(&self, scope: &Scope, memory: NewMemory) -> Result<Remembered> {
        search_then_store(self, scope, memory).await
    }

    /// The newest memories carrying any or all of some tags.
    async fn by_tags(
        &self,
        scope: &Scope,
        tags: &TagQuery,
        limit: usize,
    ) -> Result<Vec<MemoryEntry>> {
        let filter = Filter {
            tags: Some(tags.clone()),
            ..Filter::default()
        };
        self.recent(scope, limit, &filter).await
    }
}

/// Longest lease name or holder accepted, in bytes.
pub const MAX_LEASE_NAME_BYTES: usize = 512;

/// Longest lease accepted ([`MemoryBackend::try_lease`]): a year.
pub const MAX_LEASE_TTL: Duration = Duration::from_secs(365 * 86_400);

/// This process as a lease holder ([`MemoryBackend::try_lease`]): its id and a random
/// part, so a restarted process (which may get the same id) is a new holder.
pub fn process_holder() -> &'static str {
    static HOLDER: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    HOLDER.get_or_init(|| format!("pid-{}-{}", std::process::id(), MemoryId::new()))
}

/// Checks a lease request before a backend takes it ([`MemoryBackend::try_lease`]): a name
/// and a holder of 1 to [`MAX_LEASE_NAME_BYTES`] bytes, and a `ttl` of at least a
/// millisecond and at most [`MAX_LEASE_TTL`]. Returns the ttl in milliseconds.
pub fn check_lease(name: &str, holder: &str, ttl: Duration) -> Result<i64> {
    for (field, value) in [("lease name", name), ("lease holder", holder)] {
        if value.is_empty() || value.len() > MAX_LEASE_NAME_BYTES {
            return Err(MemoryError::InvalidInput {
                field,
                problem: format!(
                    "{} bytes; expected 1 to {MAX_LEASE_NAME_BYTES}",
                    value.len()
                ),
            });
        }
    }
    let ms = ttl.as_millis();
    if ms == 0 || ttl > MAX_LEASE_TTL {
        return Err(MemoryError::InvalidInput {
            field: "lease ttl",
            problem: format!("{ttl:?}; expected 1 ms to a year"),
        });
    }
    Ok(i64::try_from(ms).unwrap_or(i64::MAX))
}

/// Checks that every entry a backend is about to return belongs to `scope`.
///
/// Backends call this on their results as defence in depth: a bug in a query surfaces as
/// [`MemoryError::ScopeViolation`] instead of one user's memory reaching another's prompt.
pub fn ensure_scope<'a>(
    backend: &str,
    scope: &Scope,
    entries: impl IntoIterator<Item = &'a MemoryEntry>,
) -> Result<()> {
    for e in entries {
        if &e.scope != scope {
            return Err(MemoryError::ScopeViolation {
                backend: backend.to_owned(),
                requested: scope.key(),
                found: e.scope.key(),
            });
        }
    }
    Ok(())
}

/// How many search hits the two-step `remember_once` compares with the new content.
const CANDIDATES: usize = 20;

/// [`MemoryBackend::remember_once`] in two steps (a search, then a store or an update):
/// the default for backends that cannot do it in one. The duplicate is looked for by
/// keyword search (else semantic search) among the best matches, without counting as a
/// recall; a backend with neither stores as usual.
async fn search_then_store<B: MemoryBackend + ?Sized>(
    backend: &B,
    scope: &Scope,
    memory: NewMemory,
) -> Result<Remembered> {
    let caps = backend.capabilities();
    let request = if caps.supports(Capability::KeywordSearch) {
        Some(SearchRequest::keyword(memory.content.clone()))
    } else if caps.supports(Capability::SemanticSearch) {
        Some(SearchRequest::semantic(memory.content.clone()))
    } else {
        None
    };
    let wanted = normalise(&memory.content);
    if let Some(request) = request
        && !wanted.is_empty()
    {
        let request = request
            .limit(CANDIDATES)
            .filter(Filter {
                kinds: vec![memory.kind],
                // A fact that no longer holds is not the same as one told again now.
                valid_at: caps.supports(Capability::TimeFilter).then(Timestamp::now),
                ..Filter::default()
            })
            .without_access_tracking();
        let same = backend
            .search(scope, &request)
            .await?
            .into_iter()
            .map(|h| h.entry)
            .find(|e| normalise(&e.content) == wanted);
        if let Some(existing) = same {
            let entry = merge(backend, scope, existing, memory).await?;
            return Ok(Remembered {
                entry,
                merged: true,
            });
        }
    }
    Ok(Remembered {
        entry: backend.store(scope, memory).await?,
        merged: false,
    })
}

/// Merges `new` into `existing` where the backend can update; otherwise leaves it.
async fn merge<B: MemoryBackend + ?Sized>(
    backend: &B,
    scope: &Scope,
    existing: MemoryEntry,
    new: NewMemory,
) -> Result<MemoryEntry> {
    if !backend.capabilities().supports(Capability::Update) {
        return Ok(existing);
    }
    let patch = merge_patch(&existing, &new);
    if patch.is_empty() {
        return Ok(existing);
    }
    backend.update(scope, existing.id, patch).await
}

/// What the defaults of the methods that need a [`Capability`] return: `backend` does not
/// offer it.
fn refused<B: MemoryBackend + ?Sized>(backend: &B, capability: Capability) -> MemoryError {
    MemoryError::Unsupported {
        capability,
        provider: backend.info().name,
    }
}

macro_rules! forward_backend {
    ($($ty:ty),*) => {$(
        #[async_trait]
        impl<T: MemoryBackend + ?Sized> MemoryBackend for $ty {
            fn info(&self) -> BackendInfo {
                (**self).info()
            }
            fn capabilities(&self) -> Capabilities {
                (**self).capabilities()
            }
            async fn store_batch(&self, scope: &Scope, memories: Vec<NewMemory>) -> Result<Vec<MemoryEntry>> {
                (**self).store_batch(scope, memories).await
            }
            async fn get(&self, scope: &Scope, id: MemoryId) -> Result<MemoryEntry> {
                (**self).get(scope, id).await
            }
            async fn search(&self, scope: &Scope, request: &SearchRequest) -> Result<Vec<ScoredMemory>> {
                (**self).search(scope, request).await
            }
            async fn recent(&self, scope: &Scope, limit: usize, filter: &Filter) -> Result<Vec<MemoryEntry>> {
                (**self).recent(scope, limit, filter).await
            }
            async fn update(&self, scope: &Scope, id: MemoryId, patch: MemoryPatch) -> Result<MemoryEntry> {
                (**self).update(scope, id, patch).await
            }
            async fn delete(&self, scope: &Scope, id: MemoryId) -> Result<()> {
                (**self).delete(scope, id).await
            }
            async fn delete_scope(&self, scope: &Scope) -> Result<u64> {
                (**self).delete_scope(scope).await
            }
            async fn prune(&self, scope: &Scope, policy: &PrunePolicy) -> Result<PruneReport> {
                (**self).prune(scope, policy).await
            }
            async fn count(&self, scope: &Scope) -> Result<u64> {
                (**self).count(scope).await
            }
            async fn scopes(&self, tenant: Option<&str>, user: Option<&str>) -> Result<Vec<Scope>> {
                (**self).scopes(tenant, user).await
            }
            async fn user_scopes(&self, tenant: &str, user: &str) -> Result<Vec<Scope>> {
                (**self).user_scopes(tenant, user).await
            }
            async fn store(&self, scope: &Scope, memory: NewMemory) -> Result<MemoryEntry> {
                (**self).store(scope, memory).await
            }
            async fn store_each(&self, scope: &Scope, memories: Vec<NewMemory>) -> Result<Vec<Ingested>> {
                (**self).store_each(scope, memories).await
            }
            async fn by_tags(&self, scope: &Scope, tags: &TagQuery, limit: usize) -> Result<Vec<MemoryEntry>> {
                (**self).by_tags(scope, tags, limit).await
            }
            async fn remember_once(&self, scope: &Scope, memory: NewMemory) -> Result<Remembered> {
                (**self).remember_once(scope, memory).await
            }
            async fn try_lease(&self, name: &str, holder: &str, ttl: Duration) -> Result<bool> {
                (**self).try_lease(name, holder, ttl).await
            }
            async fn release_lease(&self, name: &str, holder: &str) -> Result<()> {
                (**self).release_lease(name, holder).await
            }
            async fn end_lease(&self, name: &str) -> Result<()> {
                (**self).end_lease(name).await
            }
            async fn keep_record(&self, scope: &Scope, record: Record, keep: usize) -> Result<()> {
                (**self).keep_record(scope, record, keep).await
            }
            async fn records(&self, scope: &Scope, kind: &str, limit: usize) -> Result<Vec<Record>> {
                (**self).records(scope, kind, limit).await
            }
            async fn reclaim_deleted(&self) -> Result<()> {
                (**self).reclaim_deleted().await
            }
        }
    )*};
}

forward_backend!(Arc<T>, Box<T>, &T);
