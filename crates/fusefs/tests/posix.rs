//! In-process tests of POSIX details a user meets (issue 11 §5): xattr
//! namespaces, SEEK_DATA/SEEK_HOLE, long symlink targets, O_TMPFILE.

use std::sync::Arc;

use ptsd_blockdev::{BlockDevice, MemDevice};
use ptsd_fs::{fsck, mkfs, Caller, DirectStore, Errno, FileSystem, MkfsOptions, Store};

const ME: Caller = Caller { uid: 0, gid: 0 };

fn fresh(blocks: u64) -> (Arc<dyn BlockDevice>, FileSystem) {
    let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(4096, blocks).unwrap());
    let store = Arc::new(DirectStore::new(dev.clone()).unwrap());
    mkfs(&*store, &MkfsOptions::default()).unwrap();
    (dev, FileSystem::mount(store).unwrap())
}

fn remount(dev: &Arc<dyn BlockDevice>) -> FileSystem {
    FileSystem::mount(Arc::new(DirectStore::new(dev.clone()).unwrap())).unwrap()
}

fn fsck_clean(dev: &Arc<dyn BlockDevice>) {
    let store: Arc<dyn Store> = Arc::new(DirectStore::new(dev.clone()).unwrap());
    let r = fsck::check(store, false).unwrap();
    assert!(r.problems.is_empty(), "fsck: {:#?}", r.problems);
}

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
    for name in [
        &b"user.a"[..],
        b"trusted.b",
        b"security.c",
        b"system.posix_acl_access",
    ] {
        fs.setxattr(f.ino, name, b"v", 0).unwrap();
        assert_eq!(fs.getxattr(f.ino, name).unwrap(), b"v");
    }
    assert_eq!(
        fs.listxattr(f.ino).unwrap(),
        b"security.c\0system.posix_acl_access\0trusted.b\0user.a\0"
    );
    fs.release(f.ino).unwrap();
}
