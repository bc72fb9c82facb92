//! Functional tests of the journal API (single- and multi-threaded).

use std::sync::Arc;
use std::time::Duration;

use ptsd_blockdev::{BlockDevice, MemDevice};
use ptsd_nvjournal::{
    CrashRegion, Journal, JournalConfig, JournalError, JournalFormatError, JournalKind, Persist,
    PmemRegion,
};

const BS: usize = 4096;

fn dev(blocks: u64) -> Arc<dyn BlockDevice> {
    Arc::new(MemDevice::new(BS as u32, blocks).unwrap())
}

fn block(tag: u64) -> Vec<u8> {
    let mut b = vec![0u8; BS];
    for (i, c) in b.chunks_exact_mut(8).enumerate() {
        c.copy_from_slice(&(tag ^ ((i as u64) << 48)).to_le_bytes());
    }
    b
}

fn quiet(cfg: JournalConfig) -> JournalConfig {
    JournalConfig {
        checkpoint_interval: None,
        ..cfg
    }
}

#[test]
fn finished_reads_uncommitted_do_not_survive_reopen() {
    let d = dev(64);
    let region = CrashRegion::new(1 << 20);
    let cfg = quiet(JournalConfig::partitioned(3));
    let j = Journal::create(region.clone(), d.clone(), cfg.clone()).unwrap();
    let mut tx = j.begin();
    tx.write(7, &block(1)).unwrap();
    let mut buf = vec![0u8; BS];
    tx.read(7, &mut buf).unwrap();
    assert_eq!(buf, block(1), "a transaction sees its own writes");
    j.read(7, &mut buf).unwrap();
    assert_eq!(buf, vec![0u8; BS], "others do not see unfinished writes");
    tx.finish().unwrap();
    j.read(7, &mut buf).unwrap();
    assert_eq!(buf, block(1));
    // Finished but never committed: gone after a crash.
    drop(j);
    let (j, report) = Journal::open(region.clone(), d.clone(), cfg.clone()).unwrap();
    assert_eq!(report.replayed_blocks, 0);
    j.read(7, &mut buf).unwrap();
    assert_eq!(buf, vec![0u8; BS]);
    // Aborted transactions never appear, even after a later commit.
    let mut tx = j.begin();
    tx.write(8, &block(2)).unwrap();
    drop(tx);
    let mut tx = j.begin();
    tx.write(9, &block(3)).unwrap();
    tx.finish().unwrap();
    j.commit().unwrap();
    drop(j);
    let (j, report) = Journal::open(region, d, cfg).unwrap();
    assert_eq!(report.replayed_blocks, 1);
    j.read(8, &mut buf).unwrap();
    assert_eq!(buf, vec![0u8; BS]);
    j.read(9, &mut buf).unwrap();
    assert_eq!(buf, block(3));
}

#[test]
fn bad_requests_are_errors() {
    let j = Journal::create(
        CrashRegion::new(1 << 20),
        dev(16),
        quiet(JournalConfig::default()),
    )
    .unwrap();
    let mut tx = j.begin();
    assert!(matches!(
        tx.write(16, &block(0)),
        Err(JournalError::BlockOutOfRange { .. })
    ));
    assert!(matches!(
        tx.write(1, &[0u8; 100]),
        Err(JournalError::BadLength { .. })
    ));
    let mut small = [0u8; 10];
    assert!(matches!(
        j.read(1, &mut small),
        Err(JournalError::BadLength { .. })
    ));
    tx.finish().unwrap();
    j.close().unwrap();
    assert!(matches!(
        j.begin().write(1, &block(0)),
        Err(JournalError::Closed)
    ));
    assert!(matches!(j.commit(), Err(JournalError::Closed)));
    let bad = JournalConfig {
        block_size: 512,
        ..JournalConfig::default()
    };
    assert!(matches!(
        Journal::create(CrashRegion::new(1 << 20), dev(16), bad),
        Err(JournalError::Config(_))
    ));
    assert!(matches!(
        Journal::create(CrashRegion::new(8192), dev(16), JournalConfig::default()),
        Err(JournalError::Format(JournalFormatError::Geometry(_)))
    ));
}

