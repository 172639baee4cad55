//! Source providers: one per backend, with a builder per source kind it supplies, a
//! [`ProviderConfig`] (identity, options, auth), option precedence, the rule that picks a
//! source for each kind ([`plan_sources`]), and the reranker family (no-op by default).
//! Every family reaches hydrate through a provider; a source already built is served by
//! [`SourceProvider::serving`].
//!
//! # Precedence
//!
//! - **Which source serves a kind:** the first provider (in config order) that
//!   [supports](SourceProvider::supports) the kind (a source set with
//!   [`HydrationConfig::with_source`](crate::HydrationConfig::with_source) goes first, so it
//!   wins); otherwise the kind is *missing*, its branch is skipped and the explain report
//!   says so.
//! - **A provider's options** ([`resolve_options`]): explicit runtime options (the provider's
//!   [`ProviderConfig::options`]) > the request's options for that provider > bot/app state
//!   (the hydration config's per-provider options) > the provider's defaults. Each resolved
//!   value remembers which layer it came from.
//!
//! Auth values are secrets: [`Auth`] and [`Secret`] print as `<redacted>`, are never
//! serialized, and nothing in this crate puts them in a prompt, a report or a trace.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use memory_core::Scope;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use memory_core::Secret;

use crate::error::{Error, Result};
use crate::source::{ContextSource, Honours, SourceItem, SourceKind, SourceParams, SourceQuery};

/// How a provider authenticates. Every value is treated as secret: `Debug` shows only the
/// variant (and, for `Opaque`, how many entries), never names or values.
#[derive(Clone, Default, PartialEq, Eq)]
pub enum Auth {
    /// No authentication.
    #[default]
    None,
    /// The secret is in this environment variable.
    Env(String),
    /// The secret is held by an identity store under this key.
    IdentityKey(String),
    /// Provider-specific credentials.
    Opaque(BTreeMap<String, Secret>),
}

impl Auth {
    /// Reads the secret of an [`Auth::Env`]; `None` for other variants. A variable that is not
    /// set (or not UTF-8) is an error naming the variable.
    pub fn env_secret(&self) -> Result<Option<Secret>> {
        match self {
            Auth::Env(var) => std::env::var(var)
                .map(|v| Some(Secret::new(v)))
                .map_err(|_| {
                    Error::invalid(
                        "auth",
                        format!("environment variable `{var}` is not set (or not UTF-8)"),
                    )
                }),
            _ => Ok(None),
        }
    }
}

impl fmt::Debug for Auth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Auth::None => f.write_str("None"),
            Auth::Env(_) => f.write_str("Env(<redacted>)"),
            Auth::IdentityKey(_) => f.write_str("IdentityKey(<redacted>)"),
            Auth::Opaque(map) => write!(f, "Opaque(<{} entries redacted>)", map.len()),
        }
    }
}

/// Non-secret routing keys a provider works for. A key that is set must agree with the
/// request's scope, or the provider is not used for that request (so a provider configured
/// for one owner can never serve another's request).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProviderIdentity {
    /// The tenant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// The owner (the scope's user).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// The chat.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chat: Option<String>,
    /// The thread.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread: Option<String>,
}

impl ProviderIdentity {
    /// The identity of exactly this scope.
    pub fn of_scope(scope: &Scope) -> Self {
        Self {
            tenant: Some(scope.tenant().to_owned()),
            owner: Some(scope.user().to_owned()),
            chat: scope.chat().map(str::to_owned),
            thread: scope.thread().map(str::to_owned),
        }
    }

    /// Whether every key set here agrees with `scope`.
    pub fn admits(&self, scope: &Scope) -> bool {
        self.tenant.as_deref().is_none_or(|t| t == scope.tenant())
            && self.owner.as_deref().is_none_or(|o| o == scope.user())
            && self.chat.as_deref().is_none_or(|c| Some(c) == scope.chat())
            && self
                .thread
                .as_deref()
                .is_none_or(|t| Some(t) == scope.thread())
    }
}

/// Provider-specific knobs (never secrets): a map from key to JSON value.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ProviderOptions(BTreeMap<String, Value>);

impl ProviderOptions {
    /// No options.
    pub fn new() -> Self {
        Self::default()
    }

    /// These options plus `key = value`.
    pub fn with(mut self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        self.0.insert(key.into(), value.into());
        self
    }

