//! Channels of cluster stores on NATS JetStream (`etcd://.../PREFIX?nats=...`):
//! the channel contracts on a real 3-member etcd cluster (tests/etcd) and a
//! real 3-node NATS cluster with JetStream (tests/nats), streams with 3
//! replicas; and the kill -9 of the NATS server a subscriber is on, during
//! a burst (docs/cluster.md says what is weaker than on one machine).

mod common;
mod etcd;
mod nats;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use etcd::Cluster;
use nats::Nats;
use tinystore::{Delivery, Key, Missed, Store};

/// One etcd cluster and one NATS cluster shared by the tests that do not
/// kill servers.
fn shared() -> (Arc<Cluster>, Arc<Nats>) {
    (Cluster::shared(), Nats::shared())
}

fn address(c: &Cluster, n: &Nats, prefix: &str) -> String {
    format!("{}?nats={}", c.address(prefix), n.urls())
}

/// The request timeout of the tests' stores: the tests of this file run
/// at once on 2 cores beside 6 servers, where a stream's first leader
/// election has been seen to take longer than the default 10 s.
const TIMEOUT: Duration = Duration::from_secs(30);

fn connect_to(address: &str) -> Store {
    Store::connect_with(address, tinystore::ConnectOptions::new().request_timeout(TIMEOUT)).expect("connect to the cluster store")
}

fn connect(c: &Cluster, n: &Nats, prefix: &str) -> Store {
    connect_to(&address(c, n, prefix))
}

fn next(it: &mut tinystore::Messages<u64>, ms: u64) -> Option<Delivery<u64>> {
    it.next_timeout(Duration::from_millis(ms)).unwrap()
}

/// Without `?nats=` a cluster store's channel calls fail at once, saying
/// where channels come from on a cluster.
#[test]
fn chan_cluster_without_nats_channel_calls_say_to_name_nats_servers() {
    let c = Cluster::shared();
    let store = Store::connect(&c.address("nonats")).unwrap();
    let ch = store.channel::<u64>("c").open().unwrap();
    let e = ch.under(1).publish(&1).unwrap_err();
    assert_eq!(e.code(), "invalid");
    assert!(e.message().contains("?nats=nats://"), "{e}");
    let e = ch.under(1).messages().err().expect("subscribe refused");
    assert!(e.message().contains("NATS JetStream"), "{e}");
}

/// CHAN-01 on NATS: every message published after subscribe returns
/// arrives in publish order, one at a time, from another store too; the
/// branch sequence is dense (1, 2, 3...).
#[test]
fn chan_01_nats_every_message_after_subscribe_arrives_in_order() {
    let (c, n) = shared();
    let (a, b) = (connect(&c, &n, "chan01"), connect(&c, &n, "chan01"));
    let pub_side = a.channel::<u64>("events").open().unwrap();
    let sub_side = b.channel::<u64>("events").open().unwrap();
    // Something before the subscription, which it must not see.
    pub_side.under(7).publish(&999).unwrap();
    let got = Arc::new(Mutex::new(Vec::new()));
    let busy = Arc::new(AtomicBool::new(false));
    let (g, bz) = (got.clone(), busy.clone());
    let sub = sub_side
        .under(7)
        .subscribe(move |m| {
            assert!(!bz.swap(true, Ordering::SeqCst), "two handler calls at once");
            g.lock().unwrap().push((m.value, m.seq));
            bz.store(false, Ordering::SeqCst);
        })
        .unwrap();
    for i in 0..300 {
        pub_side.under(7).publish(&i).unwrap();
    }
    assert!(common::eventually(10_000, || got.lock().unwrap().len() == 300), "got {}", got.lock().unwrap().len());
    let got = got.lock().unwrap().clone();
    assert_eq!(got.iter().map(|x| x.0).collect::<Vec<_>>(), (0..300).collect::<Vec<_>>());
    assert!(got.windows(2).all(|w| w[1].1 == w[0].1 + 1), "dense branch sequence");
    assert_eq!(got[0].1, 2, "the message before the subscription was the branch's first");
    sub.stop();
}

/// Publishes from `threads` (thread t on `stores[t % len]`) to one branch,
/// 60 each: every message arrives once, each publisher's order kept.
/// Gives the branch sequences in arrival order.
fn publish_from_threads(stores: &[Store], threads: u32) -> Vec<u64> {
    let chans: Vec<_> = stores.iter().map(|s| s.channel::<(u32, u32)>("c").open().unwrap()).collect();
    let mut it = chans[0].under("b").messages().unwrap();
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let e = chans[t as usize % chans.len()].clone();
            std::thread::spawn(move || (0..60).for_each(|i| e.under("b").publish(&(t, i)).unwrap()))
        })
        .collect();
    handles.into_iter().for_each(|t| t.join().unwrap());
    let mut last = vec![None::<u32>; threads as usize];
    let mut seqs = Vec::new();
    for k in 0..60 * threads {
        match it.next_timeout(Duration::from_secs(10)).unwrap().unwrap_or_else(|| panic!("message {k} of {} did not come", 60 * threads)) {
            Delivery::Message(m) => {
                let (t, i) = m.value;
                assert!(last[t as usize].is_none_or(|p| p < i), "publisher {t}'s order kept");
                last[t as usize] = Some(i);
                seqs.push(m.seq);
            }
            Delivery::Missed(m) => panic!("missed {m:?}"),
        }
    }
    assert!(next_pair(&mut it).is_none(), "nothing twice");
    seqs
}

