//! Finding memories: semantic, keyword and hybrid search, filters, recency, long memories by passage, and what a recall counts.

use super::*;

async fn seed_topics(b: &dyn MemoryBackend, s: &Scope) -> Vec<MemoryEntry> {
    let texts = [
        "the cat sat on the mat in the kitchen",
        "quarterly stock market report for investors",
        "recipe for sourdough bread with rye flour",
        "the dog chased the cat around the garden",
        "notes from the quantum physics lecture",
    ];
    b.store_batch(s, texts.iter().map(|t| NewMemory::new(*t)).collect())
        .await
        .unwrap()
}

/// The most similar memory comes first, and scores never increase down the list.
pub async fn semantic_search_ranks_nearest_first(cx: Ctx) -> Outcome {
    require!(cx, Capability::SemanticSearch);
    let b = &*cx.backend;
    let s = scope("frank", None);
    let seeded = seed_topics(b, &s).await;
    let hits = b
        .search(
            &s,
            &SearchRequest::semantic("a cat on the kitchen mat").limit(3),
        )
        .await
        .unwrap();
    assert_eq!(hits.len(), 3);
    assert_eq!(hits[0].entry.id, seeded[0].id, "nearest first: {hits:#?}");
    assert!(
        hits.windows(2).all(|w| w[0].score >= w[1].score),
        "scores descend"
    );
    for h in &hits {
        let sem = h
            .breakdown
            .semantic
            .expect("semantic hits carry their similarity");
        assert!(
            (sem - h.score).abs() < 1e-4,
            "semantic score is the similarity"
        );
        assert!((-1.0001..=1.0001).contains(&h.score));
    }
    Outcome::Passed
}

/// Hits below the threshold are left out, even if fewer than `limit` remain.
pub async fn semantic_threshold_drops_weak_hits(cx: Ctx) -> Outcome {
    require!(cx, Capability::SemanticSearch);
    let b = &*cx.backend;
    let s = scope("grace", None);
    let seeded = seed_topics(b, &s).await;
    let q = SearchRequest::semantic("recipe for sourdough bread with rye flour")
        .limit(5)
        .threshold(0.99);
    let hits = b.search(&s, &q).await.unwrap();
    assert_eq!(
        hit_ids(&hits),
        vec![seeded[2].id],
        "only the identical text passes 0.99"
    );
    let none = b
        .search(
            &s,
            &SearchRequest::semantic("zebra xylophone").threshold(0.5),
        )
        .await
        .unwrap();
    assert!(
        none.is_empty(),
        "unrelated query with a threshold finds nothing: {none:#?}"
    );
    Outcome::Passed
}

/// A precomputed query vector of the store's space works like the text it came from.
pub async fn search_by_precomputed_vector(cx: Ctx) -> Outcome {
    require!(cx, Capability::SemanticSearch);
    let b = &*cx.backend;
    let s = scope("heidi", None);
    let seeded = seed_topics(b, &s).await;
    let v = cx.embedder.embed_sync("quantum physics lecture");
    let hits = b
        .search(&s, &SearchRequest::vector(v).limit(2))
        .await
        .unwrap();
    assert_eq!(hits[0].entry.id, seeded[4].id);
    // A memory stored with a precomputed vector is found by that vector.
    let pre = cx.embedder.embed_sync("precomputed vectors are accepted");
    let e = b
        .store(
            &s,
            NewMemory::new("stored with its own vector").with_embedding(pre.clone()),
        )
        .await
        .unwrap();
    let hits = b
        .search(&s, &SearchRequest::vector(pre).limit(1))
        .await
        .unwrap();
    assert_eq!(hits[0].entry.id, e.id);
    Outcome::Passed
}

/// Keyword search finds only memories sharing a word, best match normalised to 1.
pub async fn keyword_search_ranks_matches(cx: Ctx) -> Outcome {
    require!(cx, Capability::KeywordSearch);
    let b = &*cx.backend;
    let s = scope("ivan", None);
    let seeded = seed_topics(b, &s).await;
    let hits = b
        .search(&s, &SearchRequest::keyword("sourdough rye").limit(10))
        .await
        .unwrap();
    assert_eq!(hit_ids(&hits), vec![seeded[2].id]);
    assert!(
        (hits[0].score - 1.0).abs() < 1e-4,
        "best keyword hit scores 1"
    );
    assert!(hits[0].breakdown.keyword_raw.is_some_and(|r| r > 0.0));
    let cats = b
        .search(&s, &SearchRequest::keyword("cat").limit(10))
        .await
        .unwrap();
    let got: BTreeSet<_> = hit_ids(&cats).into_iter().collect();
    assert_eq!(got, BTreeSet::from([seeded[0].id, seeded[3].id]));
    assert!(cats.windows(2).all(|w| w[0].score >= w[1].score));
    let none = b
        .search(&s, &SearchRequest::keyword("zebra"))
        .await
        .unwrap();
    assert!(none.is_empty());
    Outcome::Passed
}

