//! `ava check`: the whole configuration checked, and each service it names asked once (the
//! store opened, a sentence embedded, the chat model asked for one word, the reranker and
//! the web search called, the Telegram token shown to the Bot API), one line each. Exits
//! non-zero when any check fails; nothing is stored.

use std::io::Write;
use std::time::{Duration, Instant};

use hydrate::ChatMessage;

use crate::config::{DbTarget, Settings, redact_url, secret_from_env};
use crate::llm::{LlmChoice, LlmSettings};
use crate::shared::error_chain;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    llm: LlmSettings,
    /// Do not ask the chat model (the check costs one short completion).
    #[arg(long)]
    no_llm: bool,
    /// The Bot API's address (for a local Bot API server or tests).
    #[arg(long, env = "AVA_TELEGRAM_API_URL")]
    telegram_api_url: Option<String>,
}

/// How one check went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Ok,
    /// Not configured, so not used.
    Off,
    Fail,
}

/// Prints one check's line as soon as it is known.
struct Lines<'a, W: Write> {
    out: &'a mut W,
    failed: Vec<&'static str>,
}

impl<W: Write> Lines<'_, W> {
    fn line(&mut self, name: &'static str, status: Status, detail: &str) -> anyhow::Result<()> {
        let word = match status {
            Status::Ok => "ok",
            Status::Off => "off",
            Status::Fail => {
                self.failed.push(name);
                "FAIL"
            }
        };
        writeln!(self.out, "{name:<11} {word:<5} {detail}")?;
        self.out.flush()?;
        Ok(())
    }

    fn result(&mut self, name: &'static str, r: anyhow::Result<String>) -> anyhow::Result<()> {
        match r {
            Ok(detail) => self.line(name, Status::Ok, &detail),
            Err(e) => self.line(name, Status::Fail, &error_chain(&e)),
        }
    }

    /// The line of an optional service: failed when `built` is an error, off (saying `off`)
    /// when it is not configured, else what `check` says of it and how long it took.
    async fn probe<T>(
        &mut self,
        name: &'static str,
        built: anyhow::Result<Option<T>>,
        off: &str,
        check: impl AsyncFnOnce(&T) -> anyhow::Result<String>,
    ) -> anyhow::Result<()> {
        match built {
            Err(e) => self.line(name, Status::Fail, &error_chain(&e)),
            Ok(None) => self.line(name, Status::Off, off),
            Ok(Some(service)) => {
                let started = Instant::now();
                let said = check(&service).await;
                let said = said.map(|s| format!("{s} in {}", ms(started.elapsed())));
                self.result(name, said)
            }
        }
    }
}

fn ms(d: Duration) -> String {
    format!("{} ms", d.as_millis())
}

/// For the local model, the threads each of its matrix multiplies runs on, as `main`
/// settled them (`memory_embedders::settle_thread_count`); nothing for other embedders.
#[cfg(feature = "local")]
fn kernel_threads(provider: &str) -> String {
    use memory_embedders::{LocalEmbedder, THREADS_ENV};
    if provider != LocalEmbedder::PROVIDER {
        return String::new();
    }
    match std::env::var(THREADS_ENV) {
        Ok(n) => format!(" on {n} thread(s) ({THREADS_ENV})"),
        Err(_) => format!(" ({THREADS_ENV} unset: candle works the thread count out per multiply)"),
    }
}

#[cfg(not(feature = "local"))]
fn kernel_threads(_provider: &str) -> String {
    String::new()
}

