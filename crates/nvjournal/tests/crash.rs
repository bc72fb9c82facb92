//! Crash tests: random transaction workloads on the crash-simulating region
//! and the crash-simulating block device, crashed at every store/persist
//! event (single-threaded, deterministic) and at random events
//! (multi-threaded); after recovery every transaction committed before the
//! crash must be wholly there, none partly, and nothing else changed.
//!
//! Every failure message carries the seed and crash event; rerun one case
//! with `PTSD_CRASH_SEED=<seed>`.

use std::sync::Arc;

use ptsd_blockdev::{BlockDevice, CrashDevice};
use ptsd_nvjournal::{CrashRegion, Journal, JournalConfig, JournalKind};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const BS: usize = 4096;
const BLOCKS: u64 = 48;
const REGION: usize = 1 << 20;

/// Block contents naming the thread and the transaction that wrote it.
fn value(thread: u64, tx: u64, block: u64) -> Vec<u8> {
    let mut b = vec![0u8; BS];
    b[0..8].copy_from_slice(&thread.to_le_bytes());
    b[8..16].copy_from_slice(&tx.to_le_bytes());
    b[16..24].copy_from_slice(&block.to_le_bytes());
    for (i, x) in b[24..].iter_mut().enumerate() {
        *x = (tx as usize * 31 + i) as u8;
    }
    b
}

/// One thread's history: finished transactions in order, and how many of
/// them were certainly committed before the crash.
#[derive(Default, Clone)]
struct History {
    finished: Vec<(u64, Vec<u64>)>,
    must: usize,
}

fn config(kind: JournalKind, partitions: u32) -> JournalConfig {
    JournalConfig {
        kind,
        partitions,
        // No time- or fill-triggered background work: the single-threaded
        // runs must produce the same event sequence every time.
        checkpoint_interval: None,
        checkpoint_fill: 1.0,
        ..JournalConfig::default()
    }
}

