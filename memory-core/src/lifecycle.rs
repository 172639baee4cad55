//! The lifecycle of a scope's memories, on any backend that advertises
//! [`Capability::Lifecycle`]: [`consolidate`] folds facts that say the same thing into one and
//! applies a prune policy; [`invalidate`] ends a fact's validity without a successor. Nothing
//! here deletes a fact that was merged or invalidated: it stays, no longer current, and
//! [`history`](crate::history) and [`Filter::as_of`] read it back. A [`ConsolidationReport`]
//! says what changed, with ids and why; the fact extractor in `hydrate` fills the same report.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::backend::MemoryBackend;
use crate::capability::Capability;
use crate::entry::{MemoryEntry, MemoryId, MemoryKind, MemoryPatch};
use crate::error::{MemoryError, Result};
use crate::prune::{PrunePolicy, PruneReason};
use crate::query::Filter;
use crate::remember::normalise;
use crate::scope::Scope;
use crate::time::Timestamp;

/// Memories folded into one: `merged` now point at `kept` (`superseded_by`), their validity
/// closed; `kept` took their tags, the higher importance and pinning.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Merged {
    /// The memory that stays current (the oldest of the group).
    pub kept: MemoryId,
    /// The duplicates folded into it.
    pub merged: Vec<MemoryId>,
    /// Why they were judged the same.
    pub why: String,
}

/// A fact replaced by a newer one.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Superseded {
    /// The fact that held until now.
    pub old: MemoryId,
    /// The fact that holds now.
    pub new: MemoryId,
    /// Why.
    pub why: String,
}

/// A fact that stopped holding, with no successor.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Invalidated {
    /// The fact.
    pub id: MemoryId,
    /// Why.
    pub why: String,
}

/// What a consolidation (or a fact extraction) changed in one scope, or for a dry run would
/// change. Nothing in it was hard-deleted except `pruned`.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ConsolidationReport {
    /// Nothing was changed: the report is a plan.
    pub dry_run: bool,
    /// Facts stored as new.
    pub added: Vec<MemoryId>,
    /// Duplicates folded into one memory.
    pub merged: Vec<Merged>,
    /// Facts replaced by newer ones.
    pub superseded: Vec<Superseded>,
    /// Facts that stopped holding.
    pub invalidated: Vec<Invalidated>,
    /// Memories removed by the prune policy, with the rule that removed each.
    pub pruned: Vec<(MemoryId, PruneReason)>,
    /// Changes that were decided but could not be made, and why.
    pub failed: Vec<String>,
}

impl ConsolidationReport {
    /// Whether nothing changed (and nothing failed).
    pub fn is_empty(&self) -> bool {
        self.added.is_empty()
            && self.merged.is_empty()
            && self.superseded.is_empty()
            && self.invalidated.is_empty()
            && self.pruned.is_empty()
            && self.failed.is_empty()
    }
}

/// What [`consolidate`] does to a scope.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Consolidation {
    /// Fold current facts whose content is the same once [`normalise`]d.
    pub merge_duplicates: bool,
    /// Then prune with this policy (its `dry_run` is overridden by [`Consolidation::dry_run`]).
    pub prune: Option<PrunePolicy>,
    /// Report only; change nothing.
    pub dry_run: bool,
    /// The instant merged duplicates stop being valid.
    pub now: Timestamp,
}

impl Consolidation {
    /// Merge duplicates, prune nothing, measured from now.
    pub fn new() -> Self {
        Self {
            merge_duplicates: true,
            prune: None,
            dry_run: false,
            now: Timestamp::now(),
        }
    }
}

impl Default for Consolidation {
    fn default() -> Self {
        Self::new()
    }
}

