//! Opening a store file safely: inspection before any write, schema creation and
//! migrations (`user_version`), connection settings, and the recorded embedding space.

use std::path::Path;
use std::sync::Once;
use std::time::{Duration, Instant};

use memory_core::EmbeddingSpace;
use rusqlite::config::DbConfig;
use rusqlite::{
    Connection, MAIN_DB, OpenFlags, OptionalExtension, Transaction, TransactionBehavior, params,
};

use crate::error::{SqliteError, is_busy, sql_error};

/// `PRAGMA application_id` of Ava stores: "AVA1".
pub(crate) const APPLICATION_ID: i32 = 0x4156_4131;

/// The schema version this build writes and understands.
///
/// - 1: the first layout.
/// - 2: the full-text index is contentless (`content = ''`, `contentless_delete = 1`): it
///   keeps only the index and the per-row token counts bm25() needs, not a second copy of
///   every memory's text (`memories` has it). Ingest writes one B-tree row less per memory.
/// - 3: a partial index of the memories that have no vector yet (`memories_unembedded`),
///   so a search finds the ones of its scope to embed first without a scan.
/// - 4: the write sequence (`write_seq`), bumped by every write transaction, so a process
///   tells the writes it made itself (its vector cache already has them) from another
///   process's (its cache must be dropped) when it reads on connections other than its
///   writer's. Older builds do not bump it, so they must not write to a version 4 store;
///   they refuse it as coming from a newer Ava.
/// - 5: a memory longer than the embedder's window has one vector per passage:
///   `memories.embedded` holds how many (0 none, 1 one, n passages), passage k ≥ 1 is the
///   vec0 row `pk + k << 40` (`vector_rows::vector_rowid`), and a partial index of the memories
///   with several (`memories_passages`) lets a scope's vectors be counted from indexes.
///   Older builds would delete such a memory's first vector only, so they must not write
///   to a version 5 store. Memories embedded before keep their one vector until `reembed`.
/// - 6: leases (`leases`), by which processes sharing the file take turns
///   (`MemoryBackend::try_lease`). Older builds would not know them; they refuse a version
///   6 store as newer.
/// - 7: each vector's integer codes beside it (vec0's `code` column, see
///   `kernels::encode_code`), so a new process's first search of a big scope reads a quarter
///   of the bytes. Every vector write writes its code in the same row; older builds would
///   not, so they refuse a version 7 store as newer. The upgrade rewrites the vector table.
/// - 8: records (`records`), each scope's newest notes of each kind beside its memories
///   (`MemoryBackend::keep_record`). Older builds would delete a scope's memories and leave
///   its records, which may quote them; they refuse a version 8 store as newer.
/// - 9: deleted text leaves the file (issue 54): the full-text index removes a row's terms
///   from its segments (`secure-delete`, rows removed by FTS5's `delete` command with the
///   values indexed, so no more `contentless_delete`), and writers overwrite what they
///   delete (`secure_delete`); records name the memories they quote (`record_quotes`), so
///   deleting one memory removes only the records that quote it (or name none). Older
///   builds would delete rows the old way, which this index refuses; they refuse a version
///   9 store as newer. The upgrade rebuilds the index.
pub(crate) const SCHEMA_VERSION: i64 = 9;

/// The records' table (schema 8): a scope's records (`kind`, `at` in Unix milliseconds,
/// `body`), in the order kept (`id`); read and trimmed newest first by scope and kind.
macro_rules! create_records {
    () => {
        "CREATE TABLE records (id INTEGER PRIMARY KEY, \
         scope_id INTEGER NOT NULL REFERENCES scopes(id), kind TEXT NOT NULL, \
         at INTEGER NOT NULL, body TEXT NOT NULL) STRICT;\
         CREATE INDEX records_by_scope ON records (scope_id, kind, at DESC, id DESC);"
    };
}

/// The records' quotes (schema 9): the memories (by id) each record quotes, in the order
/// named (`k`), gone with their record; found by memory when one is deleted or pruned.
macro_rules! create_record_quotes {
    () => {
        "CREATE TABLE record_quotes (record INTEGER NOT NULL REFERENCES records(id) ON DELETE CASCADE, \
         k INTEGER NOT NULL, memory BLOB NOT NULL, PRIMARY KEY (record, k)) STRICT, WITHOUT ROWID;\
         CREATE INDEX record_quotes_by_memory ON record_quotes (memory);"
    };
}

