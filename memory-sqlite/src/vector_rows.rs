//! How a memory's vectors lie in vec0 (schema 5): the rowid of each passage's vector, the
//! memory a rowid belongs to, a scope's vector count, and similarities folded by memory.
//! Writes (`sql`), the vector cache (`cache`) and searches all read this one layout.

use memory_core::passage_similarity;

/// A memory's passage `k` (k ≥ 1) has vec0 rowid `pk + k << PASSAGE_SHIFT`; its first
/// vector has rowid `pk`. `memories.embedded` holds how many vectors it has.
pub(crate) const PASSAGE_SHIFT: u32 = 40;

/// The low bits of a vec0 rowid: the memory's pk.
pub(crate) const PK_MASK: i64 = (1 << PASSAGE_SHIFT) - 1;

/// Most vectors one memory keeps (a 64 KiB text cut into 8-byte passages stays below it).
pub(crate) const MAX_VECTORS: usize = 1 << 20;

/// A vector as written to vec0, with its rowid.
pub(crate) type RowVector = (i64, Vec<f32>);

/// The vec0 rowid of vector `k` of memory `pk`; `None` when `pk` is too large to carry
/// passages (beyond 2^40 rows: such a memory keeps its first vector only).
pub(crate) fn vector_rowid(pk: i64, k: usize) -> Option<i64> {
    match k {
        0 => Some(pk),
        _ if pk > PK_MASK || k >= MAX_VECTORS => None,
        // k < 2^20, so the shifted value stays below 2^60.
        _ => Some(pk + ((k as i64) << PASSAGE_SHIFT)),
    }
}

/// The rowids of the `n` vectors memory `pk` has (`memories.embedded`), in order.
pub(crate) fn vector_rowids(pk: i64, n: i64) -> impl Iterator<Item = i64> {
    (0..usize::try_from(n).unwrap_or(0)).filter_map(move |k| vector_rowid(pk, k))
}

/// The memory a vec0 rowid belongs to.
pub(crate) fn memory_pk(rowid: i64) -> i64 {
    if rowid > PK_MASK {
        rowid & PK_MASK
    } else {
        rowid
    }
}

/// Whether any of `(rowid, similarity)` is a further passage's, so that some memory has
/// several.
pub(crate) fn has_passages(all: &[(i64, f32)]) -> bool {
    all.iter().any(|(rowid, _)| *rowid > PK_MASK)
}

/// How many vectors a scope holds: one per embedded memory, plus the further passages of
/// long ones. Every count reads an index only (the scope index, the partial indexes of
/// memories without a vector and of memories with several).
pub(crate) const VECTOR_COUNT_SQL: &str = "SELECT (SELECT count(*) FROM memories WHERE scope_id = ?1) \
          - (SELECT count(*) FROM memories WHERE scope_id = ?1 AND embedded = 0) \
          + (SELECT coalesce(sum(embedded - 1), 0) FROM memories WHERE scope_id = ?1 AND embedded > 1)";

/// Keeps, for each memory, one similarity from its vectors' `(rowid, similarity)`, keyed
/// by pk (unordered): its best passage's, less what its number of passages adds by chance
/// ([`passage_similarity`], with `deviation` the spread of similarities in the scope).
/// Callers skip it when nothing [`has_passages`].
pub(crate) fn best_per_memory(mut all: Vec<(i64, f32)>, deviation: f32) -> Vec<(i64, f32)> {
    all.iter_mut()
        .for_each(|(rowid, _)| *rowid = memory_pk(*rowid));
    all.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(b.1.total_cmp(&a.1)));
    let mut out: Vec<(i64, f32)> = Vec::with_capacity(all.len());
    let mut passages = 0;
    for (pk, sim) in all {
        match out.last_mut() {
            Some(last) if last.0 == pk => passages += 1,
            _ => {
                if let Some(last) = out.last_mut() {
                    last.1 = passage_similarity(last.1, passages, deviation);
                }
                out.push((pk, sim));
                passages = 1;
            }
        }
    }
    if let Some(last) = out.last_mut() {
        last.1 = passage_similarity(last.1, passages, deviation);
    }
    out
}
