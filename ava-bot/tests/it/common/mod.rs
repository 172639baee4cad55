//! Helpers shared by the tests that run the `ava` binary: a command with a private store and
//! no settings leaking in from the environment, and readers for what it printed.

// Each test crate uses its own subset of these.
#![allow(
    dead_code,
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "each test binary uses a different part of the shared helpers, which fail loudly"
)]

pub(crate) mod files;
pub(crate) mod replay;

use std::ffi::OsStr;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

/// `ava` with the store `db`, the hashing embedder (deterministic, no model needed), and no
/// `.env` or settings leaking in from the environment; add the arguments and run it.
pub(crate) fn command(db: impl AsRef<OsStr>) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ava"));
    command
        .env("AVA_DB", db)
        .env("AVA_EMBEDDER", "hash")
        .env_remove("AVA_MODEL_DIR")
        .env_remove("TELOXIDE_TOKEN")
        .env_remove("AVA_LLM")
        .env_remove("AVA_LLM_URL")
        .env_remove("AVA_LLM_MODEL")
        .env_remove("AVA_NO_FACTS")
        .env_remove("AVA_ALLOW_USERS")
        .env_remove("OPENAI_API_KEY")
        .env_remove("AVA_RERANK_URL")
        .env_remove("AVA_RERANK_MODEL")
        .env_remove("AVA_RERANK_API")
        .env_remove("AVA_RERANK_KEY")
        .env_remove("AVA_RERANK_MIN_SCORE")
        .env_remove("AVA_MCP_TOKENS")
        .env_remove("AVA_SERVE_ADDR")
        .env_remove("AVA_UPSTREAM_URL")
        .env_remove("AVA_UPSTREAM_API_KEY")
        .env_remove("AVA_UPSTREAM_TIMEOUT")
        .env_remove("AVA_HISTORY")
        .env_remove("AVA_FACTS_MODEL")
        .current_dir(env!("CARGO_TARGET_TMPDIR"));
    command
}

/// Runs `ava args` on the store `db` (see [`command`]) and waits for it.
pub(crate) fn ava(db: impl AsRef<OsStr>, args: &[&str]) -> Output {
    command(db).args(args).output().expect("run ava")
}

/// What the run printed on stdout.
pub(crate) fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Alice's bearer token in the server tests' token files (user `alice`, chat `desk`).
pub(crate) const TOKEN_A: &str = "alice-0123456789abcdef0123456789abcdef";
/// Bob's (user `bob`, chat `desk`).
pub(crate) const TOKEN_B: &str = "bob-0123456789abcdef0123456789abcdef00";

/// How long a server test waits for what should come: long enough for a debug build on a
/// busy two-core machine; never reached when all is well.
pub(crate) const PATIENCE: std::time::Duration = std::time::Duration::from_secs(60);

/// A token file in `dir` private to its owner: alice and bob ([`TOKEN_A`], [`TOKEN_B`], both
/// in chat `desk`), then the entries `more`.
pub(crate) fn alice_and_bob_tokens(dir: &Path, more: &[serde_json::Value]) -> std::path::PathBuf {
    let mut tokens = vec![
        serde_json::json!({"token": TOKEN_A, "user": "alice", "chat": "desk"}),
        serde_json::json!({"token": TOKEN_B, "user": "bob", "chat": "desk"}),
    ];
    tokens.extend(more.iter().cloned());
    private_token_file(dir, serde_json::Value::Array(tokens))
}

/// Writes `tokens` (the `tokens` list of a bearer-token file) as `dir/tokens.json`, private
/// to its owner as `ava serve` and `ava mcp --http` require.
pub(crate) fn private_token_file(dir: &Path, tokens: serde_json::Value) -> std::path::PathBuf {
    let path = dir.join("tokens.json");
    write_private(&path, &serde_json::json!({ "tokens": tokens }));
    path
}

/// Sets `path`'s permission bits to `mode`.
pub(crate) fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Whether this process may write where permissions say it may not (root), probed in `dir`.
pub(crate) fn privileged(dir: &Path) -> bool {
    let probe = dir.join("probe");
    std::fs::create_dir(&probe).unwrap();
    set_mode(&probe, 0o555);
    let yes = std::fs::write(probe.join("x"), b"x").is_ok();
    set_mode(&probe, 0o755);
    yes
}

