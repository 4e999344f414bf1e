//! Multi-process tests: the real `tinystore serve` program and client
//! processes (the `worker` example) sharing one store.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use tinystore::locks::{Holder, Kind, Terms};
use tinystore::{Delivery, Fence, Missed, MissedReason, Store, runtime, sql};

fn bin_dir() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_tinystore")).parent().unwrap().to_path_buf()
}

fn worker(args: &[&str]) -> Child {
    Command::new(bin_dir().join("examples/worker")).args(args).stdout(Stdio::piped()).spawn().expect("the worker example: run the whole `cargo test -p tinystore`, which builds examples")
}

struct Server(Child);

impl Server {
    fn start(dir: &Path) -> Server {
        let child = Command::new(env!("CARGO_BIN_EXE_tinystore")).arg("serve").arg(dir).stderr(Stdio::null()).spawn().unwrap();
        let sock = dir.join("tinystore.sock");
        assert!(common::eventually(5000, || UnixStream::connect(&sock).is_ok()), "the server listens");
        Server(child)
    }
    fn pid(&self) -> i32 {
        self.0.id() as i32
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn signal(pid: i32, sig: i32) {
    assert_eq!(unsafe { libc::kill(pid, sig) }, 0);
}

fn line(r: &mut BufReader<ChildStdout>) -> String {
    let mut s = String::new();
    r.read_line(&mut s).unwrap();
    s.trim().to_owned()
}

fn connect(dir: &Path) -> Store {
    Store::connect(&format!("unix:{}", dir.join("tinystore.sock").display())).unwrap()
}

/// LOCK-01 across four processes: each adds one to a counter in SQL 50
/// times under the lock; the counter ends at 200 and no fence repeats.
#[test]
fn lock_01_four_processes_increment_a_sql_counter() {
    let d = common::dir();
    let _server = Server::start(d.path());
    let store = connect(d.path());
    let db = store.database("counter").open().unwrap();
    db.exec("create table counter (v integer)").unwrap();
    db.exec("insert into counter values (0)").unwrap();
    let kids: Vec<Child> = (0..4).map(|_| worker(&["counter", d.path().to_str().unwrap(), "50"])).collect();
    let mut fences: Vec<Fence> = Vec::new();
    for k in kids {
        let out = k.wait_with_output().unwrap();
        assert!(out.status.success());
        let mine: Vec<Fence> = String::from_utf8(out.stdout).unwrap().lines().map(|l| l.parse().unwrap()).collect();
        assert!(mine.windows(2).all(|w| w[0] < w[1]), "one process's fences grow");
        fences.extend(mine);
    }
    #[derive(serde::Deserialize)]
    struct V {
        v: i64,
    }
    assert_eq!(db.query::<V>("select v from counter").unwrap()[0].v, 200);
    fences.sort();
    fences.dedup();
    assert_eq!(fences.len(), 200, "every lease had its own fence");
}

/// LOCK-05 and FENCE-02 across processes: a holder frozen (SIGSTOP) past
/// its ttl loses the key to another, whose fence is larger; when it wakes,
/// its fence-checked write changes no row and its hold ends lost.
#[test]
fn lock_05_fence_02_frozen_holder_loses_key_and_its_late_write_is_refused() {
    let d = common::dir();
    let _server = Server::start(d.path());
    let store = connect(d.path());
    let db = store.database("chat").open().unwrap();
    db.exec("create table chats (id integer primary key, summary text, summary_fence text not null default '')").unwrap();
    db.exec("insert into chats (id) values (7)").unwrap();
    let mut a = worker(&["hold", d.path().to_str().unwrap(), "1000", "7"]);
    let mut out = BufReader::new(a.stdout.take().unwrap());
    let fa: Fence = line(&mut out).strip_prefix("fence ").unwrap().parse().unwrap();
    signal(a.id() as i32, libc::SIGSTOP);
    let lock = store.lock("summaries").ttl(std::time::Duration::from_secs(1)).wait(std::time::Duration::from_secs(5)).open().unwrap();
    let t = Instant::now();
    let fb = lock
        .hold(7, |lease| -> tinystore::Result<Fence> {
            let fence = lease.fence().padded();
            let done = db.exec(sql!("update chats set summary = ?, summary_fence = ? where id = ? and summary_fence < ?", "by B", &fence, 7, &fence))?;
            assert_eq!(done.changes, 1);
            Ok(lease.fence())
        })
        .unwrap();
    assert!(fb > fa);
    assert!(t.elapsed() < Duration::from_millis(2500), "the key came free within the ttl");
    signal(a.id() as i32, libc::SIGCONT);
    let rest: Vec<String> = out.lines().map(Result::unwrap).collect();
    assert_eq!(rest, vec!["changes 0".to_owned(), "error lost".to_owned()]);
    assert_eq!(a.wait().unwrap().code(), Some(4));
    #[derive(serde::Deserialize)]
    struct S {
        summary: String,
    }
    assert_eq!(db.query::<S>("select summary from chats where id = 7").unwrap()[0].summary, "by B");
}

/// LOCK-02, CHAN-04, STORE-01: the server is killed with SIGKILL and a new
/// one starts: subscribers hear `reconnect` with an unknown count, and the
/// next fences are larger than every fence given before.
#[test]
fn lock_02_chan_04_kill_9_of_server_then_restart() {
    let d = common::dir();
    let server = Server::start(d.path());
    let store = connect(d.path());
    // A ttl of 1 s: the new owner waits that out for the key (STORE-01).
    let lock = store.lock("l").ttl(Duration::from_secs(1)).open().unwrap();
    let f1 = lock.hold("k", |l| -> tinystore::Result<Fence> { Ok(l.fence()) }).unwrap();
    let mut it = store.channel::<u64>("c").open().unwrap().under(1).messages().unwrap();
    signal(server.pid(), libc::SIGKILL);
    drop(server);
    let _server2 = Server::start(d.path());
    match it.next_timeout(Duration::from_secs(5)).unwrap() {
        Some(Delivery::Missed(m)) => assert_eq!(m, Missed { count: None, reason: MissedReason::Reconnect }),
        other => panic!("expected a reconnect miss, got {other:?}"),
    }
    let f2 = lock.hold("k", |l| -> tinystore::Result<Fence> { Ok(l.fence()) }).unwrap();
    assert!(f2 > f1 && f2.epoch() > f1.epoch());
    assert!(common::eventually(3000, || store.status().unwrap().subscriptions == 1));
    store.channel::<u64>("c").open().unwrap().under(1).publish(&3).unwrap();
    assert!(matches!(it.next_timeout(Duration::from_secs(3)).unwrap(), Some(Delivery::Message(m)) if m.value == 3));
}

/// C5: a connected subscriber stops reading (SIGSTOP). Publishing well past
/// 8 MiB never blocks, the server's memory stays bounded, and when the reader
/// resumes it is told exactly what it missed.
#[test]
fn c5_a_reader_that_stops_reading_never_slows_publishers_and_gets_exact_count() {
    let d = common::dir();
    let server = Server::start(d.path());
    let store = connect(d.path());
    let mut r = worker(&["listen", d.path().to_str().unwrap(), "c"]);
    let mut out = BufReader::new(r.stdout.take().unwrap());
    assert_eq!(line(&mut out), "listening");
    assert!(common::eventually(3000, || store.status().unwrap().subscriptions == 1));
    signal(r.id() as i32, libc::SIGSTOP);
    let events = store.channel::<String>("c").open().unwrap();
    let payload = "x".repeat(1000);
    let total = 24_000u64; // 24 MB
    let t = Instant::now();
    for _ in 0..total {
        events.under(1).publish(&payload).unwrap();
    }
    let took = t.elapsed();
    let rss_kb: u64 = std::fs::read_to_string(format!("/proc/{}/status", server.pid()))
        .unwrap()
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap();
    assert!(rss_kb < 150_000, "the server's memory stays bounded: {rss_kb} kB");
    assert!(took < Duration::from_secs(30), "publishing never waited for the reader: {took:?}");
    signal(r.id() as i32, libc::SIGCONT);
    let (mut got, mut missed) = (0u64, 0u64);
    let end = Instant::now() + Duration::from_secs(20);
    while got + missed < total && Instant::now() < end {
        let l = line(&mut out);
        if l.starts_with("msg") {
            got += 1;
        } else if let Some(rest) = l.strip_prefix("missed Some(") {
            missed += rest.split(')').next().unwrap().parse::<u64>().unwrap();
        } else {
            panic!("unexpected line {l:?}");
        }
    }
    assert_eq!(got + missed, total, "every message is either delivered or counted as missed");
    assert!(missed > 0 && got >= 1024);
    let _ = r.kill();
    r.wait().unwrap();
}

fn raw_conn(dir: &Path) -> UnixStream {
    let s = UnixStream::connect(dir.join("tinystore.sock")).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    s
}

fn send(s: &mut UnixStream, json: &str) {
    s.write_all(&(json.len() as u32).to_be_bytes()).unwrap();
    s.write_all(json.as_bytes()).unwrap();
}

fn recv(s: &mut UnixStream) -> Option<serde_json::Value> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len).ok()?;
    let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
    s.read_exact(&mut body).ok()?;
    serde_json::from_slice(&body).ok()
}

