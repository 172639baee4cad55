//! What asks for a confirmation: `/wipe` and `/erase`, each asked, then confirmed with `yes`
//! within a window kept in the store as a lease, so that any replica can take the `yes`.

use std::time::Duration;

use anyhow::Context;
use memory_core::MemoryId;

use super::groups::{members_part, share_notes};
use super::state::{BotState, Who, lock};
use crate::agent::Audience;

/// How long a `/wipe` waits for its confirmation.
const WIPE_WINDOW: Duration = Duration::from_secs(120);

/// `/erase`, then `/erase yes`: everything Ava keeps of the person, everywhere
/// ([`crate::erase`]); asked and confirmed in a private chat only.
pub(super) async fn erase(arg: &str, who: &Who, state: &BotState) -> anyhow::Result<String> {
    if who.audience == Audience::Group {
        return Ok(
            "To erase everything I keep of you, send /erase to me in a private chat.".into(),
        );
    }
    let user = who.key.0.to_string();
    let store = state.agent.store().as_ref();
    let tenant = who.scope.tenant();
    if arg.eq_ignore_ascii_case("yes") {
        if !confirmed(store, "erase", who).await? {
            return Ok("Nothing to confirm: send /erase first.".into());
        }
        // The store removes the prompts kept of their scopes with them.
        let erased = crate::erase::erase_person(store, tenant, &user, true).await?;
        lock(&state.listings).remove(&who.key);
        tracing::info!(
            erased = erased.total(),
            scopes = erased.own.len() + erased.in_groups.len(),
            "erased a person"
        );
        return Ok(format!(
            "Done: I erased {} memories of yours: everything I kept of you, in every chat \
             and group. I remember nothing of you now.",
            erased.total()
        ));
    }
    let erased = crate::erase::erase_person(store, tenant, &user, false).await?;
    ask_confirmation(store, "erase", who).await?;
    Ok(format!(
        "This erases everything I keep of you: {} memories in {} chats and groups, your facts \
         and documents included. It cannot be undone. Send /erase yes within {} minutes to \
         confirm.",
        erased.total(),
        erased.own.len() + erased.in_groups.len(),
        WIPE_WINDOW.as_secs() / 60
    ))
}

/// Who holds a confirmation asked for and not yet given.
const PENDING: &str = "asked";

/// The lease that stands for `who`'s pending `what` (`wipe`, `erase`).
fn confirmation(what: &str, who: &Who) -> String {
    crate::erase::confirmation_lease(
        what,
        who.scope.tenant(),
        &who.key.0.to_string(),
        &who.key.1.to_string(),
    )
}

/// Records that `who` was asked to confirm `what`, for [`WIPE_WINDOW`]. It is kept in the
/// store (a lease), not in this process: behind a load balancer the `yes` may reach
/// another replica.
async fn ask_confirmation(
    store: &dyn memory_core::MemoryBackend,
    what: &str,
    who: &Who,
) -> anyhow::Result<()> {
    // Taken again by its holder, a pending confirmation's window starts over.
    store
        .try_lease(&confirmation(what, who), PENDING, WIPE_WINDOW)
        .await
        .context("remember that a confirmation is pending")?;
    Ok(())
}

/// Whether `who` has a pending `what` to confirm (asked within [`WIPE_WINDOW`], by any
/// replica); takes it if so, so that one `yes` confirms one request.
async fn confirmed(
    store: &dyn memory_core::MemoryBackend,
    what: &str,
    who: &Who,
) -> anyhow::Result<bool> {
    let name = confirmation(what, who);
    // A probe of our own takes the lease only if nothing is pending: then it gives it back.
    let probe = format!("probe:{}", MemoryId::new());
    let free = store
        .try_lease(&name, &probe, Duration::from_millis(1))
        .await
        .context("look for a pending confirmation")?;
    if free {
        store
            .release_lease(&name, &probe)
            .await
            .context("look for a pending confirmation")?;
        return Ok(false);
    }
    store
        .release_lease(&name, PENDING)
        .await
        .context("take the pending confirmation")?;
    Ok(true)
}

pub(super) async fn wipe(arg: &str, who: &Who, state: &BotState) -> anyhow::Result<String> {
    let store = state.agent.store();
    let what = match who.audience {
        Audience::Private => "in this chat and the facts I hold about you",
        Audience::Group => "in this group (your messages and my answers to them)",
    };
    if arg.eq_ignore_ascii_case("yes") {
        if !confirmed(store.as_ref(), "wipe", who).await? {
            return Ok("Nothing to confirm: send /wipe first.".into());
        }
        let mut n = 0;
        match &who.member {
            // In a private chat, the chat and the user's own facts (what this chat reads).
            None => {
                for scope in &who.scope.private_context() {
                    n += store
                        .delete_scope(scope)
                        .await
                        .context("delete your memories")?;
                }
            }
            // In a group, the member's part of the shared conversation only (and their
            // sharing, if they share).
            Some(member) => loop {
                let notes = share_notes(who, state, member).await?;
                crate::erase::delete_each(store.as_ref(), &who.scope, &notes, "stop sharing")
                    .await?;
                let part = members_part(who, state, member, WIPE_BATCH).await?;
                if part.is_empty() {
                    break;
                }
                n += crate::erase::delete_each(
                    store.as_ref(),
                    &who.scope,
                    &part,
                    "delete your memories",
                )
                .await?;
            },
        }
        // No copy left where the store can reach (Postgres' dead rows, SQLite's log).
        if let Err(e) = store.reclaim_deleted().await {
            tracing::warn!(error = %memory_core::ErrorChain(&e), "could not clear what was wiped from the store's files; the next deletion tries again");
        }
        tracing::info!(
            chat = who.key.1,
            deleted = n,
            "wiped a user's memories in a chat"
        );
        return Ok(format!("Done: I deleted {n} memories of yours {what}."));
    }
    let n = match &who.member {
        None => {
            let mut n = 0;
            for scope in who.scope.private_context() {
                n += store.count(&scope).await.context("count memories")?;
            }
            n.to_string()
        }
        Some(member) => {
            let most = store.info().limits.max_results;
            let part = members_part(who, state, member, most).await?;
            if part.len() < most {
                part.len().to_string()
            } else {
                format!("{most} or more")
            }
        }
    };
    ask_confirmation(store.as_ref(), "wipe", who).await?;
    Ok(format!(
        "This deletes all {n} of your memories {what} (other people's stay). Send /wipe yes \
         within {} minutes to confirm.",
        WIPE_WINDOW.as_secs() / 60
    ))
}

/// How many of a member's memories `/wipe` deletes per read of the group's conversation.
const WIPE_BATCH: usize = 200;
