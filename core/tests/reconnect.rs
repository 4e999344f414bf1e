//! STORE-02: calls made while a connection is re-established wait for it
//! (up to the request timeout) and go out in order; past that they fail
//! with `unavailable`, never `closed` (which means only "you closed it").

mod common;

use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::free_port;
use tinystore::{ConnectOptions, Delivery, ErrorKind, Missed, MissedReason, Store};

struct Server(Child);

impl Server {
    fn start(dir: &Path) -> Server {
        let child = Command::new(env!("CARGO_BIN_EXE_tinystore")).arg("serve").arg(dir).stderr(Stdio::null()).spawn().unwrap();
        let sock = dir.join("tinystore.sock");
        assert!(common::eventually(5000, || UnixStream::connect(&sock).is_ok()), "the server listens");
        Server(child)
    }
    fn kill_9(mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn address(dir: &Path) -> String {
    format!("unix:{}", dir.join("tinystore.sock").display())
}

/// The owner is killed and started again while a loop of 1,000 publishes
/// runs: every publish succeeds, and a subscriber hears `reconnect` and
/// then all 1,000 in order.
#[test]
fn store_02_chan_04_publishes_during_an_owner_restart_all_succeed_in_order() {
    let d = common::dir();
    let server = Server::start(d.path());
    let store = Store::connect(&address(d.path())).unwrap();
    let events = store.channel::<u64>("c").open().unwrap();
    let mut it = events.under(1).messages().unwrap();
    events.under(1).publish(&u64::MAX).unwrap();
    assert!(matches!(it.next_timeout(Duration::from_secs(3)).unwrap(), Some(Delivery::Message(m)) if m.value == u64::MAX));
    server.kill_9();
    let publisher = {
        let events = events.clone();
        std::thread::spawn(move || (0..1000u64).map(|i| events.under(1).publish(&i)).collect::<Vec<_>>())
    };
    std::thread::sleep(Duration::from_millis(300));
    let _server2 = Server::start(d.path());
    let outcomes = publisher.join().unwrap();
    let failed: Vec<_> = outcomes.iter().enumerate().filter_map(|(i, r)| r.as_ref().err().map(|e| (i, e.clone()))).collect();
    assert!(failed.is_empty(), "{} of 1000 publishes failed, the first: {:?}", failed.len(), failed.first());
    match it.next_timeout(Duration::from_secs(5)).unwrap() {
        Some(Delivery::Missed(m)) => assert_eq!(m, Missed { count: None, reason: MissedReason::Reconnect }),
        other => panic!("expected a reconnect miss, got {other:?}"),
    }
    for want in 0..1000u64 {
        match it.next_timeout(Duration::from_secs(5)).unwrap() {
            Some(Delivery::Message(m)) => assert_eq!(m.value, want, "out of order"),
            other => panic!("expected message {want}, got {other:?}"),
        }
    }
}

/// A hold made while the owner is down waits for it and then holds (after
/// the new owner's grace of the lock's ttl, 1 s: STORE-01).
#[test]
fn store_02_lock_03_a_hold_during_an_owner_restart_waits_and_holds() {
    let d = common::dir();
    let server = Server::start(d.path());
    let store = Store::connect(&address(d.path())).unwrap();
    let lock = store.lock("l").ttl(Duration::from_secs(1)).open().unwrap();
    lock.hold("k", |_| -> tinystore::Result<()> { Ok(()) }).unwrap();
    server.kill_9();
    let holder = {
        let lock = lock.clone();
        std::thread::spawn(move || lock.hold("k", |l| -> tinystore::Result<u64> { Ok(l.fence().epoch()) }))
    };
    std::thread::sleep(Duration::from_millis(300));
    let _server2 = Server::start(d.path());
    holder.join().unwrap().expect("the hold waited for the owner to come back");
    assert_eq!(store.status().unwrap().subscriptions, 0);
}

/// An owner that does not come back: calls fail with `unavailable`, saying
/// since when, within the request timeout (not at once, not `closed`).
#[test]
fn store_02_an_unreachable_store_fails_calls_with_unavailable_within_the_timeout() {
    let d = common::dir();
    let server = Server::start(d.path());
    let timeout = Duration::from_millis(700);
    let store = Store::connect_with(&address(d.path()), ConnectOptions::new().request_timeout(timeout)).unwrap();
    let events = store.channel::<u64>("c").open().unwrap();
    let lock = store.lock("l").wait(Duration::from_millis(100)).open().unwrap();
    events.under(1).publish(&1).unwrap();
    server.kill_9();
    let t = Instant::now();
    let e = events.under(1).publish(&2).unwrap_err();
    let took = t.elapsed();
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    assert!(e.message().contains("could not be reached") && e.message().contains("since"), "{e}");
    assert!(took >= timeout - Duration::from_millis(100) && took < timeout + Duration::from_millis(800), "failed after {took:?}");
    let t = Instant::now();
    let e = lock.hold("k", |_| -> tinystore::Result<()> { Ok(()) }).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    assert!(t.elapsed() < timeout + Duration::from_millis(800), "the hold failed after {:?}", t.elapsed());
    let e = store.status().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    store.close();
    let e = events.under(1).publish(&3).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Closed, "after close: {e}");
}

/// STORE-01: the owner served `tcp:` too and is killed; the process that
/// takes the store over serves that address again, so a TCP client
/// reconnects to it (before, only the Unix socket came back).
#[test]
fn store_01_a_takeover_serves_the_tcp_listener_the_old_owner_served() {
    let d = common::dir();
    std::fs::write(d.path().join("tokens"), "data datatoken\n").unwrap();
    let port = free_port();
    let tcp = format!("tcp:127.0.0.1:{port}");
    let child = Command::new(env!("CARGO_BIN_EXE_tinystore")).arg("serve").arg(d.path()).arg("--listen").arg(&tcp).stderr(Stdio::null()).spawn().unwrap();
    assert!(common::eventually(5000, || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()), "the owner listens on {tcp}");
    let server = Server(child);
    let remote = Store::connect_with(&tcp, ConnectOptions::new().token("datatoken")).unwrap();
    let next = Store::open(d.path()).unwrap();
    assert!(!next.is_owner());
    server.kill_9();
    // `next` takes the store over; the TCP client finds it where it was.
    let lock = remote.lock("l").open().unwrap();
    lock.hold("k", |_| -> tinystore::Result<()> { Ok(()) }).expect("the TCP client reached the new owner");
    let connected = Store::connect_with(&tcp, ConnectOptions::new().token("datatoken")).unwrap();
    connected.status().unwrap();
    drop(next);
}

/// STORE-01, LOCK-05: A holds K over a connection; the owner is killed
/// (kill -9) and another process owns the store; B asks for K at once. A
/// re-presents its lease: it keeps its fence, is never told lost while it
/// renews, and B gets K only after A let go, with a larger fence.
#[test]
fn store_01_lock_05_a_lease_outlives_the_owners_death_and_the_new_owner_waits_for_it() {
    use std::sync::{Arc, Mutex};
    let d = common::dir();
    let server = Server::start(d.path());
    let a = Store::connect(&address(d.path())).unwrap();
    let a_lock = a.lock("l").ttl(Duration::from_secs(2)).open().unwrap();
    let (held_tx, held_rx) = std::sync::mpsc::channel();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let released_at = Arc::new(Mutex::new(None));
    let holder = {
        let released_at = released_at.clone();
        std::thread::spawn(move || {
            a_lock.hold("K", |lease| -> tinystore::Result<(tinystore::Fence, bool)> {
                let fence = lease.fence();
                held_tx.send(fence).unwrap();
                go_rx.recv().unwrap();
                let lost = lease.is_lost();
                *released_at.lock().unwrap() = Some(Instant::now());
                Ok((fence, lost))
            })
        })
    };
    let fence_a = held_rx.recv_timeout(Duration::from_secs(5)).unwrap();
    server.kill_9();
    let _server3 = Server::start(d.path());
    let b = Store::connect(&address(d.path())).unwrap();
    let b_lock = b.lock("l").wait(Duration::from_secs(10)).open().unwrap();
    let asker = std::thread::spawn(move || b_lock.hold("K", |lease| -> tinystore::Result<(tinystore::Fence, Instant)> { Ok((lease.fence(), Instant::now())) }));
    // A keeps K past its ttl of 2 s through the new owner, renewing.
    std::thread::sleep(Duration::from_millis(3000));
    assert!(!asker.is_finished(), "B was granted K while A still held it");
    let status = b.status().unwrap();
    let k = status.locks.iter().find(|k| k.lock == "l").expect("K is held");
    assert_eq!(k.holders.len(), 1);
    assert_eq!(k.holders[0].fence, Some(fence_a), "re-presented with its fence unchanged");
    go_tx.send(()).unwrap();
    let (fence, lost) = holder.join().unwrap().expect("A's hold ended without a lost lease");
    assert_eq!(fence, fence_a);
    assert!(!lost, "A was told lost while it renewed");
    let (fence_b, granted_at) = asker.join().unwrap().expect("B gets K once A let go");
    assert!(granted_at >= released_at.lock().unwrap().unwrap(), "B was granted before A let go");
    assert!(fence_b > fence_a && fence_b.epoch() > fence_a.epoch(), "{fence_b} after {fence_a}");
}

/// STORE-01: the holder dies with the owner; the new owner gives K to B
/// only once the holder's ttl has run out (it could not know the holder
/// was dead), and a lock nobody held over a connection is free at once.
#[test]
fn store_01_lock_05_a_dead_holders_key_is_given_after_its_ttl_and_other_locks_at_once() {
    let d = common::dir();
    let server = Server::start(d.path());
    let mut cli = Command::new(env!("CARGO_BIN_EXE_tinystore"))
        .args(["lock", d.path().to_str().unwrap(), "hold", "l", "K", "--ttl", "3s", "--", "sh", "-c", "echo held; exec sleep 1000"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(cli.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    assert_eq!(line.trim(), "held");
    let _ = cli.kill();
    let _ = cli.wait();
    server.kill_9();
    let started = Instant::now();
    let _server3 = Server::start(d.path());
    let b = Store::connect(&address(d.path())).unwrap();
    let other = b.lock("other").open().unwrap();
    let t = Instant::now();
    other.hold("K", |_| -> tinystore::Result<()> { Ok(()) }).unwrap();
    assert!(t.elapsed() < Duration::from_millis(500), "a lock no connection held is free at once: {:?}", t.elapsed());
    let lock = b.lock("l").wait(Duration::from_secs(10)).open().unwrap();
    assert!(lock.try_hold("K", |_| -> tinystore::Result<()> { Ok(()) }).unwrap().is_none(), "not free while the dead holder's ttl may run");
    lock.hold("K", |_| -> tinystore::Result<()> { Ok(()) }).unwrap();
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(2900) && waited < Duration::from_secs(6), "granted {waited:?} after the new owner started");
}

/// STORE-01, LOCK-05 with a takeover: A, a process that opened the store
/// and connected to its owner, holds K; the owner is killed and A itself
/// takes the store over; A's lease goes on (re-presented to its own new
/// engine) and B, who opens the store too, gets K only after A let go.
#[test]
fn store_01_lock_05_a_holder_that_takes_the_store_over_keeps_its_lease() {
    a_holder_keeps_its_lease_when_the_owner_goes("killed", |server, _| server.kill_9());
}

/// STORE-01, LOCK-05 when the owner closes cleanly (`tinystore stop`, as
/// a deploy stops a process): a lease held over a connection is kept as
/// after the owner's death. A, connected, holds K; the owner closes; A
/// takes the store over and keeps its lease, B does not get K while A
/// holds it, and gets it once A let go, with a larger fence.
#[test]
fn store_01_lock_05_a_lease_held_over_a_connection_outlives_the_owners_clean_close() {
    a_holder_keeps_its_lease_when_the_owner_goes("closed cleanly", |_server, dir| {
        let stopped = Command::new(env!("CARGO_BIN_EXE_tinystore")).arg("stop").arg(dir).stderr(Stdio::null()).status().unwrap();
        assert!(stopped.success(), "tinystore stop: {stopped}");
    });
}

/// A, connected to `tinystore serve`, holds K with a ttl of 1 s; `end`
/// makes the owner go (`how`); A takes the store over, keeps K past its
/// ttl and its fence, and B gets K after A let go, with a larger fence.
fn a_holder_keeps_its_lease_when_the_owner_goes(how: &str, end: impl FnOnce(Server, &Path)) {
    let d = common::dir();
    let server = Server::start(d.path());
    let a = Store::open(d.path()).unwrap();
    assert!(!a.is_owner());
    let a_lock = a.lock("l").ttl(Duration::from_secs(1)).open().unwrap();
    let (held_tx, held_rx) = std::sync::mpsc::channel();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let holder = std::thread::spawn(move || {
        a_lock.hold("K", |lease| -> tinystore::Result<(tinystore::Fence, bool)> {
            held_tx.send(lease.fence()).unwrap();
            go_rx.recv().unwrap();
            Ok((lease.fence(), lease.is_lost()))
        })
    });
    let fence_a = held_rx.recv_timeout(Duration::from_secs(5)).unwrap();
    end(server, d.path());
    // A takes over (its client finds nobody); B then connects to A's engine.
    assert!(
        common::eventually(5000, || std::fs::read_to_string(d.path().join("owner.lock")).is_ok_and(|p| p.trim() == std::process::id().to_string())),
        "A took the store over after the owner {how}"
    );
    let b = Store::open(d.path()).unwrap();
    let b_lock = b.lock("l").wait(Duration::from_secs(10)).open().unwrap();
    assert!(b_lock.try_hold("K", |_| -> tinystore::Result<()> { Ok(()) }).unwrap().is_none(), "K is A's after the owner {how}");
    std::thread::sleep(Duration::from_millis(1500)); // past A's ttl and the grace
    assert!(b_lock.try_hold("K", |_| -> tinystore::Result<()> { Ok(()) }).unwrap().is_none(), "K is still A's after the grace");
    go_tx.send(()).unwrap();
    let (fence, lost) = holder.join().unwrap().expect("A's hold ended without a lost lease");
    assert_eq!(fence, fence_a);
    assert!(!lost, "A was told lost after the owner {how}");
    let fence_b = b_lock.hold("K", |l| -> tinystore::Result<tinystore::Fence> { Ok(l.fence()) }).unwrap();
    assert!(fence_b > fence_a && fence_b.epoch() > fence_a.epoch());
}

/// LOCK-03 and STORE-02: a hold waiting 4 s for a key that stays held
/// across an owner restart times out after about 4 s in all, and its error
/// names the wait it was given, not what was left of it when the hold was
/// sent again to the new owner.
#[test]
fn lock_03_store_02_a_wait_across_an_owner_restart_times_out_naming_the_wait_it_was_given() {
    let d = common::dir();
    let server = Server::start(d.path());
    let a = Store::connect(&address(d.path())).unwrap();
    let a_lock = a.lock("l").ttl(Duration::from_secs(5)).open().unwrap();
    let (held_tx, held_rx) = std::sync::mpsc::channel();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let holder = std::thread::spawn(move || {
        a_lock.hold("K", |_| -> tinystore::Result<()> {
            held_tx.send(()).unwrap();
            go_rx.recv().unwrap();
            Ok(())
        })
    });
    held_rx.recv_timeout(Duration::from_secs(5)).unwrap();
    let b = Store::connect(&address(d.path())).unwrap();
    let b_lock = b.lock("l").wait(Duration::from_secs(4)).open().unwrap();
    let started = Instant::now();
    let waiter = std::thread::spawn(move || b_lock.hold("K", |_| -> tinystore::Result<()> { Ok(()) }));
    std::thread::sleep(Duration::from_millis(1500));
    server.kill_9();
    let _server2 = Server::start(d.path());
    let e = waiter.join().unwrap().expect_err("K stayed held by A, re-presented to the new owner");
    let waited = started.elapsed();
    go_tx.send(()).unwrap();
    holder.join().unwrap().unwrap();
    assert_eq!(e.kind(), ErrorKind::Timeout, "{e}");
    assert!(waited >= Duration::from_millis(3900) && waited < Duration::from_secs(7), "timed out after {waited:?}");
    assert!(e.to_string().contains("wait of 4s"), "names the wait it was given: {e}");
}