#[test]
fn corrupt_or_foreign_superblock_is_a_typed_error() {
    let d = dev(32);
    let region = CrashRegion::new(1 << 20);
    let j = Journal::create(region.clone(), d.clone(), quiet(JournalConfig::default())).unwrap();
    j.close().unwrap();
    drop(j);
    // Another device shape.
    assert!(matches!(
        Journal::open(region.clone(), dev(33), JournalConfig::default()),
        Err(JournalError::ForeignDevice { .. })
    ));
    // Zeroes, a flipped bit, random garbage: errors, never panics.
    assert!(matches!(
        Journal::open(
            CrashRegion::new(1 << 20),
            d.clone(),
            JournalConfig::default()
        ),
        Err(JournalError::Format(JournalFormatError::BadMagic))
    ));
    let mut img = region.crash_image(0);
    img[20] ^= 0x40;
    assert!(matches!(
        Journal::open(
            CrashRegion::from_image(img),
            d.clone(),
            JournalConfig::default()
        ),
        Err(JournalError::Format(JournalFormatError::BadChecksum(_)))
    ));
    let mut img = region.crash_image(0);
    let mut x = 0x1234_5678_u64;
    for b in img[4096..8192].iter_mut() {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        *b = (x >> 56) as u8;
    }
    assert!(matches!(
        Journal::open(
            CrashRegion::from_image(img),
            d.clone(),
            JournalConfig::default()
        ),
        Err(JournalError::Format(JournalFormatError::NoCommitRecord))
    ));
    for seed in 0..64u64 {
        let mut img = region.crash_image(0);
        let mut x = seed;
        for _ in 0..32 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let at = (x >> 20) as usize % img.len().min(16384);
            img[at] = (x >> 56) as u8;
        }
        // Whatever it is, opening must not panic.
        let _ = Journal::open(
            CrashRegion::from_image(img),
            d.clone(),
            JournalConfig::default(),
        );
    }
}

fn concurrent_workload(kind: JournalKind, partitions: u32) {
    let d = dev(256);
    let region = CrashRegion::new(1 << 21);
    let cfg = JournalConfig {
        kind,
        partitions,
        checkpoint_interval: Some(Duration::from_millis(5)),
        ..JournalConfig::default()
    };
    let j = Journal::create(region.clone(), d.clone(), cfg.clone()).unwrap();
    let threads = 4u64;
    std::thread::scope(|s| {
        for t in 0..threads {
            let j = &j;
            s.spawn(move || {
                for i in 0..200u64 {
                    let mut tx = j.begin();
                    // Each thread owns blocks t, t+4, ...; three per tx.
                    for k in 0..3 {
                        let b = t + threads * ((i * 3 + k) % 64);
                        tx.write(b, &block((t << 32) | (i << 8) | k)).unwrap();
                    }
                    tx.finish().unwrap();
                    if i % 5 == 0 {
                        j.commit().unwrap();
                    }
                    if i % 50 == 0 {
                        j.checkpoint().unwrap();
                    }
                }
            });
        }
    });
    j.commit().unwrap();
    let stats = j.stats();
    assert_eq!(stats.staged_blocks, threads * 200 * 3);
    assert!(stats.checkpoints > 0);
    let mut expect = vec![vec![0u8; BS]; 256];
    for t in 0..threads {
        for i in 0..200u64 {
            for k in 0..3 {
                let b = t + threads * ((i * 3 + k) % 64);
                expect[b as usize] = block((t << 32) | (i << 8) | k);
            }
        }
    }
    let mut buf = vec![0u8; BS];
    for (b, e) in expect.iter().enumerate() {
        j.read(b as u64, &mut buf).unwrap();
        assert!(&buf == e, "block {b} before reopen");
    }
    drop(j);
    let (j, _) = Journal::open(region, d.clone(), cfg).unwrap();
    for (b, e) in expect.iter().enumerate() {
        j.read(b as u64, &mut buf).unwrap();
        assert!(&buf == e, "block {b} after reopen");
    }
    j.close().unwrap();
    for (b, e) in expect.iter().enumerate() {
        d.read(b as u64, &mut buf).unwrap();
        assert!(&buf == e, "block {b} on the device after close");
    }
}

#[test]
fn concurrent_partitioned() {
    concurrent_workload(JournalKind::Partitioned, 4);
}

#[test]
fn concurrent_single_lock() {
    concurrent_workload(JournalKind::SingleLock, 1);
}

#[test]
fn concurrent_short_lock() {
    concurrent_workload(JournalKind::ShortLock, 1);
}

