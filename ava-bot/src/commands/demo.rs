//! `ava demo`: a self-contained tour: a fresh SQLite store in a temporary directory, a short
//! conversation stored in it, then recall and the compiled prompt (with its explain report)
//! for a few questions, on the best embedder available.

use std::io::Write;
use std::sync::Arc;

use anyhow::Context;
use memory_core::{
    EmbeddingProvider, HashingEmbedder, MemoryBackend, MemoryKind, NewMemory, Role, Scope,
    SearchRequest, Timestamp, tags,
};
use memory_sqlite::{SqliteBackend, SqliteConfig};

use crate::agent::{Agent, Audience, render_messages};
use crate::config::{EmbedderChoice, Settings};

/// A short conversation written for this demo: (day, role, text).
const CONVERSATION: &[(u32, Role, &str)] = &[
    (
        0,
        Role::User,
        "Hi! I'm Maya. I just moved to Lisbon for a new job at a robotics startup.",
    ),
    (
        0,
        Role::Assistant,
        "Welcome to Lisbon, Maya! What will you be working on at the startup?",
    ),
    (
        0,
        Role::User,
        "Motion planning for warehouse robots. My manager is called Tomás.",
    ),
    (
        1,
        Role::User,
        "I adopted a grey cat yesterday. Her name is Pixel and she hates the vacuum cleaner.",
    ),
    (
        2,
        Role::User,
        "Planning a trip to Kyoto in April to see the cherry blossoms with my sister Ana.",
    ),
    (
        3,
        Role::User,
        "I'm allergic to peanuts, so please never suggest satay recipes.",
    ),
    (
        4,
        Role::User,
        "Started learning the cello. Practising scales every evening for twenty minutes.",
    ),
    (
        5,
        Role::User,
        "Tomás asked me to present our path planner at the team offsite on Friday.",
    ),
];

/// Facts the agent decided to keep on purpose.
const FACTS: &[(&str, &[&str])] = &[
    ("Maya is allergic to peanuts.", &["health", "food"]),
    ("Maya's cat is called Pixel.", &["pets"]),
];

const QUESTIONS: &[&str] = &[
    "What is the name of my cat?",
    "Which foods am I allergic to?",
    "Who is my manager at work?",
    "When am I going to Kyoto, and with whom?",
];

/// Small enough that some of the conversation has to be left out.
const DEMO_BUDGET: u32 = 600;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Also print the full compiled prompt for every question (default: the first only).
    #[arg(long)]
    all_prompts: bool,
}

/// The embedder the demo uses: the configured one, or with `auto`, the local model if it is
/// installed and otherwise the hashing embedder (never nothing: the demo shows vectors).
async fn embedder(
    settings: &Settings,
) -> anyhow::Result<(Option<Arc<dyn EmbeddingProvider>>, String)> {
    let (found, note) = settings.embedder().await?;
    if found.is_some() || settings.embedder != EmbedderChoice::Auto {
        return Ok((found, note));
    }
    let hash = HashingEmbedder::new(384).context("create the hashing embedder")?;
    let note = format!(
        "embedder {} in place of the local model ({})",
        hash.space(),
        settings.local_model_notice()?
    );
    Ok((Some(Arc::new(hash)), note))
}

