//! Figures of one run: box plots per transfer size and variant; through [`crate::plot_lines`],
//! throughput over time and the loaded-latency CDF.
//!
//! Owns: the box-plot figures and `plot_run`, which writes every figure of a run. Must not
//! touch: the database, HTML, statistics beyond calling [`crate::stats`], or the drawing kit
//! (font, colours, legend, ticks, SVG and PNG writing: `canvas.rs`). Every figure is written
//! twice from the same drawing code, as `NAME.svg` and `NAME.png`; the same data gives
//! byte-identical files. Text uses a subset of DejaVu Sans embedded in the crate (see
//! `assets/FONT-LICENSE.txt`), so no system font is needed. Non-finite values are left out
//! of the plots; a figure with nothing to show is not written.

use crate::canvas::{
    colour, draw_legend, err_text, log_ticks, shorten, tick, write_both, Draw, HEIGHT, LEGEND_W,
    LIGHT_MANTISSAS,
};
use crate::stats::BoxStats;
use crate::{Error, Result, RunSamples};
use braid_sim::RunResult;
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::path::Path;

pub use crate::canvas::{Figure, FigureKind};

/// Variants in order of first appearance; sizes ascending.
fn variants_and_sizes(results: &[RunResult]) -> (Vec<String>, Vec<u64>) {
    let mut variants: Vec<String> = Vec::new();
    let mut sizes: Vec<u64> = Vec::new();
    for r in results {
        if !variants.contains(&r.variant) {
            variants.push(r.variant.clone());
        }
        if !sizes.contains(&r.size_bytes) {
            sizes.push(r.size_bytes);
        }
    }
    sizes.sort_unstable();
    (variants, sizes)
}

/// Draws every figure of one run into `dir` (created if missing), file names starting with
/// `stem`; `title` heads each figure. Returns the figures written.
pub fn plot_run(
    results: &[RunResult],
    samples: &[RunSamples],
    dir: &Path,
    stem: &str,
    title: &str,
) -> Result<Vec<Figure>> {
    std::fs::create_dir_all(dir).map_err(|source| Error::Io {
        path: dir.to_path_buf(),
        action: "create the plot directory",
        source,
    })?;
    let stem = file_stem(stem);
    let mut out = Vec::new();
    let (variants, sizes) = variants_and_sizes(results);
    let specs = [
        (
            FigureKind::Goodput,
            "goodput",
            "goodput",
            "goodput (Mbit/s)",
            false,
            (|r: &RunResult| r.goodput_bps / 1e6) as fn(&RunResult) -> f64,
        ),
        (
            FigureKind::Completion,
            "completion",
            "completion time",
            "completion time (s, log scale)",
            true,
            |r: &RunResult| r.completion_s,
        ),
    ];
    for (kind, name, caption, y_desc, log, value) in specs {
        let groups: Vec<Vec<Option<BoxStats>>> = sizes
            .iter()
            .map(|&size| {
                variants
                    .iter()
                    .map(|v| {
                        BoxStats::new(
                            results
                                .iter()
                                .filter(|r| r.size_bytes == size && &r.variant == v)
                                .map(value)
                                .filter(|x| !log || *x > 0.0),
                        )
                    })
                    .collect()
            })
            .collect();
        if groups.iter().flatten().all(Option::is_none) {
            continue;
        }
        let spec = BoxFigure {
            title: format!("{title}: {caption} per transfer size"),
            y_desc,
            log,
            variants: &variants,
            sizes: &sizes,
            groups: &groups,
        };
        let width = box_plot_width(sizes.len(), variants.len());
        let figure = write_both(dir, &format!("{stem}-{name}"), (width, HEIGHT), &spec)?;
        out.push(Figure {
            kind,
            title: spec.title,
            svg: figure.0,
            png: figure.1,
        });
    }
    out.extend(crate::plot_lines::throughput_figures(
        samples, &variants, dir, &stem, title,
    )?);
    out.extend(crate::plot_lines::latency_cdf_figure(
        samples, &variants, dir, &stem, title,
    )?);
    Ok(out)
}

fn box_plot_width(n_sizes: usize, n_variants: usize) -> u32 {
    let boxes = (n_sizes.max(1) * n_variants.max(1)) as u32;
    (boxes.saturating_mul(34).saturating_add(160)).clamp(640, 4000) + LEGEND_W
}

/// `s` reduced to characters safe in a file name and a URL: ASCII letters, digits, `-`, `_`
/// and `.` (not leading); everything else becomes `_`.
pub fn file_stem(s: &str) -> String {
    let t: String = s
        .chars()
        .take(80)
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let t = t.trim_start_matches('.').to_string();
    if t.is_empty() {
        "_".to_string()
    } else {
        t
    }
}

/// One box-plot figure: `groups[size][variant]`.
struct BoxFigure<'a> {
    title: String,
    y_desc: &'a str,
    log: bool,
    variants: &'a [String],
    sizes: &'a [u64],
    groups: &'a [Vec<Option<BoxStats>>],
}

