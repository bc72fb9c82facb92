//! `ptsd bench dir`: the cost of one directory entry as a ptsd-fs directory
//! grows to a million entries, in-process (no FUSE): insertion and lookup
//! CPU time per entry and journal blocks per insertion, per window of
//! entries, so a linear scan anywhere would show as a rising column. "ring
//! waits" counts insertions that waited for journal space (the checkpoint
//! falling behind), which shows in wall time, not in the directory.
//!
//! The file system runs as mounted: every insertion is one transaction on
//! the NVM journal (region on /dev/shm), checkpointed to an in-memory home
//! device. Entries are hard links to a new file every `--links-per-file`
//! entries (an inode is a whole block; links keep a million entries on a
//! small device), so files are allocated between the directory's blocks and
//! its extent list grows long, as among other allocations.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{invalid, BenchCmdError, Doing, Result};
use clap::Args;
use ptsd_blockdev::size::parse_size;
use ptsd_blockdev::{BlockDevice, MemDevice};
use ptsd_fs::Caller;
use ptsd_nvjournal::JournalConfig;
use ptsd_stack::{DeviceSpec, JournalSpec, Stack, StackSpec};
use rand::{Rng, SeedableRng};

/// Options of `ptsd bench dir`.
#[derive(Args, Debug)]
pub struct DirArgs {
    /// Entries to put in the one directory.
    #[arg(long, default_value_t = 1_000_000)]
    entries: u64,
    /// Report a row every this many entries.
    #[arg(long, default_value_t = 100_000)]
    window: u64,
    /// A new file every this many entries; the others are hard links to it.
    #[arg(long, default_value_t = 64)]
    links_per_file: u64,
    /// Random lookups of existing names timed at the end of each window.
    #[arg(long, default_value_t = 20_000)]
    lookups: u64,
    /// Journal region file.
    #[arg(long, default_value = "/dev/shm/ptsd-bench-dir.journal")]
    journal: PathBuf,
    /// Journal size (e.g. 256MiB).
    #[arg(long, value_parser = parse_size, default_value = "256MiB")]
    journal_size: u64,
    /// Seed of the lookup order.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

/// CPU time of the calling thread, seconds.
fn thread_cpu() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into the valid pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

fn name(i: u64) -> Vec<u8> {
    format!("entry-{i:08}-of-a-big-directory").into_bytes()
}

pub fn run(a: DirArgs) -> Result<()> {
    if a.entries == 0 || a.window == 0 || a.links_per_file == 0 || a.links_per_file > 60_000 {
        invalid!("--entries, --window and --links-per-file (at most 60000) must be positive");
    }
    // Directory blocks (~90 entries each), one inode per file, slack.
    let blocks = a.entries / 60 + a.entries / a.links_per_file + 8192;
    let dev: Arc<dyn BlockDevice> =
        Arc::new(MemDevice::new(4096, blocks).doing(|| "making the device".into())?);
    ptsd_stack::mkfs(&DeviceSpec::Device(dev.clone()), None, Duration::ZERO)
        .doing(|| "formatting the device".into())?;
    let _ = std::fs::remove_file(&a.journal);
    // Mounted as `ptsd mount` mounts, on the in-memory device.
    let mut spec = StackSpec::new(
        DeviceSpec::Device(dev),
        JournalSpec::File(a.journal.clone()),
    );
    spec.journal_bytes = a.journal_size;
    spec.journal_config = JournalConfig::partitioned(4);
    let stack = Stack::open(spec).doing(|| format!("journal {}", a.journal.display()))?;
    let journal = stack.store().journal().clone();
    let fs = stack.fs().clone();
    let me = Caller { uid: 0, gid: 0 };
    let dir = fs
        .mkdir(fs.root(), b"big", 0o755, me)
        .doing(|| "mkdir big".into())?
        .ino;
    let mut rng = rand::rngs::StdRng::seed_from_u64(a.seed);

    outln!(
        "ptsd bench dir: {} entries in one directory ({} per new file, the rest hard links), journal on {}",
        a.entries,
        a.links_per_file,
        a.journal.display()
    );
    outln!(
        "load average before: {}",
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
    outln!(
        "{:>10} {:>14} {:>14} {:>16} {:>14} {:>12} {:>11}",
        "entries",
        "insert cpu us",
        "insert wall us",
        "journal blk/ins",
        "lookup cpu us",
        "miss cpu us",
        "ring waits"
    );
    let mut target = 0;
    let mut done = 0u64;
    let mut staged0 = journal.stats().staged_blocks;
    let mut waits0 = journal.stats().backpressure_waits;
    while done < a.entries {
        let end = (done + a.window).min(a.entries);
        let (c0, w0) = (thread_cpu(), Instant::now());
        for i in done..end {
            if i % a.links_per_file == 0 {
                target = fs
                    .create(dir, &name(i), 0o644, me)
                    .doing(|| format!("create entry {i}"))?
                    .ino;
                fs.release(target).doing(|| format!("release entry {i}"))?;
            } else {
                fs.link(target, dir, &name(i))
                    .doing(|| format!("link entry {i}"))?;
            }
        }
        let n = (end - done) as f64;
        let insert_cpu = (thread_cpu() - c0) / n * 1e6;
        let insert_wall = w0.elapsed().as_secs_f64() / n * 1e6;
        let stats = journal.stats();
        let per_insert = (stats.staged_blocks - staged0) as f64 / n;
        let waits = stats.backpressure_waits - waits0;
        (staged0, waits0) = (stats.staged_blocks, stats.backpressure_waits);
        let c1 = thread_cpu();
        for _ in 0..a.lookups {
            let i = rng.gen_range(0..end);
            fs.lookup(dir, &name(i))
                .doing(|| format!("lookup entry {i}"))?;
        }
        let lookup_cpu = (thread_cpu() - c1) / a.lookups as f64 * 1e6;
        let c2 = thread_cpu();
        for k in 0..a.lookups {
            if fs.lookup(dir, &name(a.entries + k)).is_ok() {
                return Err(BenchCmdError::Failed("a name never added was found".into()));
            }
        }
        let miss_cpu = (thread_cpu() - c2) / a.lookups as f64 * 1e6;
        outln!(
            "{end:>10} {insert_cpu:>14.2} {insert_wall:>14.2} {per_insert:>16.2} {lookup_cpu:>14.2} {miss_cpu:>12.2} {waits:>11}"
        );
        done = end;
    }
    let c = thread_cpu();
    let w = Instant::now();
    let mut listed = 0u64;
    let mut cookie = 0;
    loop {
        let page = fs.readdir(dir, cookie, 4096).doing(|| "readdir".into())?;
        let Some(last) = page.last() else { break };
        cookie = last.next;
        listed += page.len() as u64;
    }
    outln!(
        "readdir of {} entries: {:.2} us cpu per entry ({:.2} s wall)",
        listed.saturating_sub(2),
        (thread_cpu() - c) / listed as f64 * 1e6,
        w.elapsed().as_secs_f64()
    );
    let w = Instant::now();
    drop(fs);
    stack.close().doing(|| "closing the stack".into())?;
    outln!(
        "close (checkpoint of everything): {:.2} s; load average after: {}",
        w.elapsed().as_secs_f64(),
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
    Ok(())
}