/// Hybrid hits carry both parts of their score, and agreement wins.
pub async fn hybrid_search_fuses_both_signals(cx: Ctx) -> Outcome {
    require!(cx, Capability::HybridSearch);
    let b = &*cx.backend;
    let s = scope("judy", None);
    let seeded = seed_topics(b, &s).await;
    let hits = b
        .search(&s, &SearchRequest::hybrid("dog chased cat garden").limit(5))
        .await
        .unwrap();
    assert_eq!(hits[0].entry.id, seeded[3].id, "{hits:#?}");
    assert!(hits[0].breakdown.semantic.is_some() && hits[0].breakdown.keyword.is_some());
    assert!(hits.windows(2).all(|w| w[0].score >= w[1].score));
    assert!(hits.iter().all(|h| (0.0..=1.0001).contains(&h.score)));
    Outcome::Passed
}

/// Tag filters: any matches one tag, all needs every tag; works for listing and search.
pub async fn tag_filters_any_and_all(cx: Ctx) -> Outcome {
    require!(cx, Capability::TagFilter);
    let b = &*cx.backend;
    let s = scope("ken", None);
    let a = b
        .store(
            &s,
            NewMemory::new("red apple")
                .with_tags(tags(["fruit", "red"]).unwrap())
                .at(t0()),
        )
        .await
        .unwrap();
    let c = b
        .store(
            &s,
            NewMemory::new("red car")
                .with_tags(tags(["red"]).unwrap())
                .at(t0().plus(DAY)),
        )
        .await
        .unwrap();
    let _p = b
        .store(
            &s,
            NewMemory::new("green pear")
                .with_tags(tags(["fruit"]).unwrap())
                .at(t0().plus(DAY * 2)),
        )
        .await
        .unwrap();
    b.store(
        &s,
        NewMemory::new("untagged red thing").at(t0().plus(DAY * 3)),
    )
    .await
    .unwrap();

    let any = b
        .by_tags(&s, &TagQuery::any([tag("red")]), 10)
        .await
        .unwrap();
    assert_eq!(ids(&any), vec![c.id, a.id], "newest first");
    let all = b
        .by_tags(&s, &TagQuery::all([tag("red"), tag("fruit")]), 10)
        .await
        .unwrap();
    assert_eq!(ids(&all), vec![a.id]);
    let either = b
        .by_tags(&s, &TagQuery::any([tag("red"), tag("fruit")]), 10)
        .await
        .unwrap();
    assert_eq!(either.len(), 3);
    let none = b
        .by_tags(&s, &TagQuery::any([tag("blue")]), 10)
        .await
        .unwrap();
    assert!(none.is_empty());
    if b.capabilities().supports(Capability::KeywordSearch) {
        let filter = Filter {
            tags: Some(TagQuery::all([tag("red")])),
            ..Filter::default()
        };
        let hits = b
            .search(&s, &SearchRequest::keyword("red").filter(filter))
            .await
            .unwrap();
        let got: BTreeSet<_> = hit_ids(&hits).into_iter().collect();
        assert_eq!(
            got,
            BTreeSet::from([a.id, c.id]),
            "untagged match is filtered out"
        );
    }
    Outcome::Passed
}

/// `recent` returns the newest memories, newest first, up to the limit.
pub async fn recent_is_newest_first(cx: Ctx) -> Outcome {
    let b = &*cx.backend;
    let s = scope("leo", None);
    // Stored out of order on purpose.
    let order = [3u32, 0, 4, 1, 2];
    let mut by_day = HashMap::new();
    for d in order {
        let e = b
            .store(
                &s,
                NewMemory::new(format!("day {d}")).at(t0().plus(DAY * d)),
            )
            .await
            .unwrap();
        by_day.insert(d, e.id);
    }
    let got = b.recent(&s, 3, &Filter::default()).await.unwrap();
    assert_eq!(ids(&got), vec![by_day[&4], by_day[&3], by_day[&2]]);
    let all = b.recent(&s, 100, &Filter::default()).await.unwrap();
    assert_eq!(all.len(), 5);
    assert!(all.windows(2).all(|w| w[0].created_at >= w[1].created_at));
    let facts = Filter {
        kinds: vec![MemoryKind::Fact],
        ..Filter::default()
    };
    assert!(
        b.recent(&s, 10, &facts).await.unwrap().is_empty(),
        "kind filter applies"
    );
    Outcome::Passed
}

