//! The module layout of `crates/strait/src` keeps its dependencies one way (issue 29 item 1;
//! the layout and the rule are in `src/lib.rs`).
//!
//! Reads every `crate::`, `super::` and `self::` path of the library's source (test code left
//! out: a test may reach anything) and checks two rules:
//! * **Files:** no module imports one that imports it back, directly or around a longer loop.
//!   Edges between a module and its own ancestors are the module tree itself (a parent declares
//!   its children, a child reads its parent's items) and do not count.
//! * **Concerns:** the top-level modules (`config`, `import`, `observe`, `failover`, `run`, ...)
//!   form no loop either, so a concern never reaches back into one built on top of it.
//!
//! A small scanner rather than `cargo modules`: no extra tool to install, and it runs in
//! milliseconds with the other offline tests.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Module path (`run::mirror`; `""` is the crate root) -> the modules it imports.
type Graph = BTreeMap<String, BTreeSet<String>>;

#[test]
fn no_module_imports_one_that_imports_it_back() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = graph(&library_sources(&src));
    assert!(
        graph.len() > 30,
        "found only {} modules under {}",
        graph.len(),
        src.display()
    );
    let loops = loops(&graph);
    assert!(
        loops.is_empty(),
        "modules of crates/strait import each other (move the shared type down into the module \
         that owns the concept):\n{}",
        loops.join("\n")
    );
}

#[test]
fn no_concern_imports_one_that_imports_it_back() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let concerns = concerns(&graph(&library_sources(&src)));
    assert!(
        concerns.contains_key("run") && concerns.contains_key("observe"),
        "{concerns:?}"
    );
    let loops = loops(&concerns);
    assert!(
        loops.is_empty(),
        "concerns of crates/strait import each other (see the layout in src/lib.rs):\n{}",
        loops.join("\n")
    );
}

/// The checker itself finds loops, direct and longer, through every path form.
#[test]
fn the_checker_finds_a_loop_in_any_form() {
    let sources = |a: &str, b: &str| {
        vec![
            (String::new(), "pub mod x;\npub mod y;".to_string()),
            ("x".into(), String::new()),
            ("x::a".into(), a.to_string()),
            ("x::b".into(), b.to_string()),
            ("y".into(), String::new()),
        ]
    };
    let looped = |a: &str, b: &str| !loops(&graph(&sources(a, b))).is_empty();
    assert!(looped("use super::b::B;", "use crate::x::a::A;"));
    assert!(looped(
        "use crate::{x::b::{self, B}, y};",
        "fn f() { crate::x::a::f() }"
    ));
    assert!(looped(
        "use crate::x::b::B;",
        "#[cfg(test)]\nmod tests { use crate::y; }\nuse super::super::x::a;"
    ));
    // Imports from test code, comments and strings do not count.
    assert!(!looped(
        "use crate::x::b::B;",
        "// crate::x::a\nconst S: &str = \"crate::x::a\";\n#[cfg(test)]\nmod tests {\n    \
         use crate::x::a;\n    const T: char = '{';\n}"
    ));
    // A parent and its child are one branch of the tree.
    assert!(
        loops(&graph(&[
            (String::new(), "pub mod x;".to_string()),
            ("x".into(), "use self::a::A;".into()),
            ("x::a".into(), "use super::X;".into()),
        ]))
        .is_empty()
    );
    // A longer loop across concerns.
    let mut three = sources("use crate::y::Y;", "use crate::x::a::A;");
    three[4].1 = "use crate::x::b::B;".into();
    assert!(!loops(&graph(&three)).is_empty());
}

/// Every library source file under `src` (not the binary's `main.rs`) as (module path, text).
fn library_sources(src: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            let rel = path
                .strip_prefix(src)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            let Some(rel) = rel.strip_suffix(".rs") else {
                continue;
            };
            if rel == "main" {
                continue;
            }
            let module = match rel {
                "lib" => String::new(),
                _ => rel
                    .strip_suffix("/mod")
                    .unwrap_or(rel)
                    .replace(std::path::MAIN_SEPARATOR, "::"),
            };
            out.push((module, std::fs::read_to_string(&path).unwrap()));
        }
    }
    out
}

