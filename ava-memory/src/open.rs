//! Opening a store as `ava` opens it: where it is (a SQLite file or a `postgres://` URL),
//! the embedder chosen as `ava` chooses it ([`EmbedderSettings`], [`choose_embedder`]), and
//! the store opened with it ([`open_store`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use memory_core::{EmbeddingProvider, HashingEmbedder, MemoryBackend, Secret};
use memory_embedders::{
    ApiKey, OllamaConfig, OllamaEmbedder, OpenAiConfig, OpenAiEmbedder, resolve_model_dir,
};
use memory_sqlite::{SqliteBackend, SqliteConfig};

use crate::error::{Error, Result};

/// Where a store is: a SQLite file, or a Postgres server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// A SQLite store file.
    Sqlite(PathBuf),
    /// A Postgres server (`postgres://` or `postgresql://` URL, maybe with `?schema=`).
    Postgres(String),
}

impl Location {
    /// A `postgres://` or `postgresql://` URL is a Postgres store; anything else is a
    /// SQLite file's path.
    pub fn parse(path_or_url: impl AsRef<Path>) -> Self {
        let given = path_or_url.as_ref();
        match given.to_str() {
            Some(s) if s.starts_with("postgres://") || s.starts_with("postgresql://") => {
                Self::Postgres(s.to_owned())
            }
            _ => Self::Sqlite(given.to_owned()),
        }
    }

    /// The store `ava` uses when none is named: `$XDG_DATA_HOME/ava/memories.db`, else
    /// `~/.local/share/ava/memories.db` (its directory created).
    pub fn default_store() -> Result<Self> {
        let base = std::env::var_os("XDG_DATA_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))
            .ok_or(Error::NoDefaultStore)?;
        let dir = base.join("ava");
        std::fs::create_dir_all(&dir).map_err(|source| Error::DataDir {
            dir: dir.clone(),
            source,
        })?;
        Ok(Self::Sqlite(dir.join("memories.db")))
    }
}

/// `url` with any password replaced by `***`.
pub fn redact_url(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) if u.password().is_some() => {
            let _ = u.set_password(Some("***"));
            u.to_string()
        }
        Ok(u) => u.to_string(),
        Err(_) => "<unparsable Postgres URL>".to_owned(),
    }
}

/// Which embedder computes vectors (`ava --embedder`, `AVA_EMBEDDER`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[non_exhaustive]
pub enum EmbedderChoice {
    /// The local model if it is installed, else keyword search only.
    #[default]
    Auto,
    /// all-MiniLM-L6-v2 from the local model directory (`cargo xtask fetch-model`).
    Local,
    /// An Ollama server's embedding model.
    Ollama,
    /// An OpenAI-compatible server's embedding model.
    Openai,
    /// The deterministic word-hashing embedder (matches shared words; not a language model).
    Hash,
    /// No vectors: keyword search only.
    None,
}

impl EmbedderChoice {
    /// The choice a name gives (`auto`, `local`, `ollama`, `openai`, `hash`, `none`; case
    /// ignored), as `AVA_EMBEDDER` names it.
    pub fn parse(name: &str) -> Result<Self> {
        Ok(match name.trim().to_ascii_lowercase().as_str() {
            "auto" => Self::Auto,
            "local" => Self::Local,
            "ollama" => Self::Ollama,
            "openai" => Self::Openai,
            "hash" => Self::Hash,
            "none" => Self::None,
            other => {
                return Err(Error::invalid(
                    "embedder",
                    format!("`{other}` is none of auto, local, ollama, openai, hash, none"),
                ));
            }
        })
    }
}

/// The default Ollama address.
pub const DEFAULT_OLLAMA_URL: &str = "http://localhost:11434";

/// The default OpenAI-compatible API root.
pub const DEFAULT_OPENAI_URL: &str = "https://api.openai.com/v1";

