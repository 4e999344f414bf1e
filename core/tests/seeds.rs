//! The Rust samples of the seeds (docs pages "Live updates" and "Fences"),
//! as written, around trivial stand-ins for the app's own helpers.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use tinystore::{Store, Subscription, sql, unix_millis};

#[derive(Serialize, Deserialize, Clone)]
struct ChatEvent {
    kind: String,
    id: i64,
}

#[derive(Debug, PartialEq)]
enum TabEvent {
    Message(i64),
    Reload,
}

#[derive(Debug)]
#[allow(dead_code)]
enum AppError {
    Store(tinystore::Error),
    Model(String),
}
impl From<tinystore::Error> for AppError {
    fn from(e: tinystore::Error) -> Self {
        AppError::Store(e)
    }
}

struct Model;
impl Model {
    fn summarize(&self, history: &[String]) -> Result<String, AppError> {
        Ok(format!("{} messages", history.len()))
    }
}

struct App {
    store: Store,
    db: tinystore::Database,
    events: tinystore::Channel<ChatEvent>,
    summaries: tinystore::Lock,
    model: Model,
}

fn app() -> (App, tempfile::TempDir) {
    let (store, d) = common::store();
    let m = store.dir().join("migrations");
    std::fs::create_dir_all(&m).unwrap();
    std::fs::write(m.join("0001_chat.sql"), "create table chats (id integer primary key); create table messages (id integer primary key, chat_id integer, role text, text text, created_at integer, reply_to integer);").unwrap();
    // migrations/0004_summaries.sql, as the seeds write it:
    std::fs::write(m.join("0004_summaries.sql"), "alter table chats add column summary text;\nalter table chats add column summary_fence text not null default '';\n").unwrap();
    let db = store.database("chat").migrations(&m).open().unwrap();
    db.exec(sql!("insert into chats (id) values (?)", 7)).unwrap();

    // "Open a channel and a lock", as written:
    let events = store.channel::<ChatEvent>("chat-events").open().unwrap();
    let summaries = store.lock("summaries").open().unwrap();
    (App { store, db, events, summaries, model: Model }, d)
}

impl App {
    fn history(&self, chat_id: i64) -> Result<Vec<String>, AppError> {
        #[derive(Deserialize)]
        struct T {
            text: String,
        }
        Ok(self.db.query::<T>(sql!("select text from messages where chat_id = ?", chat_id))?.into_iter().map(|t| t.text).collect())
    }

    /// "Tell every open tab", as written.
    fn save_reply(&self, chat_id: i64, answer: &str, message_id: i64) -> tinystore::Result<()> {
        // The sample's `events` is the channel itself, not a reference (cheap to clone).
        let (db, events) = (&self.db, self.events.clone());
        db.tx(|tx| -> tinystore::Result<()> {
            let reply = tx.exec(sql!(
                "insert into messages (chat_id, role, text, created_at, reply_to) values (?, 'assistant', ?, ?, ?)",
                chat_id,
                answer,
                unix_millis(SystemTime::now()),
                message_id
            ))?;
            tx.with(&events).under(chat_id).publish(&ChatEvent { kind: "message".into(), id: reply.last_insert_rowid })?;
            Ok(())
        })?;
        Ok(())
    }

    /// "The endpoint subscribes to the chat's branch", as written.
    fn stream(&self, chat_id: i64, send: impl Fn(TabEvent) + Send + Sync + Clone + 'static) -> tinystore::Result<Subscription> {
        let events = &self.events;
        let on_missed = send.clone();
        events
            .under(chat_id)
            .on_missed(move |_| on_missed(TabEvent::Reload))
            .subscribe(move |m| send(TabEvent::Message(m.value.id)))
    }

