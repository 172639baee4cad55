//! A small BERT encoder on candle-core and candle-nn, just what all-MiniLM-L6-v2 needs, so
//! the `local` feature does not build candle-transformers.
//!
//! Inference only (no dropout, no pooler): token, position and segment embeddings, then
//! post-LayerNorm encoder layers of multi-head self-attention and a GELU feed-forward block.
//! Weight names follow the Hugging Face `BertModel` checkpoints (`embeddings.*`,
//! `encoder.layer.N.*`), with or without a `bert.` prefix.

use candle_core::{DType, Module, Tensor, bail};
use candle_nn::{Embedding, LayerNorm, Linear, VarBuilder, embedding, layer_norm, linear};
use serde::Deserialize;

/// Added to the attention scores of padded keys, so softmax gives them (numerically) zero
/// weight. Finite, so that adding it never makes an infinity or a NaN.
const MASKED_SCORE: f64 = -1.0e9;

/// The fields of a Hugging Face BERT `config.json` the encoder uses; others are ignored.
#[derive(Clone, Debug, Deserialize)]
pub(super) struct BertConfig {
    vocab_size: usize,
    pub(super) hidden_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    intermediate_size: usize,
    hidden_act: String,
    pub(super) max_position_embeddings: usize,
    type_vocab_size: usize,
    layer_norm_eps: f64,
    /// Absent in old configs, which all meant `absolute`.
    #[serde(default)]
    position_embedding_type: Option<String>,
    /// `bert` in checkpoints whose tensor names carry a `bert.` prefix.
    #[serde(default)]
    model_type: Option<String>,
}

impl BertConfig {
    /// Parses `config.json` and checks that this encoder can run what it describes: a
    /// missing field, an activation other than exact GELU, or relative position embeddings
    /// are errors that name the field.
    pub(super) fn from_json(text: &str) -> candle_core::Result<Self> {
        let config: Self = serde_json::from_str(text).map_err(candle_core::Error::wrap)?;
        if config.hidden_act != "gelu" {
            bail!(
                "hidden_act `{}` is not supported; expected `gelu` (exact, erf-based GELU)",
                config.hidden_act
            );
        }
        if let Some(kind) = config
            .position_embedding_type
            .as_deref()
            .filter(|&k| k != "absolute")
        {
            bail!("position_embedding_type `{kind}` is not supported; expected `absolute`");
        }
        let heads = config.num_attention_heads;
        if heads == 0 || !config.hidden_size.is_multiple_of(heads) {
            bail!(
                "hidden_size {} is not a multiple of num_attention_heads {heads}",
                config.hidden_size
            );
        }
        Ok(config)
    }
}

/// A BERT encoder with loaded weights.
#[derive(Debug)]
pub(super) struct BertModel {
    embeddings: Embeddings,
    layers: Vec<EncoderLayer>,
}

impl BertModel {
    /// Loads the weights `config` describes from `vb`, whether the checkpoint names them
    /// `embeddings.*` or `<model_type>.embeddings.*` (`bert.embeddings.*`).
    pub(super) fn load(vb: VarBuilder<'_>, config: &BertConfig) -> candle_core::Result<Self> {
        const PROBE: &str = "embeddings.word_embeddings.weight";
        let prefixed = config.model_type.as_deref().unwrap_or("bert");
        let vb = if vb.contains_tensor(PROBE) {
            vb
        } else if vb.pp(prefixed).contains_tensor(PROBE) {
            vb.pp(prefixed)
        } else {
            bail!("no tensor `{PROBE}` or `{prefixed}.{PROBE}`: not BERT weights");
        };
        let embeddings = Embeddings::load(vb.pp("embeddings"), config)?;
        let layers = (0..config.num_hidden_layers)
            .map(|i| EncoderLayer::load(vb.pp(format!("encoder.layer.{i}")), config))
            .collect::<candle_core::Result<_>>()?;
        Ok(Self { embeddings, layers })
    }

