//! Scanning a block of vectors for a query: the integer scan of quantized codes
//! ([`Quantized`], [`QueryCodes`]) with its error bound, and making the best candidates
//! exact again ([`rescore`]) from the block's own `f32`s or the stored vectors
//! ([`VectorReader`]), so a quantized or dual block ranks as a whole one does.

use std::collections::HashMap;

use rusqlite::{CachedStatement, Connection, OptionalExtension};

use crate::kernels::{decode_f32s, dot_codes_fn, dot_fn, extend_unit, quantize};
use crate::vector_rows::memory_pk;

#[derive(Debug, Default)]
pub(crate) struct Quantized {
    /// `dims` codes per vector, each an `i8` in [-127, 127] held as its byte (two's
    /// complement), as vec0's `code` column stores them.
    pub(crate) codes: Vec<u8>,
    pub(crate) steps: Vec<f32>,
    /// The largest step: what bounds the scan's error.
    pub(crate) max_step: f32,
}

impl Quantized {
    /// Appends `unit` (a unit-length vector) as codes and its step.
    pub(crate) fn push(&mut self, unit: &[f32]) {
        let step = quantize(&mut self.codes, unit);
        self.push_step(step);
    }

    pub(crate) fn push_step(&mut self, step: f32) {
        self.steps.push(step);
        self.max_step = self.max_step.max(step);
    }
}

/// A unit-length query quantized for the integer scan: values, the step (component ≈
/// value × step) and the query's L1 norm. Values are at most `i32::MAX / (127 · dims)` in
/// magnitude, so no dot product with codes (at most 127) can overflow an i32.
pub(crate) struct QueryCodes {
    values: Vec<i16>,
    step: f32,
    l1: f32,
}

impl QueryCodes {
    pub(crate) fn new(unit: &[f32]) -> Self {
        let dims = unit.len().max(1);
        let cap = (i32::MAX as usize / (127 * dims)).min(i16::MAX as usize);
        // At most i16::MAX: exact as f32.
        let top = cap as f32;
        let m = unit.iter().fold(0f32, |a, x| a.max(x.abs()));
        let step = if m > 0.0 && m.is_finite() {
            m / top
        } else {
            0.0
        };
        let inv = if step > 0.0 { 1.0 / step } else { 0.0 };
        let values = unit
            .iter()
            .map(|x| {
                // In [-cap, cap] since |x| <= m; the cast cannot truncate.
                (x * inv).round().clamp(-top, top) as i16
            })
            .collect();
        Self {
            values,
            step,
            l1: unit.iter().map(|x| x.abs()).sum(),
        }
    }

    /// The approximate similarity of the vector with `codes` and `step`.
    pub(crate) fn similarity(
        &self,
        dot_codes: fn(&[u8], &[i16]) -> i32,
        codes: &[u8],
        step: f32,
    ) -> f32 {
        // The integer sum is exact; as f32 it is off by at most one part in 2^24.
        let sum = dot_codes(codes, &self.values) as f32;
        sum * step * self.step
    }

    /// How far an approximate similarity can be from the exact one, for vectors quantized
    /// with steps up to `max_step`: each code is off by at most half its step, each query
    /// value by half the query's, and a small allowance covers f32 rounding of both sums.
    pub(crate) fn error_bound(&self, dims: usize, max_step: f32) -> f32 {
        // A dimension count: exact as f32 for any real embedding.
        let d = dims as f32;
        let code_l1 = d.sqrt() + d * max_step / 2.0;
        self.l1 * max_step / 2.0 + self.step / 2.0 * code_l1 + 1e-4 + d * 2.5e-7
    }
}

/// vec0 serves rowid lookups directly; a partition filter alone would scan the table.
pub(crate) const VECTOR_BY_ROWID: &str = "SELECT embedding FROM memory_vec WHERE rowid = ?1";

/// Reads the stored vector of `pk` into `out` (`stmt` is [`VECTOR_BY_ROWID`]); `false` when
/// it has none of `out.len()` dimensions.
pub(crate) fn stored_vector(
    stmt: &mut CachedStatement<'_>,
    pk: i64,
    out: &mut [f32],
) -> rusqlite::Result<bool> {
    let blob: Option<Vec<u8>> = stmt.query_row([pk], |r| r.get(0)).optional()?;
    Ok(match blob.filter(|b| b.len() == out.len() * 4) {
        Some(b) => {
            decode_f32s(out, &b);
            true
        }
        None => false,
    })
}

