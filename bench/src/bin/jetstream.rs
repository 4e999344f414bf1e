//! Channels of a cluster store on NATS JetStream against plain JetStream
//! (the `async-nats` crate directly: a memory stream of 3 replicas with the
//! same limits, publish with its ack, an ordered pull consumer), on one
//! 3-node NATS cluster on this machine, rows interleaved, `JS_ROUNDS`
//! rounds (default 3; `JS_ONLY=TEXT` runs the rows whose name starts so):
//!
//! - publish→deliver, one at a time (publish, its ack, its delivery);
//! - publish→deliver, 64 in flight, one branch (subject);
//! - fan-out: one publisher (64 in flight), 100 subscriptions on one
//!   branch in one process (deliveries per second, all together);
//! - 4 publishers on one branch (tinystore only: what sharing a branch costs
//!   against 4 publishers on 4 branches).
//!
//! Run: `cargo run --release -p tinystore-bench --bin jetstream` (needs
//! Debian's `nats-server` and `etcd-server`; etcd holds only the store's
//! epoch here, one member).

use std::collections::VecDeque;
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer, stream};
use futures::StreamExt;
use tinystore::channels::{Event, Scope};
use tinystore::{Key, Store, runtime};

struct Kill(Child);
impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn etcd(dir: &std::path::Path) -> (Kill, String) {
    let (c, p) = (free_port(), free_port());
    let child = Command::new("etcd")
        .args(["--name", "m0", "--data-dir"])
        .arg(dir.join("etcd"))
        .args(["--listen-client-urls", &format!("http://127.0.0.1:{c}"), "--advertise-client-urls", &format!("http://127.0.0.1:{c}")])
        .args(["--listen-peer-urls", &format!("http://127.0.0.1:{p}"), "--initial-advertise-peer-urls", &format!("http://127.0.0.1:{p}")])
        .args(["--initial-cluster", &format!("m0=http://127.0.0.1:{p}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("etcd (Debian's etcd-server)");
    let ep = format!("127.0.0.1:{c}");
    let end = Instant::now() + Duration::from_secs(20);
    while !Command::new("etcdctl").env("ETCDCTL_API", "3").arg(format!("--endpoints={ep}")).args(["endpoint", "health"]).output().unwrap().status.success() {
        assert!(Instant::now() < end, "etcd never became healthy");
        std::thread::sleep(Duration::from_millis(100));
    }
    (Kill(child), ep)
}

/// Three JetStream nodes in one cluster; gives them and their URLs.
fn nats(dir: &std::path::Path) -> (Vec<Kill>, String) {
    let ports: Vec<(u16, u16, u16)> = (0..3).map(|_| (free_port(), free_port(), free_port())).collect();
    let routes: Vec<String> = ports.iter().map(|(_, r, _)| format!("nats-route://127.0.0.1:{r}")).collect();
    let mut kids = Vec::new();
    for (i, (c, r, h)) in ports.iter().enumerate() {
        let store = dir.join(format!("n{i}"));
        let conf = dir.join(format!("n{i}.conf"));
        std::fs::write(
            &conf,
            format!(
                "server_name: n{i}\nlisten: 127.0.0.1:{c}\nhttp: 127.0.0.1:{h}\nmax_payload: 2MB\n\
                 jetstream {{ store_dir: {store:?}, max_memory_store: 1GB, max_file_store: 16MB }}\n\
                 cluster {{ name: bench, listen: 127.0.0.1:{r}, routes: [{}] }}\n",
                routes.join(", ")
            ),
        )
        .unwrap();
        let child = Command::new("nats-server").arg("-c").arg(&conf).stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("nats-server (Debian's nats-server)");
        kids.push(Kill(child));
    }
    for (_, _, h) in &ports {
        let end = Instant::now() + Duration::from_secs(30);
        loop {
            use std::io::{Read, Write};
            let ok = std::net::TcpStream::connect(("127.0.0.1", *h)).ok().and_then(|mut s| {
                s.write_all(b"GET /healthz HTTP/1.0\r\n\r\n").ok()?;
                let mut out = String::new();
                s.read_to_string(&mut out).ok()?;
                Some(out.contains(" 200 "))
            });
            if ok == Some(true) {
                break;
            }
            assert!(Instant::now() < end, "a NATS node never became healthy");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let urls: Vec<String> = ports.iter().map(|(c, _, _)| format!("nats://127.0.0.1:{c}")).collect();
    (kids, urls.join(","))
}

const ONE_AT_A_TIME: u64 = 3_000;
const IN_FLIGHT: u64 = 100_000;
const FANOUT_SUBSCRIBERS: usize = 100;
const FANOUT_MESSAGES: u64 = 10_000;

fn payload(i: u64) -> Box<[u8]> {
    format!("{{\"id\":{i}}}").into_bytes().into_boxed_slice()
}

/// Reads `n` messages (a missed count counts as read) from each of `subs`:
/// how many messages came, and how many were told missed.
async fn drain(sub: tinystore::channels::RawSubscription, n: u64, got: Arc<AtomicU64>, missed: Arc<AtomicU64>) {
    let mut seen = 0u64;
    while seen < n {
        let batch = sub.next_batch(4096).await;
        assert!(!batch.is_empty(), "a subscription ended");
        for ev in batch {
            match ev {
                Event::Message(_) => {
                    seen += 1;
                    got.fetch_add(1, Ordering::Relaxed);
                }
                Event::Missed(m) => {
                    let c = m.count.unwrap_or(0);
                    seen += c;
                    missed.fetch_add(c, Ordering::Relaxed);
                }
            }
        }
    }
}

struct Row {
    rate: f64,
    missed: u64,
}

fn ours_one_at_a_time(store: &Store, run: u64) -> Row {
    let branch = [Key::from(format!("one-{run}"))];
    let sub = runtime::block_on(store.subscribe_raw("bench", &branch, Scope::Branch, None)).unwrap();
    let t = Instant::now();
    for i in 0..ONE_AT_A_TIME {
        runtime::block_on(async {
            store.publish_raw("bench", &branch, payload(i)).await.unwrap();
            match sub.next().await {
                Some(Event::Message(_)) => {}
                other => panic!("{other:?}"),
            }
        });
    }
    Row { rate: ONE_AT_A_TIME as f64 / t.elapsed().as_secs_f64(), missed: 0 }
}

/// `publishers` stores publish `n` messages each, 64 in flight, to one
/// branch (`shared`) or each to its own; one subscription per branch reads
/// them. Deliveries per second.
fn ours_in_flight(address: &str, store: &Store, run: u64, publishers: usize, shared: bool, subscribers: usize, n: u64) -> Row {
    let branches: Vec<[Key; 1]> = (0..if shared { 1 } else { publishers }).map(|p| [Key::from(format!("f-{run}-{p}"))]).collect();
    let (got, missed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let per_branch = if shared { n * publishers as u64 } else { n };
    let mut readers = Vec::new();
    for b in &branches {
        for _ in 0..subscribers {
            let sub = runtime::block_on(store.subscribe_raw("bench", b, Scope::Branch, None)).unwrap();
            readers.push(runtime::spawn(drain(sub, per_branch, got.clone(), missed.clone())));
        }
    }
    let pubs: Vec<Store> = (0..publishers).map(|_| if publishers == 1 { store.clone() } else { Store::connect(address).unwrap() }).collect();
    let t = Instant::now();
    let tasks: Vec<_> = pubs
        .iter()
        .enumerate()
        .map(|(p, s)| {
            let (s, branch) = (s.clone(), branches[if shared { 0 } else { p }].clone());
            runtime::spawn(async move {
                let mut inflight = VecDeque::new();
                for i in 0..n {
                    inflight.push_back(s.publish_raw("bench", &branch, payload(i)));
                    if inflight.len() >= 64 {
                        inflight.pop_front().unwrap().await.unwrap();
                    }
                }
                for f in inflight {
                    f.await.unwrap();
                }
            })
        })
        .collect();
    runtime::block_on(async {
        for t in tasks {
            t.await.unwrap();
        }
        for r in readers {
            r.await.unwrap();
        }
    });
    Row { rate: got.load(Ordering::Relaxed) as f64 / t.elapsed().as_secs_f64(), missed: missed.load(Ordering::Relaxed) }
}

struct Plain {
    js: jetstream::Context,
    stream: stream::Stream,
}

async fn plain(urls: &str) -> Plain {
    let addrs: Vec<async_nats::ServerAddr> = urls.split(',').map(|u| u.parse().unwrap()).collect();
    let client = async_nats::connect(addrs).await.unwrap();
    let js = jetstream::new(client);
    let stream = js
        .get_or_create_stream(stream::Config {
            name: "plain".into(),
            subjects: vec!["plain.>".into()],
            storage: stream::StorageType::Memory,
            num_replicas: 3,
            max_messages_per_subject: 1024,
            max_bytes: 64 << 20,
            discard: stream::DiscardPolicy::Old,
            duplicate_window: Duration::from_secs(120),
            ..Default::default()
        })
        .await
        .unwrap();
    Plain { js, stream }
}

async fn ordered(p: &Plain, subject: &str) -> consumer::pull::Ordered {
    p.stream
        .create_consumer(consumer::pull::OrderedConfig { filter_subject: subject.into(), deliver_policy: consumer::DeliverPolicy::New, ..Default::default() })
        .await
        .unwrap()
        .messages()
        .await
        .unwrap()
}

fn plain_one_at_a_time(p: &Plain, run: u64) -> Row {
    // JS_PLAIN_HEADERS=1: each publish also carries what tinystore's does
    // (a message id, the expected last subject sequence, two headers), to
    // tell the servers' share of the difference from the client's.
    // JS_PLAIN_HEADERS=id or =expect carries only the message id or only
    // the expected sequence.
    let headers = std::env::var("JS_PLAIN_HEADERS").unwrap_or_default();
    let (with_id, with_expect) = (headers == "1" || headers == "id", headers == "1" || headers == "expect");
    runtime::block_on(async {
        let subject = format!("plain.one-{run}");
        let mut msgs = ordered(p, &subject).await;
        let t = Instant::now();
        let mut last = 0u64;
        for i in 0..ONE_AT_A_TIME {
            if with_id || with_expect {
                let id = format!("{run}-{i}");
                let mut m = jetstream::message::PublishMessage::build()
                    .payload(payload(i).into_vec().into())
                    .header("Tinystore-Seq", (i + 1).to_string().as_str())
                    .header("Tinystore-Prev", last.to_string().as_str());
                if with_id {
                    m = m.message_id(id.as_str());
                }
                if with_expect {
                    m = m.expected_last_subject_sequence(last);
                }
                last = p.js.send_publish(subject.clone(), m).await.unwrap().await.unwrap().sequence;
            } else {
                p.js.publish(subject.clone(), payload(i).into_vec().into()).await.unwrap().await.unwrap();
            }
            msgs.next().await.unwrap().unwrap();
        }
        Row { rate: ONE_AT_A_TIME as f64 / t.elapsed().as_secs_f64(), missed: 0 }
    })
}

fn plain_in_flight(p: &Plain, run: u64, subscribers: usize, n: u64) -> Row {
    runtime::block_on(async {
        let subject = format!("plain.f-{run}");
        let got = Arc::new(AtomicU64::new(0));
        let mut readers = Vec::new();
        for _ in 0..subscribers {
            let mut msgs = ordered(p, &subject).await;
            let got = got.clone();
            readers.push(runtime::spawn(async move {
                for _ in 0..n {
                    msgs.next().await.unwrap().unwrap();
                    got.fetch_add(1, Ordering::Relaxed);
                }
            }));
        }
        let t = Instant::now();
        let mut inflight = VecDeque::new();
        for i in 0..n {
            inflight.push_back(p.js.publish(subject.clone(), payload(i).into_vec().into()).await.unwrap());
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
        Row { rate: got.load(Ordering::Relaxed) as f64 / t.elapsed().as_secs_f64(), missed: 0 }
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn uptime() -> String {
    String::from_utf8_lossy(&Command::new("uptime").output().unwrap().stdout).trim().to_owned()
}

fn main() {
    let dir = tempfile::Builder::new().prefix("tinystore-bench-js").tempdir().unwrap();
    let (_etcd, ep) = etcd(dir.path());
    let (_nats, urls) = nats(dir.path());
    let address = format!("etcd://{ep}/bench?nats={urls}&replicas=3");
    let rounds: u64 = std::env::var("JS_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(3);
    let store = Store::connect(&address).unwrap();
    let p = runtime::block_on(plain(&urls));
    println!("nats-server {}; load before: {}", String::from_utf8_lossy(&Command::new("nats-server").arg("--version").output().unwrap().stdout).trim(), uptime());
    type Run<'a> = Box<dyn Fn(u64) -> Row + 'a>;
    let rows: Vec<(&str, Run, Option<Run>)> = vec![
        ("publish→deliver, one at a time", Box::new(|r| ours_one_at_a_time(&store, r)), Some(Box::new(|r| plain_one_at_a_time(&p, r)))),
        ("publish→deliver, 64 in flight, one branch", Box::new(|r| ours_in_flight(&address, &store, r, 1, false, 1, IN_FLIGHT)), Some(Box::new(|r| plain_in_flight(&p, r, 1, IN_FLIGHT)))),
        (
            "fan-out: 1 publisher (64 in flight), 100 subscriptions (deliveries)",
            Box::new(|r| ours_in_flight(&address, &store, r + 100, 1, false, FANOUT_SUBSCRIBERS, FANOUT_MESSAGES)),
            Some(Box::new(|r| plain_in_flight(&p, r + 100, FANOUT_SUBSCRIBERS, FANOUT_MESSAGES))),
        ),
        ("4 publishers (64 in flight each), 4 branches", Box::new(|r| ours_in_flight(&address, &store, r + 200, 4, false, 1, IN_FLIGHT / 4)), None),
        ("4 publishers (64 in flight each), one branch", Box::new(|r| ours_in_flight(&address, &store, r + 300, 4, true, 1, IN_FLIGHT / 4)), None),
    ];
    println!("| workload | tinystore | plain JetStream | ratio of medians | per round |");
    println!("|---|---:|---:|---:|---|");
    // JS_ONLY=TEXT runs the rows whose name starts with TEXT (for a profile).
    let only = std::env::var("JS_ONLY").unwrap_or_default();
    for (name, ours, peer) in rows.iter().filter(|r| r.0.starts_with(&only)) {
        let (mut a, mut b, mut missed) = (Vec::new(), Vec::new(), 0);
        // JS_SIDE=ours or plain runs one side only (for a profile of it).
        let side = std::env::var("JS_SIDE").unwrap_or_default();
        for r in 0..rounds {
            if side != "plain" {
                let o = ours(r);
                missed += o.missed;
                a.push(o.rate);
            }
            if let Some(peer) = peer.as_ref().filter(|_| side != "ours") {
                b.push(peer(r).rate);
            }
        }
        if a.is_empty() {
            println!("| {name} | | {:.0}/s | | |", median(b));
            continue;
        }
        let said_missed = if missed > 0 { format!(" ({missed} told missed)") } else { String::new() };
        if b.is_empty() {
            println!("| {name} | {:.0}/s{said_missed} | | | {:?} |", median(a.clone()), a.iter().map(|x| x.round()).collect::<Vec<_>>());
        } else {
            let per: Vec<String> = a.iter().zip(&b).map(|(x, y)| format!("{:.2}", x / y)).collect();
            println!("| {name} | {:.0}/s{said_missed} | {:.0}/s | {:.2} | {} |", median(a.clone()), median(b.clone()), median(a) / median(b), per.join(", "));
        }
    }
    println!("load after: {}", uptime());
}
