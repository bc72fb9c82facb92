//! TPFTL's emulated SSD as `/dev/ublkbN`, served in the foreground until
//! the device is deleted (`ptsd ublk del N`) — for fio, mkfs, anything.
//!
//! `cargo run --release -p ptsd-example-tpftl --features kernel --bin tpftl-ublk -- --size 1GiB --store mem`
//!
//! Needs the `ublk_drv` kernel module (the VM of `tests/vm/run.sh` has it).
//! An image file (`--store PATH`) is claimed under ptsd-stack's image lock
//! for as long as it is served, as `ptsd ublk` does: an image `ptsd mount`
//! holds is refused.

use std::io::Write as _;

use anyhow::{Context, Result};
use clap::Parser;
use ptsd_example_tpftl::{device_config, open_device};
use ptsd_ftl::StoreKind;
use ptsd_ublk::ftl::{FtlBackend, Timing};
use ptsd_ublk::kernel::{self, DeviceOptions, Started};
use ptsd_ublk::spec::{BackendSpec, DeviceSpec, FtlScheme, FtlStore};
use ptsd_ublk::LockMode;

#[derive(Parser)]
struct Args {
    /// Logical capacity in bytes (a suffix: KiB, MiB, GiB).
    #[arg(long, default_value = "1GiB", value_parser = parse_size)]
    size: u64,
    /// `mem` (data in the daemon's memory), `none` (timing only) or an
    /// image file.
    #[arg(long, default_value = "mem")]
    store: String,
    /// `off` or `emulate` (complete at the modelled NAND time).
    #[arg(long, default_value = "off")]
    timing: Timing,
    /// Device id (-1: the driver picks).
    #[arg(long, default_value_t = -1)]
    id: i32,
    /// Queues and depth.
    #[arg(long, default_value_t = 1)]
    queues: u16,
    #[arg(long, default_value_t = 128)]
    depth: u16,
    /// Queue threads sleep instead of busy-polling for completions (for a
    /// VM with few CPUs, as `ptsd ublk add --no-poll`).
    #[arg(long)]
    no_poll: bool,
}

fn parse_size(s: &str) -> Result<u64, String> {
    let (num, mult) = [("GiB", 1u64 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)]
        .iter()
        .find_map(|(suf, m)| s.strip_suffix(suf).map(|n| (n, *m)))
        .unwrap_or((s, 1));
    num.trim()
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| format!("bad size {s:?} (e.g. 1GiB, 512MiB)"))
}

fn main() -> Result<()> {
    let args = Args::parse();
    let store = match FtlStore::parse(&args.store) {
        FtlStore::None => StoreKind::None,
        FtlStore::Mem => StoreKind::Memory,
        FtlStore::File(p) => StoreKind::File {
            path: std::path::absolute(&p).with_context(|| format!("image {}", p.display()))?,
        },
    };
    device_config(args.size, store.clone())
        .validate()
        .context("the device configuration")?;
    let spec = DeviceSpec {
        backend: BackendSpec::Ftl {
            scheme: FtlScheme::Dftl,
            bytes: args.size,
            store: FtlStore::parse(&args.store),
            timing: args.timing,
        },
        sched: None,
        lock_mode: LockMode::Swap,
        poll: !args.no_poll,
    };
    let opts = DeviceOptions {
        id: args.id,
        queues: args.queues,
        depth: args.depth,
        io_buf_bytes: 512 << 10,
        spec,
    };
    kernel::check_driver()?;
    let timing = args.timing;
    // An image file stays claimed (ptsd-stack's image lock, as `ptsd ublk`
    // holds it) until the device is deleted and `_claim` dropped.
    let (ssd, _claim) = open_device(args.size, store).context("opening the emulated SSD")?;
    let backend = FtlBackend::new(ssd, timing).context("the FTL backend")?;
    let stats = kernel::run(&opts, false, Box::new(backend), |s: &Started| {
        println!("{}", s.bdev);
        let _ = std::io::stdout().flush();
    })?;
    eprintln!("{:?}", stats.report());
    Ok(())
}
