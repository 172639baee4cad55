//! [`PromptIR`]: the sections, tools and observation of one prompt, with its [`PromptMeta`].

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::budget::{ContextStrategy, TokenBudget};
use crate::error::{Error, Result};
use crate::section::{Embedding, Priority, Section, TokenCount};
use crate::tokenizer::Tokenizer;
use crate::unit::Ratio;
use crate::words::round6;

/// A tool the model may call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "ToolDefRepr")]
pub struct ToolDef {
    name: String,
    description: String,
    parameters: serde_json::Value,
    priority: Priority,
    #[serde(skip_serializing_if = "Option::is_none")]
    embedding: Option<Embedding>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tokens: Option<TokenCount>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ToolDefRepr {
    name: String,
    description: String,
    parameters: serde_json::Value,
    priority: Priority,
    #[serde(default)]
    embedding: Option<Embedding>,
    #[serde(default)]
    tokens: Option<TokenCount>,
}

impl TryFrom<ToolDefRepr> for ToolDef {
    type Error = Error;
    fn try_from(r: ToolDefRepr) -> Result<Self> {
        let mut t = ToolDef::new(r.name, r.description, r.parameters)?.with_priority(r.priority);
        t.embedding = r.embedding;
        t.tokens = r.tokens;
        Ok(t)
    }
}

impl ToolDef {
    /// A High-priority tool. `parameters` is its JSON schema and must be a JSON object;
    /// `name` must not be empty.
    ///
    /// Object keys in the schema are sorted, so a schema always serializes and counts the
    /// same whether or not serde_json's `preserve_order` feature is enabled somewhere in the
    /// build.
    pub fn new(
        name: impl Into<String>,
        description: impl Into<String>,
        parameters: serde_json::Value,
    ) -> Result<Self> {
        let name = name.into();
        if name.is_empty() {
            return Err(Error::EmptyId { what: "tool name" });
        }
        let found = match &parameters {
            serde_json::Value::Object(_) => None,
            serde_json::Value::Null => Some("null"),
            serde_json::Value::Bool(_) => Some("boolean"),
            serde_json::Value::Number(_) => Some("number"),
            serde_json::Value::String(_) => Some("string"),
            serde_json::Value::Array(_) => Some("array"),
        };
        if let Some(found) = found {
            return Err(Error::ToolSchemaNotObject { name, found });
        }
        Ok(ToolDef {
            name,
            description: description.into(),
            parameters: canonical(parameters),
            priority: Priority::High,
            embedding: None,
            tokens: None,
        })
    }

    /// Sets the priority. A Critical tool is never dropped; tools are never truncated.
    pub fn with_priority(mut self, priority: Priority) -> Self {
        self.priority = priority;
        self
    }

    /// Attaches an embedding of the description.
    pub fn with_embedding(mut self, embedding: Embedding) -> Self {
        self.embedding = Some(embedding);
        self
    }

    /// The tool's name, unique within one [`PromptIR`].
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What the tool does.
    pub fn description(&self) -> &str {
        &self.description
    }

    /// Its JSON schema (always an object).
    pub fn parameters(&self) -> &serde_json::Value {
        &self.parameters
    }

    /// Its priority.
    pub fn priority(&self) -> Priority {
        self.priority
    }

    /// Its embedding, if any.
    pub fn embedding(&self) -> Option<&Embedding> {
        self.embedding.as_ref()
    }

    /// Cached number of tokens, if counted.
    pub fn tokens(&self) -> Option<u32> {
        self.tokens.as_ref().map(|t| t.tokens)
    }

    /// Counts the tokens of the name, description and compact schema, or returns the count
    /// cached for this tokenizer.
    pub fn count_tokens(&mut self, tokenizer: &dyn Tokenizer) -> u32 {
        TokenCount::cached(&mut self.tokens, tokenizer, || {
            let text = format!("{}\n{}\n{}", self.name, self.description, self.parameters);
            TokenCount::whole(tokenizer, &text)
        })
    }