fn next_pair(it: &mut tinystore::Messages<(u32, u32)>) -> Option<Delivery<(u32, u32)>> {
    it.next_timeout(Duration::from_millis(300)).unwrap()
}

/// CHAN-01 on NATS with publishes in flight: four threads of one store
/// publish to one branch at once; each thread's order is kept, and the
/// branch's sequence has no gap and no repeat (the store sends a branch's
/// publishes one after the other).
#[test]
fn chan_01_nats_concurrent_publishers_keep_each_own_order_and_a_dense_sequence() {
    let (c, n) = shared();
    let seqs = publish_from_threads(&[connect(&c, &n, "chan01p")], 4);
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "the branch's sequence is dense: {seqs:?}");
}

/// CHAN-01 on NATS with many publishes in flight on one branch: they
/// arrive once, in the order taken, with a dense branch sequence, though
/// those that queued behind one in flight went as one JetStream message
/// (fewer messages in the stream than published); a subscription made
/// after them starts just after the last, told nothing missed.
#[test]
fn chan_01_nats_publishes_in_flight_on_one_branch_go_in_batches_in_order_and_dense() {
    let (c, n) = shared();
    let s = connect(&c, &n, "chan01batch");
    let branch = [Key::from("b")];
    let sub = tinystore::runtime::block_on(s.subscribe_raw("c", &branch, tinystore::channels::Scope::Branch, None)).unwrap();
    // Within the subscription's queue (1,024): it is read after.
    let count = 1_000u64;
    tinystore::runtime::block_on(async {
        let mut inflight = std::collections::VecDeque::new();
        for i in 0..count {
            inflight.push_back(s.publish_raw("c", &branch, i.to_string().into_bytes().into_boxed_slice()));
            if inflight.len() >= 64 {
                inflight.pop_front().unwrap().await.unwrap();
            }
        }
        for f in inflight {
            f.await.unwrap();
        }
    });
    for i in 0..count {
        let ev = tinystore::runtime::block_on(async { tokio::time::timeout(Duration::from_secs(10), sub.next()).await }).expect("a message within 10 s");
        match ev {
            Some(tinystore::channels::Event::Message(m)) => {
                assert_eq!((m.seq, &m.data[..]), (i + 1, i.to_string().as_bytes()), "message {i}");
            }
            other => panic!("message {i}: {other:?}"),
        }
    }
    let later = tinystore::runtime::block_on(s.subscribe_raw("c", &branch, tinystore::channels::Scope::Branch, None)).unwrap();
    tinystore::runtime::block_on(s.publish_raw("c", &branch, b"\"last\"".to_vec().into_boxed_slice())).unwrap();
    match tinystore::runtime::block_on(later.next()) {
        Some(tinystore::channels::Event::Message(m)) => assert_eq!(m.seq, count + 1, "no missed count, the next sequence"),
        other => panic!("{other:?}"),
    }
    let held = n.stream_messages("ts-chan01batch-c");
    assert!(held < count, "{held} JetStream messages for {count} publishes: they went in batches");
    let st = s.status().unwrap();
    let b = st.branches.iter().find(|x| x.channel == "c" && x.branch == branch.to_vec()).unwrap_or_else(|| panic!("{:?}", st.branches));
    assert_eq!(b.published, count + 1, "{b:?}");
    // Messages, not JetStream messages: all while the stream keeps every batch.
    assert!(if held <= 1024 { b.kept_messages as u64 == count + 1 } else { b.kept_messages >= 1024 }, "{b:?} with {held} in the stream");
}

/// CHAN-01 on NATS with two processes' stores publishing to one branch at
/// once: every message arrives once, each publisher's order kept. The
/// branch sequence may repeat stamps here: nats-server 2.9 lets two
/// clustered publishes with the same expected subject sequence through
/// (docs/cluster.md), and a batch repeats a run of them; the count of
/// repeats is printed.
#[test]
fn chan_01_nats_two_stores_on_one_branch_every_message_once_in_each_publishers_order() {
    let (c, n) = shared();
    let seqs = publish_from_threads(&[connect(&c, &n, "chan01two"), connect(&c, &n, "chan01two")], 4);
    eprintln!("stamps repeated by nats-server's check: {} of {}", seqs.windows(2).filter(|w| w[1] <= w[0]).count(), seqs.len());
}

/// CHAN-02 on NATS: a blocked handler, 1,024 + 37 messages: exactly one
/// miss of 37, reason behind, then the next message; the publisher never
/// waited for the reader.
#[test]
fn chan_02_nats_blocked_handler_told_exact_missed_count_then_goes_on() {
    let (c, n) = shared();
    let store = connect(&c, &n, "chan02");
    let events = store.channel::<u64>("c").open().unwrap();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let release_rx = Mutex::new(release_rx);
    let log = Arc::new(Mutex::new(Vec::<String>::new()));
    let (l1, l2) = (log.clone(), log.clone());
    let first_seen = Arc::new(AtomicBool::new(false));
    let fs = first_seen.clone();
    let sub = events
        .under(1)
        .on_missed(move |m: Missed| l1.lock().unwrap().push(format!("missed {:?} {}", m.count, m.reason.as_str())))
        .subscribe(move |m| {
            l2.lock().unwrap().push(format!("msg {}", m.value));
            if m.value == 0 {
                fs.store(true, Ordering::SeqCst);
                release_rx.lock().unwrap().recv().unwrap();
            }
        })
        .unwrap();
    events.under(1).publish(&0).unwrap();
    assert!(common::eventually(5000, || first_seen.load(Ordering::SeqCst)));
    let k = 37;
    for i in 1..=(1024 + k) {
        events.under(1).publish(&i).unwrap();
    }
    // The stream has them all; the reader's queue drops the oldest as they come.
    std::thread::sleep(Duration::from_millis(500));
    release_tx.send(()).unwrap();
    assert!(common::eventually(10_000, || log.lock().unwrap().len() == 1 + 1 + 1024), "{}", log.lock().unwrap().len());
    let log = log.lock().unwrap();
    assert_eq!(log[0], "msg 0");
    assert_eq!(log[1], format!("missed Some({k}) behind"));
    assert_eq!(log[2], format!("msg {}", k + 1));
    assert_eq!(log.last().unwrap(), &format!("msg {}", 1024 + k));
    assert_eq!(log.iter().filter(|l| l.starts_with("missed")).count(), 1);
    drop(log);
    sub.stop();
}

