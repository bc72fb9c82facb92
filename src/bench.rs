//! `ptsd bench …`: benchmarks that report figures against their targets.

mod dir;
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
    /// partitioned vs the single-lock and short-lock baselines, 1..N threads.
    Journal(journal::JournalArgs),
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
    /// FUSE worker threads.
    #[arg(long, default_value_t = 4)]
    threads: usize,
    /// Ask for the kernel's writeback cache.
    #[arg(long)]
    writeback_cache: bool,
    /// Mount without `default_permissions`.
    #[arg(long)]
    no_default_permissions: bool,
    /// Answer FLUSH with ENOSYS (the kernel then stops sending it).
    #[arg(long)]
    flush_enosys: bool,
    /// Where to mount.
    dir: std::path::PathBuf,
}

/// Runs the chosen benchmark.
pub fn run(args: BenchArgs) -> Result<()> {
    match args.command {
        BenchCommand::Fs(a) => fs::run(*a),
        BenchCommand::Journal(a) => journal::run(a),
        BenchCommand::Dir(a) => dir::run(a),
        BenchCommand::NoopMount(a) => Ok(ptsd_bench::fsbench::noopfs::serve(
            &a.dir,
            ptsd_bench::fsbench::noopfs::NoopOptions {
                threads: a.threads,
                writeback_cache: a.writeback_cache,
                default_permissions: !a.no_default_permissions,
                flush_enosys: a.flush_enosys,
                ..Default::default()
            },
        )?),
    }
}
