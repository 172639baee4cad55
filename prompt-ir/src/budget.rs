//! Budgets and requests: [`TokenBudget`] (never zero, reserve below 1), how it is split
//! ([`BudgetAllocation`]), and what to retrieve ([`ContextStrategy`], [`ContextRequest`]).

use std::num::{NonZeroU32, NonZeroU64};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::unit::{Ratio, Relevance, check_unit};

/// How many tokens a prompt may use.
///
/// `total` is never zero and the reserve (headroom kept free, e.g. for the reply) is less
/// than the whole, so at least one token is always [available](TokenBudget::available).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "TokenBudgetRepr")]
pub struct TokenBudget {
    total: NonZeroU32,
    reserve: Ratio,
    allocation: BudgetAllocation,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenBudgetRepr {
    total: u32,
    #[serde(default)]
    reserve: f64,
    #[serde(default)]
    allocation: BudgetAllocation,
}

impl TryFrom<TokenBudgetRepr> for TokenBudget {
    type Error = Error;
    fn try_from(r: TokenBudgetRepr) -> Result<Self> {
        Ok(TokenBudget::new(r.total)?
            .with_reserve(r.reserve)?
            .with_allocation(r.allocation))
    }
}

impl TokenBudget {
    /// A budget of `total` tokens with no reserve and relevance-weighted allocation.
    /// Fails when `total` is zero.
    pub fn new(total: u32) -> Result<Self> {
        let total = NonZeroU32::new(total).ok_or(Error::ZeroBudget)?;
        Ok(TokenBudget {
            total,
            reserve: Ratio::ZERO,
            allocation: BudgetAllocation::default(),
        })
    }

    /// Keeps `reserve` of the total free as headroom. Fails unless `0 <= reserve < 1`.
    pub fn with_reserve(mut self, reserve: f64) -> Result<Self> {
        let r = check_unit(reserve, "reserve ratio").and_then(|r| {
            if r < 1.0 {
                Ok(r)
            } else {
                Err(Error::OutOfRange {
                    what: "reserve ratio",
                    value: reserve,
                    expected: "a number from 0 up to but not including 1 (a reserve of 1 leaves \
                               no tokens)",
                })
            }
        })?;
        self.reserve = Ratio::new(r)?;
        Ok(self)
    }

    /// Sets how the available tokens are split.
    pub fn with_allocation(mut self, allocation: BudgetAllocation) -> Self {
        self.allocation = allocation;
        self
    }

    /// The whole budget.
    pub fn total(&self) -> u32 {
        self.total.get()
    }

    /// The reserve ratio.
    pub fn reserve(&self) -> Ratio {
        self.reserve
    }

    /// The allocation.
    pub fn allocation(&self) -> &BudgetAllocation {
        &self.allocation
    }

    /// Tokens held back: `floor(total × reserve)`, always less than `total`.
    pub fn reserved_tokens(&self) -> u32 {
        let total = self.total.get();
        let reserved = (f64::from(total) * self.reserve.get()).floor();
        // `as` saturates; the `min` keeps one token even if rounding crept up.
        (reserved as u32).min(total - 1)
    }

    /// Tokens the prompt may use: the budget minus the reserve, at least 1.
    pub fn available(&self) -> u32 {
        self.total.get() - self.reserved_tokens()
    }
}

/// How the available budget is split between parts of the prompt.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum BudgetAllocation {
    /// Fixed shares per pool; each pool is compressed to its own share and unused tokens
    /// are not lent to another pool.
    FixedRatios(FixedRatios),
    /// One pool; sections are ranked by [`estimate_impact`](crate::estimate_impact) (priority,
    /// relevance and lexical diversity) times recency decay.
    InformationWeighted,
    /// One pool; sections are ranked by priority × relevance × recency decay.
    #[default]
    RelevanceWeighted,
}

impl std::fmt::Display for BudgetAllocation {
    /// The form [`FromStr`](std::str::FromStr) reads: `relevance`, `information`, or
    /// `fixed:SYSTEM,CONTEXT,OBSERVATION`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BudgetAllocation::RelevanceWeighted => f.write_str("relevance"),
            BudgetAllocation::InformationWeighted => f.write_str("information"),
            BudgetAllocation::FixedRatios(r) => write!(
                f,
                "fixed:{},{},{}",
                r.system().get(),
                r.context().get(),
                r.observation().get()
            ),
        }
    }
}

impl std::str::FromStr for BudgetAllocation {
    type Err = Error;