/// The leases' table (schema 6): who holds each lease, and until when (Unix milliseconds).
macro_rules! create_leases {
    () => {
        "CREATE TABLE leases (name TEXT PRIMARY KEY NOT NULL, holder TEXT NOT NULL, \
         until_ms INTEGER NOT NULL) STRICT, WITHOUT ROWID;"
    };
}

/// The partial index of memories with more than one vector (schema 5).
macro_rules! create_passages_index {
    () => {
        "CREATE INDEX memories_passages ON memories (scope_id, embedded) WHERE embedded > 1;"
    };
}

/// The write sequence's table (schema 4): one row, bumped by every write transaction.
macro_rules! create_write_seq {
    () => {
        "CREATE TABLE write_seq (id INTEGER PRIMARY KEY CHECK (id = 0), n INTEGER NOT NULL) STRICT;\
         INSERT INTO write_seq (id, n) VALUES (0, 0);"
    };
}

/// The partial index of memories waiting for a vector (schema 3).
macro_rules! create_unembedded_index {
    () => {
        "CREATE INDEX memories_unembedded ON memories (scope_id) WHERE embedded = 0;"
    };
}

/// The full-text table. `scope` holds one token per scope (`s<scope id>`) so a keyword
/// query is narrowed to its scope by the full-text index itself; bm25() weighs that column
/// 0. `context` (how the memory was learned, e.g. the message it answered) counts for less
/// than `content`. Nothing is read back from it but rowids and scores.
///
/// Schema 9: a row is removed with FTS5's `delete` command and the values it was indexed
/// with (`Sql::remove_fts`), in `secure-delete` mode, which takes its terms out of the
/// index's segments; schema 2 to 8 had `contentless_delete = 1`, whose `DELETE` leaves
/// them there under a tombstone until a merge, readable in the file.
macro_rules! create_fts {
    () => {
        "CREATE VIRTUAL TABLE memory_fts USING fts5(scope, content, context, \
         tokenize = 'porter unicode61 remove_diacritics 2', content = '');\
         INSERT INTO memory_fts (memory_fts, rank) VALUES ('secure-delete', 1);"
    };
}

/// One schema upgrade: statements, or a step that needs Rust.
#[derive(Debug)]
enum Migration {
    Sql(&'static str),
    /// 6 -> 7: the vector table rewritten with each vector's code.
    Codes,
}

/// Migrations: entry `i` upgrades a store from version `i + 1` to `i + 2`, in one
/// transaction. The newest version is created directly by [`create_schema`].
const MIGRATIONS: &[Migration] = &[
    // 1 -> 2: rebuild the full-text index as a contentless one.
    Migration::Sql(concat!(
        "DROP TABLE memory_fts;",
        create_fts!(),
        "INSERT INTO memory_fts (rowid, scope, content, context) \
         SELECT pk, 's' || scope_id, content, context FROM memories;"
    )),
    // 2 -> 3: find memories without a vector by scope.
    Migration::Sql(create_unembedded_index!()),
    // 3 -> 4: the write sequence.
    Migration::Sql(create_write_seq!()),
    // 4 -> 5: memories embedded as several passages.
    Migration::Sql(create_passages_index!()),
    // 5 -> 6: leases.
    Migration::Sql(create_leases!()),
    // 6 -> 7: codes beside the vectors.
    Migration::Codes,
    // 7 -> 8: records.
    Migration::Sql(create_records!()),
    // 8 -> 9: the full-text index rebuilt to delete securely; the records' quotes.
    Migration::Sql(concat!(
        create_record_quotes!(),
        "DROP TABLE memory_fts;",
        create_fts!(),
        "INSERT INTO memory_fts (rowid, scope, content, context) \
         SELECT pk, 's' || scope_id, content, context FROM memories;"
    )),
];

/// Rewrites the vector table, if the store has one, with each vector's code beside it
/// (vec0 tables cannot be altered or renamed): the vectors go to a temporary table, the
/// new table is created and every vector is written back with its code.
fn add_codes(tx: &Connection) -> rusqlite::Result<()> {
    let exists: bool = tx.query_row(
        "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'memory_vec')",
        [],
        |r| r.get(0),
    )?;
    if !exists {
        return Ok(());
    }
    let dims: Option<String> = tx
        .query_row(
            "SELECT value FROM meta WHERE key = 'embedding_dims'",
            [],
            |r| r.get(0),
        )
        .optional()?;
    let Some(dims) = dims.and_then(|d| d.parse::<usize>().ok()) else {
        return Err(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CORRUPT),
            Some("the vector table has no recorded dimension count (meta `embedding_dims`)".into()),
        ));
    };
    tx.execute_batch(
        "CREATE TEMP TABLE vectors_before_codes AS \
         SELECT rowid AS id, scope_id, embedding FROM memory_vec; \
         DROP TABLE memory_vec;",
    )?;
    create_vec_table(tx, dims)?;
    {
        let mut read =
            tx.prepare("SELECT id, scope_id, embedding FROM temp.vectors_before_codes")?;
        let mut write = tx.prepare(INSERT_VECTOR)?;
        let mut rows = read.query([])?;
        let mut v = Vec::with_capacity(dims);
        let mut code = Vec::with_capacity(crate::kernels::code_width(dims));
        while let Some(row) = rows.next()? {
            let (id, scope_id): (i64, i64) = (row.get(0)?, row.get(1)?);
            let blob = row.get_ref(2)?.as_blob()?;
            v.resize(blob.len() / 4, 0.0);
            crate::kernels::decode_f32s(&mut v, blob);
            code.clear();
            crate::kernels::encode_code(&mut code, &v);
            write.execute(params![id, scope_id, blob, code])?;
        }
    }
    tx.execute_batch("DROP TABLE temp.vectors_before_codes;")
}

