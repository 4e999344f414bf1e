//! A client process for the multi-process tests (built by `cargo test`).
//!
//! <dir> may be a cluster address (etcd://...): the worker connects to it.
//!
//! worker counter <dir> <n>          n holds of counter/1, each adding one in SQL
//! worker hold <dir> <ttl_ms> <key>  hold key, print the fence, sleep 1 s, then
//!                                   write with the fence check; exit 4 if lost
//! worker wait <dir> <ttl_ms> <key>  wait for key (30 s), print "ran" if it runs
//! worker listen <dir> <channel>     print each event of branch 1 as a line
//! worker tx <dir> <n> [stall_at]    n transactions each inserting a row of
//!                                   `tx` in order.db and publishing its rowid
//!                                   (and the time) to order/all; with
//!                                   stall_at, the stall_at-th stops for good
//!                                   between its commit and its publish,
//!                                   printing "stalled <rowid>" (CHAN-03);
//! worker tx <dir> <n> <stall_at> published
//!                                   the same, stopping after its message is
//!                                   in the stream, before the outbox row of
//!                                   a cluster store is deleted

use std::io::Write;
use std::time::Duration;

use tinystore::{Delivery, Store, sql};

static ROW: std::sync::Mutex<i64> = std::sync::Mutex::new(0);

/// Between a commit and its publish: say so, then never go on.
fn stall() {
    println!("stalled {}", ROW.lock().unwrap());
    loop {
        std::thread::sleep(Duration::from_secs(60));
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let store = if args[2].starts_with("etcd://") { Store::connect(&args[2]) } else { Store::open(&args[2]) }.expect("open the store");
    let out = std::io::stdout();
    match args[1].as_str() {
        "counter" => {
            let n: u32 = args[3].parse().unwrap();
            let db = store.database("counter").open().unwrap();
            let lock = store.lock("counter").ttl(Duration::from_secs(5)).wait(Duration::from_secs(60)).open().unwrap();
            for _ in 0..n {
                let fence = lock
                    .hold(1, |lease| -> tinystore::Result<_> {
                        #[derive(serde::Deserialize)]
                        struct V {
                            v: i64,
                        }
                        let v: Vec<V> = db.query("select v from counter")?;
                        db.exec(sql!("update counter set v = ?", v[0].v + 1))?;
                        Ok(lease.fence())
                    })
                    .unwrap();
                writeln!(out.lock(), "{fence}").unwrap();
            }
        }
        "hold" => {
            let ttl = Duration::from_millis(args[3].parse().unwrap());
            let db = store.database("chat").open().unwrap();
            let lock = store.lock("summaries").ttl(ttl).open().unwrap();
            let r = lock.hold(args[4].as_str(), |lease| -> tinystore::Result<u64> {
                writeln!(out.lock(), "fence {}", lease.fence()).unwrap();
                out.lock().flush().unwrap();
                std::thread::sleep(Duration::from_secs(1));
                let fence = lease.fence().padded();
                let done = db.exec(sql!(
                    "update chats set summary = ?, summary_fence = ? where id = ? and summary_fence < ?",
                    "by the worker",
                    &fence,
                    7,
                    &fence
                ))?;
                writeln!(out.lock(), "changes {}", done.changes).unwrap();
                Ok(done.changes)
            });
            if let Err(e) = r {
                writeln!(out.lock(), "error {}", e.code()).unwrap();
                std::process::exit(4);
            }
        }
        "wait" => {
            let ttl = Duration::from_millis(args[3].parse().unwrap());
            let lock = store.lock("l").ttl(ttl).wait(Duration::from_secs(30)).open().unwrap();
            writeln!(out.lock(), "waiting").unwrap();
            let r = lock.hold(args[4].as_str(), |lease| -> tinystore::Result<()> {
                writeln!(out.lock(), "ran {}", lease.fence()).unwrap();
                Ok(())
            });
            writeln!(out.lock(), "done {:?}", r.err().map(|e| e.code())).unwrap();
        }
        "listen" => {
            let events = store.channel::<serde_json::Value>(&args[3]).open().unwrap();
            let it = events.under(1).messages().unwrap();
            writeln!(out.lock(), "listening").unwrap();
            for d in it {
                match d.unwrap() {
                    Delivery::Message(m) => writeln!(out.lock(), "msg {}", m.seq).unwrap(),
                    Delivery::Missed(m) => writeln!(out.lock(), "missed {:?} {}", m.count, m.reason.as_str()).unwrap(),
                }
            }
        }
        "tx" => {
            let n: u64 = args[3].parse().unwrap();
            let stall_at: u64 = args.get(4).map_or(0, |a| a.parse().unwrap());
            let after_publish = args.get(5).is_some_and(|a| a == "published");
            let db = store.database("order").open().unwrap();
            let events = store.channel::<serde_json::Value>("order").open().unwrap();
            for i in 1..=n {
                if i == stall_at && after_publish {
                    tinystore::sql::after_outbox_publish_hook(stall);
                } else if i == stall_at {
                    tinystore::sql::after_commit_hook(stall);
                }
                db.tx(|tx| -> tinystore::Result<()> {
                    let r = tx.exec("insert into tx (at) values (0)")?;
                    *ROW.lock().unwrap() = r.last_insert_rowid;
                    let at_us = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_micros() as u64;
                    tx.with(&events).under("all").publish(&serde_json::json!({"row": r.last_insert_rowid, "at_us": at_us}))
                })
                .unwrap();
            }
            writeln!(out.lock(), "done").unwrap();
        }
        other => panic!("unknown mode {other}"),
    }
}
