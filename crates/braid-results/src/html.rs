//! The HTML page of a report: one self-contained `index.html` (inline CSS, no scripts, no
//! external resources) linking the plot files beside it.
//!
//! Owns: the page's markup and HTML escaping. Must not touch: the database, drawing, the
//! summary rows' numbers ([`crate::summary`]), the file system (callers write the string). Every string
//! that came from the database or a scenario goes through [`escape`].

use crate::format;
use crate::plot::Figure;
use crate::store::StoredRun;
pub use crate::summary::{summarise, SummaryRow};
use braid_sim::RunResult;
use std::fmt::Write;

/// `s` with `& < > " '` replaced by entities: safe in element content and quoted attributes.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

/// One scenario's section: its latest run, the results and the figures (paths relative to
/// the page).
#[derive(Debug, Clone)]
pub struct Section {
    /// The run shown.
    pub run: StoredRun,
    /// Its transfers.
    pub results: Vec<RunResult>,
    /// Its figures, with `svg` and `png` relative to the page's directory.
    pub figures: Vec<Figure>,
}

const STYLE: &str = "body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:2em auto;max-width:1400px;padding:0 1em;color:#222}
h1{font-size:1.6em}h2{margin-top:2em;border-bottom:1px solid #ccc;padding-bottom:.2em}
table{border-collapse:collapse;margin:1em 0;font-size:.92em}
th,td{padding:.3em .7em;border-bottom:1px solid #e4e4e4;text-align:right;white-space:nowrap}
th{background:#f4f4f4}td.l,th.l{text-align:left}
tr.bad td{background:#fff0f0}
.meta{color:#555;font-size:.92em}
figure{margin:1.2em 0}figure img{max-width:100%;border:1px solid #eee}
figcaption{font-size:.9em;color:#444}
details pre{background:#f8f8f8;padding:.8em;overflow:auto;font-size:.85em}
code{font-size:.95em}";

/// A path as a URL in an attribute: separators become `/`, then the whole is escaped.
fn href(p: &std::path::Path) -> String {
    let s = p
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join("/");
    let mut enc = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_./".contains(&b) {
            enc.push(b as char);
        } else {
            let _ = write!(enc, "%{b:02X}");
        }
    }
    escape(&enc)
}

/// The whole page: a section per scenario, then every recorded run.
pub fn render(sections: &[Section], all_runs: &[StoredRun], db_name: &str) -> String {
    let mut h = String::new();
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>braid results</title>\n<style>\n{STYLE}\n</style>\n</head>\n<body>\n\
         <h1>braid results</h1>\n<p class=\"meta\">From <code>{}</code>: {} run{} recorded; \
         the latest run of each scenario and mode is shown.</p>\n",
        escape(db_name),
        all_runs.len(),
        if all_runs.len() == 1 { "" } else { "s" },
    );
    if sections.is_empty() {
        h.push_str("<p>No runs recorded yet: run <code>braid sim SCENARIO --db FILE</code>.</p>\n");
    }
    if sections.len() > 1 {
        h.push_str("<ul>\n");
        for s in sections {
            let _ = writeln!(
                h,
                "<li><a href=\"#run-{}\">{} ({})</a></li>",
                s.run.id,
                escape(&s.run.scenario),
                escape(&s.run.mode)
            );
        }
        h.push_str("</ul>\n");
    }
    for s in sections {
        section(&mut h, s);
    }
    runs_table(&mut h, all_runs);
    h.push_str("</body>\n</html>\n");
    h
}

fn section(h: &mut String, s: &Section) {
    let r = &s.run;
    let _ = writeln!(
        h,
        "<section id=\"run-{}\">\n<h2>{} <small>({})</small></h2>",
        r.id,
        escape(&r.scenario),
        escape(&r.mode)
    );
    let _ = writeln!(
        h,
        "<p class=\"meta\">Run {} recorded {}, code revision <code>{}</code>{}.</p>",
        r.id,
        escape(&format::unix_time(r.created_unix)),
        escape(&r.git_rev),
        match r.handshake_s {
            Some(hs) => format!("; session set-up {}", escape(&format::duration(hs))),
            None => String::new(),
        }
    );
    summary_table(h, &s.results);
    failures(h, &s.results);

    if s.figures.is_empty() {
        h.push_str("<p class=\"meta\">No finite values to plot.</p>\n");
    }
    for f in &s.figures {
        let _ = writeln!(
            h,
            "<figure><a href=\"{svg}\"><img src=\"{svg}\" alt=\"{t}\"></a>\
             <figcaption>{t} (<a href=\"{svg}\">SVG</a>, <a href=\"{png}\">PNG</a>)\
             </figcaption></figure>",
            svg = href(&f.svg),
            png = href(&f.png),
            t = escape(&f.title),
        );
    }
    let _ = writeln!(
        h,
        "<details><summary>Scenario file</summary><pre>{}</pre></details>\n</section>",
        escape(&r.scenario_text)
    );
}

/// The run's summary rows: one per variant and size.
fn summary_table(h: &mut String, results: &[RunResult]) {
    h.push_str(
        "<table>\n<tr><th class=\"l\">variant</th><th>size</th><th>runs</th>\
         <th>median goodput</th><th>min goodput</th><th>max goodput</th>\
         <th>median time</th><th>median efficiency</th><th>median energy</th>\
         <th>idle p50</th><th>loaded p50</th><th>loaded p95</th><th>loaded p99</th>\
         <th>probe loss</th><th>RPM</th><th>verified</th></tr>\n",
    );
    for row in summarise(results) {
        let bad = row.verified < row.repetitions;
        let _ = writeln!(
            h,
            "<tr{}><td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{}</td><td>{}</td><td>{}/{}</td></tr>",
            if bad { " class=\"bad\"" } else { "" },
            escape(&row.variant),
            escape(&format::size(row.size_bytes)),
            row.repetitions,
            escape(&format::opt(row.goodput_median, format::rate)),
            escape(&format::opt(row.goodput_min, format::rate)),
            escape(&format::opt(row.goodput_max, format::rate)),
            escape(&format::opt(row.completion_median, format::duration)),
            escape(&format::opt(row.efficiency_median, format::ratio)),
            escape(&format::opt(row.energy_median, format::energy)),
            escape(&format::opt(
                row.latency.latency_idle_p50_ms,
                format::millis
            )),
            escape(&format::opt(
                row.latency.latency_load_p50_ms,
                format::millis
            )),
            escape(&format::opt(
                row.latency.latency_load_p95_ms,
                format::millis
            )),
            escape(&format::opt(
                row.latency.latency_load_p99_ms,
                format::millis
            )),
            escape(&format::opt(row.latency.probe_loss, format::percent)),
            escape(&format::opt(row.latency.rpm, format::count)),
            row.verified,
            row.repetitions,
        );
    }
    h.push_str("</table>\n");
}

/// The transfers that failed or were not verified, if any.
fn failures(h: &mut String, results: &[RunResult]) {
    let failures: Vec<&RunResult> = results
        .iter()
        .filter(|r| r.error.is_some() || !r.verified)
        .collect();
    if !failures.is_empty() {
        h.push_str("<p>Failed or unverified transfers:</p>\n<ul>\n");
        for f in failures {
            let _ = writeln!(
                h,
                "<li>{}, {}, repetition {} (seed {}): {}</li>",
                escape(&f.variant),
                escape(&format::size(f.size_bytes)),
                f.repetition,
                f.seed,
                escape(f.error.as_deref().unwrap_or("not verified"))
            );
        }
        h.push_str("</ul>\n");
    }
}

fn runs_table(h: &mut String, runs: &[StoredRun]) {
    if runs.is_empty() {
        return;
    }
    h.push_str(
        "<h2>All runs</h2>\n<table>\n<tr><th>run</th><th class=\"l\">recorded</th>\
         <th class=\"l\">scenario</th><th class=\"l\">mode</th><th class=\"l\">revision</th>\
         <th>simulated</th><th>wall time</th></tr>\n",
    );
    for r in runs.iter().rev() {
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td class=\"l\">{}</td><td class=\"l\">{}</td>\
             <td class=\"l\">{}</td><td class=\"l\"><code>{}</code></td><td>{}</td><td>{}</td></tr>",
            r.id,
            escape(&format::unix_time(r.created_unix)),
            escape(&r.scenario),
            escape(&r.mode),
            escape(&r.git_rev),
            escape(&format::duration(r.virtual_s)),
            escape(&format::duration(r.wall_s)),
        );
    }
    h.push_str("</table>\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup() {
        assert_eq!(
            escape("<script>alert(\"x\" & 'y')</script>"),
            "&lt;script&gt;alert(&quot;x&quot; &amp; &#39;y&#39;)&lt;/script&gt;"
        );
    }

    #[test]
    fn hrefs_are_encoded() {
        assert_eq!(
            href(std::path::Path::new("plots/a b\"<.svg")),
            "plots/a%20b%22%3C.svg"
        );
    }
}
