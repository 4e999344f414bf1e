//! SEC-01 over TCP, and a randomized fuzz of the frame and request decoder
//! (WIRE-01): the server answers or closes only the offending connection,
//! and keeps serving everyone else.

mod common;

use std::io::{Read, Write};
use std::time::Duration;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::free_port;
use tinystore::{ConnectOptions, Delivery, Store};

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

/// The tokens file is read again when it changed: a token made with
/// `tinystore token new` while the store serves connects at once, and one
/// taken out of the file is refused from the next connection on.
#[test]
fn sec_01_a_token_added_or_removed_while_serving_counts_from_the_next_connection() {
    let (store, d) = common::store();
    let addr = format!("tcp:127.0.0.1:{}", free_port());
    let tokens = d.path().join("tokens");
    std::fs::write(&tokens, "data datatoken\n").unwrap();
    store.serve(&addr).unwrap();
    let with = |t: &str| Store::connect_with(&addr, ConnectOptions::new().token(t));
    assert_eq!(with("newtoken").err().unwrap().code(), "auth", "not in the file yet");
    std::fs::write(&tokens, "data datatoken\ndata newtoken\n").unwrap();
    let new = with("newtoken").expect("a token added while serving");
    new.channel::<u64>("c").open().unwrap().under(1).publish(&1).unwrap();
    std::fs::write(&tokens, "data newtoken\n").unwrap();
    assert_eq!(with("datatoken").err().unwrap().code(), "auth", "a token taken out of the file");
    with("newtoken").unwrap();
    new.channel::<u64>("c").open().unwrap().under(1).publish(&2).expect("a connection made before goes on");
}

/// Test certificates made at test time: a CA, a certificate it signed for
/// localhost and 127.0.0.1 with its key, and an unrelated self-signed one.
struct Pki {
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
    other_ca: PathBuf,
}

