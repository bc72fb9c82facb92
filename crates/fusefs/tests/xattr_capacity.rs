//! Issue 45 §10: a file's xattrs are no longer limited to one 4 KiB block
//! (ENOSPC at the 142nd small one before): up to 16 blocks as a chain,
//! freed as the set shrinks or the file goes, understood by fsck, and
//! marked in the superblock so an older build refuses such an image.

use std::sync::Arc;

use ptsd_blockdev::{BlockDevice, MemDevice};
use ptsd_fs::format::{INCOMPAT_XATTR_CHAIN, XATTR_SPACE};
use ptsd_fs::{fsck, mkfs, Caller, DirectStore, Errno, FileSystem, MkfsOptions, Store};

mod common;
use common::remount;

const ME: Caller = Caller { uid: 0, gid: 0 };

fn fresh() -> (Arc<dyn BlockDevice>, FileSystem) {
    let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(4096, 4096).unwrap());
    let store = Arc::new(DirectStore::new(dev.clone()).unwrap());
    mkfs(&*store, &MkfsOptions::default()).unwrap();
    (dev.clone(), FileSystem::mount(store).unwrap())
}

fn fsck(dev: &Arc<dyn BlockDevice>, repair: bool) -> Vec<String> {
    let store: Arc<dyn Store> = Arc::new(DirectStore::new(dev.clone()).unwrap());
    let r = fsck::check(store, repair).unwrap();
    r.problems.iter().map(ToString::to_string).collect()
}

fn name(i: usize) -> Vec<u8> {
    format!("user.attribute.{i:05}").into_bytes()
}

fn value(i: usize) -> Vec<u8> {
    format!("value number {i}").into_bytes()
}

/// A thousand small xattrs (about 40 KiB: ten times ext4's room) all fit,
/// read back after a remount, and cost the blocks they need; removing them
/// gives the blocks back.
#[test]
fn a_thousand_small_xattrs_fit_and_survive_a_remount() {
    let (dev, fs) = fresh();
    let f = fs.create(fs.root(), b"f", 0o644, ME).unwrap();
    let free = fs.statfs().bfree;
    let n = 1000;
    for i in 0..n {
        fs.setxattr(f.ino, &name(i), &value(i), 0)
            .unwrap_or_else(|e| panic!("xattr {i}: {e:?}"));
    }
    let total: usize = (0..n).map(|i| 3 + name(i).len() + value(i).len()).sum();
    assert!(total > 9 * XATTR_SPACE);
    let used = free - fs.statfs().bfree;
    assert!((10..=16).contains(&used), "{used} xattr blocks");
    assert_eq!(fs.getattr(f.ino).unwrap().blocks, used * 8);
    assert!(fs.superblock().features_incompat & INCOMPAT_XATTR_CHAIN != 0);
    fs.close().unwrap();
    drop(fs);
    assert_eq!(fsck(&dev, false), Vec::<String>::new());
    let fs = remount(&dev);
    let f = fs.lookup(fs.root(), b"f").unwrap();
    for i in 0..n {
        assert_eq!(fs.getxattr(f.ino, &name(i)).unwrap(), value(i));
    }
    let list = fs.listxattr(f.ino).unwrap();
    assert_eq!(list.split(|&b| b == 0).filter(|s| !s.is_empty()).count(), n);
    // Back down to a few: the chain's spare blocks are freed.
    for i in 5..n {
        fs.removexattr(f.ino, &name(i)).unwrap();
    }
    assert_eq!(fs.statfs().bfree, free - 1);
    assert_eq!(fs.getxattr(f.ino, &name(4)).unwrap(), value(4));
    for i in 0..5 {
        fs.removexattr(f.ino, &name(i)).unwrap();
    }
    assert_eq!(fs.statfs().bfree, free);
    assert_eq!(fs.listxattr(f.ino).unwrap(), Vec::<u8>::new());
    fs.close().unwrap();
    drop(fs);
    assert_eq!(fsck(&dev, false), Vec::<String>::new());
}

