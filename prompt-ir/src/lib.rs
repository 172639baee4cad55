//! The Prompt IR: labeled sections with provenance, token budgets, compose and compress.
//! Not built yet: this crate is empty until its issue lands, and nothing depends on it.
