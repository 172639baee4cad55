//! Bad input refused with a typed error that names what was wrong: vectors of another space, bad content, malformed requests, capabilities not advertised.

use super::*;

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
        (
            Capability::Records,
            main.records(&s, "prompt", 1).await.map(drop),
        ),
        (
            Capability::Records,
            main.keep_record(&s, crate::Record::new("prompt", t0(), "{}"), 1)
                .await,
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
