//! [`Secret`]: a value (an API key, a token) that must never reach a log, a report or a prompt.

use std::fmt;

/// A secret value (an API key, a token). Its `Debug` prints `Secret(<redacted>)`; it has no
/// `Display` and no `Serialize`, so it cannot reach a log line, a report or a prompt by
/// accident. Call [`Secret::expose`] where the value is really needed.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The value itself. Only pass it to the service that needs it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

#[cfg(test)]
mod tests {
    use super::Secret;

    #[test]
    fn debug_never_shows_the_value() {
        let s = Secret::new("sk-very-secret");
        assert_eq!(format!("{s:?}"), "Secret(<redacted>)");
        assert_eq!(format!("{:?}", Some(&s)), "Some(Secret(<redacted>))");
        assert_eq!(s.expose(), "sk-very-secret");
    }
}
