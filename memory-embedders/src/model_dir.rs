//! Where the local embedding model lives on disk, and what to tell people when it is absent.
//!
//! Shared by the `local` embedder and `cargo xtask fetch-model`, so both agree on the path.
//! Needs no cargo feature and does no network I/O.

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};

use memory_core::{MemoryError, Result};

/// Environment variable naming the model directory (used when no explicit path is given).
pub const MODEL_DIR_ENV: &str = "AVA_MODEL_DIR";

/// The command that fetches the model into the default directory.
pub const FETCH_MODEL_COMMAND: &str = "cargo xtask fetch-model";

/// Name of the default local model, also its directory name under the cache dir.
pub const DEFAULT_MODEL_NAME: &str = "all-MiniLM-L6-v2";

/// Files a model directory must hold for the local embedder to load it.
pub const MODEL_FILES: [&str; 3] = ["config.json", "tokenizer.json", "model.safetensors"];

/// Where a [`ModelDir`]'s path came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ModelDirSource {
    /// Given by the caller (a flag or a config field).
    Explicit,
    /// Read from [`MODEL_DIR_ENV`].
    Env,
    /// The default cache directory (`$XDG_CACHE_HOME/ava/models/…` or `$HOME/.cache/ava/models/…`).
    Cache,
}

impl fmt::Display for ModelDirSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Explicit => "given explicitly",
            Self::Env => "from $AVA_MODEL_DIR",
            Self::Cache => "default cache dir",
        })
    }
}

/// A model directory: its path and where the path came from. It may not exist yet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelDir {
    /// The directory.
    pub path: PathBuf,
    /// How it was chosen.
    pub source: ModelDirSource,
}

impl ModelDir {
    /// The files of [`MODEL_FILES`] that are not in the directory (all of them when it does
    /// not exist).
    pub fn missing_files(&self) -> Vec<&'static str> {
        MODEL_FILES
            .iter()
            .copied()
            .filter(|f| !self.path.join(f).is_file())
            .collect()
    }

    /// Whether every file of [`MODEL_FILES`] is present.
    pub fn is_complete(&self) -> bool {
        self.missing_files().is_empty()
    }

    /// One line for people when the model is absent: what is missing and the command that
    /// fixes it (what still works depends on the caller, which says so).
    pub fn notice(&self) -> String {
        format!(
            "local embedding model not found in {} ({}; missing {}); run \
             `{FETCH_MODEL_COMMAND}` to fetch it (or set {MODEL_DIR_ENV} to a directory \
             holding {})",
            self.path.display(),
            self.source,
            self.missing_files().join(", "),
            MODEL_FILES.join(", "),
        )
    }

    /// `Ok` when the model is complete, else an [`MemoryError::Embedding`] carrying
    /// [`ModelDir::notice`].
    pub fn require_complete(&self) -> Result<()> {
        if self.is_complete() {
            Ok(())
        } else {
            Err(MemoryError::embedding("local", self.notice()))
        }
    }
}

/// Resolves the local model directory: `explicit` if given, else `$AVA_MODEL_DIR`, else
/// `$XDG_CACHE_HOME/ava/models/all-MiniLM-L6-v2`, else
/// `$HOME/.cache/ava/models/all-MiniLM-L6-v2`.
///
/// Only fails when none of these is available (no explicit path and neither variable set).
/// The directory itself is not checked; see [`ModelDir::is_complete`].
pub fn resolve_model_dir(explicit: Option<&Path>) -> Result<ModelDir> {
    resolve_from(
        explicit,
        std::env::var_os(MODEL_DIR_ENV),
        std::env::var_os("XDG_CACHE_HOME"),
        std::env::var_os("HOME"),
    )
}

/// [`resolve_model_dir`] with the environment passed in, so it can be tested.
fn resolve_from(
    explicit: Option<&Path>,
    env_dir: Option<OsString>,
    xdg_cache: Option<OsString>,
    home: Option<OsString>,
) -> Result<ModelDir> {
    let non_empty = |v: Option<OsString>| v.filter(|s| !s.is_empty()).map(PathBuf::from);
    if let Some(path) = explicit {
        return Ok(ModelDir {
            path: path.to_path_buf(),
            source: ModelDirSource::Explicit,
        });
    }
    if let Some(path) = non_empty(env_dir) {
        return Ok(ModelDir {
            path,
            source: ModelDirSource::Env,
        });
    }
    // XDG says relative cache paths are invalid and must be ignored.
    let cache = non_empty(xdg_cache)
        .filter(|p| p.is_absolute())
        .or_else(|| non_empty(home).map(|h| h.join(".cache")))
        .ok_or_else(|| {
            MemoryError::invalid(
                "model directory",
                format!(
                    "no directory given, and none of {MODEL_DIR_ENV}, XDG_CACHE_HOME or HOME is \
                     set; pass a directory or set {MODEL_DIR_ENV}"
                ),
            )
        })?;
    Ok(ModelDir {
        path: cache.join("ava").join("models").join(DEFAULT_MODEL_NAME),
        source: ModelDirSource::Cache,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(s: &str) -> Option<OsString> {
        Some(OsString::from(s))
    }

    #[test]
    fn explicit_beats_env_beats_xdg_beats_home() {
        let d = resolve_from(Some(Path::new("/m")), os("/e"), os("/x"), os("/h")).unwrap();
        assert_eq!(
            (d.path, d.source),
            (PathBuf::from("/m"), ModelDirSource::Explicit)
        );
        let d = resolve_from(None, os("/e"), os("/x"), os("/h")).unwrap();
        assert_eq!(
            (d.path, d.source),
            (PathBuf::from("/e"), ModelDirSource::Env)
        );
        let d = resolve_from(None, os(""), os("/x"), os("/h")).unwrap();
        assert_eq!(d.path, PathBuf::from("/x/ava/models/all-MiniLM-L6-v2"));
        assert_eq!(d.source, ModelDirSource::Cache);
        let d = resolve_from(None, None, os("relative"), os("/h")).unwrap();
        assert_eq!(
            d.path,
            PathBuf::from("/h/.cache/ava/models/all-MiniLM-L6-v2")
        );
    }

    #[test]
    fn nothing_to_go_on_is_an_error_naming_the_variable() {
        let err = resolve_from(None, None, None, None)
            .unwrap_err()
            .to_string();
        assert!(err.contains(MODEL_DIR_ENV), "{err}");
    }

    #[test]
    fn absent_dir_notice_names_the_fix_and_the_missing_files() {
        let dir = ModelDir {
            path: PathBuf::from("/nonexistent/ava-model"),
            source: ModelDirSource::Explicit,
        };
        assert!(!dir.is_complete());
        assert_eq!(dir.missing_files(), MODEL_FILES.to_vec());
        let notice = dir.notice();
        assert!(
            notice.contains(FETCH_MODEL_COMMAND) && notice.contains("/nonexistent/ava-model"),
            "{notice}"
        );
        let err = dir.require_complete().unwrap_err();
        assert!(matches!(err, MemoryError::Embedding { .. }), "{err}");
    }
}
