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

/// Messages a publish→deliver round publishes (to one subscriber).
const N: u64 = 500_000;

/// One round of a row: its rate, and for publish→deliver the share of
/// deliveries the subscribers missed (the publisher ran ahead of them by
/// more than a branch's log, or broadcast's 1,024 slots).
#[derive(Clone, Copy)]
struct Round {
    rate: f64,
    missed: Option<f64>,
}

impl Round {
    fn of(got: u64, want: u64, secs: f64) -> Round {
        Round { rate: got as f64 / secs, missed: Some(1.0 - got as f64 / want as f64) }
    }
}

impl From<f64> for Round {
    fn from(rate: f64) -> Round {
        Round { rate, missed: None }
    }
}

fn ours_publish_deliver(store: &Store, subscribers: usize) -> Round {
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
    Round::of(got.load(Ordering::Relaxed), want, el)
}

fn tokio_publish_deliver(subscribers: usize) -> Round {
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
    Round::of(got.load(Ordering::Relaxed), want, el)
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

/// Rounds of each side in a row, taking turns with the peer.
const ROUNDS: usize = 5;

/// `ENGINE_ONLY=TEXT` runs only the rows whose name starts so (a profile of one).
fn wanted(name: &str) -> bool {
    std::env::var("ENGINE_ONLY").map_or(true, |only| name.starts_with(only.as_str()))
}

/// Ours and the peer take turns, `ROUNDS` times, and each side's best
/// round counts: this host runs at two speeds, for seconds to minutes at a
/// time, and turns keep a stretch from falling on one side only.
fn row<O: Into<Round>, P: Into<Round>>(name: &str, ours: impl Fn() -> O, peer_name: &str, peer: impl Fn() -> P) {
    if !wanted(name) {
        return;
    }
    // `ENGINE_OURS_ONLY=1` skips the peer (a profile of ours alone).
    let ours_only = std::env::var_os("ENGINE_OURS_ONLY").is_some();
    let none = Round { rate: f64::NAN, missed: None };
    let (mut best_ours, mut best_peer): (Option<Round>, Option<Round>) = (None, None);
    for _ in 0..ROUNDS {
        let p = if ours_only { none } else { peer().into() };
        let o: Round = ours().into();
        // `ENGINE_ROUNDS=1` prints every round (the spread behind a best).
        if std::env::var_os("ENGINE_ROUNDS").is_some() {
            eprintln!("  {name}: ours {:.0} /s (missed {}), peer {:.0} /s (missed {})", o.rate, share(o.missed), p.rate, share(p.missed));
        }
        best_peer = Some(best_peer.filter(|b| b.rate >= p.rate).unwrap_or(p));
        best_ours = Some(best_ours.filter(|b| b.rate >= o.rate).unwrap_or(o));
    }
    let (best_ours, best_peer) = (best_ours.unwrap_or(none), best_peer.unwrap_or(none));
    println!(
        "| {name} | {:>12.0} /s | {} | {peer_name} | {:>12.0} /s | {} | {:>6.3} |",
        best_ours.rate,
        share(best_ours.missed),
        best_peer.rate,
        share(best_peer.missed),
        best_ours.rate / best_peer.rate
    );
}

fn share(missed: Option<f64>) -> String {
    missed.map_or("".into(), |m| format!("{:.1}%", m * 100.0))
}

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    println!("tinystore engine, in-process (best of 5 rounds, taking turns with the peer; ratio = ours / peer)\n");
    println!("| workload | tinystore | missed | peer | peer rate | peer missed | ratio |");
    println!("|---|---:|---:|---|---:|---:|---:|");
    row("publish→deliver, 1 subscriber", || ours_publish_deliver(&store, 1), "tokio broadcast", || tokio_publish_deliver(1));
    row("publish→deliver, 100 subscribers (deliveries)", || ours_publish_deliver(&store, 100), "tokio broadcast", || tokio_publish_deliver(100));
    row("hold+release, uncontended", || ours_hold_release(&store), "parking_lot Mutex", mutex_lock_unlock);
    row("hold+release, 4 threads on one key", || ours_contended(&store, 4), "parking_lot Mutex, 4 threads", || mutex_contended(4));
}
