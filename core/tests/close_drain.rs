//! Closing is a drain: messages the store already took reach the closing
//! handle's own subscriptions, within close's bound (2 s), then they end
//! without an error. Published by the closing handle itself or by another
//! handle of the store (another process, seen over its socket).

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tinystore::{Delivery, Store, runtime};

/// The handle to close, and another handle of the same store (connected:
/// the owner; owned: a client connected to it).
fn stores(connected: bool) -> (Store, Store, tempfile::TempDir) {
    let (owner, d) = common::store();
    let c = Store::connect(&format!("unix:{}", d.path().join("tinystore.sock").display())).unwrap();
    if connected { (c, owner, d) } else { (owner, c, d) }
}

const N: u64 = 10;

fn publish(by: &Store, n: u64) {
    let events = by.channel::<u64>("c").open().unwrap();
    for i in 0..n {
        events.under(1).publish(&i).unwrap();
    }
}

fn drain_iterator(connected: bool, by_other: bool) {
    let (s, other, _d) = stores(connected);
    let events = s.channel::<u64>("c").open().unwrap();
    let mut it = events.under(1).messages().unwrap();
    publish(if by_other { &other } else { &s }, N);
    let started = Instant::now();
    runtime::block_on(s.close_settled());
    let mut got = Vec::new();
    while let Some(d) = it.next_timeout(Duration::from_secs(2)).unwrap() {
        match d {
            Delivery::Message(m) => got.push(m.value),
            Delivery::Missed(m) => panic!("missed {m:?}"),
        }
    }
    assert!(started.elapsed() < Duration::from_secs(2), "the drain took {:?}, past close's bound", started.elapsed());
    assert_eq!(got, (0..N).collect::<Vec<_>>(), "{} of {N} messages the store took never reached the iterator", N - got.len() as u64);
}

fn drain_callback(connected: bool, by_other: bool) {
    let (s, other, _d) = stores(connected);
    let events = s.channel::<u64>("c").open().unwrap();
    let got = Arc::new(Mutex::new(Vec::new()));
    let g = got.clone();
    let _sub = events.under(1).subscribe(move |m| g.lock().unwrap().push(m.value)).unwrap();
    publish(if by_other { &other } else { &s }, N);
    runtime::block_on(s.close_settled());
    common::eventually(2000, || got.lock().unwrap().len() as u64 == N);
    let got = got.lock().unwrap().clone();
    assert_eq!(got, (0..N).collect::<Vec<_>>(), "{} of {N} messages the store took never reached the callback", N - got.len() as u64);
}

#[test]
fn chan_01_close_drains_to_own_iterator_owned() {
    drain_iterator(false, false);
    drain_iterator(false, true);
}
#[test]
fn chan_01_close_drains_to_own_iterator_connected() {
    drain_iterator(true, false);
    drain_iterator(true, true);
}
#[test]
fn chan_01_close_drains_to_own_callback_owned() {
    drain_callback(false, false);
    drain_callback(false, true);
}
#[test]
fn chan_01_close_drains_to_own_callback_connected() {
    drain_callback(true, false);
    drain_callback(true, true);
}
