//! Module cycles at every depth: two sibling modules (children of the same module, at any depth) that
//! each use the other, directly or through other siblings. The layering test sees only each crate's
//! top-level modules; this one sees `service::a` ↔ `service::b` and `api::graphql::x` ↔ `…::y` too.
//! Test code (`#[cfg(test)]` onwards, `tests.rs`, `*_tests.rs`) is left out: tests may reach anywhere.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::Path,
};

use super::{LAYERS, code_chars, root, rust_files};

/// A module's path inside its crate (`[]` is the crate root).
type ModPath = Vec<String>;

/// Cycles tolerated for now, each to be broken (each
/// `crate dir: parent: members`). A new cycle, or a change in one of these, fails the test.
const KNOWN_CYCLES: &[&str] = &[];

/// The module a source file defines, from its path under `src`.
fn module_of(src: &Path, file: &Path) -> ModPath {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: ModPath = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().to_string())
        .collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib" | "main")) {
        parts.pop();
    }
    parts
}

/// The file's code without comments, string literals and anything from the first `#[cfg(test)]` on.
fn production_code(text: &str) -> String {
    let end = text.find("#[cfg(test)]").unwrap_or(text.len());
    text[..end]
        .lines()
        .map(|l| code_chars(l).into_iter().collect::<String>())
        .collect::<Vec<_>>()
        .join("\n")
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The paths written at `chars[*at..]` (`a::{b, c::d as e}` gives `a::b` and `a::c::d`).
fn parse_paths(chars: &[char], at: &mut usize, mut prefix: ModPath, out: &mut Vec<ModPath>) {
    let skip_ws = |at: &mut usize| {
        while chars.get(*at).is_some_and(|c| c.is_whitespace()) {
            *at += 1;
        }
    };
    loop {
        skip_ws(at);
        if chars.get(*at) == Some(&'{') {
            *at += 1;
            loop {
                skip_ws(at);
                if chars.get(*at) == Some(&'}') {
                    *at += 1;
                    return;
                }
                parse_paths(chars, at, prefix.clone(), out);
                skip_ws(at);
                match chars.get(*at) {
                    Some(',') => *at += 1,
                    Some('}') => {
                        *at += 1;
                        return;
                    }
                    _ => return,
                }
            }
        }
        let start = *at;
        while chars.get(*at).is_some_and(|c| is_ident(*c)) {
            *at += 1;
        }
        if start == *at {
            out.push(prefix);
            return;
        }
        prefix.push(chars[start..*at].iter().collect());
        if chars.get(*at) == Some(&':') && chars.get(*at + 1) == Some(&':') {
            *at += 2;
            continue;
        }
        skip_ws(at);
        if chars[*at..].starts_with(&['a', 's', ' ']) {
            *at += 3;
            skip_ws(at);
            while chars.get(*at).is_some_and(|c| is_ident(*c)) {
                *at += 1;
            }
        }
        out.push(prefix);
        return;
    }
}

/// Every `crate::…`, `super::…` and `self::…` path in `code`, made absolute from module `me`.
fn references(code: &str, me: &ModPath) -> Vec<ModPath> {
    let chars: Vec<char> = code.chars().collect();
    let prefixes: Vec<Vec<char>> = ["crate::", "super::", "self::"]
        .iter()
        .map(|p| p.chars().collect())
        .collect();
    let mut out = Vec::new();
    for at in 0..chars.len() {
        let before = at.checked_sub(1).map(|b| chars[b]);
        if before.is_some_and(|c| is_ident(c) || c == ':') {
            continue;
        }
        if !prefixes.iter().any(|p| chars[at..].starts_with(p)) {
            continue;
        }
        let mut paths = Vec::new();
        parse_paths(&chars, &mut at.clone(), Vec::new(), &mut paths);
        for path in paths {
            out.push(absolute(&path, me));
        }
    }
    out
}

/// `path` (starting with `crate`, `super` or `self`) as a path from the crate root.
fn absolute(path: &[String], me: &ModPath) -> ModPath {
    let mut base = me.clone();
    let mut rest = path;
    match rest.first().map(String::as_str) {
        Some("crate") => {
            base.clear();
            rest = &rest[1..];
        }
        Some("self") => rest = &rest[1..],
        _ => {}
    }
    while rest.first().map(String::as_str) == Some("super") {
        base.pop();
        rest = &rest[1..];
    }
    base.extend(rest.iter().filter(|s| *s != "self").cloned());
    base
}

/// The longest prefix of `path` that is a module of the crate.
fn owning_module(path: &ModPath, modules: &BTreeSet<ModPath>) -> ModPath {
    (0..=path.len())
        .rev()
        .map(|n| path[..n].to_vec())
        .find(|p| modules.contains(p))
        .unwrap_or_default()
}

/// Edges between siblings: `parent` → (`child a` → `child b`) when something under `a` uses `b`.
pub type SiblingEdges = BTreeMap<ModPath, BTreeMap<String, BTreeSet<String>>>;

/// The sibling edges of a crate whose files are `(module, production code)`.
pub fn sibling_edges(files: &[(ModPath, String)]) -> SiblingEdges {
    let modules: BTreeSet<ModPath> = files.iter().map(|(m, _)| m.clone()).collect();
    let mut edges = SiblingEdges::new();
    for (me, code) in files {
        for target in references(code, me).iter().map(|r| owning_module(r, &modules)) {
            let common = me.iter().zip(&target).take_while(|(a, b)| a == b).count();
            if common < me.len() && common < target.len() {
                edges
                    .entry(me[..common].to_vec())
                    .or_default()
                    .entry(me[common].clone())
                    .or_default()
                    .insert(target[common].clone());
            }
        }
    }
    edges
}

/// The sets of siblings that reach each other (strongly connected, more than one), each sorted.
pub fn cycles(edges: &SiblingEdges) -> Vec<(ModPath, Vec<String>)> {
    let mut out = Vec::new();
    for (parent, graph) in edges {
        let reach = |from: &String| {
            let (mut seen, mut todo) = (BTreeSet::new(), vec![from.clone()]);
            while let Some(next) = todo.pop() {
                for to in graph.get(&next).into_iter().flatten() {
                    if seen.insert(to.clone()) {
                        todo.push(to.clone());
                    }
                }
            }
            seen
        };
        let reaches: BTreeMap<&String, BTreeSet<String>> = graph.keys().map(|k| (k, reach(k))).collect();
        let mut done = BTreeSet::new();
        for (node, from_node) in &reaches {
            if done.contains(*node) || !from_node.contains(*node) {
                continue;
            }
            let members: Vec<String> = from_node
                .iter()
                .filter(|m| reaches.get(m).is_some_and(|r| r.contains(*node)))
                .cloned()
                .collect();
            done.extend(members.iter().cloned());
            out.push((parent.clone(), members));
        }
    }
    out
}

/// A crate's production files as `(module, code)`.
fn crate_files(src: &Path) -> Vec<(ModPath, String)> {
    rust_files(src)
        .into_iter()
        .filter(|f| {
            let name = f.file_name().unwrap().to_string_lossy();
            name != "tests.rs" && !name.ends_with("_tests.rs")
        })
        .map(|f| {
            let code = production_code(&std::fs::read_to_string(&f).unwrap());
            (module_of(src, &f), code)
        })
        .collect()
}

#[test]
fn no_two_sibling_modules_use_each_other_at_any_depth() {
    let mut found = Vec::new();
    for (src, _) in LAYERS {
        let files = crate_files(&root().join(src));
        for (parent, members) in cycles(&sibling_edges(&files)) {
            let parent = if parent.is_empty() {
                "crate".to_string()
            } else {
                parent.join("::")
            };
            found.push(format!("{src}: {parent}: {}", members.join(", ")));
        }
    }
    let known: Vec<String> = KNOWN_CYCLES.iter().map(|s| s.to_string()).collect();
    assert_eq!(
        found, known,
        "module cycles (siblings that use each other); break a new one, do not list it"
    );
}

#[test]
fn the_cycle_check_finds_a_cycle_three_levels_down_and_nothing_else() {
    let file = |path: &str, code: &str| {
        let module: ModPath = path
            .split("::")
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect();
        (module, production_code(code))
    };
    let files = vec![
        file("", "mod api; mod service;"),
        file("api", "use crate::service::{run, tenants::Tenant};"),
        file("service", "pub use self::tenants::Tenant;"),
        file("service::tenants", "use super::{quota::{Limit as L}, Error};"),
        file(
            "service::quota",
            "// crate::service::tenants in a comment\nfn f() -> &'static str { \"crate::service::tenants\" }",
        ),
        file("service::quota::deep", "pub mod a; pub mod b;"),
        file("service::quota::deep::a", "use super::b::*;"),
        file(
            "service::quota::deep::b",
            "fn g() { super::a::h(); }\n#[cfg(test)]\nmod t { use crate::api; }",
        ),
    ];
    let edges = sibling_edges(&files);
    assert_eq!(
        cycles(&edges),
        vec![(
            vec!["service".to_string(), "quota".into(), "deep".into()],
            vec!["a".to_string(), "b".into()]
        )],
        "{edges:?}"
    );
    // `tenants` uses `quota`; when something under `quota` uses `tenants`, that is a cycle one level up.
    let mut with_back_edge = files.clone();
    with_back_edge[5] = file("service::quota::deep", "use crate::service::tenants::x;");
    assert_eq!(cycles(&sibling_edges(&with_back_edge)).len(), 2);
}
