//! The bearer-token file of `ava mcp --http`: which secret token acts as which identity.
//!
//! The file is JSON, readable by its owner (and maybe the group) only:
//!
//! ```json
//! {
//!   "tokens": [
//!     { "token": "3f9c…(at least 32 characters)", "user": "alice", "chat": "claude-desktop" },
//!     { "token": "8a41…", "user": "bob", "chat": "cursor" },
//!     { "token": "c07e…", "user": "shop", "chat": "assistant", "end_users": true }
//!   ]
//! }
//! ```
//!
//! A token with `"end_users": true` belongs to an app that serves many people: on the
//! OpenAI-compatible proxy of `ava serve` it may name the person each request is for, and
//! each such person is kept apart like any user, in the tenant `app:<user>` of the token.
//! Such a request that names no one is refused, unless the token also has
//! `"anonymous": true`: then every request that names no one shares the token's own
//! identity (one memory for all of them).
//!
//! A token with `"read_only": true` may read and never change anything: MCP's `remember`
//! and `forget` refuse it, and so does the proxy (which stores every exchange). A token with
//! `"operator": true` may browse every identity of its tenant in `ava serve`'s inspector.
//!
//! Tokens are kept only as SHA-256 digests and compared in constant time; no message here
//! ever contains one (a malformed file is described by position and field name, never by the
//! values in it).

use std::collections::HashMap;
use std::fmt;
use std::io::Read;
use std::path::Path;

use anyhow::{Context, bail};
use memory_core::Scope;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// Shortest token accepted: 32 characters (`openssl rand -hex 32` makes 64).
pub(crate) const MIN_TOKEN_CHARS: usize = 32;

/// The identities of a token file, each behind the digest of its token.
pub(crate) struct TokenTable {
    entries: Vec<([u8; 32], Grant)>,
}

/// What one token may do: act as its identity, and (for an app's token) name end users.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Grant {
    /// The identity the token acts as.
    pub(crate) scope: Scope,
    /// Whether requests may name the end user they are for (`ava serve`'s proxy).
    pub(crate) end_users: bool,
    /// With `end_users`, whether a request that names no end user is served in the token's
    /// own identity (shared by every such request) instead of refused.
    pub(crate) anonymous: bool,
    /// Whether it may only read.
    pub(crate) read_only: bool,
    /// Whether the inspector shows it every identity of its tenant.
    pub(crate) operator: bool,
}

impl Grant {
    /// The identity of the end user `user` of this token's app: the tenant `app:<user of
    /// the token>`, so no app's end user is ever another app's, or a user of the store's own.
    pub(crate) fn end_user(&self, user: &str) -> anyhow::Result<Scope> {
        if !self.end_users {
            bail!(
                "this token may not name end users (give it \"end_users\": true in the token file)"
            );
        }
        let mut scope = Scope::for_user(user)?.in_tenant(format!("app:{}", self.scope.user()))?;
        if let Some(chat) = self.scope.chat() {
            scope = scope.in_chat(chat)?;
        }
        Ok(scope)
    }
}

impl fmt::Debug for TokenTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Digests are not the tokens, but there is no reason to show them either.
        f.debug_list()
            .entries(self.entries.iter().map(|(_, g)| g.scope.to_string()))
            .finish()
    }
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

impl TokenTable {
    /// Reads and checks a token file: not readable or writable by others, not writable by
    /// the group, valid JSON of the documented shape, tokens long enough and distinct.
    pub(crate) fn load(path: &Path) -> anyhow::Result<Self> {
        let shown = path.display();
        let mut file =
            std::fs::File::open(path).with_context(|| format!("open the token file {shown}"))?;
        // The checks look at the file that was opened, not at whatever the path names later.
        let meta = file
            .metadata()
            .with_context(|| format!("inspect the token file {shown}"))?;
        if !meta.is_file() {
            bail!("the token file {shown} is not a regular file");
        }
        check_permissions(&meta, path)?;
        let mut text = String::new();
        file.read_to_string(&mut text)
            .with_context(|| format!("read the token file {shown}"))?;
        Self::parse(&text).with_context(|| format!("token file {shown}"))
    }