    /// Sets `key = value`.
    pub fn set(&mut self, key: impl Into<String>, value: impl Into<Value>) {
        self.0.insert(key.into(), value.into());
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.0.get(key)
    }

    /// Whether no option is set.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The options in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v))
    }
}

/// Which layer a resolved option came from, highest precedence first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OptionOrigin {
    /// Explicit runtime options: the provider's [`ProviderConfig::options`].
    Runtime,
    /// The request's options for this provider.
    Request,
    /// Bot/app state: the hydration config's options for this provider.
    AppState,
    /// The provider's defaults.
    Default,
}

/// One resolved option.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ResolvedOption {
    /// The value.
    pub value: Value,
    /// Where it came from.
    pub origin: OptionOrigin,
}

/// A provider's options after precedence is applied; see [`resolve_options`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ResolvedOptions(BTreeMap<String, ResolvedOption>);

impl ResolvedOptions {
    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.0.get(key).map(|o| &o.value)
    }

    /// Where the value of `key` came from.
    pub fn origin(&self, key: &str) -> Option<OptionOrigin> {
        self.0.get(key).map(|o| o.origin)
    }

    /// Every resolved option, in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &ResolvedOption)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// `key` as a boolean, if set; a value of another type is an error naming `provider`.
    pub fn bool(&self, provider: &str, key: &str) -> Result<Option<bool>> {
        self.typed(provider, key, "a boolean", Value::as_bool)
    }

    /// `key` as a string, if set.
    pub fn str(&self, provider: &str, key: &str) -> Result<Option<&str>> {
        self.typed(provider, key, "a string", Value::as_str)
    }

    /// `key` as a number, if set.
    pub fn f64(&self, provider: &str, key: &str) -> Result<Option<f64>> {
        self.typed(provider, key, "a number", Value::as_f64)
    }

    fn typed<'a, T>(
        &'a self,
        provider: &str,
        key: &str,
        expected: &'static str,
        get: impl Fn(&'a Value) -> Option<T>,
    ) -> Result<Option<T>> {
        match self.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => get(v).map(Some).ok_or_else(|| Error::BadOption {
                provider: provider.to_owned(),
                key: key.to_owned(),
                found: v.to_string(),
                expected,
            }),
        }
    }
}

/// Applies option precedence: explicit runtime options > request > bot/app state > provider
/// defaults. Keys are merged one by one, so a layer only overrides the keys it sets.
pub fn resolve_options(
    defaults: &ProviderOptions,
    app_state: Option<&ProviderOptions>,
    request: Option<&ProviderOptions>,
    runtime: &ProviderOptions,
) -> ResolvedOptions {
    let mut out = BTreeMap::new();
    let layers = [
        (Some(defaults), OptionOrigin::Default),
        (app_state, OptionOrigin::AppState),
        (request, OptionOrigin::Request),
        (Some(runtime), OptionOrigin::Runtime),
    ];
    for (layer, origin) in layers {
        for (key, value) in layer.into_iter().flat_map(ProviderOptions::iter) {
            out.insert(
                key.to_owned(),
                ResolvedOption {
                    value: value.clone(),
                    origin,
                },
            );
        }
    }
    ResolvedOptions(out)
}

/// How a provider is set up: who it works for, its explicit runtime options, and its auth.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProviderConfig {
    /// Routing keys; see [`ProviderIdentity`].
    pub identity: ProviderIdentity,
    /// Explicit runtime options: the highest-precedence layer.
    pub options: ProviderOptions,
    /// Credentials (redacted in `Debug`, never serialized).
    pub auth: Auth,
}

/// What a provider can serve of one kind per request. Hydrate asks its source for no more
/// than this ([`KindLimits::narrow`]) and keeps no more, whatever the source returns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct KindLimits {
    /// At most this many items (e.g. a search API's page size).
    pub max_items: Option<usize>,
    /// At most this many tokens of its rendered items.
    pub max_tokens: Option<u32>,
    /// Least similarity an item needs to be worth using (e.g. a web search whose weak
    /// results are noise); items without a similarity are not judged by it.
    pub min_similarity: Option<f32>,
}

impl KindLimits {
    /// No limit beyond the request's.
    pub const NONE: Self = Self {
        max_items: None,
        max_tokens: None,
        min_similarity: None,
    };

