//! LLM clients: [`hydrate::ChatModel`] over an Ollama server (ollama-rs) and an
//! OpenAI-compatible server (async-openai), chosen by `--llm`, each bounded by a timeout.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use async_openai::Client;
use async_openai::config::OpenAIConfig;
use async_openai::types::chat::{
    ChatCompletionMessageToolCall, ChatCompletionMessageToolCalls,
    ChatCompletionRequestAssistantMessage, ChatCompletionRequestAssistantMessageContent,
    ChatCompletionRequestMessage, ChatCompletionRequestSystemMessage,
    ChatCompletionRequestToolMessage, ChatCompletionRequestUserMessage, ChatCompletionTool,
    ChatCompletionTools, CreateChatCompletionRequest, FunctionCall, FunctionObject,
};
use async_trait::async_trait;
use clap::ValueEnum;
use hydrate::{ChatMessage, ChatModel, ChatResponse, ChatRole, FactExtractor, ToolCall, ToolSpec};
use ollama_rs::Ollama;
use ollama_rs::generation::chat::request::ChatMessageRequest;
use ollama_rs::generation::chat::{ChatMessage as OllamaMessage, MessageRole};
use ollama_rs::generation::tools::{ToolCall as OllamaToolCall, ToolCallFunction, ToolInfo};
use ollama_rs::models::ModelOptions;
use serde_json::{Value, json};

use crate::config::{Settings, secret_from_env};
use memory_core::Secret;

/// Which kind of server answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum LlmChoice {
    /// An Ollama server (`/api/chat`).
    Ollama,
    /// An OpenAI-compatible server (`/chat/completions`).
    Openai,
}

/// How to reach the chat model (for `ava chat` and `ava run`).
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct LlmSettings {
    /// Which chat model server to use.
    #[arg(long, env = "AVA_LLM", value_enum, default_value_t = LlmChoice::Ollama)]
    pub(crate) llm: LlmChoice,
    /// The chat model [default: llama3.1 for ollama, gpt-4o-mini for openai].
    #[arg(long, env = "AVA_LLM_MODEL")]
    pub(crate) llm_model: Option<String>,
    /// The chat server's address [default: --ollama-url or --openai-url].
    #[arg(long, env = "AVA_LLM_URL")]
    pub(crate) llm_url: Option<String>,
    /// Seconds to wait for one answer of the model.
    #[arg(long, env = "AVA_LLM_TIMEOUT", default_value_t = 120)]
    pub(crate) llm_timeout: u64,
    /// Most tokens the model may write in one answer (sent to the server, which stops
    /// there): a model that runs away costs time and fills the chat.
    #[arg(long, env = "AVA_MAX_ANSWER_TOKENS", default_value_t = DEFAULT_MAX_ANSWER_TOKENS)]
    pub(crate) max_answer_tokens: u32,
    /// Do not ask the model, after each exchange, for facts to remember (one or two extra
    /// calls per message, in the background).
    #[arg(long, env = "AVA_NO_FACTS")]
    pub(crate) no_facts: bool,
}

impl LlmSettings {
    /// The configured client. The OpenAI key comes from `OPENAI_API_KEY` only.
    pub(crate) fn build(&self, settings: &Settings) -> anyhow::Result<Arc<dyn ChatModel>> {
        if self.llm_timeout == 0 {
            bail!("--llm-timeout is 0; give the model at least one second");
        }
        if self.max_answer_tokens == 0 {
            bail!("--max-answer-tokens is 0; let the model write at least one token");
        }
        let timeout = Duration::from_secs(self.llm_timeout);
        let cap = Some(self.max_answer_tokens);
        Ok(match self.llm {
            LlmChoice::Ollama => Arc::new(
                OllamaChat::new(
                    self.llm_url.as_deref().unwrap_or(&settings.ollama_url),
                    self.llm_model.as_deref().unwrap_or("llama3.1"),
                    timeout,
                )?
                .with_max_tokens(cap),
            ),
            LlmChoice::Openai => Arc::new(
                OpenAiChat::new(
                    self.llm_url.as_deref().unwrap_or(&settings.openai_url),
                    self.llm_model.as_deref().unwrap_or("gpt-4o-mini"),
                    secret_from_env("OPENAI_API_KEY").as_ref(),
                    timeout,
                )?
                .with_max_tokens(cap),
            ),
        })
    }

    /// A page of the chat server that answers when it is up, for readiness: Ollama's
    /// `/api/tags`, an OpenAI-compatible server's `/models`.
    pub(crate) fn probe_url(&self, settings: &Settings) -> String {
        match self.llm {
            LlmChoice::Ollama => format!(
                "{}/api/tags",
                self.llm_url
                    .as_deref()
                    .unwrap_or(&settings.ollama_url)
                    .trim_end_matches('/')
            ),
            LlmChoice::Openai => format!(
                "{}/models",
                self.llm_url
                    .as_deref()
                    .unwrap_or(&settings.openai_url)
                    .trim_end_matches('/')
            ),
        }
    }