    /// The definition without its cached count, for comparing definitions.
    fn same_definition(&self, other: &ToolDef) -> bool {
        self.name == other.name
            && self.description == other.description
            && self.parameters == other.parameters
            && self.priority == other.priority
            && self.embedding == other.embedding
    }
}

/// The new observation a prompt answers, usually the user's latest message. It is never
/// truncated or dropped by compression.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Observation {
    content: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tokens: Option<TokenCount>,
}

impl Observation {
    /// An observation of `content`.
    pub fn new(content: impl Into<String>) -> Self {
        Observation {
            content: content.into(),
            tokens: None,
        }
    }

    /// The text.
    pub fn content(&self) -> &str {
        &self.content
    }

    /// Cached number of tokens, if counted.
    pub fn tokens(&self) -> Option<u32> {
        self.tokens.as_ref().map(|t| t.tokens)
    }

    /// Counts the tokens, or returns the count cached for this tokenizer.
    pub fn count_tokens(&mut self, tokenizer: &dyn Tokenizer) -> u32 {
        TokenCount::cached(&mut self.tokens, tokenizer, || {
            TokenCount::whole(tokenizer, &self.content)
        })
    }
}

/// Facts about a prompt. The caller sets `timestamp`, `budget`, `strategy` and `cache_hit`
/// (through [`PromptIR`]'s setters); the rest is derived and kept current by this crate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PromptMeta {
    /// When the prompt is built: "now" for recency decay. Compression never reads the clock.
    pub timestamp: DateTime<Utc>,
    /// Total tokens of sections, tools and observation, once all are counted.
    pub total_tokens: Option<u32>,
    /// Total tokens before the first compression, once compressed.
    pub uncompressed_tokens: Option<u32>,
    /// The budget it was built for.
    pub budget: Option<TokenBudget>,
    /// The retrieval strategy it was built with; its recency decay steers compression.
    pub strategy: Option<ContextStrategy>,
    /// `total_tokens / uncompressed_tokens`, once compressed.
    pub compression_ratio: Option<Ratio>,
    /// Estimated information of the sections in bits (sum of
    /// [`Information::bits`](crate::Information)).
    pub estimated_entropy_bits: f64,
    /// Whether a provider's prompt cache can serve this prompt's stable part: it starts with
    /// the whole stable part ([`Stability`](crate::Stability) other than volatile) of the
    /// previous prompt of its conversation. Set by whoever compares the two (hydrate's
    /// compile does); `false` when nobody did.
    pub cache_hit: bool,
}

/// One prompt as data: labeled sections in order, tools, the observation, and meta.
///
/// Section ids and tool names are unique within an IR.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "PromptIRRepr")]
pub struct PromptIR {
    sections: Vec<Section>,
    tools: Vec<ToolDef>,
    observation: Option<Observation>,
    meta: PromptMeta,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PromptIRRepr {
    #[serde(default)]
    sections: Vec<Section>,
    #[serde(default)]
    tools: Vec<ToolDef>,
    #[serde(default)]
    observation: Option<Observation>,
    meta: PromptMeta,
}

impl TryFrom<PromptIRRepr> for PromptIR {
    type Error = Error;
    fn try_from(r: PromptIRRepr) -> Result<Self> {
        let mut ir = PromptIR::new(r.meta.timestamp);
        let PromptMeta {
            uncompressed_tokens,
            budget,
            strategy,
            compression_ratio,
            cache_hit,
            ..
        } = r.meta;
        ir.meta.uncompressed_tokens = uncompressed_tokens;
        ir.meta.budget = budget;
        ir.meta.strategy = strategy;
        ir.meta.compression_ratio = compression_ratio;
        ir.meta.cache_hit = cache_hit;
        for s in r.sections {
            ir.push_section(s)?;
        }
        for t in r.tools {
            ir.push_tool(t)?;
        }
        ir.observation = r.observation;
        ir.refresh_meta();
        Ok(ir)
    }
}

impl PromptIR {
    /// An empty prompt built at `timestamp`.
    pub fn new(timestamp: DateTime<Utc>) -> Self {
        PromptIR {
            sections: Vec::new(),
            tools: Vec::new(),
            observation: None,
            meta: PromptMeta {
                timestamp,
                total_tokens: Some(0),
                uncompressed_tokens: None,
                budget: None,
                strategy: None,
                compression_ratio: None,
                estimated_entropy_bits: 0.0,
                cache_hit: false,
            },
        }
    }