    /// `params` within these limits: the smaller item and token counts, the higher
    /// threshold.
    pub fn narrow(&self, params: SourceParams) -> SourceParams {
        SourceParams {
            max_items: self
                .max_items
                .map_or(params.max_items, |m| m.min(params.max_items)),
            max_tokens: self
                .max_tokens
                .map_or(params.max_tokens, |m| m.min(params.max_tokens)),
            threshold: match (params.threshold, self.min_similarity) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            },
        }
    }

    /// Checks the values: a similarity from 0 to 1.
    pub fn validate(&self) -> Result<()> {
        if let Some(t) = self.min_similarity
            && !(0.0..=1.0).contains(&t)
        {
            return Err(Error::invalid(
                "min_similarity",
                format!("{t} is not a similarity; expected 0 to 1"),
            ));
        }
        Ok(())
    }
}

/// What a provider says it can do.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ProviderCapabilities {
    /// The kinds of context it can supply.
    pub kinds: BTreeSet<SourceKind>,
    /// Which common parameters its sources apply themselves.
    pub honours: Honours,
    /// What it can serve of each kind; a kind not named has no limit of its own.
    pub limits: BTreeMap<SourceKind, KindLimits>,
}

impl ProviderCapabilities {
    /// Supplies `kinds`, honouring no parameter.
    pub fn new(kinds: impl IntoIterator<Item = SourceKind>) -> Self {
        Self {
            kinds: kinds.into_iter().collect(),
            honours: Honours::NONE,
            limits: BTreeMap::new(),
        }
    }

    /// Sets which parameters its sources honour.
    pub fn with_honours(mut self, honours: Honours) -> Self {
        self.honours = honours;
        self
    }

    /// Declares what it can serve of `kind`.
    pub fn with_limits(mut self, kind: SourceKind, limits: KindLimits) -> Self {
        self.limits.insert(kind, limits);
        self
    }

    /// What it can serve of `kind` ([`KindLimits::NONE`] when it declared nothing).
    pub fn limits_for(&self, kind: SourceKind) -> KindLimits {
        self.limits.get(&kind).copied().unwrap_or(KindLimits::NONE)
    }
}

/// What a builder gets when a provider makes a source for one request.
#[derive(Debug)]
pub struct BuildContext<'a> {
    /// The provider's name.
    pub provider: &'a str,
    /// The kind to build.
    pub kind: SourceKind,
    /// The provider's options after precedence.
    pub options: &'a ResolvedOptions,
    /// The provider's config (identity, auth).
    pub config: &'a ProviderConfig,
}

/// Makes a provider's source of one kind for one request.
pub trait SourceBuilder: Send + Sync + fmt::Debug {
    /// Builds the source.
    fn build(&self, ctx: &BuildContext<'_>) -> Result<Arc<dyn ContextSource>>;
}

/// A source provider: a name, declared capabilities, a config, default options, and a
/// builder for each kind it implements.
#[derive(Clone, Debug)]
pub struct SourceProvider {
    name: String,
    capabilities: ProviderCapabilities,
    config: ProviderConfig,
    defaults: ProviderOptions,
    builders: BTreeMap<SourceKind, Arc<dyn SourceBuilder>>,
    /// Made by [`SourceProvider::serving`].
    serving: bool,
}

impl SourceProvider {
    /// A provider with no builders yet.
    pub fn new(name: impl Into<String>, capabilities: ProviderCapabilities) -> Self {
        Self {
            name: name.into(),
            capabilities,
            config: ProviderConfig::default(),
            defaults: ProviderOptions::default(),
            builders: BTreeMap::new(),
            serving: false,
        }
    }

    /// A provider of one kind whose source is already built (documents, the graph, a web
    /// search, a test's source): named after the source, honouring what it honours. It
    /// routes like any other provider: identity, limits and fallback apply to it too.
    pub fn serving(kind: SourceKind, source: Arc<dyn ContextSource>) -> Self {
        let caps = ProviderCapabilities::new([kind]).with_honours(source.honours());
        let mut provider =
            Self::new(source.name(), caps).with_builder(kind, Arc::new(Built(source)));
        provider.serving = true;
        provider
    }

    /// Whether it serves a source already built ([`SourceProvider::serving`]).
    pub(crate) fn is_serving(&self) -> bool {
        self.serving
    }

    /// Adds the builder for `kind`.
    pub fn with_builder(mut self, kind: SourceKind, builder: Arc<dyn SourceBuilder>) -> Self {
        self.builders.insert(kind, builder);
        self
    }

