//! The `tinystore` command: serve a store, look at it, publish and listen,
//! run a command under a lease.
//!
//! It lives in the library, as [`run`], so that every package runs the same
//! command in-process: the crate's own binary, the Python wheel's console
//! script, the npm package's `bin` and the Go module's `cmd/tinystore`.

use std::sync::Arc;
use std::time::Duration;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

use crate::channels::{Event, Scope};
use crate::limits::{DEFAULT_TTL, DEFAULT_WAIT, parse_duration};
use crate::wire::{Address, PROTOCOL_VERSION};
use crate::{Error, ErrorKind, Key, OpenOptions, Store, runtime};

/// An exit status: 0 for success, 1 for an error, 2 for a usage error, 3 for
/// a timeout, 4 for a lost lease, or the status of the command `lock hold` ran.
type ExitCode = i32;

#[derive(Parser)]
#[command(name = "tinystore", about = "Channels and locks with fences for the processes of one application")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Owns a store directory and serves it until SIGINT, SIGTERM or `tinystore stop`.
    Serve {
        /// The store directory (made if missing).
        dir: String,
        /// Also listen here: tcp:HOST:PORT or tls:HOST:PORT (both need
        /// `tinystore token new`; tls also a certificate and key).
        #[arg(long)]
        listen: Vec<String>,
        /// For tls: listens, the certificate chain (PEM) [default: <dir>/tls/cert.pem].
        #[arg(long, requires = "key")]
        cert: Option<String>,
        /// For tls: listens, the certificate's private key (PEM) [default: <dir>/tls/key.pem].
        #[arg(long, requires = "cert")]
        key: Option<String>,
    },
    /// Asks the process serving a store to stop.
    Stop {
        /// The store directory, or an address (unix:PATH, tcp:HOST:PORT, tls:HOST:PORT).
        target: String,
    },
    /// What a store holds: its owner, connections, subscribers, held keys;
    /// for a cluster store, etcd's members and leader and each key's
    /// holders and waiters.
    Status {
        /// The store directory, or an address (unix:PATH, tcp:HOST:PORT,
        /// tls:HOST:PORT, etcd://HOST:PORT,.../PREFIX).
        target: String,
        /// Print JSON for scripts.
        #[arg(long)]
        json: bool,
    },
    /// Publish to and listen on channels.
    Channels {
        #[command(subcommand)]
        action: ChannelAction,
    },
    /// Cluster stores: locks and fences in an etcd cluster (docs/cluster.md).
    Cluster {
        #[command(subcommand)]
        action: ClusterAction,
    },
    /// Locks of a store.
    Lock {
        /// The store directory, or a cluster address (etcd://HOST:PORT,.../PREFIX).
        dir: String,
        #[command(subcommand)]
        action: LockAction,
    },
    /// Tokens for TCP clients.
    Token {
        #[command(subcommand)]
        action: TokenAction,
    },
}

