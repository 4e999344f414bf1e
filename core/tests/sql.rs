//! CHAN-03 and FENCE-02 with SQL, migrations, and the scenarios C9, C10,
//! C11, C12.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Deserialize;
use tinystore::channels::{Event, Scope};
use tinystore::{Database, Delivery, Error, Key, Store, runtime, sql};

fn chat_db(store: &Store) -> Database {
    let d = store.dir().join("migrations");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(d.join("0001_chats.sql"), "create table chats (id integer primary key, title text);\ncreate table messages (id integer primary key, chat_id integer not null references chats(id), role text, text text, created_at integer, reply_to integer);").unwrap();
    std::fs::write(d.join("0004_summaries.sql"), "alter table chats add column summary text;\nalter table chats add column summary_fence text not null default '';").unwrap();
    let db = store.database("chat").migrations(&d).open().unwrap();
    db.exec(sql!("insert into chats (id, title) values (?, ?)", 7, "seven")).unwrap();
    db
}

#[derive(Deserialize, Debug, PartialEq)]
struct Count {
    n: i64,
}

/// CHAN-03: delivered only after the commit (the handler can read the row),
/// a rollback or a failing function drops it, order of one transaction kept.
#[test]
fn chan_03_delivered_after_commit_with_row_readable_and_dropped_on_rollback() {
    let (store, _d) = common::store();
    let db = chat_db(&store);
    let events = store.channel::<i64>("chat-events").open().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (s2, db2) = (seen.clone(), db.clone());
    let sub = events
        .under(7)
        .subscribe(move |m| {
            let rows: Vec<Count> = db2.query(sql!("select count(*) as n from messages where id = ?", m.value)).unwrap();
            s2.lock().unwrap().push((m.value, rows[0].n));
        })
        .unwrap();
    db.tx(|tx| -> tinystore::Result<()> {
        for text in ["a", "b", "c"] {
            let r = tx.exec(sql!("insert into messages (chat_id, text) values (?, ?)", 7, text))?;
            tx.with(&events).under(7).publish(&r.last_insert_rowid)?;
        }
        std::thread::sleep(Duration::from_millis(50));
        Ok(())
    })
    .unwrap();
    assert!(common::eventually(2000, || seen.lock().unwrap().len() == 3));
    assert_eq!(*seen.lock().unwrap(), vec![(1, 1), (2, 1), (3, 1)], "in order, each row readable when announced");
    let e: Result<(), Error> = db.tx(|tx| {
        tx.exec(sql!("insert into messages (chat_id, text) values (?, ?)", 7, "rolled back"))?;
        tx.with(&events).under(7).publish(&99)?;
        Err(Error::new(tinystore::ErrorKind::Invalid, "the function fails"))
    });
    assert_eq!(e.unwrap_err().message(), "the function fails", "the function's own error, unchanged");
    let p = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        db.tx(|tx| -> tinystore::Result<()> {
            tx.with(&events).under(7).publish(&98)?;
            panic!("inside a transaction");
        })
    }));
    assert!(p.is_err());
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(seen.lock().unwrap().len(), 3, "nothing of the rollbacks was delivered");
    let n: Vec<Count> = db.query("select count(*) as n from messages").unwrap();
    assert_eq!(n[0].n, 3);
    sub.stop();
}

/// C11: the same payload three times in one transaction arrives three times;
/// after a rollback, zero times.
/// CHAN-03: a statement that would end or start a transaction itself
/// (`commit`, `rollback`, `begin`, `savepoint`, `release`, `end`) is
/// refused with `invalid` inside a transaction and outside one, so a
/// transaction stays all or nothing: its function's error rolls back
/// every row and drops its messages.
#[test]
fn chan_03_a_statement_that_ends_or_starts_a_transaction_is_refused() {
    let (store, _d) = common::store();
    let db = chat_db(&store);
    for stmt in ["commit", "  /* mine */ ROLLBACK", "end transaction", "savepoint s1", "release s1", "begin", "-- note\nbegin immediate"] {
        let r: Result<(), Error> = db.tx(|tx| {
            tx.exec(sql!("insert into messages (chat_id, text) values (?, ?)", 7, "before"))?;
            let e = tx.exec(stmt).unwrap_err();
            assert_eq!(e.code(), "invalid", "{stmt}: {e}");
            assert!(e.message().contains("tx"), "{stmt}: {e}");
            tx.exec(sql!("insert into messages (chat_id, text) values (?, ?)", 7, "after"))?;
            Err(Error::new(tinystore::ErrorKind::Invalid, "the function fails"))
        });
        assert_eq!(r.unwrap_err().message(), "the function fails", "{stmt}");
        let rows: Vec<Count> = db.query("select count(*) as n from messages").unwrap();
        assert_eq!(rows[0].n, 0, "{stmt}: rows of a failed transaction stand");
        assert_eq!(db.exec(stmt).unwrap_err().code(), "invalid", "{stmt} outside a transaction");
    }
    assert_eq!(db.exec("  ").unwrap_err().code(), "invalid", "an empty statement");
    // Names that only start like one are statements like any other.
    db.exec("create table commits (id integer primary key)").unwrap();
    db.exec("insert into commits (id) values (1)").unwrap();
}

