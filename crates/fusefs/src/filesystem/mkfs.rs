//! mkfs: a fresh, empty file system.

use super::S_IFDIR;
use crate::error::FsError;
use crate::format::{
    seal_bitmap, DiskInode, Superblock, Ts, BITS_PER_GROUP, BLOCK_SIZE, FEATURES_COMPAT,
    STATE_CLEAN, VERSION,
};
use crate::store::Store;

/// Parameters for [`mkfs`].
#[derive(Clone, Debug, Default)]
pub struct MkfsOptions {
    /// Use only this many blocks of the device (default: all).
    pub blocks: Option<u64>,
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
    for (ino, parent, mode) in [
        (root, root, S_IFDIR | 0o755),
        (orphan, orphan, S_IFDIR | 0o700),
    ] {
        let d = DiskInode {
            ino,
            generation: 0,
            mode,
            uid: 0,
            gid: 0,
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
