//! The `tinystore` command: run a command under a lease, and more.

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use tinystore::limits::{DEFAULT_TTL, DEFAULT_WAIT, parse_duration};
use tinystore::{Error, Store};

#[derive(Parser)]
#[command(name = "tinystore", version, about = "Channels and locks with fences for the processes of one application")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Locks of a store.
    Lock {
        /// The store directory.
        dir: String,
        #[command(subcommand)]
        action: LockAction,
    },
}

#[derive(Subcommand)]
enum LockAction {
    /// Runs a command while holding a key; its fence is in TINYSTORE_FENCE
    /// (and its 40-digit form in TINYSTORE_FENCE_PADDED). Exits with the
    /// command's status; stops it if the lease is lost.
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

fn duration(s: &str) -> Result<Duration, String> {
    parse_duration(s).map_err(|e| e.message().to_owned())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("tinystore: {e}");
            ExitCode::from(match e.code() {
                "timeout" => 3,
                "lost" => 4,
                _ => 1,
            })
        }
    }
}

fn run(cli: Cli) -> Result<ExitCode, Error> {
    match cli.command {
        Command::Lock { dir, action: LockAction::Hold { lock, key, ttl, wait, max_hold, command } } => {
            let store = Store::open(&dir)?;
            let mut b = store.lock(&lock).ttl(ttl.unwrap_or(DEFAULT_TTL)).wait(wait.unwrap_or(DEFAULT_WAIT));
            if let Some(m) = max_hold {
                b = b.max_hold(m);
            }
            let lock = b.open()?;
            lock.hold(key.as_str(), |lease| -> Result<ExitCode, Error> { run_child(&command, lease) })
        }
    }
}

/// Runs the command under `lease`, killing it if the lease is lost.
fn run_child(command: &[String], lease: &tinystore::Lease) -> Result<ExitCode, Error> {
    let mut child = std::process::Command::new(&command[0])
        .args(&command[1..])
        .env("TINYSTORE_FENCE", lease.fence().to_string())
        .env("TINYSTORE_FENCE_PADDED", lease.fence().padded())
        .spawn()
        .map_err(|e| Error::new(tinystore::ErrorKind::Io, format!("could not run {:?}: {e}", command[0])))?;
    loop {
        if let Some(status) = child.try_wait().map_err(|e| Error::new(tinystore::ErrorKind::Io, e.to_string()))? {
            return Ok(ExitCode::from(status.code().unwrap_or(1).clamp(0, 255) as u8));
        }
        if lease.is_lost() {
            let _ = child.kill();
            let _ = child.wait();
            return Ok(ExitCode::from(4));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
