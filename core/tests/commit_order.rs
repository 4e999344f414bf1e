//! CHAN-03 across processes: transactions of several processes that publish
//! to one branch are delivered in commit (rowid) order, and a process that
//! stops between its commit and its publish delays the others by at most
//! the bound (`tinystore::limits::TX_ORDER_BOUND`).

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tinystore::{Delivery, Store};

fn worker(args: &[&str]) -> Child {
    let bin = Path::new(env!("CARGO_BIN_EXE_tinystore")).parent().unwrap().join("examples/worker");
    Command::new(bin).args(args).stdout(Stdio::piped()).spawn().expect("the worker example: run the whole `cargo test -p tinystore`, which builds examples")
}

fn now_us() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_micros() as u64
}

#[derive(serde::Deserialize)]
struct Row {
    row: i64,
    at_us: u64,
}

/// The owner (this process) with the table the workers write.
fn owner() -> (Store, tempfile::TempDir, PathBuf) {
    let d = common::dir();
    let store = Store::open(d.path()).unwrap();
    let db = store.database("order").open().unwrap();
    db.exec("create table if not exists tx (id integer primary key, at integer)").unwrap();
    let p = d.path().to_path_buf();
    (store, d, p)
}

/// Reads `want` messages (or until `quiet` passes with none): rowids and
/// the delay from publish call to delivery, in µs.
fn collect(it: &mut tinystore::Messages<serde_json::Value>, want: usize, quiet: Duration) -> Vec<(i64, u64)> {
    let mut got = Vec::new();
    while got.len() < want {
        match it.next_timeout(quiet) {
            Ok(Some(Delivery::Message(m))) => {
                let r: Row = serde_json::from_value(m.value).unwrap();
                got.push((r.row, now_us().saturating_sub(r.at_us)));
            }
            Ok(Some(Delivery::Missed(m))) => panic!("missed {m:?}: the reader keeps up, nothing may be missed"),
            _ => break,
        }
    }
    got
}

fn steps_back(rows: &[i64]) -> usize {
    rows.windows(2).filter(|w| w[1] < w[0]).count()
}

/// 8 processes × 1,000 transactions, each publishing its row's rowid to
/// one branch: delivered in rowid order, none lost.
#[test]
fn chan_03_eight_processes_deliver_in_commit_order() {
    let (store, _d, dir) = owner();
    let events = store.channel::<serde_json::Value>("order").open().unwrap();
    let mut it = events.under("all").messages().unwrap();
    let kids: Vec<Child> = (0..8).map(|_| worker(&["tx", dir.to_str().unwrap(), "1000"])).collect();
    let got = collect(&mut it, 8000, Duration::from_secs(20));
    for k in kids {
        assert!(k.wait_with_output().unwrap().status.success());
    }
    let rows: Vec<i64> = got.iter().map(|g| g.0).collect();
    let back = steps_back(&rows);
    eprintln!("{} delivered, {back} out of commit order", rows.len());
    assert_eq!(back, 0, "delivery order is commit (rowid) order across processes");
    assert_eq!(rows, (1..=8000).collect::<Vec<_>>(), "every committed row's message arrives once");
}

