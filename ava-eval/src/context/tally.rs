//! Counting results: where a missed evidence message was lost, per-category means, and the
//! small statistics of the report.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};

use crate::locomo::{CATEGORIES, Question};

/// Where a missed evidence turn was lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Lost {
    /// A source returned it; compile dropped it to fit the budget.
    DroppedByCompile,
    /// A source returned it; compile cut it short.
    TruncatedByCompile,
    /// The search ranks it within the semantic source's item limit, but under the strategy's
    /// similarity threshold.
    BelowThresholdWithinLimit,
    /// Under the threshold, and ranked past the item limit among the candidates the semantic
    /// source fetches.
    BelowThresholdPastLimit,
    /// Above the threshold, but past the source's item or token limits.
    OverSourceLimits,
    /// Not among the candidates the semantic source fetches at all.
    NotRetrieved,
}

impl Lost {
    pub(super) fn name(self) -> &'static str {
        match self {
            Lost::DroppedByCompile => "dropped_by_compile",
            Lost::TruncatedByCompile => "truncated_by_compile",
            Lost::BelowThresholdWithinLimit => "below_threshold_within_limit",
            Lost::BelowThresholdPastLimit => "below_threshold_past_limit",
            Lost::OverSourceLimits => "over_source_limits",
            Lost::NotRetrieved => "not_retrieved",
        }
    }
}

/// Per-category and overall averages of a per-question share.
#[derive(Default, Clone)]
pub(super) struct Tally {
    pub(super) questions: usize,
    sum: f64,
}

impl Tally {
    pub(super) fn add(&mut self, x: f64) {
        self.questions += 1;
        self.sum += x;
    }
    pub(super) fn mean(&self) -> f64 {
        if self.questions == 0 {
            0.0
        } else {
            self.sum / self.questions as f64
        }
    }
}

#[derive(Default)]
pub(super) struct ByCategory {
    pub(super) overall: Tally,
    pub(super) categories: BTreeMap<u64, Tally>,
    /// By BEAM's own category, for files that have one.
    pub(super) beam: BTreeMap<String, Tally>,
}

impl ByCategory {
    pub(super) fn add(&mut self, q: &Question, x: f64) {
        self.overall.add(x);
        self.categories.entry(q.category).or_default().add(x);
        if let Some(b) = &q.beam_category {
            self.beam.entry(b.clone()).or_default().add(x);
        }
    }
    pub(super) fn json(&self) -> Value {
        let tallies = |m: Vec<(String, &Tally)>| -> serde_json::Map<String, Value> {
            m.into_iter()
                .map(|(c, t)| (c, json!({"questions": t.questions, "mean": t.mean()})))
                .collect()
        };
        let cats = tallies(
            self.categories
                .iter()
                .map(|(c, t)| (c.to_string(), t))
                .collect(),
        );
        let beam = tallies(self.beam.iter().map(|(c, t)| (c.clone(), t)).collect());
        json!({"overall": self.overall.mean(), "questions": self.overall.questions,
               "categories": cats, "beam_categories": beam})
    }

    /// The table cells of each category's mean, in [`CATEGORIES`] order (`-` when empty).
    pub(super) fn cells(&self) -> String {
        CATEGORIES
            .iter()
            .map(|(c, _)| {
                self.categories
                    .get(c)
                    .map_or_else(|| format!("{:>12}", "-"), |t| format!("{:>12.3}", t.mean()))
            })
            .collect()
    }
}

pub(super) fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 * p) as usize).min(sorted.len().saturating_sub(1));
    sorted.get(i).map_or(0.0, |d| d.as_secs_f64() * 1e3)
}

/// Counts per key, divided by the number of questions.
pub(super) fn per_question<K: ToString>(counts: &BTreeMap<K, usize>, questions: usize) -> Value {
    counts
        .iter()
        .map(|(k, n)| {
            (
                k.to_string(),
                Value::from(*n as f64 / questions.max(1) as f64),
            )
        })
        .collect::<serde_json::Map<String, Value>>()
        .into()
}

pub(super) fn mean(xs: &[u32]) -> f64 {
    if xs.is_empty() {
        0.0
    } else {
        xs.iter().map(|&x| f64::from(x)).sum::<f64>() / xs.len() as f64
    }
}
