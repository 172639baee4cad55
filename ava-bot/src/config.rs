//! Settings shared by every subcommand (flags with environment fallbacks) and the code that
//! turns them into a store and an embedder.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use ava_memory::open::{EmbedderSettings, choose_embedder, open_store};
use memory_core::{EmbeddingProvider, MemoryBackend, Scope, Secret};
use memory_embedders::resolve_model_dir;
use memory_sqlite::SqliteBackend;
use prompt_ir::BudgetAllocation;

/// Where `--db` points: a SQLite file or a Postgres URL, told apart as the facade tells
/// them ([`ava_memory::Location::parse`]).
pub(crate) use ava_memory::Location as DbTarget;
/// `url` with any password replaced by `***`.
pub(crate) use ava_memory::open::redact_url;

pub(crate) use ava_memory::EmbedderChoice;

/// A secret read from the environment (unset or blank is none): a [`memory_core::Secret`],
/// never printed, never logged.
pub(crate) fn secret_from_env(var: &str) -> Option<Secret> {
    std::env::var(var)
        .ok()
        .filter(|v| !v.trim().is_empty())
        .map(Secret::new)
}

/// Settings every subcommand shares.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct Settings {
    /// The memory store: a SQLite file, or a `postgres://` URL (build with `--features
    /// postgres`; `?schema=NAME` picks the Postgres schema, default `ava`) [default:
    /// $XDG_DATA_HOME/ava/memories.db or ~/.local/share/ava/memories.db]
    #[arg(long, env = "AVA_DB", global = true)]
    pub(crate) db: Option<PathBuf>,
    /// Which embedder computes vectors.
    #[arg(long, env = "AVA_EMBEDDER", value_enum, default_value_t = EmbedderChoice::Auto, global = true)]
    pub(crate) embedder: EmbedderChoice,
    /// Directory of the local model [default: $AVA_MODEL_DIR, else the cache dir].
    #[arg(long, global = true)]
    pub(crate) model_dir: Option<PathBuf>,
    /// Embedding model for the ollama and openai embedders.
    #[arg(long, env = "AVA_EMBED_MODEL", global = true)]
    pub(crate) embed_model: Option<String>,
    /// Ollama's address.
    #[arg(
        long,
        env = "OLLAMA_URL",
        default_value = "http://localhost:11434",
        global = true
    )]
    pub(crate) ollama_url: String,
    /// Root of an OpenAI-compatible API, up to the version (`.../v1`).
    #[arg(
        long,
        env = "OPENAI_BASE_URL",
        default_value = "https://api.openai.com/v1",
        global = true
    )]
    pub(crate) openai_url: String,
    /// How each prompt's token budget is split among its parts: `relevance` (one pool,
    /// ranked by relevance, priority and recency), `information` (the same, plus how much
    /// new information a part adds), or `fixed:SYSTEM,CONTEXT,OBSERVATION` (fixed shares,
    /// e.g. `fixed:0.3,0.6,0.1`) [default: relevance].
    #[arg(long, env = "AVA_ALLOCATION", global = true)]
    pub(crate) allocation: Option<BudgetAllocation>,
    #[command(flatten)]
    pub(crate) rerank: RerankArgs,
    #[command(flatten)]
    pub(crate) web: WebArgs,
}

/// Optional web search: a SearxNG-compatible server.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct WebArgs {
    /// The root of a SearxNG-compatible server (its JSON format enabled), e.g.
    /// http://127.0.0.1:8888: each prompt also gets web results, with their URLs; off when
    /// unset. A bearer key, if a proxy in front needs one, is read from AVA_WEB_SEARCH_KEY.
    #[arg(long, env = "AVA_WEB_SEARCH_URL", global = true)]
    pub(crate) web_search_url: Option<String>,
    /// The `language` of web searches, e.g. `en` [default: the server's].
    #[arg(long, env = "AVA_WEB_LANGUAGE", global = true)]
    pub(crate) web_language: Option<String>,
}

