//! Erasing a person: everything Ava keeps of one user, for the facade's
//! [`Memory::erase_person`](crate::Memory::erase_person), `ava erase` and the bot's `/erase`.
//! Their own scopes (every chat and thread, their user-wide facts, their documents), and
//! their part of every group conversation (their messages, Ava's answers to them, the facts
//! they told or that were learned from their messages, and their `/share` note, found by the
//! `from:<id>` and `shares:<id>` tags; in a store from before facts carried that tag, learned
//! facts are found by the speaker their context quotes); nothing of anyone else's. The
//! prompts kept of those scopes ([`crate::prompts`]) go with the memories: the store removes
//! a scope's records with any deletion there.
//!
//! The names of the leases that stand for a person ([`learning_lease`], [`pruning_lease`],
//! [`confirmation_lease`]) and the user key of a group's shared conversation
//! ([`GROUP_USER`]) are defined here, where erasing reads them.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use memory_core::{Filter, MemoryBackend, MemoryError, Scope, Tag, TagQuery};

use crate::error::{Error, Result};

/// The user key of a group's shared conversation: its messages, the answers and the
/// group's own facts are kept in (this key, the group's chat id). Telegram user ids are
/// numbers, so no user has it.
pub const GROUP_USER: &str = "group";

/// The lease under which one process at a time learns the facts of `scope`'s exchanges.
pub fn learning_lease(scope: &Scope) -> String {
    format!("learn:{}", scope.key())
}

/// The lease under which one process at a time prunes `scope`, held until the next pruning
/// is due.
pub fn pruning_lease(scope: &Scope) -> String {
    format!("prune:{}", scope.key())
}

/// The lease that stands for a confirmation of `what` (`wipe`, `erase`) asked of `user` in
/// `chat` (the bot's `/wipe` and `/erase`).
pub fn confirmation_lease(what: &str, tenant: &str, user: &str, chat: &str) -> String {
    format!("confirm:{what}:{tenant}:{user}:{chat}")
}

/// How many of a member's group memories are read (and deleted) at a time.
const BATCH: usize = 500;

/// What erasing a person removed (or, in a dry run, would remove), per scope.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Erased {
    /// Their own scopes and how many memories each held.
    pub own: Vec<(Scope, u64)>,
    /// The groups they spoke in and how many memories there were theirs.
    pub in_groups: Vec<(Scope, u64)>,
}

impl Erased {
    /// Memories in all.
    pub fn total(&self) -> u64 {
        self.own.iter().chain(&self.in_groups).map(|(_, n)| n).sum()
    }

    /// One line per scope, for people.
    pub fn describe(&self) -> String {
        let mut out = String::new();
        for (scope, n) in &self.own {
            let what = match scope.chat() {
                None => "facts about them (every private context)".to_owned(),
                Some(hydrate::DOCUMENTS_CHAT) => "their documents".to_owned(),
                Some(chat) => format!("chat {chat}"),
            };
            let _ = writeln!(out, "{n:>6}  {what}");
        }
        for (scope, n) in &self.in_groups {
            let _ = writeln!(
                out,
                "{n:>6}  their part of group {}",
                scope.chat().unwrap_or("?")
            );
        }
        out
    }
}

/// Every lease that may name `user` and stand for them: learning and pruning their own
/// scopes, and their confirmations pending in those chats and in `groups`. Erasing them
/// ends the leases (a process then holding one loses it to the next taker, as when its time
/// runs out) and, with them, the last trace of the user's id in the store.
fn their_leases(tenant: &str, user: &str, own: &[Scope], groups: &[Scope]) -> Vec<String> {
    let mut names = Vec::new();
    for scope in own {
        names.push(learning_lease(scope));
        names.push(pruning_lease(scope));
    }
    let chats = own.iter().chain(groups).filter_map(Scope::chat);
    for chat in chats.chain([user]) {
        for what in ["wipe", "erase"] {
            names.push(confirmation_lease(what, tenant, user, chat));
        }
    }
    names.sort();
    names.dedup();
    names
}

/// How long erasing waits for a fact being learned in one of the person's places to be
/// written (it is then erased with the rest); beyond it, nothing is erased and the error
/// says so. A learner holds its turn for at most twice its model timeout and a margin.
pub const WAIT_FOR_LEARNING: Duration = Duration::from_secs(300);

