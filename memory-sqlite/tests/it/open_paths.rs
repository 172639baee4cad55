//! What `--db` may point at: odd paths are refused with what they are (URIs, `:memory:`,
//! FIFOs, devices, dangling links, unwritable places), a missing store is not silently
//! created when the caller says so, a read-only store serves reads, and recording recalls
//! never fails or blocks a read.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use memory_core::{
    EmbeddingProvider, ErrorChain, HashingEmbedder, MemoryBackend, MemoryError, NewMemory, Scope,
    SearchRequest, repeated_cause,
};
use memory_sqlite::{SqliteBackend, SqliteConfig, SqliteError};

/// How long a call that must not wait at all may take before it counts as waiting forever:
/// a guard against a hang, far beyond any machine's speed, not a measure of it.
const HANG: Duration = Duration::from_secs(120);

fn hash() -> Option<Arc<dyn EmbeddingProvider>> {
    Some(Arc::new(HashingEmbedder::new(64).unwrap()))
}

fn scope() -> Scope {
    Scope::for_user("42").unwrap().in_chat("7").unwrap()
}

/// The typed store error inside a memory error from a `MemoryBackend` call, and the
/// whole chain as text (each cause said once).
fn sqlite_error(e: &MemoryError) -> (&SqliteError, String) {
    let typed = e
        .backend_error::<SqliteError>()
        .unwrap_or_else(|| panic!("not a SqliteError: {e:?}"));
    assert_eq!(repeated_cause(e), None, "a cause said twice: {e:?}");
    (typed, ErrorChain(e).to_string())
}

/// Opening `path` is refused: the typed error, and its chain as text (never a
/// misdiagnosis, no cause said twice, the path named).
async fn open_error(path: impl AsRef<Path>, config: SqliteConfig) -> (SqliteError, String) {
    let e = SqliteBackend::open(path.as_ref(), hash(), config)
        .await
        .expect_err("the open is refused");
    assert_eq!(repeated_cause(&e), None, "a cause said twice: {e:?}");
    let text = ErrorChain(&e).to_string();
    assert!(
        !text.contains("not an SQLite database"),
        "misdiagnosed: {text}"
    );
    // As a `MemoryError` it says the same, once, under the backend's name.
    let memory = MemoryError::from(e);
    assert_eq!(repeated_cause(&memory), None, "{memory:?}");
    assert_eq!(
        ErrorChain(&memory).to_string(),
        format!("memory-sqlite failed: {text}")
    );
    let e = match memory {
        MemoryError::Backend {
            source: Some(s), ..
        } => *s.downcast::<SqliteError>().unwrap(),
        other => panic!("not a backend error: {other:?}"),
    };
    (e, text)
}

/// [`open_error`]'s text.
async fn open_err(path: impl AsRef<Path>, config: SqliteConfig) -> String {
    open_error(path, config).await.1
}

#[tokio::test]
async fn uris_and_memory_databases_are_refused_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    // Another application's database, which `file:foreign.db` would have opened.
    let foreign = dir.path().join("foreign.db");
    {
        let c = rusqlite::Connection::open(&foreign).unwrap();
        c.execute_batch("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL);")
            .unwrap();
    }
    let before = std::fs::read(&foreign).unwrap();
    let cwd = std::env::current_dir().unwrap();
    std::env::set_current_dir(dir.path()).unwrap();
    let uri = open_err("file:foreign.db", SqliteConfig::default()).await;
    let memory = open_err(":memory:", SqliteConfig::default()).await;
    let empty = open_err("", SqliteConfig::default()).await;
    std::env::set_current_dir(cwd).unwrap();
    assert!(uri.contains("URIs are not accepted"), "{uri}");
    assert!(memory.contains("lose it on exit"), "{memory}");
    assert!(empty.contains("temporary database"), "{empty}");
    assert_eq!(
        std::fs::read(&foreign).unwrap(),
        before,
        "foreign.db untouched"
    );
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, vec!["foreign.db".to_owned()], "no file was created");
}