/// CHAN-05 on NATS: after stop() returns the handler is never called again,
/// while another thread publishes; stop twice and after close is fine.
#[test]
fn chan_05_nats_stop_means_stop_with_publishing_from_another_thread() {
    let (c, n) = shared();
    let store = connect(&c, &n, "chan05");
    let events = store.channel::<u64>("c").open().unwrap();
    let stopped = Arc::new(AtomicBool::new(false));
    let late = Arc::new(AtomicU64::new(0));
    let seen = Arc::new(AtomicU64::new(0));
    let (s, l, k) = (stopped.clone(), late.clone(), seen.clone());
    let sub = events
        .under(1)
        .subscribe(move |_| {
            if s.load(Ordering::SeqCst) {
                l.fetch_add(1, Ordering::SeqCst);
            }
            k.fetch_add(1, Ordering::SeqCst);
        })
        .unwrap();
    let go = Arc::new(AtomicBool::new(true));
    let (g, e) = (go.clone(), events.clone());
    let publisher = std::thread::spawn(move || {
        let mut i = 0u64;
        while g.load(Ordering::SeqCst) {
            e.under(1).publish(&i).unwrap();
            i += 1;
        }
    });
    assert!(common::eventually(10_000, || seen.load(Ordering::SeqCst) > 50));
    sub.stop();
    stopped.store(true, Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(300));
    go.store(false, Ordering::SeqCst);
    publisher.join().unwrap();
    assert_eq!(late.load(Ordering::SeqCst), 0, "a handler call started after stop() returned");
    sub.stop();
    store.close();
    sub.stop();
}

/// CHAN-01's drain on NATS: a publish then close: the closing store's own
/// subscription gets the message, then a clean end.
#[test]
fn chan_01_nats_publish_then_close_delivers_then_ends_cleanly() {
    let (c, n) = shared();
    let store = connect(&c, &n, "chan01close");
    let events = store.channel::<u64>("c").open().unwrap();
    let mut it = events.under(1).messages().unwrap();
    let tree = Arc::new(Mutex::new(Vec::new()));
    let t = tree.clone();
    let _tree_sub = events.under(1).recursive().subscribe(move |m| t.lock().unwrap().push(m.value)).unwrap();
    events.under(1).publish(&42).unwrap();
    store.close();
    match it.next() {
        Some(Ok(Delivery::Message(m))) => assert_eq!(m.value, 42),
        other => panic!("expected the message, got {other:?}"),
    }
    assert!(it.next().is_none(), "then a clean end");
    assert!(common::eventually(2000, || *tree.lock().unwrap() == [42]), "the recursive subscription drained too");
}

/// CHAN-01's drain on NATS, many rounds: 300 publishes in flight at once
/// (so they go in batches), then close as soon as the store has them:
/// each of the closing store's own subscriptions (eight on the branch, one
/// recursive above it) gets all 300, in order, then a clean end. Close
/// ends a subscription once its reader has read up to the branch's newest
/// message, so that mark must not pass a message not yet in its queue.
#[test]
fn chan_01_nats_close_drains_every_message_to_its_own_subscription_repeated() {
    let (c, n) = shared();
    let (rounds, count) = (40u64, 300u64);
    let mut short = Vec::new();
    for round in 0..rounds {
        let store = connect(&c, &n, "chan01drain");
        let events = store.channel::<u64>("c").open().unwrap();
        let its: Vec<_> = (0..8).map(|_| events.under("r").under(round).messages().unwrap()).collect();
        let tree = Arc::new(Mutex::new(Vec::new()));
        let t = tree.clone();
        let _tree_sub = events.under("r").recursive().subscribe(move |m| t.lock().unwrap().push(m.value)).unwrap();
        let branch = [Key::from("r"), Key::from(round)];
        let sent = tinystore::runtime::block_on(futures::future::join_all((0..count).map(|i| store.publish_raw("c", &branch, i.to_string().into_bytes().into_boxed_slice()))));
        assert!(sent.iter().all(|r| r.is_ok()), "{sent:?}");
        store.close();
        let all: Vec<u64> = (0..count).collect();
        for (k, it) in its.into_iter().enumerate() {
            let got: Vec<u64> = it
                .map(|d| match d.unwrap() {
                    Delivery::Message(m) => m.value,
                    Delivery::Missed(m) => panic!("round {round}: missed {m:?}"),
                })
                .collect();
            if got != all {
                short.push(format!("round {round}, subscription {k}: {} of {count}, last {:?}", got.len(), got.last()));
            }
        }
        std::thread::sleep(Duration::from_millis(100));
        let tree = tree.lock().unwrap().clone();
        if tree != all {
            short.push(format!("round {round}, recursive: {} of {count}, last {:?}", tree.len(), tree.last()));
        }
    }
    assert!(short.is_empty(), "{} of {} subscriptions lost messages at close: {short:#?}", short.len(), rounds * 9);
}

