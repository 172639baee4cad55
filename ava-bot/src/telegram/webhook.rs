//! Webhook mode for the bot: Telegram POSTs each update to a public HTTPS address (a
//! TLS-terminating proxy or load balancer in front of `ava run`), so several replicas behind
//! one load balancer can share one bot, which long polling cannot (Telegram gives a bot's
//! updates to one poller). Every request must carry the secret Telegram was given, in
//! `X-Telegram-Bot-Api-Secret-Token` (compared in constant time); anything else is refused
//! before it is read as an update, logged at debug level and counted in at most one warning a
//! minute (the listener faces the internet). An update Telegram delivers again (its
//! `update_id` among the last [`RECENT_UPDATES`] taken) is answered 200 and not handled twice.
//!
//! On start, `setWebhook` registers the address and the secret (every replica registers the
//! same ones). On stop the webhook is left registered: another replica may still be serving
//! it, and `ava run` without `--webhook-url` removes it before it polls.

use std::collections::{HashSet, VecDeque};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use anyhow::{Context, bail};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use memory_core::Secret;
use subtle::ConstantTimeEq;
use teloxide::payloads::SetWebhookSetters;
use teloxide::prelude::Requester;
use teloxide::stop::{StopToken, mk_stop_token};
use teloxide::types::Update;
use teloxide::update_listeners::{StatefulListener, UpdateListener};
use tokio::sync::mpsc;

use super::state::AvaBot;
use crate::shared::body::read_whole;
use crate::shared::listen::{Refusals, accept_until, bind};

/// The header Telegram sends the secret in.
const SECRET_HEADER: &str = "x-telegram-bot-api-secret-token";

/// The largest update body read (Telegram's updates are a few KiB).
const MAX_BODY: usize = 1 << 20;

/// Updates received but not yet taken by the dispatcher; when full, Telegram is told to
/// try again later (503), and it does.
const QUEUE: usize = 1024;

/// How many of the latest update ids are remembered, to take each update once.
const RECENT_UPDATES: usize = 4096;

/// The ids of the updates taken most recently, oldest first, at most [`RECENT_UPDATES`].
#[derive(Default)]
struct Taken {
    order: VecDeque<u32>,
    ids: HashSet<u32>,
}

impl Taken {
    /// Whether `id` was taken already.
    fn contains(&self, id: u32) -> bool {
        self.ids.contains(&id)
    }

    /// Remembers `id` as taken, forgetting the oldest beyond [`RECENT_UPDATES`].
    fn insert(&mut self, id: u32) {
        if self.ids.insert(id) {
            self.order.push_back(id);
        }
        while self.order.len() > RECENT_UPDATES {
            if let Some(old) = self.order.pop_front() {
                self.ids.remove(&old);
            }
        }
    }
}

/// Where Telegram sends updates, and the secret it proves itself with.
#[derive(Clone, Debug)]
pub(crate) struct Webhook {
    /// The public HTTPS address Telegram posts to; its path is the path served.
    pub(crate) url: url::Url,
    /// The local address to listen on (behind the proxy that holds the certificate).
    pub(crate) addr: SocketAddr,
    /// The secret token: 1 to 256 of `A-Z a-z 0-9 _ -` (Telegram's rule).
    pub(crate) secret: Secret,
}

impl Webhook {
    /// A webhook, or what is wrong with its settings.
    pub(crate) fn new(url: &str, addr: SocketAddr, secret: Option<Secret>) -> anyhow::Result<Self> {
        let url =
            url::Url::parse(url).with_context(|| format!("--webhook-url `{url}` is not a URL"))?;
        if url.scheme() != "https" {
            bail!(
                "--webhook-url must be an https:// address (Telegram posts only to HTTPS), not {}",
                url.scheme()
            );
        }
        let Some(secret) = secret else {
            bail!(
                "webhook mode needs a secret: set AVA_WEBHOOK_SECRET (1 to 256 of A-Z, a-z, 0-9, \
                 _ and -; the same for every replica)"
            );
        };
        let s = secret.expose();
        if s.is_empty()
            || s.len() > 256
            || !s
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        {
            bail!(
                "AVA_WEBHOOK_SECRET must be 1 to 256 of A-Z, a-z, 0-9, _ and - (Telegram's rule); \
                 it has {} characters",
                s.chars().count()
            );
        }
        Ok(Self { url, addr, secret })
    }
}

/// Updates as they arrive, for the dispatcher.
type Queue = (mpsc::Receiver<Update>, StopToken);

fn updates(state: &mut Queue) -> impl futures_util::Stream<Item = Result<Update, Infallible>> + '_ {
    futures_util::stream::poll_fn(move |cx| state.0.poll_recv(cx).map(|u| u.map(Ok)))
}

fn stop_token(state: &mut Queue) -> StopToken {
    state.1.clone()
}

