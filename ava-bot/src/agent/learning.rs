//! Learning and undo: facts learned from each exchange in the background, one learner at a
//! time per place facts are kept (in this process and through a lease in the store), what
//! `/undo` can take back, and the facts listed as people see them.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;

use anyhow::Context;
use hydrate::preview;
use hydrate::{Exchange, FactExtractor};
use memory_core::{
    ConsolidationReport, Filter, MemoryBackend, MemoryId, MemoryKind, Scope, Timestamp,
};

use super::{Agent, Audience};

/// What `/undo` can take back of one learning, kept in the store as a record of kind
/// [`LEARNED_KIND`] where the facts are kept (so it survives a restart and reaches every
/// replica): the facts to end and those to hold again, and in a group the member whose
/// message taught them (only they may take it back). A record with nothing to do marks the
/// member's last learning as taken back.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub(super) struct Learned {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    member: Option<String>,
    #[serde(default)]
    end: Vec<MemoryId>,
    #[serde(default)]
    restore: Vec<MemoryId>,
}

impl Learned {
    /// What undoing `report` takes: added and replacing facts end, replaced and ended ones
    /// hold again.
    fn of(report: &ConsolidationReport, member: Option<&memory_core::Tag>) -> Self {
        Self {
            member: member.map(|t| t.as_str().to_owned()),
            end: report
                .added
                .iter()
                .copied()
                .chain(report.superseded.iter().map(|s| s.new))
                .collect(),
            restore: report
                .superseded
                .iter()
                .map(|s| s.old)
                .chain(report.invalidated.iter().map(|i| i.id))
                .collect(),
        }
    }

    /// The facts it names: those it would end and those it would restore.
    fn facts(&self) -> Vec<MemoryId> {
        self.end.iter().chain(&self.restore).copied().collect()
    }

    /// Keeps it as the newest learning of `scope`, quoting `facts` (a learning's record goes
    /// when one of its facts is deleted: then there is nothing whole to take back); a
    /// failure is logged (only `/undo` loses).
    async fn keep(&self, store: &dyn MemoryBackend, scope: &Scope, facts: &[MemoryId]) {
        let kept = match serde_json::to_string(self) {
            Ok(body) => store
                .keep_record(
                    scope,
                    memory_core::Record::new(LEARNED_KIND, Timestamp::now(), body)
                        .quoting(facts.iter().copied()),
                    LEARNED_KEPT,
                )
                .await
                .map_err(|e| memory_core::ErrorChain(&e).to_string()),
            Err(e) => Err(e.to_string()),
        };
        if let Err(e) = kept {
            tracing::warn!(scope = %scope, error = %e, "could not note what was learned; /undo cannot take it back");
        }
    }
}

/// The record kind of what learning changed ([`Learned`]).
pub(super) const LEARNED_KIND: &str = "learned";

/// How many learnings a place facts are kept remembers for `/undo` (members of a group
/// each take back their own newest).
pub(super) const LEARNED_KEPT: usize = 50;

/// At most this many facts are listed (`/facts`, `ava facts`, MCP `facts`): the newest.
pub(crate) const MAX_FACTS_LISTED: usize = 100;

/// The facts that hold now in `scopes`, oldest first: what `/facts`, `ava facts` and MCP's
/// `facts` number from 1.
pub(crate) async fn current_facts(
    store: &dyn MemoryBackend,
    scopes: &[Scope],
) -> anyhow::Result<Vec<memory_core::MemoryEntry>> {
    let now = Timestamp::now();
    let filter = Filter {
        kinds: vec![MemoryKind::Fact],
        ..Filter::default()
    };
    let mut facts = Vec::new();
    for scope in scopes {
        // The newest first, then only those that hold now (whatever the store filters).
        let recent = store
            .recent(scope, MAX_FACTS_LISTED.saturating_mul(2), &filter)
            .await
            .context("read the facts")?;
        facts.extend(recent.into_iter().filter(|f| f.is_valid_at(now)));
    }
    facts.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.id.cmp(&b.id)));
    let excess = facts.len().saturating_sub(MAX_FACTS_LISTED);
    facts.drain(..excess);
    Ok(facts)
}

/// The memory `id` as the first of `scopes` that holds it has it (an id belongs to one
/// scope); `None` when none does.
pub(crate) async fn find_memory(
    store: &dyn MemoryBackend,
    scopes: &[Scope],
    id: MemoryId,
) -> Option<memory_core::MemoryEntry> {
    for scope in scopes {
        if let Ok(entry) = store.get(scope, id).await {
            return Some(entry);
        }
    }
    None
}