const HELLO: &str = r#"{"id":0,"op":"hello","version":3,"client":"test","session":"s1"}"#;

/// WIRE-01: malformed, truncated, oversized and unknown frames, bad names,
/// negative ttls and wrong types get a clear error or close only their own
/// connection; the server keeps serving, and nothing held or published is lost.
#[test]
fn wire_01_bad_input_gets_clear_errors_and_hurts_nobody_else() {
    let d = common::dir();
    let server = Server::start(d.path());
    let store = connect(d.path());
    let lock = store.lock_raw("l", Kind::Lock).unwrap();
    let held = runtime::block_on(lock.acquire("k".into(), Holder::unique(), Terms { ttl: Some(Duration::from_secs(30)), max_hold: None }, Duration::from_secs(1))).unwrap();
    let mut it = store.channel::<u64>("c").open().unwrap().under(1).messages().unwrap();

    // Requests before hello, unknown ops, missing fields, bad names, wrong types.
    let mut s = raw_conn(d.path());
    send(&mut s, r#"{"id":1,"op":"publish","channel":"c","data":1}"#);
    assert!(recv(&mut s).unwrap()["err"]["message"].as_str().unwrap().contains("hello"));
    send(&mut s, HELLO);
    assert!(recv(&mut s).unwrap()["ok"]["epoch"].is_u64());
    let cases = [
        (r#"{"id":2,"op":"frobnicate"}"#, "unknown op"),
        (r#"{"id":3,"op":"publish","data":1}"#, "channel"),
        (r#"{"id":4,"op":"publish","channel":"Bad Name","data":1}"#, "chat-events"),
        (r#"{"id":5,"op":"acquire","lock":"l","key":"k","hold":1,"ttl_ms":-5,"wait_ms":0}"#, "out of shape"),
        (r#"{"id":6,"op":"acquire","lock":"l","key":"k","hold":1,"ttl_ms":5,"wait_ms":0}"#, "ttl"),
        (r#"{"id":7,"op":"subscribe","sub":"one","channel":"c"}"#, "out of shape"),
        (r#"{"id":8,"op":"publish","channel":"c","data":1,"extra":true}"#, "out of shape"),
        (r#"{"id":9,"op":"release","lease":999999}"#, "not held"),
    ];
    for (req, says) in cases {
        send(&mut s, req);
        let a = recv(&mut s).unwrap();
        let msg = a["err"]["message"].as_str().unwrap_or_default();
        assert!(msg.contains(says), "{req} -> {a}");
    }
    // The connection still works after all that.
    send(&mut s, r#"{"id":10,"op":"publish","channel":"c","branch":[1],"data":41}"#);
    assert!(recv(&mut s).unwrap()["ok"].is_null());

    // Garbage closes that connection only.
    let mut g = raw_conn(d.path());
    send(&mut g, "this is not json");
    let a = recv(&mut g).unwrap();
    assert_eq!(a["err"]["code"], "protocol");
    assert!(recv(&mut g).is_none(), "then the connection is closed");
    // An oversized frame, and a frame cut short.
    let mut o = raw_conn(d.path());
    o.write_all(&(64u32 << 20).to_be_bytes()).unwrap();
    assert!(recv(&mut o).unwrap()["err"]["message"].as_str().unwrap().contains("over the limit"));
    let mut t = raw_conn(d.path());
    t.write_all(&100u32.to_be_bytes()).unwrap();
    t.write_all(b"{\"id\":").unwrap();
    drop(t);

    // Everyone else is served; what was held and published is intact.
    store.channel::<u64>("c").open().unwrap().under(1).publish(&42).unwrap();
    let mut seen = Vec::new();
    while let Ok(Some(Delivery::Message(m))) = it.next_timeout(Duration::from_millis(500)) {
        seen.push(m.value);
    }
    assert_eq!(seen, vec![41, 42]);
    assert!(!held.is_lost());
    let st = store.status().unwrap();
    assert_eq!(st.locks.len(), 1);
    assert_eq!(st.locks[0].holders[0].fence, held.fence());
    assert_eq!(st.pid, server.0.id());
}

/// L1: a waiter frozen past its ttl never runs, and leaves the line: once A
/// lets go, C's try_hold succeeds at once with a fence above A's.
#[test]
fn l1_frozen_waiter_never_runs_and_the_key_is_free_for_others() {
    let d = common::dir();
    let _server = Server::start(d.path());
    let store = connect(d.path());
    let raw = store.lock_raw("l", Kind::Lock).unwrap();
    let terms = Terms { ttl: Some(Duration::from_secs(1)), max_hold: None };
    let a = runtime::block_on(raw.acquire("k".into(), Holder::unique(), terms, Duration::from_secs(1))).unwrap();
    let fa = a.fence().unwrap();
    let mut b = worker(&["wait", d.path().to_str().unwrap(), "1000", "k"]);
    let mut out = BufReader::new(b.stdout.take().unwrap());
    assert_eq!(line(&mut out), "waiting");
    assert!(common::eventually(3000, || store.status().unwrap().locks.first().is_some_and(|k| k.waiters == 1)));
    signal(b.id() as i32, libc::SIGSTOP);
    std::thread::sleep(Duration::from_millis(2000));
    a.release().unwrap();
    let t = Instant::now();
    let mut c = None;
    assert!(common::eventually(500, || {
        c = runtime::block_on(raw.try_acquire("k".into(), Holder::unique(), terms)).unwrap();
        c.is_some()
    }));
    assert!(t.elapsed() < Duration::from_millis(500));
    assert!(c.as_ref().unwrap().fence().unwrap() > fa);
    signal(b.id() as i32, libc::SIGCONT);
    drop(c);
    let _ = b.kill();
    b.wait().unwrap();
    let rest: Vec<String> = out.lines().map_while(Result::ok).collect();
    assert!(!rest.iter().any(|l| l.starts_with("ran")), "B's function never ran: {rest:?}");
}

/// L5: SIGKILL the process holding K: K is free within the ttl, and nothing
/// keeps renewing it.
#[test]
fn l5_killed_holder_frees_the_key_within_its_ttl() {
    let d = common::dir();
    let _server = Server::start(d.path());
    let store = connect(d.path());
    let db = store.database("chat").open().unwrap();
    db.exec("create table chats (id integer primary key, summary text, summary_fence text not null default '')").unwrap();
    let mut a = worker(&["hold", d.path().to_str().unwrap(), "1000", "7"]);
    let mut out = BufReader::new(a.stdout.take().unwrap());
    assert!(line(&mut out).starts_with("fence "));
    a.kill().unwrap();
    a.wait().unwrap();
    let t = Instant::now();
    let lock = store.lock("summaries").ttl(Duration::from_secs(1)).wait(Duration::from_secs(5)).open().unwrap();
    lock.hold(7, |_| -> tinystore::Result<()> { Ok(()) }).unwrap();
    assert!(t.elapsed() < Duration::from_millis(1500), "{:?}", t.elapsed());
}

/// LOCK-01 with the CLI: SIGTERM to `tinystore lock ... hold` stops its
/// command before the lease goes, so two commands never run under one key.
#[test]
fn lock_01_cli_hold_stops_its_command_on_sigterm() {
    let d = common::dir();
    let _server = Server::start(d.path());
    let mut cli = Command::new(env!("CARGO_BIN_EXE_tinystore"))
        .args(["lock", d.path().to_str().unwrap(), "hold", "jobs", "9", "--", "sh", "-c", "echo $$; exec sleep 1000"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(cli.stdout.take().unwrap());
    let pid: i32 = line(&mut out).parse().unwrap();
    signal(cli.id() as i32, libc::SIGTERM);
    let status = cli.wait().unwrap();
    assert_eq!(status.code(), Some(128 + libc::SIGTERM));
    assert!(common::eventually(2000, || unsafe { libc::kill(pid, 0) } != 0), "the command was stopped with the CLI");
    let store = connect(d.path());
    let lock = store.lock("jobs").wait(Duration::from_secs(3)).open().unwrap();
    lock.hold(9, |_| -> tinystore::Result<()> { Ok(()) }).unwrap();
}

/// STORE-01 and LOCK-03 with the owner frozen (SIGSTOP): a connected call
/// fails with `timeout` once the request timeout passes, instead of hanging
/// its caller for as long as the owner is frozen; after the owner wakes the
/// same client works again.
#[test]
fn store_01_lock_03_calls_to_a_frozen_owner_fail_with_timeout_then_work_again() {
    use tinystore::{ConnectOptions, ErrorKind};
    let d = common::dir();
    let server = Server::start(d.path());
    let address = format!("unix:{}", d.path().join("tinystore.sock").display());
    let store = Store::connect_with(&address, ConnectOptions::new().request_timeout(Duration::from_millis(600))).unwrap();
    let events = store.channel::<u64>("c").open().unwrap();
    events.under(1).publish(&1).unwrap();
    signal(server.pid(), libc::SIGSTOP);
    // A stop signal takes effect asynchronously: wait until it has.
    let stat = format!("/proc/{}/stat", server.pid());
    assert!(common::eventually(2000, || std::fs::read_to_string(&stat).is_ok_and(|s| s.split(") ").nth(1).is_some_and(|r| r.starts_with('T')))));
    let t = Instant::now();
    let e = events.under(1).publish(&2).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Timeout, "{e}");
    assert!(e.message().contains("did not answer"), "{e}");
    let took = t.elapsed();
    assert!(took >= Duration::from_millis(600) && took < Duration::from_secs(3), "failed after {took:?}");
    let lock = store.lock("l").wait(Duration::from_millis(200)).open();
    // Making the handle asks the store too: either it or the hold times out.
    let e = match lock {
        Err(e) => e,
        Ok(lock) => lock.hold("k", |_| -> tinystore::Result<()> { Ok(()) }).unwrap_err(),
    };
    assert_eq!(e.kind(), ErrorKind::Timeout, "{e}");
    signal(server.pid(), libc::SIGCONT);
    events.under(1).publish(&3).unwrap();
    let lock = store.lock("l").open().unwrap();
    lock.hold("k", |_| -> tinystore::Result<()> { Ok(()) }).unwrap();
}

/// STORE-01: after a kill -9, the new owner waits out the longest ttl it
/// granted over a connection (2 s here), not the ttl a waiter asked for in
/// line (20 s), which no lease ever had.
#[test]
fn store_01_a_new_owner_waits_out_the_longest_ttl_granted_not_one_a_waiter_asked_for() {
    let d = common::dir();
    let server = Server::start(d.path());
    let (holder, waiter) = (connect(d.path()), connect(d.path()));
    let held = holder.lock("l").ttl(Duration::from_secs(2)).open().unwrap();
    let (in_hold, let_go) = (std::sync::mpsc::channel(), std::sync::mpsc::channel::<()>());
    let a = std::thread::spawn(move || {
        held.hold("k", |_| -> tinystore::Result<()> {
            in_hold.0.send(()).unwrap();
            let_go.1.recv().unwrap();
            Ok(())
        })
    });
    in_hold.1.recv().unwrap();
    let lock = waiter.lock("l").ttl(Duration::from_secs(20)).wait(Duration::from_secs(40)).open().unwrap();
    let b = std::thread::spawn(move || (lock.hold("k", |_| -> tinystore::Result<()> { Ok(()) }), Instant::now()));
    std::thread::sleep(Duration::from_millis(300));
    signal(server.pid(), libc::SIGKILL);
    let killed = Instant::now();
    drop(server);
    let _server2 = Server::start(d.path());
    let_go.0.send(()).unwrap();
    let (got, at) = b.join().unwrap();
    got.unwrap();
    assert!(at - killed < Duration::from_secs(8), "the waiter got the key {:?} after the kill", at - killed);
    let _ = a.join().unwrap();
}

/// LOCK-01 and LOCK-06 with the CLI: when the lease is lost (maxHold) or
/// the CLI is told to stop, every process the command started is stopped
/// too, not only the command itself, before the key can go to another.
#[test]
fn lock_01_lock_06_cli_hold_stops_every_process_of_its_command() {
    let d = common::dir();
    let _server = Server::start(d.path());
    // The command's shell starts a loop in a subshell and waits for it.
    let script = "(while true; do sleep 0.05; done) & echo $!; wait";
    for how in ["lost", "sigterm"] {
        let mut args = vec!["lock", d.path().to_str().unwrap(), "hold", "jobs", "9"];
        if how == "lost" {
            args.extend(["--max-hold", "1s"]);
        }
        args.extend(["--", "sh", "-c", script]);
        let mut cli = Command::new(env!("CARGO_BIN_EXE_tinystore")).args(&args).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().unwrap();
        let mut out = BufReader::new(cli.stdout.take().unwrap());
        let loop_pid: i32 = line(&mut out).parse().unwrap();
        if how == "sigterm" {
            signal(cli.id() as i32, libc::SIGTERM);
        }
        let status = cli.wait().unwrap();
        assert_eq!(status.code(), Some(if how == "lost" { 4 } else { 128 + libc::SIGTERM }), "{how}");
        let gone = || std::fs::read_to_string(format!("/proc/{loop_pid}/stat")).map_or(true, |s| s.split(") ").nth(1).is_some_and(|r| r.starts_with('Z')));
        assert!(common::eventually(500, gone), "{how}: the command's subshell {loop_pid} outlived the CLI");
    }
}

/// LOCK-03 with the owner frozen (SIGSTOP) past a waiter's ttl: the waiter
/// was not silent (its keepalives wait unread in the owner's socket), so
/// when the key comes free after the owner wakes it goes to that waiter,
/// not past it with an error blaming the waiter's process.
#[test]
fn lock_03_a_waiter_is_not_passed_over_for_its_owners_freeze() {
    let d = common::dir();
    let server = Server::start(d.path());
    let holder = connect(d.path());
    let waiter = connect(d.path());
    let ttl = Duration::from_secs(1);
    let held = holder.lock("l").ttl(ttl).open().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let a = std::thread::spawn(move || {
        // Lost while the owner is frozen: its renewals go unanswered.
        held.hold("k", |_| -> tinystore::Result<()> {
            tx.send(()).unwrap();
            std::thread::sleep(Duration::from_millis(4000));
            Ok(())
        })
    });
    rx.recv().unwrap();
    let lock = waiter.lock("l").ttl(ttl).wait(Duration::from_secs(20)).open().unwrap();
    let b = std::thread::spawn(move || lock.hold("k", |lease| -> tinystore::Result<Fence> { Ok(lease.fence()) }));
    std::thread::sleep(Duration::from_millis(300));
    signal(server.pid(), libc::SIGSTOP);
    std::thread::sleep(Duration::from_millis(3000));
    signal(server.pid(), libc::SIGCONT);
    let got = b.join().unwrap();
    assert!(got.is_ok(), "the waiter was passed over: {}", got.unwrap_err());
    assert_eq!(a.join().unwrap().unwrap_err().code(), "lost");
}

/// A release the client does not wait for (`quiet`) takes effect and is not
/// answered, not even with an error: the client has nothing to read (and
/// no wake-up) for it.
#[test]
fn wire_01_lock_03_a_quiet_release_lets_go_and_is_not_answered() {
    let d = common::dir();
    let _server = Server::start(d.path());
    let mut s = raw_conn(d.path());
    send(&mut s, HELLO);
    assert!(recv(&mut s).unwrap()["ok"]["epoch"].is_u64());
    let acquire = r#"{"id":2,"op":"acquire","lock":"q","key":"k","hold":1,"ttl_ms":30000,"wait_ms":0}"#;
    send(&mut s, acquire);
    let lease = recv(&mut s).unwrap()["ok"]["lease"].as_u64().expect("the key was free");
    send(&mut s, &format!(r#"{{"id":3,"op":"release","lease":{lease},"quiet":true}}"#));
    send(&mut s, r#"{"id":4,"op":"release","lease":999999,"quiet":true}"#);
    send(&mut s, r#"{"id":5,"op":"ping"}"#);
    assert_eq!(recv(&mut s).unwrap()["id"], 5, "the quiet releases got no answer");
    // It was let go: the key is free for another hold.
    send(&mut s, &acquire.replace(r#""id":2"#, r#""id":6"#).replace(r#""hold":1"#, r#""hold":2"#));
    let a = recv(&mut s).unwrap();
    assert_eq!(a["id"], 6);
    assert!(a["ok"]["lease"].is_u64(), "{a}");
}

/// CHAN-01 from the command line: `channels publish` takes any JSON value,
/// a negative number too (not taken for an option).
#[test]
fn chan_01_the_cli_publishes_a_negative_number() {
    let d = common::dir();
    let _server = Server::start(d.path());
    let store = connect(d.path());
    let mut it = store.channel::<f64>("c").open().unwrap().under(1).messages().unwrap();
    for json in ["-1", "-0.5e3"] {
        let out = Command::new(env!("CARGO_BIN_EXE_tinystore"))
            .args(["channels", "publish", d.path().to_str().unwrap(), "c", json, "--under", "1"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{json}: {}", String::from_utf8_lossy(&out.stderr));
    }
    for want in [-1.0, -500.0] {
        assert!(matches!(it.next_timeout(Duration::from_secs(5)).unwrap(), Some(Delivery::Message(m)) if m.value == want));
    }
}

/// CHAN-01 and CHAN-07 with the CLI: `-` reads the message from standard
/// input, so one up to the 1 MiB limit goes (a command line holds 128 KiB).
#[test]
fn chan_01_chan_07_the_cli_publishes_a_message_read_from_standard_input() {
    let d = common::dir();
    let _server = Server::start(d.path());
    let store = connect(d.path());
    let mut it = store.channel::<String>("c").open().unwrap().under(1).messages().unwrap();
    let big = "x".repeat(600 << 10);
    let mut cli = Command::new(env!("CARGO_BIN_EXE_tinystore"))
        .args(["channels", "publish", d.path().to_str().unwrap(), "c", "-", "--under", "1"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    cli.stdin.take().unwrap().write_all(format!("\"{big}\"\n").as_bytes()).unwrap();
    let out = cli.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(matches!(it.next_timeout(Duration::from_secs(5)).unwrap(), Some(Delivery::Message(m)) if m.value == big));
}

/// STORE-01: `open` of a store whose owner is frozen (SIGSTOP) fails within
/// its 5 s, saying which process owns it, that it did not serve this one,
/// and what to do, not "connect to it" (which `open` just tried).
#[test]
fn store_01_open_of_a_store_whose_owner_is_frozen_says_it_did_not_serve_and_what_to_do() {
    let d = tempfile::tempdir().unwrap();
    let server = Server::start(d.path());
    signal(server.pid(), libc::SIGSTOP);
    let start = std::time::Instant::now();
    let e = Store::open(d.path()).err().expect("an owner that never answers");
    signal(server.pid(), libc::SIGCONT);
    assert!(start.elapsed() < std::time::Duration::from_secs(12), "open took {:?}", start.elapsed());
    let m = e.message();
    assert!(m.contains(&format!("pid {}", server.pid())) && m.contains("did not serve this process") && m.contains("stop it"), "{m}");
    assert!(!m.contains("connect to it"), "{m}");
}
