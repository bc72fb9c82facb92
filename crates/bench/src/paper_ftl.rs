//! The PTSD paper's experiment: PAGE, DFTL, PART, PART-SCHED and WRITEOPT
//! on the emulated SSD.
//!
//! Device: 16 GiB logical (times `scale`), 20 % over-provisioning, the
//! paper's NAND timing, mapping memory 20 % of the page FTL's map (PAGE
//! keeps its full map). Phases, run back to back on each device at queue
//! depth 128 with 4 KiB requests:
//!
//! 1. `fill`: one sequential pass of writes, so every logical page is mapped;
//! 2. `randwrite`: random writes of twice the logical capacity (the paper's
//!    preconditioning, steady-state GC);
//! 3. `randread`: random reads;
//! 4. `mixed70`: 70:30 random reads:writes — DFTL's read-path write-backs
//!    and the buffer flushes the read-priority scheduler defers only show
//!    when reads and writes interleave;
//! 5. `mixed70-open`: the same mix open loop (Poisson arrivals at
//!    `open_share` of the slowest variant's closed-loop mixed throughput),
//!    so that the read tail is not shaped by the closed loop.
//!
//! Phases 3, 4 and 5 each start from the state preconditioning (1 and 2) left:
//! the device is saved after phase 2 and restored before phase 4, so the
//! mixed phase does not inherit the cache contents (or DFTL's write-backs)
//! of the read phase. Each phase is reported separately; the five devices
//! run in parallel threads.
//!
//! A custom FTL (mapping scheme, GC policy, scheduler: see `ptsd_ftl`'s
//! "Write your own FTL") runs beside the built-ins with [`run_with`] and an
//! [`Entrant::Custom`]: same device, DFTL's mapping budget, same phases,
//! table, JSON and CDF plots; [`PaperOptions::with_phase`] adds phases of
//! its own (e.g. sequential runs for a prefetching scheme).
//!
//! ```
//! use ptsd_bench::paper_ftl::{run, PaperOptions};
//! let opts = PaperOptions::tiny();
//! let report = run(&opts, &|_, _, _| {}).unwrap();
//! assert_eq!(report.variants.len(), 5);
//! let page = &report.variants[0];
//! assert_eq!(page.name, "PAGE");
//! assert_eq!(page.phase("randread").unwrap().device.map_reads.total(), 0);
//! ```

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use ptsd_ftl::sim::{Checkpoint, Poisson, Simulator};
use ptsd_ftl::stats::{format_table, PhaseReport};
use ptsd_ftl::workload::{precondition, WorkloadSpec};
use ptsd_ftl::{Extensions, FtlConfig, FtlStats, SchemeFactory, Ssd, Variant};
use serde::{Deserialize, Serialize};

use thiserror::Error;

use crate::plot::{write_cdf_svg, Curve, PlotError};

/// The paper experiment could not run or could not write its results.
#[derive(Debug, Error)]
pub enum PaperError {
    #[error("invalid SSD configuration for {variant}")]
    Config {
        variant: String,
        #[source]
        source: ptsd_ftl::FtlError,
    },
    #[error("{variant}")]
    Sim {
        variant: String,
        #[source]
        source: ptsd_ftl::sim::SimError,
    },
    #[error("invalid experiment options: {0}")]
    Options(String),
    #[error("workload of phase {phase}")]
    Workload {
        phase: String,
        #[source]
        source: ptsd_ftl::workload::WorkloadError,
    },
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
    #[error("the simulation of {0} panicked (a bug; see the message above)")]
    Panicked(String),
}

/// The paper's logical capacity: 16 GiB.
pub const PAPER_LOGICAL_BYTES: u64 = 16 << 30;

/// Blocks per chip a scaled-down device keeps (the full-size board has 640).
pub const MIN_BLOCKS_PER_CHIP: u32 = 160;