fn pki(dir: &Path) -> Pki {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(DnType::CommonName, "tinystore test CA");
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap().signed_by(&key, &issuer).unwrap();
    let other = rcgen::generate_simple_self_signed(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
    let p = Pki { ca: dir.join("ca.pem"), cert: dir.join("cert.pem"), key: dir.join("key.pem"), other_ca: dir.join("other-ca.pem") };
    std::fs::write(&p.ca, ca_cert.pem()).unwrap();
    std::fs::write(&p.cert, cert.pem()).unwrap();
    std::fs::write(&p.key, key.serialize_pem()).unwrap();
    std::fs::write(&p.other_ca, other.cert.pem()).unwrap();
    p
}

/// An owned store serving `tls:127.0.0.1:PORT` with tokens `read readtoken`
/// and `data datatoken`; gives the port.
fn tls_store() -> (Store, tempfile::TempDir, Pki, u16) {
    let (store, d) = common::store();
    std::fs::write(d.path().join("tokens"), "read readtoken\ndata datatoken\n").unwrap();
    let certs = d.path().join("certs");
    std::fs::create_dir(&certs).unwrap();
    let pki = pki(&certs);
    let port = free_port();
    store.serve_tls(&format!("tls:127.0.0.1:{port}"), &pki.cert, &pki.key).unwrap();
    (store, d, pki, port)
}

fn next_value(it: &mut tinystore::Messages<u64>) -> u64 {
    match it.next_timeout(Duration::from_secs(5)).unwrap() {
        Some(Delivery::Message(m)) => m.value,
        other => panic!("expected a message, got {other:?}"),
    }
}

#[test]
fn sec_01_tls_clients_with_the_ca_and_a_token_publish_subscribe_and_hold() {
    let (store, _d, pki, port) = tls_store();
    let opts = || ConnectOptions::new().token("datatoken").ca_file(&pki.ca);
    // By IP and by name: the certificate lists both.
    let a = Store::connect_with(&format!("tls:127.0.0.1:{port}"), opts()).unwrap();
    let b = Store::connect_with(&format!("tls:localhost:{port}"), opts()).unwrap();
    assert!(!a.is_owner());
    assert_eq!(a.epoch(), store.epoch());

    let mut it = a.channel::<u64>("c").open().unwrap().under(1).messages().unwrap();
    let from_b = b.channel::<u64>("c").open().unwrap();
    // Within a subscription's log (1,024 messages), so nothing is missed.
    for i in 0..1000u64 {
        from_b.under(1).publish(&i).unwrap();
    }
    for i in 0..1000u64 {
        assert_eq!(next_value(&mut it), i, "in order, none missed, over TLS");
    }
    // The owner publishes too, and a message near the 1 MiB limit passes
    // the writer task's queue (256 KiB) in pieces.
    store.channel::<u64>("c").open().unwrap().under(1).publish(&7).unwrap();
    assert_eq!(next_value(&mut it), 7);
    let mut big_it = a.channel::<String>("big").open().unwrap().under(1).messages().unwrap();
    let big = "x".repeat(900 * 1024);
    for _ in 0..3 {
        b.channel::<String>("big").open().unwrap().under(1).publish(&big).unwrap();
    }
    for _ in 0..3 {
        match big_it.next_timeout(Duration::from_secs(5)).unwrap() {
            Some(Delivery::Message(m)) => assert_eq!(m.value, big),
            other => panic!("{other:?}"),
        }
    }

    let lock = a.lock("jobs").open().unwrap();
    let fence = lock.hold(3, |lease| -> tinystore::Result<_> { Ok(lease.fence()) }).unwrap();
    let again = b.lock("jobs").open().unwrap().hold(3, |lease| -> tinystore::Result<_> { Ok(lease.fence()) }).unwrap();
    assert!(again > fence, "fences grow across clients over TLS");
    let conns = store.status_json().unwrap()["connections"].clone();
    assert!(conns.as_array().unwrap().iter().any(|c| c["address"].as_str().unwrap().starts_with("tls:127.0.0.1:")), "{conns}");
}

#[test]
fn sec_01_tls_refuses_a_store_the_client_cannot_check() {
    let (_store, _d, pki, port) = tls_store();
    let addr = format!("tls:127.0.0.1:{port}");
    let e = Store::connect_with(&addr, ConnectOptions::new().token("datatoken")).err().expect("no CA, no connection");
    assert_eq!(e.code(), "invalid", "{e}");
    assert!(e.message().contains("TINYSTORE_CA"), "says what to set: {e}");

    let e = Store::connect_with(&addr, ConnectOptions::new().token("datatoken").ca_file(&pki.other_ca)).err().expect("another CA");
    assert_eq!(e.code(), "auth", "{e}");
    assert!(e.message().contains("does not trust") && e.message().contains("TINYSTORE_CA"), "{e}");

    let e = Store::connect_with(&addr, ConnectOptions::new().token("datatoken").ca_file(pki.ca.with_file_name("missing.pem"))).err().unwrap();
    assert_eq!(e.code(), "io", "{e}");
    assert!(e.message().contains("missing.pem"), "{e}");

    // Trusting the CA that signed it works.
    Store::connect_with(&addr, ConnectOptions::new().token("datatoken").ca_file(&pki.ca)).unwrap();
}

#[test]
fn sec_01_tls_refuses_a_wrong_token_and_keeps_roles() {
    let (_store, _d, pki, port) = tls_store();
    let addr = format!("tls:127.0.0.1:{port}");
    let wrong = Store::connect_with(&addr, ConnectOptions::new().token("datatokem").ca_file(&pki.ca)).err().unwrap();
    assert_eq!(wrong.code(), "auth", "{wrong}");
    assert!(!wrong.message().contains("datatoken"), "a token is never echoed");
    let reader = Store::connect_with(&addr, ConnectOptions::new().token("readtoken").ca_file(&pki.ca)).unwrap();
    assert_eq!(reader.channel::<u64>("c").open().unwrap().under(1).publish(&1).unwrap_err().code(), "auth");
}

#[test]
fn sec_01_plain_tcp_to_a_tls_port_gets_a_clear_error_and_hurts_nobody() {
    let (store, d, pki, port) = tls_store();
    let good = Store::connect_with(&format!("tls:127.0.0.1:{port}"), ConnectOptions::new().token("datatoken").ca_file(&pki.ca)).unwrap();
    let mut it = good.channel::<u64>("c").open().unwrap().under(1).messages().unwrap();

    let e = Store::connect_with(&format!("tcp:127.0.0.1:{port}"), ConnectOptions::new().token("datatoken")).err().unwrap();
    assert_eq!(e.code(), "protocol", "{e}");
    assert!(e.message().contains("speaks TLS") && e.message().contains("tls:"), "{e}");
    // Garbage, a half ClientHello, and a client that says nothing.
    for junk in [&b"GET / HTTP/1.1\r\n\r\n"[..], &[0x16, 0x03, 0x01, 0x00][..], &[][..]] {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.write_all(junk).unwrap();
        s.shutdown(std::net::Shutdown::Write).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
        let mut sink = Vec::new();
        let _ = s.read_to_end(&mut sink);
    }
    good.channel::<u64>("c").open().unwrap().under(1).publish(&5).unwrap();
    assert_eq!(next_value(&mut it), 5, "the TLS client is still served");

    // The other way round: a tls: client to a plain TCP port.
    let plain = free_port();
    store.serve(&format!("tcp:127.0.0.1:{plain}")).unwrap();
    let e = Store::connect_with(&format!("tls:127.0.0.1:{plain}"), ConnectOptions::new().token("datatoken").ca_file(&pki.ca)).err().unwrap();
    assert_eq!(e.code(), "protocol", "{e}");
    assert!(e.message().contains(&format!("tcp:127.0.0.1:{plain}")), "says which address to use instead: {e}");
    drop(d);
}

#[test]
fn sec_01_tls_serve_needs_tokens_a_certificate_and_its_key() {
    let (store, d) = common::store();
    let addr = format!("tls:127.0.0.1:{}", free_port());
    let e = store.serve(&addr).unwrap_err();
    assert_eq!(e.code(), "auth", "no tokens file, no TLS: {e}");
    std::fs::write(d.path().join("tokens"), "data datatoken\n").unwrap();
    let e = store.serve(&addr).unwrap_err();
    assert_eq!(e.code(), "io", "{e}");
    assert!(e.message().contains("tls/cert.pem") && e.message().contains("--cert"), "says where and how: {e}");

    let certs = d.path().join("certs");
    std::fs::create_dir(&certs).unwrap();
    let pki = pki(&certs);
    let e = store.serve_tls(&addr, &pki.cert, &pki.ca).unwrap_err();
    assert_eq!(e.code(), "invalid", "a certificate is not a key: {e}");
    let wrong_key = certs.join("wrong-key.pem");
    std::fs::write(&wrong_key, rcgen::KeyPair::generate().unwrap().serialize_pem()).unwrap();
    let e = store.serve_tls(&addr, &pki.cert, &wrong_key).unwrap_err();
    assert_eq!(e.code(), "invalid", "{e}");
    assert!(e.message().contains("key that belongs"), "{e}");
    assert_eq!(store.serve_tls(&format!("tcp:127.0.0.1:{}", free_port()), &pki.cert, &pki.key).unwrap_err().code(), "invalid");

    // By convention: <dir>/tls/cert.pem and key.pem.
    std::fs::create_dir(d.path().join("tls")).unwrap();
    std::fs::copy(&pki.cert, d.path().join("tls/cert.pem")).unwrap();
    std::fs::copy(&pki.key, d.path().join("tls/key.pem")).unwrap();
    store.serve(&addr).unwrap();
    let c = Store::connect_with(&addr, ConnectOptions::new().token("datatoken").ca_file(&pki.ca)).unwrap();
    c.channel::<u64>("c").open().unwrap().under(1).publish(&1).unwrap();
}

/// Stops a child process when a test fails before it ends by itself.
struct KillOnDrop(Option<std::process::Child>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(c) = &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The CLI: `tinystore serve --listen tls: --cert --key`, no plain-TCP
/// warning, and clients reading TINYSTORE_CA and TINYSTORE_TOKEN.
#[test]
fn sec_01_tinystore_serve_speaks_tls_from_the_command_line() {
    let d = common::dir();
    let store_dir = d.path().join("store");
    std::fs::create_dir(&store_dir).unwrap();
    std::fs::write(store_dir.join("tokens"), "admin admintoken\n").unwrap();
    let pki = pki(d.path());
    let port = free_port();
    let addr = format!("tls:127.0.0.1:{port}");
    let exe = env!("CARGO_BIN_EXE_tinystore");
    let server = Command::new(exe)
        .arg("serve")
        .arg(&store_dir)
        .args(["--listen", &addr, "--cert"])
        .arg(&pki.cert)
        .arg("--key")
        .arg(&pki.key)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut server = KillOnDrop(Some(server));
    let cli = |args: &[&str], ca: &Path| {
        Command::new(exe).args(args).env("TINYSTORE_TOKEN", "admintoken").env("TINYSTORE_CA", ca).output().unwrap()
    };
    assert!(common::eventually(5000, || cli(&["status", &addr, "--json"], &pki.ca).status.success()), "status over TLS");
    let refused = cli(&["status", &addr], &pki.other_ca);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("does not trust"), "{}", String::from_utf8_lossy(&refused.stderr));
    assert!(cli(&["stop", &addr], &pki.ca).status.success());
    let out = server.0.take().unwrap().wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains(&addr) && !err.contains("warning"), "no warning for TLS: {err}");
}

