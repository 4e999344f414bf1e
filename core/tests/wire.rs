//! The wire vectors of tests/vectors/wire.json, replayed against a real
//! server, in order, on one connection.

mod common;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use serde_json::Value;

fn includes(got: &Value, want: &Value) -> bool {
    match (got, want) {
        (_, Value::String(s)) if s == "*" => !got.is_null(),
        (Value::Object(g), Value::Object(w)) => w.iter().all(|(k, v)| g.get(k).is_some_and(|gv| includes(gv, v)) || (v.is_null() && g.get(k).is_none_or(Value::is_null))),
        _ => got == want,
    }
}

#[test]
fn wire_01_vectors_replay_against_a_real_server() {
    let (_store, d) = common::store();
    let text = std::fs::read_to_string(common::root().join("tests/vectors/wire.json")).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    let mut s = UnixStream::connect(d.path().join("tinystore.sock")).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    for ex in v["exchanges"].as_array().unwrap() {
        send_frame(&mut s, &serde_json::to_vec(&ex["send"]).unwrap());
        for want in ex["expect"].as_array().unwrap() {
            let got = read_frame(&mut s);
            assert!(includes(&got, want), "sent {}\n got {got}\nwant {want}", ex["send"]);
        }
    }
}

fn send_frame(s: &mut UnixStream, body: &[u8]) {
    s.write_all(&(body.len() as u32).to_be_bytes()).unwrap();
    s.write_all(body).unwrap();
}

fn read_frame(s: &mut UnixStream) -> Value {
    let mut len = [0u8; 4];
    s.read_exact(&mut len).unwrap();
    let mut buf = vec![0u8; u32::from_be_bytes(len) as usize];
    s.read_exact(&mut buf).unwrap();
    serde_json::from_slice(&buf).unwrap()
}

/// Sends `body` as one frame and reads the next frame back.
fn exchange(s: &mut UnixStream, body: &str) -> Value {
    send_frame(s, body.as_bytes());
    read_frame(s)
}

