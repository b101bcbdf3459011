//! The command synopsis in docs/architecture.md, generated from the clap definitions and
//! kept in step by a test: a flag added, renamed or removed without the docs fails it.
//!
//! Owns: the synopsis text (every command, its arguments and flags, each with the first
//! sentence of its help) and the check. Must not touch: the flags themselves (`main.rs`,
//! `net/` and the other command modules define them).
//!
//! After changing a flag, `BRAID_BLESS=1 cargo test -p braid synopsis` rewrites the block
//! between the markers in docs/architecture.md; review the diff like any other change.

use clap::Command;
use std::fmt::Write;

/// The markers around the generated block in docs/architecture.md.
pub(crate) const BEGIN: &str = "<!-- synopsis: generated from clap by `BRAID_BLESS=1 cargo test -p braid synopsis`; do not edit -->";
pub(crate) const END: &str = "<!-- end of synopsis -->";

/// The first sentence of a help text (up to the first ". " or the end), on one line.
fn first_sentence(help: &str) -> String {
    let one_line = help.split_whitespace().collect::<Vec<_>>().join(" ");
    // A full stop ends the sentence when a capital follows ("e.g. this" does not end it).
    let end = one_line.match_indices(". ").map(|(i, _)| i).find(|&i| {
        one_line[i + 2..]
            .chars()
            .next()
            .is_some_and(|c| c.is_uppercase())
    });
    match end {
        Some(i) => one_line[..i + 1].to_string(),
        None => one_line,
    }
}

/// How an argument is written: `--flag <VALUE>`, `--flag`, or `<NAME>` for a positional.
fn spelling(a: &clap::Arg) -> String {
    let value = a
        .get_value_names()
        .and_then(|v| v.first())
        .map(|v| v.to_string())
        .unwrap_or_else(|| a.get_id().as_str().to_uppercase());
    let takes_value = a.get_action().takes_values();
    match a.get_long() {
        Some(long) if takes_value => format!("--{long} <{value}>"),
        Some(long) => format!("--{long}"),
        None => format!("<{value}>"),
    }
}

/// One command's lines: its usage line, then one line per argument.
fn command_lines(path: &str, c: &Command, out: &mut String) {
    let args: Vec<&clap::Arg> = c
        .get_arguments()
        .filter(|a| !a.is_hide_set() && a.get_id() != "help" && a.get_id() != "version")
        .collect();
    let about = c.get_about().map(|s| first_sentence(&s.to_string()));
    let _ = writeln!(out, "braid {path}");
    if let Some(about) = about {
        let _ = writeln!(out, "    {about}");
    }
    for a in args {
        let mut spelt = spelling(a);
        if a.is_required_set() {
            spelt.push_str(" (required)");
        }
        let help = a
            .get_help()
            .map(|h| first_sentence(&h.to_string()))
            .unwrap_or_default();
        let _ = writeln!(out, "    {spelt:<34} {help}");
    }
    let _ = writeln!(out);
}

/// The whole synopsis: every subcommand, depth first, in the order clap lists them.
pub(crate) fn generate(root: &Command) -> String {
    let mut out = String::new();
    let mut stack: Vec<(String, Command)> = root
        .get_subcommands()
        .map(|c| (c.get_name().to_string(), c.clone()))
        .collect();
    stack.reverse();
    while let Some((path, c)) = stack.pop() {
        if c.get_name() == "help" {
            continue;
        }
        if c.has_subcommands() {
            let _ = writeln!(out, "braid {path} <COMMAND>\n");
            let mut subs: Vec<(String, Command)> = c
                .get_subcommands()
                .map(|s| (format!("{path} {}", s.get_name()), s.clone()))
                .collect();
            subs.reverse();
            stack.extend(subs);
            continue;
        }
        command_lines(&path, &c, &mut out);
    }
    format!("```text\n{}```", out.trim_end().to_string() + "\n")
}

/// The docs text with the block between the markers replaced by `synopsis`; `None` when
/// the markers are missing.
pub(crate) fn splice(doc: &str, synopsis: &str) -> Option<String> {
    let b = doc.find(BEGIN)? + BEGIN.len();
    let e = b + doc[b..].find(END)?;
    Some(format!("{}\n{}\n{}", &doc[..b], synopsis, &doc[e..]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Cli;
    use clap::CommandFactory;

    fn doc_path() -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/architecture.md")
    }

    /// Issue 27: docs/architecture.md showed 6 of the server's 18 flags and marked
    /// `--server` required. The synopsis there must be exactly what clap defines.
    #[test]
    fn synopsis_in_architecture_md_matches_the_cli() {
        let doc = std::fs::read_to_string(doc_path()).expect("docs/architecture.md");
        let want = generate(&Cli::command());
        let Some(updated) = splice(&doc, &want) else {
            panic!("docs/architecture.md lacks the synopsis markers:\n{BEGIN}\n{END}");
        };
        if updated == doc {
            return;
        }
        if std::env::var_os("BRAID_BLESS").is_some() {
            std::fs::write(doc_path(), updated).expect("write docs/architecture.md");
            return;
        }
        panic!(
            "docs/architecture.md's command synopsis is not what clap defines; run \
             `BRAID_BLESS=1 cargo test -p braid synopsis` and review the diff. Expected:\n{want}"
        );
    }

    #[test]
    fn the_synopsis_names_every_flag_of_every_command() {
        let cli = Cli::command();
        let text = generate(&cli);
        let mut commands = vec![cli];
        while let Some(c) = commands.pop() {
            for a in c.get_arguments().filter(|a| !a.is_hide_set()) {
                if let Some(long) = a.get_long().filter(|l| *l != "help" && *l != "version") {
                    assert!(text.contains(&format!("--{long}")), "--{long} missing");
                }
            }
            commands.extend(c.get_subcommands().cloned());
        }
        assert!(text.contains("braid testbed run\n"), "{text}");
        assert!(text.contains("(required)"), "{text}");
        assert!(!text.contains("braid help"), "{text}");
    }

    #[test]
    fn splice_replaces_only_the_block_between_the_markers() {
        let doc = format!("a\n{BEGIN}\nold\n{END}\nb\n");
        assert_eq!(
            splice(&doc, "new").unwrap(),
            format!("a\n{BEGIN}\nnew\n{END}\nb\n")
        );
        assert_eq!(splice("no markers", "x"), None);
    }

    #[test]
    fn first_sentence_stops_at_the_first_full_stop() {
        assert_eq!(first_sentence("One. Two."), "One.");
        assert_eq!(first_sentence("e.g. this\n  wraps"), "e.g. this wraps");
        assert_eq!(first_sentence("Ends. Here"), "Ends.");
    }
}
