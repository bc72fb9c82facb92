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
    msync: bool,
    kind: JournalKind,
    partitions: u32,
    threads: u64,
    txs: u64,
    seed: u64,
    crash_event: Option<u64>,
) -> u64 {
    let what = format!(
        "kind {kind:?} msync {msync} partitions {partitions} threads {threads} seed {seed} crash event {crash_event:?}"
    );
    let dev = Arc::new(CrashDevice::new(BS as u32, BLOCKS).unwrap());
    let region = if msync {
        CrashRegion::new_msync(REGION)
    } else {
        CrashRegion::new(REGION)
    };
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
    let reopened = region.crash_copy(seed);
    let dev2: Arc<dyn BlockDevice> = Arc::new(dev.reopen());
    let (j2, report) = Journal::open(reopened, dev2, cfg)
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
fn every_event(msync: bool, kind: JournalKind, partitions: u32, seed: u64, txs: u64) {
    let total = crash_run(msync, kind, partitions, 1, txs, seed, None);
    println!("seed {seed}: {total} events, crashing at each");
    for e in 0..total {
        crash_run(msync, kind, partitions, 1, txs, seed, Some(e));
    }
}

#[test]
fn crash_at_every_event_partitioned() {
    for seed in seed_override().map_or(vec![2, 11], |s| vec![s]) {
        every_event(false, JournalKind::Partitioned, 3, seed, 12);
    }
}

#[test]
fn crash_at_every_event_single_lock() {
    let seed = seed_override().unwrap_or(3);
    every_event(false, JournalKind::SingleLock, 1, seed, 10);
}

#[test]
fn crash_at_every_event_short_lock() {
    let seed = seed_override().unwrap_or(5);
    every_event(false, JournalKind::ShortLock, 1, seed, 10);
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
        let total = crash_run(false, JournalKind::ShortLock, 1, threads, 25, seed, None);
        let at = rng.gen_range(0..total.max(1));
        println!("seed {seed}: short-lock threads {threads} crash at {at}/{total}");
        crash_run(
            false,
            JournalKind::ShortLock,
            1,
            threads,
            25,
            seed,
            Some(at),
        );
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
            false,
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
            false,
            JournalKind::Partitioned,
            partitions,
            threads,
            25,
            seed,
            Some(at),
        );
    }
}

/// A journal file on a disk (msync mode), where each commit record goes to
/// the media in the same sync as the slots it commits: crashed at every
/// event, with any subset of the unsynced lines surviving.
#[test]
fn crash_at_every_event_msync() {
    for seed in seed_override().map_or(vec![4, 17], |s| vec![s]) {
        every_event(true, JournalKind::Partitioned, 1, seed, 12);
        every_event(true, JournalKind::Partitioned, 3, seed, 12);
    }
    every_event(
        true,
        JournalKind::ShortLock,
        1,
        seed_override().unwrap_or(6),
        10,
    );
}

/// Msync mode with 2-3 threads staging, committing and checkpointing at
/// once, crashed at a random event.
#[test]
fn crash_multithreaded_random_points_msync() {
    let base = seed_override().unwrap_or(5000);
    let runs = if seed_override().is_some() { 1 } else { 24 };
    for seed in base..base + runs {
        let mut rng = SmallRng::seed_from_u64(seed);
        let partitions = rng.gen_range(1..=3);
        let threads = rng.gen_range(2..=3);
        let total = crash_run(
            true,
            JournalKind::Partitioned,
            partitions,
            threads,
            25,
            seed,
            None,
        );
        let at = rng.gen_range(0..total.max(1));
        println!(
            "seed {seed}: msync partitions {partitions} threads {threads} crash at {at}/{total}"
        );
        crash_run(
            true,
            JournalKind::Partitioned,
            partitions,
            threads,
            25,
            seed,
            Some(at),
        );
    }
}