/// A role filter keeps the messages of those speakers, in `recent` and in every search
/// mode the backend has; a memory without a role never matches one.
pub async fn role_filter_keeps_those_speakers(cx: Ctx) -> Outcome {
    let b = &*cx.backend;
    let s = scope("rhea", None);
    let said = |text: &str, role: Option<Role>, day: u32| {
        let m = NewMemory::new(text).at(t0().plus(DAY * day));
        match role {
            Some(r) => m.with_role(r),
            None => m,
        }
    };
    let user = b
        .store(&s, said("my garden has red roses", Some(Role::User), 0))
        .await
        .unwrap();
    let agent = b
        .store(
            &s,
            said("red roses like a sunny garden", Some(Role::Assistant), 1),
        )
        .await
        .unwrap();
    b.store(&s, said("red roses in the garden, noted", None, 2))
        .await
        .unwrap();
    let only = |roles: Vec<Role>| Filter {
        roles,
        ..Filter::default()
    };
    let got = b.recent(&s, 10, &only(vec![Role::User])).await.unwrap();
    assert_eq!(ids(&got), vec![user.id], "recent: the user's messages only");
    let got = b
        .recent(&s, 10, &only(vec![Role::User, Role::Assistant]))
        .await
        .unwrap();
    assert_eq!(ids(&got), vec![agent.id, user.id], "no role, no match");
    let mut requests = Vec::new();
    if b.capabilities().supports(Capability::KeywordSearch) {
        requests.push(SearchRequest::keyword("red roses garden"));
    }
    if b.capabilities().supports(Capability::SemanticSearch) {
        requests.push(SearchRequest::semantic("red roses garden"));
    }
    if b.capabilities().supports(Capability::HybridSearch) {
        requests.push(SearchRequest::hybrid("red roses garden"));
    }
    for request in requests {
        let mode = request.mode;
        let hits = b
            .search(&s, &request.clone().filter(only(vec![Role::Assistant])))
            .await
            .unwrap();
        assert_eq!(hit_ids(&hits), vec![agent.id], "{mode:?}: the agent's only");
        let all = b.search(&s, &request).await.unwrap();
        assert_eq!(all.len(), 3, "{mode:?}: unfiltered finds all three");
    }
    Outcome::Passed
}

/// Time filters keep `created_after <= created_at < created_before`.
pub async fn time_filters_bound_creation_time(cx: Ctx) -> Outcome {
    require!(cx, Capability::TimeFilter);
    let b = &*cx.backend;
    let s = scope("mia", None);
    let mut days = Vec::new();
    for d in 0..5u32 {
        days.push(
            b.store(
                &s,
                NewMemory::new(format!("hiking trip on day {d}")).at(t0().plus(DAY * d)),
            )
            .await
            .unwrap(),
        );
    }
    let filter = Filter {
        created_after: Some(t0().plus(DAY)),
        created_before: Some(t0().plus(DAY * 3)),
        ..Filter::default()
    };
    let got = b.recent(&s, 10, &filter).await.unwrap();
    assert_eq!(ids(&got), vec![days[2].id, days[1].id]);
    let caps = b.capabilities();
    for (cap, req) in [
        (
            Capability::KeywordSearch,
            SearchRequest::keyword("hiking trip"),
        ),
        (
            Capability::SemanticSearch,
            SearchRequest::semantic("hiking trip"),
        ),
    ] {
        if caps.supports(cap) {
            let hits = b.search(&s, &req.filter(filter.clone())).await.unwrap();
            let got: BTreeSet<_> = hit_ids(&hits).into_iter().collect();
            assert_eq!(
                got,
                BTreeSet::from([days[1].id, days[2].id]),
                "{cap} honours time filters"
            );
        }
    }
    Outcome::Passed
}

