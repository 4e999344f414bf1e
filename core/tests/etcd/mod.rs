#![allow(dead_code)]
//! A real 3-member etcd cluster for the tests of cluster stores: Debian's
//! `etcd` on free loopback ports, its data in a temporary directory, every
//! member stopped by PID when the [`Cluster`] is dropped (also when a test
//! panics).

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::free_port;

/// Election timing of the test cluster: a heartbeat of 50 ms and an
/// election timeout of 500 ms, so a leader's death is noticed within a
/// second and etcd's smallest lease ttl is 1 s (`ceil(1.5 * election)`);
/// etcd's defaults (100 ms, 1 s) give 2 s.
const HEARTBEAT_MS: u32 = 50;
const ELECTION_MS: u32 = 500;

pub struct Member {
    pub name: String,
    pub client_port: u16,
    pub peer_port: u16,
    child: Option<Child>,
}

pub struct Cluster {
    pub dir: tempfile::TempDir,
    pub members: Vec<Member>,
    token: String,
    /// For a cluster serving TLS to its clients ([`Cluster::start_tls`]).
    pub tls: Option<Pki>,
}

/// The certificates of a TLS cluster, PEM files in its directory: a CA, the
/// members' certificate (for 127.0.0.1 and localhost) signed by it, a
/// client certificate signed by it, and another CA that signed nothing.
pub struct Pki {
    pub ca: PathBuf,
    pub member_cert: PathBuf,
    pub member_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
    pub other_ca: PathBuf,
}

