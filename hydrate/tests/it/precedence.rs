//! Precedence rules, tested directly: which source serves a kind (explicit sources, then
//! providers in order, and `supports` needing both a declared capability and a builder),
//! which option value wins (runtime > request > app state > defaults), identity checks, and
//! that auth secrets never show in `Debug` output.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test fails loudly on an unexpected error"
)]

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use async_trait::async_trait;
use common::{OBSERVATION, chat_scope, config, embedder, input, request, seed_alice};
use hydrate::{
    Auth, BuildContext, ContextSource, DegradationKind, KindLimits, OptionOrigin,
    ProviderCapabilities, ProviderConfig, ProviderIdentity, ProviderOptions, Secret, SourceBuilder,
    SourceItem, SourceKind, SourceOutput, SourceProvider, SourceQuery, SourceStatus, hydrate,
    memory_provider, plan_sources, resolve_options,
};
use memory_core::MemoryBackend;
use memory_inmem::InMemoryBackend;
use serde_json::json;

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
    let options = p.resolve(None, None);
    assert!(p.build(Knowledge, &options).unwrap().is_none());
    assert_eq!(
        p.build(Temporal, &options).unwrap().unwrap().name(),
        "p/temporal"
    );
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

#[test]
fn option_precedence_is_runtime_request_app_default() {
    let defaults = ProviderOptions::new()
        .with("a", "default")
        .with("b", "default")
        .with("c", "default")
        .with("d", "default");
    let app = ProviderOptions::new()
        .with("b", "app")
        .with("c", "app")
        .with("d", "app");
    let req = ProviderOptions::new()
        .with("c", "request")
        .with("d", "request");
    let runtime = ProviderOptions::new()
        .with("d", "runtime")
        .with("e", "runtime");
    let r = resolve_options(&defaults, Some(&app), Some(&req), &runtime);
    let got: Vec<(&str, &str, OptionOrigin)> = r
        .iter()
        .map(|(k, o)| (k, o.value.as_str().unwrap(), o.origin))
        .collect();
    assert_eq!(
        got,
        vec![
            ("a", "default", OptionOrigin::Default),
            ("b", "app", OptionOrigin::AppState),
            ("c", "request", OptionOrigin::Request),
            ("d", "runtime", OptionOrigin::Runtime),
            ("e", "runtime", OptionOrigin::Runtime),
        ]
    );
    // Missing layers are skipped, not treated as empty overrides of lower ones.
    let r = resolve_options(&defaults, None, Some(&req), &ProviderOptions::new());
    assert_eq!(r.origin("b"), Some(OptionOrigin::Default));
    assert_eq!(r.origin("c"), Some(OptionOrigin::Request));
}

async fn alice() -> Arc<dyn MemoryBackend> {
    let backend: Arc<dyn MemoryBackend> = Arc::new(InMemoryBackend::new(Some(embedder())));
    seed_alice(backend.as_ref()).await;
    backend
}

/// The same rule end to end: the memory provider's `search` option comes from the request
/// over app state, and runtime options beat both.
#[tokio::test]
async fn hydrate_applies_option_precedence() {
    let backend = alice().await;
    let name = memory_provider(Arc::clone(&backend), None)
        .name()
        .to_owned();
    let base = config(Arc::clone(&backend), Some(embedder())).with_app_options(
        &name,
        ProviderOptions::new()
            .with("search", "semantic")
            .with("record_access", false),
    );
    let with_request = input(chat_scope("alice"), request(OBSERVATION, 8000))
        .with_provider_options(&name, ProviderOptions::new().with("search", "keyword"));

    let h = hydrate(&base, &with_request).await.unwrap();
    let semantic = h
        .sources
        .iter()
        .find(|s| s.kind == SourceKind::Semantic)
        .unwrap();
    assert_eq!(semantic.search.as_deref(), Some("keyword"));
    assert_eq!(
        semantic.options.origin("search"),
        Some(OptionOrigin::Request)
    );
    assert_eq!(
        semantic.options.origin("record_access"),
        Some(OptionOrigin::AppState)
    );
    assert_eq!(
        semantic.options.origin("user_knowledge"),
        Some(OptionOrigin::Default)
    );

    let mut runtime = base.clone();
    runtime.providers = vec![
        memory_provider(Arc::clone(&backend), Some(embedder()))
            .with_options(ProviderOptions::new().with("search", "hybrid")),
    ];
    let h = hydrate(&runtime, &with_request).await.unwrap();
    let semantic = h
        .sources
        .iter()
        .find(|s| s.kind == SourceKind::Semantic)
        .unwrap();
    assert_eq!(semantic.search.as_deref(), Some("hybrid"));
    assert_eq!(
        semantic.options.origin("search"),
        Some(OptionOrigin::Runtime)
    );
}