    /// Reads `relevance`, `information`, or `fixed:SYSTEM,CONTEXT,OBSERVATION` (three shares
    /// of the budget, checked as [`FixedRatios::new`] checks them).
    fn from_str(text: &str) -> Result<Self> {
        let unknown = || Error::UnknownAllocation {
            given: text.to_owned(),
        };
        match text.trim() {
            "relevance" | "relevance_weighted" => Ok(BudgetAllocation::RelevanceWeighted),
            "information" | "information_weighted" => Ok(BudgetAllocation::InformationWeighted),
            other => {
                let shares = other.strip_prefix("fixed:").ok_or_else(unknown)?;
                let parts: Vec<f64> = shares
                    .split(',')
                    .map(|x| x.trim().parse::<f64>())
                    .collect::<std::result::Result<_, _>>()
                    .map_err(|_| unknown())?;
                let [system, context, observation] = parts[..] else {
                    return Err(unknown());
                };
                Ok(BudgetAllocation::FixedRatios(FixedRatios::new(
                    system,
                    context,
                    observation,
                )?))
            }
        }
    }
}

/// Shares of the available budget for [`BudgetAllocation::FixedRatios`]: each from 0 to 1,
/// adding up to at most 1.
///
/// The system pool holds hierarchical and constraint sections and the tools; the context
/// pool holds additive and contextual sections; the observation pool holds the observation.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "FixedRatiosRepr")]
pub struct FixedRatios {
    system: Ratio,
    context: Ratio,
    observation: Ratio,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FixedRatiosRepr {
    system: f64,
    context: f64,
    observation: f64,
}

impl TryFrom<FixedRatiosRepr> for FixedRatios {
    type Error = Error;
    fn try_from(r: FixedRatiosRepr) -> Result<Self> {
        FixedRatios::new(r.system, r.context, r.observation)
    }
}

impl FixedRatios {
    /// Checks each share is in `0..=1` and that they add up to at most 1.
    pub fn new(system: f64, context: f64, observation: f64) -> Result<Self> {
        let system = check_unit(system, "system ratio")?;
        let context = check_unit(context, "context ratio")?;
        let observation = check_unit(observation, "observation ratio")?;
        let sum = system + context + observation;
        // A little slack so 0.7 + 0.2 + 0.1 is not refused over binary rounding.
        if sum > 1.0 + 1e-9 {
            return Err(Error::RatiosOverOne {
                system,
                context,
                observation,
                sum,
            });
        }
        Ok(FixedRatios {
            system: Ratio::new(system)?,
            context: Ratio::new(context)?,
            observation: Ratio::new(observation)?,
        })
    }

    /// Share of the system pool.
    pub fn system(&self) -> Ratio {
        self.system
    }

    /// Share of the context pool.
    pub fn context(&self) -> Ratio {
        self.context
    }

    /// Share of the observation pool.
    pub fn observation(&self) -> Ratio {
        self.observation
    }

    /// Tokens of `available` for a pool with `share`. The three caps never add up to more
    /// than `available`.
    pub(crate) fn cap(available: u32, share: Ratio) -> u32 {
        ((f64::from(available) * share.get()).floor() as u32).min(available)
    }
}

/// How the weight of a dated section fades with age.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecencyDecay {
    /// Age does not matter.
    None,
    /// Weight halves every `seconds`, down to `floor`: the weight is
    /// `floor + (1 - floor) · 0.5^(age / half-life)`.
    HalfLife {
        /// The half-life in seconds.
        seconds: NonZeroU64,
        /// The least weight age can leave (0 to 1; 0 if left out): with 0.5, age at most
        /// halves a section's value, so an old memory that answers the question still
        /// outranks a new one that does not.
        #[serde(default = "no_floor", skip_serializing_if = "is_zero")]
        floor: Ratio,
    },
}

fn is_zero(r: &Ratio) -> bool {
    r.get() == 0.0
}

fn no_floor() -> Ratio {
    Ratio::ZERO
}

impl Default for RecencyDecay {
    /// A half-life of one week, with a floor of 0.9: recency breaks near-ties between
    /// what is about equally relevant (the newest weigh at most 11% more), and never
    /// buries what is relevant but old (measured in BENCHMARKS.md).
    fn default() -> Self {
        RecencyDecay::HalfLife {
            seconds: NonZeroU64::MIN.saturating_add(7 * 24 * 3600 - 1),
            floor: Ratio::clamped(0.9),
        }
    }
}

impl RecencyDecay {
    /// The weight, from 0 to 1, of something dated `at` as seen at `now`. Undated or
    /// future-dated things weigh 1.
    pub fn factor(self, at: Option<DateTime<Utc>>, now: DateTime<Utc>) -> f64 {
        match (self, at) {
            (RecencyDecay::HalfLife { seconds, floor }, Some(at)) if at < now => {
                let age_ms = (now - at).num_milliseconds() as f64;
                let half_life_ms = seconds.get() as f64 * 1000.0;
                let f = floor.get();
                f + (1.0 - f) * 0.5f64.powf(age_ms / half_life_ms)
            }
            _ => 1.0,
        }
    }
}

