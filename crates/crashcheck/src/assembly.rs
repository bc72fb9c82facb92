//! How `stack_crash` assembles, mounts and recovers the stack: through
//! [`Stack::open`], the code `ptsd mount` runs, over crash media — the file
//! system on the journal (a [`CrashRegion`]) on the emulated SSD (FTL in
//! virtual time) whose persistent image is a [`CrashDevice`], or on the
//! crash device as a plain block device (with block checksums). Stacks
//! on DFTL and on the plain device keep their journal as on a disk file
//! (the region's msync flavour: one sync per commit makes slots and
//! record durable together), the others as on persistent memory.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ptsd_blockdev::CrashDevice;
use ptsd_fs::{FileSystem, FsStoreError, Store, StoreTxn};
use ptsd_ftl::{FtlConfig, Ssd, Variant};
use ptsd_nvjournal::{CrashRegion, JournalConfig};
use ptsd_stack::{DeviceSpec, JournalSpec, MissingJournal, Stack, StackSpec, StoreHook};

/// Logical bytes of the emulated SSD the file system lives on.
pub const SSD_BYTES: u64 = 32 << 20;
/// Journal region bytes.
pub const REGION: usize = 4 << 20;

/// The emulated SSD's configuration: `variant`'s mapping scheme on a small
/// geometry (2 channels × 2 chips, 32-page blocks), quick to recover.
pub fn ftl_config(variant: Variant) -> FtlConfig {
    let mut cfg = FtlConfig::paper(variant, SSD_BYTES);
    cfg.channels = 2;
    cfg.chips_per_channel = 2;
    cfg.pages_per_block = 32;
    cfg.with_logical_bytes(SSD_BYTES)
}

/// What the file system lives on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Under {
    /// The emulated SSD with this FTL, its image on the crash device.
    Ssd(Variant),
    /// The crash device itself, as a plain block device (an image file or
    /// disk), formatted by `ptsd_stack::mkfs`: with block checksums.
    Plain,
}

/// What an input picks from: the SSD with each FTL, or a plain device.
pub const UNDER: [Under; 4] = [
    Under::Ssd(Variant::Page),
    Under::Ssd(Variant::Dftl),
    Under::Ssd(Variant::WriteOpt),
    Under::Plain,
];

/// The media one stack lives on: the journal's region and the crash device
/// (the SSD's image, or the plain device).
pub struct Media {
    pub region: CrashRegion,
    pub image: Arc<CrashDevice>,
    /// The SSD's configuration (`None`: a plain device).
    pub ftl: Option<FtlConfig>,
}

/// The journal region for a stack on `under` (see the module doc).
fn region_for(under: Under) -> CrashRegion {
    match under {
        Under::Ssd(Variant::Dftl) | Under::Plain => CrashRegion::new_msync(REGION),
        Under::Ssd(_) => CrashRegion::new(REGION),
    }
}

impl Media {
    /// Blank media: `Stack::open` formats the SSD and makes a file system;
    /// a plain device gets its file system from `ptsd_stack::mkfs` now.
    pub fn new(under: Under) -> Self {
        match under {
            Under::Ssd(variant) => {
                let ftl = ftl_config(variant);
                let blocks = Ssd::image_blocks(&ftl, 4096);
                Self {
                    region: region_for(under),
                    image: Arc::new(CrashDevice::new(4096, blocks).expect("geometry")),
                    ftl: Some(ftl),
                }
            }
            Under::Plain => {
                let image = Arc::new(CrashDevice::new(4096, SSD_BYTES / 4096).expect("geometry"));
                let dev: Arc<dyn ptsd_blockdev::BlockDevice> = image.clone();
                ptsd_stack::mkfs(&DeviceSpec::Device(dev.clone()), None, Duration::ZERO)
                    .expect("mkfs of a blank device");
                dev.flush().expect("flush");
                Self {
                    region: region_for(under),
                    image,
                    ftl: None,
                }
            }
        }
    }

    /// One post-crash state of both media, drawn with `seed`.
    pub fn crash_copy(&self, seed: u64) -> Self {
        Self {
            region: self.region.crash_copy(seed),
            image: Arc::new(self.image.crash_copy(seed)),
            ftl: self.ftl.clone(),
        }
    }

    /// Cut both media at once, whichever is cut first (the region's hook
    /// holds the image weakly: the two hooks would otherwise keep each
    /// other alive).
    pub fn link_power(&self) {
        let d = Arc::downgrade(&self.image);
        self.region.on_crash(move || {
            if let Some(d) = d.upgrade() {
                d.power_cut();
            }
        });
        let r = self.region.clone();
        self.image.on_power_cut(move || r.crash_now());
    }

