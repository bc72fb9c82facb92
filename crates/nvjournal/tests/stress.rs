//! Stress of the lock-free paths: many threads staging into the same
//! partitions (and the same blocks) of a small ring, with concurrent
//! commits, checkpoints, aborts and readers. Reads must never see a torn
//! block or a version that no finished transaction wrote.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use ptsd_blockdev::{BlockDevice, MemDevice};
use ptsd_nvjournal::{Journal, JournalConfig, JournalError, JournalKind, PmemRegion};

const BS: usize = 4096;
const BLOCKS: u64 = 24;

fn val(tag: u64) -> Vec<u8> {
    let mut b = vec![0u8; BS];
    for c in b.chunks_exact_mut(8) {
        c.copy_from_slice(&tag.to_le_bytes());
    }
    b
}

fn tag_of(buf: &[u8]) -> Option<u64> {
    let t = u64::from_le_bytes(buf[..8].try_into().unwrap());
    buf.chunks_exact(8)
        .all(|c| u64::from_le_bytes(c.try_into().unwrap()) == t)
        .then_some(t)
}

fn stress(kind: JournalKind, partitions: u32) {
    let dir = tempfile::tempdir().unwrap();
    // About 40 slots per partition: the rings wrap many times.
    let region = PmemRegion::open_file(dir.path().join("j"), 1 << 20).unwrap();
    let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(BS as u32, BLOCKS).unwrap());
    let cfg = JournalConfig {
        kind,
        partitions,
        checkpoint_interval: Some(std::time::Duration::from_millis(2)),
        ..JournalConfig::default()
    };
    let j = Journal::create(region, dev.clone(), cfg).unwrap();
    // Tags of finished versions, per block (tag 0 = never written).
    let finished: Vec<Mutex<HashSet<u64>>> = (0..BLOCKS)
        .map(|_| Mutex::new(HashSet::from([0])))
        .collect();
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let (j, finished) = (&j, &finished);
            s.spawn(move || {
                let mut x = t + 1;
                for i in 0..300u64 {
                    let mut tx = j.begin();
                    let mut wrote = Vec::new();
                    for k in 0..3u64 {
                        x = x
                            .wrapping_mul(6364136223846793005)
                            .wrapping_add(1442695040888963407);
                        let b = (x >> 33) % BLOCKS;
                        let tag = (t << 40) | (i << 8) | k | (1 << 60);
                        match tx.write(b, &val(tag)) {
                            Ok(()) => wrote.push((b, tag)),
                            Err(JournalError::Full { .. }) => break,
                            Err(e) => panic!("stage: {e}"),
                        }
                    }
                    // Publish the tags before finishing, so a reader that
                    // sees the version finds it in the set.
                    for &(b, tag) in &wrote {
                        finished[b as usize].lock().insert(tag);
                    }
                    if i % 7 == 3 {
                        drop(tx);
                        continue;
                    }
                    tx.finish().unwrap();
                    if i % 3 == 0 {
                        j.commit().unwrap();
                    }
                    if i % 50 == 0 {
                        j.checkpoint().unwrap();
                    }
                }
            });
        }
        let (j, finished, stop) = (&j, &finished, &stop);
        s.spawn(move || {
            let mut buf = vec![0u8; BS];
            let mut b = 0;
            while !stop.load(Ordering::Relaxed) {
                j.read(b, &mut buf).unwrap();
                let tag = tag_of(&buf).unwrap_or_else(|| panic!("torn read of block {b}"));
                assert!(
                    finished[b as usize].lock().contains(&tag),
                    "block {b}: read a version ({tag:#x}) no transaction wrote"
                );
                b = (b + 1) % BLOCKS;
            }
        });
        // Let the writers finish, then stop the reader.
        s.spawn(move || {
            while j.stats().finished_txs + j.stats().aborted_txs < 4 * 300 {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            stop.store(true, Ordering::Relaxed);
        });
    });
    j.checkpoint().unwrap();
    let mut a = vec![0u8; BS];
    let mut d = vec![0u8; BS];
    for b in 0..BLOCKS {
        j.read(b, &mut a).unwrap();
        dev.read(b, &mut d).unwrap();
        assert!(
            a == d,
            "block {b}: the device differs from the journal after a checkpoint"
        );
    }
    let st = j.stats();
    assert!(st.checkpoints > 1 && st.commits > 1, "{st:?}");
    j.close().unwrap();
}

#[test]
fn stress_partitioned() {
    stress(JournalKind::Partitioned, 3);
}

#[test]
fn stress_single_lock() {
    stress(JournalKind::SingleLock, 1);
}

#[test]
fn stress_short_lock() {
    stress(JournalKind::ShortLock, 1);
}
