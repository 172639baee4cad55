//! Traces: hydrate and compile spans carry `gen_ai.*` counts, tokens and durations; prompt
//! text (observation, memories) appears only when `trace_prompt_text` is on, and auth
//! secrets never. Uses a minimal recording subscriber (no tracing-subscriber dependency).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test fails loudly on an unexpected error"
)]

#[path = "it/common/mod.rs"]
mod common;

use std::fmt::Debug;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use common::{OBSERVATION, chat_scope, config, embedder, input, request, seed_alice};
use hydrate::{compile, hydrate};
use memory_core::MemoryBackend;
use memory_inmem::InMemoryBackend;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

/// Every span name and every `field=value` recorded, in order.
#[derive(Clone, Default)]
struct Recorder {
    lines: Arc<Mutex<Vec<String>>>,
    next: Arc<AtomicU64>,
}

struct Fields<'a>(&'a mut Vec<String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn Debug) {
        self.0.push(format!("{}={value:?}", field.name()));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.push(format!("{}={value}", field.name()));
    }
}

impl Subscriber for Recorder {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, span: &Attributes<'_>) -> Id {
        let mut lines = self.lines.lock().unwrap();
        lines.push(format!("span {}", span.metadata().name()));
        span.record(&mut Fields(&mut lines));
        Id::from_u64(self.next.fetch_add(1, Ordering::Relaxed) + 1)
    }
    fn record(&self, _: &Id, values: &Record<'_>) {
        values.record(&mut Fields(&mut self.lines.lock().unwrap()));
    }
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        event.record(&mut Fields(&mut self.lines.lock().unwrap()));
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

async fn run(trace_text: bool) -> Vec<String> {
    let backend: Arc<dyn MemoryBackend> = Arc::new(InMemoryBackend::new(Some(embedder())));
    seed_alice(backend.as_ref()).await;
    let mut cfg = config(Arc::clone(&backend), Some(embedder()));
    cfg.trace_prompt_text = trace_text;
    let recorder = Recorder::default();
    let lines = Arc::clone(&recorder.lines);
    let _guard = tracing::subscriber::set_default(recorder);
    let hydrated = hydrate(
        &cfg,
        &input(chat_scope("alice"), request(OBSERVATION, 8000)),
    )
    .await
    .unwrap();
    compile(&cfg, &hydrated).unwrap();
    lines.lock().unwrap().clone()
}

#[tokio::test]
async fn spans_carry_counts_and_text_only_when_enabled() {
    let quiet = run(false).await;
    let all = quiet.join("\n");
    for expected in [
        "span hydrate",
        "gen_ai.operation.name=hydrate",
        "hydrate.sections=11",
        "hydrate.degradations=0",
        "span compile",
        "gen_ai.operation.name=compile",
        "gen_ai.prompt.sections=15",
        "gen_ai.prompt.sections.dropped=0",
        "gen_ai.prompt.section.action=kept",
        "gen_ai.source.kind=semantic",
        "gen_ai.usage.input_tokens=",
        "duration_ms=",
    ] {
        assert!(all.contains(expected), "missing {expected} in:\n{all}");
    }
    for private in [OBSERVATION, "lentil", "Miso", "vegetarian"] {
        assert!(
            !all.contains(private),
            "`{private}` leaked into traces:\n{all}"
        );
    }

    let loud = run(true).await.join("\n");
    assert!(loud.contains("gen_ai.prompt=") && loud.contains("lentil dal"));
}
