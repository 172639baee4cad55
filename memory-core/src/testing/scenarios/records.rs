//! Records beside the memories: a bounded ring per scope and kind, newest first, kept apart
//! per scope, and gone with the scope's deletions.

use super::*;
use crate::Record;

/// The `at` of the `i`th record of a scenario: a millisecond apart, from [`t0`].
fn at(i: i64) -> Timestamp {
    Timestamp::from_millis(t0().as_millis() + i).unwrap()
}

fn record(kind: &str, i: i64, body: &str) -> Record {
    Record::new(kind, at(i), body)
}

async fn bodies(b: &dyn MemoryBackend, s: &Scope, kind: &str, limit: usize) -> Vec<String> {
    b.records(s, kind, limit)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.body)
        .collect()
}

/// Prunes `s` down to its newest memory.
async fn keep_one(b: &dyn MemoryBackend, s: &Scope) -> crate::PruneReport {
    let policy = PrunePolicy {
        max_count: Some(1),
        ..PrunePolicy::new()
    };
    b.prune(s, &policy).await.unwrap()
}

/// Keeping more records than the ring holds leaves the newest, listed newest first (the
/// latest time, and of equal times the one kept last); a record older than a full ring's is
/// not kept. Each kind is a ring of its own, and each scope: another user's, another chat's
/// or another tenant's sees none of them. What was kept comes back unchanged; bad records
/// are refused with what was wrong.
pub async fn records_keep_the_newest_of_each_kind_per_scope(cx: Ctx) -> Outcome {
    require!(cx, Capability::Records);
    let b = &*cx.backend;
    let s = scope("rita", Some("1"));
    assert!(b.records(&s, "prompt", 10).await.unwrap().is_empty());
    for i in 0..5 {
        b.keep_record(&s, record("prompt", i, &format!("p{i}")), 3)
            .await
            .unwrap();
    }
    assert_eq!(bodies(b, &s, "prompt", 10).await, ["p4", "p3", "p2"]);
    assert_eq!(bodies(b, &s, "prompt", 2).await, ["p4", "p3"], "the limit");
    // A second kind does not evict the first, nor the first the second.
    b.keep_record(&s, record("note", 1, "n1"), 1).await.unwrap();
    b.keep_record(&s, record("prompt", 5, "p5"), 3)
        .await
        .unwrap();
    assert_eq!(bodies(b, &s, "note", 10).await, ["n1"]);
    assert_eq!(bodies(b, &s, "prompt", 10).await, ["p5", "p4", "p3"]);
    // Older than every record of a full ring: trimmed at once. Of equal times, the one
    // kept last is the newer.
    b.keep_record(&s, record("prompt", 0, "late"), 3)
        .await
        .unwrap();
    assert_eq!(bodies(b, &s, "prompt", 10).await, ["p5", "p4", "p3"]);
    b.keep_record(&s, record("prompt", 5, "p5-again"), 3)
        .await
        .unwrap();
    assert_eq!(bodies(b, &s, "prompt", 10).await, ["p5-again", "p5", "p4"]);
    // A smaller ring trims what a larger one kept.
    b.keep_record(&s, record("prompt", 6, "p6"), 2)
        .await
        .unwrap();
    assert_eq!(bodies(b, &s, "prompt", 10).await, ["p6", "p5-again"]);

    // Kept as given.
    let json = r#"{"report": {"cues": ["Zoë", "東京"]}, "by": "telegram"}"#;
    b.keep_record(&s, record("note", 9, json), 5).await.unwrap();
    let newest = b.records(&s, "note", 1).await.unwrap();
    assert_eq!(newest, [record("note", 9, json)]);

    // Other scopes see none of them.
    let others = [
        scope("ritb", Some("1")),
        scope("rita", Some("2")),
        scope("rita", None),
        Scope::for_user("rita")
            .unwrap()
            .in_chat("1")
            .unwrap()
            .in_tenant("acme")
            .unwrap(),
    ];
    for o in &others {
        for kind in ["prompt", "note"] {
            assert!(
                b.records(o, kind, 10).await.unwrap().is_empty(),
                "{o} sees {kind} records of {s}"
            );
        }
    }
    b.keep_record(&others[0], record("prompt", 7, "ritb's"), 3)
        .await
        .unwrap();
    assert_eq!(bodies(b, &others[0], "prompt", 10).await, ["ritb's"]);
    assert_eq!(bodies(b, &s, "prompt", 10).await, ["p6", "p5-again"]);
    // Records are not memories.
    assert_eq!(b.count(&s).await.unwrap(), 0);
    assert!(
        b.recent(&s, 10, &Filter::default())
            .await
            .unwrap()
            .is_empty()
    );

    // Refused whole, with what was wrong and what is accepted.
    let big = "x".repeat(crate::MAX_RECORD_BYTES + 1);
    match b.keep_record(&s, record("prompt", 8, &big), 3).await {
        Err(MemoryError::InvalidInput { field, problem }) => {
            assert_eq!(field, "record body");
            assert!(
                problem.contains(&(crate::MAX_RECORD_BYTES + 1).to_string())
                    && problem.contains(&crate::MAX_RECORD_BYTES.to_string()),
                "the size and the limit: {problem}"
            );
        }
        other => panic!("expected InvalidInput about the body, got {other:?}"),
    }
    assert_invalid(
        b.keep_record(&s, record("prompt", 8, "a\0b"), 3).await,
        "record body",
    );
    let long = "k".repeat(crate::MAX_RECORD_KIND_BYTES + 1);
    for kind in ["", "Prompt", "prompt report", &long] {
        assert_invalid(
            b.keep_record(&s, record(kind, 8, "x"), 3).await,
            "record kind",
        );
        assert_invalid(b.records(&s, kind, 3).await, "record kind");
    }
    for keep in [0, crate::MAX_RECORDS_KEPT + 1] {
        assert_invalid(
            b.keep_record(&s, record("prompt", 8, "x"), keep).await,
            "records kept",
        );
    }
    assert_invalid(b.records(&s, "prompt", 0).await, "limit");
    assert_eq!(bodies(b, &s, "prompt", 10).await, ["p6", "p5-again"]);
    Outcome::Passed
}