impl WebArgs {
    /// The web source, or `None` without `--web-search-url`. `embedder` (the store's)
    /// scores results against the question.
    pub(crate) fn build(
        &self,
        embedder: Option<Arc<dyn EmbeddingProvider>>,
    ) -> anyhow::Result<Option<Arc<dyn hydrate::ContextSource>>> {
        Ok(self
            .source(embedder)?
            .map(|s| Arc::new(s) as Arc<dyn hydrate::ContextSource>))
    }

    /// The web source itself, or `None` without `--web-search-url`.
    pub(crate) fn source(
        &self,
        embedder: Option<Arc<dyn EmbeddingProvider>>,
    ) -> anyhow::Result<Option<hydrate::WebSearchSource>> {
        let Some(url) = &self.web_search_url else {
            return Ok(None);
        };
        let config = hydrate::WebSearchConfig {
            language: self.web_language.clone(),
            api_key: secret_from_env("AVA_WEB_SEARCH_KEY"),
            ..hydrate::WebSearchConfig::new(url.clone())
        };
        Ok(Some(hydrate::WebSearchSource::new(config, embedder)?))
    }
}

impl Settings {
    /// An agent over `opened`'s store whose prompts take at most `budget` tokens, with what
    /// these settings add to every prompt ([`Settings::equip`]).
    pub(crate) fn agent(
        &self,
        opened: &Opened,
        budget: u32,
    ) -> anyhow::Result<crate::agent::Agent> {
        let agent =
            crate::agent::Agent::new(Arc::clone(&opened.store), opened.embedder.clone(), budget)?;
        self.equip(agent, opened)
    }

    /// `agent` (over `opened`'s store) with what these settings add to every prompt: the
    /// budget split, the reranker, web results and the user's documents. One assembly for
    /// every command that builds prompts.
    pub(crate) fn equip(
        &self,
        agent: crate::agent::Agent,
        opened: &Opened,
    ) -> anyhow::Result<crate::agent::Agent> {
        Ok(agent
            .with_allocation(self.allocation.clone())
            .with_reranker(self.rerank.build()?)
            .with_web(self.web.build(opened.embedder.clone())?)
            .with_documents(documents(opened)?))
    }
}

/// The source of the user's documents (`ava docs`) over `opened`'s store, or `None` in a
/// build without the `documents` feature (where `ava docs` says how to rebuild).
pub(crate) fn documents(
    opened: &Opened,
) -> anyhow::Result<Option<Arc<dyn hydrate::ContextSource>>> {
    if hydrate::documents_available().is_err() {
        return Ok(None);
    }
    let source = hydrate::DocumentSource::new(Arc::clone(&opened.store), opened.embedder.clone())?;
    Ok(Some(Arc::new(source)))
}

/// An optional reranker of retrieved memories: a `/rerank` server.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct RerankArgs {
    /// A `/rerank` endpoint (Cohere v2, Jina, vLLM, Infinity or text-embeddings-inference)
    /// that reorders retrieved memories before the budget, e.g.
    /// http://127.0.0.1:8080/rerank; off when unset. A key, if the server needs one, is
    /// read from AVA_RERANK_KEY.
    #[arg(long, env = "AVA_RERANK_URL", global = true)]
    pub(crate) rerank_url: Option<String>,
    /// The reranking model (Cohere-shaped APIs need one, e.g. rerank-v3.5).
    #[arg(long, env = "AVA_RERANK_MODEL", global = true)]
    pub(crate) rerank_model: Option<String>,
    /// The server's API: `cohere` (also Jina, vLLM, Infinity) or `tei`.
    #[arg(long, env = "AVA_RERANK_API", default_value = "cohere", global = true)]
    pub(crate) rerank_api: String,
    /// Milliseconds to wait for the reranker; past it the scored order is kept.
    #[arg(
        long,
        env = "AVA_RERANK_TIMEOUT_MS",
        default_value_t = 2000,
        global = true
    )]
    pub(crate) rerank_timeout_ms: u64,
    /// Reranked memories scoring under this (0 to 1) are left out.
    #[arg(long, env = "AVA_RERANK_MIN_SCORE", global = true)]
    pub(crate) rerank_min_score: Option<f32>,
}