/// Msync mode: a commit record that reached the media without one of the
/// slots it commits (its sync cut short) is not used; recovery falls back
/// to the record before it, so the transaction is wholly absent, not half
/// there. With the slot intact the same record is used.
#[test]
fn msync_a_record_whose_slot_is_missing_is_not_used() {
    let dev = Arc::new(CrashDevice::new(BS as u32, BLOCKS).unwrap());
    let region = CrashRegion::new_msync(REGION);
    let cfg = config(JournalKind::Partitioned, 1);
    let j = Journal::create(region.clone(), dev.clone(), cfg.clone()).unwrap();
    let write = |tx_no: u64, blocks: &[u64]| {
        let mut tx = j.begin();
        for &b in blocks {
            tx.write(b, &value(0, tx_no, b)).unwrap();
        }
        tx.finish().unwrap();
        j.commit().unwrap();
    };
    write(1, &[1, 2]);
    let before = region.crash_image(0);
    write(2, &[1, 2]);
    let after = region.crash_image(0);
    region.crash_now();
    drop(j);
    // The last line that changed is in the ring (the commit area comes
    // first): the second transaction's last slot.
    let line = (0..after.len() / 64)
        .rev()
        .find(|&l| after[l * 64..(l + 1) * 64] != before[l * 64..(l + 1) * 64])
        .expect("the commit changed the media");
    let mut torn = after.clone();
    torn[line * 64..(line + 1) * 64].copy_from_slice(&before[line * 64..(line + 1) * 64]);
    let mut buf = vec![0u8; BS];
    for (image, torn_commit, tx_no) in [(torn, true, 1), (after, false, 2)] {
        let dev2: Arc<dyn BlockDevice> = Arc::new(dev.reopen());
        let (j2, report) =
            Journal::open(CrashRegion::from_image_msync(image), dev2, cfg.clone()).unwrap();
        assert_eq!(report.torn_commit, torn_commit);
        for b in [1, 2] {
            j2.read(b, &mut buf).unwrap();
            assert_eq!(
                buf,
                value(0, tx_no, b),
                "block {b}, torn commit {torn_commit}"
            );
        }
    }
}

/// A commit taken while another transaction is open lists its epoch as
/// excluded: after a crash the open transaction's staged blocks are not
/// replayed, the committed one's are; once it finishes and a later commit
/// covers it, it is replayed too.
#[test]
fn commit_excludes_open_transactions() {
    // Msync too: there the second commit's digest must count the open
    // transaction's slots, which sit below the first commit's heads.
    for (kind, msync) in [
        (JournalKind::Partitioned, false),
        (JournalKind::SingleLock, false),
        (JournalKind::ShortLock, false),
        (JournalKind::Partitioned, true),
        (JournalKind::ShortLock, true),
    ] {
        let partitions = if kind == JournalKind::Partitioned {
            3
        } else {
            1
        };
        let cfg = config(kind, partitions);
        let dev = Arc::new(CrashDevice::new(BS as u32, BLOCKS).unwrap());
        let region = if msync {
            CrashRegion::new_msync(REGION)
        } else {
            CrashRegion::new(REGION)
        };
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
        let recover = |region: CrashRegion| {
            let dev2: Arc<dyn BlockDevice> = Arc::new(dev.reopen());
            let (j2, report) = Journal::open(region, dev2, cfg.clone()).unwrap();
            assert!(!report.torn_commit, "{kind:?}: a synced commit looked torn");
            let mut got = Vec::new();
            for b in 1..=3 {
                let mut buf = vec![0u8; BS];
                j2.read(b, &mut buf).unwrap();
                got.push(buf);
            }
            got
        };
        let got = recover(region.crash_copy(5));
        assert_eq!(got[0], vec![0u8; BS], "{kind:?}: open transaction replayed");
        assert_eq!(got[1], vec![0u8; BS], "{kind:?}: open transaction replayed");
        assert_eq!(
            got[2],
            value(2, 2, 3),
            "{kind:?}: committed transaction lost"
        );
        open.finish().unwrap();
        j.commit().unwrap();
        let got = recover(region.crash_copy(6));
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
