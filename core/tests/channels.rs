//! CHAN-01, CHAN-02, CHAN-05, CHAN-06, CHAN-07 in the owning process, and
//! the scenarios C1, C2, C13, C16, C19.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tinystore::channels::{Event, Scope};
use tinystore::{Delivery, Key, Missed, MissedReason, runtime};

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
struct ChatEvent {
    kind: String,
    id: i64,
}

fn ev(id: i64) -> ChatEvent {
    ChatEvent { kind: "message".into(), id }
}

#[test]
fn chan_01_every_message_after_subscribe_arrives_in_order_one_at_a_time() {
    let (store, _d) = common::store();
    let events = store.channel::<ChatEvent>("chat-events").open().unwrap();
    let got = Arc::new(Mutex::new(Vec::new()));
    let busy = Arc::new(AtomicBool::new(false));
    let (g, b) = (got.clone(), busy.clone());
    let sub = events
        .under(7)
        .subscribe(move |m| {
            assert!(!b.swap(true, Ordering::SeqCst), "two handler calls at once");
            g.lock().unwrap().push(m.value.id);
            b.store(false, Ordering::SeqCst);
        })
        .unwrap();
    for i in 0..500 {
        events.under(7).publish(&ev(i)).unwrap();
    }
    assert!(common::eventually(5000, || got.lock().unwrap().len() == 500));
    assert_eq!(*got.lock().unwrap(), (0..500).collect::<Vec<_>>());
    sub.stop();
}

#[test]
fn chan_01_p2_concurrent_publishers_keep_each_own_order() {
    let (store, _d) = common::store();
    let events = store.channel::<(u32, u32)>("c").open().unwrap();
    let mut it = events.under("b").messages().unwrap();
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let e = events.clone();
            std::thread::spawn(move || (0..200).for_each(|i| e.under("b").publish(&(t, i)).unwrap()))
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
    let mut last = [None::<u32>; 4];
    let mut seqs = Vec::new();
    for _ in 0..800 {
        match it.next_timeout(Duration::from_secs(5)).unwrap().unwrap() {
            Delivery::Message(m) => {
                let (t, i) = m.value;
                assert!(last[t as usize].is_none_or(|p| p < i), "publisher {t}'s order kept");
                last[t as usize] = Some(i);
                seqs.push(m.seq);
            }
            Delivery::Missed(m) => panic!("missed {m:?}"),
        }
    }
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "the store's order, no gaps");
}

/// C1 and CHAN-02: a blocked handler, 1,024 + N messages: exactly one miss of
/// N, then the next message, and the subscription lives on. The publisher
/// never waited.
#[test]
fn chan_02_c1_blocked_handler_told_exact_missed_count_then_goes_on() {
    let (store, _d) = common::store();
    let events = store.channel::<ChatEvent>("chat-events").open().unwrap();
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
            l2.lock().unwrap().push(format!("msg {}", m.value.id));
            if m.value.id == 0 {
                fs.store(true, Ordering::SeqCst);
                release_rx.lock().unwrap().recv().unwrap();
            }
        })
        .unwrap();
    events.under(1).publish(&ev(0)).unwrap();
    assert!(common::eventually(2000, || first_seen.load(Ordering::SeqCst)));
    let n = 37;
    let t = Instant::now();
    for i in 1..=(1024 + n) {
        events.under(1).publish(&ev(i)).unwrap();
    }
    assert!(t.elapsed() < Duration::from_secs(2), "publish never waits for the blocked reader");
    release_tx.send(()).unwrap();
    assert!(common::eventually(5000, || log.lock().unwrap().len() == 1 + 1 + 1024));
    let log = log.lock().unwrap();
    assert_eq!(log[0], "msg 0");
    assert_eq!(log[1], format!("missed Some({n}) behind"));
    assert_eq!(log[2], format!("msg {}", n + 1));
    assert_eq!(log.last().unwrap(), &format!("msg {}", 1024 + n));
    assert_eq!(log.iter().filter(|l| l.starts_with("missed")).count(), 1);
    drop(log);
    events.under(1).publish(&ev(9999)).unwrap();
    assert!(common::eventually(2000, || store.status().unwrap().branches.iter().all(|b| b.kept_messages <= 1024)));
    sub.stop();
}

