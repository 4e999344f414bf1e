//! LOCK-01 as an outside observer sees it: once a hold's block returned, the
//! key is free for everyone, also for a process told by another path than
//! the store's own connection.

mod common;

use std::sync::mpsc;
use std::time::{Duration, Instant};

use tinystore::Store;

fn owner_and_clients(n: usize) -> (Store, Vec<Store>, tempfile::TempDir) {
    let (owner, d) = common::store();
    let address = format!("unix:{}", d.path().join("tinystore.sock").display());
    let clients = (0..n).map(|_| Store::connect(&address).unwrap()).collect();
    (owner, clients, d)
}

/// A's hold returned, then B (another connection) tries the key: it is free
/// every time, never still held by A's released lease.
#[test]
fn lock_01_release_then_try_hold_across_connections() {
    let (_owner, clients, _d) = owner_and_clients(2);
    let a = clients[0].lock("jobs").open().unwrap();
    let b = clients[1].lock("jobs").open().unwrap();
    let mut refused = 0;
    for i in 0..10_000u64 {
        let key = i % 200;
        a.hold(key, |_| -> tinystore::Result<()> { Ok(()) }).unwrap();
        // A's block is over: B hears it by another path (this thread).
        match b.try_hold(key, |_| -> tinystore::Result<()> { Ok(()) }).unwrap() {
            Some(()) => {}
            None => refused += 1,
        }
    }
    assert_eq!(refused, 0, "B was refused {refused} times a key whose holder's block had returned");
}

#[derive(Debug, Clone, Copy)]
enum Op {
    /// Granted: invoked, granted (block starts), release invoked, release returned.
    Held { invoke: Instant, granted: Instant, release: Instant, released: Instant },
    /// Refused at once.
    Refused { invoke: Instant, returned: Instant },
}