/// A backend like the scenario's whose embedder reads 200 bytes at a time (so a long memory
/// is stored as passages), and that embedder.
async fn windowed(cx: &Ctx) -> (Arc<HashingEmbedder>, crate::testing::TestBackend) {
    let embedder = Arc::new(
        HashingEmbedder::new(crate::testing::SUITE_DIMS)
            .unwrap()
            .with_window(200),
    );
    let made = cx
        .make(Setup {
            embedder: Some(embedder.clone()),
        })
        .await;
    (embedder, made)
}

/// A memory longer than the embedder's window is searched by meaning in full: each passage
/// that fits the window has its vector ([`crate::embed_passages`]), and the memory's
/// similarity is its best passage's less what its number of passages adds by chance
/// ([`crate::passage_similarity`], with the spread of the similarities of the scope's
/// vectors). The memory is one hit however many of its passages match, under a filter too;
/// changing its text replaces its passages, and deleting it removes them.
pub async fn long_memory_found_by_any_passage(cx: Ctx) -> Outcome {
    require!(cx, Capability::SemanticSearch);
    let (windowed, made) = windowed(&cx).await;
    let b = &*made.backend;
    let s = scope("zelda", None);
    let filler = "We compared the quarterly budget figures line by line. ".repeat(12);
    let long_text = format!("{filler}\n\nThe lighthouse keeper feeds seven gulls at dawn.");
    let long = b
        .store(
            &s,
            NewMemory::new(long_text.clone())
                .with_tag(tag("long"))
                .at(t0()),
        )
        .await
        .unwrap();
    assert!(long.embedded, "the long memory has vectors");
    let short = [
        "Dinner plans for friday night",
        "The dentist appointment moved to monday",
        "A recipe for lemon cake",
        "Gulls gather where the fishing boats come in",
    ];
    for (i, t) in short.iter().enumerate() {
        b.store(&s, NewMemory::new(*t).at(t0().plus(DAY * (i as u32 + 1))))
            .await
            .unwrap();
    }
    let query = "lighthouse keeper feeds gulls";
    let passages = crate::embed_passages(&*windowed, &[long_text.as_str()])
        .await
        .unwrap()
        .remove(0);
    assert!(passages.len() >= 4, "{} passages", passages.len());
    let q = windowed.embed_sync(query);
    let best = passages
        .iter()
        .map(|v| crate::cosine(v.vector(), q.vector()))
        .fold(f32::MIN, f32::max);
    let head = crate::cosine(windowed.embed_sync(&long_text).vector(), q.vector());
    assert!(best > 0.4 && head < 0.2, "best passage {best}, head {head}");

    let hits = b
        .search(&s, &SearchRequest::semantic(query).limit(3))
        .await
        .unwrap();
    assert_eq!(hits.first().map(|h| h.entry.id), Some(long.id), "{hits:#?}");
    let sem = hits[0].breakdown.semantic.expect("a semantic hit");
    // Every vector of the scope: the long memory's passages and the four short memories.
    let scope_similarities: Vec<f32> = passages
        .iter()
        .map(|v| crate::cosine(v.vector(), q.vector()))
        .chain(
            short
                .iter()
                .map(|t| crate::cosine(windowed.embed_sync(t).vector(), q.vector())),
        )
        .collect();
    let spread = crate::Spread::of(scope_similarities.iter().copied(), scope_similarities.len())
        .expect("vectors")
        .std();
    let expected = crate::passage_similarity(best, passages.len(), spread);
    assert!(
        expected < best - 0.05,
        "{} passages are not {} chances: {expected} against {best}",
        passages.len(),
        passages.len()
    );
    assert!(
        (sem - expected).abs() < 1e-3,
        "similarity {sem}, best passage {best} less what {} passages add: {expected}",
        passages.len()
    );
    // Many passages match the filler: still one hit per memory.
    for request in [
        SearchRequest::semantic("quarterly budget figures").limit(10),
        SearchRequest::hybrid("quarterly budget figures").limit(10),
        SearchRequest::semantic(query).limit(10).filter(Filter {
            tags: Some(TagQuery::any([tag("long")])),
            ..Filter::default()
        }),
    ] {
        let hits = b.search(&s, &request).await.unwrap();
        let found = hit_ids(&hits);
        let unique: BTreeSet<_> = found.iter().collect();
        assert_eq!(unique.len(), found.len(), "one hit per memory: {found:?}");
        assert_eq!(found.first(), Some(&long.id), "{request:?}: {hits:#?}");
    }

    // A new text replaces the passages.
    let changed = format!("{filler}\n\nThe orchard grows eleven pear trees.");
    b.update(
        &s,
        long.id,
        MemoryPatch {
            content: Some(changed),
            ..MemoryPatch::default()
        },
    )
    .await
    .unwrap();
    let hits = b
        .search(&s, &SearchRequest::semantic("orchard pear trees").limit(1))
        .await
        .unwrap();
    assert_eq!(hit_ids(&hits), [long.id]);
    let hits = b
        .search(&s, &SearchRequest::semantic(query).limit(5))
        .await
        .unwrap();
    let old = hits.iter().find(|h| h.entry.id == long.id);
    assert!(
        old.is_none_or(|h| h.score < 0.3),
        "the old tail's passage is gone: {old:#?}"
    );

    // Deleting it removes every passage; the store goes on as before.
    b.delete(&s, long.id).await.unwrap();
    let hits = b
        .search(
            &s,
            &SearchRequest::semantic("orchard pear trees quarterly budget").limit(10),
        )
        .await
        .unwrap();
    assert!(!hit_ids(&hits).contains(&long.id));
    let again = b
        .store(&s, NewMemory::new(long_text.clone()))
        .await
        .unwrap();
    let hits = b
        .search(&s, &SearchRequest::semantic(query).limit(2))
        .await
        .unwrap();
    assert_eq!(hits.first().map(|h| h.entry.id), Some(again.id));
    assert_eq!(b.count(&s).await.unwrap(), 5);
    Outcome::Passed
}

