//! Line figures of one run: throughput over time per transfer size, and the distribution
//! (CDF) of the latency probe's round trips under load per variant.
//!
//! Owns: those two figures. Must not touch: the shared drawing helpers, colours and file
//! writing (in `canvas.rs`), the database, HTML.

use crate::canvas::{
    colour, draw_legend, err_text, log_ticks, shorten, tick, write_both, Draw, Figure, FigureKind,
    HEIGHT, LEGEND_W, LIGHT_MANTISSAS,
};
use crate::{Result, RunSamples};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;

/// Points drawn per CDF curve at most (quantiles of the samples), so that long runs give
/// small files.
const CDF_POINTS: usize = 1000;

/// A throughput-over-time figure per transfer size that has samples.
pub(crate) fn throughput_figures(
    samples: &[RunSamples],
    variants: &[String],
    dir: &Path,
    stem: &str,
    title: &str,
) -> Result<Vec<Figure>> {
    let mut out = Vec::new();
    for size in sizes_with_samples(samples) {
        let sets: Vec<&RunSamples> = samples
            .iter()
            .filter(|s| s.size_bytes == size && s.interval_s.is_finite() && s.interval_s > 0.0)
            .filter(|s| s.throughput_bps.iter().any(|v| v.is_finite()))
            .collect();
        if sets.is_empty() {
            continue;
        }
        let mut names: Vec<String> = variants.to_vec();
        for s in &sets {
            if !names.contains(&s.variant) {
                names.push(s.variant.clone());
            }
        }
        let fig_title = format!(
            "{title}: throughput over time, {}",
            crate::format::size(size)
        );
        let fig = ThroughputFigure {
            title: &fig_title,
            names: &names,
            sets: &sets,
        };
        let figure = write_both(
            dir,
            &format!("{stem}-throughput-{size}"),
            (960 + LEGEND_W, HEIGHT),
            &fig,
        )?;
        out.push(Figure {
            kind: FigureKind::Throughput,
            title: fig_title,
            svg: figure.0,
            png: figure.1,
        });
    }
    Ok(out)
}

fn sizes_with_samples(samples: &[RunSamples]) -> Vec<u64> {
    let mut sizes: Vec<u64> = samples.iter().map(|s| s.size_bytes).collect();
    sizes.sort_unstable();
    sizes.dedup();
    sizes
}

/// One figure: the CDF of every variant's loaded probe round trips (all its transfers
/// together); `None` when no transfer has an answered probe. A lost probe counts as
/// infinitely late: the curve of a variant that lost probes ends below 1 by its loss.
pub(crate) fn latency_cdf_figure(
    samples: &[RunSamples],
    variants: &[String],
    dir: &Path,
    stem: &str,
    title: &str,
) -> Result<Option<Figure>> {
    let mut names: Vec<String> = variants.to_vec();
    for s in samples {
        if !names.contains(&s.variant) {
            names.push(s.variant.clone());
        }
    }
    let curves: Vec<(usize, Vec<(f64, f64)>)> = names
        .iter()
        .enumerate()
        .filter_map(|(i, v)| {
            let rtts = samples
                .iter()
                .filter(|s| &s.variant == v)
                .flat_map(|s| s.probe_rtt_s.iter().copied());
            cdf_points(rtts).map(|c| (i, c))
        })
        .collect();
    if curves.is_empty() {
        return Ok(None);
    }
    let fig_title = format!("{title}: latency under load (probe round trips, CDF)");
    let fig = CdfFigure {
        title: &fig_title,
        names: &names,
        curves: &curves,
    };
    let (svg, png) = write_both(
        dir,
        &format!("{stem}-latency-cdf"),
        (960 + LEGEND_W, HEIGHT),
        &fig,
    )?;
    Ok(Some(Figure {
        kind: FigureKind::LatencyCdf,
        title: fig_title,
        svg,
        png,
    }))
}

/// The empirical CDF of round trips (seconds; infinite: lost) as (milliseconds, fraction)
/// steps, at most [`CDF_POINTS`] of them; `None` without a finite positive value. NaN is
/// left out entirely.
pub fn cdf_points(rtts_s: impl IntoIterator<Item = f64>) -> Option<Vec<(f64, f64)>> {
    let all: Vec<f64> = rtts_s.into_iter().filter(|v| !v.is_nan()).collect();
    let n = all.len();
    let mut ms: Vec<f64> = all
        .iter()
        .filter(|v| v.is_finite() && **v > 0.0)
        .map(|v| v * 1e3)
        .collect();
    if ms.is_empty() {
        return None;
    }
    ms.sort_by(f64::total_cmp);
    let step = ms.len().div_ceil(CDF_POINTS).max(1);
    let mut pts: Vec<(f64, f64)> = Vec::with_capacity(CDF_POINTS + 2);
    pts.push((ms[0], 0.0));
    for (i, &x) in ms.iter().enumerate() {
        if (i + 1) % step == 0 || i + 1 == ms.len() {
            pts.push((x, (i + 1) as f64 / n as f64));
        }
    }
    Some(pts)
}

/// The loaded-latency CDF: a curve per variant, log-scale round trip.
struct CdfFigure<'a> {
    title: &'a str,
    names: &'a [String],
    curves: &'a [(usize, Vec<(f64, f64)>)],
}

