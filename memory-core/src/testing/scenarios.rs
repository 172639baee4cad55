//! The conformance scenarios: each `pub async fn` here is one named test for every backend.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use super::{Ctx, Outcome, Rng, Setup};
use crate::{
    Capability, DecayPolicy, Embedding, EmbeddingSpace, Filter, HashingEmbedder, Importance,
    MemoryBackend, MemoryEntry, MemoryError, MemoryId, MemoryKind, MemoryPatch, NewMemory,
    PrunePolicy, PruneReason, Role, Scope, SearchRequest, Tag, TagQuery, Timestamp, tags,
};

const DAY: Duration = Duration::from_secs(86_400);

fn scope(user: &str, chat: Option<&str>) -> Scope {
    let s = Scope::for_user(user).unwrap();
    match chat {
        Some(c) => s.in_chat(c).unwrap(),
        None => s,
    }
}

fn tag(t: &str) -> Tag {
    Tag::new(t).unwrap()
}

/// A fixed reference time, so scenarios do not depend on the clock.
fn t0() -> Timestamp {
    Timestamp::from_millis(1_767_225_600_000).unwrap() // 2026-01-01T00:00:00Z
}

macro_rules! require {
    ($cx:expr, $($cap:expr),+) => {
        let caps = $cx.backend.capabilities();
        $(
            if !caps.supports($cap) {
                return Outcome::Skipped($cap);
            }
        )+
    };
}

async fn store(b: &dyn MemoryBackend, s: &Scope, text: &str) -> MemoryEntry {
    b.store(s, NewMemory::new(text)).await.unwrap()
}

fn ids(entries: &[MemoryEntry]) -> Vec<MemoryId> {
    entries.iter().map(|e| e.id).collect()
}

fn hit_ids(hits: &[crate::ScoredMemory]) -> Vec<MemoryId> {
    hits.iter().map(|h| h.entry.id).collect()
}

fn assert_not_found<T: std::fmt::Debug>(r: crate::Result<T>, what: &str) {
    match r {
        Err(MemoryError::NotFound { .. }) => {}
        other => panic!("{what}: expected NotFound, got {other:?}"),
    }
}

fn assert_invalid<T: std::fmt::Debug>(r: crate::Result<T>, field_part: &str) {
    match r {
        Err(MemoryError::InvalidInput { field, problem }) => {
            assert!(
                field.contains(field_part),
                "expected an error about {field_part}, got {field}: {problem}"
            );
            assert!(!problem.is_empty());
        }
        other => panic!("expected InvalidInput about {field_part}, got {other:?}"),
    }
}

/// What a backend says about itself agrees with what it declares it can do: it is durable
/// exactly when it has the persistence capability, and a store kept in the process's
/// memory is never durable. Its limits are usable.
pub async fn info_agrees_with_capabilities(cx: Ctx) -> Outcome {
    let b = &*cx.backend;
    let info = b.info();
    assert!(!info.name.is_empty());
    assert_eq!(
        info.durable,
        b.capabilities().supports(Capability::Persistence),
        "durable vs the persistence capability ({})",
        info.kind()
    );
    if info.topology == crate::Topology::InProcess {
        assert!(!info.durable, "an in-process store cannot be durable");
    } else {
        assert!(info.location.is_some(), "a file or server has a location");
    }
    assert!(info.limits.validate().is_ok(), "{:?}", info.limits);
    Outcome::Passed
}

/// Every field written comes back unchanged, and the backend stamps what it owns.
pub async fn store_get_round_trip(cx: Ctx) -> Outcome {
    let b = &*cx.backend;
    let s = scope("alice", Some("chat-1"));
    let id = MemoryId::new();
    let new = NewMemory::new("Alice's cat is called Miso")
        .with_id(id)
        .with_kind(MemoryKind::Fact)
        .with_context("she said so while talking about pets")
        .with_tags(tags(["pets", "family"]).unwrap())
        .with_role(Role::User)
        .with_source("telegram")
        .with_importance(Importance::new(0.9).unwrap())
        .pinned()
        .at(t0())
        .valid(Some(t0()), Some(t0().plus(DAY * 365)));
    let stored = b.store(&s, new).await.unwrap();
    assert_eq!(stored.id, id);
    let got = b.get(&s, id).await.unwrap();
    assert_eq!(got, stored, "get returns what store returned");
    assert_eq!(got.scope, s);
    assert_eq!(got.kind, MemoryKind::Fact);
    assert_eq!(got.content, "Alice's cat is called Miso");
    assert_eq!(
        got.context.as_deref(),
        Some("she said so while talking about pets")
    );
    assert_eq!(got.tags, tags(["family", "pets"]).unwrap());
    assert_eq!(got.role, Some(Role::User));
    assert_eq!(got.source.as_deref(), Some("telegram"));
    assert_eq!(got.importance.get(), 0.9);
    assert!(got.pinned);
    assert_eq!(got.created_at, t0());
    assert_eq!(got.accessed_at, t0());
    assert_eq!(got.access_count, 0);
    assert_eq!(got.valid_from, Some(t0()));
    assert_eq!(got.valid_until, Some(t0().plus(DAY * 365)));
    assert_eq!(got.superseded_by, None);
    assert_eq!(
        got.embedded,
        b.capabilities().supports(Capability::SemanticSearch)
    );

    // Defaults: a fresh id, now-ish timestamps, a message of importance 0.5.
    let before = Timestamp::now();
    let plain = store(b, &s, "plain memory").await;
    assert_ne!(plain.id, id);
    assert!(plain.created_at >= before.minus(Duration::from_secs(5)));
    assert_eq!(plain.kind, MemoryKind::Message);
    assert_eq!(plain.importance, Importance::default());
    assert_eq!(b.count(&s).await.unwrap(), 2);
    Outcome::Passed
}