/// What to retrieve when building a prompt. Fields left out of a serialized strategy take
/// their defaults.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ContextStrategy {
    /// How many of the most recent conversation messages to include.
    pub temporal_window: u32,
    /// At most this many semantically related past messages.
    pub semantic_limit: u32,
    /// Least similarity for a related past message to be retrieved. Default 0: every hit
    /// competes under the budget on its relevance. A threshold suits plain cosine
    /// similarity; hybrid scores are normalised per query, so a fixed cut on them drops
    /// evidence (measured in BENCHMARKS.md).
    pub semantic_threshold: Relevance,
    /// How dated sections fade with age when ranked for compression.
    pub recency_decay: RecencyDecay,
    /// Whether to include knowledge memories.
    pub include_knowledge: bool,
    /// A section longer than this many tokens is ranked for compression by its value per
    /// this many tokens (its value times `long_item_tokens / tokens`), so a long memory is cut
    /// before shorter ones that are worth about as much, and gives its room to them; 0 ranks
    /// every section by its value alone. Default [`LONG_ITEM_TOKENS`].
    pub long_item_tokens: u32,
    /// Least relevance for a section retrieved per message ([`Stability::Volatile`], other
    /// than conditional text) to enter the prompt at all, whatever room is left: below it a
    /// candidate is unlikely to be worth its tokens. Default 0: every candidate competes on
    /// value alone.
    ///
    /// [`Stability::Volatile`]: crate::Stability::Volatile
    pub relevance_floor: Relevance,
}

/// The default [`ContextStrategy::long_item_tokens`]: 192 tokens, about one passage of the
/// default embedder's window (256 word pieces, some 760 bytes of English), the most that
/// one memory is taken to say as one piece. A chat turn fits; an agent's long answer spans
/// several such pieces and competes per piece. Measured in BENCHMARKS.md (flat from 128 to
/// 256 tokens).
pub const LONG_ITEM_TOKENS: u32 = 192;

impl Default for ContextStrategy {
    /// 20 recent messages, 5 related ones (however similar), a one-week half-life,
    /// knowledge included, long sections ranked per [`LONG_ITEM_TOKENS`], no relevance floor.
    fn default() -> Self {
        ContextStrategy {
            temporal_window: 20,
            semantic_limit: 5,
            semantic_threshold: Relevance::ZERO,
            recency_decay: RecencyDecay::default(),
            include_knowledge: true,
            long_item_tokens: LONG_ITEM_TOKENS,
            relevance_floor: Relevance::ZERO,
        }
    }
}

/// A request for a hydrated context: the new observation (usually the user's message), an
/// optional goal, what to retrieve, and the budget.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContextRequest {
    /// The new observation.
    pub observation: String,
    /// What the agent is trying to do, if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goal: Option<String>,
    /// What to retrieve.
    #[serde(default)]
    pub strategy: ContextStrategy,
    /// The token budget.
    pub budget: TokenBudget,
}

