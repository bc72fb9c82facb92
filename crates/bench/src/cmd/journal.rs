//! `ptsd bench journal`: stage + commit throughput and commit latency of
//! the partitioned NVM journal against two lock-based baselines — single-lock
//! (one mutex held across each whole stage) and short-lock (one mutex held
//! only to claim, index and commit) — 4 KiB blocks, region in a file (by
//! default on /dev/shm).
//!
//! Runs go in rounds: each round runs every (kind, threads) once, the kinds
//! in an order rotated every round, so that each kind runs first as often as
//! the others. Ratios are paired within a round (same machine conditions)
//! and judged on their median; the minimum and maximum are printed.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{invalid, Doing, Result};
use clap::Args;
use hdrhistogram::Histogram;
use ptsd_blockdev::size::parse_size;
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
    /// Region size (e.g. 256MiB).
    #[arg(long, value_parser = parse_size, default_value = "256MiB")]
    region_size: u64,
    /// Home device size in 4 KiB blocks (in memory); blocks are picked
    /// uniformly from it, so it is also the hot set the checkpoints dedupe.
    #[arg(long, default_value_t = 2048)]
    device_blocks: u64,
    /// Background checkpoint when a ring is this full (0..1).
    #[arg(long, default_value_t = JournalConfig::default().checkpoint_fill)]
    checkpoint_fill: f64,
    /// Rounds: each runs every (journal, threads) once, in an order rotated
    /// every round; the median round decides (odd, at least 1).
    #[arg(long, alias = "repeat", default_value_t = 5)]
    rounds: usize,
    /// Journals to run (comma-separated: partitioned, single-lock, short-lock).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "partitioned,single-lock,short-lock"
    )]
    kinds: Vec<KindArg>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum KindArg {
    Partitioned,
    SingleLock,
    ShortLock,
}

impl KindArg {
    fn kind(self) -> JournalKind {
        match self {
            KindArg::Partitioned => JournalKind::Partitioned,
            KindArg::SingleLock => JournalKind::SingleLock,
            KindArg::ShortLock => JournalKind::ShortLock,
        }
    }
}

const BS: usize = 4096;

struct RunResult {
    threads: usize,
    blocks: u64,
    txs: u64,
    elapsed: Duration,
    /// CPU time the workload threads got (includes spinning).
    cpu: Duration,
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
    let region = PmemRegion::open_file(&args.region, args.region_size)
        .doing(|| format!("mapping {}", args.region.display()))?;
    let device: Arc<dyn BlockDevice> = Arc::new(
        MemDevice::new(BS as u32, args.device_blocks).doing(|| "making the home device".into())?,
    );
    let cfg = JournalConfig {
        checkpoint_fill: args.checkpoint_fill,
        ..match kind {
            JournalKind::Partitioned => JournalConfig::partitioned(args.partitions),
            JournalKind::SingleLock => JournalConfig::single_lock(),
            JournalKind::ShortLock => JournalConfig::short_lock(),
        }
    };
    let journal =
        Journal::create(region, device, cfg).doing(|| format!("creating the {kind:?} journal"))?;
    let stop = AtomicBool::new(false);
    let start = Instant::now();
    let per_thread: Vec<WorkerResult> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (journal, stop) = (&journal, &stop);
                std::thread::Builder::new()
                    .name(format!("bench-{t}"))
                    .spawn_scoped(s, move || worker(journal, stop, args, t as u64))
                    .expect("spawning a bench thread")
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
    journal
        .close()
        .doing(|| format!("closing the {kind:?} journal"))?;
    drop(journal);
    let _ = std::fs::remove_file(&args.region);
    let mut commit = new_hist();
    let mut stage = new_hist();
    let (mut blocks, mut txs, mut cpu) = (0, 0, Duration::ZERO);
    for w in per_thread {
        blocks += w.blocks;
        txs += w.txs;
        cpu += w.cpu;
        commit.add(&w.commit).expect("same histogram bounds");
        stage.add(&w.stage).expect("same histogram bounds");
    }
    Ok(RunResult {
        threads,
        blocks,
        txs,
        elapsed,
        cpu,
        commit,
        stage,
        stats,
    })
}

