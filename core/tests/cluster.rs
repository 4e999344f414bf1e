//! Cluster stores (`etcd://`): the lock and fence contracts on a real
//! 3-member etcd cluster started by the harness (tests/etcd), as owned and
//! connected stores keep them on one machine (docs/cluster.md says what is
//! weaker).

mod common;
mod etcd;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use etcd::Cluster;
use tinystore::locks::{Holder, Kind, Terms};
use tinystore::{ConnectOptions, ErrorKind, Fence, Store, runtime};

fn connect(c: &Cluster, prefix: &str) -> Store {
    Store::connect(&c.address(prefix)).expect("connect to the etcd cluster")
}

/// The keys under a prefix, as etcdctl lists them.
fn keys(c: &Cluster, prefix: &str) -> Vec<String> {
    let out = c.etcdctl(&["get", "--prefix", "--keys-only", &format!("/{prefix}/locks/")]);
    String::from_utf8_lossy(&out.stdout).lines().filter(|l| !l.is_empty()).map(str::to_owned).collect()
}

/// LOCK-01 on a cluster: four stores (as four processes would), one key,
/// never two holders at once; fences strictly grow in grant order.
#[test]
fn lock_01_cluster_exclusion_and_fences_in_grant_order() {
    let c = Cluster::shared();
    let inside = Arc::new(AtomicBool::new(false));
    let fences = Arc::new(Mutex::new(Vec::new()));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let (inside, fences, store) = (inside.clone(), fences.clone(), connect(&c, "lock01"));
            std::thread::spawn(move || {
                let lock = store.lock("l").ttl(Duration::from_secs(5)).wait(Duration::from_secs(30)).open().unwrap();
                for _ in 0..25 {
                    lock.hold("k", |lease| -> tinystore::Result<()> {
                        assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                        fences.lock().unwrap().push(lease.fence());
                        inside.store(false, Ordering::SeqCst);
                        Ok(())
                    })
                    .unwrap();
                }
                store.close();
            })
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
    let f = fences.lock().unwrap();
    assert_eq!(f.len(), 100);
    assert!(f.windows(2).all(|w| w[0] < w[1]), "fences grow in grant order");
    assert!(keys(&c, "lock01").is_empty(), "every key let go");
}

/// LOCK-01: when `hold` returns, etcd has let the key go: another store
/// told by another path finds it free, every time.
#[test]
fn lock_01_cluster_a_released_key_is_free_for_another_store_at_once() {
    let c = Cluster::shared();
    let (a, b) = (connect(&c, "lock01free"), connect(&c, "lock01free"));
    let la = a.lock("l").open().unwrap();
    let lb = b.lock("l").open().unwrap();
    for i in 0..100 {
        la.hold("k", |_| -> tinystore::Result<()> { Ok(()) }).unwrap();
        let got = lb.try_hold("k", |_| -> tinystore::Result<()> { Ok(()) }).unwrap();
        assert!(got.is_some(), "refused after a release, round {i}");
    }
}

/// LOCK-01 for semaphores: at most `limit` permits at once, and `limit`
/// are reached.
#[test]
fn lock_01_cluster_semaphore_gives_at_most_limit_permits() {
    let c = Cluster::shared();
    let now = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let (now, most, store) = (now.clone(), most.clone(), connect(&c, "lock01sem"));
            std::thread::spawn(move || {
                let s = store.semaphore("s").limit(2).wait(Duration::from_secs(30)).open().unwrap();
                for _ in 0..8 {
                    s.hold("k", |_| -> tinystore::Result<()> {
                        let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(n, Ordering::SeqCst);
                        std::thread::sleep(Duration::from_millis(20));
                        now.fetch_sub(1, Ordering::SeqCst);
                        Ok(())
                    })
                    .unwrap();
                }
            })
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
    assert_eq!(most.load(Ordering::SeqCst), 2, "never more than the limit, and the limit reached");
}

fn one_fence(store: &Store) -> Fence {
    store.lock("l").open().unwrap().hold("k", |l| -> tinystore::Result<Fence> { Ok(l.fence()) }).unwrap()
}

