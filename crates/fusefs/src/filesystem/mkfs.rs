//! mkfs: a fresh, empty file system.

use super::S_IFDIR;
use crate::error::FsError;
use crate::format::{
    seal_bitmap, DiskInode, Superblock, Ts, BITS_PER_GROUP, BLOCK_SIZE, FEATURES_COMPAT,
    STATE_CLEAN, VERSION,
};
use crate::store::Store;

/// Parameters for [`mkfs`].
///
/// ```
/// use std::sync::Arc;
/// use ptsd_blockdev::MemDevice;
/// use ptsd_fs::{mkfs, DirectStore, FileSystem, MkfsOptions};
///
/// let store = Arc::new(DirectStore::new(Arc::new(MemDevice::new(4096, 1024).unwrap())).unwrap());
/// // The root directory for user 1000, group 1000.
/// mkfs(&*store, &MkfsOptions { root_owner: (1000, 1000), ..Default::default() }).unwrap();
/// let fs = FileSystem::mount(store).unwrap();
/// let root = fs.getattr(fs.root()).unwrap();
/// assert_eq!((root.uid, root.gid), (1000, 1000));
/// fs.close().unwrap();
/// ```
#[derive(Clone, Debug, Default)]
pub struct MkfsOptions {
    /// Use only this many blocks of the device (default: all).
    pub blocks: Option<u64>,
    /// Owner of the root directory, `(uid, gid)` (default: root, `(0, 0)`).
    /// A file system made for an unprivileged user gives them its root, as
    /// `mke2fs -E root_owner` does; otherwise they could not create
    /// anything in it through a `default_permissions` mount.
    pub root_owner: (u32, u32),
}

/// Write a fresh, empty file system on `store`.
pub fn mkfs(store: &dyn Store, opts: &MkfsOptions) -> Result<Superblock, FsError> {
    let n = opts.blocks.unwrap_or(store.num_blocks());
    if n > store.num_blocks() {
        return Err(FsError::Invalid(format!(
            "{n} blocks requested but the device has {}",
            store.num_blocks()
        )));
    }
    if n < 64 {
        return Err(FsError::Invalid(format!(
            "device too small: {n} blocks of {BLOCK_SIZE} bytes (need at least 64)"
        )));
    }
    let bitmap_blocks = n.div_ceil(BITS_PER_GROUP);
    let data_start = 1 + bitmap_blocks;
    let root = data_start;
    let orphan = data_start + 1;
    let mut uuid = [0u8; 16];
    rand::Rng::fill(&mut rand::thread_rng(), &mut uuid[..]);
    let now = Ts::now();
    let sb = Superblock {
        version: VERSION,
        block_size: BLOCK_SIZE as u32,
        num_blocks: n,
        uuid,
        features_compat: FEATURES_COMPAT,
        features_incompat: 0,
        bitmap_start: 1,
        bitmap_blocks,
        data_start,
        root_ino: root,
        orphan_ino: orphan,
        state: STATE_CLEAN,
        mount_count: 0,
        mkfs_time: now.sec as u64,
        gen_seed: u64::from_le_bytes(uuid[..8].try_into().expect("8 bytes")) & 0xffff_ffff,
    };
    let used: Vec<u64> = (0..data_start + 2).collect();
    let mut tx = store.begin();
    for (i, mut bm) in crate::alloc::initial_bitmaps(n, &used)
        .into_iter()
        .enumerate()
    {
        seal_bitmap(&mut bm);
        tx.write(1 + i as u64, &bm)?;
    }
    // The orphan directory is internal (never visible) and stays root's.
    for (ino, parent, mode, (uid, gid)) in [
        (root, root, S_IFDIR | 0o755, opts.root_owner),
        (orphan, orphan, S_IFDIR | 0o700, (0, 0)),
    ] {
        let d = DiskInode {
            ino,
            generation: 0,
            mode,
            uid,
            gid,
            nlink: 2,
            size: 0,
            atime: now,
            mtime: now,
            ctime: now,
            crtime: now,
            rdev: 0,
            flags: 0,
            xattr_blk: 0,
            xattr_blocks: 0,
            parent,
            nextents: 0,
            overflow: 0,
            inline_extents: Vec::new(),
            symlink: Vec::new(),
        };
        tx.write(ino, &d.encode())?;
    }
    tx.finish()?;
    store.checkpoint()?;
    store.write_super(&sb.encode())?;
    Ok(sb)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use ptsd_blockdev::MemDevice;

    use super::*;
    use crate::{Caller, DirectStore, FileSystem};

    fn made(opts: &MkfsOptions) -> FileSystem {
        let dev = Arc::new(MemDevice::new(4096, 1024).unwrap());
        let store = Arc::new(DirectStore::new(dev).unwrap());
        mkfs(&*store, opts).unwrap();
        FileSystem::mount(store).unwrap()
    }

    #[test]
    fn root_belongs_to_root_unless_told() {
        let fs = made(&MkfsOptions::default());
        let a = fs.getattr(fs.root()).unwrap();
        assert_eq!((a.uid, a.gid, a.mode & 0o7777), (0, 0, 0o755));
        fs.close().unwrap();
    }

    #[test]
    fn root_owner_survives_a_remount_and_fsck() {
        let dev = Arc::new(MemDevice::new(4096, 1024).unwrap());
        let store = Arc::new(DirectStore::new(dev.clone()).unwrap());
        let opts = MkfsOptions {
            root_owner: (1234, 567),
            ..Default::default()
        };
        mkfs(&*store, &opts).unwrap();
        let fs = FileSystem::mount(store).unwrap();
        let user = Caller {
            uid: 1234,
            gid: 567,
        };
        let f = fs.create(fs.root(), b"mine", 0o644, user).unwrap();
        fs.release(f.ino).unwrap();
        fs.close().unwrap();

        let store = Arc::new(DirectStore::new(dev).unwrap());
        let report = crate::fsck::check(store.clone(), false).unwrap();
        assert!(report.problems.is_empty(), "{}", report.summary());
        let fs = FileSystem::mount(store).unwrap();
        let a = fs.getattr(fs.root()).unwrap();
        assert_eq!((a.uid, a.gid, a.mode & 0o7777), (1234, 567, 0o755));
        let f = fs.lookup(fs.root(), b"mine").unwrap();
        assert_eq!((f.uid, f.gid), (1234, 567));
        fs.close().unwrap();
    }
}