#[tokio::test]
async fn fifos_devices_directories_and_dangling_links_are_named_for_what_they_are() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("pipe.db");
    memory_core::testing::mkfifo(&fifo);
    // Must not wait: reading a FIFO's header would wait for a writer forever, so the guard
    // below ends a hang (no writer ever comes), it measures no speed.
    let text = tokio::time::timeout(HANG, open_err(&fifo, SqliteConfig::default()))
        .await
        .expect("opening a FIFO waited for a writer");
    assert!(text.contains("is a FIFO"), "{text}");

    let text = open_err("/dev/null", SqliteConfig::default()).await;
    assert!(text.contains("a character device"), "{text}");

    let text = open_err(dir.path(), SqliteConfig::default()).await;
    assert!(text.contains("a directory"), "{text}");

    let link = dir.path().join("link.db");
    std::os::unix::fs::symlink(dir.path().join("gone/target.db"), &link).unwrap();
    let text = open_err(&link, SqliteConfig::default()).await;
    assert!(
        text.contains("symbolic link")
            && text.contains("gone/target.db")
            && text.contains("does not exist"),
        "{text}"
    );
}

#[tokio::test]
async fn a_missing_store_is_not_created_when_the_caller_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("typo.db");
    let config = SqliteConfig {
        create_if_missing: false,
        ..SqliteConfig::default()
    };
    let text = open_err(&path, config.clone()).await;
    assert!(text.contains("no memory store at"), "{text}");
    assert!(!path.exists(), "nothing was created");
    // Once it exists, the same config opens it.
    SqliteBackend::open(&path, hash(), SqliteConfig::default())
        .await
        .unwrap()
        .close()
        .await;
    SqliteBackend::open(&path, hash(), config)
        .await
        .unwrap()
        .close()
        .await;
}

/// Names and hashes of every file in `dir`.
fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap_or_default(),
            )
        })
        .collect();
    out.sort();
    out
}

#[tokio::test]
async fn a_read_only_open_serves_reads_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.db");
    let store = SqliteBackend::open(&path, hash(), SqliteConfig::default())
        .await
        .unwrap();
    let kept = store
        .store(&scope(), NewMemory::new("my cat is called Pixel"))
        .await
        .unwrap();
    store.close().await;
    drop(store);
    let before = files(dir.path());

    let config = SqliteConfig {
        read_only: true,
        ..SqliteConfig::default()
    };
    let store = SqliteBackend::open(&path, hash(), config).await.unwrap();
    assert!(store.is_read_only());
    assert!(
        !store
            .capabilities()
            .supports(memory_core::Capability::Update),
        "a read-only store does not advertise updates"
    );
    for req in [
        SearchRequest::hybrid("cat name"),
        SearchRequest::keyword("cat"),
        SearchRequest::semantic("cat"),
    ] {
        let hits = store.search(&scope(), &req).await.unwrap();
        assert_eq!(hits[0].entry.id, kept.id);
    }
    let err = store
        .store(&scope(), NewMemory::new("a new fact"))
        .await
        .unwrap_err();
    let (typed, text) = sqlite_error(&err);
    assert!(matches!(typed, SqliteError::ReadOnly { .. }), "{text}");
    assert!(text.contains("read-only"), "{text}");
    store.close().await;
    drop(store);
    // Not a byte changed: no recall counts, no log left behind.
    let after: Vec<(String, Vec<u8>)> = files(dir.path())
        .into_iter()
        .filter(|(n, _)| !n.ends_with("-shm") && !n.ends_with("-wal"))
        .collect();
    assert_eq!(after, before);
    let reopened = SqliteBackend::open(&path, hash(), SqliteConfig::default())
        .await
        .unwrap();
    assert_eq!(
        reopened.get(&scope(), kept.id).await.unwrap().access_count,
        0
    );
}

#[tokio::test]
async fn recall_counts_never_block_or_fail_a_search_beside_a_writer() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.db");
    // A busy timeout far beyond the hang guard: a search that waited for the lock would wait
    // until the writer commits, which it does only after the searches.
    let config = SqliteConfig {
        busy_timeout: Duration::from_secs(3600),
        ..SqliteConfig::default()
    };
    let store = SqliteBackend::open(&path, hash(), config).await.unwrap();
    let kept = store
        .store(
            &scope(),
            NewMemory::new("the spare key is under the flowerpot"),
        )
        .await
        .unwrap();
    // Another connection (as another process would) holds the write lock.
    let other = rusqlite::Connection::open(&path).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    let searches = async {
        for _ in 0..3 {
            let hits = store
                .search(&scope(), &SearchRequest::hybrid("spare key"))
                .await
                .unwrap();
            assert_eq!(hits[0].entry.id, kept.id);
        }
    };
    tokio::time::timeout(HANG, searches)
        .await
        .expect("searches waited for the writer's lock");
    other.execute_batch("COMMIT").unwrap();
    // The counts were kept and are written with the next chance.
    store
        .search(&scope(), &SearchRequest::keyword("flowerpot"))
        .await
        .unwrap();
    assert_eq!(store.get(&scope(), kept.id).await.unwrap().access_count, 4);
}

