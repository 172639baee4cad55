//! The backend conformance suite: one named test per scenario, generated for any backend by
//! [`backend_conformance!`](crate::backend_conformance).
//!
//! A backend crate runs the whole suite from its `tests/` directory:
//!
//! ```text
//! use memory_core::testing::{Setup, TestBackend};
//!
//! async fn make(setup: Setup) -> TestBackend {
//!     TestBackend::new(std::sync::Arc::new(MyBackend::new(setup.embedder)))
//! }
//!
//! memory_core::backend_conformance!(make);
//! ```
//!
//! Each scenario becomes a `#[test]` named after it in a `conformance` module, so the test
//! output lists every scenario. A scenario that needs a capability the backend does not
//! advertise is skipped, and the skip is written straight to the process's stderr (past
//! the test harness's capture) so it is visible in every run.
//!
//! Alongside: [`embedder_contract`], the contract every `EmbeddingProvider` keeps, run by
//! each implementation's tests; [`Rng`], the deterministic generator the randomised scenarios and the benches
//! draw from, [`bench`](mod@bench), the data and `ava-bench:` lines the benches share, and
//! [`passage_truth`], what a semantic search of long memories should give.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "a test fails loudly on an unexpected error"
)]

pub mod bench;
mod embedder;
mod rng;
pub mod scenarios;
mod truth;

pub use embedder::embedder_contract;
pub use rng::Rng;
pub use truth::{PassageTruth, passage_truth};

use std::any::Any;
use std::future::Future;
use std::io::Write;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use crate::{Capability, EmbeddingProvider, HashingEmbedder, MemoryBackend};

/// Re-exported so the generated tests need no tokio dependency of their own.
pub use tokio;

/// Dimensions of the deterministic embedder the suite uses.
pub const SUITE_DIMS: usize = 64;

/// What the suite asks a backend factory for.
#[derive(Clone, Debug)]
pub struct Setup {
    /// The embedder to build the backend with; `None` asks for a keyword-only store.
    pub embedder: Option<Arc<dyn EmbeddingProvider>>,
}

/// A backend under test, plus anything that must live as long as it (a temp dir, a
/// server handle).
pub struct TestBackend {
    /// The backend.
    pub backend: Arc<dyn MemoryBackend>,
    guard: Option<Box<dyn Any + Send + Sync>>,
}

impl std::fmt::Debug for TestBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestBackend")
            .field("backend", &self.backend)
            .field("guard", &self.guard.is_some())
            .finish()
    }
}

impl TestBackend {
    /// Wraps a backend.
    pub fn new(backend: Arc<dyn MemoryBackend>) -> Self {
        Self {
            backend,
            guard: None,
        }
    }

    /// Keeps `guard` alive as long as the backend is under test.
    pub fn with_guard(mut self, guard: impl Any + Send + Sync) -> Self {
        self.guard = Some(Box::new(guard));
        self
    }
}

type BoxFactory =
    Arc<dyn Fn(Setup) -> Pin<Box<dyn Future<Output = TestBackend> + Send>> + Send + Sync>;

/// What a scenario gets: a backend built with the suite's embedder, and a way to build more.
#[derive(Clone)]
pub struct Ctx {
    /// The backend under test (built with [`Ctx::embedder`]).
    pub backend: Arc<dyn MemoryBackend>,
    /// The deterministic embedder the backend was built with.
    pub embedder: Arc<HashingEmbedder>,
    factory: BoxFactory,
    _guard: Arc<TestBackend>,
}

impl std::fmt::Debug for Ctx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ctx")
            .field("backend", &self.backend)
            .finish_non_exhaustive()
    }
}

impl Ctx {
    /// Builds another backend of the same kind.
    pub async fn make(&self, setup: Setup) -> TestBackend {
        (self.factory)(setup).await
    }

    /// The backend's name.
    pub fn name(&self) -> String {
        self.backend.info().name
    }
}

