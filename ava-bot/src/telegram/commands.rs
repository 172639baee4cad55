//! The slash commands: what each answers, in the words of the command, for the member
//! or person who sent it.

use std::sync::Arc;

use anyhow::Context;
use memory_core::{DEFAULT_TENANT, MemoryError, MemoryId};
use teloxide::prelude::*;
use teloxide::types::Me;
use teloxide::utils::command::BotCommands;

use super::confirmations::{erase, wipe};
use super::delivery::send;
use super::groups::{members_part, share};
use super::state::{AvaBot, BotState, Who, lock};
use crate::agent::Audience;
use crate::prompts::{self, PROMPTS_KEPT};
use crate::shared::error_chain;

const HELP: &str = "I am Ava, an assistant that remembers. Just talk to me. The facts you tell \
me are yours: I use them in every private chat with you and never in a group. /facts shows \
them; /undo takes back what I last learned.\n\nCommands:";

/// The commands the bot understands.
#[derive(BotCommands, Clone, Debug, PartialEq, Eq)]
#[command(rename_rule = "lowercase")]
pub(crate) enum Command {
    /// start a conversation.
    Start,
    /// show this help.
    Help,
    /// remember a fact: /remember my cat is called Pixel.
    Remember(String),
    /// search your memories: /recall cat.
    Recall(String),
    /// end a fact by its number in /facts, or forget a memory by the id /recall shows.
    Forget(String),
    /// list the facts I hold about you, numbered.
    Facts,
    /// take back the last thing I learned from your messages.
    Undo,
    /// in a group: let my answers to you here use the facts you told me privately (/share off stops).
    Share(String),
    /// explain the last prompt: which memories went in, which were dropped, tokens.
    Context,
    /// how much I remember about you.
    Stats,
    /// delete all your memories in this chat (asks for confirmation).
    Wipe(String),
    /// delete everything I keep of you, in every chat and group (asks for confirmation).
    Erase(String),
}

pub(super) async fn on_command(
    bot: AvaBot,
    msg: Message,
    me: Me,
    cmd: Command,
    who: Who,
    state: Arc<BotState>,
) -> anyhow::Result<()> {
    let reply = match command_reply(&me, cmd, &who, &state).await {
        Ok(text) => text,
        Err(e) => {
            tracing::error!(
                chat = msg.chat.id.0,
                error = error_chain(&e),
                "a command failed"
            );
            // The user gets what failed, in the words of the command's own context, never
            // the cause (which may name the store's path or the server's state).
            format!("Sorry, I could not {e}. The details are in the bot's log.")
        }
    };
    send(&bot, msg.chat.id, &reply).await
}