/// Reads stored vectors by rowid for [`rescore`]: from vec0's shadow tables directly (its
/// rowid map, then the vector's bytes in its chunk through one blob handle moved from row
/// to row), a fraction of the cost of vec0's own point query, which opens a new blob
/// handle (a compiled statement) per call; through vec0 ([`VECTOR_BY_ROWID`]) whenever
/// the shadow tables do not look as expected.
pub(crate) struct VectorReader<'c> {
    conn: &'c Connection,
    /// `memory_vec_rowids`: a rowid's chunk and slot (`None`: not readable here).
    locate: Option<CachedStatement<'c>>,
    /// The handle on `memory_vec_vector_chunks00` and the chunk it is on.
    chunk: Option<(i64, rusqlite::blob::Blob<'c>)>,
    by_rowid: CachedStatement<'c>,
    bytes: Vec<u8>,
}

impl<'c> VectorReader<'c> {
    pub(crate) fn new(conn: &'c Connection) -> rusqlite::Result<Self> {
        Ok(Self {
            conn,
            locate: conn
                .prepare_cached(
                    "SELECT chunk_id, chunk_offset FROM memory_vec_rowids WHERE rowid = ?1",
                )
                .ok(),
            chunk: None,
            by_rowid: conn.prepare_cached(VECTOR_BY_ROWID)?,
            bytes: Vec::new(),
        })
    }

    /// Reads the vector of `rowid` into `out`; `false` when it has none of `out.len()`
    /// dimensions.
    pub(crate) fn read(&mut self, rowid: i64, out: &mut [f32]) -> rusqlite::Result<bool> {
        if self.read_direct(rowid, out).is_some() {
            return Ok(true);
        }
        stored_vector(&mut self.by_rowid, rowid, out)
    }

    /// [`Self::read`] from the shadow tables; `None` when that cannot answer.
    pub(crate) fn read_direct(&mut self, rowid: i64, out: &mut [f32]) -> Option<()> {
        let (chunk, slot): (i64, i64) = self
            .locate
            .as_mut()?
            .query_row([rowid], |r| Ok((r.get(0)?, r.get(1)?)))
            .ok()?;
        let width = out.len() * 4;
        let start = usize::try_from(slot).ok()?.checked_mul(width)?;
        let blob = match &mut self.chunk {
            Some((on, blob)) if *on == chunk => blob,
            Some((on, blob)) => {
                blob.reopen(chunk).ok()?;
                *on = chunk;
                blob
            }
            None => {
                let blob = self
                    .conn
                    .blob_open("main", "memory_vec_vector_chunks00", "vectors", chunk, true)
                    .ok()?;
                &mut self.chunk.insert((chunk, blob)).1
            }
        };
        if blob.len() < start.checked_add(width)? {
            return None;
        }
        self.bytes.resize(width, 0);
        blob.read_at_exact(&mut self.bytes, start).ok()?;
        decode_f32s(out, &self.bytes);
        Some(())
    }
}

/// At most this many candidates of a quantized scan are scored again exactly.
pub(crate) const MAX_RESCORED: usize = 4096;

/// What a scan found: every vector's similarity (unordered), and for a quantized block
/// the error bound of the similarities beyond the best it was asked to make exact.
#[derive(Debug)]
pub(crate) struct Scanned {
    pub(crate) all: Vec<(i64, f32)>,
    /// `Some(bound)`: apart from the best ones, each similarity is within `bound` of the
    /// exact one ([`rescore`] makes more of them exact).
    pub(crate) approximate: Option<f32>,
}

/// The integer scan: `keys[i]` with vector `i`'s approximate similarity to the query, and
/// the bound of the approximation.
fn approximate<K: Copy>(
    keys: impl Iterator<Item = K>,
    block: &Quantized,
    dims: usize,
    q: &[f32],
) -> (Vec<(K, f32)>, f32) {
    let query = QueryCodes::new(q);
    let dot_codes = dot_codes_fn();
    let all = keys
        .zip(block.codes.chunks_exact(dims))
        .zip(&block.steps)
        .map(|((key, codes), step)| (key, query.similarity(dot_codes, codes, *step)))
        .collect();
    (all, query.error_bound(dims, block.max_step))
}

/// A quantized block's similarities to `q` (unit length): every vector's approximation,
/// then the best `exact` made exact by [`rescore`].
pub(crate) fn quantized_scan(
    conn: &Connection,
    pks: &[i64],
    block: &Quantized,
    dims: usize,
    q: &[f32],
    exact: usize,
) -> rusqlite::Result<Scanned> {
    let (mut all, bound) = approximate(pks.iter().copied(), block, dims, q);
    rescore(conn, dims, q, &mut all, exact, bound)?;
    Ok(Scanned {
        all,
        approximate: Some(bound),
    })
}

