//! Unit tests of `entry`.

use super::*;

#[test]
fn tags_normalise_and_reject_bad_values() {
    assert_eq!(Tag::new(" Work ").unwrap().as_str(), "work");
    assert!(Tag::new("two words").is_err());
    assert!(Tag::new("").is_err());
    assert!(Tag::new("x".repeat(65)).is_err());
    let set = tags(["b", "A", "a"]).unwrap();
    assert_eq!(set.iter().map(Tag::as_str).collect::<Vec<_>>(), ["a", "b"]);
}

#[test]
fn content_checks_name_the_limit() {
    assert!(validate_content("  \n", 10).is_err());
    let err = validate_content("hello world", 5).unwrap_err().to_string();
    assert!(
        err.contains("11 bytes") && err.contains("at most 5"),
        "{err}"
    );
    assert!(validate_content("a\0b", 10).is_err());
    assert!(validate_content("Zoë 北京 🎉", 100).is_ok());
}

#[test]
fn batches_refuse_repeated_ids_bad_content_and_refused_vectors() {
    let id = MemoryId::new();
    let ok = |_: &Embedding| Ok(());
    let batch = [
        NewMemory::new("a").with_id(id),
        NewMemory::new("b"),
        NewMemory::new("c").with_id(id),
    ];
    assert!(matches!(
        NewMemory::validate_batch(&batch, 100, ok),
        Err(MemoryError::Conflict { id: got }) if got == id
    ));
    let distinct = [
        NewMemory::new("a").with_id(id),
        NewMemory::new("b").with_id(MemoryId::new()),
        NewMemory::new("c"),
        NewMemory::new("d"),
    ];
    assert!(NewMemory::validate_batch(&distinct, 100, ok).is_ok());
    let too_long = [NewMemory::new("a"), NewMemory::new("far too long")];
    assert!(matches!(
        NewMemory::validate_batch(&too_long, 5, ok),
        Err(MemoryError::InvalidInput {
            field: "content",
            ..
        })
    ));

    let space = std::sync::Arc::new(crate::EmbeddingSpace::new("p", "m", 2).unwrap());
    let e = Embedding::new(space, vec![1.0, 0.0]).unwrap();
    let with_vector = [NewMemory::new("a"), NewMemory::new("b").with_embedding(e)];
    let mut checked = 0;
    let refuse = |_: &Embedding| {
        checked += 1;
        Err(MemoryError::invalid("embedding", "refused"))
    };
    assert!(matches!(
        NewMemory::validate_batch(&with_vector, 100, refuse),
        Err(MemoryError::InvalidInput {
            field: "embedding",
            ..
        })
    ));
    assert_eq!(checked, 1);
}

#[test]
fn ids_parse_and_reject_garbage() {
    let id = MemoryId::new();
    assert_eq!(id.to_string().parse::<MemoryId>().unwrap(), id);
    let err = "not-an-id".parse::<MemoryId>().unwrap_err().to_string();
    assert!(err.contains("not-an-id"), "{err}");
}

#[test]
fn importance_is_bounded() {
    assert!(Importance::new(1.5).is_err());
    assert!(Importance::new(f32::NAN).is_err());
    assert!(serde_json::from_str::<Importance>("-0.1").is_err());
    assert_eq!(Importance::new(0.25).unwrap().get(), 0.25);
}

