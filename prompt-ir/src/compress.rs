//! `compress(budget, ir, tokenizer)`: fitting a prompt into a token budget, and reporting what
//! happened to every section and tool, and why.
//!
//! # Semantics
//!
//! The target is the budget minus its reserve ([`TokenBudget::available`]). Under
//! [`BudgetAllocation::FixedRatios`] it is split into three pools, each fitted on its own:
//! *system* (hierarchical and constraint sections, tools), *context* (additive and contextual
//! sections) and *observation*. Otherwise there is one pool.
//!
//! Within a pool:
//!
//! 1. Items that may not be cut are set aside: **Critical** sections and tools (never
//!    truncated, never dropped) and the observation. If they alone exceed the pool, every
//!    other item is dropped and the report says by how much the pool is over
//!    ([`PoolReport::overflow`]); nothing panics. A section retrieved for this message
//!    ([`Stability::Volatile`], not conditional text such as a web result, which a
//!    condition brought) whose relevance is below the strategy's `relevance_floor` is
//!    dropped whatever the room: it is not worth its tokens.
//! 2. The rest are ranked: the **stable part** (sections of any other [`Stability`]: what
//!    the caller keeps from one prompt to the next, so a provider's prompt cache can serve
//!    it) above everything chosen per message, then by value, lowest first: `priority weight × relevance × recency
//!    decay` ([`BudgetAllocation::RelevanceWeighted`] and `FixedRatios`), or
//!    [`estimate_impact`]'s score × recency decay ([`BudgetAllocation::InformationWeighted`]);
//!    a section longer than the strategy's `long_item_tokens` (default
//!    [`LONG_ITEM_TOKENS`](crate::LONG_ITEM_TOKENS)) counts its value per that many
//!    tokens, so a long memory gives way to shorter ones worth about as much.
//!    Recency decay uses the strategy in the IR's meta (one-week half-life if none) and the
//!    IR's timestamp as "now", so the clock is never read. Ties go to position: the later
//!    item ranks lower.
//! 3. **Whole first.** Most valuable first, each item is kept whole if it fits in what is
//!    left of the pool. A few whole memories carry more than many shortened ones (measured
//!    in BENCHMARKS.md), so a lower-value item that fits may stay whole while a
//!    higher-value one too long for the room left waits for step 4.
//! 4. **Then the room left** goes to what did not fit whole, most valuable first: each is
//!    shortened to what is left if its *floor* fits, and dropped otherwise. The floor is
//!    the shortest prefix ending at a sentence or line boundary that is also a token
//!    boundary and keeps at least `min_tokens` (a section without `min_tokens` is all or
//!    nothing). A section marked out in [`Passage`](crate::Passage)s is not cut at its
//!    head: it keeps the excerpt of its most relevant passages that fits, in their order,
//!    gaps marked, and its floor is its best passage alone.
//!
//! Order is stable: kept items stay in their original order. Compression is deterministic
//! (same inputs, byte-identical output) and idempotent: compressing the result again with
//! the same budget changes nothing, because it already fits (or holds only what may not be
//! cut). Token counts are taken from the cache on each item when the same tokenizer made
//! them, so a counted IR is not re-encoded except for the sections actually truncated.
//!
//! [`TokenBudget::available`]: crate::TokenBudget::available
//! [`Stability::Volatile`]: crate::Stability::Volatile
//! [`Stability`]: crate::Stability
//! [`estimate_impact`]: crate::estimate_impact

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::budget::{BudgetAllocation, FixedRatios, TokenBudget};
use crate::excerpt;
use crate::impact::estimate_impact;
use crate::ir::PromptIR;
use crate::section::{CompositionMode, Priority, Section, SectionSource, TokenCount};
use crate::tokenizer::Tokenizer;
use crate::truncate;
use crate::unit::Ratio;
use crate::words::round6;

/// A part of the budget fitted on its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Pool {
    /// The whole available budget (relevance- and information-weighted allocation).
    All,
    /// Hierarchical and constraint sections, and tools (fixed ratios).
    System,
    /// Additive and contextual sections (fixed ratios).
    Context,
    /// The observation (fixed ratios).
    Observation,
}

/// What happened to one section or tool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum Action {
    /// Kept whole.
    Kept {
        /// Its tokens.
        tokens: u32,
    },
    /// Cut at a sentence or line boundary.
    Truncated {
        /// Tokens before.
        from: u32,
        /// Tokens after.
        to: u32,
    },
    /// Left out.
    Dropped {
        /// The tokens it would have used.
        tokens: u32,
    },
}

