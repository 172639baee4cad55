//! Erasing a person: everything Ava keeps of one user, for `ava erase` and the bot's
//! `/erase`. Their own scopes (every chat and thread, their user-wide facts, their
//! documents), and their part of every group conversation (their messages, Ava's answers to
//! them and their `/share` note, found by the `from:<id>` and `shares:<id>` tags); nothing
//! of anyone else's. The prompts kept of those scopes ([`crate::prompts`]) go with the
//! memories: the store removes a scope's records with any deletion there.

use std::fmt::Write as _;

use anyhow::Context;
use memory_core::{Filter, MemoryBackend, MemoryError, Scope, Tag, TagQuery};

use crate::agent::GROUP_USER;

/// How many of a member's group memories are read (and deleted) at a time.
const BATCH: usize = 500;

/// What erasing a person removed (or, in a dry run, would remove), per scope.
#[derive(Debug, Default)]
pub(crate) struct Erased {
    /// Their own scopes and how many memories each held.
    pub(crate) own: Vec<(Scope, u64)>,
    /// The groups they spoke in and how many memories there were theirs.
    pub(crate) in_groups: Vec<(Scope, u64)>,
}

impl Erased {
    /// Memories in all.
    pub(crate) fn total(&self) -> u64 {
        self.own.iter().chain(&self.in_groups).map(|(_, n)| n).sum()
    }

    /// One line per scope, for people.
    pub(crate) fn describe(&self) -> String {
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

/// The lease that stands for a confirmation of `what` (`wipe`, `erase`) asked of `user` in
/// `chat` (the bot's `/wipe` and `/erase`).
pub(crate) fn confirmation_lease(what: &str, tenant: &str, user: &str, chat: &str) -> String {
    format!("confirm:{what}:{tenant}:{user}:{chat}")
}

/// Every lease that may name `user` and stand for them: learning and pruning their own
/// scopes, and their confirmations pending in those chats and in `groups`. Erasing them
/// ends the leases (a process then holding one loses it to the next taker, as when its time
/// runs out) and, with them, the last trace of the user's id in the store.
fn their_leases(tenant: &str, user: &str, own: &[Scope], groups: &[Scope]) -> Vec<String> {
    let mut names = Vec::new();
    for scope in own {
        names.push(crate::agent::learning_lease(scope));
        names.push(crate::upkeep::pruning_lease(scope));
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

/// Erases everything of `user` in `tenant` from `store` (with `apply`), or counts it (a dry
/// run); says what, per scope. Erasing also ends the leases that name them
/// ([`their_leases`]).
pub(crate) async fn erase_person(
    store: &dyn MemoryBackend,
    tenant: &str,
    user: &str,
    apply: bool,
) -> anyhow::Result<Erased> {
    let mut erased = Erased::default();
    let own = store
        .user_scopes(tenant, user)
        .await
        .context("list the user's chats")?;
    for scope in &own {
        let n = if apply {
            store
                .delete_scope(scope)
                .await
                .with_context(|| format!("delete the memories of {scope}"))?
        } else {
            store
                .count(scope)
                .await
                .with_context(|| format!("count the memories of {scope}"))?
        };
        if n > 0 {
            erased.own.push((scope.clone(), n));
        }
    }
    if user == GROUP_USER {
        // The key groups are kept under is no person.
        return Ok(erased);
    }
    let theirs = Filter {
        tags: Some(TagQuery::any([
            Tag::new(format!("from:{user}"))?,
            Tag::new(format!("shares:{user}"))?,
        ])),
        include_superseded: true,
        ..Filter::default()
    };
    let groups = store
        .user_scopes(tenant, GROUP_USER)
        .await
        .context("list the groups")?;
    for group in &groups {
        let mut n = 0;
        if apply {
            loop {
                // Each round deletes what it read, so the next reads what is left.
                let part = store
                    .recent(group, BATCH, &theirs)
                    .await
                    .with_context(|| format!("read the user's part of {group}"))?;
                let before = n;
                for m in &part {
                    match store.delete(group, m.id).await {
                        Ok(()) => n += 1,
                        Err(MemoryError::NotFound { .. }) => {}
                        Err(e) => return Err(e).context("delete the user's part of a group"),
                    }
                }
                // Nothing (more) to delete: done.
                if n == before {
                    break;
                }
            }
        } else {
            let most = store.info().limits.max_results;
            n = store
                .recent(group, most, &theirs)
                .await
                .with_context(|| format!("read the user's part of {group}"))?
                .len() as u64;
        }
        if n > 0 {
            erased.in_groups.push((group.clone(), n));
        }
    }
    if apply {
        for name in their_leases(tenant, user, &own, &groups) {
            store
                .end_lease(&name)
                .await
                .context("end the leases that name the user")?;
        }
    }
    Ok(erased)
}