/// `changes` counts the rows a statement changed: 0 for one that changes
/// none (SQLite's own count repeats the last insert's).
#[test]
fn sql_changes_is_zero_for_a_statement_that_changes_no_rows() {
    let (store, _d) = common::store();
    let db = chat_db(&store);
    assert_eq!(db.exec("insert into chats (id, title) values (9, 'nine')").unwrap().changes, 1);
    assert_eq!(db.exec("create table notes (id integer primary key)").unwrap().changes, 0);
    assert_eq!(db.exec("update chats set title = 'x' where id = 1000").unwrap().changes, 0);
    assert_eq!(db.exec("update chats set title = 'x'").unwrap().changes, 2);
}

/// A database whose migrations are all applied opens while another
/// handle holds a long transaction: checking them takes reads only.
#[test]
fn sql_a_database_with_every_migration_applied_opens_without_the_writer() {
    let (store, _d) = common::store();
    let db = chat_db(&store);
    let (in_tx, done) = (std::sync::mpsc::channel(), std::sync::mpsc::channel::<()>());
    let holder = std::thread::spawn(move || {
        db.tx(|tx| -> tinystore::Result<()> {
            tx.exec(sql!("insert into chats (id, title) values (?, ?)", 8, "eight"))?;
            in_tx.0.send(()).unwrap();
            done.1.recv().unwrap();
            Ok(())
        })
    });
    in_tx.1.recv().unwrap();
    let again = store.database("chat").migrations(store.dir().join("migrations")).busy_timeout(Duration::from_millis(300)).open();
    done.0.send(()).unwrap();
    holder.join().unwrap().unwrap();
    let again = again.expect("opened while another held the writer");
    let rows: Vec<Count> = again.query("select count(*) as n from chats").unwrap();
    assert_eq!(rows[0].n, 2);
}

#[test]
fn chan_03_c11_no_deduplication() {
    let (store, _d) = common::store();
    let db = store.database("d").open().unwrap();
    let events = store.channel::<String>("c").open().unwrap();
    let mut it = events.under(1).messages().unwrap();
    db.tx(|tx| -> tinystore::Result<()> {
        for _ in 0..3 {
            tx.with(&events).under(1).publish(&"same".to_owned())?;
        }
        Ok(())
    })
    .unwrap();
    let tx = db.begin().unwrap();
    tx.with(&events).under(1).publish(&"dropped".to_owned()).unwrap();
    tx.rollback().unwrap();
    let mut got = Vec::new();
    while let Ok(Some(Delivery::Message(m))) = it.next_timeout(Duration::from_millis(200)) {
        got.push(m.value);
    }
    assert_eq!(got, vec!["same", "same", "same"]);
}