/// A dual block's similarities to `q` (unit length): the integer scan, then the best
/// `exact` scored again from the block's own `f32`s, exactly as a whole block's scan
/// scores them (the same vectors, the same dot product, to the bit).
pub(crate) fn dual_scan(
    pks: &[i64],
    vecs: &[f32],
    block: &Quantized,
    dims: usize,
    q: &[f32],
    exact: usize,
) -> Scanned {
    let (mut all, bound) = approximate(0..pks.len(), block, dims, q);
    let dot = dot_fn();
    let memory = |i: usize| pks.get(i).map_or(-1, |rowid| memory_pk(*rowid));
    refine(&mut all, exact, bound, memory, |i| {
        Ok(vecs.get(i * dims..(i + 1) * dims).map(|v| dot(q, v)))
    })
    .unwrap_or(());
    Scanned {
        all: all
            .into_iter()
            .filter_map(|(i, s)| pks.get(i).map(|pk| (*pk, s)))
            .collect(),
        approximate: Some(bound),
    }
}

/// Makes the best `exact` of `items` (similarities to `q`, unit length, each within `bound`
/// of the exact one) exact: candidates in order of their similarity are scored again from
/// their stored vectors (normalised and multiplied as a whole block's scan does, so to the
/// bit the same) until the next one's similarity plus `bound` falls below the `exact`-th
/// best exact similarity, when no item left can be among the best `exact` (at most
/// [`MAX_RESCORED`] are scored again). `items` is reordered.
pub(crate) fn rescore(
    conn: &Connection,
    dims: usize,
    q: &[f32],
    items: &mut [(i64, f32)],
    exact: usize,
    bound: f32,
) -> rusqlite::Result<()> {
    let mut reader = VectorReader::new(conn)?;
    let dot = dot_fn();
    let mut scratch = Vec::with_capacity(dims);
    let mut raw = vec![0f32; dims];
    refine(items, exact, bound, memory_pk, |pk| {
        if !reader.read(pk, &mut raw)? {
            return Ok(None);
        }
        scratch.clear();
        extend_unit(&mut scratch, &raw, dot);
        Ok(Some(dot(q, &scratch)))
    })
}

/// [`rescore`]'s loop, with `exact_score` giving an item's exact similarity (`None`: it has
/// no vector; it keeps its approximation) and `memory` the memory an item's vector belongs
/// to. The best `exact` are counted by memory: a long memory's passages are one memory,
/// whose similarity is its best passage's, so the loop goes on until the best `exact`
/// memories are exact (an item left unscored is below all of them, so it can neither
/// enter nor raise them).
fn refine<K: Copy + Ord>(
    items: &mut [(K, f32)],
    exact: usize,
    bound: f32,
    memory: impl Fn(K) -> i64,
    mut exact_score: impl FnMut(K) -> rusqlite::Result<Option<f32>>,
) -> rusqlite::Result<()> {
    let exact = exact.max(1).min(items.len());
    let by_score = |a: &(K, f32), b: &(K, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
    // The best exact similarity of each memory scored so far, and the best `exact` of
    // them, highest first.
    let mut maxima: HashMap<i64, f32> = HashMap::new();
    let mut best: Vec<(f32, i64)> = Vec::with_capacity(exact + 1);
    let mut done = 0;
    let mut batch = (exact * 4).max(64);
    'outer: while done < items.len() && done < MAX_RESCORED {
        let end = (done + batch).min(items.len());
        let rest = &mut items[done..];
        if end - done < rest.len() {
            rest.select_nth_unstable_by(end - done - 1, by_score);
        }
        rest[..end - done].sort_by(by_score);
        for i in done..end {
            let Some(&(key, approx)) = items.get(i) else {
                break 'outer;
            };
            if i >= MAX_RESCORED
                || (best.len() >= exact
                    && best.last().is_some_and(|&(kth, _)| approx + bound < kth))
            {
                break 'outer;
            }
            let Some(score) = exact_score(key)? else {
                continue;
            };
            if let Some(slot) = items.get_mut(i) {
                slot.1 = score;
            }
            let m = memory(key);
            let max = maxima.entry(m).or_insert(score);
            if score < *max {
                continue;
            }
            *max = score;
            best.retain(|&(_, g)| g != m);
            let at = best.partition_point(|&(b, _)| b >= score);
            if at < exact {
                best.insert(at, (score, m));
                best.truncate(exact);
            }
        }
        done = end;
        batch *= 4;
    }
    Ok(())
}
