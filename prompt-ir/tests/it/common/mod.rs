//! Shared test fixtures: the seed example prompt and the invariants every compression must keep.

#![allow(
    dead_code,
    reason = "each test binary uses a different part of the shared helpers"
)] // Each test binary uses a different part.

use chrono::{DateTime, Duration, Utc};
use prompt_ir::{
    Action, Compressed, Priority, PromptIR, Relevance, Section, SectionSource, TokenBudget,
    Tokenizer, ToolDef,
};

/// The seed's fixed "now": Friday 14 March 2025, 08:30 UTC (09:30 in Stockholm).
pub(crate) fn now() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2025-03-14T08:30:00Z")
        .unwrap()
        .with_timezone(&Utc)
}

fn ago(minutes: i64) -> DateTime<Utc> {
    now() - Duration::minutes(minutes)
}

fn rel(x: f64) -> Relevance {
    Relevance::new(x).unwrap()
}

/// The seed's example IR: an assistant with base instructions, time, project, user, knowledge
/// memories, the recent conversation and related past messages, two tools and the new
/// observation. Not yet counted.
pub(crate) fn seed_ir() -> PromptIR {
    let mut ir = PromptIR::new(now());
    let mut add = |s: Section| ir.push_section(s).unwrap();

    add(Section::new(
        "base",
        "Base instructions",
        SectionSource::Static("base_instructions".into()),
        "You are Ava, a long-term assistant with memory of past conversations.\n\
         Answer the user's latest message. Use the memories below only when they help, and \
         say so when you rely on one.\n\
         If a memory contradicts what the user says now, trust the user and point out the \
         difference.\n\
         Keep answers short; prefer code over prose when the user is programming.",
    )
    .unwrap());

    add(Section::new(
        "time",
        "Current time",
        SectionSource::State("time".into()),
        "It is Friday 14 March 2025, 09:30 in Europe/Stockholm (UTC+01:00).",
    )
    .unwrap());

    add(Section::new(
        "project",
        "Active project",
        SectionSource::State("project".into()),
        "Project: Sprout, a garden-planning web app (Rust backend on axum, SvelteKit \
         frontend).\n\
         Milestone: v0.4 \"watering schedules\", due Friday 28 March.\n\
         Open blocker: forecast requests hit the weather provider's rate limit.",
    )
    .unwrap()
    .with_min_tokens(20));

    add(Section::new(
        "user",
        "User profile",
        SectionSource::State("user".into()),
        "Maya Lindqvist, backend engineer. Writes Rust every day. Prefers concise answers \
         with code. Works from Stockholm.",
    )
    .unwrap());

    let knowledge = [
        (
            "knowledge:deploy",
            "Deployment",
            0.55,
            60 * 24 * 20,
            "Sprout deploys to Fly.io from GitHub Actions. Staging deploys on every merge to \
             main. Production deploys are manual and happen on Tuesdays. Rollbacks use \
             `fly releases` and take about two minutes.",
        ),
        (
            "knowledge:weather",
            "Weather provider",
            0.92,
            60 * 24 * 9,
            "The weather provider is Open-Meteo. The free tier allows 10,000 calls a day and \
             600 a minute. Sprout caches each forecast per grid cell of 0.1 degrees for three \
             hours. Every plant bed maps to exactly one grid cell.",
        ),
        (
            "knowledge:db",
            "Database access",
            0.40,
            60 * 24 * 45,
            "Maya dislikes ORMs. The backend uses sqlx with hand-written queries and the \
             compile-time checked `query!` macros. Migrations live in `backend/migrations`.",
        ),
        (
            "knowledge:beds",
            "Plant beds",
            0.78,
            60 * 24 * 3,
            "Watering schedules are stored per plant bed. Each bed has a soil type, a sun \
             exposure and a list of plants with their water needs in millimetres per week. A \
             schedule is recomputed whenever the forecast for its grid cell changes.",
        ),
    ];
    for (id, label, relevance, minutes, text) in knowledge {
        add(Section::new(id, label, SectionSource::Knowledge, text)
            .unwrap()
            .with_relevance(rel(relevance))
            .with_recency(ago(minutes))
            .with_min_tokens(15));
    }

    let conversation = [
        (
            "msg:1",
            "Maya, 09:02",
            28,
            "Morning! I want to finish the watering schedule endpoint today.",
        ),
        (
            "msg:2",
            "Ava, 09:02",
            28,
            "Good plan. The endpoint needs the bed's plants, its soil type and the cached \
             forecast for its grid cell. Shall we start with the handler signature?",
        ),
        (
            "msg:3",
            "Maya, 09:14",
            16,
            "The handler works, but when the scheduler refreshes all beds at once the forecast \
             client gets HTTP 429 from Open-Meteo.",
        ),
        (
            "msg:4",
            "Ava, 09:15",
            15,
            "That is the per-minute limit. Beds in the same grid cell each ask for the same \
             forecast. Refreshing per grid cell instead of per bed would cut the calls.",
        ),
    ];
    for (id, label, minutes, text) in conversation {
        add(Section::new(id, label, SectionSource::Temporal, text)
            .unwrap()
            .with_recency(ago(minutes)));
    }

    let related = [
        (
            "past:token-bucket",
            "Related: rate limiting (February)",
            0.86,
            60 * 24 * 23,
            "Last time the provider limit was hit, we put a token bucket in front of the \
             forecast client. It allows 8 requests a second.\n\
             Requests over the limit wait up to 5 seconds, then fail with a clear error.\n\
             The bucket lives in the axum app state, shared behind an Arc.",
        ),
        (
            "past:shared-client",
            "Related: sharing an HTTP client (January)",
            0.71,
            60 * 24 * 50,
            "Maya asked how to share one reqwest::Client across axum handlers. The answer was \
             to build it once at start-up and keep it in the app state. Cloning a \
             reqwest::Client is cheap because it is reference counted.",
        ),
        (
            "past:cron",
            "Related: scheduler timing (December)",
            0.52,
            60 * 24 * 95,
            "The scheduler runs every 15 minutes from a tokio interval. Maya considered a \
             cron crate but kept the interval because it is simpler to test.",
        ),
    ];
    for (id, label, score, minutes, text) in related {
        add(
            Section::new(id, label, SectionSource::Semantic(rel(score)), text)
                .unwrap()
                .with_recency(ago(minutes))
                .with_min_tokens(12),
        );
    }

    ir.push_tool(
        ToolDef::new(
            "search_memory",
            "Search Ava's long-term memory for facts and past messages.",
            serde_json::json!({
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "What to look for"},
                    "limit": {"type": "integer", "minimum": 1, "maximum": 20}
                },
                "required": ["query"]
            }),
        )
        .unwrap(),
    )
    .unwrap();
    ir.push_tool(
        ToolDef::new(
            "get_forecast",
            "Fetch the cached weather forecast for a grid cell.",
            serde_json::json!({
                "type": "object",
                "properties": {"cell": {"type": "string"}},
                "required": ["cell"]
            }),
        )
        .unwrap()
        .with_priority(Priority::Medium),
    )
    .unwrap();

    ir.set_observation(
        "How should I debounce forecast refreshes so that ten beds in the same grid cell \
         trigger only one API call?",
    );
    ir
}

