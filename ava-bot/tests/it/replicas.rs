//! Replicas sharing one store: two `ava run` processes in webhook mode on one store (a
//! SQLite file, and Postgres when `MEMORY_PG_URL` is set), fed by this test playing
//! Telegram's Bot API and a load balancer that sends each update to one replica, with an
//! OpenAI-compatible model whose fact extraction is scripted and slow. Every update is
//! answered once, every exchange stored once, and every fact learned once, also when two
//! replicas learn a change to the same fact at the same time (they take turns through a
//! lease in the store, so the second sees what the first learned). The prompts they build
//! are kept in the store too: `/context` on one replica explains a prompt another built,
//! `ava serve`'s inspector on the same store lists them for their user's token only, and a
//! `/wipe` takes them along.

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::fake_bot_api::{TOKEN, calls};
use common::{Log, ava, command, exported, fake_bot_api, listening, listening_url, ok, signal};
use serde_json::{Value, json};
use wiremock::matchers::{body_string_contains, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

const SECRET: &str = "replica_secret-1";
use common::PATIENCE;
/// How long the model takes to decide what a changed fact replaces: long enough for two
/// replicas that learn at once to both read the old fact before either replaces it, if
/// nothing makes them take turns.
const SLOW: Duration = Duration::from_millis(1500);

const ALICE: i64 = 111;
const BOB: i64 = 222;

fn completion(content: &str) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_json(common::completion(content))
}