impl Draw for CdfFigure<'_> {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String> {
        root.fill(&WHITE).map_err(err_text)?;
        let (w, _) = root.dim_in_pixel();
        let (plot, legend) = root.split_horizontally(w.saturating_sub(LEGEND_W));
        let entries: Vec<(String, usize)> = self
            .curves
            .iter()
            .map(|(i, _)| (self.names[*i].clone(), *i))
            .collect();
        draw_legend(&legend, &entries)?;
        let xs = self.curves.iter().flat_map(|(_, c)| c.iter().map(|p| p.0));
        let lo = xs.clone().fold(f64::INFINITY, f64::min);
        let hi = xs.fold(0.0, f64::max);
        let (lo, hi) = if hi / lo < 2.0 {
            (lo / 1.5, hi * 1.5)
        } else {
            (lo / 1.1, hi * 1.1)
        };
        let mut chart = ChartBuilder::on(&plot)
            .caption(shorten(self.title, 90), ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(48)
            .y_label_area_size(72)
            .build_cartesian_2d(
                (lo..hi)
                    .log_scale()
                    .with_key_points(log_ticks(lo, hi, &[1.0, 2.0, 5.0]))
                    .with_light_points(log_ticks(lo, hi, &LIGHT_MANTISSAS)),
                0f64..1.0,
            )
            .map_err(err_text)?;
        chart
            .configure_mesh()
            .x_desc("round trip under load (ms, log scale)")
            .y_desc("fraction of probe packets")
            .x_label_formatter(&|v| tick(*v))
            .y_label_formatter(&|v| tick(*v))
            .draw()
            .map_err(err_text)?;
        for (i, pts) in self.curves {
            // Steps: each value holds its fraction until the next value.
            let mut steps = Vec::with_capacity(pts.len() * 2);
            for w in pts.windows(2) {
                steps.push(w[0]);
                steps.push((w[1].0, w[0].1));
            }
            steps.extend(pts.last().copied());
            chart
                .draw_series(LineSeries::new(steps, colour(*i).stroke_width(2)))
                .map_err(err_text)?;
        }
        Ok(())
    }
}

/// Throughput over time for one size: a line per transfer, coloured by variant; the first
/// repetition of each variant strong, the others light.
struct ThroughputFigure<'a> {
    title: &'a str,
    names: &'a [String],
    sets: &'a [&'a RunSamples],
}

impl ThroughputFigure<'_> {
    fn colour_index(&self, variant: &str) -> usize {
        self.names.iter().position(|n| n == variant).unwrap_or(0)
    }

    /// The time axis' end and the throughput axis' ends (Mbit/s), from the finite samples.
    fn ranges(&self) -> (f64, f64, f64) {
        let t_max = self
            .sets
            .iter()
            .map(|s| s.interval_s * s.throughput_bps.len() as f64)
            .filter(|t| t.is_finite())
            .fold(0.0, f64::max);
        let t_max = if t_max > 0.0 { t_max } else { 1.0 };
        let y_max = self
            .sets
            .iter()
            .flat_map(|s| s.throughput_bps.iter())
            .filter(|v| v.is_finite())
            .fold(0.0, |m: f64, v| m.max(v / 1e6));
        let y_max = if y_max > 0.0 { y_max * 1.08 } else { 1.0 };
        let y_min = self
            .sets
            .iter()
            .flat_map(|s| s.throughput_bps.iter())
            .filter(|v| v.is_finite())
            .fold(0.0, |m: f64, v| m.min(v / 1e6));
        (t_max, y_min, y_max)
    }
}

impl Draw for ThroughputFigure<'_> {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String> {
        root.fill(&WHITE).map_err(err_text)?;
        let (w, _) = root.dim_in_pixel();
        let (plot, legend) = root.split_horizontally(w.saturating_sub(LEGEND_W));
        let mut entries: Vec<(String, usize)> = Vec::new();
        for s in self.sets {
            if !entries.iter().any(|(n, _)| n == &s.variant) {
                entries.push((s.variant.clone(), self.colour_index(&s.variant)));
            }
        }
        entries.sort_by_key(|(_, c)| *c);
        draw_legend(&legend, &entries)?;

        let (t_max, y_min, y_max) = self.ranges();

        let mut chart = ChartBuilder::on(&plot)
            .caption(shorten(self.title, 90), ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(48)
            .y_label_area_size(72)
            .build_cartesian_2d(0f64..t_max, y_min..y_max)
            .map_err(err_text)?;
        chart
            .configure_mesh()
            .x_desc("time since the request (s)")
            .y_desc("throughput (Mbit/s)")
            .x_label_formatter(&|v| tick(*v))
            .y_label_formatter(&|v| tick(*v))
            .draw()
            .map_err(err_text)?;

        let first_rep = |variant: &str| {
            self.sets
                .iter()
                .filter(|s| s.variant == variant)
                .map(|s| s.repetition)
                .min()
        };
        // Light lines first, so the strong ones stay on top.
        for strong in [false, true] {
            for s in self.sets {
                let is_first = first_rep(&s.variant) == Some(s.repetition);
                if is_first != strong {
                    continue;
                }
                let c = colour(self.colour_index(&s.variant));
                let style = if strong {
                    c.stroke_width(2)
                } else {
                    c.mix(0.3).stroke_width(1)
                };
                for seg in segments(s) {
                    chart
                        .draw_series(LineSeries::new(seg, style))
                        .map_err(err_text)?;
                }
            }
        }
        Ok(())
    }
}

/// A transfer's samples as line segments (time, Mbit/s); a non-finite sample breaks the
/// line.
fn segments(s: &RunSamples) -> Vec<Vec<(f64, f64)>> {
    let mut segment: Vec<(f64, f64)> = Vec::new();
    let mut segments: Vec<Vec<(f64, f64)>> = Vec::new();
    for (i, v) in s.throughput_bps.iter().enumerate() {
        if v.is_finite() {
            segment.push(((i as f64 + 0.5) * s.interval_s, v / 1e6));
        } else if !segment.is_empty() {
            segments.push(std::mem::take(&mut segment));
        }
    }
    if !segment.is_empty() {
        segments.push(segment);
    }
    segments
}
