//! The vector block cache: each scope's vectors as one contiguous, normalised array in
//! process memory, so a per-scope top-k is a linear scan at memory speed instead of a
//! vec0 query. vec0 stays the durable copy and the path for scopes that do not fit.
//!
//! The cache lives with the connection's worker thread. Writes made through this store
//! update or drop the affected blocks; writes by any other connection (another process)
//! change SQLite's `data_version`, which is checked before every use and clears the cache.

use std::collections::HashMap;

use rusqlite::{Connection, OptionalExtension};

/// One scope's vectors.
#[derive(Debug)]
struct Block {
    pks: Vec<i64>,
    /// `pks.len() × dims` unit-length components, row-major.
    vecs: Vec<f32>,
    last_used: u64,
}

impl Block {
    fn bytes(&self) -> usize {
        self.vecs.len() * 4 + self.pks.len() * 8
    }
}

/// Per-scope vector blocks under a memory budget (least recently used blocks go first).
#[derive(Debug)]
pub(crate) struct VectorCache {
    dims: usize,
    budget: usize,
    used: usize,
    clock: u64,
    blocks: HashMap<i64, Block>,
    data_version: Option<i64>,
}

/// Dot product with eight independent accumulators, so the compiler can keep them in SIMD
/// lanes without reordering a single sum. The portable path (SSE2 on x86_64).
fn dot_portable(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// AVX2 + FMA: four 8-lane fused multiply-add accumulators (32 floats per step), which
/// keeps a scan of a scope's block close to memory bandwidth.
#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
#[target_feature(enable = "avx2,fma")]
fn dot_avx2(a: &[f32], b: &[f32]) -> f32 {
    use std::arch::x86_64::{
        __m256, _mm256_add_ps, _mm256_fmadd_ps, _mm256_loadu_ps, _mm256_setzero_ps,
        _mm256_storeu_ps,
    };
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let load = |s: &[f32]| -> __m256 {
        debug_assert!(s.len() >= 8);
        // SAFETY: every caller passes a slice of at least 8 floats, and AVX is enabled on
        // this function; `loadu` has no alignment requirement.
        unsafe { _mm256_loadu_ps(s.as_ptr()) }
    };
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    while i + 32 <= n {
        for (j, lane) in acc.iter_mut().enumerate() {
            let at = i + 8 * j;
            *lane = _mm256_fmadd_ps(load(&a[at..at + 8]), load(&b[at..at + 8]), *lane);
        }
        i += 32;
    }
    while i + 8 <= n {
        acc[0] = _mm256_fmadd_ps(load(&a[i..i + 8]), load(&b[i..i + 8]), acc[0]);
        i += 8;
    }
    let sum = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
    let mut lanes = [0.0f32; 8];
    // SAFETY: `lanes` holds exactly 8 floats; `storeu` has no alignment requirement.
    unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), sum) };
    let tail: f32 = a[i..].iter().zip(&b[i..]).map(|(x, y)| x * y).sum();
    lanes.iter().sum::<f32>() + tail
}

/// Which dot product this CPU runs, decided once per scan.
fn dot_fn() -> fn(&[f32], &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        #[allow(unsafe_code)]
        return |a, b| {
            // SAFETY: the CPU supports AVX2 and FMA, checked just above before this
            // function was handed out.
            unsafe { dot_avx2(a, b) }
        };
    }
    dot_portable
}

fn unit(v: &[f32]) -> Vec<f32> {
    let mut v = v.to_vec();
    memory_core::normalize(&mut v);
    v
}

impl VectorCache {
    pub(crate) fn new(dims: usize, budget_bytes: usize) -> Self {
        Self {
            dims,
            budget: budget_bytes,
            used: 0,
            clock: 0,
            blocks: HashMap::new(),
            data_version: None,
        }
    }

    /// Drops everything if another connection committed since we last looked.
    pub(crate) fn sync(&mut self, conn: &Connection) -> rusqlite::Result<()> {
        let v: i64 = conn.query_row("PRAGMA data_version", [], |r| r.get(0))?;
        if self.data_version != Some(v) {
            self.clear();
            self.data_version = Some(v);
        }
        Ok(())
    }

    pub(crate) fn clear(&mut self) {
        self.blocks.clear();
        self.used = 0;
    }

