//! `Scope`: the identity every memory belongs to (tenant, user, chat, thread).

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::{MemoryError, Result};

/// Longest accepted routing key, in bytes.
pub const MAX_SCOPE_KEY_BYTES: usize = 128;

/// The tenant used when none is named.
pub const DEFAULT_TENANT: &str = "default";

/// The identity a memory belongs to: non-secret routing keys, never credentials.
///
/// Every memory belongs to exactly one scope, and every read and write names one. Scopes
/// match exactly: `(user 42, chat 7)` and `(user 42, no chat)` are different scopes, so a
/// caller that wants both asks for both. Keys are validated on construction (non-empty, at
/// most [`MAX_SCOPE_KEY_BYTES`] bytes, no control characters), so a `Scope` value is always
/// usable.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "ScopeParts", into = "ScopeParts")]
pub struct Scope {
    tenant: String,
    user: String,
    chat: Option<String>,
    thread: Option<String>,
}

/// The serialized form of a [`Scope`], validated on the way in.
#[derive(Serialize, Deserialize)]
struct ScopeParts {
    #[serde(default = "default_tenant")]
    tenant: String,
    user: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    chat: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    thread: Option<String>,
}

fn default_tenant() -> String {
    DEFAULT_TENANT.to_owned()
}

impl TryFrom<ScopeParts> for Scope {
    type Error = MemoryError;

    fn try_from(p: ScopeParts) -> Result<Self> {
        let mut scope = Scope::for_user(p.user)?.in_tenant(p.tenant)?;
        if let Some(chat) = p.chat {
            scope = scope.in_chat(chat)?;
        }
        if let Some(thread) = p.thread {
            scope = scope.in_thread(thread)?;
        }
        Ok(scope)
    }
}

impl From<Scope> for ScopeParts {
    fn from(s: Scope) -> Self {
        Self {
            tenant: s.tenant,
            user: s.user,
            chat: s.chat,
            thread: s.thread,
        }
    }
}

fn check_key(field: &'static str, value: String) -> Result<String> {
    if value.is_empty() {
        return Err(MemoryError::invalid(field, "must not be empty"));
    }
    if value.len() > MAX_SCOPE_KEY_BYTES {
        return Err(MemoryError::invalid(
            field,
            format!(
                "is {} bytes long, at most {MAX_SCOPE_KEY_BYTES} are allowed",
                value.len()
            ),
        ));
    }
    if value.chars().any(char::is_control) {
        return Err(MemoryError::invalid(
            field,
            "must not contain control characters",
        ));
    }
    Ok(value)
}

impl Scope {
    /// The scope of one user in the default tenant, outside any chat.
    pub fn for_user(user: impl Into<String>) -> Result<Self> {
        Ok(Self {
            tenant: DEFAULT_TENANT.to_owned(),
            user: check_key("scope user", user.into())?,
            chat: None,
            thread: None,
        })
    }

    /// This scope narrowed to a chat.
    pub fn in_chat(mut self, chat: impl Into<String>) -> Result<Self> {
        self.chat = Some(check_key("scope chat", chat.into())?);
        Ok(self)
    }

    /// This scope narrowed to a thread.
    pub fn in_thread(mut self, thread: impl Into<String>) -> Result<Self> {
        self.thread = Some(check_key("scope thread", thread.into())?);
        Ok(self)
    }

    /// This scope moved to another tenant.
    pub fn in_tenant(mut self, tenant: impl Into<String>) -> Result<Self> {
        self.tenant = check_key("scope tenant", tenant.into())?;
        Ok(self)
    }

    /// The scope of this user outside any chat or thread (same tenant and user): where
    /// what belongs to the person rather than to one conversation is kept.
    pub fn user_wide(&self) -> Scope {
        Scope {
            tenant: self.tenant.clone(),
            user: self.user.clone(),
            chat: None,
            thread: None,
        }
    }

