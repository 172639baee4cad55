//! The log on stderr: lines for people (the default), or with `--log-format json` one JSON
//! object per line for a log pipeline, in which who a line is about (a scope, a chat, a
//! user) is a keyed hash, never the id itself.
//!
//! The hash is SHA-256 of a key and the value, cut to 12 hex digits. The key is `AVA_LOG_KEY` when set (so that replicas and restarts hash one person alike and
//! their lines can be joined), else a random one per process. Message text and tokens never
//! reach a log line at info level in either format: the front doors log counts, names of
//! what happened and the token file's labels.

use std::io::Write;
use std::sync::OnceLock;

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// The environment variable holding the key identities are hashed with in JSON logs.
pub(crate) const KEY_ENV: &str = "AVA_LOG_KEY";

/// Field names whose values say who a line is about: hashed in JSON logs.
const IDENTITY_FIELDS: [&str; 7] = ["scope", "chat", "user", "member", "tenant", "from", "peer"];

/// How the log is written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum LogFormat {
    /// Lines for people, coloured on a terminal.
    #[default]
    Human,
    /// One JSON object per line: `time`, `level`, `target`, `message`, the event's fields
    /// (identities hashed) and `spans`, the names of the spans it happened in.
    Json,
}

/// The format chosen at start, for what is written past the log filter ([`announce`]).
static FORMAT: OnceLock<LogFormat> = OnceLock::new();

/// Starts the log on stderr in `format`; `RUST_LOG` overrides the default filter (warnings,
/// and `ava`'s own info lines).
pub(crate) fn init(format: LogFormat) {
    use tracing_subscriber::EnvFilter;
    let _ = FORMAT.set(format);
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn,ava=info"));
    // A second subscriber (never in this binary) is the only failure: ignore it.
    let _ = match format {
        LogFormat::Human => {
            // Colours only on a terminal: an MCP client or a service manager keeps stderr in
            // a file.
            let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
            tracing_subscriber::fmt()
                .with_env_filter(filter)
                .with_ansi(ansi)
                .with_writer(std::io::stderr)
                .try_init()
        }
        LogFormat::Json => tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_ansi(false)
            .with_writer(std::io::stderr)
            .event_format(JsonLines::from_env())
            .try_init(),
    };
}

/// Writes `text` on stderr past the log filter, as a line of its own for people or as one
/// JSON object at `level` in JSON logs: what scripts and clients read (where a server
/// listens) and the error a command ends with.
pub(crate) fn announce(level: &str, text: &str) {
    let line = match FORMAT.get().copied().unwrap_or_default() {
        LogFormat::Human => text.to_owned(),
        LogFormat::Json => Value::Object(line_head(level, "ava", text)).to_string(),
    };
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// What every JSON line starts with: `time` (now), `level`, `target` and `message`.
fn line_head(level: &str, target: &str, message: &str) -> Map<String, Value> {
    let mut obj = Map::new();
    obj.insert(
        "time".into(),
        memory_core::Timestamp::now().to_string().into(),
    );
    obj.insert("level".into(), level.into());
    obj.insert("target".into(), target.into());
    obj.insert("message".into(), message.into());
    obj
}

/// The JSON event format: identities hashed with its key.
#[derive(Debug, Clone)]
pub(crate) struct JsonLines {
    key: [u8; 32],
}

impl JsonLines {
    /// Keyed by `AVA_LOG_KEY`, or by a random key when it is unset or empty.
    fn from_env() -> Self {
        match std::env::var(KEY_ENV) {
            Ok(k) if !k.is_empty() => Self::keyed(k.as_bytes()),
            _ => Self::keyed(uuid::Uuid::new_v4().as_bytes()),
        }
    }

    /// Keyed by `key`.
    pub(crate) fn keyed(key: &[u8]) -> Self {
        Self {
            key: Sha256::digest(key).into(),
        }
    }

    /// The hash an identity is logged as: `h:` and 12 hex digits.
    pub(crate) fn hash(&self, value: &str) -> String {
        let mut h = Sha256::new();
        h.update(self.key);
        h.update(value.as_bytes());
        let digest = h.finalize();
        let hex: String = digest[..6].iter().map(|b| format!("{b:02x}")).collect();
        format!("h:{hex}")
    }
}

impl<S, N> FormatEvent<S, N> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> std::fmt::Result {
        let meta = event.metadata();
        let mut fields = Fields {
            lines: self,
            message: None,
            map: Map::new(),
        };
        event.record(&mut fields);
        let message = fields.message.unwrap_or_default();
        let mut obj = line_head(meta.level().as_str(), meta.target(), &message);
        if !fields.map.is_empty() {
            obj.insert("fields".into(), Value::Object(fields.map));
        }
        if let Some(scope) = ctx.event_scope() {
            let spans: Vec<Value> = scope.from_root().map(|s| s.name().into()).collect();
            obj.insert("spans".into(), spans.into());
        }
        writeln!(writer, "{}", Value::Object(obj))
    }
}