/// CHAN-06 on NATS: branches are separate; `7` and `"7"` are one branch,
/// `"07"` another; keys with dots, stars and spaces, and a key of 1,024
/// bytes, are branches like any other.
#[test]
fn chan_06_nats_branches_are_separate_and_7_is_the_same_branch_as_text_7() {
    let (c, n) = shared();
    let store = connect(&c, &n, "chan06");
    let events = store.channel::<u64>("c").open().unwrap();
    let mut seven = events.under(7).messages().unwrap();
    let mut eight = events.under(8).messages().unwrap();
    let mut nested = events.under(7).under("x").messages().unwrap();
    let odd = "a.b *>é ".to_owned();
    let long = "z".repeat(1024);
    let mut odd_it = events.under(odd.as_str()).messages().unwrap();
    let mut long_it = events.under(long.as_str()).messages().unwrap();
    events.under(8).publish(&8).unwrap();
    events.under("7").publish(&7).unwrap();
    events.under("07").publish(&70).unwrap();
    events.under(7).under("x").publish(&71).unwrap();
    events.under("a").publish(&1).unwrap();
    events.under(odd.as_str()).publish(&2).unwrap();
    events.under(long.as_str()).publish(&3).unwrap();
    let one = |it: &mut tinystore::Messages<u64>, ms| match next(it, ms) {
        Some(Delivery::Message(m)) => Some((m.value, m.branch.to_vec())),
        _ => None,
    };
    assert_eq!(one(&mut seven, 5000), Some((7, vec![Key::from(7)])));
    assert_eq!(one(&mut seven, 500), None, "nothing of 07, 8 or 7/x");
    assert_eq!(one(&mut eight, 5000), Some((8, vec![Key::from(8)])));
    assert_eq!(one(&mut eight, 300), None);
    assert_eq!(one(&mut nested, 5000), Some((71, vec![Key::from(7), Key::from("x")])));
    assert_eq!(one(&mut odd_it, 5000), Some((2, vec![Key::from(odd.as_str())])));
    assert_eq!(one(&mut odd_it, 300), None);
    assert_eq!(one(&mut long_it, 5000), Some((3, vec![Key::from(long.as_str())])));
}

/// CHAN-06 on NATS: a recursive subscription gets its branch and everything
/// below it, in order, and nothing of a sibling.
#[test]
fn chan_06_nats_recursive_subscription_gets_branch_and_everything_below_in_order() {
    let (c, n) = shared();
    let store = connect(&c, &n, "chan06rec");
    let events = store.channel::<u64>("c").open().unwrap();
    let got = Arc::new(Mutex::new(Vec::new()));
    let g = got.clone();
    let sub = events.under("team").recursive().subscribe(move |m| g.lock().unwrap().push((m.value, m.branch.len()))).unwrap();
    events.under("team").publish(&1).unwrap();
    events.under("team").under(1).publish(&2).unwrap();
    events.under("other").publish(&99).unwrap();
    events.under("teams").publish(&98).unwrap();
    events.under("team").under(2).under("deep").publish(&3).unwrap();
    assert!(common::eventually(5000, || got.lock().unwrap().len() == 3));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(*got.lock().unwrap(), vec![(1, 1), (2, 2), (3, 3)]);
    sub.stop();
}

/// CHAN-07 on NATS: 1 MiB + 1 byte is refused on that call only; exactly
/// 1 MiB goes through the servers (their max_payload is 2 MB); the next
/// small publish works.
#[test]
fn chan_07_nats_message_size_at_the_edge() {
    let (c, n) = shared();
    let store = connect(&c, &n, "chan07");
    let events = store.channel::<String>("c").open().unwrap();
    let mut it = events.under(1).messages().unwrap();
    let exact = "a".repeat((1 << 20) - 2);
    let over = "a".repeat((1 << 20) - 1);
    let e = events.under(1).publish(&over).unwrap_err();
    assert_eq!(e.code(), "limit");
    assert!(e.message().contains("1 MiB"), "{e}");
    events.under(1).publish(&exact).unwrap();
    events.under(1).publish(&"small".to_owned()).unwrap();
    let mut values = Vec::new();
    for _ in 0..2 {
        if let Some(Delivery::Message(m)) = it.next_timeout(Duration::from_secs(10)).unwrap() {
            values.push(m.value.len());
        }
    }
    assert_eq!(values, vec![exact.len(), 5], "nothing of the refused one was published");
}

/// CHAN-07 on NATS: a branch keeps its newest 1,024 messages in the stream
/// (`max_msgs_per_subject`), whatever was published.
#[test]
fn chan_07_nats_branch_keeps_newest_1024_messages() {
    let (c, n) = shared();
    let store = connect(&c, &n, "chan07log");
    let events = store.channel::<u64>("c").open().unwrap();
    let mut it = events.under(1).messages().unwrap();
    for i in 0..1100 {
        events.under(1).publish(&i).unwrap();
    }
    // The stream keeps the newest 1,024 of the branch, its sequence at 1,100.
    let st = store.status().unwrap();
    let b = st.branches.iter().find(|b| b.channel == "c" && b.branch == vec![Key::from(1)]).unwrap();
    assert_eq!((b.kept_messages, b.published), (1024, 1100), "{b:?}");
    // A reader that read nothing yet and reads now: at most 1,024 in its queue.
    std::thread::sleep(Duration::from_millis(500));
    match next(&mut it, 5000) {
        Some(Delivery::Missed(m)) => assert_eq!(m.count, Some(1100 - 1024)),
        other => panic!("expected the miss first, got {other:?}"),
    }
    match next(&mut it, 5000) {
        Some(Delivery::Message(m)) => assert_eq!(m.value, 1100 - 1024),
        other => panic!("{other:?}"),
    }
}