impl ContextRequest {
    /// A request with the default strategy and no goal.
    pub fn new(observation: impl Into<String>, budget: TokenBudget) -> Self {
        ContextRequest {
            observation: observation.into(),
            goal: None,
            strategy: ContextStrategy::default(),
            budget,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocations_read_from_text() {
        assert_eq!(
            "relevance".parse::<BudgetAllocation>().unwrap(),
            BudgetAllocation::RelevanceWeighted
        );
        assert_eq!(
            " information ".parse::<BudgetAllocation>().unwrap(),
            BudgetAllocation::InformationWeighted
        );
        assert_eq!(
            "fixed:0.3, 0.6,0.1".parse::<BudgetAllocation>().unwrap(),
            BudgetAllocation::FixedRatios(FixedRatios::new(0.3, 0.6, 0.1).unwrap())
        );
        for bad in ["", "fixed", "fixed:0.3,0.6", "fixed:a,b,c", "weighted"] {
            let err = bad.parse::<BudgetAllocation>().unwrap_err();
            assert!(
                matches!(err, Error::UnknownAllocation { .. }),
                "{bad}: {err}"
            );
            assert!(err.to_string().contains("fixed:SYSTEM,CONTEXT,OBSERVATION"));
        }
        for a in [
            BudgetAllocation::RelevanceWeighted,
            BudgetAllocation::InformationWeighted,
            BudgetAllocation::FixedRatios(FixedRatios::new(0.25, 0.7, 0.05).unwrap()),
        ] {
            assert_eq!(a.to_string().parse::<BudgetAllocation>().unwrap(), a);
        }
        assert!(matches!(
            "fixed:0.5,0.5,0.5".parse::<BudgetAllocation>(),
            Err(Error::RatiosOverOne { .. })
        ));
    }

    #[test]
    fn zero_budget_is_rejected() {
        assert_eq!(TokenBudget::new(0).unwrap_err(), Error::ZeroBudget);
        let err = serde_json::from_str::<TokenBudget>(r#"{"total":0}"#).unwrap_err();
        assert!(
            err.to_string().contains("token budget is 0 tokens"),
            "{err}"
        );
    }

    #[test]
    fn reserve_must_leave_something() {
        let b = TokenBudget::new(1000).unwrap();
        assert_eq!(b.clone().with_reserve(0.25).unwrap().available(), 750);
        let err = b.clone().with_reserve(1.0).unwrap_err();
        assert!(err.to_string().contains("reserve ratio was 1"), "{err}");
        let err = b.clone().with_reserve(-0.5).unwrap_err();
        assert_eq!(
            err.to_string(),
            "reserve ratio was -0.5, expected a finite number from 0 to 1"
        );
        assert!(b.with_reserve(f64::NAN).is_err());
        // A tiny budget with a large reserve still leaves one token.
        let tiny = TokenBudget::new(1).unwrap().with_reserve(0.99).unwrap();
        assert_eq!(tiny.available(), 1);
    }

    #[test]
    fn fixed_ratios_must_not_exceed_one() {
        assert!(FixedRatios::new(0.7, 0.2, 0.1).is_ok());
        let err = FixedRatios::new(0.6, 0.5, 0.1).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("budget allocation ratios add up to 1.2"),
            "{err}"
        );
        let err = FixedRatios::new(0.5, 1.5, 0.0).unwrap_err();
        assert!(
            err.to_string().starts_with("context ratio was 1.5"),
            "{err}"
        );
    }

    #[test]
    fn budgets_round_trip_through_json() {
        let b = TokenBudget::new(4000)
            .unwrap()
            .with_reserve(0.2)
            .unwrap()
            .with_allocation(BudgetAllocation::FixedRatios(
                FixedRatios::new(0.3, 0.6, 0.1).unwrap(),
            ));
        let json = serde_json::to_string(&b).unwrap();
        assert_eq!(
            json,
            r#"{"total":4000,"reserve":0.2,"allocation":{"kind":"fixed_ratios","system":0.3,"context":0.6,"observation":0.1}}"#
        );
        assert_eq!(serde_json::from_str::<TokenBudget>(&json).unwrap(), b);
        let bad = json.replace("0.6", "0.95");
        assert!(serde_json::from_str::<TokenBudget>(&bad).is_err());
    }

    #[test]
    fn recency_decay_halves_per_half_life_down_to_its_floor() {
        let now = DateTime::<Utc>::from_timestamp(1_000_000, 0).unwrap();
        let week = RecencyDecay::HalfLife {
            seconds: NonZeroU64::new(7 * 24 * 3600).unwrap(),
            floor: Ratio::ZERO,
        };
        let a_week_ago = now - chrono::Duration::days(7);
        assert!((week.factor(Some(a_week_ago), now) - 0.5).abs() < 1e-12);
        assert_eq!(week.factor(None, now), 1.0);
        // The default: a week halves what is above the floor of 0.9.
        let default = RecencyDecay::default();
        assert!((default.factor(Some(a_week_ago), now) - 0.95).abs() < 1e-12);
        let a_year_ago = now - chrono::Duration::days(365);
        assert!((default.factor(Some(a_year_ago), now) - 0.9).abs() < 1e-6);
        // Left out of JSON, the floor is 0 (strategies written before it existed).
        let old: RecencyDecay =
            serde_json::from_str(r#"{"half_life": {"seconds": 604800}}"#).unwrap();
        assert_eq!(old, week);
        assert_eq!(week.factor(Some(now + chrono::Duration::days(1)), now), 1.0);
        assert_eq!(RecencyDecay::None.factor(Some(a_week_ago), now), 1.0);
    }

    #[test]
    fn strategy_fills_defaults() {
        let s: ContextStrategy = serde_json::from_str(r#"{"semantic_limit": 2}"#).unwrap();
        assert_eq!(s.semantic_limit, 2);
        assert_eq!(s.temporal_window, 20);
        assert!(serde_json::from_str::<ContextStrategy>(r#"{"semantic_threshold": 2}"#).is_err());
    }

    #[test]
    fn request_round_trips() {
        let r = ContextRequest::new("hi", TokenBudget::new(100).unwrap());
        let json = serde_json::to_string(&r).unwrap();
        assert_eq!(serde_json::from_str::<ContextRequest>(&json).unwrap(), r);
    }
}
