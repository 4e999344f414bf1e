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
        let body = serde_json::to_vec(&ex["send"]).unwrap();
        s.write_all(&(body.len() as u32).to_be_bytes()).unwrap();
        s.write_all(&body).unwrap();
        for want in ex["expect"].as_array().unwrap() {
            let mut len = [0u8; 4];
            s.read_exact(&mut len).unwrap();
            let mut buf = vec![0u8; u32::from_be_bytes(len) as usize];
            s.read_exact(&mut buf).unwrap();
            let got: Value = serde_json::from_slice(&buf).unwrap();
            assert!(includes(&got, want), "sent {}\n got {got}\nwant {want}", ex["send"]);
        }
    }
}