/// A batch comes back in input order, and every entry is readable.
pub async fn batch_store_preserves_order(cx: Ctx) -> Outcome {
    let b = &*cx.backend;
    let s = scope("bob", None);
    let texts: Vec<String> = (0..25)
        .map(|i| format!("batch memory number {i}"))
        .collect();
    let stored = b
        .store_batch(&s, texts.iter().map(NewMemory::new).collect())
        .await
        .unwrap();
    assert_eq!(stored.len(), texts.len());
    for (e, t) in stored.iter().zip(&texts) {
        assert_eq!(&e.content, t, "batch output is in input order");
        assert_eq!(b.get(&s, e.id).await.unwrap().content, *t);
    }
    assert_eq!(b.count(&s).await.unwrap(), 25);
    assert!(
        b.store_batch(&s, Vec::new()).await.unwrap().is_empty(),
        "an empty batch stores nothing"
    );
    Outcome::Passed
}

/// One bad memory fails the whole batch and nothing is stored.
pub async fn batch_store_is_atomic(cx: Ctx) -> Outcome {
    let b = &*cx.backend;
    let s = scope("carol", None);
    let batch = vec![
        NewMemory::new("fine one"),
        NewMemory::new("   "),
        NewMemory::new("fine two"),
    ];
    assert_invalid(b.store_batch(&s, batch).await, "content");
    assert_eq!(
        b.count(&s).await.unwrap(),
        0,
        "a failed batch stores nothing"
    );

    let id = MemoryId::new();
    let dup = vec![
        NewMemory::new("first").with_id(id),
        NewMemory::new("second").with_id(id),
    ];
    match b.store_batch(&s, dup).await {
        Err(MemoryError::Conflict { id: got }) => assert_eq!(got, id),
        other => panic!("duplicate ids in one batch: expected Conflict, got {other:?}"),
    }
    assert_eq!(b.count(&s).await.unwrap(), 0);
    Outcome::Passed
}

/// Reusing an id is refused, in the same scope or another, and the original is untouched.
pub async fn explicit_id_conflict_is_rejected(cx: Ctx) -> Outcome {
    let b = &*cx.backend;
    let (s1, s2) = (scope("dave", None), scope("erin", None));
    let id = MemoryId::new();
    b.store(&s1, NewMemory::new("original").with_id(id))
        .await
        .unwrap();
    for s in [&s1, &s2] {
        match b.store(s, NewMemory::new("impostor").with_id(id)).await {
            Err(MemoryError::Conflict { id: got }) => assert_eq!(got, id),
            other => panic!("expected Conflict, got {other:?}"),
        }
    }
    assert_eq!(b.get(&s1, id).await.unwrap().content, "original");
    assert_eq!(b.count(&s2).await.unwrap(), 0);
    Outcome::Passed
}

