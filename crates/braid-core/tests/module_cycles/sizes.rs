//! Files and functions small enough to read in one sitting (issue 36): no source file over
//! [`MAX_FILE_LINES`] lines and no function over [`MAX_FN_LINES`], in every workspace
//! crate's `src/`. Test code does not count (files named `tests.rs` or `*_tests.rs`, files
//! under a `tests/` directory, `#[cfg(test)]` items).
//!
//! Functions are found as rustfmt lays them out: a line starting (after its indentation)
//! with `fn`, `pub fn`, `pub(crate) fn`, `async fn` and the like, whose body ends at the
//! first later line that is the same indentation followed by `}`. What is over the limit
//! today is listed in `KNOWN_LONG`; the list can only shrink (an entry that is no longer
//! over the limit fails the test until it is removed).

use std::fs;
use std::path::{Path, PathBuf};

pub const MAX_FILE_LINES: usize = 600;
pub const MAX_FN_LINES: usize = 100;

/// Over the limit today, as (path from the workspace root, function name or `""` for the
/// file). To be split (issue 36 item 4); never add to this list.
const KNOWN_LONG: &[(&str, &str)] = &[
    ("crates/braid-testkit/src/netns.rs", ""),
    ("crates/braid-core/src/session/mod.rs", ""),
    ("crates/braid-net/src/server/session.rs", "spawn_session"),
    ("crates/braid-net/src/driver.rs", "run"),
    ("crates/braid-net/src/agent/mod.rs", "start"),
    ("crates/braid-net/src/server/relay.rs", "udp_flows"),
    ("crates/braid/src/net/agent.rs", "settings"),
];

/// Every `.rs` file under `dir` that is not test code.
fn source_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        let name = p
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .to_string();
        if p.is_dir() {
            if name != "tests" {
                source_files(&p, out);
            }
        } else if name.ends_with(".rs") && name != "tests.rs" && !name.ends_with("_tests.rs") {
            out.push(p);
        }
    }
}

/// The name of the function a line opens, if it opens one (rustfmt's layout).
fn fn_name(line: &str) -> Option<&str> {
    let mut rest = line.trim_start();
    if let Some(r) = rest.strip_prefix("pub") {
        rest = match r.strip_prefix('(') {
            Some(r) => r.split_once(") ")?.1,
            None => r.strip_prefix(' ')?,
        };
    }
    for q in ["const ", "async ", "unsafe ", "extern \"C\" "] {
        rest = rest.strip_prefix(q).unwrap_or(rest);
    }
    let r = rest.strip_prefix("fn ")?;
    let end = r.find(|c: char| !(c.is_alphanumeric() || c == '_'))?;
    Some(&r[..end])
}

/// Functions over [`MAX_FN_LINES`] in `text`, as (name, first line, length), test items
/// left out.
pub fn long_functions(text: &str) -> Vec<(String, usize, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let indent = |l: &str| l.len() - l.trim_start().len();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let l = lines[i];
        if l.trim() == "#[cfg(test)]" {
            // Skip the item that follows: to its closing brace at its indentation, or to
            // its end when it is one line (`mod tests;`).
            let ind = indent(l);
            let close = format!("{}}}", " ".repeat(ind));
            let item = i + 1;
            i = match lines.get(item) {
                Some(x) if x.trim_end().ends_with(';') => item + 1,
                _ => (item..lines.len())
                    .find(|&j| lines[j] == close)
                    .map_or(lines.len(), |j| j + 1),
            };
            continue;
        }
        if let Some(name) = fn_name(l) {
            // A declaration without a body ends in `;` before any `{`.
            let opens = (i..lines.len())
                .map(|j| lines[j].trim_end())
                .find(|x| x.ends_with('{') || x.ends_with(';'))
                .is_some_and(|x| x.ends_with('{'));
            if opens {
                let close = format!("{}}}", " ".repeat(indent(l)));
                if let Some(end) = (i + 1..lines.len()).find(|&j| lines[j].starts_with(&close)) {
                    let len = end - i + 1;
                    if len > MAX_FN_LINES {
                        out.push((name.to_string(), i + 1, len));
                    }
                }
            }
        }
        i += 1;
    }
    out
}

#[test]
fn source_files_and_functions_stay_readable() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = Vec::new();
    for e in fs::read_dir(root.join("crates")).unwrap().flatten() {
        source_files(&e.path().join("src"), &mut files);
    }
    files.sort();
    assert!(
        files.len() > 100,
        "found too few source files: {}",
        files.len()
    );
    let mut problems = Vec::new();
    let mut seen = Vec::new();
    for f in &files {
        let rel = f
            .strip_prefix(&root)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        let text = fs::read_to_string(f).unwrap();
        let mut long = Vec::new();
        let n = text.lines().count();
        if n > MAX_FILE_LINES {
            long.push((
                String::new(),
                format!("{rel}: {n} lines (at most {MAX_FILE_LINES})"),
            ));
        }
        for (name, at, len) in long_functions(&text) {
            long.push((
                name.clone(),
                format!("{rel}:{at}: fn {name} is {len} lines (at most {MAX_FN_LINES})"),
            ));
        }
        for (name, what) in long {
            if KNOWN_LONG.contains(&(rel.as_str(), name.as_str())) {
                seen.push((rel.clone(), name));
            } else {
                problems.push(what);
            }
        }
    }
    for (f, name) in KNOWN_LONG {
        if !seen.iter().any(|(sf, sn)| sf == f && sn == name) {
            problems.push(format!(
                "{f} {name}: no longer over the limit: remove it from KNOWN_LONG"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_size_check_finds_long_functions_and_skips_tests_and_declarations() {
    let body = |n: usize| "        x();\n".repeat(n);
    let text = format!(
        "pub(crate) fn long() {{\n{}}}\n\
         trait T {{\n    fn decl(&self);\n    fn short(&self) {{\n{}    }}\n}}\n\
         impl S {{\n    pub async fn inner(&self) -> u8 {{\n{}    }}\n}}\n\
         #[cfg(test)]\nmod tests {{\n    fn in_test() {{\n{}    }}\n}}\n",
        body(99),
        body(3),
        body(120),
        body(200)
    );
    let found: Vec<(String, usize)> = long_functions(&text)
        .into_iter()
        .map(|(n, _, len)| (n, len))
        .collect();
    assert_eq!(
        found,
        vec![("long".to_string(), 101), ("inner".to_string(), 122)]
    );
}