    /// Appends a section. Fails if its id is already taken.
    pub fn push_section(&mut self, section: Section) -> Result<()> {
        if self.section(section.id()).is_some() {
            return Err(Error::DuplicateSectionId {
                id: section.id().to_owned(),
            });
        }
        self.sections.push(section);
        self.refresh_meta();
        Ok(())
    }

    /// Appends a section, builder style.
    pub fn with_section(mut self, section: Section) -> Result<Self> {
        self.push_section(section)?;
        Ok(self)
    }

    /// Appends a tool. Fails if its name is already taken.
    pub fn push_tool(&mut self, tool: ToolDef) -> Result<()> {
        if self.tools.iter().any(|t| t.name() == tool.name()) {
            return Err(Error::DuplicateToolName {
                name: tool.name().to_owned(),
            });
        }
        self.tools.push(tool);
        self.refresh_meta();
        Ok(())
    }

    /// Sets the observation.
    pub fn set_observation(&mut self, observation: impl Into<String>) {
        self.observation = Some(Observation::new(observation));
        self.refresh_meta();
    }

    /// Sets the budget recorded in meta.
    pub fn set_budget(&mut self, budget: TokenBudget) {
        self.meta.budget = Some(budget);
    }

    /// Sets the strategy recorded in meta; its recency decay steers compression.
    pub fn set_strategy(&mut self, strategy: ContextStrategy) {
        self.meta.strategy = Some(strategy);
    }

    /// Records whether the prompt came from a cache.
    pub fn set_cache_hit(&mut self, cache_hit: bool) {
        self.meta.cache_hit = cache_hit;
    }

    /// The sections, in order.
    pub fn sections(&self) -> &[Section] {
        &self.sections
    }

    /// The section with `id`.
    pub fn section(&self, id: &str) -> Option<&Section> {
        self.sections.iter().find(|s| s.id() == id)
    }

    /// The tools, in order.
    pub fn tools(&self) -> &[ToolDef] {
        &self.tools
    }

    /// The observation, if any.
    pub fn observation(&self) -> Option<&Observation> {
        self.observation.as_ref()
    }

    /// Meta data.
    pub fn meta(&self) -> &PromptMeta {
        &self.meta
    }

    /// Counts every section, tool and the observation (reusing counts cached for this
    /// tokenizer) and returns the total.
    pub fn count_tokens(&mut self, tokenizer: &dyn Tokenizer) -> u32 {
        let mut total = 0u32;
        for s in &mut self.sections {
            total = total.saturating_add(s.count_tokens(tokenizer));
        }
        for t in &mut self.tools {
            total = total.saturating_add(t.count_tokens(tokenizer));
        }
        if let Some(o) = &mut self.observation {
            total = total.saturating_add(o.count_tokens(tokenizer));
        }
        self.refresh_meta();
        total
    }

    pub(crate) fn parts_mut(
        &mut self,
    ) -> (
        &mut Vec<Section>,
        &mut Vec<ToolDef>,
        &mut Option<Observation>,
        &mut PromptMeta,
    ) {
        (
            &mut self.sections,
            &mut self.tools,
            &mut self.observation,
            &mut self.meta,
        )
    }

    pub(crate) fn set_compression_ratio(&mut self, ratio: Ratio) {
        self.meta.compression_ratio = Some(ratio);
    }

    pub(crate) fn from_parts(
        sections: Vec<Section>,
        tools: Vec<ToolDef>,
        observation: Option<Observation>,
        meta: PromptMeta,
    ) -> Self {
        let mut ir = PromptIR {
            sections,
            tools,
            observation,
            meta,
        };
        ir.refresh_meta();
        ir
    }