/// FENCE-02: the seeds' fence scenario. A holds with f1 and loses its lease
/// (maxHold, in-process); B holds with f2 > f1 and writes; A's late update
/// with the fence check changes no row.
#[test]
fn fence_02_late_writer_refused_by_where_summary_fence() {
    let (store, _d) = common::store();
    let db = chat_db(&store);
    let slow = store.lock("summaries").max_hold(Duration::from_millis(100)).open().unwrap();
    let fast = store.lock("summaries").open().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let db_a = db.clone();
    let a = std::thread::spawn(move || {
        slow.hold(7, |lease| -> tinystore::Result<u64> {
            tx.send(lease.fence()).unwrap();
            go_rx.recv().unwrap(); // "paused" past its lease
            let fence = format!("{:040}", lease.fence().get());
            let done = db_a.exec(sql!(
                "update chats set summary = ?, summary_fence = ? where id = ? and summary_fence < ?",
                "stale summary by A",
                &fence,
                7,
                &fence
            ))?;
            Ok(done.changes)
        })
    });
    let f1 = rx.recv().unwrap();
    let f2 = fast
        .hold(7, |lease| -> tinystore::Result<tinystore::Fence> {
            let fence = format!("{:040}", lease.fence().get());
            let done = db.exec(sql!(
                "update chats set summary = ?, summary_fence = ? where id = ? and summary_fence < ?",
                "summary by B",
                &fence,
                7,
                &fence
            ))?;
            assert_eq!(done.changes, 1);
            Ok(lease.fence())
        })
        .unwrap();
    assert!(f2 > f1);
    go_tx.send(()).unwrap();
    let e = a.join().unwrap().unwrap_err();
    assert_eq!(e.code(), "lost", "A is told its lease was lost");
    #[derive(Deserialize)]
    struct Row {
        summary: String,
        summary_fence: String,
    }
    let rows: Vec<Row> = db.query("select summary, summary_fence from chats where id = 7").unwrap();
    assert_eq!(rows[0].summary, "summary by B");
    assert_eq!(rows[0].summary_fence, f2.padded());
}

#[test]
fn sql_migrations_apply_in_order_once_and_refuse_edits_and_half_failures() {
    let (store, _d) = common::store();
    let m = store.dir().join("m");
    std::fs::create_dir_all(&m).unwrap();
    std::fs::write(m.join("0002_b.sql"), "insert into log values ('b');").unwrap();
    std::fs::write(m.join("0001_a.sql"), "create table log (v text); insert into log values ('a');").unwrap();
    std::fs::write(m.join("README.txt"), "not a migration").unwrap();
    let db = store.database("m").migrations(&m).open().unwrap();
    #[derive(Deserialize, Debug, PartialEq)]
    struct V {
        v: String,
    }
    let order = || db.query::<V>("select v from log order by rowid").unwrap().into_iter().map(|r| r.v).collect::<Vec<_>>();
    assert_eq!(order(), ["a", "b"]);
    store.database("m").migrations(&m).open().unwrap();
    assert_eq!(order(), ["a", "b"], "each applied once");
    // A failing migration leaves nothing of itself.
    std::fs::write(m.join("0003_c.sql"), "insert into log values ('c'); insert into nowhere values (1);").unwrap();
    let e = store.database("m").migrations(&m).open().err().unwrap();
    assert_eq!(e.code(), "sql");
    assert!(e.message().contains("0003_c.sql"), "{e}");
    assert_eq!(order(), ["a", "b"]);
    std::fs::write(m.join("0003_c.sql"), "insert into log values ('c');").unwrap();
    store.database("m").migrations(&m).open().unwrap();
    assert_eq!(order(), ["a", "b", "c"]);
    // Editing an applied file is an error, not a silent skip.
    std::fs::write(m.join("0001_a.sql"), "create table log (v text); insert into log values ('A');").unwrap();
    let e = store.database("m").migrations(&m).open().err().unwrap();
    assert_eq!(e.code(), "sql");
    assert!(e.message().contains("0001_a.sql changed since it was applied"), "{e}");
    assert!(e.message().contains("must not change"), "{e}");
    std::fs::write(m.join("0001_a.sql"), "create table log (v text); insert into log values ('a');").unwrap();
    // A file that came in late, numbered below one applied, is refused
    // rather than run after it; any case of the extension counts.
    std::fs::write(m.join("0002_late.SQL"), "insert into log values ('late');").unwrap();
    std::fs::write(m.join("0004_d.Sql"), "insert into log values ('d');").unwrap();
    let e = store.database("m").migrations(&m).open().err().unwrap();
    assert!(e.message().contains("same number 2"), "{e}");
    std::fs::remove_file(m.join("0002_late.SQL")).unwrap();
    std::fs::write(m.join("0000_late.SQL"), "insert into log values ('late');").unwrap();
    let e = store.database("m").migrations(&m).open().err().unwrap();
    assert!(e.message().contains("0000_late.SQL is new but numbered 0, below number 3"), "{e}");
    assert_eq!(order(), ["a", "b", "c"], "nothing of the folder applied");
    std::fs::remove_file(m.join("0000_late.SQL")).unwrap();
    store.database("m").migrations(&m).open().unwrap();
    assert_eq!(order(), ["a", "b", "c", "d"]);
    std::fs::write(m.join("9_x.sql"), "").unwrap();
    std::fs::write(m.join("09_y.sql"), "").unwrap();
    std::fs::write(m.join("0001_a.sql"), "create table log (v text); insert into log values ('a');").unwrap();
    assert!(store.database("m").migrations(&m).open().err().unwrap().message().contains("same number"));
}