/// An event's fields as JSON values, identities hashed.
struct Fields<'a> {
    lines: &'a JsonLines,
    message: Option<String>,
    map: Map<String, Value>,
}

impl Fields<'_> {
    fn put(&mut self, field: &Field, value: Value) {
        let name = field.name();
        if name == "message" {
            self.message = Some(match value {
                Value::String(s) => s,
                other => other.to_string(),
            });
        } else if IDENTITY_FIELDS.contains(&name) {
            let text = match value {
                Value::String(s) => s,
                other => other.to_string(),
            };
            self.map
                .insert(name.to_owned(), self.lines.hash(&text).into());
        } else {
            self.map.insert(name.to_owned(), value);
        }
    }
}

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.put(field, format!("{value:?}").into());
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, value.into());
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, value.into());
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, value.into());
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, value.into());
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.put(field, value.into());
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// A writer into a shared buffer.
    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl Write for Buffer {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn logged(lines: JsonLines, emit: impl FnOnce()) -> Vec<Value> {
        let buffer = Buffer::default();
        let out = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_writer(move || out.clone())
            .event_format(lines)
            .finish();
        tracing::subscriber::with_default(subscriber, emit);
        let text = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
        text.lines()
            .map(|l| serde_json::from_str(l).expect("each line one JSON object"))
            .collect()
    }

    #[test]
    fn identities_are_hashed_by_the_key_and_everything_else_kept() {
        let scope = memory_core::Scope::for_user("alice").unwrap();
        let emit = || {
            let span = tracing::info_span!("chat");
            let _in = span.enter();
            tracing::warn!(scope = %scope, chat = 4242_i64, tokens = 3_u64, "kept it");
        };
        let a = logged(JsonLines::keyed(b"one"), emit);
        let again = logged(JsonLines::keyed(b"one"), emit);
        let other = logged(JsonLines::keyed(b"two"), emit);
        assert_eq!(a.len(), 1, "{a:?}");
        let line = &a[0];
        assert_eq!(line["level"], "WARN");
        assert_eq!(line["message"], "kept it");
        assert_eq!(line["spans"], serde_json::json!(["chat"]));
        assert_eq!(line["fields"]["tokens"], 3);
        let text = line.to_string();
        assert!(!text.contains("alice") && !text.contains("4242"), "{text}");
        let hashed = line["fields"]["scope"].as_str().unwrap();
        assert!(hashed.starts_with("h:") && hashed.len() == 14, "{hashed}");
        // One key hashes one person alike (lines can be joined); another key does not.
        assert_eq!(again[0]["fields"]["scope"], line["fields"]["scope"]);
        assert_eq!(again[0]["fields"]["chat"], line["fields"]["chat"]);
        assert_ne!(other[0]["fields"]["scope"], line["fields"]["scope"]);
        assert_ne!(line["fields"]["chat"], line["fields"]["scope"]);
    }
}