/// Starts `tinystore serve DIR --listen ADDR --cert --key`.
fn serve_tls_cli(dir: &Path, addr: &str, pki: &Pki) -> KillOnDrop {
    let child = Command::new(env!("CARGO_BIN_EXE_tinystore"))
        .arg("serve")
        .arg(dir)
        .args(["--listen", addr, "--cert"])
        .arg(&pki.cert)
        .arg("--key")
        .arg(&pki.key)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    KillOnDrop(Some(child))
}

/// A TLS client keeps its CA across reconnects: it comes back by itself
/// after its owner restarts, and its subscription goes on.
#[test]
fn sec_01_a_tls_client_reconnects_after_its_owner_restarts() {
    let d = common::dir();
    let store_dir = d.path().join("store");
    std::fs::create_dir(&store_dir).unwrap();
    std::fs::write(store_dir.join("tokens"), "data datatoken\n").unwrap();
    let pki = pki(d.path());
    let addr = format!("tls:127.0.0.1:{}", free_port());
    let opts = || ConnectOptions::new().token("datatoken").ca_file(&pki.ca);
    let first = serve_tls_cli(&store_dir, &addr, &pki);
    let mut client = None;
    assert!(common::eventually(5000, || {
        client = Store::connect_with(&addr, opts()).ok();
        client.is_some()
    }));
    let client = client.unwrap();
    let events = client.channel::<u64>("c").open().unwrap();
    let mut it = events.under(1).messages().unwrap();
    events.under(1).publish(&1).unwrap();
    assert_eq!(next_value(&mut it), 1);
    drop(first);
    let _second = serve_tls_cli(&store_dir, &addr, &pki);
    assert!(common::eventually(10_000, || events.under(1).publish(&2).is_ok()), "the client reconnected over TLS");
    // A publish may reach the new owner before the subscription is made
    // there again (it is then told as missed): publish until one arrives.
    let end = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        assert!(std::time::Instant::now() < end, "no message after the restart");
        match it.next_timeout(Duration::from_millis(500)).unwrap() {
            Some(Delivery::Missed(m)) => assert_eq!(m.reason, tinystore::MissedReason::Reconnect),
            Some(Delivery::Message(m)) => {
                assert_eq!(m.value, 2);
                break;
            }
            // Nothing for 500 ms (or the subscription ended, which the
            // deadline above then reports).
            None => events.under(1).publish(&2).unwrap(),
        }
    }
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
        let hello = br#"{"id":0,"op":"hello","version":3,"client":"fuzz","session":"f"}"#;
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
    assert!(store.status().unwrap().subscriptions >= 1);
}

