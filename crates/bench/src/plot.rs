//! Latency CDF plots (SVG) with a zoomed tail panel.

use std::path::Path;

use plotters::prelude::*;
use ptsd_ftl::stats::CdfPoint;

use thiserror::Error;

/// A plot could not be drawn or written.
#[derive(Debug, Error)]
#[error("plotting {path}: {message}")]
pub struct PlotError {
    pub path: String,
    pub message: String,
}

/// One named CDF curve.
#[derive(Clone, Copy, Debug)]
pub struct Curve<'a> {
    pub label: &'a str,
    pub points: &'a [CdfPoint],
}

fn plot_err<E: std::fmt::Display>(path: &Path) -> impl FnOnce(E) -> PlotError + '_ {
    move |e| PlotError {
        path: path.display().to_string(),
        message: e.to_string(),
    }
}

/// Write an SVG with two panels: the whole CDF (log latency axis) and the
/// same curves from quantile `zoom_from` (e.g. 0.8) up.
pub fn write_cdf_svg(
    path: &Path,
    title: &str,
    x_label: &str,
    curves: &[Curve<'_>],
    zoom_from: f64,
) -> Result<(), PlotError> {
    let err = plot_err(path);
    let root = SVGBackend::new(path, (1400, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_err(path))?;
    let root = root
        .titled(title, ("sans-serif", 22))
        .map_err(plot_err(path))?;
    let (left, right) = root.split_horizontally(700);
    draw_panel(&left, "whole distribution", x_label, curves, 0.0).map_err(plot_err(path))?;
    draw_panel(
        &right,
        &format!("tail, from p{:.0}", zoom_from * 100.0),
        x_label,
        curves,
        zoom_from,
    )
    .map_err(plot_err(path))?;
    root.present().map_err(err)
}

type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;

fn draw_panel(
    area: &Area<'_>,
    caption: &str,
    x_label: &str,
    curves: &[Curve<'_>],
    from_q: f64,
) -> Result<(), Box<dyn std::error::Error>> {
    // The x range covers the part of each curve at or above `from_q`.
    let mut x_min = f64::INFINITY;
    let mut x_max = 0.0f64;
    for c in curves {
        // The whole-distribution panel starts at p0.1: a handful of reads
        // served from DRAM in a microsecond would otherwise stretch the
        // axis over decades nobody looks at.
        let first = c
            .points
            .iter()
            .position(|p| p.quantile >= from_q.max(0.001))
            .unwrap_or(c.points.len());
        // In the zoom, start at the point before the cut, so the curve
        // enters the panel at its bottom edge.
        let start = if from_q > 0.0 {
            first.saturating_sub(1)
        } else {
            first
        };
        for p in &c.points[start..] {
            x_min = x_min.min(p.latency_us);
            x_max = x_max.max(p.latency_us);
        }
    }
    if !x_min.is_finite() || x_max <= 0.0 {
        x_min = 1.0;
        x_max = 10.0;
    }
    let x_min = (x_min * 0.9).max(0.1);
    let x_max = (x_max * 1.1).max(x_min * 2.0);
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 18))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d((x_min..x_max).log_scale(), from_q..1.0)?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc("fraction of requests")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y:.2}"))
        .draw()?;
    for (i, c) in curves.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let points = c
            .points
            .iter()
            .map(|p| (p.latency_us.max(x_min), p.quantile.max(from_q)));
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))?
            .label(c.label)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_an_svg_with_every_curve() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cdf.svg");
        let a: Vec<CdfPoint> = (1..=100)
            .map(|i| CdfPoint {
                latency_us: 100.0 + i as f64,
                quantile: i as f64 / 100.0,
            })
            .collect();
        let b: Vec<CdfPoint> = a
            .iter()
            .map(|p| CdfPoint {
                latency_us: p.latency_us * 3.0,
                ..*p
            })
            .collect();
        let curves = [
            Curve {
                label: "ALPHA",
                points: &a,
            },
            Curve {
                label: "BETA",
                points: &b,
            },
            Curve {
                label: "EMPTY",
                points: &[],
            },
        ];
        write_cdf_svg(&path, "test", "latency (µs)", &curves, 0.8).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.starts_with("<svg"));
        for label in ["ALPHA", "BETA", "EMPTY", "tail, from p80"] {
            assert!(svg.contains(label), "{label} missing");
        }
    }
}
