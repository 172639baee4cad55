//! `ava serve`'s web inspector: its API by raw HTTP (tokens, scopes, headers), and the page in
//! a real headless Chromium driven over WebDriver (`chromedriver`, whose path comes from
//! `AVA_CHROMEDRIVER`): log in with a token, search, open a fact's history, explain a
//! prompt; memory text that looks like HTML stays text and runs nothing; another identity's
//! memories never appear; a read-only token changes nothing. With `AVA_SCREENSHOTS=DIR` the
//! browser test saves the three views there (how `docs/inspector-*.png` were made).

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use base64::Engine;
use common::{ava, command, contents, listening, listening_url, ok};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

use common::{PATIENCE, TOKEN_A as ALICE, TOKEN_B as BOB};
const ALICE_READ_ONLY: &str = "alice-ro-0123456789abcdef0123456789abcd";
const OPERATOR: &str = "ops-0123456789abcdef0123456789abcdef00";

/// Memory text written by someone hoping the page runs it.
const XSS_IMG: &str = "<img src=x onerror=alert(1)>";
const XSS_SCRIPT: &str = "</script><script>window.pwned = 1</script>";

fn token_file(dir: &Path) -> PathBuf {
    common::alice_and_bob_tokens(
        dir,
        &[
            json!({"token": ALICE_READ_ONLY, "user": "alice", "chat": "desk", "read_only": true}),
            json!({"token": OPERATOR, "user": "ops", "chat": "console", "operator": true,
                "read_only": true}),
        ],
    )
}

/// A running `ava serve` over a store holding alice's and bob's memories.
struct Serve {
    _child: tokio::process::Child,
    url: String,
    _dir: tempfile::TempDir,
}

/// A loopback upstream that answers every chat completion with "All noted."
async fn upstream() -> wiremock::MockServer {
    let server = wiremock::MockServer::start().await;
    wiremock::Mock::given(wiremock::matchers::method("POST"))
        .and(wiremock::matchers::path("/v1/chat/completions"))
        .respond_with(
            wiremock::ResponseTemplate::new(200).set_body_json(common::completion("All noted.")),
        )
        .mount(&server)
        .await;
    server
}

