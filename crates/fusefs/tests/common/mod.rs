//! What the in-process test binaries share: a fresh file system on a RAM
//! device, a remount of it, and an fsck that must find nothing. Each binary
//! uses part of it.
#![allow(dead_code)]

use std::sync::Arc;

use ptsd_blockdev::{BlockDevice, MemDevice};
use ptsd_fs::{fsck, mkfs, DirectStore, FileSystem, MkfsOptions, Store};

/// A freshly made file system of `blocks` 4 KiB blocks, and its device.
pub fn fresh(blocks: u64) -> (Arc<dyn BlockDevice>, FileSystem) {
    let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(4096, blocks).unwrap());
    let store = Arc::new(DirectStore::new(dev.clone()).unwrap());
    mkfs(&*store, &MkfsOptions::default()).unwrap();
    (dev, FileSystem::mount(store).unwrap())
}

/// Mounts `dev` again (the previous mount dropped or closed).
pub fn remount(dev: &Arc<dyn BlockDevice>) -> FileSystem {
    FileSystem::mount(Arc::new(DirectStore::new(dev.clone()).unwrap())).unwrap()
}

/// Asserts fsck finds no problem on `dev`.
pub fn fsck_clean(dev: &Arc<dyn BlockDevice>) {
    let store: Arc<dyn Store> = Arc::new(DirectStore::new(dev.clone()).unwrap());
    let r = fsck::check(store, false).unwrap();
    assert!(r.problems.is_empty(), "fsck: {:#?}", r.problems);
}