fn new_hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("valid histogram bounds")
}

struct WorkerResult {
    blocks: u64,
    txs: u64,
    cpu: Duration,
    commit: Histogram<u64>,
    stage: Histogram<u64>,
}

/// CPU time of the calling thread.
fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec we pass; the clock id is a
    // constant every Linux has.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn worker(journal: &Journal, stop: &AtomicBool, args: &JournalArgs, thread: u64) -> WorkerResult {
    let cpu0 = thread_cpu_time();
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
    WorkerResult {
        blocks,
        txs,
        cpu: thread_cpu_time() - cpu0,
        commit,
        stage,
    }
}

/// Time the two halves of a 4 KiB stage on the region alone, as the
/// journal does it: (1) header crc + copy of header and payload with
/// non-temporal stores + fence (durable on return), (2) the flag: store,
/// write back its line, fence.
fn stage_breakdown(args: &JournalArgs) -> Result<(f64, f64)> {
    let path = args.region.with_extension("breakdown");
    let region =
        PmemRegion::open_file(&path, 64 << 20).doing(|| format!("mapping {}", path.display()))?;
    let data = vec![7u8; BS];
    let slots = (64 << 20) / (BS + 64);
    let (mut copy, mut flag) = (new_hist(), new_hist());
    for i in 0..100_000usize {
        let off = (i % slots) * (BS + 64);
        let t0 = Instant::now();
        let header = crc32c::crc32c(&data).to_le_bytes().repeat(16);
        // SAFETY: this thread is the only user of the region.
        unsafe { region.write_persist_unshared(off, &[&header, &data]) };
        let t1 = Instant::now();
        region.write(off + 56, &1u64.to_le_bytes());
        region.persist(off + 56, 8);
        let t2 = Instant::now();
        let _ = copy.record((t1 - t0).as_nanos() as u64);
        let _ = flag.record((t2 - t1).as_nanos() as u64);
    }
    drop(region);
    let _ = std::fs::remove_file(&path);
    Ok((
        copy.value_at_quantile(0.5) as f64 / 1000.0,
        flag.value_at_quantile(0.5) as f64 / 1000.0,
    ))
}

fn kind_name(kind: JournalKind, partitions: u32) -> String {
    match kind {
        JournalKind::Partitioned => format!("partitioned{partitions}"),
        JournalKind::SingleLock => "single-lock".to_string(),
        JournalKind::ShortLock => "short-lock".to_string(),
    }
}

fn print_row(label: &str, name: &str, r: &RunResult) {
    outln!(
        "{:<7} {:<12} {:>7} {:>10.0} {:>8.1} {:>9.0} {:>5.0}% {:>8.2}us {:>8.2}us {:>8.2}us",
        label,
        name,
        r.threads,
        r.blocks_per_sec(),
        r.blocks_per_sec() * BS as f64 / (1 << 20) as f64,
        r.txs as f64 / r.elapsed.as_secs_f64(),
        100.0 * r.cpu.as_secs_f64() / (r.elapsed.as_secs_f64() * r.threads as f64),
        r.stage.value_at_quantile(0.5) as f64 / 1000.0,
        r.commit.value_at_quantile(0.5) as f64 / 1000.0,
        r.commit.value_at_quantile(0.99) as f64 / 1000.0,
    );
}

/// Target: partitioned / short-lock blocks/s at 2 threads (paired median).
const TARGET_VS_SHORT_LOCK: f64 = 1.3;

/// Sorted copy of `v` and its median (the middle value; mean of the middle
/// two for an even count).
fn spread(v: &[f64]) -> Option<(f64, f64, f64)> {
    let mut v = v.to_vec();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let med = if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    };
    Some((v[0], med, v[n - 1]))
}

