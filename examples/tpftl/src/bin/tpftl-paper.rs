//! The PTSD paper's experiment with TPFTL beside DFTL and PTSD (WRITEOPT),
//! plus three phases with locality (the workloads TPFTL was designed for):
//! sequential runs, Zipf-popular sequential runs, and random 32 KiB
//! requests (the locality within a request).
//!
//! `cargo run --release -p ptsd-example-tpftl --bin tpftl-paper -- --scale 0.0625`

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Result;
use clap::Parser;
use ptsd_bench::paper_ftl::{run_with, Entrant, PaperOptions};
use ptsd_example_tpftl::Tpftl;
use ptsd_ftl::workload::{Access, WorkloadSpec};
use ptsd_ftl::Variant;

#[derive(Parser)]
struct Args {
    /// Logical capacity as a share of the paper's 16 GiB.
    #[arg(long, default_value_t = 0.0625)]
    scale: f64,
    /// Where to write the JSON, table and CDF plots.
    #[arg(long, default_value = "target/tpftl-paper")]
    out: PathBuf,
    /// Simulation threads (0: one per core).
    #[arg(long, default_value_t = 0)]
    threads: usize,
    /// All five built-in variants, not only DFTL and WRITEOPT.
    #[arg(long)]
    all: bool,
    /// Also TPFTL with each technique off (selective prefetching,
    /// clean-first, request-level prefetching).
    #[arg(long)]
    ablations: bool,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let mut opts = PaperOptions {
        scale: args.scale,
        threads: args.threads,
        ..PaperOptions::default()
    };
    let pages = opts.logical_bytes() / 4096;
    let requests = (pages as f64 * opts.mixed_factor).round() as u64;
    let runs = |run_slots, theta, seed| WorkloadSpec {
        access: Access::Runs { run_slots, theta },
        ..WorkloadSpec::mixed(pages, opts.mixed_read_percent, requests, seed)
    };
    opts = opts
        .clone()
        .with_phase("runs64", runs(64, 0.0, opts.seed + 10))
        .with_phase("zipfruns16", runs(16, 0.99, opts.seed + 11))
        .with_phase(
            "rand8p",
            WorkloadSpec {
                pages_per_request: 8,
                ..WorkloadSpec::mixed(pages, opts.mixed_read_percent, requests / 8, opts.seed + 12)
            },
        );
    let mut entrants = if args.all {
        Entrant::variants()
    } else {
        vec![
            Entrant::Variant(Variant::Dftl),
            Entrant::Variant(Variant::WriteOpt),
        ]
    };
    entrants.push(Entrant::scheme(Arc::new(Tpftl::default())));
    if args.ablations {
        for (prefetch, clean_first, request_prefetch) in [
            (false, true, true),
            (true, false, true),
            (true, true, false),
        ] {
            entrants.push(Entrant::scheme(Arc::new(Tpftl {
                prefetch,
                clean_first,
                request_prefetch,
            })));
        }
    }
    let report = run_with(&opts, &entrants, &|_, _, _| {})?;
    let files = report.write_outputs(&args.out)?;
    print!("{}", report.table());
    println!("\ntranslation-page traffic (map reads / map programs) by phase:");
    for v in &report.variants {
        let line: Vec<String> = v
            .phases
            .iter()
            .map(|p| {
                format!(
                    "{} {}/{}",
                    p.name,
                    p.device.map_reads.total(),
                    p.device.map_programs.total()
                )
            })
            .collect();
        println!("{:<18} {}", v.name, line.join("  "));
    }
    let names: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
    println!("wrote: {}", names.join(" "));
    Ok(())
}
