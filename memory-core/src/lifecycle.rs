//! The lifecycle of a scope's memories, on any backend that advertises
//! [`Capability::Lifecycle`]: [`consolidate`] folds facts that say the same thing into one
//! (the same text once normalised, and with [`Consolidation::similar`] also facts whose
//! vectors are nearly the same) and applies a prune policy; [`invalidate`] ends a fact's
//! validity without a successor; [`restore`] undoes a merge or an ending. Nothing here
//! deletes a fact that was merged or invalidated: it stays, no longer current, and
//! [`history`](crate::history) and [`Filter::as_of`] read it back. A [`ConsolidationReport`]
//! says what changed, with ids and why; the fact extractor in `hydrate` fills the same report.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::backend::MemoryBackend;
use crate::capability::Capability;
use crate::entry::{MemoryEntry, MemoryId, MemoryKind, MemoryPatch};
use crate::error::{MemoryError, Result};
use crate::prune::{PrunePolicy, PruneReason};
use crate::query::{Filter, SearchRequest};
use crate::remember::closing;
use crate::same_fact::{absorb, normalise};
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
    /// Also fold a current fact into an older one whose cosine similarity to it is at least
    /// this (needs [`Capability::SemanticSearch`]; `None`, the default, merges exact
    /// duplicates only). Merges are judged against the kept fact itself, never through a
    /// chain of similar facts. BENCHMARKS.md measures how often such merges are right.
    pub similar: Option<f32>,
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
            similar: None,
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
    if let Some(min) = what.similar {
        if !(0.0..=1.0).contains(&min) || min.is_nan() {
            return Err(MemoryError::invalid(
                "similar",
                format!("{min} is not a cosine similarity between 0 and 1"),
            ));
        }
        backend
            .capabilities()
            .require(Capability::SemanticSearch, &backend.info().name)?;
        merge_similar(backend, scope, what, min, &mut report).await?;
    }
    if let Some(mut policy) = what.prune {
        policy.dry_run = what.dry_run;
        report.pruned = backend.prune(scope, &policy).await?.removed;
    }
    Ok(report)
}

/// The scope's facts valid at `now` (at most `max_results`, newest first).
async fn current_facts(
    backend: &dyn MemoryBackend,
    scope: &Scope,
    now: Timestamp,
) -> Result<Vec<MemoryEntry>> {
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
    Ok(facts.into_iter().filter(|f| f.is_valid_at(now)).collect())
}

async fn merge_duplicates(
    backend: &dyn MemoryBackend,
    scope: &Scope,
    what: &Consolidation,
    report: &mut ConsolidationReport,
) -> Result<()> {
    let facts = current_facts(backend, scope, what.now).await?;
    let mut groups: BTreeMap<String, Vec<MemoryEntry>> = BTreeMap::new();
    for fact in facts {
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

/// How many neighbours of each fact are compared with it.
const NEIGHBOURS: usize = 8;

/// Folds each current fact into the oldest older fact it is at least `min` similar to.
/// Facts merged by an earlier step (or a dry run's plan) are left out. The facts are read
/// again after that step, so a fact it kept brings the tags it was given.
async fn merge_similar(
    backend: &dyn MemoryBackend,
    scope: &Scope,
    what: &Consolidation,
    min: f32,
    report: &mut ConsolidationReport,
) -> Result<()> {
    let already: BTreeSet<MemoryId> = report
        .merged
        .iter()
        .flat_map(|m| m.merged.iter().copied())
        .collect();
    let mut facts = current_facts(backend, scope, what.now).await?;
    facts.retain(|f| !already.contains(&f.id));
    // Oldest first: each fact can only be folded into one older than itself.
    facts.sort_by_key(|e| (e.created_at, e.id));
    let rank: BTreeMap<MemoryId, usize> =
        facts.iter().enumerate().map(|(i, f)| (f.id, i)).collect();
    let mut absorbed = BTreeSet::new();
    let mut groups: BTreeMap<usize, Vec<(usize, f32)>> = BTreeMap::new();
    let filter = Filter {
        kinds: vec![MemoryKind::Fact],
        ..Filter::default()
    };
    for (i, fact) in facts.iter().enumerate() {
        let request = SearchRequest::semantic(fact.content.as_str())
            .limit(NEIGHBOURS)
            .filter(filter.clone())
            .without_access_tracking();
        let best = backend
            .search(scope, &request)
            .await?
            .into_iter()
            .filter_map(|h| {
                let j = *rank.get(&h.entry.id)?;
                let sim = h.breakdown.semantic?;
                (j < i && sim >= min && !absorbed.contains(&j)).then_some((j, sim))
            })
            .min_by_key(|(j, _)| *j);
        if let Some((j, sim)) = best {
            absorbed.insert(i);
            groups.entry(j).or_default().push((i, sim));
        }
    }
    for (k, members) in groups {
        let kept = &facts[k];
        let dups: Vec<MemoryEntry> = members.iter().map(|(i, _)| facts[*i].clone()).collect();
        if !what.dry_run {
            fold(backend, scope, kept, &dups, what.now).await?;
        }
        let lowest = members
            .iter()
            .map(|(_, s)| *s)
            .fold(f32::INFINITY, f32::min);
        report.merged.push(Merged {
            kept: kept.id,
            merged: dups.iter().map(|d| d.id).collect(),
            why: format!(
                "nearly the same meaning (cosine similarity {lowest:.3} or more, threshold {min})"
            ),
        });
    }
    Ok(())
}

/// Makes the memory `id` current again: undoes a merge (its `superseded_by`) or an ending
/// (its `valid_until`). Needs [`Capability::Update`]; a memory that is current already is
/// refused. Undoing a replacement this way leaves both versions current.
pub async fn restore(
    backend: &dyn MemoryBackend,
    scope: &Scope,
    id: MemoryId,
) -> Result<MemoryEntry> {
    backend
        .capabilities()
        .require(Capability::Update, &backend.info().name)?;
    let entry = backend.get(scope, id).await?;
    if entry.superseded_by.is_none() && entry.valid_until.is_none() {
        return Err(MemoryError::invalid(
            "restore",
            format!("{id} is current already; nothing to restore"),
        ));
    }
    let reopen = MemoryPatch {
        valid_until: Some(None),
        superseded_by: Some(None),
        ..MemoryPatch::default()
    };
    backend.update(scope, id, reopen).await
}

/// Gives `kept` what the duplicates had, then closes each duplicate's validity.
async fn fold(
    backend: &dyn MemoryBackend,
    scope: &Scope,
    kept: &MemoryEntry,
    duplicates: &[MemoryEntry],
    now: Timestamp,
) -> Result<()> {
    let patch = absorb(
        kept,
        duplicates.iter().map(|d| (&d.tags, d.importance, d.pinned)),
    );
    if !patch.is_empty() {
        backend.update(scope, kept.id, patch).await?;
    }
    for d in duplicates {
        backend
            .update(scope, d.id, closing(d, now, Some(kept.id)))
            .await?;
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
    backend.update(scope, id, closing(&entry, now, None)).await
}