/// Past the limit (16 blocks) a set is ENOSPC and changes nothing; a
/// value larger than a block is ENOSPC; a few small ones keep the
/// single-block format (no feature bit: older builds still mount it).
#[test]
fn limits_are_enospc_and_small_sets_keep_the_old_format() {
    let (dev, fs) = fresh();
    let f = fs.create(fs.root(), b"f", 0o644, ME).unwrap();
    for i in 0..10 {
        fs.setxattr(f.ino, &name(i), &value(i), 0).unwrap();
    }
    assert_eq!(fs.superblock().features_incompat & INCOMPAT_XATTR_CHAIN, 0);
    assert_eq!(
        fs.setxattr(f.ino, b"user.huge", &vec![1; 4090], 0),
        Err(Errno::ENOSPC)
    );
    let free = fs.statfs().bfree;
    let big = vec![7u8; 3000];
    let mut i = 100;
    let err = loop {
        match fs.setxattr(f.ino, &name(i), &big, 0) {
            Ok(()) => i += 1,
            Err(e) => break e,
        }
    };
    assert_eq!(err, Errno::ENOSPC);
    // 16 blocks, each with one 3 000-byte value (the small ones share
    // the first).
    assert_eq!(i - 100, 16);
    assert_eq!(free - fs.statfs().bfree, 15);
    assert_eq!(fs.getxattr(f.ino, &name(i)), Err(Errno::ENODATA));
    assert_eq!(fs.getxattr(f.ino, &name(3)).unwrap(), value(3));
    // A file with a chain goes, and so do its blocks.
    let before = fs.statfs().bfree;
    fs.unlink(fs.root(), b"f").unwrap();
    // Its last close frees it, chain included (the orphan directory kept
    // a block for its entry meanwhile; fsck below finds nothing leaked).
    fs.release(f.ino).unwrap();
    assert!(fs.statfs().bfree >= before + 16);
    fs.close().unwrap();
    drop(fs);
    assert_eq!(fsck(&dev, false), Vec::<String>::new());
}

/// A write drops `security.capability` from a chained set too, and a
/// damaged chain block is found by fsck and dropped by its repair.
#[test]
fn capability_drop_and_fsck_repair_of_a_chain() {
    let (dev, fs) = fresh();
    let f = fs.create(fs.root(), b"f", 0o644, ME).unwrap();
    for i in 0..400 {
        fs.setxattr(f.ino, &name(i), &value(i), 0).unwrap();
    }
    fs.setxattr(f.ino, b"security.capability", &[1; 20], 0)
        .unwrap();
    fs.write(f.ino, 0, b"data").unwrap();
    assert_eq!(
        fs.getxattr(f.ino, b"security.capability"),
        Err(Errno::ENODATA)
    );
    assert_eq!(fs.getxattr(f.ino, &name(399)).unwrap(), value(399));
    fs.close().unwrap();
    drop(fs);
    assert_eq!(fsck(&dev, false), Vec::<String>::new());
    // Flip a byte in the second chain block.
    let mut chain = Vec::new();
    let mut b = vec![0u8; 4096];
    for blk in 0..dev.num_blocks() {
        dev.read(blk, &mut b).unwrap();
        if &b[..4] == b"PTXC" {
            chain.push(blk);
        }
    }
    assert!(chain.len() >= 3, "{chain:?}");
    dev.read(chain[1], &mut b).unwrap();
    b[200] ^= 1;
    dev.write(chain[1], &b).unwrap();
    let found = fsck(&dev, false);
    assert!(
        found.iter().any(|p| p.contains("xattr chain block")),
        "{found:?}"
    );
    fsck(&dev, true);
    assert_eq!(fsck(&dev, false), Vec::<String>::new());
    let fs = remount(&dev);
    let f = fs.lookup(fs.root(), b"f").unwrap();
    assert_eq!(fs.listxattr(f.ino).unwrap(), Vec::<u8>::new());
    assert_eq!(fs.read(f.ino, 0, 10).unwrap(), b"data");
}
