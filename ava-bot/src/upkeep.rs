//! Pruning as chats are used: the rules `ava prune` applies on demand ([`policy`]), and
//! [`Upkeep`], which applies them to each chat after its exchanges (`ava run`, `ava chat`,
//! `ava serve`), in the background.
//!
//! Pinned memories and facts valid now are never pruned (see `memory_core::PrunePolicy`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use memory_core::{
    DecayPolicy, MemoryBackend, PrunePolicy, PruneReason, PruneReport, Scope, Timestamp,
};

/// Memories a chat keeps at most by default (pinned memories and valid facts not counted).
pub(crate) const DEFAULT_MAX_COUNT: usize = 20_000;

/// Reads `90d`, `12h`, `30m`, `45s` or `2w`.
pub(crate) fn parse_age(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("`{text}`: expected a number and a unit, like 90d, 12h or 2w"))?;
    let seconds = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        "w" => 7 * 86_400,
        _ => {
            return Err(format!(
                "`{text}`: unknown unit `{unit}`; use s, m, h, d or w (e.g. 90d)"
            ));
        }
    };
    if n == 0 {
        return Err(format!("`{text}`: must be longer than zero"));
    }
    n.checked_mul(seconds)
        .map(Duration::from_secs)
        .ok_or_else(|| format!("`{text}`: too long"))
}

/// The strength under which a memory has faded, by default (`ava prune` and the upkeep).
const DEFAULT_MIN_STRENGTH: f32 = 0.05;

/// Forgetting what faded: memories neither recalled nor important lose strength with time
/// (`memory_core::decay_strength`), and those below a threshold go.
#[derive(Debug, Clone, Copy, clap::Args)]
pub(crate) struct DecayArgs {
    /// Remove memories whose strength fell below `--decay-min-strength`, strength halving
    /// every this long without a recall (`30d`); a memory of default importance, never
    /// recalled, goes after about three half-lives [default: no decay].
    #[arg(long, value_parser = parse_age)]
    decay_half_life: Option<Duration>,
    /// The strength under which a memory has faded (importance 0..1, times the decay).
    #[arg(long, default_value_t = DEFAULT_MIN_STRENGTH)]
    decay_min_strength: f32,
}

impl DecayArgs {
    pub(crate) fn policy(self) -> Option<DecayPolicy> {
        self.decay_half_life.map(|half_life| DecayPolicy {
            half_life,
            min_strength: self.decay_min_strength,
        })
    }
}

/// The policy for the rules, measured from `now`.
pub(crate) fn policy(
    max_age: Option<Duration>,
    max_count: usize,
    decay: DecayArgs,
    now: Timestamp,
) -> PrunePolicy {
    PrunePolicy {
        max_age,
        max_count: Some(max_count),
        decay: decay.policy(),
        now,
        ..PrunePolicy::new()
    }
}

/// Why a rule removed a memory, for people.
pub(crate) fn reason(r: PruneReason, max_age: Option<Duration>, max_count: usize) -> String {
    match r {
        PruneReason::Expired => format!(
            "older than {} days",
            max_age.map_or(0, |a| a.as_secs() / 86_400)
        ),
        PruneReason::OverCount => format!("beyond the newest {max_count} of the chat"),
        PruneReason::Decayed => "faded (decay)".to_owned(),
    }
}

/// The prune rules `ava run` and `ava chat` apply to each chat as it is used.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct UpkeepArgs {
    /// Do not prune chats as they are used.
    #[arg(long)]
    no_prune: bool,
    /// Prune a chat's turns (and facts no longer valid) older than this (`90d`, `12h`)
    /// [default: none removed for age].
    #[arg(long, value_parser = parse_age)]
    prune_max_age: Option<Duration>,
    /// Keep at most this many memories per chat, removing the oldest first.
    #[arg(long, default_value_t = DEFAULT_MAX_COUNT)]
    prune_max_count: usize,
    /// Also prune what faded: strength halves every this long without a recall (`30d`)
    /// [default: no decay].
    #[arg(long, value_parser = parse_age)]
    prune_decay_half_life: Option<Duration>,
    /// Prune each chat at most this often (`24h`, `1w`), counted across every process on
    /// the store.
    #[arg(long, value_parser = parse_age, default_value = "24h")]
    prune_every: Duration,
}