async fn command_reply(
    me: &Me,
    cmd: Command,
    who: &Who,
    state: &BotState,
) -> anyhow::Result<String> {
    let ops = state.agent.ops(who.scope.clone(), who.audience);
    // In a group a member acts on their own part: what they remember is tagged as theirs,
    // and they forget only what is.
    let ops = match &who.member {
        Some(member) => ops.acting_for(member.tag.clone()),
        None => ops,
    };
    Ok(match cmd {
        Command::Start => format!(
            "Hi! I am {}. Talk to me and I will remember what matters. /help shows what else I can do.",
            me.user.first_name
        ),
        Command::Help => format!("{HELP}\n{}", Command::descriptions()),
        Command::Remember(text) if text.trim().is_empty() => {
            "Tell me what to remember: /remember my cat is called Pixel".into()
        }
        Command::Remember(text) => {
            let done = ops
                .remember(text.trim(), Some("told with /remember in Telegram"), &[])
                .await
                .context("store the memory")?;
            if done.merged {
                format!("I already knew that. (id {})", done.entry.id)
            } else {
                format!("Remembered. (id {})", done.entry.id)
            }
        }
        Command::Recall(query) if query.trim().is_empty() => {
            "Tell me what to look for: /recall cat".into()
        }
        Command::Recall(query) => {
            let found = ops
                .recall(query.trim(), 5)
                .await
                .context("search memories")?;
            if found.is_empty() {
                "I remember nothing about that.".into()
            } else {
                let mut out = String::from("What I remember:");
                for m in found {
                    out.push_str(&format!("\n• {} (id {})", m.content, m.id));
                }
                out
            }
        }
        Command::Forget(n) if n.trim().parse::<usize>().is_ok() => {
            end_listed(n.trim().parse().unwrap_or(0), who, state).await?
        }
        Command::Facts => {
            let facts = state
                .agent
                .facts(&who.scope, who.audience)
                .await
                .context("read your facts")?;
            lock(&state.listings).insert(who.key, facts.iter().map(|f| f.id).collect());
            let mut out = crate::agent::render_facts(&facts);
            if !facts.is_empty() {
                out.push_str("\n/forget N ends one; /undo takes back what I last learned.");
            }
            out
        }
        Command::Undo => match state
            .agent
            .undo_learning(
                &who.scope,
                who.audience,
                who.member.as_ref().map(|m| &m.tag),
            )
            .await
            .context("take back what I learned")?
        {
            None => "I have learned nothing from your messages here to take back.".into(),
            Some(lines) if lines.is_empty() => {
                "What I last learned is gone already; nothing to take back.".into()
            }
            Some(lines) => format!("Taken back:\n• {}", lines.join("\n• ")),
        },
        Command::Forget(id) => match id.trim().parse::<MemoryId>() {
            Err(_) => "Give me a number from /facts or the id /recall shows: /forget 2".into(),
            // In a group, a member forgets only their own part of the conversation.
            Ok(id) if !member_owns(who, state, id).await => {
                "That memory is not one of yours in this group; only its author can forget it."
                    .into()
            }
            Ok(id) => match ops.forget(id).await {
                Ok(()) => "Forgotten.".into(),
                Err(hydrate::Error::Memory(MemoryError::NotFound { .. })) => {
                    "You have no memory with that id in this chat.".into()
                }
                Err(e) => return Err(e).context("forget the memory"),
            },
        },
        Command::Context => {
            // Read from the store: built by this process or another (a replica, before a
            // restart); in a group, the newest of those built for this member.
            let member = who.member.as_ref().map(|m| m.user.clone());
            let newest = prompts::newest(state.agent.store().as_ref(), &who.scope)
                .await
                .context("read the last prompt I built for you")?
                .into_iter()
                .find(|(_, built)| built.member == member);
            match (newest, &who.member) {
                (Some((_, built)), _) => format!(
                    "The last prompt I built for you:\n{}",
                    state
                        .agent
                        .explain(&who.scope, who.audience, &built.report)
                        .await
                ),
                (None, None) => {
                    "I have not built a prompt for you in this chat yet; say something first."
                        .into()
                }
                (None, Some(_)) => format!(
                    "None of the last {PROMPTS_KEPT} prompts I built in this group was for you; \
                     say something first."
                ),
            }
        }
        Command::Stats => {
            let store = state.agent.store();
            // In a group, the member's part of the shared conversation.
            let here = match &who.member {
                None => store.count(&who.scope).await.context("count memories")?,
                Some(member) => {
                    let most = store.info().limits.max_results;
                    members_part(who, state, member, most).await?.len() as u64
                }
            };
            let scopes = store
                .user_scopes(DEFAULT_TENANT, &who.key.0.to_string())
                .await
                .context("list your chats")?;
            let (mut everywhere, mut own) = (if who.member.is_some() { here } else { 0 }, 0);
            for scope in &scopes {
                let n = store.count(scope).await.context("count memories")?;
                everywhere += n;
                if scope.is_user_wide() {
                    own += n;
                }
            }
            let chats = scopes.iter().filter(|s| !s.is_user_wide()).count();
            let yours = match who.audience {
                Audience::Private => "every private chat with me sees them",
                Audience::Group => "groups never see them",
            };
            format!(
                "Memories of yours: {here} in this chat, {own} facts of your own ({yours}), \
                 {everywhere} in all ({chats} chats)."
            )
        }
        Command::Wipe(arg) => wipe(arg.trim(), who, state).await?,
        Command::Erase(arg) => erase(arg.trim(), who, state).await?,
        Command::Share(arg) => share(arg.trim(), who, state).await?,
    })
}

/// Whether the member `who` (in a group) may forget the memory `id` of the group's
/// conversation: one of their messages or an answer to them. Always true in a private chat.
async fn member_owns(who: &Who, state: &BotState, id: MemoryId) -> bool {
    let Some(member) = &who.member else {
        return true;
    };
    match state.agent.store().get(&who.scope, id).await {
        Ok(m) => m.tags.contains(&member.tag),
        // Not found: `forget` says so.
        Err(_) => true,
    }
}

/// `/forget N`: ends the `n`th fact of the last `/facts` (it stays in the history).
async fn end_listed(n: usize, who: &Who, state: &BotState) -> anyhow::Result<String> {
    let listed = lock(&state.listings)
        .get(&who.key)
        .cloned()
        .unwrap_or_default();
    let Some(&id) = n.checked_sub(1).and_then(|i| listed.get(i)) else {
        return Ok(if listed.is_empty() {
            "Send /facts first; /forget N ends the fact numbered N there.".into()
        } else {
            format!(
                "/facts listed {} facts; give a number from 1 to {}.",
                listed.len(),
                listed.len()
            )
        });
    };
    let store = state.agent.store();
    let scopes = state
        .agent
        .ops(who.scope.clone(), who.audience)
        .readable_scopes();
    if let Some(fact) = crate::agent::find_memory(store.as_ref(), &scopes, id).await {
        // In a group, a member ends only the facts that are theirs (told or learned from
        // their messages).
        if let Some(member) = &who.member
            && !fact.tags.contains(&member.tag)
        {
            return Ok(
                "That fact is not yours: only the member it was learned from or who told it \
                 can end it."
                    .into(),
            );
        }
        return Ok(
            match memory_core::invalidate(
                store.as_ref(),
                &fact.scope,
                id,
                memory_core::Timestamp::now(),
            )
            .await
            {
                Ok(_) => format!(
                    "Done: \"{}\" no longer holds (it stays in the history).",
                    hydrate::preview(&fact.content, 120)
                ),
                Err(MemoryError::InvalidInput { .. }) => {
                    "That fact no longer holds already.".into()
                }
                Err(e) => return Err(e).context("end the fact"),
            },
        );
    }
    Ok("That fact is gone already (forgotten or wiped).".into())
}