/// Knobs of the experiment; [`PaperOptions::default`] is the paper's.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PaperOptions {
    /// Logical capacity as a share of 16 GiB.
    pub scale: f64,
    /// Host queue depth.
    pub qd: u32,
    /// Random writes of the preconditioning, in logical capacities.
    pub precondition_factor: f64,
    /// Reads of the random-read phase, in logical capacities.
    pub read_factor: f64,
    /// Requests of the mixed phase, in logical capacities.
    pub mixed_factor: f64,
    /// Share of reads in the mixed phase, in percent.
    pub mixed_read_percent: u8,
    /// Open-loop mixed phase: Poisson arrivals at this share of the slowest
    /// variant's closed-loop mixed-phase throughput (0 skips the phase).
    pub open_share: f64,
    pub seed: u64,
    /// Simulation threads (0: one per core).
    pub threads: usize,
    /// Geometry overrides (for tiny test devices): channels, chips per
    /// channel, pages per block.
    pub channels: Option<u32>,
    pub chips_per_channel: Option<u32>,
    pub pages_per_block: Option<u32>,
    /// Phases run after the paper's, each from the preconditioned device
    /// (none by default).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra_phases: Vec<(String, WorkloadSpec)>,
}

/// One device of the experiment: a built-in variant, or a custom FTL.
#[derive(Clone, Debug)]
pub enum Entrant {
    /// One of the paper's five.
    Variant(Variant),
    /// DFTL's device and mapping budget with custom parts in place of the
    /// built-ins (FIFO and greedy GC where it sets none).
    Custom {
        /// Its name in the table, JSON and plots.
        name: String,
        /// The custom scheme, GC policy and/or scheduler.
        parts: Extensions,
    },
}

impl Entrant {
    /// The paper's five variants.
    pub fn variants() -> Vec<Entrant> {
        Variant::ALL.into_iter().map(Entrant::Variant).collect()
    }

    /// A custom mapping scheme, named by its factory.
    pub fn scheme(scheme: Arc<dyn SchemeFactory>) -> Entrant {
        Entrant::Custom {
            name: scheme.name().to_uppercase(),
            parts: Extensions {
                scheme: Some(scheme),
                ..Extensions::default()
            },
        }
    }

    /// The name in the table.
    pub fn name(&self) -> String {
        match self {
            Entrant::Variant(v) => v.name().to_string(),
            Entrant::Custom { name, .. } => name.clone(),
        }
    }
}

impl Default for PaperOptions {
    fn default() -> Self {
        PaperOptions {
            scale: 1.0,
            qd: 128,
            precondition_factor: 2.0,
            read_factor: 0.25,
            mixed_factor: 0.25,
            mixed_read_percent: 70,
            open_share: 0.7,
            seed: 1,
            threads: 0,
            channels: None,
            chips_per_channel: None,
            pages_per_block: None,
            extra_phases: Vec::new(),
        }
    }
}

impl PaperOptions {
    /// A device small enough for a test in debug mode (seconds): 64 MiB
    /// logical on 2 channels x 2 chips (32-page blocks), queue depth 32.
    pub fn tiny() -> Self {
        PaperOptions {
            scale: 1.0 / 256.0,
            qd: 32,
            channels: Some(2),
            chips_per_channel: Some(2),
            ..PaperOptions::default()
        }
    }

    /// These options with one more phase after the paper's, run from the
    /// preconditioned device.
    pub fn with_phase(mut self, name: &str, spec: WorkloadSpec) -> Self {
        self.extra_phases.push((name.to_string(), spec));
        self
    }

    /// The device configuration of an entrant: a variant's
    /// ([`config`](Self::config)), or DFTL's with the custom parts.
    pub fn entrant_config(&self, entrant: &Entrant) -> FtlConfig {
        match entrant {
            Entrant::Variant(v) => self.config(*v),
            Entrant::Custom { parts, .. } => {
                let mut cfg = self.config(Variant::Dftl);
                cfg.custom = parts.clone();
                cfg
            }
        }
    }

    /// Logical bytes of the device (16 GiB x scale, whole 4 KiB pages).
    pub fn logical_bytes(&self) -> u64 {
        let bytes = (PAPER_LOGICAL_BYTES as f64 * self.scale).round() as u64;
        bytes / 4096 * 4096
    }

