//! A report directory: `index.html` and `plots/` made from a results database.
//!
//! Owns: choosing what the report shows (the latest run of each scenario and mode), file
//! layout of the report directory. Must not touch: the schema (it reads through
//! [`Store`]), the markup ([`crate::html`]), the drawing ([`crate::plot`]).

use crate::html::{self, Section};
use crate::plot::{file_stem, plot_run};
use crate::store::{ResultFilter, Store};
use crate::{Error, Result};
use std::path::{Path, PathBuf};

/// What [`write_report`] wrote.
#[derive(Debug, Clone, PartialEq)]
pub struct WrittenReport {
    /// The page.
    pub index: PathBuf,
    /// Scenario sections on it.
    pub sections: usize,
    /// Figures drawn (each as SVG and PNG).
    pub figures: usize,
    /// The page's tables as plain text (goodput and latency per variant and size), a
    /// section per scenario, for the terminal.
    pub text: String,
}

/// Writes `out_dir/index.html` and `out_dir/plots/*.{svg,png}` for the latest run of every
/// scenario (and mode) in the store, creating `out_dir` if needed. Files of earlier reports
/// are overwritten, never deleted.
pub fn write_report(store: &Store, out_dir: &Path) -> Result<WrittenReport> {
    let plots = out_dir.join("plots");
    std::fs::create_dir_all(&plots).map_err(|source| Error::Io {
        path: plots.clone(),
        action: "create the report directory",
        source,
    })?;
    let mut sections = Vec::new();
    let mut figures = 0;
    let mut text = String::new();
    for run in store.latest_runs()? {
        let results: Vec<_> = store
            .results(&ResultFilter::run(run.id))?
            .into_iter()
            .map(|r| r.result)
            .collect();
        let samples = store.samples(run.id)?;
        let stem = format!("run-{}-{}", run.id, file_stem(&run.scenario));
        let title = format!("{} ({})", run.scenario, run.mode);
        let mut figs = plot_run(&results, &samples, &plots, &stem, &title)?;
        for f in &mut figs {
            f.svg = relative(&f.svg, out_dir);
            f.png = relative(&f.png, out_dir);
        }
        figures += figs.len();
        text.push_str(&format!(
            "{title}, run {} (revision {}):\n{}\n",
            run.id,
            run.git_rev,
            crate::summary::text_table(&results)
        ));
        sections.push(Section {
            run,
            results,
            figures: figs,
        });
    }
    let db_name = store.path().display().to_string();
    let page = html::render(&sections, &store.runs()?, &db_name);
    let index = out_dir.join("index.html");
    std::fs::write(&index, page).map_err(|source| Error::Io {
        path: index.clone(),
        action: "write",
        source,
    })?;
    Ok(WrittenReport {
        index,
        sections: sections.len(),
        figures,
        text,
    })
}

/// `p` relative to `base` when it is inside it.
fn relative(p: &Path, base: &Path) -> PathBuf {
    p.strip_prefix(base)
        .map(Path::to_path_buf)
        .unwrap_or_else(|_| p.to_path_buf())
}
