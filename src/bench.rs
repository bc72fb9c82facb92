//! `ptsd bench …`: benchmarks that report figures against their targets.

mod fs;

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
}

/// Runs the chosen benchmark.
pub fn run(args: BenchArgs) -> Result<()> {
    match args.command {
        BenchCommand::Fs(a) => fs::run(*a),
    }
}
