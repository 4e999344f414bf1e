//! STORE-02: calls made while a connection is re-established wait for it
//! (up to the request timeout) and go out in order; past that they fail
//! with `unavailable`, never `closed` (which means only "you closed it").

mod common;

use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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

/// A hold made while the owner is down waits for it and then holds.
#[test]
fn store_02_lock_03_a_hold_during_an_owner_restart_waits_and_holds() {
    let d = common::dir();
    let server = Server::start(d.path());
    let store = Store::connect(&address(d.path())).unwrap();
    let lock = store.lock("l").open().unwrap();
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

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
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
