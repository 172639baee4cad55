//! The Telegram bot: long polling with teloxide, one memory scope per (user, chat), the
//! conversation pipeline of [`crate::agent`] for text, and the slash commands.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::Context;
use hydrate::ChatModel;
use memory_core::{DEFAULT_TENANT, MemoryError, MemoryId, Scope, Tag};
use teloxide::adaptors::Throttle;
use teloxide::adaptors::throttle::Limits;
use teloxide::dispatching::{Dispatcher, HandlerExt, UpdateFilterExt, UpdateHandler};
use teloxide::error_handlers::LoggingErrorHandler;
use teloxide::prelude::*;
use teloxide::types::{Me, ReactionType};
use teloxide::update_listeners;
use teloxide::utils::command::BotCommands;
use teloxide::{ApiError, RequestError};

use crate::agent::{
    Agent, Audience, Blame, GROUP_USER, MAX_STATE_CHARS, Member, Speaker, state_line,
};
use crate::prompts::{self, Builder, Built, PROMPTS_KEPT};
use crate::shared::error_chain;
use hydrate::SessionState;

/// The bot as handlers see it: rate-limited, retrying on 429 `retry_after`.
pub(crate) type AvaBot = Throttle<Bot>;

/// Telegram's limit on the text of one message (in UTF-16 code units).
pub(crate) const MAX_MESSAGE: usize = 4096;

/// How long a `/wipe` waits for its confirmation.
const WIPE_WINDOW: Duration = Duration::from_secs(120);

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

/// How many times one part of a reply is tried.
const SEND_ATTEMPTS: u32 = 4;
/// The first pause between tries; it doubles.
const SEND_BACKOFF: Duration = Duration::from_millis(500);

/// Added to an answer that could not be stored.
const NOT_SAVED: &str = "(I could not save this exchange, so I will not remember it.)";

const HELP: &str = "I am Ava, an assistant that remembers. Just talk to me. The facts you tell \
me are yours: I use them in every private chat with you and never in a group. /facts shows \
them; /undo takes back what I last learned.\n\nCommands:";

/// The reaction that says a message taught Ava something, unless the operator turns it off
/// (`ava run --learned-reaction`); one of the emoji Telegram lets bots react with.
pub(crate) const LEARNED_REACTION: &str = "✍";

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

/// How many (user, chat) pairs the bot keeps the last `/facts` listing for: the least
/// recently set goes first.
const CONVERSATIONS_KEPT: usize = 4096;

/// Per-(user, chat) state for the [`CONVERSATIONS_KEPT`] most recently set; bounded so a
/// bot used by many people does not grow without end.
#[derive(Debug)]
struct PerChat<V> {
    entries: HashMap<(u64, i64), (u64, V)>,
    /// Increases with each insert: an entry's age.
    clock: u64,
}

impl<V> Default for PerChat<V> {
    fn default() -> Self {
        Self {
            entries: HashMap::new(),
            clock: 0,
        }
    }
}

impl<V> PerChat<V> {
    fn insert(&mut self, key: (u64, i64), value: V) {
        self.clock += 1;
        self.entries.insert(key, (self.clock, value));
        if self.entries.len() > CONVERSATIONS_KEPT
            && let Some(oldest) = self
                .entries
                .iter()
                .min_by_key(|(_, (at, _))| *at)
                .map(|(k, _)| *k)
        {
            self.entries.remove(&oldest);
        }
    }

    fn get(&self, key: &(u64, i64)) -> Option<&V> {
        self.entries.get(key).map(|(_, v)| v)
    }

    fn remove(&mut self, key: &(u64, i64)) -> Option<V> {
        self.entries.remove(key).map(|(_, v)| v)
    }
}

/// Everything the handlers share.
#[derive(Debug)]
pub(crate) struct BotState {
    agent: Agent,
    model: Arc<dyn ChatModel>,
    allow: Option<BTreeSet<u64>>,
    /// The facts the last `/facts` listed, in its numbering, per (user, chat).
    listings: Mutex<PerChat<Vec<MemoryId>>>,
    /// The reaction put on a message that taught Ava something; `None` puts none.
    learned_reaction: Option<String>,
}

