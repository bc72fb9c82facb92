//! Bulk data paths: holes answered without I/O, ordered-mode data written
//! home once, and the freed-block rule ordered mode depends on.

use std::sync::Arc;

use ptsd_blockdev::{BlockDevice, CrashDevice, MemDevice};
use ptsd_fs::coalesce::CoalescingStore;
use ptsd_fs::stagestats::{BlockKind, StageCounts};
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
    let (fs, journal, _) = journaled_with(blocks, None);
    (fs, journal)
}

/// [`journaled`], with transactions coalesced in commit windows of up to
/// `window` blocks if given (and that store).
fn journaled_with(
    blocks: u64,
    window: Option<usize>,
) -> (FileSystem, Arc<Journal>, Option<Arc<CoalescingStore>>) {
    let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(4096, blocks).unwrap());
    mkfs(
        &DirectStore::new(dev.clone()).unwrap(),
        &MkfsOptions::default(),
    )
    .unwrap();
    let journal = Journal::create(CrashRegion::new(8 << 20), dev.clone(), cfg()).unwrap();
    let store: Arc<dyn Store> = Arc::new(JournalStore::new(journal.clone(), dev, "test".into()));
    let window = window.map(|n| CoalescingStore::new(store.clone(), n, None));
    let top = match &window {
        Some(w) => w.clone() as Arc<dyn Store>,
        None => store,
    };
    (FileSystem::mount(top).unwrap(), journal, window)
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

/// The tokubench-like workload of issue 48: `files` files of 4 KiB
/// created, written and closed in one directory, then an fsync. Returns
/// what the file system handed its store and what the journal staged.
fn create_files(fs: &FileSystem, journal: &Journal, files: u64) -> (StageCounts, u64) {
    let d = fs.mkdir(fs.root(), b"d0", 0o755, ME).unwrap().ino;
    fs.fsync().unwrap();
    let staged0 = journal.stats().staged_blocks;
    let before = fs.stage_counts();
    let data = vec![0x5au8; 4096];
    for i in 0..files {
        let f = fs.create(d, format!("f{i}").as_bytes(), 0o644, ME).unwrap();
        fs.write(f.ino, 0, &data).unwrap();
        fs.release(f.ino).unwrap();
    }
    fs.fsync().unwrap();
    (
        fs.stage_counts().since(&before),
        journal.stats().staged_blocks - staged0,
    )
}

/// The cost of a created file in blocks and bytes handed to the store, by
/// kind: the counters see every block the journal stages, and the table
/// (shown with `--nocapture`) is the per-file figure of issue 48.
#[test]
fn created_file_cost_is_counted_by_kind() {
    const FILES: u64 = 1000;
    let (fs, journal) = journaled(16384);
    let (cost, staged) = create_files(&fs, &journal, FILES);
    println!(
        "per created file ({FILES} files of 4 KiB, one directory):\n{}",
        cost.table(FILES)
    );
    assert_eq!(
        cost.journaled_blocks(),
        staged,
        "every staged block is counted once"
    );
    assert_eq!(cost.journaled_bytes(), cost.journaled_blocks() * 4096);
    // Each file has one inode and 4 KiB of data, which must show.
    assert!(cost.blocks(BlockKind::Inode) >= FILES);
    assert!(cost.bytes(BlockKind::Data) + cost.bytes(BlockKind::OrderedData) >= FILES * 4096);
    assert!(cost.txs >= FILES);
}

/// Coalesced in commit windows, the same files stage each block once per
/// window: the directory's inode and block and the bitmap once, each new
/// inode once (not at the create and again at the write), so far fewer
/// blocks reach the journal; and everything is there after a remount.
#[test]
fn coalescing_stages_each_block_once_per_window() {
    const FILES: u64 = 1000;
    let (fs, journal) = journaled(16384);
    let (_, plain) = create_files(&fs, &journal, FILES);
    let (fs, journal, window) = journaled_with(16384, Some(4096));
    let window = window.unwrap();
    let (below0, all0) = (window.stage_counts(), journal.stats().staged_blocks);
    let (handed, staged) = create_files(&fs, &journal, FILES);
    let all = journal.stats().staged_blocks - all0;
    let below = window.stage_counts().since(&below0);
    println!(
        "per created file, coalesced ({FILES} files of 4 KiB, one directory):\n{}",
        below.table(FILES)
    );
    // (`all` also holds the directory's creation, as the table does.)
    assert_eq!(
        below.journaled_blocks(),
        all,
        "every staged block is counted once"
    );
    assert_eq!(
        handed.journaled_blocks(),
        plain,
        "the file system hands over the same"
    );
    assert!(
        staged * 2 < plain,
        "coalesced: {staged} blocks staged, plain: {plain}"
    );
    // Every inode and data block still reaches the journal.
    assert!(below.blocks(BlockKind::Inode) >= FILES);
    assert!(below.bytes(BlockKind::Data) >= FILES * 4096);
    let d = fs.lookup(fs.root(), b"d0").unwrap().ino;
    for i in [0, FILES / 2, FILES - 1] {
        let f = fs.lookup(d, format!("f{i}").as_bytes()).unwrap();
        assert_eq!(fs.read(f.ino, 0, 8192).unwrap(), vec![0x5au8; 4096]);
    }
}

/// An inode evicted from the cache while its blocks wait in the open
/// window is loaded again from the window, not from the older journal or
/// device version.
#[test]
fn reads_see_the_open_window() {
    let (fs, _journal, window) = journaled_with(4096, Some(1 << 20));
    let window = window.unwrap();
    let a = fs.create(fs.root(), b"a", 0o644, ME).unwrap();
    fs.write(a.ino, 0, b"window").unwrap();
    fs.release(a.ino).unwrap();
    let cached = fs.cached_inodes();
    fs.forget(a.ino, 1);
    assert_eq!(fs.cached_inodes(), cached - 1, "evicted");
    assert!(window.window_blocks() > 0, "nothing flushed yet");
    let again = fs.lookup(fs.root(), b"a").unwrap();
    assert_eq!(again.ino, a.ino);
    assert_eq!(again.size, 6);
    assert_eq!(fs.read(a.ino, 0, 100).unwrap(), b"window");
}

/// With its thread, a window that reaches its size is flushed by the
/// thread (off the operation's path, which holds inode locks), without any
/// fsync or checkpoint.
#[test]
fn a_full_window_is_flushed_by_the_thread() {
    let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(4096, 4096).unwrap());
    mkfs(
        &DirectStore::new(dev.clone()).unwrap(),
        &MkfsOptions::default(),
    )
    .unwrap();
    let journal = Journal::create(CrashRegion::new(8 << 20), dev.clone(), cfg()).unwrap();
    let store: Arc<dyn Store> = Arc::new(JournalStore::new(journal, dev, "test".into()));
    let window = CoalescingStore::new(store, 8, Some(std::time::Duration::from_secs(3600)));
    let fs = FileSystem::mount(window.clone()).unwrap();
    for i in 0..8 {
        let f = fs
            .create(fs.root(), format!("f{i}").as_bytes(), 0o644, ME)
            .unwrap();
        fs.release(f.ino).unwrap();
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while window.stage_counts().txs == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the thread never flushed"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert!(window.window_blocks() < 16);
    fs.close().unwrap();
}