/// `command` run as `nobody` (uid and gid 65534, through `setpriv`), with its environment
/// and working directory: permissions do not apply to root.
pub(crate) fn as_nobody(command: &Command) -> Command {
    let mut c = Command::new("setpriv");
    c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(command.get_program())
        .args(command.get_args());
    for (key, value) in command.get_envs() {
        match value {
            Some(v) => c.env(key, v),
            None => c.env_remove(key),
        };
    }
    if let Some(dir) = command.get_current_dir() {
        c.current_dir(dir);
    }
    c
}

/// Writes `value` as JSON to `path` with mode 600.
pub(crate) fn write_private(path: &Path, value: &serde_json::Value) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, value.to_string()).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

/// The `content` of each of `listing["memories"]` (an MCP tool's or the inspector's).
pub(crate) fn contents(listing: &serde_json::Value) -> Vec<String> {
    listing["memories"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap().to_owned())
        .collect()
}

/// What the run printed on stderr.
pub(crate) fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The run's stdout, after asserting it succeeded (showing both streams if not).
pub(crate) fn ok(o: Output) -> String {
    assert!(
        o.status.success(),
        "ava failed: {}\n{}",
        stderr(&o),
        stdout(&o)
    );
    stdout(&o)
}

/// Asserts the run failed and said `says` on stderr (showing stderr if not).
pub(crate) fn refused(o: &Output, says: &str) {
    let err = stderr(o);
    assert!(
        !o.status.success() && err.contains(says),
        "expected a failure saying {says:?}; got {}: {err}",
        o.status
    );
}

/// Runs `command` with `input` on its stdin (then closed) and waits for it.
pub(crate) fn with_stdin(mut command: Command, input: &str) -> Output {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run ava");
    child
        .stdin
        .take()
        .expect("stdin is piped")
        .write_all(input.as_bytes())
        .expect("write stdin");
    child.wait_with_output().expect("wait for ava")
}

/// How many memories `ava stats` counts in `user`'s chat `chat`.
pub(crate) fn count_in(db: &Path, user: &str, chat: &str) -> u64 {
    let out = ok(ava(db, &["stats", "--user", user]));
    let key = format!("c={chat}/");
    out.lines()
        .find(|l| l.contains(&key))
        .and_then(|l| l.rsplit(": ").next())
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no count for chat {chat} in {out}"))
}

/// What a server wrote on stderr after its "listening on" line, kept as it comes.
pub(crate) type Log = std::sync::Arc<std::sync::Mutex<Vec<String>>>;

/// Starts the server `cmd` (an `ava` command that prints `... listening on URL ...` on
/// stderr once it serves), waits up to `patience` for that line and returns the child, the
/// line, and the rest of its stderr, drained as it comes so the server never blocks on a
/// full pipe.
pub(crate) async fn listening(
    cmd: Command,
    patience: std::time::Duration,
) -> (tokio::process::Child, String, Log) {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let mut cmd = tokio::process::Command::from(cmd);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd.spawn().expect("start the server");
    let mut lines = BufReader::new(child.stderr.take().expect("stderr is piped")).lines();
    let line = tokio::time::timeout(patience, async {
        while let Some(line) = lines.next_line().await.expect("read stderr") {
            if line.contains("listening on ") {
                return line;
            }
            eprintln!("{line}");
        }
        panic!("the server exited without listening");
    })
    .await
    .expect("the server starts");
    let log = Log::default();
    let kept = log.clone();
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            kept.lock().expect("the log's lock").push(line);
        }
    });
    (child, line, log)
}

/// Every line of `user`'s `ava export` of `db` (each memory of theirs, replaced ones too)
/// but the header (which holds the time).
pub(crate) fn exported(db: impl AsRef<OsStr>, user: &str) -> Vec<String> {
    let text = ok(ava(db, &["export", "--user", user]));
    text.lines().skip(1).map(str::to_owned).collect()
}

/// The URL a "listening on URL ..." line names.
pub(crate) fn listening_url(line: &str) -> String {
    line.split_once("listening on ")
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .expect("a URL after `listening on`")
        .to_owned()
}

/// Runs `sql` on the Postgres server at `url`, on a thread and runtime of its own (so it
/// can run from async code, e.g. a guard dropped in an async test).
pub(crate) fn run_sql(url: &str, sql: &str) {
    let (url, sql) = (url.to_owned(), sql.to_owned());
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                .await
                .unwrap();
            let task = tokio::spawn(conn);
            client.batch_execute(&sql).await.unwrap();
            drop(client);
            let _ = task.await;
        });
    })
    .join()
    .expect("the SQL ran");
}

