//! Groups: a member's own part of a group's conversation, and `/share`, which lets the
//! prompts answering a member in a group hold the facts they told Ava privately.

use anyhow::Context;
use memory_core::Tag;

use super::state::{BotState, Who};
use crate::agent::Member;

/// The memories of the member `who` in their group's conversation (tagged as theirs), at
/// most `limit`.
pub(super) async fn members_part(
    who: &Who,
    state: &BotState,
    member: &Member,
    limit: usize,
) -> anyhow::Result<Vec<memory_core::MemoryEntry>> {
    let theirs = memory_core::Filter {
        tags: Some(memory_core::TagQuery::any([member.tag.clone()])),
        ..memory_core::Filter::default()
    };
    state
        .agent
        .store()
        .recent(&who.scope, limit, &theirs)
        .await
        .context("read your messages in this group")
}

/// The notes in a group's conversation that say `member` shares their facts there (one
/// when they do, none when they do not).
pub(super) async fn share_notes(
    who: &Who,
    state: &BotState,
    member: &Member,
) -> anyhow::Result<Vec<memory_core::MemoryEntry>> {
    let tag = Tag::new(format!("shares:{}", member.user))?;
    let notes = memory_core::Filter {
        kinds: vec![memory_core::MemoryKind::Note],
        tags: Some(memory_core::TagQuery::any([tag])),
        ..memory_core::Filter::default()
    };
    state
        .agent
        .store()
        .recent(&who.scope, 10, &notes)
        .await
        .context("read whether you share your facts here")
}

/// `/share` (`on`, the default, or `off`): whether the prompts answering this member in
/// their group hold the facts they told Ava privately. Kept as a note in the group's
/// conversation (prompts never read notes), so it lasts across restarts.
pub(super) async fn share(arg: &str, who: &Who, state: &BotState) -> anyhow::Result<String> {
    let Some(member) = &who.member else {
        return Ok(
            "Sharing is for groups: in a group, /share lets my answers to you there use \
                   the facts you told me privately; /share off stops it."
                .into(),
        );
    };
    let notes = share_notes(who, state, member).await?;
    let store = state.agent.store();
    Ok(match arg {
        "" | "on" if !notes.is_empty() => "You share your facts here already.".into(),
        "" | "on" => {
            let note = memory_core::NewMemory::new(format!(
                "{} shares the facts they told Ava privately with this group",
                member.name
            ))
            .with_kind(memory_core::MemoryKind::Note)
            .with_source("telegram")
            .with_tag(Tag::new(format!("shares:{}", member.user))?)
            // Pruning never removes a pinned memory: sharing lasts until `/share off`.
            .pinned();
            store
                .store(&who.scope, note)
                .await
                .context("remember that you share")?;
            "Done: my answers to you in this group may use the facts you told me privately \
             (others here will read them). /share off stops it."
                .into()
        }
        "off" => {
            crate::erase::delete_each(store.as_ref(), &who.scope, &notes, "stop sharing").await?;
            "Done: your private facts stay out of this group.".into()
        }
        _ => "Say /share to share your facts in this group, or /share off to stop.".into(),
    })
}
