//! Prune policies (TTL, max count, decay) and the one planner every backend applies them with.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::capability::{Capabilities, Capability};
use crate::entry::{MemoryEntry, MemoryId, MemoryKind};
use crate::error::{MemoryError, Result};
use crate::time::Timestamp;

/// Forget memories by decayed strength.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct DecayPolicy {
    /// Time for an untouched memory's strength to halve.
    pub half_life: Duration,
    /// Memories weaker than this are removed.
    pub min_strength: f32,
}

/// What to prune from one scope. Pinned memories and facts valid now (not superseded, not
/// past their `valid_until`) are never pruned: they are the current truth.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct PrunePolicy {
    /// Remove memories created longer ago than this (TTL).
    pub max_age: Option<Duration>,
    /// Keep at most this many unpinned memories, removing the oldest first.
    pub max_count: Option<usize>,
    /// Remove memories whose [`decay_strength`] fell below a threshold.
    pub decay: Option<DecayPolicy>,
    /// The instant ages are measured from (normally now).
    pub now: Timestamp,
    /// Only report what would be removed; remove nothing.
    #[serde(default)]
    pub dry_run: bool,
}

impl PrunePolicy {
    /// A policy that removes nothing, measured from now; add rules with the fields.
    pub fn new() -> Self {
        Self {
            max_age: None,
            max_count: None,
            decay: None,
            now: Timestamp::now(),
            dry_run: false,
        }
    }

    /// The same policy, reporting only (see [`PrunePolicy::dry_run`]).
    pub fn dry(mut self) -> Self {
        self.dry_run = true;
        self
    }

    /// Whether the policy may remove `entry` at all: pinned memories and facts valid now are
    /// exempt from every rule.
    pub fn exempts(&self, entry: &MemoryEntry) -> bool {
        entry.pinned || (entry.kind == MemoryKind::Fact && entry.is_valid_at(self.now))
    }

    /// Checks the policy names at least one rule and only advertised capabilities.
    pub fn validate(&self, caps: &Capabilities, provider: &str) -> Result<()> {
        if self.max_age.is_none() && self.max_count.is_none() && self.decay.is_none() {
            return Err(MemoryError::invalid(
                "prune policy",
                "names no rule; set max_age, max_count or decay",
            ));
        }
        if self.max_age.is_some() {
            caps.require(Capability::PruneTtl, provider)?;
        }
        if self.max_count.is_some() {
            caps.require(Capability::PruneMaxCount, provider)?;
        }
        if let Some(d) = self.decay {
            caps.require(Capability::PruneDecay, provider)?;
            if d.half_life.is_zero() {
                return Err(MemoryError::invalid(
                    "decay half-life",
                    "must be longer than zero",
                ));
            }
            if !d.min_strength.is_finite() || d.min_strength < 0.0 {
                return Err(MemoryError::invalid(
                    "decay threshold",
                    format!("{} must be a finite number >= 0", d.min_strength),
                ));
            }
        }
        Ok(())
    }
}

impl Default for PrunePolicy {
    fn default() -> Self {
        Self::new()
    }
}

/// Why a memory was pruned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PruneReason {
    /// Older than `max_age`.
    Expired,
    /// Beyond `max_count`.
    OverCount,
    /// Strength below the decay threshold.
    Decayed,
}

/// What a prune removed (or, for a dry run, would remove).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PruneReport {
    /// Every removed memory with the first rule that removed it.
    pub removed: Vec<(MemoryId, PruneReason)>,
    /// Nothing was removed: the policy was a dry run.
    #[serde(default)]
    pub dry_run: bool,
}

impl PruneReport {
    /// How many memories a rule removed.
    pub fn count(&self, reason: PruneReason) -> usize {
        self.removed.iter().filter(|(_, r)| *r == reason).count()
    }
}

/// A memory's strength at `now`: `importance × 0.5^(idle / half_life) × (1 + ln(1 + access_count))`,
/// where idle is the time since it was last recalled (or created). Pinned memories do not
/// decay: their strength is `importance × (1 + ln(1 + access_count))`.
pub fn decay_strength(entry: &MemoryEntry, half_life: Duration, now: Timestamp) -> f32 {
    let base = entry.importance.get() * (1.0 + (1.0 + entry.access_count as f32).ln());
    if entry.pinned || half_life.is_zero() {
        return base;
    }
    let idle = now
        .since(entry.accessed_at.max(entry.created_at))
        .as_secs_f64();
    let halves = idle / half_life.as_secs_f64();
    base * 0.5f64.powf(halves) as f32
}

/// Decides which of one scope's memories a policy removes. Rules apply in the order TTL,
/// decay, max count (max count counts what the other rules left). Pinned memories and facts
/// valid now are kept and not counted. The report is marked a dry run when the policy is
/// one; removing is the backend's part.
pub fn plan_prune<'a>(
    entries: impl IntoIterator<Item = &'a MemoryEntry>,
    policy: &PrunePolicy,
) -> PruneReport {
    let mut keep: Vec<&MemoryEntry> = Vec::new();
    let mut report = PruneReport {
        dry_run: policy.dry_run,
        ..PruneReport::default()
    };
    for e in entries {
        if policy.exempts(e) {
            continue;
        }
        let expired = policy
            .max_age
            .is_some_and(|age| policy.now.since(e.created_at) > age);
        let decayed = policy
            .decay
            .is_some_and(|d| decay_strength(e, d.half_life, policy.now) < d.min_strength);
        if expired {
            report.removed.push((e.id, PruneReason::Expired));
        } else if decayed {
            report.removed.push((e.id, PruneReason::Decayed));
        } else {
            keep.push(e);
        }
    }
    if let Some(max) = policy.max_count
        && keep.len() > max
    {
        // Newest first; the tail beyond `max` goes.
        keep.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(b.id.cmp(&a.id)));
        report
            .removed
            .extend(keep[max..].iter().map(|e| (e.id, PruneReason::OverCount)));
    }
    report
}
