#![allow(dead_code)]
//! A real 3-node NATS cluster with JetStream for the channel tests of
//! cluster stores: Debian's `nats-server` on free loopback ports, each
//! node's config and JetStream directory in a temporary directory (the
//! streams are memory streams: nothing of theirs is on disk), every node
//! stopped by PID when the [`Nats`] is dropped (also when a test panics).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::free_port;

pub struct Node {
    pub name: String,
    /// Where clients connect.
    pub port: u16,
    /// The cluster's routes between nodes.
    pub route_port: u16,
    /// The monitoring port (`/healthz`).
    pub http_port: u16,
    child: Option<Child>,
}

pub struct Nats {
    pub dir: tempfile::TempDir,
    pub nodes: Vec<Node>,
    /// More of each node's config (an `authorization` block, `tls`).
    extra: String,
}

static SHARED: std::sync::Mutex<std::sync::Weak<Nats>> = std::sync::Mutex::new(std::sync::Weak::new());

impl Nats {
    /// A 3-node cluster shared with the tests running at the same time
    /// (each uses its own store prefix); stopped when the last lets it go.
    /// A test that kills nodes starts its own with [`start`].
    pub fn shared() -> std::sync::Arc<Nats> {
        let mut s = SHARED.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = s.upgrade() {
            return c;
        }
        let c = std::sync::Arc::new(Nats::start());
        *s = std::sync::Arc::downgrade(&c);
        c
    }

    /// Starts 3 nodes and waits (up to 30 s) until JetStream is up on each
    /// (`/healthz` answers ok: a meta leader is elected). Panics, naming the
    /// logs, when nats-server is missing or does not start.
    pub fn start() -> Nats {
        let dir = tempfile::Builder::new().prefix("tinystore-nats").tempdir().expect("temp dir");
        let nodes = (0..3).map(|i| Node { name: format!("n{i}"), port: free_port(), route_port: free_port(), http_port: free_port(), child: None }).collect();
        let mut c = Nats { dir, nodes, extra: String::new() };
        for i in 0..3 {
            c.spawn(i);
        }
        for i in 0..3 {
            c.wait_healthy(i, Duration::from_secs(30));
        }
        c
    }

    /// One node with JetStream, not clustered (streams of 1 replica:
    /// `&replicas=1`), with `extra` in its config (an `authorization`
    /// block, a `tls` block); waits until it is healthy.
    pub fn start_single(extra: &str) -> Nats {
        let dir = tempfile::Builder::new().prefix("tinystore-nats").tempdir().expect("temp dir");
        let nodes = vec![Node { name: "n0".into(), port: free_port(), route_port: free_port(), http_port: free_port(), child: None }];
        let mut c = Nats { dir, nodes, extra: extra.to_owned() };
        c.spawn(0);
        c.wait_healthy(0, Duration::from_secs(30));
        c
    }

    fn config(&self, i: usize) -> String {
        let n = &self.nodes[i];
        let routes: Vec<String> = self.nodes.iter().map(|m| format!("nats-route://127.0.0.1:{}", m.route_port)).collect();
        let store = self.dir.path().join(&n.name);
        // max_payload: a message of 1 MiB (CHAN-07's largest) plus its
        // headers is over nats-server's default of 1 MiB.
        // max_memory_store: each channel's stream reserves its 64 MiB on
        // every replica, and the tests of a binary sharing one cluster make
        // about 15 (512MB refused the 9th: "insufficient storage"); only
        // what is stored is allocated.
        let cluster = if self.nodes.len() > 1 { format!("cluster {{ name: tinystore, listen: 127.0.0.1:{}, routes: [{}] }}\n", n.route_port, routes.join(", ")) } else { String::new() };
        format!(
            "server_name: {name}\nlisten: 127.0.0.1:{port}\nhttp: 127.0.0.1:{http}\nmax_payload: 2MB\n\
             jetstream {{ store_dir: {store:?}, max_memory_store: 4GB, max_file_store: 16MB }}\n{cluster}{extra}\n",
            name = n.name,
            port = n.port,
            http = n.http_port,
            extra = self.extra,
        )
    }