impl BotState {
    pub(crate) fn new(
        agent: Agent,
        model: Arc<dyn ChatModel>,
        allow: Option<BTreeSet<u64>>,
    ) -> Self {
        Self {
            agent,
            model,
            allow,
            listings: Mutex::default(),
            learned_reaction: None,
        }
    }

    /// The same state, reacting with `emoji` to each message that taught Ava something.
    pub(crate) fn with_learned_reaction(mut self, emoji: Option<String>) -> Self {
        self.learned_reaction = emoji;
        self
    }
}

/// Who wrote a message, as a memory scope and a key, who else hears it, and in a group the
/// member. Derived once per message by the handler tree ([`schema`]).
#[derive(Clone)]
struct Who {
    key: (u64, i64),
    scope: Scope,
    audience: Audience,
    member: Option<Member>,
}

fn who(msg: &Message) -> Option<Who> {
    let from = msg.from.as_ref()?;
    let (user, chat) = (from.id.0, msg.chat.id.0);
    let (owner, audience, member) = if msg.chat.is_private() {
        (user.to_string(), Audience::Private, None)
    } else {
        let member = Member {
            tag: Tag::new(format!("from:{user}")).ok()?,
            name: state_line(&display_name(from), MAX_STATE_CHARS),
            user: user.to_string(),
            // Read from the store when it matters (`shares`).
            shares: false,
        };
        (GROUP_USER.to_owned(), Audience::Group, Some(member))
    };
    let scope = Scope::for_user(owner)
        .and_then(|s| s.in_chat(chat.to_string()))
        .ok()?;
    Some(Who {
        key: (user, chat),
        scope,
        audience,
        member,
    })
}

/// A sender as people call them: their name, and their username when they have one. The
/// name is the sender's own choice, so the characters this line is made of (`(`, `)`, `@`,
/// and `:`, which separates a stored line's speaker from their words) are taken out of it:
/// a first name "Alice (@alice)" cannot pass for the member whose username is `alice`.
fn display_name(from: &teloxide::types::User) -> String {
    let name: String = from
        .full_name()
        .chars()
        .map(|c| if "()@:[]".contains(c) { ' ' } else { c })
        .collect();
    let name = name.split_whitespace().collect::<Vec<_>>().join(" ");
    let name = if name.is_empty() {
        format!("user {}", from.id.0)
    } else {
        name
    };
    match &from.username {
        Some(username) => format!("{name} (@{username})"),
        None => name,
    }
}

