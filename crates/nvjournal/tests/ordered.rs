//! Ordered-mode writes (`Journal::write_ordered`): data written straight to
//! the device is durable once a commit covering a later transaction is, and
//! `Journal::holds` says whether a journaled version is still pending.

use std::sync::Arc;

use ptsd_blockdev::{BlockDevice, CrashDevice};
use ptsd_nvjournal::{CrashRegion, Journal, JournalConfig};

const BS: usize = 4096;

fn cfg() -> JournalConfig {
    JournalConfig {
        partitions: 2,
        checkpoint_interval: None,
        ..JournalConfig::default()
    }
}

#[test]
fn ordered_data_is_durable_with_the_commit_that_covers_its_metadata() {
    for seed in 0..16u64 {
        let dev = Arc::new(CrashDevice::new(BS as u32, 64).unwrap());
        let ddev: Arc<dyn BlockDevice> = dev.clone();
        let region = CrashRegion::new(1 << 20);
        let j = Journal::create(region.clone(), ddev.clone(), cfg()).unwrap();
        let data: Vec<Vec<u8>> = (0..4u8).map(|i| vec![0xd0 | i; BS]).collect();
        let batch: Vec<(u64, Vec<u8>)> = data
            .iter()
            .enumerate()
            .map(|(i, d)| (40 + i as u64, d.clone()))
            .collect();
        assert!(!j.holds(40));
        j.write_ordered(batch).unwrap();
        // The "metadata" naming the data blocks, in a transaction finished
        // after the data write, then committed.
        let mut tx = j.begin();
        tx.write(3, &[0x3a; BS]).unwrap();
        tx.finish().unwrap();
        assert!(j.holds(3) && !j.holds(40));
        j.commit().unwrap();
        // Power cut: the device keeps a seeded subset of what was not
        // flushed, the region what was persisted.
        region.crash_now();
        dev.crash(seed);
        let img = region.crash_image(seed);
        drop(j);
        let dev2: Arc<dyn BlockDevice> = Arc::new(dev.reopen());
        let (j2, _) = Journal::open(CrashRegion::from_image(img), dev2.clone(), cfg()).unwrap();
        let mut buf = vec![0u8; BS];
        j2.read(3, &mut buf).unwrap();
        assert_eq!(buf, vec![0x3a; BS], "seed {seed}: metadata committed");
        for (i, d) in data.iter().enumerate() {
            dev2.read(40 + i as u64, &mut buf).unwrap();
            assert_eq!(
                &buf,
                d,
                "seed {seed}: ordered block {} lost though its metadata committed",
                40 + i
            );
        }
        j2.close().unwrap();
    }
}

#[test]
fn holds_until_checkpointed() {
    let dev: Arc<dyn BlockDevice> = Arc::new(CrashDevice::new(BS as u32, 64).unwrap());
    let j = Journal::create(CrashRegion::new(1 << 20), dev.clone(), cfg()).unwrap();
    let mut tx = j.begin();
    tx.write(9, &[1; BS]).unwrap();
    assert!(!j.holds(9), "an unfinished transaction's block is not held");
    tx.finish().unwrap();
    assert!(j.holds(9));
    j.checkpoint().unwrap();
    assert!(!j.holds(9), "home and flushed: no longer held");
    let mut buf = vec![0u8; BS];
    dev.read(9, &mut buf).unwrap();
    assert_eq!(buf, vec![1; BS]);
    j.close().unwrap();
}