/// Why an [`Action`] was taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// Its pool fitted; nothing had to give.
    WithinBudget,
    /// It is Critical: never truncated or dropped.
    Critical,
    /// Kept whole: it fitted in the room the more valuable items left.
    HigherValue,
    /// Truncated: it did not fit whole in the room the more valuable items left, and was
    /// cut to the room left after every item that fits whole.
    LowValueShrunk,
    /// Shortened to an excerpt of its most relevant passages, as [`Reason::LowValueShrunk`].
    LowValueExcerpted,
    /// Dropped: it did not fit whole, nor its smallest useful size in the room left.
    LowValueDropped,
    /// Dropped: Critical items and the observation alone fill the pool.
    NoRoomAfterCritical,
    /// Dropped: chosen per message, and less relevant than the strategy's
    /// `relevance_floor`, below which a candidate is not worth its tokens.
    BelowRelevanceFloor,
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Reason::WithinBudget => "everything fitted the budget",
            Reason::Critical => "critical: never truncated or dropped",
            Reason::HigherValue => "kept whole: it fitted in the room more valuable items left",
            Reason::LowValueShrunk => {
                "truncated at a sentence or line boundary: too long to fit whole in the room left"
            }
            Reason::LowValueExcerpted => {
                "shortened to an excerpt: its passages most relevant to the message, in order, \
                 gaps marked […]; too long to fit whole in the room left"
            }
            Reason::LowValueDropped => {
                "dropped: too long for the room left, even at its smallest useful size"
            }
            Reason::NoRoomAfterCritical => {
                "dropped: critical items and the observation alone fill the budget"
            }
            Reason::BelowRelevanceFloor => {
                "dropped: less relevant than the floor below which a candidate is not worth its \
                 tokens"
            }
        })
    }
}

/// The outcome for one section or tool.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ItemOutcome {
    /// Section id or tool name.
    pub id: String,
    /// Section label or tool name.
    pub label: String,
    /// Its priority.
    pub priority: Priority,
    /// The value it was ranked by (higher is kept longer), rounded to 6 decimals.
    pub value: f64,
    /// What happened.
    #[serde(flatten)]
    pub action: Action,
    /// Why.
    pub reason: Reason,
}

/// How one pool fared.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PoolReport {
    /// Which pool.
    pub pool: Pool,
    /// Tokens it may use.
    pub cap: u32,
    /// Tokens before compression.
    pub before: u32,
    /// Tokens after.
    pub after: u32,
    /// Tokens of what may not be cut (Critical items, the observation), when that alone
    /// exceeds `cap`: the pool is then over budget by `overflow - cap`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overflow: Option<u32>,
}

/// Everything [`compress`] did.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CompressionReport {
    /// Name of the tokenizer that counted.
    pub tokenizer: String,
    /// The budget minus its reserve.
    pub available: u32,
    /// Tokens before.
    pub tokens_before: u32,
    /// Tokens after.
    pub tokens_after: u32,
    /// `tokens_after / tokens_before` (1 for an empty prompt).
    pub ratio: Ratio,
    /// Tokens of the observation, which is never cut.
    pub observation_tokens: u32,
    /// One entry per pool.
    pub pools: Vec<PoolReport>,
    /// One entry per input section, in input order.
    pub sections: Vec<ItemOutcome>,
    /// One entry per input tool, in input order.
    pub tools: Vec<ItemOutcome>,
}

impl CompressionReport {
    /// Whether every pool fits its cap (false only when what may not be cut is too large).
    pub fn fits(&self) -> bool {
        self.pools.iter().all(|p| p.overflow.is_none())
    }

    /// The outcome for the section with `id`.
    pub fn section(&self, id: &str) -> Option<&ItemOutcome> {
        self.sections.iter().find(|o| o.id == id)
    }
}

/// The result of [`compress`]: the compressed prompt and the report.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Compressed {
    /// The prompt that fits (see [`CompressionReport::fits`]).
    pub ir: PromptIR,
    /// What happened.
    pub report: CompressionReport,
}

#[derive(Clone, Copy, Debug)]
enum Slot {
    Section(usize),
    Tool(usize),
}

#[derive(Clone, Copy, Debug)]
enum State {
    Kept(Reason),
    Truncated(u32),
    Dropped(Reason),
}

