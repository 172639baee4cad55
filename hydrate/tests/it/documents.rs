//! Documents as the vector kind: files indexed with `add_document` into each user's own
//! documents scope reach that user's prompt as passages with `path:start-end`, and never
//! another user's; a keyword-only store serves them too; re-adding, changing, listing and
//! removing files; bad files are refused one by one with the reason.
//! Needs the `documents` feature (on in `--all-features`).

#![cfg(feature = "documents")]
use crate::common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::{chat_scope, config, embedder, input, request, seed_alice};
use hydrate::{
    Change, DocumentFormat, DocumentSource, Error, Hydrated, HydrationConfig, MAX_DOCUMENT_BYTES,
    SourceKind, SourceStatus, add_document, compile, documents_scope, hydrate, list_documents,
    remove_documents, split_document,
};
use memory_core::{MemoryBackend, Scope};
use memory_inmem::InMemoryBackend;

const QUESTION: &str = "Where does Miso sleep at night?";

/// Alice's notes: three sections, too long for one passage, so line ranges matter.
fn alice_notes() -> String {
    let filler = |topic: &str| {
        format!("Some notes about {topic} that go on for a while to fill the section. ").repeat(5)
    };
    format!(
        "# Groceries\n\n{}\n\n# Miso\n\nMiso sleeps on the green armchair by the window at \
         night.\n{}\n\n# Trains\n\n{}\n",
        filler("groceries"),
        filler("the cat"),
        filler("trains to Porto")
    )
}

const BOB_NOTES: &str = "# Miso\n\nMiso sleeps at night in Bob's blue laundry basket.\n\
                         Bob's locker code is 4711.\n";

fn write(dir: &Path, name: &str, text: impl AsRef<[u8]>) -> PathBuf {
    let path = dir.join(name);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    std::fs::write(&path, text).unwrap();
    path
}

fn store(with_vectors: bool) -> Arc<dyn MemoryBackend> {
    Arc::new(InMemoryBackend::new(with_vectors.then(embedder)))
}

fn with_documents(store: &Arc<dyn MemoryBackend>, vectors: bool) -> HydrationConfig {
    let e = vectors.then(embedder);
    let source = DocumentSource::new(Arc::clone(store), e.clone()).unwrap();
    config(Arc::clone(store), e).with_source(SourceKind::Vector, Arc::new(source))
}

async fn run(cfg: &HydrationConfig, user: &str) -> (Hydrated, String) {
    let h = hydrate(cfg, &input(chat_scope(user), request(QUESTION, 8000)))
        .await
        .unwrap();
    let prompt = compile(cfg, &h).unwrap();
    let text = prompt
        .messages
        .iter()
        .map(|m| m.content.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    (h, text)
}

fn vector_report(h: &Hydrated) -> (SourceStatus, usize, Option<String>) {
    let r = h
        .sources
        .iter()
        .find(|s| s.kind == SourceKind::Vector)
        .unwrap();
    (r.status, r.kept, r.search.clone())
}

/// The `path:start-end` of the passage of `path` holding `needle`, as the splitter says.
fn provenance_of(path: &Path, text: &str, needle: &str) -> String {
    let path = std::fs::canonicalize(path).unwrap();
    let chunks = split_document(path.to_str().unwrap(), text, DocumentFormat::Markdown).unwrap();
    assert!(chunks.len() > 1, "the fixture should split: {chunks:#?}");
    chunks
        .iter()
        .find(|c| c.text.contains(needle))
        .unwrap()
        .provenance()
}

/// The prompt's item (from its `- ` to the end of its last line) that ends with
/// `(provenance)`.
fn passage<'t>(text: &'t str, provenance: &str) -> &'t str {
    let end = text
        .find(&format!("({provenance})"))
        .unwrap_or_else(|| panic!("({provenance}) is in the prompt: {text}"));
    let start = text[..end].rfind("\n- ").map_or(0, |i| i + 1);
    &text[start..end]
}

#[tokio::test]
async fn passages_reach_the_prompt_with_their_file_and_lines() {
    let store = store(true);
    seed_alice(store.as_ref()).await;
    let dir = tempfile::tempdir().unwrap();
    let notes = write(dir.path(), "notes.md", alice_notes());
    let added = add_document(store.as_ref(), &chat_scope("alice"), &notes)
        .await
        .unwrap();
    assert_eq!(added.change, Change::Indexed);
    assert!(added.chunks > 1, "{added:?}");
    let cfg = with_documents(&store, true);
    let (h, text) = run(&cfg, "alice").await;
    let (status, kept, search) = vector_report(&h);
    assert_eq!(status, SourceStatus::Complete);
    assert!(kept >= 1, "{:?}", h.sources);
    assert_eq!(search.as_deref(), Some("hybrid"));
    assert!(text.contains("<recalled-memory kind=\"vector\">"), "{text}");
    // The passage holding the answer, closed by its provenance.
    let provenance = provenance_of(&notes, &alice_notes(), "green armchair");
    let item = passage(&text, &provenance);
    assert!(item.contains("green armchair"), "{item}");
    // Memories are still there beside the passages.
    assert!(text.contains("Miso"), "{text}");
}

