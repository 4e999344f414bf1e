//! LOCK-01, LOCK-03, LOCK-04, LOCK-06, LOCK-07, LOCK-08 in the owning process,
//! and the scenarios L7, L18, P1, P3, P4, P6.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use tinystore::locks::{Holder, Kind, Terms};
use tinystore::{Error, Fence, runtime};

#[test]
fn lock_01_exclusion_under_contention_and_fences_grow_in_grant_order() {
    let (store, _d) = common::store();
    let lock = store.lock("counter").wait(Duration::from_secs(30)).open().unwrap();
    let inside = Arc::new(AtomicBool::new(false));
    let counter = Arc::new(AtomicU64::new(0));
    let grants = Arc::new(Mutex::new(Vec::<Fence>::new()));
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let (lock, inside, counter, grants) = (lock.clone(), inside.clone(), counter.clone(), grants.clone());
            std::thread::spawn(move || {
                for _ in 0..500 {
                    lock.hold("k", |lease| -> tinystore::Result<()> {
                        assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                        grants.lock().unwrap().push(lease.fence());
                        let v = counter.load(Ordering::Relaxed);
                        std::hint::spin_loop();
                        counter.store(v + 1, Ordering::Relaxed);
                        inside.store(false, Ordering::SeqCst);
                        Ok(())
                    })
                    .unwrap();
                }
            })
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
    assert_eq!(counter.load(Ordering::SeqCst), 4000);
    let g = grants.lock().unwrap();
    assert!(g.windows(2).all(|w| w[0] < w[1]), "fences strictly increase in grant order");
}

#[test]
fn lock_01_semaphore_never_exceeds_its_limit() {
    let (store, _d) = common::store();
    let sem = store.semaphore("exports").limit(3).wait(Duration::from_secs(30)).open().unwrap();
    let now = Arc::new(AtomicU64::new(0));
    let peak = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let (sem, now, peak) = (sem.clone(), now.clone(), peak.clone());
            std::thread::spawn(move || {
                for _ in 0..100 {
                    sem.hold("k", |_p| -> tinystore::Result<()> {
                        let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                        peak.fetch_max(n, Ordering::SeqCst);
                        std::thread::yield_now();
                        now.fetch_sub(1, Ordering::SeqCst);
                        Ok(())
                    })
                    .unwrap();
                }
            })
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
    assert!(peak.load(Ordering::SeqCst) <= 3);
    assert_eq!(peak.load(Ordering::SeqCst), 3, "the limit is reached under contention");
}

#[test]
fn lock_03_hold_times_out_without_running() {
    let (store, _d) = common::store();
    let lock = store.lock("l").wait(Duration::from_millis(200)).open().unwrap();
    let l2 = lock.clone();
    let (held_tx, held_rx) = std::sync::mpsc::channel();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let holder = std::thread::spawn(move || {
        l2.hold("k", |_| -> tinystore::Result<()> {
            held_tx.send(()).unwrap();
            go_rx.recv().unwrap();
            Ok(())
        })
    });
    held_rx.recv().unwrap();
    let ran = AtomicBool::new(false);
    let t = Instant::now();
    let e = lock.hold("k", |_| -> tinystore::Result<()> {
        ran.store(true, Ordering::SeqCst);
        Ok(())
    });
    let e = e.unwrap_err();
    assert_eq!(e.code(), "timeout");
    assert!(e.message().contains("200ms"), "{e}");
    assert!(!ran.load(Ordering::SeqCst));
    assert!(t.elapsed() >= Duration::from_millis(190));
    // try_hold never waits and runs nothing.
    let t = Instant::now();
    assert_eq!(lock.try_hold("k", |_| -> tinystore::Result<u8> { Ok(1) }).unwrap(), None);
    assert!(t.elapsed() < Duration::from_millis(50));
    go_tx.send(()).unwrap();
    holder.join().unwrap().unwrap();
    assert_eq!(lock.try_hold("k", |_| -> tinystore::Result<u8> { Ok(1) }).unwrap(), Some(1));
}

