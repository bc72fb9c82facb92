//! One simulated run of `ptsd sim` (a workload or a trace on the emulated
//! SSD): its options ([`RunArgs`], clap) and the [`Registry`] of the FTLs
//! `--ftl` may name — the built-ins `page`, `dftl` and `ptsd`, and any
//! custom mapping scheme (or GC policy, or scheduler) a researcher's own
//! binary registers. The sweep runner ([`crate::sweep::run_shard`]) runs
//! each run of a sweep through here, so a sweep file can name a custom
//! scheme beside the built-ins.
//!
//! ```
//! use clap::Parser;
//! use ptsd_bench::sim::{Registry, RunArgs};
//!
//! #[derive(Parser)]
//! struct Cli {
//!     #[command(flatten)]
//!     run: RunArgs,
//! }
//! let cli = Cli::try_parse_from([
//!     "sim", "--ftl", "dftl", "--size", "64MiB", "--precondition", "0",
//!     "--requests", "200",
//! ])
//! .unwrap();
//! let (cfg, report) = cli.run.simulate(&Registry::builtins(), None).unwrap();
//! assert_eq!(cfg.scheme_name(), "dftl");
//! assert_eq!(report.phases[0].throughput.requests, 200);
//! ```

use std::collections::BTreeMap;
use std::path::PathBuf;

use clap::{Args, ValueEnum};
use ptsd_blockdev::size::parse_size;
use ptsd_ftl::sim::{Poisson, Progress, SimError, Simulator, TraceSource};
use ptsd_ftl::stats::SimReport;
use ptsd_ftl::trace::{
    BlkparseEvent, OutOfRange, TraceError, TraceFormat, TraceOptions, TraceReader,
};
use ptsd_ftl::workload::{precondition, Access, WorkloadError, WorkloadKind, WorkloadSpec};
use ptsd_ftl::{
    ConfigError, Extensions, FtlConfig, FtlError, FtlStats, SchedulerKind, SchemeConfig,
    SchemeFactory, Ssd,
};
use std::sync::Arc;
use thiserror::Error;

