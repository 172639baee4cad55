//! `ava docs add|list|remove` through the `ava` binary on a temporary SQLite store: a bad
//! file beside good ones fails the command (exit 1) and the good ones are indexed; an
//! unchanged file is left alone, a changed one replaced; `ava context` shows a passage with
//! its `file:start-end`, for its user only; removing a file takes its passages out.

use crate::common;

use std::path::{Path, PathBuf};

use common::{ava, stderr};
#[cfg(feature = "documents")]
use common::{command, ok, stdout};

fn write(dir: &Path, name: &str, text: impl AsRef<[u8]>) -> PathBuf {
    let path = dir.join(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, text).unwrap();
    std::fs::canonicalize(path).unwrap()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The notes of user 42: the vet's address on lines 5-6 of a Markdown file.
const CAT_NOTES: &str = "# Pixel\n\nPixel sleeps on the red sofa.\n\n# Vet\n\nThe vet is Dr. \
                         Okafor,\nRua Augusta 12.\n";

#[cfg(feature = "documents")]
#[test]
fn docs_add_list_context_and_remove() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("m.db");
    let notes = dir.path().join("notes");
    let cats = write(&notes, "cats.md", CAT_NOTES);
    let todo = write(
        &notes,
        "sub/todo.txt",
        "Buy oat milk.\r\nBook the train to Porto.\r\n",
    );
    let bad = write(&notes, "sub/latin1.txt", b"caf\xe9 com leite");
    write(&notes, "sub/image.png", b"\x89PNG\r\n\x1a\n");
    write(&notes, ".hidden/secret.md", "not indexed");

    // A directory and a missing file: the bad and the missing fail, the rest are indexed.
    let missing = dir.path().join("gone.md");
    let o = ava(
        &db,
        &["docs", "add", "--user", "42", s(&notes), s(&missing)],
    );
    assert_eq!(o.status.code(), Some(1), "{}{}", stdout(&o), stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains(&format!("indexed 1 chunk: {}", s(&cats))),
        "{out}"
    );
    assert!(
        out.contains(&format!("indexed 1 chunk: {}", s(&todo))),
        "{out}"
    );
    assert!(
        out.contains(&format!("skipped: {} (is not UTF-8 text", s(&bad))),
        "{out}"
    );
    assert!(
        out.contains(&format!("skipped: {} (does not exist)", s(&missing))),
        "{out}"
    );
    assert!(
        !out.contains("image.png") && !out.contains("secret"),
        "{out}"
    );
    assert!(
        stderr(&o).contains("2 of 4 file(s) were not indexed; the others were"),
        "{}",
        stderr(&o)
    );

    // Unchanged: left alone.
    let out = ok(ava(&db, &["docs", "add", "--user", "42", s(&cats)]));
    assert_eq!(out.trim(), format!("unchanged (1 chunk): {}", s(&cats)));

    // `ava context` shows the passage with its file and lines, in user 42's chats only.
    let context = |user: &str| {
        ok(ava(
            &db,
            &[
                "context",
                "--user",
                user,
                "--chat",
                "7",
                "What is the vet's address?",
            ],
        ))
    };
    let prompt = context("42");
    assert!(
        prompt.contains("<recalled-memory kind=\"vector\">"),
        "{prompt}"
    );
    assert!(prompt.contains("Rua Augusta 12."), "{prompt}");
    assert!(prompt.contains(&format!("({}:1-8)", s(&cats))), "{prompt}");
    let other = context("43");
    assert!(
        !other.contains("Augusta") && !other.contains("cats.md"),
        "{other}"
    );

    // Changed: replaced, and the prompt follows.
    let changed = "# Pixel\n\nPixel sleeps in a box.\n\n# Vet\n\nThe vet moved to \
                   Avenida da Liberdade 3.\n";
    std::fs::write(&cats, changed).unwrap();
    let out = ok(ava(&db, &["docs", "add", "--user", "42", s(&cats)]));
    assert_eq!(out.trim(), format!("replaced 1 chunk with 1: {}", s(&cats)));
    let prompt = context("42");
    assert!(prompt.contains("Avenida da Liberdade 3."), "{prompt}");
    assert!(prompt.contains(&format!("({}:1-7)", s(&cats))), "{prompt}");
    assert!(!prompt.contains("Rua Augusta"), "{prompt}");

    // Listed with chunks, lines and when.
    let out = ok(ava(&db, &["docs", "list", "--user", "42"]));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert!(
        lines[0].starts_with(&format!("{}  1 chunk  7 lines  added 20", s(&cats))),
        "{out}"
    );
    assert!(
        lines[1].starts_with(&format!("{}  1 chunk  2 lines  added 20", s(&todo))),
        "{out}"
    );
    assert!(ok(ava(&db, &["docs", "list", "--user", "43"])).is_empty());

    // Removed: gone from the list and the prompt; removing it again fails.
    let out = ok(ava(&db, &["docs", "remove", "--user", "42", s(&cats)]));
    assert_eq!(out.trim(), format!("removed 1 chunk: {}", s(&cats)));
    let prompt = context("42");
    assert!(!prompt.contains("Avenida"), "{prompt}");
    let o = ava(&db, &["docs", "remove", "--user", "42", s(&cats)]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stdout(&o).contains("is not indexed"), "{}", stdout(&o));
    let out = ok(ava(&db, &["docs", "list", "--user", "42"]));
    assert_eq!(out.lines().count(), 1, "{out}");
}

