//! The memory operations as tool definitions for the model (`remember`, `recall`,
//! `forget`): offered by `hydrate` in the stable prefix, run by `ops`.

use prompt_ir::{Priority, ToolDef};
use serde_json::json;

use crate::error::Result;

/// Name of the tool that stores a fact.
pub const REMEMBER: &str = "remember";
/// Name of the tool that searches memory.
pub const RECALL: &str = "recall";
/// Name of the tool that deletes a memory.
pub const FORGET: &str = "forget";
/// Most memories one `recall` returns.
pub const MAX_RECALL: usize = 20;

/// The memory operations as tool definitions (Critical, so compression never drops them and
/// the stable prefix never changes).
pub fn memory_tools() -> Result<Vec<ToolDef>> {
    let remember = ToolDef::new(
        REMEMBER,
        "Store a durable fact about the user or the task in long-term memory. Returns its id.",
        json!({
            "type": "object",
            "properties": {
                "content": {"type": "string", "description": "The fact, as one self-contained sentence."},
                "context": {"type": "string", "description": "How or why it was learned."},
                "tags": {"type": "array", "items": {"type": "string"}, "description": "Single-word labels."}
            },
            "required": ["content"]
        }),
    )?;
    let recall = ToolDef::new(
        RECALL,
        "Search long-term memory. Returns matching memories with their ids.",
        json!({
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "What to look for."},
                "limit": {"type": "integer", "minimum": 1, "maximum": MAX_RECALL, "description": "At most this many memories (default 5)."}
            },
            "required": ["query"]
        }),
    )?;
    let forget = ToolDef::new(
        FORGET,
        "Delete a memory by the id recall gave for it.",
        json!({
            "type": "object",
            "properties": {"id": {"type": "string", "description": "The memory's id."}},
            "required": ["id"]
        }),
    )?;
    Ok([remember, recall, forget]
        .into_iter()
        .map(|t| t.with_priority(Priority::Critical))
        .collect())
}