/// Alice asks through the proxy; the id of the explain report of the prompt it built.
async fn ask_through_the_proxy(s: &Serve) -> String {
    let answer = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", s.url))
        .bearer_auth(ALICE)
        .json(&json!({"model": "m", "messages": [
            {"role": "user", "content": "Where does Pixel like to sit?"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    answer.headers()["x-ava-explain-id"]
        .to_str()
        .unwrap()
        .to_owned()
}

async fn serve(upstream: &str) -> Serve {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ava.db");
    let old = ok(ava(
        &db,
        &["remember", "--user", "alice", "My door code is 4321"],
    ));
    ok(ava(
        &db,
        &[
            "remember",
            "--user",
            "alice",
            "--replaces",
            old.trim(),
            "My door code is 9876",
        ],
    ));
    for text in ["My cat Pixel likes the window seat", XSS_IMG, XSS_SCRIPT] {
        ok(ava(
            &db,
            &common::in_chat("alice", "desk", "remember", &[text]),
        ));
    }
    ok(ava(
        &db,
        &[
            "remember",
            "--user",
            "bob",
            "My secret is the blue lighthouse",
        ],
    ));
    let tokens = token_file(dir.path());
    let mut cmd = command(&db);
    cmd.args(["serve", "--addr", "127.0.0.1:0", "--tokens"])
        .arg(&tokens)
        .args(["--upstream", upstream, "--no-facts"]);
    let (child, line, _) = listening(cmd, PATIENCE).await;
    assert!(line.contains("the inspector at /inspect"), "{line}");
    Serve {
        _child: child,
        url: listening_url(&line),
        _dir: dir,
    }
}

async fn get(url: &str, token: Option<&str>) -> reqwest::Response {
    let mut request = reqwest::Client::new().get(url);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    request.send().await.unwrap()
}

async fn get_json(url: &str, token: &str) -> (u16, Value) {
    let response = get(url, Some(token)).await;
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

/// `/inspect/api/memories` of `scope` for `token`, with `extra` query parameters.
async fn memories(s: &Serve, token: &str, scope: &str, extra: &str) -> (u16, Value) {
    get_json(
        &format!(
            "{}/inspect/api/memories?scope={}{extra}",
            s.url,
            urlencode(scope)
        ),
        token,
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_answers_each_token_for_what_it_may_read() {
    let upstream = upstream().await;
    let s = serve(&format!("{}/v1", upstream.uri())).await;

    // The page needs no token and forbids everything but its own script, style and JSON.
    let page = get(&format!("{}/inspect", s.url), None).await;
    assert_eq!(page.status(), 200);
    let csp = page.headers()["content-security-policy"].to_str().unwrap();
    assert!(
        csp.contains("default-src 'none'") && csp.contains("script-src 'self'"),
        "{csp}"
    );
    assert_eq!(page.headers()["x-content-type-options"], "nosniff");
    assert!(page.text().await.unwrap().contains("Ava inspector"));

    // The API needs a token of the file.
    let none = get(&format!("{}/inspect/api/me", s.url), None).await;
    assert_eq!(none.status(), 401);
    let wrong = get(
        &format!("{}/inspect/api/me", s.url),
        Some("not-a-token-0123456789abcdef0123456789"),
    )
    .await;
    assert_eq!(wrong.status(), 401);

    // Alice reads her chat and her own facts, nothing of bob's.
    let (status, me) = get_json(&format!("{}/inspect/api/me", s.url), ALICE).await;
    assert_eq!(status, 200, "{me}");
    let keys: Vec<&str> = me["scopes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys.len(), 2, "{me}");
    assert!(keys.iter().all(|k| k.contains("u=alice")), "{keys:?}");
    let facts_key = keys[1].to_owned();
    let (_, found) = memories(&s, ALICE, &facts_key, "&q=secret%20lighthouse").await;
    assert!(
        !contents(&found).iter().any(|t| t.contains("lighthouse")),
        "{found}"
    );
    // Bob's scope is refused by name, not searched.
    let (_, bob_me) = get_json(&format!("{}/inspect/api/me", s.url), BOB).await;
    let bob_facts = bob_me["scopes"][1]["key"].as_str().unwrap().to_owned();
    let (status, refused) = memories(&s, ALICE, &bob_facts, "").await;
    assert_eq!(status, 403, "{refused}");

    // A search says how each hit scored; the replaced code only when asked for.
    let (_, found) = memories(&s, ALICE, &facts_key, "&q=door%20code").await;
    assert_eq!(contents(&found), ["My door code is 9876"], "{found}");
    let hit = &found["memories"][0];
    assert!(hit["search"]["score"].as_f64().unwrap() > 0.0, "{hit}");
    assert!(hit["search"]["breakdown"]["keyword"].is_number(), "{hit}");
    let (_, both) = memories(&s, ALICE, &facts_key, "&q=door%20code&replaced=1").await;
    assert_eq!(contents(&both).len(), 2, "{both}");
    // As they stood just before the old code was replaced: the old one, and it alone.
    let old = both["memories"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["content"] == "My door code is 4321")
        .unwrap();
    let just_before = memory_core::Timestamp::parse_rfc3339(old["valid_until"].as_str().unwrap())
        .unwrap()
        .minus(Duration::from_millis(1))
        .to_string();
    let (status, then) = memories(
        &s,
        ALICE,
        &facts_key,
        &format!("&q=door%20code&as_of={}", urlencode(&just_before)),
    )
    .await;
    assert_eq!(status, 200, "{then}");
    assert_eq!(
        contents(&then),
        ["My door code is 4321"],
        "{then} at {just_before}"
    );
    let (status, bad) = get_json(
        &format!("{}/inspect/api/memories?as_of=yesterday", s.url),
        ALICE,
    )
    .await;
    assert_eq!(status, 400, "{bad}");
    assert!(bad["error"].as_str().unwrap().contains("as_of"), "{bad}");

    // The operator of the tenant sees every identity, bob's too.
    let (_, ops) = get_json(&format!("{}/inspect/api/store", s.url), OPERATOR).await;
    let labels = ops["scopes"].to_string();
    assert!(
        labels.contains("user alice") && labels.contains("user bob"),
        "{ops}"
    );
    assert!(!ops["settings"].to_string().contains(ALICE), "{ops}");
    // The whole store's totals are the operator's to see, not a person's.
    assert_eq!(ops["totals"]["users"], 2, "{ops}");
    assert!(ops["totals"]["file_bytes"].as_u64().unwrap() > 0, "{ops}");
    let (_, mine) = get_json(&format!("{}/inspect/api/store", s.url), ALICE).await;
    assert!(mine["totals"].is_null(), "{mine}");

    // Bad input is said, not guessed at.
    let (status, bad) = get_json(&format!("{}/inspect/api/history?id=nope", s.url), ALICE).await;
    assert_eq!(status, 400, "{bad}");
    assert!(bad["error"].as_str().unwrap().contains("id"), "{bad}");
    let (status, bad) = get_json(
        &format!("{}/inspect/api/memories?q={}", s.url, "x".repeat(20_000)),
        ALICE,
    )
    .await;
    assert_eq!(status, 400, "{bad}");
    assert!(bad["error"].as_str().unwrap().contains("at most"), "{bad}");
    let (status, bad) = get_json(
        &format!("{}/inspect/api/memories?limit=100000", s.url),
        ALICE,
    )
    .await;
    assert_eq!(status, 400, "{bad}");
    let explain = reqwest::Client::new()
        .post(format!("{}/inspect/api/explain", s.url))
        .bearer_auth(ALICE)
        .body("{\"scope\": 1")
        .header("content-type", "application/json")
        .send()
        .await
        .unwrap();
    assert_eq!(explain.status(), 400);

    // A read-only token changes nothing: MCP's remember and the proxy refuse it.
    let mcp = reqwest::Client::new()
        .post(format!("{}/mcp", s.url))
        .bearer_auth(ALICE_READ_ONLY)
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": "remember", "arguments": {"content": "I now live in Oslo"}}}))
        .send()
        .await
        .unwrap();
    let answer = mcp.text().await.unwrap();
    assert!(answer.contains("read-only"), "{answer}");
    let proxy = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", s.url))
        .bearer_auth(ALICE_READ_ONLY)
        .json(&json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(proxy.status(), 403);
    let (_, after) = memories(&s, ALICE, &facts_key, "&q=Oslo").await;
    assert!(contents(&after).is_empty(), "{after}");

    // Nor through the inspector: its changing calls refuse a read-only token.
    let (_, lifecycle) = get_json(
        &format!(
            "{}/inspect/api/lifecycle?scope={}",
            s.url,
            urlencode(&facts_key)
        ),
        ALICE_READ_ONLY,
    )
    .await;
    assert_eq!(lifecycle["may_write"], false, "{lifecycle}");
    let replaced = lifecycle["facts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["state"] == "replaced")
        .unwrap_or_else(|| panic!("the old door code: {lifecycle}"));
    let restore = |token: &'static str| {
        reqwest::Client::new()
            .post(format!("{}/inspect/api/restore", s.url))
            .bearer_auth(token)
            .json(&json!({"scope": facts_key, "id": replaced["id"]}))
            .send()
    };
    assert_eq!(restore(ALICE_READ_ONLY).await.unwrap().status(), 403);
    let (_, still) = memories(&s, ALICE, &facts_key, "&q=door%20code").await;
    assert_eq!(contents(&still), ["My door code is 9876"], "{still}");
    // Bob may not change alice's facts either (her scope is not his to name).
    assert_eq!(restore(BOB).await.unwrap().status(), 403);

    // The prompts the proxy built, listed from the store for the identity they read, for
    // nobody else.
    let id = ask_through_the_proxy(&s).await;
    let chat_key = keys[0].to_owned();
    let (_, built) = get_json(
        &format!(
            "{}/inspect/api/prompts?scope={}",
            s.url,
            urlencode(&chat_key)
        ),
        ALICE,
    )
    .await;
    assert_eq!(built["prompts"][0]["id"], id.as_str(), "{built}");
    assert_eq!(built["prompts"][0]["by"], "proxy", "{built}");
    let (_, bobs) = get_json(&format!("{}/inspect/api/prompts", s.url), BOB).await;
    assert_eq!(bobs["prompts"], json!([]), "{bobs}");
}

fn urlencode(text: &str) -> String {
    url::form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

// ---- a headless Chromium over WebDriver ----

/// `chromedriver` running on a free port, and one browser session.
struct Browser {
    _driver: tokio::process::Child,
    http: reqwest::Client,
    session: String,
    _profile: tempfile::TempDir,
}

const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

impl Browser {
    /// A headless Chromium, or `None` (with a line saying so) when `AVA_CHROMEDRIVER` is not
    /// set (`memory_core::testing::env_or_skip`: a failure under `AVA_REQUIRE_SERVICES=1`).
    async fn start() -> Option<Self> {
        let driver = memory_core::testing::env_or_skip(
            "AVA_CHROMEDRIVER",
            "ava-bot's browser test",
            "a chromedriver (Debian: apt install chromium chromium-driver; \
             AVA_CHROMEDRIVER=/usr/bin/chromedriver)",
        )?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut child = tokio::process::Command::new(&driver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("start {driver}: {e}"));
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let started = tokio::time::timeout(PATIENCE, async {
            while let Some(line) = lines.next_line().await.unwrap() {
                if line.contains("started successfully") {
                    return true;
                }
            }
            false
        })
        .await;
        assert!(matches!(started, Ok(true)), "{driver} did not start");
        let profile = tempfile::tempdir().unwrap();
        let http = reqwest::Client::new();
        let base = format!("http://127.0.0.1:{port}");
        let binary = std::env::var("AVA_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
        let created: Value = http
            .post(format!("{base}/session"))
            .json(&json!({"capabilities": {"alwaysMatch": {
                "browserName": "chrome",
                "goog:chromeOptions": {
                    "binary": binary,
                    "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                             "--disable-dev-shm-usage", "--window-size=1280,1000",
                             format!("--user-data-dir={}", profile.path().display())],
                },
            }}}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let session = created["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no browser session: {created}"))
            .to_owned();
        Some(Self {
            _driver: child,
            http,
            session: format!("{base}/session/{session}"),
            _profile: profile,
        })
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let mut request = self.http.request(method, format!("{}{path}", self.session));
        if let Some(body) = body {
            request = request.json(&body);
        }
        let answer: Value = request.send().await.unwrap().json().await.unwrap();
        assert!(
            answer["value"].get("error").is_none(),
            "WebDriver {path}: {answer}"
        );
        answer["value"].clone()
    }

    async fn go(&self, url: &str) {
        self.call(reqwest::Method::POST, "/url", Some(json!({ "url": url })))
            .await;
    }

    async fn find(&self, css: &str) -> String {
        let found = self
            .call(
                reqwest::Method::POST,
                "/element",
                Some(json!({"using": "css selector", "value": css})),
            )
            .await;
        found[ELEMENT].as_str().unwrap().to_owned()
    }

    async fn type_in(&self, css: &str, text: &str) {
        let id = self.find(css).await;
        self.call(
            reqwest::Method::POST,
            &format!("/element/{id}/clear"),
            Some(json!({})),
        )
        .await;
        self.call(
            reqwest::Method::POST,
            &format!("/element/{id}/value"),
            Some(json!({ "text": text })),
        )
        .await;
    }

    async fn click(&self, css: &str) {
        let id = self.find(css).await;
        self.call(
            reqwest::Method::POST,
            &format!("/element/{id}/click"),
            Some(json!({})),
        )
        .await;
    }

    async fn js(&self, script: &str) -> Value {
        self.call(
            reqwest::Method::POST,
            "/execute/sync",
            Some(json!({"script": script, "args": []})),
        )
        .await
    }

    /// Picks the `i`th identity of the page's list (its views follow).
    async fn choose_identity(&self, i: usize) {
        self.js(&format!(
            "const s = document.getElementById('scope'); s.selectedIndex = {i}; \
             s.dispatchEvent(new Event('change'))"
        ))
        .await;
    }

    /// Searches the memories view for `q` and waits for its answer to be drawn.
    async fn search(&self, q: &str) {
        self.type_in("#q", q).await;
        self.click("#search").await;
        self.wait(&format!(
            "return (document.getElementById('memories').dataset.shown || '').endsWith(' {q}')"
        ))
        .await;
    }

    /// Waits until `script` returns something truthy, and returns it.
    async fn wait(&self, script: &str) -> Value {
        let start = Instant::now();
        loop {
            let value = self.js(script).await;
            if !matches!(value, Value::Null | Value::Bool(false)) && value != json!("") {
                return value;
            }
            assert!(
                start.elapsed() < PATIENCE,
                "timed out waiting for {script}; page: {}",
                self.js("return document.body.innerText").await
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// No alert is open (a script that ran would have opened one).
    async fn no_alert(&self) {
        let answer: Value = self
            .http
            .get(format!("{}/alert/text", self.session))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(answer["value"]["error"], "no such alert", "{answer}");
    }

    /// Saves a screenshot as `name` in `AVA_SCREENSHOTS`, if that is set.
    async fn screenshot(&self, name: &str) {
        let Ok(dir) = std::env::var("AVA_SCREENSHOTS") else {
            return;
        };
        let png = self.call(reqwest::Method::GET, "/screenshot", None).await;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(png.as_str().unwrap())
            .unwrap();
        std::fs::write(Path::new(&dir).join(name), bytes).unwrap();
    }

    async fn quit(self) {
        let _ = self.http.delete(&self.session).send().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_inspects_their_memories_and_a_prompt_in_a_real_browser() {
    let Some(browser) = Browser::start().await else {
        return;
    };
    let upstream = upstream().await;
    let s = serve(&format!("{}/v1", upstream.uri())).await;
    ask_through_the_proxy(&s).await;
    browser.go(&format!("{}/inspect", s.url)).await;

    // A wrong token is refused on the page.
    browser
        .type_in("#token", "not-a-token-0123456789abcdef0123456789")
        .await;
    browser.click("#login-go").await;
    let said = browser
        .wait("return document.getElementById('login-error').textContent")
        .await;
    assert!(said.as_str().unwrap().contains("Not logged in"), "{said}");

    // Log in: the newest memories of alice's chat, the HTML-looking ones as text.
    browser.type_in("#token", ALICE).await;
    browser.click("#login-go").await;
    browser
        .wait("return document.querySelectorAll('#memories a.memory').length >= 3")
        .await;
    let shown = browser
        .js("return [...document.querySelectorAll('#memories a.memory')].map(a => a.textContent)")
        .await;
    let shown: Vec<&str> = shown
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(
        shown.contains(&XSS_IMG) && shown.contains(&XSS_SCRIPT),
        "{shown:?}"
    );
    assert_eq!(
        browser
            .js("return document.querySelectorAll('img, #memories script').length")
            .await,
        0
    );
    assert_eq!(browser.js("return typeof window.pwned").await, "undefined");
    browser.no_alert().await;
    let options = browser
        .js("return [...document.querySelectorAll('#scope option')].map(o => o.textContent).join('|')")
        .await;
    assert!(!options.as_str().unwrap().contains("bob"), "{options}");

    // Her own facts: search, then the history of the door code.
    browser.choose_identity(1).await;
    browser.search("door code").await;
    let cells = browser
        .js("return document.querySelector('#memories tbody tr').innerText")
        .await;
    assert!(cells.as_str().unwrap().contains("0."), "a score: {cells}");
    browser.screenshot("inspector-memories.png").await;
    browser.click("#memories a.memory").await;
    let versions = browser
        .wait("return document.getElementById('history').hidden ? '' : document.getElementById('versions').innerText")
        .await;
    let versions = versions.as_str().unwrap();
    assert!(
        versions.contains("My door code is 4321") && versions.contains("My door code is 9876"),
        "{versions}"
    );
    assert!(versions.contains("replaced by"), "{versions}");
    let old_first = versions.find("4321").unwrap() < versions.find("9876").unwrap();
    assert!(old_first, "oldest first: {versions}");
    // Bob's secret is nowhere, whatever is searched.
    browser.search("secret lighthouse").await;
    let page = browser.js("return document.body.innerText").await;
    assert!(!page.as_str().unwrap().contains("lighthouse"), "{page}");

    // A prompt, explained: the budget bar, every candidate's fate, the prompt itself.
    browser.choose_identity(0).await;
    browser.click("button[data-view=prompt]").await;
    browser
        .type_in(
            "#message",
            "What is my door code, and what does Pixel like?",
        )
        .await;
    browser.click("#explain").await;
    browser
        .wait("return !document.getElementById('explained').hidden")
        .await;
    let summary = browser
        .js("return document.getElementById('summary').textContent")
        .await;
    assert!(summary.as_str().unwrap().contains("tokens"), "{summary}");
    let parts = browser
        .js("return document.querySelectorAll('#budget .part').length")
        .await;
    assert!(parts.as_u64().unwrap() >= 2, "{parts}");
    let fates = browser
        .js("return document.querySelector('#sections tbody').innerText")
        .await;
    let fates = fates.as_str().unwrap();
    assert!(fates.contains("kept"), "{fates}");
    // Each candidate is shown by its text, HTML-looking text as text.
    assert!(
        fates.contains("My door code is 9876") && fates.contains(XSS_IMG),
        "{fates}"
    );
    let prompt = browser
        .js("return document.getElementById('messages').innerText")
        .await;
    let prompt = prompt.as_str().unwrap();
    assert!(
        prompt.contains("9876") && !prompt.contains("lighthouse"),
        "{prompt}"
    );
    assert_eq!(browser.js("return typeof window.pwned").await, "undefined");
    browser.no_alert().await;
    browser.screenshot("inspector-prompt.png").await;
    // The prompt the proxy built for her, from the list of the last ones.
    browser.click("#recent a.built").await;
    let summary = browser
        .wait("const t = document.getElementById('summary').textContent; return t.includes('built by the proxy') ? t : ''")
        .await;
    assert!(summary.as_str().unwrap().contains("tokens"), "{summary}");

    // Lifecycle: her facts and what became of each; the replaced door code restored.
    browser.choose_identity(1).await;
    browser.click("button[data-view=lifecycle]").await;
    browser
        .wait(
            "return (document.getElementById('view-lifecycle').dataset.shown || '').includes('c/')",
        )
        .await;
    let facts = browser
        .wait("return document.querySelector('#facts tbody').innerText")
        .await;
    assert!(facts.as_str().unwrap().contains("replaced by"), "{facts}");
    browser.screenshot("inspector-lifecycle.png").await;
    browser
        .click("#facts tr.state-replaced button[data-what=restore]")
        .await;
    let said = browser
        .wait("return document.getElementById('changed').textContent")
        .await;
    assert_eq!(said, "Restored: My door code is 4321");
    browser
        .wait("return document.querySelectorAll('#facts tr.state-replaced').length === 0")
        .await;

    // The store: counts of what this token may read, the settings in force.
    browser.click("button[data-view=store]").await;
    let store = browser
        .wait("return document.querySelector('#settings tbody').innerText")
        .await;
    assert!(store.as_str().unwrap().contains("budget"), "{store}");
    browser.screenshot("inspector-store.png").await;

    // A read-only token sees the same and says so.
    browser.click("#logout").await;
    browser
        .wait("return !document.getElementById('login').hidden && document.getElementById('app').hidden && document.querySelectorAll('#facts tbody tr').length === 0")
        .await;
    browser.type_in("#token", ALICE_READ_ONLY).await;
    browser.click("#login-go").await;
    let who = browser
        .wait("return document.getElementById('who').textContent")
        .await;
    assert!(who.as_str().unwrap().contains("read-only"), "{who}");
    browser.click("button[data-view=lifecycle]").await;
    browser
        .wait("return document.querySelectorAll('#facts tbody tr').length > 0")
        .await;
    assert_eq!(
        browser
            .js("return document.querySelectorAll('#facts button, #view-lifecycle .write:not([hidden])').length")
            .await,
        0,
        "a read-only token gets no buttons"
    );
    browser.quit().await;
}