/// Three connected clients pass a token round a ring by a channel (not the
/// store); each, holding the token, tries the key, records its history,
/// lets go, records "released", then signals the next. A fourth client
/// tries the key meanwhile. The history must be linearizable for a lock: no
/// two blocks overlap, and every refusal overlaps a hold that could explain
/// it (never a hold whose "released" was recorded before the refused call).
#[test]
fn lock_01_real_time_history_of_clients_signalling_by_channel() {
    let (_owner, clients, _d) = owner_and_clients(4);
    let rounds = 300;
    let n = 3;
    let (txs, rxs): (Vec<_>, Vec<_>) = (0..n).map(|_| mpsc::channel::<u32>()).unzip();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut threads = Vec::new();
    for (i, rx) in rxs.into_iter().enumerate() {
        let lock = clients[i].lock("ring").open().unwrap();
        let next = txs[(i + 1) % n].clone();
        threads.push(std::thread::spawn(move || {
            let mut ops = Vec::new();
            let mut denied = 0;
            while let Ok(turn) = rx.recv() {
                if turn >= rounds {
                    let _ = next.send(turn);
                    break;
                }
                let invoke = Instant::now();
                let mut granted = None;
                let got = lock
                    .try_hold("k", |_| -> tinystore::Result<Instant> {
                        granted = Some(Instant::now());
                        Ok(Instant::now())
                    })
                    .unwrap();
                let released = Instant::now();
                match (got, granted) {
                    (Some(release), Some(granted)) => ops.push(Op::Held { invoke, granted, release, released }),
                    _ => {
                        denied += 1;
                        ops.push(Op::Refused { invoke, returned: released });
                    }
                }
                // "released" is recorded above; only then the next is told.
                let _ = next.send(turn + 1);
            }
            (ops, denied)
        }));
    }
    let other = clients[3].lock("ring").open().unwrap();
    let s = stop.clone();
    let prober = std::thread::spawn(move || {
        let mut ops = Vec::new();
        while !s.load(std::sync::atomic::Ordering::Acquire) {
            let invoke = Instant::now();
            let mut granted = None;
            let got = other
                .try_hold("k", |_| -> tinystore::Result<Instant> {
                    granted = Some(Instant::now());
                    Ok(Instant::now())
                })
                .unwrap();
            let returned = Instant::now();
            match (got, granted) {
                (Some(release), Some(granted)) => ops.push(Op::Held { invoke, granted, release, released: returned }),
                _ => ops.push(Op::Refused { invoke, returned }),
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        ops
    });
    txs[0].send(0).unwrap();
    let mut history = Vec::new();
    let mut token_refusals = 0;
    for t in threads {
        let (ops, denied) = t.join().unwrap();
        token_refusals += denied;
        history.extend(ops);
    }
    stop.store(true, std::sync::atomic::Ordering::Release);
    history.extend(prober.join().unwrap());
    // A token holder may be refused only while the prober held the key:
    // the check below finds a hold overlapping every refusal.
    let _ = token_refusals;
    check_lock_history(&history);
}

/// A plain real-time check of a lock's history: granted blocks never
/// overlap, and a refusal overlaps (in real time) some hold from its
/// invocation to its release's return, the only holds that could explain it.
fn check_lock_history(history: &[Op]) {
    let mut held: Vec<_> = history.iter().filter_map(|o| if let Op::Held { invoke, granted, release, released } = *o { Some((invoke, granted, release, released)) } else { None }).collect();
    held.sort_by_key(|h| h.1);
    for w in held.windows(2) {
        assert!(w[0].2 <= w[1].1, "two blocks overlapped: one released at {:?}, the next granted at {:?}", w[0].2, w[1].1);
    }
    for o in history {
        if let Op::Refused { invoke, returned } = *o {
            let explained = held.iter().any(|&(hi, _, _, hr)| hi <= returned && invoke <= hr);
            assert!(explained, "a tryHold was refused while no hold could have had the key (from {invoke:?} to {returned:?})");
        }
    }
}

/// A release whose answer a cut connection lost is sent again on the next
/// connection (same lease id and fence): the hold returns Ok once the owner
/// let the key go, well before the lease's 30 s ttl would have freed it.
#[test]
fn lock_01_a_release_cut_off_before_its_answer_is_sent_again_on_reconnect() {
    let (owner, d) = common::store();
    let p = std::sync::Arc::new(common::proxy::Proxy::start(d.path(), &d.path().join("tinystore.sock")));
    let client = Store::connect(&p.address()).unwrap();
    let lock = client.lock("jobs").ttl(Duration::from_secs(30)).open().unwrap();
    let p2 = p.clone();
    let cutter = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        p2.cut();
        p2.resume();
    });
    let started = Instant::now();
    lock.hold("k", |_| -> tinystore::Result<()> {
        // The release leaves into a stalled proxy, then the connection is cut.
        p.stall();
        Ok(())
    })
    .unwrap();
    cutter.join().unwrap();
    assert!(started.elapsed() >= Duration::from_millis(100), "the hold returned before its release was answered");
    let free = owner.lock("jobs").open().unwrap().try_hold("k", |_| -> tinystore::Result<()> { Ok(()) }).unwrap();
    assert_eq!(free, Some(()), "the key was still held after the hold returned");
}

/// The bindings' end of a hold (HeldLease::end_async, which never blocks a
/// host's event loop) resolves only once the owner let the key go: a try
/// from another connection right after it finds the key free every time.
#[test]
fn lock_01_held_lease_end_async_then_try_hold_across_connections() {
    use tinystore::locks::{HeldLease, Holder, Kind, LockHandle, LockOptions};
    let (_owner, clients, _d) = owner_and_clients(2);
    let a = LockHandle::new(&clients[0], "jobs", Kind::Lock, LockOptions::default()).unwrap();
    let b = LockHandle::new(&clients[1], "jobs", Kind::Lock, LockOptions::default()).unwrap();
    let terms = a.options().terms();
    let refused = tinystore::runtime::block_on(async {
        let (a, b) = (a.get().await.unwrap(), b.get().await.unwrap());
        let mut refused = 0;
        for i in 0..2_000u64 {
            let key = tinystore::Key::from(i % 200);
            let raw = a.try_acquire(key.clone(), Holder::unique(), terms).await.unwrap().expect("A gets a free key");
            std::sync::Arc::new(HeldLease::new(raw)).end_async(false).await.unwrap();
            match b.try_acquire(key, Holder::unique(), terms).await.unwrap() {
                Some(raw) => std::sync::Arc::new(HeldLease::new(raw)).end_async(false).await.unwrap(),
                None => refused += 1,
            }
        }
        refused
    });
    assert_eq!(refused, 0, "B was refused {refused} times a key whose hold A had ended");
}
