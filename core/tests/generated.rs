//! The bindings' copies of the core's data, generated from it and checked
//! in: the error codes (`ErrorKind::ALL`) and the status shape
//! (`tinystore::status::SHAPE`). Each test fails when a checked-in file
//! differs from what the core renders now; `UPDATE_GENERATED=1 cargo test
//! -p tinystore --test generated` rewrites them. A last test holds SHAPE to
//! what a store really reports.

mod common;

use std::collections::BTreeSet;
use std::fmt::Write as _;

use tinystore::ErrorKind;
use tinystore::channels::Scope;
use tinystore::locks::{Holder, Kind, Terms};
use tinystore::status::{FieldType, SHAPE, StatusObject};
use tinystore::{Key, Store, runtime};

fn banner(comment: &str) -> String {
    format!(
        "{comment} Generated from the core by core/tests/generated.rs: do not edit.\n\
         {comment} `UPDATE_GENERATED=1 cargo test -p tinystore --test generated` rewrites it.\n"
    )
}

/// Compares `text` with the checked-in file at `path` (from the workspace
/// root), or rewrites it under UPDATE_GENERATED.
fn check(path: &str, text: String) {
    let file = common::root().join(path);
    if std::env::var_os("UPDATE_GENERATED").is_some() {
        std::fs::write(&file, &text).unwrap_or_else(|e| panic!("write {path}: {e}"));
        return;
    }
    let checked_in = std::fs::read_to_string(&file).unwrap_or_default();
    assert!(
        checked_in == text,
        "{path} differs from what the core generates: run `UPDATE_GENERATED=1 cargo test -p tinystore --test generated` and commit it"
    );
}

fn quoted(s: &str) -> String {
    serde_json::to_string(s).expect("a string is JSON")
}

fn camel(snake: &str, upper_first: bool) -> String {
    let mut out = String::new();
    for (i, part) in snake.split('_').enumerate() {
        if part == "id" && (i > 0 || upper_first) {
            out.push_str("ID");
            continue;
        }
        let mut c = part.chars();
        if let Some(first) = c.next() {
            if i > 0 || upper_first {
                out.extend(first.to_uppercase());
            } else {
                out.push(first);
            }
            out.push_str(c.as_str());
        }
    }
    out
}

// ---- error codes ----------------------------------------------------------

/// `doc` as the rest of a Go sentence: "A wait ran out." as "a wait ran out.".
fn lower_first(doc: &str) -> String {
    let mut c = doc.chars();
    c.next().map(|f| f.to_lowercase().chain(c).collect()).unwrap_or_default()
}

fn go_error_name(k: ErrorKind) -> String {
    match k.code() {
        "sql" => "ErrSQL".into(),
        "io" => "ErrIO".into(),
        c => format!("Err{}", camel(c, true)),
    }
}

#[test]
fn python_codes_are_fresh() {
    let mut s = banner("#");
    s.push_str("\"\"\"The engine's error codes, each with what it means (`tinystore::ErrorKind`).\"\"\"\n\n");
    s.push_str("from __future__ import annotations\n\nfrom typing import Literal, Mapping\n\n");
    s.push_str("#: The stable code of every tinystore error, the same in every language.\nCode = Literal[\n");
    for k in ErrorKind::ALL {
        writeln!(s, "    {},", quoted(k.code())).unwrap();
    }
    s.push_str("]\n\n#: Every code, in the engine's order, with what it means.\nCODES: Mapping[str, str] = {\n");
    for k in ErrorKind::ALL {
        writeln!(s, "    {}: {},", quoted(k.code()), quoted(k.doc())).unwrap();
    }
    s.push_str("}\n");
    check("bindings-python/python/tinystore/_codes.py", s);
}