/// Runs the demo, writing its report to `out`.
pub(crate) async fn run(
    settings: &Settings,
    args: &Args,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let (embedder, note) = embedder(settings).await?;
    let dir = tempfile::tempdir().context("create a temporary directory for the demo store")?;
    let path = dir.path().join("demo.db");
    let store = SqliteBackend::open(&path, embedder.clone(), SqliteConfig::default())
        .await
        .with_context(|| format!("create the demo store {}", path.display()))?;
    let backend: Arc<dyn MemoryBackend> = Arc::new(store);
    let scope = Scope::for_user("maya")?.in_chat("demo")?;

    writeln!(out, "Ava demo")?;
    writeln!(out, "========")?;
    writeln!(
        out,
        "store: {} in {} (a fresh SQLite file, deleted when the demo ends)",
        backend.info().name,
        path.display()
    )?;
    writeln!(out, "{note}")?;
    if embedder
        .as_ref()
        .is_some_and(|e| e.space().provider == "hash")
    {
        writeln!(
            out,
            "note: the hashing embedder is a stand-in, not a language model: it matches shared \
             words, not meanings. `cargo xtask fetch-model` installs the local model."
        )?;
    }
    writeln!(out, "scope: {scope}\n")?;

    let start = Timestamp::parse_rfc3339("2026-03-02T09:00:00Z")?;
    let day = std::time::Duration::from_secs(86_400);
    let mut batch: Vec<NewMemory> = CONVERSATION
        .iter()
        .map(|(d, role, text)| {
            NewMemory::new(*text)
                .with_role(*role)
                .with_source("demo")
                .at(start.plus(day * *d))
        })
        .collect();
    for (fact, labels) in FACTS {
        batch.push(
            NewMemory::new(*fact)
                .with_kind(MemoryKind::Fact)
                .with_tags(tags(labels.iter())?)
                .with_context("stated by the user in the conversation")
                .pinned()
                .at(start.plus(day * 5)),
        );
    }
    let stored = backend
        .store_batch(&scope, batch)
        .await
        .context("store the demo conversation")?;
    writeln!(
        out,
        "Stored {} memories ({} messages, {} facts).\n",
        stored.len(),
        CONVERSATION.len(),
        FACTS.len()
    )?;

    // The questions come the evening after the last message, so every run of the demo
    // shows the same prompts.
    let asked_at = start.plus(day * 5 + std::time::Duration::from_secs(10 * 3600));
    let agent = Agent::new(Arc::clone(&backend), embedder.clone(), DEMO_BUDGET)?
        .with_allocation(settings.allocation.clone());
    for (i, question) in QUESTIONS.iter().enumerate() {
        writeln!(out, "Q: {question}")?;
        // Not counted as recalls: a count lands in the store after the search has answered,
        // so a later question's scores would depend on how soon it did.
        let req = super::best_search(backend.as_ref(), question, 3).without_access_tracking();
        let hits = backend
            .search(&scope, &req)
            .await
            .with_context(|| format!("search for {question:?}"))?;
        if hits.is_empty() {
            writeln!(out, "   (nothing recalled)")?;
        }
        for (rank, hit) in hits.iter().enumerate() {
            let b = &hit.breakdown;
            writeln!(
                out,
                "   {}. [{:.2}] {}\n      semantic {:.2}, keyword {:.2}, {} {}",
                rank + 1,
                hit.score,
                hit.entry.content,
                b.semantic.unwrap_or(0.0),
                b.keyword.unwrap_or(0.0),
                hit.entry.kind.as_str(),
                hit.entry.created_at,
            )?;
        }
        let prompt = agent.prepare_at(&scope, question, asked_at).await?;
        if i == 0 || args.all_prompts {
            writeln!(out, "\n   The prompt an LLM would get (`ava context`):")?;
            for line in render_messages(&prompt).lines() {
                writeln!(out, "   | {line}")?;
            }
        }
        writeln!(
            out,
            "\n   Explain report ({DEMO_BUDGET}-token budget, tight on purpose):"
        )?;
        for line in agent
            .explain(&scope, Audience::Private, &prompt.report)
            .await
            .lines()
        {
            writeln!(out, "   {line}")?;
        }
        writeln!(out)?;
    }
    let other = Scope::for_user("someone-else")?.in_chat("demo")?;
    let leaked = backend
        .search(&other, &SearchRequest::keyword("Pixel cat peanuts"))
        .await?;
    writeln!(
        out,
        "Isolation: the same search in scope {other} finds {} memories.",
        leaked.len()
    )?;
    Ok(())
}