#[derive(Subcommand)]
enum ChannelAction {
    /// Publishes one JSON value.
    Publish {
        /// The store directory, or an address.
        target: String,
        /// The channel, like chat-events.
        channel: String,
        /// The message, as JSON: '{"kind":"message","id":7}' (or -1); `-`
        /// reads it from standard input (up to the 1 MiB limit, past what a
        /// command line holds).
        #[arg(allow_negative_numbers = true)]
        json: String,
        /// The branch, one key per --under (repeat to nest).
        #[arg(long)]
        under: Vec<String>,
    },
    /// Prints each message as it arrives, one per line, until Ctrl+C.
    Subscribe {
        /// The store directory, or an address.
        target: String,
        /// The channel.
        channel: String,
        /// The branch, one key per --under (repeat to nest).
        #[arg(long)]
        under: Vec<String>,
        /// Also every branch below.
        #[arg(long)]
        recursive: bool,
        /// Print each event as a JSON line.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum LockAction {
    /// Runs a command while holding a key; its fence is in TINYSTORE_FENCE
    /// (and its 40-digit form in TINYSTORE_FENCE_PADDED). Exits with the
    /// command's status; stops it, and every process it started, and exits
    /// 4 if the lease is lost.
    Hold {
        /// The lock's name, like "summaries".
        lock: String,
        /// The key to hold, like "chat-7" or 7.
        key: String,
        /// Lease ttl over a connection, 1s to 1h [default: 30s, as in every SDK].
        #[arg(long, value_parser = duration)]
        ttl: Option<Duration>,
        /// How long to wait for the key [default: 10s].
        #[arg(long, value_parser = duration)]
        wait: Option<Duration>,
        /// No lease outlasts this; the command is stopped then.
        #[arg(long, value_parser = duration)]
        max_hold: Option<Duration>,
        /// The command and its arguments, after `--`.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
}

#[derive(Subcommand)]
enum ClusterAction {
    /// Makes the store's epoch under the prefix, if it has none (a store's
    /// first connect makes it too), and prints it.
    Init {
        /// etcd://HOST:PORT,.../PREFIX (etcds:// for TLS, with TINYSTORE_CA).
        address: String,
        /// The directory of the same store on one machine, moving to the
        /// cluster: the epoch is made (or raised) larger than its last
        /// epoch, so fences keep growing. No process may own it meanwhile.
        #[arg(long, value_name = "DIR")]
        from: Option<std::path::PathBuf>,
    },
    /// Raises the store's epoch, so every fence after is larger than every
    /// fence before: run it after restoring etcd from a snapshot (unless
    /// the restore used --bump-revision).
    BumpEpoch {
        /// etcd://HOST:PORT,.../PREFIX (etcds:// for TLS, with TINYSTORE_CA).
        address: String,
    },
}

#[derive(Subcommand)]
enum TokenAction {
    /// Makes a token, adds it to <dir>/tokens and prints it.
    New {
        /// The store directory.
        dir: String,
        /// read (subscribe, status), data (also publish and hold) or admin (also stop).
        #[arg(long, default_value = "data")]
        role: String,
    },
}

fn duration(s: &str) -> Result<Duration, String> {
    parse_duration(s).map_err(|e| e.message().to_owned())
}

/// Prints a line to stdout; output into a closed pipe (`tinystore status
/// data | head -1`) ends the program quietly, as command-line tools do.
/// (SIGPIPE stays ignored: a socket's peer going away must not kill `serve`.)
macro_rules! out {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        if writeln!(std::io::stdout(), $($t)*).is_err() {
            std::process::exit(0);
        }
    }};
}

/// What `tinystore --version` says after the name: the crate's version, the
/// wire protocol it speaks and whether it is a release or a debug build,
/// like `0.1.0 (wire protocol 2, release build)`.
pub fn version_line() -> String {
    let build = if cfg!(debug_assertions) { "debug" } else { "release" };
    format!("{} (wire protocol {PROTOCOL_VERSION}, {build} build)", crate::version())
}

/// Runs the `tinystore` command with `args`, the first being the program's
/// name (as [`std::env::args_os`] gives them), and returns its exit status:
/// 0, 1 for an error (printed to stderr as `tinystore: ...`), 2 for a usage
/// error, 3 for a timeout, 4 for a lost lease, or the status of the command
/// `lock hold` ran. `--help` and `--version` print to stdout and return 0.
///
/// It runs in the calling thread until the command is done (`serve` and
/// `channels subscribe` until SIGINT or SIGTERM), and may end the process
/// with status 0 when stdout is a pipe its reader closed. It takes over
/// SIGINT, SIGTERM and SIGHUP: it puts them back to their default action
/// first, as a command expects, so that the handlers a host process had
/// (Node's, the Go runtime's, Python's) are not chained to by the ones
/// `serve`, `channels subscribe` and `lock hold` install. Node's, for one,
/// raises the signal again, which such a chain would handle forever.
pub fn run<I, T>(args: I) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: setting a signal's action to its default.
        unsafe { libc::signal(sig, libc::SIG_DFL) };
    }
    static VERSION: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let command = Cli::command().version(VERSION.get_or_init(version_line).as_str());
    let cli = match command.try_get_matches_from(args).and_then(|m| Cli::from_arg_matches(&m)) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return e.exit_code();
        }
    };
    match run_command(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("tinystore: {e}");
            match e.kind() {
                ErrorKind::Timeout => 3,
                ErrorKind::Lost => 4,
                _ => 1,
            }
        }
    }
}

