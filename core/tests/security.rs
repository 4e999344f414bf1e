//! SEC-01 over TCP, and a randomized fuzz of the frame and request decoder
//! (WIRE-01): the server answers or closes only the offending connection,
//! and keeps serving everyone else.

mod common;

use std::io::{Read, Write};
use std::time::Duration;

use tinystore::Store;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

#[test]
fn sec_01_tcp_needs_a_token_and_roles_limit_what_it_may_do() {
    let (store, d) = common::store();
    let port = free_port();
    let addr = format!("tcp:127.0.0.1:{port}");
    let e = store.serve(&addr).unwrap_err();
    assert_eq!(e.code(), "auth", "no tokens file, no TCP: {e}");
    assert!(e.message().contains("tinystore token new"));
    std::fs::write(d.path().join("tokens"), "read readtoken\ndata datatoken\n").unwrap();
    store.serve(&addr).unwrap();
    // SAFETY: the tests of this file do not read TINYSTORE_TOKEN concurrently.
    let connect_with = |token: Option<&str>| {
        unsafe {
            match token {
                Some(t) => std::env::set_var("TINYSTORE_TOKEN", t),
                None => std::env::remove_var("TINYSTORE_TOKEN"),
            }
        }
        Store::connect(&addr)
    };
    assert_eq!(connect_with(None).err().unwrap().code(), "auth");
    let wrong = connect_with(Some("readtokem")).err().unwrap();
    assert_eq!(wrong.code(), "auth");
    assert!(!wrong.message().contains("readtoken"), "a token is never echoed");
    let reader = connect_with(Some("readtoken")).unwrap();
    let events = reader.channel::<u64>("c").open().unwrap();
    let mut it = events.under(1).messages().unwrap();
    assert_eq!(events.under(1).publish(&1).unwrap_err().code(), "auth", "a read token may not publish");
    let writer = connect_with(Some("datatoken")).unwrap();
    writer.channel::<u64>("c").open().unwrap().under(1).publish(&2).unwrap();
    assert!(matches!(it.next_timeout(Duration::from_secs(2)).unwrap(), Some(tinystore::Delivery::Message(m)) if m.value == 2));
    assert_eq!(writer.shutdown_owner().unwrap_err().code(), "auth");
}

/// A small deterministic generator (xorshift), so a failure reproduces.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

const SEEDS: &[&str] = &[
    r#"{"id":1,"op":"publish","channel":"c","branch":[1],"data":{"a":[1,2,"x"]}}"#,
    r#"{"id":2,"op":"subscribe","sub":1,"channel":"c","branch":["1"],"recursive":true}"#,
    r#"{"id":3,"op":"acquire","lock":"l","key":"k","hold":1,"ttl_ms":1000,"wait_ms":50}"#,
    r#"{"id":4,"op":"renew","lease":1,"fence":"18446744073709551617"}"#,
    r#"{"id":5,"op":"release","lease":1}"#,
    r#"{"id":6,"op":"status"}"#,
    r#"{"id":7,"op":"unsubscribe","sub":1}"#,
];

#[test]
fn wire_01_fuzzed_frames_never_hurt_other_clients() {
    let (store, d) = common::store();
    let sock = d.path().join("tinystore.sock");
    let events = store.channel::<u64>("probe").open().unwrap();
    let mut it = events.under(1).messages().unwrap();
    let mut rng = Rng(0x9e3779b97f4a7c15);
    for round in 0..300 {
        let mut s = std::os::unix::net::UnixStream::connect(&sock).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
        let hello = br#"{"id":0,"op":"hello","version":1,"client":"fuzz","session":"f"}"#;
        if rng.below(4) > 0 {
            s.write_all(&(hello.len() as u32).to_be_bytes()).unwrap();
            s.write_all(hello).unwrap();
        }
        for _ in 0..1 + rng.below(6) {
            let mut frame = SEEDS[rng.below(SEEDS.len())].as_bytes().to_vec();
            for _ in 0..rng.below(6) {
                if frame.is_empty() {
                    frame.push(b'{');
                }
                let i = rng.below(frame.len());
                match rng.below(4) {
                    0 => frame[i] = rng.next() as u8,
                    1 => {
                        frame.remove(i);
                    }
                    2 => frame.insert(i, b"{}[]\",:-0123456789eE.nutrfals"[rng.below(29)]),
                    _ => frame.truncate(i.max(1)),
                }
            }
            let len = match rng.below(20) {
                0 => rng.next() as u32,
                1 => frame.len() as u32 + 10,
                _ => frame.len() as u32,
            };
            if s.write_all(&len.to_be_bytes()).and_then(|_| s.write_all(&frame)).is_err() {
                break;
            }
        }
        let _ = s.shutdown(std::net::Shutdown::Write);
        let mut sink = Vec::new();
        let _ = s.read_to_end(&mut sink);
        // Everyone else is still served.
        events.under(1).publish(&(round as u64)).unwrap();
        match it.next_timeout(Duration::from_secs(2)).unwrap() {
            Some(tinystore::Delivery::Message(m)) => assert_eq!(m.value, round as u64),
            other => panic!("round {round}: {other:?}"),
        }
    }
    assert!(store.status().subscriptions >= 1);
}
