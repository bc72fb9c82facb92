//! Discarding free space: online once enough was freed, at unmount, and on
//! request (FITRIM); never a block still in use, and never before the frees
//! it reports are durable.

use std::sync::Arc;

use parking_lot::Mutex;
use ptsd_blockdev::{BlockDevice, MemDevice};
use ptsd_fs::{mkfs, Caller, FileSystem, FsStoreError, JournalStore, MkfsOptions, Store, StoreTxn};
use ptsd_nvjournal::{CrashRegion, Journal, JournalConfig};

const ME: Caller = Caller { uid: 0, gid: 0 };

#[derive(Clone, Debug, PartialEq)]
enum Event {
    Finished,
    Synced,
    Discard(u64, u64),
}

/// Records transaction ends, syncs and discards, in order.
struct Recording {
    inner: Arc<dyn Store>,
    log: Arc<Mutex<Vec<Event>>>,
}

struct RecTxn<'a> {
    inner: Box<dyn StoreTxn + 'a>,
    log: &'a Mutex<Vec<Event>>,
}

impl StoreTxn for RecTxn<'_> {
    fn write(&mut self, blk: u64, data: &[u8]) -> Result<(), FsStoreError> {
        self.inner.write(blk, data)
    }
    fn write_ordered(&mut self, blk: u64, data: Vec<u8>) -> Result<(), FsStoreError> {
        self.inner.write_ordered(blk, data)
    }
    fn finish(self: Box<Self>) -> Result<(), FsStoreError> {
        self.inner.finish()?;
        self.log.lock().push(Event::Finished);
        Ok(())
    }
}

impl Store for Recording {
    fn num_blocks(&self) -> u64 {
        self.inner.num_blocks()
    }
    fn read(&self, blk: u64, buf: &mut [u8]) -> Result<(), FsStoreError> {
        self.inner.read(blk, buf)
    }
    fn begin(&self) -> Box<dyn StoreTxn + '_> {
        Box::new(RecTxn {
            inner: self.inner.begin(),
            log: &self.log,
        })
    }
    fn sync(&self) -> Result<(), FsStoreError> {
        self.inner.sync()?;
        self.log.lock().push(Event::Synced);
        Ok(())
    }
    fn checkpoint(&self) -> Result<(), FsStoreError> {
        self.inner.checkpoint()
    }
    fn write_super(&self, block: &[u8]) -> Result<(), FsStoreError> {
        self.inner.write_super(block)
    }
    fn discard(&self, blk: u64, count: u64) -> Result<(), FsStoreError> {
        self.log.lock().push(Event::Discard(blk, count));
        self.inner.discard(blk, count)
    }
    fn close(&self) -> Result<(), FsStoreError> {
        self.inner.close()
    }
    fn describe(&self) -> String {
        self.inner.describe()
    }
}

/// A 16 MiB file system on the journal store, its discards recorded.
fn mounted() -> (FileSystem, Arc<Mutex<Vec<Event>>>, Arc<dyn BlockDevice>) {
    let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(4096, 4096).unwrap());
    let region = CrashRegion::new(8 << 20);
    let cfg = JournalConfig {
        partitions: 2,
        checkpoint_interval: None,
        ..JournalConfig::default()
    };
    let journal = Journal::create(region, dev.clone(), cfg).unwrap();
    let store: Arc<dyn Store> = Arc::new(JournalStore::new(journal, dev.clone(), "test".into()));
    mkfs(&*store, &MkfsOptions::default()).unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let rec: Arc<dyn Store> = Arc::new(Recording {
        inner: store,
        log: log.clone(),
    });
    (FileSystem::mount(rec).unwrap(), log, dev)
}

fn write_file(fs: &FileSystem, name: &str, data: &[u8]) {
    let f = fs.create(fs.root(), name.as_bytes(), 0o644, ME).unwrap();
    fs.write(f.ino, 0, data).unwrap();
    fs.release(f.ino).unwrap();
}

fn read_file(fs: &FileSystem, name: &str) -> Vec<u8> {
    let a = fs.lookup(fs.root(), name.as_bytes()).unwrap();
    fs.read(a.ino, 0, a.size as u32 + 1).unwrap()
}

fn discarded(events: &[Event]) -> u64 {
    events
        .iter()
        .map(|e| match e {
            Event::Discard(_, n) => *n,
            _ => 0,
        })
        .sum()
}

/// Every discard comes after a sync that follows the last transaction
/// before it: the frees it reports are durable.
fn assert_synced_before_discards(events: &[Event]) {
    let mut synced = false;
    for e in events {
        match e {
            Event::Finished => synced = false,
            Event::Synced => synced = true,
            Event::Discard(b, n) => {
                assert!(
                    synced,
                    "discard of {n} blocks at {b} before a sync: {events:?}"
                )
            }
        }
    }
}