    /// Parses the JSON of a token file (see the module docs).
    pub(crate) fn parse(text: &str) -> anyhow::Result<Self> {
        // A syntax error says where, never what: serde_json's messages for those carry no
        // values. Shape errors are ours, and name fields, not their contents.
        let value = match serde_json::from_str::<Strict>(text) {
            Ok(Strict(value)) => value,
            // Ours: names the key, never a value.
            Err(e) if e.is_data() => bail!("{e}"),
            Err(e) => bail!(
                "not valid JSON ({:?} error at line {}, column {})",
                e.classify(),
                e.line(),
                e.column()
            ),
        };
        let Value::Object(top) = value else {
            bail!("expected a JSON object with a `tokens` list");
        };
        if let Some(key) = top.keys().find(|k| *k != "tokens") {
            bail!("unknown key `{key}` at the top level; expected only `tokens`");
        }
        let Some(Value::Array(items)) = top.get("tokens") else {
            bail!("expected a `tokens` list");
        };
        if items.is_empty() {
            bail!("the `tokens` list is empty; add at least one token");
        }
        let mut entries = Vec::with_capacity(items.len());
        let mut seen: HashMap<[u8; 32], usize> = HashMap::new();
        for (i, item) in items.iter().enumerate() {
            let n = i + 1;
            let Value::Object(item) = item else {
                bail!("token entry {n} is not an object with `token`, `user` and `chat`");
            };
            let (token, grant) = entry(item).with_context(|| format!("token entry {n}"))?;
            let d = digest(token);
            if let Some(first) = seen.insert(d, n) {
                bail!("token entries {first} and {n} have the same token; each needs its own");
            }
            entries.push((d, grant));
        }
        Ok(Self { entries })
    }

    /// How many tokens there are.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// What each token may do, in file order (index = what [`TokenTable::identify`] returns).
    pub(crate) fn grants(&self) -> impl Iterator<Item = &Grant> {
        self.entries.iter().map(|(_, g)| g)
    }

    /// What the token of entry `i` ([`TokenTable::identify`]) may do.
    pub(crate) fn grant(&self, i: usize) -> Option<&Grant> {
        self.entries.get(i).map(|(_, g)| g)
    }

    /// The index of the entry whose token is `presented`, comparing every entry's digest in
    /// constant time.
    pub(crate) fn identify(&self, presented: &str) -> Option<usize> {
        let d = digest(presented);
        let mut found = None;
        for (i, (known, _)) in self.entries.iter().enumerate() {
            if bool::from(known.ct_eq(&d)) {
                found = Some(i);
            }
        }
        found
    }
}

/// A JSON value in which no object has the same key twice: with serde_json's own `Value`
/// the last one would win silently, so `"user": "alice", ..., "user": "bob"` would act as bob
/// while a reviewer of the file reads alice.
struct Strict(Value);

impl<'de> serde::Deserialize<'de> for Strict {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(StrictVisitor).map(Strict)
    }
}

struct StrictVisitor;

impl<'de> serde::de::Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(Strict(v)) = seq.next_element()? {
            items.push(v);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let Strict(v) = map.next_value()?;
            if out.contains_key(&key) {
                return Err(serde::de::Error::custom(format_args!(
                    "the key `{key}` appears twice in one object; give each key once"
                )));
            }
            out.insert(key, v);
        }
        Ok(Value::Object(out))
    }
}