    /// What `ptsd mount` would be given for these media, with the
    /// deterministic journal settings and `hook` around the store.
    pub fn spec(&self, hook: Option<StoreHook>) -> StackSpec {
        let device = match &self.ftl {
            Some(ftl) => DeviceSpec::Ssd {
                config: Box::new(ftl.clone()),
                image: self.image.clone(),
            },
            None => DeviceSpec::Device(self.image.clone()),
        };
        let mut s = StackSpec::new(device, JournalSpec::Region(Arc::new(self.region.clone())));
        s.journal_config = journal_config();
        s.missing_journal = MissingJournal::Refuse;
        s.lock_wait = Duration::ZERO;
        s.store_hook = hook;
        s
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
struct Interposed {
    inner: Arc<dyn Store>,
    left: Arc<AtomicU64>,
}

struct ITxn<'a> {
    inner: Box<dyn StoreTxn + 'a>,
    store: &'a Interposed,
}

impl StoreTxn for ITxn<'_> {
    fn write(&mut self, blk: u64, data: &[u8]) -> Result<(), FsStoreError> {
        self.inner.write(blk, data)
    }
    fn write_ordered(&mut self, blk: u64, data: Vec<u8>) -> Result<(), FsStoreError> {
        self.inner.write_ordered(blk, data)
    }
    fn finish(self: Box<Self>) -> Result<(), FsStoreError> {
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
    fn read(&self, blk: u64, buf: &mut [u8]) -> Result<(), FsStoreError> {
        self.inner.read(blk, buf)
    }
    fn read_run(&self, blk: u64, buf: &mut [u8]) -> Result<(), FsStoreError> {
        self.inner.read_run(blk, buf)
    }
    fn begin(&self) -> Box<dyn StoreTxn + '_> {
        Box::new(ITxn {
            inner: self.inner.begin(),
            store: self,
        })
    }
    fn sync(&self) -> Result<(), FsStoreError> {
        self.inner.sync()
    }
    fn checkpoint(&self) -> Result<(), FsStoreError> {
        self.inner.checkpoint()
    }
    fn write_super(&self, block: &[u8]) -> Result<(), FsStoreError> {
        self.inner.write_super(block)
    }
    fn discard(&self, blk: u64, count: u64) -> Result<(), FsStoreError> {
        self.inner.discard(blk, count)
    }

    fn holds(&self, blk: u64) -> bool {
        self.inner.holds(blk)
    }

    fn close(&self) -> Result<(), FsStoreError> {
        self.inner.close()
    }
    fn describe(&self) -> String {
        self.inner.describe()
    }
    fn verify(&self, blk: u64) -> Result<(), FsStoreError> {
        self.inner.verify(blk)
    }
    fn checks_blocks(&self) -> bool {
        self.inner.checks_blocks()
    }
}

/// A mounted stack.
pub struct Mounted {
    stack: Option<Stack>,
    left: Arc<AtomicU64>,
    region: CrashRegion,
}

impl Mounted {
    /// A concurrent fsync right after the `n`-th transaction from now
    /// finishes (0: none).
    pub fn commit_after(&self, n: u64) {
        self.left.store(n, Ordering::SeqCst);
    }

    /// Whether the power was cut under this stack.
    pub fn crashed(&self) -> bool {
        self.region.is_crashed()
    }

    fn stack(&self) -> &Stack {
        self.stack.as_ref().expect("stack used after close")
    }

    pub fn fs(&self) -> &FileSystem {
        self.stack().fs()
    }

    /// A checkpoint, as the background thread does it (the commit window
    /// flushed, then the journal checkpointed).
    pub fn checkpoint(&self) -> Result<(), String> {
        self.stack()
            .fs()
            .checkpoint()
            .map_err(|e| format!("checkpoint: {}", ptsd_blockdev::ErrorChain(&e)))
    }

    /// Clean unmount (`Stack::close`: journal checkpointed, file system
    /// marked clean, SSD map checkpointed).
    pub fn close(&mut self) -> Result<(), String> {
        match self.stack.take() {
            Some(s) => s
                .close()
                .map_err(|e| format!("close: {}", ptsd_blockdev::ErrorChain(&e))),
            None => Ok(()),
        }
    }
}

/// Mount the stack on `media` with `Stack::open`: blank media get a
/// formatted SSD, a file system and a journal; anything else is recovered
/// as `ptsd mount` recovers it (SSD map from OOB, journal replay, mount
/// preflight, orphans freed).
pub fn mount(media: &Media) -> Result<Mounted, String> {
    let left = Arc::new(AtomicU64::new(0));
    let l = left.clone();
    let hook = StoreHook(Arc::new(move |inner: Arc<dyn Store>| {
        Arc::new(Interposed {
            inner,
            left: l.clone(),
        }) as Arc<dyn Store>
    }));
    let stack = Stack::open(media.spec(Some(hook)))
        .map_err(|e| format!("Stack::open: {}", ptsd_blockdev::ErrorChain(&e)))?;
    Ok(Mounted {
        stack: Some(stack),
        left,
        region: media.region.clone(),
    })
}

/// `ptsd fsck` of the unmounted stack (after a clean close).
pub fn fsck(media: &Media) -> Result<ptsd_fs::fsck::Report, String> {
    ptsd_stack::fsck(&media.spec(None), false)
        .map(|o| o.report)
        .map_err(|e| e.to_string())
}