/// Hybrid search corrects a long memory's BM25 by its number of passages as it corrects its
/// similarity ([`crate::fuse`]): the store hands fusion each keyword candidate's passage
/// count. Every hit's score is what `fuse` gives with the scope's spreads and the true
/// counts, and not what it gives with every memory counted as one passage.
pub async fn hybrid_search_counts_a_long_memorys_passages(cx: Ctx) -> Outcome {
    require!(cx, Capability::HybridSearch);
    let (windowed, made) = windowed(&cx).await;
    let b = &*made.backend;
    let s = scope("yorick", None);
    // Each passage of the long memory shares a word or two with the question; the rest of
    // the scope shares few or none, so the long memory stands out of it either way.
    let long_text = [
        "The ferry left the harbour at dawn because of the fog over the bay.",
        "Gulls sat on the roof of the old boat shed by the harbour.",
        "Gulls followed the fishing boats out past the harbour wall at dawn.",
        "The market by the harbour sells smoked fish and warm bread at dawn.",
        "A storm at dawn tore two sails and scattered the gulls.",
        "The harbour master counts the gulls on the quay every morning.",
    ]
    .map(|p| {
        format!(
            "{p} {}",
            "We talked about the boats for a while. ".repeat(2)
        )
    })
    .join("\n\n");
    let texts = [
        long_text.as_str(),
        "Gulls at dawn over the harbour",
        "Dinner plans for friday night",
        "The dentist appointment moved to monday",
        "A recipe for lemon cake with poppy seeds",
        "Tickets for the concert in the park",
        "The printer on the second floor is out of toner",
        "Renew the passport before the summer",
        "Book club meets on the first tuesday",
        "The harbour was quiet",
    ];
    let mut stored = Vec::new();
    for (i, t) in texts.iter().enumerate() {
        let e = b
            .store(&s, NewMemory::new(*t).at(t0().plus(DAY * i as u32)))
            .await
            .unwrap();
        stored.push(e.id);
    }
    let query = "gulls over the harbour at dawn";
    let truth = crate::testing::passage_truth(&windowed, &texts, query).await;
    assert!(truth.passages[0] >= 4, "{} passages", truth.passages[0]);
    let counts: HashMap<MemoryId, usize> = stored.iter().copied().zip(truth.passages).collect();
    let semantic: Vec<(MemoryId, f32)> = stored.iter().copied().zip(truth.similarities).collect();

    let hits = b
        .search(
            &s,
            &SearchRequest::hybrid(query)
                .limit(texts.len())
                .without_access_tracking(),
        )
        .await
        .unwrap();
    let keyword: Vec<(MemoryId, f32, usize)> = hits
        .iter()
        .filter_map(|h| {
            h.breakdown
                .keyword_raw
                .map(|k| (h.entry.id, k, counts[&h.entry.id]))
        })
        .collect();
    assert!(
        keyword.iter().any(|k| k.0 == stored[0]),
        "the long memory shares the question's words: {hits:#?}"
    );
    let fused = |keyword: &[(MemoryId, f32, usize)]| {
        let spread = crate::ScopeSpread {
            semantic: truth.spread,
            keyword: crate::Spread::of(keyword.iter().map(|k| k.1), texts.len()),
        };
        crate::fuse(&semantic, keyword, crate::HybridWeights::default(), spread)
    };
    let want = fused(&keyword);
    assert_eq!(
        hit_ids(&hits),
        want.iter().map(|f| f.id).collect::<Vec<_>>(),
        "{hits:#?}\nwant {want:#?}"
    );
    for (h, w) in hits.iter().zip(&want) {
        assert!(
            (h.score - w.score).abs() < 1e-3,
            "{:?} scored {} where fuse with its passages gives {}",
            h.entry.content,
            h.score,
            w.score
        );
    }
    // Counted as one passage, the long memory would score otherwise: the count mattered.
    let as_one: Vec<(MemoryId, f32, usize)> = keyword.iter().map(|k| (k.0, k.1, 1)).collect();
    let naive = fused(&as_one);
    let long_score = |f: &[crate::Fused]| f.iter().find(|f| f.id == stored[0]).map(|f| f.score);
    let (got, one) = (long_score(&want), long_score(&naive));
    assert!(
        got.zip(one).is_some_and(|(g, o)| o - g > 0.05),
        "the long memory's {} passages lower its score: {got:?} against {one:?} as one",
        counts[&stored[0]]
    );
    Outcome::Passed
}

