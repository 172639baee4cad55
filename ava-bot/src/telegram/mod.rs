//! The Telegram bot: long polling with teloxide (or its webhook, `webhook.rs`), one memory
//! scope per (user, chat), and the dispatch: the handler tree that sends text through the
//! conversation pipeline of [`crate::agent`] and commands to `commands.rs`. Groups
//! (`groups.rs`), what asks for a confirmation (`confirmations.rs`) and how a reply reaches
//! the chat (`delivery.rs`) are rooms of their own.

mod commands;
mod confirmations;
mod delivery;
mod groups;
mod state;
pub(crate) mod webhook;

use crate::shared::metrics;
use std::sync::Arc;

use anyhow::Context;
use teloxide::adaptors::throttle::Limits;
use teloxide::dispatching::{Dispatcher, HandlerExt, UpdateFilterExt, UpdateHandler};
use teloxide::error_handlers::LoggingErrorHandler;
use teloxide::prelude::*;
use teloxide::types::{Me, ReactionType};
use teloxide::update_listeners;

use crate::agent::{Blame, Member, Speaker};
use crate::prompts::{self, Builder, Built};
use crate::shared::error_chain;

use self::commands::{Command, on_command};
use self::delivery::{MAX_MESSAGE, deliver, send, split_message};
use self::groups::share_notes;
pub(crate) use self::state::{AvaBot, BotState};
#[cfg(test)]
use self::state::{CONVERSATIONS_KEPT, PerChat};
use self::state::{Who, speaker_state, who};

/// When the model failed but the message is stored.
const APOLOGY_MODEL: &str = "Sorry, I could not come up with an answer just now (my language \
model did not respond). Your message is saved; please try again in a moment.";

/// When Ava's own side failed before the model was asked, but the message is stored.
const APOLOGY_MEMORY: &str = "Sorry, something went wrong on my side and I could not answer. \
Your message is saved; please try again in a moment.";

/// When nothing worked: no answer, and the message could not be stored either.
const APOLOGY_NOTHING: &str = "Sorry, something went wrong on my side: I could not answer, and \
I could not save your message either, so I will not remember it. Please try again in a moment.";

/// The answer to an anonymous admin or a channel.
const ANONYMOUS: &str = "I cannot tell anonymous admins (or channels) apart, so I keep no \
memories for them: one's would answer another's questions. To talk to me, turn off \"Remain \
anonymous\" in your admin rights.";

/// Added to an answer that could not be stored.
const NOT_SAVED: &str = "(I could not save this exchange, so I will not remember it.)";

/// The reaction that says a message taught Ava something, unless the operator turns it off
/// (`ava run --learned-reaction`); one of the emoji Telegram lets bots react with.
pub(crate) const LEARNED_REACTION: &str = "✍";

/// The bot with its API address, rate limits and retries.
pub(crate) fn make_bot(
    token: &str,
    api_url: Option<&str>,
    limits: Limits,
) -> anyhow::Result<AvaBot> {
    let mut bot = Bot::new(token);
    if let Some(url) = api_url {
        let url = reqwest_url(url)?;
        bot = bot.set_api_url(url);
    }
    Ok(bot.throttle(limits))
}

/// The username of the bot `token` belongs to, asked of the Bot API (for `ava check`).
pub(crate) async fn whoami(token: &str, api_url: Option<&str>) -> anyhow::Result<String> {
    let mut bot = Bot::new(token);
    if let Some(url) = api_url {
        bot = bot.set_api_url(reqwest_url(url)?);
    }
    let me = bot
        .get_me()
        .await
        .context("ask the Telegram Bot API whose token TELOXIDE_TOKEN is")?;
    Ok(me.username().to_owned())
}

fn reqwest_url(url: &str) -> anyhow::Result<url::Url> {
    url::Url::parse(url).with_context(|| {
        format!("Telegram API URL `{url}` is not a URL; expected e.g. https://api.telegram.org")
    })
}