#[derive(Debug)]
struct Item {
    slot: Slot,
    pool: Pool,
    tokens: u32,
    floor: u32,
    critical: bool,
    /// Part of the stable prefix: ranked above everything chosen per message.
    stable: bool,
    /// Chosen per message and below the relevance floor: dropped whatever the room.
    below_floor: bool,
    value: f64,
    position: usize,
    state: State,
}

/// Fits `ir` into `budget`, counting with `tokenizer`. See the module docs for the rules.
pub fn compress(budget: &TokenBudget, ir: &PromptIR, tokenizer: &dyn Tokenizer) -> Compressed {
    let mut out = ir.clone();
    let tokens_before = out.count_tokens(tokenizer);
    let available = budget.available();
    let allocation = budget.allocation();
    let now = out.meta().timestamp;
    let strategy = out.meta().strategy.clone().unwrap_or_default();
    let (decay, long_item) = (strategy.recency_decay, strategy.long_item_tokens);
    let floor = strategy.relevance_floor;
    let (sections, tools, observation, meta) = out.parts_mut();
    let observation_tokens = observation.as_ref().and_then(|o| o.tokens()).unwrap_or(0);

    let fixed = matches!(allocation, BudgetAllocation::FixedRatios(_));
    let mut items: Vec<Item> = Vec::with_capacity(sections.len() + tools.len());
    for (i, s) in sections.iter().enumerate() {
        let count = s.token_count();
        let tokens = count.map_or(0, |c| c.tokens);
        let base = match allocation {
            BudgetAllocation::InformationWeighted => estimate_impact(s).score,
            _ => s.priority().weight() * s.relevance().get(),
        };
        items.push(Item {
            slot: Slot::Section(i),
            pool: match (fixed, s.mode()) {
                (false, _) => Pool::All,
                (true, CompositionMode::Hierarchical | CompositionMode::Constraint) => Pool::System,
                (true, _) => Pool::Context,
            },
            tokens,
            floor: count.map_or(tokens, |c| c.floor.min(tokens)),
            critical: s.priority() == Priority::Critical,
            stable: s.stability().is_stable(),
            below_floor: !s.stability().is_stable()
                && s.priority() != Priority::Critical
                && !matches!(s.source(), SectionSource::Conditional(_))
                && s.relevance() < floor,
            value: round6(base * decay.factor(s.recency(), now) * per_piece(tokens, long_item)),
            position: i,
            state: State::Kept(Reason::WithinBudget),
        });
    }
    for (j, t) in tools.iter().enumerate() {
        let tokens = t.tokens().unwrap_or(0);
        items.push(Item {
            slot: Slot::Tool(j),
            pool: if fixed { Pool::System } else { Pool::All },
            tokens,
            floor: tokens,
            critical: t.priority() == Priority::Critical,
            stable: true,
            below_floor: false,
            value: round6(t.priority().weight()),
            position: sections.len() + j,
            state: State::Kept(Reason::WithinBudget),
        });
    }

    let pools: Vec<(Pool, u32, u32)> = match allocation {
        BudgetAllocation::FixedRatios(r) => vec![
            (Pool::System, FixedRatios::cap(available, r.system()), 0),
            (Pool::Context, FixedRatios::cap(available, r.context()), 0),
            (
                Pool::Observation,
                FixedRatios::cap(available, r.observation()),
                observation_tokens,
            ),
        ],
        _ => vec![(Pool::All, available, observation_tokens)],
    };
    let pool_reports: Vec<PoolReport> = pools
        .into_iter()
        .map(|(pool, cap, fixed_cost)| {
            fit_pool(pool, cap, fixed_cost, &mut items, sections, tokenizer)
        })
        .collect();

    let mut section_outcomes = Vec::with_capacity(sections.len());
    let mut tool_outcomes = Vec::with_capacity(tools.len());
    for item in &items {
        let (id, label, priority) = match item.slot {
            Slot::Section(i) => match sections.get(i) {
                Some(s) => (s.id().to_owned(), s.label().to_owned(), s.priority()),
                None => continue,
            },
            Slot::Tool(j) => match tools.get(j) {
                Some(t) => (t.name().to_owned(), t.name().to_owned(), t.priority()),
                None => continue,
            },
        };
        let (action, reason) = match item.state {
            State::Kept(reason) => (
                Action::Kept {
                    tokens: item.tokens,
                },
                reason,
            ),
            State::Truncated(to) => (
                Action::Truncated {
                    from: item.tokens,
                    to,
                },
                match item.slot {
                    Slot::Section(i) if sections.get(i).is_some_and(|s| s.excerpt().is_some()) => {
                        Reason::LowValueExcerpted
                    }
                    _ => Reason::LowValueShrunk,
                },
            ),
            State::Dropped(reason) => (
                Action::Dropped {
                    tokens: item.tokens,
                },
                reason,
            ),
        };
        let outcome = ItemOutcome {
            id,
            label,
            priority,
            value: item.value,
            action,
            reason,
        };
        match item.slot {
            Slot::Section(_) => section_outcomes.push(outcome),
            Slot::Tool(_) => tool_outcomes.push(outcome),
        }
    }

    // Items hold the sections first, then the tools, each in input order.
    let mut kept = items
        .iter()
        .map(|it| !matches!(it.state, State::Dropped(_)));
    let keep_section: Vec<bool> = kept.by_ref().take(sections.len()).collect();
    let keep_tool: Vec<bool> = kept.collect();
    let mut flags = keep_section.into_iter();
    sections.retain(|_| flags.next().unwrap_or(true));
    let mut flags = keep_tool.into_iter();
    tools.retain(|_| flags.next().unwrap_or(true));

    // The ratio in meta is against the first, uncompressed size, so compressing again
    // leaves meta (and the whole IR) unchanged.
    let uncompressed = meta.uncompressed_tokens.unwrap_or(tokens_before);
    meta.uncompressed_tokens = Some(uncompressed);
    meta.budget = Some(budget.clone());
    out.refresh_meta();
    let tokens_after = out.meta().total_tokens.unwrap_or(0);
    out.set_compression_ratio(ratio(tokens_after, uncompressed));

    Compressed {
        report: CompressionReport {
            tokenizer: tokenizer.name().to_owned(),
            available,
            tokens_before,
            tokens_after,
            ratio: ratio(tokens_after, tokens_before),
            observation_tokens,
            pools: pool_reports,
            sections: section_outcomes,
            tools: tool_outcomes,
        },
        ir: out,
    }
}

