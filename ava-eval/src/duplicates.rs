//! `cargo xtask eval duplicates FILE`: how many facts near-duplicate merging would fold, and
//! which, on LoCoMo-format data. Each conversation's `observation` lists facts about each
//! speaker, session by session (the kind of sentence the fact extractor writes, and the same
//! person's facts restated across sessions); they are stored as one scope's facts per speaker,
//! dated by session, and `memory_core::consolidate` plans (a dry run) with each `--similar`
//! threshold, exactly as `ava consolidate --similar` would. The pairs it would merge are
//! printed, closest to the threshold first, for a person to judge: there is no ground truth
//! of which facts are "the same".

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use memory_core::{
    Consolidation, EmbeddingProvider, HashingEmbedder, MemoryBackend, MemoryKind, NewMemory, Scope,
    SearchRequest, Timestamp,
};
use serde_json::Value;

use super::Embedder;
use super::cache::CachedEmbedder;
use super::locomo::vector_cache_dir;

/// `cargo xtask eval duplicates FILE ...`
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// A LoCoMo-format JSON file (samples with `observation`).
    file: PathBuf,
    /// Cosine similarity thresholds to plan with, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "0.85,0.9,0.95")]
    similar: Vec<f32>,
    /// Pairs to print per threshold (spread from the threshold up).
    #[arg(long, default_value_t = 12)]
    samples: usize,
    /// Embedder computing the vectors.
    #[arg(long, value_enum, default_value_t = Embedder::Local)]
    embedder: Embedder,
}

/// One speaker's facts in one conversation, in session order.
struct Person {
    scope: Scope,
    facts: Vec<(u32, String)>,
}

fn people(data: &Value) -> anyhow::Result<Vec<Person>> {
    let samples = data.as_array().context("expected a JSON list of samples")?;
    let mut out = Vec::new();
    for (n, sample) in samples.iter().enumerate() {
        let id = sample["sample_id"]
            .as_str()
            .map_or_else(|| format!("sample-{n}"), str::to_owned);
        let Some(obs) = sample["observation"].as_object() else {
            bail!("sample {id} has no `observation` object");
        };
        let mut by_speaker: std::collections::BTreeMap<String, Vec<(u32, String)>> =
            Default::default();
        for (key, speakers) in obs {
            let session: u32 = key
                .strip_prefix("session_")
                .and_then(|r| r.strip_suffix("_observation"))
                .and_then(|n| n.parse().ok())
                .with_context(|| format!("sample {id}: unexpected key `{key}`"))?;
            for (speaker, facts) in speakers.as_object().into_iter().flatten() {
                for f in facts.as_array().into_iter().flatten() {
                    // Each is [text, evidence id(s)].
                    if let Some(text) = f.get(0).and_then(Value::as_str) {
                        by_speaker
                            .entry(speaker.clone())
                            .or_default()
                            .push((session, text.to_owned()));
                    }
                }
            }
        }
        for (speaker, mut facts) in by_speaker {
            facts.sort_by_key(|(s, _)| *s);
            let user: String = format!("{id}-{speaker}")
                .chars()
                .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            out.push(Person {
                scope: Scope::for_user(&user)?,
                facts,
            });
        }
    }
    Ok(out)
}

pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    for t in &args.similar {
        if !(0.0..=1.0).contains(t) {
            bail!("--similar {t}: expected a cosine similarity between 0 and 1");
        }
    }
    let text = std::fs::read_to_string(&args.file)
        .with_context(|| format!("read {}", args.file.display()))?;
    let data: Value = serde_json::from_str(&text).context("parse the dataset")?;
    let people = people(&data)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(evaluate(args, people))
}