    fn spawn(&mut self, i: usize) {
        let conf = self.dir.path().join(format!("{}.conf", self.nodes[i].name));
        std::fs::write(&conf, self.config(i)).expect("write a node's config");
        let log = std::fs::OpenOptions::new().create(true).append(true).open(self.dir.path().join(format!("{}.log", self.nodes[i].name))).expect("node log");
        let child = Command::new("nats-server")
            .arg("-c")
            .arg(&conf)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start nats-server (Debian's nats-server package: `apt-get install nats-server`)");
        self.nodes[i].child = Some(child);
    }

    /// `/healthz` of node `i`: Some(true) when it answers ok.
    fn healthz(&self, i: usize) -> bool {
        let Ok(mut s) = TcpStream::connect_timeout(&format!("127.0.0.1:{}", self.nodes[i].http_port).parse().unwrap(), Duration::from_secs(1)) else { return false };
        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
        if s.write_all(b"GET /healthz HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").is_err() {
            return false;
        }
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out.starts_with("HTTP/1.0 200") || out.starts_with("HTTP/1.1 200")
    }

    /// Waits until node `i` says JetStream is healthy.
    pub fn wait_healthy(&self, i: usize, limit: Duration) {
        let end = Instant::now() + limit;
        while !self.healthz(i) {
            if Instant::now() > end {
                let log = crate::common::log_tail(&self.dir.path().join(format!("{}.log", self.nodes[i].name)), 10);
                panic!("nats node {} did not become healthy within {limit:?}; {log}", self.nodes[i].name);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `nats://127.0.0.1:PORT,...` of the nodes `which`.
    pub fn urls_of(&self, which: &[usize]) -> String {
        let urls: Vec<String> = which.iter().map(|&i| format!("nats://127.0.0.1:{}", self.nodes[i].port)).collect();
        urls.join(",")
    }

    /// Every node's URL.
    pub fn urls(&self) -> String {
        self.urls_of(&[0, 1, 2])
    }

    /// kill -9 of node `i` (its memory streams' replica there is gone).
    pub fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.nodes[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGSTOP / SIGCONT of node `i`.
    pub fn pause(&self, i: usize, stop: bool) {
        if let Some(c) = &self.nodes[i].child {
            let sig = if stop { "-STOP" } else { "-CONT" };
            let _ = Command::new("kill").args([sig, &c.id().to_string()]).status();
        }
    }

    /// Starts node `i` again on its ports, and waits until it is healthy.
    pub fn restart(&mut self, i: usize) {
        self.kill(i);
        self.spawn(i);
        self.wait_healthy(i, Duration::from_secs(30));
    }

    /// The JetStream messages the stream `name` holds, from the monitoring
    /// endpoint (`/jsz`) of the first node that is up.
    pub fn stream_messages(&self, name: &str) -> u64 {
        let i = (0..self.nodes.len()).find(|&i| self.is_up(i)).expect("a node up");
        let mut s = TcpStream::connect(("127.0.0.1", self.nodes[i].http_port)).expect("the monitoring port");
        s.write_all(b"GET /jsz?streams=true HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        let body = &out[out.find("\r\n\r\n").expect("an HTTP answer") + 4..];
        let v: serde_json::Value = serde_json::from_str(body).expect("/jsz answers JSON");
        v["account_details"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|a| a["stream_detail"].as_array().into_iter().flatten())
            .find(|d| d["name"] == name)
            .and_then(|d| d["state"]["messages"].as_u64())
            .unwrap_or_else(|| panic!("no stream {name} in /jsz: {body}"))
    }

    pub fn is_up(&self, i: usize) -> bool {
        self.nodes[i].child.is_some()
    }
}

impl Drop for Nats {
    fn drop(&mut self) {
        for i in 0..self.nodes.len() {
            self.kill(i);
        }
    }
}