/// Why a run could not be simulated.
#[derive(Debug, Error)]
pub enum SimRunError {
    /// An option, or a combination of options, that cannot run.
    #[error("{0}")]
    Invalid(String),
    /// The options describe no valid SSD.
    #[error("invalid SSD configuration")]
    Config(#[source] ConfigError),
    /// The SSD could not be built.
    #[error("creating the SSD")]
    Ssd(#[source] FtlError),
    /// The workload cannot be built.
    #[error("the workload")]
    Workload(#[source] WorkloadError),
    /// The trace could not be opened.
    #[error("the trace")]
    Trace(#[source] TraceError),
    /// A phase of the simulation failed.
    #[error("phase {phase}")]
    Phase {
        /// The phase's name.
        phase: String,
        /// What went wrong.
        #[source]
        source: SimError,
    },
}

/// A name a [`Registry`] cannot take.
#[derive(Debug, Error)]
pub enum RegistryError {
    /// The name is empty or a built-in's (`page`, `dftl`, `ptsd`, in any case).
    #[error("registry name {0:?} is empty or a built-in's")]
    ReservedName(String),
}

/// The built-in mapping schemes `--ftl` names without a registry entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum FtlKind {
    /// Full page map in DRAM.
    Page,
    /// Demand-based FTL: LRU cache of whole mapping pages.
    Dftl,
    /// PTSD: clean/dirty partitioned mapping cache.
    Ptsd,
}

/// A trace's format (`--trace-format`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum TraceFormatArg {
    /// MSR Cambridge CSV.
    Msr,
    /// blkparse text output.
    Blkparse,
    /// FIU traces.
    Fiu,
}

/// The FTLs `--ftl` may name: the built-ins (`page`, `dftl`, `ptsd`) and
/// custom parts registered under a name of their own. A custom entry runs
/// on the device the other options describe, with a mapping budget of 20 %
/// of the page map unless `--map-memory` says otherwise (as DFTL and
/// PTSD), and the built-in FIFO scheduler and greedy GC where it sets
/// none (`--sched` chooses the built-in scheduler).
///
/// ```
/// use std::sync::Arc;
/// use ptsd_bench::sim::Registry;
/// use ptsd_ftl::SchemeConfig;
///
/// // Any SchemeFactory: here a built-in one under another name.
/// let reg = Registry::builtins().with_scheme("mydftl", Arc::new(SchemeConfig::Dftl))?;
/// assert_eq!(reg.names(), ["page", "dftl", "ptsd", "mydftl"]);
/// // A built-in's name cannot be taken.
/// assert!(reg.with_scheme("DFTL", Arc::new(SchemeConfig::Dftl)).is_err());
/// # Ok::<(), ptsd_bench::sim::RegistryError>(())
/// ```
#[derive(Clone, Debug)]
pub struct Registry {
    custom: BTreeMap<String, Extensions>,
}

impl Registry {
    /// The built-ins only (what `ptsd sim` knows).
    pub fn builtins() -> Self {
        Registry {
            custom: BTreeMap::new(),
        }
    }

    /// This registry with `name` running the custom `parts`. A name is
    /// matched without regard to case; an empty name or a built-in's is
    /// refused.
    pub fn with(mut self, name: &str, parts: Extensions) -> Result<Self, RegistryError> {
        let key = name.to_ascii_lowercase();
        if key.is_empty() || FtlKind::from_str(&key, true).is_ok() {
            return Err(RegistryError::ReservedName(name.to_string()));
        }
        self.custom.insert(key, parts);
        Ok(self)
    }

    /// This registry with `name` running the custom mapping `scheme`;
    /// refused as [`with`](Self::with) refuses.
    pub fn with_scheme(
        self,
        name: &str,
        scheme: Arc<dyn SchemeFactory>,
    ) -> Result<Self, RegistryError> {
        self.with(
            name,
            Extensions {
                scheme: Some(scheme),
                ..Extensions::default()
            },
        )
    }

    /// Every name `--ftl` accepts, built-ins first.
    pub fn names(&self) -> Vec<String> {
        let builtins = FtlKind::value_variants()
            .iter()
            .filter_map(|k| k.to_possible_value())
            .map(|v| v.get_name().to_string());
        builtins.chain(self.custom.keys().cloned()).collect()
    }

    /// What `--ftl name` runs.
    fn lookup(&self, name: &str) -> Result<Entry<'_>, SimRunError> {
        if let Ok(kind) = FtlKind::from_str(name, true) {
            return Ok(Entry::Builtin(kind));
        }
        self.custom
            .get(&name.to_ascii_lowercase())
            .map(Entry::Custom)
            .ok_or_else(|| {
                SimRunError::Invalid(format!(
                    "--ftl {name:?}: expected one of {}",
                    self.names().join(", ")
                ))
            })
    }
}

enum Entry<'a> {
    Builtin(FtlKind),
    Custom(&'a Extensions),
}

/// The options of one simulated run: the device, the FTL, the workload or
/// trace. `ptsd sim` flattens them into its own; a sweep run is parsed from
/// them alone.
#[derive(Args, Clone, Debug)]
pub struct RunArgs {
    /// Mapping scheme: page, dftl, ptsd, or a name the running program
    /// registered.
    #[arg(long, default_value = "ptsd")]
    pub ftl: String,
    /// PTSD: entry-granular dirty region with greedy batch update (WRITEOPT).
    #[arg(long)]
    pub entry_dirty: bool,
    /// PTSD: adapt the clean:dirty split to the workload.
    #[arg(long)]
    pub adaptive: bool,
    /// PTSD: share of the mapping cache for clean pages.
    #[arg(long, default_value_t = 0.5)]
    pub clean_ratio: f64,
    /// Interface-queue scheduler: fifo or read-priority [default:
    /// read-priority for ptsd, fifo otherwise].
    #[arg(long)]
    pub sched: Option<SchedulerKind>,
    /// Logical capacity (e.g. 16GiB, 512MiB; K/M/G/T = powers of 1024,
    /// KB/MB/GB = powers of 1000).
    #[arg(long, default_value = "16GiB", value_parser = parse_size)]
    pub size: u64,
    /// Over-provisioning ratio.
    #[arg(long, default_value_t = 0.2)]
    pub op: f64,
    /// Mapping memory: bytes (4MiB) or a share of the full page map (20%)
    /// [default: full map for page, 20% otherwise].
    #[arg(long)]
    pub map_memory: Option<String>,
    #[arg(long)]
    pub channels: Option<u32>,
    /// Chips per channel.
    #[arg(long)]
    pub chips: Option<u32>,
    #[arg(long)]
    pub pages_per_block: Option<u32>,
    /// Page size in bytes (a power of two).
    #[arg(long)]
    pub page_size: Option<u32>,
    /// Write-buffer pages (0: one per chip).
    #[arg(long)]
    pub write_buffer_pages: Option<u32>,