fn entry(item: &Map<String, Value>) -> anyhow::Result<(&str, Grant)> {
    if let Some(key) = item.keys().find(|k| {
        !matches!(
            k.as_str(),
            "token" | "user" | "chat" | "end_users" | "anonymous" | "read_only" | "operator"
        )
    }) {
        bail!(
            "unknown key `{key}`; expected `token`, `user`, `chat` and maybe `end_users`, \
             `anonymous`, `read_only`, `operator`"
        );
    }
    let flag = |key: &str| -> anyhow::Result<bool> {
        match item.get(key) {
            None => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(_) => bail!("`{key}` must be true or false"),
        }
    };
    let (end_users, read_only, operator) =
        (flag("end_users")?, flag("read_only")?, flag("operator")?);
    let anonymous = flag("anonymous")?;
    if anonymous && !end_users {
        bail!(
            "`anonymous` applies only to a token with \"end_users\": true (it says what to do \
             with a request that names no end user)"
        );
    }
    let text = |key: &str| -> anyhow::Result<&str> {
        match item.get(key) {
            Some(Value::String(s)) => Ok(s.as_str()),
            Some(_) => bail!("`{key}` must be a string"),
            None => bail!("`{key}` is missing"),
        }
    };
    let token = text("token")?;
    let chars = token.chars().count();
    if chars < MIN_TOKEN_CHARS {
        bail!(
            "the token has {chars} characters; use at least {MIN_TOKEN_CHARS} random ones \
             (e.g. `openssl rand -hex 32`)"
        );
    }
    // What an HTTP header can carry after `Bearer `.
    if !token.bytes().all(|b| b.is_ascii_graphic()) {
        bail!("the token must be printable ASCII without spaces");
    }
    let scope = Scope::for_user(text("user")?)?.in_chat(text("chat")?)?;
    Ok((
        token,
        Grant {
            scope,
            end_users,
            anonymous,
            read_only,
            operator,
        },
    ))
}

#[cfg(unix)]
fn check_permissions(meta: &std::fs::Metadata, path: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o007 != 0 || mode & 0o020 != 0 {
        bail!(
            "the token file {} has mode {mode:03o}: other users could read or change its \
             tokens; make it private with `chmod 600 {}`",
            path.display(),
            path.display()
        );
    }
    Ok(())
}