/// The import graph of `sources`; modules declared under `#[cfg(test)]` are left out.
fn graph(sources: &[(String, String)]) -> Graph {
    let mut code = BTreeMap::new();
    let mut test_modules = BTreeSet::new();
    for (module, text) in sources {
        let (kept, tests) = without_tests(text);
        for t in tests {
            test_modules.insert(join(module, &t));
        }
        code.insert(module.clone(), kept);
    }
    let is_test = |m: &str| {
        test_modules
            .iter()
            .any(|t| m == t || m.starts_with(&format!("{t}::")))
    };
    let known: BTreeSet<String> = code.keys().filter(|m| !is_test(m)).cloned().collect();
    let mut graph = Graph::new();
    for (module, text) in &code {
        if is_test(module) {
            continue;
        }
        let mut deps = BTreeSet::new();
        for path in paths(text) {
            let Some(absolute) = absolute(module, &path) else {
                continue;
            };
            let Some(target) = longest_module(&known, &absolute) else {
                continue;
            };
            if !related(module, &target) {
                deps.insert(target);
            }
        }
        graph.insert(module.clone(), deps);
    }
    graph
}

/// The graph between top-level modules (concerns).
fn concerns(graph: &Graph) -> Graph {
    let top = |m: &str| m.split("::").next().unwrap_or_default().to_string();
    let mut out = Graph::new();
    for (module, deps) in graph {
        if module.is_empty() {
            continue;
        }
        let from = top(module);
        let entry = out.entry(from.clone()).or_default();
        for d in deps {
            let to = top(d);
            if to != from && !to.is_empty() {
                entry.insert(to);
            }
        }
    }
    out
}

fn join(parent: &str, child: &str) -> String {
    match parent {
        "" => child.to_string(),
        _ => format!("{parent}::{child}"),
    }
}

/// True when one of the two modules contains the other.
fn related(a: &str, b: &str) -> bool {
    let within = |inner: &str, outer: &str| {
        outer.is_empty() || inner == outer || inner.starts_with(&format!("{outer}::"))
    };
    within(a, b) || within(b, a)
}

/// `path` (its first segment `crate`, `super` or `self`) from the crate root, as segments.
fn absolute(module: &str, path: &[String]) -> Option<Vec<String>> {
    let mut base: Vec<String> = match module {
        "" => Vec::new(),
        m => m.split("::").map(String::from).collect(),
    };
    let mut rest = path;
    match rest.first()?.as_str() {
        "crate" => {
            base.clear();
            rest = &rest[1..];
        }
        "self" => rest = &rest[1..],
        "super" => {
            while rest.first().map(String::as_str) == Some("super") {
                base.pop()?;
                rest = &rest[1..];
            }
        }
        _ => return None,
    }
    base.extend(rest.iter().filter(|s| s.as_str() != "self").cloned());
    Some(base)
}

/// The longest prefix of `path` that names a module of the crate.
fn longest_module(known: &BTreeSet<String>, path: &[String]) -> Option<String> {
    (1..=path.len())
        .rev()
        .map(|n| path[..n].join("::"))
        .find(|m| known.contains(m))
}

/// Every path starting with `crate::`, `super::` or `self::` in `code`, with `use` groups
/// (`crate::{a::B, c::{self, D}}`) expanded.
fn paths(code: &str) -> Vec<Vec<String>> {
    let chars: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let starts_word = i == 0 || !is_ident(chars[i - 1]) && chars[i - 1] != ':';
        if starts_word && is_ident(chars[i]) {
            let word = ident(&chars, i);
            if matches!(word.as_str(), "crate" | "super" | "self")
                && chars.get(i + word.len()) == Some(&':')
            {
                i = path_tree(&chars, i, Vec::new(), &mut out);
                continue;
            }
            i += word.len();
            continue;
        }
        i += 1;
    }
    out
}

/// Reads one path tree starting at `i` under `prefix` into `out`; returns the index after it.
fn path_tree(
    chars: &[char],
    mut i: usize,
    mut prefix: Vec<String>,
    out: &mut Vec<Vec<String>>,
) -> usize {
    loop {
        i = skip_space(chars, i);
        match chars.get(i) {
            Some('{') => {
                i += 1;
                loop {
                    i = skip_space(chars, i);
                    match chars.get(i) {
                        Some('}') => return i + 1,
                        Some(',') => i += 1,
                        None => return i,
                        _ => {
                            let before = i;
                            i = path_tree(chars, i, prefix.clone(), out);
                            if i == before {
                                i += 1;
                            }
                        }
                    }
                }
            }
            Some(&c) if is_ident(c) => {
                let word = ident(chars, i);
                i += word.len();
                prefix.push(word);
                let next = skip_space(chars, i);
                if chars.get(next) == Some(&':') && chars.get(next + 1) == Some(&':') {
                    i = next + 2;
                    continue;
                }
                out.push(prefix);
                return i;
            }
            _ => {
                if !prefix.is_empty() {
                    out.push(prefix);
                }
                return i;
            }
        }
    }
}

