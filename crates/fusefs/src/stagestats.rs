//! Blocks and bytes the file system hands its store, by kind of block.
//!
//! Every transaction the core finishes is counted here: each block it
//! stages (journals) by kind, each run of file data it sends home in
//! ordered mode, and each superblock write. Dividing a difference of two
//! snapshots by the operations between them gives the cost per operation
//! (say, per created file), the figure issue 48 asks to bring down.
//!
//! A block's kind is read from its magic number (every metadata block
//! starts with one), and a block in the bitmap area is a bitmap, so the
//! encoders need not say what they wrote. File data carries no magic: a
//! block without a known magic counts as data (a data block that happens to
//! start with one is miscounted, which only skews a figure).

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use ptsd_blockdev::le::get_u32;

use crate::format::{DIR_MAGIC, INODE_MAGIC, OVERFLOW_MAGIC, XATTR_MAGIC};
use crate::xattr_chain::CHAIN_MAGIC;

/// What a staged block is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum BlockKind {
    /// An inode block.
    Inode,
    /// A directory entry block.
    Dir,
    /// An allocation bitmap block (a group's bits and its crc).
    Bitmap,
    /// An extent overflow block.
    Extents,
    /// An xattr block or a block of an xattr chain.
    Xattr,
    /// File data (or a long symlink target) journaled with the metadata.
    Data,
    /// File data written home in ordered mode (not journaled).
    OrderedData,
    /// The superblock (written straight to the device, never journaled).
    Superblock,
}

impl BlockKind {
    /// Every kind, in table order.
    pub const ALL: [BlockKind; 8] = [
        BlockKind::Inode,
        BlockKind::Dir,
        BlockKind::Bitmap,
        BlockKind::Extents,
        BlockKind::Xattr,
        BlockKind::Data,
        BlockKind::OrderedData,
        BlockKind::Superblock,
    ];

    /// Short name for tables.
    pub fn name(self) -> &'static str {
        match self {
            BlockKind::Inode => "inode",
            BlockKind::Dir => "dir entries",
            BlockKind::Bitmap => "bitmap+counts",
            BlockKind::Extents => "extent chain",
            BlockKind::Xattr => "xattr",
            BlockKind::Data => "data (journaled)",
            BlockKind::OrderedData => "data (ordered, home)",
            BlockKind::Superblock => "superblock",
        }
    }

    /// The kind of a journaled block `blk` holding `data`, where blocks
    /// below `data_start` (after the superblock) are bitmaps.
    pub(crate) fn of(blk: u64, data: &[u8], data_start: u64) -> BlockKind {
        if blk == 0 {
            return BlockKind::Superblock;
        }
        if blk < data_start {
            return BlockKind::Bitmap;
        }
        if data.len() < 4 {
            return BlockKind::Data;
        }
        match get_u32(data, 0) {
            INODE_MAGIC => BlockKind::Inode,
            DIR_MAGIC => BlockKind::Dir,
            OVERFLOW_MAGIC => BlockKind::Extents,
            XATTR_MAGIC | CHAIN_MAGIC => BlockKind::Xattr,
            _ => BlockKind::Data,
        }
    }
}

const KINDS: usize = BlockKind::ALL.len();

/// The kinds that go through the journal (ordered data and the superblock
/// go straight to the device).
fn journaled_kinds() -> impl Iterator<Item = BlockKind> {
    BlockKind::ALL
        .into_iter()
        .filter(|k| !matches!(k, BlockKind::OrderedData | BlockKind::Superblock))
}

/// The live counters of one mounted file system.
#[derive(Debug, Default)]
pub(crate) struct StageStats {
    blocks: [AtomicU64; KINDS],
    bytes: [AtomicU64; KINDS],
    txs: AtomicU64,
}

/// One transaction's counts, gathered locally and added to the shared
/// counters once (a few atomic adds per transaction, not one per block).
#[derive(Default)]
pub(crate) struct TxCount {
    blocks: [u64; KINDS],
    bytes: [u64; KINDS],
}

impl TxCount {
    /// Count `bytes` of one or more blocks of `kind` (`n` blocks).
    pub(crate) fn add(&mut self, kind: BlockKind, n: u64, bytes: usize) {
        self.blocks[kind as usize] += n;
        self.bytes[kind as usize] += bytes as u64;
    }
}

impl StageStats {
    /// Add a finished transaction's counts.
    pub(crate) fn add_tx(&self, c: &TxCount) {
        self.txs.fetch_add(1, Ordering::Relaxed);
        self.add(c);
    }

    /// Add counts outside any transaction (superblock writes).
    pub(crate) fn add(&self, c: &TxCount) {
        for k in 0..KINDS {
            if c.blocks[k] != 0 {
                self.blocks[k].fetch_add(c.blocks[k], Ordering::Relaxed);
                self.bytes[k].fetch_add(c.bytes[k], Ordering::Relaxed);
            }
        }
    }

    /// A snapshot.
    pub(crate) fn snapshot(&self) -> StageCounts {
        let load = |a: &[AtomicU64; KINDS]| std::array::from_fn(|k| a[k].load(Ordering::Relaxed));
        StageCounts {
            blocks: load(&self.blocks),
            bytes: load(&self.bytes),
            txs: self.txs.load(Ordering::Relaxed),
        }
    }
}

