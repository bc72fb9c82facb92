//! Bulk data paths: holes answered without I/O, ordered-mode data written
//! home once, and the freed-block rule ordered mode depends on.

use std::sync::Arc;

use ptsd_blockdev::{BlockDevice, CrashDevice, MemDevice};
use ptsd_fs::{
    mkfs, Caller, CountingStore, DirectStore, FileSystem, JournalStore, MkfsOptions, SetAttr, Store,
};
use ptsd_nvjournal::{CrashRegion, Journal, JournalConfig};

const ME: Caller = Caller { uid: 0, gid: 0 };

fn cfg() -> JournalConfig {
    JournalConfig {
        partitions: 2,
        checkpoint_interval: None,
        ..JournalConfig::default()
    }
}

#[test]
fn holes_are_read_without_io() {
    let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(4096, 4096).unwrap());
    let direct = Arc::new(DirectStore::new(dev).unwrap());
    mkfs(&*direct, &MkfsOptions::default()).unwrap();
    let store = Arc::new(CountingStore::new(direct));
    let fs = FileSystem::mount(store.clone()).unwrap();
    let root = fs.root();
    let a = fs.create(root, b"sparse", 0o644, ME).unwrap();
    // 10 GiB of hole with one written block at 0 and one at 6 GiB: far
    // more than the 16 MiB device holds.
    let size = 10u64 << 30;
    fs.setattr(
        a.ino,
        SetAttr {
            size: Some(size),
            ..SetAttr::default()
        },
    )
    .unwrap();
    fs.write(a.ino, 0, &[7u8; 4096]).unwrap();
    fs.write(a.ino, 6 << 30, &[9u8; 4096]).unwrap();
    // Reading the file through once only reads inode/extent metadata
    // already cached, plus the two data blocks.
    store.reset();
    let chunk = 1u32 << 20;
    let mut off = 0u64;
    while off < size {
        let got = fs.read(a.ino, off, chunk).unwrap();
        assert_eq!(got.len(), chunk as usize);
        let want = match off {
            0 => Some(7u8),
            o if o == 6 << 30 => Some(9u8),
            _ => None,
        };
        match want {
            Some(b) => {
                assert!(got[..4096].iter().all(|&x| x == b));
                assert!(got[4096..].iter().all(|&x| x == 0));
            }
            None => assert!(got.iter().all(|&x| x == 0), "hole at {off} not zero"),
        }
        off += u64::from(chunk);
    }
    assert_eq!(store.reads(), 2, "only the two written blocks are read");
}

/// A journaled fs over memory media; returns the fs and its journal.
fn journaled(blocks: u64) -> (FileSystem, Arc<Journal>) {
    let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(4096, blocks).unwrap());
    mkfs(
        &DirectStore::new(dev.clone()).unwrap(),
        &MkfsOptions::default(),
    )
    .unwrap();
    let journal = Journal::create(CrashRegion::new(8 << 20), dev.clone(), cfg()).unwrap();
    let store: Arc<dyn Store> = Arc::new(JournalStore::new(journal.clone(), dev, "test".into()));
    (FileSystem::mount(store).unwrap(), journal)
}

#[test]
fn large_writes_go_home_once_small_ones_are_journaled() {
    for ordered in [true, false] {
        let (fs, journal) = journaled(8192);
        if !ordered {
            fs.set_ordered_min_blocks(0);
        }
        let root = fs.root();
        let a = fs.create(root, b"big", 0o644, ME).unwrap();
        let data: Vec<u8> = (0..1u32 << 20).map(|i| (i % 251) as u8).collect();
        let before = journal.stats().staged_blocks;
        fs.write(a.ino, 0, &data).unwrap();
        let staged = journal.stats().staged_blocks - before;
        if ordered {
            // Inode, bitmap, extent metadata only: not the 256 data blocks.
            assert!(staged < 16, "{staged} blocks journaled for a 1 MiB write");
        } else {
            assert!(staged >= 256, "{staged}");
        }
        // A small write into a hole stays journaled either way.
        let before = journal.stats().staged_blocks;
        fs.write(a.ino, 4 << 20, &[1u8; 4096]).unwrap();
        assert!(journal.stats().staged_blocks - before >= 1);
        assert_eq!(fs.read(a.ino, 0, 1 << 20).unwrap(), data);
        // Overwrites stay journaled: a read of the run then takes some
        // blocks from the journal, the others from the device.
        let mut data = data;
        for at in [3usize, 100, 101, 255] {
            let patch = vec![at as u8 ^ 0x5a; 4096];
            fs.write(a.ino, (at * 4096) as u64, &patch).unwrap();
            data[at * 4096..(at + 1) * 4096].copy_from_slice(&patch);
        }
        fs.write(a.ino, 5000, b"unaligned").unwrap();
        data[5000..5009].copy_from_slice(b"unaligned");
        assert_eq!(fs.read(a.ino, 0, 1 << 20).unwrap(), data);
        assert_eq!(fs.read(a.ino, 4090, 20).unwrap(), data[4090..4110]);
        fs.fsync().unwrap();
        fs.close().unwrap();
    }
}