/// Records go with their scope's deletions: deleting one of its memories removes every
/// record of the scope (of every kind) that names nothing it quotes, and deleting the scope
/// removes all, while other scopes keep theirs and pruning keeps them. A scope that holds only records is listed with the
/// scopes, until they go.
pub async fn records_go_with_their_scopes_deletions(cx: Ctx) -> Outcome {
    require!(cx, Capability::Records);
    let b = &*cx.backend;
    let (s, other) = (scope("rosa", Some("1")), scope("rosa", Some("2")));
    let keep_some = |s: Scope| async move {
        b.keep_record(&s, record("prompt", 1, "asked about Miso"), 4)
            .await
            .unwrap();
        b.keep_record(&s, record("note", 2, "Miso"), 4)
            .await
            .unwrap();
    };
    // Only records: listed, so erasing a person finds them.
    keep_some(s.clone()).await;
    assert_eq!(
        b.user_scopes(crate::DEFAULT_TENANT, "rosa").await.unwrap(),
        std::slice::from_ref(&s)
    );
    assert_eq!(b.delete_scope(&s).await.unwrap(), 0);
    assert!(b.records(&s, "prompt", 10).await.unwrap().is_empty());
    assert!(b.records(&s, "note", 10).await.unwrap().is_empty());
    assert!(
        b.user_scopes(crate::DEFAULT_TENANT, "rosa")
            .await
            .unwrap()
            .is_empty()
    );

    // Deleting one memory of the scope takes its records along; the other scope's stay.
    let asked = store(b, &s, "What is my cat called? Miso, I think").await;
    let kept = store(b, &s, "Something else").await;
    keep_some(s.clone()).await;
    store(b, &other, "In the other chat").await;
    keep_some(other.clone()).await;
    b.delete(&s, asked.id).await.unwrap();
    for kind in ["prompt", "note"] {
        assert!(b.records(&s, kind, 10).await.unwrap().is_empty(), "{kind}");
        assert_eq!(b.records(&other, kind, 10).await.unwrap().len(), 1);
    }
    // A delete that finds nothing changes nothing.
    keep_some(s.clone()).await;
    assert_not_found(b.delete(&s, MemoryId::new()).await, "a missing memory");
    assert_eq!(b.records(&s, "prompt", 10).await.unwrap().len(), 1);

    // Pruning keeps them.
    if b.capabilities().supports(Capability::PruneMaxCount) {
        store(b, &s, "One more").await;
        let pruned = keep_one(b, &s).await;
        assert_eq!(pruned.removed.len(), 1, "{pruned:?}");
        assert_eq!(b.records(&s, "prompt", 10).await.unwrap().len(), 1);
    }

    // Deleting the scope takes them, and only them.
    assert!(b.delete_scope(&s).await.unwrap() >= 1);
    assert!(b.records(&s, "prompt", 10).await.unwrap().is_empty());
    assert!(b.records(&s, "note", 10).await.unwrap().is_empty());
    assert_not_found(b.get(&s, kept.id).await, "a memory of the deleted scope");
    assert_eq!(b.records(&other, "prompt", 10).await.unwrap().len(), 1);
    assert_eq!(
        b.user_scopes(crate::DEFAULT_TENANT, "rosa").await.unwrap(),
        [other]
    );
    Outcome::Passed
}

