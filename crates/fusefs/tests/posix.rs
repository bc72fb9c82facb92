//! In-process tests of POSIX details a user meets (issue 11 §5): xattr
//! namespaces, SEEK_DATA/SEEK_HOLE, long symlink targets, O_TMPFILE.

use std::sync::Arc;

use ptsd_blockdev::{BlockDevice, MemDevice};
use ptsd_fs::{mkfs, Caller, DirectStore, Errno, FileSystem, MkfsOptions};

mod common;
use common::{fresh, fsck_clean, remount};

const ME: Caller = Caller { uid: 0, gid: 0 };

#[test]
fn unknown_xattr_namespaces_are_eopnotsupp_as_on_ext4() {
    let (_dev, fs) = fresh(256);
    let f = fs.create(fs.root(), b"f", 0o644, ME).unwrap();
    assert_eq!(
        fs.setxattr(f.ino, b"bogus.ns", b"v", 0),
        Err(Errno::EOPNOTSUPP)
    );
    assert_eq!(fs.getxattr(f.ino, b"bogus.ns"), Err(Errno::EOPNOTSUPP));
    assert_eq!(fs.removexattr(f.ino, b"bogus.ns"), Err(Errno::EOPNOTSUPP));
    assert_eq!(fs.setxattr(f.ino, b"user.", b"v", 0), Err(Errno::EINVAL));
    // An ACL must be one (perms.rs tests them); one with a mask entry is
    // more than the mode can say, so it is stored.
    let mut acl = ptsd_fs::acl::Acl::from_mode(0o640);
    acl.entries.insert(
        2,
        ptsd_fs::acl::Entry {
            tag: ptsd_fs::acl::Tag::Mask,
            perm: 4,
            id: 0,
        },
    );
    let acl = acl.encode();
    assert_eq!(
        fs.setxattr(f.ino, b"system.posix_acl_access", b"v", 0),
        Err(Errno::EINVAL)
    );
    for (name, value) in [
        (&b"user.a"[..], &b"v"[..]),
        (b"trusted.b", b"v"),
        (b"security.c", b"v"),
        (b"system.posix_acl_access", &acl[..]),
    ] {
        fs.setxattr(f.ino, name, value, 0).unwrap();
        assert_eq!(fs.getxattr(f.ino, name).unwrap(), value);
    }
    assert_eq!(
        fs.listxattr(f.ino).unwrap(),
        b"security.c\0system.posix_acl_access\0trusted.b\0user.a\0"
    );
    fs.release(f.ino).unwrap();
}