/// CHAN-04 and CHAN-01 on NATS, a fault: kill -9 of the NATS server a
/// subscriber is connected to during a burst of 4,000 messages to 4
/// branches (recursive and per-branch subscribers). The subscriber's client
/// goes to another server, its consumers resume from the last message read:
/// per-branch order is kept, no message comes twice, and every message
/// not received is told by a miss with its exact count, before the next.
/// Nothing arrives after stop().
#[test]
fn chan_04_nats_kill_9_of_the_subscribers_server_during_a_burst_keeps_order_and_exact_gaps() {
    let c = Cluster::shared();
    let mut n = Nats::start();
    // The subscriber knows only node 0 (it learns the others from it); the
    // publisher is on nodes 1 and 2.
    let sub_store = connect_to(&format!("{}?nats={}", c.address("chan04kill"), n.urls_of(&[0])));
    // The default request timeout (10 s), as a user's: a publish may fail
    // over the failover, and the test counts how many.
    let pub_store = Store::connect(&format!("{}?nats={}", c.address("chan04kill"), n.urls_of(&[1, 2]))).unwrap();
    let sub_ch = sub_store.channel::<(u32, u64)>("burst").open().unwrap();
    let pub_ch = pub_store.channel::<(u32, u64)>("burst").open().unwrap();
    // Per branch: the messages seen and the missed counts, in order.
    type Log = Arc<Mutex<Vec<Result<(u64, u64), Missed>>>>;
    let logs: Vec<Log> = (0..4).map(|_| Arc::new(Mutex::new(Vec::new()))).collect();
    let subs: Vec<_> = (0..4u32)
        .map(|b| {
            let (l1, l2) = (logs[b as usize].clone(), logs[b as usize].clone());
            sub_ch
                .under(b)
                .on_missed(move |m| l1.lock().unwrap().push(Err(m)))
                .subscribe(move |m| l2.lock().unwrap().push(Ok((m.value.1, m.seq))))
                .unwrap()
        })
        .collect();
    // 1,001 per branch with the last: no reader's queue (1,024) can
    // overflow, so every gap is the failover's (a loaded CI machine once
    // dropped from queues that held a post-failover backlog, CHAN-02).
    let total: u64 = 4_000;
    const END: u64 = 1_000_000;
    let published = Arc::new(AtomicU64::new(0));
    let p = published.clone();
    let publisher = std::thread::spawn(move || {
        let mut errors = 0;
        for i in 0..total {
            let b = (i % 4) as u32;
            match pub_ch.under(b).publish(&(b, i / 4)) {
                Ok(()) => {}
                // A publish that failed over the failover is the publisher's
                // to know; it is not a gap of the subscriber's.
                Err(_) => errors += 1,
            }
            p.fetch_add(1, Ordering::SeqCst);
        }
        // A last message per branch, that the subscriber must reach.
        for b in 0..4u32 {
            pub_ch.under(b).publish(&(b, END)).unwrap();
        }
        errors
    });
    assert!(common::eventually(30_000, || published.load(Ordering::SeqCst) > 1_000));
    let killed_at = Instant::now();
    n.kill(0);
    let errors = publisher.join().unwrap();
    eprintln!("burst done {:?} after the kill, {errors} publishes failed", killed_at.elapsed());
    // Every branch reaches its last message, with each message not
    // received told.
    let done = |l: &Log| l.lock().unwrap().iter().rev().find_map(|e| e.as_ref().ok().map(|x| x.0)) == Some(END);
    let reached = common::eventually(60_000, || logs.iter().all(done));
    eprintln!("every branch reached its last message {:?} after the kill", killed_at.elapsed());
    let summary: Vec<String> = logs
        .iter()
        .map(|l| {
            let l = l.lock().unwrap();
            format!("{} events, last {:?}, misses {:?}", l.len(), l.last(), l.iter().filter_map(|e| e.as_ref().err()).collect::<Vec<_>>())
        })
        .collect();
    assert!(reached, "every branch reached its last message: {summary:#?}; status {}", sub_store.status_json().map(|v| v["cluster"]["nats"].to_string()).unwrap_or_default());
    for (b, l) in logs.iter().enumerate() {
        let l = l.lock().unwrap();
        let mut expect_seq: Option<u64> = None;
        let mut last_value: Option<u64> = None;
        let (mut got, mut told) = (0u64, 0u64);
        let mut pending_miss: Option<u64> = None;
        for e in l.iter() {
            match e {
                Err(m) => {
                    let k = m.count.unwrap_or_else(|| panic!("branch {b}: a miss of unknown count"));
                    // Every gap came with the server's death.
                    assert_eq!(m.reason.as_str(), "reconnect", "branch {b}: a miss {m:?} after {told} told missed and {got} received: {summary:#?}");
                    assert!(pending_miss.is_none(), "branch {b}: two misses in a row");
                    pending_miss = Some(k);
                    told += k;
                }
                Ok((v, seq)) => {
                    if let Some(s) = expect_seq {
                        assert_eq!(*seq, s + pending_miss.unwrap_or(0), "branch {b}: a gap of {} told as {pending_miss:?}", seq - s);
                    }
                    if let Some(lv) = last_value {
                        assert!(*v > lv, "branch {b}: order kept, no repeat");
                    }
                    pending_miss = None;
                    expect_seq = Some(seq + 1);
                    last_value = Some(*v);
                    got += 1;
                }
            }
        }
        eprintln!("branch {b}: {got} received, {told} told missed");
    }
    for s in &subs {
        s.stop();
    }
    let lens: Vec<usize> = logs.iter().map(|l| l.lock().unwrap().len()).collect();
    pub_store.channel::<(u32, u64)>("burst").open().unwrap().under(0).publish(&(0, 99_999)).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(lens, logs.iter().map(|l| l.lock().unwrap().len()).collect::<Vec<_>>(), "nothing after stop()");
}

