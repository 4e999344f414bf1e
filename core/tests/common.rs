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
        /// Frames read from clients (stalled or not).
        client_frames: AtomicU64,
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

        /// Frames read from clients so far, held by a stall or not.
        pub fn client_frames(&self) -> u64 {
            self.faults.client_frames.load(Ordering::SeqCst)
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
                if client_side {
                    f.client_frames.fetch_add(1, Ordering::SeqCst);
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

/// A loopback port nobody listens on now, for a server a test starts
/// (an etcd member, a nats-server node, a `tcp:` listener), taken below
/// (else above) the kernel's ephemeral range
/// (`/proc/sys/net/ipv4/ip_local_port_range`). A port the OS picks on
/// `bind(0)` lies in that range, where any outgoing connection (etcdctl's
/// health checks, the members' own) may take it as its local port before
/// the server binds it, and the server then exits with "address already in
/// use". Successive calls give different ports.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static BAND: std::sync::OnceLock<(u32, u32)> = std::sync::OnceLock::new();
    static TRIED: AtomicU32 = AtomicU32::new(0);
    let &(start, end) = BAND.get_or_init(|| {
        let (lo, hi) = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
            .ok()
            .and_then(|s| {
                let mut it = s.split_whitespace().map(|n| n.parse::<u32>().ok());
                Some((it.next()??, it.next()??))
            })
            .unwrap_or((32768, 60999));
        // Each process starts at its own place in the band, so test
        // processes running at once rarely try the same ports.
        let seed = std::process::id().wrapping_mul(2_654_435_761) ^ std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().subsec_nanos();
        TRIED.store(seed, Ordering::Relaxed);
        if lo >= 3024 { (lo.saturating_sub(20_000).max(2024), lo) } else { (hi + 1, 65536) }
    });
    let span = end.saturating_sub(start);
    if span < 1000 {
        return std::net::TcpListener::bind("127.0.0.1:0").expect("bind a loopback port").local_addr().unwrap().port();
    }
    for _ in 0..span {
        let port = (start + TRIED.fetch_add(1, Ordering::Relaxed) % span) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port in {start}..{end}")
}

/// The last `n` lines of the log at `path`, for a panic that names why a
/// server a test started did not come up (its directory goes with the test).
pub fn log_tail(path: &std::path::Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| format!("({}: {e})", path.display()));
    let lines: Vec<&str> = text.lines().collect();
    format!("{}:\n{}", path.display(), lines[lines.len().saturating_sub(n)..].join("\n"))
}
