//! The vector block cache: each scope's vectors as one contiguous, normalised array in
//! process memory, so a per-scope top-k is a linear scan at memory speed instead of a
//! vec0 query. vec0 stays the durable copy and the path for scopes that do not fit.
//!
//! One cache serves the store's writer and its read connections, under a mutex. It knows
//! the write sequence (schema 4) its blocks are valid at. A write transaction of this
//! store bumps the sequence and, after its commit, updates or drops the affected blocks and
//! moves the cache to the new value ([`VectorCache::after_write`]); a search reads the
//! sequence in its own snapshot and drops the whole cache when it differs
//! ([`VectorCache::sync`]): another process wrote, or the search's snapshot is not the
//! one the blocks were read at.

use std::collections::{HashMap, HashSet};

use rusqlite::Connection;

use crate::kernels::{
    code_width, decode_code, decode_f32s, dot_codes_fn, dot_fn, extend_unit, unit,
};
use crate::scan::{
    Quantized, QueryCodes, Scanned, VECTOR_BY_ROWID, dual_scan, quantized_scan, rescore,
    stored_vector,
};
use crate::vector_rows::vector_rowids;

/// One scope's vectors.
#[derive(Debug)]
struct Block {
    /// Each vector's vec0 rowid: its memory's pk, or a further passage's
    /// ([`crate::vector_rows::vector_rowid`]).
    pks: Vec<i64>,
    vectors: Vectors,
    last_used: u64,
}

/// A block's vectors: whole, or quantized when the whole block would not fit the budget.
#[derive(Debug)]
enum Vectors {
    /// `pks.len() × dims` unit-length components, row-major.
    Full(Vec<f32>),
    /// Each unit-length vector as `dims` codes and a step (component ≈ code × step): a
    /// quarter of the memory. Searched by an integer scan whose best candidates are then
    /// scored exactly from the stored vectors (see [`VectorCache::scan`]).
    Quantized(Quantized),
    /// Both (mid-size scopes, see [`DUAL_FROM`]): the integer scan reads a quarter of the
    /// bytes, and its best candidates are scored exactly from the `f32`s in memory.
    Dual(Vec<f32>, Quantized),
}

impl Block {
    fn bytes(&self) -> usize {
        let vectors = match &self.vectors {
            Vectors::Full(v) => v.len() * 4,
            Vectors::Quantized(q) => q.codes.len() + q.steps.len() * 4,
            Vectors::Dual(v, q) => v.len() * 4 + q.codes.len() + q.steps.len() * 4,
        };
        vectors + self.pks.len() * 8
    }
}

/// What a write transaction did to the vectors, applied to the cache once it committed
/// ([`VectorCache::after_write`]). Applying it any earlier would let a search on another
/// connection load a block from before the commit and have it count as current.
#[derive(Debug, Default)]
pub(crate) struct CacheOps(Vec<CacheOp>);

#[derive(Debug)]
enum CacheOp {
    /// A vector stored for `pk`: appended to its scope's block, if that is loaded.
    Append { scope_id: i64, pk: i64, v: Vec<f32> },
    /// The scope's vectors changed otherwise: its block is dropped.
    Invalidate(i64),
}

impl CacheOps {
    /// A vector stored for a new memory.
    pub(crate) fn append(&mut self, scope_id: i64, pk: i64, v: Vec<f32>) {
        self.0.push(CacheOp::Append { scope_id, pk, v });
    }