/// Every table of the newest schema but the full-text one ([`create_fts`]).
const SCHEMA: &str = "
CREATE TABLE meta (
    key   TEXT PRIMARY KEY NOT NULL,
    value TEXT NOT NULL
) STRICT;

CREATE TABLE scopes (
    id     INTEGER PRIMARY KEY,
    key    TEXT NOT NULL UNIQUE,
    tenant TEXT NOT NULL,
    user   TEXT NOT NULL,
    chat   TEXT,
    thread TEXT
) STRICT;

CREATE TABLE memories (
    pk            INTEGER PRIMARY KEY,
    id            BLOB NOT NULL UNIQUE,
    scope_id      INTEGER NOT NULL REFERENCES scopes(id),
    kind          TEXT NOT NULL,
    content       TEXT NOT NULL,
    context       TEXT,
    role          TEXT,
    source        TEXT,
    importance    REAL NOT NULL,
    pinned        INTEGER NOT NULL,
    created_at    INTEGER NOT NULL,
    accessed_at   INTEGER NOT NULL,
    access_count  INTEGER NOT NULL,
    valid_from    INTEGER,
    valid_until   INTEGER,
    superseded_by BLOB,
    embedded      INTEGER NOT NULL
) STRICT;

CREATE INDEX memories_by_scope_time ON memories (scope_id, created_at DESC, id DESC);

CREATE TABLE memory_tags (
    memory INTEGER NOT NULL REFERENCES memories(pk) ON DELETE CASCADE,
    tag    TEXT NOT NULL,
    PRIMARY KEY (memory, tag)
) STRICT, WITHOUT ROWID;

CREATE INDEX memory_tags_by_tag ON memory_tags (tag, memory);
";

/// Opens read/write (creating) without URI parsing: a path is always a plain path.
const RW_FLAGS: OpenFlags = OpenFlags::SQLITE_OPEN_READ_WRITE
    .union(OpenFlags::SQLITE_OPEN_CREATE)
    .union(OpenFlags::SQLITE_OPEN_NO_MUTEX);

/// Opens read-only without URI parsing.
const RO_FLAGS: OpenFlags = OpenFlags::SQLITE_OPEN_READ_ONLY.union(OpenFlags::SQLITE_OPEN_NO_MUTEX);

/// Vectors per sqlite-vec chunk. vec0 allocates a whole chunk per partition (scope), so the
/// default 1024 would cost 1.5 MB of file for a scope with one 384-d memory; 64 keeps small
/// scopes small and chunk blobs on short overflow chains (faster inserts). Per-scope
/// search mostly runs on the in-process cache, so vec0's per-chunk overhead rarely shows.
pub(crate) const VEC_CHUNK_SIZE: usize = 64;

/// Creates the vector table for a space: one vec0 partition per scope, cosine distance;
/// beside each vector its code (schema 7, `kernels::encode_code`), read by a new process's
/// first search of a big scope instead of the vectors.
pub(crate) fn create_vec_table(conn: &Connection, dims: usize) -> rusqlite::Result<()> {
    conn.execute_batch(&format!(
        "CREATE VIRTUAL TABLE memory_vec USING vec0(\
            scope_id INTEGER PARTITION KEY, \
            embedding float[{dims}] distance_metric=cosine, \
            code int8[{}], \
            chunk_size={VEC_CHUNK_SIZE})",
        crate::kernels::code_width(dims)
    ))
}