/// The update handler tree.
pub(crate) fn schema() -> UpdateHandler<anyhow::Error> {
    let messages = Update::filter_message()
        .branch(dptree::filter(|msg: Message, me: Me| for_another_bot(&msg, &me)).endpoint(ignore))
        .branch(
            dptree::filter(|msg: Message, state: Arc<BotState>| !allowed(&msg, &state))
                .endpoint(refuse),
        )
        .branch(dptree::filter(|msg: Message| msg.sender_chat.is_some()).endpoint(anonymous))
        // Who wrote it, derived once and handed to the handlers below.
        .branch(
            dptree::filter_map(|msg: Message| who(&msg))
                .branch(
                    dptree::entry()
                        .filter_command::<Command>()
                        .endpoint(on_command),
                )
                .branch(
                    dptree::filter(|msg: Message| msg.text().is_some_and(|t| t.starts_with('/')))
                        .endpoint(unknown_command),
                )
                .branch(dptree::filter(|msg: Message| msg.text().is_some()).endpoint(on_text))
                .endpoint(not_text),
        )
        .endpoint(no_sender);
    dptree::entry().branch(messages)
}

/// Builds the dispatcher. It has no signal handler of its own: [`run`] stops it through
/// its listener (see [`dispatch`]).
pub(crate) fn dispatcher(
    bot: AvaBot,
    state: Arc<BotState>,
) -> Dispatcher<AvaBot, anyhow::Error, teloxide::dispatching::DefaultKey> {
    Dispatcher::builder(bot, schema())
        .dependencies(dptree::deps![state])
        .default_handler(|update| async move {
            tracing::debug!(update_id = update.id.0, "ignored an update of no interest");
        })
        .error_handler(LoggingErrorHandler::with_custom_text(
            "an update handler failed",
        ))
        .build()
}

/// Long-polls, or with `listener` takes what it receives (the webhook), until Ctrl-C or
/// SIGTERM; updates already taken are answered first. Fails only if the bot cannot start
/// (a bad token, no API).
pub(crate) async fn run(
    bot: AvaBot,
    state: Arc<BotState>,
    listener: Option<
        impl teloxide::update_listeners::UpdateListener<Err = std::convert::Infallible> + Send,
    >,
) -> anyhow::Result<()> {
    let mut dispatcher = dispatcher(bot.clone(), state);
    let signal = crate::shared::listen::shutdown_signal();
    let stop = async move {
        signal.await;
        tracing::info!("stopping: updates already taken are answered first");
    };
    match listener {
        None => serve(&mut dispatcher, bot, stop).await,
        Some(listener) => serve_from(&mut dispatcher, listener, stop).await,
    }
}

/// Dispatches what `listener` receives until `stop` resolves.
pub(crate) async fn serve_from(
    dispatcher: &mut Dispatcher<AvaBot, anyhow::Error, teloxide::dispatching::DefaultKey>,
    listener: impl teloxide::update_listeners::UpdateListener<Err = std::convert::Infallible> + Send,
    stop: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    dispatch(dispatcher, listener, stop, "the webhook failed")
        .await
        .context("start the bot by webhook (getMe failed: is TELOXIDE_TOKEN right?)")
}

/// Long-polls for `dispatcher` until `stop` resolves.
pub(crate) async fn serve(
    dispatcher: &mut Dispatcher<AvaBot, anyhow::Error, teloxide::dispatching::DefaultKey>,
    bot: AvaBot,
    stop: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let listener = update_listeners::polling_default(bot).await;
    dispatch(dispatcher, listener, stop, "polling Telegram failed")
        .await
        .context("start the bot (getMe failed: is TELOXIDE_TOKEN right?)")
}

/// Dispatches until `stop` resolves, then until the updates already taken are handled.
///
/// It stops the listener itself rather than through the dispatcher's shutdown token:
/// teloxide 0.17 wakes its loop with `Notify::notify_waiters`, which keeps no permit, so a
/// shutdown asked while the loop is handing an update to a worker is lost and the
/// dispatcher runs on (seen in CI as a bot that never stopped). A listener whose stream
/// ends stops the dispatcher whatever it was doing.
async fn dispatch<L>(
    dispatcher: &mut Dispatcher<AvaBot, anyhow::Error, teloxide::dispatching::DefaultKey>,
    mut listener: L,
    stop: impl Future<Output = ()> + Send + 'static,
    failed: &'static str,
) -> anyhow::Result<()>
where
    L: teloxide::update_listeners::UpdateListener + Send,
    L::Err: std::fmt::Debug,
{
    let token = listener.stop_token();
    let watch = tokio::spawn(async move {
        stop.await;
        token.stop();
    });
    let result = dispatcher
        .try_dispatch_with_listener(listener, LoggingErrorHandler::with_custom_text(failed))
        .await;
    watch.abort();
    result.map_err(|e| anyhow::anyhow!("{e}"))
}