/// Erases everything of `user` in `tenant` from `store` (with `apply`), or counts it (a dry
/// run); says what, per scope. Erasing first takes the learning turn of every place it
/// erases ([`learning_lease`], in this process and any other on the store), so a fact being
/// learned from the person is written before the erase (and erased) or never: a learner
/// whose message is gone once its turn comes learns nothing. Then it deletes, then ends the
/// leases that name the person (learning, pruning, confirmations).
pub async fn erase_person(
    store: &dyn MemoryBackend,
    tenant: &str,
    user: &str,
    apply: bool,
) -> Result<Erased> {
    let mut erased = Erased::default();
    let tag = |name: String| Tag::new(name).map_err(Error::store("name the user's tags"));
    let theirs = Filter {
        tags: Some(TagQuery::any([
            tag(format!("from:{user}"))?,
            tag(format!("shares:{user}"))?,
        ])),
        include_superseded: true,
        ..Filter::default()
    };
    let (own, groups) = places(store, tenant, user, &theirs).await?;
    let holder = format!("erase:{}", memory_core::MemoryId::new());
    let held = if apply {
        // Where their facts are kept is learned into even before it holds anything.
        let home = Scope::for_user(user)
            .and_then(|s| s.in_tenant(tenant))
            .map_err(Error::store("the user's scope"))?;
        let home = (!own.contains(&home)).then_some(home);
        hold_learning(store, own.iter().chain(&groups).chain(&home), &holder).await?
    } else {
        Vec::new()
    };
    let result = async {
        // What a learner wrote while we waited is erased too.
        let (own, groups) = if apply {
            places(store, tenant, user, &theirs).await?
        } else {
            (own, groups)
        };
        erase_held(store, &own, &groups, &theirs, apply, &mut erased).await?;
        Ok::<_, Error>((own, groups))
    }
    .await;
    for name in &held {
        // Ended below too when it names the person; a group's is only given back.
        if let Err(e) = store.release_lease(name, &holder).await {
            tracing::warn!(lease = name, error = %memory_core::ErrorChain(&e), "could not give back a learning turn; it runs out by itself");
        }
    }
    let (own, groups) = result?;
    if apply {
        for name in their_leases(tenant, user, &own, &groups) {
            store
                .end_lease(&name)
                .await
                .map_err(Error::store("end the leases that name the user"))?;
        }
        // No copy left where the store can reach: SQLite's log, Postgres' dead rows.
        store
            .reclaim_deleted()
            .await
            .map_err(Error::store("clear what was erased from the store's files"))?;
    }
    Ok(erased)
}

/// The person's own scopes, and the groups where they have a part (`theirs`).
async fn places(
    store: &dyn MemoryBackend,
    tenant: &str,
    user: &str,
    theirs: &Filter,
) -> Result<(Vec<Scope>, Vec<Scope>)> {
    let own = store
        .user_scopes(tenant, user)
        .await
        .map_err(Error::store("list the user's chats"))?;
    let mut groups = Vec::new();
    if user == GROUP_USER {
        // The key groups are kept under is no person: no group part to look for.
        return Ok((own, groups));
    }
    for group in store
        .user_scopes(tenant, GROUP_USER)
        .await
        .map_err(Error::store("list the groups"))?
    {
        let part = store
            .recent(&group, 1, theirs)
            .await
            .map_err(Error::in_scope("read the user's part of", &group))?;
        if !part.is_empty() {
            groups.push(group);
        }
    }
    Ok((own, groups))
}

/// Takes the learning turn of each of `scopes` as `holder`, waiting for a learner that
/// holds one; says which it took. When one stays held past [`WAIT_FOR_LEARNING`], gives
/// back those taken and fails: nothing has been erased.
async fn hold_learning<'a>(
    store: &dyn MemoryBackend,
    scopes: impl Iterator<Item = &'a Scope>,
    holder: &str,
) -> Result<Vec<String>> {
    let mut held: Vec<String> = Vec::new();
    for scope in scopes {
        let name = learning_lease(scope);
        let deadline = Instant::now() + WAIT_FOR_LEARNING;
        let taken = loop {
            match store.try_lease(&name, holder, WAIT_FOR_LEARNING).await {
                Ok(true) => break Ok(()),
                Ok(false) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Ok(false) => {
                    break Err(Error::StillLearning {
                        scope: Box::new(scope.clone()),
                        waited_s: WAIT_FOR_LEARNING.as_secs(),
                    });
                }
                Err(e) => break Err(Error::store("wait for learning to end")(e)),
            }
        };
        if let Err(e) = taken {
            for name in &held {
                let _ = store.release_lease(name, holder).await;
            }
            return Err(e);
        }
        held.push(name);
    }
    Ok(held)
}