    /// What a private context of this scope reads: this scope, then (unless it is the
    /// user-wide one already) the user's user-wide scope, where their own facts are kept.
    pub fn private_context(&self) -> Vec<Scope> {
        if self.is_user_wide() {
            vec![self.clone()]
        } else {
            vec![self.clone(), self.user_wide()]
        }
    }

    /// Whether this is a user-wide scope (no chat, no thread).
    pub fn is_user_wide(&self) -> bool {
        self.chat.is_none() && self.thread.is_none()
    }

    /// The tenant key.
    pub fn tenant(&self) -> &str {
        &self.tenant
    }

    /// The user key.
    pub fn user(&self) -> &str {
        &self.user
    }

    /// The chat key, if the scope is narrowed to a chat.
    pub fn chat(&self) -> Option<&str> {
        self.chat.as_deref()
    }

    /// The thread key, if the scope is narrowed to a thread.
    pub fn thread(&self) -> Option<&str> {
        self.thread.as_deref()
    }

    /// The canonical, injective string form of this scope, for use as a storage key.
    ///
    /// Two scopes have the same key exactly when they are equal: each part is escaped and a
    /// missing chat or thread is written differently from any present one.
    pub fn key(&self) -> String {
        fn part(out: &mut String, name: &str, value: Option<&str>) {
            out.push_str(name);
            if let Some(v) = value {
                out.push('=');
                for c in v.chars() {
                    match c {
                        '%' => out.push_str("%25"),
                        '/' => out.push_str("%2F"),
                        '=' => out.push_str("%3D"),
                        c => out.push(c),
                    }
                }
            }
        }
        let mut out = String::with_capacity(32);
        part(&mut out, "t", Some(&self.tenant));
        out.push('/');
        part(&mut out, "u", Some(&self.user));
        out.push('/');
        part(&mut out, "c", self.chat.as_deref());
        out.push('/');
        part(&mut out, "h", self.thread.as_deref());
        out
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.key())
    }
}

impl fmt::Debug for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Scope({})", self.key())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_user_wide_scope_keeps_tenant_and_user_only() {
        let chat = Scope::for_user("alice")
            .and_then(|s| s.in_tenant("acme"))
            .and_then(|s| s.in_chat("7"))
            .and_then(|s| s.in_thread("t"))
            .unwrap();
        let wide = chat.user_wide();
        assert_eq!(
            wide,
            Scope::for_user("alice").unwrap().in_tenant("acme").unwrap()
        );
        assert!(wide.is_user_wide() && !chat.is_user_wide());
        assert_eq!(wide.user_wide(), wide);
        assert_eq!(chat.private_context(), [chat.clone(), wide.clone()]);
        assert_eq!(wide.private_context(), [wide]);
    }

    #[test]
    fn keys_are_injective_for_tricky_values() {
        let a = Scope::for_user("1/c=2").unwrap();
        let b = Scope::for_user("1").unwrap().in_chat("2").unwrap();
        let c = Scope::for_user("1").unwrap().in_chat("").map(|_| ());
        assert_ne!(a.key(), b.key());
        assert!(c.is_err());
        let no_chat = Scope::for_user("u").unwrap();
        let chat_c = Scope::for_user("u").unwrap().in_chat("c").unwrap();
        assert_ne!(no_chat.key(), chat_c.key());
        assert_eq!(b.key(), "t=default/u=1/c=2/h");
    }

    #[test]
    fn rejects_bad_keys_with_the_field_named() {
        let err = Scope::for_user("x".repeat(200)).unwrap_err().to_string();
        assert!(
            err.contains("scope user") && err.contains("200 bytes"),
            "{err}"
        );
        assert!(Scope::for_user("a\nb").is_err());
        assert!(serde_json::from_str::<Scope>(r#"{"user":""}"#).is_err());
        let s: Scope = serde_json::from_str(r#"{"user":"42","chat":"7"}"#).unwrap();
        assert_eq!(s.tenant(), DEFAULT_TENANT);
        assert_eq!(s.chat(), Some("7"));
    }
}