/// Drops its schema when the test ends, passed or not.
pub(crate) struct SchemaGuard(String, String);

impl Drop for SchemaGuard {
    fn drop(&mut self) {
        run_sql(
            &self.0,
            &format!("DROP SCHEMA IF EXISTS \"{}\" CASCADE", self.1),
        );
    }
}

/// Sends `child` the signal `name` (`INT`, `TERM`) with `kill`.
pub(crate) fn signal(child: &tokio::process::Child, name: &str) {
    let pid = child.id().expect("the child is running").to_string();
    let status = Command::new("kill")
        .args([&format!("-{name}"), &pid])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{name} {pid}");
}

/// A store URL in a fresh schema named after `tag` and this process, with the guard that
/// drops it; `None` (after one skip line) when `MEMORY_PG_URL` is not set.
pub(crate) fn fresh_schema(tag: &str) -> Option<(String, String, SchemaGuard)> {
    let url = memory_core::testing::env_or_skip(
        "MEMORY_PG_URL",
        "ava-bot",
        "a Postgres URL whose server has pgvector (e.g. start one with .ci/postgres.sh start)",
    )?;
    let schema = format!("ava_{tag}_{}", std::process::id());
    let sep = if url.contains('?') { '&' } else { '?' };
    let db = format!("{url}{sep}schema={schema}");
    let guard = SchemaGuard(url, schema.clone());
    Some((db, schema, guard))
}

/// A fake Bot API for tests that run `ava run` as a process: its `getUpdates` hands out
/// what the test queued (or, for webhook mode, the test posts updates itself), and its
/// `sendMessage` echoes like Telegram (the replies are read back from the requests it
/// received).
pub(crate) mod fake_bot_api {
    use std::collections::VecDeque;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use serde_json::{Value, json};
    use wiremock::matchers::{method, path_regex};
    use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

    pub(crate) const TOKEN: &str = "123456:PROPERTY-test";

    /// How long a reply may take.
    const PATIENCE: Duration = Duration::from_secs(60);

    fn ok(result: Value) -> ResponseTemplate {
        ResponseTemplate::new(200).set_body_json(json!({"ok": true, "result": result}))
    }

    /// Queued updates, handed out once each.
    #[derive(Clone, Default)]
    pub(crate) struct Queue(Arc<Mutex<VecDeque<Value>>>);

    impl Queue {
        pub(crate) fn push(&self, update: Value) {
            self.0.lock().unwrap().push_back(update);
        }
    }

    impl Respond for Queue {
        fn respond(&self, _: &Request) -> ResponseTemplate {
            let updates: Vec<Value> = self.0.lock().unwrap().drain(..).collect();
            if updates.is_empty() {
                ok(json!([])).set_delay(Duration::from_millis(30))
            } else {
                ok(json!(updates))
            }
        }
    }

    struct Echo;

    impl Respond for Echo {
        fn respond(&self, request: &Request) -> ResponseTemplate {
            let body: Value = serde_json::from_slice(&request.body).unwrap_or_default();
            ok(json!({"message_id": 1, "date": 1_773_000_000,
                "chat": {"id": body["chat_id"], "type": "private", "first_name": "x"},
                "text": body["text"]}))
        }
    }

    /// A Bot API that hands out `queue`'s updates to a long-polling bot.
    pub(crate) async fn start(queue: Queue) -> MockServer {
        let server = for_webhooks().await;
        Mock::given(method("POST"))
            .and(path_regex(format!("^/bot{TOKEN}/GetUpdates$")))
            .respond_with(queue)
            .mount(&server)
            .await;
        server
    }

    /// A Bot API for a bot in webhook mode: who the bot is, `setWebhook`, and what it sends;
    /// the test posts the updates to the bot itself.
    pub(crate) async fn for_webhooks() -> MockServer {
        let server = MockServer::start().await;
        let me = json!({"id": 1, "is_bot": true, "first_name": "Ava", "username": "ava_test_bot",
            "can_join_groups": true, "can_read_all_group_messages": false,
            "supports_inline_queries": false, "can_connect_to_business": false,
            "has_main_web_app": false});
        let route = |name: &str| path_regex(format!("^/bot{TOKEN}/{name}$"));
        let webhook_info =
            json!({"url": "", "has_custom_certificate": false, "pending_update_count": 0});
        for (name, answer) in [
            ("GetMe", ok(me)),
            ("GetWebhookInfo", ok(webhook_info)),
            ("DeleteWebhook", ok(json!(true))),
            ("SetWebhook", ok(json!(true))),
            ("SetMessageReaction", ok(json!(true))),
        ] {
            Mock::given(method("POST"))
                .and(route(name))
                .respond_with(answer)
                .mount(&server)
                .await;
        }
        Mock::given(method("POST"))
            .and(route("SendMessage"))
            .respond_with(Echo)
            .mount(&server)
            .await;
        server
    }