/// Search hits count as recalled; `get` and untracked searches do not.
pub async fn recall_bumps_access_counts(cx: Ctx) -> Outcome {
    let caps = cx.backend.capabilities();
    let Some(mode) = [Capability::KeywordSearch, Capability::SemanticSearch]
        .into_iter()
        .find(|c| caps.supports(*c))
    else {
        return Outcome::Skipped(Capability::KeywordSearch);
    };
    let req = |text: &str| match mode {
        Capability::KeywordSearch => SearchRequest::keyword(text),
        _ => SearchRequest::semantic(text),
    };
    let b = &*cx.backend;
    let s = scope("tina", None);
    let e = b
        .store(&s, NewMemory::new("tina plays the cello").at(t0()))
        .await
        .unwrap();
    b.get(&s, e.id).await.unwrap();
    assert_eq!(
        b.get(&s, e.id).await.unwrap().access_count,
        0,
        "get is not a recall"
    );
    let hits = b.search(&s, &req("cello").limit(1)).await.unwrap();
    assert_eq!(
        hits[0].entry.access_count, 1,
        "the returned entry shows the bump"
    );
    assert!(hits[0].entry.accessed_at > t0());
    b.search(&s, &req("cello").limit(1)).await.unwrap();
    let after = b.get(&s, e.id).await.unwrap();
    assert_eq!(after.access_count, 2);
    assert!(after.accessed_at > t0());
    b.search(&s, &req("cello").without_access_tracking())
        .await
        .unwrap();
    assert_eq!(
        b.get(&s, e.id).await.unwrap().access_count,
        2,
        "untracked search leaves counts"
    );
    Outcome::Passed
}

/// A memory restored from an export keeps when it was last recalled and how often
/// ([`NewMemory::accessed`]), and gets the next recall counted on top.
pub async fn a_restored_memory_keeps_its_access_history(cx: Ctx) -> Outcome {
    let b = &*cx.backend;
    let s = scope("rita", None);
    let created = Timestamp::parse_rfc3339("2026-01-02T03:04:05Z").unwrap();
    let recalled = Timestamp::parse_rfc3339("2026-02-03T04:05:06Z").unwrap();
    let mut memory = NewMemory::new("rita keeps bees on the roof").at(created);
    memory.accessed = Some((recalled, 7));
    let stored = b.store(&s, memory).await.unwrap();
    for e in [stored.clone(), b.get(&s, stored.id).await.unwrap()] {
        assert_eq!((e.accessed_at, e.access_count), (recalled, 7));
        assert_eq!(e.created_at, created);
    }
    let fresh = store(b, &s, "rita's hives face south").await;
    assert_eq!(fresh.access_count, 0, "a new memory was never recalled");
    assert_eq!(fresh.accessed_at, fresh.created_at);
    Outcome::Passed
}