/// Writes one vector (`?3`, little-endian `f32`s) and its code (`?4`,
/// `kernels::encode_code`) under rowid `?1` in scope `?2`: the only way vectors are written.
pub(crate) const INSERT_VECTOR: &str = "INSERT INTO memory_vec (rowid, scope_id, embedding, code) \
     VALUES (?1, ?2, ?3, vec_int8(?4))";

/// Registers sqlite-vec with every connection this process opens, once.
#[expect(
    unsafe_code,
    reason = "hands sqlite-vec's entry point to SQLite, a C API"
)]
pub(crate) fn register_sqlite_vec() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: `sqlite3_vec_init` is sqlite-vec's extension entry point, with exactly the
        // signature `sqlite3_auto_extension` expects (it is declared without arguments by
        // the -sys binding, hence the transmute). It is statically linked and lives for the
        // whole process.
        unsafe {
            #[expect(
                clippy::missing_transmute_annotations,
                reason = "the target is the C entry-point type sqlite3_auto_extension takes"
            )]
            rusqlite::ffi::sqlite3_auto_extension(Some(std::mem::transmute(
                sqlite_vec::sqlite3_vec_init as *const (),
            )));
        }
    });
}

/// What a read-only look at an existing file found.
pub(crate) enum Existing {
    /// No file, an empty file, or an SQLite database without tables: create the schema.
    Fresh,
    /// An Ava store of this schema version or an older one.
    Store { version: i64 },
}

/// Looks at `path` without changing it, and refuses what is not an Ava store we can open.
///
/// The 100-byte SQLite header is read directly first, so a file that is not a database is
/// never handed to SQLite. A database without a write-ahead log is then opened `immutable`
/// (no locks, no -shm file); one with a WAL is opened read-only, since its newest header
/// may live in the WAL.
///
/// A file that another process is creating, checkpointing or closing at this moment can
/// look damaged to a lock-free read for an instant, so a failed look is retried briefly
/// before it is reported. What is found here is checked again under the write lock
/// ([`init_schema`]).
pub(crate) fn inspect(path: &Path) -> Result<Existing, SqliteError> {
    check_path(path)?;
    let mut attempt = 0;
    loop {
        match inspect_once(path) {
            Err(
                SqliteError::NotADatabase { .. }
                | SqliteError::Corrupt { .. }
                | SqliteError::CannotOpen { .. }
                | SqliteError::Sqlite { .. },
            ) if attempt < INSPECT_RETRIES => {
                attempt += 1;
                std::thread::sleep(Duration::from_millis(10 * attempt));
            }
            other => return other,
        }
    }
}

/// How often a failed inspection is retried (waiting 10, 20, ... ms: 0.45 s in all).
const INSPECT_RETRIES: u64 = 9;

/// Refuses what is not a plain path to a regular file (or to nothing yet): SQLite URIs,
/// `:memory:`, the empty path, directories, FIFOs, devices, sockets, dangling links.
pub(crate) fn check_path(path: &Path) -> Result<(), SqliteError> {
    let text = path.to_string_lossy();
    let refuse = |why| {
        Err(SqliteError::NotAFilePath {
            shown: format!("{text:?}"),
            why,
        })
    };
    if text.is_empty() {
        return refuse(
            "SQLite would open a temporary database and delete it on close; pass a file path",
        );
    }
    if text == ":memory:" {
        return refuse(
            "SQLite would keep the store in memory and lose it on exit; pass a file path",
        );
    }
    if text.starts_with("file:") {
        return refuse(
            "SQLite URIs are not accepted, since the safety checks read plain paths; pass the \
             file's path (e.g. `./file:x.db` if that really is its name)",
        );
    }
    let link = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => {
            return Err(SqliteError::Io {
                path: path.to_owned(),
                source: e,
            });
        }
    };
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && link.file_type().is_symlink() => {
            return Err(SqliteError::DanglingLink {
                path: path.to_owned(),
                target: std::fs::read_link(path).unwrap_or_default(),
            });
        }
        Err(e) => {
            return Err(SqliteError::Io {
                path: path.to_owned(),
                source: e,
            });
        }
    };
    let kind = file_kind(&meta.file_type());
    match kind {
        None => Ok(()),
        Some(kind) => Err(SqliteError::NotAFile {
            path: path.to_owned(),
            kind,
        }),
    }
}

