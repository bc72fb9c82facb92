//! `ptsd sim --sweep` with TPFTL registered: a sweep file may name `tpftl`
//! (and its ablations `tpftl-noprefetch`, `tpftl-noclean`,
//! `tpftl-norequest`) wherever it names `page`, `dftl` or `ptsd`; sharding
//! (Slurm included), merging, table, JSON and plots are `ptsd sim`'s.
//!
//! `cargo run --release -p ptsd-example-tpftl --bin tpftl-sweep -- run examples/tpftl/sweeps/tpftl-vs-builtins.toml --sweep-out target/tpftl-sweep`,
//! then `… -- merge target/tpftl-sweep`.

use std::io::Write as _;

use anyhow::{Context, Result};
use clap::Parser;
use ptsd_bench::sweep::SweepCommand;

#[derive(Parser)]
struct Cli {
    #[command(subcommand)]
    cmd: SweepCommand,
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    let text = cli.cmd.run(&ptsd_example_tpftl::registry()?)?;
    writeln!(std::io::stdout().lock(), "{text}").context("writing to stdout")
}
