//! Faults of cluster stores' channels on NATS JetStream that load the
//! machine (a process frozen through a burst, 1,000 subscriptions across a
//! server restart): a binary of their own, one at a time, so the contract
//! tests of `cluster_channels.rs` do not run beside them (docs/cluster.md).

mod common;
mod etcd;
mod nats;

use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use etcd::Cluster;
use nats::Nats;
use tinystore::{Key, Missed, Store};

/// Taken by each test: they run one at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

fn address(c: &Cluster, n: &Nats, prefix: &str) -> String {
    format!("{}?nats={}", c.address(prefix), n.urls())
}

/// As in cluster_channels.rs: a stream's first leader election has been
/// seen to take longer than the default 10 s on 2 loaded cores.
const TIMEOUT: Duration = Duration::from_secs(30);

fn connect_to(address: &str) -> Store {
    Store::connect_with(address, tinystore::ConnectOptions::new().request_timeout(TIMEOUT)).expect("connect to the cluster store")
}

/// A worker process (core/examples/worker.rs) printing each event of
/// branch 1 of a channel as a line; killed when dropped (also when a test
/// panics, frozen or not).
struct Listener {
    child: std::process::Child,
    lines: mpsc::Receiver<String>,
}

impl Listener {
    fn start(address: &str, channel: &str) -> Listener {
        use std::io::BufRead;
        let bin = std::path::Path::new(env!("CARGO_BIN_EXE_tinystore")).parent().unwrap().join("examples/worker");
        let mut child = std::process::Command::new(bin)
            .args(["listen", address, channel])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("the worker example: run the whole `cargo test -p tinystore`, or `cargo build -p tinystore --examples`");
        let out = std::io::BufReader::new(child.stdout.take().unwrap());
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for l in out.lines() {
                if l.map(|l| tx.send(l)).is_err() {
                    break;
                }
            }
        });
        Listener { child, lines }
    }

    fn line(&self, within: Duration) -> Option<String> {
        self.lines.recv_timeout(within).ok()
    }

    fn signal(&self, sig: i32) {
        assert_eq!(unsafe { libc::kill(self.child.id() as i32, sig) }, 0);
    }

    /// The process's state letter in /proc (`T`: stopped).
    fn state(&self) -> char {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap();
        stat[stat.rfind(')').unwrap() + 2..].chars().next().unwrap()
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// CHAN-02 on NATS across processes: a subscriber process frozen (SIGSTOP)
/// while 5,000 messages are published on its branch. The publisher never
/// waits for it: the 5,000 go at the pace of 1,000 published while it read
/// along. When it resumes (SIGCONT) it is told once, before its next
/// message, exactly how many it missed (those the stream discarded past
/// its 1,024 per branch, and any its own queue dropped), then gets the
/// rest in order, up to the last; nothing is lost beyond that count.
#[test]
fn chan_02_cluster_a_subscriber_process_frozen_while_5000_are_published_is_told_one_exact_count() {
    let _one = one_at_a_time();
    let (c, n) = (Cluster::shared(), Nats::start());
    let address = address(&c, &n, "chan02frozen");
    let store = connect_to(&address);
    let events = store.channel::<u64>("c").open().unwrap();
    // Makes the stream first: the worker's subscribe has the default 10 s.
    events.under(1).publish(&0).unwrap();
    let w = Listener::start(&address, "c");
    assert_eq!(w.line(Duration::from_secs(60)).as_deref(), Some("listening"));
    let t = Instant::now();
    for i in 1..=1000u64 {
        events.under(1).publish(&i).unwrap();
    }
    let live = t.elapsed();
    for seq in 2..=1001 {
        assert_eq!(w.line(Duration::from_secs(10)), Some(format!("msg {seq}")), "read along before the freeze");
    }
    w.signal(libc::SIGSTOP);
    assert!(common::eventually(2000, || w.state() == 'T'), "frozen");
    let frozen_count = 5000u64;
    let t = Instant::now();
    for i in 0..frozen_count {
        events.under(1).publish(&(1001 + i)).unwrap();
    }
    let frozen = t.elapsed();
    let per = |d: Duration, k: u64| d.as_secs_f64() * 1e6 / k as f64;
    eprintln!("publish: {:.0} µs a message with the reader reading, {:.0} µs while it was frozen ({frozen:?} for {frozen_count})", per(live, 1000), per(frozen, frozen_count));
    assert!(per(frozen, frozen_count) < 3.0 * per(live, 1000), "the publisher did not wait for the frozen reader: {frozen:?} for {frozen_count} against {live:?} for 1,000");
    assert_eq!(w.state(), 'T', "still frozen through the burst");
    w.signal(libc::SIGCONT);
    let last = 1001 + frozen_count;
    let (mut expect, mut got, mut misses) = (1002u64, 0u64, Vec::new());
    while expect <= last {
        let l = w.line(Duration::from_secs(30)).unwrap_or_else(|| panic!("nothing within 30 s after seq {}; misses {misses:?}", expect - 1));
        if let Some(rest) = l.strip_prefix("missed Some(") {
            let (k, reason) = rest.split_once(") ").unwrap();
            let k: u64 = k.parse().unwrap();
            misses.push((k, reason.to_owned()));
            expect += k;
        } else {
            let seq: u64 = l.strip_prefix("msg ").unwrap_or_else(|| panic!("unexpected line {l:?}")).parse().unwrap();
            assert_eq!(seq, expect, "the next message in order, each gap told before it: misses {misses:?}");
            expect += 1;
            got += 1;
        }
    }
    eprintln!("after the freeze: {got} received, misses {misses:?}");
    assert_eq!(misses.len(), 1, "told once: {misses:?}");
    assert_eq!(misses[0].1, "behind", "{misses:?}");
    assert_eq!(got + misses[0].0, frozen_count, "nothing lost beyond the count");
    assert!(got >= 1024, "at least the stream's 1,024 of the branch: {got}");
    events.under(1).publish(&0).unwrap();
    assert_eq!(w.line(Duration::from_secs(10)), Some(format!("msg {}", last + 1)), "then goes on");
    assert_eq!(w.line(Duration::from_millis(500)), None, "nothing more");
}

/// CHAN-04 on NATS: 1,000 branch subscriptions of one store (one NATS
/// connection, to node 0) across a restart (kill -9, start again) of the
/// server they are on. Each got its branch's message before; after the
/// restart one message is published per branch, and every subscription
/// gets it, nothing missed (the stream, 3 replicas, kept everything) and
/// any gap told with its exact count.
#[test]
fn chan_04_cluster_1000_subscriptions_on_one_connection_all_receive_again_after_a_server_restart() {
    const N: u64 = 1000;
    let _one = one_at_a_time();
    let c = Cluster::shared();
    let mut n = Nats::start();
    let sub_store = connect_to(&format!("{}?nats={}", c.address("chan04many"), n.urls_of(&[0])));
    let pub_store = connect_to(&format!("{}?nats={}", c.address("chan04many"), n.urls_of(&[1, 2])));
    let sub_ch = sub_store.channel::<u64>("c").open().unwrap();
    // Per branch: (value, branch sequence) received, or the miss told.
    type Log = Arc<Vec<Mutex<Vec<Result<(u64, u64), Missed>>>>>;
    let logs: Log = Arc::new((0..N).map(|_| Mutex::new(Vec::new())).collect());
    let t = Instant::now();
    let subs: Vec<_> = std::thread::scope(|s| {
        let threads: Vec<_> = (0..8u64)
            .map(|k| {
                let (ch, logs) = (sub_ch.clone(), logs.clone());
                s.spawn(move || {
                    (k..N)
                        .step_by(8)
                        .map(|b| {
                            let (l1, l2) = (logs.clone(), logs.clone());
                            ch.under(b)
                                .on_missed(move |m| l1[b as usize].lock().unwrap().push(Err(m)))
                                .subscribe(move |m| l2[b as usize].lock().unwrap().push(Ok((m.value, m.seq))))
                                .unwrap()
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        threads.into_iter().flat_map(|t| t.join().unwrap()).collect()
    });
    eprintln!("{N} subscriptions in {:?}", t.elapsed());
    let nats = sub_store.status_json().unwrap()["cluster"]["nats"].clone();
    assert_eq!(nats["server"].as_str(), Some(format!("127.0.0.1:{}", n.nodes[0].port).as_str()), "on node 0: {nats}");
    // One message per branch, all in flight at once.
    let publish_all = |value: u64| {
        tinystore::runtime::block_on(futures::future::join_all((0..N).map(|b| pub_store.publish_raw("c", &[Key::from(b)], value.to_string().into_bytes().into_boxed_slice()))))
            .into_iter()
            .collect::<tinystore::Result<Vec<()>>>()
            .unwrap()
    };
    let have = |value: u64| (0..N as usize).filter(|&b| logs[b].lock().unwrap().iter().any(|e| matches!(e, Ok((v, _)) if *v == value))).count();
    publish_all(1);
    assert!(common::eventually(60_000, || have(1) == N as usize), "before the restart: {} of {N} got their message", have(1));
    // Idle a while, as subscriptions of a real app are: their checks of a
    // quiet consumer are then 16 s apart.
    std::thread::sleep(Duration::from_secs(15));
    let t = Instant::now();
    n.restart(0);
    eprintln!("node 0 killed and up again in {:?}", t.elapsed());
    let t = Instant::now();
    publish_all(2);
    let all = common::eventually(120_000, || have(2) == N as usize);
    let took = t.elapsed();
    let missing: Vec<usize> = (0..N as usize).filter(|&b| !logs[b].lock().unwrap().iter().any(|e| matches!(e, Ok((2, _))))).collect();
    eprintln!("after the restart: {} of {N} got the next message, all within {took:?}; server now {}", N as usize - missing.len(), sub_store.status_json().unwrap()["cluster"]["nats"]["server"]);
    assert!(all, "{} of {N} subscriptions got nothing after the restart, e.g. branches {:?}", missing.len(), &missing[..missing.len().min(10)]);
    let mut told = 0;
    for (b, l) in logs.iter().enumerate() {
        let l = l.lock().unwrap();
        let mut expect: Option<u64> = None;
        let mut pending = 0;
        for e in l.iter() {
            match e {
                Err(m) => {
                    pending += m.count.unwrap_or_else(|| panic!("branch {b}: a miss of unknown count: {l:?}"));
                    told += 1;
                }
                Ok((_, seq)) => {
                    if let Some(x) = expect {
                        assert_eq!(*seq, x + pending, "branch {b}: a gap told exactly: {l:?}");
                    }
                    pending = 0;
                    expect = Some(seq + 1);
                }
            }
        }
        assert_eq!(l.iter().filter_map(|e| e.as_ref().ok().map(|x| x.0)).collect::<Vec<_>>(), vec![1, 2], "branch {b}: each once, in order");
    }
    eprintln!("misses told: {told}");
    drop(subs);
}

/// STORE-02 on NATS: with every NATS server of a cluster store gone (kill
/// -9), `status()` fails with `unavailable` within about the request
/// timeout, where it used to ask JetStream for the stream names again and
/// again, never answering (a Python test waiting on it could not be
/// stopped by its timeout).
#[test]
fn store_02_cluster_status_with_every_nats_server_gone_is_unavailable_within_the_request_timeout() {
    let _one = one_at_a_time();
    let c = Cluster::shared();
    let mut n = Nats::start();
    let timeout = Duration::from_secs(2);
    let store = Store::connect_with(&address(&c, &n, "store02status"), tinystore::ConnectOptions::new().request_timeout(timeout)).expect("connect");
    // A stream of this store's, so status has a channel to list.
    tinystore::runtime::block_on(store.publish_raw("c", &[Key::from(1u64)], b"1".to_vec().into_boxed_slice())).unwrap();
    assert!(store.status_json().is_ok());
    for i in 0..3 {
        n.kill(i);
    }
    let (tx, rx) = mpsc::channel();
    let asked = Instant::now();
    std::thread::spawn(move || {
        let _ = tx.send(store.status_json().map(|_| ()));
    });
    let answer = rx.recv_timeout(timeout * 6).expect("status() answered within 6 request timeouts");
    let e = answer.expect_err("status() with every NATS server gone");
    assert_eq!(e.kind(), tinystore::ErrorKind::Unavailable, "{e}");
    assert!(asked.elapsed() < timeout * 3, "status() took {:?}", asked.elapsed());
}
