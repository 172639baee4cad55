//! Criterion benchmarks: counting, and compressing a 50-section, ~20k-token prompt to 4k
//! tokens, with token counts cached on the sections and without.

use std::hint::black_box;

use chrono::DateTime;
use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use prompt_ir::{
    Encoding, Priority, PromptIR, Relevance, Section, SectionSource, TiktokenTokenizer,
    TokenBudget, compress,
};

const WORDS: &[&str] = &[
    "the",
    "garden",
    "schedule",
    "needs",
    "water",
    "before",
    "noon",
    "because",
    "forecast",
    "says",
    "rain",
    "later",
    "Maya",
    "prefers",
    "short",
    "answers",
    "with",
    "code",
    "and",
    "tests",
    "cache",
    "grid",
    "cell",
    "expires",
    "after",
    "three",
    "hours",
    "while",
    "server",
    "handles",
    "requests",
    "from",
    "every",
    "bed",
    "soil",
    "type",
    "matters",
    "for",
    "drainage",
    "project",
    "milestone",
    "is",
    "due",
    "next",
    "week",
    "deploy",
    "staging",
    "first",
];

/// A deterministic pseudo-random text of about `tokens` o200k tokens, in sentences of 6 to
/// 15 words, with a line break every few sentences.
fn text(seed: u64, tokens: usize) -> String {
    let mut state = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let mut next = move |n: usize| {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((state >> 33) as usize) % n
    };
    let mut out = String::new();
    let mut words = 0;
    let mut sentence = 0;
    // About one token per word plus one per full stop.
    while words + sentence < tokens {
        let len = 6 + next(10);
        for i in 0..len {
            if i > 0 {
                out.push(' ');
            }
            out.push_str(WORDS[next(WORDS.len())]);
        }
        out.push('.');
        words += len;
        sentence += 1;
        out.push(if sentence % 4 == 0 { '\n' } else { ' ' });
    }
    out.trim_end().to_owned()
}

/// 50 sections of about 400 tokens: 2 Critical, the rest spread over sources, priorities,
/// relevance and age; every other one may shrink.
fn prompt() -> PromptIR {
    let now = DateTime::from_timestamp(1_741_940_000, 0).unwrap_or_default();
    let mut ir = PromptIR::new(now);
    for i in 0..50u64 {
        let (source, priority) = match i {
            0 | 1 => (
                SectionSource::Static(format!("base{i}")),
                Priority::Critical,
            ),
            _ => match i % 4 {
                0 => (SectionSource::Knowledge, Priority::Medium),
                1 => (SectionSource::Temporal, Priority::High),
                2 => (
                    SectionSource::Semantic(Relevance::clamped(0.5)),
                    Priority::Low,
                ),
                _ => (SectionSource::State(format!("state{i}")), Priority::Medium),
            },
        };
        let mut section = match Section::new(
            format!("s{i}"),
            format!("Section {i}"),
            source,
            text(i, 400),
        ) {
            Ok(s) => s,
            Err(e) => panic!("bench section: {e}"),
        };
        section = section
            .with_priority(priority)
            .with_relevance(Relevance::clamped((i % 10) as f64 / 10.0 + 0.05))
            .with_recency(now - chrono::Duration::hours(i as i64 * 7));
        if i % 2 == 0 {
            section = section.with_min_tokens(80);
        }
        if let Err(e) = ir.push_section(section) {
            panic!("bench prompt: {e}");
        }
    }
    ir.set_observation("How should I schedule watering for the beds in the north grid cell?");
    ir
}

fn benches(c: &mut Criterion) {
    let tok = match TiktokenTokenizer::new(Encoding::O200kBase) {
        Ok(t) => t,
        Err(e) => panic!("tokenizer: {e}"),
    };
    let budget = match TokenBudget::new(4000) {
        Ok(b) => b,
        Err(e) => panic!("budget: {e}"),
    };
    let uncounted = prompt();
    let mut counted = uncounted.clone();
    let total = counted.count_tokens(&tok);
    let check = compress(&budget, &counted, &tok);
    eprintln!(
        "bench prompt: {} sections, {total} tokens -> {} tokens (fits: {})",
        counted.sections().len(),
        check.report.tokens_after,
        check.report.fits()
    );

    c.bench_function("count_tokens/50_sections_20k", |b| {
        b.iter_batched(
            || uncounted.clone(),
            |mut ir| black_box(ir.count_tokens(&tok)),
            BatchSize::SmallInput,
        )
    });
    let mut group = c.benchmark_group("compress_20k_to_4k");
    group.bench_function("cached", |b| {
        b.iter(|| black_box(compress(&budget, black_box(&counted), &tok)))
    });
    group.bench_function("uncached", |b| {
        b.iter(|| black_box(compress(&budget, black_box(&uncounted), &tok)))
    });
    group.finish();
}

criterion_group!(compress_benches, benches);
criterion_main!(compress_benches);