/// What chooses the embedder: `ava`'s `--embedder`, `--model-dir`, `--embed-model`,
/// `--ollama-url` and `--openai-url`, with the environment variables `ava` reads for them.
#[derive(Clone, Debug, Default)]
pub struct EmbedderSettings {
    /// Which embedder.
    pub choice: EmbedderChoice,
    /// Directory of the local model (default: `$AVA_MODEL_DIR`, else the cache dir).
    pub model_dir: Option<PathBuf>,
    /// Embedding model for the ollama and openai embedders (their defaults:
    /// `nomic-embed-text`, `text-embedding-3-small`).
    pub embed_model: Option<String>,
    /// Ollama's address (default [`DEFAULT_OLLAMA_URL`]).
    pub ollama_url: Option<String>,
    /// Root of an OpenAI-compatible API, up to the version (default
    /// [`DEFAULT_OPENAI_URL`]).
    pub openai_url: Option<String>,
    /// The OpenAI-compatible API's key (`OPENAI_API_KEY`).
    pub openai_key: Option<Secret>,
}

/// A variable of the environment, unset or blank being none.
fn env_var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

impl EmbedderSettings {
    /// The settings `ava` reads from the environment when no flag is given: `AVA_EMBEDDER`
    /// (default `auto`), `AVA_EMBED_MODEL`, `OLLAMA_URL`, `OPENAI_BASE_URL`,
    /// `OPENAI_API_KEY`; the model directory from `AVA_MODEL_DIR` (read where the model is
    /// looked for). Fails only on an `AVA_EMBEDDER` that names no embedder.
    pub fn from_env() -> Result<Self> {
        let choice = match env_var("AVA_EMBEDDER") {
            Some(name) => EmbedderChoice::parse(&name)?,
            None => EmbedderChoice::Auto,
        };
        Ok(Self {
            choice,
            model_dir: None,
            embed_model: env_var("AVA_EMBED_MODEL"),
            ollama_url: env_var("OLLAMA_URL"),
            openai_url: env_var("OPENAI_BASE_URL"),
            openai_key: env_var("OPENAI_API_KEY").map(Secret::new),
        })
    }

    /// These settings with `choice`.
    pub fn with_choice(mut self, choice: EmbedderChoice) -> Self {
        self.choice = choice;
        self
    }
}

/// The embedder chosen, and one line on it (or on why there is none) for people.
#[derive(Clone)]
pub struct ChosenEmbedder {
    /// The embedder; `None` means keyword search only.
    pub embedder: Option<Arc<dyn EmbeddingProvider>>,
    /// One line on the embedder in use, or why there is none.
    pub note: String,
}

impl ChosenEmbedder {
    /// `embedder`, noted by its embedding space.
    fn of(embedder: Arc<dyn EmbeddingProvider>) -> Self {
        Self {
            note: format!("embedder {}", embedder.space()),
            embedder: Some(embedder),
        }
    }
}

impl std::fmt::Debug for ChosenEmbedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChosenEmbedder")
            .field(
                "space",
                &self.embedder.as_ref().map(|e| e.space().to_string()),
            )
            .field("note", &self.note)
            .finish()
    }
}