    /// The last hidden state, `[batch, seq, hidden]`, for `input_ids` and `token_type_ids`
    /// (`[batch, seq]`, u32) and `attention_mask` (`[batch, seq]`, 1 for real tokens and 0
    /// for padding; padded positions are never attended to).
    pub(super) fn forward(
        &self,
        input_ids: &Tensor,
        token_type_ids: &Tensor,
        attention_mask: &Tensor,
    ) -> candle_core::Result<Tensor> {
        let (batch, seq) = input_ids.dims2()?;
        // [batch, 1, 1, seq], broadcast over heads and queries: MASKED_SCORE * (1 - mask),
        // so 0 for real keys and MASKED_SCORE for padding.
        let bias = attention_mask
            .to_dtype(DType::F32)?
            .affine(-MASKED_SCORE, MASKED_SCORE)?
            .reshape((batch, 1, 1, seq))?;
        let mut hidden = self.embeddings.forward(input_ids, token_type_ids)?;
        for layer in &self.layers {
            hidden = layer.forward(&hidden, &bias)?;
        }
        Ok(hidden)
    }
}

/// Sum of token, position and segment embeddings, layer-normalised.
#[derive(Debug)]
struct Embeddings {
    words: Embedding,
    positions: Embedding,
    segments: Embedding,
    norm: LayerNorm,
    max_positions: usize,
}

impl Embeddings {
    fn load(vb: VarBuilder<'_>, c: &BertConfig) -> candle_core::Result<Self> {
        Ok(Self {
            words: embedding(c.vocab_size, c.hidden_size, vb.pp("word_embeddings"))?,
            positions: embedding(
                c.max_position_embeddings,
                c.hidden_size,
                vb.pp("position_embeddings"),
            )?,
            segments: embedding(
                c.type_vocab_size,
                c.hidden_size,
                vb.pp("token_type_embeddings"),
            )?,
            norm: layer_norm(c.hidden_size, c.layer_norm_eps, vb.pp("LayerNorm"))?,
            max_positions: c.max_position_embeddings,
        })
    }

    fn forward(&self, input_ids: &Tensor, token_type_ids: &Tensor) -> candle_core::Result<Tensor> {
        let seq = input_ids.dim(1)?;
        if seq > self.max_positions {
            bail!(
                "{seq} tokens do not fit the model's {} positions",
                self.max_positions
            );
        }
        let positions = Tensor::arange(0u32, seq as u32, input_ids.device())?;
        let sum = self
            .words
            .forward(input_ids)?
            .add(&self.segments.forward(token_type_ids)?)?
            .broadcast_add(&self.positions.forward(&positions)?)?;
        self.norm.forward(&sum)
    }
}

/// Self-attention then feed-forward, each followed by residual add and LayerNorm.
#[derive(Debug)]
struct EncoderLayer {
    query: Linear,
    key: Linear,
    value: Linear,
    attention_out: Linear,
    attention_norm: LayerNorm,
    intermediate: Linear,
    output: Linear,
    output_norm: LayerNorm,
    heads: usize,
    head_dim: usize,
}

impl EncoderLayer {
    fn load(vb: VarBuilder<'_>, c: &BertConfig) -> candle_core::Result<Self> {
        let h = c.hidden_size;
        let attention = vb.pp("attention");
        let this = attention.pp("self");
        Ok(Self {
            query: linear(h, h, this.pp("query"))?,
            key: linear(h, h, this.pp("key"))?,
            value: linear(h, h, this.pp("value"))?,
            attention_out: linear(h, h, attention.pp("output.dense"))?,
            attention_norm: layer_norm(h, c.layer_norm_eps, attention.pp("output.LayerNorm"))?,
            intermediate: linear(h, c.intermediate_size, vb.pp("intermediate.dense"))?,
            output: linear(c.intermediate_size, h, vb.pp("output.dense"))?,
            output_norm: layer_norm(h, c.layer_norm_eps, vb.pp("output.LayerNorm"))?,
            heads: c.num_attention_heads,
            head_dim: h / c.num_attention_heads,
        })
    }