fn allowed(msg: &Message, state: &BotState) -> bool {
    match (&state.allow, &msg.from) {
        (None, _) => true,
        (Some(ids), Some(user)) => ids.contains(&user.id.0),
        (Some(_), None) => false,
    }
}

async fn refuse(bot: AvaBot, msg: Message) -> anyhow::Result<()> {
    let user = msg.from.as_ref().map(|u| u.id.0);
    tracing::info!(
        ?user,
        chat = msg.chat.id.0,
        "refused a user not on the allow-list"
    );
    send(&bot, msg.chat.id, "Sorry, this bot is private.").await
}

/// A command addressed to another bot (`/recall@other_bot`), which a group shares with this
/// one: not ours to answer.
fn for_another_bot(msg: &Message, me: &Me) -> bool {
    let Some(command) = msg.text().and_then(|t| t.strip_prefix('/')) else {
        return false;
    };
    let first = command.split_whitespace().next().unwrap_or_default();
    first
        .split_once('@')
        .is_some_and(|(_, bot)| !bot.eq_ignore_ascii_case(me.username()))
}

async fn ignore(msg: Message) -> anyhow::Result<()> {
    tracing::debug!(chat = msg.chat.id.0, "ignored a command for another bot");
    Ok(())
}

/// A message sent on behalf of a chat: an anonymous group admin (Telegram shows every one as
/// `GroupAnonymousBot`) or a channel. Such senders cannot be told apart, so one's memories
/// would answer another's questions: nothing is stored or recalled for them.
async fn anonymous(bot: AvaBot, msg: Message) -> anyhow::Result<()> {
    tracing::info!(chat = msg.chat.id.0, "refused an anonymous sender");
    send(&bot, msg.chat.id, ANONYMOUS).await
}

async fn no_sender(msg: Message) -> anyhow::Result<()> {
    tracing::debug!(chat = msg.chat.id.0, "skipped a message without a sender");
    Ok(())
}

async fn not_text(msg: Message) -> anyhow::Result<()> {
    tracing::debug!(chat = msg.chat.id.0, "skipped a message without text");
    Ok(())
}

async fn unknown_command(bot: AvaBot, msg: Message) -> anyhow::Result<()> {
    // In a group, a command without `@` may be another bot's: answer only when it is
    // addressed to this bot, or in a private chat.
    let addressed = msg
        .text()
        .and_then(|t| t.split_whitespace().next())
        .is_some_and(|c| c.contains('@'));
    if !msg.chat.is_private() && !addressed {
        tracing::debug!(
            chat = msg.chat.id.0,
            "ignored an unknown command in a group"
        );
        return Ok(());
    }
    send(
        &bot,
        msg.chat.id,
        "I do not know that command; /help lists the ones I do.",
    )
    .await
}

