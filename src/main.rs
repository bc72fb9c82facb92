//! `ptsd`: the command-line front end of the ptsd storage stack.

use anyhow::Result;
use clap::{Parser, Subcommand};

#[macro_use]
mod out;

mod bench;
mod fs;
mod sim;
mod sweep;
#[cfg(feature = "ublk")]
mod ublk;
mod userpaths;
mod zoned;

#[derive(Parser)]
#[command(
    name = "ptsd",
    version,
    about = "A userspace storage stack: emulated SSD, NVM journal, FUSE fs, ublk",
    after_help = format!("Sizes (--size, --journal-size, -o journal_size=, ...) everywhere: {}.", ptsd_blockdev::size::SIZE_SYNTAX)
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

// Parsed once per process: the size of the largest variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Command {
    /// Print the version and exit.
    Version,
    /// Format a device or image file with ptsd-fs.
    Mkfs(fs::MkfsArgs),
    /// Check (and with --repair, fix) an unmounted ptsd-fs.
    Fsck(fs::FsckArgs),
    /// Mount ptsd-fs with FUSE (with no options: the embedded default device).
    Mount(fs::MountArgs),
    /// Unmount a ptsd-fs mount and wait for its clean shutdown.
    Umount(fs::UmountArgs),
    /// Run a benchmark and report figures against its targets.
    Bench(bench::BenchArgs),
    /// Simulate the emulated SSD (workloads, traces, the PTSD paper's experiment).
    Sim(sim::SimArgs),
    /// Serve a device as /dev/ublkbN through the kernel's ublk driver.
    #[cfg(feature = "ublk")]
    Ublk {
        #[command(subcommand)]
        cmd: ublk::UblkCmd,
    },
    /// Serve a device as /dev/ublkbN (not in this build: needs the cargo
    /// feature `ublk`).
    #[cfg(not(feature = "ublk"))]
    Ublk {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
        args: Vec<String>,
    },
}

/// A failed command prints its error and every cause on one line
/// (`ptsd: error: opening device: d.img: No such file or directory`) and
/// exits with status 1 — not Rust's default `Error: {:?}`, which lists the
/// causes on separate lines and, when `RUST_BACKTRACE` is set in the
/// user's environment, a backtrace of the binary for an ordinary error.
fn main() -> std::process::ExitCode {
    // Before any thread (and the mount's fork): freed buffers stay for
    // reuse instead of being faulted in again (see its docs).
    ptsd_stack::tune_malloc();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eoutln!("ptsd: error: {}", out::error_line(&e));
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> Result<()> {
    if let Some(r) = fs::mount_helper_main() {
        return r;
    }
    let cli = Cli::parse();
    match cli.command {
        Command::Version => outln!("ptsd {}", env!("CARGO_PKG_VERSION")),
        Command::Mkfs(a) => fs::mkfs_cmd(&a)?,
        Command::Fsck(a) => fs::fsck_cmd(&a)?,
        Command::Mount(a) => fs::mount_cmd(&a)?,
        Command::Umount(a) => fs::umount_cmd(&a)?,
        Command::Bench(args) => bench::run(args)?,
        Command::Sim(args) => sim::run(args)?,
        #[cfg(feature = "ublk")]
        Command::Ublk { cmd } => ublk::run(cmd)?,
        #[cfg(not(feature = "ublk"))]
        Command::Ublk { .. } => anyhow::bail!(
            "this ptsd was built without the ublk frontend; rebuild it with \
             `cargo install --path . --features ublk` (its build needs libclang: \
             `apt install libclang-dev`, which scripts/setup does)"
        ),
    }
    Ok(())
}
