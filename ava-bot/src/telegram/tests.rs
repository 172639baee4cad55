//! End to end: a real teloxide `Dispatcher` long-polling a loopback fake Bot API, with a
//! loopback fake Ollama server as the model and a real SQLite store.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use memory_core::{HashingEmbedder, MemoryBackend, Scope};
use memory_sqlite::{SqliteBackend, SqliteConfig};
use serde_json::{Value, json};
use teloxide::adaptors::throttle::Limits;
use tokio_util::sync::CancellationToken;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

use super::{
    APOLOGY_MODEL, APOLOGY_NOTHING, BotState, LEARNED_REACTION, MAX_MESSAGE, NOT_SAVED, dispatcher,
    make_bot, serve, serve_from, split_message,
};
use crate::agent::Agent;
use crate::llm::OllamaChat;
use crate::llm::tests::{ollama_answer, ollama_tool_call};

const TOKEN: &str = "123456:TEST-token";
/// Upper bound on any wait in these tests; they normally finish far sooner.
const PATIENCE: Duration = Duration::from_secs(60);

fn api(method_name: &str) -> String {
    format!("/bot{TOKEN}/{method_name}")
}

fn ok(result: Value) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_json(json!({"ok": true, "result": result}))
}

/// A text message update from `user` in `chat`.
fn text_update(id: i64, user: u64, chat: i64, text: &str) -> Value {
    let mut message = json!({
        "message_id": id,
        "date": 1_773_000_000 + id,
        "chat": {"id": chat, "type": "private", "first_name": format!("user{user}")},
        "from": {"id": user, "is_bot": false, "first_name": format!("user{user}")},
        "text": text,
    });
    if text.starts_with('/') {
        let len = text.split_whitespace().next().unwrap_or_default().len();
        message["entities"] = json!([{"type": "bot_command", "offset": 0, "length": len}]);
    }
    json!({"update_id": id, "message": message})
}

/// Answers SendMessage with the message Telegram would return.
struct Echo;

impl Respond for Echo {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let body = sent_body(request);
        ok(json!({
            "message_id": 9000,
            "date": 1_773_000_000,
            "chat": {"id": body["chat_id"], "type": "private", "first_name": "someone"},
            "from": {"id": 1, "is_bot": true, "first_name": "Ava", "username": "ava_test_bot"},
            "text": body["text"],
        }))
    }
}

/// A request's parameters, JSON or form-encoded.
fn sent_body(request: &Request) -> Value {
    serde_json::from_slice(&request.body).unwrap_or_else(|_| {
        let form: std::collections::BTreeMap<String, String> =
            url::form_urlencoded::parse(&request.body)
                .into_owned()
                .collect();
        let mut v = json!(form);
        if let Some(id) = form.get("chat_id").and_then(|s| s.parse::<i64>().ok()) {
            v["chat_id"] = json!(id);
        }
        v
    })
}

/// A fake Bot API that hands out `updates` once, then nothing.
async fn fake_telegram(updates: Vec<Value>) -> MockServer {
    let server = MockServer::start().await;
    let me = json!({"id": 1, "is_bot": true, "first_name": "Ava", "username": "ava_test_bot",
        "can_join_groups": true, "can_read_all_group_messages": false, "supports_inline_queries": false,
        "can_connect_to_business": false, "has_main_web_app": false});
    Mock::given(method("POST"))
        .and(path(api("GetMe")))
        .respond_with(ok(me))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path(api("GetWebhookInfo")))
        .respond_with(ok(
            json!({"url": "", "has_custom_certificate": false, "pending_update_count": 0}),
        ))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path(api("DeleteWebhook")))
        .respond_with(ok(json!(true)))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path(api("GetUpdates")))
        .respond_with(ok(json!(updates)))
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&server)
        .await;
    // Long polling with nothing new: a short pause so the loop does not spin.
    Mock::given(method("POST"))
        .and(path(api("GetUpdates")))
        .respond_with(ok(json!([])).set_delay(Duration::from_millis(50)))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path(api("SendMessage")))
        .respond_with(Echo)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path(api("SetMessageReaction")))
        .respond_with(ok(json!(true)))
        .mount(&server)
        .await;
    server
}

/// A fake Ollama whose every answer is `response`.
async fn fake_ollama(response: ResponseTemplate) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/api/chat"))
        .respond_with(response)
        .mount(&server)
        .await;
    server
}

struct Harness {
    _dir: tempfile::TempDir,
    store: Arc<SqliteBackend>,
    telegram: MockServer,
}

impl Harness {
    async fn new(telegram: MockServer) -> Self {
        Self::with_config(telegram, SqliteConfig::default()).await
    }

    /// A bot whose store can be read but not written (stands in for a full disk or a
    /// file the bot may not write).
    async fn read_only(telegram: MockServer) -> Self {
        let h = Self::new(telegram).await;
        h.store.close().await;
        let config = SqliteConfig {
            read_only: true,
            ..SqliteConfig::default()
        };
        let embedder = Arc::new(HashingEmbedder::new(256).unwrap());
        let store = SqliteBackend::open(&h._dir.path().join("bot.db"), Some(embedder), config)
            .await
            .unwrap();
        Self {
            store: Arc::new(store),
            ..h
        }
    }