fn skip_space(chars: &[char], mut i: usize) -> usize {
    while chars.get(i).is_some_and(|c| c.is_whitespace()) {
        i += 1;
    }
    i
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

fn ident(chars: &[char], i: usize) -> String {
    chars[i..].iter().take_while(|c| is_ident(**c)).collect()
}

/// `text` without comments, string and char literals and `#[cfg(test)]` items, and the names
/// of the modules declared under `#[cfg(test)]` in other files (`#[cfg(test)] mod tests;`).
fn without_tests(text: &str) -> (String, Vec<String>) {
    let code = strip_literals(text);
    let mut kept = String::with_capacity(code.len());
    let mut test_modules = Vec::new();
    let mut rest = code.as_str();
    while let Some(at) = rest.find("#[cfg(test)]") {
        kept.push_str(&rest[..at]);
        let item = &rest[at + "#[cfg(test)]".len()..];
        let brace = item.find('{');
        let semi = item.find(';');
        match (brace, semi) {
            (Some(b), s) if s.is_none_or(|s| b < s) => {
                let mut depth = 0usize;
                let mut end = item.len();
                for (k, c) in item[b..].char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = b + k + 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                rest = &item[end..];
            }
            (_, Some(s)) => {
                let words: Vec<&str> = item[..s].split_whitespace().collect();
                if let Some(p) = words.iter().position(|w| *w == "mod")
                    && let Some(name) = words.get(p + 1)
                {
                    test_modules.push(name.to_string());
                }
                rest = &item[s + 1..];
            }
            _ => rest = "",
        }
    }
    kept.push_str(rest);
    (kept, test_modules)
}

/// `text` with comments, strings and char literals blanked out (so braces and paths in them
/// neither count nor unbalance the test-item skipping).
fn strip_literals(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            i += 2;
            while i < chars.len() && !(chars[i] == '*' && chars.get(i + 1) == Some(&'/')) {
                i += 1;
            }
            i += 2;
            out.push(' ');
        } else if c == 'r'
            && (next == Some('"') || next == Some('#'))
            && (i == 0 || !is_ident(chars[i - 1]))
        {
            // Raw string r"..." or r#"..."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                match chars.get(j) {
                    None => break,
                    Some('"') if (1..=hashes).all(|h| chars.get(j + h) == Some(&'#')) => {
                        j += 1 + hashes;
                        break;
                    }
                    _ => j += 1,
                }
            }
            out.push_str("\"\"");
            i = j;
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == '\'' {
            // A char literal ('x', '\n', '\u{..}') or a lifetime ('a).
            let close = if next == Some('\\') {
                chars[i + 2..]
                    .iter()
                    .position(|&c| c == '\'')
                    .map(|p| i + 2 + p)
            } else if chars.get(i + 2) == Some(&'\'') {
                Some(i + 2)
            } else {
                None
            };
            match close {
                Some(end) => {
                    out.push_str("' '");
                    i = end + 1;
                }
                None => {
                    out.push(c);
                    i += 1;
                }
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// Every loop in `graph`, as `a -> b -> a` (strongly connected components of two or more).
fn loops(graph: &Graph) -> Vec<String> {
    let nodes: Vec<&String> = graph.keys().collect();
    let index: BTreeMap<&String, usize> = nodes.iter().enumerate().map(|(i, n)| (*n, i)).collect();
    let edges: Vec<Vec<usize>> = nodes
        .iter()
        .map(|n| {
            graph[*n]
                .iter()
                .filter_map(|d| index.get(d).copied())
                .collect()
        })
        .collect();
    // Reachability by depth-first search from each node (the graph has a few dozen nodes).
    let reach = |from: usize| {
        let mut seen = vec![false; nodes.len()];
        let mut stack = vec![from];
        while let Some(n) = stack.pop() {
            for &d in &edges[n] {
                if !seen[d] {
                    seen[d] = true;
                    stack.push(d);
                }
            }
        }
        seen
    };
    let reachable: Vec<Vec<bool>> = (0..nodes.len()).map(reach).collect();
    let mut reported = vec![false; nodes.len()];
    let mut out = Vec::new();
    for a in 0..nodes.len() {
        if reported[a] || !reachable[a][a] {
            continue;
        }
        let members: Vec<usize> = (0..nodes.len())
            .filter(|&b| reachable[a][b] && reachable[b][a])
            .collect();
        let mut lines = Vec::new();
        for &m in &members {
            reported[m] = true;
            for &d in &edges[m] {
                if members.contains(&d) {
                    lines.push(format!("  {} -> {}", name(nodes[m]), name(nodes[d])));
                }
            }
        }
        out.push(format!(
            "loop among {}:\n{}",
            members
                .iter()
                .map(|&m| name(nodes[m]))
                .collect::<Vec<_>>()
                .join(", "),
            lines.join("\n")
        ));
    }
    out
}

fn name(module: &str) -> &str {
    match module {
        "" => "crate",
        m => m,
    }
}