async fn on_text(
    bot: AvaBot,
    msg: Message,
    mut who: Who,
    state: Arc<BotState>,
) -> anyhow::Result<()> {
    let Some(text) = msg.text() else {
        return Ok(());
    };
    let started = std::time::Instant::now();
    // How the message ended, as an HTTP status class for the metrics.
    let mut status = 200;
    if let Some(member) = who.member.take() {
        let shares = match share_notes(&who, &state, &member).await {
            Ok(notes) => !notes.is_empty(),
            Err(e) => {
                // Not sharing is the safe side.
                tracing::warn!(error = error_chain(&e), "could not read a member's sharing");
                false
            }
        };
        who.member = Some(Member { shares, ..member });
    }
    let turn = state
        .agent
        .answer(
            state.model.as_ref(),
            &Speaker {
                scope: who.scope.clone(),
                audience: who.audience,
                state: speaker_state(&msg),
                member: who.member.clone(),
            },
            text,
            "telegram",
        )
        .await;
    // The stored answer, corrected should it not reach the user whole.
    let mut answer_ids = Vec::new();
    let mut learning = None;
    let reply = match turn {
        // Refused before anything was stored (empty, too long): say why.
        Err(e) => {
            status = 400;
            format!("Sorry, I cannot take that message: {}", error_chain(&e))
        }
        Ok(turn) => {
            learning = turn.learning;
            metrics::exchange_kept(turn.stored.is_ok());
            if let Err(e) = &turn.stored {
                tracing::error!(
                    chat = msg.chat.id.0,
                    error = error_chain(e),
                    "could not store a message"
                );
            }
            match turn.answer {
                Ok(inference) => {
                    let cache = &inference.prompt.report.cache;
                    metrics::prompt(
                        None,
                        cache.prompt_tokens,
                        cache.shared_prefix_tokens.unwrap_or(0),
                    );
                    if turn.stored.is_ok() {
                        // Kept before the reply goes out, so a `/context` after it finds it,
                        // on any replica; only with its question stored (see `prompts`).
                        let member = who.member.as_ref().map(|m| m.user.clone());
                        let next = inference.prompt.previous();
                        let built = Built::new(Builder::Bot, member, inference.prompt.report)
                            .with_next(next);
                        let store = state.agent.store().as_ref();
                        let at = memory_core::Timestamp::now();
                        prompts::keep(store, &who.scope, at, &built, &turn.message_ids).await;
                    }
                    let answer = if inference.reply.trim().is_empty() {
                        "(I have nothing to add.)".to_owned()
                    } else {
                        inference.reply
                    };
                    if turn.stored.is_ok() {
                        answer_ids = turn.answer_ids;
                        answer
                    } else {
                        format!("{answer}\n\n{NOT_SAVED}")
                    }
                }
                Err((blame, e)) => {
                    status = 500;
                    tracing::error!(
                        chat = msg.chat.id.0,
                        error = error_chain(&e),
                        "could not answer a message"
                    );
                    match (turn.stored.is_ok(), blame) {
                        (false, _) => APOLOGY_NOTHING.to_owned(),
                        (true, Blame::Model) => APOLOGY_MODEL.to_owned(),
                        (true, Blame::Memory) => APOLOGY_MEMORY.to_owned(),
                    }
                }
            }
        }
    };
    let parts = split_message(&reply, MAX_MESSAGE);
    let delivery = deliver(&bot, msg.chat.id, &parts).await;
    metrics::request(metrics::Door::Telegram, status, started.elapsed());
    if let (Some(learning), Some(emoji)) = (learning, state.learned_reaction.clone()) {
        // Learning runs after the reply; the reaction follows it, when it changed a fact.
        let (bot, chat, id) = (bot.clone(), msg.chat.id, msg.id);
        tokio::spawn(async move {
            if learning.await == Ok(true) {
                let reaction = ReactionType::Emoji { emoji };
                if let Err(e) = bot
                    .set_message_reaction(chat, id)
                    .reaction([reaction])
                    .await
                {
                    tracing::warn!(chat = chat.0, error = %e, "could not react to a message that taught me something");
                }
            }
        });
    }
    let Err((delivered, error)) = delivery else {
        return Ok(());
    };
    if !answer_ids.is_empty() {
        let said = parts.get(..delivered).unwrap_or_default().join("\n");
        match state
            .agent
            .undelivered(&who.scope, &answer_ids, &said)
            .await
        {
            Ok(()) => tracing::warn!(
                chat = msg.chat.id.0,
                delivered,
                parts = parts.len(),
                "an answer did not reach the user whole; the stored answer keeps what did"
            ),
            Err(e) => tracing::error!(
                chat = msg.chat.id.0,
                error = error_chain(&e),
                "an answer did not reach the user and could not be corrected in the store"
            ),
        }
    }
    Err(error)
}

#[cfg(test)]
mod tests;
