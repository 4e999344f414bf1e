//! Closing is a drain: messages the store already took reach the closing
//! handle's own subscriptions, then they end without an error.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tinystore::{Delivery, Store, runtime};

fn stores(connected: bool) -> (Store, Option<Store>, tempfile::TempDir) {
    let (owner, d) = common::store();
    if !connected {
        return (owner, None, d);
    }
    let c = Store::connect(&format!("unix:{}", d.path().join("tinystore.sock").display())).unwrap();
    (c, Some(owner), d)
}

fn drain_iterator(connected: bool) {
    let (s, _owner, _d) = stores(connected);
    let events = s.channel::<u64>("c").open().unwrap();
    let mut it = events.under(1).messages().unwrap();
    for i in 0..10u64 {
        events.under(1).publish(&i).unwrap();
    }
    runtime::block_on(s.close_settled());
    let mut got = Vec::new();
    while let Some(d) = it.next_timeout(Duration::from_secs(2)).unwrap() {
        match d {
            Delivery::Message(m) => got.push(m.value),
            Delivery::Missed(m) => panic!("missed {m:?}"),
        }
    }
    assert_eq!(got, (0..10).collect::<Vec<_>>());
}

fn drain_callback(connected: bool) {
    let (s, _owner, _d) = stores(connected);
    let events = s.channel::<u64>("c").open().unwrap();
    let got = Arc::new(Mutex::new(Vec::new()));
    let g = got.clone();
    let _sub = events.under(1).subscribe(move |m| g.lock().unwrap().push(m.value)).unwrap();
    for i in 0..10u64 {
        events.under(1).publish(&i).unwrap();
    }
    runtime::block_on(s.close_settled());
    assert!(common::eventually(2000, || got.lock().unwrap().len() == 10));
    assert_eq!(*got.lock().unwrap(), (0..10).collect::<Vec<_>>());
}

#[test]
fn chan_01_close_drains_to_own_iterator_owned() {
    drain_iterator(false)
}
// Issue 17 part 4, not fixed yet: the owner's forwarding of the last
// messages can come after the publishes' answers, and close ends the
// inbox first (the callback form loses some; the iterator form can too).
#[test]
#[ignore = "issue 17 part 4: a connected close does not wait for the owner's forwarding yet"]
fn chan_01_close_drains_to_own_iterator_connected() {
    drain_iterator(true)
}
#[test]
fn chan_01_close_drains_to_own_callback_owned() {
    drain_callback(false)
}
#[test]
#[ignore = "issue 17 part 4: a connected close does not wait for the owner's forwarding yet"]
fn chan_01_close_drains_to_own_callback_connected() {
    drain_callback(true)
}