/// What a scenario concluded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Every check held.
    Passed,
    /// The backend does not advertise what the scenario needs.
    Skipped(Capability),
}

/// Runs one scenario against a fresh backend from `factory`, on its own runtime.
pub fn run<F, Fut, S, SFut>(scenario: &str, factory: F, body: S)
where
    F: Fn(Setup) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = TestBackend> + Send + 'static,
    S: FnOnce(Ctx) -> SFut,
    SFut: Future<Output = Outcome>,
{
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("build a tokio runtime for the conformance suite");
    let factory: BoxFactory = Arc::new(move |setup| Box::pin(factory(setup)));
    rt.block_on(async move {
        let embedder = Arc::new(HashingEmbedder::new(SUITE_DIMS).expect("suite dims are valid"));
        let subject = factory(Setup {
            embedder: Some(embedder.clone()),
        })
        .await;
        let cx = Ctx {
            backend: subject.backend.clone(),
            embedder,
            factory,
            _guard: Arc::new(subject),
        };
        let name = cx.name();
        if let Outcome::Skipped(cap) = body(cx).await {
            // Written past libtest's capture so skips are visible without --nocapture.
            let _ = writeln!(
                std::io::stderr(),
                "conformance: SKIPPED {scenario} on {name}: backend does not advertise {cap}"
            );
        }
    });
}

/// The ids of the memories of `scope` (up to 1,000), for checking that every acknowledged
/// write is there and nothing else.
///
/// # Panics
///
/// When the store cannot list them: a test fails loudly.
pub async fn ids_in(
    store: &dyn MemoryBackend,
    scope: &crate::Scope,
) -> std::collections::BTreeSet<crate::MemoryId> {
    #[expect(clippy::expect_used, reason = "a test helper fails loudly")]
    store
        .recent(scope, 1000, &crate::Filter::default())
        .await
        .expect("list the scope's memories")
        .into_iter()
        .map(|e| e.id)
        .collect()
}

/// Makes a FIFO (a named pipe) at `path` with `mkfifo`, for tests of what a store does when
/// given one instead of a file.
///
/// # Panics
///
/// When `mkfifo` cannot make it: a test fails loudly.
pub fn mkfifo(path: &std::path::Path) {
    let made = std::process::Command::new("mkfifo").arg(path).status();
    assert!(
        made.as_ref().is_ok_and(std::process::ExitStatus::success),
        "mkfifo {}: {made:?}",
        path.display()
    );
}

/// `n` distinct made-up words no memory holds (`zxaaaa`, `zxbaaa`, ...): the noise of a
/// huge query.
pub fn noise_words(n: usize) -> Vec<String> {
    (0..n)
        .map(|mut i| {
            let mut w = String::from("zx");
            for _ in 0..4 {
                w.push(char::from(b'a' + (i % 26) as u8));
                i /= 26;
            }
            w
        })
        .collect()
}

/// A query of 100,000 words for a store's keyword search ([`rare_word_query`]).
#[derive(Debug)]
pub struct RareWordQuery {
    /// The memory holding the one rare word, `quetzalcoatl`.
    pub rare: crate::MemoryId,
    /// Noise and the rare word.
    pub only_rare: String,
    /// Noise, the rare word, `garden` (held by every memory) and `topic0`..`topic99`.
    pub with_topics: String,
}

impl RareWordQuery {
    /// Checks that a keyword search of `store` in `scope` for either query finds the rare
    /// memory.
    ///
    /// # Panics
    ///
    /// When a search fails or misses it: that is the point.
    pub async fn assert_found(&self, store: &dyn MemoryBackend, scope: &crate::Scope) {
        for text in [&self.only_rare, &self.with_topics] {
            let request = crate::SearchRequest::keyword(text.as_str()).limit(100);
            #[expect(clippy::expect_used, reason = "a test helper fails loudly")]
            let hits = store.search(scope, &request).await.expect("search");
            assert!(
                hits.iter().any(|h| h.entry.id == self.rare),
                "{} hits, none the rare word's",
                hits.len()
            );
        }
    }
}

