//! [`Encoding`]: the BPE encodings prompt-ir counts tokens with, and which one a model uses.
//! A plain value (no error, no tables): the tokenizer loads an encoding's tables, and the
//! error type names one.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The BPE encodings this crate can count with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Encoding {
    /// `o200k_base`: GPT-4o, GPT-4.1, GPT-4.5, GPT-5, the o-series, gpt-oss.
    #[serde(rename = "o200k_base")]
    O200kBase,
    /// `cl100k_base`: GPT-4, GPT-3.5-turbo, text-embedding-ada-002 and -3.
    #[serde(rename = "cl100k_base")]
    Cl100kBase,
}

impl Encoding {
    /// The encoding's canonical name, as `tiktoken` spells it.
    pub fn name(self) -> &'static str {
        match self {
            Encoding::O200kBase => "o200k_base",
            Encoding::Cl100kBase => "cl100k_base",
        }
    }

    /// The encoding a model uses, chosen by name.
    ///
    /// A provider prefix (`openai/gpt-4o`) is ignored and case does not matter.
    /// GPT-4o, GPT-4.1, GPT-4.5, GPT-5, `o1`/`o3`/`o4` and gpt-oss map to `o200k_base`;
    /// older GPT-4, GPT-3.5 and the OpenAI embedding models map to `cl100k_base`.
    /// **Any other name (including local models such as Llama or Qwen) maps to
    /// `o200k_base`**: their own tokenizers are not bundled, and o200k is the closest
    /// modern general-purpose vocabulary, so counts are estimates for them.
    pub fn for_model(model: &str) -> Encoding {
        let name = model
            .rsplit('/')
            .next()
            .unwrap_or(model)
            .to_ascii_lowercase();
        const O200K: [&str; 9] = [
            "gpt-4o",
            "chatgpt-4o",
            "gpt-4.1",
            "gpt-4.5",
            "gpt-5",
            "o1",
            "o3",
            "o4",
            "gpt-oss",
        ];
        const CL100K: [&str; 6] = [
            "gpt-4",
            "gpt-3.5",
            "gpt-35",
            "text-embedding-ada-002",
            "text-embedding-3",
            "ft:gpt-3.5",
        ];
        // o200k families first: "gpt-4o" also starts with "gpt-4".
        if O200K.iter().any(|p| name.starts_with(p)) {
            Encoding::O200kBase
        } else if CL100K.iter().any(|p| name.starts_with(p)) {
            Encoding::Cl100kBase
        } else {
            Encoding::O200kBase
        }
    }
}

impl fmt::Display for Encoding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