#[cfg(feature = "documents")]
#[test]
fn docs_work_on_a_keyword_only_store() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("m.db");
    let cats = write(dir.path(), "cats.md", CAT_NOTES);
    let run = |args: &[&str]| {
        let o = command(&db)
            .env("AVA_EMBEDDER", "none")
            .args(args)
            .output()
            .unwrap();
        ok(o)
    };
    run(&["docs", "add", "--user", "42", s(&cats)]);
    let prompt = run(&common::in_chat_7(
        "context",
        &["--explain", "Where does Pixel sleep?"],
    ));
    assert!(prompt.contains("Pixel sleeps on the red sofa."), "{prompt}");
    assert!(prompt.contains(&format!("({}:1-8)", s(&cats))), "{prompt}");
}

/// Links do not carry files out of the tree: a directory's symbolic link is left out (and
/// said so), and a link named on the command line is judged by its target, so
/// `notes.txt -> secret.conf` is refused; `docs list` then shows only the tree's own file.
#[cfg(all(feature = "documents", unix))]
#[test]
fn docs_add_does_not_follow_links_out_of_the_tree() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("m.db");
    let tree = dir.path().join("tree");
    let cats = write(&tree, "cats.md", CAT_NOTES);
    let secret = write(
        &dir.path().join("elsewhere"),
        "secret.conf",
        "password = hunter2\n",
    );
    let also = write(&dir.path().join("elsewhere"), "diary.md", "Dear diary.\n");
    let link = tree.join("notes.txt");
    std::os::unix::fs::symlink(&secret, &link).unwrap();
    std::os::unix::fs::symlink(&also, tree.join("diary.md")).unwrap();

    let out = ok(ava(&db, &["docs", "add", "--user", "42", s(&tree)]));
    assert!(
        out.contains(&format!("indexed 1 chunk: {}", s(&cats))),
        "{out}"
    );
    assert!(
        out.contains(&format!("left out: {} (a symbolic link", s(&link))),
        "{out}"
    );
    assert!(
        !out.contains("secret.conf") && !out.contains("elsewhere"),
        "{out}"
    );

    let o = ava(&db, &["docs", "add", "--user", "42", s(&link)]);
    assert_eq!(o.status.code(), Some(1), "{}{}", stdout(&o), stderr(&o));
    assert!(
        stdout(&o).contains("which is not a text or Markdown file"),
        "{}",
        stdout(&o)
    );

    let listed = ok(ava(&db, &["docs", "list", "--user", "42"]));
    assert_eq!(listed.lines().count(), 1, "{listed}");
    assert!(listed.starts_with(s(&cats)), "{listed}");
    let prompt = ok(ava(
        &db,
        &common::in_chat_7("context", &["What is the password?"]),
    ));
    assert!(
        !prompt.contains("hunter2") && !prompt.contains("Dear diary"),
        "{prompt}"
    );
}