#[derive(serde::Deserialize)]
struct N {
    n: i64,
}

fn count(db: &tinystore::Database, sql: &str) -> i64 {
    db.query::<N>(sql).unwrap()[0].n
}

/// A cluster store with NATS channels whose SQL databases are in `sql`.
fn connect_sql(c: &Cluster, n: &Nats, prefix: &str, sql: &std::path::Path) -> Store {
    Store::connect_with(&address(c, n, prefix), tinystore::ConnectOptions::new().sql_dir(sql).request_timeout(TIMEOUT)).unwrap()
}

/// CHAN-03 on NATS: a transaction's messages are delivered only after its
/// commit, in the order published, to a subscriber of another store; a
/// reader woken by one sees the row it announces; the outbox is empty after.
#[test]
fn chan_03_nats_a_transactions_messages_arrive_after_its_commit_in_order_and_its_rows_are_seen() {
    let (c, n) = shared();
    let sql = common::dir();
    let (a, b) = (connect_sql(&c, &n, "chan03after", sql.path()), connect_sql(&c, &n, "chan03after", sql.path()));
    let db = a.database("d").open().unwrap();
    db.exec("create table t (id integer primary key, v text)").unwrap();
    let reader_db = b.database("d").open().unwrap();
    let events = a.channel::<i64>("c").open().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    let rdb = reader_db.clone();
    let sub = b
        .channel::<i64>("c")
        .open()
        .unwrap()
        .under(1)
        .subscribe(move |m| {
            // The row the message names is there when the message is.
            let rows = count(&rdb, &format!("select count(*) as n from t where id = {}", m.value));
            s.lock().unwrap().push((m.value, m.seq, rows));
        })
        .unwrap();
    let ids = db
        .tx(|tx| -> tinystore::Result<Vec<i64>> {
            let mut ids = Vec::new();
            for v in ["a", "b", "c"] {
                let id = tx.exec(tinystore::sql!("insert into t (v) values (?)", v))?.last_insert_rowid;
                tx.with(&events).under(1).publish(&id)?;
                ids.push(id);
            }
            std::thread::sleep(Duration::from_millis(500));
            assert!(seen.lock().unwrap().is_empty(), "nothing is delivered before the commit");
            Ok(ids)
        })
        .unwrap();
    assert!(common::eventually(10_000, || seen.lock().unwrap().len() == 3), "{:?}", seen.lock().unwrap());
    let got = seen.lock().unwrap().clone();
    assert_eq!(got.iter().map(|x| x.0).collect::<Vec<_>>(), ids, "in the order published");
    assert_eq!(got.iter().map(|x| x.1).collect::<Vec<_>>(), vec![1, 2, 3], "a dense branch sequence");
    assert!(got.iter().all(|x| x.2 == 1), "each reader saw its row: {got:?}");
    assert_eq!(count(&db, "select count(*) as n from _tinystore_outbox"), 0, "published rows leave the outbox");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(seen.lock().unwrap().len(), 3, "nothing twice");
    sub.stop();
}

/// CHAN-03 on NATS: a rollback, an error of the transaction's function and
/// a transaction dropped without commit drop its messages and its rows.
#[test]
fn chan_03_nats_a_rollback_or_an_error_in_the_transaction_drops_its_messages() {
    let (c, n) = shared();
    let sql = common::dir();
    let store = connect_sql(&c, &n, "chan03rollback", sql.path());
    let db = store.database("d").open().unwrap();
    db.exec("create table t (id integer primary key, v text)").unwrap();
    let events = store.channel::<u64>("c").open().unwrap();
    let mut it = events.under(1).messages().unwrap();
    let e = db
        .tx(|tx| -> tinystore::Result<()> {
            tx.exec(tinystore::sql!("insert into t (v) values (?)", "x"))?;
            tx.with(&events).under(1).publish(&1)?;
            Err(tinystore::Error::new(tinystore::ErrorKind::Invalid, "the function failed"))
        })
        .unwrap_err();
    assert_eq!(e.message(), "the function failed");
    let tx = db.begin().unwrap();
    tx.exec("insert into t (v) values ('y')").unwrap();
    tx.with(&events).under(1).publish(&2).unwrap();
    tx.rollback().unwrap();
    {
        let tx = db.begin().unwrap();
        tx.with(&events).under(1).publish(&3).unwrap();
    }
    assert_eq!(count(&db, "select count(*) as n from t"), 0, "rolled back");
    assert_eq!(count(&db, "select count(*) as n from _tinystore_outbox"), 0, "nothing left to publish");
    db.tx(|tx| tx.with(&events).under(1).publish(&4)).unwrap();
    match next(&mut it, 10_000) {
        Some(Delivery::Message(m)) => assert_eq!((m.value, m.seq), (4, 1), "the first message of the branch is the committed one"),
        other => panic!("{other:?}"),
    }
    assert!(next(&mut it, 300).is_none());
}