pub fn pki(dir: &std::path::Path) -> Pki {
    use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(DnType::CommonName, "tinystore test etcd CA");
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let member_key = KeyPair::generate().unwrap();
    let mut member = CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
    // etcd's gateway dials the member with this certificate too.
    member.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
    let member_cert = member.signed_by(&member_key, &issuer).unwrap();
    let client_key = KeyPair::generate().unwrap();
    let mut client = CertificateParams::new(Vec::<String>::new()).unwrap();
    client.distinguished_name.push(DnType::CommonName, "tinystore test client");
    client.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let client_cert = client.signed_by(&client_key, &issuer).unwrap();
    let other = rcgen::generate_simple_self_signed(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
    let p = Pki {
        ca: dir.join("ca.pem"),
        member_cert: dir.join("member.pem"),
        member_key: dir.join("member-key.pem"),
        client_cert: dir.join("client.pem"),
        client_key: dir.join("client-key.pem"),
        other_ca: dir.join("other-ca.pem"),
    };
    std::fs::write(&p.ca, ca_cert.pem()).unwrap();
    std::fs::write(&p.member_cert, member_cert.pem()).unwrap();
    std::fs::write(&p.member_key, member_key.serialize_pem()).unwrap();
    std::fs::write(&p.client_cert, client_cert.pem()).unwrap();
    std::fs::write(&p.client_key, client_key.serialize_pem()).unwrap();
    std::fs::write(&p.other_ca, other.cert.pem()).unwrap();
    p
}

/// The cluster the tests of one binary share while any of them runs.
static SHARED: std::sync::Mutex<std::sync::Weak<Cluster>> = std::sync::Mutex::new(std::sync::Weak::new());

impl Cluster {
    /// A 3-member cluster shared with the tests running at the same time
    /// (each uses its own key prefix); stopped when the last lets it go. A
    /// test that kills or pauses members starts its own with [`start`].
    pub fn shared() -> std::sync::Arc<Cluster> {
        let mut s = SHARED.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = s.upgrade() {
            return c;
        }
        let c = std::sync::Arc::new(Cluster::start());
        *s = std::sync::Arc::downgrade(&c);
        c
    }

    /// Starts 3 members and waits (up to 20 s) until every one answers.
    /// Panics, naming the log to read, when etcd is missing or does not start.
    pub fn start() -> Cluster {
        Cluster::start_n(3)
    }

    pub fn start_n(n: usize) -> Cluster {
        Cluster::start_with(n, false)
    }

    /// 3 members serving their clients TLS only (`https://`), with client
    /// certificates required (`--client-cert-auth`), all signed by the CA of
    /// [`Cluster::tls`]; the members talk to each other in plain text.
    pub fn start_tls() -> Cluster {
        Cluster::start_with(3, true)
    }

    fn start_with(n: usize, tls: bool) -> Cluster {
        let dir = tempfile::Builder::new().prefix("tinystore-etcd").tempdir().expect("temp dir");
        let token = format!("tinystore-test-{}", std::process::id());
        let members = (0..n).map(|i| Member { name: format!("m{i}"), client_port: free_port(), peer_port: free_port(), child: None }).collect();
        let tls = tls.then(|| pki(dir.path()));
        let mut c = Cluster { dir, members, token, tls };
        for i in 0..n {
            c.spawn(i);
        }
        c.wait_healthy(Duration::from_secs(20));
        c
    }

    fn initial_cluster(&self) -> String {
        self.members.iter().map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer_port)).collect::<Vec<_>>().join(",")
    }

    fn spawn(&mut self, i: usize) {
        let initial = self.initial_cluster();
        let root = self.dir.path().to_path_buf();
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        let mut tls_args: Vec<std::ffi::OsString> = Vec::new();
        if let Some(p) = &self.tls {
            tls_args.extend(["--cert-file".into(), p.member_cert.clone().into(), "--key-file".into(), p.member_key.clone().into()]);
            tls_args.extend(["--trusted-ca-file".into(), p.ca.clone().into(), "--client-cert-auth".into()]);
        }
        let m = &mut self.members[i];
        let log = std::fs::OpenOptions::new().create(true).append(true).open(root.join(format!("{}.log", m.name))).expect("member log");
        let child = Command::new("etcd")
            .args(["--name", &m.name])
            .arg("--data-dir")
            .arg(root.join(&m.name))
            .args(["--listen-client-urls", &format!("{scheme}://127.0.0.1:{}", m.client_port)])
            .args(["--advertise-client-urls", &format!("{scheme}://127.0.0.1:{}", m.client_port)])
            .args(&tls_args)
            .args(["--listen-peer-urls", &format!("http://127.0.0.1:{}", m.peer_port)])
            .args(["--initial-advertise-peer-urls", &format!("http://127.0.0.1:{}", m.peer_port)])
            .args(["--initial-cluster", &initial, "--initial-cluster-state", "new", "--initial-cluster-token", &self.token])
            .args(["--heartbeat-interval", &HEARTBEAT_MS.to_string(), "--election-timeout", &ELECTION_MS.to_string()])
            .args(["--logger", "zap", "--log-outputs", "stderr"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start etcd (Debian's etcd-server package: `apt-get install etcd-server`)");
        m.child = Some(child);
    }

    /// The members' client endpoints, `127.0.0.1:PORT`, comma-separated.
    pub fn endpoints(&self) -> String {
        self.members.iter().map(|m| format!("127.0.0.1:{}", m.client_port)).collect::<Vec<_>>().join(",")
    }

    /// A store address on this cluster under `prefix`.
    pub fn address(&self, prefix: &str) -> String {
        format!("{}://{}/{prefix}", if self.tls.is_some() { "etcds" } else { "etcd" }, self.endpoints())
    }

    /// Runs `etcdctl` against the members that are up.
    pub fn etcdctl(&self, args: &[&str]) -> std::process::Output {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        let eps: Vec<String> = self.members.iter().filter(|m| m.child.is_some()).map(|m| format!("{scheme}://127.0.0.1:{}", m.client_port)).collect();
        let mut cmd = Command::new("etcdctl");
        if let Some(p) = &self.tls {
            cmd.arg("--cacert").arg(&p.ca).arg("--cert").arg(&p.client_cert).arg("--key").arg(&p.client_key);
        }
        cmd.env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={}", eps.join(",")))
            .args(args)
            .output()
            .expect("run etcdctl")
    }

    /// Waits until every running member says it is healthy.
    pub fn wait_healthy(&self, limit: Duration) {
        let end = Instant::now() + limit;
        loop {
            let out = self.etcdctl(&["endpoint", "health", "--command-timeout=2s"]);
            if out.status.success() {
                return;
            }
            if Instant::now() > end {
                let logs: Vec<String> = self.members.iter().map(|m| crate::common::log_tail(&self.dir.path().join(format!("{}.log", m.name)), 3)).collect();
                panic!("the etcd cluster did not become healthy within {limit:?}: {}; {}", String::from_utf8_lossy(&out.stderr), logs.join("\n"));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The index of the member that leads now.
    pub fn leader(&self) -> Option<usize> {
        let out = self.etcdctl(&["endpoint", "status", "-w", "json"]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        for s in v.as_array()? {
            let id = s["Status"]["header"]["member_id"].as_u64()?;
            if s["Status"]["leader"].as_u64() == Some(id) {
                let ep = s["Endpoint"].as_str()?;
                return self.members.iter().position(|m| ep.ends_with(&format!(":{}", m.client_port)));
            }
        }
        None
    }

    /// kill -9 of member `i`; its data stays for a restart.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.members[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGSTOP / SIGCONT of member `i`.
    pub fn pause(&self, i: usize, stop: bool) {
        if let Some(c) = &self.members[i].child {
            let sig = if stop { "-STOP" } else { "-CONT" };
            let _ = Command::new("kill").args([sig, &c.id().to_string()]).status();
        }
    }

    /// Starts member `i` again on its data directory and ports.
    pub fn restart(&mut self, i: usize) {
        self.kill(i);
        self.spawn(i);
    }

    /// Where member `i` keeps its data.
    pub fn data_dir(&self, i: usize) -> PathBuf {
        self.dir.path().join(&self.members[i].name)
    }

    /// `etcdctl snapshot save` of member `i` (it must be up) into `path`;
    /// panics with etcdctl's output when it fails.
    pub fn save_snapshot(&self, i: usize, path: &std::path::Path) {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        let mut cmd = Command::new("etcdctl");
        if let Some(p) = &self.tls {
            cmd.arg("--cacert").arg(&p.ca).arg("--cert").arg(&p.client_cert).arg("--key").arg(&p.client_key);
        }
        // `snapshot save` takes exactly one endpoint.
        let out = cmd
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={scheme}://127.0.0.1:{}", self.members[i].client_port))
            .args(["snapshot", "save"])
            .arg(path)
            .output()
            .expect("run etcdctl");
        assert!(out.status.success(), "etcdctl snapshot save: {}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    }

    /// Stops every member (kill -9), replaces each one's data directory by
    /// a fresh one made with `etcdctl snapshot restore` of `snapshot`
    /// (same names, peer URLs and token, so the same members), starts them
    /// and waits (up to 20 s) until every one answers. Panics with
    /// etcdctl's output when a restore fails.
    pub fn restore_all(&mut self, snapshot: &std::path::Path) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
        let initial = self.initial_cluster();
        for i in 0..self.members.len() {
            let data = self.data_dir(i);
            // `snapshot restore` refuses a data directory that exists.
            std::fs::remove_dir_all(&data).expect("remove a member's old data directory");
            let m = &self.members[i];
            let out = Command::new("etcdctl")
                .env("ETCDCTL_API", "3")
                .args(["snapshot", "restore"])
                .arg(snapshot)
                .args(["--name", &m.name, "--initial-cluster", &initial, "--initial-cluster-token", &self.token])
                .args(["--initial-advertise-peer-urls", &format!("http://127.0.0.1:{}", m.peer_port)])
                .arg("--data-dir")
                .arg(&data)
                .output()
                .expect("run etcdctl");
            assert!(out.status.success(), "etcdctl snapshot restore for {}: {}{}", m.name, String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        }
        for i in 0..self.members.len() {
            self.spawn(i);
        }
        self.wait_healthy(Duration::from_secs(20));
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
    }
}

/// A worker process (core/examples/worker.rs) of a cluster store, its
/// SQL databases in `sql_dir`, its stdout piped.
pub fn cluster_worker(args: &[&str], sql_dir: &std::path::Path) -> std::process::Child {
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_tinystore")).parent().unwrap().join("examples/worker");
    std::process::Command::new(bin)
        .args(args)
        .env("TINYSTORE_CLUSTER_SQL_DIR", sql_dir)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("the worker example: run the whole `cargo test -p tinystore`, which builds examples")
}