/// Runs 3 workers of `n` transactions beside one that stops between the
/// commit and the publish of its 5th; `kill` kills it -9 as soon as it
/// stopped, else it stays frozen (its connection open) until the end.
/// Returns the rows delivered, the stopped row, and the largest delay.
fn with_a_stopped_process(kill: bool, n: usize) -> (Vec<i64>, i64, u64) {
    let (store, _d, dir) = owner();
    let events = store.channel::<serde_json::Value>("order").open().unwrap();
    let mut it = events.under("all").messages().unwrap();
    let mut stopper = worker(&["tx", dir.to_str().unwrap(), "10", "5"]);
    let mut line = String::new();
    BufReader::new(stopper.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let stalled: i64 = line.trim().strip_prefix("stalled ").expect("the worker says where it stopped").parse().unwrap();
    let kids: Vec<Child> = (0..3).map(|_| worker(&["tx", dir.to_str().unwrap(), &n.to_string()])).collect();
    if kill {
        stopper.kill().unwrap();
        stopper.wait().unwrap();
    }
    let got = collect(&mut it, 4 + 3 * n, Duration::from_secs(10));
    for k in kids {
        assert!(k.wait_with_output().unwrap().status.success());
    }
    let _ = stopper.kill();
    let _ = stopper.wait();
    let worst = got.iter().filter(|g| g.0 > stalled).map(|g| g.1).max().unwrap_or(0);
    (got.iter().map(|g| g.0).collect(), stalled, worst)
}

/// A process killed (-9) between its commit and its publish: its message
/// is lost (it never left the process), the others' arrive in commit order,
/// delayed far less than the bound (its connection's end gives its ticket up).
#[test]
fn chan_03_a_process_killed_between_commit_and_publish_delays_nobody_past_the_bound() {
    let (rows, stalled, worst) = with_a_stopped_process(true, 200);
    eprintln!("stalled row {stalled}; worst delay of a later message {worst} µs");
    assert_eq!(steps_back(&rows), 0, "commit order");
    assert_eq!(rows.len(), 4 + 600, "every message but the killed process's arrives");
    assert!(!rows.contains(&stalled), "the killed process's message never left it");
    assert!(worst < tinystore::limits::TX_ORDER_BOUND.as_micros() as u64, "the others waited {worst} µs");
}

/// A process frozen between its commit and its publish (its connection
/// open): the others wait for it at most the bound, then go on in order.
#[test]
fn chan_03_a_process_frozen_between_commit_and_publish_delays_others_at_most_the_bound() {
    let (rows, stalled, worst) = with_a_stopped_process(false, 200);
    eprintln!("stalled row {stalled}; worst delay of a later message {worst} µs");
    assert_eq!(steps_back(&rows), 0, "commit order");
    assert_eq!(rows.len(), 4 + 600);
    let bound = tinystore::limits::TX_ORDER_BOUND.as_micros() as u64;
    assert!(worst < bound + 1_000_000, "the others waited {worst} µs, the bound is {bound} µs");
}

mod raw {
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;
    use std::path::Path;
    use std::time::Duration;

    use serde_json::{Value, json};

    pub struct Conn(UnixStream);

    impl Conn {
        pub fn open(dir: &Path, version: u32) -> (Conn, Value) {
            let s = UnixStream::connect(dir.join("tinystore.sock")).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut c = Conn(s);
            let hello = c.call(json!({"id": 0, "op": "hello", "version": version, "client": "raw", "session": format!("raw{version}")}));
            (c, hello)
        }
        pub fn send(&mut self, v: Value) {
            let body = serde_json::to_vec(&v).unwrap();
            self.0.write_all(&(body.len() as u32).to_be_bytes()).unwrap();
            self.0.write_all(&body).unwrap();
        }
        pub fn recv(&mut self) -> Value {
            let mut len = [0u8; 4];
            self.0.read_exact(&mut len).unwrap();
            let mut buf = vec![0u8; u32::from_be_bytes(len) as usize];
            self.0.read_exact(&mut buf).unwrap();
            serde_json::from_slice(&buf).unwrap()
        }
        pub fn call(&mut self, v: Value) -> Value {
            self.send(v);
            self.recv()
        }
    }
}

/// A ticket's messages that come after the bound are refused with
/// `timeout` (nobody's order changes); a plain publish behind an open
/// ticket waits its turn, so one connection's publishes keep their order.
#[test]
fn chan_03_late_messages_are_refused_and_plain_publishes_wait_their_turn() {
    use serde_json::json;
    let (store, _d, dir) = owner();
    let events = store.channel::<i64>("order").open().unwrap();
    let mut it = events.under("all").messages().unwrap();
    let (mut a, _) = raw::Conn::open(&dir, 3);
    let (mut b, _) = raw::Conn::open(&dir, 3);
    let t1 = a.call(json!({"id": 1, "op": "ticket", "channels": ["order"]}))["ok"]["ticket"].as_u64().unwrap();
    let t2 = b.call(json!({"id": 1, "op": "ticket", "channels": ["order"]}))["ok"]["ticket"].as_u64().unwrap();
    assert!(t2 > t1);
    b.call(json!({"id": 2, "op": "publish", "channel": "order", "branch": ["all"], "data": 2, "ticket": t2}));
    assert!(b.call(json!({"id": 3, "op": "ticket_end", "ticket": t2, "deliver": true}))["ok"].is_null());
    // Plain, from the same connection: behind its own ticket's message.
    assert!(b.call(json!({"id": 4, "op": "publish", "channel": "order", "branch": ["all"], "data": 3}))["ok"].is_null());
    assert!(it.next_timeout(Duration::from_millis(300)).unwrap().is_none(), "held behind ticket {t1}");
    a.call(json!({"id": 2, "op": "publish", "channel": "order", "branch": ["all"], "data": 1, "ticket": t1}));
    assert!(a.call(json!({"id": 3, "op": "ticket_end", "ticket": t1, "deliver": true}))["ok"].is_null());
    let got: Vec<i64> = (0..3)
        .map(|_| match it.next_timeout(Duration::from_secs(2)).unwrap() {
            Some(Delivery::Message(m)) => m.value,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(got, [1, 2, 3], "ticket order, then the plain publish");

    // Past the bound: given up, the later one goes on, the late one is refused.
    let t3 = a.call(json!({"id": 4, "op": "ticket", "channels": ["order"]}))["ok"]["ticket"].as_u64().unwrap();
    let t4 = b.call(json!({"id": 5, "op": "ticket", "channels": ["order"]}))["ok"]["ticket"].as_u64().unwrap();
    b.call(json!({"id": 6, "op": "publish", "channel": "order", "branch": ["all"], "data": 5, "ticket": t4}));
    let started = std::time::Instant::now();
    b.call(json!({"id": 7, "op": "ticket_end", "ticket": t4, "deliver": true}));
    match it.next_timeout(Duration::from_secs(5)).unwrap() {
        Some(Delivery::Message(m)) => assert_eq!(m.value, 5),
        other => panic!("{other:?}"),
    }
    let waited = started.elapsed();
    assert!(waited < tinystore::limits::TX_ORDER_BOUND + Duration::from_millis(500), "waited {waited:?}");
    a.call(json!({"id": 5, "op": "publish", "channel": "order", "branch": ["all"], "data": 4, "ticket": t3}));
    let late = a.call(json!({"id": 6, "op": "ticket_end", "ticket": t3, "deliver": true}));
    assert_eq!(late["err"]["code"], "timeout", "{late}");
    assert!(late["err"]["message"].as_str().unwrap().contains("dropped"), "{late}");
    assert!(it.next_timeout(Duration::from_millis(300)).unwrap().is_none(), "the late message is not delivered");
}

/// A version 2 client (before tickets) and a version 3 client (before
/// bursts) are still served; version 1 and a newer client are told to use
/// one version.
#[test]
fn chan_03_wire_a_version_2_or_3_client_keeps_working() {
    use serde_json::json;
    let (store, _d, dir) = owner();
    let events = store.channel::<i64>("order").open().unwrap();
    let mut it = events.under("all").messages().unwrap();
    let (mut old, hello) = raw::Conn::open(&dir, 2);
    assert!(hello["ok"]["epoch"].is_u64(), "{hello}");
    assert!(old.call(json!({"id": 1, "op": "publish", "channel": "order", "branch": ["all"], "data": 7}))["ok"].is_null());
    assert!(matches!(it.next_timeout(Duration::from_secs(2)).unwrap(), Some(Delivery::Message(m)) if m.value == 7));
    let (_, refused) = raw::Conn::open(&dir, 1);
    assert_eq!(refused["err"]["code"], "protocol", "{refused}");
    assert!(refused["err"]["message"].as_str().unwrap().contains("versions 2 to 4"), "{refused}");
    // A version 3 client (before bursts) is served as before.
    let (mut three, hello) = raw::Conn::open(&dir, 3);
    assert_eq!(hello["ok"]["version"], 4, "{hello}");
    assert!(three.call(json!({"id": 1, "op": "publish", "channel": "order", "branch": ["all"], "data": 8}))["ok"].is_null());
    assert!(matches!(it.next_timeout(Duration::from_secs(2)).unwrap(), Some(Delivery::Message(m)) if m.value == 8));
    // A client newer than this owner is told to use one version.
    let (_, newer) = raw::Conn::open(&dir, 5);
    assert_eq!(newer["err"]["code"], "protocol", "{newer}");
    assert!(newer["err"]["message"].as_str().unwrap().contains("use the same tinystore version on both sides"), "{newer}");
}
