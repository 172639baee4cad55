//! Facts over time: told once, superseded with their history, consolidated, hidden when replaced.

use super::*;

/// Remembering the same fact twice (`remember_once`) keeps one memory, with the new tag
/// merged where the backend can update; a message with the same text is not a duplicate of
/// a fact, and another scope's copy is never touched.
pub async fn remembering_a_fact_twice_keeps_one(cx: Ctx) -> Outcome {
    let caps = cx.backend.capabilities();
    if !caps.supports(Capability::KeywordSearch) && !caps.supports(Capability::SemanticSearch) {
        return Outcome::Skipped(Capability::KeywordSearch);
    }
    let b = &*cx.backend;
    let (s, other) = (scope("uma", None), scope("vic", None));
    let fact = |text: &str, tag: &str| {
        NewMemory::new(text)
            .with_kind(MemoryKind::Fact)
            .with_tag(Tag::new(tag).unwrap())
    };
    let first = crate::remember_once(b, &s, fact("My cat is called Pixel", "pets"))
        .await
        .unwrap();
    assert!(!first.merged);
    let theirs = crate::remember_once(b, &other, fact("My cat is called Pixel", "pets"))
        .await
        .unwrap();
    assert!(!theirs.merged, "another scope's copy is not a duplicate");
    b.store(&s, NewMemory::new("my cat is called Pixel"))
        .await
        .unwrap();
    let again = crate::remember_once(b, &s, fact("  my cat is called PIXEL. ", "home"))
        .await
        .unwrap();
    assert!(again.merged);
    assert_eq!(again.entry.id, first.entry.id);
    assert_eq!(b.count(&s).await.unwrap(), 2, "one fact and one message");
    let stored = b.get(&s, first.entry.id).await.unwrap();
    if caps.supports(Capability::Update) {
        let names: Vec<&str> = stored.tags.iter().map(Tag::as_str).collect();
        assert_eq!(names, ["home", "pets"]);
    }
    let mine = b.get(&other, theirs.entry.id).await.unwrap();
    assert_eq!(mine.tags.len(), 1, "the other scope's copy is untouched");
    Outcome::Passed
}

/// Eight tasks telling one fact at once (`remember_once`, each with its own tag) leave one
/// memory, which every task was given, carrying every tag where the backend can update: the
/// look and the store are one step.
pub async fn concurrent_remembers_of_one_fact_keep_one(cx: Ctx) -> Outcome {
    let caps = cx.backend.capabilities();
    if !caps.supports(Capability::KeywordSearch) && !caps.supports(Capability::SemanticSearch) {
        return Outcome::Skipped(Capability::KeywordSearch);
    }
    let s = scope("xia", Some("race"));
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let b = Arc::clone(&cx.backend);
            let s = s.clone();
            crate::testing::tokio::spawn(async move {
                let fact = NewMemory::new("The spare key is under the blue pot")
                    .with_kind(MemoryKind::Fact)
                    .with_tag(Tag::new(format!("told-{i}")).unwrap());
                b.remember_once(&s, fact).await.unwrap().entry.id
            })
        })
        .collect();
    let mut ids = Vec::new();
    for t in tasks {
        ids.push(t.await.unwrap());
    }
    ids.dedup();
    assert_eq!(ids.len(), 1, "every task was given the one memory: {ids:?}");
    let facts = Filter {
        kinds: vec![MemoryKind::Fact],
        ..Filter::default()
    };
    let stored = cx.backend.recent(&s, 20, &facts).await.unwrap();
    assert_eq!(stored.len(), 1, "one memory for one fact: {stored:?}");
    if caps.supports(Capability::Update) {
        assert_eq!(
            stored[0].tags.len(),
            8,
            "every telling's tag: {:?}",
            stored[0].tags
        );
    }
    Outcome::Passed
}

/// A fact that changed is superseded, not deleted: the new one is current, the old one's
/// validity is closed and it points at its successor; the history reads both, oldest first;
/// a bad or already-replaced id stores nothing.
pub async fn superseding_keeps_the_history(cx: Ctx) -> Outcome {
    require!(cx, Capability::Update);
    let b = &*cx.backend;
    let s = scope("wes", None);
    let fact = |text: &str| NewMemory::new(text).with_kind(MemoryKind::Fact);
    let old = b
        .store(&s, fact("my cat is called Pixel").at(t0()))
        .await
        .unwrap();
    let now = t0().plus(DAY);
    let new = crate::supersede(b, &s, old.id, fact("we renamed the cat to Max"), now)
        .await
        .unwrap();
    let current = Filter {
        kinds: vec![MemoryKind::Fact],
        valid_at: b
            .capabilities()
            .supports(Capability::TimeFilter)
            .then_some(now.plus(DAY)),
        ..Filter::default()
    };
    assert_eq!(
        ids(&b.recent(&s, 10, &current).await.unwrap()),
        vec![new.id]
    );
    if b.capabilities().supports(Capability::KeywordSearch) {
        let hits = b.search(&s, &SearchRequest::keyword("cat")).await.unwrap();
        assert_eq!(
            hit_ids(&hits),
            vec![new.id],
            "only the current version is found"
        );
    }
    let closed = b.get(&s, old.id).await.unwrap();
    assert_eq!(closed.superseded_by, Some(new.id));
    assert_eq!(closed.valid_until, Some(now));
    for from in [old.id, new.id] {
        let chain = ids(&crate::history(b, &s, from).await.unwrap());
        assert_eq!(chain, vec![old.id, new.id], "history from {from}");
    }
    assert_invalid(
        crate::supersede(b, &s, old.id, fact("the cat is called Tom"), now).await,
        "superseded memory",
    );
    assert_not_found(
        crate::supersede(b, &s, MemoryId::new(), fact("nothing"), now).await,
        "supersede of a missing id",
    );
    assert_eq!(
        b.count(&s).await.unwrap(),
        2,
        "nothing deleted, nothing extra stored"
    );
    Outcome::Passed
}