/// LOCK-02 on a cluster: fences grow across stores, across `cluster
/// bump-epoch`, and across a full restart of every member.
#[test]
fn lock_02_cluster_fences_grow_across_stores_bump_epoch_and_a_full_restart() {
    let mut c = Cluster::start();
    let a = connect(&c, "lock02");
    let f1 = one_fence(&a);
    assert_eq!(f1.epoch(), a.epoch());
    a.close();
    let b = connect(&c, "lock02");
    let f2 = one_fence(&b);
    assert!(f2 > f1);
    assert_eq!(f2.epoch(), f1.epoch(), "the epoch is the cluster's, made once");
    let (old, new) = tinystore::cluster::bump_epoch(&c.address("lock02"), ConnectOptions::new()).unwrap();
    assert_eq!(old, f1.epoch());
    assert!(new > old);
    // Read in the hold's own transaction: an open store sees it at once.
    let f3 = one_fence(&b);
    assert!(f3 > f2 && f3.epoch() == new, "{f3:?} after the bump to {new}");
    b.close();
    for i in 0..3 {
        c.kill(i);
    }
    for i in 0..3 {
        c.restart(i);
    }
    c.wait_healthy(Duration::from_secs(20));
    let d = connect(&c, "lock02");
    let f4 = one_fence(&d);
    assert!(f4 > f3, "fences grow across a full restart");
}

/// LOCK-02 on a cluster restored from a snapshot: the restore takes etcd's
/// revisions back, so a fence after it can be smaller than one given before
/// (asserted, to show the restore went back); after `cluster bump-epoch`
/// every fence is larger than every fence before the restore.
#[test]
fn lock_02_cluster_after_a_snapshot_restore_bump_epoch_makes_fences_larger_than_before() {
    let mut c = Cluster::start();
    let a = connect(&c, "lock02restore");
    let mut before: Vec<Fence> = (0..3).map(|_| one_fence(&a)).collect();
    let snapshot = c.dir.path().join("snapshot.db");
    c.save_snapshot(0, &snapshot);
    before.extend((0..20).map(|_| one_fence(&a)));
    assert!(before.windows(2).all(|w| w[0] < w[1]), "fences grow before the restore");
    a.close();
    let last = *before.last().unwrap();
    c.restore_all(&snapshot);
    let b = connect(&c, "lock02restore");
    let hazard = one_fence(&b);
    assert_eq!(hazard.epoch(), last.epoch(), "the snapshot kept the epoch");
    assert!(hazard < last, "without bump-epoch the restore took fences back: {hazard:?} after {last:?}");
    let (old, new) = tinystore::cluster::bump_epoch(&c.address("lock02restore"), ConnectOptions::new()).unwrap();
    assert_eq!(old, last.epoch());
    assert!(new > old);
    // The store opened before the bump, and one opened after.
    let d = connect(&c, "lock02restore");
    let after: Vec<Fence> = (0..3).map(|_| one_fence(&b)).chain((0..3).map(|_| one_fence(&d))).collect();
    let max_before = before.iter().copied().max().unwrap();
    assert!(after.iter().all(|f| *f > max_before && f.epoch() == new), "{after:?} after the bump, {max_before:?} before the restore");
}

/// LOCK-03 on a cluster: a hold of a held key times out without running;
/// `tryHold` never waits and leaves no key behind.
#[test]
fn lock_03_cluster_timeout_without_running_and_try_hold_leaves_nothing() {
    let c = Cluster::shared();
    let (a, b) = (connect(&c, "lock03"), connect(&c, "lock03"));
    let held = a.lock_raw("l", Kind::Lock).unwrap();
    let lease = runtime::block_on(held.acquire("k".into(), Holder::unique(), Terms { ttl: Some(Duration::from_secs(5)), max_hold: None }, Duration::from_secs(1))).unwrap();
    let lock = b.lock("l").wait(Duration::from_millis(300)).open().unwrap();
    let ran = AtomicBool::new(false);
    let t = Instant::now();
    let e = lock.hold("k", |_| -> tinystore::Result<()> {
        ran.store(true, Ordering::SeqCst);
        Ok(())
    });
    assert_eq!(e.unwrap_err().kind(), ErrorKind::Timeout);
    assert!(!ran.load(Ordering::SeqCst));
    assert!(t.elapsed() < Duration::from_secs(2));
    let t = Instant::now();
    assert!(lock.try_hold("k", |_| -> tinystore::Result<()> { Ok(()) }).unwrap().is_none());
    assert!(t.elapsed() < Duration::from_secs(1), "tryHold never waits");
    assert_eq!(keys(&c, "lock03").len(), 1, "only the holder's key: the timed-out waiter and tryHold left none");
    let s = b.semaphore("s").limit(1).open().unwrap();
    s.hold("k", |_| -> tinystore::Result<()> {
        assert!(b.semaphore("s").limit(1).open().unwrap().try_hold("k", |_| -> tinystore::Result<()> { Ok(()) }).unwrap().is_none());
        Ok(())
    })
    .unwrap();
    drop(lease);
}

