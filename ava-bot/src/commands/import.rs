//! `ava import`: a Telegram Desktop chat export (`result.json`) becomes a user's memories.
//!
//! Each text message is one memory ("Sender: text") dated when it was sent. Ids are derived
//! from (user, chat, message id), so importing the same export again adds nothing.
//! Malformed entries are reported and skipped; the rest still imports.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, bail};
use memory_core::{MemoryBackend, MemoryError, MemoryId, NewMemory, Role, Scope, Timestamp};
use serde_json::Value;

use crate::config::Settings;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The user the memories belong to.
    #[arg(long)]
    user: String,
    /// The chat to file them under [default: the export's chat id].
    #[arg(long)]
    chat: Option<String>,
    /// The export file (`result.json` from Telegram Desktop's "Export chat history", JSON).
    file: PathBuf,
}

/// Namespace of import ids (a fixed random UUID).
const IMPORT_NAMESPACE: uuid::Uuid =
    uuid::Uuid::from_u128(0x6f1c_2d8e_94b3_4c57_a1e0_5b7d_3f92_c468);

/// One message ready to store, or why it was skipped.
enum Parsed {
    Memory(MemoryId, NewMemory),
    NoText,
    Malformed(String),
}

/// Telegram writes text either as a string or as a list of strings and entity objects.
fn message_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Array(parts) => Some(
            parts
                .iter()
                .map(|p| match p {
                    Value::String(s) => s.as_str(),
                    other => other
                        .get("text")
                        .and_then(Value::as_str)
                        .unwrap_or_default(),
                })
                .collect(),
        ),
        _ => None,
    }
}

fn parse_message(m: &Value, user: &str, chat: &str) -> Parsed {
    if m.get("type").and_then(Value::as_str) != Some("message") {
        return Parsed::NoText;
    }
    let Some(msg_id) = m.get("id").and_then(Value::as_i64) else {
        return Parsed::Malformed("a message without a numeric id".into());
    };
    let at = m
        .get("date_unixtime")
        .and_then(Value::as_str)
        .and_then(|s| s.parse::<i64>().ok())
        .and_then(|secs| Timestamp::from_millis(secs.saturating_mul(1000)))
        .or_else(|| {
            let date = m.get("date").and_then(Value::as_str)?;
            let dt = chrono::NaiveDateTime::parse_from_str(date, "%Y-%m-%dT%H:%M:%S").ok()?;
            Some(Timestamp::from(dt.and_utc()))
        });
    let Some(at) = at else {
        return Parsed::Malformed(format!("message {msg_id} has no readable date"));
    };
    let Some(text) = m.get("text").and_then(message_text) else {
        return Parsed::Malformed(format!(
            "message {msg_id} has a text field of an unknown shape"
        ));
    };
    if text.trim().is_empty() {
        return Parsed::NoText;
    }
    let from = m.get("from").and_then(Value::as_str).unwrap_or("someone");
    let id = MemoryId::from_uuid(uuid::Uuid::new_v5(
        &IMPORT_NAMESPACE,
        format!("{user}/{chat}/{msg_id}").as_bytes(),
    ));
    let memory = NewMemory::new(format!("{from}: {text}"))
        .with_id(id)
        .with_role(Role::User)
        .with_source(format!("telegram-export:{chat}/{msg_id}"))
        .with_context("imported from a Telegram chat export")
        .at(at);
    Parsed::Memory(id, memory)
}

#[derive(Default)]
struct Counts {
    imported: u64,
    present: u64,
    no_text: u64,
    malformed: u64,
}

pub(crate) async fn run(
    settings: &Settings,
    args: &Args,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(&args.file)
        .with_context(|| format!("read {}", args.file.display()))?;
    let export: Value = serde_json::from_str(&text).with_context(|| {
        format!(
            "{} is not JSON (expected Telegram Desktop's result.json)",
            args.file.display()
        )
    })?;
    let Some(messages) = export.get("messages").and_then(Value::as_array) else {
        bail!(
            "{} has no `messages` list; expected a Telegram Desktop chat export (result.json)",
            args.file.display()
        );
    };
    let chat = match (&args.chat, export.get("id")) {
        (Some(c), _) => c.clone(),
        (None, Some(Value::Number(n))) => n.to_string(),
        (None, Some(Value::String(s))) => s.clone(),
        _ => bail!("the export names no chat id; pass --chat"),
    };
    let scope = Scope::for_user(&args.user)?.in_chat(&chat)?;
    let opened = settings.open().await?;
    let store = &*opened.store;
    let bar = indicatif::ProgressBar::new(messages.len() as u64).with_style(
        indicatif::ProgressStyle::with_template("importing [{bar:40}] {pos}/{len} ({eta})")?
            .progress_chars("=> "),
    );
    let mut counts = Counts::default();
    let mut batch = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        match parse_message(m, &args.user, &chat) {
            Parsed::Memory(id, memory) => batch.push((id, memory)),
            Parsed::NoText => counts.no_text += 1,
            Parsed::Malformed(why) => {
                counts.malformed += 1;
                bar.suspend(|| eprintln!("skipped entry {i}: {why}"));
            }
        }
        if batch.len() == 256 || i + 1 == messages.len() {
            store_batch(store, &scope, std::mem::take(&mut batch), &mut counts, &bar).await?;
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    writeln!(
        out,
        "imported {} messages into {scope} ({} already there, {} without text (service or media), {} malformed skipped)",
        counts.imported, counts.present, counts.no_text, counts.malformed
    )?;
    Ok(())
}

/// Stores a batch at once; if any id is already there (a re-import), one by one.
async fn store_batch(
    store: &dyn MemoryBackend,
    scope: &Scope,
    batch: Vec<(MemoryId, NewMemory)>,
    counts: &mut Counts,
    bar: &indicatif::ProgressBar,
) -> anyhow::Result<()> {
    if batch.is_empty() {
        return Ok(());
    }
    let n = batch.len() as u64;
    let memories: Vec<NewMemory> = batch.iter().map(|(_, m)| m.clone()).collect();
    match store.store_batch(scope, memories).await {
        Ok(_) => {
            counts.imported += n;
            return Ok(());
        }
        Err(MemoryError::Conflict { .. } | MemoryError::InvalidInput { .. }) => {}
        Err(e) => return Err(e).context("store imported messages"),
    }
    for (id, memory) in batch {
        match store.store(scope, memory).await {
            Ok(_) => counts.imported += 1,
            Err(MemoryError::Conflict { .. }) => counts.present += 1,
            Err(e @ MemoryError::InvalidInput { .. }) => {
                counts.malformed += 1;
                bar.suspend(|| eprintln!("skipped message {id}: {e}"));
            }
            Err(e) => return Err(e).context("store an imported message"),
        }
    }
    Ok(())
}
