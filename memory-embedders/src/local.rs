//! `LocalEmbedder`: all-MiniLM-L6-v2 (or another BERT sentence encoder) run offline in pure
//! Rust with candle, from a model directory on disk. Nothing is downloaded at run time.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use tokenizers::{PaddingParams, PaddingStrategy, Tokenizer, TruncationParams};

use crate::bert::{BertConfig, BertModel};
use crate::into_embeddings;
use crate::model_dir::{DEFAULT_MODEL_NAME, ModelDir, resolve_model_dir};
use memory_core::{BoxError, MemoryError, Result};
use memory_core::{Embedding, EmbeddingProvider, EmbeddingSpace, normalize};

/// Settings for [`LocalEmbedder`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocalConfig {
    /// The model directory; `None` resolves it with
    /// [`resolve_model_dir`](crate::resolve_model_dir) (`$AVA_MODEL_DIR`, then the cache dir).
    pub model_dir: Option<PathBuf>,
    /// Model name recorded in the embedding space (`all-MiniLM-L6-v2`).
    pub model: String,
    /// Texts are cut to this many tokens, special tokens included (256, what the model was
    /// trained with; at most the model's 512 positions).
    pub max_tokens: usize,
    /// Most texts run through the model at once.
    pub max_batch: usize,
}

impl LocalConfig {
    /// Checks the settings without loading anything: a model name, a batch size above
    /// zero, and room for at least one token beside the two special ones (the model's own
    /// limit is checked when it is loaded). [`LocalEmbedder::load`] calls it first.
    pub fn validate(&self) -> Result<()> {
        if self.model.trim().is_empty() {
            return Err(MemoryError::invalid("local model", "no model name given"));
        }
        if self.max_batch == 0 {
            return Err(MemoryError::invalid(
                "local max_batch",
                "must be at least 1",
            ));
        }
        if self.max_tokens < 3 {
            return Err(MemoryError::invalid(
                "local max_tokens",
                format!(
                    "{} leaves no room for text beside the two special tokens",
                    self.max_tokens
                ),
            ));
        }
        Ok(())
    }
}

impl Default for LocalConfig {
    fn default() -> Self {
        Self {
            model_dir: None,
            model: DEFAULT_MODEL_NAME.into(),
            max_tokens: 256,
            max_batch: 32,
        }
    }
}

impl LocalConfig {
    /// Default settings for the model in `dir`.
    pub fn in_dir(dir: impl Into<PathBuf>) -> Self {
        Self {
            model_dir: Some(dir.into()),
            ..Self::default()
        }
    }
}

/// Most texts in one forward pass. On a CPU the work is per token, so bigger passes buy
/// little while padding to the longest text costs a lot: sorting a batch by length and
/// running groups of 8 was about twice as fast as one pass of 32 on the 2-core bench machine.
const GROUP: usize = 8;

/// The loaded network and tokenizer, shared with blocking worker threads.
struct Model {
    bert: BertModel,
    tokenizer: Tokenizer,
    device: Device,
}

/// Sentence embeddings computed on this machine's CPU: BERT, mean pooling over the real
/// (unpadded) tokens, L2-normalised, so cosine similarity is a dot product.
///
/// The directory must hold `config.json`, `tokenizer.json` and `model.safetensors`; `cargo
/// xtask fetch-model` puts all-MiniLM-L6-v2 (384 dimensions) there. A batch is sorted by
/// length and run in groups of up to 8, each padded to its longest text (whatever fixed
/// padding the shipped tokenizer asks for); texts are cut to [`LocalConfig::max_tokens`].
/// Output order is input order. Inference runs on tokio's blocking threads, each matrix
/// multiply on `RAYON_NUM_THREADS` threads: call [`settle_thread_count`](crate::settle_thread_count)
/// first in `main`, or candle works the count out again at every multiply.
#[derive(Clone)]
pub struct LocalEmbedder {
    model: Arc<Model>,
    space: Arc<EmbeddingSpace>,
    dir: ModelDir,
    max_batch: usize,
    max_tokens: usize,
}