/// The lifecycle capability: consolidation folds facts that say the same thing into the
/// oldest (tags and pinning kept), deletes nothing, reports ids and why, and a dry run plans
/// the same without changing anything; an invalidated fact leaves the current facts but is
/// still there `as_of` a time it held; a backend without the capability says so.
pub async fn consolidation_merges_duplicates_and_keeps_the_history(cx: Ctx) -> Outcome {
    let b = &*cx.backend;
    let s = scope("lin", Some("home"));
    if !b.capabilities().supports(Capability::Lifecycle) {
        let r = crate::consolidate(b, &s, &crate::Consolidation::new()).await;
        assert!(
            matches!(
                r,
                Err(MemoryError::Unsupported {
                    capability: Capability::Lifecycle,
                    ..
                })
            ),
            "a backend without the capability refuses: {r:?}"
        );
        return Outcome::Skipped(Capability::Lifecycle);
    }
    let fact = |text: &str, at: Timestamp| NewMemory::new(text).with_kind(MemoryKind::Fact).at(at);
    let first = b
        .store(
            &s,
            fact("My sister lives in Lyon.", t0()).with_tag(tag("family")),
        )
        .await
        .unwrap();
    let second = b
        .store(
            &s,
            fact("my sister lives in  lyon", t0().plus(DAY)).with_tag(tag("city")),
        )
        .await
        .unwrap();
    let third = b
        .store(&s, fact("My sister lives in Lyon!", t0().plus(DAY * 2)))
        .await
        .unwrap();
    let other = b
        .store(&s, fact("My brother lives in Lyon.", t0()))
        .await
        .unwrap();
    // A chat message with the same words is not a fact and stays as it is.
    b.store(&s, NewMemory::new("my sister lives in lyon").at(t0()))
        .await
        .unwrap();
    let now = t0().plus(DAY * 3);
    let what = crate::Consolidation {
        now,
        ..crate::Consolidation::new()
    };

    let plan = crate::consolidate(
        b,
        &s,
        &crate::Consolidation {
            dry_run: true,
            ..what
        },
    )
    .await
    .unwrap();
    assert!(plan.dry_run);
    assert_eq!(plan.merged.len(), 1, "{plan:?}");
    assert_eq!(plan.merged[0].kept, first.id, "the oldest is kept");
    let mut folded = plan.merged[0].merged.clone();
    folded.sort();
    let mut expected = vec![second.id, third.id];
    expected.sort();
    assert_eq!(folded, expected);
    assert!(!plan.merged[0].why.is_empty());
    assert!(
        b.get(&s, second.id).await.unwrap().superseded_by.is_none(),
        "a dry run changes nothing"
    );

    let done = crate::consolidate(b, &s, &what).await.unwrap();
    assert!(!done.dry_run);
    assert_eq!(done.merged, plan.merged, "the run does what the plan said");
    assert_eq!(b.count(&s).await.unwrap(), 5, "nothing deleted");
    let kept = b.get(&s, first.id).await.unwrap();
    assert_eq!(kept.tags, tags(["family", "city"]).unwrap(), "tags joined");
    for id in [second.id, third.id] {
        let gone = b.get(&s, id).await.unwrap();
        assert_eq!(gone.superseded_by, Some(first.id));
        assert_eq!(gone.valid_until, Some(now));
    }
    let facts = Filter {
        kinds: vec![MemoryKind::Fact],
        ..Filter::default()
    };
    let mut current = ids(&b.recent(&s, 10, &facts).await.unwrap());
    current.sort();
    let mut expected = vec![first.id, other.id];
    expected.sort();
    assert_eq!(
        current, expected,
        "one sister fact and the brother fact remain"
    );
    let again = crate::consolidate(b, &s, &what).await.unwrap();
    assert!(again.is_empty(), "a second run finds nothing: {again:?}");

    // Invalidation: the fact leaves the current facts and stays in the past.
    let later = now.plus(DAY);
    crate::invalidate(b, &s, other.id, later).await.unwrap();
    if b.capabilities().supports(Capability::TimeFilter) {
        let valid = Filter {
            valid_at: Some(later.plus(DAY)),
            ..facts.clone()
        };
        assert_eq!(
            ids(&b.recent(&s, 10, &valid).await.unwrap()),
            vec![first.id]
        );
        let back_then = Filter {
            kinds: vec![MemoryKind::Fact],
            ..Filter::as_of(now)
        };
        let mut then = ids(&b.recent(&s, 10, &back_then).await.unwrap());
        then.sort();
        assert_eq!(then, expected, "as of before the invalidation it held");
        let before_any = Filter {
            kinds: vec![MemoryKind::Fact],
            ..Filter::as_of(t0().plus(DAY / 2))
        };
        let mut early = ids(&b.recent(&s, 10, &before_any).await.unwrap());
        early.sort();
        let mut firsts = vec![first.id, other.id];
        firsts.sort();
        assert_eq!(
            early, firsts,
            "as of the first day, only the first two existed"
        );
    }
    assert_invalid(
        crate::invalidate(b, &s, other.id, later.plus(DAY)).await,
        "invalidate",
    );
    assert_eq!(b.count(&s).await.unwrap(), 5, "still nothing deleted");

    // Restoring undoes a merge and an ending.
    for id in [third.id, other.id] {
        let back = crate::restore(b, &s, id).await.unwrap();
        assert!(back.superseded_by.is_none() && back.valid_until.is_none());
    }
    assert_invalid(crate::restore(b, &s, other.id).await, "restore");

    if b.capabilities().supports(Capability::SemanticSearch) {
        similar_facts_merge_above_the_threshold_only(b).await;
    }
    Outcome::Passed
}