    /// The fact extractor over `model`, unless `--no-facts`; each call bounded by
    /// `--llm-timeout`.
    pub(crate) fn extractor(&self, model: &Arc<dyn ChatModel>) -> Option<FactExtractor> {
        (!self.no_facts).then(|| {
            FactExtractor::new(Arc::clone(model))
                .with_timeout(Duration::from_secs(self.llm_timeout.max(1)))
        })
    }
}

fn check_url(url: &str) -> anyhow::Result<String> {
    let url = url.trim();
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        bail!("LLM address `{url}` is not an http(s) URL; expected e.g. http://localhost:11434");
    }
    Ok(url.to_owned())
}

/// Runs `call` under `timeout`, turning a miss into a model error.
async fn bounded<T>(
    model: &str,
    timeout: Duration,
    call: impl Future<Output = hydrate::Result<T>>,
) -> hydrate::Result<T> {
    tokio::time::timeout(timeout, call)
        .await
        .unwrap_or_else(|_| {
            Err(hydrate::Error::Model {
                model: model.to_owned(),
                message: format!("no answer within {} s", timeout.as_secs()),
                source: None,
            })
        })
}

/// Default of `--max-answer-tokens`: about 8 KB of text, two Telegram messages.
pub(crate) const DEFAULT_MAX_ANSWER_TOKENS: u32 = 2048;

/// A chat model on an Ollama server.
pub(crate) struct OllamaChat {
    client: Ollama,
    model: String,
    timeout: Duration,
    /// Most tokens of one answer (Ollama's `num_predict`); the server's default when `None`.
    max_tokens: Option<u32>,
}

impl fmt::Debug for OllamaChat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OllamaChat")
            .field("url", &self.client.url_str())
            .field("model", &self.model)
            .field("timeout", &self.timeout)
            .field("max_tokens", &self.max_tokens)
            .finish()
    }
}

impl OllamaChat {
    pub(crate) fn new(url: &str, model: &str, timeout: Duration) -> anyhow::Result<Self> {
        let mut url = check_url(url)?;
        // ollama-rs appends `api/chat` to the URL as given.
        if !url.ends_with('/') {
            url.push('/');
        }
        let client =
            Ollama::try_new(url.as_str()).with_context(|| format!("parse Ollama URL `{url}`"))?;
        Ok(Self {
            client,
            model: model.to_owned(),
            timeout,
            max_tokens: None,
        })
    }

    /// Caps each answer at `max` tokens (none: the server's default).
    pub(crate) fn with_max_tokens(mut self, max: Option<u32>) -> Self {
        self.max_tokens = max;
        self
    }

    fn to_ollama(m: &ChatMessage) -> OllamaMessage {
        let role = match m.role {
            ChatRole::System => MessageRole::System,
            ChatRole::User => MessageRole::User,
            ChatRole::Assistant => MessageRole::Assistant,
            ChatRole::Tool => MessageRole::Tool,
        };
        let mut out = OllamaMessage::new(role, m.content.clone());
        out.tool_calls = m
            .tool_calls
            .iter()
            .map(|c| OllamaToolCall {
                function: ToolCallFunction {
                    name: c.name.clone(),
                    arguments: c.arguments.clone(),
                },
            })
            .collect();
        out
    }

    fn tool_info(t: &ToolSpec) -> hydrate::Result<ToolInfo> {
        // ToolInfo holds a schemars `Schema`; going through JSON keeps our schema as is.
        serde_json::from_value(json!({
            "type": "function",
            "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
        }))
        .map_err(|e| hydrate::Error::invalid("tool spec", format!("`{}`: {e}", t.name)))
    }
}

#[async_trait]
impl ChatModel for OllamaChat {
    fn name(&self) -> &str {
        &self.model
    }

    async fn chat(
        &self,
        messages: &[ChatMessage],
        tools: &[ToolSpec],
    ) -> hydrate::Result<ChatResponse> {
        let mut request = ChatMessageRequest::new(
            self.model.clone(),
            messages.iter().map(Self::to_ollama).collect(),
        )
        .tools(
            tools
                .iter()
                .map(Self::tool_info)
                .collect::<hydrate::Result<_>>()?,
        );
        if let Some(max) = self.max_tokens {
            let max = i32::try_from(max).unwrap_or(i32::MAX);
            request = request.options(ModelOptions::default().num_predict(max));
        }
        let response = bounded(&self.model, self.timeout, async {
            self.client
                .send_chat_messages(request)
                .await
                .map_err(|e| hydrate::Error::model(&self.model, "", e))
        })
        .await?;
        let tool_calls = response
            .message
            .tool_calls
            .into_iter()
            .enumerate()
            .map(|(i, c)| ToolCall {
                // Ollama's calls carry no ids; results are matched by order.
                id: format!("call_{i}"),
                name: c.function.name,
                arguments: c.function.arguments,
            })
            .collect();
        let content = Some(response.message.content).filter(|c| !c.trim().is_empty());
        Ok(ChatResponse {
            model: response.model,
            content,
            tool_calls,
        })
    }
}

