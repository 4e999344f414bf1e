//! FENCE-01 and LOCK-02: the shape of fences and that they grow.

mod common;

use std::process::Command;

use tinystore::{Fence, OpenOptions, Store};

#[test]
fn fence_01_shape_halves_digits_and_padding() {
    let f = Fence::new(1, 2);
    assert_eq!(f.get(), (1u128 << 64) | 2);
    assert_eq!(f.halves(), (1, 2));
    assert_eq!(f.to_string(), "18446744073709551618");
    assert_eq!(f.padded(), "0000000000000000000018446744073709551618");
    assert_eq!(f.padded().len(), 40);
    assert_eq!(Fence::from_u128(u128::MAX).padded().len(), 40);
    assert_eq!("18446744073709551618".parse::<Fence>().unwrap(), f);
    assert_eq!(f.padded().parse::<Fence>().unwrap(), f);
    assert_eq!("".parse::<Fence>().unwrap_err().code(), "invalid");
    assert_eq!("-1".parse::<Fence>().unwrap_err().code(), "invalid");
    assert_eq!("340282366920938463463374607431768211456".parse::<Fence>().unwrap_err().code(), "invalid");
    assert_eq!(serde_json::to_string(&f).unwrap(), "\"18446744073709551618\"");
}

#[test]
fn fence_01_padded_text_sorts_like_the_number() {
    let mut fences: Vec<Fence> = [0u128, 1, 9, 10, 99, 1 << 64, (1 << 64) + 1, u64::MAX as u128, u128::MAX, 12345678901234567890123]
        .into_iter()
        .map(Fence::from_u128)
        .collect();
    let mut by_text = fences.clone();
    fences.sort();
    by_text.sort_by_key(|f| f.padded());
    assert_eq!(fences, by_text);
}

/// The shared vectors every binding checks: each entry's digits, padded
/// digits and halves must be what the core computes.
#[test]
fn fence_01_vectors_match_the_core() {
    let path = common::root().join("tests/vectors/fences.json");
    let text = std::fs::read_to_string(&path).expect("tests/vectors/fences.json");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let cases = v["vectors"].as_array().unwrap();
    assert!(cases.len() >= 8);
    for c in cases {
        let epoch: u64 = c["epoch"].as_str().unwrap().parse().unwrap();
        let count: u64 = c["count"].as_str().unwrap().parse().unwrap();
        let f = Fence::new(epoch, count);
        assert_eq!(f.to_string(), c["digits"].as_str().unwrap());
        assert_eq!(f.padded(), c["padded"].as_str().unwrap());
        assert_eq!(f.epoch().to_string(), c["hi"].as_str().unwrap());
        assert_eq!(f.count().to_string(), c["lo"].as_str().unwrap());
    }
}

fn one_fence(store: &Store) -> Fence {
    let lock = store.lock("fence-test").open().unwrap();
    lock.hold("k", |l| -> tinystore::Result<Fence> { Ok(l.fence()) }).unwrap()
}

#[test]
fn lock_02_fences_grow_within_one_open() {
    let (store, _d) = common::store();
    let lock = store.lock("grow").open().unwrap();
    let mut last = Fence::default();
    for i in 0..1000 {
        let f = lock.hold(i % 7, |l| -> tinystore::Result<Fence> { Ok(l.fence()) }).unwrap();
        assert!(f > last, "{f} after {last}");
        assert_eq!(f.epoch(), store.epoch());
        last = f;
    }
}

#[test]
fn lock_02_fences_grow_across_restart() {
    let d = common::dir();
    let mut last = Fence::default();
    for _ in 0..5 {
        let store = Store::open(d.path()).unwrap();
        let f = one_fence(&store);
        assert!(f > last, "{f} after {last}");
        last = f;
        store.close();
    }
}

/// L8: reopen within the same millisecond, or with the clock behind the
/// stored epoch: the new epoch is the previous plus one.
#[test]
fn l8_fences_never_go_back_when_clock_is_behind() {
    let d = common::dir();
    let s1 = Store::open_with(d.path(), OpenOptions::new().clock_ms(5_000_000)).unwrap();
    let f1 = one_fence(&s1);
    assert_eq!(s1.epoch(), 5_000_000);
    s1.close();
    let s2 = Store::open_with(d.path(), OpenOptions::new().clock_ms(5_000_000)).unwrap();
    assert_eq!(s2.epoch(), 5_000_001, "same millisecond: previous + 1");
    let f2 = one_fence(&s2);
    assert!(f2 > f1);
    s2.close();
    let s3 = Store::open_with(d.path(), OpenOptions::new().clock_ms(1_000)).unwrap();
    assert_eq!(s3.epoch(), 5_000_002, "clock far behind: previous + 1");
    assert!(one_fence(&s3) > f2);
}

/// L8: restoring an older kv.db is covered only while the clock is past the
/// epochs given since the backup (documented); with a real clock it is.
#[test]
fn l8_restored_kv_db_still_grows_with_real_clock() {
    let d = common::dir();
    let s = Store::open_with(d.path(), OpenOptions::new().clock_ms(1_000)).unwrap();
    s.close();
    let backup = std::fs::read(d.path().join("kv.db")).unwrap();
    let s = Store::open(d.path()).unwrap();
    let later = one_fence(&s);
    s.close();
    std::fs::write(d.path().join("kv.db"), backup).unwrap();
    let s = Store::open(d.path()).unwrap();
    assert!(one_fence(&s) > later);
}

/// LOCK-02 after a crash: a child process owns the store, takes a lease and
/// is killed with SIGKILL; the next owner's fences are larger.
#[test]
fn lock_02_fences_grow_after_kill_9_of_owner() {
    let d = common::dir();
    let exe = env!("CARGO_BIN_EXE_tinystore");
    let mut child = Command::new(exe)
        .args(["lock", d.path().to_str().unwrap(), "hold", "fence-test", "k", "--", "sh", "-c", "echo $TINYSTORE_FENCE $$; exec sleep 60"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    use std::io::BufRead;
    std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let mut words = line.split_whitespace();
    let child_fence: Fence = words.next().unwrap().parse().expect("child printed its fence");
    let sleeper = words.next().unwrap().to_owned();
    // The directory is owned while the child lives.
    assert_eq!(Store::open_with(d.path(), tinystore::OpenOptions::new().exclusive()).err().map(|e| e.code()), Some("owned"));
    child.kill().unwrap();
    child.wait().unwrap();
    let _ = Command::new("kill").arg(&sleeper).status();
    let mut store = None;
    assert!(common::eventually(5000, || {
        store = Store::open(d.path()).ok();
        store.is_some()
    }));
    let f = one_fence(store.as_ref().unwrap());
    assert!(f > child_fence, "{f} after {child_fence}");
}

/// STORE-01: a store directory too deep for its Unix socket is refused
/// before anything is made in it, with the limit and what to do.
#[test]
fn store_01_a_directory_too_deep_for_its_socket_is_refused_before_anything_is_made() {
    let d = common::dir();
    let deep = d.path().join("x".repeat(120));
    let Err(e) = tinystore::Store::open(&deep) else { panic!("a store opened at a path too long for its socket") };
    assert_eq!(e.code(), "invalid", "{e}");
    assert!(e.message().contains("under 108") && e.message().contains("shorter path"), "{e}");
    assert!(!deep.exists(), "nothing was made");
}