    /// `x` is `[batch, seq, hidden]`; `bias` is the `[batch, 1, 1, seq]` key mask.
    fn forward(&self, x: &Tensor, bias: &Tensor) -> candle_core::Result<Tensor> {
        let attended = self.attention_out.forward(&self.attend(x, bias)?)?;
        let x = self.attention_norm.forward(&attended.add(x)?)?;
        let inner = self.intermediate.forward(&x)?.gelu_erf()?;
        let out = self.output.forward(&inner)?;
        self.output_norm.forward(&out.add(&x)?)
    }

    /// Multi-head scaled dot-product attention, heads concatenated back to `[batch, seq,
    /// hidden]`.
    fn attend(&self, x: &Tensor, bias: &Tensor) -> candle_core::Result<Tensor> {
        let (batch, seq, hidden) = x.dims3()?;
        // [batch, seq, hidden] -> [batch, heads, seq, head_dim]
        let split = |t: Tensor| {
            t.reshape((batch, seq, self.heads, self.head_dim))?
                .transpose(1, 2)?
                .contiguous()
        };
        let q = split(self.query.forward(x)?)?;
        let k = split(self.key.forward(x)?)?;
        let v = split(self.value.forward(x)?)?;
        let scale = 1.0 / (self.head_dim as f64).sqrt();
        // [batch, heads, seq (queries), seq (keys)]
        let scores = (q.matmul(&k.t()?)? * scale)?.broadcast_add(bias)?;
        let weights = candle_nn::ops::softmax_last_dim(&scores)?;
        weights
            .matmul(&v)?
            .transpose(1, 2)?
            .reshape((batch, seq, hidden))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use candle_core::Device;

    use super::*;

    const MINILM: &str = r#"{
        "architectures": ["BertModel"], "hidden_act": "gelu", "hidden_size": 384,
        "intermediate_size": 1536, "layer_norm_eps": 1e-12, "max_position_embeddings": 512,
        "model_type": "bert", "num_attention_heads": 12, "num_hidden_layers": 6,
        "position_embedding_type": "absolute", "type_vocab_size": 2, "vocab_size": 30522
    }"#;