impl Default for RerankArgs {
    fn default() -> Self {
        Self {
            rerank_url: None,
            rerank_model: None,
            rerank_api: "cohere".to_owned(),
            rerank_timeout_ms: 2000,
            rerank_min_score: None,
        }
    }
}

impl RerankArgs {
    /// The configured reranker, or `None` without `--rerank-url`.
    pub(crate) fn build(&self) -> anyhow::Result<Option<Arc<dyn hydrate::Reranker>>> {
        Ok(self
            .http()?
            .map(|r| Arc::new(r) as Arc<dyn hydrate::Reranker>))
    }

    /// The configured HTTP reranker itself, or `None` without `--rerank-url`.
    pub(crate) fn http(&self) -> anyhow::Result<Option<hydrate::HttpReranker>> {
        let Some(url) = &self.rerank_url else {
            return Ok(None);
        };
        let config = hydrate::HttpRerankerConfig {
            model: self.rerank_model.clone(),
            api: hydrate::RerankApi::parse(&self.rerank_api)?,
            api_key: secret_from_env("AVA_RERANK_KEY"),
            timeout: std::time::Duration::from_millis(self.rerank_timeout_ms),
            min_score: self.rerank_min_score,
            ..hydrate::HttpRerankerConfig::new(url.clone())
        };
        Ok(Some(hydrate::HttpReranker::new(config)?))
    }
}

/// The identity a command works as.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct Identity {
    /// User id (e.g. a Telegram user id).
    #[arg(long)]
    pub(crate) user: String,
    /// Chat id (e.g. a Telegram chat id).
    #[arg(long)]
    pub(crate) chat: String,
    /// What the user is called: the prompt says who Ava is talking to.
    #[arg(long)]
    pub(crate) name: Option<String>,
}

impl Identity {
    pub(crate) fn scope(&self) -> anyhow::Result<Scope> {
        Ok(Scope::for_user(&self.user)?.in_chat(&self.chat)?)
    }
}

/// A person in every chat of theirs, for commands about all they are (`erase`).
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct Whole {
    /// User id (e.g. a Telegram user id).
    #[arg(long)]
    pub(crate) user: String,
    /// The tenant they belong to (an app's end users of `ava serve` are in `app:<its user>`).
    #[arg(long, default_value = memory_core::DEFAULT_TENANT)]
    pub(crate) tenant: String,
}

/// A user and maybe one chat of theirs, for commands about a person's facts (`remember`,
/// `facts`).
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct Person {
    /// User id (e.g. a Telegram user id).
    #[arg(long)]
    pub(crate) user: String,
    /// One chat of the user. Without it: the user's own facts, which every private context
    /// of theirs sees (a private chat with the bot, `ava chat`, `ava context`, MCP; never a
    /// group). With it: that chat's only (`remember`), or that chat's too (`facts`).
    #[arg(long)]
    pub(crate) chat: Option<String>,
}

impl Person {
    /// The user's own (user-wide) scope.
    pub(crate) fn own(&self) -> anyhow::Result<Scope> {
        Ok(Scope::for_user(&self.user)?)
    }

    /// The chat's scope, if a chat was named.
    pub(crate) fn in_chat(&self) -> anyhow::Result<Option<Scope>> {
        Ok(match &self.chat {
            Some(chat) => Some(self.own()?.in_chat(chat)?),
            None => None,
        })
    }
}

