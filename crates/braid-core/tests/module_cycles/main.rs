//! No import cycles between modules (issue 27 item 2), at every level of every crate; and
//! (`sizes.rs`) no source file or function too long to read in one sitting (issue 36).
//!
//! Reads a crate's `src/` files and, for the crate root and every module with submodules,
//! builds the graph of references between its children: paths through `crate::`,
//! `super::` and `self::` (use trees expanded; names the parent imports from a child
//! resolved to that child). Fails naming every cycle with the `file:line` that makes each
//! of its edges. Test-only code does not count: `#[cfg(test)]` items and files named
//! `tests.rs` or `*_tests.rs` may reach anywhere, since nothing in the crate depends on
//! them. Inline `mod x { .. }` blocks and macro-generated paths are not followed.
//!
//! braid-core must have no cycle. The other workspace crates are checked too; the cycles
//! they have today are listed in `KNOWN` and must leave the list when fixed (a listed
//! cycle that no longer exists fails the test, so the list can only shrink).

mod graph;
mod scan;
mod sizes;

use graph::{cycles, describe, levels, Edges};
use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

/// Cycles that exist today, as (crate directory, parent module or `""` for the crate root,
/// the modules of the cycle, sorted). To be removed (issue 27); never add to this list.
const KNOWN: &[(&str, &str, &[&str])] = &[];

/// Every cycle in the crate at `src`, as (parent, sorted modules, description).
fn crate_cycles(src: &Path) -> Vec<(String, Vec<String>, String)> {
    let mut out = Vec::new();
    for level in levels(src) {
        for c in cycles(&level.edges) {
            let text = describe(&c, &level.edges);
            out.push((level.parent.clone(), c, text));
        }
    }
    out
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn at(parent: &str) -> String {
    if parent.is_empty() {
        "crate root".into()
    } else {
        format!("in {parent}")
    }
}

#[test]
fn braid_core_has_no_module_cycle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let levels = levels(&src);
    let root: &Edges = &levels.iter().find(|l| l.parent.is_empty()).unwrap().edges;
    assert!(root.len() > 20, "the root graph looks empty: {root:?}");
    assert!(levels
        .iter()
        .any(|l| l.parent == "session" && !l.edges.is_empty()));
    let found: Vec<String> = crate_cycles(&src)
        .into_iter()
        .map(|(p, _, text)| format!("{}: {text}", at(&p)))
        .collect();
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
        for (parent, c, text) in crate_cycles(&dir.join("src")) {
            let known = KNOWN.iter().any(|(k, p, m)| {
                *k == name && *p == parent && m.iter().copied().eq(c.iter().map(String::as_str))
            });
            if known {
                seen.insert((name.clone(), parent, c));
            } else {
                problems.push(format!("{name}, {}: {text}", at(&parent)));
            }
        }
    }
    for (k, p, m) in KNOWN {
        let m: Vec<String> = m.iter().map(|s| s.to_string()).collect();
        if !seen.contains(&(k.to_string(), p.to_string(), m.clone())) {
            problems.push(format!(
                "{k}: the known cycle {m:?} {} is gone: remove it from KNOWN",
                at(p)
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The checker itself, on a made-up crate: `a -> b -> c -> a` at the root (through a
/// `super::`, a group import and a root re-export), `x -> y -> x` inside `b` (through
/// `self::` and a `super::` path), and test-only back edges that must not count.
#[test]
fn the_checker_names_cycles_at_every_level_and_ignores_test_code() {
    let dir = std::env::temp_dir().join(format!("braid-module-cycles-{}", std::process::id()));
    let src = dir.join("src");
    fs::create_dir_all(src.join("b")).unwrap();
    let files = [
        ("lib.rs", "pub mod a;\npub mod b;\nmod c;\nmod d;\npub use c::Thing;\n"),
        ("a.rs", "// use crate::d;\nuse super::b::X;\nlet s = \"crate::d\";\n"),
        ("b/mod.rs", "mod inner;\nmod x;\nmod y;\npub use self::y::Why;\npub struct X;\n"),
        ("b/inner.rs", "use super::super::{Thing, d as e};\n"),
        ("b/x.rs", "fn f() -> super::Why { todo!() }\n"),
        ("b/y.rs", "pub struct Why;\nfn g() { crate::b::x::f(); }\n"),
        ("c.rs", "pub struct Thing;\nfn f() { crate::a::g(); }\n#[cfg(test)]\nmod tests { use crate::d; }\n"),
        ("d.rs", "#[cfg(test)]\nuse crate::a;\n"),
        ("b/tests.rs", "use crate::a;\n"),
    ];
    for (f, text) in files {
        fs::write(src.join(f), text).unwrap();
    }
    let levels = levels(&src);
    let found = crate_cycles(&src);
    let _ = fs::remove_dir_all(&dir);
    let root = &levels.iter().find(|l| l.parent.is_empty()).unwrap().edges;
    let keys: Vec<(&str, &str)> = root.keys().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    assert_eq!(keys, [("a", "b"), ("b", "c"), ("b", "d"), ("c", "a")]);
    let summary: Vec<(&str, Vec<&str>)> = found
        .iter()
        .map(|(p, c, _)| (p.as_str(), c.iter().map(String::as_str).collect()))
        .collect();
    assert_eq!(summary, [("", vec!["a", "b", "c"]), ("b", vec!["x", "y"])]);
    let text = &found[0].2;
    assert!(
        text.starts_with("a -> b -> c -> a (modules in the cycle: a, b, c)\n"),
        "{text}"
    );
    assert!(text.contains("b -> c (b/inner.rs:1)"), "{text}");
    assert!(found[1].2.contains("x -> y (b/x.rs:1)"), "{}", found[1].2);
}