/// A chat model on an OpenAI-compatible server.
pub(crate) struct OpenAiChat {
    client: Client<OpenAIConfig>,
    base: String,
    model: String,
    timeout: Duration,
    /// Most tokens of one answer (`max_completion_tokens`); the server's default when `None`.
    max_tokens: Option<u32>,
}

impl fmt::Debug for OpenAiChat {
    // The client's config holds the key: only the address and model are shown.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiChat")
            .field("url", &self.base)
            .field("model", &self.model)
            .field("timeout", &self.timeout)
            .field("max_tokens", &self.max_tokens)
            .finish()
    }
}

impl OpenAiChat {
    pub(crate) fn new(
        url: &str,
        model: &str,
        api_key: Option<&Secret>,
        timeout: Duration,
    ) -> anyhow::Result<Self> {
        let base = check_url(url)?.trim_end_matches('/').to_owned();
        // Every field set: async-openai's defaults would read OPENAI_* variables themselves.
        let config = OpenAIConfig::new()
            .with_api_base(&base)
            .with_api_key(api_key.map(Secret::expose).unwrap_or_default())
            .with_org_id("")
            .with_project_id("");
        Ok(Self {
            client: Client::with_config(config),
            base,
            model: model.to_owned(),
            timeout,
            max_tokens: None,
        })
    }

    /// Caps each answer at `max` tokens (none: the server's default).
    pub(crate) fn with_max_tokens(mut self, max: Option<u32>) -> Self {
        self.max_tokens = max;
        self
    }

    fn to_openai(m: &ChatMessage) -> ChatCompletionRequestMessage {
        match m.role {
            ChatRole::System => ChatCompletionRequestSystemMessage::from(m.content.as_str()).into(),
            ChatRole::User => ChatCompletionRequestUserMessage::from(
                async_openai::types::chat::ChatCompletionRequestUserMessageContent::from(
                    m.content.as_str(),
                ),
            )
            .into(),
            ChatRole::Assistant => ChatCompletionRequestAssistantMessage {
                content: (!m.content.is_empty())
                    .then(|| ChatCompletionRequestAssistantMessageContent::Text(m.content.clone())),
                tool_calls: (!m.tool_calls.is_empty()).then(|| {
                    m.tool_calls
                        .iter()
                        .map(|c| {
                            ChatCompletionMessageToolCalls::Function(
                                ChatCompletionMessageToolCall {
                                    id: c.id.clone(),
                                    function: FunctionCall {
                                        name: c.name.clone(),
                                        arguments: match &c.arguments {
                                            Value::String(s) => s.clone(),
                                            other => other.to_string(),
                                        },
                                    },
                                },
                            )
                        })
                        .collect()
                }),
                ..Default::default()
            }
            .into(),
            ChatRole::Tool => ChatCompletionRequestToolMessage {
                content: m.content.as_str().into(),
                tool_call_id: m.tool_call_id.clone().unwrap_or_default(),
            }
            .into(),
        }
    }
}

#[async_trait]
impl ChatModel for OpenAiChat {
    fn name(&self) -> &str {
        &self.model
    }

    async fn chat(
        &self,
        messages: &[ChatMessage],
        tools: &[ToolSpec],
    ) -> hydrate::Result<ChatResponse> {
        let tools: Vec<ChatCompletionTools> = tools
            .iter()
            .map(|t| {
                ChatCompletionTools::Function(ChatCompletionTool {
                    function: FunctionObject {
                        name: t.name.clone(),
                        description: Some(t.description.clone()),
                        parameters: Some(t.parameters.clone()),
                        strict: None,
                    },
                })
            })
            .collect();
        let request = CreateChatCompletionRequest {
            model: self.model.clone(),
            messages: messages.iter().map(Self::to_openai).collect(),
            tools: (!tools.is_empty()).then_some(tools),
            max_completion_tokens: self.max_tokens,
            ..Default::default()
        };
        let response = bounded(&self.model, self.timeout, async {
            self.client
                .chat()
                .create(request)
                .await
                .map_err(|e| hydrate::Error::model(&self.model, "", e))
        })
        .await?;
        let Some(choice) = response.choices.into_iter().next() else {
            return Err(hydrate::Error::Model {
                model: self.model.clone(),
                message: "the response has no choices".into(),
                source: None,
            });
        };
        let tool_calls = choice
            .message
            .tool_calls
            .unwrap_or_default()
            .into_iter()
            .filter_map(|c| match c {
                ChatCompletionMessageToolCalls::Function(f) => Some(ToolCall {
                    id: f.id,
                    name: f.function.name,
                    // Arguments arrive as a JSON string; kept as one if it is not JSON, so
                    // the tool reports the bad arguments to the model.
                    arguments: serde_json::from_str(&f.function.arguments)
                        .unwrap_or(Value::String(f.function.arguments)),
                }),
                ChatCompletionMessageToolCalls::Custom(_) => None,
            })
            .collect();
        Ok(ChatResponse {
            model: response.model,
            content: choice.message.content.filter(|c| !c.trim().is_empty()),
            tool_calls,
        })
    }
}

#[cfg(test)]
pub(crate) mod tests;