/// A bad option value does not fail the request: that provider's branches are reported.
#[tokio::test]
async fn bad_options_are_reported_per_branch() {
    let backend = alice().await;
    let name = memory_provider(Arc::clone(&backend), None)
        .name()
        .to_owned();
    let cfg = config(Arc::clone(&backend), Some(embedder()))
        .with_app_options(&name, ProviderOptions::new().with("search", json!(3)));
    let h = hydrate(
        &cfg,
        &input(chat_scope("alice"), request(OBSERVATION, 8000)),
    )
    .await
    .unwrap();
    assert!(h.sources.iter().all(|s| s.status == SourceStatus::Failed));
    let d = h
        .degradations
        .iter()
        .find(|d| d.kind == DegradationKind::ProviderFailed)
        .unwrap();
    assert!(
        d.message
            .contains("option `search` is 3, expected a string"),
        "{d}"
    );
}

/// A provider configured for another owner is never used for this scope.
#[tokio::test]
async fn identity_must_admit_the_scope() {
    let backend = alice().await;
    let bob_only = ProviderConfig {
        identity: ProviderIdentity {
            owner: Some("bob".into()),
            ..ProviderIdentity::default()
        },
        ..ProviderConfig::default()
    };
    assert!(bob_only.identity.admits(&chat_scope("bob")));
    assert!(!bob_only.identity.admits(&chat_scope("alice")));
    assert!(ProviderIdentity::of_scope(&chat_scope("alice")).admits(&chat_scope("alice")));
    let mut cfg = config(Arc::clone(&backend), Some(embedder()));
    cfg.providers = vec![memory_provider(Arc::clone(&backend), None).with_config(bob_only)];
    let h = hydrate(
        &cfg,
        &input(chat_scope("alice"), request(OBSERVATION, 8000)),
    )
    .await
    .unwrap();
    assert!(
        h.ir.sections()
            .iter()
            .all(|s| !s.id().contains(':') || s.id().starts_with("state:"))
    );
    assert_eq!(
        h.degradations
            .iter()
            .filter(|d| d.kind == DegradationKind::IdentityMismatch)
            .count(),
        3
    );
}

#[test]
fn auth_is_redacted_everywhere_it_can_be_printed() {
    let mut opaque = BTreeMap::new();
    opaque.insert("api_key".to_owned(), Secret::new("sk-live-SECRET-123"));
    for auth in [
        Auth::Env("SECRET_VAR_NAME_XYZ".into()),
        Auth::IdentityKey("vault/SECRET-key-path".into()),
        Auth::Opaque(opaque),
    ] {
        let cfg = ProviderConfig {
            auth,
            ..ProviderConfig::default()
        };
        let p = SourceProvider::new("web", ProviderCapabilities::new([SourceKind::Web]))
            .with_config(cfg.clone());
        let hc = hydrate::HydrationConfig::new("sys", common::tokenizer()).with_provider(p.clone());
        for text in [
            format!("{cfg:?}"),
            format!("{cfg:#?}"),
            format!("{p:?}"),
            format!("{hc:?}"),
        ] {
            assert!(!text.contains("SECRET"), "{text}");
            assert!(text.contains("redacted"), "{text}");
        }
    }
    assert_eq!(
        format!("{:?}", Secret::new("hunter2")),
        "Secret(<redacted>)"
    );
}

#[test]
fn env_auth_reads_the_variable_and_names_it_when_missing() {
    let err = Auth::Env("AVA_HYDRATE_TEST_UNSET_VARIABLE".into())
        .env_secret()
        .unwrap_err();
    assert!(
        err.to_string().contains("AVA_HYDRATE_TEST_UNSET_VARIABLE"),
        "{err}"
    );
    assert!(Auth::None.env_secret().unwrap().is_none());
    let path = Auth::Env("PATH".into()).env_secret().unwrap().unwrap();
    assert!(!path.expose().is_empty());
}