/// WIRE-01 at the decoder (the fuzz target's entry, `core/fuzz`): well-formed
/// frames parse, and 20,000 mutated or random byte streams neither panic nor
/// hang it.
#[test]
fn wire_01_the_frame_and_message_decoder_takes_any_bytes() {
    let framed = |frames: &[&[u8]]| {
        let mut out = Vec::new();
        for f in frames {
            out.extend_from_slice(&(f.len() as u32).to_be_bytes());
            out.extend_from_slice(f);
        }
        out
    };
    let all: Vec<&[u8]> = SEEDS.iter().map(|s| s.as_bytes()).collect();
    let parsed = tinystore::wire::fuzz_decode(&framed(&all));
    assert!(parsed >= SEEDS.len() - 2, "the seeds are requests: {parsed} parsed");
    let mut rng = Rng(0x2545f4914f6cdd1d);
    for _ in 0..20_000 {
        let mut bytes = framed(&[SEEDS[rng.below(SEEDS.len())].as_bytes(), SEEDS[rng.below(SEEDS.len())].as_bytes()]);
        for _ in 0..rng.below(8) {
            let i = rng.below(bytes.len());
            match rng.below(3) {
                0 => bytes[i] = rng.next() as u8,
                1 => {
                    bytes.truncate(i);
                }
                _ => bytes.insert(i, rng.next() as u8),
            }
            if bytes.is_empty() {
                break;
            }
        }
        if rng.below(10) == 0 {
            bytes = (0..rng.below(64)).map(|_| rng.next() as u8).collect();
        }
        tinystore::wire::fuzz_decode(&bytes);
    }
}