/// LOCK-03: waiters get the key in the order they asked (the order etcd
/// committed their keys).
#[test]
fn lock_03_cluster_waiters_get_the_key_in_the_order_they_asked() {
    let c = Cluster::shared();
    let first = connect(&c, "lock03fifo");
    let lock = first.lock("l").open().unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let holder = {
        let lock = lock.clone();
        std::thread::spawn(move || {
            lock.hold("k", |_| -> tinystore::Result<()> {
                go_rx.recv().unwrap();
                Ok(())
            })
            .unwrap()
        })
    };
    assert!(common::eventually(3000, || keys(&c, "lock03fifo").len() == 1));
    let mut waiters = Vec::new();
    for i in 0..4 {
        let (order, store) = (order.clone(), connect(&c, "lock03fifo"));
        waiters.push(std::thread::spawn(move || {
            store.lock("l").wait(Duration::from_secs(20)).open().unwrap().hold("k", |_| -> tinystore::Result<()> {
                order.lock().unwrap().push(i);
                Ok(())
            })
            .unwrap()
        }));
        assert!(common::eventually(3000, || keys(&c, "lock03fifo").len() == i + 2), "waiter {i} in line");
    }
    go_tx.send(()).unwrap();
    holder.join().unwrap();
    waiters.into_iter().for_each(|w| w.join().unwrap());
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3]);
}

/// LOCK-04 on a cluster: a waiter whose task is cancelled deletes its key;
/// the key then goes to the next, not to it.
#[test]
fn lock_04_cluster_cancelled_waiter_leaves_the_line() {
    let c = Cluster::shared();
    let (a, b) = (connect(&c, "lock04"), connect(&c, "lock04"));
    let terms = Terms { ttl: Some(Duration::from_secs(5)), max_hold: None };
    let held = runtime::block_on(a.lock_raw("l", Kind::Lock).unwrap().acquire("k".into(), Holder::unique(), terms, Duration::from_secs(1))).unwrap();
    let raw = b.lock_raw("l", Kind::Lock).unwrap();
    let waiting = raw.acquire("k".into(), Holder::unique(), terms, Duration::from_secs(10));
    let r = runtime::block_on(async { tokio::time::timeout(Duration::from_millis(500), waiting).await });
    assert!(r.is_err(), "still waiting when cancelled");
    assert!(common::eventually(3000, || keys(&c, "lock04").len() == 1), "the cancelled waiter's key is gone");
    drop(held);
    assert!(common::eventually(3000, || keys(&c, "lock04").is_empty()));
    let next = runtime::block_on(raw.try_acquire("k".into(), Holder::unique(), terms)).unwrap();
    assert!(next.is_some(), "the key is free: the cancelled waiter never got it");
}

/// LOCK-04: the function's own error reaches the caller, and the key is
/// free after.
#[test]
fn lock_04_cluster_the_functions_error_comes_back_and_the_key_is_let_go() {
    let c = Cluster::shared();
    let s = connect(&c, "lock04err");
    let lock = s.lock("l").open().unwrap();
    let e = lock.hold("k", |_| -> tinystore::Result<()> { Err(tinystore::Error::new(ErrorKind::Conflict, "mine")) }).unwrap_err();
    assert_eq!(e.message(), "mine");
    assert!(keys(&c, "lock04err").is_empty());
}

/// LOCK-05 on a cluster: renewals stop being answered (two of three
/// members frozen: no quorum). The holder is told by its own deadline,
/// before etcd could give the key to another; once the members are back
/// the key goes to the next holder with a larger fence, and the first
/// hold ends with `lost`.
#[test]
fn lock_05_cluster_renewals_that_stop_lose_the_lease_by_the_holders_own_deadline() {
    let c = Cluster::start();
    let a = connect(&c, "lock05");
    let b = Store::connect_with(&c.address("lock05"), ConnectOptions::new().request_timeout(Duration::from_secs(15))).unwrap();
    let lock = a.lock("l").ttl(Duration::from_secs(1)).open().unwrap();
    let told = Arc::new(Mutex::new(None::<Instant>));
    let (tx, rx) = std::sync::mpsc::channel();
    let t2 = told.clone();
    let holder = std::thread::spawn(move || {
        lock.hold("k", |lease| -> tinystore::Result<Fence> {
            tx.send(()).unwrap();
            while !lease.is_lost() {
                std::thread::sleep(Duration::from_millis(5));
            }
            *t2.lock().unwrap() = Some(Instant::now());
            Ok(lease.fence())
        })
    });
    rx.recv().unwrap();
    let frozen_at = Instant::now();
    c.pause(1, true);
    c.pause(2, true);
    c.pause(0, true);
    assert!(common::eventually(3000, || told.lock().unwrap().is_some()), "told within the ttl and a little");
    let told_at = told.lock().unwrap().unwrap();
    assert!(told_at - frozen_at <= Duration::from_millis(1100), "told by its own deadline: {:?}", told_at - frozen_at);
    for i in 0..3 {
        c.pause(i, false);
    }
    let e = holder.join().unwrap().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Lost, "{e}");
    let other = b.lock("l").wait(Duration::from_secs(15)).open().unwrap();
    let f2 = other.hold("k", |l| -> tinystore::Result<Fence> { Ok(l.fence()) }).unwrap();
    assert!(Instant::now() > told_at);
    assert!(f2.epoch() == a.epoch());
}