#[tokio::test]
async fn one_users_documents_never_reach_another_users_prompt() {
    let store = store(true);
    let dir = tempfile::tempdir().unwrap();
    let alice = write(dir.path(), "alice/notes.md", alice_notes());
    let bob = write(dir.path(), "bob/notes.md", BOB_NOTES);
    add_document(store.as_ref(), &chat_scope("alice"), &alice)
        .await
        .unwrap();
    // Bob indexes from another chat: documents belong to the user, not the chat.
    let bob_scope = Scope::for_user("bob").unwrap().in_chat("tg-99").unwrap();
    add_document(store.as_ref(), &bob_scope, &bob)
        .await
        .unwrap();
    let cfg = with_documents(&store, true);

    let (_, text) = run(&cfg, "alice").await;
    assert!(text.contains("green armchair"), "{text}");
    for secret in ["laundry basket", "4711", "bob/notes.md"] {
        assert!(
            !text.contains(secret),
            "Bob's `{secret}` in Alice's prompt: {text}"
        );
    }

    let (_, text) = run(&cfg, "bob").await;
    assert!(text.contains("laundry basket"), "{text}");
    for secret in ["green armchair", "alice/notes.md"] {
        assert!(
            !text.contains(secret),
            "Alice's `{secret}` in Bob's prompt: {text}"
        );
    }

    // Carol has no documents: her prompt holds nobody's.
    let (h, text) = run(&cfg, "carol").await;
    assert_eq!(vector_report(&h).1, 0, "{text}");
    assert!(
        !text.contains("armchair") && !text.contains("basket"),
        "{text}"
    );

    // The same user in another tenant is someone else.
    let elsewhere = Scope::for_user("alice")
        .unwrap()
        .in_tenant("other")
        .unwrap()
        .in_chat("tg-7")
        .unwrap();
    let h = hydrate(&cfg, &input(elsewhere, request(QUESTION, 8000)))
        .await
        .unwrap();
    assert_eq!(vector_report(&h).1, 0);

    // Each user's passages are stored in that user's documents scope only.
    let alice_docs = documents_scope(&chat_scope("alice")).unwrap();
    let bob_docs = documents_scope(&bob_scope).unwrap();
    assert_ne!(alice_docs, bob_docs);
    assert_eq!(store.count(&bob_docs).await.unwrap(), 1);
    let listed = list_documents(store.as_ref(), &chat_scope("alice"))
        .await
        .unwrap();
    assert_eq!(listed.documents.len(), 1);
    assert!(listed.documents[0].path.ends_with("alice/notes.md"));
}

#[tokio::test]
async fn a_keyword_only_store_serves_passages_too() {
    let store = store(false);
    let dir = tempfile::tempdir().unwrap();
    let notes = write(dir.path(), "notes.md", alice_notes());
    add_document(store.as_ref(), &chat_scope("alice"), &notes)
        .await
        .unwrap();
    let cfg = with_documents(&store, false);
    let (h, text) = run(&cfg, "alice").await;
    let (status, kept, search) = vector_report(&h);
    assert_eq!(
        (status, search.as_deref()),
        (SourceStatus::Complete, Some("keyword"))
    );
    assert!(kept >= 1);
    let provenance = provenance_of(&notes, &alice_notes(), "green armchair");
    assert!(passage(&text, &provenance).contains("green armchair"));
}

#[tokio::test]
async fn the_document_source_keeps_the_source_contract() {
    let store = store(true);
    let dir = tempfile::tempdir().unwrap();
    let notes = write(
        dir.path(),
        "cat.txt",
        "My cat is called Pixel.\n\nPixel sleeps on the red sofa, every night.\n",
    );
    let scope = chat_scope("alice");
    add_document(store.as_ref(), &scope, &notes).await.unwrap();
    let source = DocumentSource::new(Arc::clone(&store), Some(embedder())).unwrap();
    hydrate::testing::source_contract(&source, SourceKind::Vector, &scope, Some(store.as_ref()))
        .await;
    // Keyword only, too.
    let store = self::store(false);
    add_document(store.as_ref(), &scope, &notes).await.unwrap();
    let source = DocumentSource::new(Arc::clone(&store), None).unwrap();
    hydrate::testing::source_contract(&source, SourceKind::Vector, &scope, Some(store.as_ref()))
        .await;
}

