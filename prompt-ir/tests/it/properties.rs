//! Property tests: compress fits the budget, keeps Critical, is idempotent, order-stable and
//! deterministic; compose is associative; invalid numbers are always rejected.

// Helpers outside #[test] fns are test code too; the house rule lets tests unwrap.
use crate::common;

use std::sync::LazyLock;

use chrono::{DateTime, Duration, Utc};
use prompt_ir::{
    BudgetAllocation, CompositionMode, ContextStrategy, Encoding, FixedRatios, Priority, PromptIR,
    Ratio, Relevance, Section, SectionSource, TiktokenTokenizer, TokenBudget, Tokenizer, ToolDef,
    WhitespaceTokenizer, compose, compress,
};
use proptest::prelude::*;

static TIKTOKEN: LazyLock<TiktokenTokenizer> =
    LazyLock::new(|| TiktokenTokenizer::new(Encoding::O200kBase).unwrap());

fn tokenizer(real: bool) -> &'static dyn Tokenizer {
    if real {
        &*TIKTOKEN
    } else {
        &WhitespaceTokenizer
    }
}

fn t0() -> DateTime<Utc> {
    DateTime::<Utc>::from_timestamp(1_741_940_000, 0).unwrap()
}

const WORDS: &[&str] = &[
    "the",
    "garden",
    "needs",
    "water",
    "Maya",
    "prefers",
    "Rust",
    "forecast",
    "cache",
    "grid",
    "cell",
    "3.5",
    "e.g.",
    "(beds)",
    "\"quoted\"",
    "naïve",
    "🦀",
    "don't",
    "API",
    "rate-limit",
];

fn sentence() -> impl Strategy<Value = String> {
    (
        prop::collection::vec(prop::sample::select(WORDS), 1..9),
        prop::sample::select(&[".", "!", "?", "", ":"][..]),
    )
        .prop_map(|(words, end)| format!("{}{end}", words.join(" ")))
}

fn content() -> impl Strategy<Value = String> {
    prop::collection::vec(
        (
            sentence(),
            prop::sample::select(&[" ", "\n", "\n\n", "  \n"][..]),
        ),
        0..7,
    )
    .prop_map(|parts| {
        let mut text = String::new();
        for (i, (s, sep)) in parts.iter().enumerate() {
            if i > 0 {
                text.push_str(sep);
            }
            text.push_str(s);
        }
        text
    })
}

fn priority() -> impl Strategy<Value = Priority> {
    prop::sample::select(
        &[
            Priority::Low,
            Priority::Medium,
            Priority::High,
            Priority::Critical,
        ][..],
    )
}

fn mode() -> impl Strategy<Value = CompositionMode> {
    prop::sample::select(&CompositionMode::ALL[..])
}

fn source() -> impl Strategy<Value = SectionSource> {
    prop_oneof![
        Just(SectionSource::Static("base".into())),
        Just(SectionSource::Temporal),
        (0.0..=1.0f64).prop_map(|s| SectionSource::Semantic(Relevance::new(s).unwrap())),
        Just(SectionSource::Knowledge),
        Just(SectionSource::State("user".into())),
        Just(SectionSource::Conditional("coding".into())),
    ]
}

/// A section whose id is chosen by the caller.
fn section_with(id: String) -> impl Strategy<Value = Section> {
    (
        source(),
        content(),
        priority(),
        mode(),
        0.0..=1.0f64,
        prop::option::of(0i64..90),
        prop::option::of(0u32..25),
    )
        .prop_map(
            move |(source, text, priority, mode, relevance, days, min)| {
                let mut s = Section::new(id.clone(), format!("Label {id}"), source, text)
                    .unwrap()
                    .with_priority(priority)
                    .with_mode(mode)
                    .with_relevance(Relevance::new(relevance).unwrap());
                if let Some(d) = days {
                    s = s.with_recency(t0() - Duration::days(d));
                }
                if let Some(m) = min {
                    s = s.with_min_tokens(m);
                }
                s
            },
        )
}