/// Near-duplicate merging, with the threshold set just above and just below the measured
/// similarity of two facts (so it holds for any embedder).
async fn similar_facts_merge_above_the_threshold_only(b: &dyn MemoryBackend) {
    let s = scope("lin", Some("tea"));
    let fact = |text: &str, at: Timestamp| NewMemory::new(text).with_kind(MemoryKind::Fact).at(at);
    let old = b
        .store(&s, fact("I drink green tea every morning", t0()))
        .await
        .unwrap();
    let new = b
        .store(&s, fact("Every morning I drink green tea", t0().plus(DAY)))
        .await
        .unwrap();
    let far = b
        .store(&s, fact("My bicycle needs new brakes", t0().plus(DAY)))
        .await
        .unwrap();
    let hits = b
        .search(&s, &SearchRequest::semantic(new.content.clone()).limit(3))
        .await
        .unwrap();
    let sim = hits
        .iter()
        .find(|h| h.entry.id == old.id)
        .and_then(|h| h.breakdown.semantic)
        .expect("the older fact is a neighbour");
    let now = t0().plus(DAY * 2);
    let with = |min: f32| crate::Consolidation {
        similar: Some(min),
        now,
        ..crate::Consolidation::new()
    };
    if sim + 0.001 <= 1.0 {
        let none = crate::consolidate(b, &s, &with(sim + 0.001)).await.unwrap();
        assert!(none.merged.is_empty(), "{none:?}");
    }
    let done = crate::consolidate(b, &s, &with(sim - 0.001)).await.unwrap();
    assert_eq!(done.merged.len(), 1, "{done:?}");
    assert_eq!(done.merged[0].kept, old.id, "folded into the older");
    assert_eq!(done.merged[0].merged, vec![new.id]);
    assert!(done.merged[0].why.contains("cosine similarity"));
    assert_eq!(b.get(&s, new.id).await.unwrap().superseded_by, Some(old.id));
    assert!(b.get(&s, far.id).await.unwrap().superseded_by.is_none());
    assert_invalid(crate::consolidate(b, &s, &with(1.5)).await, "similar");
}

/// Superseded memories drop out of listings and searches unless asked for.
pub async fn superseded_memories_are_hidden_by_default(cx: Ctx) -> Outcome {
    require!(cx, Capability::Update);
    let b = &*cx.backend;
    let s = scope("uma", None);
    let old = store(b, &s, "uma lives in Lisbon").await;
    let new = store(b, &s, "uma lives in Porto now").await;
    b.update(
        &s,
        old.id,
        MemoryPatch {
            superseded_by: Some(Some(new.id)),
            ..MemoryPatch::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(
        ids(&b.recent(&s, 10, &Filter::default()).await.unwrap()),
        vec![new.id]
    );
    let with = Filter {
        include_superseded: true,
        ..Filter::default()
    };
    assert_eq!(b.recent(&s, 10, &with).await.unwrap().len(), 2);
    if b.capabilities().supports(Capability::KeywordSearch) {
        let hits = b
            .search(&s, &SearchRequest::keyword("uma lives"))
            .await
            .unwrap();
        assert_eq!(hit_ids(&hits), vec![new.id]);
    }
    assert_eq!(
        b.get(&s, old.id).await.unwrap().superseded_by,
        Some(new.id),
        "get still reads it"
    );
    Outcome::Passed
}
