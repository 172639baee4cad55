//! Gathering: who serves each wanted kind (routing over providers in precedence order), each
//! source run under its deadline with the next provider as fallback, and each source's items
//! scored, thresholded, reranked, de-duplicated by key and cut to its limits. What comes out
//! is one [`Collected`] per source, merged across sources by `hydrate`.

use std::collections::{BTreeSet, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use memory_core::{ErrorChain, MemoryError, MemoryId};

use crate::config::{HydrateInput, HydrationConfig, SHORTEST_TURN_TOKENS};
use crate::cues::QueryCues;
use crate::error::Error;
use crate::provider::{SourceProvider, plan_sources};
use crate::render;
use crate::report::{SourceReport, SourceStatus};
use crate::scoring::score_item;
use crate::source::{
    ContextSource, Degradation, DegradationKind, QueryEmbeddings, SourceItem, SourceKind,
    SourceOutput, SourceParams, SourceQuery,
};

/// One source ready to run.
struct Runnable {
    kind: SourceKind,
    source: Arc<dyn ContextSource>,
    /// The next providers of the kind (name, source), in precedence order: if the source
    /// fails before finding anything, the next one runs in what is left of the deadline.
    fallbacks: Vec<(String, Arc<dyn ContextSource>)>,
    params: SourceParams,
    /// Whether `params.max_tokens` can bind (a share of the budget below 1): only then are
    /// the kept items' tokens counted.
    token_cap: bool,
    deadline: Duration,
    report: SourceReport,
}

enum Outcome {
    Done,
    Failed(Error),
    TimedOut,
}

/// What the sources gave.
#[derive(Default)]
pub(crate) struct Gathered {
    /// Reports of the kinds that were skipped, missing or could not be built; those of the
    /// sources that ran are in `collected`.
    pub(crate) reports: Vec<SourceReport>,
    /// Everything that was served less well than asked, in the order it happened.
    pub(crate) degradations: Vec<Degradation>,
    /// Kinds whose result is partial (a missed deadline or a failure midway).
    pub(crate) partial: BTreeSet<SourceKind>,
    /// Each source's surviving items, in precedence order, before merging.
    pub(crate) collected: Vec<Collected>,
    /// Items the sources returned, before any was left out.
    pub(crate) returned: usize,
}

/// One source's items after scoring, threshold, reranking and its item limit.
pub(crate) struct Collected {
    pub(crate) kind: SourceKind,
    pub(crate) items: Vec<SourceItem>,
    pub(crate) report: SourceReport,
}

/// Runs every wanted source for `input` concurrently, each under its deadline, and collects
/// what each returned (see the module docs). A failing, slow or missing source is a
/// degradation, never an error.
pub(crate) async fn gather(
    config: &HydrationConfig,
    input: &HydrateInput,
    cues: &QueryCues,
) -> Gathered {
    let request = &input.request;
    let mut acc = Gathered::default();
    let runnables = acc.plan(config, input, cues);

    let mut embeddings = QueryEmbeddings::new(request.observation.clone());
    if let Some(v) = &input.query_vector {
        embeddings = embeddings.with_vector(v.clone());
    }
    let queries: Vec<SourceQuery<'_>> = runnables
        .iter()
        .map(|r| SourceQuery {
            kind: r.kind,
            scope: &input.scope,
            observation: &request.observation,
            goal: request.goal.as_deref(),
            params: r.params,
            strategy: &request.strategy,
            now: input.now,
            embeddings: &embeddings,
            cues,
            reach: &input.reach,
            record_access: input.record_access,
            tuning: config.memory,
        })
        .collect();
    let mut outputs: Vec<SourceOutput> = runnables.iter().map(|_| SourceOutput::new()).collect();
    let runs: Vec<_> = runnables
        .iter()
        .zip(&queries)
        .zip(outputs.iter_mut())
        .map(|((r, q), out)| run_source(r, q, out))
        .collect();
    let outcomes = join_all(runs).await;

    // In precedence order (runnables are in kind order), so the earlier kind keeps a memory
    // two sources returned.
    for (((mut r, query), out), (outcome, elapsed, served_by)) in runnables
        .into_iter()
        .zip(&queries)
        .zip(outputs)
        .zip(outcomes)
    {
        let (items, notes, search) = out.into_parts();
        if served_by > 0 {
            let (provider, source) = r.fallbacks.swap_remove(served_by - 1);
            r.report.provider = Some(provider);
            r.report.source = Some(source.name().to_owned());
            r.source = source;
        }
        r.report.elapsed_ms = (elapsed.as_secs_f64() * 1e6).round() / 1e3;
        r.report.search = search;
        r.report.returned = items.len();
        acc.returned += items.len();
        let kind = r.kind;
        acc.degradations
            .extend(notes.into_iter().map(|d| d.for_source(kind)));
        acc.outcome(&mut r, outcome, items.len());
        acc.collect(config, query, r, items).await;
    }
    acc
}

impl Gathered {
    fn degrade(&mut self, kind: SourceKind, what: DegradationKind, message: String) {
        self.degradations
            .push(Degradation::new(what, message).for_source(kind));
    }

    /// Who serves each wanted kind, with its parameters; skipped, missing and unbuildable
    /// kinds are reported here.
    fn plan(
        &mut self,
        config: &HydrationConfig,
        input: &HydrateInput,
        cues: &QueryCues,
    ) -> Vec<Runnable> {
        let strategy = &input.request.strategy;
        let disabled = |kind: SourceKind| match kind {
            // Small talk ("thanks!") has nothing to recall: only the stable part (the
            // conversation, the person's facts) comes to its prompt.
            SourceKind::Semantic | SourceKind::Graph | SourceKind::Vector | SourceKind::Web
                if cues.small_talk =>
            {
                true
            }
            // A person's documents are theirs alone: a chat others share reads none.
            SourceKind::Vector if input.reach.is_shared() => true,
            SourceKind::Temporal => strategy.temporal_window == 0,
            SourceKind::Semantic => strategy.semantic_limit == 0,
            SourceKind::Knowledge => !strategy.include_knowledge || config.knowledge_limit == 0,
            _ => config.extra_limit == 0,
        };
        let (off, wanted): (BTreeSet<SourceKind>, BTreeSet<SourceKind>) =
            config.kinds.iter().partition(|&&k| disabled(k));
        for kind in off {
            self.reports
                .push(SourceReport::new(kind, SourceStatus::Skipped));
        }
        let available = input.request.budget.available();
        let max_tokens = (f64::from(available) * config.source_token_share.clamp(0.0, 1.0)) as u32;
        let count = |n: u32| usize::try_from(n).unwrap_or(usize::MAX);
        // Search limits grow with the budget, so a larger budget holds more evidence;
        // compression then keeps what is worth most.
        let fill = match config.item_tokens {
            0 => 0,
            per_item => count(available / per_item),
        };
        let params_for = |kind: SourceKind| SourceParams {
            max_items: match kind {
                // Enough for the conversation's room, whatever the window says.
                SourceKind::Temporal => count(strategy.temporal_window).max(count(
                    config.conversation_room(available) / SHORTEST_TURN_TOKENS,
                )),
                SourceKind::Semantic => count(strategy.semantic_limit).max(fill),
                SourceKind::Knowledge => config.knowledge_limit.max(fill / 4),
                _ => config.extra_limit,
            },
            max_tokens,
            threshold: match kind {
                SourceKind::Semantic | SourceKind::Vector => {
                    Some(strategy.semantic_threshold.get() as f32)
                }
                _ => None,
            },
        };

        let mut runnables = Vec::new();
        for (kind, first) in plan_sources(&wanted, &config.providers) {
            let mut report = SourceReport::new(kind, SourceStatus::Complete);
            let Some(first) = first else {
                report.status = SourceStatus::Missing;
                self.reports.push(report);
                self.degrade(
                    kind,
                    DegradationKind::MissingProvider,
                    format!("no provider supplies {kind} context; branch skipped"),
                );
                continue;
            };
            // Routing: every provider of the kind, in precedence order. One that cannot
            // build its source is recorded and the next is tried; the first that builds
            // serves, and the rest stand by should it fail.
            let mut chain = Vec::new();
            for provider in config.providers.iter().filter(|p| p.supports(kind)) {
                match build_from_provider(provider, kind) {
                    Ok(source) => {
                        if chain.is_empty() {
                            report.provider = Some(provider.name().to_owned());
                        }
                        chain.push((provider.name().to_owned(), source));
                    }
                    Err(d) => self.degradations.push(d.for_source(kind)),
                }
            }
            if chain.is_empty() {
                report.provider = Some(first.name().to_owned());
                report.status = SourceStatus::Failed;
                self.reports.push(report);
                continue;
            }
            let (_, source) = chain.remove(0);
            let fallbacks = chain;
            report.source = Some(source.name().to_owned());
            let params = params_for(kind);
            report.params = Some(params);
            runnables.push(Runnable {
                kind,
                source,
                fallbacks,
                params,
                token_cap: config.source_token_share < 1.0,
                deadline: config.deadline_for(kind),
                report,
            });
        }
        runnables
    }

    /// Records how a fetch ended: a timeout or a failure makes the result partial (or
    /// failed, if nothing arrived) and is a degradation.
    fn outcome(&mut self, r: &mut Runnable, outcome: Outcome, arrived: usize) {
        let name = r.source.name();
        match outcome {
            Outcome::Done => {}
            Outcome::TimedOut => {
                r.report.status = SourceStatus::Partial;
                self.partial.insert(r.kind);
                let message = format!(
                    "{name} missed its {} ms deadline; kept the {arrived} item(s) it found before",
                    r.deadline.as_millis(),
                );
                self.degrade(r.kind, DegradationKind::Timeout, message);
            }
            Outcome::Failed(e) => {
                r.report.status = if arrived == 0 {
                    SourceStatus::Failed
                } else {
                    self.partial.insert(r.kind);
                    SourceStatus::Partial
                };
                tracing::warn!(source = name, kind = r.kind.as_str(), error = %ErrorChain(&e), "context source failed");
                let message = format!(
                    "{name} failed: {}; kept the {arrived} item(s) it found before",
                    failure(&e)
                );
                self.degrade(r.kind, DegradationKind::SourceFailed, message);
            }
        }
    }

    /// Scores, filters and reranks one source's items, removes repeats within it and
    /// applies its item limit. Items found by several sources are merged later
    /// ([`Gathered::merge`]), so no source loses an item to a weaker copy of it.
    async fn collect(
        &mut self,
        config: &HydrationConfig,
        query: &SourceQuery<'_>,
        r: Runnable,
        mut items: Vec<SourceItem>,
    ) {
        let Runnable {
            kind,
            source,
            params,
            token_cap,
            mut report,
            ..
        } = r;
        let score = |items: &mut [SourceItem]| {
            for item in items {
                score_item(
                    item,
                    query.now,
                    query.strategy.recency_decay,
                    config.scoring,
                );
            }
        };
        score(&mut items);
        let before = items.len();
        if !source.honours().threshold
            && let Some(t) = params.threshold
        {
            items.retain(|i| i.similarity.is_none_or(|s| s >= t));
        }
        let mut over_limits = before - items.len();
        // The question's cues lift what matches them before the limit, as they lift its
        // relevance when compiling: a source's extra searches for them (the asked time, the
        // user's own words) bring candidates that are not then cut for ranking lower on
        // similarity alone.
        if !query.cues.is_empty() {
            for item in &mut items {
                let m = query.cues.lifting(
                    &item.content,
                    item.created_at,
                    item.role,
                    config.cue_weights,
                );
                if m.any() {
                    item.score = m.lift(f64::from(item.score), config.cue_weights) as f32;
                }
            }
        }
        rank(kind, &mut items);
        if kind != SourceKind::Temporal && items.len() > 1 {
            let n = items.len();
            // Under the kind's deadline, like its source.
            let deadline = config.deadline_for(kind);
            match tokio::time::timeout(deadline, config.reranker.rerank(query, items.clone())).await
            {
                Ok(Ok(reranked)) => {
                    over_limits += n.saturating_sub(reranked.len());
                    items = reranked;
                    // A reranker may set a new similarity: score again, in its order.
                    score(&mut items);
                }
                Ok(Err(e)) => {
                    let message = format!(
                        "reranker {} failed: {}; kept the scored order",
                        config.reranker.name(),
                        failure(&e)
                    );
                    self.degrade(kind, DegradationKind::RerankFailed, message);
                }
                Err(_) => {
                    let message = format!(
                        "reranker {} did not answer within {deadline:?}; kept the scored order",
                        config.reranker.name()
                    );
                    self.degrade(kind, DegradationKind::RerankFailed, message);
                }
            }
        }
        // Limits are applied here even when the source honours them: applying a limit
        // twice is harmless.
        let mut keys: HashSet<String> = HashSet::new();
        let mut kept = Vec::with_capacity(items.len().min(params.max_items));
        // A memory an earlier kind already holds (a search hit that is also in the recent
        // conversation) is kept, so the merge learns how well it matched, but does not take
        // one of this source's places: sources over-fetch for exactly these.
        let earlier: HashSet<MemoryId> = self
            .collected
            .iter()
            .flat_map(|c| c.items.iter().filter_map(|i| i.memory_id))
            .collect();
        let mut counted = 0usize;
        // The token cap is counted only when it can bind (counting costs a tokenizer pass).
        let capped = token_cap;
        let mut tokens = 0u32;
        for item in items {
            if !keys.insert(item.key.clone()) {
                report.duplicates += 1;
                continue;
            }
            if item.memory_id.is_some_and(|id| earlier.contains(&id)) {
                kept.push(item);
                continue;
            }
            if counted >= params.max_items {
                over_limits += 1;
                continue;
            }
            if capped {
                let t = config.tokenizer.count(&render::item_line(kind, &item));
                if tokens.saturating_add(t) > params.max_tokens {
                    over_limits += 1;
                    continue;
                }
                tokens = tokens.saturating_add(t);
            }
            counted += 1;
            kept.push(item);
        }
        report.over_limits = over_limits;
        tracing::debug!(
            gen_ai.source.kind = kind.as_str(),
            gen_ai.source.name = source.name(),
            gen_ai.source.status = ?report.status,
            gen_ai.source.returned = report.returned,
            gen_ai.source.kept = kept.len(),
            duration_ms = report.elapsed_ms,
            "context source"
        );
        self.collected.push(Collected {
            kind,
            items: kept,
            report,
        });
    }
}

/// Builds a provider's source for this request, or says why it cannot be used.
fn build_from_provider(
    provider: &SourceProvider,
    kind: SourceKind,
) -> std::result::Result<Arc<dyn ContextSource>, Degradation> {
    match provider.build(kind) {
        Ok(Some(source)) => Ok(source),
        Ok(None) => Err(Degradation::new(
            DegradationKind::ProviderFailed,
            format!("provider {} built no {kind} source", provider.name()),
        )),
        Err(e) => Err(Degradation::new(
            DegradationKind::ProviderFailed,
            format!(
                "provider {} could not build its {kind} source: {}",
                provider.name(),
                ErrorChain(&e)
            ),
        )),
    }
}

/// Best first: the conversation by time (newest first), everything else by score; ties by
/// key, so the order is deterministic.
fn rank(kind: SourceKind, items: &mut [SourceItem]) {
    if kind == SourceKind::Temporal {
        items.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(a.key.cmp(&b.key)));
    } else {
        items.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.key.cmp(&b.key)));
    }
}