    /// randread, randwrite, seqread, seqwrite or mixed:R (R% reads).
    #[arg(long, default_value = "randread")]
    pub workload: String,
    /// Zipf-distributed addresses with this exponent instead of uniform.
    #[arg(long)]
    pub zipf: Option<f64>,
    /// Request size in pages.
    #[arg(long, default_value_t = 1)]
    pub request_pages: u32,
    /// Host queue depth.
    #[arg(long, default_value_t = 128)]
    pub qd: u32,
    /// Requests of the measured phase [default: a quarter of the capacity
    /// in pages].
    #[arg(long)]
    pub requests: Option<u64>,
    /// Before measuring: a sequential fill, then random writes of this many
    /// capacities ("2x"); "0" skips preconditioning.
    #[arg(long, default_value = "2x")]
    pub precondition: String,

    /// Replay a trace instead of a synthetic workload.
    #[arg(long)]
    pub trace: Option<PathBuf>,
    #[arg(long, value_enum, default_value = "msr")]
    pub trace_format: TraceFormatArg,
    /// Refuse (instead of wrapping) trace addresses beyond the capacity.
    #[arg(long)]
    pub trace_reject_out_of_range: bool,
    /// blkparse: replay D (dispatch) events instead of Q (queue) events.
    #[arg(long)]
    pub trace_dispatch: bool,
    /// Replay the trace open-loop, honouring its timestamps at this speed
    /// (2 = twice as fast) instead of closed-loop at --qd.
    #[arg(long)]
    pub trace_speed: Option<f64>,
    /// How requests of the measured phase arrive: `closed` (a new one as
    /// each completes, --qd outstanding) or `poisson:IOPS` (open loop:
    /// Poisson arrivals at IOPS per second, however many are outstanding).
    #[arg(long, default_value = "closed")]
    pub arrival: String,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// How far a run has come: requests done of those planned, and the phase.
pub type RunProgress<'a> = &'a (dyn Fn(u64, u64, &str) + Sync);

/// `closed` or `poisson:IOPS`: the Poisson rate, if open loop.
fn parse_arrival(s: &str) -> Result<Option<f64>, SimRunError> {
    let t = s.trim();
    if t.eq_ignore_ascii_case("closed") {
        return Ok(None);
    }
    let bad = |why: &str| SimRunError::Invalid(format!("--arrival {s:?}: {why}"));
    let Some(rate) = t.strip_prefix("poisson:") else {
        return Err(bad("expected closed or poisson:IOPS"));
    };
    let iops: f64 = rate
        .trim()
        .parse()
        .map_err(|_| bad("IOPS is not a number"))?;
    if !(iops.is_finite() && iops > 0.0) {
        return Err(bad("IOPS must be positive"));
    }
    Ok(Some(iops))
}

/// `2x`, `2`, `0.5x`, `none`.
fn parse_factor(s: &str) -> Result<f64, SimRunError> {
    let t = s.trim().trim_end_matches(['x', 'X']);
    if t.eq_ignore_ascii_case("none") {
        return Ok(0.0);
    }
    let f: f64 = t
        .parse()
        .map_err(|_| SimRunError::Invalid(format!("--precondition {s:?}: expected e.g. 2x")))?;
    if !(f.is_finite() && f >= 0.0) {
        return Err(SimRunError::Invalid(format!(
            "--precondition {s:?} must be a non-negative number"
        )));
    }
    Ok(f)
}

impl RunArgs {
    /// The SSD these options describe, `--ftl` looked up in `registry`.
    pub fn config(&self, registry: &Registry) -> Result<FtlConfig, SimRunError> {
        let mut cfg = FtlConfig::default();
        if let Some(v) = self.page_size {
            cfg.page_size = v;
        }
        if let Some(v) = self.channels {
            cfg.channels = v;
        }
        if let Some(v) = self.chips {
            cfg.chips_per_channel = v;
        }
        if let Some(v) = self.pages_per_block {
            cfg.pages_per_block = v;
        }
        if let Some(v) = self.write_buffer_pages {
            cfg.write_buffer_pages = v;
        }
        cfg.op_ratio = self.op;
        let mut cfg = cfg.with_logical_bytes(self.size);
        let kind = match registry.lookup(&self.ftl)? {
            Entry::Builtin(kind) => kind,
            Entry::Custom(parts) => {
                cfg.custom = parts.clone();
                // Only the scheme is custom: the tables below fill the rest.
                FtlKind::Dftl
            }
        };
        cfg.scheme = match kind {
            FtlKind::Page => SchemeConfig::Page,
            FtlKind::Dftl => SchemeConfig::Dftl,
            FtlKind::Ptsd => SchemeConfig::Ptsd {
                clean_ratio: self.clean_ratio,
                entry_dirty: self.entry_dirty,
                adaptive: self.adaptive,
            },
        };
        if kind != FtlKind::Ptsd && (self.entry_dirty || self.adaptive) {
            return Err(SimRunError::Invalid(
                "--entry-dirty and --adaptive apply to --ftl ptsd only".into(),
            ));
        }
        cfg.scheduler = match self.sched {
            Some(s) => s,
            None if kind == FtlKind::Ptsd => SchedulerKind::ReadPriority,
            None => SchedulerKind::Fifo,
        };
        let full_map = cfg.full_map_bytes();
        cfg.map_memory_bytes = match (&self.map_memory, kind) {
            (None, FtlKind::Page) => None,
            (None, _) => Some(full_map / 5),
            (Some(m), _) => Some(match m.trim().strip_suffix('%') {
                Some(pct) => {
                    let bad = || {
                        SimRunError::Invalid(format!("--map-memory {m:?} must be a positive share"))
                    };
                    let pct: f64 = pct.trim().parse().map_err(|_| bad())?;
                    if !(pct.is_finite() && pct > 0.0) {
                        return Err(bad());
                    }
                    (full_map as f64 * pct / 100.0).round() as u64
                }
                None => parse_size(m)
                    .map_err(|e| SimRunError::Invalid(format!("--map-memory {m:?}: {e}")))?,
            }),
        };
        cfg.validate().map_err(SimRunError::Config)?;
        Ok(cfg)
    }