/// `store_each` stores what it can and says what became of each memory, in order: a taken
/// id (in the store, or earlier in the same call) and an oversized memory write nothing
/// and stop nothing; the rest are stored.
pub async fn store_each_reports_each_memory(cx: Ctx) -> Outcome {
    let b = &*cx.backend;
    let s = scope("xena", None);
    let taken = MemoryId::new();
    b.store(&s, NewMemory::new("already here").with_id(taken))
        .await
        .unwrap();
    let twice = MemoryId::new();
    let too_long = "x".repeat(b.info().limits.max_content_bytes + 1);
    let given = vec![
        NewMemory::new("first new one"),
        NewMemory::new("an impostor").with_id(taken),
        NewMemory::new(too_long),
        NewMemory::new("given twice").with_id(twice),
        NewMemory::new("given twice, again").with_id(twice),
        NewMemory::new("last new one"),
    ];
    let got = b.store_each(&s, given).await.unwrap();
    assert_eq!(got.len(), 6);
    let stored: Vec<&str> = got
        .iter()
        .filter_map(|g| g.entry().map(|e| e.content.as_str()))
        .collect();
    assert_eq!(stored, ["first new one", "given twice", "last new one"]);
    assert!(
        matches!(got[1], crate::Ingested::Exists(id) if id == taken),
        "{:?}",
        got[1]
    );
    assert!(
        matches!(&got[2], crate::Ingested::Rejected(e) if e.is_refusal()),
        "{:?}",
        got[2]
    );
    assert!(
        matches!(got[4], crate::Ingested::Exists(id) if id == twice),
        "{:?}",
        got[4]
    );
    assert_eq!(b.count(&s).await.unwrap(), 4);
    assert_eq!(b.get(&s, taken).await.unwrap().content, "already here");
    assert_eq!(b.get(&s, twice).await.unwrap().content, "given twice");
    // Nothing refused: the same as store_batch.
    let all = b
        .store_each(&s, vec![NewMemory::new("a"), NewMemory::new("b")])
        .await
        .unwrap();
    assert!(all.iter().all(|g| g.entry().is_some()));
    assert!(b.store_each(&s, Vec::new()).await.unwrap().is_empty());
    Outcome::Passed
}

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
            super::tokio::spawn(async move {
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

/// An id from another scope is NotFound for get, update and delete, and stays intact.
pub async fn foreign_scope_ids_are_not_found(cx: Ctx) -> Outcome {
    let b = &*cx.backend;
    let owner = scope("victor", Some("1"));
    let intruders = [
        scope("mallory", Some("1")),
        scope("victor", Some("2")),
        scope("victor", None),
        Scope::for_user("victor")
            .unwrap()
            .in_chat("1")
            .unwrap()
            .in_thread("x")
            .unwrap(),
        Scope::for_user("victor")
            .unwrap()
            .in_chat("1")
            .unwrap()
            .in_tenant("other")
            .unwrap(),
    ];
    let e = store(b, &owner, "victor's secret pin is 4921").await;
    for s in &intruders {
        assert_not_found(b.get(s, e.id).await, "get across scopes");
        if b.capabilities().supports(Capability::Update) {
            assert_not_found(
                b.update(
                    s,
                    e.id,
                    MemoryPatch {
                        content: Some("hijacked".into()),
                        ..MemoryPatch::default()
                    },
                )
                .await,
                "update across scopes",
            );
        }
        assert_not_found(b.delete(s, e.id).await, "delete across scopes");
        assert_eq!(b.delete_scope(s).await.unwrap(), 0);
    }
    assert_eq!(b.get(&owner, e.id).await.unwrap(), e);
    Outcome::Passed
}

const VOCAB: [&str; 12] = [
    "apple", "river", "concert", "password", "doctor", "birthday", "paris", "salary", "garden",
    "python", "guitar", "secret",
];

fn isolation_scopes() -> Vec<Scope> {
    vec![
        scope("u1", None),
        scope("u1", Some("c1")),
        scope("u1", Some("c2")),
        Scope::for_user("u1")
            .unwrap()
            .in_chat("c1")
            .unwrap()
            .in_thread("t1")
            .unwrap(),
        scope("u2", Some("c1")),
        Scope::for_user("u1")
            .unwrap()
            .in_chat("c1")
            .unwrap()
            .in_tenant("acme")
            .unwrap(),
    ]
}

fn check_owned(
    seed: u64,
    op: &str,
    s: &Scope,
    entries: &[&MemoryEntry],
    model: &HashMap<MemoryId, usize>,
    si: usize,
) {
    for e in entries {
        assert_eq!(
            &e.scope, s,
            "seed {seed}: {op} in {s} returned an entry of {}",
            e.scope
        );
        assert_eq!(
            model.get(&e.id),
            Some(&si),
            "seed {seed}: {op} in {s} returned {} which it does not own",
            e.id
        );
        assert!(
            e.content.ends_with(&format!("[s{si}]")),
            "seed {seed}: {op} leaked content {:?}",
            e.content
        );
    }
}

/// Randomised operations over scopes that differ in one key each: no read ever returns
/// another scope's memory, and each scope ends with exactly the memories it should.
pub async fn scope_isolation_randomized(cx: Ctx) -> Outcome {
    let b = &*cx.backend;
    let caps = b.capabilities();
    let scopes = isolation_scopes();
    for seed in 1..=6u64 {
        for s in &scopes {
            b.delete_scope(s).await.unwrap();
        }
        let mut rng = Rng::new(seed);
        let mut owner: HashMap<MemoryId, usize> = HashMap::new();
        for _ in 0..80 {
            let si = rng.below(scopes.len());
            let s = &scopes[si];
            let word = VOCAB[rng.below(VOCAB.len())];
            match rng.below(9) {
                0..=2 => {
                    let n = 1 + rng.below(3);
                    let batch = (0..n)
                        .map(|_| {
                            let w2 = VOCAB[rng.below(VOCAB.len())];
                            NewMemory::new(format!("{word} {w2} [s{si}]")).with_tag(tag(word))
                        })
                        .collect();
                    for e in b.store_batch(s, batch).await.unwrap() {
                        owner.insert(e.id, si);
                    }
                }
                3 => {
                    for (cap, req) in [
                        (Capability::KeywordSearch, SearchRequest::keyword(word)),
                        (Capability::SemanticSearch, SearchRequest::semantic(word)),
                        (Capability::HybridSearch, SearchRequest::hybrid(word)),
                    ] {
                        if caps.supports(cap) {
                            let hits = b.search(s, &req.limit(50)).await.unwrap();
                            let entries: Vec<_> = hits.iter().map(|h| &h.entry).collect();
                            check_owned(seed, "search", s, &entries, &owner, si);
                        }
                    }
                }
                4 => {
                    let got = b.recent(s, 1000, &Filter::default()).await.unwrap();
                    check_owned(
                        seed,
                        "recent",
                        s,
                        &got.iter().collect::<Vec<_>>(),
                        &owner,
                        si,
                    );
                    if caps.supports(Capability::TagFilter) {
                        let got = b
                            .by_tags(s, &TagQuery::any([tag(word)]), 1000)
                            .await
                            .unwrap();
                        check_owned(
                            seed,
                            "by_tags",
                            s,
                            &got.iter().collect::<Vec<_>>(),
                            &owner,
                            si,
                        );
                    }
                }
                5 | 6 => {
                    // Probe a random known id from any scope.
                    if owner.is_empty() {
                        continue;
                    }
                    let keys: Vec<MemoryId> = {
                        let mut k: Vec<_> = owner.keys().copied().collect();
                        k.sort();
                        k
                    };
                    let id = keys[rng.below(keys.len())];
                    let mine = owner[&id] == si;
                    match b.get(s, id).await {
                        Ok(e) => {
                            assert!(
                                mine,
                                "seed {seed}: get in {s} returned another scope's {id}"
                            );
                            check_owned(seed, "get", s, &[&e], &owner, si);
                        }
                        Err(MemoryError::NotFound { .. }) => {
                            assert!(!mine, "seed {seed}: own id {id} not found")
                        }
                        Err(e) => panic!("seed {seed}: get failed: {}", crate::ErrorChain(&e)),
                    }
                    match b.delete(s, id).await {
                        Ok(()) => {
                            assert!(
                                mine,
                                "seed {seed}: delete in {s} removed another scope's {id}"
                            );
                            owner.remove(&id);
                        }
                        Err(MemoryError::NotFound { .. }) => assert!(!mine),
                        Err(e) => panic!("seed {seed}: delete failed: {}", crate::ErrorChain(&e)),
                    }
                }
                _ => {
                    let n = b.count(s).await.unwrap();
                    let expected = owner.values().filter(|&&o| o == si).count() as u64;
                    assert_eq!(n, expected, "seed {seed}: count of {s}");
                }
            }
        }
        for (si, s) in scopes.iter().enumerate() {
            let got: BTreeSet<MemoryId> =
                ids(&b.recent(s, 1000, &Filter::default()).await.unwrap())
                    .into_iter()
                    .collect();
            let want: BTreeSet<MemoryId> = owner
                .iter()
                .filter(|(_, o)| **o == si)
                .map(|(id, _)| *id)
                .collect();
            assert_eq!(got, want, "seed {seed}: final contents of {s}");
        }
    }
    Outcome::Passed
}

/// Many tasks store and search their own scopes at once: every write lands, none leaks.
pub async fn concurrent_tasks_never_lose_or_leak(cx: Ctx) -> Outcome {
    let caps = cx.backend.capabilities();
    let mut tasks = Vec::new();
    for t in 0..12 {
        let b = Arc::clone(&cx.backend);
        let caps = caps.clone();
        tasks.push(super::tokio::spawn(async move {
            let s = scope(&format!("worker-{t}"), Some("shared-chat"));
            for i in 0..20 {
                b.store(
                    &s,
                    NewMemory::new(format!("shared words memory {i} of worker {t}")),
                )
                .await
                .unwrap();
                let req = if caps.supports(Capability::KeywordSearch) {
                    SearchRequest::keyword("shared words memory")
                } else if caps.supports(Capability::SemanticSearch) {
                    SearchRequest::semantic("shared words memory")
                } else {
                    continue;
                };
                for h in b.search(&s, &req.limit(50)).await.unwrap() {
                    assert_eq!(h.entry.scope, s, "worker {t} saw another worker's memory");
                    assert!(h.entry.content.ends_with(&format!("of worker {t}")));
                }
            }
            s
        }));
    }
    for task in tasks {
        let s = task.await.expect("worker task panicked");
        assert_eq!(
            cx.backend.count(&s).await.unwrap(),
            20,
            "no lost write in {s}"
        );
    }
    Outcome::Passed
}

/// Vectors of another length or model are refused with both numbers and the store's model.
pub async fn dimension_mismatch_is_rejected(cx: Ctx) -> Outcome {
    require!(cx, Capability::SemanticSearch);
    let b = &*cx.backend;
    let s = scope("wendy", None);
    let wrong_dims = Arc::new(EmbeddingSpace::new("hash", "fnv1a-words-v1", 3).unwrap());
    let v3 = Embedding::new(wrong_dims, vec![0.5, 0.5, 0.5]).unwrap();
    match b
        .store(&s, NewMemory::new("bad vector").with_embedding(v3.clone()))
        .await
    {
        Err(
            e @ MemoryError::DimensionMismatch {
                got: 3,
                expected: 64,
                ..
            },
        ) => {
            let msg = e.to_string();
            assert!(msg.contains("3 dimensions") && msg.contains("64"), "{msg}");
            assert!(
                msg.contains(HashingEmbedder::MODEL),
                "names the store's model: {msg}"
            );
        }
        other => panic!("expected DimensionMismatch(3 vs 64), got {other:?}"),
    }
    let other_model = Arc::new(EmbeddingSpace::new("ollama", "nomic-embed-text", 64).unwrap());
    let foreign = Embedding::new(other_model, vec![0.1; 64]).unwrap();
    match b
        .store(
            &s,
            NewMemory::new("foreign vector").with_embedding(foreign.clone()),
        )
        .await
    {
        Err(MemoryError::SpaceMismatch { .. }) => {}
        other => panic!("expected SpaceMismatch, got {other:?}"),
    }
    assert!(matches!(
        b.search(&s, &SearchRequest::vector(v3)).await,
        Err(MemoryError::DimensionMismatch { .. })
    ));
    assert!(matches!(
        b.search(&s, &SearchRequest::vector(foreign)).await,
        Err(MemoryError::SpaceMismatch { .. })
    ));
    assert_eq!(b.count(&s).await.unwrap(), 0, "nothing was stored");
    let space = crate::EmbeddingProvider::space(&*cx.embedder);
    assert_eq!(
        b.info().embedding_space.as_deref(),
        Some(&*space),
        "info names the store's space"
    );
    Outcome::Passed
}

/// Non-ASCII text round-trips byte for byte and is searchable.
pub async fn unicode_content_round_trips(cx: Ctx) -> Outcome {
    let b = &*cx.backend;
    let s = Scope::for_user("ユーザー")
        .unwrap()
        .in_chat("чат/1=2%")
        .unwrap();
    let texts = [
        "Zoë visited 北京 last spring 🎉",
        "مرحبا بالعالم",
        "naïve café résumé",
        "line one\nline two\ttabbed",
    ];
    let mut stored = Vec::new();
    for t in texts {
        stored.push(store(b, &s, t).await);
    }
    for (e, t) in stored.iter().zip(texts) {
        assert_eq!(b.get(&s, e.id).await.unwrap().content, t);
    }
    if b.capabilities().supports(Capability::KeywordSearch) {
        let hits = b.search(&s, &SearchRequest::keyword("北京")).await.unwrap();
        assert_eq!(hit_ids(&hits), vec![stored[0].id]);
        let hits = b.search(&s, &SearchRequest::keyword("café")).await.unwrap();
        assert_eq!(hit_ids(&hits), vec![stored[2].id]);
    }
    assert_eq!(b.recent(&s, 10, &Filter::default()).await.unwrap().len(), 4);
    Outcome::Passed
}

/// Empty, NUL-bearing and oversized content is refused with the limit named.
pub async fn empty_and_oversized_content_rejected(cx: Ctx) -> Outcome {
    let b = &*cx.backend;
    let s = scope("xena", None);
    let max = b.info().limits.max_content_bytes;
    assert_invalid(b.store(&s, NewMemory::new("")).await, "content");
    assert_invalid(b.store(&s, NewMemory::new(" \n\t ")).await, "content");
    assert_invalid(b.store(&s, NewMemory::new("a\0b")).await, "content");
    match b.store(&s, NewMemory::new("x".repeat(max + 1))).await {
        Err(MemoryError::InvalidInput {
            field: "content",
            problem,
        }) => {
            assert!(
                problem.contains(&max.to_string()),
                "names the limit: {problem}"
            );
        }
        other => panic!("oversized content: expected InvalidInput, got {other:?}"),
    }
    // Exactly at the limit is fine, and multi-byte text is measured in bytes.
    let at_limit = "y".repeat(max);
    assert_eq!(
        b.store(&s, NewMemory::new(at_limit.clone()))
            .await
            .unwrap()
            .content,
        at_limit
    );
    assert!(
        b.store(&s, NewMemory::new("é".repeat(max / 2 + 1)))
            .await
            .is_err()
    );
    let bad_window = NewMemory::new("window").valid(Some(t0()), Some(t0()));
    assert_invalid(b.store(&s, bad_window).await, "validity");
    assert_eq!(b.count(&s).await.unwrap(), 1);
    Outcome::Passed
}

/// A message longer than the content limit goes in as linked parts
/// ([`NewMemory::split_to_fit`]): every part is accepted, the parts are found again by their
/// shared tag, newest first, and in time order they hold the whole text; the part holding a
/// word near the end is found by keyword search.
pub async fn oversized_message_stored_in_linked_parts(cx: Ctx) -> Outcome {
    let b = &*cx.backend;
    let s = scope("yann", None);
    let max = b.info().limits.max_content_bytes;
    let mut text = String::new();
    let mut i = 0;
    while text.len() <= max * 2 {
        text.push_str(&format!(
            "Line {i} of a very long answer, repeating itself. "
        ));
        i += 1;
    }
    text.push_str("The last line names the zeppelin.");
    let whole = NewMemory::new(text.clone())
        .with_role(crate::Role::Assistant)
        .at(t0());
    let parts = whole.split_to_fit(max);
    assert!(parts.len() >= 3, "{} parts", parts.len());
    let first = parts[0].id.expect("the first part has an id");
    let stored = b.store_batch(&s, parts.clone()).await.unwrap();
    assert_eq!(stored.len(), parts.len());
    let tag = Tag::new(format!("{}{first}", crate::PART_OF_TAG_PREFIX)).unwrap();
    let mut found = b
        .by_tags(&s, &TagQuery::any([tag]), parts.len() + 5)
        .await
        .unwrap();
    assert_eq!(found.len(), parts.len());
    found.sort_by_key(|e| e.created_at);
    let joined: String = found.iter().map(|e| e.content.as_str()).collect();
    assert_eq!(joined, text);
    assert_eq!(found[0].id, first);
    if b.capabilities().supports(Capability::KeywordSearch) {
        let hits = b
            .search(&s, &SearchRequest::keyword("zeppelin"))
            .await
            .unwrap();
        let last = found.last().map(|e| e.id);
        assert_eq!(hit_ids(&hits).first().copied(), last);
    }
    Outcome::Passed
}

/// A memory longer than the embedder's window is searched by meaning in full: each passage
/// that fits the window has its vector ([`crate::embed_passages`]), and the memory's
/// similarity is its best passage's. The memory is one hit however many of its passages
/// match, under a filter too; changing its text replaces its passages, and deleting it
/// removes them.
pub async fn long_memory_found_by_any_passage(cx: Ctx) -> Outcome {
    require!(cx, Capability::SemanticSearch);
    let windowed = Arc::new(
        HashingEmbedder::new(super::SUITE_DIMS)
            .unwrap()
            .with_window(200),
    );
    let made = cx
        .make(Setup {
            embedder: Some(windowed.clone()),
        })
        .await;
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
    for (i, t) in [
        "Dinner plans for friday night",
        "The dentist appointment moved to monday",
        "A recipe for lemon cake",
        "Gulls gather where the fishing boats come in",
    ]
    .iter()
    .enumerate()
    {
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
    assert!(
        (sem - best).abs() < 1e-3,
        "similarity {sem}, best passage {best}"
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

/// Malformed requests get InvalidInput before any work.
pub async fn invalid_requests_are_rejected(cx: Ctx) -> Outcome {
    let b = &*cx.backend;
    let caps = b.capabilities();
    let s = scope("yuri", None);
    store(b, &s, "something to find").await;
    let max = b.info().limits.max_results;
    assert_invalid(b.recent(&s, 0, &Filter::default()).await, "limit");
    assert_invalid(b.recent(&s, max + 1, &Filter::default()).await, "limit");
    if caps.supports(Capability::KeywordSearch) {
        assert_invalid(
            b.search(&s, &SearchRequest::keyword("x").limit(0)).await,
            "limit",
        );
        assert_invalid(b.search(&s, &SearchRequest::keyword("   ")).await, "query");
        assert_invalid(
            b.search(&s, &SearchRequest::keyword("x").threshold(f32::NAN))
                .await,
            "threshold",
        );
    }
    if caps.supports(Capability::TagFilter) {
        let empty = TagQuery::any(Vec::<Tag>::new());
        assert_invalid(b.by_tags(&s, &empty, 10).await, "tag");
    }
    if caps.supports(Capability::TimeFilter) {
        let backwards = Filter {
            created_after: Some(t0()),
            created_before: Some(t0()),
            ..Filter::default()
        };
        assert_invalid(b.recent(&s, 10, &backwards).await, "time");
    }
    assert_invalid(b.prune(&s, &PrunePolicy::new()).await, "prune");
    assert_eq!(b.count(&s).await.unwrap(), 1);
    Outcome::Passed
}

/// What a backend does not advertise fails with `Unsupported` naming the capability and
/// the backend; a store built without an embedder does not advertise semantic search.
pub async fn unsupported_capabilities_are_typed_errors(cx: Ctx) -> Outcome {
    let plain = cx.make(Setup { embedder: None }).await;
    let b = &*plain.backend;
    let caps = b.capabilities();
    let name = b.info().name;
    assert!(
        !caps.supports(Capability::SemanticSearch),
        "no embedder, no semantic search"
    );
    assert!(
        !caps.supports(Capability::HybridSearch),
        "no embedder, no hybrid search"
    );
    assert!(b.info().embedding_space.is_none());
    let s = scope("zack", None);
    let e = store(b, &s, "keyword only store").await;
    assert!(!e.embedded);
    for req in [
        SearchRequest::semantic("keyword only"),
        SearchRequest::hybrid("keyword only"),
    ] {
        match b.search(&s, &req).await {
            Err(MemoryError::Unsupported {
                capability,
                provider,
            }) => {
                assert_eq!(capability, req.mode.capability());
                assert_eq!(provider, name);
            }
            other => panic!("expected Unsupported, got {other:?}"),
        }
    }
    if caps.supports(Capability::KeywordSearch) {
        assert_eq!(
            b.search(&s, &SearchRequest::keyword("keyword"))
                .await
                .unwrap()
                .len(),
            1
        );
    }
    // Every capability the main backend lacks is refused the same way.
    let main = &*cx.backend;
    let mcaps = main.capabilities();
    let probes: Vec<(Capability, crate::Result<()>)> = vec![
        (
            Capability::KeywordSearch,
            main.search(&s, &SearchRequest::keyword("x"))
                .await
                .map(drop),
        ),
        (
            Capability::TagFilter,
            main.by_tags(&s, &TagQuery::any([tag("x")]), 1)
                .await
                .map(drop),
        ),
        (
            Capability::TimeFilter,
            main.recent(
                &s,
                1,
                &Filter {
                    created_after: Some(t0()),
                    ..Filter::default()
                },
            )
            .await
            .map(drop),
        ),
        (
            Capability::Update,
            main.update(&s, e.id, MemoryPatch::default())
                .await
                .map(drop),
        ),
        (
            Capability::PruneTtl,
            main.prune(
                &s,
                &PrunePolicy {
                    max_age: Some(DAY),
                    ..PrunePolicy::new()
                },
            )
            .await
            .map(drop),
        ),
        (
            Capability::PruneMaxCount,
            main.prune(
                &s,
                &PrunePolicy {
                    max_count: Some(1),
                    ..PrunePolicy::new()
                },
            )
            .await
            .map(drop),
        ),
        (
            Capability::PruneDecay,
            main.prune(
                &s,
                &PrunePolicy {
                    decay: Some(DecayPolicy {
                        half_life: DAY,
                        min_strength: 0.1,
                    }),
                    ..PrunePolicy::new()
                },
            )
            .await
            .map(drop),
        ),
    ];
    for (cap, result) in probes {
        if !mcaps.supports(cap) {
            match result {
                Err(MemoryError::Unsupported { capability, .. }) => assert_eq!(capability, cap),
                other => panic!("{cap} is not advertised, expected Unsupported, got {other:?}"),
            }
        }
    }
    Outcome::Passed
}

/// `user_scopes` lists exactly the user's non-empty scopes in one tenant, nobody else's;
/// `scopes` lists those of a tenant, of a user in every tenant, or of the whole store.
pub async fn user_scopes_lists_only_that_user(cx: Ctx) -> Outcome {
    let b = &*cx.backend;
    let mine = [
        scope("olga", None),
        scope("olga", Some("1")),
        Scope::for_user("olga")
            .unwrap()
            .in_chat("1")
            .unwrap()
            .in_thread("t")
            .unwrap(),
    ];
    let others = [
        scope("olgb", Some("1")),
        Scope::for_user("olga")
            .unwrap()
            .in_chat("1")
            .unwrap()
            .in_tenant("acme")
            .unwrap(),
    ];
    for s in mine.iter().chain(&others) {
        store(b, s, "something").await;
    }
    let emptied = scope("olga", Some("gone"));
    let e = store(b, &emptied, "soon deleted").await;
    b.delete(&emptied, e.id).await.unwrap();
    let mut want = mine.to_vec();
    want.sort();
    assert_eq!(
        b.user_scopes(crate::DEFAULT_TENANT, "olga").await.unwrap(),
        want
    );
    assert_eq!(
        b.user_scopes("acme", "olga").await.unwrap(),
        vec![others[1].clone()]
    );
    assert!(
        b.user_scopes(crate::DEFAULT_TENANT, "nobody")
            .await
            .unwrap()
            .is_empty()
    );
    let mut every: Vec<Scope> = mine.iter().chain(&others).cloned().collect();
    every.sort();
    assert_eq!(b.scopes(None, None).await.unwrap(), every);
    let mut olgas: Vec<Scope> = mine.iter().chain([&others[1]]).cloned().collect();
    olgas.sort();
    assert_eq!(b.scopes(None, Some("olga")).await.unwrap(), olgas);
    assert_eq!(
        b.scopes(Some("acme"), None).await.unwrap(),
        vec![others[1].clone()]
    );
    Outcome::Passed
}

/// A lease is held by one holder at a time: another holder cannot take it until it is
/// released or expires, its holder can extend it, a stranger's release does nothing, and
/// of eight concurrent takers of a free lease exactly one wins. Bad names and ttls are
/// refused. Leases are not memories: taking them adds no scope.
pub async fn leases_are_held_by_one_holder_at_a_time(cx: Ctx) -> Outcome {
    let b = &*cx.backend;
    // Names unique to this run, for stores that outlive it.
    let run = MemoryId::new().to_string();
    let name = |n: &str| format!("{n}:{run}");
    let minute = Duration::from_secs(60);
    let (learn, prune) = (name("learn"), name("prune"));
    assert!(b.try_lease(&learn, "replica-a", minute).await.unwrap());
    assert!(
        !b.try_lease(&learn, "replica-b", minute).await.unwrap(),
        "held by replica-a"
    );
    assert!(
        b.try_lease(&learn, "replica-a", minute).await.unwrap(),
        "its holder extends it"
    );
    assert!(
        b.try_lease(&prune, "replica-b", minute).await.unwrap(),
        "another name is another lease"
    );
    b.release_lease(&learn, "replica-b").await.unwrap();
    assert!(
        !b.try_lease(&learn, "replica-b", minute).await.unwrap(),
        "a stranger's release does nothing"
    );
    b.release_lease(&learn, "replica-a").await.unwrap();
    assert!(
        b.try_lease(&learn, "replica-b", minute).await.unwrap(),
        "free once released"
    );

    let short = name("short");
    assert!(
        b.try_lease(&short, "replica-a", Duration::from_millis(50))
            .await
            .unwrap()
    );
    super::tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        b.try_lease(&short, "replica-b", minute).await.unwrap(),
        "an expired lease goes to the next taker"
    );
    assert!(!b.try_lease(&short, "replica-a", minute).await.unwrap());

    let race = name("race");
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let (b, race) = (Arc::clone(&cx.backend), race.clone());
            super::tokio::spawn(async move {
                b.try_lease(&race, &format!("replica-{i}"), minute)
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut won = 0;
    for t in tasks {
        won += usize::from(t.await.unwrap());
    }
    assert_eq!(won, 1, "one of eight concurrent takers holds it");

    assert_invalid(b.try_lease("", "replica-a", minute).await, "lease name");
    assert_invalid(b.try_lease(&learn, "", minute).await, "lease holder");
    assert_invalid(
        b.try_lease(&learn, &"x".repeat(crate::MAX_LEASE_NAME_BYTES + 1), minute)
            .await,
        "lease holder",
    );
    assert_invalid(
        b.try_lease(&learn, "replica-b", Duration::ZERO).await,
        "lease ttl",
    );
    assert!(
        b.scopes(None, None).await.unwrap().is_empty(),
        "leases are not memories"
    );
    Outcome::Passed
}