pub(crate) async fn run(
    settings: &Settings,
    args: &Args,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let mut lines = Lines {
        out,
        failed: Vec::new(),
    };

    // The store: opened as every command opens it, but never created.
    let target = settings.db_target();
    let missing = matches!(&target, Ok(DbTarget::Sqlite(p)) if !p.exists());
    let mut embedder = None;
    match target {
        Err(e) => lines.line("store", Status::Fail, &error_chain(&e))?,
        Ok(DbTarget::Sqlite(path)) if missing => lines.line(
            "store",
            Status::Ok,
            &format!(
                "sqlite {} does not exist yet; the first command that stores creates it",
                path.display()
            ),
        )?,
        Ok(target) => {
            let shown = match &target {
                DbTarget::Sqlite(p) => format!("sqlite {}", p.display()),
                DbTarget::Postgres(url) => format!("postgres {}", redact_url(url)),
            };
            let started = Instant::now();
            match settings.open_existing().await {
                Ok(opened) => {
                    let info = opened.store.info();
                    let space = info
                        .embedding_space
                        .as_ref()
                        .map_or_else(|| "no vectors yet".to_owned(), |s| format!("vectors {s}"));
                    lines.line(
                        "store",
                        Status::Ok,
                        &format!(
                            "{shown} ({}), {space}, opened in {}",
                            info.kind(),
                            ms(started.elapsed())
                        ),
                    )?;
                    embedder = Some((opened.embedder, opened.embedder_note));
                }
                Err(e) => lines.line("store", Status::Fail, &error_chain(&e))?,
            }
        }
    }

    // The embedder the store was opened with, or the configured one.
    let embedder = match embedder {
        Some(e) => Ok(e),
        None => settings.embedder().await,
    };
    match embedder {
        Err(e) => lines.line("embedder", Status::Fail, &error_chain(&e))?,
        Ok((None, note)) => lines.line("embedder", Status::Off, &note)?,
        Ok((Some(e), note)) => {
            let note = note.strip_prefix("embedder ").unwrap_or(&note);
            let threads = kernel_threads(&e.space().provider);
            let started = Instant::now();
            let r = e
                .embed("Ava checks that this sentence can be embedded.")
                .await
                .map(|v| {
                    format!(
                        "{note}; embedded a sentence ({} dims) in {}{threads}",
                        v.vector().len(),
                        ms(started.elapsed())
                    )
                })
                .map_err(anyhow::Error::new);
            lines.result("embedder", r)?;
        }
    }

    // The chat model: one short completion.
    if args.no_llm {
        lines.line("llm", Status::Off, "not asked (--no-llm)")?;
    } else {
        let (kind, url) = match args.llm.llm {
            LlmChoice::Ollama => ("ollama", &settings.ollama_url),
            LlmChoice::Openai => ("openai", &settings.openai_url),
        };
        let url = args.llm.llm_url.as_ref().unwrap_or(url);
        let r: anyhow::Result<String> = async {
            let model = args.llm.build(settings)?;
            let started = Instant::now();
            let messages = [
                ChatMessage::system("Reply with the single word OK."),
                ChatMessage::user("Are you there?"),
            ];
            model.chat(&messages, &[]).await?;
            Ok(format!(
                "{kind} {} at {url} answered in {}",
                model.name(),
                ms(started.elapsed())
            ))
        }
        .await;
        let r = r.map_err(|e| e.context(format!("{kind} at {url}")));
        lines.result("llm", r)?;
    }

    // The reranker: two documents judged.
    let reranker = settings.rerank.http();
    lines
        .probe("reranker", reranker, "no --rerank-url", async |r| {
            let n = r.check().await?;
            Ok(format!("{} judged {n} of 2 documents", r.url()))
        })
        .await?;

    // Web search: one query.
    let web = settings.web.source(None);
    lines
        .probe("web search", web, "no --web-search-url", async |w| {
            let n = w.check().await?;
            Ok(format!("{} gave {n} result(s)", w.url()))
        })
        .await?;

    // Telegram: the token shown to the Bot API.
    match secret_from_env("TELOXIDE_TOKEN")
        .as_ref()
        .map(memory_core::Secret::expose)
    {
        None => lines.line("telegram", Status::Off, "no TELOXIDE_TOKEN")?,
        Some(token) => {
            let r = crate::telegram::whoami(token, args.telegram_api_url.as_deref())
                .await
                .map(|name| format!("the token belongs to @{name}"));
            lines.result("telegram", r)?;
        }
    }

    match lines.failed.as_slice() {
        [] => Ok(()),
        failed => anyhow::bail!("{} check(s) failed: {}", failed.len(), failed.join(", ")),
    }
}