    /// Run the configured workload (or trace) and return the device
    /// configuration and the per-phase report; `progress`, if any, hears
    /// of every completion.
    pub fn simulate(
        &self,
        registry: &Registry,
        progress: Option<RunProgress<'_>>,
    ) -> Result<(FtlConfig, SimReport<FtlStats>), SimRunError> {
        let cfg = self.config(registry)?;
        let pages = cfg.logical_pages();
        let ssd = Ssd::new(cfg.clone()).map_err(SimRunError::Ssd)?;
        let label = format!(
            "{} {:.2} GiB, map memory {} KiB, {:?}, qd {}",
            cfg.scheme_name(),
            pages as f64 * f64::from(cfg.page_size) / (1u64 << 30) as f64,
            cfg.map_budget_bytes() / 1024,
            cfg.scheduler,
            self.qd
        );

        let factor = parse_factor(&self.precondition)?;
        let mut plan: Vec<(String, WorkloadSpec)> = Vec::new();
        if factor > 0.0 {
            let [fill, random] = precondition(pages, factor, self.seed);
            plan.push(("fill".into(), fill));
            plan.push(("precondition".into(), random));
        }
        let measured = self.requests.unwrap_or((pages / 4).max(1));
        if self.trace.is_none() {
            let kind: WorkloadKind = self.workload.parse().map_err(SimRunError::Workload)?;
            let access = match (kind.sequential, self.zipf) {
                (true, Some(_)) => {
                    return Err(SimRunError::Invalid(
                        "--zipf needs a random workload".into(),
                    ))
                }
                (true, None) => Access::Sequential,
                (false, None) => Access::Uniform,
                (false, Some(theta)) => Access::Zipf { theta },
            };
            let spec = WorkloadSpec {
                access,
                read_percent: kind.read_percent,
                pages_per_request: self.request_pages,
                start_lpn: 0,
                span_pages: pages,
                requests: measured,
                seed: self.seed.wrapping_add(1),
            };
            spec.build().map_err(SimRunError::Workload)?;
            plan.push((kind.to_string(), spec));
        }
        let planned: u64 = plan.iter().map(|(_, s)| s.requests).sum();

        let before = std::sync::atomic::AtomicU64::new(0);
        let mut sim = Simulator::new(ssd).with_progress(|p: &Progress<'_>| {
            if let Some(f) = progress {
                let done = before.load(std::sync::atomic::Ordering::Relaxed) + p.completed;
                f(done, planned.max(1), p.phase);
            }
        });
        let mut report = SimReport::<FtlStats> {
            label,
            phases: Vec::new(),
        };
        let poisson = parse_arrival(&self.arrival)?;
        let last = plan.len().saturating_sub(1);
        for (k, (name, spec)) in plan.iter().enumerate() {
            let w = spec.build().map_err(SimRunError::Workload)?;
            // Preconditioning stays closed-loop; the measured phase may not.
            let phase = match poisson {
                Some(iops) if k == last => {
                    let mut arrivals = Poisson::new(w, iops, self.seed);
                    sim.run_open(name, &mut arrivals, 1.0)
                }
                _ => {
                    let mut w = w;
                    sim.run_closed(name, &mut w, self.qd)
                }
            };
            report
                .phases
                .push(phase.map_err(|source| SimRunError::Phase {
                    phase: name.clone(),
                    source,
                })?);
            before.fetch_add(spec.requests, std::sync::atomic::Ordering::Relaxed);
        }
        if let Some(path) = &self.trace {
            let format = match self.trace_format {
                TraceFormatArg::Msr => TraceFormat::Msr,
                TraceFormatArg::Blkparse => TraceFormat::Blkparse,
                TraceFormatArg::Fiu => TraceFormat::Fiu,
            };
            let mut opts = TraceOptions::new(format, cfg.page_size, pages);
            if self.trace_reject_out_of_range {
                opts.out_of_range = OutOfRange::Reject;
            }
            if self.trace_dispatch {
                opts.blkparse_event = BlkparseEvent::Dispatched;
            }
            let reader = TraceReader::open(path, opts).map_err(SimRunError::Trace)?;
            let name = path.display().to_string();
            let mut source = TraceSource::new(reader, &name);
            let phase = match self.trace_speed {
                Some(speed) if speed > 0.0 && speed.is_finite() => {
                    sim.run_open("trace", &mut source, 1.0 / speed)
                }
                Some(speed) => {
                    return Err(SimRunError::Invalid(format!(
                        "--trace-speed {speed} must be a positive number"
                    )))
                }
                None => sim.run_closed("trace", &mut source, self.qd),
            };
            report
                .phases
                .push(phase.map_err(|source| SimRunError::Phase {
                    phase: "trace".into(),
                    source,
                })?);
        }
        Ok((cfg, report))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        run: RunArgs,
    }

