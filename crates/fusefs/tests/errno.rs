//! The errno a user sees when the layers below fail: ENOSPC when the
//! emulated SSD runs out of flash, EIO for a media error or a corrupt
//! block, EROFS for every change after a fatal store or journal error.

use std::sync::Arc;

use ptsd_blockdev::{BlockDevice, CrashDevice, Fault};
use ptsd_fs::{
    mkfs, Caller, Damage, DirectStore, Errno, FileSystem, FsError, FsFormatError, JournalStore,
    MkfsOptions, Store,
};
use ptsd_ftl::{FtlConfig, FtlError, Ssd, SsdDevice, StoreKind, Variant};
use ptsd_nvjournal::{CrashRegion, Journal, JournalConfig};

const ME: Caller = Caller { uid: 0, gid: 0 };

fn mount_direct(dev: Arc<dyn BlockDevice>) -> FileSystem {
    let store: Arc<dyn Store> = Arc::new(DirectStore::new(dev).unwrap());
    FileSystem::mount(store).unwrap()
}

fn fresh_direct(dev: Arc<dyn BlockDevice>) -> FileSystem {
    mkfs(
        &DirectStore::new(dev.clone()).unwrap(),
        &MkfsOptions::default(),
    )
    .unwrap();
    mount_direct(dev)
}

/// A small emulated SSD (virtual time, data in memory).
fn ssd() -> Arc<SsdDevice> {
    let mut cfg = FtlConfig::paper(Variant::Page, 8 << 20);
    cfg.store = StoreKind::Memory;
    Arc::new(SsdDevice::virtual_time(Ssd::new(cfg).unwrap()))
}

#[test]
fn ftl_out_of_space_is_enospc_then_erofs() {
    let ssd = ssd();
    let dev: Arc<dyn BlockDevice> = ssd.clone();
    let fs = fresh_direct(dev);
    let root = fs.root();
    let f = fs.create(root, b"fill", 0o644, ME).unwrap();
    fs.write(f.ino, 0, &vec![1u8; 25 * 4096]).unwrap();
    fs.fsync().unwrap();
    // GC finds nothing to reclaim: the FTL stops with NoSpace (injected:
    // the configuration checks keep enough spare blocks for it not to
    // happen by itself).
    ssd.with_ssd(|s| s.inject_fault(FtlError::NoSpace));
    // Block-aligned, so the write needs no read of the stopped device.
    let err = fs
        .write(f.ino, 25 * 4096, &vec![2u8; 100_000])
        .and_then(|_| fs.fsync())
        .unwrap_err();
    assert_eq!(err, Errno::ENOSPC);
    // The file system stopped taking changes.
    assert_eq!(fs.mkdir(root, b"d", 0o755, ME).unwrap_err(), Errno::EROFS);
    assert_eq!(fs.write(f.ino, 0, b"x").unwrap_err(), Errno::EROFS);
    // A read that reaches the stopped device is an I/O error, not ENOSPC.
    let mut b = vec![0u8; 4096];
    let e = ptsd_fs::FsStoreError::from(dev_read(&ssd, &mut b));
    assert_eq!(e.errno(), Errno::EIO);
}

fn dev_read(ssd: &SsdDevice, b: &mut [u8]) -> ptsd_blockdev::BlockError {
    ssd.read(0, b).unwrap_err()
}

#[test]
fn media_read_error_is_eio() {
    let crash = Arc::new(CrashDevice::new(4096, 1024).unwrap());
    let dev: Arc<dyn BlockDevice> = crash.clone();
    let fs = fresh_direct(dev.clone());
    let f = fs.create(fs.root(), b"f", 0o644, ME).unwrap();
    fs.write(f.ino, 0, &vec![7u8; 20_000]).unwrap();
    fs.release(f.ino).unwrap();
    fs.close().unwrap();
    // A cold mount, then the disk dies: the lookup's directory and inode
    // reads fail.
    let fs = mount_direct(dev);
    crash.inject(Fault::AllAfter(0));
    assert_eq!(fs.lookup(fs.root(), b"f").unwrap_err(), Errno::EIO);
}

#[test]
fn corrupt_inode_block_is_eio() {
    let dev: Arc<dyn BlockDevice> = Arc::new(CrashDevice::new(4096, 1024).unwrap());
    let fs = fresh_direct(dev.clone());
    let f = fs.create(fs.root(), b"f", 0o644, ME).unwrap();
    fs.release(f.ino).unwrap();
    fs.close().unwrap();
    // Flip a byte inside the inode (its number is its block): the checksum
    // no longer matches.
    let mut b = vec![0u8; 4096];
    dev.read(f.ino, &mut b).unwrap();
    b[100] ^= 0xff;
    dev.write(f.ino, &b).unwrap();
    let fs = mount_direct(dev);
    assert_eq!(fs.getattr(f.ino).unwrap_err(), Errno::EIO);
}

#[test]
fn fatal_journal_error_makes_writes_erofs() {
    let crash = Arc::new(CrashDevice::new(4096, 2048).unwrap());
    let dev: Arc<dyn BlockDevice> = crash.clone();
    mkfs(
        &DirectStore::new(dev.clone()).unwrap(),
        &MkfsOptions::default(),
    )
    .unwrap();
    let cfg = JournalConfig {
        partitions: 2,
        checkpoint_interval: None,
        ..JournalConfig::default()
    };
    let journal = Journal::create(CrashRegion::new(2 << 20), dev.clone(), cfg).unwrap();
    let store: Arc<dyn Store> = Arc::new(JournalStore::new(
        journal.clone(),
        dev.clone(),
        "test".into(),
    ));
    let fs = FileSystem::mount(store).unwrap();
    let root = fs.root();
    let f = fs.create(root, b"f", 0o644, ME).unwrap();
    fs.write(f.ino, 0, b"before").unwrap();
    fs.fsync().unwrap();
    // The home device dies under the checkpoint: the journal stops.
    crash.inject(Fault::AllAfter(0));
    assert!(journal.checkpoint().is_err());
    // The first change learns of it (EIO: a media error, not a full
    // device), every later one is refused as on a read-only file system.
    assert_eq!(fs.mkdir(root, b"d", 0o755, ME).unwrap_err(), Errno::EIO);
    assert_eq!(fs.create(root, b"g", 0o644, ME).unwrap_err(), Errno::EROFS);
    assert_eq!(fs.write(f.ino, 0, b"after").unwrap_err(), Errno::EROFS);
    assert_eq!(fs.unlink(root, b"f").unwrap_err(), Errno::EROFS);
}

#[test]
fn damage_at_mount_is_typed() {
    let dev: Arc<dyn BlockDevice> = Arc::new(CrashDevice::new(4096, 1024).unwrap());
    let fs = fresh_direct(dev.clone());
    let root = fs.root();
    fs.close().unwrap();
    let mut b = vec![0u8; 4096];
    dev.read(root, &mut b).unwrap();
    b[100] ^= 0xff;
    dev.write(root, &b).unwrap();
    let store: Arc<dyn Store> = Arc::new(DirectStore::new(dev).unwrap());
    let e = FileSystem::mount(store)
        .err()
        .expect("a damaged root must not mount");
    assert!(
        matches!(
            &e,
            FsError::NeedsRepair(Damage::Unloadable {
                what: "root directory",
                source: FsFormatError::Corrupt { .. },
            })
        ),
        "{e:?}"
    );
    assert!(std::error::Error::source(&e).is_some(), "{e}");
}