    /// Recomputes the derived meta: total tokens (when everything is counted) and entropy.
    pub(crate) fn refresh_meta(&mut self) {
        let counts = self
            .sections
            .iter()
            .map(Section::tokens)
            .chain(self.tools.iter().map(ToolDef::tokens))
            .chain(self.observation.iter().map(Observation::tokens));
        let mut total = Some(0u32);
        for c in counts {
            total = match (total, c) {
                (Some(t), Some(c)) => Some(t.saturating_add(c)),
                _ => None,
            };
        }
        self.meta.total_tokens = total;
        let bits: f64 = self.sections.iter().map(|s| s.information().bits).sum();
        self.meta.estimated_entropy_bits = round6(bits);
    }
}

/// `value` with every object's keys in sorted order, recursively.
fn canonical(value: serde_json::Value) -> serde_json::Value {
    match value {
        serde_json::Value::Object(map) => {
            let mut entries: Vec<(String, serde_json::Value)> = map.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            serde_json::Value::Object(
                entries
                    .into_iter()
                    .map(|(k, v)| (k, canonical(v)))
                    .collect(),
            )
        }
        serde_json::Value::Array(items) => {
            serde_json::Value::Array(items.into_iter().map(canonical).collect())
        }
        other => other,
    }
}

pub(crate) fn same_tool(a: &ToolDef, b: &ToolDef) -> bool {
    a.same_definition(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::section::SectionSource;
    use crate::tokenizer::WhitespaceTokenizer;

    fn t0() -> DateTime<Utc> {
        DateTime::<Utc>::from_timestamp(1_700_000_000, 0).unwrap()
    }

    #[test]
    fn ids_and_names_are_unique() {
        let mut ir = PromptIR::new(t0());
        ir.push_section(Section::new("a", "A", SectionSource::Knowledge, "x").unwrap())
            .unwrap();
        let err = ir
            .push_section(Section::new("a", "A2", SectionSource::Knowledge, "y").unwrap())
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "section id `a` appears twice in one prompt IR, expected unique section ids"
        );
        let tool = ToolDef::new("search", "Search memory", serde_json::json!({})).unwrap();
        ir.push_tool(tool.clone()).unwrap();
        assert!(matches!(
            ir.push_tool(tool),
            Err(Error::DuplicateToolName { .. })
        ));
    }

    #[test]
    fn tool_schema_must_be_an_object() {
        let err = ToolDef::new("t", "d", serde_json::json!([1])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "tool `t` has a parameter schema that is a JSON array, expected a JSON object"
        );
        assert!(ToolDef::new("", "d", serde_json::json!({})).is_err());
    }

    #[test]
    fn tool_schemas_are_canonical() {
        let schema = serde_json::json!({"type": "object", "required": ["q"],
            "properties": {"q": {"type": "string", "description": "query"}}});
        let tool = ToolDef::new("t", "d", schema).unwrap();
        assert_eq!(
            tool.parameters().to_string(),
            r#"{"properties":{"q":{"description":"query","type":"string"}},"required":["q"],"type":"object"}"#
        );
    }

    #[test]
    fn counting_fills_meta() {
        let mut ir = PromptIR::new(t0());
        ir.push_section(Section::new("a", "A", SectionSource::Knowledge, "one two").unwrap())
            .unwrap();
        ir.set_observation("three four five");
        assert_eq!(ir.meta().total_tokens, None);
        assert_eq!(ir.count_tokens(&WhitespaceTokenizer), 5);
        assert_eq!(ir.meta().total_tokens, Some(5));
        assert_eq!(ir.meta().estimated_entropy_bits, 2.0);
    }

    #[test]
    fn deserialization_checks_uniqueness() {
        let mut ir = PromptIR::new(t0());
        ir.push_section(Section::new("a", "A", SectionSource::Knowledge, "x").unwrap())
            .unwrap();
        ir.push_section(Section::new("b", "B", SectionSource::Knowledge, "y").unwrap())
            .unwrap();
        let json = serde_json::to_string(&ir).unwrap();
        assert_eq!(serde_json::from_str::<PromptIR>(&json).unwrap(), ir);
        let dup = json.replace("\"id\":\"b\"", "\"id\":\"a\"");
        let err = serde_json::from_str::<PromptIR>(&dup).unwrap_err();
        assert!(
            err.to_string().contains("section id `a` appears twice"),
            "{err}"
        );
    }
}