#[test]
fn backpressure_waits_for_checkpoint_and_full_is_reported() {
    let d = dev(64);
    // A tiny region: 1 partition of a handful of slots.
    let region = CrashRegion::new(8192 + 8 * (4096 + 64) + 4096);
    let cfg = quiet(JournalConfig::partitioned(1));
    let j = Journal::create(region, d.clone(), cfg).unwrap();
    let slots = j.geometry().slots;
    assert!(slots >= 2);
    // Many small committed transactions: the ring wraps many times.
    for i in 0..(slots * 10) {
        let mut tx = j.begin();
        tx.write(i % 64, &block(i)).unwrap();
        tx.finish().unwrap();
        j.commit().unwrap();
    }
    assert!(
        j.stats().checkpoints > 0,
        "the ring wrapped, so checkpoints freed it"
    );
    // One transaction larger than the ring cannot fit: `Full`, not a hang.
    let mut tx = j.begin();
    let mut err = None;
    for i in 0..slots + 1 {
        if let Err(e) = tx.write(i, &block(1000 + i)) {
            err = Some(e);
            break;
        }
    }
    assert!(matches!(err, Some(JournalError::Full { .. })), "{err:?}");
    drop(tx);
    // The journal keeps working afterwards.
    let mut tx = j.begin();
    tx.write(3, &block(77)).unwrap();
    tx.finish().unwrap();
    j.checkpoint().unwrap();
    let mut buf = vec![0u8; BS];
    d.read(3, &mut buf).unwrap();
    assert!(buf == block(77), "block 3 checkpointed");
    j.close().unwrap();
}

/// A fill level above `begin`'s high-water mark (3/4) and no interval:
/// once a ring passes the mark, `begin` waits for a checkpoint, and the
/// trigger must start one even though the fill level was never reached.
/// (It used to wait forever: nothing commits, so nothing frees the ring.)
#[test]
fn begin_over_high_water_gets_room_without_interval_or_commits() {
    for cfg in [
        JournalConfig::partitioned(1),
        JournalConfig::single_lock(),
        JournalConfig::short_lock(),
    ] {
        let kind = cfg.kind;
        let d = dev(64);
        let region = CrashRegion::new(8192 + 16 * (4096 + 64) + 4096);
        let cfg = JournalConfig {
            checkpoint_fill: 0.9,
            ..quiet(cfg)
        };
        let j = Journal::create(region, d.clone(), cfg).unwrap();
        let slots = j.geometry().slots;
        assert!(slots >= 8, "{slots} slots");
        let txs = slots * 4;
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let worker = {
            let j = j.clone();
            std::thread::spawn(move || {
                // Finished transactions only, never an explicit commit.
                for i in 0..txs {
                    let mut tx = j.begin();
                    tx.write(i % 64, &block(i)).unwrap();
                    tx.finish().unwrap();
                    done_tx.send(i).unwrap();
                }
            })
        };
        for i in 0..txs {
            match done_rx.recv_timeout(Duration::from_secs(20)) {
                Ok(n) => assert_eq!(n, i),
                Err(e) => panic!(
                    "{kind:?}: transaction {i} of {txs} ({slots} slots, fill 0.9, no interval) \
                     never got past begin: {e}"
                ),
            }
        }
        worker.join().unwrap();
        assert!(
            j.stats().checkpoints > 0,
            "{kind:?}: checkpoints freed the ring"
        );
        j.close().unwrap();
        let mut buf = vec![0u8; BS];
        let last = txs - 1;
        d.read(last % 64, &mut buf).unwrap();
        assert!(
            buf == block(last),
            "{kind:?}: the last write reached the device"
        );
    }
}

#[test]
fn file_region_reports_its_mode_and_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal");
    let d = dev(32);
    let cfg = quiet(JournalConfig::partitioned(2));
    {
        let region = PmemRegion::open_file(&path, 1 << 20).unwrap();
        let j = Journal::create(region, d.clone(), cfg.clone()).unwrap();
        let mut tx = j.begin();
        tx.write(4, &block(4)).unwrap();
        tx.finish().unwrap();
        j.commit().unwrap();
        println!("region mode: {}", j.mode());
    }
    let region = PmemRegion::open_file(&path, 1 << 20).unwrap();
    assert!(region.len() == 1 << 20);
    let (j, report) = Journal::open(region, d.clone(), cfg).unwrap();
    assert_eq!(report.replayed_blocks, 1);
    let mut buf = vec![0u8; BS];
    j.read(4, &mut buf).unwrap();
    assert_eq!(buf, block(4));
}