/// The share of a section's value it is ranked by: 1 up to `long_item` tokens, then
/// `long_item / tokens` (its value per `long_item` tokens); always 1 when `long_item` is 0.
fn per_piece(tokens: u32, long_item: u32) -> f64 {
    if long_item == 0 || tokens <= long_item {
        1.0
    } else {
        f64::from(long_item) / f64::from(tokens)
    }
}

fn ratio(after: u32, before: u32) -> Ratio {
    if before == 0 {
        Ratio::ONE
    } else {
        Ratio::clamped(f64::from(after) / f64::from(before))
    }
}

fn sum(items: &[Item], members: &[usize], f: impl Fn(&Item) -> u32) -> u32 {
    members
        .iter()
        .filter_map(|&m| items.get(m))
        .fold(0u32, |acc, it| acc.saturating_add(f(it)))
}

/// Fits the items of `pool` into `cap`, of which `fixed_cost` is already taken.
fn fit_pool(
    pool: Pool,
    cap: u32,
    fixed_cost: u32,
    items: &mut [Item],
    sections: &mut [Section],
    tokenizer: &dyn Tokenizer,
) -> PoolReport {
    let members: Vec<usize> = (0..items.len())
        .filter(|&i| items.get(i).is_some_and(|it| it.pool == pool))
        .collect();
    let set = |items: &mut [Item], m: usize, state: State| {
        if let Some(it) = items.get_mut(m) {
            it.state = state;
        }
    };
    // Not worth their tokens, whatever the room.
    let (gated, members): (Vec<usize>, Vec<usize>) = members
        .iter()
        .partition(|&&m| items.get(m).is_some_and(|it| it.below_floor));
    for &m in &gated {
        set(items, m, State::Dropped(Reason::BelowRelevanceFloor));
    }
    let (critical, mut flexible): (Vec<usize>, Vec<usize>) = members
        .iter()
        .partition(|&&m| items.get(m).is_some_and(|it| it.critical));
    // What is chosen per message before the stable part, then lowest value first; among
    // equals, the later item first.
    flexible.sort_by(|&x, &y| match (items.get(x), items.get(y)) {
        (Some(a), Some(b)) => a
            .stable
            .cmp(&b.stable)
            .then(a.value.total_cmp(&b.value))
            .then(b.position.cmp(&a.position)),
        _ => std::cmp::Ordering::Equal,
    });

    let candidates = fixed_cost.saturating_add(sum(items, &members, |it| it.tokens));
    let before = candidates.saturating_add(sum(items, &gated, |it| it.tokens));
    let must_keep = fixed_cost.saturating_add(sum(items, &critical, |it| it.tokens));
    for &m in &critical {
        set(items, m, State::Kept(Reason::Critical));
    }
    let mut report = PoolReport {
        pool,
        cap,
        before,
        after: candidates,
        overflow: None,
    };
    if candidates <= cap {
        return report;
    }
    if must_keep > cap {
        for &m in &flexible {
            set(items, m, State::Dropped(Reason::NoRoomAfterCritical));
        }
        report.after = must_keep;
        report.overflow = Some(must_keep);
        return report;
    }

    // Most valuable first (among equals, the earlier item), each whole if it fits.
    let mut current = must_keep;
    let mut too_long = Vec::new();
    for &m in flexible.iter().rev() {
        let Some(item) = items.get_mut(m) else {
            continue;
        };
        if item.tokens <= cap.saturating_sub(current) {
            current = current.saturating_add(item.tokens);
            item.state = State::Kept(Reason::HigherValue);
        } else {
            item.state = State::Dropped(Reason::LowValueDropped);
            too_long.push(m);
        }
    }
    // Then the room left, to what did not fit whole, most valuable first, as far as it goes.
    for &m in &too_long {
        let room = cap.saturating_sub(current);
        let Some(item) = items.get_mut(m) else {
            continue;
        };
        let Slot::Section(i) = item.slot else {
            continue;
        };
        if item.floor >= item.tokens || item.floor > room {
            continue;
        }
        if let Some(to) = sections
            .get_mut(i)
            .and_then(|s| shrink(s, room, item.floor, tokenizer))
        {
            current = current.saturating_add(to);
            item.state = State::Truncated(to);
        }
    }

    report.after = current;
    report
}

