//! Latency and throughput statistics of a simulation run.
//!
//! [`LatencyRecorder`] keeps one `hdrhistogram` per direction (reads,
//! writes, all); [`PhaseReport`] and [`SimReport`] combine its summaries with
//! throughput over simulated time and the device's own counters, serialize
//! to JSON and print as a table.
//!
//! ```
//! use ptsd_ftl::stats::LatencyRecorder;
//! use ptsd_ftl::{Completion, Op};
//! let mut rec = LatencyRecorder::new();
//! for i in 0..100u64 {
//!     let c = Completion { id: i, op: Op::Read, submit_ns: 0, dispatch_ns: 0, done_ns: (i + 1) * 1000 };
//!     rec.record(&c);
//! }
//! let s = rec.summary(Op::Read);
//! assert_eq!(s.count, 100);
//! assert!((s.p50_us - 50.0).abs() < 0.1);
//! assert!((s.max_us - 100.0).abs() < 0.1);
//! ```

use std::fmt::Write as _;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::request::{Completion, Op};
use crate::FtlStats;

/// Highest latency the histograms resolve (one hour); longer ones are
/// recorded as one hour.
const MAX_LATENCY_NS: u64 = 3_600_000_000_000;

/// Per-direction latency histograms (nanoseconds, 3 significant digits).
/// Each completion is recorded once, in its direction's histogram; "all" is
/// their sum, built when asked for.
#[derive(Clone, Debug)]
pub struct LatencyRecorder {
    read: Histogram<u64>,
    write: Histogram<u64>,
    /// Discards and flushes.
    other: Histogram<u64>,
}

impl Default for LatencyRecorder {
    fn default() -> Self {
        Self::new()
    }
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_LATENCY_NS, 3).expect("static histogram bounds are valid")
}

impl LatencyRecorder {
    pub fn new() -> Self {
        LatencyRecorder {
            read: histogram(),
            write: histogram(),
            other: histogram(),
        }
    }

    /// Record one completed request. Discards and flushes count in "all".
    #[inline]
    pub fn record(&mut self, c: &Completion) {
        let ns = c.latency_ns().max(1);
        match c.op {
            Op::Read => self.read.saturating_record(ns),
            Op::Write => self.write.saturating_record(ns),
            Op::Discard | Op::Flush => self.other.saturating_record(ns),
        }
    }

    /// Forget everything recorded.
    pub fn clear(&mut self) {
        self.read.reset();
        self.write.reset();
        self.other.reset();
    }

    /// The histogram of one direction (`Discard` and `Flush` share one).
    pub fn histogram(&self, op: Op) -> &Histogram<u64> {
        match op {
            Op::Read => &self.read,
            Op::Write => &self.write,
            Op::Discard | Op::Flush => &self.other,
        }
    }

    /// Every completion, whatever its direction.
    pub fn all(&self) -> Histogram<u64> {
        let mut all = self.read.clone();
        for h in [&self.write, &self.other] {
            // Same bounds and precision, and 1 h saturates: cannot fail.
            let _ = all.add(h);
        }
        all
    }

    /// Mean and percentiles of one direction.
    pub fn summary(&self, op: Op) -> LatencySummary {
        LatencySummary::of(self.histogram(op))
    }

    /// Mean and percentiles of all completions.
    pub fn summary_all(&self) -> LatencySummary {
        LatencySummary::of(&self.all())
    }

    /// The cumulative distribution of one direction, for plotting.
    pub fn cdf(&self, op: Op) -> Vec<CdfPoint> {
        cdf_points(self.histogram(op))
    }
}

fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

/// Mean and percentiles of a latency distribution, in microseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencySummary {
    pub count: u64,
    pub mean_us: f64,
    pub min_us: f64,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub p9999_us: f64,
    pub max_us: f64,
}

impl LatencySummary {
    /// Summarize a histogram of nanoseconds.
    pub fn of(h: &Histogram<u64>) -> Self {
        if h.is_empty() {
            return LatencySummary::default();
        }
        let q = |q: f64| us(h.value_at_quantile(q));
        LatencySummary {
            count: h.len(),
            mean_us: h.mean() / 1000.0,
            min_us: us(h.min()),
            p50_us: q(0.5),
            p90_us: q(0.9),
            p99_us: q(0.99),
            p999_us: q(0.999),
            p9999_us: q(0.9999),
            max_us: us(h.max()),
        }
    }
}

/// One point of a cumulative distribution: `quantile` of the requests took
/// at most `latency_us`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct CdfPoint {
    pub latency_us: f64,
    pub quantile: f64,
}