/// LOCK-05: holders keep their leases through a kill -9 of etcd's leader
/// when their renewals resume within their ttl; waiters keep their place.
#[test]
fn lock_05_cluster_a_lease_outlives_a_kill_9_of_the_leader() {
    let mut c = Cluster::start();
    let a = connect(&c, "lock05leader");
    let lock = a.lock("l").ttl(Duration::from_secs(4)).open().unwrap();
    let leader = c.leader().expect("a leader");
    let r = lock.hold("k", |lease| -> tinystore::Result<bool> {
        c.kill(leader);
        std::thread::sleep(Duration::from_secs(6));
        Ok(lease.is_lost())
    });
    assert_eq!(r.map_err(|e| e.to_string()), Ok(false), "held across the election");
    c.restart(leader);
}

/// LOCK-06 on a cluster: no lease outlasts maxHold; its key goes to the
/// next at once, not at the ttl.
#[test]
fn lock_06_cluster_max_hold_ends_the_lease_and_lets_the_key_go() {
    let c = Cluster::shared();
    let s = connect(&c, "lock06");
    let lock = s.lock("l").ttl(Duration::from_secs(10)).max_hold(Duration::from_millis(400)).open().unwrap();
    let e = lock
        .hold("k", |lease| -> tinystore::Result<()> {
            std::thread::sleep(Duration::from_millis(900));
            assert!(lease.is_lost());
            Ok(())
        })
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Lost);
    assert!(e.message().contains("maxHold"), "{e}");
    assert!(keys(&c, "lock06").is_empty());
}

/// LOCK-08 on a cluster: a hold in a hold of the same key fails at once;
/// tryHold of it is simply not acquired; another limit is a conflict for
/// every store of the cluster.
#[test]
fn lock_08_cluster_reentry_and_a_semaphores_limit_conflict() {
    let c = Cluster::shared();
    let (a, b) = (connect(&c, "lock08"), connect(&c, "lock08"));
    let lock = a.lock("l").open().unwrap();
    let r = lock.hold("k", |_| -> tinystore::Result<(String, bool)> {
        let t = Instant::now();
        let inner = lock.hold("k", |_| -> tinystore::Result<()> { Ok(()) }).unwrap_err();
        assert!(t.elapsed() < Duration::from_millis(100), "at once");
        let again = lock.try_hold("k", |_| -> tinystore::Result<()> { Ok(()) }).unwrap();
        Ok((inner.code().to_owned(), again.is_none()))
    });
    assert_eq!(r.unwrap(), ("conflict".to_owned(), true));
    a.semaphore("s").limit(2).open().unwrap();
    let e = b.semaphore("s").limit(3).open().err().unwrap();
    assert_eq!(e.code(), "conflict");
    assert!(b.lock("s").open().is_err(), "a semaphore is not a lock");
    b.semaphore("s").limit(2).open().unwrap();
}

/// STORE-02 on a cluster: with two of three members down, a hold fails
/// with `unavailable` within the request timeout, never hangs, and works
/// again once a quorum is back.
#[test]
fn store_02_cluster_without_a_quorum_holds_are_unavailable_then_work_again() {
    let mut c = Cluster::start();
    let s = Store::connect_with(&c.address("store02"), ConnectOptions::new().request_timeout(Duration::from_secs(2))).unwrap();
    let lock = s.lock("l").open().unwrap();
    lock.hold("k", |_| -> tinystore::Result<()> { Ok(()) }).unwrap();
    c.kill(1);
    c.kill(2);
    let t = Instant::now();
    let e = lock.hold("k", |_| -> tinystore::Result<()> { Ok(()) }).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    assert!(t.elapsed() < Duration::from_secs(4), "within the request timeout: {:?}", t.elapsed());
    c.restart(1);
    c.restart(2);
    c.wait_healthy(Duration::from_secs(20));
    let ok = (0..50).any(|_| {
        let r = lock.hold("k", |_| -> tinystore::Result<()> { Ok(()) });
        if r.is_err() {
            std::thread::sleep(Duration::from_millis(200));
        }
        r.is_ok()
    });
    assert!(ok, "holds work again with a quorum");
}

