//! `ptsd-stack`: the storage stack a user runs, assembled in one place.
//!
//! A [`Stack`] is a file system (`ptsd-fs`) on a journal (`ptsd-nvjournal`)
//! whose home device is a plain block device, an image file or `/dev` node,
//! or the emulated SSD (`ptsd-ftl`) over its persistent image.
//! [`Stack::open`] does everything `ptsd mount` does before it serves FUSE:
//! it opens the device (formatting a blank emulated SSD, recovering its map
//! from the OOB area after a power cut), takes exclusive locks on the image
//! and the journal (`flock`, plus `O_EXCL` on a block device), brings the journal back (replay
//! after an unclean stop, a new one after a clean unmount, a missing one
//! refused or discarded per [`MissingJournal`]), and mounts the file system
//! (preflight checks, orphans freed). [`Stack::close`] is the clean
//! shutdown. [`mkfs`] and [`fsck`] work under the same locks and the same
//! journal decision, and a block frontend (`ptsd ublk`) gets its emulated
//! SSD or device from [`claim_ssd`] / [`claim_device`] under the same
//! image lock; each lock records its [`Holder`], which a refused second
//! owner is told.
//!
//! Every layer takes its I/O through a trait (`BlockDevice`, the journal
//! region's `Persist`, the FTL's store on a `BlockDevice`), so the stack
//! runs unchanged over crash-simulating devices:
//!
//! ```
//! use std::sync::Arc;
//! use ptsd_blockdev::CrashDevice;
//! use ptsd_fs::Caller;
//! use ptsd_ftl::Ssd;
//! use ptsd_nvjournal::CrashRegion;
//! use ptsd_stack::{small_ssd_config, DeviceSpec, JournalSpec, Stack, StackSpec};
//!
//! let cfg = small_ssd_config(16 << 20);
//! let image = Arc::new(CrashDevice::new(4096, Ssd::image_blocks(&cfg, 4096)).unwrap());
//! let region = CrashRegion::new(4 << 20);
//! let spec = |image: Arc<CrashDevice>, region: CrashRegion| {
//!     StackSpec::new(
//!         DeviceSpec::Ssd { config: Box::new(cfg.clone()), image },
//!         JournalSpec::Region(Arc::new(region)),
//!     )
//! };
//! // A blank SSD image gets a new file system.
//! let stack = Stack::open(spec(image.clone(), region.clone())).unwrap();
//! let fs = stack.fs();
//! let f = fs.create(fs.root(), b"hello", 0o644, Caller::default()).unwrap();
//! fs.write(f.ino, 0, b"world").unwrap();
//! fs.fsync().unwrap(); // durable: a journal commit
//!
//! // Power cut: unflushed device writes and unpersisted journal lines go.
//! image.crash_keep_none();
//! region.crash_now();
//! drop(stack);
//! let image = Arc::new(image.reopen());
//! let region = CrashRegion::from_image(region.crash_image(1));
//!
//! // Reopening recovers the SSD's map and replays the journal.
//! let stack = Stack::open(spec(image, region)).unwrap();
//! assert!(stack.info().replayed_blocks.is_some());
//! let fs = stack.fs();
//! let ino = fs.lookup(fs.root(), b"hello").unwrap().ino;
//! assert_eq!(fs.read(ino, 0, 100).unwrap(), b"world");
//! stack.close().unwrap();
//! ```
#![warn(missing_docs)]

mod admin;
mod claim;
mod device;
mod error;
mod journal;
mod lock;
mod malloc;
mod stack;

pub use admin::{fsck, mkfs, mkfs_with, Formatted, FsckOutcome};
pub use claim::{claim_device, claim_ssd, Claim};
pub use device::{default_ssd_config, small_ssd_config, DeviceSpec, DEFAULT_SSD_BYTES};
pub use error::StackError;
pub use journal::{default_journal_path, JournalSpec, MissingJournal, LOST_NOTE};
pub use lock::Holder;
pub use malloc::{tune_malloc, MMAP_THRESHOLD, TRIM_THRESHOLD};
pub use stack::{
    invoking_user, OpenInfo, Stack, StackSpec, StoreHook, WrapStore, DIRECT_AFTER_SYNC,
};