#[test]
fn lock_03_waiters_get_the_key_in_the_order_they_asked() {
    let (store, _d) = common::store();
    let raw = store.lock_raw("fifo", Kind::Lock).unwrap();
    let first = runtime::block_on(raw.acquire("k".into(), Holder(0), Terms::default(), Duration::from_secs(5))).unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut threads = Vec::new();
    for i in 0..5 {
        let (raw, order) = (raw.clone(), order.clone());
        threads.push(std::thread::spawn(move || {
            let l = runtime::block_on(raw.acquire("k".into(), Holder(0), Terms::default(), Duration::from_secs(5))).unwrap();
            order.lock().unwrap().push(i);
            l.release().unwrap();
        }));
        // Each waiter is in line before the next one asks.
        assert!(common::eventually(2000, || store.status().unwrap().locks.first().is_some_and(|k| k.waiters == i + 1)));
    }
    first.release().unwrap();
    threads.into_iter().for_each(|t| t.join().unwrap());
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3, 4]);
}

#[derive(Debug, PartialEq)]
enum AppError {
    Mine(&'static str),
    Store(String),
}
impl From<Error> for AppError {
    fn from(e: Error) -> Self {
        AppError::Store(e.code().to_owned())
    }
}

#[test]
fn lock_04_key_let_go_on_return_error_and_panic_and_error_reaches_caller_unchanged() {
    let (store, _d) = common::store();
    let lock = store.lock("l").open().unwrap();
    assert_eq!(lock.hold("k", |_| -> Result<(), AppError> { Err(AppError::Mine("boom")) }), Err(AppError::Mine("boom")));
    assert_eq!(lock.try_hold("k", |_| -> tinystore::Result<u8> { Ok(1) }).unwrap(), Some(1), "free after an error");
    let l2 = lock.clone();
    let p = std::thread::spawn(move || l2.hold("k", |_| -> tinystore::Result<()> { panic!("holder panics") })).join();
    assert!(p.is_err());
    assert_eq!(lock.try_hold("k", |_| -> tinystore::Result<u8> { Ok(2) }).unwrap(), Some(2), "free after a panic");
    assert_eq!(lock.hold("k", |_| -> tinystore::Result<&str> { Ok("value") }).unwrap(), "value");
}

#[test]
fn lock_04_cancelled_waiter_leaves_the_line() {
    let (store, _d) = common::store();
    let raw = store.lock_raw("l", Kind::Lock).unwrap();
    let held = runtime::block_on(raw.acquire("k".into(), Holder(0), Terms::default(), Duration::from_secs(5))).unwrap();
    // A waiter whose future is dropped (a cancelled task) leaves the queue.
    let waiting = raw.acquire("k".into(), Holder(0), Terms::default(), Duration::from_secs(5));
    let r = runtime::block_on(async { tokio::time::timeout(Duration::from_millis(50), waiting).await });
    assert!(r.is_err());
    assert_eq!(store.status().unwrap().locks[0].waiters, 0);
    held.release().unwrap();
    assert!(runtime::block_on(raw.try_acquire("k".into(), Holder(0), Terms::default())).unwrap().is_some());
}

/// LOCK-06 and P1: a function that never yields runs past maxHold; the key is
/// given to another holder at maxHold, and the first holder's hold still ends
/// with a lost error.
#[test]
fn lock_06_max_hold_frees_key_and_p1_reports_lost_after_non_yielding_function() {
    let (store, _d) = common::store();
    let lock = store.lock("l").max_hold(Duration::from_millis(150)).open().unwrap();
    let other = store.lock("l").wait(Duration::from_secs(2)).open().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let a = std::thread::spawn(move || {
        lock.hold("k", |lease| -> tinystore::Result<Fence> {
            tx.send(lease.fence()).unwrap();
            let end = Instant::now() + Duration::from_millis(400);
            while Instant::now() < end {
                std::hint::spin_loop();
            }
            assert!(lease.is_lost(), "the holder can see the lease is lost");
            Ok(lease.fence())
        })
    });
    let fa = rx.recv().unwrap();
    let t = Instant::now();
    let fb = other.hold("k", |l| -> tinystore::Result<Fence> { Ok(l.fence()) }).unwrap();
    let waited = t.elapsed();
    assert!(fb > fa);
    assert!(waited < Duration::from_millis(350), "B got the key at maxHold, not when A's function ended: {waited:?}");
    let e = a.join().unwrap().unwrap_err();
    assert_eq!(e.code(), "lost");
    assert!(e.message().contains("maxHold"), "{e}");
}

/// LOCK-07: in the owning process a lease outlives its ttl; only its function ends it.
#[test]
fn lock_07_in_process_lease_outlives_ttl() {
    let (store, _d) = common::store();
    let lock = store.lock("l").ttl(Duration::from_secs(1)).open().unwrap();
    let r = lock.hold("k", |lease| -> tinystore::Result<bool> {
        std::thread::sleep(Duration::from_millis(1300));
        Ok(lease.is_lost())
    });
    assert!(!r.unwrap(), "the lease was never lost while held");
}

#[test]
fn lock_08_hold_inside_hold_of_same_key_fails_at_once() {
    let (store, _d) = common::store();
    let lock = store.lock("l").open().unwrap();
    let t = Instant::now();
    let r = lock.hold("k", |_| -> tinystore::Result<(Option<u8>, String)> {
        let inner = lock.hold("k", |_| -> tinystore::Result<()> { Ok(()) }).unwrap_err();
        let tried = lock.try_hold("k", |_| -> tinystore::Result<u8> { Ok(1) })?;
        Ok((tried, inner.code().to_owned()))
    });
    assert_eq!(r.unwrap(), (None, "conflict".to_owned()));
    assert!(t.elapsed() < Duration::from_secs(1));
    // Another key is fine.
    lock.hold("a", |_| lock.hold("b", |_| -> tinystore::Result<()> { Ok(()) })).unwrap();
}

#[test]
fn lock_08_p3_semaphore_limit_belongs_to_the_semaphore() {
    let (store, _d) = common::store();
    store.semaphore("s").limit(2).open().unwrap();
    store.semaphore("s").limit(2).open().unwrap();
    let e = store.semaphore("s").limit(3).open().err().unwrap();
    assert_eq!(e.code(), "conflict");
    assert!(e.message().contains("limit 2"), "{e}");
    assert_eq!(store.lock("s").open().err().unwrap().code(), "conflict");
    assert_eq!(store.semaphore("t").limit(0).open().err().unwrap().code(), "invalid");
}

#[test]
fn names_p4_bad_ttl_name_wait_refused_when_handle_is_made() {
    let (store, _d) = common::store();
    for (b, what) in [
        (store.lock("l").ttl(Duration::from_millis(500)), "ttl"),
        (store.lock("l").ttl(Duration::from_secs(7200)), "ttl"),
        (store.lock("l").wait(Duration::ZERO), "wait"),
        (store.lock("l").max_hold(Duration::ZERO), "maxHold"),
        (store.lock("Bad Name"), "name"),
    ] {
        let e = b.open().err().unwrap();
        assert_eq!(e.code(), "invalid");
        assert!(e.message().contains(what), "{e}");
    }
    let lock = store.lock("l").open().unwrap();
    let long = "x".repeat(1025);
    assert_eq!(lock.hold(long.as_str(), |_| -> tinystore::Result<()> { Ok(()) }).unwrap_err().code(), "invalid");
    assert_eq!(lock.hold("", |_| -> tinystore::Result<()> { Ok(()) }).unwrap_err().code(), "invalid");
}

/// P6: releasing a lease that already ran out tells the holder it was lost.
#[test]
fn p6_release_of_lost_lease_says_lost() {
    let (store, _d) = common::store();
    let raw = store.lock_raw("l", Kind::Lock).unwrap();
    let terms = Terms { ttl: None, max_hold: Some(Duration::from_millis(50)) };
    let lease = runtime::block_on(raw.acquire("k".into(), Holder(0), terms, Duration::from_secs(1))).unwrap();
    let fired = Arc::new(AtomicBool::new(false));
    let f = fired.clone();
    lease.on_lost(move || f.store(true, Ordering::SeqCst));
    runtime::block_on(lease.lost());
    assert!(common::eventually(1000, || fired.load(Ordering::SeqCst)));
    assert_eq!(lease.renew().unwrap_err().code(), "lost");
    assert_eq!(lease.release().unwrap_err().code(), "lost");
}

/// L7: 1,000 concurrent holds of one key through one store handle.
#[test]
fn l7_thousand_concurrent_holds_count_exactly_with_increasing_fences() {
    let (store, _d) = common::store();
    let raw = store.lock_raw("l7", Kind::Lock).unwrap();
    let counter = Arc::new(AtomicU64::new(0));
    let fences = Arc::new(Mutex::new(Vec::new()));
    let tasks: Vec<_> = (0..1000)
        .map(|_| {
            let (raw, counter, fences) = (raw.clone(), counter.clone(), fences.clone());
            runtime::spawn(async move {
                let l = raw.acquire("k".into(), Holder::unique(), Terms::default(), Duration::from_secs(30)).await.unwrap();
                fences.lock().unwrap().push(l.fence().unwrap());
                let v = counter.load(Ordering::Relaxed);
                tokio::task::yield_now().await;
                counter.store(v + 1, Ordering::Relaxed);
                l.release().unwrap();
            })
        })
        .collect();
    runtime::block_on(async {
        for t in tasks {
            t.await.unwrap();
        }
    });
    assert_eq!(counter.load(Ordering::SeqCst), 1000);
    let f = fences.lock().unwrap();
    assert!(f.windows(2).all(|w| w[0] < w[1]));
}

/// L18: leases run on a monotonic clock; the epoch on the wall clock only
/// rises (see fences.rs for a clock behind the stored epoch).
#[test]
fn l18_max_hold_runs_on_monotonic_clock() {
    let (store, _d) = common::store();
    let raw = store.lock_raw("l", Kind::Lock).unwrap();
    let terms = Terms { ttl: None, max_hold: Some(Duration::from_millis(300)) };
    let lease = runtime::block_on(raw.acquire("k".into(), Holder(0), terms, Duration::from_secs(1))).unwrap();
    let left = lease.time_left().unwrap();
    assert!(left <= Duration::from_millis(300) && left > Duration::from_millis(200));
    std::thread::sleep(Duration::from_millis(100));
    assert!(!lease.is_lost());
    runtime::block_on(lease.lost());
}

#[test]
fn store_01_close_lets_keys_go_and_tells_holders_and_waiters() {
    let (store, _d) = common::store();
    let raw = store.lock_raw("l", Kind::Lock).unwrap();
    let held = runtime::block_on(raw.acquire("k".into(), Holder(0), Terms::default(), Duration::from_secs(1))).unwrap();
    let r2 = raw.clone();
    let waiter = std::thread::spawn(move || runtime::block_on(r2.acquire("k".into(), Holder(0), Terms::default(), Duration::from_secs(5))));
    assert!(common::eventually(2000, || store.status().unwrap().locks.first().is_some_and(|k| k.waiters == 1)));
    store.close();
    assert_eq!(waiter.join().unwrap().unwrap_err().code(), "closed");
    assert!(held.is_lost());
    assert_eq!(store.lock("l").open().err().unwrap().code(), "closed");
}

#[test]
fn store_01_exclusive_owner_is_refused_until_the_first_closes_and_plain_open_connects() {
    let d = common::dir();
    let exclusive = || tinystore::Store::open_with(d.path(), tinystore::OpenOptions::new().exclusive());
    let a = tinystore::Store::open(d.path()).unwrap();
    assert!(a.is_owner());
    let e = exclusive().err().unwrap();
    assert_eq!(e.code(), "owned");
    assert!(e.message().contains(&std::process::id().to_string()), "{e}");
    let b = tinystore::Store::open(d.path()).unwrap();
    assert!(!b.is_owner(), "a second open connects to the owner");
    assert_eq!(b.epoch(), a.epoch());
    b.close();
    a.close();
    assert!(exclusive().unwrap().is_owner());
}

/// STORE-01: a process that closes its store owns it again at once, even
/// while another of its threads starts child processes (a child shares the
/// directory lock's file until it execs, so the lock outlives the close for
/// a moment).
#[test]
fn store_01_a_closed_store_is_owned_again_at_once_while_children_are_spawned() {
    let d = common::dir();
    let stop = Arc::new(AtomicBool::new(false));
    let spawner = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let _ = std::process::Command::new("true").status();
            }
        })
    };
    let mut refused = Vec::new();
    for _ in 0..300 {
        match tinystore::Store::open_with(d.path(), tinystore::OpenOptions::new().exclusive()) {
            Ok(s) => s.close(),
            Err(e) => refused.push(e.to_string()),
        }
    }
    stop.store(true, Ordering::Relaxed);
    spawner.join().unwrap();
    assert!(refused.is_empty(), "{} of 300 opens refused, first: {}", refused.len(), refused[0]);
}

#[test]
fn lock_01_barrier_start_many_keys_independent() {
    let (store, _d) = common::store();
    let lock = store.lock("many").open().unwrap();
    let barrier = Arc::new(Barrier::new(4));
    let threads: Vec<_> = (0..4)
        .map(|i| {
            let (lock, barrier) = (lock.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                lock.try_hold(i, |_| -> tinystore::Result<()> {
                    std::thread::sleep(Duration::from_millis(50));
                    Ok(())
                })
                .unwrap()
                .is_some()
            })
        })
        .collect();
    assert!(threads.into_iter().all(|t| t.join().unwrap()), "different keys never block each other");
}
