//! Inodes and directories to and from their stored form.

use std::sync::atomic::Ordering;

use super::{symlink, Caller, FileSystem, Inode, Writes, BS, S_IFLNK, S_IFMT};
use crate::alloc::AllocCtx;
use crate::chain::{self, Chain};
use crate::dir::DirIndex;
use crate::error::{Errno, FsFormatError, FsStoreError};
use crate::extent::ExtentMap;
use crate::format::{decode_dir_block, DiskInode, Ts, BLOCK_SIZE};

/// Why an inode could not be loaded.
pub(super) enum LoadErr {
    /// Not an inode (freed, or a stale number).
    Stale,
    Format(FsFormatError),
    Store(FsStoreError),
}

impl LoadErr {
    pub(super) fn errno(self) -> Errno {
        match self {
            LoadErr::Stale => Errno::ENOENT,
            LoadErr::Format(f) => Errno::from(f),
            LoadErr::Store(s) => Errno::from(s),
        }
    }
}

impl From<FsFormatError> for LoadErr {
    fn from(e: FsFormatError) -> Self {
        LoadErr::Format(e)
    }
}

impl From<FsStoreError> for LoadErr {
    fn from(e: FsStoreError) -> Self {
        LoadErr::Store(e)
    }
}

/// Extra blocks an inode's extent list may need after gaining `added` runs.
pub(super) fn ext_slack(g: &Inode, added: usize) -> u64 {
    g.chain.slack(g.ext.len(), added)
}

/// Every device block an inode owns (for freeing it).
pub(super) fn owned_runs(g: &Inode) -> Vec<(u64, u64)> {
    let mut v: Vec<(u64, u64)> = g
        .ext
        .to_extents()
        .iter()
        .map(|e| (e.pblk, u64::from(e.len)))
        .collect();
    v.extend(g.chain.runs());
    if g.d.xattr_blk != 0 {
        v.push((g.d.xattr_blk, 1));
    }
    v.extend(g.xattr_more.iter().map(|&b| (b, 1)));
    v.push((g.d.ino, 1));
    v
}

/// Serialize an inode (and its extent chain) into `w`, allocating chain
/// blocks from `ctx` if the extent list grew and freeing the ones it no
/// longer needs if `ctx` holds their groups.
pub(super) fn put_inode(
    g: &mut Inode,
    ctx: Option<&mut AllocCtx<'_>>,
    w: &mut Writes,
) -> Result<(), Errno> {
    // The stored form has the atime now (see `atime.rs`).
    g.lazy_atime_since = None;
    g.chain.save(&mut g.d, &mut g.ext, ctx, w)
}

impl FileSystem {
    pub(super) fn read_block(&self, blk: u64) -> Result<Vec<u8>, Errno> {
        let mut b = vec![0u8; BLOCK_SIZE];
        self.store.read(blk, &mut b)?;
        Ok(b)
    }

    pub(super) fn load(&self, ino: u64) -> Result<Inode, Errno> {
        self.load_raw(ino).map_err(LoadErr::errno)
    }

    pub(super) fn load_raw(&self, ino: u64) -> Result<Inode, LoadErr> {
        let (data_start, num_blocks) = (self.layout.data_start, self.layout.num_blocks);
        if ino < data_start || ino >= num_blocks || !self.alloc.is_used(ino) {
            return Err(LoadErr::Stale);
        }
        let mut b = vec![0u8; BLOCK_SIZE];
        self.store.read(ino, &mut b)?;
        let d = match DiskInode::decode(&b, ino) {
            Ok(d) => d,
            // A stale number whose block now holds something else.
            Err(FsFormatError::BadMagic { .. }) => return Err(LoadErr::Stale),
            Err(e) => return Err(e.into()),
        };
        let (ext, chain) = chain::load(&d, data_start..num_blocks, |blk| {
            let mut b = vec![0u8; BLOCK_SIZE];
            self.store.read(blk, &mut b).map(|()| b)
        })
        .map_err(|e| match e {
            chain::LoadError::Read(e) => LoadErr::Store(e),
            chain::LoadError::Corrupt(e) => LoadErr::Format(e),
        })?;
        let mut g = Inode {
            ext,
            d,
            chain,
            dir: None,
            xattrs: None,
            xattr_more: Vec::new(),
            open_count: 0,
            freed: false,
            lookups: 0,
            lazy_atime_since: None,
        };
        if g.d.xattr_blocks != 0 {
            // A chain: its blocks are the inode's to free, so they are
            // known from the start (the single-block format waits for
            // the first xattr call).
            self.load_xattrs(&mut g)?;
        }
        if g.d.mode & S_IFMT == S_IFLNK && symlink::is_long(g.d.symlink.len()) {
            self.load_long_target(&mut g)?;
        }
        Ok(g)
    }

    /// Read a directory's blocks into its index.
    pub(super) fn load_dir(&self, g: &Inode) -> Result<DirIndex, LoadErr> {
        let nblocks = g.d.size / BS;
        // The size is from the media: a corrupt one must be an error, not
        // an allocation of its size (a directory has no holes, so it cannot
        // span more blocks than it maps).
        if nblocks > g.ext.mapped_blocks() {
            return Err(FsFormatError::Corrupt {
                what: "directory",
                block: g.d.ino,
                why: format!(
                    "size of {nblocks} blocks but only {} mapped",
                    g.ext.mapped_blocks()
                ),
            }
            .into());
        }
        let mut blocks = Vec::with_capacity(nblocks.min(self.store.num_blocks()) as usize);
        let mut b = vec![0u8; BLOCK_SIZE];
        for lblk in 0..nblocks {
            let (pblk, _, _) = g.ext.lookup(lblk).ok_or_else(|| FsFormatError::Corrupt {
                what: "directory",
                block: g.d.ino,
                why: format!("hole at block {lblk}"),
            })?;
            self.store.read(pblk, &mut b)?;
            blocks.push(decode_dir_block(&b, pblk, g.d.ino)?);
        }
        Ok(
            DirIndex::from_blocks(blocks).map_err(|why| FsFormatError::Corrupt {
                what: "directory",
                block: g.d.ino,
                why,
            })?,
        )
    }

    pub(super) fn ensure_dir(&self, g: &mut Inode) -> Result<(), Errno> {
        if !g.is_dir() {
            return Err(Errno::ENOTDIR);
        }
        if g.dir.is_some() {
            return Ok(());
        }
        let idx = self.load_dir(g).map_err(LoadErr::errno)?;
        g.dir = Some(idx);
        Ok(())
    }

    pub(super) fn new_inode(
        &self,
        ino: u64,
        mode: u32,
        who: Caller,
        parent: u64,
        now: Ts,
    ) -> Inode {
        let d = DiskInode {
            ino,
            generation: self.generation.fetch_add(1, Ordering::Relaxed),
            mode,
            uid: who.uid,
            gid: who.gid,
            nlink: 1,
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
        Inode {
            d,
            ext: ExtentMap::default(),
            chain: Chain::default(),
            dir: None,
            xattrs: None,
            xattr_more: Vec::new(),
            open_count: 0,
            freed: false,
            lookups: 0,
            lazy_atime_since: None,
        }
    }
}
