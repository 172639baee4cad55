//! `ava import`: a Telegram Desktop chat export (`result.json`) becomes a user's memories;
//! or an `ava export` file is restored ([`super::export::restore`]).
//!
//! Each text message is one memory ("Sender: text") dated when it was sent. Ids are derived
//! from the scope's injective key and the message id, so importing the same export again
//! adds nothing, and two identities never share an id. Malformed entries are reported and
//! skipped; the rest still imports. The file is read as a stream, one message at a time,
//! so a large export does not have to fit in memory.

use std::fs::File;
use std::io::{BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{Context, bail};
use memory_core::{Ingested, MemoryBackend, MemoryId, NewMemory, Role, Scope, Timestamp};
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use tokio::sync::mpsc;

use crate::config::Settings;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The user the memories belong to (for an `ava export` file: its person, or the one
    /// person to restore of a whole-store export).
    #[arg(long)]
    user: Option<String>,
    /// The tenant the user belongs to [default: `default`]; an `ava export` file's memories
    /// must be of this tenant (the file's own, when it names one).
    #[arg(long)]
    tenant: Option<String>,
    /// The chat to file them under [default: the export's chat id].
    #[arg(long)]
    chat: Option<String>,
    /// The export file: `result.json` from Telegram Desktop's "Export chat history" (JSON),
    /// or a file `ava export` wrote (restored as it was, ids already present skipped).
    file: PathBuf,
}

/// Namespace of import ids (a fixed random UUID): v5 of `scope key # message id`.
const IMPORT_NAMESPACE: uuid::Uuid =
    uuid::Uuid::from_u128(0x2b7e_51c9_0d64_4a3f_9c15_e8a2_7d40_b613);

/// Namespace of the ids earlier versions gave imports (v5 of `user/chat/message id`, which
/// two identities could share): still recognised, so re-importing an old import adds
/// nothing.
const LEGACY_NAMESPACE: uuid::Uuid =
    uuid::Uuid::from_u128(0x6f1c_2d8e_94b3_4c57_a1e0_5b7d_3f92_c468);

/// How the look-up pass stops once it has the chat id (not an error).
const FOUND_ID: &str = "chat id found";

/// Messages stored per batch.
const BATCH: usize = 256;

/// One message ready to store, or why it was skipped.
enum Parsed {
    Memory {
        id: MemoryId,
        legacy: MemoryId,
        memory: Box<NewMemory>,
    },
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

fn parse_message(m: &Value, scope: &Scope) -> Parsed {
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
        format!("{}#{msg_id}", scope.key()).as_bytes(),
    ));
    let legacy = MemoryId::from_uuid(uuid::Uuid::new_v5(
        &LEGACY_NAMESPACE,
        format!(
            "{}/{}/{msg_id}",
            scope.user(),
            scope.chat().unwrap_or_default()
        )
        .as_bytes(),
    ));
    let chat = scope.chat().unwrap_or_default();
    let memory = hydrate::with_entity_tags(NewMemory::new(format!("{from}: {text}")))
        .with_id(id)
        .with_role(Role::User)
        .with_source(format!("telegram-export:{chat}/{msg_id}"))
        .with_context("imported from a Telegram chat export")
        .at(at);
    Parsed::Memory {
        id,
        legacy,
        memory: Box::new(memory),
    }
}

#[derive(Default)]
struct Counts {
    imported: u64,
    present: u64,
    no_text: u64,
    malformed: u64,
}