/// Stores 100 notes on topics in a garden and one on the rare `quetzalcoatl` in `scope`,
/// and makes the two huge queries a keyword search must bound and still answer.
///
/// # Panics
///
/// When the store refuses them: a test fails loudly.
pub async fn rare_word_query(store: &dyn MemoryBackend, scope: &crate::Scope) -> RareWordQuery {
    let mut memories: Vec<crate::NewMemory> = (0..100)
        .map(|k| {
            crate::NewMemory::new(format!(
                "a note on topic{k} and topic{} by the garden",
                k + 1
            ))
        })
        .collect();
    memories.push(crate::NewMemory::new(
        "the quetzalcoatl statue stands in the garden",
    ));
    #[expect(clippy::expect_used, reason = "a test helper fails loudly")]
    let stored = store
        .store_batch(scope, memories)
        .await
        .expect("store the notes");
    let mut words = noise_words(100_000);
    words.insert(50_000, "quetzalcoatl".into());
    let only_rare = words.join(" ");
    words.insert(70_000, "garden".into());
    words.extend((0..100).map(|k| format!("topic{k}")));
    RareWordQuery {
        rare: stored[100].id,
        only_rare,
        with_topics: words.join(" "),
    }
}

/// Comma-separated seeds that replay or widen a property test ([`property_seeds`]).
pub const PROPERTY_SEEDS_ENV: &str = "AVA_PROPERTY_SEEDS";

/// The seeds a property test runs: those [`PROPERTY_SEEDS_ENV`] lists (what does not parse
/// as a number is passed over), else `default`. Each failure should name its seed.
pub fn property_seeds(default: &[u64]) -> Vec<u64> {
    match std::env::var(PROPERTY_SEEDS_ENV) {
        Ok(listed) => listed
            .split(',')
            .filter_map(|x| x.trim().parse().ok())
            .collect(),
        Err(_) => default.to_vec(),
    }
}

/// Set to `1` (CI does) to make a missing service, file or program a test failure, not a
/// skip.
pub const REQUIRE_SERVICES_ENV: &str = "AVA_REQUIRE_SERVICES";

/// Whether `AVA_REQUIRE_SERVICES=1` asks every test to run (CI sets it).
pub fn services_required() -> bool {
    std::env::var(REQUIRE_SERVICES_ENV).is_ok_and(|v| v == "1")
}

/// The one rule for a test that needs what this machine lacks (a server, a file, a
/// program): with `AVA_REQUIRE_SERVICES=1` it fails, naming what is `missing` and `how` to
/// provide it; otherwise it writes one line straight to stderr (past libtest's capture),
/// once per process for each `missing`, saying `who`'s test is skipped and how to run it,
/// and the caller returns.
///
/// # Panics
///
/// When `AVA_REQUIRE_SERVICES=1`: that is the point.
pub fn skip_or_fail(who: &str, missing: &str, how: &str) {
    static SAID: Mutex<Vec<String>> = Mutex::new(Vec::new());
    if services_required() {
        panic!("{who}: {missing}, but {REQUIRE_SERVICES_ENV}=1 requires it; {how}");
    }
    let mut said = SAID
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if !said.iter().any(|m| m == missing) {
        said.push(missing.to_owned());
        let _ = writeln!(
            std::io::stderr(),
            "{who}: SKIPPED: {missing}; {how} to run it"
        );
    }
}

/// The value of the environment variable `var` if it is set and not empty; otherwise
/// `None` after [`skip_or_fail`] (a failure under `AVA_REQUIRE_SERVICES=1`) saying to set it
/// to `set_to`.
pub fn env_or_skip(var: &str, who: &str, set_to: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(v) if !v.trim().is_empty() => Some(v),
        _ => {
            skip_or_fail(
                who,
                &format!("{var} is not set"),
                &format!("set it to {set_to}"),
            );
            None
        }
    }
}

