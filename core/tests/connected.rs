//! The contracts over a connection (a store owned by another handle, reached
//! through its socket, often through a fault-injecting proxy), and the
//! scenarios that cross the wire.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::proxy::Proxy;
use tinystore::channels::{Event, Scope};
use tinystore::locks::{Holder, Kind, Terms};
use tinystore::{Delivery, Fence, Key, Missed, MissedReason, Store, runtime};

fn owner_and_client() -> (Store, Store, tempfile::TempDir) {
    let (owner, d) = common::store();
    let client = Store::connect(&format!("unix:{}", d.path().join("tinystore.sock").display())).unwrap();
    (owner, client, d)
}

fn through_proxy() -> (Store, Store, Proxy, tempfile::TempDir) {
    let (owner, d) = common::store();
    let p = Proxy::start(d.path(), &d.path().join("tinystore.sock"));
    let client = Store::connect(&p.address()).unwrap();
    (owner, client, p, d)
}

fn next_value(it: &mut tinystore::Messages<u64>, ms: u64) -> Option<Result<u64, Missed>> {
    match it.next_timeout(Duration::from_millis(ms)).unwrap() {
        Some(Delivery::Message(m)) => Some(Ok(m.value)),
        Some(Delivery::Missed(m)) => Some(Err(m)),
        None => None,
    }
}

#[test]
fn chan_01_connected_order_from_both_sides_and_p2_pipelined_publishes() {
    let (owner, client, _d) = owner_and_client();
    let events = client.channel::<u64>("c").open().unwrap();
    let mut it = events.under(1).messages().unwrap();
    // Pipelined: many publishes in flight at once from one connection.
    let branch = [Key::from(1)];
    let futs: Vec<_> = (0..500u64).map(|i| client.publish_raw("c", &branch, i.to_string().into_bytes().into_boxed_slice())).collect();
    runtime::block_on(async {
        for f in futs {
            f.await.unwrap();
        }
    });
    let mut got = Vec::new();
    while let Some(Ok(v)) = next_value(&mut it, 500) {
        got.push(v);
    }
    assert_eq!(got, (0..500).collect::<Vec<_>>());
    owner.channel::<u64>("c").open().unwrap().under(1).publish(&7).unwrap();
    assert_eq!(next_value(&mut it, 2000), Some(Ok(7)));
}

/// A thread in `runtime::block_on` holds its publishes back until its future
/// yields or returns, so a burst leaves in one write: a publish whose answer
/// is never awaited still leaves when the future waits on something else
/// (a sleep), and when it returns.
#[test]
fn chan_01_connected_publishes_held_by_a_blocked_thread_leave_when_it_yields_or_returns() {
    let (owner, client, _d) = owner_and_client();
    let events = owner.channel::<u64>("held").open().unwrap();
    let mut it = events.under(1).messages().unwrap();
    let waiting = Arc::new(AtomicBool::new(true));
    let w = waiting.clone();
    let c = client.clone();
    let sleeper = std::thread::spawn(move || {
        runtime::block_on(async {
            let _unawaited = c.publish_raw("held", &[Key::from(1)], b"1".to_vec().into_boxed_slice());
            tokio::time::sleep(Duration::from_secs(3)).await;
        });
        w.store(false, Ordering::Release);
    });
    assert_eq!(next_value(&mut it, 2000), Some(Ok(1)), "a publish held by a thread left only after its future ended");
    assert!(waiting.load(Ordering::Acquire), "the future slept for 3 s, and its publish came before");
    runtime::block_on(async {
        drop(client.publish_raw("held", &[Key::from(1)], b"2".to_vec().into_boxed_slice()));
    });
    assert_eq!(next_value(&mut it, 2000), Some(Ok(2)), "a publish made in a future that returned never left");
    sleeper.join().unwrap();
}

/// A frozen owner (it accepts, never answers) fails a connect within the
/// request timeout set for it, saying what may be wrong and what to do;
/// the hello's wait was 5 s whatever the setting.
#[test]
fn store_02_connect_to_an_owner_that_never_answers_fails_within_the_request_timeout() {
    let d = tempfile::tempdir().unwrap();
    let sock = d.path().join("tinystore.sock");
    let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let held = std::thread::spawn(move || {
        let mut conns = Vec::new();
        while let Ok((c, _)) = listener.accept() {
            conns.push(c);
            if conns.len() >= 8 {
                break;
            }
        }
        std::thread::sleep(Duration::from_secs(3));
    });
    let start = Instant::now();
    let opts = tinystore::ConnectOptions::default().request_timeout(Duration::from_secs(1));
    let e = Store::connect_with(&format!("unix:{}", sock.display()), opts).err().expect("an owner that never answers");
    let took = start.elapsed();
    assert!(took < Duration::from_millis(2500), "connect took {took:?} with a request timeout of 1 s");
    assert!(e.message().contains("did not answer hello within 1s") && e.message().contains("frozen"), "{}", e.message());
    drop(held);
}