impl fmt::Debug for LocalEmbedder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalEmbedder")
            .field("space", &self.space)
            .field("dir", &self.dir.path)
            .field("max_batch", &self.max_batch)
            .finish_non_exhaustive()
    }
}

fn failed(message: impl Into<String>, source: impl Into<BoxError>) -> MemoryError {
    MemoryError::Embedding {
        provider: LocalEmbedder::PROVIDER.into(),
        message: message.into(),
        source: Some(source.into()),
    }
}

impl LocalEmbedder {
    /// Provider name recorded in the embedding space.
    pub const PROVIDER: &'static str = "local";

    /// Loads the model (about 90 MB for all-MiniLM-L6-v2; blocking file I/O, well under a
    /// second). An absent or incomplete directory is a [`MemoryError::Embedding`] whose
    /// message is [`ModelDir::notice`], naming `cargo xtask fetch-model`.
    pub fn load(config: &LocalConfig) -> Result<Self> {
        config.validate()?;
        let dir = resolve_model_dir(config.model_dir.as_deref())?;
        dir.require_complete()?;
        let path = |file: &str| dir.path.join(file);

        let bert_config: BertConfig = {
            let p = path("config.json");
            let text = std::fs::read_to_string(&p)
                .map_err(|e| failed(format!("cannot read {}", p.display()), e))?;
            BertConfig::from_json(&text).map_err(|e| {
                failed(
                    format!(
                        "{} is not a BERT config.json this encoder runs",
                        p.display()
                    ),
                    e,
                )
            })?
        };
        let max_positions = bert_config.max_position_embeddings;
        if config.max_tokens > max_positions {
            return Err(MemoryError::invalid(
                "local max_tokens",
                format!(
                    "{} is out of range; expected 3..={max_positions} (the model's positions)",
                    config.max_tokens
                ),
            ));
        }
        let tokenizer = load_tokenizer(&path("tokenizer.json"), config.max_tokens)?;

        let device = Device::Cpu;
        let weights = path("model.safetensors");
        let bytes = std::fs::read(&weights)
            .map_err(|e| failed(format!("cannot read {}", weights.display()), e))?;
        let vb =
            VarBuilder::from_buffered_safetensors(bytes, DType::F32, &device).map_err(|e| {
                failed(
                    format!("{} is not a safetensors file", weights.display()),
                    e,
                )
            })?;
        let bert = BertModel::load(vb, &bert_config).map_err(|e| {
            failed(
                format!(
                    "{} does not hold the BERT weights config.json describes",
                    weights.display()
                ),
                e,
            )
        })?;

        let space = Arc::new(EmbeddingSpace::new(
            Self::PROVIDER,
            config.model.clone(),
            bert_config.hidden_size,
        )?);
        Ok(Self {
            model: Arc::new(Model {
                bert,
                tokenizer,
                device,
            }),
            space,
            dir,
            max_batch: config.max_batch,
            max_tokens: config.max_tokens,
        })
    }

    /// The directory the model was loaded from.
    pub fn model_dir(&self) -> &Path {
        &self.dir.path
    }

    /// Embeds texts on the calling thread (CPU-bound: from async code use
    /// [`EmbeddingProvider::embed_batch`], which moves the work to a blocking thread).
    pub fn embed_blocking(&self, texts: &[&str]) -> Result<Vec<Embedding>> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let vectors = self.model.embed(texts).map_err(|e| {
            failed(
                format!("running the model from {} failed", self.dir.path.display()),
                e,
            )
        })?;
        let origin = self.dir.path.display().to_string();
        into_embeddings(&self.space, &origin, texts.len(), vectors)
    }
}