/// An OpenAI-compatible model: every chat turn is answered "Noted."; an extraction call
/// (it carries a `<conversation>` block) finds the parrot's name in Alice's messages and
/// nothing in others; a decision call replaces the parrot's old name by the new one,
/// slowly.
async fn fake_llm() -> MockServer {
    let server = MockServer::start().await;
    let chat = || Mock::given(method("POST")).and(path("/v1/chat/completions"));
    for (needle, fact, delay) in [
        (
            "parrot is named Kiwi",
            "My parrot is called Kiwi.",
            Duration::ZERO,
        ),
        (
            "renamed the parrot to Mango",
            "My parrot is called Mango.",
            SLOW,
        ),
        (
            "parrot answers to Lemon now",
            "My parrot is called Lemon.",
            SLOW,
        ),
    ] {
        chat()
            .and(body_string_contains("<conversation>"))
            .and(body_string_contains(needle))
            .respond_with(completion(&json!({"facts": [fact]}).to_string()))
            .with_priority(1)
            .mount(&server)
            .await;
        chat()
            .and(body_string_contains("<new-facts>"))
            .and(body_string_contains(format!("N1: {fact}")))
            .respond_with(
                completion(
                    &json!({"decisions": [{"new": "N1", "op": "UPDATE", "existing": "E1",
                    "reason": "the parrot was renamed"}]})
                    .to_string(),
                )
                .set_delay(delay),
            )
            .with_priority(1)
            .mount(&server)
            .await;
    }
    chat()
        .and(body_string_contains("<conversation>"))
        .respond_with(completion(r#"{"facts": []}"#))
        .with_priority(5)
        .mount(&server)
        .await;
    chat()
        .respond_with(completion("Noted."))
        .with_priority(10)
        .mount(&server)
        .await;
    server
}

/// One `ava run` replica on the store `db` in webhook mode; the address it listens on.
async fn replica(
    db: &str,
    telegram: &MockServer,
    llm: &MockServer,
) -> (tokio::process::Child, String, Log) {
    let mut cmd = command(db);
    cmd.args(["run", "--llm", "openai"])
        .args([
            "--llm-url",
            &format!("{}/v1", llm.uri()),
            "--llm-model",
            "gpt-test",
        ])
        .args(["--telegram-api-url", &telegram.uri()])
        .args(["--webhook-url", "https://bot.example.test/hook"])
        .args(["--webhook-addr", "127.0.0.1:0"])
        .env("TELOXIDE_TOKEN", TOKEN)
        .env("AVA_WEBHOOK_SECRET", SECRET)
        .env("RUST_LOG", "warn,ava=info")
        .env_remove("AVA_LEARNED_REACTION")
        .env_remove("RUST_BACKTRACE");
    let (child, line, log) = listening(cmd, PATIENCE).await;
    (child, listening_url(&line), log)
}

/// An update with `text` from `user` in their private chat, as Telegram posts it.
fn update(id: i64, user: i64, text: &str) -> Value {
    json!({"update_id": id, "message": {"message_id": id, "date": 1_773_000_000 + id,
        "chat": {"id": user, "type": "private", "first_name": "u"},
        "from": {"id": user, "is_bot": false, "first_name": "u"}, "text": text}})
}

/// Posts `update` to the replica at `hook` with the secret, as the load balancer would.
async fn deliver(client: &reqwest::Client, hook: &str, update: Value) {
    let status = client
        .post(hook)
        .header("X-Telegram-Bot-Api-Secret-Token", SECRET)
        .json(&update)
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, 200, "the replica at {hook} took the update");
}

/// Replies sent per chat.
async fn replies(telegram: &MockServer) -> BTreeMap<i64, usize> {
    let mut per_chat = BTreeMap::new();
    for body in calls(telegram, "SendMessage").await {
        *per_chat
            .entry(body["chat_id"].as_i64().unwrap())
            .or_default() += 1;
    }
    per_chat
}

/// The texts sent to `chat`, oldest first.
async fn said_to(telegram: &MockServer, chat: i64) -> Vec<String> {
    calls(telegram, "SendMessage")
        .await
        .iter()
        .filter(|b| b["chat_id"].as_i64() == Some(chat))
        .map(|b| b["text"].as_str().unwrap().to_owned())
        .collect()
}

/// The messages that got the learned reaction (learning changed a fact from them).
async fn learned_from(telegram: &MockServer) -> Vec<i64> {
    let mut ids: Vec<i64> = calls(telegram, "SetMessageReaction")
        .await
        .iter()
        .map(|b| b["message_id"].as_i64().unwrap())
        .collect();
    ids.sort_unstable();
    ids
}

/// Waits until `done` holds (checked every 50 ms), for at most [`PATIENCE`]; whether it did.
async fn until(mut done: impl AsyncFnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while tokio::time::Instant::now() < deadline {
        if done().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// The memories of `user` as `ava export` writes them (every scope, replaced facts too).
fn memories_of(db: &str, user: i64) -> Vec<Value> {
    exported(db, &user.to_string())
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Alice's and Bob's tokens for the inspector of `ava serve` (their private chats).
const INSPECT_ALICE: &str = "alice-0123456789abcdef0123456789abcdef";
const INSPECT_BOB: &str = "bob-0123456789abcdef0123456789abcdef00";

/// `ava serve` (without an upstream: MCP and the inspector) on the replicas' store.
struct Inspector {
    child: tokio::process::Child,
    url: String,
    _dir: tempfile::TempDir,
}

impl Inspector {
    async fn start(db: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let tokens = common::private_token_file(
            dir.path(),
            json!([
                {"token": INSPECT_ALICE, "user": ALICE.to_string(), "chat": ALICE.to_string()},
                {"token": INSPECT_BOB, "user": BOB.to_string(), "chat": BOB.to_string()},
            ]),
        );
        let mut cmd = command(db);
        cmd.args(["serve", "--addr", "127.0.0.1:0", "--tokens"])
            .arg(&tokens)
            .env_remove("RUST_BACKTRACE");
        let (child, line, _) = listening(cmd, PATIENCE).await;
        Self {
            child,
            url: listening_url(&line),
            _dir: dir,
        }
    }

    /// `GET /inspect/api/<route>` for `token`: the status and the JSON.
    async fn get(&self, token: &str, route: &str) -> (u16, Value) {
        let response = reqwest::Client::new()
            .get(format!("{}/inspect/api/{route}", self.url))
            .bearer_auth(token)
            .send()
            .await
            .unwrap();
        (response.status().as_u16(), response.json().await.unwrap())
    }

    /// The prompts listed for `token`'s chat, newest first.
    async fn prompts(&self, token: &str) -> Vec<Value> {
        let (status, listed) = self.get(token, "prompts").await;
        assert_eq!(status, 200, "{listed}");
        listed["prompts"].as_array().unwrap().clone()
    }

    /// The key of `token`'s chat, as a query parameter's value.
    async fn chat_key(&self, token: &str) -> String {
        let (_, me) = self.get(token, "me").await;
        url::form_urlencoded::byte_serialize(me["scope"].as_str().unwrap().as_bytes()).collect()
    }

    async fn stop(mut self) {
        signal(&self.child, "TERM");
        let status = tokio::time::timeout(PATIENCE, self.child.wait())
            .await
            .expect("ava serve stops within PATIENCE of SIGTERM")
            .unwrap();
        assert!(status.success(), "{status:?}");
    }
}

/// Two replicas on the store `db` (created here) serve Alice and Bob as one bot.
async fn two_replicas_serve_as_one(db: &str) {
    // The store exists before the replicas open it.
    ok(ava(db, &["remember", "--user", "setup", "setting up"]));
    let (telegram, llm) = (fake_bot_api::for_webhooks().await, fake_llm().await);
    let (mut a, hook_a, log_a) = replica(db, &telegram, &llm).await;
    let (mut b, hook_b, log_b) = replica(db, &telegram, &llm).await;
    let client = reqwest::Client::new();

    // Alice names her parrot (replica a), and Ava learns it.
    deliver(
        &client,
        &hook_a,
        update(1, ALICE, "By the way, my parrot is named Kiwi."),
    )
    .await;
    assert!(
        until(async || learned_from(&telegram).await == [1]).await,
        "the first fact was learned: {:?}",
        learned_from(&telegram).await
    );
    // Two changes of the same fact reach two replicas at once; Bob chats meanwhile,
    // his updates shared between them.
    let mut deliveries = vec![
        deliver(
            &client,
            &hook_a,
            update(2, ALICE, "We renamed the parrot to Mango."),
        ),
        deliver(
            &client,
            &hook_b,
            update(3, ALICE, "Hm, the parrot answers to Lemon now."),
        ),
    ];
    for id in 4..10 {
        let hook = if id % 2 == 0 { &hook_a } else { &hook_b };
        deliveries.push(deliver(
            &client,
            hook,
            update(id, BOB, &format!("Just chatting, {id}.")),
        ));
    }
    futures_util::future::join_all(deliveries).await;

    let learned = until(async || learned_from(&telegram).await == [1, 2, 3]).await;
    let answered =
        until(async || replies(&telegram).await == BTreeMap::from([(ALICE, 3), (BOB, 6)])).await;
    // Give a duplicate answer or a late learning the time to show.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let logs = || {
        format!(
            "a: {:?}\nb: {:?}",
            log_a.lock().unwrap(),
            log_b.lock().unwrap()
        )
    };
    assert!(
        answered && replies(&telegram).await == BTreeMap::from([(ALICE, 3), (BOB, 6)]),
        "every update answered once: {:?}\n{}",
        replies(&telegram).await,
        logs()
    );
    assert!(
        learned && learned_from(&telegram).await == [1, 2, 3],
        "both changes learned, each once: reactions on {:?}\n{}",
        learned_from(&telegram).await,
        logs()
    );

    // Every exchange stored once: each message and its answer, in the chat's scope.
    for (user, sent) in [(ALICE, 3), (BOB, 6)] {
        let turns: Vec<String> = memories_of(db, user)
            .into_iter()
            .filter(|m| m["kind"] != "fact")
            .map(|m| m["content"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(turns.len(), 2 * sent, "user {user}: {turns:#?}");
        assert_eq!(
            turns.iter().filter(|t| *t == "Noted.").count(),
            sent,
            "one answer per message: {turns:#?}"
        );
    }
    // Every fact learned once: Kiwi, then the two new names, one replacing the other,
    // whichever came first; one holds now.
    let facts: Vec<Value> = memories_of(db, ALICE)
        .into_iter()
        .filter(|m| m["kind"] == "fact")
        .collect();
    let mut names: Vec<&str> = facts
        .iter()
        .map(|f| f["content"].as_str().unwrap())
        .collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "My parrot is called Kiwi.",
            "My parrot is called Lemon.",
            "My parrot is called Mango."
        ],
        "{facts:#?}"
    );
    let current: Vec<&Value> = facts
        .iter()
        .filter(|f| f["superseded_by"].is_null() && f["valid_until"].is_null())
        .collect();
    assert_eq!(current.len(), 1, "one name holds now: {facts:#?}");
    let by_id: BTreeMap<&str, &Value> = facts
        .iter()
        .map(|f| (f["id"].as_str().unwrap(), f))
        .collect();
    let kiwi = facts
        .iter()
        .find(|f| f["content"] == "My parrot is called Kiwi.")
        .unwrap();
    let next = by_id[kiwi["superseded_by"].as_str().expect("Kiwi was replaced")];
    let last = by_id[next["superseded_by"]
        .as_str()
        .expect("the first new name was replaced by the second")];
    assert_eq!(last["id"], current[0]["id"], "{facts:#?}");

    // The prompts built are kept in the store: Alice asks replica a, her /context reaches b
    // and explains that prompt (its question's names, the facts it weighed), and
    // `ava serve`'s inspector on the same store lists her prompts for her token only.
    deliver(
        &client,
        &hook_a,
        update(10, ALICE, "Does Kiwi still like Lisbon?"),
    )
    .await;
    assert!(until(async || replies(&telegram).await.get(&ALICE) == Some(&4)).await);
    deliver(&client, &hook_b, update(11, ALICE, "/context")).await;
    assert!(until(async || replies(&telegram).await.get(&ALICE) == Some(&5)).await);
    let context = said_to(&telegram, ALICE).await.pop().unwrap();
    assert!(
        context.starts_with("The last prompt I built for you:")
            && context.contains("names Kiwi Lisbon")
            && context.contains("\"My parrot is called"),
        "{context}\n{}",
        logs()
    );
    let inspector = Inspector::start(db).await;
    let alices = inspector.prompts(INSPECT_ALICE).await;
    assert_eq!(alices.len(), 4, "one per message Alice sent: {alices:#?}");
    assert!(alices.iter().all(|p| p["by"] == "bot"), "{alices:#?}");
    assert_eq!(
        alices[0]["report"]["cues"]["names"],
        json!(["Kiwi", "Lisbon"]),
        "newest first: {:#?}",
        alices[0]
    );
    let weighed = alices[0]["memories"].to_string();
    assert!(weighed.contains("My parrot is called"), "{weighed}");
    let bobs = inspector.prompts(INSPECT_BOB).await;
    assert_eq!(bobs.len(), 6, "{bobs:#?}");
    let seen = serde_json::to_string(&bobs).unwrap();
    assert!(
        !seen.contains("parrot") && !seen.contains("Lisbon"),
        "{seen}"
    );
    assert_eq!(
        inspector
            .get(
                INSPECT_BOB,
                &format!("prompts?scope={}", inspector.chat_key(INSPECT_ALICE).await)
            )
            .await
            .0,
        403,
        "Bob's token may not name Alice's chat"
    );

    // A confirmation asked by one replica is taken by the other: Bob's /wipe reaches a,
    // his /wipe yes reaches b, and his memories go (Alice's stay).
    deliver(&client, &hook_a, update(20, BOB, "/wipe")).await;
    assert!(
        until(async || replies(&telegram).await.get(&BOB) == Some(&7)).await,
        "/wipe answered: {:?}",
        replies(&telegram).await
    );
    assert!(!memories_of(db, BOB).is_empty());
    deliver(&client, &hook_b, update(21, BOB, "/wipe yes")).await;
    assert!(
        until(async || replies(&telegram).await.get(&BOB) == Some(&8)).await,
        "/wipe yes answered: {:?}",
        replies(&telegram).await
    );
    let said = said_to(&telegram, BOB).await;
    assert!(
        said.last().unwrap().starts_with("Done: I deleted"),
        "{said:#?}\n{}",
        logs()
    );
    assert!(
        memories_of(db, BOB).is_empty(),
        "{:#?}",
        memories_of(db, BOB)
    );
    assert!(!memories_of(db, ALICE).is_empty());
    // One yes confirms one request: a second one, to either replica, finds nothing.
    deliver(&client, &hook_a, update(22, BOB, "/wipe yes")).await;
    assert!(until(async || replies(&telegram).await.get(&BOB) == Some(&9)).await);
    let said = said_to(&telegram, BOB).await;
    assert!(
        said.last().unwrap().starts_with("Nothing to confirm"),
        "{said:#?}"
    );
    // The wipe took Bob's prompts along: /context has none to explain, the inspector lists
    // none; Alice's stay.
    deliver(&client, &hook_b, update(23, BOB, "/context")).await;
    assert!(until(async || replies(&telegram).await.get(&BOB) == Some(&10)).await);
    let said = said_to(&telegram, BOB).await;
    assert!(
        said.last()
            .unwrap()
            .starts_with("I have not built a prompt for you"),
        "{said:#?}"
    );
    assert!(inspector.prompts(INSPECT_BOB).await.is_empty());
    assert_eq!(inspector.prompts(INSPECT_ALICE).await.len(), 4);
    inspector.stop().await;

    // SIGTERM (what an orchestrator sends a replica it retires) stops each cleanly.
    for (child, log) in [(&mut a, &log_a), (&mut b, &log_b)] {
        signal(child, "TERM");
        let status = tokio::time::timeout(PATIENCE, child.wait())
            .await
            .expect("a replica stops within PATIENCE of SIGTERM")
            .unwrap();
        assert!(status.success(), "{status:?}: {:#?}", log.lock().unwrap());
        let said = async || {
            log.lock()
                .unwrap()
                .iter()
                .any(|l| l.contains("stopping: updates already taken are answered first"))
        };
        assert!(until(said).await, "{:#?}", log.lock().unwrap());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_on_one_sqlite_file_answer_store_and_learn_each_thing_once() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("memories.db");
    two_replicas_serve_as_one(db.to_str().unwrap()).await;
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_on_one_postgres_answer_store_and_learn_each_thing_once() {
    let Some((db, _schema, _guard)) = common::fresh_schema("replicas") else {
        return;
    };
    two_replicas_serve_as_one(&db).await;
}

/// The webhook faces the internet: requests without the secret leave one warning, not one
/// line each; and an update Telegram delivers twice (it does, when an answer to it is slow
/// or lost) is answered 200 both times and handled once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_webhook_takes_each_update_once_and_warns_once_about_strangers() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("memories.db");
    let db = db.to_str().unwrap();
    ok(ava(db, &["remember", "--user", "setup", "setting up"]));
    let (telegram, llm) = (fake_bot_api::for_webhooks().await, fake_llm().await);
    let (mut child, hook, log) = replica(db, &telegram, &llm).await;
    let client = reqwest::Client::new();
    for _ in 0..20 {
        let status = client
            .post(&hook)
            .header("X-Telegram-Bot-Api-Secret-Token", "guessed")
            .json(&update(7, ALICE, "let me in"))
            .send()
            .await
            .unwrap()
            .status();
        assert_eq!(status, 401);
    }
    let once = update(8, ALICE, "My parrot is named Kiwi.");
    deliver(&client, &hook, once.clone()).await;
    deliver(&client, &hook, once).await;
    deliver(&client, &hook, update(9, ALICE, "And I live in Lisbon.")).await;
    assert!(
        until(async || replies(&telegram).await.get(&ALICE) == Some(&2)).await,
        "{:?}",
        replies(&telegram).await
    );
    signal(&child, "TERM");
    let status = tokio::time::timeout(PATIENCE, child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "{status:?}");
    assert_eq!(
        replies(&telegram).await.get(&ALICE),
        Some(&2),
        "no reply twice"
    );
    let kiwi = memories_of(db, ALICE)
        .iter()
        .filter(|m| m["content"] == "My parrot is named Kiwi.")
        .count();
    assert_eq!(kiwi, 1, "stored once");
    let log = log.lock().unwrap().join("\n");
    let warned = log
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("secret"))
        .count();
    assert_eq!(warned, 1, "{log}");
}

/// Issue 54's first paragraph through a real `ava run`: Alice tells a fact with /remember
/// in a group and names her parrot there (a fact is learned from it); in her private chat
/// she sends /erase and /erase yes. Afterwards none of her words is readable in the store's
/// files (database, log, shared memory), while Bob's message in the group is, and is
/// recalled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_erase_yes_none_of_her_words_is_in_the_store_files() {
    const GROUP: i64 = -100_954;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("bot.db").display().to_string();
    ok(ava(&db, &["remember", "--user", "setup", "setting up"]));
    let (telegram, llm) = (fake_bot_api::for_webhooks().await, fake_llm().await);
    let (mut bot, hook, log) = replica(&db, &telegram, &llm).await;
    let client = reqwest::Client::new();
    let in_group = |id: i64, user: i64, text: &str| {
        let mut u = update(id, user, text);
        u["message"]["chat"] = json!({"id": GROUP, "type": "supergroup", "title": "the team"});
        if text.starts_with('/') {
            let len = text.split_whitespace().next().unwrap().len();
            u["message"]["entities"] = json!([{"type": "bot_command", "offset": 0, "length": len}]);
        }
        u
    };
    let privately = |id: i64, text: &str| {
        let mut u = update(id, ALICE, text);
        let len = text.split_whitespace().next().unwrap().len();
        u["message"]["entities"] = json!([{"type": "bot_command", "offset": 0, "length": len}]);
        u
    };
    deliver(
        &client,
        &hook,
        in_group(1, ALICE, "/remember I am allergic to kumquats"),
    )
    .await;
    deliver(
        &client,
        &hook,
        in_group(2, ALICE, "By the way, my parrot is named Kiwi."),
    )
    .await;
    deliver(
        &client,
        &hook,
        in_group(3, BOB, "Bob prefers oolong over espresso"),
    )
    .await;
    assert!(
        until(async || learned_from(&telegram).await == [2]).await,
        "the parrot's name was learned: {:?}",
        log.lock().unwrap()
    );
    assert!(until(async || said_to(&telegram, GROUP).await.len() == 3).await);
    let holding = |needle: &str| common::files::holding(dir.path(), "bot.db", needle);
    assert!(
        !holding("kumquats").is_empty(),
        "the check sees her words before"
    );

    deliver(&client, &hook, privately(4, "/erase")).await;
    assert!(until(async || said_to(&telegram, ALICE).await.len() == 1).await);
    deliver(&client, &hook, privately(5, "/erase yes")).await;
    assert!(until(async || said_to(&telegram, ALICE).await.len() == 2).await);
    let said = said_to(&telegram, ALICE).await;
    assert!(said[1].contains("I erased"), "{said:?}");
    signal(&bot, "TERM");
    bot.wait().await.unwrap();
    for hers in ["kumquats", "Kiwi", "parrot"] {
        assert_eq!(
            holding(hers),
            Vec::<String>::new(),
            "{hers} is still readable in the store's files"
        );
    }
    assert!(!holding("oolong").is_empty(), "Bob's message stays");
    let recalled = ok(ava(
        &db,
        &[
            "recall",
            "--user",
            "group",
            &format!("--chat={GROUP}"),
            "oolong espresso",
        ],
    ));
    assert!(recalled.contains("Bob prefers oolong"), "{recalled}");
}