    /// Sets the default options (the lowest-precedence layer).
    pub fn with_defaults(mut self, defaults: ProviderOptions) -> Self {
        self.defaults = defaults;
        self
    }

    /// Sets the config.
    pub fn with_config(mut self, config: ProviderConfig) -> Self {
        self.config = config;
        self
    }

    /// Sets the explicit runtime options (the highest-precedence layer).
    pub fn with_options(mut self, options: ProviderOptions) -> Self {
        self.config.options = options;
        self
    }

    /// The provider's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What it declares it can do.
    pub fn capabilities(&self) -> &ProviderCapabilities {
        &self.capabilities
    }

    /// Its config.
    pub fn config(&self) -> &ProviderConfig {
        &self.config
    }

    /// Its default options.
    pub fn defaults(&self) -> &ProviderOptions {
        &self.defaults
    }

    /// Whether it can supply `kind`: true only when the kind is declared in its capabilities
    /// **and** it has a builder for it.
    pub fn supports(&self, kind: SourceKind) -> bool {
        self.capabilities.kinds.contains(&kind) && self.builders.contains_key(&kind)
    }

    /// Its options for one request, after precedence; see [`resolve_options`].
    pub fn resolve(
        &self,
        app_state: Option<&ProviderOptions>,
        request: Option<&ProviderOptions>,
    ) -> ResolvedOptions {
        resolve_options(&self.defaults, app_state, request, &self.config.options)
    }

    /// Builds its source of `kind`, or `None` when it does not [support](Self::supports) it.
    pub fn build(
        &self,
        kind: SourceKind,
        options: &ResolvedOptions,
    ) -> Result<Option<Arc<dyn ContextSource>>> {
        if !self.supports(kind) {
            return Ok(None);
        }
        let Some(builder) = self.builders.get(&kind) else {
            return Ok(None);
        };
        let ctx = BuildContext {
            provider: &self.name,
            kind,
            options,
            config: &self.config,
        };
        builder.build(&ctx).map(Some)
    }
}

/// Picks who serves each wanted kind: the first provider (in config order) that supports
/// it, `None` when nobody does.
pub fn plan_sources<'a>(
    kinds: &BTreeSet<SourceKind>,
    providers: &'a [SourceProvider],
) -> BTreeMap<SourceKind, Option<&'a SourceProvider>> {
    kinds
        .iter()
        .map(|&kind| (kind, providers.iter().find(|p| p.supports(kind))))
        .collect()
}

/// The builder of [`SourceProvider::serving`]: hands out the source it was given.
#[derive(Debug)]
struct Built(Arc<dyn ContextSource>);

impl SourceBuilder for Built {
    fn build(&self, _ctx: &BuildContext<'_>) -> Result<Arc<dyn ContextSource>> {
        Ok(Arc::clone(&self.0))
    }
}

/// Reorders (and may rescore or filter) a source's items after scoring.
///
/// The provider family for rerankers: a cross-encoder or an LLM judge plugs in here. The
/// default, [`NoopReranker`], leaves items as they are.
#[async_trait]
pub trait Reranker: Send + Sync + fmt::Debug {
    /// A short name for reports.
    fn name(&self) -> &str;

    /// The items to keep, best first.
    async fn rerank(
        &self,
        query: &SourceQuery<'_>,
        items: Vec<SourceItem>,
    ) -> Result<Vec<SourceItem>>;
}

macro_rules! forward_reranker {
    ($($ty:ty),*) => {$(
        #[async_trait]
        impl<T: Reranker + ?Sized> Reranker for $ty {
            fn name(&self) -> &str {
                (**self).name()
            }
            async fn rerank(
                &self,
                query: &SourceQuery<'_>,
                items: Vec<SourceItem>,
            ) -> Result<Vec<SourceItem>> {
                (**self).rerank(query, items).await
            }
        }
    )*};
}

forward_reranker!(Arc<T>, Box<T>, &T);

/// The default reranker: keeps the scored order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NoopReranker;

#[async_trait]
impl Reranker for NoopReranker {
    fn name(&self) -> &str {
        "noop"
    }

    async fn rerank(
        &self,
        _query: &SourceQuery<'_>,
        items: Vec<SourceItem>,
    ) -> Result<Vec<SourceItem>> {
        Ok(items)
    }
}
