//! A merged sweep's figures against each axis: one line per combination of
//! the other axes, the axis' values (in sweep order) along x.

use std::path::{Path, PathBuf};

use plotters::prelude::*;

use super::merge::{MergeReport, Summary};
use super::{value_text, SweepError};
use crate::plot::{draw_legend, LegendEntry, LegendLayout, PlotError};

/// `throughput_vs_<axis>.svg` and `tail_vs_<axis>.svg` for every axis with
/// more than one value.
pub(super) fn write_axis_plots(
    report: &MergeReport,
    out: &Path,
) -> Result<Vec<PathBuf>, SweepError> {
    let summaries: Vec<Summary> = report
        .runs
        .iter()
        .map(|r| Summary::of(&r.result).unwrap_or_default())
        .collect();
    // Read tails where the runs read at all, else write tails.
    let reads = summaries.iter().any(|s| s.read_p999_us > 0.0);
    let (tail_name, tail): (&str, fn(&Summary) -> f64) = if reads {
        ("read p99.9 latency (us)", |s| s.read_p999_us)
    } else {
        ("write p99 latency (us)", |s| s.write_p99_us)
    };
    let mut written = Vec::new();
    for axis in &report.axes {
        let mut xs: Vec<String> = Vec::new();
        // (label of the other axes' values, points (x position, summary index)).
        let mut series: Vec<(String, Vec<(usize, usize)>)> = Vec::new();
        for (i, run) in report.runs.iter().enumerate() {
            let Some(v) = run.options.get(axis) else {
                continue;
            };
            let x = value_text(v);
            let pos = xs.iter().position(|s| *s == x).unwrap_or_else(|| {
                xs.push(x);
                xs.len() - 1
            });
            let rest: Vec<String> = report
                .axes
                .iter()
                .filter(|a| *a != axis)
                .filter_map(|a| run.options.get(a).map(|v| format!("{a}={}", value_text(v))))
                .collect();
            let label = if rest.is_empty() {
                "all".to_string()
            } else {
                rest.join(" ")
            };
            match series.iter_mut().find(|(l, _)| *l == label) {
                Some((_, pts)) => pts.push((pos, i)),
                None => series.push((label, vec![(pos, i)])),
            }
        }
        if xs.len() < 2 {
            continue;
        }
        for (file, y_name, metric) in [
            (
                format!("throughput_vs_{axis}.svg"),
                "IOPS",
                (|s: &Summary| s.iops) as fn(&Summary) -> f64,
            ),
            (format!("tail_vs_{axis}.svg"), tail_name, tail),
        ] {
            let path = out.join(file);
            draw(&path, axis, y_name, &xs, &series, &summaries, metric).map_err(|e| PlotError {
                path: path.display().to_string(),
                message: e.to_string(),
            })?;
            written.push(path);
        }
    }
    Ok(written)
}

fn draw(
    path: &Path,
    axis: &str,
    y_name: &str,
    xs: &[String],
    series: &[(String, Vec<(usize, usize)>)],
    summaries: &[Summary],
    metric: fn(&Summary) -> f64,
) -> Result<(), Box<dyn std::error::Error>> {
    let y_max = summaries.iter().map(metric).fold(0.0f64, f64::max).max(1.0) * 1.1;
    // The legend in a column of its own: inside the chart it covered the
    // top-right points.
    let labels: Vec<&str> = series.iter().map(|(l, _)| l.as_str()).collect();
    let layout = LegendLayout::beside((900, 560), &labels);
    let root = SVGBackend::new(path, layout.size).into_drawing_area();
    root.fill(&WHITE)?;
    let (plot, legend) = root.split_horizontally(layout.left);
    let entries: Vec<LegendEntry<'_>> = labels
        .iter()
        .enumerate()
        .map(|(n, l)| (*l, Palette99::pick(n).to_rgba()))
        .collect();
    draw_legend(&legend, &entries)?;
    let mut chart = ChartBuilder::on(&plot)
        .caption(format!("{y_name} against {axis}"), ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(-0.5f64..(xs.len() as f64 - 0.5), 0.0..y_max)?;
    chart
        .configure_mesh()
        .x_desc(axis)
        .y_desc(y_name)
        .x_labels(xs.len())
        .x_label_formatter(&|x| {
            let i = x.round();
            if (x - i).abs() < 1e-6 && i >= 0.0 {
                xs.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .draw()?;
    for (n, (_, points)) in series.iter().enumerate() {
        let color = Palette99::pick(n).to_rgba();
        let pts: Vec<(f64, f64)> = points
            .iter()
            .map(|&(x, i)| (x as f64, metric(&summaries[i])))
            .collect();
        chart.draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))?;
        chart.draw_series(pts.into_iter().map(|p| Circle::new(p, 4, color.filled())))?;
    }
    root.present()?;
    Ok(())
}
