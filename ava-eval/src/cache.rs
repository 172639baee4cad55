//! A vector cache for evaluation runs: the same texts embedded once per model, kept in a
//! file under `target/`, so trying another fusion weight does not re-run the model.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::io::{Read, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use memory_core::{Embedding, EmbeddingProvider, EmbeddingSpace};

/// Wraps an embedder; vectors are looked up by (text) in a per-space cache file first.
#[derive(Debug)]
pub(crate) struct CachedEmbedder {
    inner: Arc<dyn EmbeddingProvider>,
    path: PathBuf,
    map: Mutex<HashMap<u64, Vec<f32>>>,
    /// When set, every text goes to the model (the cache is neither read nor written), so a
    /// timed call pays for its embedding as the product would.
    live: AtomicBool,
    /// Texts sent to the model while live.
    live_texts: AtomicUsize,
    /// When set, the model's window is not declared, so a store embeds each long text as
    /// one vector of its head instead of one per passage (`--set passages=0`).
    whole_texts: AtomicBool,
}

fn key(text: &str) -> u64 {
    // Stable across runs and platforms: FNV-1a over the UTF-8 bytes, plus the length.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    let mut s = std::collections::hash_map::DefaultHasher::new();
    text.len().hash(&mut s);
    h ^ s.finish().rotate_left(17)
}

impl CachedEmbedder {
    /// Loads the cache file for `inner`'s space from `dir` (missing or unreadable: empty).
    pub(crate) fn open(inner: Arc<dyn EmbeddingProvider>, dir: PathBuf) -> Self {
        let space = inner.space();
        let name: String = format!("{}-{}-{}", space.provider, space.model, space.dims)
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let path = dir.join(format!("{name}.vectors"));
        let mut map = HashMap::new();
        if let Ok(mut f) = std::fs::File::open(&path) {
            let mut bytes = Vec::new();
            if f.read_to_end(&mut bytes).is_ok() {
                let rec = 8 + space.dims * 4;
                for chunk in bytes.chunks_exact(rec) {
                    let mut k = [0u8; 8];
                    k.copy_from_slice(&chunk[..8]);
                    let v = chunk[8..]
                        .chunks_exact(4)
                        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                        .collect();
                    map.insert(u64::from_le_bytes(k), v);
                }
            }
        }
        Self {
            inner,
            path,
            map: Mutex::new(map),
            live: AtomicBool::new(false),
            live_texts: AtomicUsize::new(0),
            whole_texts: AtomicBool::new(false),
        }
    }

    /// Sends every text to the model (`true`) or serves cached vectors (`false`, the default).
    /// Declares no window (see `whole_texts`): long texts get one vector of their head.
    pub(crate) fn set_whole_texts(&self, whole: bool) {
        self.whole_texts.store(whole, Ordering::SeqCst);
    }

    pub(crate) fn set_live(&self, live: bool) {
        self.live.store(live, Ordering::SeqCst);
    }

    /// How many texts went to the model while live, so far.
    pub(crate) fn live_texts(&self) -> usize {
        self.live_texts.load(Ordering::SeqCst)
    }

    /// Writes the cache file.
    pub(crate) fn save(&self) -> anyhow::Result<()> {
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        let mut f = std::io::BufWriter::new(std::fs::File::create(&self.path)?);
        for (k, v) in map.iter() {
            f.write_all(&k.to_le_bytes())?;
            for x in v {
                f.write_all(&x.to_le_bytes())?;
            }
        }
        f.flush()?;
        Ok(())
    }
}

#[async_trait]
impl EmbeddingProvider for CachedEmbedder {
    fn space(&self) -> Arc<EmbeddingSpace> {
        self.inner.space()
    }

    fn max_batch(&self) -> usize {
        self.inner.max_batch()
    }

    fn window_bytes(&self) -> Option<usize> {
        if self.whole_texts.load(Ordering::SeqCst) {
            None
        } else {
            self.inner.window_bytes()
        }
    }

    async fn embed_batch(&self, texts: &[&str]) -> memory_core::Result<Vec<Embedding>> {
        if self.live.load(Ordering::SeqCst) {
            self.live_texts.fetch_add(texts.len(), Ordering::SeqCst);
            return memory_core::embed_all(self.inner.as_ref(), texts).await;
        }
        let space = self.space();
        let missing: Vec<&str> = {
            let map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
            texts
                .iter()
                .copied()
                .filter(|t| !map.contains_key(&key(t)))
                .collect()
        };
        if !missing.is_empty() {
            let fresh = memory_core::embed_all(self.inner.as_ref(), &missing).await?;
            let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
            for (t, e) in missing.iter().zip(fresh) {
                map.insert(key(t), e.into_vector());
            }
        }
        let map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        texts
            .iter()
            .map(|t| {
                let v = map.get(&key(t)).cloned().unwrap_or_default();
                Embedding::new(Arc::clone(&space), v)
            })
            .collect()
    }
}
