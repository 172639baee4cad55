//! Delivery: a reply split into Telegram-sized messages and sent in order, each part retried
//! while its failure may pass.

use std::time::Duration;

use teloxide::prelude::*;
use teloxide::{ApiError, RequestError};

use super::state::AvaBot;

/// Telegram's limit on the text of one message (in UTF-16 code units).
pub(crate) const MAX_MESSAGE: usize = 4096;

/// How many times one part of a reply is tried.
const SEND_ATTEMPTS: u32 = 4;

/// The first pause between tries; it doubles.
const SEND_BACKOFF: Duration = Duration::from_millis(500);

/// Sends `text`, split into Telegram-sized messages.
pub(super) async fn send(bot: &AvaBot, chat: ChatId, text: &str) -> anyhow::Result<()> {
    deliver(bot, chat, &split_message(text, MAX_MESSAGE))
        .await
        .map_err(|(_, e)| e)
}

/// Sends `parts` in order, each retried on a transient failure ([`transient`]) up to
/// [`SEND_ATTEMPTS`] times with a doubling pause from [`SEND_BACKOFF`] (teloxide itself
/// waits 10 s after a 5xx, and its throttle handles 429s). On failure: how many parts were
/// delivered, and why the next was not.
pub(super) async fn deliver(
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
