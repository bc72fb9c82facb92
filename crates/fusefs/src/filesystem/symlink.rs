//! Symlink targets longer than fit in the inode block (up to 4 095 bytes,
//! Linux's limit) live in the file's block 0, as ext4 keeps targets that
//! do not fit its inode in a data block.

use super::{FileSystem, Inode, LoadErr, Writes};
use crate::alloc::AllocCtx;
use crate::error::{Errno, FsFormatError};
use crate::format::{BLOCK_SIZE, INCOMPAT_LONG_SYMLINKS, SYMLINK_INLINE};

/// Whether a target of `len` bytes needs a block of its own.
pub(super) fn is_long(len: usize) -> bool {
    len > SYMLINK_INLINE
}

impl FileSystem {
    /// Put the long target of the new symlink `node` in a block from `ctx`
    /// (one more than the inode itself was reserved), and mark the image as
    /// holding long symlinks.
    pub(super) fn store_long_target(
        &self,
        node: &mut Inode,
        ctx: &mut AllocCtx<'_>,
        w: &mut Writes,
    ) -> Result<(), Errno> {
        let (pblk, _) = *ctx.alloc(1, node.d.ino + 1).first().ok_or(Errno::ENOSPC)?;
        let mut b = vec![0u8; BLOCK_SIZE];
        b[..node.d.symlink.len()].copy_from_slice(&node.d.symlink);
        w.insert(pblk, b);
        node.ext.insert(0, pblk, 1, false);
        let mut sb = self.sb.lock();
        if sb.features_incompat & INCOMPAT_LONG_SYMLINKS == 0 {
            // Before the inode is journaled: an older build refuses the
            // image rather than calling the symlink corrupt.
            sb.features_incompat |= INCOMPAT_LONG_SYMLINKS;
            self.write_super(&sb)?;
        }
        Ok(())
    }

    /// Read the long target of a loaded symlink from its block 0.
    pub(super) fn load_long_target(&self, g: &mut Inode) -> Result<(), LoadErr> {
        let bad = |why: &str| FsFormatError::Corrupt {
            what: "symlink",
            block: g.d.ino,
            why: why.into(),
        };
        let (pblk, unwritten, _) = g.ext.lookup(0).ok_or_else(|| bad("target block missing"))?;
        if unwritten || g.ext.len() != 1 {
            return Err(bad("target block is not one written block").into());
        }
        let mut b = vec![0u8; BLOCK_SIZE];
        self.store.read(pblk, &mut b)?;
        let n = g.d.symlink.len();
        g.d.symlink.copy_from_slice(&b[..n]);
        Ok(())
    }
}
