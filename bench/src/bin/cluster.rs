//! tinystore's cluster store (locks in etcd) on a 3-member etcd cluster on
//! this machine, with etcd's default election timing, against `etcdctl
//! lock` for scale, in one run: hold+release of one key per second,
//! sequential and with 4 processes contending for it (this binary again,
//! `cluster worker ADDRESS`, one store each).
//!
//! Run: `cargo run --release -p tinystore-bench --bin cluster`
//! (needs Debian's `etcd-server` and `etcd-client`). With
//! `ETCD_MUTEX_BENCH` naming the binary of bench/etcd-mutex (`go build`
//! there), etcd's own `concurrency.Mutex` (Go clientv3) runs the same rows
//! on the same cluster, interleaved with tinystore's, two rounds each.
//! `CLUSTER_BENCH_SECS` (default 5) is each row's length, for a short check.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tinystore::Store;

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

/// Three members in `dir`; gives them and their client endpoints.
fn cluster(dir: &std::path::Path) -> (Vec<Kill>, String) {
    let ports: Vec<(u16, u16)> = (0..3).map(|_| (free_port(), free_port())).collect();
    let initial: Vec<String> = ports.iter().enumerate().map(|(i, (_, p))| format!("m{i}=http://127.0.0.1:{p}")).collect();
    let mut kids = Vec::new();
    for (i, (c, p)) in ports.iter().enumerate() {
        let child = Command::new("etcd")
            .args(["--name", &format!("m{i}")])
            .arg("--data-dir")
            .arg(dir.join(format!("m{i}")))
            .args(["--listen-client-urls", &format!("http://127.0.0.1:{c}"), "--advertise-client-urls", &format!("http://127.0.0.1:{c}")])
            .args(["--listen-peer-urls", &format!("http://127.0.0.1:{p}"), "--initial-advertise-peer-urls", &format!("http://127.0.0.1:{p}")])
            .args(["--initial-cluster", &initial.join(","), "--initial-cluster-state", "new"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("etcd (Debian's etcd-server)");
        kids.push(Kill(child));
    }
    let eps: Vec<String> = ports.iter().map(|(c, _)| format!("127.0.0.1:{c}")).collect();
    let end = Instant::now() + Duration::from_secs(20);
    while !Command::new("etcdctl").env("ETCDCTL_API", "3").arg(format!("--endpoints={}", eps.join(","))).args(["endpoint", "health"]).output().unwrap().status.success() {
        assert!(Instant::now() < end, "etcd never became healthy");
        std::thread::sleep(Duration::from_millis(100));
    }
    (kids, eps.join(","))
}

fn sequential(address: &str, secs: u64) -> f64 {
    let s = Store::connect(address).unwrap();
    let lock = s.lock("bench").open().unwrap();
    lock.hold("k", |_| -> tinystore::Result<()> { Ok(()) }).unwrap();
    let (t, mut n) = (Instant::now(), 0u64);
    while t.elapsed() < Duration::from_secs(secs) {
        lock.hold("k", |_| -> tinystore::Result<()> { Ok(()) }).unwrap();
        n += 1;
    }
    n as f64 / t.elapsed().as_secs_f64()
}

/// `cluster worker ADDRESS`, a contending process: connects, holds once,
/// says "ready"; at the line "go" holds and releases "k" until the line
/// "stop", then says how many holds it made.
fn worker(address: &str) {
    use std::io::BufRead;
    let s = Store::connect(address).unwrap();
    let lock = s.lock("bench").wait(Duration::from_secs(60)).open().unwrap();
    lock.hold("k", |_| -> tinystore::Result<()> { Ok(()) }).unwrap();
    println!("ready");
    let mut lines = std::io::BufReader::new(std::io::stdin()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "go");
    let stop = Arc::new(AtomicBool::new(false));
    let s2 = stop.clone();
    std::thread::spawn(move || {
        let _ = lines.next();
        s2.store(true, Ordering::Relaxed);
    });
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        lock.hold("k", |_| -> tinystore::Result<()> { Ok(()) }).unwrap();
        n += 1;
    }
    println!("{n}");
    s.close();
}

/// `procs` worker processes contending for one key for `secs` seconds,
/// started together once each is connected: holds per second, all summed.
fn contended(address: &str, procs: usize, secs: u64) -> f64 {
    use std::io::{BufRead, BufReader, Write};
    let me = std::env::current_exe().unwrap();
    let mut kids: Vec<(Kill, BufReader<std::process::ChildStdout>)> = (0..procs)
        .map(|_| {
            let mut c = Command::new(&me).args(["worker", address]).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
            let out = BufReader::new(c.stdout.take().unwrap());
            (Kill(c), out)
        })
        .collect();
    let mut line = String::new();
    for (_, out) in &mut kids {
        line.clear();
        out.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "ready", "a worker did not start");
    }
    let say = |kids: &mut Vec<(Kill, BufReader<std::process::ChildStdout>)>, what: &str| {
        for (k, _) in kids.iter_mut() {
            writeln!(k.0.stdin.as_mut().unwrap(), "{what}").unwrap();
        }
    };
    say(&mut kids, "go");
    let t = Instant::now();
    std::thread::sleep(Duration::from_secs(secs));
    say(&mut kids, "stop");
    let elapsed = t.elapsed().as_secs_f64();
    let mut done = 0u64;
    for (_, out) in &mut kids {
        line.clear();
        out.read_line(&mut line).unwrap();
        done += line.trim().parse::<u64>().expect("a worker's count");
    }
    done as f64 / elapsed
}

/// `etcdctl lock NAME true`, one process per hold, sequential.
fn etcdctl_lock(endpoints: &str, n: u32) -> f64 {
    let t = Instant::now();
    for _ in 0..n {
        let ok = Command::new("etcdctl").env("ETCDCTL_API", "3").arg(format!("--endpoints={endpoints}")).args(["lock", "bench-etcdctl", "true"]).output().unwrap();
        assert!(ok.status.success());
    }
    f64::from(n) / t.elapsed().as_secs_f64()
}

fn uptime() -> String {
    String::from_utf8_lossy(&Command::new("uptime").output().unwrap().stdout).trim().to_owned()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("worker") {
        return worker(&args[2]);
    }
    let dir = tempfile::Builder::new().prefix("tinystore-bench-etcd").tempdir().unwrap();
    let (_members, endpoints) = cluster(dir.path());
    let address = format!("etcd://{endpoints}/bench");
    println!("load before: {}", uptime());
    let go = std::env::var_os("ETCD_MUTEX_BENCH");
    let secs: u64 = std::env::var("CLUSTER_BENCH_SECS").map(|v| v.parse().expect("CLUSTER_BENCH_SECS: whole seconds")).unwrap_or(5);
    for round in 1..=2 {
        let seq = sequential(&address, secs);
        println!("round {round}: tinystore cluster, sequential hold+release: {seq:.0}/s");
        let four = contended(&address, 4, secs);
        println!("round {round}: tinystore cluster, 4 processes contending for one key: {four:.0}/s");
        if let Some(go) = &go {
            let out = Command::new(go).arg(&endpoints).arg(secs.to_string()).output().expect("run the etcd-mutex benchmark");
            for l in String::from_utf8_lossy(&out.stdout).lines() {
                println!("round {round}: {l}");
            }
        }
        println!("load: {}", uptime());
    }
    let ctl = etcdctl_lock(&endpoints, 30);
    println!("etcdctl lock (a process per hold), sequential: {ctl:.1}/s");
    println!("load after: {}", uptime());
}