/// CDF points with resolution growing toward the tail (hdrhistogram's
/// quantile iteration, 8 ticks per halving of the remaining distance), so a
/// plot zoomed at p99.9 still has points.
pub fn cdf_points(h: &Histogram<u64>) -> Vec<CdfPoint> {
    if h.is_empty() {
        return Vec::new();
    }
    let mut points: Vec<CdfPoint> = h
        .iter_quantiles(8)
        .map(|v| CdfPoint {
            latency_us: us(h.highest_equivalent(v.value_iterated_to())),
            quantile: v.quantile_iterated_to(),
        })
        .collect();
    // Several iteration steps can land in the same bucket; keep the last.
    points.dedup_by(|later, earlier| {
        if later.latency_us == earlier.latency_us {
            earlier.quantile = earlier.quantile.max(later.quantile);
            true
        } else {
            false
        }
    });
    points
}

/// Requests and bytes moved over a stretch of simulated time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Throughput {
    pub requests: u64,
    pub reads: u64,
    pub writes: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    /// Simulated time from the phase's first submission to its last
    /// completion.
    pub sim_seconds: f64,
    pub iops: f64,
    /// Read plus write bytes per simulated second, in MB (10^6 bytes).
    pub mb_per_s: f64,
}

impl Throughput {
    pub fn new(
        (requests, reads, writes): (u64, u64, u64),
        (read_bytes, write_bytes): (u64, u64),
        sim_ns: u64,
    ) -> Self {
        let sim_seconds = sim_ns as f64 / 1e9;
        let per_s = |x: f64| {
            if sim_seconds > 0.0 {
                x / sim_seconds
            } else {
                0.0
            }
        };
        Throughput {
            requests,
            reads,
            writes,
            read_bytes,
            write_bytes,
            sim_seconds,
            iops: per_s(requests as f64),
            mb_per_s: per_s((read_bytes + write_bytes) as f64) / 1e6,
        }
    }
}

/// A device's own counters as named columns of the human table.
pub trait DeviceColumns {
    /// `(header, value)` pairs, in table order.
    fn columns(&self) -> Vec<(&'static str, String)>;
}

impl DeviceColumns for () {
    fn columns(&self) -> Vec<(&'static str, String)> {
        Vec::new()
    }
}

impl DeviceColumns for FtlStats {
    fn columns(&self) -> Vec<(&'static str, String)> {
        let lookups = self.cmt_read_hits + self.cmt_read_misses;
        let hit = if lookups == 0 {
            "-".to_string()
        } else {
            format!("{:.1}", 100.0 * self.cmt_read_hits as f64 / lookups as f64)
        };
        vec![
            ("WAF", format!("{:.2}", self.waf)),
            ("CMT rd hit%", hit),
            ("map rd by rd", self.map_reads.host_read.to_string()),
            ("map pg by rd", self.map_programs.host_read.to_string()),
            ("pg by rd", self.programs_issued_by_reads.to_string()),
            ("rd behind pg", self.reads_behind_writes.to_string()),
            (
                "wait ms",
                format!("{:.0}", self.read_wait_behind_writes_ns as f64 / 1e6),
            ),
            ("map pg all", self.map_programs.total().to_string()),
            (
                "GC runs",
                (self.gc_data_runs + self.gc_map_runs).to_string(),
            ),
            ("erases", self.erases.to_string()),
            ("urgent GC", self.gc_urgent.to_string()),
        ]
    }
}

/// Everything measured in one phase of a run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PhaseReport<S> {
    pub name: String,
    /// What was run, e.g. `randread qd=128`.
    pub workload: String,
    pub throughput: Throughput,
    pub read: LatencySummary,
    pub write: LatencySummary,
    pub all: LatencySummary,
    pub read_cdf: Vec<CdfPoint>,
    pub write_cdf: Vec<CdfPoint>,
    /// Wall-clock time the simulation of this phase took.
    pub wall_seconds: f64,
    /// Simulated requests per second of wall time.
    pub requests_per_wall_second: f64,
    /// The device's counters for this phase alone.
    pub device: S,
}

/// The phases of one run on one device configuration.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SimReport<S> {
    /// Names the device configuration, e.g. `ptsd 16 GiB qd=128`.
    pub label: String,
    pub phases: Vec<PhaseReport<S>>,
}

impl<S: Serialize> SimReport<S> {
    /// Pretty-printed JSON.
    pub fn to_json(&self) -> serde_json::Result<String> {
        serde_json::to_string_pretty(self)
    }
}

impl<S: DeviceColumns> SimReport<S> {
    /// A fixed-width table, one row per phase.
    pub fn table(&self) -> String {
        let rows: Vec<(String, &PhaseReport<S>)> =
            self.phases.iter().map(|p| (p.name.clone(), p)).collect();
        format_table(&self.label, &rows)
    }
}

fn fmt_us(v: f64) -> String {
    if v >= 100.0 {
        format!("{:.0}", v)
    } else {
        format!("{:.1}", v)
    }
}