/// What a path that is not a regular file is, for messages; `None` for a regular file.
fn file_kind(t: &std::fs::FileType) -> Option<&'static str> {
    if t.is_file() {
        return None;
    }
    if t.is_dir() {
        return Some("a directory");
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_fifo() {
            return Some("a FIFO (named pipe)");
        }
        if t.is_char_device() {
            return Some("a character device");
        }
        if t.is_block_device() {
            return Some("a block device");
        }
        if t.is_socket() {
            return Some("a socket");
        }
    }
    Some("not a regular file")
}

fn inspect_once(path: &Path) -> Result<Existing, SqliteError> {
    let bytes = match read_header(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(SqliteError::Io {
                path: path.to_owned(),
                source: e,
            });
        }
        Err(_) => {
            let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
            if let Some(dir) = dir
                && !dir.is_dir()
            {
                return Err(SqliteError::MissingDirectory {
                    path: path.to_owned(),
                    dir: dir.to_owned(),
                });
            }
            return Ok(Existing::Fresh);
        }
        Ok(h) => h,
    };
    if bytes.is_empty() {
        return Ok(Existing::Fresh);
    }
    if bytes.len() < 100 || !bytes.starts_with(b"SQLite format 3\0") {
        return Err(SqliteError::NotADatabase {
            path: path.to_owned(),
            source: rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_NOTADB),
                Some("the file does not start with the SQLite header".into()),
            ),
        });
    }
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    let has_wal = Path::new(&wal).exists();
    let conn = if has_wal {
        Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
    } else {
        Connection::open_with_flags(
            format!("file:{}?immutable=1", uri_path(path)),
            OpenFlags::SQLITE_OPEN_READ_ONLY
                | OpenFlags::SQLITE_OPEN_NO_MUTEX
                | OpenFlags::SQLITE_OPEN_URI,
        )
    }
    .map_err(|e| classify_open(path, e))?;
    let (app, version, tables) = identify(&conn).map_err(|e| classify_open(path, e))?;
    judge(path, app, version, tables)
}

/// Reads what identifies a store: `application_id`, `user_version`, a few table names, in
/// one read transaction (unless one is open already), so a store another process creates
/// meanwhile is seen before or after, never half.
fn identify(conn: &Connection) -> rusqlite::Result<(i32, i64, Vec<String>)> {
    let _snapshot = if conn.is_autocommit() {
        Some(conn.unchecked_transaction()?)
    } else {
        None
    };
    let app: i32 = conn.query_row("PRAGMA application_id", [], |r| r.get(0))?;
    let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    let mut stmt =
        conn.prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name LIMIT 6")?;
    let tables = stmt
        .query_map([], |r| r.get::<_, String>(0))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok((app, version, tables))
}

/// What a database with this identity is to Ava.
fn judge(
    path: &Path,
    app: i32,
    version: i64,
    tables: Vec<String>,
) -> Result<Existing, SqliteError> {
    if app != APPLICATION_ID {
        if tables.is_empty() && app == 0 {
            return Ok(Existing::Fresh);
        }
        return Err(SqliteError::Foreign {
            path: path.to_owned(),
            application_id: app,
            tables: if tables.is_empty() {
                "none".into()
            } else {
                tables.join(", ")
            },
        });
    }
    if version > SCHEMA_VERSION {
        return Err(SqliteError::NewerSchema {
            path: path.to_owned(),
            found: version,
            supported: SCHEMA_VERSION,
        });
    }
    Ok(Existing::Store { version })
}

/// The first 100 bytes of the file (fewer if it is shorter).
fn read_header(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut buf = Vec::with_capacity(100);
    std::fs::File::open(path)?.take(100).read_to_end(&mut buf)?;
    Ok(buf)
}