    /// The scope's vectors changed (an update, a delete, a prune).
    pub(crate) fn invalidate(&mut self, scope_id: i64) {
        self.0.push(CacheOp::Invalidate(scope_id));
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
    /// The write sequence the blocks are valid at (`None`: not known yet).
    seq: Option<i64>,
    /// Scopes searched once by streaming (see [`VectorCache::scan`]).
    streamed: HashSet<i64>,
    /// Blocks loaded with at least this many vectors are dual ([`DUAL_FROM`]).
    dual_from: usize,
}

/// Scopes at least this big are held quantized even when they would fit whole: their scan is
/// bound by memory bandwidth, so a quarter of the bytes outweighs rescoring the best
/// candidates (measured: 100k vectors in one scope, semantic top-10 p50 11.5 ms whole, 2.3 ms
/// quantized; in scopes of 100 or 1,000 vectors the rescoring costs more than it saves).
pub(crate) const QUANTIZE_FROM: usize = STREAM_FIRST;

/// Scopes at least this big (and below [`QUANTIZE_FROM`]) keep integer codes beside their
/// `f32` vectors (a quarter more memory): a 1,000-vector scope's scan then reads 0.4 MB
/// instead of 1.5 MB, which is what a per-scope search spent most of its time on (a profile
/// of the 100k-in-100-scopes bench put 40% of all samples in the `f32` dot product). Below
/// it, sorting candidates and scoring them again would cost more than the bytes saved.
pub(crate) const DUAL_FROM: usize = 256;

/// Scopes at least this big are streamed on their first search instead of loaded.
pub(crate) const STREAM_FIRST: usize = 10_000;

/// A partition's chunks: slot count, validity bits, rowids and the vectors.
const CHUNKS_SQL: &str = "SELECT c.size, c.validity, c.rowids, v.vectors FROM memory_vec_chunks c \
     JOIN memory_vec_vector_chunks00 v ON v.rowid = c.chunk_id WHERE c.partition00 = ?1";

/// A partition's chunks as [`CHUNKS_SQL`], with the vectors' codes instead of the vectors.
const CODE_CHUNKS_SQL: &str = "SELECT c.size, c.validity, c.rowids, v.vectors FROM memory_vec_chunks c \
     JOIN memory_vec_vector_chunks01 v ON v.rowid = c.chunk_id WHERE c.partition00 = ?1";

/// The rowids a chunk read has seen, to refuse one seen twice. A big scope's rowids are
/// mostly its memories' pks, dense small integers: those go to a bitmap (a 100k scope's
/// check took a fifth of a cold search in a hash set); rowids far beyond the scope's size
/// (further passages, or pks left sparse by deletions) to a hash set.
#[derive(Debug)]
struct RowidSet {
    bits: Vec<u64>,
    /// Rowids below this go to `bits` (so it holds at most `cap / 64` words).
    cap: usize,
    others: HashSet<i64>,
    len: usize,
}

impl RowidSet {
    /// A set for a scope of `expected` vectors: a bitmap for rowids below 16 × `expected`
    /// + 65,536 (200 KB for 100k vectors).
    fn new(expected: usize) -> Self {
        Self {
            bits: Vec::new(),
            cap: expected.saturating_mul(16).saturating_add(1 << 16),
            others: HashSet::new(),
            len: 0,
        }
    }

    /// Adds `id`; `false` when it was there already.
    fn insert(&mut self, id: i64) -> bool {
        let fresh = match usize::try_from(id) {
            Ok(i) if i < self.cap => {
                let (word, bit) = (i / 64, 1u64 << (i % 64));
                if word >= self.bits.len() {
                    self.bits.resize(word + 1, 0);
                }
                match self.bits.get_mut(word) {
                    Some(w) if *w & bit == 0 => {
                        *w |= bit;
                        true
                    }
                    _ => false,
                }
            }
            _ => self.others.insert(id),
        };
        self.len += usize::from(fresh);
        fresh
    }
}

/// Which of vec0's vector columns a chunk read takes.
#[derive(Clone, Copy, Debug)]
enum Column {
    /// `embedding`: the vectors, `dims` little-endian `f32`s.
    Embedding,
    /// `code`: their codes ([`crate::kernels::encode_code`]).
    Code,
}

impl VectorCache {
    pub(crate) fn new(dims: usize, budget_bytes: usize) -> Self {
        Self {
            dims,
            budget: budget_bytes,
            used: 0,
            clock: 0,
            blocks: HashMap::new(),
            seq: None,
            streamed: HashSet::new(),
            dual_from: DUAL_FROM,
        }
    }

    /// Makes the cache valid for a snapshot at write sequence `seq`: everything is dropped
    /// unless the blocks were read at, or brought up to, that very sequence.
    pub(crate) fn sync(&mut self, seq: i64) {
        if self.seq != Some(seq) {
            self.clear();
            self.seq = Some(seq);
        }
    }

    /// After this store's own write transaction moved the sequence from `before` to
    /// `after` and committed: applies what the write did to the blocks, if they were valid
    /// right before it; otherwise (another process wrote in between, or a search of an
    /// older snapshot reset the cache) drops them.
    pub(crate) fn after_write(&mut self, before: i64, after: i64, ops: CacheOps) {
        if self.seq != Some(before) {
            self.clear();
            self.seq = None;
            return;
        }
        for op in ops.0 {
            match op {
                CacheOp::Append { scope_id, pk, v } => self.append(scope_id, pk, &v),
                CacheOp::Invalidate(scope_id) => self.invalidate(scope_id),
            }
        }
        self.seq = Some(after);
    }

