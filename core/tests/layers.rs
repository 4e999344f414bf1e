//! The layers of core/src import downward only (docs/architecture.md):
//! base < runtime < engine < net < api, with lib.rs and bin/ above all.
//! Reads every file under core/src, maps it to its layer by folder, and
//! fails on a `crate::` or `super::` path that names a higher layer, or a
//! re-export of lib.rs (`crate::Store`, `crate::channels`, ...) used below
//! it. Also fails on an import circle among the modules of base, runtime,
//! engine and net. Comments are not read.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const LAYERS: [&str; 5] = ["base", "runtime", "engine", "net", "api"];
/// lib.rs and bin/: above every layer.
const TOP: usize = LAYERS.len();

fn layer_of(name: &str) -> usize {
    LAYERS.iter().position(|l| *l == name).unwrap_or(TOP)
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("core/src is readable") {
        let p = e.expect("a directory entry").path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The module path of a file under core/src: `net/client/lease.rs` is
/// `[net, client, lease]`, `engine/mod.rs` is `[engine]`, lib.rs is `[]`.
fn module_of(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel.iter().map(|c| c.to_string_lossy().into_owned()).collect();
    let file = parts.pop().expect("a file name");
    let stem = file.trim_end_matches(".rs");
    if stem != "mod" && stem != "lib" {
        parts.push(stem.to_owned());
    }
    parts
}

/// Code without comments: `//` to the end of the line, outside strings.
fn code_of(line: &str) -> String {
    let mut out = String::new();
    let mut in_str = false;
    let mut prev = ' ';
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '"' && prev != '\\' {
            in_str = !in_str;
        }
        if !in_str && c == '/' && chars.peek() == Some(&'/') {
            break;
        }
        out.push(c);
        prev = c;
    }
    out
}

fn ident_at(s: &str) -> String {
    s.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect()
}

/// The paths a line names from the crate root: `crate::net::wire::X` gives
/// `[net, wire, X]`; `crate::{base, net::wire}` gives both; `super::` is
/// resolved against `module` (a file's module, or a `mod tests` in it).
fn crate_paths(code: &str, module: &[String]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    let mut i = 0;
    while i < code.len() {
        let rest = &code[i..];
        let boundary = i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_' || bytes[i - 1] == b'$');
        let (base, skip): (Vec<String>, usize) = if boundary && rest.starts_with("crate::") {
            (Vec::new(), "crate::".len())
        } else if boundary && rest.starts_with("super::") {
            let mut m = module.to_vec();
            let mut k = 0;
            while code[i + k..].starts_with("super::") {
                m.pop();
                k += "super::".len();
            }
            (m, k)
        } else {
            i += rest.chars().next().map_or(1, char::len_utf8);
            continue;
        };
        out.extend(expand(base, &rest[skip..]));
        i += skip;
    }
    out
}

/// The paths of `s` (after a `crate::`) below `prefix`: `a::b::X`, or
/// `a::{b::X, c}` with its groups expanded.
fn expand(prefix: Vec<String>, s: &str) -> Vec<Vec<String>> {
    let mut p = prefix;
    let mut s = s.trim_start();
    loop {
        if let Some(group) = s.strip_prefix('{') {
            let mut depth = 1;
            let mut end = group.len();
            let mut starts = vec![0];
            for (k, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            end = k;
                            break;
                        }
                    }
                    ',' if depth == 1 => starts.push(k + 1),
                    _ => {}
                }
            }
            let inner = &group[..end];
            let mut out = Vec::new();
            for (n, st) in starts.iter().enumerate() {
                let stop = starts.get(n + 1).map_or(inner.len(), |x| x - 1);
                let entry = inner[*st..stop].trim();
                if !entry.is_empty() {
                    out.extend(expand(p.clone(), entry));
                }
            }
            return out;
        }
        let id = ident_at(s);
        if id.is_empty() {
            return vec![p];
        }
        s = &s[id.len()..];
        p.push(id);
        match s.strip_prefix("::") {
            Some(r) => s = r,
            None => return vec![p],
        }
    }
}

struct Use {
    file: String,
    line: usize,
    text: String,
    path: Vec<String>,
}

fn uses() -> (Vec<Use>, BTreeSet<Vec<String>>) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mut modules = BTreeSet::new();
    let mut out = Vec::new();
    for f in &files {
        let rel = f.strip_prefix(&src).expect("under core/src");
        let module = module_of(rel);
        modules.insert(module.clone());
        let text = std::fs::read_to_string(f).expect("a source file is UTF-8");
        for (n, line) in text.lines().enumerate() {
            let code = code_of(line);
            // `use super::*` in a `mod tests` names the file's own module.
            let here = if code.trim_start().starts_with("use super::*") { [module.clone(), vec!["tests".into()]].concat() } else { module.clone() };
            for path in crate_paths(&code, &here) {
                out.push(Use { file: format!("core/src/{}", rel.display()), line: n + 1, text: line.trim().to_owned(), path });
            }
        }
    }
    (out, modules)
}