#[test]
fn seek_data_and_seek_hole_find_real_holes() {
    use ptsd_fs::Seek::{Data, Hole};
    let (dev, fs) = fresh(4096);
    let f = fs.create(fs.root(), b"f", 0o644, ME).unwrap();
    let bs = 4096u64;
    let enxio = Err(Errno(libc::ENXIO));
    // Empty file: nothing to find.
    assert_eq!(fs.seek(f.ino, 0, Data), enxio);
    assert_eq!(fs.seek(f.ino, 0, Hole), enxio);
    // data [1 MiB, 1 MiB + 10 blocks), preallocated [2 MiB, 3 MiB), data at
    // 4 MiB (one byte), size 8 MiB: holes everywhere else.
    fs.write(f.ino, 1 << 20, &vec![7u8; 10 * bs as usize])
        .unwrap();
    fs.fallocate(f.ino, 2 << 20, 1 << 20, 0).unwrap();
    fs.write(f.ino, 4 << 20, b"x").unwrap();
    fs.setattr(
        f.ino,
        ptsd_fs::SetAttr {
            size: Some(8 << 20),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(fs.seek(f.ino, 0, Data), Ok(1 << 20));
    assert_eq!(fs.seek(f.ino, 0, Hole), Ok(0));
    assert_eq!(fs.seek(f.ino, (1 << 20) + 5, Data), Ok((1 << 20) + 5));
    assert_eq!(fs.seek(f.ino, (1 << 20) + 5, Hole), Ok((1 << 20) + 10 * bs));
    // Preallocated blocks read as zeroes: a hole, skipped by SEEK_DATA.
    assert_eq!(fs.seek(f.ino, (1 << 20) + 10 * bs, Data), Ok(4 << 20));
    assert_eq!(fs.seek(f.ino, 2 << 20, Hole), Ok(2 << 20));
    assert_eq!(fs.seek(f.ino, 4 << 20, Hole), Ok((4 << 20) + bs));
    assert_eq!(fs.seek(f.ino, (4 << 20) + 1, Data), Ok((4 << 20) + 1));
    assert_eq!(fs.seek(f.ino, (4 << 20) + bs, Data), enxio);
    assert_eq!(fs.seek(f.ino, (8 << 20) - 1, Hole), Ok((8 << 20) - 1));
    assert_eq!(fs.seek(f.ino, 8 << 20, Hole), enxio);
    // Writing into the preallocated range makes it data.
    fs.write(f.ino, (2 << 20) + 3 * bs, &[1u8; 4096]).unwrap();
    assert_eq!(fs.seek(f.ino, 2 << 20, Data), Ok((2 << 20) + 3 * bs));
    // A file whose data ends at EOF: the hole is EOF.
    let g = fs.create(fs.root(), b"g", 0o644, ME).unwrap();
    fs.write(g.ino, 0, &[1u8; 5000]).unwrap();
    assert_eq!(fs.seek(g.ino, 0, Hole), Ok(5000));
    fs.release(f.ino).unwrap();
    fs.release(g.ino).unwrap();
    fs.close().unwrap();
    drop(fs);
    fsck_clean(&dev);
    let fs = remount(&dev);
    let a = fs.lookup(fs.root(), b"f").unwrap();
    assert_eq!(fs.seek(a.ino, 0, Data), Ok(1 << 20));
}

#[test]
fn symlink_targets_up_to_4095_bytes() {
    let (dev, fs) = fresh(512);
    let root = fs.root();
    let target = |n: usize| -> Vec<u8> { (0..n).map(|i| b'a' + (i % 26) as u8).collect() };
    for n in [1, 3952, 3953, 4095] {
        let name = format!("l{n}");
        let a = fs.symlink(root, name.as_bytes(), &target(n), ME).unwrap();
        assert_eq!(a.size, n as u64);
        assert_eq!(fs.readlink(a.ino).unwrap(), target(n));
    }
    assert_eq!(
        fs.symlink(root, b"l4096", &target(4096), ME).map(|_| ()),
        Err(Errno::ENAMETOOLONG)
    );
    let free = fs.statfs().bfree;
    fs.unlink(root, b"l3953").unwrap();
    // The inode and the target's block.
    assert_eq!(fs.statfs().bfree, free + 2);
    fs.close().unwrap();
    drop(fs);
    fsck_clean(&dev);
    let fs = remount(&dev);
    for n in [1, 3952, 4095] {
        let a = fs.lookup(fs.root(), format!("l{n}").as_bytes()).unwrap();
        assert_eq!(
            fs.readlink(a.ino).unwrap(),
            target(n),
            "{n} bytes after a remount"
        );
    }
    assert_eq!(fs.superblock().features_incompat, 1);
}

/// O_TMPFILE as on ext4: unnamed until linked, freed at its last close if
/// never linked, freed at the next mount after a crash.
#[test]
fn tmpfile_linked_released_and_orphaned_by_a_crash() {
    let (dev, fs) = fresh(512);
    let root = fs.root();
    // Never linked: gone at its last close (the orphan directory keeps the
    // block its first entry needed, so count from the second file).
    let mut free = None;
    for _ in 0..2 {
        let t = fs.tmpfile(root, 0o600, ME).unwrap();
        assert_eq!(t.nlink, 0);
        fs.write(t.ino, 0, b"scratch").unwrap();
        assert!(fs.readdir(root, 0, 100).unwrap().len() == 2);
        fs.release(t.ino).unwrap();
        let now = fs.statfs().bfree;
        assert_eq!(*free.get_or_insert(now), now);
    }
    // linkat makes it visible, with what was written.
    let t = fs.tmpfile(root, 0o644, ME).unwrap();
    fs.write(t.ino, 0, b"final contents").unwrap();
    let a = fs.link(t.ino, root, b"named").unwrap();
    assert_eq!(a.nlink, 1);
    fs.release(t.ino).unwrap();
    // A third one is open when the daemon dies.
    let lost = fs.tmpfile(root, 0o600, ME).unwrap();
    fs.write(lost.ino, 0, &[1u8; 8192]).unwrap();
    fs.fsync().unwrap();
    std::mem::forget(fs);
    let fs = remount(&dev);
    assert_eq!(fs.orphans_freed, 1);
    let a = fs.lookup(fs.root(), b"named").unwrap();
    assert_eq!(fs.read(a.ino, 0, 100).unwrap(), b"final contents");
    fs.close().unwrap();
    drop(fs);
    fsck_clean(&dev);
}

/// Counts the device reads of a memory device.
struct Counting {
    inner: MemDevice,
    reads: std::sync::atomic::AtomicU64,
}

impl BlockDevice for Counting {
    fn block_size(&self) -> u32 {
        self.inner.block_size()
    }
    fn num_blocks(&self) -> u64 {
        self.inner.num_blocks()
    }
    fn read(&self, block: u64, buf: &mut [u8]) -> Result<(), ptsd_blockdev::BlockError> {
        self.reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.inner.read(block, buf)
    }
    fn write(&self, block: u64, buf: &[u8]) -> Result<(), ptsd_blockdev::BlockError> {
        self.inner.write(block, buf)
    }
    fn flush(&self) -> Result<(), ptsd_blockdev::BlockError> {
        self.inner.flush()
    }
    fn discard(&self, block: u64, count: u64) -> Result<(), ptsd_blockdev::BlockError> {
        self.inner.discard(block, count)
    }
}

/// Holes and preallocated blocks read as zeroes without device I/O.
#[test]
fn reading_holes_does_no_device_io() {
    let dev = Arc::new(Counting {
        inner: MemDevice::new(4096, 4096).unwrap(),
        reads: Default::default(),
    });
    let store = Arc::new(DirectStore::new(dev.clone()).unwrap());
    mkfs(&*store, &MkfsOptions::default()).unwrap();
    let fs = FileSystem::mount(store).unwrap();
    let f = fs.create(fs.root(), b"f", 0o644, ME).unwrap();
    fs.fallocate(f.ino, 0, 4 << 20, 0).unwrap();
    fs.setattr(
        f.ino,
        ptsd_fs::SetAttr {
            size: Some(1 << 30),
            ..Default::default()
        },
    )
    .unwrap();
    let before = dev.reads.load(std::sync::atomic::Ordering::Relaxed);
    for off in (0..64u64 << 20).step_by(128 << 10) {
        assert!(fs
            .read(f.ino, off, 128 << 10)
            .unwrap()
            .iter()
            .all(|&b| b == 0));
    }
    assert_eq!(dev.reads.load(std::sync::atomic::Ordering::Relaxed), before);
    fs.release(f.ino).unwrap();
}