/// Percent-encodes a path for an SQLite `file:` URI.
fn uri_path(path: &Path) -> String {
    let mut out = String::new();
    for b in path.to_string_lossy().bytes() {
        if b.is_ascii_alphanumeric() || b"/-_.~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn classify_open(path: &Path, e: rusqlite::Error) -> SqliteError {
    if crate::error::is_busy(&e) {
        // Another process holds a lock: nothing is wrong with the file.
        return sql_error(path, e);
    }
    match sql_error(path, e) {
        SqliteError::Sqlite { path, source } => SqliteError::NotADatabase { path, source },
        other => other,
    }
}

/// Connection settings.
#[derive(Clone, Debug)]
pub(crate) struct Pragmas {
    /// Open read-only (never write, never create).
    pub(crate) read_only: bool,
    /// Page size for a new file (ignored for existing ones).
    pub(crate) page_size: u32,
    pub(crate) synchronous_full: bool,
    pub(crate) busy_timeout: Duration,
    pub(crate) cache_mib: u32,
    pub(crate) mmap_mib: u32,
}

/// Opens `path` with Ava's settings: read/write (creating it), or read-only when
/// `p.read_only` asks for it or the file cannot be written here. Returns the connection and
/// whether it is read-only. `fresh` says the file has no schema yet, so its page size can
/// still be chosen.
pub(crate) fn open_conn(
    path: &Path,
    p: &Pragmas,
    fresh: bool,
) -> Result<(Connection, bool), SqliteError> {
    register_sqlite_vec();
    let flags = if p.read_only { RO_FLAGS } else { RW_FLAGS };
    let mut conn = Connection::open_with_flags(path, flags).map_err(|e| diagnose_open(path, e))?;
    conn.busy_timeout(p.busy_timeout)
        .map_err(|e| sql_error(path, e))?;
    let read_only = p.read_only || conn.is_readonly(MAIN_DB).map_err(|e| sql_error(path, e))?;
    if read_only && !fresh && !wal_index_usable(&conn) {
        conn = open_immutable(path, p)?;
    }
    // The query-planner stability guarantee: plans never depend on bound values. Without
    // it, SQLite marks statements whose `LIMIT ?` or `col = ?` could sway the planner and
    // re-prepares them on every new binding: sqlite-vec's per-insert "latest chunk" lookup
    // was re-parsed for each row (about a tenth of ingest time), and so were our `LIMIT ?`
    // searches. The store keeps no planner statistics, so no plan is lost.
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)
        .map_err(|e| sql_error(path, e))?;
    // Searches prepare one statement per IN-list length (candidates, hits, tags); room for
    // all of them keeps the hot ones from being evicted and re-parsed.
    conn.set_prepared_statement_cache_capacity(256);
    if fresh && !read_only {
        // Must precede WAL mode and the first table. Large pages keep sqlite-vec's chunk
        // blobs on short overflow chains, which makes inserts cheaper. Ignored when another
        // process created the file first.
        conn.execute_batch(&format!("PRAGMA page_size = {};", p.page_size))
            .map_err(|e| diagnose_open(path, e))?;
    }
    let sync = if p.synchronous_full { "FULL" } else { "NORMAL" };
    // A no-op on a store that is in WAL mode already (every Ava store but a fresh file).
    // A writer overwrites what it deletes (`secure_delete`): a deleted memory's text is not
    // left readable in freed cells and pages of the file or the log (see
    // `Sql::checkpoint_deleted` for the log's older copies).
    let wal = if read_only {
        ""
    } else {
        "PRAGMA journal_mode = WAL; PRAGMA secure_delete = ON;"
    };
    conn.execute_batch(&format!(
        "{wal}
         PRAGMA synchronous = {sync};
         PRAGMA foreign_keys = ON;
         PRAGMA temp_store = MEMORY;
         PRAGMA cache_size = -{};
         PRAGMA mmap_size = {};",
        u64::from(p.cache_mib) * 1024,
        u64::from(p.mmap_mib) * 1024 * 1024,
    ))
    .map_err(|e| diagnose_open(path, e))?;
    Ok((conn, read_only))
}

/// Whether `conn` (read-only) can read: in WAL mode SQLite needs the `-shm` index beside
/// the file, which a read-only directory or file system cannot take.
fn wal_index_usable(conn: &Connection) -> bool {
    match conn.query_row("SELECT count(*) FROM sqlite_schema", [], |r| {
        r.get::<_, i64>(0)
    }) {
        Ok(_) => true,
        Err(e) => !matches!(
            e.sqlite_error_code(),
            Some(rusqlite::ffi::ErrorCode::ReadOnly | rusqlite::ffi::ErrorCode::CannotOpen)
        ),
    }
}