/// Consolidates `scope`: current facts that say the same thing (same content once
/// normalised) are folded into the oldest of them (see [`Merged`]), then the prune policy
/// runs. Needs [`Capability::Lifecycle`]. Reads at most the backend's `max_results` newest
/// facts of the scope.
pub async fn consolidate(
    backend: &dyn MemoryBackend,
    scope: &Scope,
    what: &Consolidation,
) -> Result<ConsolidationReport> {
    backend
        .capabilities()
        .require(Capability::Lifecycle, &backend.info().name)?;
    let mut report = ConsolidationReport {
        dry_run: what.dry_run,
        ..ConsolidationReport::default()
    };
    if what.merge_duplicates {
        merge_duplicates(backend, scope, what, &mut report).await?;
    }
    if let Some(mut policy) = what.prune {
        policy.dry_run = what.dry_run;
        report.pruned = backend.prune(scope, &policy).await?.removed;
    }
    Ok(report)
}

async fn merge_duplicates(
    backend: &dyn MemoryBackend,
    scope: &Scope,
    what: &Consolidation,
    report: &mut ConsolidationReport,
) -> Result<()> {
    let facts = backend
        .recent(
            scope,
            backend.info().limits.max_results,
            &Filter {
                kinds: vec![MemoryKind::Fact],
                ..Filter::default()
            },
        )
        .await?;
    let mut groups: BTreeMap<String, Vec<MemoryEntry>> = BTreeMap::new();
    for fact in facts.into_iter().filter(|f| f.is_valid_at(what.now)) {
        let key = normalise(&fact.content);
        if !key.is_empty() {
            groups.entry(key).or_default().push(fact);
        }
    }
    for mut group in groups.into_values().filter(|g| g.len() > 1) {
        group.sort_by_key(|e| (e.created_at, e.id));
        let kept = group.remove(0);
        let merged: Vec<MemoryId> = group.iter().map(|e| e.id).collect();
        if !what.dry_run {
            fold(backend, scope, &kept, &group, what.now).await?;
        }
        report.merged.push(Merged {
            kept: kept.id,
            merged,
            why: "the same text once case, spacing and final punctuation are ignored".into(),
        });
    }
    Ok(())
}

/// Gives `kept` what the duplicates had, then closes each duplicate's validity.
async fn fold(
    backend: &dyn MemoryBackend,
    scope: &Scope,
    kept: &MemoryEntry,
    duplicates: &[MemoryEntry],
    now: Timestamp,
) -> Result<()> {
    let mut patch = MemoryPatch::default();
    let mut tags = kept.tags.clone();
    let mut importance = kept.importance;
    let mut pinned = kept.pinned;
    for d in duplicates {
        tags.extend(d.tags.iter().cloned());
        if d.importance.get() > importance.get() {
            importance = d.importance;
        }
        pinned |= d.pinned;
    }
    if tags != kept.tags {
        patch.tags = Some(tags);
    }
    if importance != kept.importance {
        patch.importance = Some(importance);
    }
    if pinned != kept.pinned {
        patch.pinned = Some(true);
    }
    if !patch.is_empty() {
        backend.update(scope, kept.id, patch).await?;
    }
    for d in duplicates {
        let close = MemoryPatch {
            valid_until: Some(Some(now.max(d.valid_from.unwrap_or(now)))),
            superseded_by: Some(Some(kept.id)),
            ..MemoryPatch::default()
        };
        backend.update(scope, d.id, close).await?;
    }
    Ok(())
}

/// Ends the validity of the fact `id` at `now` ("I sold the car"), without a successor and
/// without deleting it. Needs [`Capability::Update`]; the memory must be valid at `now`.
pub async fn invalidate(
    backend: &dyn MemoryBackend,
    scope: &Scope,
    id: MemoryId,
    now: Timestamp,
) -> Result<MemoryEntry> {
    backend
        .capabilities()
        .require(Capability::Update, &backend.info().name)?;
    let entry = backend.get(scope, id).await?;
    if !entry.is_valid_at(now) {
        return Err(MemoryError::invalid(
            "invalidate",
            format!("{id} no longer holds already (superseded or past its validity)"),
        ));
    }
    let close = MemoryPatch {
        valid_until: Some(Some(now.max(entry.valid_from.unwrap_or(now)))),
        ..MemoryPatch::default()
    };
    backend.update(scope, id, close).await
}