impl BoxFigure<'_> {
    /// The y range: from 0 (linear) or a bit under the smallest value (log) to a bit over the
    /// largest.
    fn y_range(&self) -> (f64, f64) {
        let all = self.groups.iter().flatten().flatten();
        let lo = all.clone().map(|b| b.min).fold(f64::INFINITY, f64::min);
        let hi = all.map(|b| b.max).fold(f64::NEG_INFINITY, f64::max);
        if self.log {
            let (lo, hi) = if lo.is_finite() && hi.is_finite() && lo > 0.0 {
                (lo, hi)
            } else {
                (1e-3, 1.0)
            };
            if hi / lo < 1.5 {
                (lo / 1.5, hi * 1.5)
            } else {
                (lo / 1.2, hi * 1.2)
            }
        } else {
            let lo = if lo.is_finite() { lo.min(0.0) } else { 0.0 };
            let hi = if hi.is_finite() && hi > lo {
                hi
            } else {
                lo + 1.0
            };
            (lo, hi + (hi - lo) * 0.08)
        }
    }

    fn fill<DB: DrawingBackend, Y: Ranged<ValueType = f64>>(
        &self,
        chart: &mut ChartContext<'_, DB, Cartesian2d<RangedCoordf64, Y>>,
        plot: &DrawingArea<DB, Shift>,
        (y_lo, y_hi): (f64, f64),
    ) -> Result<(), String> {
        let nv = self.variants.len().max(1) as f64;
        let slot = 0.84 / nv;
        let half = slot * 0.36;
        // Separators between sizes.
        chart
            .draw_series((1..self.sizes.len()).map(|g| {
                PathElement::new(
                    vec![(g as f64, y_lo), (g as f64, y_hi)],
                    RGBColor(0xcc, 0xcc, 0xcc).stroke_width(1),
                )
            }))
            .map_err(err_text)?;
        for (g, boxes) in self.groups.iter().enumerate() {
            for (v, b) in boxes.iter().enumerate() {
                let Some(b) = b else { continue };
                let c = colour(v);
                let x = g as f64 + 0.08 + slot * (v as f64 + 0.5);
                let (x0, x1) = (x - half, x + half);
                chart
                    .draw_series([
                        Rectangle::new([(x0, b.q3), (x1, b.q1)], c.mix(0.35).filled()),
                        Rectangle::new([(x0, b.q3), (x1, b.q1)], c.stroke_width(1)),
                    ])
                    .map_err(err_text)?;
                let cap = half * 0.6;
                chart
                    .draw_series([
                        PathElement::new(vec![(x, b.q3), (x, b.whisker_hi)], c.stroke_width(1)),
                        PathElement::new(vec![(x, b.q1), (x, b.whisker_lo)], c.stroke_width(1)),
                        PathElement::new(
                            vec![(x - cap, b.whisker_hi), (x + cap, b.whisker_hi)],
                            c.stroke_width(1),
                        ),
                        PathElement::new(
                            vec![(x - cap, b.whisker_lo), (x + cap, b.whisker_lo)],
                            c.stroke_width(1),
                        ),
                        PathElement::new(
                            vec![(x0, b.median), (x1, b.median)],
                            BLACK.stroke_width(2),
                        ),
                    ])
                    .map_err(err_text)?;
                chart
                    .draw_series(
                        b.outliers
                            .iter()
                            .map(|&o| Circle::new((x, o), 3, c.stroke_width(1))),
                    )
                    .map_err(err_text)?;
            }
        }
        // Size names under each group.
        let base = plot.get_base_pixel();
        let style = ("sans-serif", 15)
            .into_font()
            .into_text_style(plot)
            .pos(Pos::new(HPos::Center, VPos::Top));
        for (g, &size) in self.sizes.iter().enumerate() {
            let (px, py) = chart.backend_coord(&(g as f64 + 0.5, y_lo));
            plot.draw(&Text::new(
                crate::format::size(size),
                (px - base.0, py - base.1 + 8),
                style.clone(),
            ))
            .map_err(err_text)?;
        }
        Ok(())
    }
}

impl Draw for BoxFigure<'_> {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String> {
        root.fill(&WHITE).map_err(err_text)?;
        let (w, _) = root.dim_in_pixel();
        let (plot, legend) = root.split_horizontally(w.saturating_sub(LEGEND_W));
        let entries: Vec<(String, usize)> = self
            .variants
            .iter()
            .enumerate()
            .map(|(i, v)| (v.clone(), i))
            .collect();
        draw_legend(&legend, &entries)?;
        let (lo, hi) = self.y_range();
        let n = self.sizes.len().max(1) as f64;
        let mut builder = ChartBuilder::on(&plot);
        builder
            .caption(shorten(&self.title, 90), ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(56)
            .y_label_area_size(72);
        if self.log {
            let mut chart = builder
                .build_cartesian_2d(
                    0f64..n,
                    (lo..hi)
                        .log_scale()
                        .with_key_points(log_ticks(lo, hi, &[1.0, 2.0, 5.0]))
                        .with_light_points(log_ticks(lo, hi, &LIGHT_MANTISSAS)),
                )
                .map_err(err_text)?;
            chart
                .configure_mesh()
                .disable_x_mesh()
                .x_labels(0)
                .x_desc("transfer size")
                .y_desc(self.y_desc)
                .y_label_formatter(&|v| tick(*v))
                .draw()
                .map_err(err_text)?;
            self.fill(&mut chart, &plot, (lo, hi))
        } else {
            let mut chart = builder
                .build_cartesian_2d(0f64..n, lo..hi)
                .map_err(err_text)?;
            chart
                .configure_mesh()
                .disable_x_mesh()
                .x_labels(0)
                .x_desc("transfer size")
                .y_desc(self.y_desc)
                .y_label_formatter(&|v| tick(*v))
                .draw()
                .map_err(err_text)?;
            self.fill(&mut chart, &plot, (lo, hi))
        }
    }
}