#[test]
fn a_long_memory_becomes_linked_parts_that_hold_all_of_it() {
    let fits = NewMemory::new("short").split_to_fit(100);
    assert_eq!(fits.len(), 1);
    assert!(fits[0].tags.is_empty());

    let mut text = String::new();
    for i in 0..400 {
        text.push_str(&format!("Sentence {i} says something é. "));
        if i % 50 == 49 {
            text.push_str("\n\n");
        }
    }
    let at = Timestamp::from_millis(1_700_000_000_000).unwrap();
    let id = MemoryId::new();
    let m = NewMemory::new(text.clone())
        .with_role(Role::Assistant)
        .with_context("in reply to: hi")
        .at(at);
    let m = NewMemory { id: Some(id), ..m };
    let parts = m.clone().split_to_fit(1000);
    assert!(parts.len() >= 13, "{}", parts.len());
    assert_eq!(
        parts.iter().map(|p| p.content.as_str()).collect::<String>(),
        text
    );
    let n = parts.len();
    for (k, p) in parts.iter().enumerate() {
        assert!(p.content.len() <= 1000);
        assert!(p.validate(1000).is_ok());
        assert_eq!(p.role, Some(Role::Assistant));
        assert_eq!(p.context.as_deref(), Some("in reply to: hi"));
        assert_eq!(
            p.created_at,
            Some(at.plus(std::time::Duration::from_millis(k as u64)))
        );
        let tags: Vec<&str> = p.tags.iter().map(Tag::as_str).collect();
        assert!(tags.contains(&format!("part-of:{id}").as_str()), "{tags:?}");
        assert!(
            tags.contains(&format!("part:{}-of-{n}", k + 1).as_str()),
            "{tags:?}"
        );
    }
    // Parts end at a sentence or paragraph break, not mid-word.
    assert!(parts[0].content.ends_with(". ") || parts[0].content.ends_with('\n'));
    assert_eq!(parts[0].id, Some(id));
    // The same memory splits into the same ids (idempotent imports).
    let again = m.split_to_fit(1000);
    let ids = |ps: &[NewMemory]| ps.iter().map(|p| p.id).collect::<Vec<_>>();
    assert_eq!(ids(&again), ids(&parts));
    let distinct: HashSet<_> = ids(&parts).into_iter().collect();
    assert_eq!(distinct.len(), n);
    // Text without a break is cut on character boundaries.
    let wall = "é".repeat(5000);
    let parts = NewMemory::new(wall.clone()).split_to_fit(999);
    assert_eq!(
        parts.iter().map(|p| p.content.as_str()).collect::<String>(),
        wall
    );
    assert!(parts.iter().all(|p| p.content.len() <= 999));
    // Only the later parts are embedded by their heads.
    assert!(!embeds_head_only(parts[0].tags.iter().map(Tag::as_str)));
    assert!(
        parts[1..]
            .iter()
            .all(|p| embeds_head_only(p.tags.iter().map(Tag::as_str)))
    );
    assert!(!embeds_head_only(fits[0].tags.iter().map(Tag::as_str)));
}

#[test]
fn a_message_longer_than_a_mib_keeps_its_first_mib_and_says_what_was_left_out() {
    // 4 MiB of distinct words, in sentences: what a huge paste looks like.
    let mut text = String::from("My cat is called Zorro. ");
    let mut i = 0u64;
    while text.len() < 4 * MAX_MESSAGE_BYTES {
        text.push_str(&format!("word{i:x} "));
        if i % 9 == 8 {
            text.push_str("and so on. ");
        }
        i += 1;
    }
    let cut = MessageCut::of(&text).unwrap();
    assert!(cut.kept <= MAX_MESSAGE_BYTES && cut.kept > MAX_MESSAGE_BYTES / 2);
    assert_eq!(cut.kept + cut.left_out, text.len());
    let said = cut.to_string();
    assert!(
        said.contains(&cut.left_out.to_string()) && said.contains("1 MiB"),
        "{said}"
    );

    let parts = NewMemory::new(text.clone()).split_to_fit(DEFAULT_MAX_CONTENT_BYTES);
    let stored: String = parts.iter().map(|p| p.content.as_str()).collect();
    let note = cut.note();
    assert!(stored.ends_with(&note), "{}", &stored[stored.len() - 200..]);
    assert!(note.contains(&cut.left_out.to_string()), "{note}");
    let kept = stored.strip_suffix(&note).unwrap().trim_end();
    assert_eq!(kept, text[..cut.kept].trim_end());
    assert!(stored.len() <= MAX_MESSAGE_BYTES + note.len() + 2);
    assert!(parts.len() <= 2 * (MAX_MESSAGE_BYTES / DEFAULT_MAX_CONTENT_BYTES) + 1);
    assert!(parts[0].content.starts_with("My cat is called Zorro."));
    for p in &parts {
        assert!(p.validate(DEFAULT_MAX_CONTENT_BYTES).is_ok());
    }
    assert!(!embeds_head_only(parts[0].tags.iter().map(Tag::as_str)));
    assert!(
        parts[1..]
            .iter()
            .all(|p| embeds_head_only(p.tags.iter().map(Tag::as_str)))
    );

    // At most a MiB is kept whole, and a MiB and a byte is cut.
    let mib = "a".repeat(MAX_MESSAGE_BYTES);
    assert_eq!(MessageCut::of(&mib), None);
    let stored: String = NewMemory::new(mib.clone())
        .split_to_fit(DEFAULT_MAX_CONTENT_BYTES)
        .iter()
        .map(|p| p.content.as_str())
        .collect();
    assert_eq!(stored, mib);
    assert!(MessageCut::of(&format!("{mib}b")).is_some());
}