/// CHAN-03 on NATS: transactions of two stores (two connections to the
/// database, as two processes) on threads at once: the messages arrive in
/// commit order (the order of their rows), each once, with a dense branch
/// sequence.
#[test]
fn chan_03_nats_transactions_of_several_writers_arrive_in_commit_order() {
    let (c, n) = shared();
    let sql = common::dir();
    let stores = [connect_sql(&c, &n, "chan03order", sql.path()), connect_sql(&c, &n, "chan03order", sql.path())];
    let db0 = stores[0].database("d").open().unwrap();
    db0.exec("create table t (id integer primary key, w integer)").unwrap();
    let mut it = stores[0].channel::<u64>("c").open().unwrap().under("all").messages().unwrap();
    let per = 40;
    let threads: Vec<_> = (0..4)
        .map(|w| {
            let s = stores[w % 2].clone();
            std::thread::spawn(move || {
                let db = s.database("d").open().unwrap();
                let events = s.channel::<u64>("c").open().unwrap();
                for _ in 0..per {
                    db.tx(|tx| -> tinystore::Result<()> {
                        let id = tx.exec(tinystore::sql!("insert into t (w) values (?)", w as i64))?.last_insert_rowid;
                        tx.with(&events).under("all").publish(&(id as u64))
                    })
                    .unwrap();
                }
            })
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
    let mut got = Vec::new();
    for k in 0..4 * per {
        match next(&mut it, 10_000) {
            Some(Delivery::Message(m)) => got.push((m.value, m.seq)),
            other => panic!("message {k}: {other:?}"),
        }
    }
    let rows: Vec<i64> = got.iter().map(|x| x.0 as i64).collect();
    assert_eq!(rows, (1..=4 * per as i64).collect::<Vec<_>>(), "commit order");
    assert!(got.windows(2).all(|w| w[1].1 == w[0].1 + 1), "dense");
    assert!(next(&mut it, 300).is_none(), "nothing twice");
}


/// The rows the worker's messages (`{"row": N, ...}` on order/all) name.
fn rows_of(it: &mut tinystore::Messages<serde_json::Value>, ms: u64) -> Vec<i64> {
    let mut out = Vec::new();
    while let Some(d) = it.next_timeout(Duration::from_millis(ms)).unwrap() {
        match d {
            Delivery::Message(m) => out.push(m.value["row"].as_i64().unwrap()),
            Delivery::Missed(m) => panic!("missed {m:?}"),
        }
    }
    out
}

/// Runs `worker tx` on a cluster store until it stops (`mode`: between a
/// commit and its publish, or after the publish before its outbox row is
/// deleted), kills it with SIGKILL, and gives what arrived by then, the
/// row it stopped at, and this process's database, opened before the worker.
type Killed = (Store, tinystore::Database, tinystore::Messages<serde_json::Value>, Vec<i64>, i64);
fn kill_a_worker_at(c: &Cluster, n: &Nats, prefix: &str, sql: &std::path::Path, mode: &[&str]) -> Killed {
    use std::io::BufRead;
    let store = connect_sql(c, n, prefix, sql);
    let db = store.database("order").open().unwrap();
    db.exec("create table tx (id integer primary key, at integer)").unwrap();
    let mut it = store.channel::<serde_json::Value>("order").open().unwrap().under("all").messages().unwrap();
    let address = address(c, n, prefix);
    let mut args = vec!["tx", &address, "5", "3"];
    args.extend_from_slice(mode);
    let mut w = etcd::cluster_worker(&args, sql);
    let mut line = String::new();
    std::io::BufReader::new(w.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let stalled: i64 = line.trim().strip_prefix("stalled ").unwrap_or_else(|| panic!("the worker said {line:?}")).parse().unwrap();
    assert_eq!(unsafe { libc::kill(w.id() as i32, libc::SIGKILL) }, 0);
    w.wait().unwrap();
    let before = rows_of(&mut it, 1000);
    (store, db, it, before, stalled)
}

/// CHAN-03 on NATS across processes: a worker process killed (kill -9)
/// between a transaction's commit and its publish: its row stands, its
/// message is not out; when another process of the store opens the
/// database, the message is published, once, at once.
#[test]
fn chan_03_cluster_a_process_killed_between_commit_and_publish_has_its_messages_published_once_at_the_next_open() {
    let (c, n) = shared();
    let sql = common::dir();
    let (store, _, mut it, before, stalled) = kill_a_worker_at(&c, &n, "chan03kill", sql.path(), &[]);
    assert_eq!(before, vec![1, 2], "the transactions before the one stopped");
    assert_eq!(stalled, 3);
    let t = Instant::now();
    let db = store.database("order").open().unwrap();
    let mut after = Vec::new();
    while after.is_empty() && t.elapsed() < Duration::from_secs(10) {
        after = rows_of(&mut it, 50);
    }
    let took = t.elapsed();
    after.extend(rows_of(&mut it, 500));
    assert_eq!(after, vec![3], "published once, after the opening");
    assert_eq!(count(&db, "select count(*) as n from tx"), 3);
    assert_eq!(count(&db, "select count(*) as n from _tinystore_outbox"), 0);
    eprintln!("chan_03 recovery: the killed process's message arrived {took:?} after the open began");
    assert!(took < Duration::from_secs(2), "at once: {took:?}");
}

/// CHAN-03 on NATS across processes: a worker killed between a commit and
/// its publish, while this process has the database open: this process's
/// next commit (which publishes nothing itself) publishes the message, once.
#[test]
fn chan_03_cluster_a_process_killed_between_commit_and_publish_has_its_messages_published_once_at_the_next_commit() {
    let (c, n) = shared();
    let sql = common::dir();
    let (_store, db, mut it, before, stalled) = kill_a_worker_at(&c, &n, "chan03commit", sql.path(), &[]);
    assert_eq!((before, stalled), (vec![1, 2], 3));
    let t = Instant::now();
    db.tx(|tx| tx.exec("insert into tx (at) values (1)").map(|_| ())).unwrap();
    let took = t.elapsed();
    assert_eq!(rows_of(&mut it, 1000), vec![3], "published once, by the commit");
    assert_eq!(count(&db, "select count(*) as n from _tinystore_outbox"), 0);
    eprintln!("chan_03 recovery: the killed process's message was in the stream when the next commit returned, {took:?} after it began");
}

/// CHAN-03 on NATS across processes: a worker killed after its message is
/// in the stream but before its outbox row is deleted (the publish's
/// acknowledgement lost with it): the next publisher, once the claim of
/// the dead one expired, sends the row again under the same
/// `Nats-Msg-Id`, and the stream drops it: delivered once.
#[test]
fn chan_03_cluster_a_publish_sent_again_after_its_ack_was_lost_is_not_delivered_twice() {
    let (c, n) = shared();
    let sql = common::dir();
    let (store, _, mut it, before, stalled) = kill_a_worker_at(&c, &n, "chan03twice", sql.path(), &["published"]);
    assert_eq!(stalled, 3);
    assert_eq!(before, vec![1, 2, 3], "the stopped one's message got in before it died");
    let t = Instant::now();
    let db = store.database("order").open().unwrap();
    assert!(common::eventually(15_000, || count(&db, "select count(*) as n from _tinystore_outbox") == 0), "the leftover row is dealt with once the claim expired");
    let took = t.elapsed();
    eprintln!("chan_03 recovery behind a live claim: outbox empty {took:?} after the open");
    assert!(took <= tinystore::sql::OUTBOX_CLAIM_TTL + Duration::from_secs(2), "within the claim's ttl: {took:?}");
    assert!(rows_of(&mut it, 1000).is_empty(), "not delivered twice");
    // The next transaction's message follows, with the branch's next sequence.
    let events = store.channel::<serde_json::Value>("order").open().unwrap();
    db.tx(|tx| -> tinystore::Result<()> {
        let r = tx.exec("insert into tx (at) values (0)")?;
        tx.with(&events).under("all").publish(&serde_json::json!({"row": r.last_insert_rowid}))
    })
    .unwrap();
    assert_eq!(rows_of(&mut it, 1000), vec![4]);
}

/// `status` of a cluster store with channels: per branch, its subscribers
/// in every process, what the stream keeps of it, its newest sequence; and
/// the NATS server this process is on.
#[test]
fn chan_02_nats_status_shows_each_branch_its_subscribers_and_what_the_stream_keeps() {
    let (c, n) = shared();
    let (a, b) = (connect(&c, &n, "status"), connect(&c, &n, "status"));
    let ea = a.channel::<u64>("c").open().unwrap();
    let mut it = b.channel::<u64>("c").open().unwrap().under(1).messages().unwrap();
    let _tree = b.channel::<u64>("c").open().unwrap().under("t").recursive().subscribe(|_| {}).unwrap();
    for i in 0..5 {
        ea.under(1).publish(&i).unwrap();
    }
    ea.under("t").under(2).publish(&9).unwrap();
    assert!(matches!(next(&mut it, 5000), Some(Delivery::Message(_))));
    let st = a.status().unwrap();
    let one = st.branches.iter().find(|x| x.channel == "c" && x.branch == vec![Key::from(1)]).unwrap_or_else(|| panic!("{:?}", st.branches));
    assert_eq!((one.subscribers, one.kept_messages, one.published), (1, 5, 5), "{one:?}");
    assert_eq!(one.lag.len(), 1);
    let t = st.branches.iter().find(|x| x.branch == vec![Key::from("t")]).unwrap_or_else(|| panic!("{:?}", st.branches));
    assert_eq!(t.recursive_subscribers, 1, "{t:?}");
    assert!(st.branches.iter().any(|x| x.branch == vec![Key::from("t"), Key::from(2)] && x.kept_messages == 1));
    let v = a.status_json().unwrap();
    assert!(v["cluster"]["nats"]["server"].as_str().is_some_and(|s| s.starts_with("127.0.0.1:")), "{v}");
    assert_eq!(b.status().unwrap().subscriptions, 2);
}

/// A cluster store whose NATS servers do not answer is not opened: the
/// connect fails with `unavailable`, naming the servers.
#[test]
fn store_cluster_nats_servers_down_fail_the_connect_with_unavailable() {
    let c = Cluster::shared();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let t = Instant::now();
    let e = Store::connect_with(&format!("{}?nats=nats://127.0.0.1:{port}", c.address("natsdown")), tinystore::ConnectOptions::new().request_timeout(Duration::from_secs(3)))
        .err()
        .expect("no NATS server there");
    assert_eq!(e.code(), "unavailable", "{e}");
    assert!(e.message().contains(&port.to_string()), "{e}");
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
}