fn tool(name: &'static str) -> impl Strategy<Value = ToolDef> {
    (priority(), "[a-z ]{0,40}").prop_map(move |(p, d)| {
        ToolDef::new(name, d, serde_json::json!({"type": "object"}))
            .unwrap()
            .with_priority(p)
    })
}

/// A prompt with up to 12 sections (unique ids), up to 3 tools and maybe an observation.
fn prompt() -> impl Strategy<Value = PromptIR> {
    (
        prop::collection::vec(any::<u8>(), 0..12).prop_flat_map(|v| {
            (0..v.len())
                .map(|i| section_with(format!("s{i}")))
                .collect::<Vec<_>>()
        }),
        prop::sample::subsequence(vec!["search", "calendar", "weather"], 0..=3)
            .prop_flat_map(|names| names.into_iter().map(tool).collect::<Vec<_>>()),
        prop::option::of(sentence()),
        prop::bool::ANY,
    )
        .prop_map(|(sections, tools, observation, decay)| {
            let mut ir = PromptIR::new(t0());
            for s in sections {
                ir.push_section(s).unwrap();
            }
            for t in tools {
                ir.push_tool(t).unwrap();
            }
            if let Some(o) = observation {
                ir.set_observation(o);
            }
            if decay {
                ir.set_strategy(ContextStrategy::default());
            }
            ir
        })
}

fn allocation() -> impl Strategy<Value = BudgetAllocation> {
    prop_oneof![
        Just(BudgetAllocation::RelevanceWeighted),
        Just(BudgetAllocation::InformationWeighted),
        (0.0..=1.0f64, 0.0..=1.0f64, 0.0..=1.0f64).prop_map(|(a, b, c)| {
            let sum = (a + b + c).max(1.0);
            BudgetAllocation::FixedRatios(FixedRatios::new(a / sum, b / sum, c / sum).unwrap())
        }),
    ]
}

fn budget() -> impl Strategy<Value = TokenBudget> {
    (1u32..400, 0.0..0.6f64, allocation()).prop_map(|(total, reserve, alloc)| {
        TokenBudget::new(total)
            .unwrap()
            .with_reserve(reserve)
            .unwrap()
            .with_allocation(alloc)
    })
}

fn json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Never over budget minus reserve when possible, never drops Critical, keeps order,
    /// truncates only at boundaries, and reports every item truthfully.
    #[test]
    fn compress_keeps_its_promises(ir in prompt(), budget in budget(), real in any::<bool>()) {
        let tok = tokenizer(real);
        let out = compress(&budget, &ir, tok);
        if let Err(why) = common::check_compression(&ir, &budget, &out, tok) {
            prop_assert!(false, "{why}\nreport: {:#?}", out.report);
        }
    }

    /// Compressing the result again with the same budget changes nothing.
    #[test]
    fn compress_is_idempotent(ir in prompt(), budget in budget(), real in any::<bool>()) {
        let tok = tokenizer(real);
        let once = compress(&budget, &ir, tok);
        let twice = compress(&budget, &once.ir, tok);
        prop_assert_eq!(json(&once.ir), json(&twice.ir));
    }

    /// Same inputs, byte-identical outputs, whether or not tokens were cached beforehand.
    #[test]
    fn compress_is_deterministic(ir in prompt(), budget in budget(), real in any::<bool>()) {
        let tok = tokenizer(real);
        let a = compress(&budget, &ir, tok);
        let b = compress(&budget, &ir, tok);
        prop_assert_eq!(json(&a), json(&b));
        let mut counted = ir.clone();
        counted.count_tokens(tok);
        let c = compress(&budget, &counted, tok);
        prop_assert_eq!(json(&a), json(&c));
    }

    /// compose is associative.
    #[test]
    fn compose_is_associative(a in small_prompt(0), b in small_prompt(60), c in small_prompt(120)) {
        let left = compose(&compose(&a, &b).ir, &c).ir;
        let right = compose(&a, &compose(&b, &c).ir).ir;
        prop_assert_eq!(json(&left), json(&right));
    }

    /// Composing a prompt with itself adds nothing, and composing with an empty prompt only
    /// groups sections by mode.
    #[test]
    fn compose_with_itself_or_empty(a in small_prompt(0)) {
        // `true` is the identity of "cache hit only if both were".
        let mut empty = PromptIR::new(t0());
        empty.set_cache_hit(true);
        let canonical = compose(&a, &empty).ir;
        prop_assert_eq!(json(&compose(&a, &a).ir), json(&canonical));
        prop_assert_eq!(json(&compose(&empty, &a).ir), json(&canonical));
        let mut modes: Vec<CompositionMode> = canonical.sections().iter().map(Section::mode).collect();
        let grouped = modes.clone();
        modes.sort();
        prop_assert_eq!(modes, grouped);
    }

    /// Ratios and relevance accept exactly the finite numbers from 0 to 1.
    #[test]
    fn unit_numbers_are_checked(x in prop_oneof![any::<f64>(), -2.0..2.0f64]) {
        let valid = x.is_finite() && (0.0..=1.0).contains(&x);
        prop_assert_eq!(Ratio::new(x).is_ok(), valid);
        prop_assert_eq!(Relevance::new(x).is_ok(), valid);
        prop_assert_eq!(serde_json::from_str::<Ratio>(&format!("{x:?}")).is_ok(), valid);
    }

    /// Budgets survive a JSON round trip, and never offer zero tokens.
    #[test]
    fn budgets_round_trip(budget in budget()) {
        let back: TokenBudget = serde_json::from_str(&json(&budget)).unwrap();
        prop_assert_eq!(&back, &budget);
        prop_assert!(budget.available() >= 1);
        prop_assert!(budget.available() <= budget.total());
    }
}

