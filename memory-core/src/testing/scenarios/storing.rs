//! Storing and reading back: round trips, batches, ids, text of every size.

use super::*;

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