    /// The device configuration of one variant.
    ///
    /// Channels, chips and timing stay the paper's at every scale; blocks
    /// per chip shrink with the capacity. Below the full size, pages per
    /// block are halved (down to 8) until each chip has at least
    /// [`MIN_BLOCKS_PER_CHIP`] blocks, so that 20 % over-provisioning still
    /// leaves GC enough spare blocks per chip.
    pub fn config(&self, variant: Variant) -> FtlConfig {
        let mut base = FtlConfig::default();
        if let Some(c) = self.channels {
            base.channels = c;
        }
        if let Some(c) = self.chips_per_channel {
            base.chips_per_channel = c;
        }
        let mut sized = match self.pages_per_block {
            Some(p) => {
                base.pages_per_block = p;
                base.with_logical_bytes(self.logical_bytes())
            }
            None => loop {
                let sized = base.clone().with_logical_bytes(self.logical_bytes());
                if sized.blocks_per_chip >= MIN_BLOCKS_PER_CHIP || base.pages_per_block <= 8 {
                    break sized;
                }
                base.pages_per_block /= 2;
            },
        };
        let paper = FtlConfig::paper(variant, self.logical_bytes());
        sized.scheme = paper.scheme;
        sized.scheduler = paper.scheduler;
        sized.map_memory_bytes = paper.map_memory_bytes;
        sized
    }

    fn check(&self) -> Result<(), PaperError> {
        let bad = |m: &str| Err(PaperError::Options(m.to_string()));
        if !(self.scale.is_finite() && self.scale > 0.0) {
            return bad("scale must be a positive number");
        }
        if self.logical_bytes() < 1 << 20 {
            return bad("scale gives a device under 1 MiB");
        }
        if self.qd == 0 {
            return bad("queue depth must be at least 1");
        }
        for f in [
            self.precondition_factor,
            self.read_factor,
            self.mixed_factor,
        ] {
            if !(f.is_finite() && f >= 0.0) {
                return bad("phase lengths must be non-negative numbers");
            }
        }
        if !(self.open_share.is_finite() && (0.0..=1.0).contains(&self.open_share)) {
            return bad("open-loop share must be in [0, 1]");
        }
        if self.mixed_read_percent > 100 {
            return bad("mixed read share is over 100 %");
        }
        Ok(())
    }

    /// How many of [`phases`](Self::phases) are preconditioning: every
    /// later phase starts from the state they leave.
    pub const PRECONDITION_PHASES: usize = 2;

    /// The phases every variant runs, in order (the extra ones last).
    pub fn phases(&self) -> Vec<(String, WorkloadSpec)> {
        let mut all = self.paper_phases();
        all.extend(self.extra_phases.iter().cloned());
        all
    }

    /// The paper's phases.
    fn paper_phases(&self) -> Vec<(String, WorkloadSpec)> {
        let pages = self.logical_bytes() / 4096;
        let [fill, randwrite] = precondition(pages, self.precondition_factor, self.seed);
        let count = |f: f64| (pages as f64 * f).round() as u64;
        vec![
            ("fill".to_string(), fill),
            ("randwrite".to_string(), randwrite),
            (
                "randread".to_string(),
                WorkloadSpec::random_read(pages, count(self.read_factor), self.seed + 1),
            ),
            (
                format!("mixed{}", self.mixed_read_percent),
                WorkloadSpec::mixed(
                    pages,
                    self.mixed_read_percent,
                    count(self.mixed_factor),
                    self.seed + 2,
                ),
            ),
        ]
    }

    /// Requests one variant simulates over all phases.
    pub fn requests_per_variant(&self) -> u64 {
        self.phases().iter().map(|(_, s)| s.requests).sum()
    }
}

