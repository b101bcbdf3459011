//! Figures of one run: box plots per transfer size and variant; through [`crate::plot_lines`],
//! throughput over time and the loaded-latency CDF.
//!
//! Owns: drawing PNG and SVG files. Must not touch: the database, HTML, statistics beyond
//! calling [`crate::stats`]. Every figure is written twice from the same drawing code, as
//! `NAME.svg` and `NAME.png`; the same data gives byte-identical files. Text uses a subset of
//! DejaVu Sans embedded in the crate (see `assets/FONT-LICENSE.txt`), so no system font is
//! needed. Non-finite values are left out of the plots; a figure with nothing to show is not
//! written.

use crate::stats::BoxStats;
use crate::{Error, Result, RunSamples};
use braid_sim::RunResult;
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// DejaVu Sans, Latin-1 only (21 KB).
static FONT: &[u8] = include_bytes!("../assets/DejaVuSans-subset.ttf");

/// Categorical colours (Tableau 10), one per variant in order of first appearance.
const PALETTE: [RGBColor; 10] = [
    RGBColor(0x4e, 0x79, 0xa7),
    RGBColor(0xf2, 0x8e, 0x2b),
    RGBColor(0xe1, 0x57, 0x59),
    RGBColor(0x76, 0xb7, 0xb2),
    RGBColor(0x59, 0xa1, 0x4f),
    RGBColor(0xed, 0xc9, 0x48),
    RGBColor(0xb0, 0x7a, 0xa1),
    RGBColor(0xff, 0x9d, 0xa7),
    RGBColor(0x9c, 0x75, 0x5f),
    RGBColor(0xba, 0xb0, 0xac),
];

pub(crate) const HEIGHT: u32 = 520;
pub(crate) const LEGEND_W: u32 = 210;

/// What a figure shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FigureKind {
    /// Box plots of goodput per size and variant.
    Goodput,
    /// Box plots of completion time per size and variant (log axis).
    Completion,
    /// Throughput over time per variant, for one size.
    Throughput,
    /// The distribution of the latency probe's round trips under load, per variant.
    LatencyCdf,
}

/// One figure, written as SVG and PNG.
#[derive(Debug, Clone, PartialEq)]
pub struct Figure {
    /// What it shows.
    pub kind: FigureKind,
    /// Its caption.
    pub title: String,
    /// The SVG file.
    pub svg: PathBuf,
    /// The PNG file.
    pub png: PathBuf,
}

pub(crate) fn colour(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

fn register_font() -> std::result::Result<(), String> {
    static OK: OnceLock<bool> = OnceLock::new();
    let ok = *OK.get_or_init(|| {
        plotters::style::register_font("sans-serif", FontStyle::Normal, FONT).is_ok()
    });
    if ok {
        Ok(())
    } else {
        Err("the embedded font could not be loaded".to_string())
    }
}

/// Short enough for a legend.
pub(crate) fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(max.saturating_sub(1)).collect();
        t.push('…');
        t
    }
}

/// An axis tick: three significant digits, no exponent for ordinary magnitudes.
pub(crate) fn tick(v: f64) -> String {
    let a = v.abs();
    if a == 0.0 {
        "0".to_string()
    } else if !(1e-3..1e6).contains(&a) {
        format!("{v:.0e}")
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        trim(format!("{v:.1}"))
    } else if a >= 1.0 {
        trim(format!("{v:.2}"))
    } else {
        trim(format!("{v:.3}"))
    }
}

fn trim(s: String) -> String {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

pub(crate) const LIGHT_MANTISSAS: [f64; 9] = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0];

/// Ticks of a log axis: each mantissa times each power of ten, inside `[lo, hi]`; every
/// mantissa 1–9 when that gives fewer than three.
pub(crate) fn log_ticks(lo: f64, hi: f64, mantissas: &[f64]) -> Vec<f64> {
    if !(lo.is_finite() && hi.is_finite() && lo > 0.0 && hi > lo) {
        return Vec::new();
    }
    let first = lo.log10().floor() as i32;
    let last = (hi.log10().ceil() as i32).min(first + 40);
    let make = |ms: &[f64]| -> Vec<f64> {
        (first..=last)
            .flat_map(|e| ms.iter().map(move |m| m * 10f64.powi(e)))
            .filter(|v| (lo..=hi).contains(v))
            .collect()
    };
    let ticks = make(mantissas);
    if ticks.len() < 3 && mantissas.len() < LIGHT_MANTISSAS.len() {
        make(&LIGHT_MANTISSAS)
    } else {
        ticks
    }
}

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

/// Something drawn the same way on any backend.
pub(crate) trait Draw {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String>;
}

pub(crate) fn err_text<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}

/// Writes `dir/NAME.svg` and `dir/NAME.png` from the same drawing.
pub(crate) fn write_both<D: Draw>(
    dir: &Path,
    name: &str,
    size: (u32, u32),
    fig: &D,
) -> Result<(PathBuf, PathBuf)> {
    let svg = dir.join(format!("{name}.svg"));
    let png = dir.join(format!("{name}.png"));
    let plot_err = |path: &Path| {
        let path = path.to_path_buf();
        move |message: String| Error::Plot { path, message }
    };
    register_font().map_err(plot_err(&svg))?;
    {
        let root = SVGBackend::new(&svg, size).into_drawing_area();
        fig.draw(&root).map_err(plot_err(&svg))?;
        root.present().map_err(err_text).map_err(plot_err(&svg))?;
    }
    {
        let root = BitMapBackend::new(&png, size).into_drawing_area();
        fig.draw(&root).map_err(plot_err(&png))?;
        root.present().map_err(err_text).map_err(plot_err(&png))?;
    }
    Ok((svg, png))
}

/// A column of coloured squares and names.
pub(crate) fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    entries: &[(String, usize)],
) -> Result<(), String> {
    let row = 22;
    let max_rows = ((HEIGHT as i32 - 60) / row).max(1) as usize;
    for (i, (name, c)) in entries.iter().enumerate().take(max_rows) {
        let y = 50 + i as i32 * row;
        let last = i + 1 == max_rows && entries.len() > max_rows;
        if last {
            let more = format!("… {} more", entries.len() - i);
            area.draw(&Text::new(more, (10, y), ("sans-serif", 14).into_font()))
                .map_err(err_text)?;
            break;
        }
        area.draw(&Rectangle::new(
            [(10, y), (24, y + 14)],
            colour(*c).filled(),
        ))
        .map_err(err_text)?;
        area.draw(&Text::new(
            shorten(name, 24),
            (30, y),
            ("sans-serif", 14).into_font(),
        ))
        .map_err(err_text)?;
    }
    Ok(())
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