/// `path` as an SQLite URI of a file that does not change while it is open (`immutable=1`):
/// no locks, no `-wal` or `-shm` files. Only for a store whose log is empty (every change
/// is in the file, as every `ava` command leaves it), on a read-only directory or file
/// system where the log's index cannot be made; otherwise a clear error.
fn open_immutable(path: &Path, p: &Pragmas) -> Result<Connection, SqliteError> {
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    if std::fs::metadata(&wal).is_ok_and(|m| m.len() > 0) {
        return Err(SqliteError::CannotOpen {
            path: path.to_owned(),
            source: Box::new(std::io::Error::other(format!(
                "it can only be read here, and its last changes are still in {} (SQLite's log), \
                 which cannot be read without writing an index beside it; run any `ava` \
                 command on it once where it can be written, or copy it with its -wal file",
                Path::new(&wal).display()
            ))),
        });
    }
    let Some(text) = path.to_str() else {
        return Err(SqliteError::CannotOpen {
            path: path.to_owned(),
            source: Box::new(std::io::Error::other(
                "it can only be read here, and its name is not UTF-8, so it cannot be opened \
                 as unchanging (SQLite's immutable mode needs a URI)",
            )),
        });
    };
    let mut uri = String::from("file:");
    for c in text.chars() {
        match c {
            '%' => uri.push_str("%25"),
            '?' => uri.push_str("%3f"),
            '#' => uri.push_str("%23"),
            c => uri.push(c),
        }
    }
    uri.push_str("?immutable=1");
    let conn = Connection::open_with_flags(uri, RO_FLAGS.union(OpenFlags::SQLITE_OPEN_URI))
        .map_err(|e| diagnose_open(path, e))?;
    conn.busy_timeout(p.busy_timeout)
        .map_err(|e| sql_error(path, e))?;
    Ok(conn)
}

/// Says why SQLite could not open `path`: for "unable to open", asks the OS directly, so
/// the message names the real cause (permission denied, a read-only directory) instead
/// of calling the file something it is not.
fn diagnose_open(path: &Path, e: rusqlite::Error) -> SqliteError {
    if e.sqlite_error_code() != Some(rusqlite::ffi::ErrorCode::CannotOpen) {
        return classify_open(path, e);
    }
    let os = if path.exists() {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .err()
    } else {
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
        {
            Err(io) => Some(io),
            Ok(_) => {
                // We could create it, so that was not the problem; leave nothing behind.
                let _ = std::fs::remove_file(path);
                None
            }
        }
    };
    // The file itself is fine: SQLite needs to create its `-wal` and `-shm` files beside
    // it, so the directory must be writable too.
    let dir_problem = || {
        let dir = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let probe = dir.join(format!(".ava-write-probe-{}", std::process::id()));
        match std::fs::File::create(&probe) {
            Ok(_) => {
                let _ = std::fs::remove_file(&probe);
                None
            }
            Err(io) => Some(std::io::Error::new(
                io.kind(),
                format!(
                    "directory {} is not writable ({io}); SQLite keeps its -wal and -shm files there",
                    dir.display()
                ),
            )),
        }
    };
    SqliteError::CannotOpen {
        path: path.to_owned(),
        source: match os.or_else(dir_problem) {
            Some(io) => Box::new(io),
            None => Box::new(e),
        },
    }
}

/// Opens the second connection that checkpoints the writer's log (see `checkpointer`),
/// with the writer's sync level, so a checkpoint syncs as SQLite's own would.
pub(crate) fn open_checkpointer(path: &Path, p: &Pragmas) -> Result<Connection, SqliteError> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| diagnose_open(path, e))?;
    conn.busy_timeout(p.busy_timeout)
        .map_err(|e| sql_error(path, e))?;
    let sync = if p.synchronous_full { "FULL" } else { "NORMAL" };
    conn.execute_batch(&format!("PRAGMA synchronous = {sync};"))
        .map_err(|e| sql_error(path, e))?;
    Ok(conn)
}

