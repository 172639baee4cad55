//! Snapshots of the seed's example prompt before compression and after it at several budgets.
//! Timestamps are fixed in the fixture and ids are chosen there, so nothing needs redacting.

// Helpers outside #[test] fns are test code too; the house rule lets tests unwrap.
use crate::common;

use prompt_ir::{
    BudgetAllocation, Compressed, Encoding, FixedRatios, PromptIR, TiktokenTokenizer, TokenBudget,
    compress,
};
use serde::Serialize;

fn counted_seed() -> (PromptIR, TiktokenTokenizer) {
    let tok = TiktokenTokenizer::new(Encoding::for_model("gpt-4o")).unwrap();
    let mut ir = common::seed_ir();
    ir.count_tokens(&tok);
    (ir, tok)
}

/// What a snapshot after compression shows: the budget asked for, then what happened.
#[derive(Serialize)]
struct After<'a> {
    budget: &'a TokenBudget,
    result: &'a Compressed,
}

fn compressed(budget: TokenBudget) -> Compressed {
    let (ir, tok) = counted_seed();
    let out = compress(&budget, &ir, &tok);
    common::check_compression(&ir, &budget, &out, &tok).unwrap();
    out
}

#[test]
fn seed_before_compression() {
    let (ir, _) = counted_seed();
    assert_eq!(ir.meta().total_tokens, Some(713));
    insta::assert_yaml_snapshot!("seed_0_before", ir);
}

/// 800 tokens with a quarter kept for the reply: the stable part (state, knowledge, the
/// conversation) fits whole, then the most valuable related messages, and the room they
/// leave is less than the smallest useful size of the two least valuable, which go.
#[test]
fn seed_roomy_budget_keeps_the_valuable_whole() {
    let budget = TokenBudget::new(800).unwrap().with_reserve(0.25).unwrap();
    let out = compressed(budget.clone());
    assert!(out.report.fits());
    assert!(out.report.tokens_after <= 600);
    let (kept, dropped): (Vec<_>, Vec<_>) = out
        .report
        .sections
        .iter()
        .partition(|s| !matches!(s.action, prompt_ir::Action::Dropped { .. }));
    let dropped: Vec<&str> = dropped.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(dropped, ["past:shared-client", "past:cron"]);
    for s in &kept {
        if s.id.starts_with("past:") {
            // Of what is chosen per message, only the most valuable, whole or in the room
            // left.
            assert!(s.value > 0.721, "{s:?}");
        } else {
            assert!(matches!(s.action, prompt_ir::Action::Kept { .. }), "{s:?}");
        }
    }
    insta::assert_yaml_snapshot!(
        "seed_1_roomy_800_reserve_25",
        After {
            budget: &budget,
            result: &out
        }
    );
}

/// 450 tokens, ranked by information: old related messages go, and of the knowledge only
/// what fits whole in the room left stays.
#[test]
fn seed_tight_budget_drops_the_least_valuable() {
    let budget = TokenBudget::new(450)
        .unwrap()
        .with_allocation(BudgetAllocation::InformationWeighted);
    let out = compressed(budget.clone());
    assert!(out.report.fits());
    assert!(out.ir.section("base").is_some());
    assert!(out.ir.section("past:cron").is_none());
    insta::assert_yaml_snapshot!(
        "seed_2_tight_450_information",
        After {
            budget: &budget,
            result: &out
        }
    );
}

/// 400 tokens in fixed pools: the system pool and the context pool are fitted separately.
#[test]
fn seed_fixed_ratios_fit_each_pool() {
    let budget = TokenBudget::new(400)
        .unwrap()
        .with_allocation(BudgetAllocation::FixedRatios(
            FixedRatios::new(0.55, 0.35, 0.10).unwrap(),
        ));
    let out = compressed(budget.clone());
    assert!(out.report.fits());
    for pool in &out.report.pools {
        assert!(pool.after <= pool.cap, "{pool:?}");
    }
    insta::assert_yaml_snapshot!(
        "seed_3_fixed_ratios_400",
        After {
            budget: &budget,
            result: &out
        }
    );
}

/// 80 tokens cannot hold the base instructions and the question: the report says so.
#[test]
fn seed_starved_budget_reports_overflow() {
    let budget = TokenBudget::new(80).unwrap();
    let out = compressed(budget.clone());
    assert!(!out.report.fits());
    assert_eq!(out.report.pools[0].overflow, Some(94));
    assert_eq!(out.ir.sections().len(), 1);
    insta::assert_yaml_snapshot!(
        "seed_4_starved_80",
        After {
            budget: &budget,
            result: &out
        }
    );
}