/// A record naming the memories it quotes ([`Record::quoting`]) follows them: deleting one
/// of them removes it, and so does pruning one; deleting another memory leaves it. A record
/// naming none goes with the deletion of any memory of its scope (it may quote any) and
/// stays when pruning. Another scope's records stay, even one naming the same id. What a
/// record names comes back as kept.
pub async fn records_follow_the_memories_they_quote(cx: Ctx) -> Outcome {
    require!(cx, Capability::Records);
    let b = &*cx.backend;
    let (s, other) = (scope("rhea", Some("1")), scope("rhea", Some("2")));
    let a = store(b, &s, "Rhea's sister is called Ione").await;
    let c = store(b, &s, "Rhea plays the oboe").await;
    let d = store(b, &s, "Rhea lives in Lyon").await;
    let quoting = |i: i64, body: &str, ids: &[MemoryId]| {
        record("prompt", i, body).quoting(ids.iter().copied())
    };
    for r in [
        quoting(1, "a", &[a.id]),
        quoting(2, "c", &[c.id]),
        quoting(3, "a and c", &[c.id, a.id]),
        quoting(4, "d", &[d.id]),
        record("prompt", 5, "unnamed"),
    ] {
        b.keep_record(&s, r, 10).await.unwrap();
    }
    b.keep_record(&s, quoting(6, "note on c", &[c.id]), 10)
        .await
        .unwrap();
    let on_note = record("note", 6, "note on c").quoting([c.id]);
    b.keep_record(&s, on_note.clone(), 10).await.unwrap();
    b.keep_record(&other, quoting(7, "elsewhere", &[a.id]), 10)
        .await
        .unwrap();
    let kept = b.records(&s, "prompt", 10).await.unwrap();
    assert_eq!(
        kept[3],
        quoting(3, "a and c", &[c.id, a.id]),
        "kept as given"
    );

    b.delete(&s, a.id).await.unwrap();
    assert_eq!(
        bodies(b, &s, "prompt", 10).await,
        ["note on c", "d", "c"],
        "the records quoting the deleted memory, and the unnamed one, are gone"
    );
    assert_eq!(b.records(&s, "note", 10).await.unwrap(), [on_note]);
    assert_eq!(bodies(b, &other, "prompt", 10).await, ["elsewhere"]);

    if b.capabilities().supports(Capability::PruneMaxCount) {
        b.keep_record(&s, record("prompt", 8, "unnamed again"), 10)
            .await
            .unwrap();
        let pruned = keep_one(b, &s).await;
        assert_eq!(pruned.removed.len(), 1, "{pruned:?}");
        let gone = pruned.removed[0].0;
        let left = b.records(&s, "prompt", 10).await.unwrap();
        assert!(
            left.iter().all(|r| !r.quotes.contains(&gone)),
            "a record quoting the pruned memory is left: {left:?}"
        );
        let stays = if gone == c.id { d.id } else { c.id };
        assert!(left.iter().any(|r| r.quotes.contains(&stays)), "{left:?}");
        assert!(left.iter().any(|r| r.body == "unnamed again"), "{left:?}");
    }

    assert!(b.delete_scope(&s).await.unwrap() >= 1);
    assert!(b.records(&s, "prompt", 10).await.unwrap().is_empty());
    assert!(b.records(&s, "note", 10).await.unwrap().is_empty());
    assert_eq!(bodies(b, &other, "prompt", 10).await, ["elsewhere"]);
    Outcome::Passed
}
