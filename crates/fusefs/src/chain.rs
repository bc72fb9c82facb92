//! An inode's extent list as stored: the first [`INLINE_EXTENTS`] extents in
//! the inode block, the rest packed into a chain of overflow blocks.
//!
//! The file system and fsck read it with the same [`load`], and the file
//! system writes it only with [`Chain::save`], so a list that was written can
//! always be read back as the same list (the property test below and
//! `tests/extents.rs` check this through random fallocate, write, punch and
//! truncate sequences).
//!
//! The stored form of `n` extents: in file order, each non-empty and ending
//! before the next begins; the chain holds [`blocks_for`]`(n)` blocks, every
//! one full but the last, possibly followed by empty blocks. Empty blocks at
//! the end appear when the list shrinks (written runs merge back together,
//! or a punch) in an operation that does not hold their allocation group;
//! they stay owned by the inode and a later change frees them.

use std::collections::HashSet;
use std::ops::Range;

use crate::alloc::AllocCtx;
use crate::error::{Errno, FsFormatError};
use crate::extent::ExtentMap;
use crate::format::{
    decode_overflow, encode_overflow, DiskInode, Extent, INLINE_EXTENTS, OVERFLOW_EXTENTS,
    SYMLINK_INLINE,
};
use crate::writes::Writes;

/// Overflow blocks needed for `extents` extents.
pub fn blocks_for(extents: usize) -> usize {
    extents
        .saturating_sub(INLINE_EXTENTS)
        .div_ceil(OVERFLOW_EXTENTS)
}

/// The overflow chain of one inode as last written.
#[derive(Clone, Debug, Default)]
pub struct Chain {
    blocks: Vec<u64>,
    /// crc32c of each block as last written, so a change rewrites only the
    /// blocks whose contents changed (a directory of a million entries has
    /// about 45).
    crc: Vec<Option<u32>>,
    /// First file block stored in each block (`None`: empty), to find where
    /// a change to the extent list starts to matter.
    first: Vec<Option<u64>>,
    /// `ExtentMap::version()` when the list was last serialized: while it
    /// matches, an inode write rewrites neither the inline extents nor the
    /// chain.
    saved: u64,
}

/// Why a stored extent list cannot be loaded.
#[derive(Debug)]
pub enum LoadError<E> {
    /// Reading a chain block failed.
    Read(E),
    /// The stored list is not one [`Chain::save`] writes.
    Corrupt(FsFormatError),
}

impl Chain {
    /// The chain's blocks, in order.
    pub fn blocks(&self) -> &[u64] {
        &self.blocks
    }

    /// The chain's blocks as `(start, 1)` runs, for an allocation context
    /// that may free them when the list shrinks.
    pub fn runs(&self) -> Vec<(u64, u64)> {
        self.blocks.iter().map(|&b| (b, 1)).collect()
    }

    /// Blocks the chain may need beyond the ones it has once the list of
    /// `extents` gains `added` more.
    pub fn slack(&self, extents: usize, added: usize) -> u64 {
        blocks_for(extents + added).saturating_sub(self.blocks.len()) as u64
    }