#[test]
fn node_codes_are_fresh() {
    let mut s = banner("//");
    s.push_str("/**\n * The engine's error codes, each with what it means (`tinystore::ErrorKind`).\n *\n * @module\n */\n\n");
    s.push_str("/** Every code, in the engine's order. */\nexport const CODES = [\n");
    for k in ErrorKind::ALL {
        writeln!(s, "  '{}',", k.code()).unwrap();
    }
    s.push_str("] as const\n\n/** The stable code of every tinystore error, the same in every language. */\n");
    s.push_str("export type ErrorCode = (typeof CODES)[number]\n\n/** What each code means. */\n");
    s.push_str("export const CODE_DOCS: Readonly<Record<ErrorCode, string>> = {\n");
    for k in ErrorKind::ALL {
        writeln!(s, "  {}: {},", k.code(), quoted(k.doc())).unwrap();
    }
    s.push_str("}\n");
    check("bindings-node/lib/codes.ts", s);
}

#[test]
fn go_codes_are_fresh() {
    // The sentinels, in the internal package that maps the C ABI's codes.
    let mut s = banner("//");
    s.push_str("\npackage native\n\nimport \"errors\"\n\n");
    s.push_str("// The sentinels of the engine's error codes, one per code of tinystore::ErrorKind.\nvar (\n");
    for (i, k) in ErrorKind::ALL.into_iter().enumerate() {
        if i > 0 {
            s.push('\n');
        }
        writeln!(s, "\t// {} is code {:?}: {}", go_error_name(k), k.code(), lower_first(k.doc())).unwrap();
        writeln!(s, "\t{} = errors.New(\"tinystore: {}\")", go_error_name(k), k.code()).unwrap();
    }
    s.push_str(")\n\n// byCode gives the sentinel of each code.\nvar byCode = map[string]error{\n");
    let width = ErrorKind::ALL.iter().map(|k| k.code().len() + 3).max().unwrap_or(0);
    for k in ErrorKind::ALL {
        let key = format!("{}:", quoted(k.code()));
        writeln!(s, "\t{key:<width$}{},", go_error_name(k), width = width + 1).unwrap();
    }
    s.push_str("}\n");
    check("bindings-go/go/internal/native/errors_codes.go", s);

    // The public names, for errors.Is.
    let mut s = banner("//");
    s.push_str("\npackage tinystore\n\nimport \"tinystore.dev/tinystore/internal/native\"\n\n");
    s.push_str("// The errors of the engine, one per code, for errors.Is.\nvar (\n");
    for (i, k) in ErrorKind::ALL.into_iter().enumerate() {
        if i > 0 {
            s.push('\n');
        }
        writeln!(s, "\t// {}: {}", go_error_name(k), lower_first(k.doc())).unwrap();
        writeln!(s, "\t{0} = native.{0}", go_error_name(k)).unwrap();
    }
    s.push_str(")\n");
    check("bindings-go/go/errors_codes.go", s);
}

// ---- status shape ---------------------------------------------------------

fn go_type_name(name: &str) -> &str {
    if name == "StoreStatus" { "Status" } else { name }
}

fn go_type(t: FieldType) -> String {
    match t {
        FieldType::Text | FieldType::Fence => "string".into(),
        FieldType::Count => "int".into(),
        FieldType::U64 | FieldType::WideU64 => "uint64".into(),
        // A missing fence decodes as "".
        FieldType::Optional(FieldType::Fence) => "string".into(),
        FieldType::Optional(t) => format!("*{}", go_type(*t)),
        FieldType::List(t) => format!("[]{}", go_type(*t)),
        FieldType::Object(n) => go_type_name(n).into(),
    }
}

fn go_doc(t: FieldType, doc: &str) -> String {
    match t {
        FieldType::Optional(FieldType::Fence) => doc.replace("null", "\"\""),
        FieldType::Optional(_) => doc.replace("null", "nil"),
        _ => doc.into(),
    }
}

