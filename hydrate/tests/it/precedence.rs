//! Precedence rules, tested directly: which source serves a kind (explicit sources, then
//! providers in order, and `supports` needing both a declared capability and a builder),
//! and the next provider of a kind taking over when the first fails.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use async_trait::async_trait;
use common::{OBSERVATION, chat_scope, config, embedder, input, request, seed_alice};
use hydrate::{
    BuildContext, ContextSource, DegradationKind, ProviderCapabilities, SourceBuilder, SourceItem,
    SourceKind, SourceOutput, SourceProvider, SourceQuery, SourceStatus, hydrate, plan_sources,
};
use memory_core::MemoryBackend;
use memory_inmem::InMemoryBackend;

/// A source that returns one line naming itself.
#[derive(Debug)]
struct Named(String);

#[async_trait]
impl ContextSource for Named {
    fn name(&self) -> &str {
        &self.0
    }

    async fn fetch(&self, _query: &SourceQuery<'_>, out: &mut SourceOutput) -> hydrate::Result<()> {
        out.push(SourceItem::text("1", format!("from {}", self.0)));
        Ok(())
    }
}

#[derive(Debug)]
struct NamedBuilder(&'static str);

impl SourceBuilder for NamedBuilder {
    fn build(&self, ctx: &BuildContext<'_>) -> hydrate::Result<Arc<dyn ContextSource>> {
        Ok(Arc::new(Named(format!("{}/{}", self.0, ctx.kind))))
    }
}

fn provider(name: &'static str, declared: &[SourceKind], built: &[SourceKind]) -> SourceProvider {
    built.iter().fold(
        SourceProvider::new(name, ProviderCapabilities::new(declared.iter().copied())),
        |p, &k| p.with_builder(k, Arc::new(NamedBuilder(name))),
    )
}

fn chosen(choice: Option<&SourceProvider>) -> String {
    choice.map_or("missing".into(), |p| format!("provider:{}", p.name()))
}

#[test]
fn supports_needs_a_declared_capability_and_a_builder() {
    use SourceKind::*;
    let p = provider("p", &[Temporal, Knowledge], &[Temporal, Semantic]);
    assert!(p.supports(Temporal));
    assert!(!p.supports(Knowledge), "declared but no builder");
    assert!(!p.supports(Semantic), "builder but not declared");
    assert!(!p.supports(Web));
    assert!(p.build(Knowledge).unwrap().is_none());
    assert_eq!(p.build(Temporal).unwrap().unwrap().name(), "p/temporal");
}

#[test]
fn explicit_sources_win_then_earlier_providers() {
    use SourceKind::*;
    let kinds: BTreeSet<_> = [Temporal, Knowledge, Semantic, Graph, Web]
        .into_iter()
        .collect();
    // A source set explicitly is served by a provider put before the others.
    let explicit = hydrate::HydrationConfig::new("", common::tokenizer())
        .with_provider(provider("first", &[Temporal], &[Temporal]))
        .with_source(Knowledge, Arc::new(Named("mine".into())));
    assert_eq!(explicit.providers[0].name(), "mine");
    let providers = vec![
        explicit.providers[0].clone(),
        provider(
            "first",
            &[Temporal, Knowledge, Graph],
            &[Temporal, Knowledge],
        ),
        provider(
            "second",
            &[Temporal, Semantic, Graph],
            &[Temporal, Semantic, Graph],
        ),
        provider("third", &[Semantic, Web], &[Semantic]),
    ];
    let plan: BTreeMap<SourceKind, String> = plan_sources(&kinds, &providers)
        .into_iter()
        .map(|(k, c)| (k, chosen(c)))
        .collect();
    assert_eq!(plan[&Temporal], "provider:first", "earlier provider wins");
    assert_eq!(
        plan[&Knowledge], "provider:mine",
        "explicit source beats every provider"
    );
    assert_eq!(plan[&Semantic], "provider:second");
    assert_eq!(
        plan[&Graph], "provider:second",
        "first declares graph but has no builder"
    );
    assert_eq!(
        plan[&Web], "missing",
        "third declares web but has no builder"
    );
}

async fn alice() -> Arc<dyn MemoryBackend> {
    let backend: Arc<dyn MemoryBackend> = Arc::new(InMemoryBackend::new(Some(embedder())));
    seed_alice(backend.as_ref()).await;
    backend
}

/// A web source whose upstream is down.
#[derive(Debug)]
struct Down;

#[async_trait]
impl ContextSource for Down {
    fn name(&self) -> &str {
        "down"
    }

    async fn fetch(
        &self,
        _query: &SourceQuery<'_>,
        _out: &mut SourceOutput,
    ) -> hydrate::Result<()> {
        Err(hydrate::Error::source_failed("down", "503 from upstream"))
    }
}

#[derive(Debug)]
struct DownBuilder;

impl SourceBuilder for DownBuilder {
    fn build(&self, _ctx: &BuildContext<'_>) -> hydrate::Result<Arc<dyn ContextSource>> {
        Ok(Arc::new(Down))
    }
}

/// A web provider that serves.
fn web(name: &'static str) -> SourceProvider {
    provider(name, &[SourceKind::Web], &[SourceKind::Web])
}

/// A provider that fails falls back to the next one of its kind (a degradation saying so);
/// when none is left the kind fails and says why.
#[tokio::test]
async fn a_failing_provider_falls_back_to_the_next() {
    let backend = alice().await;
    let flaky = || {
        SourceProvider::new("flaky-web", ProviderCapabilities::new([SourceKind::Web]))
            .with_builder(SourceKind::Web, Arc::new(DownBuilder))
    };
    let mut cfg = config(Arc::clone(&backend), Some(embedder()));
    cfg.kinds.insert(SourceKind::Web);
    cfg.providers.push(flaky());
    cfg.providers.push(web("alices-web"));
    let report_of = |h: &hydrate::Hydrated| {
        h.sources
            .iter()
            .find(|s| s.kind == SourceKind::Web)
            .unwrap()
            .clone()
    };
    let h = hydrate(
        &cfg,
        &input(chat_scope("alice"), request(OBSERVATION, 8000)),
    )
    .await
    .unwrap();
    let report = report_of(&h);
    assert_eq!(report.status, SourceStatus::Complete, "{report:?}");
    assert_eq!(report.provider.as_deref(), Some("alices-web"));
    assert_eq!(report.returned, 1);
    assert_eq!(report.source.as_deref(), Some("alices-web/web"));
    let fell_back: Vec<_> = h
        .degradations
        .iter()
        .filter(|d| d.source == Some(SourceKind::Web))
        .collect();
    assert_eq!(fell_back.len(), 1, "{fell_back:?}");
    assert_eq!(fell_back[0].kind, DegradationKind::ProviderFailed);
    assert!(
        fell_back[0]
            .message
            .contains("down failed: 503 from upstream; fell back to provider alices-web"),
        "{}",
        fell_back[0].message
    );

    // With no provider after it, the kind fails and says why.
    let mut alone = config(Arc::clone(&backend), Some(embedder()));
    alone.kinds.insert(SourceKind::Web);
    alone.providers.push(flaky());
    let h = hydrate(
        &alone,
        &input(chat_scope("alice"), request(OBSERVATION, 8000)),
    )
    .await
    .unwrap();
    let report = report_of(&h);
    assert_eq!(report.status, SourceStatus::Failed, "{report:?}");
    assert_eq!(report.provider.as_deref(), Some("flaky-web"));
    assert!(
        h.degradations
            .iter()
            .any(|d| d.source == Some(SourceKind::Web) && d.message.contains("503 from upstream")),
        "{:?}",
        h.degradations
    );
}
