//! tinystore over a Unix socket against Redis (Unix socket) and core NATS
//! (TCP on loopback: NATS has no Unix socket), and against a bare socket
//! ping-pong as the floor, all measured in one run on this machine.
//!
//! Run: `cargo build --release -p tinystore -p tinystore-bench && ./target/release/wire`
//! (needs `redis-server` and `nats-server` on the PATH: Debian's packages
//! `redis-server` and `nats-server`). Each server is started in a temporary
//! directory and stopped by its PID.

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tinystore::channels::{Event, Scope};
use tinystore::{Key, Store, runtime};

/// A child process stopped by its PID when dropped: SIGTERM first (so a
/// profiler wrapping it writes its output), SIGKILL after 60 s.
struct Kill(Child);
impl Drop for Kill {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg("-TERM").arg(self.0.id().to_string()).status();
        let end = Instant::now() + Duration::from_secs(60);
        while Instant::now() < end {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_for(path: &std::path::Path) {
    let end = Instant::now() + Duration::from_secs(60);
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

/// Messages of the 64-in-flight rows: `WIRE_MESSAGES`, 200,000 unless set
/// (fewer for a run under callgrind).
fn pipelined_messages() -> u64 {
    std::env::var("WIRE_MESSAGES").ok().and_then(|v| v.parse().ok()).unwrap_or(200_000)
}

/// A thread reading `sub` until `n` messages were delivered or missed:
/// the count delivered, and the thread.
fn count_deliveries(sub: tinystore::channels::RawSubscription, n: u64) -> (Arc<AtomicU64>, std::thread::JoinHandle<()>) {
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
    (got, reader)
}

/// 64 publishes in flight from `store`, read by a subscription of
/// `subscriber` (its own connection, as Redis's and NATS's subscribers have,
/// or the publisher's store: one connection for both).
fn ours_pipelined(store: &Store, subscriber: &Store) -> f64 {
    let sub = runtime::block_on(subscriber.subscribe_raw("bench", &[Key::from(2)], Scope::Branch, None)).unwrap();
    let n = pipelined_messages();
    let (got, reader) = count_deliveries(sub, n);
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

/// 64 publishes in flight as bursts (`publish_raw_many`, one request a
/// burst): two bursts of 32 at a time (`WIRE_BURST` changes the size),
/// read by a subscription of `subscriber`; Redis's pipeline of 64 is one
/// burst waited for whole.
fn ours_bursts(store: &Store, subscriber: &Store) -> f64 {
    let sub = runtime::block_on(subscriber.subscribe_raw("bench", &[Key::from(3)], Scope::Branch, None)).unwrap();
    let size: u64 = std::env::var("WIRE_BURST").ok().and_then(|v| v.parse().ok()).unwrap_or(32);
    let n = pipelined_messages() / size * size;
    let (got, reader) = count_deliveries(sub, n);
    let branch = [Key::from(3)];
    let t = Instant::now();
    runtime::block_on(async {
        let mut inflight = std::collections::VecDeque::new();
        for b in 0..n / size {
            let burst: Vec<Box<[u8]>> = (0..size).map(|i| format!("{{\"id\":{}}}", b * size + i).into_bytes().into_boxed_slice()).collect();
            inflight.push_back(store.publish_raw_many("bench", &branch, burst));
            if inflight.len() as u64 * size >= 64 {
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
    let n = pipelined_messages() / 64 * 64;
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

/// Subscribers on a branch of ours, 100 in the fan-out row.
const FANOUT_SUBSCRIBERS: usize = 100;
/// Messages the one publisher sends in the fan-out row (Redis pipelines
/// them 64 at a time: a multiple of 64).
const FANOUT_MESSAGES: u64 = 160 * 64;

/// One publisher (64 in flight), `FANOUT_SUBSCRIBERS` subscribing
/// connections on one branch: messages delivered per second, all
/// subscribers together.
fn ours_fanout(address: &str, publisher: &Store, run: u64) -> f64 {
    let n = FANOUT_MESSAGES;
    let branch = [Key::from(format!("fan-{run}"))];
    let stores: Vec<Store> = (0..FANOUT_SUBSCRIBERS).map(|_| Store::connect(address).unwrap()).collect();
    let subs: Vec<_> = stores.iter().map(|s| runtime::block_on(s.subscribe_raw("fanout", &branch, Scope::Branch, None)).unwrap()).collect();
    let got = Arc::new(AtomicU64::new(0));
    let t = Instant::now();
    let readers: Vec<_> = subs
        .into_iter()
        .map(|sub| {
            let got = got.clone();
            runtime::spawn(async move {
                let mut seen = 0u64;
                while seen < n {
                    let batch = sub.next_batch(4096).await;
                    assert!(!batch.is_empty(), "a fan-out subscription ended");
                    for ev in batch {
                        match ev {
                            Event::Message(_) => {
                                seen += 1;
                                got.fetch_add(1, Ordering::Relaxed);
                            }
                            Event::Missed(m) => seen += m.count.unwrap_or(0),
                        }
                    }
                }
            })
        })
        .collect();
    runtime::block_on(async {
        let mut inflight = std::collections::VecDeque::new();
        for i in 0..n {
            inflight.push_back(publisher.publish_raw("fanout", &branch, format!("{{\"id\":{i}}}").into_bytes().into_boxed_slice()));
            if inflight.len() >= 64 {
                inflight.pop_front().unwrap().await.unwrap();
            }
        }
        for f in inflight {
            f.await.unwrap();
        }
        for r in readers {
            r.await.unwrap();
        }
    });
    let rate = got.load(Ordering::Relaxed) as f64 / t.elapsed().as_secs_f64();
    drop(stores);
    rate
}

/// The peers' async clients (Redis subscribers, NATS) run here, apart
/// from the engine's runtime.
fn peer_runtime() -> &'static tokio::runtime::Runtime {
    static RT: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
    RT.get_or_init(|| tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap())
}

/// Redis: one publisher pipelining 64 PUBLISH at a time, 100 SUBSCRIBE
/// connections: messages delivered per second.
fn redis_fanout(url: &str) -> f64 {
    let n = FANOUT_MESSAGES;
    let rt = peer_runtime();
    let client = redis::Client::open(url).unwrap();
    let subs: Vec<redis::aio::PubSub> = rt.block_on(async {
        let mut subs = Vec::new();
        for _ in 0..FANOUT_SUBSCRIBERS {
            let mut ps = client.get_async_pubsub().await.unwrap();
            ps.subscribe("fanout").await.unwrap();
            subs.push(ps);
        }
        subs
    });
    let got = Arc::new(AtomicU64::new(0));
    let t = Instant::now();
    let readers: Vec<_> = subs
        .into_iter()
        .map(|mut ps| {
            let got = got.clone();
            rt.spawn(async move {
                use futures::StreamExt;
                let mut stream = ps.on_message();
                for _ in 0..n {
                    stream.next().await.expect("a Redis subscriber was cut off");
                    got.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let mut pubc = redis_client(url);
    for chunk in 0..(n / 64) {
        let mut p = redis::pipe();
        for i in 0..64 {
            p.cmd("PUBLISH").arg("fanout").arg(format!("{{\"id\":{}}}", chunk * 64 + i)).ignore();
        }
        p.query::<()>(&mut pubc).unwrap();
    }
    rt.block_on(async {
        for r in readers {
            r.await.unwrap();
        }
    });
    got.load(Ordering::Relaxed) as f64 / t.elapsed().as_secs_f64()
}

/// A `nats-server` (core NATS, no JetStream) on a free loopback port.
struct Nats {
    _child: Kill,
    url: String,
}

fn start_nats(dir: &std::path::Path) -> Option<Nats> {
    let port = std::net::TcpListener::bind("127.0.0.1:0").ok()?.local_addr().ok()?.port();
    let child = Command::new("nats-server")
        .args(["-a", "127.0.0.1", "-p", &port.to_string()])
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let child = Kill(child);
    let end = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < end, "nats-server never listened on 127.0.0.1:{port}");
        std::thread::sleep(Duration::from_millis(10));
    }
    Some(Nats { _child: child, url: format!("nats://127.0.0.1:{port}") })
}

async fn nats_client(url: &str) -> async_nats::Client {
    // Room for a whole run: core NATS would drop a subscriber that falls behind.
    async_nats::ConnectOptions::new().subscription_capacity(1 << 20).connect(url).await.unwrap()
}

/// Counts `n` messages on `sub`, or stops when none came for a second
/// (NATS dropped some); gives how many came.
async fn nats_count(mut sub: async_nats::Subscriber, n: u64, got: Arc<AtomicU64>) {
    use futures::StreamExt;
    for _ in 0..n {
        match tokio::time::timeout(Duration::from_secs(1), sub.next()).await {
            Ok(Some(_)) => {
                got.fetch_add(1, Ordering::Relaxed);
            }
            _ => return,
        }
    }
}

/// Core NATS: one publisher, `subscribers` subscribing connections on one
/// subject, `n` messages: delivered per second. Its publishes have no
/// acknowledgement: the client writes them in its own batches (and one
/// flush at the end), the fastest way it offers.
fn nats_publish(url: &str, subscribers: usize, n: u64) -> f64 {
    let rt = peer_runtime();
    rt.block_on(async {
        let mut subs = Vec::new();
        for _ in 0..subscribers {
            let c = nats_client(url).await;
            let s = c.subscribe("bench").await.unwrap();
            c.flush().await.unwrap();
            subs.push((c, s));
        }
        let publisher = nats_client(url).await;
        let got = Arc::new(AtomicU64::new(0));
        let t = Instant::now();
        let mut clients = Vec::new();
        let readers: Vec<_> = subs
            .into_iter()
            .map(|(c, s)| {
                clients.push(c);
                tokio::spawn(nats_count(s, n, got.clone()))
            })
            .collect();
        for i in 0..n {
            publisher.publish("bench", format!("{{\"id\":{i}}}").into()).await.unwrap();
        }
        publisher.flush().await.unwrap();
        for r in readers {
            r.await.unwrap();
        }
        let got = got.load(Ordering::Relaxed);
        let elapsed = t.elapsed().as_secs_f64();
        if got < n * subscribers as u64 {
            // Its readers each waited a second for what never came: not counted.
            eprintln!("NATS delivered {got} of {} messages (it drops a subscriber that falls behind)", n * subscribers as u64);
            return got as f64 / (elapsed - 1.0).max(0.001);
        }
        got as f64 / elapsed
    })
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
    // WIRE_SERVER_WRAP="valgrind --tool=callgrind ..." runs the owner under it.
    let wrap: Vec<String> = std::env::var("WIRE_SERVER_WRAP").unwrap_or_default().split_whitespace().map(str::to_owned).collect();
    let mut server = match wrap.split_first() {
        Some((first, rest)) => {
            let mut c = Command::new(first);
            c.args(rest).arg(&tinystore_bin);
            c
        }
        None => Command::new(&tinystore_bin),
    };
    let _server = Kill(
        server
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

    let nats = start_nats(dir.path());
    // WIRE_OURS_ONLY=1 (profiling) skips the floor too.
    let floor = if std::env::var_os("WIRE_OURS_ONLY").is_some() { f64::NAN } else { best(|| floor_round_trips(dir.path())) };
    println!(
        "tinystore over a Unix socket vs Redis {} (Unix socket) and core NATS {} (TCP on loopback: it has no Unix socket); best of 3; ratio = tinystore / peer\n",
        redis_version(),
        nats_version()
    );
    println!("floor: a bare Unix-socket ping-pong between two processes: {:.0} round trips/s ({:.1} µs each)\n", floor, 1e6 / floor);
    println!("| workload | tinystore (unix) | Redis (unix) | ratio | NATS (tcp) | ratio | tinystore in floor round trips |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    let print_row = |name: &str, ours: f64, theirs: f64, nats: Option<f64>, per_op_trips: bool| {
        let trips = if per_op_trips { format!("{:.2}", floor / ours) } else { "-".into() };
        let nats = match nats {
            Some(v) => format!("{v:.0}/s | {:.2}", ours / v),
            None => "- | -".into(),
        };
        println!("| {name} | {ours:.0}/s | {theirs:.0}/s | {:.2} | {nats} | {trips} |", ours / theirs);
    };
    // WIRE_ONLY=publish-1|publish-64|publish-64-bursts|publish-64-shared|fanout|hold|contended|tx runs one row
    // (a comma-separated list runs several), and WIRE_OURS_ONLY=1 skips the
    // peers (for profiling).
    let only = std::env::var("WIRE_ONLY").ok();
    let ours_only = std::env::var_os("WIRE_OURS_ONLY").is_some();
    let selected = |tag: &str| only.as_deref().is_none_or(|o| o.split(',').any(|t| t.trim() == tag));
    let row = |name: &str, tag: &str, ours: &dyn Fn() -> f64, theirs: &dyn Fn() -> f64, nats_row: Option<&dyn Fn(&str) -> f64>, per_op_trips: bool| {
        if selected(tag) {
            let theirs = if ours_only { f64::NAN } else { best(theirs) };
            let nats = match (&nats, nats_row) {
                (Some(n), Some(f)) if !ours_only => Some(best(|| f(&n.url))),
                _ => None,
            };
            print_row(name, best(ours), theirs, nats, per_op_trips);
        }
    };
    let fan_run = AtomicU64::new(0);
    row("publish→deliver, one at a time", "publish-1", &|| ours_one_at_a_time(&store), &|| redis_one_at_a_time(&url), None, true);
    let subscriber = Store::connect(&address).unwrap();
    row("publish→deliver, 64 in flight", "publish-64", &|| ours_pipelined(&store, &subscriber), &|| redis_pipelined(&url), Some(&|u| nats_publish(u, 1, pipelined_messages())), false);
    row(
        "publish→deliver, 64 in flight as bursts (publish_raw_many: 2 of 32)",
        "publish-64-bursts",
        &|| ours_bursts(&store, &subscriber),
        &|| redis_pipelined(&url),
        Some(&|u| nats_publish(u, 1, pipelined_messages())),
        false,
    );
    // One store publishing and subscribing: Redis cannot (a subscribed
    // connection only listens), so its peer is the same two connections.
    row("publish→deliver, 64 in flight, one connection for both (Redis: two)", "publish-64-shared", &|| ours_pipelined(&store, &store), &|| redis_pipelined(&url), None, false);
    row(
        "fan-out: 1 publisher (64 in flight), 100 subscribing connections (deliveries)",
        "fanout",
        &|| ours_fanout(&address, &store, fan_run.fetch_add(1, Ordering::Relaxed)),
        &|| redis_fanout(&url),
        Some(&|u| nats_publish(u, FANOUT_SUBSCRIBERS, FANOUT_MESSAGES)),
        false,
    );
    row("hold+release, sequential", "hold", &|| ours_hold_release(&store), &|| redis_hold_release(&url), None, true);
    row("hold+release, 4 clients on one key (handoffs)", "contended", &|| ours_contended(&address), &|| redis_contended(&url), None, false);
    if nats.is_none() {
        println!("\n(no NATS column: `nats-server` is not on the PATH; apt-get install nats-server)");
    }
    // No peer: SQLite transactions of this (connected) process, one at a time.
    if selected("tx") {
        println!("\n| SQL transaction, connected, one at a time | tinystore |\n|---|---:|");
        println!("| insert, no publish | {:.0}/s |", best(|| ours_tx(&store, false)));
        println!("| insert + publish (CHAN-03) | {:.0}/s |", best(|| ours_tx(&store, true)));
    }
}

fn nats_version() -> String {
    Command::new("nats-server").arg("--version").output().ok().and_then(|o| String::from_utf8(o.stdout).ok()).and_then(|s| s.split_whitespace().last().map(|v| v.trim_start_matches('v').to_owned())).unwrap_or_default()
}

fn redis_version() -> String {
    Command::new("redis-server").arg("--version").output().ok().and_then(|o| String::from_utf8(o.stdout).ok()).and_then(|s| s.split_whitespace().nth(2).map(|v| v.trim_start_matches("v=").to_owned())).unwrap_or_default()
}
