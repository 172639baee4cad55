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

use anyhow::Context;
use memory_core::{
    DEFAULT_TENANT, MemoryBackend, MemoryError, MemoryId, Scope, SearchRequest, Timestamp,
};

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

/// Reads `2026-03-01` (the end of that day, UTC) or an RFC 3339 time.
pub(crate) fn parse_as_of(text: &str) -> Result<Timestamp, String> {
    parse_day_or_time(text, DayEdge::End)
}

/// Which instant of a day a date alone stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DayEdge {
    /// Its first millisecond (from that day, or before it).
    Start,
    /// Its last millisecond (as the day ended).
    End,
}

/// Reads a day (`2026-03-01`, its first or last millisecond in UTC by `edge`), a day and
/// time of day in UTC (`2026-03-01T09:30`), or an RFC 3339 time.
pub(crate) fn parse_day_or_time(text: &str, edge: DayEdge) -> Result<Timestamp, String> {
    let text = text.trim();
    let naive = if let Ok(day) = chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d") {
        match edge {
            DayEdge::Start => day.and_hms_milli_opt(0, 0, 0, 0),
            DayEdge::End => day.and_hms_milli_opt(23, 59, 59, 999),
        }
    } else {
        chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M").ok()
    };
    if let Some(at) = naive {
        return Timestamp::from_millis(at.and_utc().timestamp_millis())
            .ok_or_else(|| format!("`{text}`: out of range"));
    }
    Timestamp::parse_rfc3339(text).map_err(|_| {
        format!("`{text}`: expected a date (2026-03-01) or an RFC 3339 time (2026-03-01T09:30:00Z)")
    })
}

/// Resolves on Ctrl-C or SIGTERM (what an MCP client sends a stdio server that does not exit
/// when its stdin closes). The handlers are installed when this is called, not when the future
/// is first polled: a signal that comes while the server is still starting (or before the task
/// that awaits it next runs) stops it cleanly instead of killing it.
pub(crate) fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    let listening = {
        use tokio::signal::unix::{SignalKind, signal};
        (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        )
    };
    async move {
        #[cfg(unix)]
        match listening {
            (Ok(mut int), Ok(mut term)) => {
                tokio::select! {
                    _ = int.recv() => {}
                    _ = term.recv() => {}
                }
                return;
            }
            (Ok(mut int), Err(e)) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM; Ctrl-C still stops");
                int.recv().await;
                return;
            }
            (Err(e), _) => tracing::warn!(error = %e, "cannot listen for Ctrl-C"),
        }
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::warn!(error = %e, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{DayEdge, parse_as_of, parse_day_or_time, terminal_safe};

    #[test]
    fn as_of_reads_days_and_times() {
        let day = parse_as_of("2026-03-01").unwrap();
        assert_eq!(day.to_string(), "2026-03-01T23:59:59.999Z");
        let t = parse_as_of("2026-03-01T09:30:00Z").unwrap();
        assert_eq!(t.to_string(), "2026-03-01T09:30:00.000Z");
        let e = parse_as_of("last week").unwrap_err();
        assert!(e.contains("expected a date"), "{e}");
        let from = parse_day_or_time("2026-03-01", DayEdge::Start).unwrap();
        assert_eq!(from.to_string(), "2026-03-01T00:00:00.000Z");
        let minute = parse_day_or_time("2026-03-01T09:30", DayEdge::End).unwrap();
        assert_eq!(minute.to_string(), "2026-03-01T09:30:00.000Z");
    }

    #[test]
    fn terminal_safe_escapes_control_and_bidi_characters() {
        assert_eq!(terminal_safe("red \u{1b}[31mX", false), "red \\u{1b}[31mX");
        assert_eq!(terminal_safe("a\nb\tc", false), "a\\nb\\tc");
        assert_eq!(terminal_safe("a\nb\tc", true), "a\nb\tc");
        assert_eq!(terminal_safe("x\u{202e}y", true), "x\\u{202e}y");
        assert_eq!(terminal_safe("Tomás 🐈", false), "Tomás 🐈");
    }
}