fn spread_line(v: &[f64]) -> String {
    match spread(v) {
        Some((lo, med, hi)) => format!(
            "median {med:.2}x (min {lo:.2}x, max {hi:.2}x, {} rounds)",
            v.len()
        ),
        None => "no paired runs".into(),
    }
}

/// Runs the benchmark and prints the table and the targets.
pub fn run(args: JournalArgs) -> Result<()> {
    if args.rounds == 0 {
        invalid!("--rounds must be at least 1");
    }
    if args.kinds.is_empty() || args.threads.is_empty() || args.threads.contains(&0) {
        invalid!("--kinds and --threads need at least one entry, threads >= 1");
    }
    let probe = PmemRegion::open_file(&args.region, 1 << 20)
        .doing(|| format!("mapping {}", args.region.display()))?;
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    outln!("load average at start: {}", load.trim());
    outln!(
        "journal bench: region {} ({}), flush instruction {}, {}, {} B blocks, {} blocks/tx, commit every {} tx, hot set {} blocks, checkpoint at {:.0}% fill, {:.1} s per run, {} rounds (kind order rotated each round), {} cores",
        args.region.display(),
        probe.mode(),
        probe.flush_instr(),
        ptsd_blockdev::size::ByteSize(args.region_size),
        BS,
        args.blocks_per_tx,
        args.commit_every,
        args.device_blocks,
        args.checkpoint_fill * 100.0,
        args.seconds,
        args.rounds,
        std::thread::available_parallelism().map_or(1, |n| n.get()),
    );
    outln!("durability: every kind acknowledges a commit once it is in the region (same class: the region's own)");
    outln!("cpu = CPU time of the workload threads / (threads x wall): below 100% the machine was busy or they slept");
    drop(probe);
    let _ = std::fs::remove_file(&args.region);
    outln!(
        "{:<7} {:<12} {:>7} {:>10} {:>8} {:>9} {:>6} {:>10} {:>10} {:>10}",
        "",
        "journal",
        "threads",
        "blocks/s",
        "MiB/s",
        "tx/s",
        "cpu",
        "stage p50",
        "commit p50",
        "commit p99"
    );
    let mut kinds: Vec<JournalKind> = args.kinds.iter().map(|k| k.kind()).collect();
    kinds.dedup();
    // (kind, threads) -> one run per round, in round order.
    let mut runs: Vec<((JournalKind, usize), Vec<RunResult>)> = Vec::new();
    for round in 0..args.rounds {
        let mut order = kinds.clone();
        order.rotate_left(round % kinds.len());
        for &threads in &args.threads {
            for &kind in &order {
                let r = run_one(&args, kind, threads)?;
                print_row(
                    &format!("round {}", round + 1),
                    &kind_name(kind, args.partitions),
                    &r,
                );
                match runs.iter_mut().find(|(k, _)| *k == (kind, threads)) {
                    Some((_, v)) => v.push(r),
                    None => runs.push(((kind, threads), vec![r])),
                }
            }
        }
    }
    let rates = |kind: JournalKind, threads: usize| -> Vec<f64> {
        runs.iter()
            .find(|(key, _)| *key == (kind, threads))
            .map(|(_, v)| v.iter().map(RunResult::blocks_per_sec).collect())
            .unwrap_or_default()
    };
    // Round-by-round ratios of two series (same round, same conditions).
    let paired = |a: &[f64], b: &[f64]| -> Vec<f64> {
        a.iter()
            .zip(b)
            .filter(|(_, b)| **b > 0.0)
            .map(|(a, b)| a / b)
            .collect()
    };
    outln!();
    outln!("median run of each (commit and stage percentiles over all its runs):");
    let mut commit_p99: Vec<(JournalKind, u64)> = Vec::new();
    for ((kind, threads), v) in &runs {
        let mut sorted: Vec<&RunResult> = v.iter().collect();
        sorted.sort_by(|a, b| a.blocks_per_sec().total_cmp(&b.blocks_per_sec()));
        let mid = sorted[sorted.len() / 2];
        let mut merged = RunResult {
            cpu: mid.cpu,
            elapsed: mid.elapsed,
            blocks: mid.blocks,
            txs: mid.txs,
            threads: *threads,
            commit: new_hist(),
            stage: new_hist(),
            stats: mid.stats.clone(),
        };
        for r in v {
            merged.commit.add(&r.commit).expect("same histogram bounds");
            merged.stage.add(&r.stage).expect("same histogram bounds");
        }
        print_row("median", &kind_name(*kind, args.partitions), &merged);
        let st = &merged.stats;
        outln!(
            "{:<7} {:<12} {:>7} commits {} (shared {}), checkpoint rounds {}, blocks checkpointed {}, backpressure waits {}",
            "", "", "", st.commits, st.shared_commits, st.checkpoints, st.checkpointed_blocks, st.backpressure_waits
        );
        commit_p99.push((*kind, merged.commit.value_at_quantile(0.99)));
    }
    outln!();
    let (t_lo, t_hi) = (
        *args.threads.iter().min().expect("checked non-empty"),
        *args.threads.iter().max().expect("checked non-empty"),
    );
    if t_lo != t_hi {
        outln!("scaling {t_lo} -> {t_hi} threads, each kind against itself in the same round:");
        for &kind in &kinds {
            let r = paired(&rates(kind, t_hi), &rates(kind, t_lo));
            outln!(
                "  {:<14} {}",
                kind_name(kind, args.partitions),
                spread_line(&r)
            );
        }
    }
    let has = |k| kinds.contains(&k);
    for &threads in &args.threads {
        let p = rates(JournalKind::Partitioned, threads);
        for (base, target) in [
            (JournalKind::SingleLock, None),
            (JournalKind::ShortLock, Some(TARGET_VS_SHORT_LOCK)),
        ] {
            if !has(JournalKind::Partitioned) || !has(base) {
                continue;
            }
            let r = paired(&p, &rates(base, threads));
            let verdict = match (spread(&r), target) {
                (Some((_, med, _)), Some(t)) if threads == 2 => {
                    format!(
                        "  (target >= {t}x at 2 threads, on the median: {})",
                        if med >= t { "met" } else { "MISSED" }
                    )
                }
                _ => String::new(),
            };
            outln!(
                "threads {threads}: partitioned / {} = {}{verdict}",
                kind_name(base, args.partitions),
                spread_line(&r)
            );
        }
    }
    let (copy, flag) = stage_breakdown(&args)?;
    outln!(
        "4 KiB stage on the region alone, p50: crc + non-temporal copy + fence {copy:.2}us, flag store + flush + fence {flag:.2}us (target: stage <= 1us plus its flush: {})",
        if copy <= 1.0 { "met" } else { "MISSED" }
    );
    if has(JournalKind::Partitioned) {
        let worst_p99 = commit_p99
            .iter()
            .filter(|m| m.0 == JournalKind::Partitioned)
            .map(|m| m.1)
            .max()
            .unwrap_or(0) as f64
            / 1000.0;
        outln!(
            "partitioned commit p99 (worst over thread counts): {worst_p99:.2}us (target <= 20us: {})",
            if worst_p99 <= 20.0 { "met" } else { "MISSED" }
        );
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    outln!("load average at end: {}", load.trim());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::spread;

    #[test]
    fn spread_is_min_median_max() {
        assert_eq!(spread(&[3.0, 1.0, 2.0]), Some((1.0, 2.0, 3.0)));
        assert_eq!(spread(&[4.0, 1.0]), Some((1.0, 2.5, 4.0)));
        assert_eq!(spread(&[]), None);
    }
}