impl UpkeepArgs {
    /// The upkeep these arguments ask for, or `None` with `--no-prune`.
    pub(crate) fn upkeep(&self) -> Option<Arc<Upkeep>> {
        (!self.no_prune).then(|| {
            Arc::new(Upkeep {
                max_age: self.prune_max_age,
                decay: DecayArgs {
                    decay_half_life: self.prune_decay_half_life,
                    decay_min_strength: DEFAULT_MIN_STRENGTH,
                },
                max_count: self.prune_max_count,
                every: self.prune_every,
                last: Mutex::new(HashMap::new()),
            })
        })
    }
}

/// Prunes each chat after an exchange when nobody has pruned it for `every`, in the
/// background: a reply never waits for it. What it removed is logged. The turn is a lease
/// in the store (`prune:<scope>`, held for `every`), so processes sharing the store (bot
/// replicas, a CLI beside a bot) prune a chat once per interval between them.
#[derive(Debug)]
pub(crate) struct Upkeep {
    max_age: Option<Duration>,
    max_count: usize,
    decay: DecayArgs,
    every: Duration,
    /// When this process last looked at pruning each chat (by scope key), so it asks the
    /// store for the chat's turn at most once per `every`.
    last: Mutex<HashMap<String, Instant>>,
}

impl Upkeep {
    /// Starts pruning `scope` in the background if it is due; the task, if one started.
    pub(crate) fn after_exchange(
        &self,
        store: &Arc<dyn MemoryBackend>,
        scope: &Scope,
    ) -> Option<tokio::task::JoinHandle<()>> {
        {
            let mut last = self.last.lock().ok()?;
            let now = Instant::now();
            if last
                .get(&scope.key())
                .is_some_and(|at| now.duration_since(*at) < self.every)
            {
                return None;
            }
            last.insert(scope.key(), now);
        }
        let (store, scope) = (Arc::clone(store), scope.clone());
        let policy = policy(self.max_age, self.max_count, self.decay, Timestamp::now());
        // Once per `every` for every process sharing the store: whoever takes the chat's
        // lease prunes, and keeps it until the next is due.
        let lease = pruning_lease(&scope);
        let held_for = self.every.min(memory_core::MAX_LEASE_TTL);
        Some(tokio::spawn(async move {
            match store
                .try_lease(&lease, memory_core::process_holder(), held_for)
                .await
            {
                Ok(true) => {}
                Ok(false) => {
                    tracing::debug!(scope = %scope, "another process pruned the chat lately");
                    return;
                }
                Err(e) => {
                    tracing::warn!(
                        scope = %scope,
                        error = %memory_core::ErrorChain(&e),
                        "pruning the chat skipped: could not take its turn"
                    );
                    return;
                }
            }
            match store.prune(&scope, &policy).await {
                Ok(report) => log(&scope, &report),
                Err(e) => tracing::warn!(
                    scope = %scope,
                    error = %memory_core::ErrorChain(&e),
                    "pruning the chat failed"
                ),
            }
        }))
    }
}

fn log(scope: &Scope, report: &PruneReport) {
    if report.removed.is_empty() {
        return;
    }
    tracing::info!(
        scope = %scope,
        removed = report.removed.len(),
        expired = report.count(PruneReason::Expired),
        over_count = report.count(PruneReason::OverCount),
        "pruned the chat"
    );
}

/// The lease under which one process at a time prunes `scope`, held until the next pruning
/// is due: the facade's name, which erasing ends.
pub(crate) use ava_memory::erase::pruning_lease;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_parse_with_units_and_bad_ones_say_why() {
        assert_eq!(parse_age("90d"), Ok(Duration::from_secs(90 * 86_400)));
        assert_eq!(parse_age("12h"), Ok(Duration::from_secs(12 * 3_600)));
        assert_eq!(parse_age("2w"), Ok(Duration::from_secs(14 * 86_400)));
        assert!(parse_age("90").unwrap_err().contains("unknown unit"));
        assert!(parse_age("d").unwrap_err().contains("expected a number"));
        assert!(parse_age("0d").unwrap_err().contains("longer than zero"));
        assert!(parse_age("3y").unwrap_err().contains("use s, m, h, d or w"));
    }
}
