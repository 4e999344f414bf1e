//! tinystore's cluster store (locks in etcd) on a 3-member etcd cluster on
//! this machine, with etcd's default election timing, against `etcdctl
//! lock` for scale, in one run: hold+release of one key per second,
//! sequential and with 4 contending stores.
//!
//! Run: `cargo run --release -p tinystore-bench --bin cluster`
//! (needs Debian's `etcd-server` and `etcd-client`). With
//! `ETCD_MUTEX_BENCH` naming the binary of bench/etcd-mutex (`go build`
//! there), etcd's own `concurrency.Mutex` (Go clientv3) runs the same rows
//! on the same cluster, interleaved with tinystore's, two rounds each.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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

fn contended(address: &str, stores: usize, secs: u64) -> f64 {
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let t = Instant::now();
    let threads: Vec<_> = (0..stores)
        .map(|_| {
            let (done, stop, s) = (done.clone(), stop.clone(), Store::connect(address).unwrap());
            std::thread::spawn(move || {
                let lock = s.lock("bench").wait(Duration::from_secs(60)).open().unwrap();
                while !stop.load(Ordering::Relaxed) {
                    lock.hold("k", |_| -> tinystore::Result<()> { Ok(()) }).unwrap();
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(secs));
    stop.store(true, Ordering::Relaxed);
    threads.into_iter().for_each(|h| h.join().unwrap());
    done.load(Ordering::Relaxed) as f64 / t.elapsed().as_secs_f64()
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
    let dir = tempfile::Builder::new().prefix("tinystore-bench-etcd").tempdir().unwrap();
    let (_members, endpoints) = cluster(dir.path());
    let address = format!("etcd://{endpoints}/bench");
    println!("load before: {}", uptime());
    let go = std::env::var_os("ETCD_MUTEX_BENCH");
    for round in 1..=2 {
        let seq = sequential(&address, 5);
        println!("round {round}: tinystore cluster, sequential hold+release: {seq:.0}/s");
        let four = contended(&address, 4, 5);
        println!("round {round}: tinystore cluster, 4 stores contending for one key: {four:.0}/s");
        if let Some(go) = &go {
            let out = Command::new(go).arg(&endpoints).output().expect("run the etcd-mutex benchmark");
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
