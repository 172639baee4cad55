//! One module per `ava` subcommand.

pub(crate) mod chat;
pub(crate) mod check;
pub(crate) mod consolidate;
pub(crate) mod context;
pub(crate) mod demo;
pub(crate) mod docs;
pub(crate) mod erase;
pub(crate) mod export;
pub(crate) mod facts;
pub(crate) mod forget;
pub(crate) mod graph;
pub(crate) mod history;
pub(crate) mod import;
pub(crate) mod mcp;
pub(crate) mod migrate;
pub(crate) mod prune;
pub(crate) mod recall;
pub(crate) mod remember;
pub(crate) mod run;
pub(crate) mod serve;
pub(crate) mod stats;

use std::sync::Arc;

use anyhow::Context;
use hydrate::ChatModel;
use memory_core::{DEFAULT_TENANT, MemoryBackend, MemoryError, MemoryId, Scope, SearchRequest};

use crate::agent::Agent;
use crate::config::{Opened, Settings};
use crate::llm::LlmSettings;
use crate::upkeep::UpkeepArgs;

/// What answers people (`ava chat`, `ava run`): the chat model `llm` names, the store
/// (created when missing), and an agent over it whose prompts take at most `budget` tokens,
/// pruning each chat as `upkeep` says and learning facts with the model.
pub(crate) async fn answering(
    settings: &Settings,
    llm: &LlmSettings,
    upkeep: &UpkeepArgs,
    budget: u32,
) -> anyhow::Result<(Arc<dyn ChatModel>, Opened, Agent)> {
    let model = llm.build(settings)?;
    let opened = settings.open().await?;
    let agent = settings
        .agent(&opened, budget)?
        .with_upkeep(upkeep.upkeep())
        .with_facts(llm.extractor(&model));
    Ok((model, opened, agent))
}

/// The scopes a command about `user` works in: `chat`'s, or every chat of the user.
pub(crate) async fn user_scopes(
    store: &dyn MemoryBackend,
    user: &str,
    chat: Option<&str>,
) -> anyhow::Result<Vec<Scope>> {
    Ok(match chat {
        Some(chat) => vec![Scope::for_user(user)?.in_chat(chat)?],
        None => store
            .user_scopes(DEFAULT_TENANT, user)
            .await
            .context("list the user's chats")?,
    })
}

/// The scopes a private context of `user` reads: `chat`'s and then the user-wide one (the
/// person's facts follow them into every private chat), or every scope of the user.
pub(crate) async fn readable_scopes(
    store: &dyn MemoryBackend,
    user: &str,
    chat: Option<&str>,
) -> anyhow::Result<Vec<Scope>> {
    Ok(match chat {
        Some(chat) => Scope::for_user(user)?.in_chat(chat)?.private_context(),
        None => user_scopes(store, user, None).await?,
    })
}

/// Runs `op` in each of `scopes` in turn until one holds the memory `id` (in the others
/// `op` answers "not found"): the scope that held it and what `op` gave. An error names
/// `user` when no scope holds it, or says what failed (`doing`).
pub(crate) async fn in_scope_holding<'s, T>(
    scopes: &'s [Scope],
    user: &str,
    id: MemoryId,
    doing: &'static str,
    mut op: impl AsyncFnMut(&Scope) -> memory_core::Result<T>,
) -> anyhow::Result<(&'s Scope, T)> {
    for scope in scopes {
        match op(scope).await {
            Ok(done) => return Ok((scope, done)),
            Err(MemoryError::NotFound { .. }) => {}
            Err(e) => return Err(e).context(doing),
        }
    }
    anyhow::bail!("user {user} has no memory {id}")
}

/// The best search the store offers for `text` ([`SearchRequest::best`]).
pub(crate) fn best_search(store: &dyn MemoryBackend, text: &str, limit: usize) -> SearchRequest {
    SearchRequest::best(&store.capabilities(), text).limit(limit)
}

/// `text` safe to print on a terminal: control characters (escape sequences that could
/// recolour, move the cursor or retitle the window) and bidirectional overrides that could
/// disguise text are shown escaped (`\u{1b}`); `\n` and `\t` are kept when `lines`.
pub(crate) fn terminal_safe(text: &str, lines: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        let keep = lines && (c == '\n' || c == '\t');
        let bidi = matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
        if (c.is_control() || bidi) && !keep {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::terminal_safe;

    #[test]
    fn terminal_safe_escapes_control_and_bidi_characters() {
        assert_eq!(terminal_safe("red \u{1b}[31mX", false), "red \\u{1b}[31mX");
        assert_eq!(terminal_safe("a\nb\tc", false), "a\\nb\\tc");
        assert_eq!(terminal_safe("a\nb\tc", true), "a\nb\tc");
        assert_eq!(terminal_safe("x\u{202e}y", true), "x\\u{202e}y");
        assert_eq!(terminal_safe("Tomás 🐈", false), "Tomás 🐈");
    }
}
