//! `ptsd bench journal`: stage + commit throughput and commit latency of
//! the partitioned NVM journal against the single-lock baseline, 4 KiB
//! blocks, region in a file (by default on /dev/shm).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Args;
use hdrhistogram::Histogram;
use ptsd_blockdev::{BlockDevice, MemDevice};
use ptsd_nvjournal::{Journal, JournalConfig, JournalKind, Persist, PmemRegion};

/// Options of `ptsd bench journal`.
#[derive(Args, Debug)]
pub struct JournalArgs {
    /// Thread counts to run (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    threads: Vec<usize>,
    /// Partitions of the partitioned journal.
    #[arg(long, default_value_t = 4)]
    partitions: u32,
    /// Blocks staged per transaction.
    #[arg(long, default_value_t = 4)]
    blocks_per_tx: u64,
    /// Commit (fsync) after every this many transactions per thread.
    #[arg(long, default_value_t = 1)]
    commit_every: u64,
    /// Seconds per run.
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// Journal region file (tmpfs gives the paper's DRAM-as-NVM mode).
    #[arg(long, default_value = "/dev/shm/ptsd-bench-journal")]
    region: PathBuf,
    /// Region size in MiB.
    #[arg(long, default_value_t = 256)]
    region_mib: u64,
    /// Home device size in 4 KiB blocks (in memory); blocks are picked
    /// uniformly from it, so it is also the hot set the checkpoints dedupe.
    #[arg(long, default_value_t = 2048)]
    device_blocks: u64,
}

const BS: usize = 4096;

struct RunResult {
    kind: JournalKind,
    threads: usize,
    blocks: u64,
    txs: u64,
    elapsed: Duration,
    commit: Histogram<u64>,
    stage: Histogram<u64>,
    stats: ptsd_nvjournal::JournalStats,
}

impl RunResult {
    fn blocks_per_sec(&self) -> f64 {
        self.blocks as f64 / self.elapsed.as_secs_f64()
    }
}

fn run_one(args: &JournalArgs, kind: JournalKind, threads: usize) -> Result<RunResult> {
    let _ = std::fs::remove_file(&args.region);
    let region = PmemRegion::open_file(&args.region, args.region_mib << 20)
        .with_context(|| format!("mapping {}", args.region.display()))?;
    let device: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(BS as u32, args.device_blocks)?);
    let cfg = match kind {
        JournalKind::Partitioned => JournalConfig::partitioned(args.partitions),
        JournalKind::SingleLock => JournalConfig::single_lock(),
    };
    let journal = Journal::create(region, device, cfg)?;
    let stop = AtomicBool::new(false);
    let start = Instant::now();
    let per_thread: Vec<(u64, u64, Histogram<u64>, Histogram<u64>)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (journal, stop) = (&journal, &stop);
                s.spawn(move || worker(journal, stop, args, t as u64))
            })
            .collect();
        std::thread::sleep(Duration::from_secs_f64(args.seconds));
        stop.store(true, Ordering::Relaxed);
        handles
            .into_iter()
            .map(|h| h.join().expect("bench thread"))
            .collect()
    });
    let elapsed = start.elapsed();
    let stats = journal.stats();
    journal.close()?;
    drop(journal);
    let _ = std::fs::remove_file(&args.region);
    let mut commit = new_hist();
    let mut stage = new_hist();
    let (mut blocks, mut txs) = (0, 0);
    for (b, t, c, st) in per_thread {
        blocks += b;
        txs += t;
        commit.add(&c).expect("same histogram bounds");
        stage.add(&st).expect("same histogram bounds");
    }
    Ok(RunResult {
        kind,
        threads,
        blocks,
        txs,
        elapsed,
        commit,
        stage,
        stats,
    })
}

fn new_hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("valid histogram bounds")
}

fn worker(
    journal: &Journal,
    stop: &AtomicBool,
    args: &JournalArgs,
    thread: u64,
) -> (u64, u64, Histogram<u64>, Histogram<u64>) {
    let mut commit = new_hist();
    let mut stage = new_hist();
    let mut data = vec![thread as u8; BS];
    let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ (thread + 1).wrapping_mul(0xD1B5_4A32_D192_ED03);
    let (mut blocks, mut txs) = (0u64, 0u64);
    while !stop.load(Ordering::Relaxed) {
        let mut tx = journal.begin();
        for _ in 0..args.blocks_per_tx {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let block = x % args.device_blocks;
            data[..8].copy_from_slice(&x.to_le_bytes());
            // Time one stage in eight: the clock is not free on every VM.
            let timed = blocks % 8 == 0;
            let t0 = timed.then(Instant::now);
            if tx.write(block, &data).is_err() {
                break;
            }
            if let Some(t0) = t0 {
                let _ = stage.record(t0.elapsed().as_nanos() as u64);
            }
            blocks += 1;
        }
        if tx.finish().is_err() {
            continue;
        }
        txs += 1;
        if txs % args.commit_every == 0 {
            let t0 = Instant::now();
            if journal.commit().is_err() {
                break;
            }
            let _ = commit.record(t0.elapsed().as_nanos() as u64);
        }
    }
    (blocks, txs, commit, stage)
}

