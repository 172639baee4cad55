//! Context hydration: sources and providers, `ContextRequest -> PromptIR -> CompiledPrompt`,
//! with an explain report.
//!
//! ```text
//! ContextRequest + Scope ─► hydrate ─► PromptIR ─► compile ─► CompiledPrompt ─► ChatModel
//!                             │                       │        (messages + tools
//!          sources, each under a deadline    budget (prompt-ir's compress),  + ExplainReport)
//!          (temporal, knowledge, semantic,   stable prefix first, recalled
//!           graph, vector, web)              data in delimited blocks
//! ```
//!
//! # Code map
//!
//! Modules import only from the ones listed before them (sources and providers, then config
//! and gathering, then hydrate, compile and ops), with no cycles.
//!
//! - `source`: [`SourceKind`], the common [`SourceParams`], [`SourceQuery`], [`SourceItem`],
//!   [`SourceOutput`], the object-safe [`ContextSource`] trait, and [`Degradation`] (what a
//!   source records when it does less than asked).
//! - `reach`: who a prompt may read ([`Reach`]: a private context, or a chat others share
//!   with the members who share their facts there) and the memory source's knobs
//!   ([`MemoryTuning`]), carried to every source by [`SourceQuery`].
//! - `provider`: [`SourceProvider`] (capabilities, builders per kind), source precedence
//!   ([`plan_sources`]), the [`Reranker`] family ([`NoopReranker`]).
//! - `rerank`: [`HttpReranker`], a client for the common `/rerank` APIs (Cohere, Jina,
//!   vLLM, text-embeddings-inference), behind the cargo feature `rerank-http`.
//! - `testing` (feature `testing`): the contracts every `Reranker` and `ContextSource`
//!   keeps, which each implementation's tests run.
//! - `http` (private): what the reranker and web search share: the URL check, the client,
//!   one request's transport.
//! - `web`: [`WebSearchSource`], web results from a SearxNG-compatible JSON API with their
//!   URLs as provenance, behind the cargo feature `web-search`.
//! - `docs`: a user's documents (the vector kind): [`split_document`] (text-splitter,
//!   with 1-based line ranges), [`add_document`] / [`list_documents`] /
//!   [`remove_documents`] over any `MemoryBackend` in the user's [`documents_scope`], and
//!   [`DocumentSource`], whose passages carry `path:start-end`; behind the cargo feature
//!   `documents`.
//! - `graph`: the entity graph (the graph kind): [`extract_entities`] (proper names without
//!   a model), entity tags on memories ([`with_entity_tags`], [`index_entities`]) and
//!   [`GraphSource`], which expands one hop from the question's entities with the path as
//!   each item's note; behind the cargo feature `graph`.
//! - `instructions`: a user's standing instructions ("always ...", "from now on ..."),
//!   recognised without a model ([`is_standing_instruction`]) and marked when stored
//!   ([`with_instruction_mark`]), so the knowledge source brings them to every prompt.
//! - `memory`: the memory-backed provider ([`memory_provider`], [`MemorySource`]) over any
//!   `Arc<dyn MemoryBackend>`, with the hybrid → keyword fallback recorded.
//! - `when`: the time a question asks about ([`TimeWindow`]), read from its words.
//! - `cues`: question understanding without a model ([`QueryCues`]: the time a question
//!   asks about, quoted phrases, names), which widens search and lifts matching candidates.
//! - `scoring`: the retrieval score (similarity, recency decay, importance, access), with
//!   its formula in the module docs.
//! - `render`: the `<recalled-memory>` blocks, [`escape_data`] and [`memory_block`].
//! - `tools`: [`memory_tools`] (`remember`, `recall`, `forget` as tool definitions).
//! - `cache`: what a provider's prompt cache can reuse: [`PromptPrint`], [`PreviousPrompt`],
//!   [`CacheExplain`].
//! - `config`: [`HydrationConfig`] and its builders, [`HydrateInput`], [`SessionState`].
//! - `report`: [`ExplainReport`], [`SourceReport`], [`ScoreExplain`].
//! - `gather` (private): routing each wanted kind to a source, running the sources under their
//!   deadlines with provider fallback, and each source's scoring, reranking and limits.
//! - `hydrate`: [`hydrate()`] → [`Hydrated`]: the fixed sections, one ranking across sources,
//!   near-duplicates, a section per candidate.
//! - `compile`: [`compile()`] → [`CompiledPrompt`]; the message layout is in its module docs.
//! - `chat`: [`ChatMessage`], [`ToolSpec`], [`ChatResponse`], the [`ChatModel`] trait, and
//!   [`ToolHandler`], which runs an application tool the model calls.
//! - `facts`: [`FactExtractor`]: after an exchange, a chat model lists durable facts and
//!   decides for each ADD, UPDATE (supersede), NOOP or INVALIDATE against the nearest
//!   current facts; an answer is checked in full before anything is written.
//! - `recall`: [`recall()`], the one ranking of a lookup for every door (the model's tool,
//!   `/recall`, `ava recall`, MCP `recall`).
//! - `ops`: [`Ops`] (`infer`, `remember`, `recall`, `forget`), running the
//!   memory tools and the application's.
//! - [`product`]: Ava's own settings (system prompt, tokenizer, default budget, the memory
//!   provider, how a chat turn is stored and the context it records), shared by the `ava` binary and the
//!   evaluation in `ava-eval`.
//!
//! # Invariants
//!
//! - Names traits from `memory-core` (`MemoryBackend`, `EmbeddingProvider`), never a concrete
//!   backend; concrete backends appear only in tests and benches.
//! - A slow, failing or missing source never fails a request: it is skipped or cut off at its
//!   deadline, and the report and the prompt say so. A degradation says the whole error
//!   chain ([`memory_core::ErrorChain`]), each cause once.
//! - Recalled data is always inside a `<recalled-memory>` block, escaped so it cannot close
//!   the block; it is never put in a system message.
//! - The first message (system prompt and constraints) and the tool specs depend only on the
//!   config: byte-identical across requests.
//! - A chat others share never reads a member's user-wide scope or documents unless the
//!   input's [`Reach`] names the member (who shared them); [`Ops`] sets its own reach on every
//!   input. Prompt text reaches traces only with [`HydrationConfig::trace_prompt_text`].
//! - Deterministic: the same inputs (and "now") give the same prompt and report, except the
//!   measured durations.
//!
//! ```no_run
//! # async fn demo(backend: std::sync::Arc<dyn memory_core::MemoryBackend>) -> hydrate::Result<()> {
//! use std::sync::Arc;
//! use hydrate::{HydrateInput, HydrationConfig, compile, hydrate, memory_provider};
//! use prompt_ir::{ContextRequest, TiktokenTokenizer, TokenBudget};
//!
//! let config = HydrationConfig::new("You are Ava.", Arc::new(TiktokenTokenizer::for_model("gpt-4o")?))
//!     .with_provider(memory_provider(backend, None));
//! let scope = memory_core::Scope::for_user("42")?.in_chat("7")?;
//! let input = HydrateInput::new(scope, ContextRequest::new("What is my cat called?", TokenBudget::new(8000)?));
//! let prompt = compile(&config, &hydrate(&config, &input).await?)?;
//! for d in &prompt.report.degradations { eprintln!("degraded: {d}"); }
//! # Ok(()) }
//! ```