/// The owner checks a burst's channel name and branch keys once (docs/wire.md,
/// publishes in our client's shape): a name or key out of rule after a burst
/// to a good branch is still refused, and the connection goes on.
#[test]
fn wire_01_a_name_or_key_out_of_rule_after_a_burst_to_a_good_branch_is_refused() {
    let (_store, d) = common::store();
    let mut s = UnixStream::connect(d.path().join("tinystore.sock")).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let hello = exchange(&mut s, r#"{"id":0,"op":"hello","version":3,"client":"burst","session":"b1"}"#);
    assert!(hello["ok"].is_object(), "{hello}");
    let publish = |id: u64, channel: &str, branch: &str| format!(r#"{{"id":{id},"op":"publish","channel":"{channel}","branch":{branch},"data":{{"n":{id}}}}}"#);
    for id in 1..=3 {
        assert_eq!(exchange(&mut s, &publish(id, "chat-events", r#"["7"]"#)), serde_json::json!({"id": id, "ok": null}));
    }
    let long_key = format!(r#"["{}"]"#, "k".repeat(1025));
    let long_name = "c".repeat(65);
    for (id, channel, branch) in [(4, "-chat", r#"["7"]"#), (5, long_name.as_str(), r#"["7"]"#), (6, "chat-events", long_key.as_str())] {
        let got = exchange(&mut s, &publish(id, channel, branch));
        assert_eq!(got["id"], id, "{got}");
        assert_eq!(got["err"]["code"], "invalid", "channel {channel:?}, branch {}: {got}", &branch[..branch.len().min(20)]);
    }
    assert_eq!(exchange(&mut s, &publish(7, "chat-events", r#"["7"]"#)), serde_json::json!({"id": 7, "ok": null}));
}

/// CHAN-01: a client that writes a burst of publishes (1,000 of 1 KB, within
/// a branch's log) and exits without
/// reading their answers (a program's `process.exit()` right after its
/// publishes leave) has every one delivered: the owner's answers then fail
/// to go out, and it still reads and publishes what the client sent before.
#[test]
fn chan_01_a_burst_from_a_client_that_exits_without_reading_its_answers_is_delivered_whole() {
    let (store, d) = common::store();
    let got = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let g = got.clone();
    let _sub = store.channel::<Value>("exit-burst").open().unwrap().under("7").subscribe(move |m| g.lock().unwrap().push(m.value["n"].as_u64().unwrap())).unwrap();
    let mut s = UnixStream::connect(d.path().join("tinystore.sock")).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let hello = exchange(&mut s, r#"{"id":0,"op":"hello","version":3,"client":"exit","session":"e1"}"#);
    assert!(hello["ok"].is_object(), "{hello}");
    let pad = "x".repeat(1000);
    let mut burst = Vec::new();
    for id in 1..=1000u64 {
        let body = format!(r#"{{"id":{id},"op":"publish","channel":"exit-burst","branch":["7"],"data":{{"n":{id},"pad":"{pad}"}}}}"#);
        burst.extend_from_slice(&(body.len() as u32).to_be_bytes());
        burst.extend_from_slice(body.as_bytes());
    }
    s.write_all(&burst).unwrap();
    drop(s);
    assert!(common::eventually(5_000, || got.lock().unwrap().len() >= 1000), "{} of 1000 delivered", got.lock().unwrap().len());
    assert_eq!(*got.lock().unwrap(), (1..=1000).collect::<Vec<u64>>());
}

/// CHAN-01 over the wire by version: a burst published in one request
/// reaches a version 4 client's subscription as one `msgs` event (its
/// messages in order, `seq` of the first, `next` after the last), and a
/// version 3 client's as one `msg` event a message, as before.
#[test]
fn chan_01_a_burst_reaches_a_version_4_subscriber_as_one_msgs_event_and_a_version_3_one_as_msg_events() {
    let (_store, d) = common::store();
    let mut conns = Vec::new();
    for version in [3, 4] {
        let mut s = UnixStream::connect(d.path().join("tinystore.sock")).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        let hello = exchange(&mut s, &format!(r#"{{"id":0,"op":"hello","version":{version},"client":"v{version}","session":"s{version}"}}"#));
        assert!(hello["ok"].is_object(), "{hello}");
        let ok = exchange(&mut s, r#"{"id":1,"op":"subscribe","sub":9,"channel":"runs","branch":["7"]}"#);
        assert_eq!(ok["ok"]["next"], 1, "{ok}");
        conns.push((version, s));
    }
    let values: Vec<u64> = (10..15).collect();
    // One request: the subscriptions are woken once it is all published.
    let s = &mut conns[1].1;
    let ok = exchange(s, r#"{"id":2,"op":"publish","channel":"runs","branch":["7"],"messages":[10,11,12,13,14]}"#);
    assert_eq!(ok, serde_json::json!({"id": 2, "ok": null}));
    for (version, s) in &mut conns {
        let mut got = Vec::new();
        while got.len() < values.len() {
            let ev = read_frame(s);
            assert_eq!(ev["sub"], 9, "{ev}");
            if *version == 3 {
                assert_eq!(ev["ev"], "msg", "{ev}");
                assert_eq!((ev["seq"].as_u64(), ev["next"].as_u64()), (Some(got.len() as u64 + 1), Some(got.len() as u64 + 2)), "{ev}");
                got.push(ev["data"].as_u64().unwrap());
            } else {
                assert_eq!(ev["ev"], "msgs", "{ev}");
                assert_eq!((ev["seq"].as_u64(), ev["next"].as_u64()), (Some(1), Some(6)), "{ev}");
                assert_eq!(ev["lens"], serde_json::json!([2, 2, 2, 2, 2]), "{ev}");
                got.extend(ev["data"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()));
            }
        }
        assert_eq!(got, values, "version {version}");
    }
}