async fn evaluate(args: &Args, people: Vec<Person>) -> anyhow::Result<()> {
    let mut cache = None;
    let embedder: Arc<dyn EmbeddingProvider> = match args.embedder {
        Embedder::Hash => Arc::new(HashingEmbedder::new(384)?),
        Embedder::Local => {
            let local: Arc<dyn EmbeddingProvider> = Arc::new(super::local_embedder()?);
            let cached = Arc::new(CachedEmbedder::open(local, vector_cache_dir()));
            cache = Some(Arc::clone(&cached));
            cached
        }
    };
    let space = embedder.space().to_string();
    let store = memory_inmem::InMemoryBackend::new(Some(embedder));
    let t0 = Timestamp::parse_rfc3339("2023-01-01T00:00:00Z")?;
    let mut total = 0;
    for p in &people {
        let batch: Vec<NewMemory> = p
            .facts
            .iter()
            .enumerate()
            .map(|(i, (session, text))| {
                NewMemory::new(text.as_str())
                    .with_kind(MemoryKind::Fact)
                    .at(t0.plus(Duration::from_secs(u64::from(*session) * 86_400 + i as u64)))
            })
            .collect();
        total += batch.len();
        store.store_batch(&p.scope, batch).await?;
    }
    if let Some(c) = &cache {
        c.save()?;
    }
    println!(
        "{total} facts about {} speakers ({}; {space})",
        people.len(),
        args.file.display()
    );
    let exact = plan(&store, &people, None).await?;
    println!(
        "exact duplicates (same text once normalised): {} folded",
        exact.iter().map(|p| p.2).sum::<usize>()
    );
    for &t in &args.similar {
        let pairs = plan(&store, &people, Some(t)).await?;
        let folded: usize = pairs.iter().map(|p| p.2).sum();
        println!(
            "\nthreshold {t}: {folded} of {total} facts folded ({:.1}%)",
            100.0 * folded as f64 / total.max(1) as f64
        );
        let mut shown: Vec<&(String, String, usize, f32)> =
            pairs.iter().filter(|p| p.3.is_finite()).collect();
        shown.sort_by(|a, b| a.3.total_cmp(&b.3));
        let step = (shown.len() / args.samples.max(1)).max(1);
        for (kept, merged, _, sim) in shown.iter().step_by(step).take(args.samples) {
            println!("  {sim:.3}  kept:   {kept}\n         merged: {merged}");
        }
    }
    Ok(())
}

/// The merges a dry run plans at `similar` (exact duplicates only when `None`): (kept text,
/// merged text, memories folded, similarity) per merged memory.
async fn plan(
    store: &memory_inmem::InMemoryBackend,
    people: &[Person],
    similar: Option<f32>,
) -> anyhow::Result<Vec<(String, String, usize, f32)>> {
    let mut out = Vec::new();
    for p in people {
        let what = Consolidation {
            similar,
            dry_run: true,
            ..Consolidation::new()
        };
        let report = memory_core::consolidate(store, &p.scope, &what).await?;
        for m in report.merged {
            let kept = store.get(&p.scope, m.kept).await?.content;
            for id in m.merged {
                let merged = store.get(&p.scope, id).await?.content;
                // The pair's own similarity, for the listing.
                let sim = store
                    .search(
                        &p.scope,
                        &SearchRequest::semantic(merged.clone())
                            .limit(20)
                            .without_access_tracking(),
                    )
                    .await?
                    .into_iter()
                    .find(|h| h.entry.id == m.kept)
                    .and_then(|h| h.breakdown.semantic)
                    .unwrap_or(f32::NAN);
                out.push((kept.clone(), merged, 1, sim));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture() -> Value {
        serde_json::json!([{
            "sample_id": "conv-x",
            "observation": {
                "session_2_observation": {"Ann": [["ann has a dog named rex", "D2:1"]], "Bo": []},
                "session_1_observation": {
                    "Ann": [["Ann has a dog named Rex.", "D1:1"], ["Ann likes tea.", "D1:4"]],
                    "Bo": [["Bo has a dog named Rex.", "D1:2"]]
                }
            }
        }])
    }

    #[test]
    fn observations_become_each_speakers_facts_in_session_order() {
        let found = people(&fixture()).unwrap();
        assert_eq!(found.len(), 2);
        assert_eq!(found[0].scope, Scope::for_user("conv-x-Ann").unwrap());
        let ann: Vec<(u32, &str)> = found[0]
            .facts
            .iter()
            .map(|(s, t)| (*s, t.as_str()))
            .collect();
        assert_eq!(
            ann,
            [
                (1, "Ann has a dog named Rex."),
                (1, "Ann likes tea."),
                (2, "ann has a dog named rex")
            ]
        );
        assert!(people(&serde_json::json!([{"sample_id": "y"}])).is_err());
    }

    #[tokio::test]
    async fn a_fact_restated_is_planned_into_the_first_and_other_speakers_stay_apart() {
        let found = people(&fixture()).unwrap();
        let store =
            memory_inmem::InMemoryBackend::new(Some(Arc::new(HashingEmbedder::new(64).unwrap())));
        let t0 = Timestamp::parse_rfc3339("2023-01-01T00:00:00Z").unwrap();
        for p in &found {
            for (i, (session, text)) in p.facts.iter().enumerate() {
                let at = t0.plus(Duration::from_secs(u64::from(*session) * 86_400 + i as u64));
                let m = NewMemory::new(text.as_str())
                    .with_kind(MemoryKind::Fact)
                    .at(at);
                store.store(&p.scope, m).await.unwrap();
            }
        }
        let exact = plan(&store, &found, None).await.unwrap();
        assert_eq!(exact.len(), 1, "only Ann's restated fact");
        assert_eq!(
            exact[0].0, "Ann has a dog named Rex.",
            "the first telling is kept"
        );
        assert_eq!(exact[0].1, "ann has a dog named rex");
        assert!(exact[0].3 > 0.99, "{}", exact[0].3);
    }
}