/// More passages than the store lists at once (1,000): `docs list` still shows every file
/// and `docs remove DIR` finds a file whose passages are older than a thousand others, and
/// removes a directory of more than a thousand passages in one run.
#[cfg(feature = "documents")]
#[test]
fn docs_list_and_remove_see_past_a_thousand_passages() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("m.db");
    let vet = write(&dir.path().join("notes"), "vet.md", CAT_NOTES);
    ok(ava(&db, &["docs", "add", "--user", "fay", s(&vet)]));
    // Two files of about 650 passages each, indexed after the vet's notes.
    let paragraph =
        |n: usize| format!("Paragraph {n} of the ledger: {}\n\n", "figures ".repeat(70));
    let big: String = (0..650).map(paragraph).collect();
    let big_dir = dir.path().join("ledgers");
    let one = write(&big_dir, "2024.txt", &big);
    let two = write(&big_dir, "2025.txt", format!("{big}The end.\n"));
    let added = ok(ava(&db, &["docs", "add", "--user", "fay", s(&big_dir)]));
    assert!(added.contains("indexed 650 chunks"), "{added}");

    let o = ava(&db, &["docs", "list", "--user", "fay"]);
    let listed = ok(o);
    assert_eq!(listed.lines().count(), 3, "{listed}");
    for file in [&vet, &one, &two] {
        assert!(listed.contains(s(file)), "{listed}");
    }

    let removed = ok(ava(
        &db,
        &["docs", "remove", "--user", "fay", s(vet.parent().unwrap())],
    ));
    assert!(
        removed.contains(&format!("removed 1 chunk: {}", s(&vet))),
        "{removed}"
    );
    let prompt = ok(ava(
        &db,
        &common::in_chat("fay", "7", "context", &["Who is the vet?"]),
    ));
    assert!(!prompt.contains("Okafor"), "{prompt}");

    let removed = ok(ava(&db, &["docs", "remove", "--user", "fay", s(&big_dir)]));
    assert_eq!(removed.lines().count(), 2, "{removed}");
    let o = ava(&db, &["docs", "list", "--user", "fay"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), "", "{}", stdout(&o));
}

/// Several processes indexing one changed file at once leave one copy of its passages:
/// three rounds of six concurrent `docs add`s, each round after the file changed.
#[cfg(feature = "documents")]
#[test]
fn concurrent_docs_add_of_a_changed_file_keeps_one_copy() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("m.db");
    let cats = write(dir.path(), "cats.md", CAT_NOTES);
    ok(ava(&db, &["docs", "add", "--user", "42", s(&cats)]));
    for round in 0..3usize {
        let n = 6 + round;
        let text: String = (0..n)
            .map(|i| format!("Round {round}, passage {i}: {}\n\n", "words ".repeat(90)))
            .collect();
        let file = write(dir.path(), "notes.txt", text);
        let runs: Vec<_> = (0..6)
            .map(|_| {
                command(&db)
                    .args(["docs", "add", "--user", "42", s(&file)])
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for run in runs {
            ok(run.wait_with_output().unwrap());
        }
        let listed = ok(ava(&db, &["docs", "list", "--user", "42"]));
        assert!(
            listed.contains(&format!("{}  {n} chunks", s(&file))),
            "round {round}: {listed}"
        );
    }
}

/// A build without the feature (`--no-default-features`) names it.
#[cfg(not(feature = "documents"))]
#[test]
fn without_the_feature_docs_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let cats = write(dir.path(), "cats.md", CAT_NOTES);
    let o = ava(
        dir.path().join("m.db"),
        &["docs", "add", "--user", "42", s(&cats)],
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("rebuild with the cargo feature `documents`"),
        "{}",
        stderr(&o)
    );
}