/// One variant's run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct VariantReport {
    /// The paper's name: PAGE, DFTL, PART, PART-SCHED, WRITEOPT.
    pub name: String,
    pub config: FtlConfig,
    pub phases: Vec<PhaseReport<FtlStats>>,
    /// The paper's "total performance" (its Fig. 12): requests of the
    /// random-write and random-read phases over their simulated time, in
    /// IOPS.
    pub total_iops: f64,
    pub wall_seconds: f64,
}

impl VariantReport {
    /// The phase called `name`.
    pub fn phase(&self, name: &str) -> Option<&PhaseReport<FtlStats>> {
        self.phases.iter().find(|p| p.name == name)
    }

    /// Requests of `randwrite` and `randread` over their simulated time.
    fn total(phases: &[PhaseReport<FtlStats>]) -> f64 {
        let (mut n, mut secs) = (0u64, 0.0);
        for p in phases
            .iter()
            .filter(|p| p.name == "randwrite" || p.name == "randread")
        {
            n += p.throughput.requests;
            secs += p.throughput.sim_seconds;
        }
        if secs > 0.0 {
            n as f64 / secs
        } else {
            0.0
        }
    }
}

/// Name of the open-loop mixed phase.
pub fn open_phase_name(opts: &PaperOptions) -> String {
    format!("mixed{}-open", opts.mixed_read_percent)
}

/// Everything the experiment measured.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PaperReport {
    pub options: PaperOptions,
    pub logical_bytes: u64,
    /// The page FTL's full map, and the budget the others get.
    pub full_map_bytes: u64,
    pub map_budget_bytes: u64,
    /// In the paper's order.
    pub variants: Vec<VariantReport>,
    /// Arrival rate of the open-loop mixed phase (0: not run).
    pub open_iops: f64,
    /// Wall time of the whole experiment.
    pub wall_seconds: f64,
    /// Simulated requests (all variants) per second of wall time.
    pub requests_per_wall_second: f64,
}

/// Run one variant through every phase; `progress(done, total)` is called
/// as requests complete.
pub fn run_variant(
    opts: &PaperOptions,
    variant: Variant,
    progress: &(dyn Fn(u64, u64) + Sync),
) -> Result<VariantReport, PaperError> {
    run_entrant(opts, &Entrant::Variant(variant), progress)
}

/// [`run_variant`] for any entrant (a custom FTL too).
pub fn run_entrant(
    opts: &PaperOptions,
    entrant: &Entrant,
    progress: &(dyn Fn(u64, u64) + Sync),
) -> Result<VariantReport, PaperError> {
    run_closed_phases(opts, entrant, progress).map(|(v, _)| v)
}

/// [`run_variant`], also returning the preconditioned device (for the
/// open-loop phase).
fn run_closed_phases(
    opts: &PaperOptions,
    entrant: &Entrant,
    progress: &(dyn Fn(u64, u64) + Sync),
) -> Result<(VariantReport, Option<Checkpoint<Ssd>>), PaperError> {
    opts.check()?;
    let wall = Instant::now();
    let name = entrant.name();
    let config = opts.entrant_config(entrant);
    let ssd = Ssd::new(config.clone()).map_err(|source| PaperError::Config {
        variant: name.clone(),
        source,
    })?;
    let total = opts.requests_per_variant();
    // Requests of the phases already finished, for the progress callback.
    let before = AtomicU64::new(0);
    let mut sim = Simulator::new(ssd).with_progress(|p| {
        progress(before.load(Ordering::Relaxed) + p.completed, total);
    });
    let mut phases = Vec::new();
    let all = opts.phases();
    let last = all.len() - 1;
    let mut preconditioned = None;
    for (k, (phase_name, spec)) in all.into_iter().enumerate() {
        if k == PaperOptions::PRECONDITION_PHASES && k < last {
            preconditioned = sim.checkpoint();
        } else if k > PaperOptions::PRECONDITION_PHASES {
            // Back to the preconditioned device (and clock).
            let saved = preconditioned.take().ok_or_else(|| {
                PaperError::Options("the device cannot be saved between phases".into())
            })?;
            sim.restore(saved);
            preconditioned = sim.checkpoint();
        }
        let mut workload = spec.build().map_err(|source| PaperError::Workload {
            phase: phase_name.clone(),
            source,
        })?;
        let report = sim
            .run_closed(&phase_name, &mut workload, opts.qd)
            .map_err(|source| PaperError::Sim {
                variant: name.clone(),
                source,
            })?;
        before.fetch_add(spec.requests, Ordering::Relaxed);
        phases.push(report);
    }
    Ok((
        VariantReport {
            name,
            config,
            total_iops: VariantReport::total(&phases),
            phases,
            wall_seconds: wall.elapsed().as_secs_f64(),
        },
        preconditioned,
    ))
}