/// Truncates `section` to the longest boundary prefix of at most `target` tokens and at
/// least `floor` (a section with passages: to the excerpt of its most relevant passages
/// that fits `target`); returns its token count, or `None` if no such prefix exists.
fn shrink(
    section: &mut Section,
    target: u32,
    floor: u32,
    tokenizer: &dyn Tokenizer,
) -> Option<u32> {
    if let Some(passages) = section.passages() {
        let (kept, text, tokens) = excerpt::fit(section.content(), passages, target, tokenizer)?;
        section.excerpt_to(
            kept,
            text,
            TokenCount {
                tokenizer: tokenizer.name().to_owned(),
                tokens,
                floor: tokens,
            },
        );
        return Some(tokens);
    }
    let (cuts, _) = truncate::cuts(section.content(), tokenizer);
    let min_useful = section.min_tokens().unwrap_or(0).max(1);
    for cut in cuts
        .iter()
        .rev()
        .filter(|c| c.tokens <= target && c.tokens >= floor)
    {
        let prefix = section.content().get(..cut.keep)?;
        let tokens = tokenizer.count(prefix);
        if tokens <= target && tokens >= min_useful {
            section.truncate_to(
                cut.keep,
                TokenCount {
                    tokenizer: tokenizer.name().to_owned(),
                    tokens,
                    floor: floor.min(tokens),
                },
            );
            return Some(tokens);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::{LONG_ITEM_TOKENS, RecencyDecay};
    use crate::section::SectionSource;
    use crate::tokenizer::WhitespaceTokenizer;
    use crate::{ContextStrategy, Relevance};
    use chrono::{DateTime, Utc};

    const TOK: WhitespaceTokenizer = WhitespaceTokenizer;

    fn t(days: i64) -> DateTime<Utc> {
        DateTime::<Utc>::from_timestamp(1_700_000_000, 0).unwrap() + chrono::Duration::days(days)
    }

    /// `n` sentences of four words each: "wN a b c."
    fn text(tag: &str, n: usize) -> String {
        (0..n)
            .map(|i| format!("{tag}{i} a b c."))
            .collect::<Vec<_>>()
            .join(" ")
    }

    fn knowledge(id: &str, words4: usize) -> Section {
        Section::new(id, id, SectionSource::Knowledge, text(id, words4)).unwrap()
    }

    fn ir_of(sections: Vec<Section>) -> PromptIR {
        let mut ir = PromptIR::new(t(0));
        for s in sections {
            ir.push_section(s).unwrap();
        }
        ir
    }

    fn budget(n: u32) -> TokenBudget {
        TokenBudget::new(n).unwrap()
    }

    #[test]
    fn keeps_everything_when_it_fits() {
        let ir = ir_of(vec![knowledge("a", 2), knowledge("b", 2)]);
        let c = compress(&budget(16), &ir, &TOK);
        assert!(c.report.fits());
        assert_eq!(c.report.tokens_after, 16);
        assert!(
            c.report
                .sections
                .iter()
                .all(|o| o.reason == Reason::WithinBudget)
        );
        assert_eq!(c.ir.meta().compression_ratio, Some(Ratio::ONE));
    }

    #[test]
    fn drops_lowest_value_first_and_never_critical() {
        let sys = Section::new(
            "sys",
            "System",
            SectionSource::Static("base".into()),
            text("s", 3),
        )
        .unwrap();
        let low = knowledge("low", 2).with_priority(Priority::Low);
        let high = knowledge("high", 2).with_priority(Priority::High);
        let ir = ir_of(vec![sys, low, high]);
        let c = compress(&budget(20), &ir, &TOK);
        let ids: Vec<&str> = c.ir.sections().iter().map(|s| s.id()).collect();
        assert_eq!(ids, vec!["sys", "high"]);
        let low = c.report.section("low").unwrap();
        assert_eq!(low.action, Action::Dropped { tokens: 8 });
        assert_eq!(low.reason, Reason::LowValueDropped);
        assert_eq!(c.report.section("sys").unwrap().reason, Reason::Critical);
        assert_eq!(
            c.report.section("high").unwrap().reason,
            Reason::HigherValue
        );
    }

    #[test]
    fn what_does_not_fit_whole_is_cut_at_a_sentence_boundary() {
        let a = knowledge("a", 5)
            .with_min_tokens(4)
            .with_priority(Priority::Low);
        let b = knowledge("b", 5).with_min_tokens(4);
        let ir = ir_of(vec![a, b]);
        // 40 tokens into 32: the low-value section gives up 8 tokens, the other stays whole.
        let c = compress(&budget(32), &ir, &TOK);
        assert_eq!(c.report.tokens_after, 32);
        let a = c.report.section("a").unwrap();
        assert_eq!(a.action, Action::Truncated { from: 20, to: 12 });
        assert_eq!(
            c.ir.section("a").unwrap().content(),
            "a0 a b c. a1 a b c. a2 a b c."
        );
        assert_eq!(
            c.report.section("b").unwrap().action,
            Action::Kept { tokens: 20 }
        );
    }

    #[test]
    fn whole_first_then_the_room_left_to_what_did_not_fit() {
        let big = knowledge("big", 10)
            .with_min_tokens(4)
            .with_priority(Priority::High);
        let small = |id| knowledge(id, 2).with_min_tokens(4);
        let ir = ir_of(vec![big, small("s1"), small("s2")]);
        // 56 tokens into 32: the most valuable (40 tokens) does not fit whole; the two
        // worth less fit whole, and it gets the 16 they leave.
        let c = compress(&budget(32), &ir, &TOK);
        let big = c.report.section("big").unwrap();
        assert!(big.value > c.report.section("s1").unwrap().value);
        assert_eq!(big.action, Action::Truncated { from: 40, to: 16 });
        assert_eq!(big.reason, Reason::LowValueShrunk);
        for id in ["s1", "s2"] {
            let s = c.report.section(id).unwrap();
            assert_eq!(s.action, Action::Kept { tokens: 8 });
            assert_eq!(s.reason, Reason::HigherValue);
        }
        // Into 18 the two leave 2, less than its floor (4): it goes.
        let c = compress(&budget(18), &ir, &TOK);
        assert_eq!(
            c.report.section("big").unwrap().action,
            Action::Dropped { tokens: 40 }
        );
        assert_eq!(c.report.tokens_after, 16);
    }

    #[test]
    fn critical_overflow_is_reported_not_panicked() {
        let sys = Section::new(
            "sys",
            "System",
            SectionSource::Static("base".into()),
            text("s", 5),
        )
        .unwrap();
        let mut ir = ir_of(vec![sys, knowledge("k", 1)]);
        ir.set_observation("what now?");
        let c = compress(&budget(10), &ir, &TOK);
        assert!(!c.report.fits());
        assert_eq!(c.report.pools[0].overflow, Some(22));
        assert_eq!(
            c.report.section("k").unwrap().reason,
            Reason::NoRoomAfterCritical
        );
        assert_eq!(c.ir.sections().len(), 1);
    }

    #[test]
    fn recency_decay_ranks_older_lower() {
        let old = knowledge("old", 2).with_recency(t(-30));
        let new = knowledge("new", 2).with_recency(t(-1));
        let mut ir = ir_of(vec![new, old]);
        ir.set_strategy(ContextStrategy::default());
        let c = compress(&budget(8), &ir, &TOK);
        assert_eq!(c.ir.sections()[0].id(), "new");
        assert_eq!(
            c.report.section("old").unwrap().reason,
            Reason::LowValueDropped
        );

        ir.set_strategy(ContextStrategy {
            recency_decay: RecencyDecay::None,
            ..ContextStrategy::default()
        });
        // Equal values: the later one goes.
        let c = compress(&budget(8), &ir, &TOK);
        assert_eq!(c.ir.sections()[0].id(), "new");
    }

    #[test]
    fn a_long_section_is_ranked_per_piece_and_gives_way_to_a_shorter_one_worth_as_much() {
        let sections = || {
            vec![
                knowledge("long", 100)
                    .with_min_tokens(4)
                    .with_relevance(Relevance::clamped(0.6)),
                knowledge("short", 25)
                    .with_min_tokens(4)
                    .with_relevance(Relevance::clamped(0.5)),
            ]
        };
        let strategy = |long_item_tokens| ContextStrategy {
            recency_decay: RecencyDecay::None,
            long_item_tokens,
            ..ContextStrategy::default()
        };
        let fit = |long_item_tokens, tokens| {
            let mut ir = ir_of(sections());
            ir.set_strategy(strategy(long_item_tokens));
            compress(&budget(tokens), &ir, &TOK).report
        };
        let action = |r: &CompressionReport, id| r.section(id).unwrap().action;
        // 400 + 100 tokens into 300: per 192 tokens the long one is worth 2 * 0.6 * 192 / 400
        // (priority weight 2), less than the short one's 2 * 0.5; the short one fits whole
        // and the long one gets the 200 left.
        let r = fit(LONG_ITEM_TOKENS, 300);
        assert_eq!(r.section("long").unwrap().value, 0.576);
        assert_eq!(action(&r, "long"), Action::Truncated { from: 400, to: 200 });
        assert_eq!(action(&r, "short"), Action::Kept { tokens: 100 });
        // Into 80, where neither fits whole, the room goes to the more valuable: per piece
        // the short one, by value alone the long one.
        let r = fit(LONG_ITEM_TOKENS, 80);
        assert_eq!(action(&r, "short"), Action::Truncated { from: 100, to: 80 });
        assert_eq!(action(&r, "long"), Action::Dropped { tokens: 400 });
        let r = fit(0, 80);
        assert_eq!(r.section("long").unwrap().value, 1.2);
        assert_eq!(action(&r, "long"), Action::Truncated { from: 400, to: 80 });
        assert_eq!(action(&r, "short"), Action::Dropped { tokens: 100 });
    }

    #[test]
    fn relevance_zero_goes_first() {
        let a = knowledge("a", 1).with_relevance(Relevance::ZERO);
        let b = knowledge("b", 1);
        let c = compress(&budget(4), &ir_of(vec![a, b]), &TOK);
        assert_eq!(c.report.section("a").unwrap().value, 0.0);
        assert!(c.ir.section("a").is_none());
    }

    #[test]
    fn fixed_ratios_fit_each_pool() {
        let sys = Section::new(
            "sys",
            "System",
            SectionSource::State("user".into()),
            text("s", 3),
        )
        .unwrap()
        .with_min_tokens(4);
        let ctx = knowledge("k", 3).with_min_tokens(4);
        let budget = budget(20).with_allocation(BudgetAllocation::FixedRatios(
            FixedRatios::new(0.5, 0.5, 0.0).unwrap(),
        ));
        let c = compress(&budget, &ir_of(vec![sys, ctx]), &TOK);
        assert!(c.report.fits());
        assert_eq!(c.report.pools.len(), 3);
        for p in &c.report.pools {
            assert!(p.after <= p.cap, "{p:?}");
        }
        assert_eq!(c.report.tokens_after, 16);
    }

    #[test]
    fn tools_are_ranked_and_dropped_whole() {
        let mut ir = ir_of(vec![knowledge("k", 1).with_priority(Priority::High)]);
        let schema = serde_json::json!({"type": "object"});
        ir.push_tool(
            crate::ToolDef::new("rarely", "rarely used", schema.clone())
                .unwrap()
                .with_priority(Priority::Low),
        )
        .unwrap();
        let c = compress(&budget(5), &ir, &TOK);
        assert!(c.ir.tools().is_empty());
        assert_eq!(c.report.tools[0].reason, Reason::LowValueDropped);
    }

    #[test]
    fn second_compression_changes_nothing() {
        let ir = ir_of(vec![
            knowledge("a", 6).with_min_tokens(3),
            knowledge("b", 6).with_priority(Priority::Low),
            knowledge("c", 6).with_min_tokens(5),
        ]);
        let once = compress(&budget(37), &ir, &TOK);
        let twice = compress(&budget(37), &once.ir, &TOK);
        assert_eq!(
            serde_json::to_string(&once.ir).unwrap(),
            serde_json::to_string(&twice.ir).unwrap()
        );
        assert!(
            twice
                .report
                .sections
                .iter()
                .all(|o| o.reason == Reason::WithinBudget)
        );
        assert_eq!(once.ir.meta().uncompressed_tokens, Some(72));
    }

    #[test]
    fn the_stable_part_is_given_room_before_what_is_chosen_per_message() {
        use crate::section::Stability;
        // The volatile section is worth more, but the stable one is kept from prompt to
        // prompt: it gets the room first, and the volatile one what is left.
        let stable = knowledge("talk", 2)
            .with_priority(Priority::Low)
            .with_stability(Stability::Growing);
        let hit = Section::new(
            "hit",
            "hit",
            SectionSource::Semantic(Relevance::ONE),
            text("hit", 2),
        )
        .unwrap()
        .with_priority(Priority::High);
        let c = compress(&budget(10), &ir_of(vec![stable, hit]), &TOK);
        assert_eq!(
            c.report.section("talk").unwrap().action,
            Action::Kept { tokens: 8 }
        );
        assert_eq!(
            c.report.section("hit").unwrap().reason,
            Reason::LowValueDropped
        );
    }

    #[test]
    fn a_volatile_section_below_the_relevance_floor_is_dropped_whatever_the_room() {
        use crate::section::Stability;
        let weak = |id: &str, r: f64| {
            Section::new(
                id,
                id,
                SectionSource::Semantic(Relevance::new(r).unwrap()),
                text(id, 1),
            )
            .unwrap()
        };
        // A stable section as weak is kept: the floor is for what is chosen per message.
        let fact = knowledge("fact", 1).with_relevance(Relevance::new(0.1).unwrap());
        let mut ir = ir_of(vec![weak("weak", 0.3), weak("strong", 0.8), fact]);
        ir.set_strategy(ContextStrategy {
            relevance_floor: Relevance::new(0.5).unwrap(),
            ..ContextStrategy::default()
        });
        let c = compress(&budget(1000), &ir, &TOK);
        let weak = c.report.section("weak").unwrap();
        assert_eq!(weak.action, Action::Dropped { tokens: 4 });
        assert_eq!(weak.reason, Reason::BelowRelevanceFloor);
        assert!(weak.reason.to_string().contains("worth its tokens"));
        assert_eq!(
            c.report.section("strong").unwrap().reason,
            Reason::WithinBudget
        );
        assert_eq!(
            c.report.section("fact").unwrap().reason,
            Reason::WithinBudget
        );
        assert_eq!(c.report.tokens_before, 12);
        assert_eq!(c.report.tokens_after, 8);
        assert_eq!(c.report.pools[0].before, 12);
        assert_eq!(c.report.pools[0].after, 8);
        // A volatile fact is floored like any hit.
        let mut ir = ir_of(vec![
            knowledge("older", 1)
                .with_relevance(Relevance::new(0.1).unwrap())
                .with_stability(Stability::Volatile),
        ]);
        ir.set_strategy(ContextStrategy {
            relevance_floor: Relevance::new(0.5).unwrap(),
            ..ContextStrategy::default()
        });
        let c = compress(&budget(1000), &ir, &TOK);
        assert!(c.ir.sections().is_empty());
    }

    #[test]
    fn reasons_read_well() {
        assert_eq!(
            Reason::Critical.to_string(),
            "critical: never truncated or dropped"
        );
        assert!(Reason::LowValueExcerpted.to_string().contains("excerpt"));
        let json = serde_json::to_value(Action::Truncated { from: 9, to: 4 }).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"action": "truncated", "from": 9, "to": 4})
        );
    }
}