/// Whether this process can write where it has no permission (root, CAP_DAC_OVERRIDE).
fn permissions_are_ignored(dir: &Path) -> bool {
    let probe = dir.join("locked");
    std::fs::create_dir(&probe).unwrap();
    set_mode(&probe, 0o555);
    let ignored = std::fs::write(probe.join("x"), b"x").is_ok();
    set_mode(&probe, 0o755);
    ignored
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

const PERMS_CHILD: &str = "AVA_SQLITE_PERMS_CHILD";

/// Runs as a user without the right to write `dir/ro` or `dir/shared/store.db`.
async fn unprivileged_checks(dir: &Path) {
    // A new store in a directory this user cannot write.
    let path = dir.join("ro/new.db");
    let text = open_err(&path, SqliteConfig::default()).await;
    assert!(
        text.contains("cannot open or create") && text.contains("ermission denied"),
        "{text}"
    );
    // A store file this user can read but not write: reads work, writes say why not.
    let path = dir.join("shared/store.db");
    let store = SqliteBackend::open(&path, hash(), SqliteConfig::default())
        .await
        .unwrap();
    assert!(store.is_read_only());
    let hits = store
        .search(&scope(), &SearchRequest::hybrid("cat"))
        .await
        .unwrap();
    assert_eq!(hits.len(), 1);
    let err = store
        .store(&scope(), NewMemory::new("x"))
        .await
        .unwrap_err();
    let (typed, text) = sqlite_error(&err);
    assert!(matches!(typed, SqliteError::ReadOnly { .. }), "{text}");
}

#[tokio::test]
async fn unwritable_places_are_reported_as_such_and_a_read_only_file_serves_reads() {
    if let Ok(dir) = std::env::var(PERMS_CHILD) {
        unprivileged_checks(Path::new(&dir)).await;
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    set_mode(dir.path(), 0o755);
    std::fs::create_dir(dir.path().join("ro")).unwrap();
    set_mode(&dir.path().join("ro"), 0o555);
    let shared = dir.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    let store = SqliteBackend::open(shared.join("store.db"), hash(), SqliteConfig::default())
        .await
        .unwrap();
    store
        .store(&scope(), NewMemory::new("my cat is called Pixel"))
        .await
        .unwrap();
    store.close().await;
    drop(store);
    // Everyone may create the -shm file beside it; only the owner may write the store.
    set_mode(&shared, 0o777);
    set_mode(&shared.join("store.db"), 0o644);
    let exe = std::env::current_exe().unwrap();
    let test =
        "open_paths::unwritable_places_are_reported_as_such_and_a_read_only_file_serves_reads";
    let args = ["--exact", test, "--nocapture", "--test-threads", "1"];
    let mut cmd = if permissions_are_ignored(dir.path()) {
        // Root ignores permissions: run the checks as `nobody`, who does not.
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(&exe);
        c
    } else {
        Command::new(&exe)
    };
    let status = cmd
        .args(args)
        .env(PERMS_CHILD, dir.path())
        .status()
        .unwrap();
    set_mode(&dir.path().join("ro"), 0o755);
    assert!(
        status.success(),
        "the unprivileged checks failed (see above)"
    );
}

/// A config SQLite would take silently (a page size it ignores) or that could never serve a
/// search is refused before any file is touched, naming the setting.
#[tokio::test]
async fn a_bad_config_is_refused_before_the_file_is_created() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.db");
    let cases = [
        (
            SqliteConfig {
                page_size: 10_000,
                ..SqliteConfig::default()
            },
            "page_size",
        ),
        (
            SqliteConfig {
                hybrid_pool_factor: 0,
                ..SqliteConfig::default()
            },
            "hybrid_pool_factor",
        ),
        (
            SqliteConfig {
                limits: memory_core::Limits {
                    max_results: 0,
                    ..memory_core::Limits::default()
                },
                ..SqliteConfig::default()
            },
            "max_results",
        ),
    ];
    for (config, field) in cases {
        assert!(config.validate().is_err());
        let e = SqliteBackend::open(&path, hash(), config)
            .await
            .unwrap_err();
        match &e {
            SqliteError::InvalidConfig(MemoryError::InvalidInput { field: f, .. }) => {
                assert_eq!(*f, field);
            }
            other => panic!("expected invalid {field}, got {other:?}"),
        }
        assert!(e.to_string().contains(field), "{e}");
        // Through `?` it is the invalid input it always was.
        assert!(matches!(
            MemoryError::from(e),
            MemoryError::InvalidInput { .. }
        ));
        assert!(!path.exists(), "nothing was created for a bad {field}");
    }
    let store = SqliteBackend::open(&path, hash(), SqliteConfig::default())
        .await
        .unwrap();
    let info = store.info();
    assert_eq!(info.topology, memory_core::Topology::Embedded);
    assert!(info.durable);
    assert_eq!(info.kind(), "embedded, durable");
}

/// Every kind of refusal says each fact once: the chain names the store's path and keeps
/// what SQLite or the OS said as the source, not copied into the store's own message.
#[tokio::test]
async fn open_errors_say_each_fact_once_and_keep_the_path_and_the_cause() {
    let dir = tempfile::tempdir().unwrap();
    let shown = |p: &Path| p.display().to_string();

    // Not a database: the header check's own words are the source.
    let junk = dir.path().join("junk.db");
    std::fs::write(&junk, vec![b'x'; 4096]).unwrap();
    let e = SqliteBackend::open(&junk, hash(), SqliteConfig::default())
        .await
        .unwrap_err();
    assert!(matches!(e, SqliteError::NotADatabase { .. }), "{e:?}");
    assert_eq!(repeated_cause(&e), None);
    let text = ErrorChain(&e).to_string();
    assert!(
        text.contains(&shown(&junk)) && text.contains("does not start with the SQLite header"),
        "{text}"
    );

    // Another application's database.
    let foreign = dir.path().join("foreign.db");
    rusqlite::Connection::open(&foreign)
        .unwrap()
        .execute_batch("CREATE TABLE invoices (id INTEGER PRIMARY KEY);")
        .unwrap();
    let (e, text) = open_error(&foreign, SqliteConfig::default()).await;
    assert!(matches!(e, SqliteError::Foreign { .. }), "{e:?}");
    assert!(
        text.contains(&shown(&foreign)) && text.contains("invoices"),
        "{text}"
    );

    // A missing directory, a missing store, a directory.
    let nowhere = dir.path().join("nowhere/m.db");
    let (e, text) = open_error(&nowhere, SqliteConfig::default()).await;
    assert!(matches!(e, SqliteError::MissingDirectory { .. }), "{e:?}");
    assert!(text.contains(&shown(&nowhere)), "{text}");
    let typo = dir.path().join("typo.db");
    let config = SqliteConfig {
        create_if_missing: false,
        ..SqliteConfig::default()
    };
    let (e, text) = open_error(&typo, config).await;
    assert!(matches!(e, SqliteError::NoStore { .. }), "{e:?}");
    assert!(text.contains(&shown(&typo)), "{text}");
    let (e, _) = open_error(dir.path(), SqliteConfig::default()).await;
    assert!(matches!(e, SqliteError::NotAFile { .. }), "{e:?}");

    // Another embedding space than the store records.
    let store_path = dir.path().join("m.db");
    SqliteBackend::open(&store_path, hash(), SqliteConfig::default())
        .await
        .unwrap()
        .close()
        .await;
    let other: Arc<dyn EmbeddingProvider> = Arc::new(HashingEmbedder::new(32).unwrap());
    let e = SqliteBackend::open(&store_path, Some(other), SqliteConfig::default())
        .await
        .unwrap_err();
    assert!(matches!(e, SqliteError::SpaceChanged { .. }), "{e:?}");
    assert_eq!(repeated_cause(&e), None);
    assert!(ErrorChain(&e).to_string().contains(&shown(&store_path)));

    // A store that is closed says so, through a `MemoryBackend` call.
    let store = SqliteBackend::open(&store_path, hash(), SqliteConfig::default())
        .await
        .unwrap();
    store.close().await;
    let err = store.count(&scope()).await.unwrap_err();
    let (typed, text) = sqlite_error(&err);
    assert!(matches!(typed, SqliteError::WorkerGone { .. }), "{text}");
    assert!(text.starts_with("memory-sqlite failed: "), "{text}");
    assert!(text.contains(&shown(&store_path)), "{text}");
}