/// The open-loop mixed phase on a preconditioned device: the mixed
/// workload with Poisson arrivals at `iops`.
fn run_open_phase(
    opts: &PaperOptions,
    entrant: &Entrant,
    saved: Checkpoint<Ssd>,
    iops: f64,
) -> Result<PhaseReport<FtlStats>, PaperError> {
    let (_, spec) = opts
        .paper_phases()
        .pop()
        .ok_or_else(|| PaperError::Options("no mixed phase to run open-loop".to_string()))?;
    let name = open_phase_name(opts);
    let workload = spec.build().map_err(|source| PaperError::Workload {
        phase: name.clone(),
        source,
    })?;
    let mut arrivals = Poisson::new(workload, iops, opts.seed + 3);
    Simulator::from_checkpoint(saved)
        .run_open(&name, &mut arrivals, 1.0)
        .map_err(|source| PaperError::Sim {
            variant: entrant.name(),
            source,
        })
}

/// Run `job(i)` for every entrant index on `threads` threads in `order`
/// (slowest first); a panic becomes [`PaperError::Panicked`].
fn parallel<T: Send>(
    threads: usize,
    entrants: &[Entrant],
    order: &[usize],
    job: &(dyn Fn(usize) -> Result<T, PaperError> + Sync),
) -> Result<Vec<T>, PaperError> {
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Result<T, PaperError>>>> =
        Mutex::new((0..entrants.len()).map(|_| None).collect());
    let panicked = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| loop {
                    let k = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&i) = order.get(k) else { break };
                    let r = job(i);
                    let failed = r.is_err();
                    results.lock().unwrap_or_else(|e| e.into_inner())[i] = Some(r);
                    if failed {
                        // Skip the rest: the experiment is lost anyway.
                        next.store(order.len(), Ordering::Relaxed);
                    }
                })
            })
            .collect();
        // Joined here, a panicking simulation becomes an error, not a panic.
        workers.into_iter().map(|w| w.join()).any(|r| r.is_err())
    });
    let mut out = Vec::new();
    let mut lost = Vec::new();
    for (i, r) in results
        .into_inner()
        .unwrap_or_else(|e| e.into_inner())
        .into_iter()
        .enumerate()
    {
        match r {
            Some(Ok(v)) => out.push(v),
            Some(Err(e)) => return Err(e),
            None => lost.push(entrants[i].name()),
        }
    }
    if panicked || !lost.is_empty() {
        return Err(PaperError::Panicked(lost.join(", ")));
    }
    Ok(out)
}

/// The order to start the variants in: the slowest to simulate first, so
/// that on few cores the last one to start is a short one.
const START_ORDER: [Variant; 5] = [
    Variant::Dftl,
    Variant::Part,
    Variant::PartSched,
    Variant::WriteOpt,
    Variant::Page,
];

/// Entrant indexes in start order: custom ones first (unknown speed), then
/// the variants slowest first.
fn start_order(entrants: &[Entrant]) -> Vec<usize> {
    let rank = |e: &Entrant| match e {
        Entrant::Custom { .. } => 0,
        Entrant::Variant(v) => 1 + START_ORDER.iter().position(|s| s == v).unwrap_or(0),
    };
    let mut order: Vec<usize> = (0..entrants.len()).collect();
    order.sort_by_key(|&i| rank(&entrants[i]));
    order
}