/// Many threads each blocked on its own publish over one connection (a Go
/// program's goroutines): past a few in flight the client holds frames back
/// for the reader of answers to send; a thread that read its own answer and
/// left must send them, or they wait for the request timeout (found by the
/// Go binding's 64-in-flight benchmark: a few publishes at a burst's end
/// timed out and were never delivered).
#[test]
fn chan_01_connected_publishes_blocked_on_from_64_threads_are_all_answered_and_delivered() {
    let (_owner, d) = common::store();
    let address = format!("unix:{}", d.path().join("tinystore.sock").display());
    let opts = || tinystore::ConnectOptions::new().request_timeout(Duration::from_secs(2));
    let client = Store::connect_with(&address, opts()).unwrap();
    let reader = Store::connect_with(&address, opts()).unwrap();
    const THREADS: u64 = 64;
    const EACH: u64 = 300;
    for round in 0..8u64 {
        let events = client.channel::<u64>("c").open().unwrap();
        // Delivered or told missed (a reader far behind): each one accounted for.
        let seen = Arc::new(AtomicU64::new(0));
        let (s1, s2) = (seen.clone(), seen.clone());
        let _sub = reader
            .channel::<u64>("c")
            .open()
            .unwrap()
            .under(round)
            .on_missed(move |m| {
                s1.fetch_add(m.count.unwrap_or(0), Ordering::Relaxed);
            })
            .subscribe(move |_| {
                s2.fetch_add(1, Ordering::Relaxed);
            })
            .unwrap();
        let threads: Vec<_> = (0..THREADS)
            .map(|t| {
                let events = events.clone();
                std::thread::spawn(move || {
                    for i in 0..EACH {
                        events.under(round).publish(&(t * EACH + i)).unwrap_or_else(|e| panic!("round {round}: publish {i} of thread {t}: {e}"));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let end = Instant::now() + Duration::from_secs(10);
        while seen.load(Ordering::Relaxed) < THREADS * EACH && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(seen.load(Ordering::Relaxed), THREADS * EACH, "round {round}: messages delivered or told missed");
    }
}

/// C4: subscribe returns in one handle, the other publishes at once: delivered.
#[test]
fn c4_subscribe_then_publish_at_once_is_delivered() {
    let (owner, client, _d) = owner_and_client();
    let events = owner.channel::<u64>("c").open().unwrap();
    for i in 0..300u64 {
        let sub = runtime::block_on(client.subscribe_raw("c", &[Key::from(i)], Scope::Branch, None)).unwrap();
        events.under(i).publish(&i).unwrap();
        let got = runtime::block_on(async { tokio::time::timeout(Duration::from_secs(2), sub.next()).await });
        assert!(matches!(got, Ok(Some(Event::Message(_)))), "message {i} lost");
    }
}

/// CHAN-02 and C1 over a connection: a blocked handler, 1,024 + N
/// published: exactly one miss of N, then the next message.
#[test]
fn chan_02_c1_connected_blocked_handler_told_exact_count() {
    let (owner, client, _d) = owner_and_client();
    let events = client.channel::<u64>("c").open().unwrap();
    let (gate_tx, gate_rx) = std::sync::mpsc::channel::<()>();
    let gate_rx = Mutex::new(gate_rx);
    let log = Arc::new(Mutex::new(Vec::<String>::new()));
    let (l1, l2) = (log.clone(), log.clone());
    let sub = events
        .under(1)
        .on_missed(move |m| l1.lock().unwrap().push(format!("missed {:?} {}", m.count, m.reason.as_str())))
        .subscribe(move |m| {
            l2.lock().unwrap().push(format!("msg {}", m.value));
            if m.value == 0 {
                gate_rx.lock().unwrap().recv().unwrap();
            }
        })
        .unwrap();
    let pub_events = owner.channel::<u64>("c").open().unwrap();
    pub_events.under(1).publish(&0).unwrap();
    assert!(common::eventually(2000, || log.lock().unwrap().len() == 1));
    let n = 21u64;
    for i in 1..=(1024 + n) {
        pub_events.under(1).publish(&i).unwrap();
    }
    std::thread::sleep(Duration::from_millis(300));
    gate_tx.send(()).unwrap();
    assert!(common::eventually(5000, || log.lock().unwrap().len() == 2 + 1024));
    let log = log.lock().unwrap();
    assert_eq!(log[1], format!("missed Some({n}) behind"));
    assert_eq!(log[2], format!("msg {}", n + 1));
    assert_eq!(log.iter().filter(|l| l.starts_with("missed")).count(), 1);
    drop(log);
    sub.stop();
}

/// C6 and CHAN-04: the connection is cut; the SDK resubscribes by itself,
/// says nothing when nothing was lost, and a probe published after arrives.
#[test]
fn chan_04_c6_forced_disconnect_resubscribes_silently_when_nothing_lost() {
    let (owner, client, p, _d) = through_proxy();
    let mut it = client.channel::<u64>("c").open().unwrap().under(1).messages().unwrap();
    let events = owner.channel::<u64>("c").open().unwrap();
    events.under(1).publish(&1).unwrap();
    assert_eq!(next_value(&mut it, 2000), Some(Ok(1)));
    p.cut();
    std::thread::sleep(Duration::from_millis(300));
    events.under(1).publish(&2).unwrap();
    assert_eq!(next_value(&mut it, 3000), Some(Ok(2)), "no onMissed: the probe arrives and nothing is said");
}

/// C8: five messages published elsewhere during an outage: never silent.
/// With another subscriber keeping the branch's log, all five arrive; with
/// none, the client is told exactly five were missed, reason reconnect.
#[test]
fn chan_04_c8_publish_during_outage_is_never_silent() {
    for kept in [true, false] {
        let (owner, client, p, _d) = through_proxy();
        let events = owner.channel::<u64>("c").open().unwrap();
        let _keeper = kept.then(|| events.under(1).messages().unwrap());
        let mut it = client.channel::<u64>("c").open().unwrap().under(1).messages().unwrap();
        events.under(1).publish(&0).unwrap();
        assert_eq!(next_value(&mut it, 2000), Some(Ok(0)));
        p.stall();
        p.cut();
        // The owner has noticed the cut (only the keeper remains subscribed).
        assert!(common::eventually(3000, || owner.status().unwrap().subscriptions == kept as usize));
        for i in 1..=5 {
            events.under(1).publish(&i).unwrap();
        }
        p.resume();
        if kept {
            for i in 1..=5 {
                assert_eq!(next_value(&mut it, 3000), Some(Ok(i)), "resumed from the log");
            }
        } else {
            assert_eq!(next_value(&mut it, 3000), Some(Err(Missed { count: Some(5), reason: MissedReason::Reconnect })));
        }
        events.under(1).publish(&6).unwrap();
        assert_eq!(next_value(&mut it, 3000), Some(Ok(6)));
    }
}

/// C18: a reconnect during a publish burst: per-branch sequence strictly
/// increasing, no duplicates.
#[test]
fn c18_no_duplicates_or_reordering_across_reconnect() {
    let (owner, client, p, _d) = through_proxy();
    let sub = runtime::block_on(client.subscribe_raw("c", &[Key::from(1)], Scope::Branch, None)).unwrap();
    let events = owner.channel::<u64>("c").open().unwrap();
    let keep = events.under(1).messages().unwrap();
    let go = Arc::new(AtomicBool::new(true));
    let (g, e) = (go.clone(), events.clone());
    let publisher = std::thread::spawn(move || {
        let mut i = 0u64;
        while g.load(Ordering::SeqCst) {
            e.under(1).publish(&i).unwrap();
            i += 1;
            if i.is_multiple_of(50) {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    });
    std::thread::sleep(Duration::from_millis(100));
    p.cut();
    std::thread::sleep(Duration::from_millis(300));
    go.store(false, Ordering::SeqCst);
    publisher.join().unwrap();
    let mut last = 0u64;
    let mut n = 0;
    runtime::block_on(async {
        while let Ok(Some(ev)) = tokio::time::timeout(Duration::from_millis(500), sub.next()).await {
            if let Event::Message(m) = ev {
                assert!(m.seq > last, "seq {} after {last}", m.seq);
                last = m.seq;
                n += 1;
            }
        }
    });
    assert!(n > 100);
    drop(keep);
}

/// CHAN-04: the store restarts (a new owner, a new epoch): the subscriber is
/// told it missed an unknown number, reason reconnect, and goes on.
#[test]
fn chan_04_store_restart_says_unknown_count_then_goes_on() {
    let d = common::dir();
    let owner = Store::open(d.path()).unwrap();
    let client = Store::connect(&format!("unix:{}", d.path().join("tinystore.sock").display())).unwrap();
    let mut it = client.channel::<u64>("c").open().unwrap().under(1).messages().unwrap();
    owner.close();
    let owner2 = Store::open_with(d.path(), tinystore::OpenOptions::new().exclusive()).unwrap();
    assert_eq!(next_value(&mut it, 5000), Some(Err(Missed { count: None, reason: MissedReason::Reconnect })));
    // The resubscription is in place once the miss is told; publish after.
    let events = owner2.channel::<u64>("c").open().unwrap();
    assert!(common::eventually(3000, || owner2.status().unwrap().subscriptions == 1));
    events.under(1).publish(&9).unwrap();
    assert_eq!(next_value(&mut it, 3000), Some(Ok(9)));
}

/// LOCK-01 over connections: many connected holders, one key, no overlap.
#[test]
fn lock_01_connected_exclusion_and_fences_in_grant_order() {
    let (owner, _client, d) = owner_and_client();
    let clients: Vec<Store> = (0..4).map(|_| Store::connect(&format!("unix:{}", d.path().join("tinystore.sock").display())).unwrap()).collect();
    let inside = Arc::new(AtomicBool::new(false));
    let fences = Arc::new(Mutex::new(Vec::new()));
    let threads: Vec<_> = clients
        .into_iter()
        .map(|c| {
            let (inside, fences) = (inside.clone(), fences.clone());
            std::thread::spawn(move || {
                let lock = c.lock("l").ttl(Duration::from_secs(5)).wait(Duration::from_secs(30)).open().unwrap();
                for _ in 0..100 {
                    lock.hold("k", |lease| -> tinystore::Result<()> {
                        assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                        fences.lock().unwrap().push(lease.fence());
                        inside.store(false, Ordering::SeqCst);
                        Ok(())
                    })
                    .unwrap();
                }
            })
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
    let f = fences.lock().unwrap();
    assert_eq!(f.len(), 400);
    assert!(f.windows(2).all(|w| w[0] < w[1]));
    assert!(f.iter().all(|x| x.epoch() == owner.epoch()));
}

/// LOCK-05, L4 and L13: renewals stop reaching the store (the connection is
/// stalled past the ttl). The holder is told by its own deadline, before the
/// store can give the key to another; the hold ends with a lost error; the
/// other holder's fence is larger; a late renewal never revives the lease.
#[test]
fn lock_05_l4_l13_renewals_that_stop_lose_the_lease_by_the_holders_own_deadline() {
    let (owner, client, p, _d) = through_proxy();
    let lock = client.lock("l").ttl(Duration::from_secs(1)).open().unwrap();
    let other = owner.lock_raw("l", Kind::Lock).unwrap();
    let told_at = Arc::new(Mutex::new(None::<Instant>));
    let t2 = told_at.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    let holder = std::thread::spawn(move || {
        lock.hold("k", |lease| -> tinystore::Result<Fence> {
            let t = t2.clone();
            lease.raw().on_lost(move || *t.lock().unwrap() = Some(Instant::now()));
            tx.send(lease.fence()).unwrap();
            std::thread::sleep(Duration::from_millis(2500));
            Ok(lease.fence())
        })
    });
    let fa = rx.recv().unwrap();
    p.stall();
    // The store's side: grant to another as soon as it can.
    let started = Instant::now();
    let b = runtime::block_on(other.acquire("k".into(), Holder(0), Terms { ttl: Some(Duration::from_secs(1)), max_hold: None }, Duration::from_secs(5))).unwrap();
    let granted_at = Instant::now();
    assert!(b.fence().unwrap() > fa);
    assert!(granted_at - started < Duration::from_millis(1500), "the store let the lease run out within its ttl");
    let told = told_at.lock().unwrap().expect("the holder was told its lease was lost");
    assert!(told <= granted_at, "told {told:?} after the grant {granted_at:?}");
    p.resume();
    let e = holder.join().unwrap().unwrap_err();
    assert_eq!(e.code(), "lost");
    drop(b);
}

/// L11 and L12: one renewal in three dropped, or the store stalled for half
/// the ttl: the lease survives and keeps its fence.
#[test]
fn l11_l12_one_failed_renewal_or_a_short_stall_is_not_fatal() {
    let (_owner, client, p, _d) = through_proxy();
    let lock = client.lock("l").ttl(Duration::from_secs(1)).open().unwrap();
    p.drop_renewals(3);
    let r = lock.hold("k", |lease| -> tinystore::Result<bool> {
        std::thread::sleep(Duration::from_millis(1800));
        p.stall();
        std::thread::sleep(Duration::from_millis(450));
        p.resume();
        std::thread::sleep(Duration::from_millis(700));
        Ok(lease.is_lost())
    });
    assert!(!r.unwrap(), "the lease was never lost while held");
    assert!(p.renewals_seen() >= 5, "renewed every third of the ttl: {}", p.renewals_seen());
}

/// L2: ttl 1 s; B waits 3 s behind A; B's ttl starts when granted, and
/// renewals keep it.
#[test]
fn l2_ttl_starts_at_grant() {
    let (owner, client, _d) = owner_and_client();
    let a = owner.lock("l").open().unwrap();
    let lock = client.lock("l").ttl(Duration::from_secs(1)).wait(Duration::from_secs(10)).open().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let holder = std::thread::spawn(move || {
        a.hold("k", |_| -> tinystore::Result<()> {
            tx.send(()).unwrap();
            std::thread::sleep(Duration::from_millis(3000));
            Ok(())
        })
    });
    rx.recv().unwrap();
    let r = lock.hold("k", |lease| -> tinystore::Result<bool> {
        std::thread::sleep(Duration::from_millis(1500));
        Ok(lease.is_lost())
    });
    assert!(!r.unwrap(), "the lease was never lost while held");
    holder.join().unwrap().unwrap();
}

/// L15 and L17: the release is lost with the connection; the key is free
/// again within the ttl and the same client can hold it again. Two holders
/// on one connection: releasing one does not free the other.
#[test]
fn l15_l17_lost_release_frees_within_ttl_and_holders_on_one_connection_are_separate() {
    let (owner, client, p, _d) = through_proxy();
    let raw = client.lock_raw("l", Kind::Lock).unwrap();
    let terms = Terms { ttl: Some(Duration::from_secs(1)), max_hold: None };
    let a = runtime::block_on(raw.acquire("a".into(), Holder::unique(), terms, Duration::from_secs(1))).unwrap();
    let b = runtime::block_on(raw.acquire("b".into(), Holder::unique(), terms, Duration::from_secs(1))).unwrap();
    a.release().unwrap();
    let probe = owner.lock_raw("l", Kind::Lock).unwrap();
    assert!(common::eventually(1000, || probe.acquire_now(&"a".into(), Holder(0), Terms::default()).unwrap().is_some()));
    assert!(probe.acquire_now(&"b".into(), Holder(0), Terms::default()).unwrap().is_none(), "b is still held");
    // The release of b is lost with the connection.
    p.stall();
    drop(b);
    p.cut();
    p.resume();
    let t = Instant::now();
    assert!(common::eventually(3000, || probe.acquire_now(&"b".into(), Holder(0), Terms::default()).unwrap().is_some()));
    assert!(t.elapsed() < Duration::from_millis(1500));
    let again = runtime::block_on(raw.acquire("b".into(), Holder::unique(), terms, Duration::from_secs(3))).unwrap();
    assert!(!again.is_lost());
}

/// LOCK-06 over a connection: maxHold ends the lease and tells the holder.
#[test]
fn lock_06_connected_max_hold() {
    let (_owner, client, _d) = owner_and_client();
    let lock = client.lock("l").ttl(Duration::from_secs(5)).max_hold(Duration::from_millis(300)).open().unwrap();
    let e = lock
        .hold("k", |lease| -> tinystore::Result<()> {
            std::thread::sleep(Duration::from_millis(700));
            assert!(lease.is_lost());
            Ok(())
        })
        .unwrap_err();
    assert_eq!(e.code(), "lost");
    // As the owning process says it: the lock, and the maxHold it reached.
    assert!(e.message().contains("key k of \"l\"") && e.message().contains("maxHold of 300ms"), "{e}");
}

/// LOCK-03 and LOCK-08 over a connection: timeout without running; hold in
/// a hold of the same key fails at once; a semaphore's limit conflict.
#[test]
fn lock_03_lock_08_connected_timeout_and_reentry() {
    let (owner, client, _d) = owner_and_client();
    let lock = client.lock("l").wait(Duration::from_millis(300)).open().unwrap();
    let r = lock.hold("k", |_| -> tinystore::Result<String> {
        let inner = lock.hold("k", |_| -> tinystore::Result<()> { Ok(()) }).unwrap_err();
        Ok(inner.code().to_owned())
    });
    assert_eq!(r.unwrap(), "conflict");
    let owner_lock = owner.lock_raw("l", Kind::Lock).unwrap();
    let mut held = None;
    // The client's release travels without waiting for its answer.
    assert!(common::eventually(1000, || {
        held = owner_lock.acquire_now(&"k".into(), Holder(0), Terms::default()).unwrap();
        held.is_some()
    }));
    let ran = AtomicBool::new(false);
    let e = lock.hold("k", |_| -> tinystore::Result<()> {
        ran.store(true, Ordering::SeqCst);
        Ok(())
    });
    assert_eq!(e.unwrap_err().code(), "timeout");
    assert!(!ran.load(Ordering::SeqCst));
    drop(held);
    owner.semaphore("s").limit(2).open().unwrap();
    let e = client.semaphore("s").limit(3).open().err().unwrap();
    assert_eq!(e.code(), "conflict", "refused when the handle is made");
    client.semaphore("s").limit(2).open().unwrap();
}

/// L7 over one connection: 1,000 concurrent holds, counted exactly, fences
/// strictly increasing in grant order.
#[test]
fn l7_connected_thousand_holds_on_one_connection() {
    let (_owner, client, _d) = owner_and_client();
    let raw = client.lock_raw("l7", Kind::Lock).unwrap();
    let counter = Arc::new(AtomicU64::new(0));
    let fences = Arc::new(Mutex::new(Vec::new()));
    let terms = Terms { ttl: Some(Duration::from_secs(10)), max_hold: None };
    let tasks: Vec<_> = (0..1000)
        .map(|_| {
            let (raw, counter, fences) = (raw.clone(), counter.clone(), fences.clone());
            runtime::spawn(async move {
                let l = raw.acquire("k".into(), Holder::unique(), terms, Duration::from_secs(60)).await.unwrap();
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

/// CHAN-03 over a connection: a transaction's messages are published at commit.
#[test]
fn chan_03_connected_transaction_publishes_at_commit() {
    let (owner, client, _d) = owner_and_client();
    let mut it = owner.channel::<u64>("c").open().unwrap().under(1).messages().unwrap();
    let db = client.database("d").open().unwrap();
    db.exec("create table t (v integer)").unwrap();
    let events = client.channel::<u64>("c").open().unwrap();
    db.tx(|tx| -> tinystore::Result<()> {
        tx.exec(tinystore::sql!("insert into t values (?)", 1))?;
        tx.with(&events).under(1).publish(&1)
    })
    .unwrap();
    let tx = db.begin().unwrap();
    tx.with(&events).under(1).publish(&2).unwrap();
    tx.rollback().unwrap();
    assert_eq!(next_value(&mut it, 2000), Some(Ok(1)));
    assert_eq!(next_value(&mut it, 300), None);
}

/// STORE-02: a publish while disconnected waits for the connection up to
/// the request timeout, then fails with `unavailable` (not `closed`: the
/// program did not close the store), and nothing was published.
#[test]
fn store_02_publish_while_disconnected_waits_then_is_unavailable() {
    let (owner, d) = common::store();
    let p = Proxy::start(d.path(), &d.path().join("tinystore.sock"));
    let client = Store::connect_with(&p.address(), tinystore::ConnectOptions::new().request_timeout(Duration::from_millis(400))).unwrap();
    let events = client.channel::<u64>("c").open().unwrap();
    events.under(1).publish(&1).unwrap();
    owner.close();
    p.cut();
    let t = Instant::now();
    let e = events.under(1).publish(&2).unwrap_err();
    assert_eq!(e.code(), "unavailable", "{e}");
    assert!(!e.message().contains("may have been delivered"), "never sent: {e}");
    assert!(t.elapsed() >= Duration::from_millis(300) && t.elapsed() < Duration::from_millis(1500), "{:?}", t.elapsed());
}

/// STORE-01: the owner goes away; a store opened with `open(dir)` takes over
/// and goes on: fences keep growing, subscriptions are told `reconnect`.
#[test]
fn store_01_a_connected_open_takes_over_when_the_owner_goes_away() {
    let d = common::dir();
    let a = Store::open(d.path()).unwrap();
    let b = Store::open(d.path()).unwrap();
    assert!(!b.is_owner());
    let fa = a.lock("l").open().unwrap().hold("k", |l| -> tinystore::Result<Fence> { Ok(l.fence()) }).unwrap();
    let mut it = b.channel::<u64>("c").open().unwrap().under(1).messages().unwrap();
    a.close();
    assert_eq!(next_value(&mut it, 5000), Some(Err(Missed { count: None, reason: MissedReason::Reconnect })));
    let fb = b.lock("l").open().unwrap().hold("k", |l| -> tinystore::Result<Fence> { Ok(l.fence()) }).unwrap();
    assert!(fb > fa, "{fb} after {fa}");
    b.channel::<u64>("c").open().unwrap().under(1).publish(&5).unwrap();
    assert_eq!(next_value(&mut it, 3000), Some(Ok(5)));
    // And a third process-like handle opens and connects to the new owner.
    let c = Store::open(d.path()).unwrap();
    assert!(!c.is_owner());
}

#[test]
fn sec_01_socket_is_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    let (_owner, d) = common::store();
    let mode = std::fs::metadata(d.path().join("tinystore.sock")).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
}

/// LOCK-04 over a connection: a waiter whose task is cancelled leaves the
/// store's line at once; the key then goes to the next waiter, not to it.
#[test]
fn lock_04_connected_cancelled_waiter_leaves_the_line() {
    let (owner, client, _d) = owner_and_client();
    let raw = client.lock_raw("l", Kind::Lock).unwrap();
    let terms = Terms { ttl: Some(Duration::from_secs(5)), max_hold: None };
    let held = owner.lock_raw("l", Kind::Lock).unwrap().acquire_now(&"k".into(), Holder(0), Terms::default()).unwrap().unwrap();
    let waiting = raw.acquire("k".into(), Holder::unique(), terms, Duration::from_secs(10));
    let r = runtime::block_on(async { tokio::time::timeout(Duration::from_millis(300), waiting).await });
    assert!(r.is_err(), "still waiting when cancelled");
    assert!(common::eventually(2000, || owner.status().unwrap().locks.first().is_some_and(|k| k.waiters == 0)));
    drop(held);
    let next = runtime::block_on(raw.try_acquire("k".into(), Holder::unique(), terms)).unwrap();
    assert!(next.is_some(), "the key is free: the cancelled waiter never got it");
}

/// WIRE-01 from the client's side: a publish whose branch keys and message
/// together exceed a frame is refused with `limit`, and the connection goes on.
#[test]
fn chan_07_connected_publish_over_a_frame_is_a_limit_error_not_a_lost_connection() {
    let (_owner, client, _d) = owner_and_client();
    let events = client.channel::<String>("c").open().unwrap();
    let mut deep = events.under("k".repeat(1020));
    for _ in 0..64 {
        deep = deep.under("k".repeat(1020));
    }
    let e = deep.publish(&"m".repeat((1 << 20) - 2)).unwrap_err();
    assert_eq!(e.code(), "limit");
    assert!(e.message().contains("shorten"), "{e}");
    events.under(1).publish(&"still connected".to_owned()).unwrap();
}

/// CHAN-03: a transaction whose store closed before its commit rolls back
/// with `closed` instead of committing rows whose news would be lost.
#[test]
fn chan_03_connected_commit_after_close_rolls_back() {
    let (owner, client, _d) = owner_and_client();
    let db = client.database("d").open().unwrap();
    db.exec("create table t (v integer)").unwrap();
    let events = client.channel::<u64>("c").open().unwrap();
    let tx = db.begin().unwrap();
    tx.exec(tinystore::sql!("insert into t values (?)", 1)).unwrap();
    tx.with(&events).under(1).publish(&1).unwrap();
    client.close();
    let e = tx.commit().unwrap_err();
    assert_eq!(e.code(), "closed");
    assert!(e.message().contains("rolled back"));
    #[derive(serde::Deserialize)]
    struct N {
        n: i64,
    }
    let n: Vec<N> = owner.database("d").open().unwrap().query("select count(*) as n from t").unwrap();
    assert_eq!(n[0].n, 0);
}

/// STORE-01: a closed handle says so when asked for its status, owned or
/// connected, instead of showing what it last knew.
/// An empty path is `invalid`, a file `io`, each saying why and what to
/// give instead; a damaged `kv.db` is named, with what to do.
#[test]
fn store_01_an_empty_path_a_file_or_a_damaged_kv_db_is_a_clear_error() {
    let d = tempfile::tempdir().unwrap();
    let e = Store::open("").err().expect("an empty path");
    assert_eq!(e.code(), "invalid", "{e}");
    assert!(e.message().contains("empty"), "{e}");
    let file = d.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let e = Store::open(&file).err().expect("a file");
    assert_eq!(e.code(), "io", "{e}");
    assert!(e.message().contains("not a directory"), "{e}");
    assert_eq!(std::fs::read(&file).unwrap(), b"x", "the file is left as it was");
    let dir = d.path().join("store");
    drop(Store::open(&dir).unwrap());
    std::fs::write(dir.join("kv.db"), vec![0x5a; 4096]).unwrap();
    let e = Store::open(&dir).err().expect("a damaged kv.db");
    assert!(e.message().contains(&dir.join("kv.db").display().to_string()), "{e}");
    assert!(e.message().contains("backup"), "{e}");
}

#[test]
fn store_01_status_of_a_closed_store_is_a_closed_error() {
    let (owner, client, _d) = owner_and_client();
    assert!(client.status_json().is_ok());
    client.close();
    assert_eq!(client.status_json().unwrap_err().code(), "closed");
    assert!(owner.status_json().is_ok());
    owner.close();
    assert_eq!(owner.status_json().unwrap_err().code(), "closed");
}

/// CHAN-01 over a connection: `null` is a message like any other JSON.
#[test]
fn chan_01_connected_null_is_a_message() {
    let (_owner, client, _d) = owner_and_client();
    let events = client.channel::<Option<u64>>("c").open().unwrap();
    let mut it = events.under(1).messages().unwrap();
    events.under(1).publish(&None).unwrap();
    events.under(1).publish(&Some(3)).unwrap();
    match it.next_timeout(Duration::from_secs(2)).unwrap() {
        Some(Delivery::Message(m)) => assert_eq!(m.value, None),
        other => panic!("{other:?}"),
    }
    match it.next_timeout(Duration::from_secs(2)).unwrap() {
        Some(Delivery::Message(m)) => assert_eq!(m.value, Some(3)),
        other => panic!("{other:?}"),
    }
}

/// LOCK-06 and LOCK-03: a `maxHold` or `wait` too long for the clock is an
/// `invalid` error, never a panic, owned or connected; the store goes on.
#[test]
fn lock_06_lock_03_durations_too_long_for_the_clock_are_invalid() {
    let (owner, client, _d) = owner_and_client();
    for s in [&owner, &client] {
        let Err(e) = s.lock("l").max_hold(Duration::from_secs(u64::MAX / 2)).open() else { panic!("a maxHold of 292 billion years was taken") };
        assert_eq!(e.code(), "invalid", "{e}");
        assert!(e.message().contains("too long"), "{e}");
        let Err(e) = s.lock("l").wait(Duration::from_millis(u64::MAX)).open() else { panic!("a wait of 584 million years was taken") };
        assert_eq!(e.code(), "invalid", "{e}");
        let lock = s.lock("l").open().unwrap();
        lock.hold("k", |_| -> tinystore::Result<()> { Ok(()) }).unwrap();
    }
}

/// Waits up to `ms` for `fd` to be readable.
fn wait_readable(fd: std::os::fd::RawFd, ms: i32) -> bool {
    let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd for the duration of the call.
    unsafe { libc::poll(&mut p, 1, ms) > 0 }
}

/// Takes the socket for the loop; false is a moment when the engine's task
/// is reading it, so the loop tries again (as the bindings do at their next call).
fn start(r: &tinystore::LoopReader) {
    let end = Instant::now() + Duration::from_secs(2);
    while !r.start() {
        assert!(Instant::now() < end, "the socket was never free to take");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A language's event loop (Node, Python) reads its connection itself: the
/// answer to its call and the message it subscribed to are given out on
/// its thread, and the call completes there.
#[test]
fn store_01_an_event_loop_reads_its_connection_and_calls_complete_on_its_thread() {
    let (owner, client, _d) = owner_and_client();
    assert!(owner.loop_reader().is_none(), "the owning process has no connection to read");
    let sub = runtime::block_on(client.subscribe_raw("loop", &[Key::from(1)], Scope::Branch, None)).unwrap();
    let reader = client.loop_reader().expect("a Unix connection");
    start(&reader);
    let done_on = Arc::new(Mutex::new(None));
    let (c, d) = (client.clone(), done_on.clone());
    let task = runtime::LoopTask::start(async move {
        c.publish_raw("loop", &[Key::from(1)], b"{\"n\":1}".to_vec().into_boxed_slice()).await.unwrap();
        *d.lock().unwrap() = Some(std::thread::current().id());
    });
    let end = Instant::now() + Duration::from_secs(5);
    while !task.is_done() && Instant::now() < end {
        if wait_readable(reader.fd(), 50) {
            assert!(reader.readable(), "the connection is still this loop's");
        }
    }
    assert_eq!(*done_on.lock().unwrap(), Some(std::thread::current().id()), "completed on the loop's thread");
    // The message comes with the answer, or just after it when the
    // subscription's own task was forwarding at that moment: read on.
    let end = Instant::now() + Duration::from_secs(5);
    let got = loop {
        if let Some(ev) = sub.try_next() {
            break Some(ev);
        }
        if Instant::now() > end {
            break None;
        }
        if wait_readable(reader.fd(), 50) {
            assert!(reader.readable(), "the connection is still this loop's");
        }
    };
    match got {
        Some(Event::Message(m)) => assert_eq!(&*m.data, b"{\"n\":1}"),
        other => panic!("the loop read the message: {other:?}"),
    }
    assert!(reader.is_active());
    reader.stop();
    assert!(!reader.readable(), "a stopped reader is done");
    // The engine reads again.
    runtime::block_on(client.publish_raw("loop", &[Key::from(1)], b"2".to_vec().into_boxed_slice())).unwrap();
}

/// A loop that leaves its connection unread (its program is busy) loses it
/// to the engine within a few hundred ms: answers never wait on it.
#[test]
fn store_01_a_busy_event_loop_loses_its_connection_to_the_engine() {
    let (_owner, client, _d) = owner_and_client();
    let reader = client.loop_reader().unwrap();
    start(&reader);
    let t = Instant::now();
    // Never read by the loop: the engine takes the socket back.
    runtime::block_on(client.publish_raw("busy", &[], b"1".to_vec().into_boxed_slice())).unwrap();
    assert!(t.elapsed() < Duration::from_secs(3), "answered after {:?}", t.elapsed());
    assert!(!reader.is_active());
    assert!(!reader.readable(), "the loop is told to stop watching");
    // A new reader takes it again (start is false while the engine's task
    // is in the middle of a read: the loop tries again at its next call).
    let again = client.loop_reader().unwrap();
    start(&again);
    again.stop();
}

/// Publishes called while a language's event loop reads the connection
/// leave at the call, even when that loop then stays busy: none waits in
/// the client for the loop's next read.
#[test]
fn store_01_chan_01_publishes_leave_at_the_call_while_the_loop_is_busy() {
    let (owner, client, _d) = owner_and_client();
    let sub = runtime::block_on(owner.subscribe_raw("busy", &[Key::from(1)], Scope::Branch, None)).unwrap();
    let reader = client.loop_reader().unwrap();
    start(&reader);
    let t = Instant::now();
    let tasks: Vec<_> = (0..20)
        .map(|i| {
            let c = client.clone();
            runtime::LoopTask::start(async move {
                c.publish_raw("busy", &[Key::from(1)], format!("{i}").into_bytes().into_boxed_slice()).await.unwrap();
            })
        })
        .collect();
    // The loop never reads (it is busy): the owner has them all anyway,
    // well before the engine would take the socket back (100 ms or more).
    let mut got = 0;
    while got < 20 && t.elapsed() < Duration::from_millis(80) {
        match sub.try_next() {
            Some(Event::Message(_)) => got += 1,
            Some(other) => panic!("{other:?}"),
            None => std::thread::sleep(Duration::from_millis(1)),
        }
    }
    assert_eq!(got, 20, "the owner had {got} of 20 publishes after {:?}", t.elapsed());
    drop(tasks);
}

/// A loop that flushes each turn (Node) gets a burst of publishes out in
/// one write at its flush: none leaves before it, except 32 at a time when
/// that many gather; all arrive, in the order of the calls.
#[test]
fn chan_01_a_loop_that_flushes_each_turn_sends_its_burst_at_its_flush() {
    // The engine's check of a loop that has not read for 100 ms writes what
    // it holds: a try slower than 90 ms says nothing, and the next one looks.
    for _ in 0..10 {
        let (owner, client, _d) = owner_and_client();
        let sub = runtime::block_on(owner.subscribe_raw("burst", &[Key::from(1)], Scope::Branch, None)).unwrap();
        let reader = client.loop_reader().unwrap();
        let t = Instant::now();
        start(&reader);
        reader.flush_each_turn();
        // The engine's task, done with the socket just now, writes what the
        // sink holds once more on its way out: let it go first.
        std::thread::sleep(Duration::from_millis(20));
        let tasks: Vec<_> = (0..40)
            .map(|i| {
                let c = client.clone();
                runtime::LoopTask::start(async move {
                    c.publish_raw("burst", &[Key::from(1)], format!("{i}").into_bytes().into_boxed_slice()).await.unwrap();
                })
            })
            .collect();
        let mut seen = Vec::new();
        let read = |seen: &mut Vec<String>, want: usize, within: Duration| {
            let end = Instant::now() + within;
            while seen.len() < want && Instant::now() < end {
                match sub.try_next() {
                    Some(Event::Message(m)) => seen.push(String::from_utf8(m.data.to_vec()).unwrap()),
                    Some(other) => panic!("{other:?}"),
                    None => std::thread::sleep(Duration::from_millis(1)),
                }
            }
        };
        read(&mut seen, 32, Duration::from_secs(2));
        read(&mut seen, 40, Duration::from_millis(10));
        if t.elapsed() > Duration::from_millis(90) {
            reader.stop();
            continue;
        }
        assert_eq!(seen.len(), 32, "before the flush the owner had {} of 40 publishes: only the 32 that gathered leave", seen.len());
        reader.flush();
        read(&mut seen, 40, Duration::from_secs(2));
        let want: Vec<String> = (0..40).map(|i| i.to_string()).collect();
        assert_eq!(seen, want, "all of them after the flush, in the order of the calls");
        let end = Instant::now() + Duration::from_secs(5);
        while !tasks.iter().all(|t| t.is_done()) && Instant::now() < end {
            if wait_readable(reader.fd(), 50) {
                assert!(reader.readable());
            }
        }
        assert!(tasks.iter().all(|t| t.is_done()), "every publish answered on the loop's thread");
        reader.stop();
        return;
    }
    panic!("ten tries each took over 90 ms to get 32 publishes to the owner");
}

/// A program that publishes and then closes sees its publishes resolve as
/// delivered (`close_settled`), not as `closed`, also while its loop held
/// the socket and had not read the answers.
#[test]
fn store_01_publishes_sent_before_close_settle_as_delivered() {
    let (owner, client, _d) = owner_and_client();
    let sub = runtime::block_on(owner.subscribe_raw("bye", &[], Scope::Branch, None)).unwrap();
    let reader = client.loop_reader().unwrap();
    start(&reader);
    let ok = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..50)
        .map(|i| {
            let (c, ok) = (client.clone(), ok.clone());
            runtime::LoopTask::start(async move {
                if c.publish_raw("bye", &[], format!("{i}").into_bytes().into_boxed_slice()).await.is_ok() {
                    ok.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    runtime::block_on(client.close_settled());
    let end = Instant::now() + Duration::from_secs(2);
    while !tasks.iter().all(|t| t.is_done()) && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(ok.load(Ordering::Relaxed), 50, "every publish the owner got resolved as delivered");
    let mut got = 0;
    while let Some(Event::Message(_)) = sub.try_next() {
        got += 1;
    }
    assert_eq!(got, 50);
    assert!(client.is_closed());
}

/// A lock handle made while the client reconnects waits for the connection
/// (as a hold does) instead of failing its first hold at once.
#[test]
fn lock_03_a_lock_handle_made_during_a_reconnect_waits_for_it() {
    let (_owner, client, p, _d) = through_proxy();
    client.lock_raw("before", Kind::Lock).unwrap();
    p.cut();
    let lock = client.lock_raw("during", Kind::Lock).expect("made once reconnected");
    let held = runtime::block_on(lock.acquire("k".into(), Holder::unique(), Terms { ttl: Some(Duration::from_secs(5)), max_hold: None }, Duration::from_secs(5)));
    assert!(held.is_ok(), "{held:?}");
}

/// Closing against an owner that does not answer: the store counts as
/// closed from the call (a new call fails at once and sends nothing), the
/// close ends after its 2 s, and a publish left unanswered says it may have
/// been delivered rather than plainly `closed`.
#[test]
fn store_01_closing_refuses_new_calls_and_says_unanswered_publishes_may_have_landed() {
    let (_owner, client, p, _d) = through_proxy();
    runtime::block_on(client.publish_raw("c", &[], b"0".to_vec().into_boxed_slice())).unwrap();
    p.stall();
    let errors = Arc::new(Mutex::new(Vec::new()));
    let tasks: Vec<_> = (0..5)
        .map(|_| {
            let (c, errors) = (client.clone(), errors.clone());
            runtime::LoopTask::start(async move {
                if let Err(e) = c.publish_raw("c", &[], b"1".to_vec().into_boxed_slice()).await {
                    errors.lock().unwrap().push(e);
                }
            })
        })
        .collect();
    let c = client.clone();
    let t = Instant::now();
    let closing = std::thread::spawn(move || runtime::block_on(c.close_settled()));
    assert!(common::eventually(1000, || client.is_closed()), "closed from the call on");
    let late = runtime::block_on(client.publish_raw("c", &[], b"2".to_vec().into_boxed_slice()));
    assert_eq!(late.unwrap_err().kind(), tinystore::ErrorKind::Closed);
    assert!(t.elapsed() < Duration::from_secs(1), "the late call failed at once");
    closing.join().unwrap();
    assert!(t.elapsed() >= Duration::from_millis(1900) && t.elapsed() < Duration::from_secs(4), "{:?}", t.elapsed());
    assert!(common::eventually(1000, || tasks.iter().all(|t| t.is_done())));
    let errors = errors.lock().unwrap();
    assert_eq!(errors.len(), 5);
    for e in errors.iter() {
        assert_eq!(e.kind(), tinystore::ErrorKind::Closed);
        assert!(e.message().contains("may have taken effect"), "{e}");
    }
    p.resume();
}

/// CPU time this process has used (all threads).
fn cpu_time() -> Duration {
    // SAFETY: getrusage fills the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let tv = |t: libc::timeval| Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64);
    tv(u.ru_utime) + tv(u.ru_stime)
}

#[test]
fn store_01_spinning_stops_when_the_conversation_does() {
    // Owner and client both poll their sockets for a short window after a
    // frame (`tinystore::spin`); once calls stop, both must sleep again.
    // Measured in a process of its own: CPU time is counted per process,
    // and the other tests of this file run beside this one.
    const NAME: &str = "store_01_spinning_stops_when_the_conversation_does";
    if std::env::var_os("TINYSTORE_TEST_ALONE").is_none() {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", NAME, "--nocapture", "--test-threads=1"])
            .env("TINYSTORE_TEST_ALONE", "1")
            // Wide enough that a debug build's frames come within it.
            .env("TINYSTORE_SPIN", "10ms")
            .output()
            .unwrap();
        assert!(out.status.success(), "{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(String::from_utf8_lossy(&out.stdout).contains("1 passed"), "the test ran alone");
        return;
    }
    let (owner, client, _d) = owner_and_client();
    let lock = client.lock("spin").open().unwrap();
    let events = client.channel::<u64>("spin").open().unwrap();
    for i in 0..2000u64 {
        lock.hold("k", |_| -> tinystore::Result<()> { Ok(()) }).unwrap();
        events.under(1).publish(&i).unwrap();
    }
    std::thread::sleep(Duration::from_millis(50));
    let before = cpu_time();
    std::thread::sleep(Duration::from_millis(500));
    let used = cpu_time() - before;
    assert!(used < Duration::from_millis(50), "an idle owner and client used {used:?} of CPU in 500 ms");
    drop((lock, events, client, owner));
}

/// LOCK-03: a hold never runs after its wait. Its request reached the owner
/// late (held up on the way, as by a frozen owner), the key was free there
/// and granted at once: the client, past its wait, lets it go and says so.
#[test]
fn lock_03_a_grant_that_comes_after_the_wait_is_let_go() {
    let (owner, client, p, _d) = through_proxy();
    let lock = client.lock_raw("late", Kind::Lock).unwrap();
    let terms = Terms { ttl: Some(Duration::from_secs(5)), max_hold: None };
    p.stall();
    let waiting = std::thread::spawn(move || runtime::block_on(lock.acquire("k".into(), Holder::unique(), terms, Duration::from_millis(300))));
    std::thread::sleep(Duration::from_millis(800));
    p.resume();
    let e = waiting.join().unwrap().map(|_| ()).unwrap_err();
    assert_eq!(e.kind(), tinystore::ErrorKind::Timeout, "{e}");
    assert!(e.message().contains("granted only after the wait of 300ms"), "{e}");
    let here = owner.lock_raw("late", Kind::Lock).unwrap();
    assert!(
        common::eventually(2000, || runtime::block_on(here.try_acquire("k".into(), Holder::unique(), terms)).unwrap().is_some()),
        "the late grant was let go"
    );
}

/// L1: a waiter whose process went silent for longer than its ttl (here its
/// connection stalled) is passed over when its turn comes, and told so when
/// it is heard again, rather than left waiting for an answer that never
/// comes.
#[test]
fn l1_a_waiter_passed_over_for_silence_is_told_so() {
    let (owner, client, p, _d) = through_proxy();
    let terms = Terms { ttl: Some(Duration::from_secs(1)), max_hold: None };
    let here = owner.lock_raw("quiet", Kind::Lock).unwrap();
    let held = runtime::block_on(here.try_acquire("k".into(), Holder::unique(), terms)).unwrap().expect("free");
    let lock = client.lock_raw("quiet", Kind::Lock).unwrap();
    let waiting = std::thread::spawn(move || runtime::block_on(lock.acquire("k".into(), Holder::unique(), terms, Duration::from_secs(20))));
    assert!(common::eventually(2000, || owner.status().unwrap().locks.iter().any(|k| k.waiters == 1)), "in line");
    p.stall();
    std::thread::sleep(Duration::from_millis(1600));
    drop(held); // its turn comes while it is silent
    std::thread::sleep(Duration::from_millis(200));
    let t = Instant::now();
    p.resume();
    let e = waiting.join().unwrap().map(|_| ()).unwrap_err();
    assert_eq!(e.kind(), tinystore::ErrorKind::Timeout, "{e}");
    assert!(e.message().contains("silent for longer than its ttl"), "{e}");
    assert!(t.elapsed() < Duration::from_secs(5), "told when heard again, not at the request timeout: {:?}", t.elapsed());
}

/// CHAN-03, STORE-02 over a connection: a transaction that published while
/// the owner stays out of reach past the request timeout is rolled back with
/// `unavailable` at its commit, rather than committed with its messages lost.
#[test]
fn chan_03_store_02_a_transaction_whose_messages_cannot_leave_is_rolled_back() {
    let (_owner, d) = common::store();
    let p = Proxy::start(d.path(), &d.path().join("tinystore.sock"));
    let client = Store::connect_with(&p.address(), tinystore::ConnectOptions::new().request_timeout(Duration::from_millis(500))).unwrap();
    let db = client.database("t").open().unwrap();
    db.exec(tinystore::sql!("create table t (i integer)")).unwrap();
    let events = client.channel::<i64>("c").open().unwrap();
    std::fs::remove_file(&p.path).unwrap(); // no way back in
    p.cut();
    assert!(
        common::eventually(2000, || runtime::block_on(client.publish_raw("c", &[], b"0".to_vec().into_boxed_slice())).is_err()),
        "disconnected"
    );
    // A write can fail on the cut socket a moment before the reader sees
    // the end of it; from then on the client knows it is disconnected.
    std::thread::sleep(Duration::from_millis(300));
    let e = db
        .tx(|tx| -> tinystore::Result<()> {
            tx.exec(tinystore::sql!("insert into t values (1)"))?;
            tx.with(&events).publish(&1)
        })
        .unwrap_err();
    assert_eq!(e.kind(), tinystore::ErrorKind::Unavailable, "{e}");
    assert!(e.message().contains("rolled back"), "{e}");
    #[derive(serde::Deserialize)]
    struct N {
        n: i64,
    }
    assert_eq!(db.query::<N>(tinystore::sql!("select count(*) as n from t")).unwrap()[0].n, 0, "nothing committed");
}

/// `publish_raw_then`, the event loops' publish: connected, each outcome is
/// given once, where the answer is read (the loop's thread while it reads
/// its connection), and the messages keep the order of the calls (P2). A
/// publish that ends within the call (owned; refused before it left) gives
/// its outcome back and never calls `done`.
#[test]
fn chan_01_publish_then_gives_each_outcome_once_in_order() {
    let (owner, client, _d) = owner_and_client();
    let sub = runtime::block_on(owner.subscribe_raw("then", &[Key::from(1)], Scope::Branch, None)).unwrap();
    let never = |_: tinystore::Result<()>| panic!("done called for a publish that ended in the call");
    assert!(matches!(owner.publish_raw_then("then", &[Key::from(1)], b"0", never), Some(Ok(()))));
    let refused = client.publish_raw_then("", &[], b"1", never).expect("ends in the call");
    assert_eq!(refused.unwrap_err().kind(), tinystore::ErrorKind::Invalid);
    let refused = client.publish_raw_then("then", &[], b"{not json", never).expect("ends in the call");
    assert_eq!(refused.unwrap_err().kind(), tinystore::ErrorKind::Invalid);

    let reader = client.loop_reader().unwrap();
    start(&reader);
    let outcomes = Arc::new(Mutex::new(Vec::new()));
    for i in 1..=50u64 {
        let o = outcomes.clone();
        let sent = client.publish_raw_then("then", &[Key::from(1)], format!("{i}").as_bytes(), move |r| {
            o.lock().unwrap().push((i, r.is_ok(), std::thread::current().id()));
        });
        assert!(sent.is_none(), "left for the owner");
    }
    let end = Instant::now() + Duration::from_secs(5);
    while outcomes.lock().unwrap().len() < 50 && Instant::now() < end {
        if wait_readable(reader.fd(), 50) {
            assert!(reader.readable());
        }
    }
    let outcomes = outcomes.lock().unwrap();
    assert_eq!(outcomes.len(), 50, "one outcome per publish");
    assert!(outcomes.iter().all(|&(_, ok, on)| ok && on == std::thread::current().id()), "all delivered, told on the loop's thread");
    let mut seen = Vec::new();
    while let Some(Event::Message(m)) = sub.try_next() {
        seen.push(String::from_utf8(m.data.to_vec()).unwrap());
    }
    let want: Vec<String> = (0..=50).map(|i| i.to_string()).collect();
    assert_eq!(seen, want, "in the order of the calls");
    reader.stop();
}

/// A publish whose answer never comes (the owner froze, then the program
/// closed) is told so once, saying it may have been delivered: a binding's
/// future never hangs.
#[test]
fn chan_01_publish_then_is_told_when_its_answer_is_cut_off() {
    let (_owner, client, p, _d) = through_proxy();
    runtime::block_on(client.publish_raw("cut", &[], b"0".to_vec().into_boxed_slice())).unwrap();
    p.stall();
    let told = Arc::new(Mutex::new(Vec::new()));
    for _ in 0..3 {
        let t = told.clone();
        assert!(client.publish_raw_then("cut", &[], b"1", move |r| t.lock().unwrap().push(r)).is_none());
    }
    let c = client.clone();
    std::thread::spawn(move || runtime::block_on(c.close_settled())).join().unwrap();
    let told = told.lock().unwrap();
    assert_eq!(told.len(), 3, "each told once");
    for r in told.iter() {
        let e = r.as_ref().unwrap_err();
        assert_eq!(e.kind(), tinystore::ErrorKind::Closed);
        assert!(e.message().contains("may have taken effect"), "{e}");
    }
    let late = client.publish_raw_then("cut", &[], b"2", |_| panic!("not sent, not called")).expect("refused in the call");
    assert_eq!(late.unwrap_err().kind(), tinystore::ErrorKind::Closed);
    p.resume();
}

/// `connect` with an address it does not take says every form it does
/// take, the cluster store's among them, and changes nothing.
#[test]
fn connect_an_address_not_understood_names_every_form_connect_takes() {
    for bad in ["http://db:2379", "unix:", "tcp:nohost", "localhost:7070"] {
        let e = Store::connect(bad).err().unwrap_or_else(|| panic!("{bad:?} was taken"));
        assert_eq!(e.kind(), tinystore::ErrorKind::Invalid, "{bad:?}: {e}");
        for form in ["unix:PATH", "tcp:HOST:PORT", "tls:HOST:PORT", "etcd://"] {
            assert!(e.message().contains(form), "{bad:?}: {form} is not named in {:?}", e.message());
        }
    }
}

/// CHAN-07 connected: a message nested deeper than 100 is refused with the
/// owning store's `limit`, not left to the wire's JSON parser, and one 100
/// deep reaches a subscriber on another connection, decoded.
#[test]
fn chan_07_connected_message_nested_deeper_than_100_is_refused_as_owned() {
    let (_owner, client, d) = owner_and_client();
    let nested = |depth: usize| (0..depth).fold(serde_json::json!("[[[["), |v, _| serde_json::Value::Array(vec![v]));
    let other = Store::connect(&format!("unix:{}", d.path().join("tinystore.sock").display())).unwrap();
    let mut it = other.channel::<serde_json::Value>("c").open().unwrap().under(1).messages().unwrap();
    let events = client.channel::<serde_json::Value>("c").open().unwrap();
    let e = events.under(1).publish(&nested(101)).unwrap_err();
    assert_eq!(e.code(), "limit", "{e}");
    assert!(e.message().contains("100 deep"), "{e}");
    events.under(1).publish(&nested(100)).unwrap();
    match it.next() {
        Some(Ok(Delivery::Message(m))) => assert_eq!(m.value, nested(100)),
        other => panic!("expected the accepted message, got {other:?}"),
    }
}

/// CHAN-07: raw bytes that are not one JSON value are refused with
/// `invalid` when published, owned as connected and inside a transaction,
/// and nothing of them reaches a subscriber (an owned store took them, and
/// its subscribers failed to decode them; a connected transaction took them
/// and failed only at its commit).
#[test]
fn chan_07_raw_bytes_that_are_not_one_json_value_are_refused_owned_as_connected() {
    let (owner, client, _d) = owner_and_client();
    let mut it = owner.channel::<serde_json::Value>("c").open().unwrap().under(1).messages().unwrap();
    let not_json: [&[u8]; 4] = [b"[[[", b"{\"a\":1} 2", b"{'a':1}", b"\xff\"x\""];
    for store in [&owner, &client] {
        for bad in not_json {
            let e = runtime::block_on(store.publish_raw("c", &[Key::from(1)], bad.into())).unwrap_err();
            assert_eq!(e.code(), "invalid", "{e}");
            assert!(e.message().contains("one JSON value") || e.message().contains("UTF-8"), "{e}");
        }
        let db = store.database("d").open().unwrap();
        let tx = db.begin().unwrap();
        assert_eq!(tx.publish_raw(store, "c", &[Key::from(1)], b"[[[".to_vec().into()).unwrap_err().code(), "invalid");
        tx.publish_raw(store, "c", &[Key::from(1)], b"\"in a transaction\"".to_vec().into()).unwrap();
        tx.commit().unwrap();
        runtime::block_on(store.publish_raw("c", &[Key::from(1)], b" 7 ".to_vec().into())).unwrap();
    }
    let mut got = Vec::new();
    while got.len() < 4 {
        match it.next() {
            Some(Ok(Delivery::Message(m))) => got.push(m.value),
            other => panic!("expected the accepted messages only, got {other:?}"),
        }
    }
    assert_eq!(got, vec![serde_json::json!("in a transaction"), serde_json::json!(7), serde_json::json!("in a transaction"), serde_json::json!(7)]);
}

/// LOCK-01: a lease dropped on a program's own thread (not the runtime's)
/// while its owner is gone lets go without a panic, and the key is free
/// for a holder on the next owner within the lease's ttl.
#[test]
fn lock_01_a_lease_dropped_while_its_owner_is_gone_lets_go_without_a_panic() {
    let (owner, client, d) = owner_and_client();
    let lock = client.lock_raw("l", Kind::Lock).unwrap();
    let terms = Terms { ttl: Some(Duration::from_secs(2)), max_hold: None };
    let lease = runtime::block_on(lock.acquire("k".into(), Holder(0), terms, Duration::from_secs(5))).unwrap();
    owner.close();
    std::thread::sleep(Duration::from_millis(300));
    drop(lease);
    let next = Store::open(d.path()).unwrap();
    let started = Instant::now();
    let other = next.lock_raw("l", Kind::Lock).unwrap();
    let b = runtime::block_on(other.acquire("k".into(), Holder(1), terms, Duration::from_secs(5))).unwrap();
    assert!(started.elapsed() < Duration::from_millis(2500), "the key came free after {:?}", started.elapsed());
    drop(b);
}

/// CHAN-01 and CHAN-07 for a burst given at once (`publish_many`), in
/// the owning process and over a connection: every message arrives in
/// order; a burst with one message over 1 MiB is refused before any leaves,
/// naming that message, and nothing of it is published.
#[test]
fn chan_01_chan_07_a_burst_given_at_once_arrives_in_order_or_not_at_all() {
    let (owner, client, _d) = owner_and_client();
    for (who, store) in [("owner", &owner), ("client", &client)] {
        let events = owner.channel::<u64>("c").open().unwrap();
        let mut it = events.under(who).messages().unwrap();
        let branch = [Key::from(who)];
        let burst: Vec<Box<[u8]>> = (0..200u64).map(|i| i.to_string().into_bytes().into_boxed_slice()).collect();
        runtime::block_on(store.publish_raw_many("c", &branch, burst)).unwrap();
        let mut got = Vec::new();
        while got.len() < 200 {
            match next_value(&mut it, 2000) {
                Some(Ok(v)) => got.push(v),
                other => panic!("{who}: after {} messages got {other:?}", got.len()),
            }
        }
        assert_eq!(got, (0..200).collect::<Vec<_>>(), "{who}");
        let mut burst: Vec<Box<[u8]>> = (0..5u64).map(|i| i.to_string().into_bytes().into_boxed_slice()).collect();
        burst[3] = format!("\"{}\"", "x".repeat(1 << 20)).into_bytes().into_boxed_slice();
        let e = runtime::block_on(store.publish_raw_many("c", &branch, burst)).unwrap_err();
        assert_eq!(e.code(), "limit", "{who}: {e}");
        assert!(e.message().starts_with("message 3 of the 5 given: a message is at most 1 MiB"), "{who}: {e}");
        events.under(who).publish(&999).unwrap();
        assert_eq!(next_value(&mut it, 2000), Some(Ok(999)), "{who}: nothing of the refused burst was published");
        // The typed form.
        let typed: Vec<u64> = (1000..1050).collect();
        store.channel::<u64>("c").open().unwrap().under(who).publish_many(&typed).unwrap();
        for want in &typed {
            assert_eq!(next_value(&mut it, 2000), Some(Ok(*want)), "{who}: the typed burst");
        }
    }
}

/// CHAN-01 and CHAN-07 for a burst longer than one request over a
/// connection (over 1,024 messages, over 1 MiB together): it leaves in
/// several requests and arrives whole and in order, or counted as missed.
#[test]
fn chan_01_chan_07_a_connected_burst_longer_than_one_request_arrives_in_order() {
    let (owner, client, _d) = owner_and_client();
    let mut it = owner.channel::<serde_json::Value>("c").open().unwrap().under(1).messages().unwrap();
    let n = 2_600u64;
    let reader = std::thread::spawn(move || {
        let (mut got, mut missed) = (Vec::new(), 0u64);
        while got.len() as u64 + missed < n {
            match it.next_timeout(Duration::from_secs(5)).unwrap() {
                Some(Delivery::Message(m)) => got.push(m.value.as_u64().or_else(|| m.value["i"].as_u64()).unwrap()),
                Some(Delivery::Missed(m)) => missed += m.count.unwrap(),
                None => panic!("after {} messages and {missed} missed, nothing for 5 s", got.len()),
            }
        }
        (got, missed)
    });
    // Every 1,000th message is 600 KiB: a request holds at most 1 MiB.
    let pad = "x".repeat(600 * 1024);
    let burst: Vec<Box<[u8]>> =
        (0..n).map(|i| if i % 1000 == 999 { format!("{{\"i\":{i},\"pad\":\"{pad}\"}}") } else { i.to_string() }.into_bytes().into_boxed_slice()).collect();
    runtime::block_on(client.publish_raw_many("c", &[Key::from(1)], burst)).unwrap();
    let (got, missed) = reader.join().unwrap();
    assert!(got.windows(2).all(|w| w[0] < w[1]), "in order");
    assert_eq!(got.len() as u64 + missed, n);
    assert_eq!(got.last(), Some(&(n - 1)));
    assert!(got.contains(&1999), "a message of 600 KiB arrived");
}

/// CHAN-01 for a burst given at once over a connection: a message that is
/// not JSON is refused before any of the burst leaves, named by its index,
/// and nothing of the burst is published (the connected backend checks
/// JSON as it writes a frame: a burst is checked whole first).
#[test]
fn chan_01_a_connected_burst_with_one_message_not_json_publishes_nothing() {
    let (owner, client, _d) = owner_and_client();
    let events = owner.channel::<u64>("c").open().unwrap();
    let mut it = events.under(1).messages().unwrap();
    let branch = [Key::from(1)];
    let mut burst: Vec<Box<[u8]>> = (0..5u64).map(|i| i.to_string().into_bytes().into_boxed_slice()).collect();
    burst[3] = b"{not json".to_vec().into_boxed_slice();
    let e = runtime::block_on(client.publish_raw_many("c", &branch, burst)).unwrap_err();
    assert_eq!(e.code(), "invalid", "{e}");
    assert!(e.message().starts_with("message 3 of the 5 given: a message is one JSON value"), "{e}");
    events.under(1).publish(&999).unwrap();
    assert_eq!(next_value(&mut it, 2000), Some(Ok(999)), "nothing of the refused burst was published");
}

/// STORE-02 for a burst given at once: when the connection is cut while
/// the call still sends its messages, the call returns only once every
/// message's outcome is known (those queued for the reconnect were sent,
/// or failed), so nothing of the burst is published after it returned,
/// and a caller that retries what it was told failed duplicates nothing
/// still on its way. The proxy holds what the client sends until the cut
/// and for a while after it, so nothing sent before it waits in the
/// owner's socket (an owner still
/// publishes what a client sent before it went away, docs/wire.md, which
/// the error's "may have been delivered" covers).
#[test]
fn store_02_a_burst_cut_in_flight_returns_once_every_message_has_its_outcome() {
    let (owner, client, p, _d) = through_proxy();
    // A subscriber keeps the branch known to the owner's status.
    let _sub = owner.channel::<u64>("c").open().unwrap().under(1).subscribe(|_| {}).unwrap();
    let branch = [Key::from(1)];
    let published = || owner.status().unwrap().branches.iter().find(|b| b.channel == "c").map_or(0, |b| b.published);
    // Long enough that the call still sends when the cut comes: messages
    // of 1 MB (each alone in its request) between runs of small ones.
    let big = format!("\"{}\"", "x".repeat(1_000_000));
    let burst: Vec<Box<[u8]>> = (0..6_000u64)
        .map(|i| if i % 50 == 0 { big.clone() } else { i.to_string() }.into_bytes().into_boxed_slice())
        .collect();
    p.stall();
    let before = p.client_frames();
    let cutter = std::thread::spawn(move || {
        // Once the burst's first request reached the proxy.
        while p.client_frames() == before {
            std::thread::sleep(Duration::from_millis(1));
        }
        p.cut();
        // The reconnect waits too: the rest of the burst is queued for it.
        std::thread::sleep(Duration::from_millis(300));
        p.resume();
        p
    });
    let r = runtime::block_on(client.publish_raw_many("c", &branch, burst));
    let at_return = published();
    let _p = cutter.join().unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    assert!(at_return > 0, "some of the burst went after the reconnect ({r:?})");
    assert_eq!(published(), at_return, "published after the call returned ({r:?})");
}
