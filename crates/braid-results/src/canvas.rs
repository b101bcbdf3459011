//! The drawing kit the figures share: the embedded font, the colours, the figure size and
//! legend, axis ticks, and writing one drawing as both SVG and PNG.
//!
//! Owns: `Figure` and `FigureKind` (what was written), the palette, the font registration
//! and `write_both`. Must not touch: what any figure shows (`plot.rs`, `plot_lines.rs`), the
//! database or HTML. The same drawing gives byte-identical files.

use crate::{Error, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
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
