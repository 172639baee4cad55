//! `SslMode`: libpq's `sslmode` values, what [`crate::Tls`] and the errors of TLS name.

use std::fmt;

/// How the connection to the server is encrypted and the server checked: libpq's `sslmode`,
/// with libpq's meaning.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SslMode {
    /// Plain TCP, never TLS.
    Disable,
    /// TLS if the server offers it, else plain; and plain again if the TLS handshake fails.
    /// The certificate is not checked unless a root is given ([`crate::Tls::root_cert`]). libpq's
    /// default, and this crate's.
    #[default]
    Prefer,
    /// TLS or no connection. The certificate is not checked unless a root is given (then, as
    /// libpq does, its chain is, as in [`SslMode::VerifyCa`]).
    Require,
    /// TLS, the server's certificate signed by a trusted root; its host name is not checked.
    VerifyCa,
    /// TLS, the server's certificate signed by a trusted root and naming the host connected
    /// to (the URL's host, not `hostaddr`).
    VerifyFull,
}

impl SslMode {
    /// The mode named as libpq names it (`disable`, `prefer`, `require`, `verify-ca`,
    /// `verify-full`), or `None`. libpq's `allow` is not offered (it tries plain first).
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "disable" => Self::Disable,
            "prefer" => Self::Prefer,
            "require" => Self::Require,
            "verify-ca" => Self::VerifyCa,
            "verify-full" => Self::VerifyFull,
            _ => return None,
        })
    }

    /// libpq's name of the mode.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Disable => "disable",
            Self::Prefer => "prefer",
            Self::Require => "require",
            Self::VerifyCa => "verify-ca",
            Self::VerifyFull => "verify-full",
        }
    }
}

impl fmt::Display for SslMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