/// A table of phase reports, one row per `(row label, phase)`, with the
/// latency columns in microseconds followed by the device's columns.
pub fn format_table<S: DeviceColumns>(title: &str, rows: &[(String, &PhaseReport<S>)]) -> String {
    let mut header: Vec<String> = [
        "", "requests", "IOPS", "MB/s", "rd mean", "rd p50", "rd p99", "rd p99.9", "rd max",
        "wr p99",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut body: Vec<Vec<String>> = Vec::new();
    for (i, (label, p)) in rows.iter().enumerate() {
        let dev = p.device.columns();
        if i == 0 {
            header.extend(dev.iter().map(|(h, _)| h.to_string()));
        }
        // Latency cells of a direction with no requests stay empty.
        let lat = |s: &LatencySummary, v: f64| {
            if s.count == 0 {
                "-".to_string()
            } else {
                fmt_us(v)
            }
        };
        let mut row = vec![
            label.clone(),
            p.throughput.requests.to_string(),
            format!("{:.0}", p.throughput.iops),
            format!("{:.1}", p.throughput.mb_per_s),
            lat(&p.read, p.read.mean_us),
            lat(&p.read, p.read.p50_us),
            lat(&p.read, p.read.p99_us),
            lat(&p.read, p.read.p999_us),
            lat(&p.read, p.read.max_us),
            lat(&p.write, p.write.p99_us),
        ];
        row.extend(dev.into_iter().map(|(_, v)| v));
        body.push(row);
    }
    let cols = header.len();
    let mut width = vec![0usize; cols];
    for row in std::iter::once(&header).chain(body.iter()) {
        for (w, cell) in width.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let mut out = String::new();
    if !title.is_empty() {
        let _ = writeln!(out, "{title}  (latencies in µs)");
    }
    for row in std::iter::once(&header).chain(body.iter()) {
        let mut line = String::new();
        for (c, (cell, w)) in row.iter().zip(&width).enumerate() {
            if c == 0 {
                let _ = write!(line, "{cell:<w$}");
            } else {
                let _ = write!(line, "  {cell:>w$}");
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn done(op: Op, latency_ns: u64) -> Completion {
        Completion {
            id: 0,
            op,
            submit_ns: 10,
            dispatch_ns: 10,
            done_ns: 10 + latency_ns,
        }
    }

    #[test]
    fn summaries_split_by_direction() {
        let mut rec = LatencyRecorder::new();
        for i in 1..=1000 {
            rec.record(&done(Op::Read, i * 1000));
        }
        rec.record(&done(Op::Write, 5_000_000));
        let r = rec.summary(Op::Read);
        assert_eq!(r.count, 1000);
        assert!((r.p99_us - 990.0).abs() < 1.0, "{r:?}");
        assert!((r.p999_us - 999.0).abs() < 1.0);
        assert!((r.mean_us - 500.5).abs() < 1.0);
        let w = rec.summary(Op::Write);
        assert_eq!(w.count, 1);
        assert!((w.max_us - 5000.0).abs() < 5.0);
        assert_eq!(rec.summary_all().count, 1001);
        assert_eq!(rec.summary(Op::Flush).count, 0);
        rec.clear();
        assert_eq!(rec.summary(Op::Read), LatencySummary::default());
    }

    #[test]
    fn cdf_is_monotone_and_ends_at_one() {
        let mut rec = LatencyRecorder::new();
        for i in 0..10_000u64 {
            rec.record(&done(Op::Read, 100_000 + (i * 7919) % 50_000));
        }
        let cdf = rec.cdf(Op::Read);
        assert!(cdf.len() > 20);
        for w in cdf.windows(2) {
            assert!(w[0].latency_us < w[1].latency_us);
            assert!(w[0].quantile <= w[1].quantile);
        }
        assert_eq!(cdf.last().unwrap().quantile, 1.0);
        assert!(rec.cdf(Op::Write).is_empty());
    }

    #[test]
    fn throughput_over_sim_time() {
        let t = Throughput::new((1000, 700, 300), (700 * 4096, 300 * 4096), 2_000_000_000);
        assert_eq!(t.iops, 500.0);
        assert!((t.mb_per_s - 2.048).abs() < 1e-9);
        assert_eq!(Throughput::new((0, 0, 0), (0, 0), 0).iops, 0.0);
    }

    #[test]
    fn report_json_and_table() {
        let mut rec = LatencyRecorder::new();
        rec.record(&done(Op::Read, 120_000));
        let phase = PhaseReport {
            name: "randread".into(),
            workload: "randread qd=1".into(),
            throughput: Throughput::new((1, 1, 0), (4096, 0), 120_000),
            read: rec.summary(Op::Read),
            write: rec.summary(Op::Write),
            all: rec.summary_all(),
            read_cdf: rec.cdf(Op::Read),
            write_cdf: Vec::new(),
            wall_seconds: 0.001,
            requests_per_wall_second: 1000.0,
            device: (),
        };
        let report = SimReport {
            label: "test".into(),
            phases: vec![phase],
        };
        let json: serde_json::Value = serde_json::from_str(&report.to_json().unwrap()).unwrap();
        assert_eq!(json["phases"][0]["read"]["count"], 1);
        let table = report.table();
        assert!(table.contains("randread"), "{table}");
        assert!(table.contains("120"), "{table}");
        assert_eq!(table.lines().count(), 3);
    }
}