fn file_layer(file: &str) -> usize {
    let rel = file.trim_start_matches("core/src/");
    match rel.split('/').next() {
        Some(first) if rel.contains('/') => layer_of(first),
        _ => TOP, // lib.rs
    }
}

fn path_layer(path: &[String]) -> usize {
    path.first().map_or(TOP, |p| layer_of(p))
}

/// Offending lines, as `file:line: text (names LAYER from LAYER)`.
fn upward(uses: &[Use]) -> Vec<String> {
    let name = |l: usize| if l == TOP { "lib.rs" } else { LAYERS[l] };
    uses.iter()
        .filter(|u| path_layer(&u.path) > file_layer(&u.file))
        .map(|u| {
            format!(
                "{}:{}: {}  (a module of {} names {}: `{}`)",
                u.file,
                u.line,
                u.text,
                name(file_layer(&u.file)),
                name(path_layer(&u.path)),
                u.path.join("::")
            )
        })
        .collect()
}

#[test]
fn no_module_imports_a_higher_layer() {
    let (uses, _) = uses();
    assert!(uses.len() > 100, "the scan found the crate's imports ({} found)", uses.len());
    let bad = upward(&uses);
    assert!(bad.is_empty(), "imports of a higher layer (order: base < runtime < engine < net < api < lib.rs):\n{}", bad.join("\n"));
}

#[test]
fn the_scan_sees_an_upward_import_and_names_its_file_and_line() {
    let module = vec!["engine".to_owned(), "locks".to_owned()];
    let paths = crate_paths(&code_of("use crate::api::store::{Store, Publish}; // a comment: crate::net"), &module);
    assert_eq!(paths, vec![vec!["api", "store", "Store"], vec!["api", "store", "Publish"]]);
    let bad = upward(&[Use { file: "core/src/engine/locks/mod.rs".into(), line: 7, text: "use crate::api::store::Store;".into(), path: paths[0].clone() }]);
    assert_eq!(bad.len(), 1);
    assert!(bad[0].starts_with("core/src/engine/locks/mod.rs:7: "), "{}", bad[0]);
    assert_eq!(crate_paths("use super::super::net::wire;", &module), vec![vec!["net", "wire"]]);
    assert_eq!(crate_paths("use crate::{base::key::Key, runtime};", &module), vec![vec!["base", "key", "Key"], vec!["runtime"]]);
    assert_eq!(path_layer(&["Store".to_owned()]), TOP, "a root re-export counts as lib.rs");
}

/// The module a path lands in: its longest prefix that is a module.
fn target_module(path: &[String], modules: &BTreeSet<Vec<String>>) -> Vec<String> {
    (0..=path.len()).rev().map(|n| path[..n].to_vec()).find(|p| modules.contains(p)).unwrap_or_default()
}

#[test]
fn no_import_circle_below_the_api() {
    let (uses, modules) = uses();
    // Module -> modules it imports from, leaving out a parent's edges to its
    // own children (it declares them) and each module's edges to itself.
    let mut edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    let src_module = |file: &str| module_of(Path::new(file.trim_start_matches("core/src/")));
    for u in &uses {
        let from = src_module(&u.file);
        if path_layer(&from) >= layer_of("api") {
            continue;
        }
        let to = target_module(&u.path, &modules);
        if to == from || to.starts_with(&from) || to.is_empty() {
            continue;
        }
        edges.entry(from).or_default().insert(to);
    }
    // Depth-first search for a back edge.
    fn visit(
        m: &Vec<String>,
        edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        state: &mut BTreeMap<Vec<String>, u8>,
        stack: &mut Vec<Vec<String>>,
    ) -> Option<Vec<Vec<String>>> {
        match state.get(m) {
            Some(2) => return None,
            Some(1) => {
                let at = stack.iter().position(|s| s == m).expect("on the stack");
                let mut circle = stack[at..].to_vec();
                circle.push(m.clone());
                return Some(circle);
            }
            _ => {}
        }
        state.insert(m.clone(), 1);
        stack.push(m.clone());
        for next in edges.get(m).into_iter().flatten() {
            if let Some(c) = visit(next, edges, state, stack) {
                return Some(c);
            }
        }
        stack.pop();
        state.insert(m.clone(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for m in edges.keys() {
        if let Some(circle) = visit(m, &edges, &mut state, &mut Vec::new()) {
            let names: Vec<String> = circle.iter().map(|m| m.join("::")).collect();
            panic!("an import circle: {}", names.join(" -> "));
        }
    }
}