mod cache;
mod chat;
mod compile;
mod config;
mod cues;
mod docs;
mod error;
mod facts;
mod gather;
mod graph;
mod http;
mod hydrate;
mod instructions;
mod memory;
mod ops;
mod passages;
pub mod product;
mod provider;
mod reach;
mod recall;
mod render;
mod report;
mod rerank;
pub mod scoring;
mod source;
#[cfg(feature = "testing")]
pub mod testing;
mod texts;
mod tools;
mod web;
mod when;

pub use cache::{CacheExplain, PreviousPrompt, PromptPrint};
pub use chat::{
    ChatMessage, ChatModel, ChatResponse, ChatRole, MESSAGE_OVERHEAD_TOKENS, ToolCall, ToolHandler,
    ToolSpec,
};
pub use compile::{CompiledPrompt, compile, prepare};
pub use config::{CONVERSATION_SHARE, HydrateInput, HydrationConfig, SessionState};
pub use cues::{CueMatch, CueWeights, QueryCues};
pub use docs::{
    Added, CHUNK_DESIRED_CHARS, CHUNK_MAX_CHARS, Change, Chunk, DOCUMENT_EXTENSIONS, DOCUMENT_TAG,
    DOCUMENTS_CHAT, DOCUMENTS_FEATURE, Document, DocumentFormat, DocumentInfo, DocumentSource,
    Listing, MAX_DOCUMENT_BYTES, Removed, add_document, documents_available, documents_scope,
    list_documents, read_document, remove_documents, split_document,
};
pub use error::{Error, Result};
pub use facts::{
    DEFAULT_EXTRACTION_TIMEOUT, Exchange, FactExtractor, LEARNED_CONTEXT, MAX_EXTRACT_BYTES,
    MAX_FACT_BYTES, MAX_FACTS,
};
pub use graph::{
    ENTITY_TAG_PREFIX, Entity, GRAPH_FEATURE, GraphSource, HOP_ENTITIES, Indexed, MAX_ENTITIES,
    MAX_ENTITY_KEY_BYTES, entity_key, entity_tags, extract_entities, graph_available,
    index_entities, with_entity_tags,
};
pub use hydrate::{Block, Hydrated, SectionInfo, hydrate};
pub use instructions::{
    INSTRUCTION_TAG, MAX_INSTRUCTION_CHARS, is_standing_instruction, with_instruction_mark,
};
pub use memory::{MemorySource, NEARBY_MINUTES, NEIGHBOUR_SHARE, lift_by_nearby, memory_provider};
/// What an API key is held as (the HTTP reranker's and web search's configs).
pub use memory_core::Secret;
pub use ops::{DEFAULT_MAX_STEPS, Inference, Ops, PrepareTimes, ToolRun};
pub use passages::{PASSAGE_BYTES, passages, score_passages};
pub use provider::{
    BuildContext, NoopReranker, ProviderCapabilities, Reranker, SourceBuilder, SourceProvider,
    plan_sources,
};
pub use reach::{MAX_NEIGHBOURS, MemoryTuning, NEARBY_LIFT, NEIGHBOURS, Reach, SearchPreference};
pub use recall::{RECALL_POOL, RecallRanking, recall};
pub use render::{DATA_TAG, DEFAULT_CONSTRAINTS, day_header, escape_data, memory_block, preview};
pub use report::{
    BudgetExplain, ExplainReport, ScoreExplain, SectionExplain, SourceReport, SourceStatus,
    ToolExplain,
};
pub use rerank::{HttpReranker, HttpRerankerConfig, RERANK_FEATURE, RerankApi};
pub use scoring::ScoringWeights;
pub use source::{
    ContextSource, Degradation, DegradationKind, Honours, QueryEmbeddings, SourceItem, SourceKind,
    SourceOutput, SourceParams, SourceQuery,
};
pub use texts::{TEXT_CACHE_BYTES, TextCache};
pub use tools::{FORGET, MAX_RECALL, RECALL, REMEMBER, memory_tools};
pub use web::{WEB_FEATURE, WebSearchConfig, WebSearchSource};
pub use when::TimeWindow;
