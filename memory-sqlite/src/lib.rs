//! The durable embedded memory backend (SQLite + sqlite-vec + FTS5). Not built yet: this
//! crate is empty until its issue lands, and nothing depends on it.
