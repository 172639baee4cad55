//! How `cargo xtask eval locomo FILE --context-budget ...` prints what it measured: JSON
//! (`--json`) or tables for people, per budget, category and source.

use serde_json::{Value, json};

use super::tally::{ByCategory, Tally, mean, per_question, percentile};
use super::{BudgetResult, CATEGORIES, Measured, Options};

/// Query embeddings per hydrate + compile call, on average.
fn per_call(r: &BudgetResult) -> f64 {
    let n = r.embeddings_per_call.len().max(1);
    r.embeddings_per_call.iter().sum::<usize>() as f64 / n as f64
}

/// Prints `m` as one JSON object.
pub(super) fn json(options: &Options, m: &Measured) -> anyhow::Result<()> {
    let headline: serde_json::Map<String, Value> = m
        .results
        .iter()
        .map(|r| (r.budget.to_string(), Value::from(r.product.overall.mean())))
        .collect();
    let coverage: serde_json::Map<String, Value> = m
        .results
        .iter()
        .map(|r| (r.budget.to_string(), Value::from(r.coverage.overall.mean())))
        .collect();
    let budgets: Vec<Value> = m.results
        .iter()
        .map(|r| {
            let lost: serde_json::Map<String, Value> = r
                .lost
                .iter()
                .map(|(k, v)| (k.name().to_owned(), Value::from(*v)))
                .collect();
            json!({
                "budget": r.budget,
                "evidence_in_prompt": r.product.json(),
                "evidence_coverage": r.coverage.json(),
                "knowledge_updates": {
                    "questions": r.updates,
                    "current_value_in_prompt": r.updated_in,
                    "only_an_older_value_in_prompt": r.older_only,
                },
                "newest_turns_baseline": r.newest.json(),
                "avg_prompt_tokens": mean(&r.tokens),
                "newest_turns_avg_prompt_tokens": mean(&r.newest_tokens),
                "replay": options.replay.then(|| replay_json(r)),
                "latency_ms": {
                    "p50": percentile(&r.latency, 0.5),
                    "p95": percentile(&r.latency, 0.95),
                },
                "latency_ms_query_vector_given": {
                    "p50": percentile(&r.latency_given_vector, 0.5),
                    "p95": percentile(&r.latency_given_vector, 0.95),
                },
                "prompts_differing_with_vector_given": r.vector_given_differs,
                "query_embeddings_per_call": m.embed_latency.as_ref().map(|_| per_call(r)),
                "memories_kept_per_question": per_question(&r.kept_by_source, m.questions),
                "memories_whole_in_prompt_per_question": per_question(&r.whole_in_prompt, m.questions),
                "tokens_in_prompt_per_question": per_question(&r.tokens_by_block, m.questions),
                "evidence_turns": r.evidence_turns,
                "evidence_lost": lost,
                "text_report_disagreements": r.disagreements,
            })
        })
        .collect();
    let out = json!({
        "file": options.file.display().to_string(),
        "embedding_space": m.space,
        "samples": m.conversations,
        "memories": m.memories,
        "questions": m.questions,
        "questions_without_evidence": m.unusable,
        "ingest_seconds": m.ingest_time.as_secs_f64(),
        "store_bytes": m.store_bytes,
        // Measured with the local model only (the hashing embedder costs nothing).
        "one_query_embedding_ms": m.embed_latency.as_ref().map(|e| json!({
            "p50": percentile(e, 0.5),
            "p95": percentile(e, 0.95),
        })),
        "evidence_in_prompt": headline,
        "evidence_coverage": coverage,
        "config": options.overrides.describe(),
        "budgets": budgets,
    });
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(())
}

/// The mean of `shares` (0 when there are none).
fn mean_share(shares: &[f64]) -> f64 {
    shares.iter().sum::<f64>() / shares.len().max(1) as f64
}

/// What a replay measured at one budget (`--replay`).
fn replay_json(r: &BudgetResult) -> Value {
    json!({
        "prompts": r.replay_tokens.len(),
        "avg_prompt_tokens": mean(&r.replay_tokens),
        "avg_shared_prefix": mean_share(&r.replay_shared),
        "stable_part_reused": r.replay_hits as f64 / r.replay_shared.len().max(1) as f64,
        "questions_avg_shared_prefix": mean_share(&r.question_shared),
    })
}