/// Builds the embedder `settings` choose, as `ava` does: `auto` is the local model when it
/// is installed and keyword search only (no embedder) when not; `local` without the model
/// is an error naming what is missing and how to fetch it.
pub async fn choose_embedder(settings: &EmbedderSettings) -> Result<ChosenEmbedder> {
    let model = |default: &str| {
        settings
            .embed_model
            .clone()
            .unwrap_or_else(|| default.to_owned())
    };
    match settings.choice {
        EmbedderChoice::None => Ok(ChosenEmbedder {
            embedder: None,
            note: "no embedder: keyword search only (--embedder none)".into(),
        }),
        EmbedderChoice::Hash => {
            let e =
                HashingEmbedder::new(384).map_err(Error::embedder("make the hashing embedder"))?;
            Ok(ChosenEmbedder {
                embedder: Some(Arc::new(e)),
                note: "embedder hash/fnv1a-words-v1: matches shared words, not meanings".into(),
            })
        }
        EmbedderChoice::Ollama => {
            let config = OllamaConfig {
                base_url: settings
                    .ollama_url
                    .clone()
                    .unwrap_or_else(|| DEFAULT_OLLAMA_URL.to_owned()),
                ..OllamaConfig::new(model("nomic-embed-text"))
            };
            let e = OllamaEmbedder::connect(config)
                .await
                .map_err(Error::embedder("connect to the Ollama embedder"))?;
            Ok(ChosenEmbedder::of(Arc::new(e)))
        }
        EmbedderChoice::Openai => {
            let api_key = settings
                .openai_key
                .as_ref()
                .map(|key| ApiKey::new(key.expose()))
                .transpose()
                .map_err(Error::embedder("read the OpenAI-compatible embedder's key"))?;
            let config = OpenAiConfig {
                base_url: settings
                    .openai_url
                    .clone()
                    .unwrap_or_else(|| DEFAULT_OPENAI_URL.to_owned()),
                api_key,
                ..OpenAiConfig::new(model("text-embedding-3-small"))
            };
            let e = OpenAiEmbedder::connect(config)
                .await
                .map_err(Error::embedder("connect to the OpenAI-compatible embedder"))?;
            Ok(ChosenEmbedder::of(Arc::new(e)))
        }
        EmbedderChoice::Local | EmbedderChoice::Auto => local_embedder(settings),
    }
}

#[cfg(feature = "local")]
fn local_embedder(settings: &EmbedderSettings) -> Result<ChosenEmbedder> {
    use memory_embedders::{LocalConfig, LocalEmbedder};
    let dir = model_dir(settings)?;
    if !dir.is_complete() {
        if settings.choice == EmbedderChoice::Local {
            return Err(Error::ModelMissing {
                notice: dir.notice(),
            });
        }
        return Ok(ChosenEmbedder {
            embedder: None,
            note: format!(
                "semantic search is off and memory search uses keywords only: {}",
                dir.notice()
            ),
        });
    }
    let e = LocalEmbedder::load(&LocalConfig::in_dir(&dir.path))
        .map_err(Error::embedder("load the local embedding model"))?;
    Ok(ChosenEmbedder::of(Arc::new(e)))
}

#[cfg(not(feature = "local"))]
fn local_embedder(settings: &EmbedderSettings) -> Result<ChosenEmbedder> {
    let dir = model_dir(settings)?;
    let note = format!(
        "this build of ava has no local embedder (feature `local`); keyword search only. Model dir: {}",
        dir.path.display()
    );
    if settings.choice == EmbedderChoice::Local {
        return Err(Error::ModelMissing { notice: note });
    }
    Ok(ChosenEmbedder {
        embedder: None,
        note,
    })
}

/// Where the local model is looked for.
fn model_dir(settings: &EmbedderSettings) -> Result<memory_embedders::ModelDir> {
    resolve_model_dir(settings.model_dir.as_deref())
        .map_err(Error::embedder("find the local model's directory"))
}

/// Why the local model is not in use when it is not installed: what is missing where, and
/// how to fetch it.
pub fn local_model_notice(model_dir: Option<&Path>) -> Result<String> {
    Ok(resolve_model_dir(model_dir)
        .map_err(Error::embedder("find the local model's directory"))?
        .notice())
}

/// An open store, and the embedder it searches with.
#[derive(Clone)]
pub struct OpenedStore {
    /// The store.
    pub store: Arc<dyn MemoryBackend>,
    /// The same store when it is a SQLite file (for its totals, `embed_missing`, ...).
    pub sqlite: Option<Arc<SqliteBackend>>,
    /// The same store when it is a Postgres schema.
    #[cfg(feature = "postgres")]
    pub postgres: Option<Arc<memory_postgres::PostgresBackend>>,
    /// The embedder the store was opened with, if the store searches with it (of its
    /// space): for embedding a prompt's observation once for all its searches.
    pub embedder: Option<Arc<dyn EmbeddingProvider>>,
}

impl std::fmt::Debug for OpenedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenedStore")
            .field("store", &self.store.info().name)
            .field(
                "space",
                &self.embedder.as_ref().map(|e| e.space().to_string()),
            )
            .finish()
    }
}

