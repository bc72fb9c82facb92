//! How `stack_crash` assembles, mounts and recovers the stack on crash
//! media: file system → journal (on a crash region) → home device (a crash
//! device).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ptsd_blockdev::{BlockDevice, CrashDevice};
use ptsd_fs::{
    fsck, mkfs, DirectStore, FileSystem, JournalStore, MkfsOptions, Store, StoreError, StoreTxn,
};
use ptsd_nvjournal::{CrashRegion, Journal, JournalConfig};

/// Home device blocks (4 KiB).
pub const BLOCKS: u64 = 16384;
/// Journal region bytes.
pub const REGION: usize = 4 << 20;

/// The media one stack lives on.
pub struct Media {
    pub region: CrashRegion,
    pub dev: Arc<CrashDevice>,
}

impl Media {
    /// Blank media.
    pub fn new() -> Self {
        Self {
            region: CrashRegion::new(REGION),
            dev: Arc::new(CrashDevice::new(4096, BLOCKS).expect("geometry")),
        }
    }
}

impl Default for Media {
    fn default() -> Self {
        Self::new()
    }
}

/// The journal settings: no time- or fill-triggered background work, so a
/// run's event sequence is a function of its input.
pub fn journal_config() -> JournalConfig {
    JournalConfig {
        partitions: 2,
        checkpoint_interval: None,
        checkpoint_fill: 1.0,
        ..JournalConfig::default()
    }
}

/// The journal store with a simulated concurrent fsync: right after the
/// `n`-th transaction finishes (counted from [`Mounted::commit_after`]), a
/// commit runs, as another thread's fsync could. A single-threaded run
/// otherwise only ever commits between operations, where an operation split
/// into several transactions would look atomic.
pub struct Interposed {
    inner: Arc<JournalStore>,
    left: AtomicU64,
}

struct ITxn<'a> {
    inner: Box<dyn StoreTxn + 'a>,
    store: &'a Interposed,
}

impl StoreTxn for ITxn<'_> {
    fn write(&mut self, blk: u64, data: &[u8]) -> Result<(), StoreError> {
        self.inner.write(blk, data)
    }
    fn finish(self: Box<Self>) -> Result<(), StoreError> {
        let store = self.store;
        self.inner.finish()?;
        let left = store.left.load(Ordering::SeqCst);
        if left > 0 {
            store.left.store(left - 1, Ordering::SeqCst);
            if left == 1 {
                store.inner.sync()?;
            }
        }
        Ok(())
    }
}

impl Store for Interposed {
    fn num_blocks(&self) -> u64 {
        self.inner.num_blocks()
    }
    fn read(&self, blk: u64, buf: &mut [u8]) -> Result<(), StoreError> {
        self.inner.read(blk, buf)
    }
    fn begin(&self) -> Box<dyn StoreTxn + '_> {
        Box::new(ITxn {
            inner: self.inner.begin(),
            store: self,
        })
    }
    fn sync(&self) -> Result<(), StoreError> {
        self.inner.sync()
    }
    fn checkpoint(&self) -> Result<(), StoreError> {
        self.inner.checkpoint()
    }
    fn write_super(&self, block: &[u8]) -> Result<(), StoreError> {
        self.inner.write_super(block)
    }
    fn close(&self) -> Result<(), StoreError> {
        self.inner.close()
    }
    fn describe(&self) -> String {
        self.inner.describe()
    }
}

/// A mounted stack.
pub struct Mounted {
    fs: FileSystem,
    store: Arc<Interposed>,
    region: CrashRegion,
}

impl Mounted {
    /// A concurrent fsync right after the `n`-th transaction from now
    /// finishes (0: none).
    pub fn commit_after(&self, n: u64) {
        self.store.left.store(n, Ordering::SeqCst);
    }

    /// Whether the power was cut under this stack.
    pub fn crashed(&self) -> bool {
        self.region.is_crashed()
    }

    pub fn fs(&self) -> &FileSystem {
        &self.fs
    }

    /// A journal checkpoint, as the background thread does it.
    pub fn checkpoint(&self) -> Result<(), String> {
        self.store
            .checkpoint()
            .map_err(|e| format!("checkpoint: {e}"))
    }

    /// Clean unmount.
    pub fn close(&self) -> Result<(), String> {
        self.fs.close().map_err(|e| format!("close: {e}"))
    }
}

/// Mount the stack on `media`: a fresh file system and journal when
/// `fresh`, else recover what is there (journal replay, mount preflight,
/// orphans freed).
pub fn mount(media: &Media, fresh: bool) -> Result<Mounted, String> {
    let dev: Arc<dyn BlockDevice> = media.dev.clone();
    let journal = if fresh {
        let direct = DirectStore::new(dev.clone()).map_err(|e| e.to_string())?;
        mkfs(&direct, &MkfsOptions::default()).map_err(|e| format!("mkfs: {e}"))?;
        dev.flush().map_err(|e| e.to_string())?;
        Journal::create(media.region.clone(), dev.clone(), journal_config())
            .map_err(|e| format!("journal create: {e}"))?
    } else {
        Journal::open(media.region.clone(), dev.clone(), journal_config())
            .map_err(|e| format!("journal recovery: {e}"))?
            .0
    };
    let store = Arc::new(Interposed {
        inner: Arc::new(JournalStore::new(journal, dev, "crashcheck".into())),
        left: AtomicU64::new(0),
    });
    let fs =
        FileSystem::mount(store.clone() as Arc<dyn Store>).map_err(|e| format!("mount: {e}"))?;
    Ok(Mounted {
        fs,
        store,
        region: media.region.clone(),
    })
}

/// fsck of the device alone (after a clean close).
pub fn fsck(dev: &Arc<CrashDevice>) -> Result<fsck::Report, String> {
    let d: Arc<dyn BlockDevice> = dev.clone();
    let store = DirectStore::new(d).map_err(|e| e.to_string())?;
    fsck::check(Arc::new(store), false).map_err(|e| e.to_string())
}