#[test]
fn sql_exec_query_params_and_types() {
    let (store, _d) = common::store();
    let db = store.database("t").open().unwrap();
    db.exec("create table t (i integer, r real, s text, b blob, n text)").unwrap();
    let none: Option<i64> = None;
    let d = db.exec(sql!("insert into t values (?, ?, ?, ?, ?)", 42i64, 1.5, "x'); drop table t; --", vec![1u8, 2], none)).unwrap();
    assert_eq!((d.changes, d.last_insert_rowid), (1, 1));
    let rows = db.query_rows("select * from t").unwrap();
    assert_eq!(rows.columns, ["i", "r", "s", "b", "n"]);
    use tinystore::sql::SqlValue as V;
    assert_eq!(
        rows.rows[0],
        vec![V::Integer(42), V::Real(1.5), V::Text("x'); drop table t; --".into()), V::Blob(vec![1, 2]), V::Null]
    );
    let e = db.exec("insert into nowhere values (1)").unwrap_err();
    assert_eq!(e.code(), "sql");
    assert!(e.message().contains("nowhere"));
    assert_eq!(store.database("Bad").open().err().unwrap().code(), "invalid");
}

/// A real parameter that is NaN or infinite is refused with `invalid`
/// naming it, by exec, query and a transaction alike, for every binding
/// (SQLite would store NaN as null, silently); nothing is written.
#[test]
fn sql_nan_or_infinite_parameter_is_refused_naming_it() {
    let (store, _d) = common::store();
    let db = store.database("t").open().unwrap();
    db.exec("create table t (a integer, r real)").unwrap();
    for (f, got) in [(f64::NAN, "got NaN"), (f64::INFINITY, "got Infinity"), (f64::NEG_INFINITY, "got -Infinity")] {
        let e = db.exec(sql!("insert into t values (?, ?)", 1, f)).unwrap_err();
        assert_eq!(e.code(), "invalid");
        assert!(e.message().contains("a SQL parameter is a finite number") && e.message().contains(got), "{e}");
        assert!(e.message().contains("parameter 2"), "names the parameter: {e}");
        assert_eq!(db.query_rows(sql!("select ? as v", f)).unwrap_err().code(), "invalid");
        let tx = db.begin().unwrap();
        assert_eq!(tx.exec(sql!("insert into t values (?, ?)", 2, f)).unwrap_err().code(), "invalid");
        tx.rollback().unwrap();
    }
    assert!(db.query_rows("select * from t").unwrap().rows.is_empty());
    db.exec(sql!("insert into t values (?, ?)", 3, 1.5)).unwrap();
}

/// Several writers in one process wait for each other up to the busy
/// timeout, then get a clear `busy` error; readers never block the writer.
#[test]
fn sql_writers_wait_then_busy_and_readers_do_not_block() {
    let (store, _d) = common::store();
    let db = store.database("w").busy_timeout(Duration::from_millis(200)).open().unwrap();
    db.exec("create table t (v integer)").unwrap();
    let tx = db.begin().unwrap();
    tx.exec(sql!("insert into t values (?)", 1)).unwrap();
    let t = Instant::now();
    let e = db.exec(sql!("insert into t values (?)", 2)).unwrap_err();
    assert_eq!(e.code(), "busy");
    assert!(t.elapsed() >= Duration::from_millis(190));
    let n: Vec<Count> = db.query("select count(*) as n from t").unwrap();
    assert_eq!(n[0].n, 0, "a reader sees the last commit while a writer works");
    tx.commit().unwrap();
    db.exec(sql!("insert into t values (?)", 3)).unwrap();
}

/// C9: a stuck subscriber never slows commits that publish, and channel
/// memory stays within its budget; the stuck one gets a count when it resumes.
#[test]
fn c9_stuck_subscriber_never_slows_commits() {
    let (store, _d) = common::store();
    let db = store.database("c9").open().unwrap();
    db.exec("create table t (v integer)").unwrap();
    let events = store.channel::<i64>("c").open().unwrap();
    let stuck = runtime::block_on(store.subscribe_raw("c", &[Key::from(1)], Scope::Branch, None)).unwrap();
    let t = Instant::now();
    for i in 0..20_000i64 {
        db.tx(|tx| -> tinystore::Result<()> {
            tx.exec(sql!("insert into t values (?)", i))?;
            tx.with(&events).under(1).publish(&i)
        })
        .unwrap();
    }
    assert!(t.elapsed() < Duration::from_secs(60));
    assert!(store.status().unwrap().channel_bytes < 64 << 20);
    match stuck.try_next() {
        Some(Event::Missed(m)) => assert_eq!(m.count, Some(20_000 - 1024)),
        other => panic!("{other:?}"),
    }
}