#[cfg(not(unix))]
fn check_permissions(_: &std::fs::Metadata, _: &Path) -> anyhow::Result<()> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

    fn err(text: &str) -> String {
        format!("{:#}", TokenTable::parse(text).expect_err("refused"))
    }

    #[test]
    fn tokens_map_to_their_identities() {
        let t = TokenTable::parse(&format!(
            r#"{{"tokens": [{{"token": "{A}", "user": "alice", "chat": "desk"}},
                            {{"token": "{B}", "user": "bob", "chat": "cli"}}]}}"#
        ))
        .unwrap();
        assert_eq!(t.len(), 2);
        let scopes: Vec<&Scope> = t.grants().map(|g| &g.scope).collect();
        // May write and sees only itself unless the file says otherwise.
        assert!(t.grants().all(|g| !g.read_only && !g.operator));
        let flagged = TokenTable::parse(&format!(
            r#"{{"tokens": [{{"token": "{A}", "user": "ops", "chat": "c",
                             "read_only": true, "operator": true}}]}}"#
        ))
        .unwrap();
        let g = flagged.grant(0).unwrap();
        assert!(g.read_only && g.operator && !g.end_users);
        assert_eq!(t.identify(A), Some(0));
        assert_eq!(scopes[0].user(), "alice");
        assert_eq!(t.identify(B), Some(1));
        assert_eq!(t.identify(&A[1..]), None);
        assert_eq!(t.identify(""), None);
        assert!(!format!("{t:?}").contains("aaaaaaaa"));
        let alice = t.grant(0).unwrap();
        assert!(!alice.end_users);
        let e = alice
            .end_user("carol")
            .expect_err("alice's token names no one");
        assert!(e.to_string().contains("may not name end users"), "{e}");
    }

    #[test]
    fn an_apps_token_names_end_users_in_its_own_tenant() {
        let t = TokenTable::parse(&format!(
            r#"{{"tokens": [{{"token": "{A}", "user": "shop", "chat": "bot", "end_users": true}}]}}"#
        ))
        .unwrap();
        let grant = t.grant(0).unwrap();
        let carol = grant.end_user("carol").unwrap();
        assert_eq!(
            (carol.tenant(), carol.user(), carol.chat()),
            ("app:shop", "carol", Some("bot"))
        );
        assert_ne!(
            carol,
            Scope::for_user("carol").unwrap().in_chat("bot").unwrap()
        );
        assert!(grant.end_user("").is_err());
        assert!(
            !grant.anonymous,
            "refuses calls that name no one unless told"
        );
        let shared = TokenTable::parse(&format!(
            r#"{{"tokens": [{{"token": "{A}", "user": "shop", "chat": "bot", "end_users": true,
                             "anonymous": true}}]}}"#
        ))
        .unwrap();
        assert!(shared.grant(0).unwrap().anonymous);
        let e = err(&format!(
            r#"{{"tokens": [{{"token": "{A}", "user": "u", "chat": "c", "anonymous": true}}]}}"#
        ));
        assert!(e.contains("only to a token with \"end_users\""), "{e}");
        let e = err(&format!(
            r#"{{"tokens": [{{"token": "{A}", "user": "u", "chat": "c", "end_users": 1}}]}}"#
        ));
        assert!(e.contains("`end_users` must be true or false"), "{e}");
    }

    #[test]
    fn malformed_files_are_refused_without_showing_tokens() {
        for (text, expect) in [
            ("{", "not valid JSON"),
            ("[]", "expected a JSON object"),
            (r#"{"tokens": []}"#, "is empty"),
            (r#"{"tokens": {}}"#, "expected a `tokens` list"),
            (r#"{"token": []}"#, "unknown key `token`"),
            (
                &format!(r#"{{"tokens": ["{A}"]}}"#),
                "entry 1 is not an object",
            ),
            (
                &format!(r#"{{"tokens": [{{"token": "{A}", "user": "u"}}]}}"#),
                "`chat` is missing",
            ),
            (
                &format!(r#"{{"tokens": [{{"token": "{A}", "user": 7, "chat": "c"}}]}}"#),
                "`user` must be a string",
            ),
            (
                r#"{"tokens": [{"token": "short-secret", "user": "u", "chat": "c"}]}"#,
                "has 12 characters",
            ),
            (
                &format!(r#"{{"tokens": [{{"token": "{A} x", "user": "u", "chat": "c"}}]}}"#),
                "without spaces",
            ),
            (
                &format!(
                    r#"{{"tokens": [{{"token": "{A}", "user": "u", "chat": "c"}},
                                    {{"token": "{A}", "user": "v", "chat": "c"}}]}}"#
                ),
                "entries 1 and 2 have the same token",
            ),
            (
                &format!(r#"{{"tokens": [{{"token": "{A}", "user": "u", "chat": "c", "x": 1}}]}}"#),
                "unknown key `x`",
            ),
            (
                &format!(
                    r#"{{"tokens": [{{"token": "{A}", "user": "alice", "chat": "c", "user": "bob"}}]}}"#
                ),
                "the key `user` appears twice",
            ),
            (
                &format!(r#"{{"tokens": [], "tokens": [{{"token": "{A}"}}]}}"#),
                "the key `tokens` appears twice",
            ),
            (
                &format!(
                    r#"{{"tokens": [{{"token": "{A}", "user": "u", "chat": "c", "read_only": "yes"}}]}}"#
                ),
                "`read_only` must be true or false",
            ),
        ] {
            let e = err(text);
            assert!(e.contains(expect), "{text}: {e}");
            assert!(!e.contains("aaaa") && !e.contains("short-secret"), "{e}");
        }
    }

    #[cfg(unix)]
    #[test]
    fn files_others_can_read_are_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens.json");
        std::fs::write(
            &path,
            format!(r#"{{"tokens": [{{"token": "{A}", "user": "u", "chat": "c"}}]}}"#),
        )
        .unwrap();
        for (mode, ok) in [(0o644, false), (0o660, false), (0o600, true), (0o640, true)] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            let got = TokenTable::load(&path);
            assert_eq!(got.is_ok(), ok, "mode {mode:o}: {got:?}");
            if let Err(e) = got {
                assert!(format!("{e:#}").contains("chmod 600"), "{e:#}");
            }
        }
    }
}