#[test]
fn chan_05_c16_stop_means_stop_even_with_publishing_from_another_thread() {
    let (store, _d) = common::store();
    let events = store.channel::<u64>("c").open().unwrap();
    let stopped = Arc::new(AtomicBool::new(false));
    let late = Arc::new(AtomicU64::new(0));
    let seen = Arc::new(AtomicU64::new(0));
    let (s, l, n) = (stopped.clone(), late.clone(), seen.clone());
    let sub = events
        .under(1)
        .subscribe(move |_| {
            if s.load(Ordering::SeqCst) {
                l.fetch_add(1, Ordering::SeqCst);
            }
            n.fetch_add(1, Ordering::SeqCst);
            std::thread::sleep(Duration::from_micros(50));
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
    assert!(common::eventually(2000, || seen.load(Ordering::SeqCst) > 100));
    sub.stop();
    stopped.store(true, Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(100));
    go.store(false, Ordering::SeqCst);
    publisher.join().unwrap();
    assert_eq!(late.load(Ordering::SeqCst), 0, "a handler call started after stop() returned");
    sub.stop();
}

#[test]
fn chan_05_stop_inside_handler_twice_and_after_close() {
    let (store, _d) = common::store();
    let events = store.channel::<u64>("c").open().unwrap();
    let slot: Arc<Mutex<Option<tinystore::Subscription>>> = Arc::new(Mutex::new(None));
    let calls = Arc::new(AtomicU64::new(0));
    let (s2, c2) = (slot.clone(), calls.clone());
    let sub = events
        .under(1)
        .subscribe(move |_| {
            c2.fetch_add(1, Ordering::SeqCst);
            if let Some(s) = s2.lock().unwrap().as_ref() {
                s.stop();
                s.stop();
            }
        })
        .unwrap();
    *slot.lock().unwrap() = Some(sub);
    for i in 0..10 {
        events.under(1).publish(&i).unwrap();
    }
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(calls.load(Ordering::SeqCst), 1, "stopped from inside its first call");
    store.close();
    slot.lock().unwrap().take().unwrap().stop();
    // Closing the store stops other subscriptions too.
    assert_eq!(events.under(1).publish(&1).unwrap_err().code(), "closed");
}

/// C2: publish one message, then close the publishing store: the subscriber
/// gets it, then a clean end with no spurious miss.
#[test]
fn c2_publish_then_close_delivers_then_ends_cleanly() {
    let (store, _d) = common::store();
    let events = store.channel::<u64>("c").open().unwrap();
    let mut it = events.under(1).messages().unwrap();
    events.under(1).publish(&42).unwrap();
    store.close();
    match it.next() {
        Some(Ok(Delivery::Message(m))) => assert_eq!(m.value, 42),
        other => panic!("expected the message, got {other:?}"),
    }
    assert!(it.next().is_none(), "then a clean end");
}

#[test]
fn chan_06_branches_are_separate_and_7_is_the_same_branch_as_text_7() {
    let (store, _d) = common::store();
    let events = store.channel::<u64>("c").open().unwrap();
    let mut seven = events.under(7).messages().unwrap();
    let mut eight = events.under(8).messages().unwrap();
    let mut nested = events.under(7).under("x").messages().unwrap();
    events.under(8).publish(&8).unwrap();
    events.under("7").publish(&7).unwrap();
    events.under("07").publish(&70).unwrap();
    events.under(7).under("x").publish(&71).unwrap();
    let one = |it: &mut tinystore::Messages<u64>| match it.next_timeout(Duration::from_millis(300)).unwrap() {
        Some(Delivery::Message(m)) => Some((m.value, m.branch.to_vec())),
        _ => None,
    };
    assert_eq!(one(&mut seven), Some((7, vec![Key::from(7)])));
    assert_eq!(one(&mut seven), None, "nothing of 07, 8 or 7/x");
    assert_eq!(one(&mut eight), Some((8, vec![Key::from(8)])));
    assert_eq!(one(&mut eight), None);
    assert_eq!(one(&mut nested), Some((71, vec![Key::from(7), Key::from("x")])));
}

#[test]
fn chan_06_recursive_subscription_gets_branch_and_everything_below_in_order() {
    let (store, _d) = common::store();
    let events = store.channel::<u64>("c").open().unwrap();
    let got = Arc::new(Mutex::new(Vec::new()));
    let g = got.clone();
    let sub = events.under("team").recursive().subscribe(move |m| g.lock().unwrap().push((m.value, m.branch.len()))).unwrap();
    events.under("team").publish(&1).unwrap();
    events.under("team").under(1).publish(&2).unwrap();
    events.under("other").publish(&99).unwrap();
    events.under("team").under(2).under("deep").publish(&3).unwrap();
    assert!(common::eventually(2000, || got.lock().unwrap().len() == 3));
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(*got.lock().unwrap(), vec![(1, 1), (2, 2), (3, 3)]);
    sub.stop();
}

/// A recursive handler is given each message's own branch, whether the
/// branches come in runs (the handler's own copy of a busy branch) or turn
/// about.
#[test]
fn chan_06_recursive_handler_sees_each_messages_own_branch_in_runs_and_in_turns() {
    let (store, _d) = common::store();
    let events = store.channel::<u64>("c").open().unwrap();
    let got = Arc::new(Mutex::new(Vec::new()));
    let g = got.clone();
    let sub = events.under("t").recursive().subscribe(move |m| g.lock().unwrap().push((m.value, m.branch.to_vec()))).unwrap();
    let order = [1, 1, 1, 2, 1, 2, 2, 2, 1];
    for (i, b) in order.iter().enumerate() {
        events.under("t").under(*b).publish(&(i as u64)).unwrap();
    }
    assert!(common::eventually(2000, || got.lock().unwrap().len() == order.len()));
    let want: Vec<_> = order.iter().enumerate().map(|(i, b)| (i as u64, vec![Key::from("t"), Key::from(*b)])).collect();
    assert_eq!(*got.lock().unwrap(), want);
    sub.stop();
}

/// C13 and CHAN-07: 1 MiB + 1 byte is refused on that call only; exactly
/// 1 MiB is accepted; the next small publish works.
#[test]
fn chan_07_c13_message_size_at_the_edge() {
    let (store, _d) = common::store();
    let events = store.channel::<String>("c").open().unwrap();
    let mut it = events.under(1).messages().unwrap();
    let exact = "a".repeat((1 << 20) - 2); // plus two quotes = 1 MiB of JSON
    let over = "a".repeat((1 << 20) - 1);
    let e = events.under(1).publish(&over).unwrap_err();
    assert_eq!(e.code(), "limit");
    assert!(e.message().contains("1 MiB"), "{e}");
    events.under(1).publish(&exact).unwrap();
    events.under(1).publish(&"small".to_owned()).unwrap();
    let mut values = Vec::new();
    for _ in 0..2 {
        if let Some(Ok(Delivery::Message(m))) = it.next() {
            values.push(m.value.len());
        }
    }
    assert_eq!(values, vec![exact.len(), 5], "nothing of the refused one was published");
}

fn raw_sub(store: &tinystore::Store, ch: &str, b: i64) -> tinystore::channels::RawSubscription {
    runtime::block_on(store.subscribe_raw(ch, &[Key::from(b)], Scope::Branch, None)).unwrap()
}

fn pull_missed(sub: &tinystore::channels::RawSubscription) -> Option<u64> {
    match sub.try_next() {
        Some(Event::Missed(m)) => m.count,
        other => panic!("expected a miss, got {other:?}"),
    }
}

#[test]
fn chan_07_branch_log_keeps_newest_1024_messages_or_4_mib() {
    let (store, _d) = common::store();
    let events = store.channel::<String>("c").open().unwrap();
    let sub = raw_sub(&store, "c", 1);
    for i in 0..1100 {
        events.under(1).publish(&i.to_string()).unwrap();
    }
    assert_eq!(pull_missed(&sub), Some(1100 - 1024));
    let sub2 = raw_sub(&store, "c", 2);
    let big = "b".repeat(512 * 1024);
    for _ in 0..10 {
        events.under(2).publish(&big).unwrap();
    }
    let st = store.status().unwrap();
    let b2 = st.branches.iter().find(|b| b.branch == vec![Key::from(2)]).unwrap();
    assert!(b2.kept_bytes <= 4 << 20, "{}", b2.kept_bytes);
    assert_eq!(b2.kept_messages, 7, "4 MiB of 512 KiB messages (plus quotes)");
    assert_eq!(pull_missed(&sub2), Some(3));
}

#[test]
fn chan_07_all_channels_stay_within_64_mib_oldest_leaving_first() {
    let (store, _d) = common::store();
    let events = store.channel::<String>("c").open().unwrap();
    let big = "m".repeat((1 << 20) - 2);
    let subs: Vec<_> = (0..20).map(|b| raw_sub(&store, "c", b)).collect();
    for b in 0..20 {
        for _ in 0..4 {
            events.under(b).publish(&big).unwrap();
        }
    }
    let st = store.status().unwrap();
    assert!(st.channel_bytes <= 64 << 20, "{}", st.channel_bytes);
    assert!(st.channel_bytes > 60 << 20);
    // The oldest branches lost their messages first.
    assert!(pull_missed(&subs[0]).is_some());
    assert!(matches!(subs[19].try_next(), Some(Event::Message(_))));
}

/// CHAN-07 and C19: 10,000 subscriptions, one stuck: the next is refused
/// clearly, and publishing is not slowed by the stuck one.
#[test]
fn chan_07_c19_ten_thousand_subscriptions_then_refused_and_one_stuck_does_not_slow_publish() {
    let (store, _d) = common::store();
    let events = store.channel::<u64>("c").open().unwrap();
    let (block_tx, block_rx) = mpsc::channel::<()>();
    let block_rx = Mutex::new(block_rx);
    let stuck = events.under(0).subscribe(move |_| { let _ = block_rx.lock().unwrap().recv(); }).unwrap();
    let subs: Vec<_> = (1..10_000).map(|b| raw_sub(&store, "c", b % 100)).collect();
    let e = runtime::block_on(store.subscribe_raw("c", &[Key::from(1)], Scope::Branch, None)).err().unwrap();
    assert_eq!(e.code(), "limit");
    assert!(e.message().contains("10000"), "{e}");
    let t = Instant::now();
    for i in 0..2000 {
        events.under(0).publish(&i).unwrap();
    }
    let stuck_rate = t.elapsed();
    assert!(store.status().unwrap().channel_bytes < 64 << 20);
    drop(subs);
    // Freed subscriptions can be taken again.
    let again = raw_sub(&store, "c", 5);
    drop(again);
    drop(block_tx);
    stuck.stop();
    assert!(stuck_rate < Duration::from_secs(2), "{stuck_rate:?}");
}

#[test]
fn chan_02_resume_position_counts_what_was_published_meanwhile() {
    let (store, _d) = common::store();
    let events = store.channel::<u64>("c").open().unwrap();
    let keep = raw_sub(&store, "c", 1);
    let sub = raw_sub(&store, "c", 1);
    events.under(1).publish(&1).unwrap();
    assert!(matches!(sub.try_next(), Some(Event::Message(_))));
    let at = sub.resume_point();
    drop(sub);
    for i in 0..5 {
        events.under(1).publish(&i).unwrap();
    }
    let back = runtime::block_on(store.subscribe_raw("c", &[Key::from(1)], Scope::Branch, Some(at))).unwrap();
    let mut n = 0;
    while let Some(Event::Message(_)) = back.try_next() {
        n += 1;
    }
    assert_eq!(n, 5, "the log still held all five: nothing missed");
    drop(keep);
    let _ = MissedReason::Reconnect;
}

#[test]
fn chan_01_handler_panic_goes_to_on_error_and_subscription_goes_on() {
    let (store, _d) = common::store();
    let events = store.channel::<u64>("c").open().unwrap();
    let errors = Arc::new(Mutex::new(Vec::new()));
    let got = Arc::new(Mutex::new(Vec::new()));
    let (e2, g2) = (errors.clone(), got.clone());
    let sub = events
        .under(1)
        .on_error(move |e| e2.lock().unwrap().push(e.code().to_owned()))
        .subscribe(move |m| {
            if m.value == 2 {
                panic!("bad message");
            }
            g2.lock().unwrap().push(m.value);
        })
        .unwrap();
    for i in 1..=3 {
        events.under(1).publish(&i).unwrap();
    }
    // A message that does not decode as u64 goes to on_error too.
    runtime::block_on(store.publish_raw("c", &[Key::from(1)], b"\"text\"".to_vec().into_boxed_slice())).unwrap();
    events.under(1).publish(&4).unwrap();
    assert!(common::eventually(2000, || got.lock().unwrap().len() == 3));
    assert_eq!(*got.lock().unwrap(), vec![1, 3, 4]);
    assert_eq!(*errors.lock().unwrap(), vec!["internal", "invalid"]);
    sub.stop();
}

#[test]
fn names_channel_name_and_keys_checked() {
    let (store, _d) = common::store();
    let e = store.channel::<u64>("Chat Events").open().err().unwrap();
    assert_eq!(e.code(), "invalid");
    assert!(e.message().contains("chat-events"));
    let events = store.channel::<u64>("c").open().unwrap();
    assert_eq!(events.under("").publish(&1).unwrap_err().code(), "invalid");
    assert_eq!(events.under("k".repeat(1025)).publish(&1).unwrap_err().code(), "invalid");
    events.under("k".repeat(1024)).publish(&1).unwrap();
}

#[test]
fn chan_02_status_shows_each_subscriptions_lag() {
    let (store, _d) = common::store();
    let events = store.channel::<u64>("c").open().unwrap();
    let a = raw_sub(&store, "c", 1);
    let _b = raw_sub(&store, "c", 1);
    for i in 0..5 {
        events.under(1).publish(&i).unwrap();
    }
    a.try_next();
    a.try_next();
    let st = store.status().unwrap();
    let mut lag = st.branches[0].lag.clone();
    lag.sort();
    assert_eq!(lag, vec![3, 5]);
}

/// CHAN-01, CHAN-02: a burst taken at once (`read_ready`, as the delivery
/// task and the server take what is ready) is the same events in the same
/// order as one at a time: the exact missed count first, then what the log
/// kept; in the owning process and over a connection.
#[test]
fn chan_02_read_ready_takes_a_burst_at_once_missed_count_first_then_in_order() {
    let (owner, d) = common::store();
    let client = tinystore::Store::connect(&format!("unix:{}", d.path().join("tinystore.sock").display())).unwrap();
    for (store, over) in [(&owner, 0u64), (&client, 1)] {
        let branch = [Key::from(over)];
        let sub = runtime::block_on(store.subscribe_raw("burst", &branch, Scope::Branch, None)).unwrap();
        let mut none = Vec::new();
        sub.read_ready(&mut none, 10);
        assert!(none.is_empty(), "nothing published yet: {none:?}");
        let n = 1024 + 5;
        for i in 0..n {
            runtime::block_on(store.publish_raw("burst", &branch, i.to_string().into_bytes().into_boxed_slice())).unwrap();
        }
        // Over a connection the inbox keeps 1,024 too; wait until the last came.
        let mut got = Vec::new();
        assert!(common::eventually(5000, || {
            sub.read_ready(&mut got, 2000);
            matches!(got.last(), Some(Event::Message(m)) if *m.data == *(n - 1).to_string().as_bytes())
        }));
        let Event::Missed(m) = &got[0] else { panic!("first: {:?}", got[0]) };
        assert_eq!(m.count, Some(5), "{over}: the exact count first");
        let values: Vec<u64> = got[1..]
            .iter()
            .map(|e| match e {
                Event::Message(m) => std::str::from_utf8(&m.data).unwrap().parse().unwrap(),
                e => panic!("one missed only: {e:?}"),
            })
            .collect();
        assert_eq!(values, (5..n).collect::<Vec<_>>(), "{over}: in order, none twice");
        // Up to `max` in all: what `out` already holds counts.
        runtime::block_on(store.publish_raw("burst", &branch, b"1".to_vec().into_boxed_slice())).unwrap();
        runtime::block_on(store.publish_raw("burst", &branch, b"2".to_vec().into_boxed_slice())).unwrap();
        let mut two = vec![got.pop().unwrap()];
        assert!(common::eventually(2000, || {
            sub.read_ready(&mut two, 2);
            two.len() == 2
        }));
        let mut rest = Vec::new();
        assert!(common::eventually(2000, || {
            sub.read_ready(&mut rest, 10);
            !rest.is_empty()
        }));
        assert_eq!(rest.len(), 1, "{over}: the one left");
    }
}

/// `depth` arrays, each inside the one before, the innermost holding `inner`.
fn nested(depth: usize, inner: serde_json::Value) -> serde_json::Value {
    (0..depth).fold(inner, |v, _| serde_json::Value::Array(vec![v]))
}

/// CHAN-07: a message nests arrays and objects at most 100 deep, so that
/// every binding's decoder reads it (serde_json stops at 127); 101 is refused
/// with `limit` on that call only, nothing of it published. Brackets inside
/// a string are not nesting.
#[test]
fn chan_07_a_message_nested_deeper_than_100_is_refused_and_nothing_is_published() {
    let (store, _d) = common::store();
    let events = store.channel::<serde_json::Value>("c").open().unwrap();
    let mut it = events.under(1).messages().unwrap();
    let e = events.under(1).publish(&nested(101, serde_json::json!(1))).unwrap_err();
    assert_eq!(e.code(), "limit", "{e}");
    assert!(e.message().contains("100 deep"), "{e}");
    let deepest = nested(99, serde_json::json!({ "k": "[".repeat(500) }));
    events.under(1).publish(&deepest).unwrap();
    match it.next() {
        Some(Ok(Delivery::Message(m))) => assert_eq!(m.value, deepest, "the first message is the one accepted"),
        other => panic!("expected the accepted message, got {other:?}"),
    }
}

/// CHAN-05: two handlers that each stop the other's subscription, both
/// running at once, both return (each `stop` waited for the other's handler,
/// which waited in its own `stop`, forever); neither handler is called again.
#[test]
fn chan_05_two_handlers_that_stop_each_other_both_return() {
    let (store, _d) = common::store();
    let events = store.channel::<u64>("c").open().unwrap();
    let subs: Arc<[std::sync::OnceLock<tinystore::Subscription>; 2]> = Arc::new([std::sync::OnceLock::new(), std::sync::OnceLock::new()]);
    let both_running = Arc::new(std::sync::Barrier::new(2));
    let calls = Arc::new(AtomicU64::new(0));
    let (returned_tx, returned) = mpsc::channel();
    for me in 0..2 {
        let (others, both_running, calls, returned_tx) = (subs.clone(), both_running.clone(), calls.clone(), returned_tx.clone());
        let sub = events
            .under(me as i64)
            .subscribe(move |_| {
                calls.fetch_add(1, Ordering::SeqCst);
                both_running.wait();
                others[1 - me].get().expect("both subscribed before the first publish").stop();
                returned_tx.send(me).unwrap();
            })
            .unwrap();
        assert!(subs[me].set(sub).is_ok());
    }
    events.under(0).publish(&1).unwrap();
    events.under(1).publish(&1).unwrap();
    let mut done: Vec<usize> = (0..2).filter_map(|_| returned.recv_timeout(Duration::from_secs(5)).ok()).collect();
    done.sort();
    assert_eq!(done, vec![0, 1], "each handler's stop of the other returned");
    events.under(0).publish(&2).unwrap();
    events.under(1).publish(&2).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(calls.load(Ordering::SeqCst), 2, "neither handler was called after the other stopped it");
    subs[0].get().unwrap().stop();
    subs[1].get().unwrap().stop();
}