/// A source that fails at once, having found nothing.
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

/// A web provider working only for `owner`.
fn web_for(name: &'static str, owner: &str) -> SourceProvider {
    provider(name, &[SourceKind::Web], &[SourceKind::Web]).with_config(ProviderConfig {
        identity: ProviderIdentity {
            owner: Some(owner.into()),
            ..ProviderIdentity::default()
        },
        ..ProviderConfig::default()
    })
}

/// Routing: a provider whose identity does not admit the scope is passed over for the next
/// that does (no degradation: that is routing), and a provider that fails falls back to the
/// next one of its kind (a degradation saying so).
#[tokio::test]
async fn identity_routes_and_a_failing_provider_falls_back_to_the_next() {
    let backend = alice().await;
    let mut cfg = config(Arc::clone(&backend), Some(embedder()));
    cfg.kinds.insert(SourceKind::Web);
    cfg.providers.push(web_for("bobs-web", "bob"));
    cfg.providers.push(
        SourceProvider::new("flaky-web", ProviderCapabilities::new([SourceKind::Web]))
            .with_builder(SourceKind::Web, Arc::new(DownBuilder)),
    );
    cfg.providers.push(web_for("alices-web", "alice"));
    let web = |h: &hydrate::Hydrated| {
        h.sources
            .iter()
            .find(|s| s.kind == SourceKind::Web)
            .unwrap()
            .clone()
    };
    for (user, served_by) in [("alice", "alices-web"), ("bob", "bobs-web")] {
        let h = hydrate(&cfg, &input(chat_scope(user), request(OBSERVATION, 8000)))
            .await
            .unwrap();
        let report = web(&h);
        assert_eq!(report.status, SourceStatus::Complete, "{report:?}");
        assert_eq!(report.provider.as_deref(), Some(served_by), "{user}");
        assert_eq!(report.returned, 1);
        let fell_back: Vec<_> = h
            .degradations
            .iter()
            .filter(|d| d.source == Some(SourceKind::Web))
            .collect();
        assert!(
            h.degradations
                .iter()
                .all(|d| d.kind != DegradationKind::IdentityMismatch),
            "{:?}",
            h.degradations
        );
        if user == "alice" {
            // bobs-web passed over, flaky-web tried and failed, alices-web served.
            assert_eq!(fell_back.len(), 1, "{fell_back:?}");
            assert_eq!(fell_back[0].kind, DegradationKind::ProviderFailed);
            assert!(
                fell_back[0]
                    .message
                    .contains("down failed: 503 from upstream; fell back to provider alices-web"),
                "{}",
                fell_back[0].message
            );
            assert_eq!(report.source.as_deref(), Some("alices-web/web"));
        } else {
            assert!(fell_back.is_empty(), "{fell_back:?}");
        }
    }
    // Nobody admits carol: the kind fails and says why.
    let h = hydrate(
        &cfg,
        &input(chat_scope("carol"), request(OBSERVATION, 8000)),
    )
    .await
    .unwrap();
    let report = web(&h);
    // flaky-web admits everyone, so it runs, fails, and nobody is left to fall back to.
    assert_eq!(report.status, SourceStatus::Failed, "{report:?}");
    assert_eq!(report.provider.as_deref(), Some("flaky-web"));
}

/// Web results with falling similarity; remembers how many items it was asked for.
#[derive(Debug, Default)]
struct Ranked(std::sync::atomic::AtomicUsize);

const RANKED: [f32; 5] = [0.9, 0.8, 0.6, 0.4, 0.3];

#[async_trait]
impl ContextSource for Ranked {
    fn name(&self) -> &str {
        "ranked"
    }

    async fn fetch(&self, query: &SourceQuery<'_>, out: &mut SourceOutput) -> hydrate::Result<()> {
        self.0
            .store(query.params.max_items, std::sync::atomic::Ordering::SeqCst);
        for (i, s) in RANKED.iter().enumerate() {
            out.push(
                SourceItem::text(format!("r{i}"), format!("result {i} about red lentil dal"))
                    .with_similarity(*s),
            );
        }
        Ok(())
    }
}

#[derive(Debug)]
struct RankedBuilder(Arc<Ranked>);