/// Prints `m` as tables, and the missed evidence asked for (`--explain-misses`) on stderr.
pub(super) fn text(options: &Options, m: &Measured) {
    println!(
        "LoCoMo evidence in the compiled prompt: {}",
        options.file.display()
    );
    println!(
        "{}, SQLite per conversation, embedder {}; now = last turn + 1 h",
        options.overrides.describe(),
        m.space
    );
    println!(
        "{} conversations, {} memories, {} questions ({} without usable evidence left out)",
        m.conversations, m.memories, m.questions, m.unusable
    );
    println!(
        "ingest {:.1} s (vectors from the cache), stores {:.1} MiB on disk\n",
        m.ingest_time.as_secs_f64(),
        m.store_bytes as f64 / f64::from(1u32 << 20)
    );
    let cats: String = CATEGORIES
        .iter()
        .map(|(_, name)| format!("{name:>12}"))
        .collect();
    println!(
        "{:>7}{:>10}{:>10}{:>10}{cats}{:>8}{:>8}{:>8}{:>8}",
        "budget", "evidence", "coverage", "newest", "tokens", "p50 ms", "p95 ms", "p50 vec"
    );
    for r in &m.results {
        let cats = r.product.cells();
        println!(
            "{:>7}{:>10.3}{:>10.3}{:>10.3}{cats}{:>8.0}{:>8.1}{:>8.1}{:>8.1}",
            r.budget,
            r.product.overall.mean(),
            r.coverage.overall.mean(),
            r.newest.overall.mean(),
            mean(&r.tokens),
            percentile(&r.latency, 0.5),
            percentile(&r.latency, 0.95),
            percentile(&r.latency_given_vector, 0.5),
        );
    }
    if options.replay {
        println!(
            "\nreplayed as the bot: each turn of the first speaker a prompt after the one before"
        );
        println!(
            "{:>7}{:>10}{:>12}{:>14}{:>14}{:>16}",
            "budget", "prompts", "avg tokens", "shared prefix", "stable reused", "questions shared"
        );
        for r in &m.results {
            let v = replay_json(r);
            println!(
                "{:>7}{:>10}{:>12.0}{:>14.3}{:>14.3}{:>16.3}",
                r.budget,
                r.replay_tokens.len(),
                v["avg_prompt_tokens"].as_f64().unwrap_or(0.0),
                v["avg_shared_prefix"].as_f64().unwrap_or(0.0),
                v["stable_part_reused"].as_f64().unwrap_or(0.0),
                v["questions_avg_shared_prefix"].as_f64().unwrap_or(0.0),
            );
        }
    }
    if let Some(embed_latency) = &m.embed_latency {
        let per: Vec<String> = m
            .results
            .iter()
            .map(|r| format!("{:.1}", per_call(r)))
            .collect();
        println!(
            "\np50/p95: hydrate + compile as `ava` runs it, the store embedding the question \
             ({} embeddings per call; one takes p50 {:.1} ms); p50 vec: the question's vector given",
            per.join(" / "),
            percentile(embed_latency, 0.5)
        );
    }
    let beam: Vec<&String> = m
        .results
        .first()
        .map(|r| r.product.beam.keys().collect())
        .unwrap_or_default();
    if !beam.is_empty() {
        println!("\nby BEAM category: evidence in prompt / evidence coverage");
        let header: String = m
            .results
            .iter()
            .map(|r| format!("{:>14}", r.budget))
            .collect();
        println!("{:<26}{:>4}{header}", "category", "n");
        for b in beam {
            let n = m
                .results
                .first()
                .and_then(|r| r.product.beam.get(b))
                .map_or(0, |t| t.questions);
            let cells: String = m
                .results
                .iter()
                .map(|r| {
                    let m = |c: &ByCategory| c.beam.get(b).map_or(0.0, Tally::mean);
                    format!(
                        "{:>14}",
                        format!("{:.3} / {:.3}", m(&r.product), m(&r.coverage))
                    )
                })
                .collect();
            println!("{b:<26}{n:>4}{cells}");
        }
    }
    for r in &m.results {
        if r.updates > 0 {
            println!(
                "{:>7}  knowledge updates: the current value in the prompt for {} of {}, only an older one for {}",
                r.budget, r.updated_in, r.updates, r.older_only
            );
        }
    }
    println!("\nnewest-turns baseline by category:");
    for r in &m.results {
        let cats = r.newest.cells();
        println!(
            "{:>7}{:>10}{:>10.3}{cats}{:>8.0}",
            r.budget,
            "",
            r.newest.overall.mean(),
            mean(&r.newest_tokens)
        );
    }
    println!("\nmemories per question: kept by each source / whole in the compiled prompt");
    for r in &m.results {
        let parts: Vec<String> = r
            .kept_by_source
            .iter()
            .map(|(k, n)| {
                let whole = r.whole_in_prompt.get(*k).copied().unwrap_or(0);
                let q = m.questions.max(1) as f64;
                format!("{k} {:.1} / {:.1}", *n as f64 / q, whole as f64 / q)
            })
            .collect();
        println!("{:>7}  {}", r.budget, parts.join(", "));
    }
    println!("\ntokens per question in the compiled prompt, by block");
    for r in &m.results {
        let q = m.questions.max(1) as f64;
        let parts: Vec<String> = r
            .tokens_by_block
            .iter()
            .map(|(k, n)| format!("{k} {:.0}", *n as f64 / q))
            .collect();
        println!("{:>7}  {}", r.budget, parts.join(", "));
    }
    println!("\nwhere missed evidence turns were lost (of all evidence turns):");
    for r in &m.results {
        let parts: Vec<String> = r
            .lost
            .iter()
            .map(|(k, v)| format!("{} {v}", k.name()))
            .collect();
        println!(
            "{:>7}  {} evidence turns: {}",
            r.budget,
            r.evidence_turns,
            parts.join(", ")
        );
        if r.vector_given_differs > 0 {
            println!(
                "         note: {} prompt(s) differ when the question's vector is given",
                r.vector_given_differs
            );
        }
        if r.disagreements > 0 {
            println!(
                "         note: the text check and the explain report disagree on {} turn(s)",
                r.disagreements
            );
        }
    }
    for r in &m.results {
        if !r.examples.is_empty() {
            eprintln!("\nmissed evidence at budget {}:", r.budget);
            for e in &r.examples {
                eprintln!("{e}");
            }
        }
    }
}
