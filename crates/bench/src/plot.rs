//! Latency CDF plots (SVG) with a zoomed tail panel, and the legend every
//! plot of the project draws: in a column of its own right of the panels,
//! never over the data.

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

/// Font size of legend labels, in pixels.
const LEGEND_FONT: u32 = 14;
/// Height of one legend entry.
const LEGEND_ROW: u32 = 20;
/// The coloured swatch before a label, and the gap after it.
const LEGEND_SWATCH: u32 = 24;

/// Where a plot's legend goes: a column `width` pixels wide whose left edge
/// is `left`, right of every panel (so no entry ever covers data), and the
/// picture's size that leaves the panels the `plot` size they would have
/// had without it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LegendLayout {
    pub left: u32,
    pub width: u32,
    pub size: (u32, u32),
}

impl LegendLayout {
    /// The layout for panels of `plot` size and these labels.
    ///
    /// ```
    /// use ptsd_bench::plot::LegendLayout;
    ///
    /// let l = LegendLayout::beside((900, 560), &["ftl=dftl qd=8", "ftl=ptsd qd=8"]);
    /// assert_eq!(l.left, 900);
    /// assert_eq!(l.size.0, 900 + l.width);
    /// ```
    pub fn beside(plot: (u32, u32), labels: &[&str]) -> Self {
        // Sans-serif averages well under 0.6 em a character; wider is
        // only blank space.
        let chars = labels.iter().map(|l| l.chars().count()).max().unwrap_or(0) as u32;
        let width = 2 * 10 + LEGEND_SWATCH + chars * LEGEND_FONT * 6 / 10;
        let rows = 2 * 30 + labels.len() as u32 * LEGEND_ROW;
        LegendLayout {
            left: plot.0,
            width,
            size: (plot.0 + width, plot.1.max(rows)),
        }
    }
}

/// One legend entry: a label and its series' colour (see [`draw_legend`]).
pub type LegendEntry<'a> = (&'a str, RGBAColor);

/// Draw `entries` top-down in `area` (the legend column of a
/// [`LegendLayout`]), each a colour swatch and its label.
///
/// ```
/// use plotters::prelude::*;
/// use ptsd_bench::plot::{draw_legend, LegendLayout};
///
/// let layout = LegendLayout::beside((400, 300), &["dftl", "ptsd"]);
/// let mut svg = String::new();
/// {
///     let root = SVGBackend::with_string(&mut svg, layout.size).into_drawing_area();
///     let (_chart, legend) = root.split_horizontally(layout.left);
///     draw_legend(&legend, &[("dftl", RED.to_rgba()), ("ptsd", BLUE.to_rgba())]).unwrap();
///     root.present().unwrap();
/// }
/// assert!(svg.contains("dftl") && svg.contains("ptsd"));
/// ```
pub fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    entries: &[LegendEntry<'_>],
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let (x, top) = (10i32, 30i32);
    for (n, (label, color)) in entries.iter().enumerate() {
        let y = top + (n as u32 * LEGEND_ROW) as i32;
        area.draw(&Rectangle::new(
            [(x, y + 5), (x + LEGEND_SWATCH as i32 - 6, y + 9)],
            color.filled(),
        ))?;
        area.draw(&Text::new(
            label.to_string(),
            (x + LEGEND_SWATCH as i32, y),
            ("sans-serif", LEGEND_FONT).into_font(),
        ))?;
    }
    Ok(())
}

/// Write an SVG with two panels: the whole CDF (log latency axis) and the
/// same curves from quantile `zoom_from` (e.g. 0.8) up; the legend in a
/// column right of both.
pub fn write_cdf_svg(
    path: &Path,
    title: &str,
    x_label: &str,
    curves: &[Curve<'_>],
    zoom_from: f64,
) -> Result<(), PlotError> {
    let err = plot_err(path);
    let labels: Vec<&str> = curves.iter().map(|c| c.label).collect();
    let layout = LegendLayout::beside((1400, 560), &labels);
    let root = SVGBackend::new(path, layout.size).into_drawing_area();
    root.fill(&WHITE).map_err(plot_err(path))?;
    let root = root
        .titled(title, ("sans-serif", 22))
        .map_err(plot_err(path))?;
    let (panels, legend) = root.split_horizontally(layout.left);
    let entries: Vec<LegendEntry<'_>> = curves
        .iter()
        .enumerate()
        .map(|(i, c)| (c.label, Palette99::pick(i).to_rgba()))
        .collect();
    draw_legend(&legend, &entries).map_err(plot_err(path))?;
    let (left, right) = panels.split_horizontally(700);
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
        chart.draw_series(LineSeries::new(points, color.stroke_width(2)))?;
    }
    Ok(())
}

/// For tests of plots: the x coordinates of every data mark of an SVG
/// (polyline points and circle centres), and the x of the `<text>` element
/// that is exactly `label`, if any.
#[cfg(test)]
pub(crate) mod svg_probe {
    /// Every x of a `points="x,y x,y"` list and of `cx="x"`.
    pub fn data_xs(svg: &str) -> Vec<f64> {
        let mut xs = Vec::new();
        for part in svg.split("points=\"").skip(1) {
            let list = part.split('"').next().unwrap_or("");
            xs.extend(
                list.split_whitespace()
                    .filter_map(|p| p.split(',').next()?.parse::<f64>().ok()),
            );
        }
        for part in svg.split("cx=\"").skip(1) {
            xs.extend(part.split('"').next().and_then(|x| x.parse::<f64>().ok()));
        }
        xs
    }

    /// The x of the text element reading `label`.
    pub fn label_x(svg: &str, label: &str) -> Option<f64> {
        svg.split("<text").skip(1).find_map(|element| {
            let (attrs, rest) = element.split_once('>')?;
            let (inner, _) = rest.split_once("</text>")?;
            if inner.trim() != label {
                return None;
            }
            attrs.split(" x=\"").nth(1)?.split('"').next()?.parse().ok()
        })
    }
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
        // The legend is right of every data point of both panels.
        let layout = LegendLayout::beside((1400, 560), &["ALPHA", "BETA", "EMPTY"]);
        let data = svg_probe::data_xs(&svg);
        assert!(data.len() > 200, "{} data marks", data.len());
        let rightmost = data.iter().copied().fold(0.0, f64::max);
        for label in ["ALPHA", "BETA", "EMPTY"] {
            let x = svg_probe::label_x(&svg, label).unwrap();
            assert!(
                x > layout.left as f64 && x > rightmost,
                "{label} at x={x}, data up to {rightmost}"
            );
        }
    }

    #[test]
    fn the_legend_column_fits_its_labels() {
        let short = LegendLayout::beside((900, 560), &["a"]);
        let long =
            LegendLayout::beside((900, 560), &["ftl=dftl map-memory=10% sched=read-priority"]);
        assert!(long.width > short.width + 200, "{short:?} {long:?}");
        assert_eq!((long.left, long.size.0), (900, 900 + long.width));
        // Many entries make the picture taller, never the panels smaller.
        let many: Vec<String> = (0..60).map(|i| format!("series {i}")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        let tall = LegendLayout::beside((900, 560), &many);
        assert!(tall.size.1 >= 60 * LEGEND_ROW, "{tall:?}");
    }
}