    pub(crate) fn invalidate(&mut self, scope_id: i64) {
        if let Some(b) = self.blocks.remove(&scope_id) {
            self.used -= b.bytes();
        }
    }

    /// Adds a freshly stored vector to its scope's block, if that block is loaded.
    pub(crate) fn append(&mut self, scope_id: i64, pk: i64, v: &[f32]) {
        if v.len() != self.dims {
            self.invalidate(scope_id);
            return;
        }
        if let Some(b) = self.blocks.get_mut(&scope_id) {
            b.pks.push(pk);
            b.vecs.extend(unit(v));
            self.used += self.dims * 4 + 8;
        }
        self.evict_to(self.budget);
    }

    fn evict_to(&mut self, budget: usize) {
        while self.used > budget {
            let Some((&oldest, _)) = self.blocks.iter().min_by_key(|(_, b)| b.last_used) else {
                break;
            };
            self.invalidate(oldest);
        }
    }

    /// How many vectors the scope's block holds, if it is loaded.
    pub(crate) fn loaded_len(&self, scope_id: i64) -> Option<usize> {
        self.blocks.get(&scope_id).map(|b| b.pks.len())
    }

    /// Similarity of `query` to every vector of the scope (unordered), or `None` when the
    /// scope's block does not fit the budget (the caller then asks vec0).
    pub(crate) fn scan(
        &mut self,
        conn: &Connection,
        scope_id: i64,
        query: &[f32],
        vector_count: usize,
    ) -> rusqlite::Result<Option<Vec<(i64, f32)>>> {
        let need = vector_count * (self.dims * 4 + 8);
        if need > self.budget || query.len() != self.dims {
            return Ok(None);
        }
        self.clock += 1;
        let clock = self.clock;
        if !self.blocks.contains_key(&scope_id) {
            self.evict_to(self.budget.saturating_sub(need));
            let block = self.load(conn, scope_id, clock)?;
            self.used += block.bytes();
            self.blocks.insert(scope_id, block);
        }
        let Some(block) = self.blocks.get_mut(&scope_id) else {
            return Ok(None);
        };
        block.last_used = clock;
        let q = unit(query);
        let dot = dot_fn();
        let hits: Vec<(i64, f32)> = block
            .pks
            .iter()
            .zip(block.vecs.chunks_exact(self.dims))
            .map(|(pk, v)| (*pk, dot(&q, v)))
            .collect();
        Ok(Some(hits))
    }

    fn load(&self, conn: &Connection, scope_id: i64, clock: u64) -> rusqlite::Result<Block> {
        // vec0 serves rowid lookups directly; a partition filter alone would scan the table.
        let mut pks_stmt = conn.prepare_cached(
            "SELECT pk FROM memories WHERE scope_id = ?1 AND embedded = 1 ORDER BY pk",
        )?;
        let pks: Vec<i64> = pks_stmt
            .query_map([scope_id], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        let mut vec_stmt =
            conn.prepare_cached("SELECT embedding FROM memory_vec WHERE rowid = ?1")?;
        let mut vecs = Vec::with_capacity(pks.len() * self.dims);
        let mut kept = Vec::with_capacity(pks.len());
        for pk in pks {
            let blob: Option<Vec<u8>> = vec_stmt.query_row([pk], |r| r.get(0)).optional()?;
            let Some(blob) = blob.filter(|b| b.len() == self.dims * 4) else {
                continue;
            };
            let v: Vec<f32> = blob
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            vecs.extend(unit(&v));
            kept.push(pk);
        }
        Ok(Block {
            pks: kept,
            vecs,
            last_used: clock,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_matches_the_naive_sum() {
        // Lengths around the 8- and 32-float steps, so every tail path runs.
        for n in [0, 1, 7, 8, 9, 31, 32, 33, 64, 384, 389] {
            let a: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin()).collect();
            let b: Vec<f32> = (0..n).map(|i| (i as f32 * 0.11).cos()).collect();
            let naive: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
            assert!((dot_fn()(&a, &b) - naive).abs() < 1e-3, "n={n}");
            assert!((dot_portable(&a, &b) - naive).abs() < 1e-3, "n={n}");
        }
    }
}