/// A prompt drawn from a tiny space of ids and contents, so compositions collide often.
fn small_prompt(offset_secs: i64) -> impl Strategy<Value = PromptIR> {
    let section = (
        prop::sample::select(&["a", "b", "c", "d"][..]),
        prop::sample::select(&["One.", "Two.", "Three.", "Four."][..]),
        mode(),
        prop::sample::select(&[SectionSource::Temporal, SectionSource::Knowledge][..]),
    )
        .prop_map(|(id, text, mode, source)| {
            Section::new(id, id, source, text).unwrap().with_mode(mode)
        });
    (
        prop::collection::vec(section, 0..6),
        prop::option::of(prop::sample::select(&["hi", "bye"][..])),
        prop::option::of(prop::sample::select(&["short", "long"][..])),
        any::<bool>(),
        prop::option::of(1u32..50),
    )
        .prop_map(move |(sections, observation, tool, cache_hit, budget)| {
            let mut ir = PromptIR::new(t0() + Duration::seconds(offset_secs));
            for s in sections {
                // Ids must be unique within one prompt; later duplicates are skipped.
                let _ = ir.push_section(s);
            }
            if let Some(o) = observation {
                ir.set_observation(o);
            }
            if let Some(d) = tool {
                ir.push_tool(ToolDef::new("tool", d, serde_json::json!({})).unwrap())
                    .unwrap();
            }
            ir.set_cache_hit(cache_hit);
            if let Some(b) = budget {
                ir.set_budget(TokenBudget::new(b).unwrap());
            }
            ir
        })
}

/// Every budget from 1 token up to the whole seed prompt, with both tokenizers.
#[test]
fn seed_prompt_at_every_budget() {
    for real in [false, true] {
        let tok = tokenizer(real);
        let mut ir = common::seed_ir();
        let total = ir.count_tokens(tok);
        for n in 1..=total + 1 {
            let budget = TokenBudget::new(n).unwrap();
            let out = compress(&budget, &ir, tok);
            common::check_compression(&ir, &budget, &out, tok)
                .unwrap_or_else(|why| panic!("budget {n}: {why}"));
            let again = compress(&budget, &out.ir, tok);
            assert_eq!(json(&again.ir), json(&out.ir), "budget {n} not idempotent");
        }
    }
}
