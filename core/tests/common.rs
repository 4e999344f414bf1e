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

/// A fault-injecting proxy between clients and a store's Unix socket: it can
/// stall all traffic, cut every connection, or drop some renewals.
pub mod proxy {
    use std::io::{Read, Write};
    use std::os::unix::net::{UnixListener, UnixStream};
    use std::path::{Path, PathBuf};
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    #[derive(Default)]
    struct Faults {
        stalled: AtomicBool,
        /// Drop every n-th renew frame (0: none); every renew when u64::MAX.
        drop_renew_every: AtomicU64,
        renews: AtomicU64,
        generation: AtomicU64,
    }

    pub struct Proxy {
        pub path: PathBuf,
        faults: Arc<Faults>,
        conns: Arc<Mutex<Vec<UnixStream>>>,
    }

    impl Proxy {
        /// Listens on `<dir>/proxy.sock` and forwards to `target`.
        pub fn start(dir: &Path, target: &Path) -> Proxy {
            let path = dir.join("proxy.sock");
            let _ = std::fs::remove_file(&path);
            let l = UnixListener::bind(&path).unwrap();
            let faults = Arc::new(Faults::default());
            let conns = Arc::new(Mutex::new(Vec::new()));
            let (f, c, target) = (faults.clone(), conns.clone(), target.to_path_buf());
            std::thread::spawn(move || {
                for client in l.incoming() {
                    let Ok(client) = client else { return };
                    let Ok(server) = UnixStream::connect(&target) else { continue };
                    c.lock().unwrap().push(client.try_clone().unwrap());
                    c.lock().unwrap().push(server.try_clone().unwrap());
                    let epoch = f.generation.load(Ordering::SeqCst);
                    pump(client.try_clone().unwrap(), server.try_clone().unwrap(), f.clone(), true, epoch);
                    pump(server, client, f.clone(), false, epoch);
                }
            });
            Proxy { path, faults, conns }
        }

        pub fn address(&self) -> String {
            format!("unix:{}", self.path.display())
        }

        /// Holds every byte in both directions until `resume`.
        pub fn stall(&self) {
            self.faults.stalled.store(true, Ordering::SeqCst);
        }

        pub fn resume(&self) {
            self.faults.stalled.store(false, Ordering::SeqCst);
        }

        /// Cuts every connection now (clients may reconnect through the proxy).
        pub fn cut(&self) {
            self.faults.generation.fetch_add(1, Ordering::SeqCst);
            for s in self.conns.lock().unwrap().drain(..) {
                let _ = s.shutdown(std::net::Shutdown::Both);
            }
        }

        /// Drops every n-th renewal from clients (u64::MAX: all of them).
        pub fn drop_renewals(&self, every: u64) {
            self.faults.drop_renew_every.store(every, Ordering::SeqCst);
        }

        pub fn renewals_seen(&self) -> u64 {
            self.faults.renews.load(Ordering::SeqCst)
        }
    }

    fn pump(mut from: UnixStream, mut to: UnixStream, f: Arc<Faults>, client_side: bool, epoch: u64) {
        std::thread::spawn(move || {
            loop {
                let mut len = [0u8; 4];
                if from.read_exact(&mut len).is_err() {
                    break;
                }
                let n = u32::from_be_bytes(len) as usize;
                let mut body = vec![0u8; n];
                if from.read_exact(&mut body).is_err() {
                    break;
                }
                while f.stalled.load(Ordering::SeqCst) && f.generation.load(Ordering::SeqCst) == epoch {
                    std::thread::sleep(Duration::from_millis(5));
                }
                if f.generation.load(Ordering::SeqCst) != epoch {
                    break;
                }
                if client_side && body.windows(12).any(|w| w == b"\"op\":\"renew\"") {
                    let k = f.renews.fetch_add(1, Ordering::SeqCst) + 1;
                    let every = f.drop_renew_every.load(Ordering::SeqCst);
                    if every == u64::MAX || (every > 0 && k.is_multiple_of(every)) {
                        continue;
                    }
                }
                if to.write_all(&len).and_then(|_| to.write_all(&body)).is_err() {
                    break;
                }
            }
            let _ = to.shutdown(std::net::Shutdown::Both);
            let _ = from.shutdown(std::net::Shutdown::Both);
        });
    }
}