/// Facts for people, numbered from 1: the text, the day, and where each came from.
pub(crate) fn render_facts(facts: &[memory_core::MemoryEntry]) -> String {
    if facts.is_empty() {
        return "I hold no facts about you here.".to_owned();
    }
    let mut out = String::new();
    for (i, f) in facts.iter().enumerate() {
        let how = match f.context.as_deref() {
            Some(c) if c.starts_with("learned from") => "learned from a message of yours",
            Some(c) if !c.trim().is_empty() => c,
            _ => f.source.as_deref().unwrap_or("told"),
        };
        let place = if f.scope.is_user_wide() {
            "yours in every private chat"
        } else {
            "this chat only"
        };
        let _ = writeln!(
            out,
            "{}. {} ({}, {}; {place})",
            i + 1,
            preview(&f.content, 200),
            f.created_at.to_datetime().format("%Y-%m-%d"),
            preview(how, 60)
        );
    }
    out
}

/// One learning lock per place facts are kept, made when first needed and dropped when
/// idle, so exchanges of one person are learned in order and different people in parallel.
/// Across processes sharing the store the turn is a lease in it (`learn:<scope>`, see
/// `learn`).
#[derive(Debug, Default)]
pub(crate) struct Learners(std::sync::Mutex<HashMap<Scope, Arc<tokio::sync::Mutex<()>>>>);

impl Learners {
    pub(super) fn lock_for(&self, scope: &Scope) -> Arc<tokio::sync::Mutex<()>> {
        let mut map = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // A lock no learner holds or waits for is idle.
        map.retain(|_, lock| Arc::strong_count(lock) > 1);
        Arc::clone(map.entry(scope.clone()).or_default())
    }
}

/// One exchange as the learner takes it ([`learn`]).
pub(super) struct Heard {
    /// Where the message was kept and its id (its first part): learning waits its turn, and
    /// a message forgotten or erased meanwhile teaches nothing.
    pub(super) message: Option<(Scope, MemoryId)>,
    /// In a group, the member who said it: what is learned is tagged as theirs.
    pub(super) member: Option<memory_core::Tag>,
    pub(super) user: String,
    pub(super) reply: Option<String>,
    pub(super) at: Timestamp,
    pub(super) source: String,
}

/// Learns facts from one exchange into the first of `scopes` (after the exchanges before
/// it there; see [`FactExtractor::learn`]) and logs what changed and how long it waited for
/// its turn; a failure changes nothing and is logged. Its turn is the scope's learning
/// lease, which erasing takes too ([`crate::erase`]): when the message is gone once the
/// turn comes (forgotten, wiped, erased), nothing is learned from it.
pub(super) async fn learn(
    extractor: FactExtractor,
    one_at_a_time: Arc<tokio::sync::Mutex<()>>,
    store: Arc<dyn MemoryBackend>,
    told: tokio::sync::oneshot::Sender<bool>,
    scopes: Vec<Scope>,
    heard: Heard,
) {
    let Heard {
        message,
        member,
        user,
        reply,
        at,
        source,
    } = heard;
    let Some(scope) = scopes.first() else {
        return;
    };
    let queued = std::time::Instant::now();
    let _turn = one_at_a_time.lock().await;
    // Other processes on the store (replicas, a CLI beside a bot) take turns through it.
    let lease = learning_lease(scope);
    let ttl =
        (extractor.timeout().saturating_mul(2) + LEARNING_MARGIN).min(memory_core::MAX_LEASE_TTL);
    let Some(leased) = take_turn(&*store, &lease, ttl).await else {
        tracing::warn!(
            scope = %scope,
            "another process kept learning this person's facts too long; this exchange's facts were not learned"
        );
        let _ = told.send(false);
        return;
    };
    let waited_ms = u64::try_from(queued.elapsed().as_millis()).unwrap_or(u64::MAX);
    tracing::debug!(scope = %scope, waited_ms, "learning facts from an exchange");
    let exchange = Exchange {
        user: &user,
        assistant: reply.as_deref(),
        at,
        source: &source,
        member: member.as_ref(),
    };
    let gone = match &message {
        Some((kept_in, id)) => matches!(
            store.get(kept_in, *id).await,
            Err(memory_core::MemoryError::NotFound { .. })
        ),
        None => false,
    };
    let mut changed = false;
    let outcome = if gone {
        tracing::info!(scope = %scope, "the message was deleted before its facts were learned; nothing learned");
        Ok(memory_core::ConsolidationReport::default())
    } else {
        extractor.learn(&*store, &scopes, exchange).await
    };
    match outcome {
        Ok(report) if report.is_empty() => {}
        Ok(report) => {
            changed = !(report.added.is_empty()
                && report.superseded.is_empty()
                && report.invalidated.is_empty());
            crate::shared::metrics::facts_learned(report.added.len());
            tracing::info!(
                scope = %scope,
                waited_ms,
                added = report.added.len(),
                superseded = report.superseded.len(),
                invalidated = report.invalidated.len(),
                "learned facts from the exchange"
            );
            for f in &report.failed {
                tracing::warn!(scope = %scope, "a learned fact was not saved: {f}");
            }
            if changed {
                let learned = Learned::of(&report, member.as_ref());
                learned.keep(&*store, scope, &learned.facts()).await;
            }
        }
        Err(e) => tracing::warn!(
            scope = %scope,
            error = %memory_core::ErrorChain(&e),
            "fact extraction failed; no memory was changed"
        ),
    }
    if leased
        && let Err(e) = store
            .release_lease(&lease, memory_core::process_holder())
            .await
    {
        // It runs out by itself.
        tracing::warn!(scope = %scope, error = %memory_core::ErrorChain(&e), "could not end the learning lease");
    }
    // Nobody may be listening (the CLI, a bot that does not react).
    let _ = told.send(changed);
}

