//! `ptsd bench …`: benchmarks that report figures against their targets.

mod fs;
mod journal;

use anyhow::Result;
use clap::{Args, Subcommand};

/// `ptsd bench <what>`.
#[derive(Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    command: BenchCommand,
}

#[derive(Subcommand)]
enum BenchCommand {
    /// File-system workloads (varmail-like, tokubench-like) on a ptsd mount,
    /// ext4 on a loop device and a no-op FUSE fs, side by side.
    Fs(Box<fs::FsArgs>),
    /// The NVM journal: stage + commit throughput and commit latency,
    /// partitioned vs the single-lock baseline, 1..N threads.
    Journal(journal::JournalArgs),
}

/// Runs the chosen benchmark.
pub fn run(args: BenchArgs) -> Result<()> {
    match args.command {
        BenchCommand::Fs(a) => fs::run(*a),
        BenchCommand::Journal(a) => journal::run(a),
    }
}