/// Blocks and bytes handed to the store, by [`BlockKind`], and the
/// transactions that carried them: a snapshot of
/// [`FileSystem::stage_counts`](crate::FileSystem::stage_counts), or the
/// difference of two.
///
/// ```
/// # use std::sync::Arc;
/// # use ptsd_blockdev::MemDevice;
/// # use ptsd_fs::{mkfs, Caller, DirectStore, FileSystem, MkfsOptions};
/// use ptsd_fs::stagestats::BlockKind;
/// # let dev = Arc::new(MemDevice::new(4096, 256).unwrap());
/// # let store = Arc::new(DirectStore::new(dev).unwrap());
/// # mkfs(&*store, &MkfsOptions::default()).unwrap();
/// # let fs = FileSystem::mount(store).unwrap();
/// let before = fs.stage_counts();
/// let f = fs.create(fs.root(), b"f", 0o644, Caller::default()).unwrap();
/// let cost = fs.stage_counts().since(&before);
/// assert_eq!(cost.txs, 1);
/// assert!(cost.blocks(BlockKind::Inode) >= 1); // the new inode, at least
/// println!("{}", cost.table(1));
/// # fs.release(f.ino).unwrap();
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StageCounts {
    blocks: [u64; KINDS],
    bytes: [u64; KINDS],
    /// Transactions finished.
    pub txs: u64,
}

impl StageCounts {
    /// Blocks of `kind`.
    pub fn blocks(&self, kind: BlockKind) -> u64 {
        self.blocks[kind as usize]
    }

    /// Bytes of `kind`.
    pub fn bytes(&self, kind: BlockKind) -> u64 {
        self.bytes[kind as usize]
    }

    /// Blocks staged in the journal (every kind but ordered data and the
    /// superblock, which go straight to the device).
    pub fn journaled_blocks(&self) -> u64 {
        journaled_kinds().map(|k| self.blocks(k)).sum()
    }

    /// Bytes staged in the journal (as [`journaled_blocks`](Self::journaled_blocks)).
    pub fn journaled_bytes(&self) -> u64 {
        journaled_kinds().map(|k| self.bytes(k)).sum()
    }

    /// The counts since `earlier` (a snapshot taken before).
    pub fn since(&self, earlier: &StageCounts) -> StageCounts {
        StageCounts {
            blocks: std::array::from_fn(|k| self.blocks[k].saturating_sub(earlier.blocks[k])),
            bytes: std::array::from_fn(|k| self.bytes[k].saturating_sub(earlier.bytes[k])),
            txs: self.txs.saturating_sub(earlier.txs),
        }
    }

    /// A table of blocks and bytes per operation, `ops` operations (say,
    /// files created) having made these counts.
    pub fn table(&self, ops: u64) -> String {
        let per = |v: u64| v as f64 / ops.max(1) as f64;
        let mut s = format!("{:<22} {:>12} {:>12}\n", "kind", "blocks/op", "bytes/op");
        for k in BlockKind::ALL {
            s += &format!(
                "{:<22} {:>12.2} {:>12.0}\n",
                k.name(),
                per(self.blocks(k)),
                per(self.bytes(k))
            );
        }
        s += &format!(
            "{:<22} {:>12.2} {:>12.0}\n{:<22} {:>12.2}\n",
            "journaled (total)",
            per(self.journaled_blocks()),
            per(self.journaled_bytes()),
            "transactions",
            per(self.txs)
        );
        s
    }
}

impl fmt::Display for StageCounts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.table(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_follow_magic_and_area() {
        let mut b = vec![0u8; 4096];
        assert_eq!(BlockKind::of(0, &b, 10), BlockKind::Superblock);
        assert_eq!(BlockKind::of(3, &b, 10), BlockKind::Bitmap);
        assert_eq!(BlockKind::of(30, &b, 10), BlockKind::Data);
        for (m, k) in [
            (b"PTIN", BlockKind::Inode),
            (b"PTDR", BlockKind::Dir),
            (b"PTEX", BlockKind::Extents),
            (b"PTXA", BlockKind::Xattr),
            (b"PTXC", BlockKind::Xattr),
        ] {
            b[..4].copy_from_slice(m);
            assert_eq!(BlockKind::of(30, &b, 10), k);
        }
    }

    #[test]
    fn since_and_table() {
        let s = StageStats::default();
        let a = s.snapshot();
        let mut c = TxCount::default();
        c.add(BlockKind::Inode, 2, 8192);
        c.add(BlockKind::OrderedData, 4, 16384);
        s.add_tx(&c);
        s.add_tx(&c);
        let d = s.snapshot().since(&a);
        assert_eq!(d.txs, 2);
        assert_eq!(d.blocks(BlockKind::Inode), 4);
        assert_eq!(d.journaled_blocks(), 4);
        assert_eq!(d.journaled_bytes(), 16384);
        let t = d.table(2);
        assert!(t.contains("inode"), "{t}");
        assert!(
            t.lines()
                .any(|l| l.starts_with("inode") && l.contains("2.00")),
            "{t}"
        );
    }
}
