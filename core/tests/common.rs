#![allow(dead_code)]
//! Helpers shared by the core's tests.

use std::path::PathBuf;

use tinystore::Store;

/// A fresh store directory, removed when the guard is dropped.
pub fn dir() -> tempfile::TempDir {
    tempfile::Builder::new().prefix("tinystore-test").tempdir().expect("temp dir")
}

/// A store owned by this process in a fresh directory.
pub fn store() -> (Store, tempfile::TempDir) {
    let d = dir();
    (Store::open(d.path()).expect("open store"), d)
}

/// The workspace root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root").to_path_buf()
}

/// Polls `f` until true, at most `ms` milliseconds.
pub fn eventually(ms: u64, mut f: impl FnMut() -> bool) -> bool {
    let end = std::time::Instant::now() + std::time::Duration::from_millis(ms);
    while std::time::Instant::now() < end {
        if f() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    f()
}
