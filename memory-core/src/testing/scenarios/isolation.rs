//! Isolation and sharing the store: no scope reads another's memories, concurrent tasks lose nothing, scope listings, leases.

use super::*;

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
        tasks.push(crate::testing::tokio::spawn(async move {
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
/// released, ended or expired, its holder can extend it, a stranger's release does nothing,
/// and of eight concurrent takers of a free lease exactly one wins. Bad names and ttls are
/// refused. Leases are not memories: taking them adds no scope.
pub async fn leases_are_held_by_one_holder_at_a_time(cx: Ctx) -> Outcome {
    require!(cx, Capability::Leases);
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
    // Ending a lease frees it whoever holds it (erasing a person ends theirs).
    b.end_lease(&prune).await.unwrap();
    assert!(
        b.try_lease(&prune, "replica-a", minute).await.unwrap(),
        "free once ended"
    );
    b.end_lease(&name("never-taken")).await.unwrap();

    let short = name("short");
    assert!(
        b.try_lease(&short, "replica-a", Duration::from_millis(50))
            .await
            .unwrap()
    );
    crate::testing::tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        b.try_lease(&short, "replica-b", minute).await.unwrap(),
        "an expired lease goes to the next taker"
    );
    assert!(!b.try_lease(&short, "replica-a", minute).await.unwrap());

    let race = name("race");
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let (b, race) = (Arc::clone(&cx.backend), race.clone());
            crate::testing::tokio::spawn(async move {
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
