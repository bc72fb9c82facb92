//! `ptsd bench …`: benchmarks that report figures against their targets.

//! The benchmarks themselves are `ptsd_bench::cmd`: this file parses and calls.

use anyhow::Result;
use clap::{Args, Subcommand};
#[cfg(not(target_env = "musl"))]
use ptsd_bench::cmd::blk;
use ptsd_bench::cmd::{dir, fs, journal};

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
    /// partitioned vs the single-lock and short-lock baselines, 1..N threads.
    Journal(journal::JournalArgs),
    /// Block load generator (fio's basic knobs) on tokio-uring: a file,
    /// /dev/ublkbN or any block device; IOPS, MB/s, latency percentiles,
    /// JSON and a CDF plot.
    #[cfg(not(target_env = "musl"))]
    Blk(blk::BlkArgs),
    /// One ptsd-fs directory grown to a million entries in-process: insert
    /// and lookup CPU time per entry, journal blocks per insert, per window.
    Dir(dir::DirArgs),
    /// Serve the bench crate's no-op FUSE fs on DIR in the foreground until
    /// it is unmounted (the no-op target as a process of its own).
    #[command(hide = true)]
    NoopMount(NoopMountArgs),
}

#[derive(Args)]
struct NoopMountArgs {
    /// FUSE worker threads (default: ptsd-fs's, 1 per CPU, at least 2).
    #[arg(long)]
    threads: Option<usize>,
    /// Ask for the kernel's writeback cache (ptsd-fs does not).
    #[arg(long)]
    writeback_cache: bool,
    /// Count requests per opcode into this file.
    #[arg(long)]
    op_counts: Option<std::path::PathBuf>,
    /// Serve over FUSE io_uring (as ptsd-fs does by default).
    #[arg(long)]
    uring: bool,
    /// Where to mount.
    dir: std::path::PathBuf,
}

/// Runs the chosen benchmark.
pub fn run(args: BenchArgs) -> Result<()> {
    match args.command {
        BenchCommand::Fs(a) => Ok(fs::run(*a)?),
        BenchCommand::Journal(a) => Ok(journal::run(a)?),
        BenchCommand::Dir(a) => Ok(dir::run(a)?),
        #[cfg(not(target_env = "musl"))]
        BenchCommand::Blk(a) => Ok(blk::run(a)?),
        BenchCommand::NoopMount(a) => {
            let defaults = ptsd_bench::fsbench::noopfs::NoopOptions::default();
            Ok(ptsd_bench::fsbench::noopfs::serve(
                &a.dir,
                ptsd_bench::fsbench::noopfs::NoopOptions {
                    threads: a.threads.unwrap_or(defaults.threads),
                    writeback_cache: a.writeback_cache,
                    op_counts: a.op_counts,
                    uring: a.uring,
                },
            )?)
        }
    }
}