    /// Store `ext` in `d` (inline) and the chain, adding the inode block and
    /// every changed chain block to `w`. Allocates chain blocks from `ctx`
    /// when the list grew (ENOSPC without one), and frees the ones it no
    /// longer needs as far as `ctx` holds their groups.
    pub fn save(
        &mut self,
        d: &mut DiskInode,
        ext: &mut ExtentMap,
        mut ctx: Option<&mut AllocCtx<'_>>,
        w: &mut Writes,
    ) -> Result<(), Errno> {
        if ext.version() == self.saved {
            // The extents (inline and chain) are as last written.
            let (b, crc) = d.encode_sealed();
            w.insert_with_crc(d.ino, b, crc);
            return Ok(());
        }
        // A short symlink target fills the inline extent area.
        let symlink = (1..=SYMLINK_INLINE).contains(&d.symlink.len());
        let total = if symlink { 0 } else { ext.len() };
        let need = blocks_for(total);
        if need > self.blocks.len() {
            let ctx = ctx.as_deref_mut().ok_or(Errno::ENOSPC)?;
            let more = (need - self.blocks.len()) as u64;
            let runs = ctx.alloc(more, d.ino);
            if runs.iter().map(|r| r.1).sum::<u64>() < more {
                return Err(Errno::ENOSPC);
            }
            for (s, l) in runs {
                self.blocks.extend(s..s + l);
            }
        }
        while self.blocks.len() > need {
            let last = self.blocks[self.blocks.len() - 1];
            match ctx.as_deref_mut() {
                Some(c) if c.holds(last) => {
                    c.free(last, 1)?;
                    self.blocks.pop();
                }
                _ => break,
            }
        }
        self.crc.resize(self.blocks.len(), None);
        self.first.resize(self.blocks.len(), None);
        // The last block whose first extent starts at or below the lowest
        // change: it and every block before it start at the same extent as
        // before, and the inline extents are unchanged, so only the chain
        // from there on is encoded again (appending to a long list costs one
        // block, not the whole list). It is at most the new last block, which
        // therefore is always rewritten (its `next` may have changed).
        let keep = match ext.dirty_from() {
            Some(from) if !symlink => self
                .first
                .iter()
                .rposition(|f| f.is_some_and(|f| f <= from)),
            _ => None,
        };
        let (first_block, rest) = match keep {
            Some(j) => {
                let lblk = self.first[j].ok_or(Errno::EIO)?;
                (j, ext.extents_from(lblk))
            }
            None => {
                let all = if symlink {
                    Vec::new()
                } else {
                    ext.to_extents()
                };
                d.inline_extents = all.iter().take(INLINE_EXTENTS).copied().collect();
                (0, all.into_iter().skip(INLINE_EXTENTS).collect())
            }
        };
        d.nextents = total as u32;
        d.overflow = self.blocks.first().copied().unwrap_or(0);
        let (b, crc) = d.encode_sealed();
        w.insert_with_crc(d.ino, b, crc);
        for i in first_block..self.blocks.len() {
            let k = i - first_block;
            let lo = (k * OVERFLOW_EXTENTS).min(rest.len());
            let hi = ((k + 1) * OVERFLOW_EXTENTS).min(rest.len());
            let next = self.blocks.get(i + 1).copied().unwrap_or(0);
            let b = encode_overflow(d.ino, next, &rest[lo..hi]);
            let crc = crc32c::crc32c(&b);
            self.first[i] = rest[lo..hi].first().map(|e| e.lblk);
            if self.crc[i] != Some(crc) {
                self.crc[i] = Some(crc);
                w.insert_with_crc(self.blocks[i], b, crc);
            }
        }
        ext.mark_clean();
        self.saved = ext.version();
        Ok(())
    }
}

/// Read the extent list of inode `d` (its inline extents and its chain;
/// `read` reads one block) and check that it is one [`Chain::save`] writes.
/// Chain blocks must lie in `valid`.
pub fn load<E>(
    d: &DiskInode,
    valid: Range<u64>,
    mut read: impl FnMut(u64) -> Result<Vec<u8>, E>,
) -> Result<(ExtentMap, Chain), LoadError<E>> {
    let bad = |why: String| {
        LoadError::Corrupt(FsFormatError::Corrupt {
            what: "inode",
            block: d.ino,
            why,
        })
    };
    let mut extents = d.inline_extents.clone();
    let mut chain = Chain::default();
    let mut seen = HashSet::new();
    // Extents in each non-empty chain block.
    let mut counts = Vec::new();
    let mut next = d.overflow;
    while next != 0 {
        if !valid.contains(&next) || !seen.insert(next) {
            return Err(bad(format!(
                "extent chain is broken (block {next} out of range or seen twice)"
            )));
        }
        let b = read(next).map_err(LoadError::Read)?;
        let (after, ext) = decode_overflow(&b, next, d.ino).map_err(LoadError::Corrupt)?;
        if !ext.is_empty() {
            if counts.len() < chain.blocks.len() {
                return Err(bad(format!("extent block {next} follows an empty one")));
            }
            counts.push(ext.len());
        }
        chain.crc.push(Some(crc32c::crc32c(&b)));
        chain.first.push(ext.first().map(|e| e.lblk));
        chain.blocks.push(next);
        extents.extend(ext);
        next = after;
    }
    if extents.len() != d.nextents as usize {
        return Err(bad(format!(
            "{} extents stored, {} expected",
            extents.len(),
            d.nextents
        )));
    }
    if let Some((i, _)) = counts
        .iter()
        .enumerate()
        .rev()
        .skip(1)
        .find(|(_, &c)| c != OVERFLOW_EXTENTS)
    {
        return Err(bad(format!("extent block {} is not full", chain.blocks[i])));
    }
    check_order(&extents).map_err(bad)?;
    let map = ExtentMap::from_extents(&extents);
    chain.saved = map.version();
    Ok((map, chain))
}