/// Run all five variants on `opts.threads` threads; `progress(variant,
/// done, total)` is called as each makes progress (variant indexes follow
/// [`Variant::ALL`]).
pub fn run(
    opts: &PaperOptions,
    progress: &(dyn Fn(usize, u64, u64) + Sync),
) -> Result<PaperReport, PaperError> {
    run_with(opts, &Entrant::variants(), progress)
}

/// Run `entrants` (built-in variants and custom FTLs) through the paper's
/// phases, in one table, JSON and set of plots, in the order given;
/// `progress(entrant, done, total)` as each makes progress.
///
/// ```
/// use std::sync::Arc;
/// use ptsd_bench::paper_ftl::{run_with, Entrant, PaperOptions};
/// use ptsd_ftl::{SchemeConfig, Variant};
///
/// // A custom scheme (here a built-in one passed as a factory) beside DFTL.
/// let entrants = [Entrant::Variant(Variant::Dftl), Entrant::scheme(Arc::new(SchemeConfig::ptsd()))];
/// let report = run_with(&PaperOptions::tiny(), &entrants, &|_, _, _| {}).unwrap();
/// assert_eq!(report.variants[1].name, "PTSD");
/// assert!(report.table().contains("PTSD"));
/// ```
pub fn run_with(
    opts: &PaperOptions,
    entrants: &[Entrant],
    progress: &(dyn Fn(usize, u64, u64) + Sync),
) -> Result<PaperReport, PaperError> {
    opts.check()?;
    if entrants.is_empty() {
        return Err(PaperError::Options("no FTL to run".into()));
    }
    let wall = Instant::now();
    let threads = match opts.threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    }
    .min(entrants.len());
    let order = start_order(entrants);
    let saved: Vec<Mutex<Option<Checkpoint<Ssd>>>> =
        (0..entrants.len()).map(|_| Mutex::new(None)).collect();
    let mut variants = parallel(threads, entrants, &order, &|i| {
        let (report, checkpoint) =
            run_closed_phases(opts, &entrants[i], &|done, total| progress(i, done, total))?;
        *saved[i].lock().unwrap_or_else(|e| e.into_inner()) = checkpoint;
        Ok(report)
    })?;
    // The open-loop phase: one rate for all, below the slowest's capacity.
    let mixed = format!("mixed{}", opts.mixed_read_percent);
    let slowest = variants
        .iter()
        .filter_map(|v| v.phase(&mixed).map(|p| p.throughput.iops))
        .fold(f64::INFINITY, f64::min);
    let open_iops = (opts.open_share * slowest).max(0.0);
    let mut open_requests = 0;
    if open_iops.is_finite() && open_iops > 0.0 {
        let open = parallel(threads, entrants, &order, &|i| {
            let checkpoint = saved[i]
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take()
                .ok_or_else(|| {
                    PaperError::Options("the device cannot be saved between phases".into())
                })?;
            run_open_phase(opts, &entrants[i], checkpoint, open_iops)
        })?;
        for (v, p) in variants.iter_mut().zip(open) {
            open_requests += p.throughput.requests;
            v.phases.push(p);
        }
    }
    let wall_seconds = wall.elapsed().as_secs_f64();
    let requests = opts.requests_per_variant() * variants.len() as u64 + open_requests;
    let page_cfg = opts.config(Variant::Page);
    let dftl_cfg = opts.config(Variant::Dftl);
    Ok(PaperReport {
        options: opts.clone(),
        logical_bytes: opts.logical_bytes(),
        full_map_bytes: page_cfg.full_map_bytes(),
        map_budget_bytes: dftl_cfg.map_budget_bytes(),
        variants,
        open_iops,
        wall_seconds,
        requests_per_wall_second: requests as f64 / wall_seconds.max(1e-9),
    })
}