/// Why a source or reranker failed, said once and whole: its own message and every cause,
/// without the error's "source `name` failed" or "`backend` failed" head, which the
/// degradation's "`source` failed:" says already.
fn failure(e: &Error) -> String {
    let (own, cause) = match e {
        Error::Source {
            message, source, ..
        }
        | Error::Memory(MemoryError::Backend {
            message, source, ..
        }) => (message.as_str(), source.as_deref()),
        other => return ErrorChain(other).to_string(),
    };
    match cause {
        Some(c) if own.is_empty() => ErrorChain(c).to_string(),
        Some(c) => format!("{own}: {}", ErrorChain(c)),
        None if own.is_empty() => ErrorChain(e).to_string(),
        None => own.to_owned(),
    }
}

/// Runs a kind's source under its deadline; if it fails before finding anything, the next
/// provider of the kind runs in what is left of the deadline (recorded in `out`), and so on.
/// Returns how it ended, how long it took, and which ran last (0: the source itself, `i`:
/// fallback `i - 1`).
async fn run_source(
    r: &Runnable,
    query: &SourceQuery<'_>,
    out: &mut SourceOutput,
) -> (Outcome, Duration, usize) {
    let started = Instant::now();
    let fetch = async |source: &dyn ContextSource, out: &mut SourceOutput, limit: Duration| {
        match tokio::time::timeout(limit, source.fetch(query, out)).await {
            Ok(Ok(())) => Outcome::Done,
            Ok(Err(e)) => Outcome::Failed(e),
            Err(_) => Outcome::TimedOut,
        }
    };
    let mut outcome = fetch(r.source.as_ref(), out, r.deadline).await;
    let mut served_by = 0;
    let mut name = r.source.name().to_owned();
    while let Outcome::Failed(e) = &outcome
        && out.items().is_empty()
        && let Some((provider, next)) = r.fallbacks.get(served_by)
    {
        let left = r.deadline.saturating_sub(started.elapsed());
        if left.is_zero() {
            break;
        }
        out.degrade(
            DegradationKind::ProviderFailed,
            format!(
                "{name} failed: {}; fell back to provider {provider}",
                failure(e)
            ),
        );
        name = next.name().to_owned();
        outcome = fetch(next.as_ref(), out, left).await;
        served_by += 1;
    }
    (outcome, started.elapsed(), served_by)
}

/// Polls every future in turn until all are ready; outputs in input order. (A small
/// `join_all`, so the crate needs no futures dependency.)
async fn join_all<F: Future>(futures: Vec<F>) -> Vec<F::Output> {
    let mut futures: Vec<Pin<Box<F>>> = futures.into_iter().map(Box::pin).collect();
    let mut outputs: Vec<Option<F::Output>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (future, slot) in futures.iter_mut().zip(outputs.iter_mut()) {
            if slot.is_none() {
                match future.as_mut().poll(cx) {
                    Poll::Ready(v) => *slot = Some(v),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    outputs.into_iter().flatten().collect()
}
