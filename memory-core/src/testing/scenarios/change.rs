//! Changing and removing: updates re-index, deletes purge every index, pruning by age, count and decay.

use super::*;

/// Changed content is re-indexed: found by its new words, no longer by its old ones.
pub async fn update_reindexes_content(cx: Ctx) -> Outcome {
    require!(cx, Capability::Update);
    let b = &*cx.backend;
    let s = scope("nina", None);
    let e = store(b, &s, "my favourite colour is blue").await;
    let patch = MemoryPatch {
        content: Some("my favourite colour is green".into()),
        tags: Some(tags(["prefs"]).unwrap()),
        importance: Some(Importance::new(1.0).unwrap()),
        context: Some(Some("corrected by the user".into())),
        ..MemoryPatch::default()
    };
    let updated = b.update(&s, e.id, patch).await.unwrap();
    assert_eq!(updated.content, "my favourite colour is green");
    assert_eq!(
        updated.created_at, e.created_at,
        "update keeps creation time"
    );
    assert_eq!(b.get(&s, e.id).await.unwrap(), updated);
    let caps = b.capabilities();
    if caps.supports(Capability::KeywordSearch) {
        assert!(
            b.search(&s, &SearchRequest::keyword("blue"))
                .await
                .unwrap()
                .is_empty()
        );
        assert_eq!(
            hit_ids(
                &b.search(&s, &SearchRequest::keyword("green"))
                    .await
                    .unwrap()
            ),
            vec![e.id]
        );
    }
    if caps.supports(Capability::SemanticSearch) {
        let hits = b
            .search(
                &s,
                &SearchRequest::semantic("favourite colour green").threshold(0.99),
            )
            .await
            .unwrap();
        assert_eq!(
            hit_ids(&hits),
            vec![e.id],
            "the vector follows the new content"
        );
    }
    assert_invalid(
        b.update(
            &s,
            e.id,
            MemoryPatch {
                content: Some(" ".into()),
                ..MemoryPatch::default()
            },
        )
        .await,
        "content",
    );
    assert_not_found(
        b.update(&s, MemoryId::new(), MemoryPatch::default()).await,
        "update of a missing id",
    );
    Outcome::Passed
}

async fn visible_anywhere(
    b: &dyn MemoryBackend,
    s: &Scope,
    id: MemoryId,
    words: &str,
    tag: &Tag,
) -> Vec<&'static str> {
    let caps = b.capabilities();
    let mut seen = Vec::new();
    if b.get(s, id).await.is_ok() {
        seen.push("get");
    }
    if ids(&b.recent(s, 1000, &Filter::default()).await.unwrap()).contains(&id) {
        seen.push("recent");
    }
    if caps.supports(Capability::TagFilter)
        && ids(&b
            .by_tags(s, &TagQuery::any([tag.clone()]), 1000)
            .await
            .unwrap())
        .contains(&id)
    {
        seen.push("by_tags");
    }
    for (cap, name, req) in [
        (
            Capability::SemanticSearch,
            "semantic",
            SearchRequest::semantic(words),
        ),
        (
            Capability::KeywordSearch,
            "keyword",
            SearchRequest::keyword(words),
        ),
        (
            Capability::HybridSearch,
            "hybrid",
            SearchRequest::hybrid(words),
        ),
    ] {
        if caps.supports(cap)
            && hit_ids(&b.search(s, &req.limit(1000)).await.unwrap()).contains(&id)
        {
            seen.push(name);
        }
    }
    seen
}

/// A deleted memory is gone from every read path, and deleting it again is NotFound.
pub async fn delete_purges_every_index(cx: Ctx) -> Outcome {
    let b = &*cx.backend;
    let s = scope("oscar", None);
    let t = tag("doomed");
    let keep = b
        .store(
            &s,
            NewMemory::new("violet umbrella kept").with_tag(t.clone()),
        )
        .await
        .unwrap();
    let gone = b
        .store(
            &s,
            NewMemory::new("violet umbrella forgotten").with_tag(t.clone()),
        )
        .await
        .unwrap();
    assert!(
        visible_anywhere(b, &s, gone.id, "violet umbrella forgotten", &t)
            .await
            .len()
            >= 2
    );
    b.delete(&s, gone.id).await.unwrap();
    let seen = visible_anywhere(b, &s, gone.id, "violet umbrella forgotten", &t).await;
    assert!(
        seen.is_empty(),
        "deleted memory still visible through {seen:?}"
    );
    assert!(
        !visible_anywhere(b, &s, keep.id, "violet umbrella kept", &t)
            .await
            .is_empty()
    );
    assert_not_found(b.delete(&s, gone.id).await, "second delete");
    assert_eq!(b.count(&s).await.unwrap(), 1);
    Outcome::Passed
}