/// Loads `tokenizer.json`, replacing its padding with "pad to the longest in the batch"
/// (the shipped file pads every text to 128 tokens) and its truncation with `max_tokens`.
fn load_tokenizer(path: &Path, max_tokens: usize) -> Result<Tokenizer> {
    let mut tokenizer = Tokenizer::from_file(path)
        .map_err(|e| failed(format!("{} is not a tokenizer.json", path.display()), e))?;
    let padding = match tokenizer.get_padding() {
        Some(p) => PaddingParams {
            strategy: PaddingStrategy::BatchLongest,
            ..p.clone()
        },
        None => {
            let pad_id = tokenizer.token_to_id("[PAD]").unwrap_or(0);
            PaddingParams {
                pad_id,
                pad_token: "[PAD]".into(),
                ..PaddingParams::default()
            }
        }
    };
    tokenizer.with_padding(Some(padding));
    tokenizer
        .with_truncation(Some(TruncationParams {
            max_length: max_tokens,
            ..Default::default()
        }))
        .map_err(|e| failed(format!("cannot set truncation on {}", path.display()), e))?;
    Ok(tokenizer)
}

impl Model {
    /// Embeds texts in groups of similar length, so that little work goes into padding.
    fn embed(&self, texts: &[&str]) -> std::result::Result<Vec<Vec<f32>>, BoxError> {
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|&i| texts[i].len());
        let mut out = vec![Vec::new(); texts.len()];
        for group in order.chunks(GROUP) {
            let batch: Vec<&str> = group.iter().map(|&i| texts[i]).collect();
            for (&i, v) in group.iter().zip(self.forward(&batch)?) {
                out[i] = v;
            }
        }
        Ok(out)
    }

    /// Tokenizes, runs BERT, mean-pools over the attention mask, L2-normalises.
    fn forward(&self, texts: &[&str]) -> std::result::Result<Vec<Vec<f32>>, BoxError> {
        let encodings = self.tokenizer.encode_batch(texts.to_vec(), true)?;
        let rows = encodings.len();
        let cols = encodings.first().map(|e| e.get_ids().len()).unwrap_or(0);
        let mut ids = Vec::with_capacity(rows * cols);
        let mut mask = Vec::with_capacity(rows * cols);
        for e in &encodings {
            if e.get_ids().len() != cols {
                return Err(
                    "tokenizer returned a ragged batch despite batch-longest padding".into(),
                );
            }
            ids.extend_from_slice(e.get_ids());
            mask.extend_from_slice(e.get_attention_mask());
        }
        let ids = Tensor::from_vec(ids, (rows, cols), &self.device)?;
        let mask = Tensor::from_vec(mask, (rows, cols), &self.device)?;
        let type_ids = ids.zeros_like()?;
        // [rows, cols, hidden]
        let hidden = self.bert.forward(&ids, &type_ids, &mask)?;
        // Mean over real tokens only: padded positions get weight 0.
        let weights = mask.to_dtype(DType::F32)?.unsqueeze(2)?;
        let summed = hidden.broadcast_mul(&weights)?.sum(1)?;
        let counts = weights.sum(1)?.clamp(1e-9f32, f32::MAX)?;
        let mut pooled = summed.broadcast_div(&counts)?.to_vec2::<f32>()?;
        pooled.iter_mut().for_each(|v| normalize(v));
        Ok(pooled)
    }
}

#[async_trait]
impl EmbeddingProvider for LocalEmbedder {
    fn space(&self) -> Arc<EmbeddingSpace> {
        Arc::clone(&self.space)
    }

    async fn embed_batch(&self, texts: &[&str]) -> Result<Vec<Embedding>> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let this = self.clone();
        let owned: Vec<String> = texts.iter().map(|t| (*t).to_owned()).collect();
        tokio::task::spawn_blocking(move || {
            let refs: Vec<&str> = owned.iter().map(String::as_str).collect();
            this.embed_blocking(&refs)
        })
        .await
        .map_err(|e| failed("the embedding worker thread died", e))?
    }

    fn max_batch(&self) -> usize {
        self.max_batch
    }

    /// Three bytes per word piece of the window (two pieces go to the special tokens):
    /// English runs at about four bytes a piece, code and numbers nearer three, so a
    /// passage this long is read whole (762 bytes at the default 256 tokens).
    fn window_bytes(&self) -> Option<usize> {
        Some(self.max_tokens.saturating_sub(2).max(1) * crate::BYTES_PER_TOKEN)
    }
}