/// An open store, and what embedder it was opened with, for people.
pub(crate) struct Opened {
    pub(crate) store: Arc<dyn MemoryBackend>,
    /// The same store when it is a SQLite file (for `stats`, which reads its totals).
    pub(crate) sqlite: Option<Arc<SqliteBackend>>,
    /// The same store when it is a Postgres schema (for `stats` and `reembed --missing`).
    #[cfg(feature = "postgres")]
    pub(crate) postgres: Option<Arc<memory_postgres::PostgresBackend>>,
    /// One line on the embedder in use, or why there is none.
    pub(crate) embedder_note: String,
    /// The embedder the store was opened with (its space), for embedding a prompt's
    /// observation once for all its searches.
    pub(crate) embedder: Option<Arc<dyn EmbeddingProvider>>,
}

impl Settings {
    /// Where the store is: `--db`, `$AVA_DB`, or the per-user data directory (created).
    pub(crate) fn db_target(&self) -> anyhow::Result<DbTarget> {
        if let Some(p) = &self.db
            && let target @ DbTarget::Postgres(_) = DbTarget::parse(p)
        {
            return Ok(target);
        }
        self.db_path().map(DbTarget::Sqlite)
    }

    /// The store path: `--db`, `$AVA_DB`, or the per-user data directory (created).
    pub(crate) fn db_path(&self) -> anyhow::Result<PathBuf> {
        if let Some(p) = &self.db {
            return Ok(p.clone());
        }
        let base = std::env::var_os("XDG_DATA_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))
            .context("no --db given and neither XDG_DATA_HOME nor HOME is set; pass --db PATH")?;
        let dir = base.join("ava");
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("create data directory {}", dir.display()))?;
        Ok(dir.join("memories.db"))
    }

    /// Builds the configured embedder; `None` means keyword search only (with the reason).
    /// The choice is the facade's ([`ava_memory::open::choose_embedder`]), so a program on
    /// the library gets the embedder `ava` would.
    pub(crate) async fn embedder(
        &self,
    ) -> anyhow::Result<(Option<Arc<dyn EmbeddingProvider>>, String)> {
        let settings = EmbedderSettings {
            choice: self.embedder,
            model_dir: self.model_dir.clone(),
            embed_model: self.embed_model.clone(),
            ollama_url: Some(self.ollama_url.clone()),
            openai_url: Some(self.openai_url.clone()),
            openai_key: secret_from_env("OPENAI_API_KEY"),
        };
        let chosen = choose_embedder(&settings).await?;
        Ok((chosen.embedder, chosen.note))
    }

    /// Why the local model is not in use, when it is not installed: what is missing where,
    /// and how to fetch it.
    pub(crate) fn local_model_notice(&self) -> anyhow::Result<String> {
        Ok(resolve_model_dir(self.model_dir.as_deref())?.notice())
    }

    /// Opens the store with the configured embedder, creating it if there is none (for
    /// commands that store).
    pub(crate) async fn open(&self) -> anyhow::Result<Opened> {
        self.open_with(true).await
    }

    /// Opens a store that must exist already (for commands that only read or remove): a
    /// mistyped `--db` is an error, not a new, empty store.
    pub(crate) async fn open_existing(&self) -> anyhow::Result<Opened> {
        self.open_with(false).await
    }

    async fn open_with(&self, create: bool) -> anyhow::Result<Opened> {
        let target = self.db_target()?;
        #[cfg(not(feature = "postgres"))]
        if let DbTarget::Postgres(url) = &target {
            return Err(no_postgres_support(url));
        }
        let (embedder, embedder_note) = self.embedder().await?;
        // The facade opens it; the hints are the command line's.
        let opened = open_store(&target, embedder, create).await.map_err(|e| {
            let hint = match &e {
                ava_memory::Error::Sqlite { source, .. } => sqlite_hint(source, self.db.is_none()),
                #[cfg(feature = "postgres")]
                ava_memory::Error::Postgres { source, .. } => postgres_hint(source),
                _ => None,
            };
            let e = anyhow::Error::new(e);
            match hint {
                Some(h) => e.context(crate::shared::Hint(h)),
                None => e,
            }
        })?;
        Ok(Opened {
            store: opened.store,
            sqlite: opened.sqlite,
            #[cfg(feature = "postgres")]
            postgres: opened.postgres,
            embedder_note,
            embedder: opened.embedder,
        })
    }
}