/// Registers `hook` with Telegram, listens on its address, and returns the listener the
/// dispatcher reads updates from, with the address bound. The server stops when the
/// listener is stopped; updates it already accepted (Telegram was told 200) stay queued and
/// are handled before the dispatcher ends.
pub(crate) async fn listen(
    bot: &AvaBot,
    hook: &Webhook,
) -> anyhow::Result<(
    impl UpdateListener<Err = Infallible> + Send + use<>,
    SocketAddr,
)> {
    let tcp = bind(hook.addr)
        .await
        .context("listen for Telegram's webhook")?;
    let bound = tcp.local_addr().context("read the webhook's address")?;
    bot.set_webhook(hook.url.clone())
        .secret_token(hook.secret.expose().to_owned())
        .await
        .context(
            "register the webhook with Telegram (setWebhook failed: is TELOXIDE_TOKEN right?)",
        )?;
    let (tx, rx) = mpsc::channel(QUEUE);
    let (token, flag) = mk_stop_token();
    let gate = Gate {
        path: hook.url.path().to_owned(),
        secret: hook.secret.clone(),
        tx,
        taken: Arc::default(),
        refused: Arc::new(Refusals::new(
            "a webhook request without the right secret token",
        )),
    };
    // A request being read when the bot stops may finish (its update is then still handled);
    // a client that never finishes one is cut off, so the queue closes and the dispatcher can
    // stop.
    tokio::spawn(accept_until(tcp, flag, "webhook", move |request, peer| {
        let gate = gate.clone();
        async move { gate.take(request, peer).await.map(BodyExt::boxed) }
    }));
    let listener = StatefulListener::new((rx, token), updates, stop_token);
    Ok((listener, bound))
}

/// What one connection checks each request against.
#[derive(Clone)]
struct Gate {
    path: String,
    secret: Secret,
    tx: mpsc::Sender<Update>,
    /// The updates taken lately, shared by every connection.
    taken: Arc<Mutex<Taken>>,
    /// Requests refused for want of the secret.
    refused: Arc<Refusals>,
}

fn plain(status: StatusCode, text: &'static str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from_static(text.as_bytes())));
    *response.status_mut() = status;
    response
}

impl Gate {
    async fn take(&self, request: Request<Incoming>, peer: SocketAddr) -> Response<Full<Bytes>> {
        if request.uri().path() != self.path {
            return plain(StatusCode::NOT_FOUND, "not found\n");
        }
        if request.method() != Method::POST {
            return plain(StatusCode::METHOD_NOT_ALLOWED, "POST updates here\n");
        }
        let given = request
            .headers()
            .get(SECRET_HEADER)
            .map(|v| v.as_bytes())
            .unwrap_or_default();
        if !bool::from(given.ct_eq(self.secret.expose().as_bytes())) {
            self.refused.note(peer);
            return plain(StatusCode::UNAUTHORIZED, "wrong or missing secret token\n");
        }
        // Telegram's updates are small: anything unread is refused as too large.
        let Ok(bytes) = read_whole(request.into_body(), MAX_BODY).await else {
            return plain(StatusCode::PAYLOAD_TOO_LARGE, "the update is too large\n");
        };
        let update: Update = match serde_json::from_slice(&bytes) {
            Ok(u) => u,
            Err(e) => {
                // Telegram sends an update again until it is accepted: one it cannot
                // read would block every later one, so it is said and let go.
                tracing::error!(error = %e, "a webhook update is not an update this bot reads; skipped");
                return plain(StatusCode::OK, "skipped\n");
            }
        };
        // Held while the update is queued, so two deliveries of one update at once queue it
        // once.
        let mut taken = self.taken.lock().unwrap_or_else(PoisonError::into_inner);
        let id = update.id.0;
        if taken.contains(id) {
            tracing::debug!(
                update_id = id,
                "an update delivered again; taken once already"
            );
            return plain(StatusCode::OK, "ok (taken already)\n");
        }
        match self.tx.try_send(update) {
            Ok(()) => {
                taken.insert(id);
                plain(StatusCode::OK, "ok\n")
            }
            Err(mpsc::error::TrySendError::Full(_)) => {
                plain(StatusCode::SERVICE_UNAVAILABLE, "busy; send it again\n")
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {
                plain(StatusCode::SERVICE_UNAVAILABLE, "stopping\n")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(url: &str, secret: Option<&str>) -> String {
        let addr = "127.0.0.1:0".parse().unwrap();
        match Webhook::new(url, addr, secret.map(Secret::new)) {
            Ok(_) => String::new(),
            Err(e) => format!("{e:#}"),
        }
    }

    #[test]
    fn the_latest_update_ids_are_remembered_and_no_more() {
        let mut taken = Taken::default();
        for id in 0..(RECENT_UPDATES as u32 + 10) {
            assert!(!taken.contains(id));
            taken.insert(id);
            taken.insert(id);
            assert!(taken.contains(id));
        }
        assert_eq!(taken.ids.len(), RECENT_UPDATES);
        assert_eq!(taken.order.len(), RECENT_UPDATES);
        assert!(!taken.contains(9) && taken.contains(10));
    }

    #[test]
    fn settings_are_checked_before_anything_starts() {
        let ok = "https://bot.example.org/hook";
        assert_eq!(error(ok, Some("abc_DEF-123")), "");
        assert!(error("http://bot.example.org/hook", Some("abc")).contains("must be an https://"));
        assert!(error("bot.example.org", Some("abc")).contains("is not a URL"));
        assert!(error(ok, None).contains("set AVA_WEBHOOK_SECRET"));
        let refused = error(ok, Some("has spaces and ü"));
        assert!(refused.contains("1 to 256 of A-Z"), "{refused}");
        assert!(
            !refused.contains("has spaces"),
            "the secret is never printed: {refused}"
        );
        assert!(error(ok, Some(&"x".repeat(257))).contains("it has 257 characters"));
    }
}
