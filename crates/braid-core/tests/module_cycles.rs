//! No import cycles between the top-level modules of a crate (issue 27 item 2).
//!
//! Reads a crate's `src/` files, builds the graph of references between its top-level
//! modules (`crate::x`, `super::x` that climbs to the crate root, and names the crate root
//! re-exports), and fails naming every cycle with the line that makes each of its edges.
//! Test-only code does not count: `#[cfg(test)]` items and files named `tests.rs` or
//! `*_tests.rs` may reach anywhere, since nothing in the crate depends on them.
//!
//! braid-core must have no cycle. The other workspace crates are checked too; the cycles
//! they have today are listed in `KNOWN` and must be removed from the list when fixed (a
//! listed cycle that no longer exists fails the test, so the list can only shrink).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Cycles that exist today in other crates, as (crate directory, modules of the cycle).
/// To be removed (issue 27 item 2); never add to this list.
const KNOWN: &[(&str, &[&str])] = &[
    (
        "braid-crypto",
        &["cookie", "guard", "handshake", "keys", "responder"],
    ),
    ("braid-net", &["agent", "server"]),
    ("braid-proxy", &["target", "wire"]),
    ("braid-results", &["plot", "plot_lines"]),
    (
        "braid-sim",
        &[
            "connlevel",
            "energy",
            "link",
            "probe",
            "report",
            "runner",
            "scenario",
            "sweep",
            "trace",
            "units",
            "wifi",
            "world",
        ],
    ),
    ("braid-testbed", &["faults", "runner"]),
];

/// An edge `from -> to` between top-level modules, with where it is made.
type Edges = BTreeMap<(String, String), String>;

