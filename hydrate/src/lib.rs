//! Context hydration: sources and providers, `ContextRequest -> PromptIR -> CompiledPrompt`.
//! Not built yet: this crate is empty until its issue lands, and nothing depends on it.
