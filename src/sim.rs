//! `ptsd sim`: run the emulated SSD under a synthetic workload or a trace,
//! or reproduce the PTSD paper's experiment (`--paper`).

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Result;
use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use ptsd_bench::paper_ftl::{self, PaperOptions};
use ptsd_bench::sim::{Registry, RunArgs};
use ptsd_bench::sweep;
use ptsd_ftl::stats::SimReport;
use ptsd_ftl::{FtlConfig, FtlStats};
use serde::Serialize;

use crate::zoned::ZonedArgs;

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

    /// The device, FTL and workload of the run (also what --paper and
    /// --zoned read their shared options from).
    #[command(flatten)]
    run: RunArgs,

    /// Print JSON on stdout (the table goes to stderr).
    #[arg(long)]
    json: bool,

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
    Merge(sweep::MergeArgs),
}

impl SimArgs {
    fn paper_options(&self) -> PaperOptions {
        PaperOptions {
            scale: self.scale,
            qd: self.run.qd,
            seed: self.run.seed,
            threads: self.threads,
            channels: self.run.channels,
            chips_per_channel: self.run.chips,
            pages_per_block: self.run.pages_per_block,
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
        return crate::sweep::print_line(&sweep::merge_command(m)?);
    }
    if let Some(file) = &args.sweep {
        let path = sweep::run_shard(
            file,
            args.shard.as_deref(),
            &args.sweep_out,
            &Registry::builtins(),
        )?;
        return crate::sweep::print_line(&format!("wrote {}", path.display()));
    }
    if args.paper {
        return run_paper(&args);
    }
    if args.zoned {
        return crate::zoned::run(&ZonedArgs {
            compare: args.compare,
            workload: &args.zoned_workload,
            size: args.run.size,
            op: args.run.op,
            qd: args.run.qd,
            request_pages: args.run.request_pages,
            requests: args.run.requests,
            seed: args.run.seed,
            channels: args.run.channels,
            chips: args.run.chips,
            pages_per_block: args.run.pages_per_block,
            stripe: args.stripe,
            zone_capacity: args.zone_capacity,
            max_open: args.max_open,
            max_active: args.max_active,
            mixed_reads: args.mixed_reads,
            out: &args.zoned_out,
            json: args.json,
        });
    }
    let (cfg, report) = simulate(&args)?;
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

/// Run the configured workload (or trace) with a progress bar.
fn simulate(args: &SimArgs) -> Result<(FtlConfig, SimReport<FtlStats>)> {
    let bar = std::sync::Mutex::new(None::<LazyBar>);
    let progress = |done: u64, total: u64, phase: &str| {
        if let Ok(mut b) = bar.lock() {
            b.get_or_insert_with(|| LazyBar::new(total, "sim"))
                .set(done, Some(phase));
        }
    };
    let r = args.run.simulate(&Registry::builtins(), Some(&progress));
    if let Ok(Some(b)) = bar.lock().as_deref() {
        b.finish();
    }
    Ok(r?)
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
