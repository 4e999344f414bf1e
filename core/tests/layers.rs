//! The layers of core/src import downward only (docs/architecture.md):
//! base < runtime < engine < net < api, with lib.rs and bin/ above all.
//! Reads every file under core/src, maps it to its layer by folder, and
//! fails on a `crate::` or `super::` path that names a higher layer, or a
//! re-export of lib.rs (`crate::Store`, `crate::channels`, ...) used below
//! it. Also fails on an import circle among the modules of any layer (api
//! included), naming each import line of the circle. Comments are not read.

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

type Module = Vec<String>;
/// Module -> the modules it imports from, each with the lines that do.
type Graph = BTreeMap<Module, BTreeMap<Module, Vec<String>>>;

/// The import graph of core/src, leaving out a parent's edges to its own
/// children (it declares them), each module's edges to itself, and lib.rs's
/// root re-exports (refused below lib.rs by the upward check).
fn graph(uses: &[Use], modules: &BTreeSet<Module>) -> Graph {
    let mut g = Graph::new();
    for u in uses {
        let from = module_of(Path::new(u.file.trim_start_matches("core/src/")));
        let to = target_module(&u.path, modules);
        if to == from || to.starts_with(&from) || to.is_empty() {
            continue;
        }
        let lines = g.entry(from).or_default().entry(to).or_default();
        let line = format!("{}:{}: {}", u.file, u.line, u.text);
        if !lines.contains(&line) {
            lines.push(line);
        }
    }
    g
}

/// The import circles of `g`: each group of modules that reach each other
/// (a strongly connected component of two or more, by Tarjan's algorithm),
/// as a readable text naming the import lines inside the group.
fn circles(g: &Graph) -> Vec<String> {
    struct Walk<'g> {
        g: &'g Graph,
        index: BTreeMap<&'g Module, usize>,
        low: BTreeMap<&'g Module, usize>,
        stack: Vec<&'g Module>,
        on_stack: BTreeSet<&'g Module>,
        groups: Vec<Vec<&'g Module>>,
    }
    impl<'g> Walk<'g> {
        fn visit(&mut self, m: &'g Module) {
            let n = self.index.len();
            self.index.insert(m, n);
            self.low.insert(m, n);
            self.stack.push(m);
            self.on_stack.insert(m);
            for next in self.g.get(m).into_iter().flat_map(|e| e.keys()) {
                if !self.index.contains_key(next) {
                    self.visit(next);
                    let l = self.low[next].min(self.low[m]);
                    self.low.insert(m, l);
                } else if self.on_stack.contains(next) {
                    let l = self.index[next].min(self.low[m]);
                    self.low.insert(m, l);
                }
            }
            if self.low[m] == self.index[m] {
                let mut group = Vec::new();
                loop {
                    let top = self.stack.pop().expect("m is on the stack");
                    self.on_stack.remove(top);
                    group.push(top);
                    if top == m {
                        break;
                    }
                }
                if group.len() > 1 {
                    group.sort();
                    self.groups.push(group);
                }
            }
        }
    }
    let mut w = Walk { g, index: BTreeMap::new(), low: BTreeMap::new(), stack: Vec::new(), on_stack: BTreeSet::new(), groups: Vec::new() };
    for m in g.keys() {
        if !w.index.contains_key(m) {
            w.visit(m);
        }
    }
    let name = |m: &Module| m.join("::");
    w.groups
        .iter()
        .map(|group| {
            let mut text = format!("a circle of {}:", group.iter().map(|m| name(m)).collect::<Vec<_>>().join(", "));
            for from in group {
                for (to, lines) in g.get(*from).into_iter().flatten().filter(|(to, _)| group.contains(to)) {
                    text += &format!("\n  {} -> {}:", name(from), name(to));
                    for l in lines {
                        text += &format!("\n    {l}");
                    }
                }
            }
            text
        })
        .collect()
}

#[test]
fn no_import_circle_inside_a_layer() {
    let (uses, modules) = uses();
    let g = graph(&uses, &modules);
    assert!(g.keys().any(|m| m.first().is_some_and(|l| l == "api")), "the scan found the api's imports");
    let found = circles(&g);
    assert!(
        found.is_empty(),
        "{} import circle(s) among the modules of core/src; a module's imports must form no circle (docs/architecture.md):\n{}",
        found.len(),
        found.join("\n")
    );
}

#[test]
fn the_circle_check_sees_a_circle_and_its_import_lines() {
    let m = |s: &str| s.split("::").map(str::to_owned).collect::<Module>();
    let modules: BTreeSet<Module> = ["api", "api::store", "api::channels", "api::lease", "api::backend", "api::backend::owned"].iter().map(|s| m(s)).collect();
    let at = |file: &str, line: usize, text: &str| {
        let module = module_of(Path::new(file.trim_start_matches("core/src/")));
        crate_paths(&code_of(text), &module).into_iter().map(move |path| Use { file: file.into(), line, text: text.into(), path }).collect::<Vec<_>>()
    };
    let mut uses = Vec::new();
    uses.extend(at("core/src/api/store.rs", 3, "use crate::api::channels::ChannelBuilder;"));
    uses.extend(at("core/src/api/channels.rs", 9, "use crate::api::store::Store;"));
    uses.extend(at("core/src/api/lease.rs", 4, "use crate::api::backend::LeaseBackend;"));
    // A child naming its parent (`super::`) and the parent declaring it is no circle.
    uses.extend(at("core/src/api/backend/owned.rs", 5, "use super::{Backend, Done};"));
    let g = graph(&uses, &modules);
    assert_eq!(g[&m("api::backend::owned")].keys().collect::<Vec<_>>(), vec![&m("api::backend")]);
    let found = circles(&g);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].starts_with("a circle of api::channels, api::store:"), "{}", found[0]);
    assert!(found[0].contains("core/src/api/store.rs:3: use crate::api::channels::ChannelBuilder;"), "{}", found[0]);
    assert!(found[0].contains("core/src/api/channels.rs:9: use crate::api::store::Store;"), "{}", found[0]);
    // Three modules in a ring are one circle.
    uses.extend(at("core/src/api/backend/mod.rs", 8, "use crate::api::lease::RawLease;"));
    uses.extend(at("core/src/api/backend/owned.rs", 6, "use crate::api::lease::RawLease;"));
    uses.extend(at("core/src/api/lease.rs", 5, "use crate::api::backend::owned::local;"));
    let found = circles(&graph(&uses, &modules));
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(found.iter().any(|c| c.starts_with("a circle of api::backend, api::backend::owned, api::lease:")), "{found:?}");
}