#[test]
fn go_status_is_fresh() {
    let mut s = banner("//");
    s.push_str("\npackage tinystore\n");
    for o in SHAPE {
        let name = go_type_name(o.name);
        writeln!(s, "\n// {name} is {}\ntype {name} struct {{", lower_first(o.doc)).unwrap();
        for (i, f) in o.fields.iter().enumerate() {
            if i > 0 {
                s.push('\n');
            }
            let field = camel(f.name, true);
            writeln!(s, "\t// {field} is {}", lower_first(&go_doc(f.ty, f.doc))).unwrap();
            writeln!(s, "\t{field} {} `json:\"{}\"`", go_type(f.ty), f.name).unwrap();
        }
        s.push_str("}\n");
    }
    check("bindings-go/go/status_types.go", s);
}

fn ts_type(t: FieldType) -> String {
    match t {
        FieldType::Text => "string".into(),
        FieldType::Count | FieldType::U64 => "number".into(),
        FieldType::WideU64 | FieldType::Fence => "bigint".into(),
        FieldType::Optional(t) => format!("{} | null", ts_type(*t)),
        FieldType::List(t) => format!("readonly {}[]", ts_type(*t)),
        FieldType::Object(n) => n.into(),
    }
}

/// The TypeScript expression converting the JSON value `v` of type `t`.
fn ts_convert(t: FieldType, v: &str) -> String {
    match t {
        FieldType::Text | FieldType::Count | FieldType::U64 => v.into(),
        FieldType::WideU64 | FieldType::Fence => format!("BigInt({v})"),
        FieldType::Optional(t) => format!("{v} === null || {v} === undefined ? null : {}", ts_convert(*t, v)),
        FieldType::List(FieldType::Object(n)) => format!("({v} ?? []).map(to{n})"),
        FieldType::List(t) if ts_convert(*t, "x") == "x" => format!("{v} ?? []"),
        FieldType::List(t) => format!("({v} ?? []).map((x: any) => {})", ts_convert(*t, "x")),
        FieldType::Object(n) => format!("to{n}({v})"),
    }
}

#[test]
fn node_status_is_fresh() {
    let mut s = banner("//");
    s.push_str("/**\n * What `store.status()` gives: the engine's status JSON (snake_case) as\n");
    s.push_str(" * objects with camelCase names (`tinystore::status::SHAPE`).\n *\n * @module\n */\n");
    s.push_str("/* eslint-disable @typescript-eslint/no-explicit-any */\n");
    for o in SHAPE {
        writeln!(s, "\n/** {} */\nexport interface {} {{", o.doc, o.name).unwrap();
        for f in o.fields {
            writeln!(s, "  /** {} */\n  readonly {}: {}", f.doc, camel(f.name, false), ts_type(f.ty)).unwrap();
        }
        s.push_str("}\n");
    }
    for o in SHAPE {
        writeln!(s, "\nfunction to{0}(v: any): {0} {{\n  return {{", o.name).unwrap();
        for f in o.fields {
            writeln!(s, "    {}: {},", camel(f.name, false), ts_convert(f.ty, &format!("v.{}", f.name))).unwrap();
        }
        s.push_str("  }\n}\n");
    }
    s.push_str("\n/** @internal The engine's status JSON text as a {@link StoreStatus}. */\n");
    s.push_str("export function toStatus(json: string): StoreStatus {\n  return toStoreStatus(JSON.parse(json))\n}\n");
    check("bindings-node/lib/status.ts", s);
}

fn py_type(t: FieldType) -> String {
    match t {
        FieldType::Text | FieldType::Fence => "str".into(),
        FieldType::Count | FieldType::U64 | FieldType::WideU64 => "int".into(),
        FieldType::Optional(t) => format!("Optional[{}]", py_type(*t)),
        FieldType::List(t) => format!("List[{}]", py_type(*t)),
        FieldType::Object(n) => format!("\"{n}\""),
    }
}