/// Generates the conformance suite for a backend: a `conformance` module with one
/// `#[test]` per scenario. `$factory` is a path to an `async fn(Setup) -> TestBackend`.
///
/// For a backend that needs a live service, name the environment variable holding its
/// address: `backend_conformance!(make, requires_env = "MEMORY_PG_URL", set_to = "a
/// Postgres URL")`. Without it set, every scenario returns at once and one line per process
/// on stderr says they were skipped (see [`env_or_skip`]).
#[macro_export]
macro_rules! backend_conformance {
    ($factory:path) => {
        $crate::__conformance_tests!(@suite $factory, ::core::option::Option::None);
    };
    ($factory:path, requires_env = $var:literal, set_to = $what:literal $(,)?) => {
        $crate::__conformance_tests!(
            @suite $factory,
            ::core::option::Option::Some(($var, $what))
        );
    };
    ($factory:path, requires_env = $var:literal $(,)?) => {
        $crate::__conformance_tests!(
            @suite $factory,
            ::core::option::Option::Some(($var, "the service's address"))
        );
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_tests {
    (@suite $factory:path, $env:expr) => {
        $crate::__conformance_tests!($factory, $env;
            info_agrees_with_capabilities,
            store_get_round_trip,
            batch_store_preserves_order,
            batch_store_is_atomic,
            explicit_id_conflict_is_rejected,
            store_each_reports_each_memory,
            semantic_search_ranks_nearest_first,
            semantic_threshold_drops_weak_hits,
            search_by_precomputed_vector,
            keyword_search_ranks_matches,
            hybrid_search_fuses_both_signals,
            tag_filters_any_and_all,
            recent_is_newest_first,
            time_filters_bound_creation_time,
            role_filter_keeps_those_speakers,
            update_reindexes_content,
            delete_purges_every_index,
            delete_scope_removes_only_that_scope,
            prune_ttl_removes_expired,
            prune_max_count_keeps_newest,
            prune_decay_spares_pinned_and_strong,
            prune_dry_run_reports_what_a_run_removes,
            remembering_a_fact_twice_keeps_one,
            concurrent_remembers_of_one_fact_keep_one,
            superseding_keeps_the_history,
            consolidation_merges_duplicates_and_keeps_the_history,
            recall_bumps_access_counts,
            a_restored_memory_keeps_its_access_history,
            superseded_memories_are_hidden_by_default,
            foreign_scope_ids_are_not_found,
            scope_isolation_randomized,
            concurrent_tasks_never_lose_or_leak,
            dimension_mismatch_is_rejected,
            unicode_content_round_trips,
            empty_and_oversized_content_rejected,
            oversized_message_stored_in_linked_parts,
            long_memory_found_by_any_passage,
            hybrid_search_counts_a_long_memorys_passages,
            invalid_requests_are_rejected,
            unsupported_capabilities_are_typed_errors,
            user_scopes_lists_only_that_user,
            leases_are_held_by_one_holder_at_a_time,
            records_keep_the_newest_of_each_kind_per_scope,
            records_go_with_their_scopes_deletions,
            records_follow_the_memories_they_quote,
            superseded_by_names_a_memory_of_the_scope,
            reclaim_after_a_deletion_keeps_what_stays,
        );
    };
    ($factory:path, $env:expr; $($name:ident),* $(,)?) => {
        mod conformance {
            #[allow(unused_imports, reason = "a factory may need nothing from its module")]
            use super::*;
            $(
                #[test]
                fn $name() {
                    let env: ::core::option::Option<(&str, &str)> = $env;
                    if let ::core::option::Option::Some((var, set_to)) = env
                        && $crate::testing::env_or_skip(var, env!("CARGO_PKG_NAME"), set_to)
                            .is_none()
                    {
                        return;
                    }
                    $crate::testing::run(
                        stringify!($name),
                        $factory,
                        $crate::testing::scenarios::$name,
                    );
                }
            )*
        }
    };
}
