//! The engine in-process, against peers measured in the same run:
//! tokio::sync::broadcast for publish→deliver (same JSON values, receiver on
//! another thread), and a bare parking_lot::Mutex for hold+release.
//!
//! Run: `cargo bench -p tinystore --bench engine`

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tinystore::Store;

#[derive(Serialize, Deserialize, Clone)]
struct ChatEvent {
    kind: String,
    id: i64,
}

const N: u64 = 200_000;

fn ours_publish_deliver(store: &Store, subscribers: usize) -> f64 {
    let events = store.channel::<ChatEvent>("bench").open().unwrap();
    let branch = format!("b{subscribers}");
    let got = Arc::new(AtomicU64::new(0));
    let missed = Arc::new(AtomicU64::new(0));
    let subs: Vec<_> = (0..subscribers)
        .map(|_| {
            let (g, m) = (got.clone(), missed.clone());
            events
                .under(branch.as_str())
                .on_missed(move |x| {
                    m.fetch_add(x.count.unwrap_or(0), Ordering::Relaxed);
                })
                .subscribe(move |msg| {
                    std::hint::black_box(msg.value.id);
                    g.fetch_add(1, Ordering::Relaxed);
                })
                .unwrap()
        })
        .collect();
    let n = N / subscribers.max(1) as u64 * if subscribers > 1 { 10 } else { 1 };
    let t = Instant::now();
    for i in 0..n {
        events.under(branch.as_str()).publish(&ChatEvent { kind: "message".into(), id: i as i64 }).unwrap();
    }
    let want = n * subscribers as u64;
    while got.load(Ordering::Relaxed) + missed.load(Ordering::Relaxed) < want {
        std::thread::sleep(Duration::from_micros(200));
    }
    let el = t.elapsed().as_secs_f64();
    drop(subs);
    got.load(Ordering::Relaxed) as f64 / el
}

fn tokio_publish_deliver(subscribers: usize) -> f64 {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let (tx, _) = tokio::sync::broadcast::channel::<Arc<[u8]>>(1024);
    let got = Arc::new(AtomicU64::new(0));
    let missed = Arc::new(AtomicU64::new(0));
    let n = N / subscribers.max(1) as u64 * if subscribers > 1 { 10 } else { 1 };
    let mut tasks = Vec::new();
    for _ in 0..subscribers {
        let mut rx = tx.subscribe();
        let (g, m) = (got.clone(), missed.clone());
        tasks.push(rt.spawn(async move {
            loop {
                match rx.recv().await {
                    Ok(b) => {
                        let v: ChatEvent = serde_json::from_slice(&b).unwrap();
                        std::hint::black_box(v.id);
                        g.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(k)) => {
                        m.fetch_add(k, Ordering::Relaxed);
                    }
                    Err(_) => return,
                }
            }
        }));
    }
    let t = Instant::now();
    for i in 0..n {
        let b: Arc<[u8]> = serde_json::to_vec(&ChatEvent { kind: "message".into(), id: i as i64 }).unwrap().into();
        let _ = tx.send(b);
    }
    let want = n * subscribers as u64;
    while got.load(Ordering::Relaxed) + missed.load(Ordering::Relaxed) < want {
        std::thread::sleep(Duration::from_micros(200));
    }
    let el = t.elapsed().as_secs_f64();
    drop(tx);
    got.load(Ordering::Relaxed) as f64 / el
}

fn ours_hold_release(store: &Store) -> f64 {
    let lock = store.lock("bench").open().unwrap();
    let n = 1_000_000;
    let t = Instant::now();
    for _ in 0..n {
        lock.hold(1, |l| -> tinystore::Result<()> {
            std::hint::black_box(l.fence());
            Ok(())
        })
        .unwrap();
    }
    n as f64 / t.elapsed().as_secs_f64()
}

fn mutex_lock_unlock() -> f64 {
    let m = parking_lot::Mutex::new(0u64);
    let n = 20_000_000;
    let t = Instant::now();
    for _ in 0..n {
        *m.lock() += 1;
    }
    std::hint::black_box(*m.lock());
    n as f64 / t.elapsed().as_secs_f64()
}

fn ours_contended(store: &Store, threads: usize) -> f64 {
    let lock = store.lock("contended").wait(Duration::from_secs(60)).open().unwrap();
    let per = 20_000;
    let t = Instant::now();
    let hs: Vec<_> = (0..threads)
        .map(|_| {
            let lock = lock.clone();
            std::thread::spawn(move || {
                for _ in 0..per {
                    lock.hold("k", |_| -> tinystore::Result<()> { Ok(()) }).unwrap();
                }
            })
        })
        .collect();
    hs.into_iter().for_each(|h| h.join().unwrap());
    (per * threads) as f64 / t.elapsed().as_secs_f64()
}

fn mutex_contended(threads: usize) -> f64 {
    let m = Arc::new(parking_lot::Mutex::new(0u64));
    let per = 2_000_000;
    let t = Instant::now();
    let hs: Vec<_> = (0..threads)
        .map(|_| {
            let m = m.clone();
            std::thread::spawn(move || {
                for _ in 0..per {
                    *m.lock() += 1;
                }
            })
        })
        .collect();
    hs.into_iter().for_each(|h| h.join().unwrap());
    (per * threads) as f64 / t.elapsed().as_secs_f64()
}

fn best(f: impl Fn() -> f64) -> f64 {
    (0..3).map(|_| f()).fold(0.0, f64::max)
}

/// `ENGINE_ONLY=TEXT` runs only the rows whose name starts so (a profile of one).
fn wanted(name: &str) -> bool {
    std::env::var("ENGINE_ONLY").map_or(true, |only| name.starts_with(only.as_str()))
}

fn row(name: &str, ours: impl Fn() -> f64, peer_name: &str, peer: impl Fn() -> f64) {
    if !wanted(name) {
        return;
    }
    // `ENGINE_OURS_ONLY=1` skips the peer (a profile of ours alone).
    let peer = if std::env::var_os("ENGINE_OURS_ONLY").is_some() { f64::NAN } else { best(peer) };
    let ours = best(ours);
    println!("| {name} | {:>12.0} /s | {peer_name} | {:>12.0} /s | {:>6.3} |", ours, peer, ours / peer);
}

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    println!("tinystore engine, in-process (best of 3 runs; ratio = ours / peer)\n");
    println!("| workload | tinystore | peer | peer rate | ratio |");
    println!("|---|---:|---|---:|---:|");
    row("publish→deliver, 1 subscriber", || ours_publish_deliver(&store, 1), "tokio broadcast", || tokio_publish_deliver(1));
    row("publish→deliver, 100 subscribers (deliveries)", || ours_publish_deliver(&store, 100), "tokio broadcast", || tokio_publish_deliver(100));
    row("hold+release, uncontended", || ours_hold_release(&store), "parking_lot Mutex", mutex_lock_unlock);
    row("hold+release, 4 threads on one key", || ours_contended(&store, 4), "parking_lot Mutex, 4 threads", || mutex_contended(4));
}