    async fn with_config(telegram: MockServer, config: SqliteConfig) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let embedder = Arc::new(HashingEmbedder::new(256).unwrap());
        let store = SqliteBackend::open(&dir.path().join("bot.db"), Some(embedder), config)
            .await
            .unwrap();
        Self {
            _dir: dir,
            store: Arc::new(store),
            telegram,
        }
    }

    /// A bot on the same store, taking `updates` from a new fake Bot API: the same user
    /// later, after what the first run stored.
    async fn again(&self, updates: Vec<Value>) -> Self {
        Self {
            _dir: tempfile::tempdir().unwrap(),
            store: Arc::clone(&self.store),
            telegram: fake_telegram(updates).await,
        }
    }

    /// A bot on another connection to the same store file (as another replica, or this bot
    /// after a restart, opens it), taking `updates` from a new fake Bot API.
    async fn reopened(&self, updates: Vec<Value>) -> Self {
        let embedder = Arc::new(HashingEmbedder::new(256).unwrap());
        let store = SqliteBackend::open(
            &self._dir.path().join("bot.db"),
            Some(embedder),
            SqliteConfig::default(),
        )
        .await
        .unwrap();
        Self {
            _dir: tempfile::tempdir().unwrap(),
            store: Arc::new(store),
            telegram: fake_telegram(updates).await,
        }
    }

    /// Runs the bot until `replies` messages were sent (or PATIENCE runs out), shuts it down
    /// and returns the texts sent, in order.
    async fn run(
        &self,
        llm: &MockServer,
        llm_timeout: Duration,
        allow: Option<BTreeSet<u64>>,
        replies: usize,
    ) -> Vec<(i64, String)> {
        let agent = Agent::new(
            Arc::clone(&self.store) as Arc<dyn MemoryBackend>,
            None,
            4000,
        )
        .unwrap();
        let model = Arc::new(OllamaChat::new(&llm.uri(), "llama-test", llm_timeout).unwrap());
        self.run_agent(agent, model, allow, None, replies).await
    }

    /// [`Harness::run`] with a given agent and model, reacting to what taught it something
    /// with `reaction`.
    async fn run_agent(
        &self,
        agent: Agent,
        model: Arc<dyn hydrate::ChatModel>,
        allow: Option<BTreeSet<u64>>,
        reaction: Option<String>,
        replies: usize,
    ) -> Vec<(i64, String)> {
        let state = Arc::new(BotState::new(agent, model, allow).with_learned_reaction(reaction));
        // Generous limits: the test chats send faster than Telegram's one message a second.
        let limits = Limits {
            messages_per_sec_chat: 1000,
            messages_per_min_chat: 10_000,
            messages_per_min_channel_or_supergroup: 10_000,
            messages_per_sec_overall: 1000,
        };
        let bot = make_bot(TOKEN, Some(&self.telegram.uri()), limits).unwrap();
        let mut dispatcher = dispatcher(bot.clone(), state);
        let stop = CancellationToken::new();
        let stopping = stop.clone().cancelled_owned();
        let running = tokio::spawn(async move { serve(&mut dispatcher, bot, stopping).await });
        self.until_replied(replies, stop, running).await
    }

    /// Waits until the fake Bot API has `replies` messages sent (or [`PATIENCE`] passed),
    /// stops the bot, and returns what was sent.
    async fn until_replied(
        &self,
        replies: usize,
        stop: CancellationToken,
        running: tokio::task::JoinHandle<anyhow::Result<()>>,
    ) -> Vec<(i64, String)> {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        let mut sent = self.sent().await;
        while sent.len() < replies && tokio::time::Instant::now() < deadline {
            assert!(
                !running.is_finished(),
                "the bot stopped early: {:?}",
                running.await
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
            sent = self.sent().await;
        }
        stopped(stop, running).await;
        let sent = self.sent().await;
        assert!(
            sent.len() >= replies,
            "expected {replies} replies, got {sent:?}"
        );
        sent
    }

    /// The texts of the newest ten memories of `scope`, newest first.
    async fn texts(&self, scope: &Scope) -> Vec<String> {
        self.store
            .recent(scope, 10, &memory_core::Filter::default())
            .await
            .unwrap()
            .into_iter()
            .map(|m| m.content)
            .collect()
    }

    /// (chat id, text) of every SendMessage that succeeded or was attempted.
    async fn sent(&self) -> Vec<(i64, String)> {
        self.telegram
            .received_requests()
            .await
            .unwrap_or_default()
            .iter()
            .filter(|r| r.url.path() == api("SendMessage"))
            .map(|r| {
                let b = sent_body(r);
                (
                    b["chat_id"].as_i64().unwrap(),
                    b["text"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    }
}

/// Stops the bot and waits (at most [`PATIENCE`]) for it to end; a bot that does not stop
/// fails the test rather than hanging it.
async fn stopped(stop: CancellationToken, running: tokio::task::JoinHandle<anyhow::Result<()>>) {
    stop.cancel();
    tokio::time::timeout(PATIENCE, running)
        .await
        .expect("the bot did not stop within PATIENCE of being told to")
        .unwrap()
        .unwrap();
}

fn llm_bodies(requests: &[Request]) -> Vec<String> {
    requests
        .iter()
        .map(|r| String::from_utf8_lossy(&r.body).into_owned())
        .collect()
}

fn reply_in(sent: &[(i64, String)], chat: i64, needle: &str) -> String {
    sent.iter()
        .find(|(c, t)| *c == chat && t.contains(needle))
        .map(|(_, t)| t.clone())
        .unwrap_or_else(|| panic!("no reply in chat {chat} containing {needle:?}: {sent:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remembered_facts_reach_the_prompt_and_users_stay_apart() {
    let (alice, alice_chat, bob, bob_chat) = (111_u64, 1001_i64, 222_u64, 2002_i64);
    let telegram = fake_telegram(vec![
        text_update(1, alice, alice_chat, "/remember My cat is called Pixel"),
        text_update(2, bob, bob_chat, "/remember My dog is called Rex"),
        text_update(3, alice, alice_chat, "What is my pet called?"),
        text_update(4, bob, bob_chat, "Tell me the name of my pet?"),
        text_update(5, alice, alice_chat, "/context"),
        // The same fact again: one memory.
        text_update(6, alice, alice_chat, "/remember my cat is called  Pixel."),
    ])
    .await;
    let llm = fake_ollama(ResponseTemplate::new(200).set_body_json(ollama_answer("Fine."))).await;
    let h = Harness::new(telegram).await;
    let sent = h.run(&llm, PATIENCE, None, 6).await;

    let remembered = reply_in(&sent, alice_chat, "Remembered");
    reply_in(&sent, bob_chat, "Remembered");
    let again = reply_in(&sent, alice_chat, "I already knew that");
    assert!(
        again.contains(remembered.split("(id ").nth(1).unwrap()),
        "{again} / {remembered}"
    );
    assert_eq!(
        sent.iter().filter(|(_, t)| t == "Fine.").count(),
        2,
        "{sent:?}"
    );

    let bodies = llm_bodies(&llm.received_requests().await.unwrap());
    assert_eq!(bodies.len(), 2, "one model call per question");
    let to_alice = bodies
        .iter()
        .find(|b| b.contains("What is my pet called?"))
        .unwrap();
    let to_bob = bodies
        .iter()
        .find(|b| b.contains("Tell me the name of my pet?"))
        .unwrap();
    assert!(to_alice.contains("My cat is called Pixel"), "{to_alice}");
    assert!(to_bob.contains("My dog is called Rex"), "{to_bob}");
    for leak in ["Rex", "Tell me the name"] {
        assert!(
            !to_alice.contains(leak),
            "Bob's data reached Alice's prompt: {leak}"
        );
    }
    for leak in ["Pixel", "What is my pet"] {
        assert!(
            !to_bob.contains(leak),
            "Alice's data reached Bob's prompt: {leak}"
        );
    }

    // /context explains Alice's last prompt, with the remembered fact in it.
    let id = remembered
        .split("(id ")
        .nth(1)
        .unwrap()
        .trim_end_matches(')')
        .to_owned();
    let context = reply_in(&sent, alice_chat, "The last prompt");
    assert!(context.contains("memories in the prompt: 1"), "{context}");
    assert!(context.contains(&id), "{context}");
    assert!(context.contains("\"My cat is called Pixel\""), "{context}");
    assert!(!context.contains("Rex"), "{context}");

    // Everything was stored in the right scope: the question and the answer in the chat,
    // the fact (once) as Alice's own.
    let scope = Scope::for_user(alice.to_string())
        .unwrap()
        .in_chat(alice_chat.to_string())
        .unwrap();
    assert_eq!(h.store.count(&scope).await.unwrap(), 2);
    assert_eq!(h.store.count(&scope.user_wide()).await.unwrap(), 1);
}

/// The model's messages of each call, as the fake Ollama received them: (role, content).
fn llm_messages(requests: &[Request]) -> Vec<Vec<(String, String)>> {
    requests
        .iter()
        .map(|r| {
            let body: Value = serde_json::from_slice(&r.body).unwrap();
            body["messages"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| {
                    (
                        m["role"].as_str().unwrap_or_default().to_owned(),
                        m["content"].as_str().unwrap_or_default().to_owned(),
                    )
                })
                .collect()
        })
        .collect()
}

/// Consecutive messages of one chat get prompts a provider can cache: each starts with the
/// one before up to where its conversation ends (the conversation extended, not re-rendered),
/// the clock and what is recalled come last, small talk gets nothing recalled, and the
/// report kept for `/context` counts the shared prefix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_prompt_of_a_chat_starts_with_the_one_before() {
    let (alice, chat) = (111_u64, 1001_i64);
    let telegram = fake_telegram(vec![
        text_update(1, alice, chat, "/remember My cat is called Pixel"),
        text_update(
            2,
            alice,
            chat,
            "My sister moved to Porto and works as a nurse there.",
        ),
        text_update(3, alice, chat, "Which train goes from Lisbon to Porto?"),
        text_update(4, alice, chat, "thanks!"),
    ])
    .await;
    let llm = fake_ollama(ResponseTemplate::new(200).set_body_json(ollama_answer("Fine."))).await;
    let h = Harness::new(telegram).await;
    h.run(&llm, PATIENCE, None, 4).await;
    let calls = llm_messages(&llm.received_requests().await.unwrap());
    assert_eq!(calls.len(), 3, "{calls:#?}");
    let talk = |call: &[(String, String)]| {
        call.iter()
            .position(|(_, c)| c.starts_with("<recalled-memory kind=\"temporal\">"))
    };
    for pair in calls.windows(2) {
        let (before, after) = (&pair[0], &pair[1]);
        let at = talk(after).expect("the conversation so far");
        // Everything before the conversation is the same; the conversation goes on where
        // the one before ended (or starts, at the second message).
        assert_eq!(before[..at], after[..at], "{before:#?}\n{after:#?}");
        if let Some(was) = talk(before) {
            assert_eq!(was, at);
            let open = before[at].1.strip_suffix("\n</recalled-memory>").unwrap();
            assert!(after[at].1.starts_with(open), "{before:#?}\n{after:#?}");
        }
        // The clock, then the message, last.
        let n = after.len();
        assert!(after[n - 2].1.starts_with("Current time:"), "{after:#?}");
    }
    // "thanks!" has nothing recalled for it: no data block after the conversation.
    let thanks = &calls[2];
    assert_eq!(thanks.last().unwrap().1, "thanks!");
    let at = talk(thanks).unwrap();
    assert!(
        thanks[at + 1..]
            .iter()
            .all(|(_, c)| !c.starts_with("<recalled-memory")),
        "{thanks:#?}"
    );
    // The report kept for /context says how much of it repeats the prompt before.
    let scope = Scope::for_user(alice.to_string())
        .unwrap()
        .in_chat(chat.to_string())
        .unwrap();
    let kept = crate::prompts::newest(h.store.as_ref(), &scope)
        .await
        .unwrap();
    assert_eq!(kept.len(), 3);
    let cache = &kept[0].1.report.cache;
    assert!(cache.hit, "{cache:?}");
    let shared = cache.shared_prefix_tokens.unwrap();
    assert!(
        shared >= cache.stable_tokens && shared < cache.prompt_tokens,
        "{cache:?}"
    );
    assert!(kept[0].1.next.is_some());
}

#[path = "../../tests/it/common/replay.rs"]
mod replay;

/// Answers each model call with the answer the replayed conversation gives its message.
struct Scripted(std::collections::HashMap<String, String>);

impl Respond for Scripted {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&request.body).unwrap_or_default();
        let last = body["messages"]
            .as_array()
            .and_then(|m| m.last())
            .and_then(|m| m["content"].as_str())
            .unwrap_or_default();
        let answer = self.0.get(last).cloned().unwrap_or_else(|| "Noted.".into());
        ResponseTemplate::new(200).set_body_json(ollama_answer(&answer))
    }
}

/// Thirty messages of one private chat, replayed through the bot: each prompt repeats most
/// of the one before (the system prompt, who is talking, the conversation so far), since
/// what changes with each message comes last. Prints the share (BENCHMARKS.md records it for
/// the dev files, with `AVA_REPLAY_FILE`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_replayed_through_the_bot_gets_prompts_a_provider_can_cache() {
    let (alice, chat) = (111_u64, 1001_i64);
    let exchanges: Vec<(String, String)> = replay::exchanges().into_iter().take(30).collect();
    let updates = exchanges
        .iter()
        .enumerate()
        .map(|(i, (said, _))| text_update(i as i64 + 1, alice, chat, said))
        .collect();
    let llm = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/api/chat"))
        .respond_with(Scripted(exchanges.iter().cloned().collect()))
        .mount(&llm)
        .await;
    let h = Harness::new(fake_telegram(updates).await).await;
    h.run(&llm, PATIENCE, None, exchanges.len()).await;
    let prompts: Vec<String> = llm
        .received_requests()
        .await
        .unwrap()
        .iter()
        .map(|r| {
            let body: Value = serde_json::from_slice(&r.body).unwrap();
            replay::prompt_text(body["messages"].as_array().unwrap())
        })
        .collect();
    assert_eq!(prompts.len(), exchanges.len());
    let share = replay::mean_shared_prefix(&prompts);
    eprintln!(
        "the bot, {} messages of one chat: shared prefix {share:.3}",
        prompts.len()
    );
    assert!(share >= 0.70, "shared prefix {share:.3}");
}

/// `/context` reads the prompt from the store: a bot on another connection to the same file
/// (another replica, or this bot after a restart) explains what the first built; in a group
/// each member their own, and none to a member it built none for. Forgetting the question
/// takes its prompt along.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn context_explains_a_prompt_another_bot_built_until_its_question_is_forgotten() {
    let (alice, alice_chat, bob, bob_chat, group) =
        (111_u64, 1001_i64, 222_u64, 2002_i64, -100_777);
    let telegram = fake_telegram(vec![
        text_update(1, alice, alice_chat, "/remember My cat is called Pixel"),
        text_update(2, alice, alice_chat, "Where does Pixel sleep?"),
        group_update(3, alice, group, "Does Oscar come along?"),
        group_update(4, bob, group, "Is Lisbon nice?"),
    ])
    .await;
    let llm = fake_ollama(ResponseTemplate::new(200).set_body_json(ollama_answer("Fine."))).await;
    let h = Harness::new(telegram).await;
    h.run(&llm, PATIENCE, None, 4).await;

    let other = h
        .reopened(vec![
            text_update(5, alice, alice_chat, "/context"),
            group_update(6, alice, group, "/context"),
            group_update(7, bob, group, "/context"),
            group_update(8, 333, group, "/context"),
            text_update(9, bob, bob_chat, "/context"),
        ])
        .await;
    let sent = other.run(&llm, PATIENCE, None, 5).await;
    let context = reply_in(&sent, alice_chat, "The last prompt");
    assert!(context.contains("question: names Pixel"), "{context}");
    assert!(context.contains("\"My cat is called Pixel\""), "{context}");
    let in_group: Vec<&str> = sent
        .iter()
        .filter(|(c, _)| *c == group)
        .map(|(_, t)| t.as_str())
        .collect();
    assert_eq!(in_group.len(), 3, "{sent:?}");
    // (Bob's prompt holds Alice's message: the group's conversation is everyone's.)
    assert!(
        in_group[0].contains("question: names Oscar") && !in_group[0].contains("Lisbon"),
        "Alice's: {in_group:?}"
    );
    assert!(
        in_group[1].contains("question: names Lisbon"),
        "Bob's: {in_group:?}"
    );
    assert!(
        in_group[2].starts_with("None of the last 16 prompts I built in this group was for you"),
        "{in_group:?}"
    );
    assert!(
        reply_in(&sent, bob_chat, "prompt").starts_with("I have not built a prompt for you"),
        "{sent:?}"
    );

    // Alice forgets her question: the prompt that quotes it goes too.
    let scope = Scope::for_user(alice.to_string())
        .unwrap()
        .in_chat(alice_chat.to_string())
        .unwrap();
    let question = h
        .store
        .recent(&scope, 10, &memory_core::Filter::default())
        .await
        .unwrap()
        .into_iter()
        .find(|m| m.content == "Where does Pixel sleep?")
        .unwrap();
    let again = h
        .reopened(vec![
            text_update(10, alice, alice_chat, &format!("/forget {}", question.id)),
            text_update(11, alice, alice_chat, "/context"),
        ])
        .await;
    let sent = again.run(&llm, PATIENCE, None, 2).await;
    assert_eq!(sent[0].1, "Forgotten.", "{sent:?}");
    assert!(
        sent[1]
            .1
            .starts_with("I have not built a prompt for you in this chat yet"),
        "{sent:?}"
    );
}

/// A fact Alice tells in her private chat is hers: it reaches her other private contexts
/// (another chat, as `ava context` would build it) but never a group she is in, nor Bob; what
/// she remembers in the group stays in the group.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_private_fact_follows_its_person_but_never_into_a_group() {
    let (alice, bob, group) = (111_u64, 222_u64, -100_777_i64);
    let alice_chat = i64::try_from(alice).unwrap();
    let telegram = fake_telegram(vec![
        text_update(1, alice, alice_chat, "/remember My cat is called Pixel"),
        group_update(2, alice, group, "Quick poll: what is my cat called?"),
        group_update(3, bob, group, "And what is the cat of Alice called?"),
        group_update(4, alice, group, "/recall cat"),
        group_update(5, alice, group, "/remember The team meets on Fridays"),
        {
            let mut u = text_update(6, alice, alice_chat, "What is my cat called?");
            u["message"]["from"]["last_name"] = json!("Liddell");
            u["message"]["from"]["username"] = json!("alice");
            u["message"]["from"]["language_code"] = json!("pt");
            u
        },
    ])
    .await;
    let llm = fake_ollama(ResponseTemplate::new(200).set_body_json(ollama_answer("Fine."))).await;
    let h = Harness::new(telegram).await;
    let sent = h.run(&llm, PATIENCE, None, 6).await;
    reply_in(&sent, alice_chat, "Remembered");
    let recalled = sent
        .iter()
        .filter(|(c, _)| *c == group)
        .map(|(_, t)| t.as_str())
        .find(|t| t.contains("remember nothing") || t.contains("What I remember"))
        .unwrap_or_else(|| panic!("no /recall reply in the group: {sent:?}"));
    assert!(!recalled.contains("Pixel"), "{recalled}");

    let bodies = llm_bodies(&llm.received_requests().await.unwrap());
    let asked = |q: &str| {
        bodies
            .iter()
            .find(|b| b.contains(q))
            .unwrap_or_else(|| panic!("no model call for {q:?}"))
            .clone()
    };
    for q in ["Quick poll", "the cat of Alice"] {
        assert!(
            !asked(q).contains("Pixel"),
            "a private fact reached a group's prompt"
        );
    }
    assert!(asked("What is my cat called?").contains("My cat is called Pixel"));
    // Each prompt says who is talking, where, and in which language to answer.
    let poll = asked("Quick poll");
    assert!(poll.contains("User: user111"), "{poll}");
    // The group shares one conversation: Bob's prompt holds what Alice said just before,
    // with her name.
    let bobs = asked("the cat of Alice");
    assert!(
        bobs.contains("user111: Quick poll: what is my cat called?"),
        "{bobs}"
    );
    assert!(poll.contains(r#"Chat: the group \"the team\""#), "{poll}");
    assert!(asked("the cat of Alice").contains("User: user222"));
    let private = asked("What is my cat called?");
    assert!(
        private.contains("User: user111 Liddell (@alice)"),
        "{private}"
    );
    assert!(private.contains("Chat: a private chat"), "{private}");
    assert!(private.contains("Language: pt (answer in it"), "{private}");

    // Another private context of Alice's (`ava context --user 111 --chat cli`) has it;
    // Bob's has not, nor has the group's note reached Alice's private prompt.
    let agent =
        crate::agent::Agent::dry_run(Arc::clone(&h.store) as Arc<dyn MemoryBackend>, None, 4000)
            .unwrap();
    let text = |p: hydrate::CompiledPrompt| {
        p.messages
            .iter()
            .map(|m| m.content.clone())
            .collect::<Vec<_>>()
            .join("\n")
    };
    // The prompt `ava context` would build for `scope`.
    let prompt_for = async |scope: &Scope, q: &str| {
        text(
            agent
                .prepare(scope, hydrate::SessionState::default(), None, q)
                .await
                .unwrap(),
        )
    };
    let elsewhere = Scope::for_user(alice.to_string())
        .unwrap()
        .in_chat("cli")
        .unwrap();
    let prompt = prompt_for(&elsewhere, "What is my cat called?").await;
    assert!(prompt.contains("My cat is called Pixel"), "{prompt}");
    assert!(!prompt.contains("Fridays"), "{prompt}");
    let bobs = Scope::for_user(bob.to_string())
        .unwrap()
        .in_chat("cli")
        .unwrap();
    let prompt = prompt_for(&bobs, "What is Alice's cat called?").await;
    assert!(!prompt.contains("Pixel"), "{prompt}");
    // The group's conversation is the group's: its own scope, each message tagged with
    // who said it.
    let in_group = Scope::for_user(crate::agent::GROUP_USER)
        .unwrap()
        .in_chat(group.to_string())
        .unwrap();
    let own = Scope::for_user(alice.to_string()).unwrap();
    assert_eq!(
        h.store.count(&own).await.unwrap(),
        1,
        "only the private fact"
    );
    let from_bob = memory_core::Filter {
        tags: Some(memory_core::TagQuery::any([memory_core::Tag::new(
            "from:222",
        )
        .unwrap()])),
        ..memory_core::Filter::default()
    };
    let bobs_part = h.store.recent(&in_group, 10, &from_bob).await.unwrap();
    assert_eq!(
        bobs_part.len(),
        2,
        "Bob's message and the answer to it: {bobs_part:?}"
    );
    assert!(
        bobs_part
            .iter()
            .any(|m| m.content == "user222: And what is the cat of Alice called?")
    );
    assert!(
        h.store
            .recent(&in_group, 10, &memory_core::Filter::default())
            .await
            .unwrap()
            .iter()
            .any(|m| m.content == "The team meets on Fridays"),
        "what is remembered in a group stays there"
    );
}

/// What learning changed, the user sees and can undo: a reaction on the message that
/// taught Ava a fact, `/facts` numbered, `/forget N` ends one (kept in the history), `/undo`
/// takes back the last thing learned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn learned_facts_are_shown_ended_and_undone() {
    let (alice, chat) = (111_u64, 111_i64);
    let llm = MockServer::start().await;
    // Fact extraction, then every answer.
    Mock::given(method("POST"))
        .and(path("/api/chat"))
        .and(wiremock::matchers::body_string_contains("<conversation>"))
        .respond_with(ResponseTemplate::new(200).set_body_json(ollama_answer(
            r#"{"facts": ["Alice's cat is called Pixel."]}"#,
        )))
        .with_priority(1)
        .mount(&llm)
        .await;
    Mock::given(method("POST"))
        .and(path("/api/chat"))
        .respond_with(ResponseTemplate::new(200).set_body_json(ollama_answer("Nice.")))
        .mount(&llm)
        .await;
    let model: Arc<dyn hydrate::ChatModel> =
        Arc::new(OllamaChat::new(&llm.uri(), "llama-test", PATIENCE).unwrap());
    let telegram = fake_telegram(vec![
        text_update(1, alice, chat, "/remember I live in Porto"),
        text_update(2, alice, chat, "My cat is called Pixel."),
    ])
    .await;
    let h = Harness::new(telegram).await;
    let agent = Agent::new(Arc::clone(&h.store) as Arc<dyn MemoryBackend>, None, 4000)
        .unwrap()
        .with_facts(Some(hydrate::FactExtractor::new(Arc::clone(&model))));
    let reaction = Some(LEARNED_REACTION.to_owned());
    let sent = h
        .run_agent(agent.clone(), Arc::clone(&model), None, reaction.clone(), 2)
        .await;
    assert_eq!(sent[1], (chat, "Nice.".to_owned()), "{sent:?}");
    agent.finish_background().await;
    // The reaction follows learning, on the message that taught it (and only that one).
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let reactions = loop {
        let r: Vec<Value> = h
            .telegram
            .received_requests()
            .await
            .unwrap()
            .iter()
            .filter(|r| r.url.path() == api("SetMessageReaction"))
            .map(sent_body)
            .collect();
        if !r.is_empty() || tokio::time::Instant::now() > deadline {
            break r;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(reactions.len(), 1, "{reactions:?}");
    assert_eq!(reactions[0]["message_id"], 2, "{reactions:?}");
    assert!(
        reactions[0].to_string().contains(LEARNED_REACTION),
        "{reactions:?}"
    );

    // The same bot (the same agent: it remembers what it learned last), new messages.
    let h2 = h
        .again(vec![
            text_update(3, alice, chat, "/facts"),
            text_update(4, alice, chat, "/forget 1"),
            text_update(5, alice, chat, "/forget 7"),
            text_update(6, alice, chat, "/facts"),
            text_update(7, alice, chat, "/undo"),
            text_update(8, alice, chat, "/facts"),
            text_update(9, alice, chat, "/undo"),
        ])
        .await;
    let sent = h2.run_agent(agent, model, None, reaction, 7).await;
    let said: Vec<&str> = sent.iter().map(|(_, t)| t.as_str()).collect();
    assert!(said[0].starts_with("1. I live in Porto ("), "{said:?}");
    assert!(
        said[0].contains("\n2. Alice's cat is called Pixel. ("),
        "{said:?}"
    );
    assert!(said[0].contains("learned from a message of yours; yours in every private chat"));
    assert!(
        said[1].contains("\"I live in Porto\" no longer holds"),
        "{said:?}"
    );
    assert!(said[2].contains("give a number from 1 to 2"), "{said:?}");
    assert!(
        said[3].starts_with("1. Alice's cat is called Pixel."),
        "{said:?}"
    );
    assert!(!said[3].contains("Porto"), "{said:?}");
    assert!(
        said[4].contains("no longer: Alice's cat is called Pixel."),
        "{said:?}"
    );
    assert!(
        said[5].contains("I hold no facts about you here."),
        "{said:?}"
    );
    assert!(said[6].contains("learned nothing"), "{said:?}");
    // Nothing was deleted: both facts are in the store, ended.
    let own = Scope::for_user(alice.to_string()).unwrap();
    assert_eq!(h.store.count(&own).await.unwrap(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_model_can_remember_through_its_tools() {
    let telegram = fake_telegram(vec![text_update(1, 7, 70, "Remember that I like tea.")]).await;
    let llm = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/api/chat"))
        .respond_with(ResponseTemplate::new(200).set_body_json(ollama_tool_call(
            "remember",
            json!({"content": "The user likes tea."}),
        )))
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&llm)
        .await;
    Mock::given(method("POST"))
        .and(path("/api/chat"))
        .respond_with(ResponseTemplate::new(200).set_body_json(ollama_answer("Tea it is.")))
        .mount(&llm)
        .await;
    let h = Harness::new(telegram).await;
    let sent = h.run(&llm, PATIENCE, None, 1).await;
    assert_eq!(sent, vec![(70, "Tea it is.".to_owned())]);
    let scope = Scope::for_user("7").unwrap().in_chat("70").unwrap();
    let facts =
        crate::agent::Agent::new(Arc::clone(&h.store) as Arc<dyn MemoryBackend>, None, 4000)
            .unwrap()
            .ops(scope, crate::agent::Audience::Private)
            .recall("tea", 5)
            .await
            .unwrap();
    assert!(
        facts.iter().any(|m| m.content == "The user likes tea."),
        "{facts:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_or_slow_model_gets_an_apology_and_the_message_is_kept() {
    for (llm, timeout) in [
        (
            fake_ollama(ResponseTemplate::new(500).set_body_string("{\"error\":\"boom\"}")).await,
            PATIENCE,
        ),
        (
            fake_ollama(
                ResponseTemplate::new(200)
                    .set_body_json(ollama_answer("late"))
                    .set_delay(Duration::from_secs(60)),
            )
            .await,
            Duration::from_millis(300),
        ),
    ] {
        let telegram = fake_telegram(vec![text_update(1, 5, 50, "Are you there?")]).await;
        let h = Harness::new(telegram).await;
        let sent = h.run(&llm, timeout, None, 1).await;
        assert_eq!(sent, vec![(50, APOLOGY_MODEL.to_owned())]);
        let scope = Scope::for_user("5").unwrap().in_chat("50").unwrap();
        assert_eq!(
            h.store.count(&scope).await.unwrap(),
            1,
            "the message is kept"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_never_claims_a_message_was_saved_when_it_was_not() {
    // The model answers, but the store cannot take the exchange: the answer is sent, with
    // a note that it will not be remembered.
    let llm =
        fake_ollama(ResponseTemplate::new(200).set_body_json(ollama_answer("Tea it is."))).await;
    let telegram = fake_telegram(vec![text_update(1, 5, 50, "Tea or coffee?")]).await;
    let h = Harness::read_only(telegram).await;
    let sent = h.run(&llm, PATIENCE, None, 1).await;
    assert_eq!(sent, vec![(50, format!("Tea it is.\n\n{NOT_SAVED}"))]);
    // Neither the model nor the store: the apology says both, and claims nothing.
    let llm = fake_ollama(ResponseTemplate::new(500).set_body_string("{\"error\":\"boom\"}")).await;
    let telegram = fake_telegram(vec![text_update(1, 5, 50, "Are you there?")]).await;
    let h = Harness::read_only(telegram).await;
    let sent = h.run(&llm, PATIENCE, None, 1).await;
    assert_eq!(sent, vec![(50, APOLOGY_NOTHING.to_owned())]);
    assert!(!APOLOGY_NOTHING.contains("is saved"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_from_telegram_is_retried() {
    let telegram = fake_telegram(vec![text_update(1, 5, 50, "/start")]).await;
    Mock::given(method("POST"))
        .and(path(api("SendMessage")))
        .respond_with(ResponseTemplate::new(429).set_body_json(json!({
            "ok": false, "error_code": 429,
            "description": "Too Many Requests: retry after 1",
            "parameters": {"retry_after": 1}
        })))
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&telegram)
        .await;
    let llm = fake_ollama(ResponseTemplate::new(500)).await;
    let h = Harness::new(telegram).await;
    let sent = h.run(&llm, PATIENCE, None, 2).await;
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert_eq!(sent[0], sent[1], "the same reply, sent again");
    assert!(sent[0].1.contains("Hi! I am Ava"), "{sent:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_update_is_skipped_and_the_bot_goes_on() {
    let telegram = fake_telegram(vec![
        json!({"update_id": 1, "message": {"this is": "not a message"}}),
        text_update(2, 5, 50, "/help"),
    ])
    .await;
    let llm = fake_ollama(ResponseTemplate::new(500)).await;
    let h = Harness::new(telegram).await;
    let sent = h.run(&llm, PATIENCE, None, 1).await;
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert!(sent[0].1.contains("/remember"), "{sent:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_recall_forget_stats_wipe_and_the_allow_list() {
    let (me, chat) = (5_u64, 50_i64);
    let telegram = fake_telegram(vec![
        text_update(1, me, chat, "/remember I live in Porto"),
        text_update(2, me, chat, "/recall Porto"),
        text_update(3, me, chat, "/stats"),
        text_update(4, me, chat, "/forget not-an-id"),
        text_update(5, me, chat, "/wipe yes"),
        text_update(6, me, chat, "/wipe"),
        text_update(7, me, chat, "/wipe yes"),
        text_update(8, me, chat, "/recall Porto"),
        text_update(9, me, chat, "/frobnicate"),
        text_update(10, 666, 60, "let me in"),
    ])
    .await;
    let llm = fake_ollama(ResponseTemplate::new(500)).await;
    let h = Harness::new(telegram).await;
    let allow = Some(BTreeSet::from([me]));
    let sent = h.run(&llm, PATIENCE, allow, 10).await;
    let mine: Vec<&str> = sent
        .iter()
        .filter(|(c, _)| *c == chat)
        .map(|(_, t)| t.as_str())
        .collect();
    assert!(mine[0].starts_with("Remembered."), "{mine:?}");
    assert!(mine[1].contains("I live in Porto (id "), "{mine:?}");
    assert!(
        mine[2].contains("0 in this chat, 1 facts of your own (every private chat with me sees them), 1 in all (0 chats)"),
        "{mine:?}"
    );
    assert!(mine[3].contains("/forget 2"), "{mine:?}");
    assert!(mine[4].contains("Nothing to confirm"), "{mine:?}");
    assert!(
        mine[5].contains("deletes all 1 of your memories"),
        "{mine:?}"
    );
    assert!(mine[6].contains("deleted 1 memories"), "{mine:?}");
    assert!(mine[7].contains("remember nothing"), "{mine:?}");
    assert!(mine[8].contains("do not know that command"), "{mine:?}");
    assert_eq!(
        reply_in(&sent, 60, "private"),
        "Sorry, this bot is private."
    );
    assert!(
        llm.received_requests().await.unwrap().is_empty(),
        "no model call for commands or strangers"
    );
}

#[test]
fn long_replies_are_split_at_telegrams_limit() {
    let words = "lorem ipsum ".repeat(1000); // 12 000 chars
    let parts = split_message(&words, MAX_MESSAGE);
    assert_eq!(parts.len(), 3);
    assert!(
        parts
            .iter()
            .all(|p| p.encode_utf16().count() <= MAX_MESSAGE)
    );
    assert_eq!(parts.concat().replace(' ', ""), words.replace(' ', ""));
    // Characters outside the BMP count twice, and are never cut in half.
    let emoji = "😀".repeat(3000);
    let parts = split_message(&emoji, MAX_MESSAGE);
    assert_eq!(parts[0].chars().count(), 2048);
    assert_eq!(parts.concat(), emoji);
    assert_eq!(split_message("short", MAX_MESSAGE), vec!["short"]);
    assert!(split_message("", MAX_MESSAGE).is_empty());
}

/// A message in group `chat`: from `user`, or, with `user` 0, from an anonymous admin
/// (Telegram's `GroupAnonymousBot`, sent on behalf of the group).
fn group_update(id: i64, user: u64, chat: i64, text: &str) -> Value {
    let mut update = text_update(id, user, chat, text);
    let message = &mut update["message"];
    message["chat"] = json!({"id": chat, "type": "supergroup", "title": "the team"});
    if user == 0 {
        message["from"] = json!({"id": 1_087_968_824_u64, "is_bot": true,
            "first_name": "Group", "username": "GroupAnonymousBot"});
        message["sender_chat"] = json!({"id": chat, "type": "supergroup", "title": "the team"});
    }
    update
}

/// In a group's shared conversation a member forgets and wipes only their own part: their
/// messages and the answers to them; the others' stay.
/// A member who `/share`s in a group gets answers there that use their private facts; the
/// others' prompts never hold them, and `/share off` ends it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_who_shares_gets_their_private_facts_in_the_group_and_no_one_else() {
    let (alice, bob, group) = (111_u64, 222_u64, -100_555_i64);
    let telegram = fake_telegram(vec![text_update(
        1,
        alice,
        111,
        "/remember My cat is called Pixel",
    )])
    .await;
    let llm = fake_ollama(ResponseTemplate::new(200).set_body_json(ollama_answer("Fine."))).await;
    let h = Harness::new(telegram).await;
    h.run(&llm, PATIENCE, None, 1).await;
    let h2 = h
        .again(vec![
            group_update(2, alice, group, "/share"),
            group_update(3, alice, group, "Question one: my cat?"),
            group_update(4, bob, group, "Question two: her cat?"),
            group_update(5, alice, group, "/share off"),
            group_update(6, alice, group, "Question three: my cat?"),
        ])
        .await;
    let sent = h2.run(&llm, PATIENCE, None, 5).await;
    assert!(sent[0].1.starts_with("Done: my answers to you"), "{sent:?}");
    assert!(sent[3].1.contains("stay out of this group"), "{sent:?}");
    let bodies = llm_bodies(&llm.received_requests().await.unwrap());
    let asked = |q: &str| bodies.iter().find(|b| b.contains(q)).unwrap().clone();
    assert!(asked("Question one").contains("My cat is called Pixel"));
    assert!(!asked("Question two").contains("Pixel"), "Bob's prompt");
    assert!(
        !asked("Question three").contains("Pixel"),
        "after /share off"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_group_each_member_forgets_and_wipes_only_their_own_part() {
    let (alice, bob, group) = (111_u64, 222_u64, -100_888_i64);
    let telegram = fake_telegram(vec![
        group_update(1, alice, group, "Hello team"),
        group_update(2, bob, group, "Hi Alice"),
    ])
    .await;
    let llm = fake_ollama(ResponseTemplate::new(200).set_body_json(ollama_answer("Hello!"))).await;
    let h = Harness::new(telegram).await;
    h.run(&llm, PATIENCE, None, 2).await;
    let in_group = Scope::for_user(crate::agent::GROUP_USER)
        .unwrap()
        .in_chat(group.to_string())
        .unwrap();
    let all = h
        .store
        .recent(&in_group, 10, &memory_core::Filter::default())
        .await
        .unwrap();
    assert_eq!(all.len(), 4, "two messages, two answers: {all:?}");
    let bobs = all
        .iter()
        .find(|m| m.content == "user222: Hi Alice")
        .unwrap()
        .id;

    let h2 = h
        .again(vec![
            group_update(3, alice, group, &format!("/forget {bobs}")),
            group_update(4, bob, group, "/wipe"),
            group_update(5, bob, group, "/wipe yes"),
        ])
        .await;
    let sent = h2.run(&llm, PATIENCE, None, 3).await;
    let said: Vec<&str> = sent.iter().map(|(_, t)| t.as_str()).collect();
    assert!(said[0].contains("not one of yours"), "{said:?}");
    assert!(
        said[1].contains("deletes all 2 of your memories in this group"),
        "{said:?}"
    );
    assert!(said[2].contains("deleted 2 memories"), "{said:?}");
    let left = h.texts(&in_group).await;
    assert_eq!(
        left,
        ["Hello!", "user111: Hello team"],
        "Alice's part stays"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_group_other_bots_commands_and_anonymous_admins_get_no_memory() {
    let (group, carol) = (-100_500_i64, 333_u64);
    let telegram = fake_telegram(vec![
        // Another bot's commands: not answered, nothing stored.
        group_update(1, carol, group, "/recall@other_bot cat"),
        group_update(2, carol, group, "/remember@other_bot the door code is 4711"),
        // An unknown command without `@` may be another bot's too.
        group_update(3, carol, group, "/weather Lisbon"),
        // Anonymous admins share one Telegram identity: refused, nothing stored.
        group_update(4, 0, group, "/remember the safe code is 1234"),
        group_update(5, 0, group, "/recall safe"),
        // This bot's own command, addressed by name.
        group_update(6, carol, group, "/recall@ava_test_bot door"),
    ])
    .await;
    let llm = fake_ollama(ResponseTemplate::new(500)).await;
    let h = Harness::new(telegram).await;
    let sent = h.run(&llm, PATIENCE, None, 3).await;
    assert_eq!(sent.len(), 3, "{sent:?}");
    assert_eq!(
        sent.iter()
            .filter(|(_, t)| t.contains("anonymous admins"))
            .count(),
        2,
        "{sent:?}"
    );
    let own = reply_in(&sent, group, "remember nothing");
    assert!(!own.contains("4711"), "{own}");
    for (user, what) in [(carol, "Carol"), (1_087_968_824, "the anonymous admins")] {
        let scope = Scope::for_user(user.to_string())
            .unwrap()
            .in_chat(group.to_string())
            .unwrap();
        assert_eq!(h.store.count(&scope).await.unwrap(), 0, "{what}");
    }
    assert!(llm.received_requests().await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_command_tells_the_user_what_failed_not_where() {
    let telegram = fake_telegram(vec![text_update(1, 5, 50, "/remember my bike is blue")]).await;
    let llm = fake_ollama(ResponseTemplate::new(500)).await;
    let h = Harness::read_only(telegram).await;
    let sent = h.run(&llm, PATIENCE, None, 1).await;
    let dir = h._dir.path().to_str().unwrap().to_owned();
    assert_eq!(
        sent,
        vec![(
            50,
            "Sorry, I could not store the memory. The details are in the bot's log.".to_owned()
        )],
        "the store is under {dir}"
    );
}

/// An answer of three Telegram messages, each starting with its own marker.
fn three_part_answer() -> String {
    ["PART-ONE", "PART-TWO", "PART-THREE"]
        .iter()
        .map(|m| format!("{m} {}", "lorem ipsum ".repeat(330)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The assistant messages stored in user 5's chat 50.
async fn stored_answers(h: &Harness) -> Vec<String> {
    let scope = Scope::for_user("5").unwrap().in_chat("50").unwrap();
    h.store
        .recent(&scope, 10, &memory_core::Filter::default())
        .await
        .unwrap()
        .into_iter()
        .filter(|m| m.role == Some(memory_core::Role::Assistant))
        .map(|m| m.content)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_5xx_from_telegram_is_retried_and_the_answer_arrives_whole() {
    let answer = three_part_answer();
    assert_eq!(split_message(&answer, MAX_MESSAGE).len(), 3);
    let telegram = fake_telegram(vec![text_update(1, 5, 50, "Tell me everything.")]).await;
    Mock::given(method("POST"))
        .and(path(api("SendMessage")))
        .and(wiremock::matchers::body_string_contains("PART-TWO"))
        .respond_with(ResponseTemplate::new(502).set_body_json(json!({
            "ok": false, "error_code": 502, "description": "Bad Gateway"
        })))
        .up_to_n_times(1)
        .with_priority(1)
        .mount(&telegram)
        .await;
    let llm = fake_ollama(ResponseTemplate::new(200).set_body_json(ollama_answer(&answer))).await;
    let h = Harness::new(telegram).await;
    let sent = h.run(&llm, PATIENCE, None, 4).await;
    let markers: Vec<&str> = sent
        .iter()
        .map(|(_, t)| t.split_whitespace().next().unwrap())
        .collect();
    assert_eq!(markers, ["PART-ONE", "PART-TWO", "PART-TWO", "PART-THREE"]);
    assert_eq!(stored_answers(&h).await, vec![answer]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_that_could_not_be_delivered_is_not_stored_as_said() {
    let answer = three_part_answer();
    let telegram = fake_telegram(vec![text_update(1, 5, 50, "Tell me everything.")]).await;
    // A proxy's error page instead of the Bot API's JSON, every time.
    Mock::given(method("POST"))
        .and(path(api("SendMessage")))
        .and(wiremock::matchers::body_string_contains("PART-TWO"))
        .respond_with(ResponseTemplate::new(200).set_body_string("<html>upstream down</html>"))
        .with_priority(1)
        .mount(&telegram)
        .await;
    let llm = fake_ollama(ResponseTemplate::new(200).set_body_json(ollama_answer(&answer))).await;
    let h = Harness::new(telegram).await;
    let sent = h.run(&llm, PATIENCE, None, 5).await;
    assert_eq!(
        sent.len(),
        5,
        "part one, then part two tried four times: {sent:?}"
    );
    let stored = stored_answers(&h).await;
    assert_eq!(stored.len(), 1, "{stored:?}");
    assert!(stored[0].starts_with(&sent[0].1), "{}", stored[0]);
    assert!(
        stored[0].ends_with(crate::agent::UNDELIVERED),
        "{}",
        stored[0]
    );
    assert!(!stored[0].contains("PART-TWO") && !stored[0].contains("PART-THREE"));
}

/// Random messages from random users in random private chats and groups (private facts told
/// with /remember, group facts, chatter in both): no prompt ever holds another person's
/// private fact, a speaker's own private fact in a group, a group's conversation in a private
/// chat, or one group's conversation in another. Seeds from AVA_PROPERTY_SEEDS (comma
/// separated) replay or widen it; a failure names its seed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_prompt_holds_what_its_context_may_not_see_under_random_messages() {
    for seed in memory_core::testing::property_seeds(&[0x5eed_0003, 0x5eed_0004]) {
        privacy_property(seed, 36).await;
    }
}

/// Where a step happens: a user's private chat, or a group (by index).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Place {
    Private,
    Group(usize),
}

async fn privacy_property(seed: u64, steps: usize) {
    const USERS: [u64; 3] = [111, 222, 333];
    const GROUPS: [i64; 2] = [-100_001, -100_002];
    let mut state = seed | 1;
    let mut below = |n: usize| {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        (state.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 33) as usize % n
    };
    // Per step: who, where, and what marker a question there carries.
    let mut plan = Vec::new();
    let mut updates = Vec::new();
    // Markers and where they may be seen: a private fact by its owner's private chats, a
    // group's fact or chatter by that group.
    let mut private_facts: Vec<(String, u64)> = Vec::new();
    let mut group_words: Vec<(String, usize)> = Vec::new();
    for step in 0..steps {
        let user = USERS[below(USERS.len())];
        let place = if below(2) == 0 {
            Place::Private
        } else {
            Place::Group(below(GROUPS.len()))
        };
        let id = i64::try_from(step).unwrap() + 1;
        let text = match below(3) {
            0 => {
                // Ended by `z`, so that no marker is a prefix of another.
                let marker = format!("secret{seed:x}s{step}z");
                match place {
                    Place::Private => private_facts.push((marker.clone(), user)),
                    Place::Group(g) => group_words.push((marker.clone(), g)),
                }
                format!("/remember the code word is {marker}")
            }
            1 => {
                let marker = format!("chatter{seed:x}s{step}z");
                if let Place::Group(g) = place {
                    group_words.push((marker.clone(), g));
                }
                format!("by the way, {marker} happened")
            }
            _ => format!("question q{step}x: what is the code word?"),
        };
        updates.push(match place {
            Place::Private => text_update(id, user, i64::try_from(user).unwrap(), &text),
            Place::Group(g) => group_update(id, user, GROUPS[g], &text),
        });
        plan.push((user, place, text));
    }
    let llm = fake_ollama(ResponseTemplate::new(200).set_body_json(ollama_answer("ok"))).await;
    let h = Harness::new(fake_telegram(updates).await).await;
    let sent = h.run(&llm, PATIENCE, None, steps).await;
    assert_eq!(sent.len(), steps, "seed {seed:#x}: every message answered");

    let bodies = llm_bodies(&llm.received_requests().await.unwrap());
    for (step, (user, place, text)) in plan.iter().enumerate() {
        if text.starts_with('/') {
            continue;
        }
        // The model call for this message: its text is the prompt's last message.
        let Some(body) = bodies.iter().find(|b| b.contains(text.as_str())) else {
            panic!("seed {seed:#x} step {step}: no model call for {text:?}");
        };
        for (marker, owner) in &private_facts {
            let may = *place == Place::Private && owner == user;
            assert!(
                may || !body.contains(marker.as_str()),
                "seed {seed:#x} step {step}: user {user} in {place:?} saw {owner}'s private {marker}"
            );
        }
        for (marker, g) in &group_words {
            let may = *place == Place::Group(*g);
            assert!(
                may || !body.contains(marker.as_str()),
                "seed {seed:#x} step {step}: user {user} in {place:?} saw group {g}'s {marker}"
            );
        }
    }
}

#[test]
fn per_chat_state_is_bounded_and_the_least_recently_set_goes_first() {
    let mut kept = super::PerChat::default();
    let n = super::CONVERSATIONS_KEPT;
    for i in 0..n {
        kept.insert((i as u64, 1), i);
    }
    // Set again: now the most recent.
    kept.insert((0, 1), 0);
    kept.insert((u64::MAX, 1), n);
    assert_eq!(kept.entries.len(), n, "bounded");
    assert_eq!(kept.get(&(0, 1)), Some(&0), "set again, kept");
    assert_eq!(kept.get(&(1, 1)), None, "the least recently set went");
    assert_eq!(kept.get(&(u64::MAX, 1)), Some(&n));
    assert_eq!(kept.remove(&(2, 1)), Some(2));
    assert_eq!(kept.get(&(2, 1)), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn erase_takes_everything_of_a_person_and_nothing_of_anyone_else() {
    let (alice, bob, group) = (111_u64, 222_u64, -100_777_i64);
    let telegram = fake_telegram(vec![
        text_update(1, alice, alice as i64, "/remember my cat is called Pixel"),
        text_update(2, alice, alice as i64, "I live in Porto"),
        group_update(3, alice, group, "Hello team"),
        group_update(4, bob, group, "Hi Alice"),
        text_update(5, bob, bob as i64, "/remember my dog is called Rex"),
    ])
    .await;
    let llm = fake_ollama(ResponseTemplate::new(200).set_body_json(ollama_answer("Hello!"))).await;
    let h = Harness::new(telegram).await;
    h.run(&llm, PATIENCE, None, 5).await;
    let count = |user: String| {
        let store = Arc::clone(&h.store);
        async move {
            let mut n = 0;
            for scope in store.user_scopes("default", &user).await.unwrap() {
                n += store.count(&scope).await.unwrap();
            }
            n
        }
    };
    let before = (count(alice.to_string()).await, count(bob.to_string()).await);
    assert!(before.0 >= 3 && before.1 >= 1, "{before:?}");
    // The prompts kept of her questions: in her chat, and in the group (beside Bob's).
    let in_group = Scope::for_user(crate::agent::GROUP_USER)
        .unwrap()
        .in_chat(group.to_string())
        .unwrap();
    let her_chat = Scope::for_user(alice.to_string())
        .unwrap()
        .in_chat(alice.to_string())
        .unwrap();
    let prompts = |scope: Scope| {
        let store = Arc::clone(&h.store);
        async move { store.records(&scope, "prompt", 16).await.unwrap().len() }
    };
    assert_eq!(prompts(her_chat.clone()).await, 1);
    assert_eq!(prompts(in_group.clone()).await, 2);
    // Leases that name them: a learner that died holding Alice's, pruning of her chats and
    // of Bob's, a /wipe each left unconfirmed in the group.
    let minute = Duration::from_secs(60);
    let lease_names = |user: u64| {
        let store = Arc::clone(&h.store);
        async move {
            let mut names = Vec::new();
            for scope in store
                .user_scopes("default", &user.to_string())
                .await
                .unwrap()
            {
                names.push(ava_memory::erase::learning_lease(&scope));
                names.push(crate::upkeep::pruning_lease(&scope));
            }
            names.push(crate::erase::confirmation_lease(
                "wipe",
                "default",
                &user.to_string(),
                &group.to_string(),
            ));
            names
        }
    };
    let (alices, bobs) = (lease_names(alice).await, lease_names(bob).await);
    for name in alices.iter().chain(&bobs) {
        // Erasing waits for a learner's turn to end (the learner may be writing a fact
        // of hers): the dead one's runs out soon.
        let ttl = if name.starts_with("learn:") && alices.contains(name) {
            Duration::from_secs(2)
        } else {
            minute
        };
        assert!(h.store.try_lease(name, "replica-x", ttl).await.unwrap());
    }

    let h2 = h
        .again(vec![
            group_update(6, alice, group, "/erase"),
            text_update(7, alice, alice as i64, "/erase yes"),
            text_update(8, alice, alice as i64, "/erase"),
            text_update(9, alice, alice as i64, "/erase yes"),
        ])
        .await;
    let sent = h2.run(&llm, PATIENCE, None, 4).await;
    // Chats are answered concurrently: each chat's replies in order.
    let in_chat = |chat: i64| -> Vec<&str> {
        sent.iter()
            .filter(|(c, _)| *c == chat)
            .map(|(_, t)| t.as_str())
            .collect()
    };
    let (public, private) = (in_chat(group), in_chat(alice as i64));
    assert_eq!(public.len(), 1, "{sent:?}");
    assert!(public[0].contains("in a private chat"), "{public:?}");
    assert!(private[0].contains("Nothing to confirm"), "{private:?}");
    assert!(private[1].contains("cannot be undone"), "{private:?}");
    assert!(private[2].contains("I erased"), "{private:?}");
    assert_eq!(
        count(alice.to_string()).await,
        0,
        "nothing of Alice is left"
    );
    assert_eq!(
        count(bob.to_string()).await,
        before.1,
        "Bob's own memories stay"
    );
    let left = h.texts(&in_group).await;
    assert!(left.iter().any(|m| m == "user222: Hi Alice"), "{left:?}");
    assert!(!left.iter().any(|m| m.contains("Hello team")), "{left:?}");
    // The prompts that quoted her went with her memories: her chat's, and the group's
    // (deleting her part of it takes the group's prompts, which may quote her).
    assert_eq!(prompts(her_chat).await, 0);
    assert_eq!(prompts(in_group).await, 0);
    // Alice's leases were ended (free to anyone, a minute before they would expire); Bob's
    // are still held.
    for name in &alices {
        assert!(
            h.store.try_lease(name, "after", minute).await.unwrap(),
            "{name} was ended"
        );
    }
    for name in &bobs {
        assert!(
            !h.store.try_lease(name, "after", minute).await.unwrap(),
            "{name} is still held"
        );
    }
}

/// A bot taking updates by webhook from the fake Telegram of `h`, its model `llm`, and
/// `secret`: its address, its stop, and its task.
async fn webhook_bot(
    h: &Harness,
    llm: &MockServer,
    secret: &str,
) -> (
    std::net::SocketAddr,
    CancellationToken,
    tokio::task::JoinHandle<anyhow::Result<()>>,
) {
    Mock::given(method("POST"))
        .and(path(api("SetWebhook")))
        .respond_with(ok(json!(true)))
        .mount(&h.telegram)
        .await;
    let agent = Agent::new(Arc::clone(&h.store) as Arc<dyn MemoryBackend>, None, 4000).unwrap();
    let model = Arc::new(OllamaChat::new(&llm.uri(), "llama-test", PATIENCE).unwrap());
    let state = Arc::new(BotState::new(agent, model, None));
    let bot = make_bot(TOKEN, Some(&h.telegram.uri()), Limits::default()).unwrap();
    let hook = crate::telegram::webhook::Webhook::new(
        "https://bot.example.org/telegram/hook",
        "127.0.0.1:0".parse().unwrap(),
        Some(memory_core::Secret::new(secret)),
    )
    .unwrap();
    let (listener, addr) = crate::telegram::webhook::listen(&bot, &hook).await.unwrap();
    let mut dispatcher = dispatcher(bot.clone(), state);
    let stop = CancellationToken::new();
    let stopping = stop.clone().cancelled_owned();
    let running =
        tokio::spawn(async move { serve_from(&mut dispatcher, listener, stopping).await });
    (addr, stop, running)
}

/// Posts `update` to the webhook bot at `addr`, path `at`, with the secret header if
/// `given`, as Telegram would; the status. A request never answered fails the test
/// rather than hanging it.
async fn post_update(
    addr: std::net::SocketAddr,
    at: &str,
    given: Option<&str>,
    update: Value,
) -> u16 {
    let client = reqwest::Client::builder()
        .timeout(PATIENCE)
        .build()
        .unwrap();
    let mut request = client.post(format!("http://{addr}{at}")).json(&update);
    if let Some(s) = given {
        request = request.header("X-Telegram-Bot-Api-Secret-Token", s);
    }
    request.send().await.unwrap().status().as_u16()
}

/// Webhook mode: the bot registers its address and secret with Telegram (setWebhook), answers
/// an update posted with the secret, and refuses one without it, with a wrong one or at
/// another path (nothing of those is answered or stored).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn by_webhook_the_bot_answers_only_what_carries_the_secret() {
    let llm =
        fake_ollama(ResponseTemplate::new(200).set_body_json(ollama_answer("Hello by webhook.")))
            .await;
    let h = Harness::new(fake_telegram(vec![]).await).await;
    let secret = "s3cret_TOKEN-1";
    let (addr, stop, running) = webhook_bot(&h, &llm, secret).await;

    let post = |at, given, update| post_update(addr, at, given, update);
    let hook_path = "/telegram/hook";
    let sneaky = |id| text_update(id, 666, 666, "I am not Telegram");
    assert_eq!(post(hook_path, None, sneaky(1)).await, 401);
    assert_eq!(
        post(hook_path, Some("s3cret_TOKEN-2"), sneaky(2)).await,
        401
    );
    assert_eq!(post("/elsewhere", Some(secret), sneaky(3)).await, 404);
    let update = text_update(4, 111, 111, "Hi there, webhook!");
    assert_eq!(post(hook_path, Some(secret), update).await, 200);

    let sent = h.until_replied(1, stop, running).await;
    assert_eq!(sent.len(), 1, "{sent:?}");
    reply_in(&sent, 111, "Hello by webhook.");
    let registered = h
        .telegram
        .received_requests()
        .await
        .unwrap()
        .into_iter()
        .find(|r| r.url.path() == api("SetWebhook"))
        .expect("setWebhook was called");
    let body = String::from_utf8_lossy(&registered.body);
    assert!(
        body.contains("bot.example.org") && body.contains(secret),
        "{body}"
    );
    assert!(
        h.store.scopes(None, Some("666")).await.unwrap().is_empty(),
        "nothing of the refused was kept"
    );
    assert!(!h.store.scopes(None, Some("111")).await.unwrap().is_empty());
}

/// Telegram is told 200 for an update the bot has only queued, so a stop that comes right
/// after must still answer and store it, and the bot must then end (a stop asked while the
/// dispatcher was handing an update over was once lost, and the bot ran on).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_right_after_a_webhook_update_still_answers_it_and_ends() {
    let llm =
        fake_ollama(ResponseTemplate::new(200).set_body_json(ollama_answer("Answered."))).await;
    let h = Harness::new(fake_telegram(vec![]).await).await;
    let secret = "stop_test";
    let (addr, stop, running) = webhook_bot(&h, &llm, secret).await;
    for (id, user) in [(1, 111), (2, 222)] {
        let update = text_update(id, user, user as i64, "Are you still there?");
        assert_eq!(
            post_update(addr, "/telegram/hook", Some(secret), update).await,
            200
        );
    }
    stopped(stop, running).await;
    let sent = h.sent().await;
    reply_in(&sent, 111, "Answered.");
    reply_in(&sent, 222, "Answered.");
    for user in ["111", "222"] {
        assert!(
            !h.store.scopes(None, Some(user)).await.unwrap().is_empty(),
            "user {user}'s message was stored"
        );
    }
}

/// A fake model whose fact extraction finds `fact` in a conversation that mentions `cue`
/// (after `delay`) and nothing in any other, and that answers every message "Noted.".
async fn learning_model(cue: &str, fact: &str, delay: Duration) -> MockServer {
    let llm = MockServer::start().await;
    let found = json!({ "facts": [fact] }).to_string();
    Mock::given(method("POST"))
        .and(path("/api/chat"))
        .and(wiremock::matchers::body_string_contains("<conversation>"))
        .and(wiremock::matchers::body_string_contains(cue))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(ollama_answer(&found))
                .set_delay(delay),
        )
        .with_priority(1)
        .mount(&llm)
        .await;
    Mock::given(method("POST"))
        .and(path("/api/chat"))
        .and(wiremock::matchers::body_string_contains("<conversation>"))
        .respond_with(ResponseTemplate::new(200).set_body_json(ollama_answer(r#"{"facts": []}"#)))
        .with_priority(2)
        .mount(&llm)
        .await;
    Mock::given(method("POST"))
        .and(path("/api/chat"))
        .respond_with(ResponseTemplate::new(200).set_body_json(ollama_answer("Noted.")))
        .with_priority(3)
        .mount(&llm)
        .await;
    llm
}

/// An agent on `h`'s store that learns facts with `llm`.
fn learning_agent(h: &Harness, llm: &MockServer) -> (Agent, Arc<dyn hydrate::ChatModel>) {
    let model: Arc<dyn hydrate::ChatModel> =
        Arc::new(OllamaChat::new(&llm.uri(), "llama-test", PATIENCE).unwrap());
    let agent = Agent::new(Arc::clone(&h.store) as Arc<dyn MemoryBackend>, None, 4000)
        .unwrap()
        .with_facts(Some(hydrate::FactExtractor::new(Arc::clone(&model))));
    (agent, model)
}

#[path = "../../tests/it/common/files.rs"]
mod files;

/// Which of `h`'s store files hold `needle` as bytes.
fn files_holding(h: &Harness, needle: &str) -> Vec<String> {
    files::holding(h._dir.path(), "bot.db", needle)
}

/// The issue's first paragraph: Alice tells a fact with /remember in a group and says where
/// she lives there (a fact is learned from it); in private she erases herself. None of her
/// words is left in the store's files, while Bob's message in the group stays, readable and
/// recalled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_erase_none_of_her_words_is_in_the_store_files_and_bobs_stay() {
    let (alice, bob, group) = (111_u64, 222_u64, -100_901_i64);
    let llm = learning_model(
        "Quinta Azulejo",
        "Alice lives at Quinta Azulejo.",
        Duration::ZERO,
    )
    .await;
    let telegram = fake_telegram(vec![
        group_update(1, alice, group, "/remember I am allergic to kumquats"),
        group_update(2, alice, group, "I live at Quinta Azulejo these days"),
        group_update(3, bob, group, "Bob prefers oolong over espresso"),
    ])
    .await;
    let h = Harness::new(telegram).await;
    let (agent, model) = learning_agent(&h, &llm);
    h.run_agent(agent.clone(), Arc::clone(&model), None, None, 3)
        .await;
    agent.finish_background().await;
    let in_group = Scope::for_user(crate::agent::GROUP_USER)
        .unwrap()
        .in_chat(group.to_string())
        .unwrap();
    let hers = memory_core::Tag::new(format!("from:{alice}")).unwrap();
    let facts = memory_core::Filter {
        kinds: vec![memory_core::MemoryKind::Fact],
        ..memory_core::Filter::default()
    };
    let group_facts = h.store.recent(&in_group, 10, &facts).await.unwrap();
    assert_eq!(group_facts.len(), 2, "{group_facts:?}");
    for f in &group_facts {
        assert!(f.tags.contains(&hers), "each is hers: {f:?}");
        assert!(
            !f.context
                .as_deref()
                .unwrap_or_default()
                .contains("these days"),
            "a learned fact quotes nothing of the message: {f:?}"
        );
    }
    // Before: her words are in the files, as Bob's are.
    assert!(!files_holding(&h, "kumquats").is_empty());

    let h2 = h
        .again(vec![
            text_update(4, alice, alice as i64, "/erase"),
            text_update(5, alice, alice as i64, "/erase yes"),
        ])
        .await;
    let sent = h2.run_agent(agent.clone(), model, None, None, 2).await;
    assert!(sent[1].1.contains("I erased"), "{sent:?}");
    agent.finish_background().await;
    assert!(
        h.store
            .recent(&in_group, 10, &facts)
            .await
            .unwrap()
            .is_empty()
    );
    for needle in ["kumquats", "Quinta Azulejo", "Azulejo"] {
        assert_eq!(
            files_holding(&h, needle),
            Vec::<String>::new(),
            "{needle} is still readable in the store's files"
        );
    }
    // Bob's message stays: in the files, and recalled in the group.
    assert!(!files_holding(&h, "oolong").is_empty());
    let found = agent
        .ops(in_group, crate::agent::Audience::Group)
        .recall("oolong espresso", 5)
        .await
        .unwrap();
    assert!(
        found
            .iter()
            .any(|m| m.content.contains("Bob prefers oolong")),
        "{found:?}"
    );
}

/// A fact still being learned when its person erases themself is erased too: the erase
/// waits for the learner's turn (or the learner finds the message gone).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn erase_during_learning_leaves_nothing() {
    let alice = 111_u64;
    let llm = learning_model(
        "locker code",
        "Alice's locker code is 4471.",
        Duration::from_millis(1500),
    )
    .await;
    let telegram = fake_telegram(vec![
        text_update(1, alice, alice as i64, "My locker code is 4471"),
        text_update(2, alice, alice as i64, "/erase"),
        text_update(3, alice, alice as i64, "/erase yes"),
    ])
    .await;
    let h = Harness::new(telegram).await;
    let (agent, model) = learning_agent(&h, &llm);
    let sent = h.run_agent(agent.clone(), model, None, None, 3).await;
    assert!(sent[2].1.contains("I erased"), "{sent:?}");
    agent.finish_background().await;
    let mut left = Vec::new();
    for scope in h
        .store
        .user_scopes("default", &alice.to_string())
        .await
        .unwrap()
    {
        left.extend(h.texts(&scope).await);
    }
    assert_eq!(left, Vec::<String>::new(), "nothing of Alice is left");
}

/// In a group a member acts on their own part only: another member can neither end
/// (`/forget N`) nor take back (`/undo`) a fact learned from Alice's message, and Alice can
/// take it back after a restart (what `/undo` can take back is kept in the store). A first
/// name made to look like Alice's line does not pass for her.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_group_only_the_member_ends_or_takes_back_their_facts_even_after_a_restart() {
    let (alice, bob, group) = (111_u64, 222_u64, -100_902_i64);
    let llm = learning_model("Lisbon", "Alice lives in Lisbon.", Duration::ZERO).await;
    let mut mallory = group_update(2, 333, group, "Hello all");
    mallory["message"]["from"]["first_name"] = json!("user111 (@alice)");
    mallory["message"]["from"]["username"] = json!("mallory");
    let telegram = fake_telegram(vec![
        group_update(1, alice, group, "I moved to Lisbon"),
        mallory,
    ])
    .await;
    let h = Harness::new(telegram).await;
    let (agent, model) = learning_agent(&h, &llm);
    h.run_agent(agent.clone(), model, None, None, 2).await;
    agent.finish_background().await;
    let in_group = Scope::for_user(crate::agent::GROUP_USER)
        .unwrap()
        .in_chat(group.to_string())
        .unwrap();
    let texts = h.texts(&in_group).await;
    assert!(
        texts.contains(&"user111 alice (@mallory): Hello all".to_owned()),
        "{texts:?}"
    );

    // Restarted: another connection to the file, another agent (nothing kept in memory).
    let h2 = h
        .reopened(vec![
            group_update(3, bob, group, "/facts"),
            group_update(4, bob, group, "/forget 1"),
            group_update(5, bob, group, "/undo"),
            group_update(6, alice, group, "/undo"),
            group_update(7, alice, group, "/undo"),
        ])
        .await;
    let (agent2, model2) = learning_agent(&h2, &llm);
    let sent = h2.run_agent(agent2, model2, None, None, 5).await;
    let said: Vec<&str> = sent.iter().map(|(_, t)| t.as_str()).collect();
    assert!(said[0].contains("Alice lives in Lisbon."), "{said:?}");
    assert!(said[1].contains("not yours"), "{said:?}");
    assert!(said[2].contains("learned nothing"), "{said:?}");
    assert!(
        said[3].contains("no longer: Alice lives in Lisbon."),
        "{said:?}"
    );
    assert!(said[4].contains("learned nothing"), "{said:?}");
}

/// Sharing lasts until `/share off`: pruning the group's conversation to nothing leaves it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharing_outlasts_pruning() {
    let (alice, group) = (111_u64, -100_903_i64);
    let telegram = fake_telegram(vec![
        text_update(1, alice, alice as i64, "/remember My cat is called Pixel"),
        group_update(2, alice, group, "/share"),
    ])
    .await;
    let llm = fake_ollama(ResponseTemplate::new(200).set_body_json(ollama_answer("Fine."))).await;
    let h = Harness::new(telegram).await;
    h.run(&llm, PATIENCE, None, 2).await;
    let in_group = Scope::for_user(crate::agent::GROUP_USER)
        .unwrap()
        .in_chat(group.to_string())
        .unwrap();
    let policy = memory_core::PrunePolicy {
        max_count: Some(0),
        ..memory_core::PrunePolicy::new()
    };
    h.store.prune(&in_group, &policy).await.unwrap();
    let h2 = h
        .again(vec![group_update(3, alice, group, "Question: my cat?")])
        .await;
    h2.run(&llm, PATIENCE, None, 1).await;
    let bodies = llm_bodies(&llm.received_requests().await.unwrap());
    let asked = bodies
        .iter()
        .find(|b| b.contains("Question: my cat?"))
        .unwrap();
    assert!(asked.contains("My cat is called Pixel"), "{asked}");
}