/// Extents must be non-empty, in file order, not overlap, and stay below the
/// largest file block.
fn check_order(extents: &[Extent]) -> Result<(), String> {
    let mut end = 0u64;
    for e in extents {
        let stop = e.lblk + u64::from(e.len);
        if e.len == 0 || e.lblk < end || stop > 1 << 32 {
            return Err(format!(
                "extent at file block {} (length {}) is empty, out of order or overlapping",
                e.lblk, e.len
            ));
        }
        end = stop;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alloc::{initial_bitmaps, Allocator};
    use crate::format::{Ts, BITS_PER_GROUP};
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    const INO: u64 = 3;

    /// One change to a file's block map, as the file system makes them.
    #[derive(Clone, Debug)]
    enum Op {
        /// Map the holes of `[lblk, lblk+len)` (fallocate, or a write into
        /// holes); `far` places them where they cannot merge with the rest.
        Map {
            lblk: u64,
            len: u64,
            unwritten: bool,
            far: bool,
        },
        /// Write every `step`-th block of `[lblk, lblk+len)` that is
        /// unwritten (scattered writes into a preallocated file).
        Scatter { lblk: u64, len: u64, step: u64 },
        /// Punch `[lblk, lblk+len)`.
        Punch { lblk: u64, len: u64 },
        /// Truncate to `blocks`.
        Truncate { blocks: u64 },
    }

    fn op(max: u64) -> impl Strategy<Value = Op> {
        prop_oneof![
            (0..max, 1..max / 2, any::<bool>(), any::<bool>()).prop_map(
                |(lblk, len, unwritten, far)| Op::Map {
                    lblk,
                    len,
                    unwritten,
                    far
                }
            ),
            (0..max, 1..max, 1..4u64).prop_map(|(lblk, len, step)| Op::Scatter { lblk, len, step }),
            (0..max, 1..64u64).prop_map(|(lblk, len)| Op::Punch { lblk, len }),
            (0..max).prop_map(|blocks| Op::Truncate { blocks }),
        ]
    }

    fn pblk_of(lblk: u64, far: bool) -> u64 {
        if far {
            (1 << 40) | lblk
        } else {
            (1 << 30) | lblk
        }
    }

    fn apply(ext: &mut ExtentMap, model: &mut BTreeMap<u64, (u64, bool)>, op: &Op) {
        match *op {
            Op::Map {
                lblk,
                len,
                unwritten,
                far,
            } => {
                for l in lblk..lblk + len {
                    if ext.lookup(l).is_none() {
                        let p = pblk_of(l, far);
                        ext.insert(l, p, 1, unwritten);
                        model.insert(l, (p, unwritten));
                    }
                }
            }
            Op::Scatter { lblk, len, step } => {
                for l in (lblk..lblk + len).step_by(step as usize) {
                    if let Some((p, true, _)) = ext.lookup(l) {
                        ext.punch(l, 1);
                        ext.insert(l, p, 1, false);
                        model.insert(l, (p, false));
                    }
                }
            }
            Op::Punch { lblk, len } => {
                ext.punch(lblk, len);
                model.retain(|&l, _| l < lblk || l >= lblk + len);
            }
            Op::Truncate { blocks } => {
                ext.punch(blocks, u64::MAX - blocks);
                model.retain(|&l, _| l < blocks);
            }
        }
    }

    fn inode() -> DiskInode {
        DiskInode {
            ino: INO,
            generation: 0,
            mode: libc::S_IFREG | 0o644,
            uid: 0,
            gid: 0,
            nlink: 1,
            size: 0,
            atime: Ts::default(),
            mtime: Ts::default(),
            ctime: Ts::default(),
            crtime: Ts::default(),
            rdev: 0,
            flags: 0,
            xattr_blk: 0,
            xattr_blocks: 0,
            parent: 0,
            nextents: 0,
            overflow: 0,
            inline_extents: Vec::new(),
            symlink: Vec::new(),
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// After every change: what is on the device decodes to the map in
        /// memory (and to the model), the chain blocks in use are exactly
        /// the ones the allocator has marked, whether or not the operation
        /// could free the blocks the list no longer needs.
        #[test]
        fn stored_list_decodes_to_the_map(
            ops in prop::collection::vec((op(6000), any::<bool>()), 1..40)
        ) {
            let n = BITS_PER_GROUP * 2;
            let alloc = Allocator::new(initial_bitmaps(n, &[0, 1, 2, INO]), 1, n);
            let base_free = alloc.free_blocks();
            let mut dev: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
            let mut d = inode();
            let mut ext = ExtentMap::default();
            let mut chain = Chain::default();
            let mut model = BTreeMap::new();
            for (op, hold) in &ops {
                let before = ext.version();
                apply(&mut ext, &mut model, op);
                let grow = blocks_for(ext.len()).saturating_sub(chain.blocks().len()) as u64;
                let mut w = Writes::new();
                if *hold || grow > 0 {
                    let lock = if *hold { chain.runs() } else { Vec::new() };
                    let mut ctx = alloc.prepare(grow, INO, &lock).unwrap();
                    chain.save(&mut d, &mut ext, Some(&mut ctx), &mut w).unwrap();
                    ctx.write_dirty(|blk, b, crc| {
                        w.insert_with_crc(blk, b.to_vec(), crc);
                        Ok::<(), ()>(())
                    })
                    .unwrap();
                    ctx.commit();
                } else {
                    chain.save(&mut d, &mut ext, None, &mut w).unwrap();
                }
                dev.extend(w.into_blocks());
                if *hold && ext.version() != before {
                    // A change made while holding the chain's groups frees
                    // every block the list no longer needs.
                    prop_assert_eq!(chain.blocks().len(), blocks_for(ext.len()));
                }
                prop_assert_eq!(alloc.free_blocks(), base_free - chain.blocks().len() as u64);
                prop_assert!(chain.blocks().iter().all(|&b| alloc.is_used(b)));
                let stored = DiskInode::decode(&dev[&INO], INO).unwrap();
                let (back, back_chain) = load(&stored, 3..n, |b| {
                    dev.get(&b).cloned().ok_or("unwritten block")
                })
                .map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
                prop_assert_eq!(back.to_extents(), ext.to_extents());
                prop_assert_eq!(back_chain.blocks(), chain.blocks());
                prop_assert_eq!(back.mapped_blocks(), model.len() as u64);
            }
            for (&l, &(p, unw)) in &model {
                prop_assert_eq!(ext.lookup(l).map(|(p, u, _)| (p, u)), Some((p, unw)));
            }
        }
    }

    #[test]
    fn corrupt_lists_are_refused() {
        let mut d = inode();
        let e = |lblk, len| Extent {
            lblk,
            pblk: 100 + lblk,
            len,
            unwritten: false,
        };
        let none = |_| Err::<Vec<u8>, ()>(());
        for bad in [
            vec![e(5, 2), e(6, 1)],
            vec![e(5, 0)],
            vec![e(9, 1), e(2, 1)],
        ] {
            d.nextents = bad.len() as u32;
            d.inline_extents = bad;
            assert!(matches!(load(&d, 3..100, none), Err(LoadError::Corrupt(_))));
        }
        // A chain that loops.
        d.inline_extents = vec![];
        d.nextents = 0;
        d.overflow = 10;
        let looped = encode_overflow(INO, 10, &[]);
        assert!(matches!(
            load(&d, 3..100, |_| Ok::<_, ()>(looped.clone())),
            Err(LoadError::Corrupt(_))
        ));
    }
}