/// Replaces comments, string and char literals with spaces, keeping line breaks.
fn strip(src: &str) -> String {
    let b: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < b.len() && b[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == '/' && b.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if b[i] == '*' && b.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(b[i]));
                    i += 1;
                }
            }
        } else if c == 'r'
            && (next == Some('"') || next == Some('#'))
            && (i == 0 || !(b[i - 1].is_alphanumeric() || b[i - 1] == '_'))
        {
            let mut j = i + 1;
            while b.get(j) == Some(&'#') {
                j += 1;
            }
            if b.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            let hashes = j - i - 1;
            let close: String = std::iter::once('"')
                .chain("#".repeat(hashes).chars())
                .collect();
            let close: Vec<char> = close.chars().collect();
            let mut k = j + 1;
            while k < b.len() && b[k..].iter().take(close.len()).ne(close.iter()) {
                k += 1;
            }
            let end = (k + close.len()).min(b.len());
            for &ch in &b[i..end] {
                out.push(blank(ch));
            }
            i = end;
        } else if c == '"' {
            out.push(' ');
            i += 1;
            while i < b.len() && b[i] != '"' {
                if b[i] == '\\' {
                    out.push(' ');
                    i += 1;
                }
                if i < b.len() {
                    out.push(blank(b[i]));
                    i += 1;
                }
            }
            out.push(' ');
            i += 1;
        } else if c == '\'' && (next == Some('\\') || b.get(i + 2) == Some(&'\'')) {
            // A char literal ('x' or '\n', '\u{..}'); a lifetime ('a) is left alone.
            out.push(' ');
            i += 1;
            if b.get(i) == Some(&'\\') {
                out.push_str("  ");
                i += 2;
            }
            while i < b.len() && b[i] != '\'' {
                out.push(' ');
                i += 1;
            }
            out.push(' ');
            i += 1;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// Blanks every `#[cfg(test)]` item (up to its `;` or its matching `}`), keeping line breaks.
fn drop_test_items(s: &str) -> String {
    let mut b: Vec<char> = s.chars().collect();
    let pat: Vec<char> = "#[cfg(test)]".chars().collect();
    let mut i = 0;
    while i + pat.len() <= b.len() {
        if b[i..i + pat.len()] != pat[..] {
            i += 1;
            continue;
        }
        let mut j = i + pat.len();
        while j < b.len() && b[j] != ';' && b[j] != '{' {
            j += 1;
        }
        if j < b.len() && b[j] == '{' {
            let mut depth = 0;
            while j < b.len() {
                match b[j] {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
        }
        let end = (j + 1).min(b.len());
        for ch in &mut b[i..end] {
            if *ch != '\n' {
                *ch = ' ';
            }
        }
        i = end;
    }
    b.into_iter().collect()
}

fn ident_at(s: &[char], mut i: usize) -> (String, usize) {
    while i < s.len() && s[i].is_whitespace() {
        i += 1;
    }
    let start = i;
    while i < s.len() && (s[i].is_alphanumeric() || s[i] == '_') {
        i += 1;
    }
    (s[start..i].iter().collect(), i)
}

/// The first identifier of each item in a `{a, b::c, d as e}` group starting at `s[i] == '{'`.
fn group_heads(s: &[char], i: usize) -> Vec<String> {
    let mut heads = Vec::new();
    let mut depth = 0;
    let mut at_item = true;
    let mut j = i;
    while j < s.len() {
        match s[j] {
            '{' => {
                depth += 1;
                if depth == 1 {
                    at_item = true;
                }
            }
            '}' => {
                depth -= 1;
                if depth == 0 {
                    break;
                }
            }
            ',' if depth == 1 => at_item = true,
            c if at_item && depth == 1 && (c.is_alphanumeric() || c == '_') => {
                let (id, end) = ident_at(s, j);
                heads.push(id);
                at_item = false;
                j = end;
                continue;
            }
            _ => {}
        }
        j += 1;
    }
    heads
}

/// The top-level modules that `code` (a file `depth` modules below the crate root) refers
/// to, each with the line of its first reference. `depth` is 1 for `src/x.rs` and
/// `src/x/mod.rs`, 2 for `src/x/y.rs`, and so on.
fn references(code: &str, depth: usize) -> Vec<(String, usize)> {
    let s: Vec<char> = code.chars().collect();
    let mut found = Vec::new();
    let line_of = |i: usize| 1 + s[..i].iter().filter(|&&c| c == '\n').count();
    let boundary =
        |i: usize| i == 0 || !(s[i - 1].is_alphanumeric() || s[i - 1] == '_' || s[i - 1] == '$');
    let starts = |i: usize, w: &str| s[i..].iter().take(w.len()).copied().eq(w.chars());
    let mut i = 0;
    while i < s.len() {
        if !boundary(i) {
            i += 1;
            continue;
        }
        let mut j = i;
        let rooted = if starts(i, "crate::") {
            j += "crate::".len();
            true
        } else if starts(i, "super::") {
            let mut ups = 0;
            while starts(j, "super::") {
                ups += 1;
                j += "super::".len();
            }
            ups >= depth
        } else {
            i += 1;
            continue;
        };
        if rooted {
            while j < s.len() && s[j].is_whitespace() {
                j += 1;
            }
            if s.get(j) == Some(&'{') {
                for h in group_heads(&s, j) {
                    found.push((h, line_of(i)));
                }
            } else {
                let (id, _) = ident_at(&s, j);
                found.push((id, line_of(i)));
            }
        }
        i = j.max(i + 1);
    }
    found
}

/// Modules declared in the root file, and the names the root re-exports (`pub use m::X`
/// and `pub use m::{X, Y}`) mapped to the module they come from.
fn root_names(root: &str) -> (BTreeSet<String>, BTreeMap<String, String>) {
    let code = drop_test_items(&strip(root));
    let mut mods = BTreeSet::new();
    let mut reexports = BTreeMap::new();
    for stmt in code.split(';') {
        let words: Vec<&str> = stmt.split_whitespace().collect();
        if let Some(p) = words.iter().position(|w| *w == "mod") {
            if let Some(name) = words.get(p + 1) {
                if !stmt.contains('{') {
                    mods.insert(name.to_string());
                }
            }
        }
        if let Some(p) = stmt.find("pub use ") {
            let path = stmt[p + "pub use ".len()..].trim();
            let path = path.strip_prefix("crate::").unwrap_or(path);
            let module: String = path
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            let rest = &path[module.len()..];
            let names: Vec<String> = rest
                .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                .filter(|w| !w.is_empty() && *w != "as" && *w != "self")
                .map(str::to_string)
                .collect();
            for n in names {
                reexports.insert(n, module.clone());
            }
        }
    }
    (mods, reexports)
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

fn is_test_file(p: &Path) -> bool {
    let stem = p.file_stem().and_then(|s| s.to_str()).unwrap_or("");
    stem == "tests" || stem.ends_with("_tests")
}

/// The edges between the top-level modules of the crate whose sources are in `src`.
fn module_graph(src: &Path) -> Edges {
    let root = ["lib.rs", "main.rs"]
        .iter()
        .map(|f| src.join(f))
        .find(|p| p.exists())
        .unwrap_or_else(|| panic!("{} has no lib.rs or main.rs", src.display()));
    let (mods, reexports) = root_names(&fs::read_to_string(&root).unwrap());
    let mut edges = Edges::new();
    for m in &mods {
        let mut files = Vec::new();
        let single = src.join(format!("{m}.rs"));
        if single.exists() {
            files.push(single);
        }
        rust_files(&src.join(m), &mut files);
        for f in files.into_iter().filter(|f| !is_test_file(f)) {
            let rel = f.strip_prefix(src).unwrap();
            let mut depth = rel.components().count();
            if rel.file_name().is_some_and(|n| n == "mod.rs") {
                depth -= 1;
            }
            let code = drop_test_items(&strip(&fs::read_to_string(&f).unwrap()));
            for (name, line) in references(&code, depth) {
                let to = if mods.contains(&name) {
                    name
                } else if let Some(m) = reexports.get(&name) {
                    m.clone()
                } else {
                    continue;
                };
                if &to != m && mods.contains(&to) {
                    edges
                        .entry((m.clone(), to))
                        .or_insert_with(|| format!("{}:{line}", rel.display()));
                }
            }
        }
    }
    edges
}

/// Strongly connected components with more than one module (Tarjan), each sorted.
fn cycles(edges: &Edges) -> Vec<Vec<String>> {
    let nodes: BTreeSet<&String> = edges.keys().flat_map(|(a, b)| [a, b]).collect();
    let nodes: Vec<&String> = nodes.into_iter().collect();
    let idx = |n: &String| nodes.iter().position(|m| *m == n).unwrap();
    let mut adj = vec![Vec::new(); nodes.len()];
    for (a, b) in edges.keys() {
        adj[idx(a)].push(idx(b));
    }
    struct T {
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        out: Vec<Vec<usize>>,
    }
    fn visit(v: usize, adj: &[Vec<usize>], t: &mut T) {
        t.index[v] = Some(t.next);
        t.low[v] = t.next;
        t.next += 1;
        t.stack.push(v);
        t.on[v] = true;
        for &w in &adj[v] {
            match t.index[w] {
                None => {
                    visit(w, adj, t);
                    t.low[v] = t.low[v].min(t.low[w]);
                }
                Some(iw) if t.on[w] => t.low[v] = t.low[v].min(iw),
                _ => {}
            }
        }
        if Some(t.low[v]) == t.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on[w] = false;
                comp.push(w);
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                t.out.push(comp);
            }
        }
    }
    let n = nodes.len();
    let mut t = T {
        index: vec![None; n],
        low: vec![0; n],
        on: vec![false; n],
        stack: Vec::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in 0..n {
        if t.index[v].is_none() {
            visit(v, &adj, &mut t);
        }
    }
    let mut out: Vec<Vec<String>> = t
        .out
        .into_iter()
        .map(|c| {
            let mut c: Vec<String> = c.into_iter().map(|i| nodes[i].clone()).collect();
            c.sort();
            c
        })
        .collect();
    out.sort();
    out
}

/// One concrete loop through the modules of `scc`, with the line making each edge.
fn describe(scc: &[String], edges: &Edges) -> String {
    let inside = |a: &String, b: &String| scc.contains(a) && scc.contains(b);
    // Breadth-first from the first module back to itself, within the component.
    let start = &scc[0];
    let mut prev: BTreeMap<&String, &String> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start]);
    let mut back = None;
    while let Some(a) = queue.pop_front() {
        for (x, b) in edges.keys().filter(|(x, b)| x == a && inside(x, b)) {
            if b == start {
                back = Some(x);
                break;
            }
            if !prev.contains_key(b) {
                prev.insert(b, x);
                queue.push_back(b);
            }
        }
        if back.is_some() {
            break;
        }
    }
    let mut path = vec![start.clone()];
    let mut cur = back.expect("a strongly connected component has a loop");
    while cur != start {
        path.push(cur.clone());
        cur = prev[cur];
    }
    path.push(start.clone());
    path.reverse();
    let hops: Vec<String> = path
        .windows(2)
        .map(|w| {
            format!(
                "  {} -> {} ({})",
                w[0],
                w[1],
                edges[&(w[0].clone(), w[1].clone())]
            )
        })
        .collect();
    format!(
        "{} (modules in the cycle: {})\n{}",
        path.join(" -> "),
        scc.join(", "),
        hops.join("\n")
    )
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn braid_core_has_no_module_cycle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let edges = module_graph(&src);
    assert!(edges.len() > 20, "the graph looks empty: {edges:?}");
    let found: Vec<String> = cycles(&edges).iter().map(|c| describe(c, &edges)).collect();
    assert!(
        found.is_empty(),
        "module cycles in braid-core:\n{}",
        found.join("\n")
    );
}

#[test]
fn workspace_crates_have_no_module_cycle_beyond_the_known_ones() {
    let mut problems = Vec::new();
    let mut seen = BTreeSet::new();
    let mut dirs: Vec<PathBuf> = fs::read_dir(workspace().join("crates"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("src").is_dir())
        .collect();
    dirs.sort();
    assert!(dirs.len() > 5, "found too few crates: {dirs:?}");
    for dir in dirs {
        let name = dir.file_name().unwrap().to_string_lossy().to_string();
        let edges = module_graph(&dir.join("src"));
        for c in cycles(&edges) {
            let known = KNOWN
                .iter()
                .any(|(k, m)| *k == name && m.iter().copied().eq(c.iter().map(String::as_str)));
            if known {
                seen.insert((name.clone(), c));
            } else {
                problems.push(format!("{name}: {}", describe(&c, &edges)));
            }
        }
    }
    for (k, m) in KNOWN {
        let m: Vec<String> = m.iter().map(|s| s.to_string()).collect();
        if !seen.contains(&(k.to_string(), m.clone())) {
            problems.push(format!(
                "{k}: the known cycle {m:?} is gone: remove it from KNOWN"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The checker itself: a made-up crate with `a -> b -> c -> a` (through a `super::`, a
/// group import and a root re-export) and a test-only back edge that must not count.
#[test]
fn the_checker_names_a_cycle_and_ignores_test_code() {
    let dir = std::env::temp_dir().join(format!("braid-module-cycles-{}", std::process::id()));
    let src = dir.join("src");
    fs::create_dir_all(src.join("b")).unwrap();
    let files = [
        ("lib.rs", "pub mod a;\npub mod b;\nmod c;\nmod d;\npub use c::Thing;\n"),
        ("a.rs", "// use crate::d;\nuse super::b::X;\nlet s = \"crate::d\";\n"),
        ("b/mod.rs", "mod inner;\npub struct X;\n"),
        ("b/inner.rs", "use super::super::{Thing, d as e};\n"),
        ("c.rs", "pub struct Thing;\nfn f() { crate::a::g(); }\n#[cfg(test)]\nmod tests { use crate::d; }\n"),
        ("d.rs", "#[cfg(test)]\nuse crate::a;\n"),
        ("b/tests.rs", "use crate::a;\n"),
    ];
    for (f, text) in files {
        fs::write(src.join(f), text).unwrap();
    }
    let edges = module_graph(&src);
    let _ = fs::remove_dir_all(&dir);
    let keys: Vec<(&str, &str)> = edges
        .keys()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    assert_eq!(keys, [("a", "b"), ("b", "c"), ("b", "d"), ("c", "a")]);
    let found = cycles(&edges);
    assert_eq!(found, [vec!["a".to_string(), "b".into(), "c".into()]]);
    let text = describe(&found[0], &edges);
    assert!(
        text.starts_with("a -> b -> c -> a (modules in the cycle: a, b, c)\n"),
        "{text}"
    );
    assert!(text.contains("b -> c (b/inner.rs:1)"), "{text}");
}