/// A cluster store whose address names no NATS servers has no channels:
/// every channel call fails at once with an error saying where they come
/// from (tests/cluster_channels.rs has them on NATS).
#[test]
fn chan_01_cluster_channel_calls_fail_at_once_saying_they_come_from_nats() {
    let c = Cluster::shared();
    let s = connect(&c, "chan");
    let t = Instant::now();
    let e = runtime::block_on(s.publish_raw("news", &[], b"1".to_vec().into())).unwrap_err();
    assert!(e.message().contains("NATS"), "{e}");
    let e = runtime::block_on(s.subscribe_raw("news", &[], tinystore::channels::Scope::Branch, None)).err().unwrap();
    assert!(e.message().contains("NATS"), "{e}");
    assert!(t.elapsed() < Duration::from_millis(500));
}

/// A malformed cluster address is refused before anything is reached,
/// saying what is wrong and how to write it.
#[test]
fn store_cluster_a_malformed_address_is_a_clear_invalid_error() {
    for a in ["etcd://127.0.0.1:2379", "etcd://127.0.0.1:x/app", "etcd://h1,,h2/app"] {
        let e = Store::connect(a).err().unwrap();
        assert_eq!(e.kind(), ErrorKind::Invalid, "{a}: {e}");
        assert!(e.message().contains("etcd://10.0.0.1:2379"), "{e}");
    }
    let e = Store::connect("etcds://127.0.0.1:1/app").err().unwrap();
    assert!(e.message().contains("CA"), "{e}");
    let e = Store::connect("etcd://127.0.0.1:2379/app?nats=127.0.0.1:4222").err().unwrap();
    assert_eq!(e.kind(), ErrorKind::Invalid, "{e}");
    assert!(e.message().contains("nats://HOST:PORT") && e.message().contains("?nats=nats://10.0.0.1:4222"), "{e}");
}

/// Nobody listens: `unavailable` within the request timeout.
#[test]
fn store_02_cluster_nobody_listening_is_unavailable() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let t = Instant::now();
    let e = Store::connect_with(&format!("etcd://127.0.0.1:{port}/app"), ConnectOptions::new().request_timeout(Duration::from_secs(1))).err().unwrap();
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    assert!(t.elapsed() < Duration::from_secs(3));
}

/// `status` of a cluster store: members and leader; per key its holder
/// with fence and time left, and its waiters.
#[test]
fn store_cluster_status_shows_members_holders_and_waiters() {
    let c = Cluster::shared();
    let (a, b) = (connect(&c, "status"), connect(&c, "status"));
    let terms = Terms { ttl: Some(Duration::from_secs(5)), max_hold: None };
    let held = runtime::block_on(a.lock_raw("l", Kind::Lock).unwrap().acquire("k/1".into(), Holder::unique(), terms, Duration::from_secs(1))).unwrap();
    let raw = b.lock_raw("l", Kind::Lock).unwrap();
    let _waiter = std::thread::spawn(move || runtime::block_on(raw.acquire("k/1".into(), Holder::unique(), terms, Duration::from_secs(3))));
    assert!(common::eventually(3000, || keys(&c, "status").len() == 2));
    let v = a.status_json().unwrap();
    assert_eq!(v["cluster"]["members"].as_array().unwrap().len(), 3);
    assert!(v["cluster"]["leader"].is_string());
    let k = &v["locks"][0];
    assert_eq!(k["lock"], "l");
    assert_eq!(k["key"], "k/1");
    assert_eq!(k["waiters"], 1);
    assert_eq!(k["holders"][0]["fence"].as_str().unwrap(), held.fence().unwrap().to_string());
    assert!(k["holders"][0]["left_ms"].as_u64().unwrap() <= 5000);
    let st = a.status().unwrap();
    assert_eq!(st.locks.len(), 1);
    drop(held);
}

/// STORE-01 on a cluster, as on one machine: closing the store tells its
/// holders their leases are lost, fails its waiters with `closed`, and
/// lets every key of this process go at once (its etcd leases revoked).
#[test]
fn store_01_cluster_close_lets_keys_go_and_tells_holders_and_waiters() {
    let c = Cluster::shared();
    let store = connect(&c, "close");
    let raw = store.lock_raw("l", Kind::Lock).unwrap();
    let held = runtime::block_on(raw.acquire("k".into(), Holder(0), Terms::default(), Duration::from_secs(1))).unwrap();
    let r2 = raw.clone();
    let waiter = std::thread::spawn(move || runtime::block_on(r2.acquire("k".into(), Holder(0), Terms::default(), Duration::from_secs(5))));
    assert!(common::eventually(3000, || keys(&c, "close").len() == 2));
    store.close();
    assert_eq!(waiter.join().unwrap().unwrap_err().code(), "closed");
    assert!(held.is_lost());
    assert!(keys(&c, "close").is_empty(), "the keys went with the revoked leases");
    assert_eq!(store.lock("l").open().err().unwrap().code(), "closed");
}

