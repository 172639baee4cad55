//! Source providers: one per backend, with a builder per source kind it supplies, the rule
//! that picks a source for each kind ([`plan_sources`]), and the reranker family (no-op by
//! default). Every family reaches hydrate through a provider; a source already built is
//! served by [`SourceProvider::serving`].
//!
//! # Precedence
//!
//! **Which source serves a kind:** the first provider (in config order) that
//! [supports](SourceProvider::supports) the kind (a source set with
//! [`HydrationConfig::with_source`](crate::HydrationConfig::with_source) goes first, so it
//! wins); otherwise the kind is *missing*, its branch is skipped and the explain report says
//! so. The next providers of the kind stand by should the first fail.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use serde::Serialize;

use crate::error::Result;
use crate::source::{ContextSource, Honours, SourceItem, SourceKind, SourceQuery};

/// What a provider says it can do.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ProviderCapabilities {
    /// The kinds of context it can supply.
    pub kinds: BTreeSet<SourceKind>,
    /// Which common parameters its sources apply themselves.
    pub honours: Honours,
}

impl ProviderCapabilities {
    /// Supplies `kinds`, honouring no parameter.
    pub fn new(kinds: impl IntoIterator<Item = SourceKind>) -> Self {
        Self {
            kinds: kinds.into_iter().collect(),
            honours: Honours::NONE,
        }
    }

    /// Sets which parameters its sources honour.
    pub fn with_honours(mut self, honours: Honours) -> Self {
        self.honours = honours;
        self
    }
}

/// What a builder gets when a provider makes a source for one request.
#[derive(Debug)]
pub struct BuildContext<'a> {
    /// The provider's name.
    pub provider: &'a str,
    /// The kind to build.
    pub kind: SourceKind,
}

/// Makes a provider's source of one kind for one request.
pub trait SourceBuilder: Send + Sync + fmt::Debug {
    /// Builds the source.
    fn build(&self, ctx: &BuildContext<'_>) -> Result<Arc<dyn ContextSource>>;
}

/// A source provider: a name, declared capabilities, and a builder for each kind it
/// implements.
#[derive(Clone, Debug)]
pub struct SourceProvider {
    name: String,
    capabilities: ProviderCapabilities,
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
            builders: BTreeMap::new(),
            serving: false,
        }
    }

    /// A provider of one kind whose source is already built (documents, the graph, a web
    /// search, a test's source): named after the source, honouring what it honours. It
    /// routes like any other provider: fallback applies to it too.
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

    /// The provider's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What it declares it can do.
    pub fn capabilities(&self) -> &ProviderCapabilities {
        &self.capabilities
    }

    /// Whether it can supply `kind`: true only when the kind is declared in its capabilities
    /// **and** it has a builder for it.
    pub fn supports(&self, kind: SourceKind) -> bool {
        self.capabilities.kinds.contains(&kind) && self.builders.contains_key(&kind)
    }

    /// Builds its source of `kind`, or `None` when it does not [support](Self::supports) it.
    pub fn build(&self, kind: SourceKind) -> Result<Option<Arc<dyn ContextSource>>> {
        if !self.supports(kind) {
            return Ok(None);
        }
        let Some(builder) = self.builders.get(&kind) else {
            return Ok(None);
        };
        let ctx = BuildContext {
            provider: &self.name,
            kind,
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