impl SourceBuilder for RankedBuilder {
    fn build(&self, _ctx: &BuildContext<'_>) -> hydrate::Result<Arc<dyn ContextSource>> {
        Ok(Arc::clone(&self.0) as Arc<dyn ContextSource>)
    }
}

fn ranked_web(name: &'static str, limits: Option<KindLimits>) -> (SourceProvider, Arc<Ranked>) {
    let source = Arc::new(Ranked::default());
    let mut caps = ProviderCapabilities::new([SourceKind::Web]);
    if let Some(l) = limits {
        caps = caps.with_limits(SourceKind::Web, l);
    }
    let p = SourceProvider::new(name, caps).with_builder(
        SourceKind::Web,
        Arc::new(RankedBuilder(Arc::clone(&source))),
    );
    (p, source)
}

/// A provider's declared limits for a kind narrow what hydrate asks of its source and keep
/// what comes back within them (items, tokens, least similarity); a fallback's own limits
/// apply to what it serves; limits that make no sense are refused for the next provider.
#[tokio::test]
async fn provider_limits_per_kind_narrow_what_is_asked_and_kept() {
    let backend = alice().await;
    let web_report = |h: &hydrate::Hydrated| {
        h.sources
            .iter()
            .find(|s| s.kind == SourceKind::Web)
            .unwrap()
            .clone()
    };
    let run = async |providers: Vec<SourceProvider>| {
        let mut cfg = config(Arc::clone(&backend), Some(embedder()));
        cfg.kinds.insert(SourceKind::Web);
        cfg.providers.extend(providers);
        hydrate(
            &cfg,
            &input(chat_scope("alice"), request(OBSERVATION, 8000)),
        )
        .await
        .unwrap()
    };

    // Items and similarity: asked for 2 (not the config's 5), the two below 0.5 dropped.
    let paged = KindLimits {
        max_items: Some(2),
        min_similarity: Some(0.5),
        ..KindLimits::NONE
    };
    let (p, source) = ranked_web("paged-web", Some(paged));
    let h = run(vec![p]).await;
    let r = web_report(&h);
    assert_eq!(source.0.load(std::sync::atomic::Ordering::SeqCst), 2);
    let params = r.params.unwrap();
    assert_eq!((params.max_items, params.threshold), (2, Some(0.5)));
    assert_eq!((r.returned, r.kept, r.over_limits), (5, 2, 3), "{r:?}");

    // Without limits: the config's 5, and nothing dropped.
    let (p, source) = ranked_web("open-web", None);
    let r = web_report(&run(vec![p]).await);
    assert_eq!(source.0.load(std::sync::atomic::Ordering::SeqCst), 5);
    assert_eq!((r.kept, r.over_limits), (5, 0), "{r:?}");

    // Tokens: room for about two of the ~10-token lines.
    let (p, _) = ranked_web(
        "tight-web",
        Some(KindLimits {
            max_tokens: Some(22),
            ..KindLimits::NONE
        }),
    );
    let r = web_report(&run(vec![p]).await);
    assert!((1..5).contains(&r.kept), "{r:?}");
    assert_eq!(r.kept + r.over_limits, 5, "{r:?}");

    // A fallback serves within its own limits.
    let down = SourceProvider::new("flaky-web", ProviderCapabilities::new([SourceKind::Web]))
        .with_builder(SourceKind::Web, Arc::new(DownBuilder));
    let (strict, _) = ranked_web(
        "strict-web",
        Some(KindLimits {
            max_items: Some(1),
            ..KindLimits::NONE
        }),
    );
    let r = web_report(&run(vec![down, strict]).await);
    assert_eq!(r.provider.as_deref(), Some("strict-web"));
    assert_eq!(r.params.unwrap().max_items, 1);
    assert_eq!((r.kept, r.over_limits), (1, 4), "{r:?}");

    // A similarity that is not one: that provider is passed for the next, saying why.
    let (bad, _) = ranked_web(
        "odd-web",
        Some(KindLimits {
            min_similarity: Some(1.5),
            ..KindLimits::NONE
        }),
    );
    let (good, _) = ranked_web("open-web", None);
    let h = run(vec![bad, good]).await;
    assert_eq!(web_report(&h).provider.as_deref(), Some("open-web"));
    assert!(
        h.degradations
            .iter()
            .any(|d| d.message.contains("odd-web declares unusable web limits")),
        "{:?}",
        h.degradations
    );
}
