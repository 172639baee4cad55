//! One module per `ava` subcommand.

pub(crate) mod chat;
pub(crate) mod context;
pub(crate) mod demo;
pub(crate) mod forget;
pub(crate) mod import;
pub(crate) mod recall;
pub(crate) mod remember;
pub(crate) mod run;
pub(crate) mod stats;

use memory_core::{Capability, MemoryBackend, SearchRequest};

/// The best search the store offers for `text`: hybrid when it has vectors, else keyword.
pub(crate) fn best_search(store: &dyn MemoryBackend, text: &str, limit: usize) -> SearchRequest {
    let req = if store.capabilities().supports(Capability::HybridSearch) {
        SearchRequest::hybrid(text)
    } else {
        SearchRequest::keyword(text)
    };
    req.limit(limit)
}
