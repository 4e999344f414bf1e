//! tinystore over a Unix socket against Redis, and against a bare socket
//! ping-pong as the floor, all measured in one run on this machine.
//!
//! Run: `cargo run --release -p tinystore-bench --bin wire`
//! (needs `redis-server` on the PATH: Debian's package `redis-server`).

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tinystore::channels::{Event, Scope};
use tinystore::{Key, Store, runtime};

struct Kill(Child);
impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_for(path: &std::path::Path) {
    let end = Instant::now() + Duration::from_secs(10);
    while UnixStream::connect(path).is_err() {
        assert!(Instant::now() < end, "{} never listened", path.display());
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The floor: one byte there and back between two processes, per second.
fn floor_round_trips(dir: &std::path::Path) -> f64 {
    let path = dir.join("echo.sock");
    let exe = std::env::current_exe().unwrap();
    let _child = Kill(Command::new(exe).arg("echo").arg(&path).spawn().unwrap());
    wait_for(&path);
    let mut s = UnixStream::connect(&path).unwrap();
    let n = 20_000;
    let mut b = [0u8; 1];
    let t = Instant::now();
    for _ in 0..n {
        s.write_all(&[1]).unwrap();
        s.read_exact(&mut b).unwrap();
    }
    n as f64 / t.elapsed().as_secs_f64()
}

fn echo(path: &str) {
    let _ = std::fs::remove_file(path);
    let l = UnixListener::bind(path).unwrap();
    for s in l.incoming() {
        let Ok(mut s) = s else { return };
        let mut b = [0u8; 1];
        while s.read_exact(&mut b).is_ok() {
            if s.write_all(&b).is_err() {
                break;
            }
        }
    }
}

fn ours_one_at_a_time(store: &Store) -> f64 {
    let sub = runtime::block_on(store.subscribe_raw("bench", &[Key::from(1)], Scope::Branch, None)).unwrap();
    let n = 10_000;
    let t = Instant::now();
    for i in 0..n {
        runtime::block_on(async {
            store.publish_raw("bench", &[Key::from(1)], format!("{{\"id\":{i}}}").into_bytes().into_boxed_slice()).await.unwrap();
            match sub.next().await {
                Some(Event::Message(_)) => {}
                other => panic!("{other:?}"),
            }
        });
    }
    n as f64 / t.elapsed().as_secs_f64()
}

fn ours_pipelined(store: &Store) -> f64 {
    let sub = runtime::block_on(store.subscribe_raw("bench", &[Key::from(2)], Scope::Branch, None)).unwrap();
    let n = 200_000u64;
    let got = Arc::new(AtomicU64::new(0));
    let g = got.clone();
    let reader = std::thread::spawn(move || {
        runtime::block_on(async {
            let mut seen = 0u64;
            while seen < n {
                for ev in sub.next_batch(4096).await {
                    seen += match ev {
                        Event::Message(_) => 1,
                        Event::Missed(m) => m.count.unwrap_or(0),
                    };
                    if let Event::Message(_) = ev {
                        g.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        })
    });
    let branch = [Key::from(2)];
    let t = Instant::now();
    runtime::block_on(async {
        // 64 publishes in flight at a time, in order on the one connection.
        let mut inflight = std::collections::VecDeque::new();
        for i in 0..n {
            inflight.push_back(store.publish_raw("bench", &branch, format!("{{\"id\":{i}}}").into_bytes().into_boxed_slice()));
            if inflight.len() >= 64 {
                inflight.pop_front().unwrap().await.unwrap();
            }
        }
        for f in inflight {
            f.await.unwrap();
        }
    });
    reader.join().unwrap();
    got.load(Ordering::Relaxed) as f64 / t.elapsed().as_secs_f64()
}

fn ours_hold_release(store: &Store) -> f64 {
    let lock = store.lock("bench").open().unwrap();
    let n = 10_000;
    let t = Instant::now();
    for _ in 0..n {
        lock.hold(1, |_| -> tinystore::Result<()> { Ok(()) }).unwrap();
    }
    n as f64 / t.elapsed().as_secs_f64()
}

fn ours_contended(address: &str) -> f64 {
    let per = 3000;
    let stores: Vec<Store> = (0..4).map(|_| Store::connect(address).unwrap()).collect();
    let t = Instant::now();
    let hs: Vec<_> = stores
        .into_iter()
        .map(|s| {
            std::thread::spawn(move || {
                let lock = s.lock("contended").wait(Duration::from_secs(60)).open().unwrap();
                for _ in 0..per {
                    lock.hold("k", |_| -> tinystore::Result<()> { Ok(()) }).unwrap();
                }
            })
        })
        .collect();
    hs.into_iter().for_each(|h| h.join().unwrap());
    (per * 4) as f64 / t.elapsed().as_secs_f64()
}

/// Transactions of a connected process, one at a time: each inserts a row
/// and, with `publish`, publishes its rowid (CHAN-03: a ticket then).
fn ours_tx(store: &Store, publish: bool) -> f64 {
    let db = store.database("bench").open().unwrap();
    db.exec("create table if not exists t (id integer primary key, v integer)").unwrap();
    let events = store.channel::<i64>("bench-tx").open().unwrap();
    let n = 3_000;
    let t = Instant::now();
    for _ in 0..n {
        db.tx(|tx| -> tinystore::Result<()> {
            let r = tx.exec("insert into t (v) values (1)")?;
            if publish {
                tx.with(&events).under(1).publish(&r.last_insert_rowid)?;
            }
            Ok(())
        })
        .unwrap();
    }
    n as f64 / t.elapsed().as_secs_f64()
}

fn redis_client(url: &str) -> redis::Connection {
    redis::Client::open(url).unwrap().get_connection().unwrap()
}

fn redis_one_at_a_time(url: &str) -> f64 {
    let mut subc = redis_client(url);
    let mut pubc = redis_client(url);
    let mut ps = subc.as_pubsub();
    ps.subscribe("bench1").unwrap();
    let n = 10_000;
    let t = Instant::now();
    for i in 0..n {
        let _: i64 = redis::cmd("PUBLISH").arg("bench1").arg(format!("{{\"id\":{i}}}")).query(&mut pubc).unwrap();
        let _m = ps.get_message().unwrap();
    }
    n as f64 / t.elapsed().as_secs_f64()
}

fn redis_pipelined(url: &str) -> f64 {
    let n = 200_000u64;
    let mut subc = redis_client(url);
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut ps = subc.as_pubsub();
        ps.subscribe("bench2").unwrap();
        ready_tx.send(()).unwrap();
        for _ in 0..n {
            let _m = ps.get_message().unwrap();
        }
    });
    ready_rx.recv().unwrap();
    let mut pubc = redis_client(url);
    let t = Instant::now();
    for chunk in 0..(n / 64) {
        let mut p = redis::pipe();
        for i in 0..64 {
            p.cmd("PUBLISH").arg("bench2").arg(format!("{{\"id\":{}}}", chunk * 64 + i)).ignore();
        }
        p.query::<()>(&mut pubc).unwrap();
    }
    reader.join().unwrap();
    n as f64 / t.elapsed().as_secs_f64()
}

const RELEASE: &str = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";

fn redis_hold_release(url: &str) -> f64 {
    let mut c = redis_client(url);
    let script = redis::Script::new(RELEASE);
    let n = 10_000;
    let t = Instant::now();
    for i in 0..n {
        let token = format!("t{i}");
        let ok: Option<String> = redis::cmd("SET").arg("lock:1").arg(&token).arg("NX").arg("PX").arg(30000).query(&mut c).unwrap();
        assert!(ok.is_some());
        let _: i64 = script.key("lock:1").arg(&token).invoke(&mut c).unwrap();
    }
    n as f64 / t.elapsed().as_secs_f64()
}

fn redis_contended(url: &str) -> f64 {
    let per = 3000;
    let t = Instant::now();
    let hs: Vec<_> = (0..4)
        .map(|w| {
            let url = url.to_owned();
            std::thread::spawn(move || {
                let mut c = redis_client(&url);
                let script = redis::Script::new(RELEASE);
                for i in 0..per {
                    let token = format!("w{w}-{i}");
                    // Redis has no waiting: spin on SET NX, the usual client loop.
                    loop {
                        let ok: Option<String> = redis::cmd("SET").arg("lock:c").arg(&token).arg("NX").arg("PX").arg(30000).query(&mut c).unwrap();
                        if ok.is_some() {
                            break;
                        }
                    }
                    let _: i64 = script.key("lock:c").arg(&token).invoke(&mut c).unwrap();
                }
            })
        })
        .collect();
    hs.into_iter().for_each(|h| h.join().unwrap());
    (per * 4) as f64 / t.elapsed().as_secs_f64()
}

fn best(f: impl Fn() -> f64) -> f64 {
    (0..3).map(|_| f()).fold(0.0, f64::max)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("echo") {
        return echo(&args[2]);
    }
    let dir = tempfile::tempdir().unwrap();
    let store_dir = dir.path().join("store");
    let tinystore_bin = std::env::current_exe().unwrap().parent().unwrap().join("tinystore");
    let _server = Kill(
        Command::new(&tinystore_bin)
            .arg("serve")
            .arg(&store_dir)
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("run `cargo build --release -p tinystore` first ({}): {e}", tinystore_bin.display())),
    );
    wait_for(&store_dir.join("tinystore.sock"));
    let redis_sock = dir.path().join("redis.sock");
    let _redis = Kill(
        Command::new("redis-server")
            .args(["--port", "0", "--unixsocket"])
            .arg(&redis_sock)
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server on the PATH (apt-get install redis-server)"),
    );
    wait_for(&redis_sock);
    let url = format!("redis+unix://{}", redis_sock.display());
    let address = format!("unix:{}", store_dir.join("tinystore.sock").display());
    let store = Store::connect(&address).unwrap();

    let floor = best(|| floor_round_trips(dir.path()));
    println!("tinystore over a Unix socket vs Redis {} (best of 3; ratio = tinystore / Redis)\n", redis_version());
    println!("floor: a bare Unix-socket ping-pong between two processes: {:.0} round trips/s ({:.1} µs each)\n", floor, 1e6 / floor);
    println!("| workload | tinystore | Redis | ratio | tinystore in floor round trips |");
    println!("|---|---:|---:|---:|---:|");
    let row = |name: &str, ours: f64, theirs: f64, per_op_trips: bool| {
        let trips = if per_op_trips { format!("{:.2}", floor / ours) } else { "-".into() };
        println!("| {name} | {ours:.0}/s | {theirs:.0}/s | {:.2} | {trips} |", ours / theirs);
    };
    // WIRE_ONLY=publish-1|publish-64|hold|contended runs one row, and
    // WIRE_OURS_ONLY=1 skips Redis (for profiling).
    let only = std::env::var("WIRE_ONLY").ok();
    let row = |name: &str, tag: &str, ours: &dyn Fn() -> f64, theirs: &dyn Fn() -> f64, per_op_trips: bool| {
        if only.as_deref().is_none_or(|o| o == tag) {
            let theirs = if std::env::var_os("WIRE_OURS_ONLY").is_some() { f64::NAN } else { best(theirs) };
            row(name, best(ours), theirs, per_op_trips);
        }
    };
    row("publish→deliver, one at a time", "publish-1", &|| ours_one_at_a_time(&store), &|| redis_one_at_a_time(&url), true);
    row("publish→deliver, 64 in flight", "publish-64", &|| ours_pipelined(&store), &|| redis_pipelined(&url), false);
    row("hold+release, sequential", "hold", &|| ours_hold_release(&store), &|| redis_hold_release(&url), true);
    row("hold+release, 4 clients on one key (handoffs)", "contended", &|| ours_contended(&address), &|| redis_contended(&url), false);
    // No peer: SQLite transactions of this (connected) process, one at a time.
    if only.as_deref().is_none_or(|o| o == "tx") {
        println!("\n| SQL transaction, connected, one at a time | tinystore |\n|---|---:|");
        println!("| insert, no publish | {:.0}/s |", best(|| ours_tx(&store, false)));
        println!("| insert + publish (CHAN-03) | {:.0}/s |", best(|| ours_tx(&store, true)));
    }
}

fn redis_version() -> String {
    Command::new("redis-server").arg("--version").output().ok().and_then(|o| String::from_utf8(o.stdout).ok()).and_then(|s| s.split_whitespace().nth(2).map(|v| v.trim_start_matches("v=").to_owned())).unwrap_or_default()
}