/// Checks everything `compress` promises about `out`, produced from `input` and `budget`.
pub(crate) fn check_compression(
    input: &PromptIR,
    budget: &TokenBudget,
    out: &Compressed,
    tokenizer: &dyn Tokenizer,
) -> Result<(), String> {
    let report = &out.report;
    let ir = &out.ir;

    // The cached counts of the output are true counts.
    for s in ir.sections() {
        let actual = tokenizer.count(s.content());
        if s.tokens() != Some(actual) {
            return Err(format!(
                "section {} caches {:?}, has {actual}",
                s.id(),
                s.tokens()
            ));
        }
    }
    if ir.meta().total_tokens != Some(report.tokens_after) {
        return Err("meta total differs from the report".into());
    }

    // Within budget whenever what may not be cut allows it; pools never exceed their caps then.
    let must_keep: u32 = input
        .sections()
        .iter()
        .filter(|s| s.priority() == Priority::Critical)
        .map(|s| tokenizer.count(s.content()))
        .sum();
    for p in &report.pools {
        if p.overflow.is_none() && p.after > p.cap {
            return Err(format!("pool {:?} uses {} of {}", p.pool, p.after, p.cap));
        }
    }
    if report.fits() && report.tokens_after > budget.available() {
        return Err(format!(
            "{} tokens after, {} available",
            report.tokens_after,
            budget.available()
        ));
    }
    if report.pools.len() == 1 {
        let obs = report.observation_tokens;
        let critical_tools: u32 = input
            .tools()
            .iter()
            .filter(|t| t.priority() == Priority::Critical)
            .map(|t| t.clone().count_tokens(tokenizer))
            .sum();
        let feasible = must_keep + obs + critical_tools <= budget.available();
        if feasible != report.fits() {
            return Err(format!("feasible {feasible} but fits {}", report.fits()));
        }
    }

    // Critical sections and tools survive untouched.
    for s in input
        .sections()
        .iter()
        .filter(|s| s.priority() == Priority::Critical)
    {
        match ir.section(s.id()) {
            Some(kept) if kept.content() == s.content() => {}
            _ => return Err(format!("critical section {} was cut", s.id())),
        }
    }
    for t in input
        .tools()
        .iter()
        .filter(|t| t.priority() == Priority::Critical)
    {
        if !ir.tools().iter().any(|k| k.name() == t.name()) {
            return Err(format!("critical tool {} was dropped", t.name()));
        }
    }

    // Order is stable: output ids are a subsequence of input ids.
    let mut input_ids = input.sections().iter().map(Section::id);
    for s in ir.sections() {
        if !input_ids.any(|id| id == s.id()) {
            return Err(format!("section {} out of order or invented", s.id()));
        }
    }

    // Truncation keeps a prefix ending at a sentence or line boundary, at or above min_tokens.
    for s in ir.sections() {
        let Some(orig) = input.section(s.id()) else {
            return Err(format!("section {} not in input", s.id()));
        };
        if s.content() == orig.content() {
            continue;
        }
        let cut = s.content();
        if !orig.content().starts_with(cut) || cut.is_empty() {
            return Err(format!(
                "section {} is not a prefix of the original",
                s.id()
            ));
        }
        let next = orig.content()[cut.len()..].chars().next();
        let last = cut.chars().last();
        let sentence_end = matches!(last, Some('.' | '!' | '?' | '"' | ')' | '\''))
            && next.is_some_and(char::is_whitespace);
        let line_end = orig.content()[cut.len()..]
            .trim_start_matches([' ', '\t', '\r'])
            .starts_with('\n');
        if !(sentence_end || line_end) {
            return Err(format!("section {} cut mid-sentence: {cut:?}", s.id()));
        }
        let min = orig.min_tokens().unwrap_or(u32::MAX).max(1);
        let tokens = s.tokens().unwrap_or(0);
        if tokens < min {
            return Err(format!(
                "section {} cut to {tokens}, below its min {min}",
                s.id()
            ));
        }
    }

    // The report covers every input item and agrees with the output.
    if report.sections.len() != input.sections().len() || report.tools.len() != input.tools().len()
    {
        return Err("report does not list every input item".into());
    }
    for o in &report.sections {
        let present = ir.section(&o.id).is_some();
        let dropped = matches!(o.action, Action::Dropped { .. });
        if present == dropped {
            return Err(format!("report says {:?} for {}", o.action, o.id));
        }
    }
    Ok(())
}