/// C10 and C12: eight threads commit transactions that publish; all commit,
/// none deadlocks, and each branch's order is the commit order.
#[test]
fn c10_c12_concurrent_transactions_commit_and_keep_commit_order() {
    let (store, _d) = common::store();
    let db = store.database("c10").open().unwrap();
    db.exec("create table t (id integer primary key, b integer)").unwrap();
    let events = store.channel::<i64>("c").open().unwrap();
    let mut it = events.under("all").messages().unwrap();
    let done = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..8)
        .map(|b| {
            let (db, events, done) = (db.clone(), events.clone(), done.clone());
            std::thread::spawn(move || {
                for _ in 0..100 {
                    db.tx(|tx| -> tinystore::Result<()> {
                        let r = tx.exec(sql!("insert into t (b) values (?)", b))?;
                        tx.with(&events).under("all").publish(&r.last_insert_rowid)
                    })
                    .unwrap();
                    done.fetch_add(1, Ordering::SeqCst);
                }
            })
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
    assert_eq!(done.load(Ordering::SeqCst), 800);
    let mut ids = Vec::new();
    while let Ok(Some(Delivery::Message(m))) = it.next_timeout(Duration::from_millis(200)) {
        ids.push(m.value);
    }
    assert_eq!(ids, (1..=800).collect::<Vec<_>>(), "rowids grow with commits: delivery order is commit order");
}

/// FENCE-01: the store's own kv.db, which keeps the epoch fences grow
/// from, is not a database a program can open and write.
#[test]
fn fence_01_the_database_name_kv_is_the_stores_own() {
    let (store, _d) = common::store();
    let Err(e) = store.database("kv").open() else { panic!("the store's own kv.db was opened as a database") };
    assert_eq!(e.code(), "invalid", "{e}");
    assert!(e.message().contains("pick another name"), "{e}");
    store.database("kv2").open().unwrap();
}

/// CHAN-03 over a connection: SQL runs where the store's files are. A
/// client whose path to the owner's directory does not reach them (another
/// machine over tcp:, here a directory moved away) is told so, instead of
/// quietly opening another file of the same name.
#[test]
fn chan_03_a_client_that_cannot_reach_the_stores_files_is_told_so() {
    let d = common::dir();
    let here = d.path().join("a");
    let owner = Store::open(&here).unwrap();
    let client = Store::connect(&format!("unix:{}", here.join("tinystore.sock").display())).unwrap();
    client.database("notes").open().unwrap();
    std::fs::rename(&here, d.path().join("b")).unwrap();
    std::fs::create_dir_all(&here).unwrap();
    let Err(e) = client.database("notes").open() else { panic!("opened a database beside a directory that is not the store's") };
    assert_eq!(e.code(), "invalid", "{e}");
    assert!(e.message().contains("not on this machine"), "{e}");
    drop(owner);
}

/// CHAN-03: a transaction publishes to its database's store, so a channel
/// of another store is refused at publish (`invalid`), and nothing of the
/// transaction is written.
#[test]
fn chan_03_a_transaction_refuses_a_channel_of_another_store() {
    let (store, _d) = common::store();
    let (other, _d2) = common::store();
    let db = chat_db(&store);
    let elsewhere = other.channel::<i64>("chat-events").open().unwrap();
    let e = db
        .tx(|tx| -> tinystore::Result<()> {
            tx.exec(sql!("insert into chats (id, title) values (?, ?)", 8, "eight"))?;
            tx.with(&elsewhere).under(8).publish(&1)
        })
        .unwrap_err();
    assert_eq!(e.kind(), tinystore::ErrorKind::Invalid, "{e}");
    assert!(e.message().contains("another store handle"), "{e}");
    let rows: Vec<Count> = db.query(sql!("select count(*) as n from chats where id = 8")).unwrap();
    assert_eq!(rows[0].n, 0, "rolled back");
    let here = store.channel::<i64>("chat-events").open().unwrap();
    db.tx(|tx| tx.with(&here).under(8).publish(&2)).unwrap();
}
