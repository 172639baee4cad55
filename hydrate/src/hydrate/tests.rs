//! Unit tests of `hydrate`.

use super::*;

/// Prefix filtering finds exactly the pairs a comparison of every pair finds.
#[test]
fn prefix_filtered_near_duplicates_match_all_pairs() {
    let mut seed = 7_u64;
    let mut next = move || {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        seed >> 33
    };
    for threshold in [0.5, 0.7, 0.8, 0.9] {
        let mut sets: Vec<Vec<u64>> = Vec::new();
        for i in 0..300 {
            let len = 2 + (next() % 12) as usize;
            // A small vocabulary, so many sets overlap a lot; every tenth set repeats
            // an earlier one with one word more.
            let mut s: Vec<u64> = if i % 10 == 9 {
                let mut copy = sets[(next() as usize) % sets.len()].clone();
                copy.push(next() % 24);
                copy
            } else {
                (0..len).map(|_| next() % 24).collect()
            };
            s.sort_unstable();
            s.dedup();
            sets.push(s);
        }
        let mut brute = HashSet::new();
        let mut kept: Vec<usize> = Vec::new();
        for (i, a) in sets.iter().enumerate() {
            if a.len() < NEAR_DUPLICATE_MIN_WORDS {
                continue;
            }
            if kept.iter().any(|&k| jaccard(a, &sets[k]) >= threshold) {
                brute.insert(i);
            } else {
                kept.push(i);
            }
        }
        let fast = collapse(&sets, 0..sets.len(), &HashSet::new(), threshold);
        assert_eq!(fast, brute, "threshold {threshold}");
        let renamed = rarest_first(sets.clone());
        for (a, b) in sets.iter().zip(&renamed).take(40) {
            for (c, d) in sets.iter().zip(&renamed).take(40) {
                assert_eq!(jaccard(a, c), jaccard(b, d), "renaming keeps Jaccard");
            }
        }
        let rare = collapse(&renamed, 0..sets.len(), &HashSet::new(), threshold);
        assert_eq!(rare, brute, "threshold {threshold}, rarest first");
        assert!(
            !brute.is_empty(),
            "the data has near-duplicates at {threshold}"
        );
    }
}