#[test]
fn deleting_enough_discards_the_freed_blocks_and_nothing_in_use() {
    let (fs, log, dev) = mounted();
    let keep: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    write_file(&fs, "keep", &keep);
    let body = vec![0x5au8; 64 << 10];
    for i in 0..24 {
        write_file(&fs, &format!("f{i}"), &body);
    }
    assert!(!fs.trim_is_due(), "nothing freed yet");
    let before = fs.statfs().bfree;
    for i in 0..24 {
        fs.unlink(fs.root(), format!("f{i}").as_bytes()).unwrap();
    }
    let freed = fs.statfs().bfree - before;
    assert!(freed >= 24 * 16, "{freed} blocks freed");
    assert!(fs.trim_is_due(), "{freed} freed blocks of a 16 MiB device");
    log.lock().clear();
    fs.trim_if_due();
    assert!(!fs.trim_is_due());
    let events = log.lock().clone();
    assert_synced_before_discards(&events);
    // The groups touched are discarded whole: at least what was freed,
    // at most what is free.
    let n = discarded(&events);
    assert!(
        n >= freed && n <= fs.statfs().bfree,
        "{n} discarded, {freed} freed"
    );
    // The device zeroes what it is told to drop: a discarded block in use
    // would show here (data) or in fsck (metadata).
    assert_eq!(read_file(&fs, "keep"), keep);
    write_file(&fs, "after", b"written after the trim");
    assert_eq!(read_file(&fs, "after"), b"written after the trim");
    fs.close().unwrap();
    let store: Arc<dyn Store> = Arc::new(ptsd_fs::DirectStore::new(dev).unwrap());
    let report = ptsd_fs::fsck::check(store, false).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}

#[test]
fn unmount_discards_what_was_freed_since_the_last_trim() {
    let (fs, log, dev) = mounted();
    write_file(&fs, "a", &vec![1u8; 40 << 10]);
    write_file(&fs, "b", &vec![2u8; 8 << 10]);
    fs.unlink(fs.root(), b"a").unwrap();
    assert!(
        !fs.trim_is_due(),
        "11 blocks freed: below the online threshold"
    );
    log.lock().clear();
    fs.close().unwrap();
    let events = log.lock().clone();
    assert_synced_before_discards(&events);
    assert!(discarded(&events) >= 11, "{events:?}");
    // Remounted from the device alone, "b" is intact.
    let store: Arc<dyn Store> = Arc::new(ptsd_fs::DirectStore::new(dev).unwrap());
    let fs = FileSystem::mount(store).unwrap();
    assert_eq!(read_file(&fs, "b"), vec![2u8; 8 << 10]);
}

#[test]
fn fitrim_discards_free_runs_of_the_asked_length_in_the_asked_range() {
    let (fs, log, _dev) = mounted();
    write_file(&fs, "x", &vec![3u8; 100 << 10]);
    let free = fs.statfs().bfree;
    log.lock().clear();
    assert_eq!(fs.trim(0, u64::MAX, 1).unwrap(), free);
    let events = log.lock().clone();
    assert_synced_before_discards(&events);
    assert_eq!(discarded(&events), free);
    // Runs longer than any: nothing. A range past the device: EINVAL.
    assert_eq!(fs.trim(0, u64::MAX, 1 << 30).unwrap(), 0);
    assert_eq!(fs.trim(1 << 40, 100, 1), Err(ptsd_fs::Errno::EINVAL));
    assert_eq!(read_file(&fs, "x"), vec![3u8; 100 << 10]);
}

/// Issue 45 §10: FITRIM refuses the ranges Linux refuses, with EINVAL:
/// a start past the end (2^64-1 included), a length of 0 or under a block,
/// a minimum run longer than an allocation group; a valid range still
/// works, and gives back the bytes discarded.
#[test]
fn fitrim_rejects_invalid_ranges_with_einval() {
    let (fs, log, _dev) = mounted();
    let root = Caller { uid: 0, gid: 0 };
    let range = |start: u64, len: u64, min: u64| {
        [start, len, min]
            .iter()
            .flat_map(|v| v.to_ne_bytes())
            .collect::<Vec<u8>>()
    };
    let size = fs.statfs().blocks * 4096;
    for (start, len, min) in [
        (size, 1 << 20, 0),
        (size + 4096, u64::MAX, 0),
        (u64::MAX, u64::MAX, 0),
        (0, 0, 0),
        (0, 4095, 0),
        (0, u64::MAX, 1 << 40),
    ] {
        assert_eq!(
            fs.ioctl(root, ptsd_fs::FITRIM, &range(start, len, min)),
            Err(ptsd_fs::Errno::EINVAL),
            "start {start} len {len} minlen {min}"
        );
    }
    assert!(log.lock().iter().all(|e| !matches!(e, Event::Discard(..))));
    let out = fs
        .ioctl(root, ptsd_fs::FITRIM, &range(0, u64::MAX, 0))
        .unwrap();
    let trimmed = u64::from_ne_bytes(out[8..16].try_into().unwrap());
    assert_eq!(trimmed, fs.statfs().bfree * 4096);
    // The last block is a valid start.
    assert!(fs
        .ioctl(root, ptsd_fs::FITRIM, &range(size - 4096, 4096, 0))
        .is_ok());
}
