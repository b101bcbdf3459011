//! The module graphs of a crate: for every module with submodules (the crate root
//! included), the edges between its children, and the cycles among them.

use crate::scan::{declarations, drop_test_items, references, strip};
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// An edge `from -> to` between sibling modules, with the `file:line` that makes it.
pub type Edges = BTreeMap<(String, String), String>;

/// One module with children: its path (`""` for the crate root, `"a::b"`) and the edges
/// between its children.
pub struct Level {
    pub parent: String,
    pub edges: Edges,
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

/// A file's module path below the crate root: `a.rs` and `a/mod.rs` are `[a]`.
fn module_of(rel: &Path) -> Vec<String> {
    let mut segs: Vec<String> = rel
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if segs
        .last()
        .is_some_and(|l| l == "mod" || l == "lib" || l == "main")
    {
        segs.pop();
    }
    segs
}

/// The code of a file with comments, literals and test-only items blanked.
fn code(f: &Path) -> String {
    drop_test_items(&strip(&fs::read_to_string(f).unwrap()))
}

/// Every level of the crate whose sources are in `src`.
pub fn levels(src: &Path) -> Vec<Level> {
    let root = ["lib.rs", "main.rs"]
        .iter()
        .map(|f| src.join(f))
        .find(|p| p.exists())
        .unwrap_or_else(|| panic!("{} has no lib.rs or main.rs", src.display()));
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.retain(|f| !is_test_file(f) && !f.starts_with(src.join("bin")));
    // Each source file once: (module path, relative path, code).
    let parsed: Vec<(Vec<String>, PathBuf, String)> = files
        .iter()
        .filter(|f| *f == &root || !["lib.rs", "main.rs"].iter().any(|r| *f == &src.join(r)))
        .map(|f| {
            let rel = f.strip_prefix(src).unwrap().to_path_buf();
            (module_of(&rel), rel, code(f))
        })
        .collect();
    let mut out = Vec::new();
    for (here, _, text) in &parsed {
        let (children, names) = declarations(text, here);
        if children.is_empty() {
            continue;
        }
        let children: BTreeSet<String> = children.into_iter().collect();
        let names: BTreeMap<String, String> = names
            .into_iter()
            .filter(|(_, m)| children.contains(m))
            .collect();
        let mut edges = Edges::new();
        for (module, rel, text) in &parsed {
            if module.len() <= here.len() || module[..here.len()] != here[..] {
                continue;
            }
            let from = &module[here.len()];
            if !children.contains(from) {
                continue;
            }
            for (path, line) in references(text, module) {
                if path.len() <= here.len() || path[..here.len()] != here[..] {
                    continue;
                }
                let next = &path[here.len()];
                let to = if children.contains(next) {
                    next
                } else if let Some(m) = names.get(next) {
                    m
                } else {
                    continue;
                };
                if to != from {
                    edges
                        .entry((from.clone(), to.clone()))
                        .or_insert_with(|| format!("{}:{line}", rel.display()));
                }
            }
        }
        out.push(Level {
            parent: here.join("::"),
            edges,
        });
    }
    out.sort_by(|a, b| a.parent.cmp(&b.parent));
    out
}

/// Strongly connected components with more than one module (Tarjan), each sorted.
pub fn cycles(edges: &Edges) -> Vec<Vec<String>> {
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
pub fn describe(scc: &[String], edges: &Edges) -> String {
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