#[tokio::test]
async fn re_adding_changing_listing_and_removing() {
    let store = store(true);
    let scope = chat_scope("alice");
    let docs = documents_scope(&scope).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let notes = write(dir.path(), "notes.md", alice_notes());

    let first = add_document(store.as_ref(), &scope, &notes).await.unwrap();
    assert_eq!(first.change, Change::Indexed);
    let again = add_document(store.as_ref(), &scope, &notes).await.unwrap();
    assert_eq!(again.change, Change::Unchanged);
    assert_eq!(again.chunks, first.chunks);
    assert_eq!(store.count(&docs).await.unwrap(), first.chunks as u64);

    // Changed: the new passages replace the old ones, none left behind.
    let changed = "# Miso\n\nMiso now sleeps in a cardboard box.\n";
    std::fs::write(&notes, changed).unwrap();
    let replaced = add_document(store.as_ref(), &scope, &notes).await.unwrap();
    assert_eq!(
        replaced.change,
        Change::Replaced {
            removed: first.chunks
        }
    );
    assert_eq!(replaced.chunks, 1);
    assert_eq!(store.count(&docs).await.unwrap(), 1);
    let cfg = with_documents(&store, true);
    let (_, text) = run(&cfg, "alice").await;
    assert!(text.contains("cardboard box"), "{text}");
    assert!(!text.contains("green armchair"), "{text}");

    // Listed with its passages, lines and when it was added.
    let other = write(
        dir.path(),
        "sub/trains.txt",
        "The train to Porto leaves at nine.\n",
    );
    add_document(store.as_ref(), &scope, &other).await.unwrap();
    let listing = list_documents(store.as_ref(), &scope).await.unwrap();
    assert!(listing.complete);
    let shown: Vec<(String, usize, usize)> = listing
        .documents
        .iter()
        .map(|d| (d.path.clone(), d.chunks, d.lines))
        .collect();
    let canon = |p: &Path| std::fs::canonicalize(p).unwrap().display().to_string();
    assert_eq!(
        shown,
        vec![(canon(&notes), 1, 3), (canon(&other), 1, 1)],
        "{listing:?}"
    );

    // Removing a file, even one deleted since, deletes its passages.
    let notes_path = canon(&notes);
    std::fs::remove_file(&notes).unwrap();
    let removed = remove_documents(store.as_ref(), &scope, Path::new(&notes_path))
        .await
        .unwrap();
    assert_eq!(removed.len(), 1);
    assert_eq!(
        (removed[0].path.as_str(), removed[0].chunks),
        (notes_path.as_str(), 1)
    );
    let err = remove_documents(store.as_ref(), &scope, Path::new(&notes_path))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("is not indexed"), "{err}");
    // A directory: every file indexed under it.
    let removed = remove_documents(store.as_ref(), &scope, &dir.path().join("sub"))
        .await
        .unwrap();
    assert_eq!(removed.len(), 1);
    assert_eq!(store.count(&docs).await.unwrap(), 0);
    assert!(
        list_documents(store.as_ref(), &scope)
            .await
            .unwrap()
            .documents
            .is_empty()
    );
}

#[tokio::test]
async fn bad_files_are_refused_with_the_reason_and_lose_nothing() {
    let store = store(true);
    let scope = chat_scope("alice");
    let dir = tempfile::tempdir().unwrap();
    let good = write(
        dir.path(),
        "good.md",
        "# Miso\n\nMiso sleeps on the armchair.\n",
    );
    add_document(store.as_ref(), &scope, &good).await.unwrap();
    let before = store
        .count(&documents_scope(&scope).unwrap())
        .await
        .unwrap();

    let too_large = "word ".repeat(MAX_DOCUMENT_BYTES as usize / 5 + 1);
    let cases: Vec<(PathBuf, &str)> = vec![
        (
            write(dir.path(), "binary.txt", b"PK\x03\x04\x00\x00zip"),
            "looks binary",
        ),
        (
            write(dir.path(), "latin1.txt", b"caf\xe9 au lait"),
            "is not UTF-8 text",
        ),
        (write(dir.path(), "empty.md", ""), "is empty"),
        (write(dir.path(), "blank.md", " \n\r\n\t\n"), "is empty"),
        (
            write(dir.path(), "big.txt", &too_large),
            "at most 524288 bytes",
        ),
        (dir.path().join("missing.md"), "does not exist"),
        (
            write(dir.path(), "slides.pdf", "%PDF-1.7"),
            "is not a text or Markdown file",
        ),
        (dir.path().to_path_buf(), "is not a file"),
    ];
    for (path, expected) in cases {
        let err = add_document(store.as_ref(), &scope, &path)
            .await
            .unwrap_err();
        assert!(matches!(err, Error::Document { .. }), "{err:?}");
        let message = err.to_string();
        assert!(
            message.contains(expected) && message.contains(&*path.display().to_string()),
            "{}: {message} (expected `{expected}`)",
            path.display()
        );
    }
    // The good file's passages are all still there.
    assert_eq!(
        store
            .count(&documents_scope(&scope).unwrap())
            .await
            .unwrap(),
        before
    );
    let again = add_document(store.as_ref(), &scope, &good).await.unwrap();
    assert_eq!(again.change, Change::Unchanged);
}
