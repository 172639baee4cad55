//! What a store leaves in its files: which files of a SQLite store (the database, its `-wal`
//! and `-shm`) hold some text as bytes. Erased means gone from them (issue 54).

use std::path::Path;

/// The files in `dir` whose names start with `db_name` (the store and its log and shared
/// memory) that hold `needle` as bytes.
pub(crate) fn holding(dir: &Path, db_name: &str, needle: &str) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with(db_name)
        })
        .filter(|p| {
            let bytes = std::fs::read(p).unwrap();
            bytes.windows(needle.len()).any(|w| w == needle.as_bytes())
        })
        .map(|p| p.display().to_string())
        .collect()
}
