//! How many threads candle's CPU kernels use, settled once per process: without
//! `RAYON_NUM_THREADS`, candle works the count out again at every matrix multiply.

use std::ffi::OsStr;

/// The variable candle (and rayon) read their thread count from.
pub const THREADS_ENV: &str = "RAYON_NUM_THREADS";

/// What [`THREADS_ENV`] should be set to, given its value now: `None` to keep a positive
/// count the user chose, otherwise [`default_threads`].
///
/// candle 0.11 asks for its thread count at every matrix multiply. Without the variable,
/// on a machine whose CPUs report no `cpu_capacity` (most virtual machines), it reads and
/// parses `/proc/cpuinfo` each time: on the 2-core bench machine one sentence took 9.7 ms
/// to embed instead of 6.3 ms at the same two threads (BENCHMARKS.md, "Embeddings").
pub fn threads_to_set(now: Option<&OsStr>) -> Option<String> {
    let chosen = now
        .and_then(OsStr::to_str)
        .and_then(|v| v.trim().parse::<usize>().ok())
        .is_some_and(|n| n > 0);
    (!chosen).then(|| default_threads().to_string())
}

/// The machine's physical cores, the count candle picks when [`THREADS_ENV`] is missing,
/// and no more than the process may run at once (a container's CPU quota, an affinity
/// mask), which candle does not look at.
pub fn default_threads() -> usize {
    let allowed = std::thread::available_parallelism().map_or(usize::MAX, usize::from);
    num_cpus::get_physical().min(allowed).max(1)
}

/// Sets [`THREADS_ENV`] as [`threads_to_set`] says, so that the local embedder's kernels
/// stop re-reading `/proc/cpuinfo`. `ava` and `cargo xtask eval` call it first in `main`.
///
/// # Safety
///
/// The environment is shared by the whole process: call this before any other thread
/// starts (before an async runtime or a thread pool is built), as
/// [`std::env::set_var`] requires.
#[expect(
    unsafe_code,
    reason = "setting the environment is unsafe; the caller promises no other thread runs"
)]
pub unsafe fn settle_thread_count() {
    if let Some(n) = threads_to_set(std::env::var_os(THREADS_ENV).as_deref()) {
        // SAFETY: the caller guarantees that no other thread runs yet, so nothing reads or
        // writes the environment at the same time.
        unsafe { std::env::set_var(THREADS_ENV, n) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_is_the_physical_cores_within_what_the_process_may_use() {
        let n = default_threads();
        assert!(n >= 1);
        assert!(n <= num_cpus::get_physical().max(1), "{n}");
        if let Ok(allowed) = std::thread::available_parallelism() {
            assert!(n <= allowed.get(), "{n} > {allowed}");
        }
    }

    #[test]
    fn a_count_the_user_chose_is_kept_and_anything_else_replaced() {
        let physical = default_threads().to_string();
        assert_eq!(threads_to_set(None), Some(physical.clone()));
        assert_eq!(threads_to_set(Some(OsStr::new("1"))), None);
        assert_eq!(threads_to_set(Some(OsStr::new(" 3 "))), None);
        // candle and rayon ignore these and fall back to their own default.
        for ignored in ["", "0", "two", "-1"] {
            assert_eq!(
                threads_to_set(Some(OsStr::new(ignored))),
                Some(physical.clone()),
                "{ignored:?}"
            );
        }
    }
}
