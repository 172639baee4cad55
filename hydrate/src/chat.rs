//! Chat messages, tool specs, the object-safe [`ChatModel`] trait an LLM client implements
//! (Ollama and OpenAI-compatible clients live with the bot, not here), and [`ToolHandler`],
//! which runs an application's own tool when the model calls it.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use memory_core::Scope;
use prompt_ir::ToolDef;
use serde::{Deserialize, Serialize};

use crate::error::Result;

/// Who a chat message is from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChatRole {
    /// Instructions from the application.
    System,
    /// The user (and, in a compiled prompt, recalled data, which is never given authority).
    User,
    /// The model.
    Assistant,
    /// A tool's result.
    Tool,
}

/// Tokens a chat format adds around each message (role markers), as an estimate.
pub const MESSAGE_OVERHEAD_TOKENS: u32 = 4;

/// One message of a chat.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// Who it is from.
    pub role: ChatRole,
    /// The text (empty for an assistant message that only calls tools).
    pub content: String,
    /// The tool's name, on a tool result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The call a tool result answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// The tools an assistant message calls.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
}

impl ChatMessage {
    fn new(role: ChatRole, content: impl Into<String>) -> Self {
        Self {
            role,
            content: content.into(),
            name: None,
            tool_call_id: None,
            tool_calls: Vec::new(),
        }
    }

    /// A system message.
    pub fn system(content: impl Into<String>) -> Self {
        Self::new(ChatRole::System, content)
    }

    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Self::new(ChatRole::User, content)
    }

    /// An assistant message.
    pub fn assistant(content: impl Into<String>) -> Self {
        Self::new(ChatRole::Assistant, content)
    }

    /// An assistant message calling tools.
    pub fn assistant_calls(content: Option<String>, calls: Vec<ToolCall>) -> Self {
        Self {
            tool_calls: calls,
            ..Self::new(ChatRole::Assistant, content.unwrap_or_default())
        }
    }

    /// The result of the tool call `call`.
    pub fn tool_result(call: &ToolCall, content: impl Into<String>) -> Self {
        Self {
            name: Some(call.name.clone()),
            tool_call_id: Some(call.id.clone()),
            ..Self::new(ChatRole::Tool, content)
        }
    }
}

/// A tool call the model asked for.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The call's id, echoed in its result.
    pub id: String,
    /// The tool.
    pub name: String,
    /// The arguments (a JSON object).
    pub arguments: serde_json::Value,
}

/// A tool as offered to a model: name, description and JSON schema of its parameters (keys
/// sorted, so the spec is byte-identical whatever serde_json's `preserve_order`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// The tool's name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// JSON schema of its arguments.
    pub parameters: serde_json::Value,
}

impl From<&ToolDef> for ToolSpec {
    fn from(t: &ToolDef) -> Self {
        Self {
            name: t.name().to_owned(),
            description: t.description().to_owned(),
            parameters: t.parameters().clone(),
        }
    }
}

/// What a model answered: text, tool calls, or both.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChatResponse {
    /// The model that answered, as it names itself.
    pub model: String,
    /// The text, if any.
    pub content: Option<String>,
    /// The tools it wants called, if any.
    pub tool_calls: Vec<ToolCall>,
}

/// A chat model: sends messages and tool specs, returns text or tool calls.
///
/// Object safe: held as `&dyn ChatModel` or `Arc<dyn ChatModel>`. Implementations report
/// failures as [`crate::Error::Model`] (see [`crate::Error::model`]).
#[async_trait]
pub trait ChatModel: Send + Sync + fmt::Debug {
    /// The model's name (for reports and traces).
    fn name(&self) -> &str;

    /// One round trip.
    async fn chat(&self, messages: &[ChatMessage], tools: &[ToolSpec]) -> Result<ChatResponse>;
}

macro_rules! forward_model {
    ($($ty:ty),*) => {$(
        #[async_trait]
        impl<T: ChatModel + ?Sized> ChatModel for $ty {
            fn name(&self) -> &str {
                (**self).name()
            }
            async fn chat(&self, messages: &[ChatMessage], tools: &[ToolSpec]) -> Result<ChatResponse> {
                (**self).chat(messages, tools).await
            }
        }
    )*};
}

forward_model!(Arc<T>, Box<T>, &T);

/// Runs an application tool when the model calls it (register it with
/// [`crate::HydrationConfig::with_app_tool`]): the scope the call is made for and the call's
/// arguments (a JSON object) in, what the model is told out. An error, or a call that
/// outlasts [`crate::HydrationConfig::tool_timeout`], goes back to the model as a tool
/// error; it never fails the request.
#[async_trait]
pub trait ToolHandler: Send + Sync + fmt::Debug {
    /// Runs one call.
    async fn call(&self, scope: &Scope, arguments: serde_json::Value) -> Result<String>;
}