#[test]
fn python_status_is_fresh() {
    let mut s = banner("#");
    s.push_str("\"\"\"What ``store.status()`` gives: the engine's status JSON as typed dicts\n");
    s.push_str("(``tinystore::status::SHAPE``). A fence is its decimal digits, as in the JSON.\"\"\"\n\n");
    s.push_str("from __future__ import annotations\n\nfrom typing import List, Optional, TypedDict\n\n");
    let names: Vec<&str> = SHAPE.iter().map(|o| o.name).collect();
    writeln!(s, "__all__ = [{}]", names.iter().map(|n| quoted(n)).collect::<Vec<_>>().join(", ")).unwrap();
    for o in SHAPE {
        writeln!(s, "\n\nclass {}(TypedDict):\n    \"\"\"{}\"\"\"\n", o.name, o.doc).unwrap();
        for f in o.fields {
            let doc = f.doc.replace("null", "None");
            writeln!(s, "    #: {doc}\n    {}: {}", f.name, py_type(f.ty)).unwrap();
        }
    }
    check("bindings-python/python/tinystore/_status.py", s);
}

// ---- SHAPE against a real store ---------------------------------------------

/// Compares the JSON `v` with the object `o` of SHAPE: the same field names,
/// and each value of its type.
fn matches(path: &str, o: &StatusObject, v: &serde_json::Value, seen: &mut BTreeSet<&'static str>) {
    seen.insert(o.name);
    let obj = v.as_object().unwrap_or_else(|| panic!("{path} is an object"));
    let shape: BTreeSet<&str> = o.fields.iter().map(|f| f.name).collect();
    let real: BTreeSet<&str> = obj.keys().map(String::as_str).collect();
    assert_eq!(real, shape, "{path}: the fields of {} in SHAPE differ from the store's status", o.name);
    for f in o.fields {
        value(&format!("{path}.{}", f.name), f.ty, &obj[f.name], seen);
    }
}

fn value(path: &str, t: FieldType, v: &serde_json::Value, seen: &mut BTreeSet<&'static str>) {
    match t {
        FieldType::Text => assert!(v.is_string(), "{path} is text: {v}"),
        FieldType::Count | FieldType::U64 | FieldType::WideU64 => assert!(v.is_u64(), "{path} is a number: {v}"),
        FieldType::Fence => assert!(v.as_str().is_some_and(|s| s.parse::<u128>().is_ok()), "{path} is a fence's digits: {v}"),
        FieldType::Optional(t) => {
            if !v.is_null() {
                value(path, *t, v, seen)
            }
        }
        FieldType::List(t) => {
            let items = v.as_array().unwrap_or_else(|| panic!("{path} is a list: {v}"));
            assert!(!items.is_empty(), "{path}: the test store should show one at least");
            for (i, x) in items.iter().enumerate() {
                value(&format!("{path}[{i}]"), *t, x, seen);
            }
        }
        FieldType::Object(n) => {
            let o = tinystore::status::object(n).unwrap_or_else(|| panic!("{path}: SHAPE has no object {n}"));
            matches(path, o, v, seen)
        }
    }
}

#[test]
fn store_01_status_shape_is_what_a_store_reports() {
    let (owner, d) = common::store();
    let client = Store::connect(&format!("unix:{}", d.path().join("tinystore.sock").display())).unwrap();
    let key = Key::from(7);
    let sub = runtime::block_on(client.subscribe_raw("events", std::slice::from_ref(&key), Scope::Branch, None)).unwrap();
    runtime::block_on(owner.publish_raw("events", std::slice::from_ref(&key), b"1".to_vec().into_boxed_slice())).unwrap();
    let lock = owner.lock_raw("summaries", Kind::Lock).unwrap();
    let terms = Terms { ttl: None, max_hold: Some(std::time::Duration::from_secs(60)) };
    let lease = runtime::block_on(lock.acquire(key.clone(), Holder::unique(), terms, std::time::Duration::from_secs(1))).unwrap();
    assert!(common::eventually(2000, || owner.status().unwrap().branches.iter().any(|b| b.subscribers == 1)));

    let v = owner.status_json().unwrap();
    let mut seen = BTreeSet::new();
    matches("status", &SHAPE[0], &v, &mut seen);
    let all: BTreeSet<&str> = SHAPE.iter().map(|o| o.name).collect();
    assert_eq!(seen, all, "every object of SHAPE is reached from the first");
    drop((lease, sub));
}