/// `delete_scope` empties one scope and leaves its neighbours (same user, other chat) alone.
pub async fn delete_scope_removes_only_that_scope(cx: Ctx) -> Outcome {
    let b = &*cx.backend;
    let a = scope("peggy", Some("1"));
    let other_chat = scope("peggy", Some("2"));
    let no_chat = scope("peggy", None);
    for s in [&a, &other_chat, &no_chat] {
        for i in 0..3 {
            store(b, s, &format!("peggy memory {i}")).await;
        }
    }
    assert_eq!(b.delete_scope(&a).await.unwrap(), 3);
    assert_eq!(b.count(&a).await.unwrap(), 0);
    assert!(
        b.recent(&a, 10, &Filter::default())
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(b.count(&other_chat).await.unwrap(), 3);
    assert_eq!(b.count(&no_chat).await.unwrap(), 3);
    assert_eq!(b.delete_scope(&a).await.unwrap(), 0);
    Outcome::Passed
}

/// TTL pruning removes memories older than `max_age`, except pinned ones.
pub async fn prune_ttl_removes_expired(cx: Ctx) -> Outcome {
    require!(cx, Capability::PruneTtl);
    let b = &*cx.backend;
    let s = scope("quinn", None);
    let now = t0().plus(DAY * 100);
    let old = b
        .store(&s, NewMemory::new("old news").at(t0()))
        .await
        .unwrap();
    let old_pinned = b
        .store(&s, NewMemory::new("old but pinned").at(t0()).pinned())
        .await
        .unwrap();
    let fresh = b
        .store(&s, NewMemory::new("fresh news").at(now.minus(DAY)))
        .await
        .unwrap();
    let policy = PrunePolicy {
        max_age: Some(DAY * 30),
        ..PrunePolicy {
            now,
            ..PrunePolicy::new()
        }
    };
    let report = b.prune(&s, &policy).await.unwrap();
    assert_eq!(report.removed, vec![(old.id, PruneReason::Expired)]);
    assert_not_found(b.get(&s, old.id).await, "expired memory");
    b.get(&s, old_pinned.id).await.unwrap();
    b.get(&s, fresh.id).await.unwrap();
    if b.capabilities().supports(Capability::KeywordSearch) {
        assert!(
            b.search(&s, &SearchRequest::keyword("old news"))
                .await
                .unwrap()
                .iter()
                .all(|h| h.entry.id != old.id)
        );
    }
    Outcome::Passed
}

/// Max-count pruning keeps the newest unpinned memories.
pub async fn prune_max_count_keeps_newest(cx: Ctx) -> Outcome {
    require!(cx, Capability::PruneMaxCount);
    let b = &*cx.backend;
    let s = scope("rita", None);
    let mut all = Vec::new();
    for d in 0..6u32 {
        all.push(
            b.store(
                &s,
                NewMemory::new(format!("entry {d}")).at(t0().plus(DAY * d)),
            )
            .await
            .unwrap(),
        );
    }
    let pinned = b
        .store(
            &s,
            NewMemory::new("pinned oldest").at(t0().minus(DAY)).pinned(),
        )
        .await
        .unwrap();
    let policy = PrunePolicy {
        max_count: Some(2),
        ..PrunePolicy {
            now: t0().plus(DAY * 10),
            ..PrunePolicy::new()
        }
    };
    let report = b.prune(&s, &policy).await.unwrap();
    assert_eq!(report.count(PruneReason::OverCount), 4);
    let left: BTreeSet<_> = ids(&b.recent(&s, 10, &Filter::default()).await.unwrap())
        .into_iter()
        .collect();
    assert_eq!(left, BTreeSet::from([all[5].id, all[4].id, pinned.id]));
    Outcome::Passed
}

/// Decay pruning removes weak, idle memories; pinned, important or recalled ones stay.
pub async fn prune_decay_spares_pinned_and_strong(cx: Ctx) -> Outcome {
    require!(cx, Capability::PruneDecay);
    let b = &*cx.backend;
    let s = scope("sam", None);
    let now = t0().plus(DAY * 60);
    let low = Importance::new(0.2).unwrap();
    let weak = b
        .store(
            &s,
            NewMemory::new("trivial remark")
                .with_importance(low)
                .at(t0()),
        )
        .await
        .unwrap();
    let pinned = b
        .store(
            &s,
            NewMemory::new("pinned remark")
                .with_importance(low)
                .at(t0())
                .pinned(),
        )
        .await
        .unwrap();
    let strong = b
        .store(
            &s,
            NewMemory::new("important remark")
                .with_importance(Importance::new(1.0).unwrap())
                .at(now.minus(DAY)),
        )
        .await
        .unwrap();
    // 60 days idle with a 7-day half-life: 0.2 * 2^-8.6 ≈ 0.0005; the strong one ≈ 0.9.
    let policy = PrunePolicy {
        decay: Some(DecayPolicy {
            half_life: DAY * 7,
            min_strength: 0.05,
        }),
        ..PrunePolicy {
            now,
            ..PrunePolicy::new()
        }
    };
    let report = b.prune(&s, &policy).await.unwrap();
    assert_eq!(report.removed, vec![(weak.id, PruneReason::Decayed)]);
    b.get(&s, pinned.id).await.unwrap();
    b.get(&s, strong.id).await.unwrap();
    Outcome::Passed
}

/// A dry run reports exactly what a real run then removes, and removes nothing; facts valid
/// now are exempt from every rule, a fact whose validity ended is not.
pub async fn prune_dry_run_reports_what_a_run_removes(cx: Ctx) -> Outcome {
    require!(cx, Capability::PruneTtl);
    let b = &*cx.backend;
    let s = scope("tess", None);
    let now = t0().plus(DAY * 100);
    let old_turn = b
        .store(&s, NewMemory::new("an old chat turn").at(t0()))
        .await
        .unwrap();
    let current_fact = b
        .store(
            &s,
            NewMemory::new("an old fact, still true")
                .with_kind(MemoryKind::Fact)
                .at(t0()),
        )
        .await
        .unwrap();
    let ended_fact = b
        .store(
            &s,
            NewMemory::new("an old fact that stopped being true")
                .with_kind(MemoryKind::Fact)
                .valid(Some(t0()), Some(t0().plus(DAY)))
                .at(t0()),
        )
        .await
        .unwrap();
    let fresh = b
        .store(&s, NewMemory::new("a fresh chat turn").at(now.minus(DAY)))
        .await
        .unwrap();
    let policy = PrunePolicy {
        max_age: Some(DAY * 30),
        ..PrunePolicy {
            now,
            ..PrunePolicy::new()
        }
    };
    let dry = b.prune(&s, &policy.dry()).await.unwrap();
    assert!(dry.dry_run);
    let mut listed: Vec<MemoryId> = dry.removed.iter().map(|(id, _)| *id).collect();
    listed.sort();
    let mut expected = vec![old_turn.id, ended_fact.id];
    expected.sort();
    assert_eq!(listed, expected);
    assert_eq!(b.count(&s).await.unwrap(), 4, "a dry run removed something");
    let real = b.prune(&s, &policy).await.unwrap();
    assert!(!real.dry_run);
    let mut gone: Vec<MemoryId> = real.removed.iter().map(|(id, _)| *id).collect();
    gone.sort();
    assert_eq!(gone, expected, "the real run differs from its dry run");
    assert_not_found(b.get(&s, old_turn.id).await, "pruned turn");
    assert_not_found(b.get(&s, ended_fact.id).await, "pruned ended fact");
    b.get(&s, current_fact.id).await.unwrap();
    b.get(&s, fresh.id).await.unwrap();
    Outcome::Passed
}

/// D10 (issue 54): a patch whose `superseded_by` names a memory of another scope, one that
/// does not exist, or the memory itself is refused with what was wrong, and changes
/// nothing; one naming another memory of the scope is taken.
pub async fn superseded_by_names_a_memory_of_the_scope(cx: Ctx) -> Outcome {
    require!(cx, Capability::Update);
    let b = &*cx.backend;
    let (s, other) = (scope("sia", Some("1")), scope("sia", Some("2")));
    let old = store(b, &s, "Sia works at the bakery").await;
    let new = store(b, &s, "Sia works at the library").await;
    let elsewhere = store(b, &other, "Sia's other chat").await;
    let patch = |t: MemoryId| MemoryPatch {
        superseded_by: Some(Some(t)),
        ..MemoryPatch::default()
    };
    for (t, why) in [
        (elsewhere.id, "is not a memory of this scope"),
        (MemoryId::new(), "is not a memory of this scope"),
        (old.id, "is the memory itself"),
    ] {
        match b.update(&s, old.id, patch(t)).await {
            Err(MemoryError::InvalidInput { field, problem }) => {
                assert_eq!(field, "superseded_by");
                assert_eq!(
                    problem,
                    format!("{t} {why}; expected the id of another memory of the same scope")
                );
            }
            other => panic!("expected InvalidInput about superseded_by, got {other:?}"),
        }
        assert_eq!(b.get(&s, old.id).await.unwrap().superseded_by, None);
    }
    let done = b.update(&s, old.id, patch(new.id)).await.unwrap();
    assert_eq!(done.superseded_by, Some(new.id));
    assert_eq!(b.get(&s, old.id).await.unwrap().superseded_by, Some(new.id));
    Outcome::Passed
}

/// After a deletion, [`MemoryBackend::reclaim_deleted`] (SQLite: the log checkpointed and
/// emptied; Postgres: `VACUUM`) succeeds and leaves what stays as it was: the deleted
/// memory is not found, the other one is, by id and by its words.
pub async fn reclaim_after_a_deletion_keeps_what_stays(cx: Ctx) -> Outcome {
    let b = &*cx.backend;
    let s = scope("rey", None);
    let gone = store(b, &s, "Rey's old address is 9 Quokka Row").await;
    let kept = store(b, &s, "Rey likes quokkas").await;
    b.delete(&s, gone.id).await.unwrap();
    b.reclaim_deleted().await.unwrap();
    assert_not_found(b.get(&s, gone.id).await, "the deleted memory");
    assert_eq!(b.get(&s, kept.id).await.unwrap().content, kept.content);
    let hits = b
        .search(&s, &SearchRequest::keyword("quokkas"))
        .await
        .unwrap();
    assert_eq!(hit_ids(&hits), [kept.id]);
    Outcome::Passed
}