/// Time the two halves of a 4 KiB stage on the region alone: the copy
/// (what the journal does besides flushing) and the flush + fence.
fn stage_breakdown(args: &JournalArgs) -> Result<(f64, f64)> {
    let path = args.region.with_extension("breakdown");
    let region = PmemRegion::open_file(&path, 64 << 20)?;
    let data = vec![7u8; BS];
    let slots = (64 << 20) / (BS + 64);
    let (mut copy, mut flush) = (new_hist(), new_hist());
    for i in 0..100_000usize {
        let off = (i % slots) * (BS + 64);
        let t0 = Instant::now();
        let crc = crc32c::crc32c(&data);
        region.write(off, &crc.to_le_bytes().repeat(16));
        region.write(off + 64, &data);
        let t1 = Instant::now();
        region.persist(off, BS + 64);
        let t2 = Instant::now();
        let _ = copy.record((t1 - t0).as_nanos() as u64);
        let _ = flush.record((t2 - t1).as_nanos() as u64);
    }
    drop(region);
    let _ = std::fs::remove_file(&path);
    Ok((
        copy.value_at_quantile(0.5) as f64 / 1000.0,
        flush.value_at_quantile(0.5) as f64 / 1000.0,
    ))
}

/// Runs the benchmark and prints the table and the targets.
pub fn run(args: JournalArgs) -> Result<()> {
    let probe = PmemRegion::open_file(&args.region, 1 << 20)?;
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("load average at start: {}", load.trim());
    println!(
        "journal bench: region {} ({}), flush instruction {}, {} MiB, {} B blocks, {} blocks/tx, commit every {} tx, {:.1} s per run, {} cores",
        args.region.display(),
        probe.mode(),
        probe.flush_instr(),
        args.region_mib,
        BS,
        args.blocks_per_tx,
        args.commit_every,
        args.seconds,
        std::thread::available_parallelism().map_or(1, |n| n.get()),
    );
    drop(probe);
    let _ = std::fs::remove_file(&args.region);
    println!(
        "{:<12} {:>7} {:>12} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "journal", "threads", "blocks/s", "MiB/s", "tx/s", "stage p50", "commit p50", "commit p99"
    );
    let mut results = Vec::new();
    for &threads in &args.threads {
        for kind in [JournalKind::Partitioned, JournalKind::SingleLock] {
            let r = run_one(&args, kind, threads)?;
            let name = match kind {
                JournalKind::Partitioned => format!("partitioned{}", args.partitions),
                JournalKind::SingleLock => "single-lock".to_string(),
            };
            println!(
                "{:<12} {:>7} {:>12.0} {:>10.1} {:>10.0} {:>8.2}us {:>8.2}us {:>8.2}us",
                name,
                r.threads,
                r.blocks_per_sec(),
                r.blocks_per_sec() * BS as f64 / (1 << 20) as f64,
                r.txs as f64 / r.elapsed.as_secs_f64(),
                r.stage.value_at_quantile(0.5) as f64 / 1000.0,
                r.commit.value_at_quantile(0.5) as f64 / 1000.0,
                r.commit.value_at_quantile(0.99) as f64 / 1000.0,
            );
            println!(
                "{:<12} {:>7} commits {} (shared {}), checkpoint rounds {}, blocks checkpointed {}, backpressure waits {}",
                "",
                "",
                r.stats.commits,
                r.stats.shared_commits,
                r.stats.checkpoints,
                r.stats.checkpointed_blocks,
                r.stats.backpressure_waits
            );
            results.push(r);
        }
    }
    println!();
    for &threads in &args.threads {
        let get = |k| {
            results
                .iter()
                .find(|r| r.kind == k && r.threads == threads)
                .map(RunResult::blocks_per_sec)
        };
        if let (Some(p), Some(s)) = (get(JournalKind::Partitioned), get(JournalKind::SingleLock)) {
            let ratio = p / s;
            let verdict = if threads == 2 {
                if ratio >= 1.8 {
                    " (target >= 1.8x at 2 threads: met)"
                } else {
                    " (target >= 1.8x at 2 threads: MISSED)"
                }
            } else {
                ""
            };
            println!("threads {threads}: partitioned / single-lock = {ratio:.2}x{verdict}");
        }
    }
    let (copy, flush) = stage_breakdown(&args)?;
    println!(
        "4 KiB stage on the region alone, p50: copy+header {copy:.2}us, flush+fence {flush:.2}us (target: copy <= 1us plus the flush: {})",
        if copy <= 1.0 { "met" } else { "MISSED" }
    );
    let worst_p99 = results
        .iter()
        .filter(|r| r.kind == JournalKind::Partitioned)
        .map(|r| r.commit.value_at_quantile(0.99))
        .max()
        .unwrap_or(0) as f64
        / 1000.0;
    println!(
        "partitioned commit p99 (worst over thread counts): {worst_p99:.2}us (target <= 20us: {})",
        if worst_p99 <= 20.0 { "met" } else { "MISSED" }
    );
    Ok(())
}
