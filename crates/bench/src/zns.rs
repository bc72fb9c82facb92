//! Conventional SSD (device GC) against zoned SSD (host GC) on the same
//! host workload: `ptsd sim --zoned --compare`.
//!
//! Both devices have the same NAND board (the default: 8 channels x 4
//! chips, 1 MiB blocks, the paper's timing) with as many blocks as the
//! conventional device needs for `logical_bytes` at `op` over-provisioning.
//! The conventional device is the page-mapped FTL with its greedy GC; the
//! zoned device exposes every block as zones (8 MiB: one block on each of
//! 8 chips) and a host log-structured layer ([`HostLog`]) keeps the same
//! `logical_bytes` on it, so the host has the same spare space to reclaim
//! with as the conventional device's GC.
//!
//! The same request streams then run on both, closed loop at `qd`:
//! 1. `fill`: one sequential pass;
//! 2. `precondition`: random overwrites of `precondition_factor` times the
//!    capacity (steady state);
//! 3. `randwrite`: random overwrites, measured;
//! 4. `mixedR`: random reads and overwrites, R % reads, measured.
//!
//! Reported per device and phase: the device's WAF (NAND programs per
//! page the device was asked to write), the host's copies, the total WAF
//! (NAND programs per page the user wrote), throughput and read latency.
//!
//! ```
//! use ptsd_bench::zns::{compare, ZnsOptions};
//! let report = compare(&ZnsOptions::tiny()).unwrap();
//! let conv = report.row("conventional", "randwrite").unwrap();
//! let zns = report.row("zoned", "randwrite").unwrap();
//! assert_eq!(zns.device_waf, 1.0);     // the zoned device copies nothing
//! assert!(conv.device_waf > 1.0);      // the conventional one's GC does
//! assert!(zns.host_copies > 0);        // the host's GC does it instead
//! ```

use std::path::{Path, PathBuf};
use std::time::Instant;

use ptsd_ftl::sim::{SimDevice, Simulator};
use ptsd_ftl::stats::{CdfPoint, LatencySummary, PhaseReport};
use ptsd_ftl::workload::{precondition, WorkloadSpec};
use ptsd_ftl::zoned::{HostLog, HostLogStats, ZonedConfig, ZonedError, ZonedSsd};
use ptsd_ftl::{FtlConfig, FtlStats, SchedulerKind, SchemeConfig, Ssd, StoreKind};
use serde::Serialize;
use thiserror::Error;

use crate::plot::{write_cdf_svg, Curve, PlotError};