/// A directory or an address: connects to its owner without taking it over.
fn reach(target: &str) -> Result<Store, Error> {
    if ["unix:", "tcp:", "tls:", "etcd://", "etcds://"].iter().any(|p| target.starts_with(p)) {
        return Store::connect(target);
    }
    let sock = std::path::Path::new(target).join("tinystore.sock");
    Store::connect(&format!("unix:{}", sock.display())).map_err(|e| {
        let m = e.message();
        let advice = if m.contains("Permission denied") {
            format!("the store {target} is served by another user's process, and its socket is owner-only: run this as that user")
        } else if m.contains("did not answer") {
            format!("a process serves the store {target} but does not answer (frozen, or overloaded): see `ps`, or wait")
        } else if sock.exists() {
            format!("nothing answers at {} (its owner may have died): start one with `tinystore serve {target}`", sock.display())
        } else {
            format!("no process serves the store {target}: start one with `tinystore serve {target}`")
        };
        Error::new(e.kind(), format!("{advice} ({m})"))
    })
}

/// True once nothing accepts connections at `target` (an address or a
/// store directory), checked for up to `limit`.
fn gone_within(target: &str, limit: Duration) -> bool {
    let end = std::time::Instant::now() + limit;
    let address = match Address::parse(target) {
        Ok(a) => a,
        Err(_) => Address::Unix(std::path::Path::new(target).join("tinystore.sock")),
    };
    loop {
        let answers = match &address {
            Address::Unix(path) => std::os::unix::net::UnixStream::connect(path).is_ok(),
            Address::Tcp(hp) | Address::Tls(hp) => std::net::TcpStream::connect(hp.as_str()).is_ok(),
        };
        if !answers {
            return true;
        }
        if std::time::Instant::now() >= end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn branch_of(under: &[String]) -> Vec<Key> {
    under.iter().map(|k| Key::from(k.as_str())).collect()
}

fn run_command(cli: Cli) -> Result<ExitCode, Error> {
    match cli.command {
        Command::Serve { dir, listen, cert, key } => {
            let store = Store::open_with(&dir, OpenOptions::new().exclusive())?;
            let stop = Arc::new(tokio::sync::Notify::new());
            let sock = store.dir().join("tinystore.sock");
            store.on_shutdown(stop.clone());
            let addresses = listen.iter().map(|a| Address::parse(a)).collect::<Result<Vec<_>, _>>()?;
            if cert.is_some() && !addresses.iter().any(|a| matches!(a, Address::Tls(_))) {
                return Err(Error::new(ErrorKind::Invalid, "--cert and --key are for tls: listens: add --listen tls:HOST:PORT"));
            }
            for a in &addresses {
                match (a, &cert, &key) {
                    (Address::Tls(_), Some(c), Some(k)) => store.serve_tls_with(a, c.as_ref(), k.as_ref(), Some(stop.clone()))?,
                    _ => store.serve_with(a, Some(stop.clone()))?,
                }
            }
            eprintln!("tinystore: serving {} (epoch {}) on unix:{}{}", store.dir().display(), store.epoch(), sock.display(),
                listen.iter().map(|a| format!(" and {a}")).collect::<String>());
            runtime::block_on(async {
                let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                    _ = stop.notified() => {}
                }
            });
            store.close();
            eprintln!("tinystore: stopped; every key was let go");
            Ok(0)
        }
        Command::Stop { target } => {
            match reach(&target)?.shutdown_owner() {
                // The owner may stop before its answer leaves (a TLS
                // writer's queue dies with the process): gone is stopped.
                Err(e) if e.kind() == ErrorKind::Unavailable && gone_within(&target, Duration::from_secs(3)) => Ok(0),
                r => r.map(|()| 0),
            }
        }
        Command::Status { target, json } => {
            let v = reach(&target)?.status_json()?;
            if json {
                out!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                print_status(&v);
            }
            Ok(0)
        }
        Command::Channels { action: ChannelAction::Publish { target, channel, mut json, under } } => {
            if json == "-" {
                use std::io::Read;
                json.clear();
                std::io::stdin().read_to_string(&mut json).map_err(|e| Error::new(ErrorKind::Io, format!("could not read the message from standard input: {e}")))?;
            }
            // Checked, then passed on as written (no rounding, no reordering).
            serde_json::from_str::<&serde_json::value::RawValue>(json.trim())
                .map_err(|e| Error::new(ErrorKind::Invalid, format!("the message is not one JSON value ({e}): quote it, like '{{\"kind\":\"message\",\"id\":7}}'")))?;
            let store = reach(&target)?;
            runtime::block_on(store.publish_raw(&channel, &branch_of(&under), json.trim().as_bytes().into()))?;
            Ok(0)
        }
        Command::Channels { action: ChannelAction::Subscribe { target, channel, under, recursive, json } } => {
            let store = reach(&target)?;
            let scope = if recursive { Scope::Recursive } else { Scope::Branch };
            let sub = runtime::block_on(store.subscribe_raw(&channel, &branch_of(&under), scope, None))?;
            eprintln!("tinystore: listening on {channel}{} (Ctrl+C to stop)", under.iter().map(|k| format!("/{k}")).collect::<String>());
            runtime::block_on(async {
                loop {
                    let ev = tokio::select! {
                        ev = sub.next() => ev,
                        _ = tokio::signal::ctrl_c() => None,
                    };
                    match ev {
                        None => return,
                        Some(Event::Message(m)) => {
                            let data = String::from_utf8_lossy(&m.data);
                            let branch: Vec<&str> = m.branch.iter().map(Key::as_str).collect();
                            if json {
                                out!("{{\"branch\":{},\"seq\":{},\"value\":{data}}}", serde_json::to_string(&branch).unwrap_or_default(), m.seq);
                            } else {
                                let name = if branch.is_empty() { "(root)".to_owned() } else { branch.join("/") };
                                out!("{name} #{} {data}", m.seq);
                            }
                        }
                        Some(Event::Missed(m)) => {
                            let count = m.count.map_or("an unknown number of".into(), |c| c.to_string());
                            if json {
                                out!("{}", serde_json::json!({"missed": m.count, "reason": m.reason.as_str()}));
                            } else {
                                out!("-- missed {count} messages ({})", m.reason.as_str());
                            }
                        }
                    }
                }
            });
            Ok(0)
        }
        Command::Lock { dir, action: LockAction::Hold { lock, key, ttl, wait, max_hold, command } } => {
            let store = if crate::net::etcd::EtcdAddress::is_etcd(&dir) { Store::connect(&dir)? } else { Store::open(&dir)? };
            let mut b = store.lock(&lock).ttl(ttl.unwrap_or(DEFAULT_TTL)).wait(wait.unwrap_or(DEFAULT_WAIT));
            if let Some(m) = max_hold {
                b = b.max_hold(m);
            }
            let lock = b.open()?;
            lock.hold(key.as_str(), |lease| -> Result<ExitCode, Error> { run_child(&command, lease) })
        }
        Command::Cluster { action: ClusterAction::Init { address, from: Some(dir) } } => {
            let m = crate::cluster::init_from(&address, &dir, crate::ConnectOptions::new())?;
            let what = match m.before {
                None => format!("made epoch {}", m.epoch),
                Some(b) if b == m.epoch => format!("already had epoch {}", m.epoch),
                Some(b) => format!("raised epoch {b} -> {}", m.epoch),
            };
            out!("{what}, larger than {}'s last epoch {}", dir.display(), m.local_epoch);
            Ok(0)
        }
        Command::Cluster { action: ClusterAction::Init { address, from: None } } => {
            let (epoch, made) = crate::cluster::init(&address, crate::ConnectOptions::new())?;
            out!("{} epoch {epoch}", if made { "made" } else { "already had" });
            Ok(0)
        }
        Command::Cluster { action: ClusterAction::BumpEpoch { address } } => {
            let (old, new) = crate::cluster::bump_epoch(&address, crate::ConnectOptions::new())?;
            out!("epoch {old} -> {new}");
            Ok(0)
        }
        Command::Token { action: TokenAction::New { dir, role } } => {
            if !["read", "data", "admin"].contains(&role.as_str()) {
                return Err(Error::new(ErrorKind::Invalid, format!("role {role:?}: use read, data or admin")));
            }
            let mut raw = [0u8; 24];
            getrandom::fill(&mut raw).map_err(|e| Error::new(ErrorKind::Internal, e.to_string()))?;
            let token: String = raw.iter().map(|b| format!("{b:02x}")).collect();
            std::fs::create_dir_all(&dir).map_err(|e| Error::new(ErrorKind::Io, e.to_string()))?;
            let path = std::path::Path::new(&dir).join("tokens");
            use std::io::Write;
            use std::os::unix::fs::OpenOptionsExt;
            let mut f = std::fs::OpenOptions::new().create(true).append(true).mode(0o600).open(&path)
                .map_err(|e| Error::new(ErrorKind::Io, format!("{}: {e}", path.display())))?;
            writeln!(f, "{role} {token}").map_err(|e| Error::new(ErrorKind::Io, e.to_string()))?;
            out!("{token}");
            Ok(0)
        }
    }
}

fn print_status(v: &serde_json::Value) {
    if v.get("cluster").is_some() {
        return print_cluster_status(v);
    }
    let ms = |x: &serde_json::Value| x.as_u64().map(|m| crate::limits::format_duration(Duration::from_millis(m - m % 100))).unwrap_or_else(|| "-".into());
    out!("store {}  owner pid {}  epoch {}  up {}", v["dir"].as_str().unwrap_or("?"), v["pid"], v["epoch"], ms(&v["uptime_ms"]));
    let conns = v["connections"].as_array().cloned().unwrap_or_default();
    out!("connections: {}", conns.len());
    for c in &conns {
        out!("  #{} {} via {} for {}", c["id"], c["client"].as_str().unwrap_or(""), c["address"].as_str().unwrap_or(""), ms(&c["since_ms"]));
    }
    out!("subscriptions: {}  channel memory: {} bytes", v["subscriptions"], v["channel_bytes"]);
    for b in v["branches"].as_array().into_iter().flatten() {
        let path: Vec<String> = b["branch"].as_array().into_iter().flatten().map(|k| k.as_str().unwrap_or("").to_owned()).collect();
        let lag: Vec<String> = b["lag"].as_array().into_iter().flatten().map(|l| l.to_string()).collect();
        out!(
            "  {}/{}  subscribers {} (+{} recursive)  lag [{}]  kept {} messages, {} bytes  published {}",
            b["channel"].as_str().unwrap_or(""), path.join("/"), b["subscribers"], b["recursive_subscribers"], lag.join(", "), b["kept_messages"], b["kept_bytes"], b["published"]
        );
    }
    let locks = v["locks"].as_array().cloned().unwrap_or_default();
    let held = |k: &serde_json::Value| k["holders"].as_array().is_some_and(|h| !h.is_empty());
    out!("held keys: {}", locks.iter().filter(|k| held(k)).count());
    for k in &locks {
        if !held(k) {
            // Waited for, held by nobody: a new owner's grace (STORE-01), or a turn being given.
            out!("  {}/{}  not held  waiters {}", k["lock"].as_str().unwrap_or(""), k["key"].as_str().unwrap_or(""), k["waiters"]);
        }
        for h in k["holders"].as_array().into_iter().flatten() {
            out!(
                "  {}/{}  fence {}  lease {}  held {}  left {}  waiters {}",
                k["lock"].as_str().unwrap_or(""), k["key"].as_str().unwrap_or(""), h["fence"].as_str().unwrap_or("-"), h["lease"], ms(&h["held_ms"]), ms(&h["left_ms"]), k["waiters"]
            );
        }
    }
}

/// A cluster store's status: etcd's members, then per key its holders and waiters.
fn print_cluster_status(v: &serde_json::Value) {
    let ms = |x: &serde_json::Value| x.as_u64().map(|m| crate::limits::format_duration(Duration::from_millis(m - m % 100))).unwrap_or_else(|| "-".into());
    let c = &v["cluster"];
    out!("cluster store {}  epoch {}", c["address"].as_str().unwrap_or("?"), v["epoch"]);
    let members = c["members"].as_array().cloned().unwrap_or_default();
    out!("etcd members: {}", members.len());
    for m in &members {
        let urls: Vec<&str> = m["client_urls"].as_array().into_iter().flatten().filter_map(|u| u.as_str()).collect();
        out!("  {} {} {}{}", m["id"].as_str().unwrap_or(""), m["name"].as_str().unwrap_or(""), urls.join(","), if m["leader"] == true { "  (leader)" } else { "" });
    }
    let locks = v["locks"].as_array().cloned().unwrap_or_default();
    out!("keys held or waited for: {}", locks.len());
    for k in &locks {
        out!("  {}/{}", k["lock"].as_str().unwrap_or(""), k["key"].as_str().unwrap_or(""));
        for h in k["holders"].as_array().into_iter().flatten() {
            out!(
                "    held    fence {}  holder {} ({})  held {}  left {}",
                h["fence"].as_str().unwrap_or("-"), h["holder"], h["process"].as_str().unwrap_or("?"), ms(&h["held_ms"]), ms(&h["left_ms"])
            );
        }
        for w in k["waiting"].as_array().into_iter().flatten() {
            out!("    waiting holder {} ({})  for {}", w["holder"], w["process"].as_str().unwrap_or("?"), ms(&w["held_ms"]));
        }
    }
}

/// Runs the command under `lease`, killing it if the lease is lost.
fn run_child(command: &[String], lease: &crate::Lease) -> Result<ExitCode, Error> {
    use std::os::unix::process::CommandExt;
    // A signal that stops this process stops the command first, so no
    // command outlives the lease it ran under.
    let stop = Arc::new(std::sync::atomic::AtomicI32::new(0));
    for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
        let _ = signal_hook_flag(sig, &stop);
    }
    let mut cmd = std::process::Command::new(&command[0]);
    cmd.args(&command[1..]).env("TINYSTORE_FENCE", lease.fence().to_string()).env("TINYSTORE_FENCE_PADDED", lease.fence().padded());
    // SAFETY: prctl is async-signal-safe; it asks the kernel to send the
    // command SIGTERM if this process dies, even by SIGKILL.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            Ok(())
        });
    }
    // What the command starts and leaves (a subshell, a `cmd &`) comes
    // back to this process when its parent ends, so it can be stopped too.
    // SAFETY: prctl on this process, no pointers.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1) };
    let mut child = cmd.spawn().map_err(|e| Error::new(ErrorKind::Io, format!("could not run {:?}: {e}", command[0])))?;
    loop {
        if let Some(status) = child.try_wait().map_err(|e| Error::new(ErrorKind::Io, e.to_string()))? {
            return Ok(status.code().unwrap_or(1).clamp(0, 255));
        }
        let sig = stop.load(std::sync::atomic::Ordering::Acquire);
        if sig != 0 {
            // Passed to every process of the command, as a terminal's
            // signal reaches a job; what outlives the command is killed.
            signal_descendants(sig);
            let _ = child.wait();
            kill_descendants();
            return Ok(128 + sig);
        }
        if lease.is_lost() {
            // The hold ends with the lost error, which main prints.
            kill_descendants();
            let _ = child.wait();
            return Ok(4);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Kills every process below this one, until none is left (a process may
/// fork while the others are killed), reaping the orphans that came here.
fn kill_descendants() {
    for _ in 0..100 {
        let left = signal_descendants(libc::SIGKILL);
        // SAFETY: waitpid with a null status pointer reaps without reading it.
        while unsafe { libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) } > 0 {}
        if left == 0 {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Sends `sig` to every live process below this one (from `/proc`);
/// gives how many there were.
fn signal_descendants(sig: i32) -> usize {
    let me = std::process::id() as i32;
    let mut parent_of = Vec::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else { continue };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
            // After the name in parentheses: the state, then the parent's pid.
            let Some(rest) = stat.rfind(") ").map(|i| &stat[i + 2..]) else { continue };
            let mut fields = rest.split(' ');
            let (Some(state), Some(ppid)) = (fields.next(), fields.next().and_then(|p| p.parse::<i32>().ok())) else { continue };
            if state != "Z" {
                parent_of.push((pid, ppid));
            }
        }
    }
    let mut below = vec![me];
    let mut i = 0;
    while i < below.len() {
        let p = below[i];
        below.extend(parent_of.iter().filter(|(_, pp)| *pp == p).map(|(pid, _)| *pid));
        i += 1;
    }
    for &pid in &below[1..] {
        // SAFETY: kill takes no pointers.
        unsafe { libc::kill(pid, sig) };
    }
    below.len() - 1
}

/// Records `sig` in `flag` when it arrives instead of dying at once.
fn signal_hook_flag(sig: i32, flag: &Arc<std::sync::atomic::AtomicI32>) -> std::io::Result<()> {
    static FLAG: std::sync::OnceLock<Arc<std::sync::atomic::AtomicI32>> = std::sync::OnceLock::new();
    let _ = FLAG.set(flag.clone());
    extern "C" fn on_signal(sig: i32) {
        if let Some(f) = FLAG.get() {
            f.store(sig, std::sync::atomic::Ordering::Release);
        }
    }
    // SAFETY: the handler only stores to an atomic.
    let r = unsafe { libc::signal(sig, on_signal as *const () as libc::sighandler_t) };
    if r == libc::SIG_ERR { Err(std::io::Error::last_os_error()) } else { Ok(()) }
}