/// What to do about a SQLite store error, when there is something to do from the command
/// line.
fn sqlite_hint(e: &memory_sqlite::SqliteError, default_path: bool) -> Option<String> {
    match e {
        memory_sqlite::SqliteError::SpaceChanged { stored, .. } => Some(format!(
            "open it with the embedder it was made with (--embedder; it holds {stored}), or \
             move it to the new one with `ava reembed` and the new --embedder"
        )),
        memory_sqlite::SqliteError::NoStore { .. } if default_path => Some(
            "nothing has been remembered yet; `ava remember` or `ava chat` creates the store"
                .into(),
        ),
        memory_sqlite::SqliteError::NoStore { .. } => {
            Some("check --db (or AVA_DB); the commands that store create it".into())
        }
        _ => None,
    }
}

/// What to do when this build cannot open a Postgres store.
#[cfg(not(feature = "postgres"))]
fn no_postgres_support(url: &str) -> anyhow::Error {
    anyhow::anyhow!(
        "{} is a Postgres URL, but this build of ava has no Postgres support; rebuild it with \
         `--features postgres` (e.g. `cargo install --path ava-bot --features postgres`)",
        redact_url(url)
    )
}

/// What to do about a Postgres store error, when there is something to do from the command
/// line.
#[cfg(feature = "postgres")]
fn postgres_hint(e: &memory_postgres::PostgresError) -> Option<String> {
    use memory_postgres::PostgresError as E;
    match e {
        E::SpaceChanged { stored, .. } => Some(format!(
            "open it with the embedder it was made with (--embedder; it holds {stored}), or \
             move it to the new one with `ava reembed` and the new --embedder"
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postgres_urls_are_told_from_paths_and_redacted() {
        let settings = |db: &str| Settings {
            db: Some(PathBuf::from(db)),
            embedder: EmbedderChoice::None,
            model_dir: None,
            embed_model: None,
            ollama_url: String::new(),
            openai_url: String::new(),
            allocation: None,
            rerank: RerankArgs::default(),
            web: WebArgs::default(),
        };
        let url = "postgres://ava:s3cret@db.example:5432/mem?schema=bot";
        let t = settings(url).db_target().unwrap();
        assert_eq!(t, DbTarget::Postgres(url.to_owned()));
        let shown = redact_url(url);
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("db.example:5432"), "{shown}");
        assert_eq!(
            settings("memories.db").db_target().unwrap(),
            DbTarget::Sqlite(PathBuf::from("memories.db"))
        );
    }

    #[cfg(not(feature = "postgres"))]
    #[tokio::test]
    async fn postgres_url_without_the_feature_says_how_to_rebuild() {
        let settings = Settings {
            db: Some(PathBuf::from("postgres://ava:s3cret@127.0.0.1:5432/mem")),
            embedder: EmbedderChoice::None,
            model_dir: None,
            embed_model: None,
            ollama_url: String::new(),
            openai_url: String::new(),
            allocation: None,
            rerank: RerankArgs::default(),
            web: WebArgs::default(),
        };
        let err = settings.open().await.err().expect("no postgres support");
        let msg = format!("{err:#}");
        assert!(msg.contains("--features postgres"), "{msg}");
        assert!(!msg.contains("s3cret"), "{msg}");
    }

    #[test]
    fn secrets_from_the_environment_do_not_print() {
        // PATH is set everywhere tests run; no secret, but any value will do.
        let s = secret_from_env("PATH").expect("PATH is set");
        assert_eq!(format!("{s:?}"), "Secret(<redacted>)");
        assert!(secret_from_env("AVA_TEST_VARIABLE_NOBODY_SETS").is_none());
    }
}