    fn parse(args: &[&str]) -> Result<RunArgs, clap::Error> {
        Cli::try_parse_from([&["sim"], args].concat()).map(|c| c.run)
    }

    #[test]
    fn sizes_use_the_one_syntax() {
        let reg = Registry::builtins();
        let a = parse(&["--size", "4GiB", "--map-memory", "4MB"]).unwrap();
        assert_eq!(a.size, 4 << 30);
        assert_eq!(a.config(&reg).unwrap().map_memory_bytes, Some(4_000_000));
        assert_eq!(parse(&["--size", "4G"]).unwrap().size, 4 << 30);
        assert!(parse(&["--size", "4 parsecs"]).is_err());
        assert!(parse(&["--map-memory", "4 parsecs"])
            .unwrap()
            .config(&reg)
            .is_err());
    }

    #[test]
    fn factors() {
        assert_eq!(parse_factor("2x").unwrap(), 2.0);
        assert_eq!(parse_factor("0.5").unwrap(), 0.5);
        assert_eq!(parse_factor("none").unwrap(), 0.0);
        assert!(parse_factor("-1x").is_err());
        assert!(parse_factor("lots").is_err());
    }

    #[test]
    fn ftl_names_come_from_the_registry() {
        let builtins = Registry::builtins();
        let reg = builtins
            .clone()
            .with_scheme("Mine", Arc::new(SchemeConfig::Dftl))
            .unwrap();
        for taken in ["", "Dftl", "page"] {
            let err = builtins
                .clone()
                .with_scheme(taken, Arc::new(SchemeConfig::Dftl))
                .unwrap_err();
            assert!(matches!(err, RegistryError::ReservedName(ref n) if n == taken));
        }
        let mine = parse(&["--ftl", "mine", "--size", "64MiB"]).unwrap();
        let err = mine.config(&builtins).unwrap_err().to_string();
        assert!(err.contains("expected one of page, dftl, ptsd"), "{err}");
        let cfg = mine.config(&reg).unwrap();
        // The custom scheme, DFTL's 20 % budget and FIFO.
        assert_eq!(cfg.scheme_name(), "dftl");
        assert_eq!(cfg.map_memory_bytes, Some(cfg.full_map_bytes() / 5));
        assert_eq!(cfg.scheduler, SchedulerKind::Fifo);
        let err = parse(&["--ftl", "mine", "--entry-dirty"])
            .unwrap()
            .config(&reg)
            .unwrap_err()
            .to_string();
        assert!(err.contains("--ftl ptsd only"), "{err}");
        // Built-ins as before, in any case.
        let ptsd = parse(&["--ftl", "PTSD", "--size", "64MiB"]).unwrap();
        assert_eq!(ptsd.config(&reg).unwrap().scheme_name(), "ptsd");
    }
}