/// Opens the store at `location` with `embedder` (see [`choose_embedder`]). With `create`,
/// a SQLite file that does not exist is made (for callers that store); without, a missing
/// one is an error ([`memory_sqlite::SqliteError::NoStore`]), not a new, empty store.
pub async fn open_store(
    location: &Location,
    embedder: Option<Arc<dyn EmbeddingProvider>>,
    create: bool,
) -> Result<OpenedStore> {
    match location {
        Location::Sqlite(path) => {
            let config = SqliteConfig {
                create_if_missing: create,
                ..SqliteConfig::default()
            };
            let store = SqliteBackend::open(path, embedder.clone(), config)
                .await
                .map_err(|source| Error::Sqlite {
                    path: path.clone(),
                    source,
                })?;
            let store = Arc::new(store);
            Ok(OpenedStore {
                embedder: store_embedder(&*store, embedder),
                store: Arc::clone(&store) as Arc<dyn MemoryBackend>,
                sqlite: Some(store),
                #[cfg(feature = "postgres")]
                postgres: None,
            })
        }
        #[cfg(feature = "postgres")]
        Location::Postgres(url) => {
            let store = memory_postgres::PostgresBackend::connect(
                url,
                embedder.clone(),
                memory_postgres::PostgresConfig::default(),
            )
            .await
            .map_err(|source| Error::Postgres {
                url: redact_url(url),
                source: Box::new(source),
            })?;
            let store = Arc::new(store);
            Ok(OpenedStore {
                embedder: store_embedder(&*store, embedder),
                postgres: Some(Arc::clone(&store)),
                store: store as Arc<dyn MemoryBackend>,
                sqlite: None,
            })
        }
        #[cfg(not(feature = "postgres"))]
        Location::Postgres(url) => Err(Error::NoPostgres {
            url: redact_url(url),
        }),
    }
}

/// The embedder, if the store searches with it (a read-only store without a space, say,
/// does not): vectors handed to the store must be of its space.
fn store_embedder(
    store: &dyn MemoryBackend,
    embedder: Option<Arc<dyn EmbeddingProvider>>,
) -> Option<Arc<dyn EmbeddingProvider>> {
    let space = store.info().embedding_space?;
    embedder.filter(|e| *e.space() == *space)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postgres_urls_are_told_from_paths_and_redacted() {
        let url = "postgres://ava:s3cret@db.example:5432/mem?schema=bot";
        assert_eq!(Location::parse(url), Location::Postgres(url.to_owned()));
        let shown = redact_url(url);
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("db.example:5432"), "{shown}");
        assert_eq!(
            Location::parse("memories.db"),
            Location::Sqlite(PathBuf::from("memories.db"))
        );
    }

    #[cfg(not(feature = "postgres"))]
    #[tokio::test]
    async fn a_postgres_url_without_the_feature_says_how_to_rebuild() {
        let at = Location::parse("postgres://ava:s3cret@127.0.0.1:5432/mem");
        let err = open_store(&at, None, true).await.err().unwrap();
        let msg = err.to_string();
        assert!(msg.contains("`postgres` feature"), "{msg}");
        assert!(!msg.contains("s3cret"), "{msg}");
    }

    #[test]
    fn embedder_names_are_read_as_ava_reads_them() {
        assert_eq!(EmbedderChoice::parse("Hash").unwrap(), EmbedderChoice::Hash);
        assert_eq!(
            EmbedderChoice::parse(" none ").unwrap(),
            EmbedderChoice::None
        );
        let err = EmbedderChoice::parse("bert").unwrap_err().to_string();
        assert!(err.contains("`bert`") && err.contains("ollama"), "{err}");
    }

    #[tokio::test]
    async fn hash_and_none_need_no_model() {
        let hash = choose_embedder(&EmbedderSettings::default().with_choice(EmbedderChoice::Hash))
            .await
            .unwrap();
        assert_eq!(hash.embedder.unwrap().space().dims, 384);
        let none = choose_embedder(&EmbedderSettings::default().with_choice(EmbedderChoice::None))
            .await
            .unwrap();
        assert!(none.embedder.is_none() && none.note.contains("keyword"));
    }
}