    pub(crate) fn clear(&mut self) {
        self.blocks.clear();
        self.used = 0;
    }

    fn invalidate(&mut self, scope_id: i64) {
        if let Some(b) = self.blocks.remove(&scope_id) {
            self.used -= b.bytes();
        }
    }

    /// Adds a freshly stored vector to its scope's block, if that block is loaded.
    fn append(&mut self, scope_id: i64, pk: i64, v: &[f32]) {
        if v.len() != self.dims {
            self.invalidate(scope_id);
            return;
        }
        if let Some(b) = self.blocks.get_mut(&scope_id) {
            let before = b.bytes();
            b.pks.push(pk);
            match &mut b.vectors {
                Vectors::Full(vecs) => vecs.extend(unit(v)),
                Vectors::Quantized(q) => q.push(&unit(v)),
                Vectors::Dual(vecs, q) => {
                    let u = unit(v);
                    q.push(&u);
                    vecs.extend(u);
                }
            }
            self.used += b.bytes() - before;
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
    /// chunks cannot be read directly and the block does not fit the budget (the caller
    /// then asks vec0). The best `exact` similarities are exact; so are all of them unless
    /// the block is quantized.
    ///
    /// A scope whose vectors do not fit the budget whole, or of at least [`QUANTIZE_FROM`]
    /// vectors, is kept quantized (a quarter of the memory): an integer scan ranks every
    /// vector, and the best candidates are scored again from their stored vectors, in order,
    /// until the error bound of the scan proves that no other vector can be among the best
    /// `exact` (at most [`MAX_RESCORED`] of them).
    ///
    /// A scope of at least [`STREAM_FIRST`] vectors is not loaded on its first search in
    /// this process: that search streams over the codes stored beside the vectors (a
    /// quarter of their bytes) without keeping them and scores its best candidates again as
    /// a quantized block does (a one-shot `ava recall` then pays neither for a block it
    /// never reuses nor for reading the vectors); the second search loads the block from
    /// the same codes. A scope too big for the budget even quantized is always streamed.
    /// Where the codes cannot be read, the stream reads the vectors instead and computes
    /// what a whole block would, to the bit.
    pub(crate) fn scan(
        &mut self,
        conn: &Connection,
        scope_id: i64,
        query: &[f32],
        vector_count: usize,
        exact: usize,
    ) -> rusqlite::Result<Option<Scanned>> {
        if query.len() != self.dims {
            return Ok(None);
        }
        let q = unit(query);
        let whole = vector_count * (self.dims * 4 + 8);
        let quantize = whole > self.budget || vector_count >= QUANTIZE_FROM;
        let need = if quantize {
            vector_count * (self.dims + 12)
        } else if vector_count >= self.dual_from {
            whole + vector_count * (self.dims + 4)
        } else {
            whole
        };
        let loaded = self.blocks.contains_key(&scope_id);
        if !loaded
            && (need > self.budget
                || (vector_count >= STREAM_FIRST && self.streamed.insert(scope_id)))
        {
            if let Some((mut all, bound)) = self.stream_codes(conn, scope_id, vector_count, &q) {
                rescore(conn, self.dims, &q, &mut all, exact, bound)?;
                return Ok(Some(Scanned {
                    all,
                    approximate: Some(bound),
                }));
            }
            return Ok(self
                .stream_chunks(conn, scope_id, vector_count, &q)
                .map(|all| Scanned {
                    all,
                    approximate: None,
                }));
        }
        self.clock += 1;
        let clock = self.clock;
        if !loaded {
            self.evict_to(self.budget.saturating_sub(need));
            let block = if quantize {
                match self.load_quantized(conn, scope_id, vector_count, clock) {
                    Some(b) => b,
                    None => return Ok(None),
                }
            } else {
                let mut block = self.load(conn, scope_id, vector_count, clock)?;
                if vector_count >= self.dual_from
                    && let Vectors::Full(vecs) = &mut block.vectors
                {
                    let vecs = std::mem::take(vecs);
                    let mut q = Quantized::default();
                    vecs.chunks_exact(self.dims).for_each(|v| q.push(v));
                    block.vectors = Vectors::Dual(vecs, q);
                }
                block
            };
            self.used += block.bytes();
            self.blocks.insert(scope_id, block);
        }
        let Some(block) = self.blocks.get_mut(&scope_id) else {
            return Ok(None);
        };
        block.last_used = clock;
        let dot = dot_fn();
        match &block.vectors {
            Vectors::Full(vecs) => Ok(Some(Scanned {
                all: block
                    .pks
                    .iter()
                    .zip(vecs.chunks_exact(self.dims))
                    .map(|(pk, v)| (*pk, dot(&q, v)))
                    .collect(),
                approximate: None,
            })),
            Vectors::Quantized(codes) => {
                quantized_scan(conn, &block.pks, codes, self.dims, &q, exact).map(Some)
            }
            Vectors::Dual(vecs, codes) => Ok(Some(dual_scan(
                &block.pks, vecs, codes, self.dims, &q, exact,
            ))),
        }
    }

    /// `unit_query`'s similarity to every vector of the scope, read from vec0's chunks
    /// without keeping them; `None` as for [`Self::read_chunks`].
    fn stream_chunks(
        &self,
        conn: &Connection,
        scope_id: i64,
        expected: usize,
        unit_query: &[f32],
    ) -> Option<Vec<(i64, f32)>> {
        let dot = dot_fn();
        let mut scratch = Vec::with_capacity(self.dims);
        let mut hits = Vec::with_capacity(expected);
        self.read_chunks(conn, scope_id, expected, |id, v| {
            scratch.clear();
            extend_unit(&mut scratch, v, dot);
            hits.push((id, dot(unit_query, &scratch)));
        })?;
        Some(hits)
    }

    /// The scope's vectors: read from vec0's chunk tables in bulk (a 100k-vector scope in
    /// one pass over ~1,600 blobs), or, should those not look as this build of sqlite-vec
    /// lays them out, one rowid lookup per vector.
    fn load(
        &self,
        conn: &Connection,
        scope_id: i64,
        expected: usize,
        clock: u64,
    ) -> rusqlite::Result<Block> {
        if let Some(block) = self.load_chunks(conn, scope_id, expected, clock) {
            return Ok(block);
        }
        let mut pks_stmt = conn.prepare_cached(
            "SELECT pk, embedded FROM memories WHERE scope_id = ?1 AND embedded > 0 ORDER BY pk",
        )?;
        let memories: Vec<(i64, i64)> = pks_stmt
            .query_map([scope_id], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?;
        // Every vector's rowid: the memory's own, then its further passages'.
        let rowids = memories
            .into_iter()
            .flat_map(|(pk, n)| vector_rowids(pk, n))
            .collect();
        self.load_by_rowid(conn, rowids, clock)
    }

    /// The scope's block from vec0's chunks (see [`Self::read_chunks`]).
    fn load_chunks(
        &self,
        conn: &Connection,
        scope_id: i64,
        expected: usize,
        clock: u64,
    ) -> Option<Block> {
        let dot = dot_fn();
        let mut pks = Vec::with_capacity(expected);
        let mut vecs = Vec::with_capacity(expected * self.dims);
        self.read_chunks(conn, scope_id, expected, |id, v| {
            extend_unit(&mut vecs, v, dot);
            pks.push(id);
        })?;
        Some(Block {
            pks,
            vectors: Vectors::Full(vecs),
            last_used: clock,
        })
    }

    /// The scope's block quantized: its stored codes ([`Self::load_codes`]), or, should
    /// those not be readable, its vectors quantized again from vec0's chunks (see
    /// [`Self::read_chunks`]); `None` when neither can be read directly.
    fn load_quantized(
        &self,
        conn: &Connection,
        scope_id: i64,
        expected: usize,
        clock: u64,
    ) -> Option<Block> {
        if let Some(block) = self.load_codes(conn, scope_id, expected, clock) {
            return Some(block);
        }
        let dot = dot_fn();
        let mut pks = Vec::with_capacity(expected);
        let mut q = Quantized {
            codes: Vec::with_capacity(expected * self.dims),
            steps: Vec::with_capacity(expected),
            max_step: 0.0,
        };
        let mut scratch = Vec::with_capacity(self.dims);
        self.read_chunks(conn, scope_id, expected, |id, v| {
            scratch.clear();
            extend_unit(&mut scratch, v, dot);
            q.push(&scratch);
            pks.push(id);
        })?;
        Some(Block {
            pks,
            vectors: Vectors::Quantized(q),
            last_used: clock,
        })
    }

    /// Reads the partition's chunks of vec0's shadow tables directly and hands each stored
    /// vector to `each` (see [`Self::read_slots`]).
    fn read_chunks(
        &self,
        conn: &Connection,
        scope_id: i64,
        expected: usize,
        mut each: impl FnMut(i64, &[f32]),
    ) -> Option<()> {
        let mut v = vec![0f32; self.dims];
        self.read_slots(conn, scope_id, expected, Column::Embedding, |id, raw| {
            decode_f32s(&mut v, raw);
            each(id, &v);
        })
    }

    /// Reads the partition's chunks of vec0's shadow tables directly (`memory_vec_chunks`:
    /// slot validity bits and rowids; `memory_vec_vector_chunks00` and `01`: the vectors
    /// and their codes) and hands each stored entry of `column` to `each`, with its rowid;
    /// `expected` is how many vectors the scope holds ([`VECTOR_COUNT_SQL`], counted by
    /// the caller). `None` when anything is not as expected (another
    /// sqlite-vec layout, a rowid twice, fewer or more vectors than the scope has embedded
    /// memories): the caller then falls back to vec0's own queries, so what it gets is
    /// every embedded memory of the scope, or nothing.
    fn read_slots(
        &self,
        conn: &Connection,
        scope_id: i64,
        expected: usize,
        column: Column,
        mut each: impl FnMut(i64, &[u8]),
    ) -> Option<()> {
        let (sql, width) = match column {
            Column::Embedding => (CHUNKS_SQL, self.dims * 4),
            Column::Code => (CODE_CHUNKS_SQL, code_width(self.dims)),
        };
        let mut stmt = conn.prepare_cached(sql).ok()?;
        let mut rows = stmt.query([scope_id]).ok()?;
        let mut seen = RowidSet::new(expected);
        while let Some(row) = rows.next().ok()? {
            let size = usize::try_from(row.get::<_, i64>(0).ok()?).ok()?;
            let validity = row.get_ref(1).ok()?.as_blob().ok()?;
            let rowids = row.get_ref(2).ok()?.as_blob().ok()?;
            let entries = row.get_ref(3).ok()?.as_blob().ok()?;
            if validity.len() * 8 < size || rowids.len() < size * 8 || entries.len() < size * width
            {
                return None;
            }
            for slot in 0..size {
                if validity[slot / 8] >> (slot % 8) & 1 == 0 {
                    continue;
                }
                let id = i64::from_le_bytes(rowids[slot * 8..slot * 8 + 8].try_into().ok()?);
                if !seen.insert(id) || seen.len > expected {
                    return None;
                }
                each(id, &entries[slot * width..(slot + 1) * width]);
            }
        }
        (seen.len == expected).then_some(())
    }

    /// The integer scan of the scope's stored codes without keeping them: every vector's
    /// approximate similarity to `unit_query` and the bound of the approximation; `None`
    /// as for [`Self::read_slots`], or when a code is not one [`crate::kernels::encode_code`] writes.
    fn stream_codes(
        &self,
        conn: &Connection,
        scope_id: i64,
        expected: usize,
        unit_query: &[f32],
    ) -> Option<(Vec<(i64, f32)>, f32)> {
        let query = QueryCodes::new(unit_query);
        let dot_codes = dot_codes_fn();
        let mut hits = Vec::with_capacity(expected);
        let mut max_step = 0f32;
        self.read_codes(conn, scope_id, expected, |id, codes, step| {
            max_step = max_step.max(step);
            hits.push((id, query.similarity(dot_codes, codes, step)));
        })?;
        Some((hits, query.error_bound(self.dims, max_step)))
    }

    /// Hands each stored code of the scope to `each` (rowid, codes, step); `None` as for
    /// [`Self::read_slots`], or when a code is not one [`crate::kernels::encode_code`] writes.
    fn read_codes(
        &self,
        conn: &Connection,
        scope_id: i64,
        expected: usize,
        mut each: impl FnMut(i64, &[u8], f32),
    ) -> Option<()> {
        let mut sane = true;
        self.read_slots(
            conn,
            scope_id,
            expected,
            Column::Code,
            |id, entry| match decode_code(entry, self.dims) {
                Some((codes, step)) => each(id, codes, step),
                None => sane = false,
            },
        )?;
        sane.then_some(())
    }

    /// The scope's block quantized, from the stored codes (see [`Self::read_slots`]).
    fn load_codes(
        &self,
        conn: &Connection,
        scope_id: i64,
        expected: usize,
        clock: u64,
    ) -> Option<Block> {
        let mut pks = Vec::with_capacity(expected);
        let mut q = Quantized {
            codes: Vec::with_capacity(expected * self.dims),
            steps: Vec::with_capacity(expected),
            max_step: 0.0,
        };
        self.read_codes(conn, scope_id, expected, |id, codes, step| {
            q.codes.extend_from_slice(codes);
            q.push_step(step);
            pks.push(id);
        })?;
        Some(Block {
            pks,
            vectors: Vectors::Quantized(q),
            last_used: clock,
        })
    }

    fn load_by_rowid(
        &self,
        conn: &Connection,
        pks: Vec<i64>,
        clock: u64,
    ) -> rusqlite::Result<Block> {
        let mut vec_stmt = conn.prepare_cached(VECTOR_BY_ROWID)?;
        let mut vecs = Vec::with_capacity(pks.len() * self.dims);
        let mut kept = Vec::with_capacity(pks.len());
        let mut raw = vec![0f32; self.dims];
        let dot = dot_fn();
        for pk in pks {
            if stored_vector(&mut vec_stmt, pk, &mut raw)? {
                extend_unit(&mut vecs, &raw, dot);
                kept.push(pk);
            }
        }
        Ok(Block {
            pks: kept,
            vectors: Vectors::Full(vecs),
            last_used: clock,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::encode_code;
    use crate::scan::VectorReader;
    use crate::vector_rows::VECTOR_COUNT_SQL;

    /// An in-memory database with the store's `memories` columns the cache reads and a
    /// vec0 table of `dims` dimensions.
    fn memories_with_vectors(dims: usize) -> Connection {
        crate::schema::register_sqlite_vec();
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(
            "CREATE TABLE memories (pk INTEGER PRIMARY KEY, scope_id INTEGER, embedded INTEGER); \
             CREATE INDEX memories_unembedded ON memories (scope_id) WHERE embedded = 0;",
        )
        .unwrap();
        crate::schema::create_vec_table(&conn, dims).unwrap();
        conn
    }

    /// How many vectors the scope holds ([`VECTOR_COUNT_SQL`]: one per embedded
    /// memory and the further passages of long ones, counted from indexes).
    fn embedded_count(conn: &Connection, scope_id: i64) -> usize {
        let n: i64 = conn
            .query_row(VECTOR_COUNT_SQL, [scope_id], |r| r.get(0))
            .unwrap();
        usize::try_from(n).unwrap()
    }

    /// Writes `v` and its code under `rowid` in `scope`, as the store does.
    fn put_vector(conn: &Connection, rowid: i64, scope: i64, v: &[f32]) {
        let mut code = Vec::new();
        encode_code(&mut code, v);
        let blob: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        conn.execute(
            crate::schema::INSERT_VECTOR,
            rusqlite::params![rowid, scope, blob, code],
        )
        .unwrap();
    }

    /// The rowid set refuses a repeat wherever the rowid lies: in the bitmap, beyond it
    /// (a passage's rowid, a sparse pk) or below zero.
    #[test]
    fn the_rowid_set_refuses_repeats() {
        let mut set = RowidSet::new(100);
        let passage = 7 + (1_i64 << crate::vector_rows::PASSAGE_SHIFT);
        let ids = [0, 1, 63, 64, 65, 1_000, 65_000, 1 << 20, passage, -5];
        for id in ids {
            assert!(set.insert(id), "{id} is new");
        }
        for id in ids {
            assert!(!set.insert(id), "{id} is a repeat");
        }
        assert_eq!(set.len, ids.len());
        assert!(
            set.bits.len() * 64 <= set.cap + 64,
            "the bitmap stays bounded"
        );
    }

    /// A scope too big for the budget whole is kept quantized, and a mid-size one dual; the
    /// best similarities of either are still exactly those of the whole `f32` block: same
    /// memories, same scores to the bit.
    #[test]
    fn quantized_scans_find_the_exact_best() {
        let dims = 48;
        let conn = memories_with_vectors(dims);
        let mut seed = 7_u64;
        let mut next = move || {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            ((seed >> 33) as f32 / (1u64 << 31) as f32) - 0.5
        };
        let base: Vec<f32> = (0..dims).map(|_| next()).collect();
        let n = 3000_i64;
        for pk in 1..=n {
            // Every tenth vector close to `base`, so the best candidates crowd together.
            let v: Vec<f32> = if pk % 10 == 0 {
                base.iter().map(|x| x + 0.05 * next()).collect()
            } else {
                (0..dims).map(|_| next()).collect()
            };
            conn.execute("INSERT INTO memories VALUES (?1, 1, 1)", [pk])
                .unwrap();
            put_vector(&conn, pk, 1, &v);
        }
        let count = usize::try_from(n).unwrap();
        let quantized_bytes = count * (dims + 12);
        let mut whole = VectorCache::new(dims, 1 << 30);
        whole.dual_from = usize::MAX;
        let mut dual = VectorCache::new(dims, 1 << 30);
        let mut small = VectorCache::new(dims, quantized_bytes + 1024);
        // Too small for the block even quantized: every search streams the stored codes.
        let mut tiny = VectorCache::new(dims, 1024);
        assert!(
            count * (dims * 4 + 8) > small.budget,
            "the whole block must not fit"
        );
        let by_score = |a: &(i64, f32), b: &(i64, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        let top = |mut all: Vec<(i64, f32)>, k: usize| -> Vec<(i64, u32)> {
            all.sort_by(by_score);
            all.iter()
                .take(k)
                .map(|(pk, s)| (*pk, s.to_bits()))
                .collect()
        };
        let queries: Vec<Vec<f32>> = (0..6)
            .map(|i| {
                if i % 2 == 0 {
                    base.iter().map(|x| x + 0.02 * next()).collect()
                } else {
                    (0..dims).map(|_| next()).collect()
                }
            })
            .collect();
        for q in &queries {
            for k in [1, 10, 40] {
                let expected = whole.scan(&conn, 1, q, count, k).unwrap().unwrap();
                assert_eq!(expected.approximate, None);
                let expected = top(expected.all, k);
                let got = small.scan(&conn, 1, q, count, k).unwrap().unwrap();
                assert!(got.approximate.is_some());
                let got = top(got.all, k);
                assert_eq!(got, expected, "k={k}");
                let got = dual.scan(&conn, 1, q, count, k).unwrap().unwrap();
                assert!(got.approximate.is_some());
                assert_eq!(top(got.all, k), expected, "dual, k={k}");
                let got = tiny.scan(&conn, 1, q, count, k).unwrap().unwrap();
                assert!(got.approximate.is_some());
                assert_eq!(top(got.all, k), expected, "streamed codes, k={k}");
            }
        }
        assert_eq!(tiny.used, 0, "a stream keeps nothing");
        // Vectors replaced under their own rowids (as an update writes them) and new ones
        // in the freed slots: the codes follow, and streamed searches stay exact.
        for pk in (10..=600).step_by(10) {
            conn.execute("DELETE FROM memory_vec WHERE rowid = ?1", [pk])
                .unwrap();
            let v: Vec<f32> = if pk % 20 == 0 {
                (0..dims).map(|_| next()).collect()
            } else {
                base.iter().map(|x| x + 0.01 * next()).collect()
            };
            put_vector(&conn, pk, 1, &v);
        }
        let mut fresh = VectorCache::new(dims, 1 << 30);
        fresh.dual_from = usize::MAX;
        for q in &queries {
            for k in [1, 10, 40] {
                let expected = top(fresh.scan(&conn, 1, q, count, k).unwrap().unwrap().all, k);
                let got = tiny.scan(&conn, 1, q, count, k).unwrap().unwrap();
                assert_eq!(top(got.all, k), expected, "after updates, k={k}");
            }
        }
        assert_eq!(small.used, quantized_bytes, "the block is held quantized");
        assert_eq!(whole.used, count * (dims * 4 + 8));
        assert_eq!(
            dual.used,
            count * (dims * 4 + 8) + quantized_bytes - count * 8,
            "dual"
        );
    }

    /// The bulk read of vec0's chunks finds exactly what rowid lookups find, after
    /// deletes and across partitions (so a sqlite-vec upgrade that changes the layout is
    /// caught here, not by slow searches).
    #[test]
    fn chunk_reads_match_rowid_lookups() {
        let dims = 8;
        let conn = memories_with_vectors(dims);
        let vector = |pk: i64| -> Vec<f32> {
            (0..dims)
                .map(|d| (pk * 7 + d as i64) as f32 % 5.0 + 0.5)
                .collect()
        };
        // 174 vectors in scope 1 (three chunks of 64), 16 in scope 2, interleaved.
        for pk in 1..=190_i64 {
            let scope = if pk % 5 == 0 && pk > 110 { 2 } else { 1 };
            conn.execute(
                "INSERT INTO memories VALUES (?1, ?2, 1)",
                rusqlite::params![pk, scope],
            )
            .unwrap();
            put_vector(&conn, pk, scope, &vector(pk));
        }
        for pk in [3_i64, 64, 65, 120, 115] {
            conn.execute("DELETE FROM memories WHERE pk = ?1", [pk])
                .unwrap();
            conn.execute("DELETE FROM memory_vec WHERE rowid = ?1", [pk])
                .unwrap();
        }
        let cache = VectorCache::new(dims, 1 << 20);
        for scope in [1_i64, 2] {
            let pks: Vec<i64> = conn
                .prepare("SELECT pk FROM memories WHERE scope_id = ?1 ORDER BY pk")
                .unwrap()
                .query_map([scope], |r| r.get(0))
                .unwrap()
                .collect::<rusqlite::Result<_>>()
                .unwrap();
            assert!(pks.len() > 10, "scope {scope}");
            let bulk = cache
                .load_chunks(&conn, scope, embedded_count(&conn, scope), 0)
                .expect("the chunk layout is understood");
            let one_by_one = cache.load_by_rowid(&conn, pks, 0).unwrap();
            let full = |b: &Block| match &b.vectors {
                Vectors::Full(v) => v.clone(),
                Vectors::Quantized(_) | Vectors::Dual(..) => panic!("a whole block was asked for"),
            };
            let sorted = |b: &Block| {
                let vecs = full(b);
                let mut rows: Vec<(i64, Vec<u32>)> = b
                    .pks
                    .iter()
                    .zip(vecs.chunks_exact(dims))
                    .map(|(pk, v)| (*pk, v.iter().map(|x| x.to_bits()).collect()))
                    .collect();
                rows.sort();
                rows
            };
            assert_eq!(sorted(&bulk), sorted(&one_by_one), "scope {scope}");
            // Rescoring's direct reads find what vec0's point query finds.
            let mut reader = VectorReader::new(&conn).unwrap();
            let (mut direct, mut by_vec0) = (vec![0f32; dims], vec![0f32; dims]);
            let mut stmt = conn.prepare_cached(VECTOR_BY_ROWID).unwrap();
            for pk in &one_by_one.pks {
                assert!(reader.read_direct(*pk, &mut direct).is_some(), "{pk}");
                assert!(stored_vector(&mut stmt, *pk, &mut by_vec0).unwrap());
                assert_eq!(direct, by_vec0, "{pk}");
            }
            assert!(
                reader.read_direct(3, &mut direct).is_none(),
                "a deleted vector"
            );
            assert!(!reader.read(3, &mut direct).unwrap());
            // Streaming computes what a scan of the loaded block computes, to the bit.
            let q = unit(&vector(11));
            let mut streamed: Vec<(i64, u32)> = cache
                .stream_chunks(&conn, scope, embedded_count(&conn, scope), &q)
                .unwrap()
                .into_iter()
                .map(|(pk, s)| (pk, s.to_bits()))
                .collect();
            let mut scanned: Vec<(i64, u32)> = bulk
                .pks
                .iter()
                .zip(full(&bulk).chunks_exact(dims))
                .map(|(pk, v)| (*pk, dot_fn()(&q, v).to_bits()))
                .collect();
            streamed.sort();
            scanned.sort();
            assert_eq!(streamed, scanned, "scope {scope}");
            // The stored codes are what quantizing the stored vectors gives, to the bit.
            let stored = cache
                .load_codes(&conn, scope, embedded_count(&conn, scope), 0)
                .expect("the codes are readable");
            let Vectors::Quantized(codes) = &stored.vectors else {
                panic!("codes load as a quantized block");
            };
            let mut computed = Quantized::default();
            full(&bulk)
                .chunks_exact(dims)
                .for_each(|v| computed.push(v));
            assert_eq!(stored.pks, bulk.pks, "scope {scope}");
            assert_eq!(codes.codes, computed.codes, "scope {scope}");
            let bits = |q: &Quantized| q.steps.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(codes), bits(&computed), "scope {scope}");
        }
        // A memory stored without a vector (no embedder in that process) is not missed.
        let before = cache
            .load_chunks(&conn, 1, embedded_count(&conn, 1), 0)
            .unwrap()
            .pks
            .len();
        conn.execute("INSERT INTO memories VALUES (998, 1, 0)", [])
            .unwrap();
        assert_eq!(
            cache
                .load_chunks(&conn, 1, embedded_count(&conn, 1), 0)
                .unwrap()
                .pks
                .len(),
            before
        );
        // A memory whose vector is missing makes the bulk read step aside.
        conn.execute("INSERT INTO memories VALUES (999, 1, 1)", [])
            .unwrap();
        assert!(
            cache
                .load_chunks(&conn, 1, embedded_count(&conn, 1), 0)
                .is_none()
        );
    }
}