/// A block freed by an operation that is not yet durable must not take
/// ordered data: after a crash the free is undone and the old owner would
/// show the new data. File `a`'s block is freed by a truncate that is not
/// fsync'd, `b`'s ordered write reuses it, then the machine crashes.
#[test]
fn ordered_data_never_lands_in_a_block_whose_free_is_not_durable() {
    for seed in 0..8u64 {
        let dev = Arc::new(CrashDevice::new(4096, 2048).unwrap());
        let ddev: Arc<dyn BlockDevice> = dev.clone();
        mkfs(
            &DirectStore::new(ddev.clone()).unwrap(),
            &MkfsOptions::default(),
        )
        .unwrap();
        dev.flush().unwrap();
        let region = CrashRegion::new(2 << 20);
        let journal = Journal::create(region.clone(), ddev.clone(), cfg()).unwrap();
        let store: Arc<dyn Store> =
            Arc::new(JournalStore::new(journal, ddev.clone(), "test".into()));
        let fs = FileSystem::mount(store).unwrap();
        fs.set_ordered_min_blocks(1);
        let root = fs.root();
        let b = fs.create(root, b"b", 0o644, ME).unwrap();
        let a = fs.create(root, b"a", 0o644, ME).unwrap();
        let old = vec![0xaau8; 64 << 10];
        fs.write(a.ino, 0, &old).unwrap();
        fs.fsync().unwrap();
        fs.setattr(
            a.ino,
            SetAttr {
                size: Some(0),
                ..SetAttr::default()
            },
        )
        .unwrap();
        fs.write(b.ino, 0, &vec![0xbbu8; 64 << 10]).unwrap();
        // Crash now: region and device keep a seeded subset of what was
        // not made durable.
        region.crash_now();
        dev.crash(seed);
        let img = region.crash_image(seed);
        drop(fs);
        let dev2: Arc<dyn BlockDevice> = Arc::new(dev.reopen());
        let (journal2, _) = Journal::open(CrashRegion::from_image(img), dev2.clone(), cfg())
            .unwrap_or_else(|e| panic!("seed {seed}: recovery failed: {e}"));
        let store: Arc<dyn Store> = Arc::new(JournalStore::new(journal2, dev2, "test".into()));
        let fs = FileSystem::mount(store).unwrap();
        let a = fs.lookup(fs.root(), b"a").unwrap();
        let got = fs.read(a.ino, 0, u32::MAX).unwrap();
        assert!(
            got.is_empty() || got == old,
            "seed {seed}: a holds {} bytes, not its old data (first byte {:#x})",
            got.len(),
            got.first().copied().unwrap_or(0)
        );
        if let Ok(b) = fs.lookup(fs.root(), b"b") {
            let got = fs.read(b.ino, 0, u32::MAX).unwrap();
            assert!(
                got.iter().all(|&x| x == 0xbb),
                "seed {seed}: b shows foreign data"
            );
        }
        fs.close().unwrap();
    }
}

/// An ordered run one of whose blocks still has a version in the journal
/// (freed and reallocated before its checkpoint): that block is journaled,
/// so it stays the newest version, and the others go home; all read back
/// new, before and after a checkpoint.
#[test]
fn an_ordered_run_journals_the_blocks_the_journal_still_holds() {
    const BS: usize = 4096;
    let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(BS as u32, 256).unwrap());
    let journal = Journal::create(CrashRegion::new(8 << 20), dev.clone(), cfg()).unwrap();
    let store = JournalStore::new(journal.clone(), dev.clone(), "test".into());
    let mut tx = store.begin();
    tx.write(42, &[0x11; BS]).unwrap();
    tx.finish().unwrap();
    assert!(journal.holds(42));
    let run: Vec<u8> = (0..4u8).flat_map(|i| vec![0xA0 | i; BS]).collect();
    let staged = journal.stats().staged_blocks;
    let mut tx = store.begin();
    tx.write_ordered(40, run.clone()).unwrap();
    tx.finish().unwrap();
    assert_eq!(
        journal.stats().staged_blocks - staged,
        1,
        "only the held block is journaled"
    );
    let check = |when: &str| {
        for i in 0..4u64 {
            let mut got = vec![0u8; BS];
            store.read(40 + i, &mut got).unwrap();
            assert_eq!(got, vec![0xA0 | i as u8; BS], "block {} {when}", 40 + i);
        }
    };
    check("before the checkpoint");
    journal.checkpoint().unwrap();
    check("after the checkpoint");
    let mut home = vec![0u8; BS];
    dev.read(42, &mut home).unwrap();
    assert_eq!(
        home,
        vec![0xA2; BS],
        "the checkpoint left an old version home"
    );
}