/// What the prompt says about who is talking and where, from what Telegram sends with every
/// message: the sender's name and username, their language (answer in it), the chat's type
/// and title. Each kept to one short line ([`state_line`]).
fn speaker_state(msg: &Message) -> SessionState {
    let mut state = SessionState::default();
    if let Some(from) = &msg.from {
        let name = display_name(from);
        state.user = Some(state_line(&name, MAX_STATE_CHARS)).filter(|n| !n.is_empty());
        if let Some(language) = from.language_code.as_deref().map(|l| state_line(l, 16))
            && !language.is_empty()
        {
            state.extra.insert(
                "Language".into(),
                format!("{language} (answer in it unless asked otherwise)"),
            );
        }
    }
    let chat = if msg.chat.is_private() {
        "a private chat".to_owned()
    } else {
        let title = msg
            .chat
            .title()
            .map(|t| state_line(t, MAX_STATE_CHARS))
            .unwrap_or_default();
        format!("the group \"{title}\" (its members read the answer)")
    };
    state.extra.insert("Chat".into(), chat);
    state
}

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
        Err(e) => format!("Sorry, I cannot take that message: {}", error_chain(&e)),
        Ok(turn) => {
            learning = turn.learning;
            if let Err(e) = &turn.stored {
                tracing::error!(
                    chat = msg.chat.id.0,
                    error = error_chain(e),
                    "could not store a message"
                );
            }
            match turn.answer {
                Ok(inference) => {
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

async fn on_command(
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

/// The memories of the member `who` in their group's conversation (tagged as theirs), at
/// most `limit`.
async fn members_part(
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

/// `/erase`, then `/erase yes`: everything Ava keeps of the person, everywhere
/// ([`crate::erase`]); asked and confirmed in a private chat only.
async fn erase(arg: &str, who: &Who, state: &BotState) -> anyhow::Result<String> {
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

async fn wipe(arg: &str, who: &Who, state: &BotState) -> anyhow::Result<String> {
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

/// The notes in a group's conversation that say `member` shares their facts there (one
/// when they do, none when they do not).
async fn share_notes(
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
async fn share(arg: &str, who: &Who, state: &BotState) -> anyhow::Result<String> {
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

/// How many of a member's memories `/wipe` deletes per read of the group's conversation.
const WIPE_BATCH: usize = 200;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // The maps hold plain data; a panicked holder leaves nothing half-written worth refusing.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Sends `text`, split into Telegram-sized messages.
async fn send(bot: &AvaBot, chat: ChatId, text: &str) -> anyhow::Result<()> {
    deliver(bot, chat, &split_message(text, MAX_MESSAGE))
        .await
        .map_err(|(_, e)| e)
}

/// Sends `parts` in order, each retried on a transient failure ([`transient`]) up to
/// [`SEND_ATTEMPTS`] times with a doubling pause from [`SEND_BACKOFF`] (teloxide itself
/// waits 10 s after a 5xx, and its throttle handles 429s). On failure: how many parts were
/// delivered, and why the next was not.
async fn deliver(
    bot: &AvaBot,
    chat: ChatId,
    parts: &[String],
) -> Result<(), (usize, anyhow::Error)> {
    for (i, part) in parts.iter().enumerate() {
        let mut attempt = 1;
        loop {
            match bot.send_message(chat, part.clone()).await {
                Ok(_) => break,
                Err(e) if attempt < SEND_ATTEMPTS && transient(&e) => {
                    tracing::warn!(chat = chat.0, attempt, error = %e, "sending a reply failed; retrying");
                    tokio::time::sleep(SEND_BACKOFF * 2u32.pow(attempt - 1)).await;
                    attempt += 1;
                }
                Err(e) => {
                    return Err((i, anyhow::Error::new(e).context("send a reply to Telegram")));
                }
            }
        }
    }
    Ok(())
}

/// A failure that may pass: the network, or a server error (a 5xx answers with an error
/// Telegram does not name, or with a proxy's page that is not JSON). A named API error (the
/// chat is gone, the bot was blocked) would fail again.
fn transient(e: &RequestError) -> bool {
    matches!(
        e,
        RequestError::Network(_)
            | RequestError::Io(_)
            | RequestError::InvalidJson { .. }
            | RequestError::Api(ApiError::Unknown(_))
    )
}

/// Splits `text` into parts of at most `max` UTF-16 code units (how Telegram counts),
/// preferring line breaks, then spaces, never splitting a character.
pub(crate) fn split_message(text: &str, max: usize) -> Vec<String> {
    let mut parts = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let mut units = 0;
        let mut end = rest.len();
        for (i, c) in rest.char_indices() {
            units += c.len_utf16();
            if units > max {
                end = i;
                break;
            }
        }
        if end == rest.len() {
            parts.push(rest.to_owned());
            break;
        }
        let head = &rest[..end];
        let cut = head
            .rfind('\n')
            .or_else(|| head.rfind(' '))
            .filter(|&i| i > 0)
            .map_or(end, |i| i + 1);
        let part = rest[..cut].trim_end();
        if !part.is_empty() {
            parts.push(part.to_owned());
        }
        rest = &rest[cut..];
    }
    parts
}

#[cfg(test)]
mod tests;
