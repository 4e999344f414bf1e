//! The rules the bindings take from the core instead of restating them: how
//! a hold ends (`end_of_hold`, `HeldLease`) and declaring a lock or
//! semaphore once, lazily (`LockHandle`).

mod common;

use std::time::Duration;

use tinystore::locks::{HeldLease, Holder, Kind, LeaseState, LockHandle, LockOptions, Terms, end_of_hold};
use tinystore::{Key, Store, runtime};

fn owner_and_client() -> (Store, Store, tempfile::TempDir) {
    let (owner, d) = common::store();
    let client = Store::connect(&format!("unix:{}", d.path().join("tinystore.sock").display())).unwrap();
    (owner, client, d)
}

fn short() -> Terms {
    Terms { ttl: None, max_hold: Some(Duration::from_millis(50)) }
}

fn lease(store: &Store, key: i64, terms: Terms) -> tinystore::locks::RawLease {
    let lock = store.lock_raw("summaries", Kind::Lock).unwrap();
    runtime::block_on(lock.acquire(Key::from(key), Holder::unique(), terms, Duration::from_secs(2))).unwrap()
}

/// LOCK-04: a lost lease ends its hold with `lost` when the body succeeded,
/// and the body's own error wins when it failed; a held lease ends cleanly.
#[test]
fn lock_04_end_of_hold_the_bodys_error_wins_over_a_lost_lease() {
    let (store, _d) = common::store();
    let held = lease(&store, 1, Terms::default());
    assert!(end_of_hold(held, false).is_ok());

    let lost = lease(&store, 2, short());
    assert!(common::eventually(2000, || lost.is_lost()));
    assert_eq!(end_of_hold(lost, false).unwrap_err().code(), "lost");

    let lost = lease(&store, 3, short());
    assert!(common::eventually(2000, || lost.is_lost()));
    assert!(end_of_hold(lost, true).is_ok(), "the body's error is the one raised");
    // The keys were let go either way.
    let again = lease(&store, 2, Terms::default());
    assert!(end_of_hold(again, false).is_ok());
}

/// LOCK-04, LOCK-06: a held lease's state, owned and connected: held, then
/// released or lost; the lost error stays known after the hold ended, and
/// `ended` resolves with the end.
#[test]
fn lock_04_held_lease_state_released_or_lost() {
    let (owner, client, _d) = owner_and_client();
    for store in [&owner, &client] {
        let h = HeldLease::new(lease(store, 10, Terms { ttl: Some(Duration::from_secs(5)), max_hold: None }));
        assert_eq!(h.state(), LeaseState::Held);
        assert!(h.is_held() && h.lost_error().is_none() && h.fence().is_some());
        assert!(h.end(false).is_ok());
        assert_eq!(h.state(), LeaseState::Released);
        assert!(!h.is_held());
        assert_eq!(runtime::block_on(h.ended()), LeaseState::Released);
        assert!(h.end(false).is_ok(), "ending again does nothing");

        let h = HeldLease::new(lease(store, 11, Terms { ttl: Some(Duration::from_secs(5)), max_hold: Some(Duration::from_millis(50)) }));
        assert_eq!(runtime::block_on(h.ended()), LeaseState::Lost);
        assert!(h.is_lost() && h.is_held());
        assert!(h.lost_error().unwrap().message().contains("maxHold"));
        assert_eq!(h.end(false).unwrap_err().code(), "lost");
        assert_eq!(h.state(), LeaseState::Lost);
        assert_eq!(h.lost_error().unwrap().code(), "lost", "still known after the end");
        assert!(h.end(false).is_ok(), "told once");
    }
}

/// LOCK-04: `ended` awaited while the hold is still held wakes when another
/// thread ends it, owned and connected (the state change wakes its waiters).
#[test]
fn lock_04_held_lease_ended_wakes_when_another_thread_ends_the_hold() {
    let (owner, client, _d) = owner_and_client();
    for store in [&owner, &client] {
        let h = std::sync::Arc::new(HeldLease::new(lease(store, 12, Terms { ttl: Some(Duration::from_secs(5)), max_hold: None })));
        let ender = h.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            ender.end(false)
        });
        assert_eq!(runtime::block_on(h.ended()), LeaseState::Released);
        assert!(t.join().unwrap().is_ok());
    }
}

/// NAMES, LOCK-08: a lock handle checks its name, limit and options when
/// made; owned, a conflicting kind is refused at once; connected, making
/// it never waits for the owner and the conflict surfaces at the first use.
#[test]
fn names_lock_08_lock_handle_declares_once_on_first_use() {
    let (owner, client, _d) = owner_and_client();
    let o = LockOptions::default();
    assert_eq!(LockHandle::new(&owner, "Bad Name", Kind::Lock, o).err().unwrap().code(), "invalid");
    assert_eq!(LockHandle::new(&owner, "exports", Kind::Semaphore { limit: 0 }, o).err().unwrap().code(), "invalid");
    let short_ttl = LockOptions { ttl: Duration::from_millis(10), ..o };
    assert_eq!(LockHandle::new(&client, "exports", Kind::Lock, short_ttl).err().unwrap().code(), "invalid");

    let sem = LockHandle::new(&owner, "exports", Kind::Semaphore { limit: 3 }, o).unwrap();
    assert_eq!(sem.name(), "exports");
    assert!(runtime::block_on(sem.get()).is_ok());
    assert_eq!(LockHandle::new(&owner, "exports", Kind::Semaphore { limit: 2 }, o).err().unwrap().code(), "conflict");

    let other = LockHandle::new(&client, "exports", Kind::Semaphore { limit: 2 }, o).unwrap();
    assert_eq!(runtime::block_on(other.get()).err().unwrap().code(), "conflict");
    let same = LockHandle::new(&client, "exports", Kind::Semaphore { limit: 3 }, o).unwrap();
    let raw = runtime::block_on(same.get()).unwrap();
    let permit = runtime::block_on(raw.acquire(Key::from(1), Holder::unique(), o.terms(), o.wait)).unwrap();
    assert!(end_of_hold(permit, false).is_ok());
    assert!(std::ptr::eq(same.get_blocking().unwrap(), raw), "declared once, then kept");

    client.close();
    assert_eq!(LockHandle::new(&client, "exports", Kind::Lock, o).err().unwrap().code(), "closed");
}
