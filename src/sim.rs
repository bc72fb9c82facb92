//! `ptsd sim`: run the emulated SSD under a synthetic workload or a trace,
//! or reproduce the PTSD paper's experiment (`--paper`).

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use ptsd_bench::paper_ftl::{self, PaperOptions};
use ptsd_blockdev::size::parse_size;
use ptsd_ftl::sim::{Poisson, Progress, Simulator, TraceSource};
use ptsd_ftl::stats::SimReport;
use ptsd_ftl::trace::{BlkparseEvent, OutOfRange, TraceFormat, TraceOptions, TraceReader};
use ptsd_ftl::workload::{precondition, Access, WorkloadKind, WorkloadSpec};
use ptsd_ftl::{FtlConfig, FtlStats, SchedulerKind, SchemeConfig, Ssd};
use serde::Serialize;

use crate::zoned::ZonedArgs;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum FtlKind {
    /// Full page map in DRAM.
    Page,
    /// Demand-based FTL: LRU cache of whole mapping pages.
    Dftl,
    /// PTSD: clean/dirty partitioned mapping cache.
    Ptsd,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum TraceFormatArg {
    Msr,
    Blkparse,
    Fiu,
}

/// Run the emulated SSD under a workload or a trace and report latency,
/// throughput and FTL counters per phase.
#[derive(Args, Debug)]
pub struct SimArgs {
    /// Reproduce the PTSD paper's experiment: PAGE, DFTL, PART, PART-SCHED,
    /// WRITEOPT; writes a table, a JSON and read-latency CDF plots to --out.
    #[arg(long)]
    paper: bool,
    /// --paper: logical capacity as a share of the paper's 16 GiB.
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    /// --paper: where to write the JSON, table and plots.
    #[arg(long, default_value = "target/paper")]
    out: PathBuf,
    /// --paper: simulation threads (0: one per core).
    #[arg(long, default_value_t = 0)]
    threads: usize,

    /// Simulate a zoned (ZNS) SSD on the same NAND board, --size of zones:
    /// run --zoned-workload on it (at --qd, --request-pages, --requests),
    /// or with --compare the conventional-vs-zoned experiment.
    #[arg(long)]
    zoned: bool,
    /// --zoned: seqwrite or seqwrite:ZONES (ZONES written at once), append or
    /// append:ZONES (--qd writers appending to ZONES zones), randread or reset.
    #[arg(long, default_value = "seqwrite:4")]
    zoned_workload: String,
    /// --zoned: chips each zone stripes over (0: all).
    #[arg(long, default_value_t = 8)]
    stripe: u32,
    /// --zoned: writable pages per zone [default: the zone size].
    #[arg(long)]
    zone_capacity: Option<u64>,
    /// --zoned: maximum open zones (0: no limit).
    #[arg(long, default_value_t = 14)]
    max_open: u32,
    /// --zoned: maximum active zones (0: no limit).
    #[arg(long, default_value_t = 14)]
    max_active: u32,
    /// --zoned: the same host workload (fill, random overwrites, then
    /// --mixed-reads % reads) on the conventional SSD (device GC) and on
    /// the zoned SSD under a host log-structured layer (host GC), --size
    /// logical at --op spare; a table, JSON and read-latency CDF plots go
    /// to --zoned-out.
    #[arg(long, requires = "zoned")]
    compare: bool,
    /// --compare: reads in the mixed phase, in percent.
    #[arg(long, default_value_t = 70)]
    mixed_reads: u8,
    /// --compare: where to write the JSON, table and plots.
    #[arg(long, default_value = "target/zns")]
    zoned_out: PathBuf,

    /// Mapping scheme.
    #[arg(long, value_enum, default_value = "ptsd")]
    ftl: FtlKind,
    /// PTSD: entry-granular dirty region with greedy batch update (WRITEOPT).
    #[arg(long)]
    entry_dirty: bool,
    /// PTSD: adapt the clean:dirty split to the workload.
    #[arg(long)]
    adaptive: bool,
    /// PTSD: share of the mapping cache for clean pages.
    #[arg(long, default_value_t = 0.5)]
    clean_ratio: f64,
    /// Interface-queue scheduler: fifo or read-priority [default:
    /// read-priority for ptsd, fifo otherwise].
    #[arg(long)]
    sched: Option<SchedulerKind>,
    /// Logical capacity (e.g. 16GiB, 512MiB; K/M/G/T = powers of 1024,
    /// KB/MB/GB = powers of 1000).
    #[arg(long, default_value = "16GiB", value_parser = parse_size)]
    size: u64,
    /// Over-provisioning ratio.
    #[arg(long, default_value_t = 0.2)]
    op: f64,
    /// Mapping memory: bytes (4MiB) or a share of the full page map (20%)
    /// [default: full map for page, 20% otherwise].
    #[arg(long)]
    map_memory: Option<String>,
    #[arg(long)]
    channels: Option<u32>,
    /// Chips per channel.
    #[arg(long)]
    chips: Option<u32>,
    #[arg(long)]
    pages_per_block: Option<u32>,
    /// Page size in bytes (a power of two).
    #[arg(long)]
    page_size: Option<u32>,
    /// Write-buffer pages (0: one per chip).
    #[arg(long)]
    write_buffer_pages: Option<u32>,

    /// randread, randwrite, seqread, seqwrite or mixed:R (R% reads).
    #[arg(long, default_value = "randread")]
    workload: String,
    /// Zipf-distributed addresses with this exponent instead of uniform.
    #[arg(long)]
    zipf: Option<f64>,
    /// Request size in pages.
    #[arg(long, default_value_t = 1)]
    request_pages: u32,
    /// Host queue depth.
    #[arg(long, default_value_t = 128)]
    qd: u32,
    /// Requests of the measured phase [default: a quarter of the capacity
    /// in pages].
    #[arg(long)]
    requests: Option<u64>,
    /// Before measuring: a sequential fill, then random writes of this many
    /// capacities ("2x"); "0" skips preconditioning.
    #[arg(long, default_value = "2x")]
    precondition: String,

    /// Replay a trace instead of a synthetic workload.
    #[arg(long)]
    trace: Option<PathBuf>,
    #[arg(long, value_enum, default_value = "msr")]
    trace_format: TraceFormatArg,
    /// Refuse (instead of wrapping) trace addresses beyond the capacity.
    #[arg(long)]
    trace_reject_out_of_range: bool,
    /// blkparse: replay D (dispatch) events instead of Q (queue) events.
    #[arg(long)]
    trace_dispatch: bool,
    /// Replay the trace open-loop, honouring its timestamps at this speed
    /// (2 = twice as fast) instead of closed-loop at --qd.
    #[arg(long)]
    trace_speed: Option<f64>,
    /// How requests of the measured phase arrive: `closed` (a new one as
    /// each completes, --qd outstanding) or `poisson:IOPS` (open loop:
    /// Poisson arrivals at IOPS per second, however many are outstanding).
    #[arg(long, default_value = "closed")]
    arrival: String,

    /// Print JSON on stdout (the table goes to stderr).
    #[arg(long)]
    json: bool,
    #[arg(long, default_value_t = 1)]
    seed: u64,

    /// Run a sweep: a TOML file with `[base]` options and `[axes]` (option =
    /// list of values; the cartesian product) or `[[runs]]`; any option of
    /// `ptsd sim` may appear, spelt as on the command line (`map-memory` or
    /// `map_memory`). Writes one JSON-lines file per shard into --sweep-out.
    #[arg(long, value_name = "SWEEP.toml")]
    sweep: Option<PathBuf>,
    /// --sweep: run the I-th of N disjoint slices (`I/N`) [default: I from
    /// SLURM_ARRAY_TASK_ID or JOB_COMPLETION_INDEX, N from PTSD_SHARD_COUNT,
    /// the sweep's `shards`, or a Slurm array of ids 0..N-1; else the whole
    /// sweep].
    #[arg(long, value_name = "I/N")]
    shard: Option<String>,
    /// --sweep: directory of the shard files (`ptsd sim merge` reads it).
    #[arg(long, default_value = "target/sweep")]
    sweep_out: PathBuf,

    #[command(subcommand)]
    action: Option<SimAction>,
}

#[derive(clap::Subcommand, Debug)]
pub enum SimAction {
    /// Merge the shard files of a sweep: check that every run is present
    /// exactly once, then write a table, one JSON and plots against each axis.
    Merge(crate::sweep::MergeArgs),
}

/// `closed` or `poisson:IOPS`: the Poisson rate, if open loop.
fn parse_arrival(s: &str) -> Result<Option<f64>> {
    let t = s.trim();
    if t.eq_ignore_ascii_case("closed") {
        return Ok(None);
    }
    let Some(rate) = t.strip_prefix("poisson:") else {
        bail!("--arrival {s:?}: expected closed or poisson:IOPS");
    };
    let iops: f64 = rate
        .trim()
        .parse()
        .with_context(|| format!("--arrival {s:?}: IOPS is not a number"))?;
    if !(iops.is_finite() && iops > 0.0) {
        bail!("--arrival {s:?}: IOPS must be positive");
    }
    Ok(Some(iops))
}

/// `2x`, `2`, `0.5x`, `none`.
fn parse_factor(s: &str) -> Result<f64> {
    let t = s.trim().trim_end_matches(['x', 'X']);
    if t.eq_ignore_ascii_case("none") {
        return Ok(0.0);
    }
    let f: f64 = t
        .parse()
        .with_context(|| format!("--precondition {s:?}: expected e.g. 2x"))?;
    if !(f.is_finite() && f >= 0.0) {
        bail!("--precondition {s:?} must be a non-negative number");
    }
    Ok(f)
}

impl SimArgs {
    fn config(&self) -> Result<FtlConfig> {
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
        cfg.scheme = match self.ftl {
            FtlKind::Page => SchemeConfig::Page,
            FtlKind::Dftl => SchemeConfig::Dftl,
            FtlKind::Ptsd => SchemeConfig::Ptsd {
                clean_ratio: self.clean_ratio,
                entry_dirty: self.entry_dirty,
                adaptive: self.adaptive,
            },
        };
        if self.ftl != FtlKind::Ptsd && (self.entry_dirty || self.adaptive) {
            bail!("--entry-dirty and --adaptive apply to --ftl ptsd only");
        }
        cfg.scheduler = match self.sched {
            Some(s) => s,
            None if self.ftl == FtlKind::Ptsd => SchedulerKind::ReadPriority,
            None => SchedulerKind::Fifo,
        };
        let full_map = cfg.full_map_bytes();
        cfg.map_memory_bytes = match (&self.map_memory, self.ftl) {
            (None, FtlKind::Page) => None,
            (None, _) => Some(full_map / 5),
            (Some(m), _) => Some(match m.trim().strip_suffix('%') {
                Some(pct) => {
                    let pct: f64 = pct
                        .trim()
                        .parse()
                        .with_context(|| format!("--map-memory {m:?}"))?;
                    if !(pct.is_finite() && pct > 0.0) {
                        bail!("--map-memory {m:?} must be a positive share");
                    }
                    (full_map as f64 * pct / 100.0).round() as u64
                }
                None => parse_size(m)?,
            }),
        };
        cfg.validate().context("invalid SSD configuration")?;
        Ok(cfg)
    }

    fn paper_options(&self) -> PaperOptions {
        PaperOptions {
            scale: self.scale,
            qd: self.qd,
            seed: self.seed,
            threads: self.threads,
            channels: self.channels,
            chips_per_channel: self.chips,
            pages_per_block: self.pages_per_block,
            ..PaperOptions::default()
        }
    }
}

/// A progress bar on stderr that appears only once a run has taken more
/// than a second (and only on a terminal).
struct LazyBar {
    bar: ProgressBar,
    start: Instant,
    shown: std::sync::atomic::AtomicBool,
}

impl LazyBar {
    fn new(total: u64, message: &str) -> Self {
        let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::hidden());
        bar.set_style(
            ProgressStyle::with_template(
                "{msg} [{elapsed_precise}] {bar:30} {pos}/{len} requests (eta {eta})",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar.set_message(message.to_string());
        LazyBar {
            bar,
            start: Instant::now(),
            shown: false.into(),
        }
    }

    fn set(&self, done: u64, message: Option<&str>) {
        if !self.shown.load(Ordering::Relaxed) && self.start.elapsed() > Duration::from_secs(1) {
            self.shown.store(true, Ordering::Relaxed);
            self.bar.set_draw_target(ProgressDrawTarget::stderr());
        }
        if let Some(m) = message {
            self.bar.set_message(m.to_string());
        }
        self.bar.set_position(done);
    }

    fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

/// An experiment's report as [`print_outputs`] prints it, the table ending
/// with the files it wrote; the JSON only when `json`.
pub(crate) fn print_report<R: serde::Serialize>(
    mut table: String,
    files: &[std::path::PathBuf],
    report: &R,
    json: bool,
) -> Result<()> {
    table.push_str("wrote:");
    for f in files {
        table.push_str(&format!(" {}", f.display()));
    }
    table.push('\n');
    let json = if json {
        Some(serde_json::to_string_pretty(report)?)
    } else {
        None
    };
    print_outputs(&table, json)
}

pub(crate) fn print_outputs(table: &str, json: Option<String>) -> Result<()> {
    let mut out = std::io::stdout().lock();
    match json {
        Some(j) => {
            eout!("{table}");
            writeln!(out, "{j}")?;
        }
        None => write!(out, "{table}")?,
    }
    Ok(())
}

pub fn run(args: SimArgs) -> Result<()> {
    if let Some(SimAction::Merge(m)) = &args.action {
        return crate::sweep::merge(m);
    }
    if let Some(file) = &args.sweep {
        return crate::sweep::run(file, args.shard.as_deref(), &args.sweep_out);
    }
    if args.paper {
        return run_paper(&args);
    }
    if args.zoned {
        return crate::zoned::run(&ZonedArgs {
            compare: args.compare,
            workload: &args.zoned_workload,
            size: args.size,
            op: args.op,
            qd: args.qd,
            request_pages: args.request_pages,
            requests: args.requests,
            seed: args.seed,
            channels: args.channels,
            chips: args.chips,
            pages_per_block: args.pages_per_block,
            stripe: args.stripe,
            zone_capacity: args.zone_capacity,
            max_open: args.max_open,
            max_active: args.max_active,
            mixed_reads: args.mixed_reads,
            out: &args.zoned_out,
            json: args.json,
        });
    }
    let (cfg, report) = simulate(&args, true)?;
    #[derive(Serialize)]
    struct Output<'a> {
        config: &'a FtlConfig,
        report: &'a SimReport<FtlStats>,
    }
    let json = if args.json {
        Some(serde_json::to_string_pretty(&Output {
            config: &cfg,
            report: &report,
        })?)
    } else {
        None
    };
    let wall: f64 = report.phases.iter().map(|p| p.wall_seconds).sum();
    let reqs: u64 = report.phases.iter().map(|p| p.throughput.requests).sum();
    let table = format!(
        "{}\nwall time {:.2} s, {:.2} M simulated requests per wall second\n",
        report.table(),
        wall,
        reqs as f64 / wall.max(1e-9) / 1e6
    );
    print_outputs(&table, json)
}

/// Options a sweep may not set: they choose what `ptsd sim` does, not what
/// one run simulates.
pub const NOT_SWEEPABLE: &[&str] = &[
    "paper",
    "zoned",
    "compare",
    "zoned-out",
    "json",
    "sweep",
    "shard",
    "sweep-out",
    "out",
    "threads",
];

/// One sweep run: `ptsd sim` parsed from `--option value` words.
pub fn simulate_words(words: &[String]) -> Result<serde_json::Value> {
    #[derive(clap::Parser)]
    #[command(no_binary_name = true)]
    struct One {
        #[command(flatten)]
        sim: SimArgs,
    }
    let one = <One as clap::Parser>::try_parse_from(words).map_err(|e| anyhow::anyhow!("{e}"))?;
    let (config, report) = simulate(&one.sim, false)?;
    Ok(serde_json::json!({ "config": config, "report": report }))
}

/// Run the configured workload (or trace) and return the device
/// configuration and the per-phase report.
fn simulate(args: &SimArgs, progress: bool) -> Result<(FtlConfig, SimReport<FtlStats>)> {
    let cfg = args.config()?;
    let pages = cfg.logical_pages();
    let ssd = Ssd::new(cfg.clone()).context("creating the SSD")?;
    let label = format!(
        "{} {:.2} GiB, map memory {} KiB, {:?}, qd {}",
        cfg.scheme.name(),
        pages as f64 * f64::from(cfg.page_size) / (1u64 << 30) as f64,
        cfg.map_budget_bytes() / 1024,
        cfg.scheduler,
        args.qd
    );

    let factor = parse_factor(&args.precondition)?;
    let mut plan: Vec<(String, WorkloadSpec)> = Vec::new();
    if factor > 0.0 {
        let [fill, random] = precondition(pages, factor, args.seed);
        plan.push(("fill".into(), fill));
        plan.push(("precondition".into(), random));
    }
    let measured = args.requests.unwrap_or((pages / 4).max(1));
    if args.trace.is_none() {
        let kind: WorkloadKind = args.workload.parse()?;
        let access = match (kind.sequential, args.zipf) {
            (true, Some(_)) => bail!("--zipf needs a random workload"),
            (true, None) => Access::Sequential,
            (false, None) => Access::Uniform,
            (false, Some(theta)) => Access::Zipf { theta },
        };
        let spec = WorkloadSpec {
            access,
            read_percent: kind.read_percent,
            pages_per_request: args.request_pages,
            start_lpn: 0,
            span_pages: pages,
            requests: measured,
            seed: args.seed.wrapping_add(1),
        };
        spec.build()?;
        plan.push((kind.to_string(), spec));
    }
    let planned: u64 = plan.iter().map(|(_, s)| s.requests).sum();

    // A sweep prints a line per run instead of a bar.
    let bar = progress.then(|| LazyBar::new(planned.max(1), "sim"));
    let before = AtomicU64::new(0);
    let mut sim = Simulator::new(ssd).with_progress(|p: &Progress<'_>| {
        if let Some(bar) = &bar {
            bar.set(before.load(Ordering::Relaxed) + p.completed, Some(p.phase));
        }
    });
    let mut report = SimReport::<FtlStats> {
        label,
        phases: Vec::new(),
    };
    let poisson = parse_arrival(&args.arrival)?;
    let last = plan.len().saturating_sub(1);
    for (k, (name, spec)) in plan.iter().enumerate() {
        let w = spec.build()?;
        // Preconditioning stays closed-loop; the measured phase may not.
        let phase = match poisson {
            Some(iops) if k == last => {
                let mut arrivals = Poisson::new(w, iops, args.seed);
                sim.run_open(name, &mut arrivals, 1.0)
            }
            _ => {
                let mut w = w;
                sim.run_closed(name, &mut w, args.qd)
            }
        };
        report
            .phases
            .push(phase.with_context(|| format!("phase {name}"))?);
        before.fetch_add(spec.requests, Ordering::Relaxed);
    }
    if let Some(path) = &args.trace {
        let format = match args.trace_format {
            TraceFormatArg::Msr => TraceFormat::Msr,
            TraceFormatArg::Blkparse => TraceFormat::Blkparse,
            TraceFormatArg::Fiu => TraceFormat::Fiu,
        };
        let mut opts = TraceOptions::new(format, cfg.page_size, pages);
        if args.trace_reject_out_of_range {
            opts.out_of_range = OutOfRange::Reject;
        }
        if args.trace_dispatch {
            opts.blkparse_event = BlkparseEvent::Dispatched;
        }
        let reader = TraceReader::open(path, opts)?;
        let name = path.display().to_string();
        let mut source = TraceSource::new(reader, &name);
        let phase = match args.trace_speed {
            Some(speed) if speed > 0.0 && speed.is_finite() => {
                sim.run_open("trace", &mut source, 1.0 / speed)?
            }
            Some(speed) => bail!("--trace-speed {speed} must be a positive number"),
            None => sim.run_closed("trace", &mut source, args.qd)?,
        };
        report.phases.push(phase);
    }
    drop(sim);
    if let Some(bar) = &bar {
        bar.finish();
    }
    Ok((cfg, report))
}

fn run_paper(args: &SimArgs) -> Result<()> {
    let opts = args.paper_options();
    let per_variant = opts.requests_per_variant();
    let bar = LazyBar::new(per_variant * 5, "paper: PAGE DFTL PART PART-SCHED WRITEOPT");
    let done: [AtomicU64; 5] = Default::default();
    let report = paper_ftl::run(&opts, &|variant, n, _total| {
        done[variant].store(n, Ordering::Relaxed);
        bar.set(done.iter().map(|d| d.load(Ordering::Relaxed)).sum(), None);
    })?;
    bar.finish();
    let files = report.write_outputs(&args.out)?;
    print_report(report.table(), &files, &report, args.json)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_use_the_one_syntax() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            sim: SimArgs,
        }
        let parse = |args: &[&str]| Cli::try_parse_from([&["sim"], args].concat()).map(|c| c.sim);
        let a = parse(&["--size", "4GiB", "--map-memory", "4MB"]).unwrap();
        assert_eq!(a.size, 4 << 30);
        assert_eq!(a.config().unwrap().map_memory_bytes, Some(4_000_000));
        assert_eq!(parse(&["--size", "4G"]).unwrap().size, 4 << 30);
        assert!(parse(&["--size", "4 parsecs"]).is_err());
        assert!(parse(&["--map-memory", "4 parsecs"])
            .unwrap()
            .config()
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
}