/// Run one thread's share of the workload until done or crashed.
fn run_thread(
    j: &Journal,
    region: &CrashRegion,
    thread: u64,
    threads: u64,
    seed: u64,
    txs: u64,
) -> History {
    let mut rng = SmallRng::seed_from_u64(seed ^ thread.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let owned: Vec<u64> = (0..BLOCKS).filter(|b| b % threads == thread).collect();
    let mut h = History::default();
    for txn in 0..txs {
        let mut tx = j.begin();
        let n = rng.gen_range(1..=4);
        let mut wrote = Vec::new();
        let mut ok = true;
        for _ in 0..n {
            let b = owned[rng.gen_range(0..owned.len())];
            if tx.write(b, &value(thread, txn, b)).is_err() {
                ok = false;
                break;
            }
            wrote.push(b);
        }
        if !ok || rng.gen_ratio(1, 8) {
            drop(tx); // abort
        } else if tx.finish().is_ok() {
            h.finished.push((txn, wrote));
        }
        if rng.gen_ratio(1, 3) && j.commit().is_ok() && !region.is_crashed() {
            h.must = h.finished.len();
        }
        if rng.gen_ratio(1, 10) {
            let _ = j.checkpoint();
        }
        if region.is_crashed() && rng.gen_ratio(1, 4) {
            break;
        }
    }
    h
}

/// Check the recovered device against the histories.
fn verify(j: &Journal, histories: &[History], threads: u64, what: &str) {
    let mut actual = Vec::new();
    let mut buf = vec![0u8; BS];
    for b in 0..BLOCKS {
        j.read(b, &mut buf).unwrap();
        actual.push(buf.clone());
    }
    for (t, h) in histories.iter().enumerate() {
        let t = t as u64;
        let owned: Vec<u64> = (0..BLOCKS).filter(|b| b % threads == t).collect();
        // Some prefix of the finished transactions, at least the committed
        // ones, must explain every owned block exactly.
        let matches = |p: usize| {
            owned.iter().all(|&b| {
                let expect = h.finished[..p]
                    .iter()
                    .rev()
                    .find(|(_, w)| w.contains(&b))
                    .map(|(txn, _)| value(t, *txn, b))
                    .unwrap_or_else(|| vec![0u8; BS]);
                actual[b as usize] == expect
            })
        };
        let found = (h.must..=h.finished.len()).find(|&p| matches(p));
        assert!(
            found.is_some(),
            "{what}: thread {t}: no prefix of its {} finished transactions (at least {} committed) \
             explains the recovered blocks",
            h.finished.len(),
            h.must
        );
    }
}

/// One crash run: returns the number of region events the run produced.
fn crash_run(
    kind: JournalKind,
    partitions: u32,
    threads: u64,
    txs: u64,
    seed: u64,
    crash_event: Option<u64>,
) -> u64 {
    let what = format!(
        "kind {kind:?} partitions {partitions} threads {threads} seed {seed} crash event {crash_event:?}"
    );
    let dev = Arc::new(CrashDevice::new(BS as u32, BLOCKS).unwrap());
    let region = CrashRegion::new(REGION);
    let cfg = config(kind, partitions);
    let j = Journal::create(region.clone(), dev.clone(), cfg.clone()).unwrap();
    let d = dev.clone();
    region.on_crash(move || {
        d.crash(seed);
    });
    if let Some(e) = crash_event {
        region.crash_at_event(e);
    }
    let histories: Vec<History> = if threads == 1 {
        vec![run_thread(&j, &region, 0, 1, seed, txs)]
    } else {
        std::thread::scope(|s| {
            let hs: Vec<_> = (0..threads)
                .map(|t| {
                    let (j, region) = (&j, &region);
                    s.spawn(move || run_thread(j, region, t, threads, seed, txs))
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        })
    };
    let events = region.events();
    if crash_event.is_none() {
        region.crash_now();
    }
    drop(j);
    let image = region.crash_image(seed);
    let dev2: Arc<dyn BlockDevice> = Arc::new(dev.reopen());
    let (j2, report) = Journal::open(CrashRegion::from_image(image), dev2, cfg)
        .unwrap_or_else(|e| panic!("{what}: recovery failed: {e}"));
    verify(&j2, &histories, threads, &what);
    // The recovered journal keeps working and recovers again.
    let mut tx = j2.begin();
    tx.write(0, &value(99, 99, 0)).unwrap();
    tx.finish().unwrap();
    j2.commit().unwrap();
    let _ = report;
    events
}

fn seed_override() -> Option<u64> {
    std::env::var("PTSD_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
}

/// Single-threaded, deterministic: crash at every event of the run (every
/// store and persist, including every commit and checkpoint point).
fn every_event(kind: JournalKind, partitions: u32, seed: u64, txs: u64) {
    let total = crash_run(kind, partitions, 1, txs, seed, None);
    println!("seed {seed}: {total} events, crashing at each");
    for e in 0..total {
        crash_run(kind, partitions, 1, txs, seed, Some(e));
    }
}

#[test]
fn crash_at_every_event_partitioned() {
    for seed in seed_override().map_or(vec![2, 11], |s| vec![s]) {
        every_event(JournalKind::Partitioned, 3, seed, 12);
    }
}

#[test]
fn crash_at_every_event_single_lock() {
    let seed = seed_override().unwrap_or(3);
    every_event(JournalKind::SingleLock, 1, seed, 10);
}

#[test]
fn crash_at_every_event_short_lock() {
    let seed = seed_override().unwrap_or(5);
    every_event(JournalKind::ShortLock, 1, seed, 10);
}

/// Several stagers copying outside the short lock at once, crashed at a
/// random event: a commit must still cover only fully staged slots.
#[test]
fn crash_multithreaded_random_points_short_lock() {
    let base = seed_override().unwrap_or(3000);
    let runs = if seed_override().is_some() { 1 } else { 16 };
    for seed in base..base + runs {
        let mut rng = SmallRng::seed_from_u64(seed);
        let threads = rng.gen_range(2..=3);
        let total = crash_run(JournalKind::ShortLock, 1, threads, 25, seed, None);
        let at = rng.gen_range(0..total.max(1));
        println!("seed {seed}: short-lock threads {threads} crash at {at}/{total}");
        crash_run(JournalKind::ShortLock, 1, threads, 25, seed, Some(at));
    }
}

#[test]
fn crash_multithreaded_random_points() {
    let base = seed_override().unwrap_or(1000);
    let runs = if seed_override().is_some() { 1 } else { 24 };
    for seed in base..base + runs {
        let mut rng = SmallRng::seed_from_u64(seed);
        let partitions = rng.gen_range(1..=4);
        let threads = rng.gen_range(2..=3);
        let total = crash_run(
            JournalKind::Partitioned,
            partitions,
            threads,
            25,
            seed,
            None,
        );
        let at = rng.gen_range(0..total.max(1));
        println!("seed {seed}: partitions {partitions} threads {threads} crash at {at}/{total}");
        crash_run(
            JournalKind::Partitioned,
            partitions,
            threads,
            25,
            seed,
            Some(at),
        );
    }
}

/// A commit taken while another transaction is open lists its epoch as
/// excluded: after a crash the open transaction's staged blocks are not
/// replayed, the committed one's are; once it finishes and a later commit
/// covers it, it is replayed too.
#[test]
fn commit_excludes_open_transactions() {
    for kind in [
        JournalKind::Partitioned,
        JournalKind::SingleLock,
        JournalKind::ShortLock,
    ] {
        let partitions = if kind == JournalKind::Partitioned {
            3
        } else {
            1
        };
        let cfg = config(kind, partitions);
        let dev = Arc::new(CrashDevice::new(BS as u32, BLOCKS).unwrap());
        let region = CrashRegion::new(REGION);
        let j = Journal::create(region.clone(), dev.clone(), cfg.clone()).unwrap();
        // Older transaction, left open across the commit.
        let mut open = j.begin();
        open.write(1, &value(1, 1, 1)).unwrap();
        open.write(2, &value(1, 1, 2)).unwrap();
        // Younger transaction, finished and committed meanwhile (from
        // another thread, as a file system would).
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut tx = j.begin();
                tx.write(3, &value(2, 2, 3)).unwrap();
                tx.finish().unwrap();
                j.commit().unwrap();
            });
        });
        let recover = |image: Vec<u8>| {
            let dev2: Arc<dyn BlockDevice> = Arc::new(dev.reopen());
            let (j2, _) = Journal::open(CrashRegion::from_image(image), dev2, cfg.clone()).unwrap();
            let mut got = Vec::new();
            for b in 1..=3 {
                let mut buf = vec![0u8; BS];
                j2.read(b, &mut buf).unwrap();
                got.push(buf);
            }
            got
        };
        let got = recover(region.crash_image(5));
        assert_eq!(got[0], vec![0u8; BS], "{kind:?}: open transaction replayed");
        assert_eq!(got[1], vec![0u8; BS], "{kind:?}: open transaction replayed");
        assert_eq!(
            got[2],
            value(2, 2, 3),
            "{kind:?}: committed transaction lost"
        );
        open.finish().unwrap();
        j.commit().unwrap();
        let got = recover(region.crash_image(6));
        assert_eq!(
            got[0],
            value(1, 1, 1),
            "{kind:?}: finished transaction lost"
        );
        assert_eq!(
            got[1],
            value(1, 1, 2),
            "{kind:?}: finished transaction lost"
        );
        assert_eq!(
            got[2],
            value(2, 2, 3),
            "{kind:?}: committed transaction lost"
        );
    }
}
