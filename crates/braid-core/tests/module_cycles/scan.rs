//! Reading sources: comments and literals blanked, test-only items dropped, and the module
//! paths a file refers to (`crate::`, `super::`, `self::` paths, use trees expanded).

/// Replaces comments, string and char literals with spaces, keeping line breaks.
pub fn strip(src: &str) -> String {
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
pub fn drop_test_items(s: &str) -> String {
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

/// A path a file refers to, as segments below the crate root, and the line it is on.
pub type Ref = (Vec<String>, usize);

/// Every path that `code`, a file of module `here` (segments below the crate root), names
/// through `crate::`, `super::` or `self::`, with use trees (`a::{b, c::d}`) expanded.
pub fn references(code: &str, here: &[String]) -> Vec<Ref> {
    let s: Vec<char> = code.chars().collect();
    let line_of = |i: usize| 1 + s[..i].iter().filter(|&&c| c == '\n').count();
    let word = |c: char| c.is_alphanumeric() || c == '_';
    let mut found = Vec::new();
    let mut i = 0;
    while i < s.len() {
        if i > 0 && (word(s[i - 1]) || s[i - 1] == '$' || s[i - 1] == ':') {
            i += 1;
            continue;
        }
        let mut j = i;
        let base: Option<Vec<String>> = if starts(&s, i, "crate::") {
            j += "crate::".len();
            Some(Vec::new())
        } else if starts(&s, i, "self::") {
            j += "self::".len();
            Some(here.to_vec())
        } else if starts(&s, i, "super::") {
            let mut ups = 0;
            while starts(&s, j, "super::") {
                ups += 1;
                j += "super::".len();
            }
            (ups <= here.len()).then(|| here[..here.len() - ups].to_vec())
        } else {
            None
        };
        match base {
            Some(base) => {
                let (paths, end) = tree(&s, j, base);
                found.extend(paths.into_iter().map(|p| (p, line_of(i))));
                i = end.max(i + 1);
            }
            None => i += 1,
        }
    }
    found
}

fn starts(s: &[char], i: usize, w: &str) -> bool {
    s[i.min(s.len())..]
        .iter()
        .take(w.len())
        .copied()
        .eq(w.chars())
}

fn skip_ws(s: &[char], mut i: usize) -> usize {
    while i < s.len() && s[i].is_whitespace() {
        i += 1;
    }
    i
}

/// The paths of the use tree (or plain path) at `s[i..]` under `prefix`, and where it ends.
fn tree(s: &[char], i: usize, prefix: Vec<String>) -> (Vec<Vec<String>>, usize) {
    let mut i = skip_ws(s, i);
    match s.get(i) {
        Some('{') => {
            let mut out = Vec::new();
            i += 1;
            loop {
                i = skip_ws(s, i);
                match s.get(i) {
                    None => return (out, i),
                    Some('}') => return (out, i + 1),
                    Some(',') => i += 1,
                    _ => {
                        let (paths, end) = tree(s, i, prefix.clone());
                        out.extend(paths);
                        // Skip what the tree did not take (`as name`).
                        i = end.max(i + 1);
                        while i < s.len() && !matches!(s[i], ',' | '}') {
                            i += 1;
                        }
                    }
                }
            }
        }
        Some('*') => (vec![prefix], i + 1),
        _ => {
            let start = i;
            while i < s.len() && (s[i].is_alphanumeric() || s[i] == '_') {
                i += 1;
            }
            let seg: String = s[start..i].iter().collect();
            if seg.is_empty() {
                return (vec![prefix], i);
            }
            let mut path = prefix;
            if seg != "self" {
                path.push(seg);
            }
            let after = skip_ws(s, i);
            if starts(s, after, "::") && !starts(s, skip_ws(s, after + 2), "<") {
                tree(s, after + 2, path)
            } else {
                (vec![path], i)
            }
        }
    }
}

/// The modules a module file declares (`mod x;`, not inline `mod x { .. }`), and the names
/// it imports from them (`use x::Y`, `pub use self::x::{Y, Z}`), each mapped to its module.
pub fn declarations(code: &str, here: &[String]) -> (Vec<String>, Vec<(String, String)>) {
    let mut mods = Vec::new();
    let mut names = Vec::new();
    for stmt in code.split(';') {
        let words: Vec<&str> = stmt.split_whitespace().collect();
        if let Some(p) = words.iter().position(|w| *w == "mod") {
            // `mod x;` ends the statement; an inline `mod x { .. }` does not.
            if p + 2 == words.len() {
                mods.push(words[p + 1].to_string());
            }
        }
        if let Some(p) = words.iter().position(|w| *w == "use") {
            let rest = words[p + 1..].join(" ");
            // Bare `use x::..` names a child (or an external crate, filtered by the caller).
            let text = if rest.starts_with("crate::")
                || rest.starts_with("self::")
                || rest.starts_with("super::")
            {
                rest
            } else {
                format!("self::{rest}")
            };
            for (path, _) in references(&text, here) {
                if path.len() > here.len() + 1 && path[..here.len()] == *here {
                    let last = path.last().unwrap().clone();
                    names.push((last, path[here.len()].clone()));
                }
            }
            // `use x::Y as Z`: the alias is the visible name.
            if let Some(a) = words.iter().rposition(|w| *w == "as") {
                if let (Some(alias), Some((_, m))) = (words.get(a + 1), names.last().cloned()) {
                    names.push((
                        alias
                            .trim_matches(|c: char| !(c.is_alphanumeric() || c == '_'))
                            .to_string(),
                        m,
                    ));
                }
            }
        }
    }
    (mods, names)
}