/// `store.database()` on a cluster store opens SQLite on this machine.
#[test]
fn store_cluster_sql_databases_are_files_on_this_machine() {
    let c = Cluster::shared();
    let d = common::dir();
    let s = Store::connect_with(&c.address("sql"), ConnectOptions::new().sql_dir(d.path())).unwrap();
    let db = s.database("app").open().unwrap();
    db.exec("create table t (x integer)").unwrap();
    assert!(d.path().join("app.db").exists());
}


/// LOCK-05 and FENCE-02 on a cluster, across processes: a holder process
/// frozen (SIGSTOP) past its ttl loses the key to another when etcd lets
/// its lease expire; the other's fence is larger; when the first wakes,
/// its fence-checked write changes no row and its hold ends lost.
#[test]
fn lock_05_fence_02_cluster_frozen_holder_loses_key_and_its_late_write_is_refused() {
    use std::io::BufRead;
    let c = Cluster::shared();
    let d = common::dir();
    let address = c.address("fence02");
    let store = Store::connect_with(&address, ConnectOptions::new().sql_dir(d.path())).unwrap();
    let db = store.database("chat").open().unwrap();
    db.exec("create table chats (id integer primary key, summary text, summary_fence text not null default '')").unwrap();
    db.exec("insert into chats (id) values (7)").unwrap();
    let mut a = etcd::cluster_worker(&["hold", &address, "1000", "7"], d.path());
    let mut out = std::io::BufReader::new(a.stdout.take().unwrap());
    let mut first = String::new();
    out.read_line(&mut first).unwrap();
    let fa: Fence = first.trim().strip_prefix("fence ").unwrap().parse().unwrap();
    assert_eq!(unsafe { libc::kill(a.id() as i32, libc::SIGSTOP) }, 0);
    let lock = store.lock("summaries").ttl(Duration::from_secs(1)).wait(Duration::from_secs(10)).open().unwrap();
    let t = Instant::now();
    let fb = lock
        .hold(7, |lease| -> tinystore::Result<Fence> {
            let fence = lease.fence().padded();
            let done = db.exec(tinystore::sql!("update chats set summary = ?, summary_fence = ? where id = ? and summary_fence < ?", "by B", &fence, 7, &fence))?;
            assert_eq!(done.changes, 1);
            Ok(lease.fence())
        })
        .unwrap();
    assert!(fb > fa);
    assert!(t.elapsed() < Duration::from_secs(4), "etcd let the frozen holder's key go at its lease's ttl: {:?}", t.elapsed());
    assert_eq!(unsafe { libc::kill(a.id() as i32, libc::SIGCONT) }, 0);
    let rest: Vec<String> = out.lines().map(Result::unwrap).collect();
    assert_eq!(rest, vec!["changes 0".to_owned(), "error lost".to_owned()]);
    assert_eq!(a.wait().unwrap().code(), Some(4));
    #[derive(serde::Deserialize)]
    struct S {
        summary: String,
    }
    assert_eq!(db.query::<S>("select summary from chats where id = 7").unwrap()[0].summary, "by B");
}

fn cli(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_tinystore")).args(args).output().unwrap()
}