/// A reader that counts the bytes it has read (for the progress bar).
struct Counting<R> {
    inner: R,
    read: Arc<AtomicU64>,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

/// What the top level of an export holds, as far as the import cares.
#[derive(Default)]
struct TopLevel {
    chat_id: Option<String>,
    has_messages: bool,
}

/// Reads the top-level object into `top` as it goes (so what was read before any damage
/// is known); hands each entry of `messages` (with its index) to `each` as it is read,
/// when given, and skips the list otherwise.
struct Export<'t, 'e> {
    top: &'t mut TopLevel,
    each: Option<&'e mut dyn FnMut(usize, Value) -> anyhow::Result<()>>,
}

impl<'de> DeserializeSeed<'de> for Export<'_, '_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Export<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a Telegram Desktop chat export (an object with a `messages` list)")
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<(), A::Error> {
        let top = &mut *self.top;
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "id" => {
                    top.chat_id = match map.next_value::<Value>()? {
                        Value::Number(n) => Some(n.to_string()),
                        Value::String(s) => Some(s),
                        _ => None,
                    };
                    if self.each.is_none() && top.chat_id.is_some() {
                        // Only the chat id was wanted: stop reading here.
                        return Err(serde::de::Error::custom(FOUND_ID));
                    }
                }
                "messages" => {
                    top.has_messages = true;
                    match self.each.take() {
                        Some(each) => map.next_value_seed(Messages { each })?,
                        None => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

/// The `messages` list, one entry at a time.
struct Messages<'a> {
    each: &'a mut dyn FnMut(usize, Value) -> anyhow::Result<()>,
}

impl<'de> DeserializeSeed<'de> for Messages<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for Messages<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a list of messages")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut i = 0;
        while let Some(m) = seq.next_element::<Value>()? {
            (self.each)(i, m).map_err(serde::de::Error::custom)?;
            i += 1;
        }
        Ok(())
    }
}

/// Reads `file`'s top level into `top`, handing each message to `each` if given.
fn read_export(
    file: &Path,
    read: &Arc<AtomicU64>,
    top: &mut TopLevel,
    each: Option<&mut dyn FnMut(usize, Value) -> anyhow::Result<()>>,
) -> anyhow::Result<()> {
    let f = File::open(file).with_context(|| format!("read {}", file.display()))?;
    let reader = BufReader::with_capacity(
        1 << 16,
        Counting {
            inner: f,
            read: Arc::clone(read),
        },
    );
    let mut de = serde_json::Deserializer::from_reader(reader);
    Export { top, each }
        .deserialize(&mut de)
        .and_then(|()| de.end())
        .map_err(|e| {
            anyhow::anyhow!(
                "{} is not JSON of the expected shape ({e}); expected Telegram Desktop's result.json",
                file.display()
            )
        })
}

/// Whether `file` starts (after white space) as a JSON object does, as a Telegram export.
fn looks_like_json_object(file: &Path) -> anyhow::Result<bool> {
    let f = File::open(file).with_context(|| format!("read {}", file.display()))?;
    let mut start = Vec::new();
    f.take(4096)
        .read_to_end(&mut start)
        .with_context(|| format!("read {}", file.display()))?;
    Ok(start
        .iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_some_and(|b| *b == b'{'))
}

/// What the reading thread sends: a batch of parsed messages, with their indexes.
type Batch = Vec<(usize, Parsed)>;

pub(crate) async fn run(
    settings: &Settings,
    args: &Args,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    if super::export::is_export(&args.file) {
        if args.chat.is_some() {
            bail!("--chat does not apply to an `ava export` file: its memories keep their chats");
        }
        let opened = settings.open().await?;
        let done = super::export::restore(
            opened.store.as_ref(),
            &args.file,
            args.user.as_deref(),
            args.tenant.as_deref(),
        )
        .await;
        if let Some(sqlite) = &opened.sqlite {
            sqlite.close().await;
        }
        let done = done?;
        for why in &done.refused {
            eprintln!("skipped {why}");
        }
        writeln!(
            out,
            "restored {} memories, {} already present, {} skipped",
            done.stored,
            done.present,
            done.refused.len()
        )?;
        if !done.refused.is_empty() {
            bail!(
                "{} of the file's memories could not be restored (listed above); keep the file",
                done.refused.len()
            );
        }
        return Ok(());
    }
    if !looks_like_json_object(&args.file)? {
        bail!(
            "{} is neither an `ava export` file (a first line naming ava_export) nor a Telegram \
             Desktop chat export (result.json, a JSON object); nothing was imported",
            args.file.display()
        );
    }
    let Some(user) = &args.user else {
        bail!("--user is needed to import a Telegram export: whose memories should they be?");
    };
    let size = std::fs::metadata(&args.file)
        .with_context(|| format!("read {}", args.file.display()))?
        .len();
    let read = Arc::new(AtomicU64::new(0));
    // The chat id may come after the messages: without --chat, look it up first (a pass
    // that skips the messages without keeping them).
    let chat = match &args.chat {
        Some(c) => c.clone(),
        None => {
            let (file, read) = (args.file.clone(), Arc::new(AtomicU64::new(0)));
            let (top, read) = tokio::task::spawn_blocking(move || {
                let mut top = TopLevel::default();
                let r = read_export(&file, &read, &mut top, None);
                (top, r)
            })
            .await
            .context("read the export")?;
            match (top.chat_id, read) {
                // The pass stops at the id; damage after it is reported by the import
                // itself, after storing what comes before it.
                (Some(id), _) => id,
                (None, Err(e)) => return Err(e),
                (None, Ok(())) if !top.has_messages => bail!(
                    "{} has no `messages` list; expected a Telegram Desktop chat export (result.json)",
                    args.file.display()
                ),
                (None, Ok(())) => bail!("the export names no chat id; pass --chat"),
            }
        }
    };
    let mut scope = Scope::for_user(user)?;
    if let Some(tenant) = &args.tenant {
        scope = scope.in_tenant(tenant)?;
    }
    let scope = scope.in_chat(&chat)?;
    let opened = settings.open().await?;
    let store = &*opened.store;
    // Ids of earlier versions are looked up only where an earlier import could have been.
    let check_legacy = store.count(&scope).await.context("count memories")? > 0;

    let (tx, mut rx) = mpsc::channel::<Batch>(4);
    let (file, scope_p, read_p) = (args.file.clone(), scope.clone(), Arc::clone(&read));
    let reader = tokio::task::spawn_blocking(move || {
        let mut batch: Batch = Vec::with_capacity(BATCH);
        let mut each = |i: usize, m: Value| -> anyhow::Result<()> {
            batch.push((i, parse_message(&m, &scope_p)));
            if batch.len() == BATCH {
                tx.blocking_send(std::mem::replace(&mut batch, Vec::with_capacity(BATCH)))
                    .context("the import stopped")?;
            }
            Ok(())
        };
        let mut top = TopLevel::default();
        let read = read_export(&file, &read_p, &mut top, Some(&mut each));
        // What was read before any damage in the file is stored too.
        if !batch.is_empty() {
            tx.blocking_send(batch).context("the import stopped")?;
        }
        read.map(|()| top)
    });

    let bar = indicatif::ProgressBar::new(size).with_style(
        indicatif::ProgressStyle::with_template(
            "importing [{bar:40}] {bytes}/{total_bytes} ({eta})",
        )?
        .progress_chars("=> "),
    );
    let mut counts = Counts::default();
    let mut stored = Ok(());
    while let Some(batch) = rx.recv().await {
        if let Err(e) = store_batch(store, &scope, batch, check_legacy, &mut counts, &bar).await {
            // Stop reading; what was stored stays stored.
            stored = Err(e);
            break;
        }
        bar.set_position(read.load(Ordering::Relaxed));
    }
    drop(rx);
    let top = reader.await.context("read the export")?;
    bar.finish_and_clear();
    let summary = format!(
        "imported {} messages into {scope} ({} already there, {} without text (service or media), {} malformed skipped)",
        counts.imported, counts.present, counts.no_text, counts.malformed
    );
    stored?;
    let top = top.map_err(|e| {
        e.context(format!(
            "stopped after {} messages (they are stored)",
            counts.imported
        ))
    })?;
    if !top.has_messages {
        bail!(
            "{} has no `messages` list; expected a Telegram Desktop chat export (result.json)",
            args.file.display()
        );
    }
    writeln!(out, "{summary}")?;
    if counts.malformed > 0 && counts.imported == 0 && counts.present == 0 {
        bail!(
            "none of the {} messages with text could be read; is this a Telegram Desktop export?",
            counts.malformed
        );
    }
    Ok(())
}

/// Stores a batch; a message already there (a re-import) or refused is counted as such and
/// does not stop the others ([`MemoryBackend::store_each`]).
async fn store_batch(
    store: &dyn MemoryBackend,
    scope: &Scope,
    batch: Batch,
    check_legacy: bool,
    counts: &mut Counts,
    bar: &indicatif::ProgressBar,
) -> anyhow::Result<()> {
    let mut todo = Vec::with_capacity(batch.len());
    for (i, parsed) in batch {
        match parsed {
            Parsed::Memory { id, legacy, memory } => {
                if check_legacy && store.get(scope, legacy).await.is_ok() {
                    counts.present += 1;
                } else {
                    todo.push((id, *memory));
                }
            }
            Parsed::NoText => counts.no_text += 1,
            Parsed::Malformed(why) => {
                counts.malformed += 1;
                bar.suspend(|| eprintln!("skipped entry {i}: {why}"));
            }
        }
    }
    if todo.is_empty() {
        return Ok(());
    }
    // A message longer than the store takes in one memory goes in as linked parts; it
    // counts once, as its first part does.
    let max = store.info().limits.max_content_bytes;
    let mut memories = Vec::with_capacity(todo.len());
    let mut owners = Vec::with_capacity(todo.len());
    for (id, memory) in todo {
        for (k, part) in memory.split_to_fit(max).into_iter().enumerate() {
            owners.push((id, k == 0));
            memories.push(part);
        }
    }
    let results = store
        .store_each(scope, memories)
        .await
        .context("store imported messages")?;
    for ((id, first), result) in owners.into_iter().zip(results) {
        match result {
            Ingested::Stored(_) if first => counts.imported += 1,
            Ingested::Exists(_) if first => counts.present += 1,
            Ingested::Stored(_) | Ingested::Exists(_) => {}
            Ingested::Rejected(e) => {
                if first {
                    counts.malformed += 1;
                }
                let why = memory_core::ErrorChain(&e);
                bar.suspend(|| eprintln!("skipped message {id}: {why}"));
            }
        }
    }
    Ok(())
}