    /// Sends messages as Telegram delivers them, one update each, and waits for the bot's
    /// reply.
    pub(crate) struct Sender {
        queue: Queue,
        update_id: i64,
    }

    impl Sender {
        pub(crate) fn new(queue: Queue) -> Self {
            Self {
                queue,
                update_id: 0,
            }
        }

        /// `text` from `from` (user id, first name) in `chat` (a private chat when the id is
        /// positive, else a group titled "the team"), and the bot's first reply there.
        pub(crate) async fn say(
            &mut self,
            server: &MockServer,
            from: (i64, &str),
            chat: i64,
            text: &str,
        ) -> String {
            self.update_id += 1;
            let id = self.update_id;
            let before = replies(server, chat).await.len();
            let chat_json = if chat > 0 {
                json!({"id": chat, "type": "private", "first_name": from.1})
            } else {
                json!({"id": chat, "type": "supergroup", "title": "the team"})
            };
            let mut message = json!({"message_id": id, "date": 1_773_000_000 + id,
                "chat": chat_json,
                "from": {"id": from.0, "is_bot": false, "first_name": from.1}, "text": text});
            if text.starts_with('/') {
                let len = text.split_whitespace().next().unwrap().len();
                message["entities"] = json!([{"type": "bot_command", "offset": 0, "length": len}]);
            }
            self.queue
                .push(json!({"update_id": id, "message": message}));
            let deadline = tokio::time::Instant::now() + PATIENCE;
            loop {
                let replies = replies(server, chat).await;
                if replies.len() > before {
                    return replies[before].clone();
                }
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "the bot did not answer {text}"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }

    /// The texts sent to `chat`, in order.
    pub(crate) async fn replies(server: &MockServer, chat: i64) -> Vec<String> {
        calls(server, "SendMessage")
            .await
            .into_iter()
            .filter(|b| b["chat_id"].as_i64() == Some(chat))
            .filter_map(|b| b["text"].as_str().map(str::to_owned))
            .collect()
    }

    /// The bodies of the Bot API calls named `name` (e.g. `SendMessage`), in order.
    pub(crate) async fn calls(server: &MockServer, name: &str) -> Vec<Value> {
        server
            .received_requests()
            .await
            .unwrap_or_default()
            .iter()
            .filter(|r| r.url.path().ends_with(&format!("/{name}")))
            .filter_map(|r| serde_json::from_slice(&r.body).ok())
            .collect()
    }
}

/// The local model's directory, or `None` (said on stdout) when it is not fetched; with
/// `AVA_REQUIRE_SERVICES=1` (CI) a missing model fails the test instead.
pub(crate) fn local_model() -> Option<memory_embedders::ModelDir> {
    let dir = memory_embedders::resolve_model_dir(None).unwrap();
    if dir.is_complete() {
        return Some(dir);
    }
    memory_core::testing::skip_or_fail(
        "ava-bot",
        &format!("no local model in {}", dir.path.display()),
        &format!("run `{}`", memory_embedders::FETCH_MODEL_COMMAND),
    );
    None
}

/// An OpenAI chat completion whose answer is `content` (model `gpt-test`).
pub(crate) use hydrate::testing::openai_answer as completion;

/// `verb` for user 42 in chat 7 (the tests' usual person and chat), then `rest`: arguments
/// for [`ava`].
pub(crate) fn in_chat_7<'a>(verb: &'a str, rest: &[&'a str]) -> Vec<&'a str> {
    in_chat("42", "7", verb, rest)
}

/// `verb` for `user` in `chat`, then `rest`: arguments for [`ava`].
pub(crate) fn in_chat<'a>(
    user: &'a str,
    chat: &'a str,
    verb: &'a str,
    rest: &[&'a str],
) -> Vec<&'a str> {
    [verb, "--user", user, "--chat", chat]
        .into_iter()
        .chain(rest.iter().copied())
        .collect()
}