/// Brings the file to the newest schema: creates it in a fresh file, or upgrades an older
/// store one version per transaction. Safe when several processes open a new or old file
/// at once: what needs doing is decided again under the write lock (`BEGIN IMMEDIATE`),
/// so the first process does it and the others find it done. A store that is current
/// takes no lock at all. Read-only, only checks.
pub(crate) fn init_schema(
    conn: &mut Connection,
    path: &Path,
    read_only: bool,
    busy: Duration,
) -> Result<(), SqliteError> {
    let look = |c: &Connection| -> Result<Existing, SqliteError> {
        let (app, version, tables) = identify(c).map_err(|e| classify_open(path, e))?;
        judge(path, app, version, tables)
    };
    match look(conn)? {
        Existing::Store { version } if version == SCHEMA_VERSION => return Ok(()),
        Existing::Fresh if read_only => {
            return Err(SqliteError::NoStore {
                path: path.to_owned(),
            });
        }
        Existing::Store { version } if read_only => {
            return Err(SqliteError::UpgradeNeeded {
                path: path.to_owned(),
                found: version,
                current: SCHEMA_VERSION,
            });
        }
        _ => {}
    }
    loop {
        let tx = begin_write(conn, path, busy)?;
        match look(&tx)? {
            Existing::Store { version } if version == SCHEMA_VERSION => return Ok(()),
            Existing::Fresh => {
                return create_schema(&tx)
                    .and_then(|()| tx.commit())
                    .map_err(|e| sql_error(path, e));
            }
            Existing::Store { version } => {
                let idx = usize::try_from(version - 1).unwrap_or(usize::MAX);
                let Some(step) = MIGRATIONS.get(idx) else {
                    return Err(SqliteError::InvalidData {
                        path: path.to_owned(),
                        what: format!("no migration from schema version {version}"),
                    });
                };
                match step {
                    Migration::Sql(sql) => tx.execute_batch(sql),
                    Migration::Codes => add_codes(&tx),
                }
                .and_then(|()| tx.execute_batch(&format!("PRAGMA user_version = {};", version + 1)))
                .and_then(|()| tx.commit())
                .map_err(|e| sql_error(path, e))?;
            }
        }
    }
}

/// Creates the newest schema inside `tx`.
fn create_schema(tx: &Connection) -> rusqlite::Result<()> {
    tx.execute_batch(SCHEMA)?;
    tx.execute_batch(create_fts!())?;
    tx.execute_batch(create_unembedded_index!())?;
    tx.execute_batch(create_passages_index!())?;
    tx.execute_batch(create_write_seq!())?;
    tx.execute_batch(create_leases!())?;
    tx.execute_batch(create_records!())?;
    tx.execute_batch(create_record_quotes!())?;
    tx.execute_batch(&format!(
        "PRAGMA application_id = {APPLICATION_ID}; PRAGMA user_version = {SCHEMA_VERSION};"
    ))?;
    tx.execute(
        "INSERT INTO meta (key, value) VALUES ('format', 'ava-memory-store')",
        [],
    )?;
    Ok(())
}

/// The embedding space recorded in the store, if any.
pub(crate) fn stored_space(
    conn: &Connection,
    path: &Path,
) -> Result<Option<EmbeddingSpace>, SqliteError> {
    let get = |key: &str| -> Result<Option<String>, SqliteError> {
        conn.query_row("SELECT value FROM meta WHERE key = ?1", [key], |r| r.get(0))
            .optional()
            .map_err(|e| sql_error(path, e))
    };
    let (Some(provider), Some(model), Some(dims)) = (
        get("embedding_provider")?,
        get("embedding_model")?,
        get("embedding_dims")?,
    ) else {
        return Ok(None);
    };
    let dims: usize = dims.parse().map_err(|_| SqliteError::InvalidData {
        path: path.to_owned(),
        what: format!("embedding_dims `{dims}` is not a number"),
    })?;
    EmbeddingSpace::new(provider, model, dims)
        .map(Some)
        .map_err(|e| SqliteError::InvalidData {
            path: path.to_owned(),
            what: e.to_string(),
        })
}

/// Records `space` as the store's embedding space.
pub(crate) fn record_space(conn: &Connection, space: &EmbeddingSpace) -> rusqlite::Result<()> {
    for (k, v) in [
        ("embedding_provider", space.provider.clone()),
        ("embedding_model", space.model.clone()),
        ("embedding_dims", space.dims.to_string()),
    ] {
        conn.execute("INSERT INTO meta (key, value) VALUES (?1, ?2) ON CONFLICT(key) DO UPDATE SET value = excluded.value", params![k, v])?;
    }
    Ok(())
}

/// Begins a transaction `IMMEDIATE` (the write lock up front, waiting on the busy
/// timeout). A lock that SQLite reports busy without waiting (e.g. while another process
/// recovers the log) is retried until `timeout` has passed.
pub(crate) fn begin_write<'c>(
    conn: &'c mut Connection,
    path: &Path,
    timeout: Duration,
) -> Result<Transaction<'c>, SqliteError> {
    let conn: &'c Connection = conn;
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(1);
    loop {
        // `&mut` was taken above, so no other transaction can be open on `conn`.
        match Transaction::new_unchecked(conn, TransactionBehavior::Immediate) {
            Ok(tx) => return Ok(tx),
            Err(e) if is_busy(&e) && Instant::now() < deadline => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            Err(e) => return Err(sql_error(path, e)),
        }
    }
}