/// The deleting (or counting) part of [`erase_person`]: the person's own scopes whole, and
/// `theirs` of each of `groups`, with the group facts an older store learned from them
/// without the tag ([`untagged_learned`]).
async fn erase_held(
    store: &dyn MemoryBackend,
    own: &[Scope],
    groups: &[Scope],
    theirs: &Filter,
    apply: bool,
    erased: &mut Erased,
) -> Result<()> {
    for scope in own {
        let n = if apply {
            store
                .delete_scope(scope)
                .await
                .map_err(Error::in_scope("delete the memories of", scope))?
        } else {
            store
                .count(scope)
                .await
                .map_err(Error::in_scope("count the memories of", scope))?
        };
        if n > 0 {
            erased.own.push((scope.clone(), n));
        }
    }
    for group in groups {
        let mut n = 0;
        if apply {
            let mut names = Vec::new();
            loop {
                // Each round deletes what it read, so the next reads what is left.
                let part = store
                    .recent(group, BATCH, theirs)
                    .await
                    .map_err(Error::in_scope("read the user's part of", group))?;
                for m in &part {
                    if m.kind == memory_core::MemoryKind::Message
                        && let Some((name, _)) = m.content.split_once(": ")
                        && !names.iter().any(|n| n == name)
                    {
                        names.push(name.to_owned());
                    }
                }
                let deleted = delete_each(store, group, &part, PART).await?;
                n += deleted;
                // Nothing (more) to delete: done.
                if deleted == 0 {
                    break;
                }
            }
            let untagged = untagged_learned(store, group, &names).await?;
            n += delete_each(store, group, &untagged, PART).await?;
        } else {
            let most = store.info().limits.max_results;
            n = store
                .recent(group, most, theirs)
                .await
                .map_err(Error::in_scope("read the user's part of", group))?
                .len() as u64;
        }
        if n > 0 {
            erased.in_groups.push((group.clone(), n));
        }
    }
    Ok(())
}

/// Deletes `memories` of `scope` one by one (one already gone is passed over); says how
/// many it deleted. A failure stops it, with `what` it was doing as the error's context.
pub async fn delete_each(
    store: &dyn MemoryBackend,
    scope: &Scope,
    memories: &[memory_core::MemoryEntry],
    what: &'static str,
) -> Result<u64> {
    let mut n = 0;
    for m in memories {
        match store.delete(scope, m.id).await {
            Ok(()) => n += 1,
            Err(MemoryError::NotFound { .. }) => {}
            Err(e) => return Err(Error::store(what)(e)),
        }
    }
    Ok(n)
}

/// The facts of `group` that a store from before facts carried their member learned from
/// the messages of a member who went by one of `names` (the speaker part of their stored
/// messages): their context quoted the message, speaker first
/// (`learned from the user's message: Alice (@alice): ...`).
async fn untagged_learned(
    store: &dyn MemoryBackend,
    group: &Scope,
    names: &[String],
) -> Result<Vec<memory_core::MemoryEntry>> {
    if names.is_empty() {
        return Ok(Vec::new());
    }
    let facts = Filter {
        kinds: vec![memory_core::MemoryKind::Fact],
        include_superseded: true,
        ..Filter::default()
    };
    let most = store.info().limits.max_results;
    let all = store
        .recent(group, most, &facts)
        .await
        .map_err(Error::in_scope("read the facts of", group))?;
    Ok(all
        .into_iter()
        .filter(|f| {
            f.context.as_deref().is_some_and(|c| {
                c.strip_prefix(OLD_LEARNED_CONTEXT).is_some_and(|quote| {
                    names.iter().any(|n| {
                        quote
                            .strip_prefix(n.as_str())
                            .is_some_and(|r| r.starts_with(':'))
                    })
                })
            })
        })
        .collect())
}

/// What deleting a person's group part says when it fails.
const PART: &str = "delete the user's part of a group";

/// How a learned fact's context began before it quoted nothing of its message: the
/// message's first 80 characters followed.
const OLD_LEARNED_CONTEXT: &str = "learned from the user's message: ";