impl PaperReport {
    /// One table: every phase, the five variants under each.
    pub fn table(&self) -> String {
        let mut out = format!(
            "PTSD paper experiment: {:.2} GiB logical, 20 % OP, map memory {} KiB of the page FTL's {} KiB, qd {}\n\n",
            self.logical_bytes as f64 / (1u64 << 30) as f64,
            self.map_budget_bytes / 1024,
            self.full_map_bytes / 1024,
            self.options.qd,
        );
        let Some(first) = self.variants.first() else {
            return out;
        };
        for phase in &first.phases {
            let rows: Vec<(String, &PhaseReport<FtlStats>)> = self
                .variants
                .iter()
                .filter_map(|v| v.phase(&phase.name).map(|p| (v.name.clone(), p)))
                .collect();
            out.push_str(&format_table(
                &format!("phase {}: {}", phase.name, phase.workload),
                &rows,
            ));
            out.push('\n');
        }
        out.push_str(
            "total performance (the paper's Fig. 12: randwrite + randread requests / their simulated time)\n",
        );
        for v in &self.variants {
            out.push_str(&format!("{:<12} {:>9.0} IOPS\n", v.name, v.total_iops));
        }
        out.push('\n');
        out.push_str(&format!(
            "wall time {:.1} s, {:.2} M simulated requests per wall second (all threads)\n",
            self.wall_seconds,
            self.requests_per_wall_second / 1e6
        ));
        out
    }

    /// Write `paper_ftl.json`, `table.txt` and one read-latency CDF plot per
    /// read-carrying phase (`read_cdf_<phase>.svg`, whole distribution and
    /// the tail from p80) into `dir`; returns the files written.
    pub fn write_outputs(&self, dir: &Path) -> Result<Vec<PathBuf>, PaperError> {
        let io = |path: &Path| {
            let path = path.display().to_string();
            move |source| PaperError::Io { path, source }
        };
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        let mut written = Vec::new();
        let json = dir.join("paper_ftl.json");
        std::fs::write(&json, serde_json::to_string_pretty(self)?).map_err(io(&json))?;
        written.push(json);
        let table = dir.join("table.txt");
        std::fs::write(&table, self.table()).map_err(io(&table))?;
        written.push(table);
        let Some(first) = self.variants.first() else {
            return Ok(written);
        };
        for phase in &first.phases {
            if phase.read.count == 0 {
                continue;
            }
            let curves: Vec<Curve<'_>> = self
                .variants
                .iter()
                .filter_map(|v| {
                    v.phase(&phase.name).map(|p| Curve {
                        label: &v.name,
                        points: &p.read_cdf,
                    })
                })
                .collect();
            let path = dir.join(format!("read_cdf_{}.svg", phase.name));
            write_cdf_svg(
                &path,
                &format!(
                    "Read latency CDF, phase {} ({:.2} GiB, qd {})",
                    phase.name,
                    self.logical_bytes as f64 / (1u64 << 30) as f64,
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

    /// The mixed phase runs on the device exactly as preconditioning left
    /// it: the same as running it right after preconditioning, with no read
    /// phase in between.
    #[test]
    fn mixed_phase_starts_from_the_preconditioned_device() {
        let opts = PaperOptions::tiny();
        for variant in [Variant::Dftl, Variant::WriteOpt] {
            let report = run_variant(&opts, variant, &|_, _| {}).unwrap();
            let mut sim = Simulator::new(Ssd::new(opts.config(variant)).unwrap());
            let phases = opts.phases();
            let direct: Vec<_> = [0, 1, 3]
                .iter()
                .map(|&k| {
                    let (name, spec) = &phases[k];
                    let mut w = spec.build().unwrap();
                    sim.run_closed(name, &mut w, opts.qd).unwrap()
                })
                .collect();
            let mixed = &report.phases[3];
            let want = &direct[2];
            assert_eq!(mixed.name, want.name);
            assert_eq!(mixed.device, want.device, "{}", variant.name());
            assert_eq!(mixed.read_cdf, want.read_cdf, "{}", variant.name());
            assert_eq!(mixed.write_cdf, want.write_cdf, "{}", variant.name());
            // The read phase before it did run (and DFTL's reads wrote).
            assert!(report.phases[2].device.host_read_pages > 0);
        }
    }
}