    fn error(text: &str) -> String {
        match BertConfig::from_json(text) {
            Ok(c) => panic!("accepted {c:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn reads_the_minilm_config_and_ignores_unknown_fields() {
        let c = BertConfig::from_json(MINILM).unwrap();
        assert_eq!(
            (c.hidden_size, c.num_hidden_layers, c.num_attention_heads),
            (384, 6, 12)
        );
        assert_eq!(c.model_type.as_deref(), Some("bert"));
    }

    #[test]
    fn a_missing_field_is_named() {
        let text = MINILM.replace(r#""intermediate_size": 1536,"#, "");
        assert!(error(&text).contains("intermediate_size"));
    }

    #[test]
    fn other_activations_and_position_embeddings_are_refused() {
        let relu = error(&MINILM.replace(r#""gelu""#, r#""relu""#));
        assert!(relu.contains("hidden_act `relu`"), "{relu}");
        let relative = error(&MINILM.replace(r#""absolute""#, r#""relative_key""#));
        assert!(relative.contains("`relative_key`"), "{relative}");
        let heads = error(&MINILM.replace(
            r#""num_attention_heads": 12"#,
            r#""num_attention_heads": 7"#,
        ));
        assert!(heads.contains("not a multiple"), "{heads}");
    }

    /// A config small enough to write out by hand.
    fn tiny() -> BertConfig {
        BertConfig {
            vocab_size: 10,
            hidden_size: 4,
            num_hidden_layers: 2,
            num_attention_heads: 2,
            intermediate_size: 8,
            hidden_act: "gelu".into(),
            max_position_embeddings: 8,
            type_vocab_size: 2,
            layer_norm_eps: 1e-12,
            position_embedding_type: None,
            model_type: Some("bert".into()),
        }
    }

    /// Every tensor `tiny()` needs, named as in a checkpoint under `prefix`, filled with a
    /// fixed pattern that differs from tensor to tensor.
    fn tiny_weights(prefix: &str) -> HashMap<String, Tensor> {
        let c = tiny();
        let (h, i) = (c.hidden_size, c.intermediate_size);
        let mut shapes = vec![
            (
                "embeddings.word_embeddings.weight".to_owned(),
                vec![c.vocab_size, h],
            ),
            (
                "embeddings.position_embeddings.weight".to_owned(),
                vec![c.max_position_embeddings, h],
            ),
            (
                "embeddings.token_type_embeddings.weight".to_owned(),
                vec![c.type_vocab_size, h],
            ),
            ("embeddings.LayerNorm.weight".to_owned(), vec![h]),
            ("embeddings.LayerNorm.bias".to_owned(), vec![h]),
        ];
        for l in 0..c.num_hidden_layers {
            let linears = [
                ("attention.self.query", h, h),
                ("attention.self.key", h, h),
                ("attention.self.value", h, h),
                ("attention.output.dense", h, h),
                ("intermediate.dense", h, i),
                ("output.dense", i, h),
            ];
            for (name, inputs, outputs) in linears {
                let name = format!("encoder.layer.{l}.{name}");
                shapes.push((format!("{name}.weight"), vec![outputs, inputs]));
                shapes.push((format!("{name}.bias"), vec![outputs]));
            }
            for name in ["attention.output.LayerNorm", "output.LayerNorm"] {
                shapes.push((format!("encoder.layer.{l}.{name}.weight"), vec![h]));
                shapes.push((format!("encoder.layer.{l}.{name}.bias"), vec![h]));
            }
        }
        shapes
            .into_iter()
            .enumerate()
            .map(|(n, (name, shape))| {
                let len: usize = shape.iter().product();
                let values: Vec<f32> = (0..len)
                    .map(|k| ((k * 7 + n * 13) as f32 * 0.37).sin() * 0.5)
                    .collect();
                let t = Tensor::from_vec(values, shape, &Device::Cpu).unwrap();
                (format!("{prefix}{name}"), t)
            })
            .collect()
    }

    #[test]
    fn weights_load_with_or_without_the_bert_prefix_and_padded_keys_are_ignored() {
        let dev = Device::Cpu;
        let mut outputs = Vec::new();
        for prefix in ["", "bert."] {
            let vb = VarBuilder::from_tensors(tiny_weights(prefix), DType::F32, &dev);
            let model = BertModel::load(vb, &tiny()).unwrap();
            let ids = Tensor::new(&[[1u32, 2, 3], [4, 5, 0]], &dev).unwrap();
            let mask = Tensor::new(&[[1u32, 1, 1], [1, 1, 0]], &dev).unwrap();
            let out = model
                .forward(&ids, &ids.zeros_like().unwrap(), &mask)
                .unwrap();
            assert_eq!(out.dims(), &[2, 3, 4]);

            // The padded key must not change the real tokens' states of the second row.
            let short = Tensor::new(&[[4u32, 5]], &dev).unwrap();
            let alone = model
                .forward(
                    &short,
                    &short.zeros_like().unwrap(),
                    &short.ones_like().unwrap(),
                )
                .unwrap();
            let padded = out.narrow(0, 1, 1).unwrap().narrow(1, 0, 2).unwrap();
            assert!(max_abs_diff(&alone, &padded) < 1e-5, "prefix {prefix:?}");
            outputs.push(out);
        }
        assert_eq!(max_abs_diff(&outputs[0], &outputs[1]), 0.0);
    }

    #[test]
    fn weights_without_bert_tensors_are_refused() {
        let vb = VarBuilder::from_tensors(tiny_weights("roberta."), DType::F32, &Device::Cpu);
        let err = BertModel::load(vb, &tiny()).unwrap_err().to_string();
        assert!(err.contains("embeddings.word_embeddings.weight"), "{err}");
    }

    fn max_abs_diff(a: &Tensor, b: &Tensor) -> f32 {
        (a - b)
            .unwrap()
            .abs()
            .unwrap()
            .max_all()
            .unwrap()
            .to_scalar::<f32>()
            .unwrap()
    }
}