/// The lease under which one process at a time learns the facts of `scope`'s exchanges: the
/// facade's name, which erasing ends.
pub(crate) use ava_memory::erase::learning_lease;

/// What a learning lease allows beyond its two model calls (reading and writing facts).
pub(super) const LEARNING_MARGIN: std::time::Duration = std::time::Duration::from_secs(30);

/// Waits until this process holds the lease `name` (for `ttl`), polling the store, for at
/// most four `ttl`s (a holder that died loses it after one). `Some(true)` once held;
/// `Some(false)` when the store cannot lease (it is read-only or failing: the write that
/// follows says why), so the in-process turn alone orders learning; `None` when others
/// kept it the whole time.
pub(super) async fn take_turn(
    store: &dyn MemoryBackend,
    name: &str,
    ttl: std::time::Duration,
) -> Option<bool> {
    let deadline = std::time::Instant::now() + ttl.saturating_mul(4);
    let mut pause = std::time::Duration::from_millis(20);
    loop {
        match store
            .try_lease(name, memory_core::process_holder(), ttl)
            .await
        {
            Ok(true) => return Some(true),
            Ok(false) if std::time::Instant::now() < deadline => {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(std::time::Duration::from_millis(500));
            }
            Ok(false) => return None,
            Err(e) => {
                tracing::warn!(lease = name, error = %memory_core::ErrorChain(&e), "could not take a lease");
                return Some(false);
            }
        }
    }
}

impl Agent {
    /// The facts a context of `scope` heard by `audience` holds now ([`current_facts`]).
    pub(crate) async fn facts(
        &self,
        scope: &Scope,
        audience: Audience,
    ) -> anyhow::Result<Vec<memory_core::MemoryEntry>> {
        let scopes = self.ops(scope.clone(), audience).readable_scopes();
        current_facts(self.store().as_ref(), &scopes).await
    }

    /// Reverts the last change fact learning made where this context keeps facts (in a
    /// group, from the messages of `member`: a member takes back only what was learned from
    /// them): a fact it added ends, one it replaced holds again (and its replacement ends),
    /// one it ended holds again. Nothing is deleted: the history keeps every version. What
    /// can be taken back is kept in the store ([`Learned`]), so it survives a restart and
    /// any replica can take it back. `None` when learning changed nothing here (among the
    /// newest [`LEARNED_KEPT`] learnings, or since the last undo); otherwise one line per
    /// fact, saying what became of it.
    pub(crate) async fn undo_learning(
        &self,
        scope: &Scope,
        audience: Audience,
        member: Option<&memory_core::Tag>,
    ) -> anyhow::Result<Option<Vec<String>>> {
        let ops = self.ops(scope.clone(), audience);
        let home = ops.facts_scope();
        let store = self.store().as_ref();
        let who = member.map(|t| t.as_str().to_owned());
        let newest = store
            .records(&home, LEARNED_KIND, LEARNED_KEPT)
            .await
            .context("read what I learned")?
            .into_iter()
            .filter_map(|r| serde_json::from_str::<Learned>(&r.body).ok())
            .find(|l| l.member == who);
        let Some(learned) = newest.filter(|l| !(l.end.is_empty() && l.restore.is_empty())) else {
            return Ok(None);
        };
        // Taken back once: the member's newest learning is now this empty one, which goes
        // with the same facts as the one it takes back.
        Learned {
            member: who,
            ..Learned::default()
        }
        .keep(store, &home, &learned.facts())
        .await;
        let scopes = ops.readable_scopes();
        let now = Timestamp::now();
        // Where the fact `id` is, and its text.
        let find = async |id: MemoryId| find_memory(store, &scopes, id).await;
        let mut done = Vec::new();
        for &id in &learned.end {
            if let Some(e) = find(id).await {
                let line = match memory_core::invalidate(store, &e.scope, id, now).await {
                    Ok(_) => format!("no longer: {}", preview(&e.content, 120)),
                    Err(err) => format!("left as it is ({err}): {}", preview(&e.content, 120)),
                };
                done.push(line);
            }
        }
        for &id in &learned.restore {
            if let Some(e) = find(id).await {
                let line = match memory_core::restore(store, &e.scope, id).await {
                    Ok(_) => format!("holds again: {}", preview(&e.content, 120)),
                    Err(err) => format!("left as it is ({err}): {}", preview(&e.content, 120)),
                };
                done.push(line);
            }
        }
        Ok(Some(done))
    }
}