/// The CLI on a cluster store: `cluster init` makes the epoch once,
/// `cluster bump-epoch` raises it, `lock ADDRESS hold` runs a command
/// under a lease, and `status ADDRESS` shows etcd's members and leader and
/// the held key with its fence, holder and time left, and its waiter.
#[test]
fn lock_02_cluster_the_cli_makes_and_bumps_the_epoch_holds_and_shows_status() {
    let c = Cluster::shared();
    let address = c.address("cli");
    let out = cli(&["cluster", "init", &address]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let first = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(first.starts_with("made epoch "), "{first}");
    let again = String::from_utf8_lossy(&cli(&["cluster", "init", &address]).stdout).to_string();
    assert_eq!(again.replace("already had", "made"), first);
    let bumped = String::from_utf8_lossy(&cli(&["cluster", "bump-epoch", &address]).stdout).to_string();
    assert!(bumped.starts_with(&format!("epoch {} -> ", first.trim().strip_prefix("made epoch ").unwrap())), "{bumped}");
    let mut holder = std::process::Command::new(env!("CARGO_BIN_EXE_tinystore"))
        .args(["lock", &address, "hold", "jobs", "7", "--ttl", "5s", "--", "sh", "-c", "echo $TINYSTORE_FENCE; sleep 3"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(holder.stdout.take().unwrap()), &mut line).unwrap();
    let fence: Fence = line.trim().parse().unwrap();
    let s = connect(&c, "cli");
    let raw = s.lock_raw("jobs", Kind::Lock).unwrap();
    let terms = Terms { ttl: Some(Duration::from_secs(5)), max_hold: None };
    let waiter = std::thread::spawn(move || runtime::block_on(raw.acquire("7".into(), Holder::unique(), terms, Duration::from_secs(10))).map(|l| l.fence()));
    assert!(common::eventually(3000, || keys(&c, "cli").len() == 2));
    let status = String::from_utf8_lossy(&cli(&["status", &address]).stdout).to_string();
    assert!(status.contains("etcd members: 3") && status.contains("(leader)"), "{status}");
    assert!(status.contains("jobs/7") && status.contains(&format!("fence {fence}")) && status.contains("waiting holder"), "{status}");
    assert!(holder.wait().unwrap().success());
    let next = waiter.join().unwrap().unwrap().unwrap();
    assert!(next > fence);
    let e = cli(&["cluster", "init", "etcd://127.0.0.1:2379"]);
    assert_eq!(e.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&e.stderr).contains("no key prefix"));
}

/// etcd's own authentication: with auth enabled, a store connects with
/// the user and password given as connect options (or from the
/// environment); a wrong password is an `auth` error.
#[test]
fn store_cluster_connects_with_etcd_user_and_password() {
    let c = Cluster::start();
    for args in [&["user", "add", "root:rootpw"][..], &["role", "add", "root"], &["user", "grant-role", "root", "root"], &["auth", "enable"]] {
        let out = c.etcdctl(args);
        assert!(out.status.success(), "etcdctl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let s = Store::connect_with(&c.address("auth"), ConnectOptions::new().etcd_user("root", "rootpw")).unwrap();
    let f = one_fence(&s);
    assert_eq!(f.epoch(), s.epoch());
    let e = Store::connect_with(&c.address("auth"), ConnectOptions::new().etcd_user("root", "wrong")).err().unwrap();
    assert_eq!(e.kind(), ErrorKind::Auth, "{e}");
    let e = Store::connect(&c.address("auth")).err().unwrap();
    assert_eq!(e.kind(), ErrorKind::Auth, "without a user: {e}");
}

/// A user without its password, or a client certificate without its key
/// (bindings take them as separate arguments), is `invalid` before any
/// member is asked, naming the missing one.
#[test]
fn store_cluster_connect_with_half_a_user_or_identity_is_invalid() {
    let address = "etcd://127.0.0.1:1/half";
    let e = Store::connect_with(address, ConnectOptions::new().etcd_user_parts(Some("root".into()), None)).err().unwrap();
    assert_eq!(e.kind(), ErrorKind::Invalid, "{e}");
    assert!(e.to_string().contains("without the etcd password"), "{e}");
    let e = Store::connect_with(address, ConnectOptions::new().etcd_identity_parts(None, Some("key.pem".into()))).err().unwrap();
    assert_eq!(e.kind(), ErrorKind::Invalid, "{e}");
    assert!(e.to_string().contains("etcd client key was given without the etcd client certificate"), "{e}");
}

/// TLS to etcd (`etcds://`): members serving their clients TLS only, with
/// client certificates required. With the CA and this process's
/// certificate as connect options, holds work and fences grow; with a CA
/// that did not sign the members' certificate, connecting fails at once
/// with an `auth` error saying what to fix, not after the request timeout;
/// without a client certificate, the error names it.
#[test]
fn store_cluster_tls_with_the_ca_and_a_client_certificate_holds_and_a_wrong_ca_is_a_clear_error() {
    let c = Cluster::start_tls();
    let p = c.tls.as_ref().unwrap();
    let address = c.address("tls");
    assert!(address.starts_with("etcds://"));
    let s = Store::connect_with(&address, ConnectOptions::new().ca_file(&p.ca).etcd_identity(&p.client_cert, &p.client_key)).unwrap();
    let lock = s.lock("l").ttl(Duration::from_secs(2)).open().unwrap();
    let f1 = lock.hold("k", |l| -> tinystore::Result<Fence> { Ok(l.fence()) }).unwrap();
    let f2 = lock.hold("k", |l| -> tinystore::Result<Fence> { Ok(l.fence()) }).unwrap();
    assert!(f2 > f1);
    assert_eq!(f1.epoch(), s.epoch());
    assert_eq!(keys(&c, "tls"), Vec::<String>::new(), "etcdctl over TLS sees the prefix, every key let go");

    let t = Instant::now();
    let e = Store::connect_with(&address, ConnectOptions::new().ca_file(&p.other_ca).etcd_identity(&p.client_cert, &p.client_key)).err().unwrap();
    assert_eq!(e.kind(), ErrorKind::Auth, "{e}");
    assert!(e.message().contains("CA") && e.message().contains("certificate"), "{e}");
    assert!(t.elapsed() < Duration::from_secs(5), "at once, not after the request timeout: {:?}", t.elapsed());

    // The member closes the connection after the handshake, without an
    // alert: the error names the missing client certificate as the likely cause.
    let e = Store::connect_with(&address, ConnectOptions::new().ca_file(&p.ca).request_timeout(Duration::from_secs(2))).err().unwrap();
    assert!(matches!(e.kind(), ErrorKind::Auth | ErrorKind::Unavailable), "without a client certificate: {e}");
    assert!(e.message().contains("client certificate"), "{e}");
}

/// LOCK-02 across a migration from one machine: `tinystore cluster init
/// ADDRESS --from DIR` raises the cluster's epoch above the last epoch of
/// the store in DIR (here one whose clock ran 10 days ahead, so the
/// cluster's clock alone would not do), so every fence the cluster gives
/// is larger than every fence given on one machine. It refuses while a
/// process owns DIR, and a directory without a store, saying what to do;
/// run again, it keeps the epoch.
#[test]
fn lock_02_cluster_init_from_a_one_machine_store_makes_fences_larger_than_all_of_its() {
    let c = Cluster::shared();
    let address = c.address("migrate");
    let d = common::dir();
    let ahead = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64 + 10 * 86_400_000;
    let local = Store::open_with(d.path(), tinystore::OpenOptions::new().clock_ms(ahead)).unwrap();
    let local_fence = one_fence(&local);
    let before = connect(&c, "migrate");
    assert!(before.epoch() < local.epoch(), "the cluster's epoch alone is smaller");
    before.close();

    let dir = d.path().to_str().unwrap();
    let owned = cli(&["cluster", "init", &address, "--from", dir]);
    assert!(!owned.status.success());
    assert!(String::from_utf8_lossy(&owned.stderr).contains("owned by another process"), "{}", String::from_utf8_lossy(&owned.stderr));
    local.close();

    let out = cli(&["cluster", "init", &address, "--from", dir]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(said.starts_with("raised epoch ") && said.contains(&format!("last epoch {}", local_fence.epoch())), "{said}");
    let s = connect(&c, "migrate");
    let f = one_fence(&s);
    assert!(f > local_fence, "{f} > {local_fence}");
    assert!(s.epoch() > local_fence.epoch());

    let again = tinystore::cluster::init_from(&address, d.path(), ConnectOptions::new()).unwrap();
    assert_eq!((again.before, again.epoch, again.local_epoch), (Some(s.epoch()), s.epoch(), local_fence.epoch()), "kept");
    let fresh = tinystore::cluster::init_from(&c.address("migrate-new"), d.path(), ConnectOptions::new()).unwrap();
    assert!(fresh.before.is_none() && fresh.epoch > local_fence.epoch(), "{fresh:?}");

    let empty = common::dir();
    let e = tinystore::cluster::init_from(&address, empty.path(), ConnectOptions::new()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Invalid, "{e}");
    assert!(e.message().contains("no kv.db"), "{e}");
}

/// STORE-01: an app that opens a directory runs unchanged on a cluster
/// store when given its address: `open(address)` connects to the cluster
/// (a lock held through one is seen held through the other), and an
/// exclusive open of a cluster address says why it cannot be.
#[test]
fn store_01_cluster_open_of_a_cluster_address_connects_to_the_cluster_store() {
    let c = Cluster::shared();
    let opened = Store::open(c.address("open01")).expect("open of an etcd:// address");
    assert!(!std::path::Path::new("etcd:").exists(), "no directory made for the address");
    let other = connect(&c, "open01");
    let lock = opened.lock("l").ttl(Duration::from_secs(5)).open().unwrap();
    let other_lock = other.lock("l").open().unwrap();
    lock.hold("k", |_| -> tinystore::Result<()> {
        assert!(other_lock.try_hold("k", |_| -> tinystore::Result<()> { Ok(()) })?.is_none(), "held through open, free through connect");
        Ok(())
    })
    .unwrap();
    let e = Store::open_with(c.address("open01"), tinystore::OpenOptions::default().exclusive()).err().expect("an exclusive open of a cluster store");
    assert_eq!(e.kind(), ErrorKind::Invalid);
    assert!(e.message().contains("cluster store"), "{}", e.message());
}