    /// "One summary per chat at a time", as written.
    fn summarize_once(&self, chat_id: i64) -> Result<Option<()>, AppError> {
        let (summaries, model, db) = (&self.summaries, &self.model, &self.db);
        let history = |id| self.history(id);
        let started = summaries.try_hold(chat_id, |lease| -> Result<(), AppError> {
            let summary = model.summarize(&history(chat_id)?)?;
            let fence = format!("{:040}", lease.fence().get());
            db.exec(sql!(
                "update chats set summary = ?, summary_fence = ? where id = ? and summary_fence < ?",
                summary,
                &fence,
                chat_id,
                &fence
            ))?;
            Ok(())
        })?;
        if started.is_none() {
            return Ok(None); // another worker is writing this chat's summary
        }
        Ok(Some(()))
    }

    /// "Checking a fence in SQL" (the fences page), as written.
    fn summarize_waiting(&self, chat_id: i64) -> Result<(), AppError> {
        let (summaries, model, db) = (&self.summaries, &self.model, &self.db);
        let history = |id| self.history(id);
        summaries.hold(chat_id, |lease| -> Result<(), AppError> {
            let summary = model.summarize(&history(chat_id)?)?;
            let fence = format!("{:040}", lease.fence().get());
            db.exec(sql!(
                "update chats set summary = ?, summary_fence = ? where id = ? and summary_fence < ?",
                summary,
                &fence,
                chat_id,
                &fence
            ))?;
            Ok(())
        })?;
        Ok(())
    }
}

#[test]
fn seeds_rust_live_updates_reply_reaches_tab_after_commit() {
    let (app, _d) = app();
    let tab = Arc::new(Mutex::new(Vec::new()));
    let t = tab.clone();
    let sub = app.stream(7, move |e| t.lock().unwrap().push(e)).unwrap();
    app.save_reply(7, "hello", 1).unwrap();
    app.save_reply(7, "again", 1).unwrap();
    assert!(common::eventually(2000, || tab.lock().unwrap().len() == 2));
    assert_eq!(*tab.lock().unwrap(), vec![TabEvent::Message(1), TabEvent::Message(2)]);
    sub.stop();
    let _ = &app.store;
}

#[test]
fn seeds_rust_slow_tab_is_told_to_reload() {
    let (app, _d) = app();
    let tab = Arc::new(Mutex::new(Vec::new()));
    let (t, gate) = (tab.clone(), Arc::new(Mutex::new(())));
    let held = gate.lock().unwrap();
    let g = gate.clone();
    let sub = app
        .stream(7, move |e| {
            drop(g.lock().unwrap()); // a phone on a slow network
            t.lock().unwrap().push(e)
        })
        .unwrap();
    for _ in 0..1100 {
        app.save_reply(7, "burst", 1).unwrap();
    }
    drop(held);
    assert!(common::eventually(5000, || tab.lock().unwrap().contains(&TabEvent::Reload)));
    sub.stop();
}

#[test]
fn seeds_rust_summary_try_hold_and_hold_write_with_fence() {
    let (app, _d) = app();
    app.save_reply(7, "hello", 1).unwrap();
    assert_eq!(app.summarize_once(7).unwrap(), Some(()));
    app.summarize_waiting(7).unwrap();
    #[derive(Deserialize)]
    struct S {
        summary: String,
        summary_fence: String,
    }
    let s: Vec<S> = app.db.query("select summary, summary_fence from chats where id = 7").unwrap();
    assert_eq!(s[0].summary, "1 messages");
    assert_eq!(s[0].summary_fence.len(), 40);
    // While another worker holds the key, try_hold runs nothing.
    let other = app.store.lock("summaries").open().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let h = std::thread::spawn(move || {
        other.hold(7, |_| -> tinystore::Result<()> {
            tx.send(()).unwrap();
            go_rx.recv().unwrap();
            Ok(())
        })
    });
    rx.recv().unwrap();
    assert_eq!(app.summarize_once(7).unwrap(), None);
    go_tx.send(()).unwrap();
    h.join().unwrap().unwrap();
    std::thread::sleep(Duration::from_millis(1));
}