/// The comparison could not run or could not write its results.
#[derive(Debug, Error)]
pub enum ZnsError {
    #[error("invalid options: {0}")]
    Options(String),
    #[error("conventional device")]
    Conventional(#[source] ptsd_ftl::FtlError),
    #[error("zoned device")]
    Zoned(#[source] ZonedError),
    #[error("{device}, phase {phase}")]
    Sim {
        device: &'static str,
        phase: String,
        #[source]
        source: ptsd_ftl::sim::SimError,
    },
    #[error("workload")]
    Workload(#[from] ptsd_ftl::workload::WorkloadError),
    #[error("{path}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Plot(#[from] PlotError),
    #[error("writing JSON")]
    Json(#[from] serde_json::Error),
}

/// Knobs of the comparison.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ZnsOptions {
    /// The host's logical capacity (both devices).
    pub logical_bytes: u64,
    /// Over-provisioning of the conventional device; the zoned device has
    /// the same NAND, so the host gets the same share as spare zones.
    pub op: f64,
    pub qd: u32,
    /// Random overwrites before measuring, in capacities.
    pub precondition_factor: f64,
    /// Requests of each measured phase, in capacities.
    pub phase_factor: f64,
    /// Reads in the mixed phase, in percent.
    pub read_percent: u8,
    pub seed: u64,
    /// Geometry overrides (tiny test devices).
    pub channels: Option<u32>,
    pub chips_per_channel: Option<u32>,
    pub pages_per_block: Option<u32>,
    /// Chips a zone stripes over (0: all).
    pub stripe_chips: u32,
}

impl Default for ZnsOptions {
    fn default() -> Self {
        ZnsOptions {
            logical_bytes: 1 << 30,
            op: 0.2,
            qd: 32,
            precondition_factor: 2.0,
            phase_factor: 0.5,
            read_percent: 70,
            seed: 1,
            channels: None,
            chips_per_channel: None,
            pages_per_block: None,
            stripe_chips: 8,
        }
    }
}

impl ZnsOptions {
    /// A few seconds in a debug build: 32 MiB on 2 x 2 chips, 64-page
    /// blocks, zones of one block on each of 2 chips.
    pub fn tiny() -> Self {
        ZnsOptions {
            logical_bytes: 32 << 20,
            qd: 16,
            channels: Some(2),
            chips_per_channel: Some(2),
            pages_per_block: Some(64),
            stripe_chips: 2,
            ..ZnsOptions::default()
        }
    }

    /// The conventional device: the page FTL (full map: only GC differs
    /// from the zoned device), FIFO, timing only.
    pub fn conventional_config(&self) -> FtlConfig {
        let mut cfg = FtlConfig::default();
        if let Some(c) = self.channels {
            cfg.channels = c;
        }
        if let Some(c) = self.chips_per_channel {
            cfg.chips_per_channel = c;
        }
        if let Some(p) = self.pages_per_block {
            cfg.pages_per_block = p;
        }
        cfg.op_ratio = self.op;
        let mut cfg = cfg.with_logical_bytes(self.logical_bytes);
        cfg.scheme = SchemeConfig::Page;
        cfg.map_memory_bytes = None;
        cfg.scheduler = SchedulerKind::Fifo;
        cfg.store = StoreKind::None;
        cfg
    }

    /// The zoned device: the same NAND board.
    pub fn zoned_config(&self) -> ZonedConfig {
        ZonedConfig {
            nand: self.conventional_config(),
            stripe_chips: self.stripe_chips,
            ..ZonedConfig::default()
        }
    }

    fn phases(&self, pages: u64) -> Vec<(String, WorkloadSpec)> {
        let [fill, pre] = precondition(pages, self.precondition_factor, self.seed);
        let n = ((pages as f64 * self.phase_factor).round() as u64).max(1);
        vec![
            ("fill".into(), fill),
            ("precondition".into(), pre),
            (
                "randwrite".into(),
                WorkloadSpec::random_write(pages, n, self.seed + 1),
            ),
            (
                format!("mixed{}", self.read_percent),
                WorkloadSpec::mixed(pages, self.read_percent, n, self.seed + 2),
            ),
        ]
    }
}

/// One device in one phase.
#[derive(Clone, Debug, Serialize)]
pub struct ZnsRow {
    /// `conventional` or `zoned`.
    pub device: &'static str,
    pub phase: String,
    /// NAND programs per page the device was asked to write.
    pub device_waf: f64,
    /// Pages the host's GC copied (0 on the conventional device).
    pub host_copies: u64,
    /// Pages the device's GC copied (0 on the zoned device).
    pub device_copies: u64,
    /// User writes that waited for the host's GC to free a zone.
    pub host_stalled_writes: u64,
    /// NAND programs per page the user wrote.
    pub total_waf: f64,
    pub erases: u64,
    pub iops: f64,
    pub mb_per_s: f64,
    pub read: LatencySummary,
    pub write: LatencySummary,
    pub read_cdf: Vec<CdfPoint>,
}

/// Everything the comparison measured.
#[derive(Clone, Debug, Serialize)]
pub struct ZnsReport {
    pub options: ZnsOptions,
    pub zones: u32,
    pub zone_pages: u64,
    pub host_pages: u64,
    pub rows: Vec<ZnsRow>,
    pub wall_seconds: f64,
}

fn conventional_row(p: &PhaseReport<FtlStats>) -> ZnsRow {
    let d = &p.device;
    ZnsRow {
        device: "conventional",
        phase: p.name.clone(),
        device_waf: d.waf,
        host_copies: 0,
        device_copies: d.gc_data_copies + d.gc_map_copies,
        host_stalled_writes: 0,
        total_waf: d.waf,
        erases: d.erases,
        iops: p.throughput.iops,
        mb_per_s: p.throughput.mb_per_s,
        read: p.read,
        write: p.write,
        read_cdf: p.read_cdf.clone(),
    }
}

fn zoned_row(p: &PhaseReport<HostLogStats>) -> ZnsRow {
    let d = &p.device;
    ZnsRow {
        device: "zoned",
        phase: p.name.clone(),
        device_waf: d.device.waf,
        host_copies: d.host_copies,
        device_copies: 0,
        host_stalled_writes: d.stalled_writes,
        total_waf: d.total_waf,
        erases: d.device.erases,
        iops: p.throughput.iops,
        mb_per_s: p.throughput.mb_per_s,
        read: p.read,
        write: p.write,
        read_cdf: p.read_cdf.clone(),
    }
}

fn run_phases<D: SimDevice>(
    device: &'static str,
    dev: D,
    phases: &[(String, WorkloadSpec)],
    qd: u32,
) -> Result<Vec<PhaseReport<D::Stats>>, ZnsError> {
    let mut sim = Simulator::new(dev);
    let mut out = Vec::new();
    for (name, spec) in phases {
        let mut w = spec.build()?;
        out.push(
            sim.run_closed(name, &mut w, qd)
                .map_err(|source| ZnsError::Sim {
                    device,
                    phase: name.clone(),
                    source,
                })?,
        );
    }
    Ok(out)
}

/// Run the comparison (the two devices in two threads).
pub fn compare(opts: &ZnsOptions) -> Result<ZnsReport, ZnsError> {
    if opts.qd == 0
        || opts.phase_factor.is_nan()
        || opts.phase_factor <= 0.0
        || opts.read_percent > 100
    {
        return Err(ZnsError::Options(
            "queue depth and phase factor must be positive, reads at most 100 %".into(),
        ));
    }
    let wall = Instant::now();
    let conv_cfg = opts.conventional_config();
    conv_cfg
        .validate()
        .map_err(|e| ZnsError::Conventional(e.into()))?;
    let pages = conv_cfg.logical_pages();
    let ssd = Ssd::new(conv_cfg).map_err(ZnsError::Conventional)?;
    let zdev = ZonedSsd::new(opts.zoned_config()).map_err(ZnsError::Zoned)?;
    let (zones, zone_pages) = (zdev.zone_count(), zdev.zone_pages());
    let host = HostLog::new(zdev, pages).map_err(ZnsError::Zoned)?;
    let phases = opts.phases(pages);
    let (conv, zoned) = std::thread::scope(|s| {
        let c = s.spawn(|| run_phases("conventional", ssd, &phases, opts.qd));
        let z = run_phases("zoned", host, &phases, opts.qd);
        (c.join(), z)
    });
    let conv =
        conv.map_err(|_| ZnsError::Options("the conventional simulation panicked".into()))??;
    let zoned = zoned?;
    let mut rows = Vec::new();
    for (c, z) in conv.iter().zip(&zoned) {
        rows.push(conventional_row(c));
        rows.push(zoned_row(z));
    }
    Ok(ZnsReport {
        options: opts.clone(),
        zones,
        zone_pages,
        host_pages: pages,
        rows,
        wall_seconds: wall.elapsed().as_secs_f64(),
    })
}

impl ZnsReport {
    /// The row of `device` (`conventional` or `zoned`) in `phase`.
    pub fn row(&self, device: &str, phase: &str) -> Option<&ZnsRow> {
        self.rows
            .iter()
            .find(|r| r.device == device && r.phase == phase)
    }

    /// The side-by-side table.
    pub fn table(&self) -> String {
        let o = &self.options;
        let mut out = format!(
            "Conventional SSD (device GC) vs zoned SSD (host GC): {:.2} GiB logical, {:.0} % spare, qd {}, {} zones of {:.1} MiB\n\n",
            self.host_pages as f64 * 4096.0 / (1u64 << 30) as f64,
            o.op * 100.0,
            o.qd,
            self.zones,
            self.zone_pages as f64 * 4096.0 / f64::from(1u32 << 20),
        );
        out.push_str(&format!(
            "{:<13} {:<13} {:>8} {:>11} {:>11} {:>9} {:>8} {:>8} {:>9} {:>8} {:>9} {:>9} {:>10}\n",
            "phase",
            "device",
            "dev WAF",
            "host copies",
            "dev copies",
            "total WAF",
            "erases",
            "stalls",
            "IOPS",
            "MB/s",
            "rd p50 us",
            "rd p99 us",
            "rd p99.9 us"
        ));
        for r in &self.rows {
            out.push_str(&format!(
                "{:<13} {:<13} {:>8.2} {:>11} {:>11} {:>9.2} {:>8} {:>8} {:>9.0} {:>8.1} {:>9.0} {:>9.0} {:>10.0}\n",
                r.phase,
                r.device,
                r.device_waf,
                r.host_copies,
                r.device_copies,
                r.total_waf,
                r.erases,
                r.host_stalled_writes,
                r.iops,
                r.mb_per_s,
                r.read.p50_us,
                r.read.p99_us,
                r.read.p999_us,
            ));
        }
        out.push_str(&format!("\nwall time {:.1} s\n", self.wall_seconds));
        out
    }

    /// Write `zns.json`, `table.txt` and a read-latency CDF plot per phase
    /// with reads (`read_cdf_<phase>.svg`) into `dir`; returns the files.
    pub fn write_outputs(&self, dir: &Path) -> Result<Vec<PathBuf>, ZnsError> {
        let io = |path: &Path| {
            let path = path.display().to_string();
            move |source| ZnsError::Io { path, source }
        };
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        let json = dir.join("zns.json");
        std::fs::write(&json, serde_json::to_string_pretty(self)?).map_err(io(&json))?;
        let table = dir.join("table.txt");
        std::fs::write(&table, self.table()).map_err(io(&table))?;
        let mut written = vec![json, table];
        let mut phases: Vec<&str> = Vec::new();
        for r in &self.rows {
            if r.read.count > 0 && !phases.contains(&r.phase.as_str()) {
                phases.push(&r.phase);
            }
        }
        for phase in phases {
            let labels: Vec<(String, &ZnsRow)> = self
                .rows
                .iter()
                .filter(|r| r.phase == phase)
                .map(|r| {
                    let label = match r.device {
                        "zoned" => format!("zoned + host GC (total WAF {:.2})", r.total_waf),
                        _ => format!("conventional, device GC (WAF {:.2})", r.device_waf),
                    };
                    (label, r)
                })
                .collect();
            let curves: Vec<Curve<'_>> = labels
                .iter()
                .map(|(l, r)| Curve {
                    label: l,
                    points: &r.read_cdf,
                })
                .collect();
            let path = dir.join(format!("read_cdf_{phase}.svg"));
            write_cdf_svg(
                &path,
                &format!(
                    "Read latency, phase {phase}: conventional vs zoned ({} MiB, qd {})",
                    (self.host_pages * 4096) >> 20,
                    self.options.qd
                ),
                "read latency (µs, log scale)",
                &curves,
                0.8,
            )?;
            written.push(path);
        }
        Ok(written)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_devices_see_the_same_requests_and_write_the_same_user_pages() {
        let r = compare(&ZnsOptions::tiny()).unwrap();
        for phase in ["fill", "precondition", "randwrite", "mixed70"] {
            let c = r.row("conventional", phase).unwrap();
            let z = r.row("zoned", phase).unwrap();
            assert_eq!(c.read.count, z.read.count, "{phase}");
            assert_eq!(c.write.count, z.write.count, "{phase}");
            assert_eq!(z.device_waf, 1.0, "{phase}");
            assert_eq!(z.device_copies, 0);
            assert_eq!(c.host_copies, 0);
        }
        let z = r.row("zoned", "randwrite").unwrap();
        assert!(z.total_waf > 1.0 && z.host_copies > 0);
        let dir = tempfile::tempdir().unwrap();
        let files = r.write_outputs(dir.path()).unwrap();
        let names: Vec<String> = files
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["zns.json", "table.txt", "read_cdf_mixed70.svg"]);
        let table = std::fs::read_to_string(dir.path().join("table.txt")).unwrap();
        assert!(table.contains("host copies") && table.contains("zoned"));
    }
}
