//! The blocks one file-system operation writes, by block number, and the
//! block buffers they are encoded into.

use std::cell::RefCell;
use std::collections::BTreeMap;

use crate::format::BLOCK_SIZE;

/// Block buffers a thread keeps for reuse at most.
const SPARE_MAX: usize = 16;

thread_local! {
    /// This thread's block buffers whose operation finished. Every
    /// operation encodes a few blocks and drops them once journaled; glibc
    /// serves 4 KiB from its bins (not its per-thread cache), at a cost
    /// per call that showed in profiles of small-file creates.
    static SPARE: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

/// A zeroed `BLOCK_SIZE` buffer, reused if this thread has one.
pub(crate) fn zeroed_block() -> Vec<u8> {
    match SPARE.with(|s| s.borrow_mut().pop()) {
        Some(mut b) => {
            b.fill(0);
            b
        }
        None => vec![0u8; BLOCK_SIZE],
    }
}

/// A `BLOCK_SIZE` buffer holding `data` (a whole block), reused if this
/// thread has one.
pub(crate) fn block_from(data: &[u8]) -> Vec<u8> {
    debug_assert_eq!(data.len(), BLOCK_SIZE);
    match SPARE.with(|s| s.borrow_mut().pop()) {
        Some(mut b) => {
            b.copy_from_slice(data);
            b
        }
        None => data.to_vec(),
    }
}

/// Keep `b` for this thread's next block, if it is one.
pub(crate) fn recycle(b: Vec<u8>) {
    if b.len() == BLOCK_SIZE && b.capacity() == BLOCK_SIZE {
        SPARE.with(|s| {
            let mut s = s.borrow_mut();
            if s.len() < SPARE_MAX {
                s.push(b);
            }
        });
    }
}

/// Blocks to write in one transaction, each with its crc32c when the
/// encoder knows it already (a sealed metadata block derives it from its
/// seal), so the journal does not read the block again to compute it.
/// Inserting a block again replaces it, crc included.
#[derive(Debug, Default)]
pub struct Writes {
    blocks: BTreeMap<u64, (Vec<u8>, Option<u32>)>,
}

impl Writes {
    /// No blocks yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Write `data` to `blk`; its crc is not known.
    pub fn insert(&mut self, blk: u64, data: Vec<u8>) {
        self.blocks.insert(blk, (data, None));
    }

    /// Write `data` to `blk`; `crc` is `crc32c::crc32c(&data)`.
    pub fn insert_with_crc(&mut self, blk: u64, data: Vec<u8>, crc: u32) {
        debug_assert_eq!(crc, crc32c::crc32c(&data), "crc of block {blk}");
        self.blocks.insert(blk, (data, Some(crc)));
    }

    /// The block to be written to `blk`, if any.
    pub fn get(&self, blk: u64) -> Option<&[u8]> {
        self.blocks.get(&blk).map(|(d, _)| &d[..])
    }

    /// The blocks in block order, with their crcs if known.
    pub fn into_blocks_with_crc(mut self) -> impl Iterator<Item = (u64, Vec<u8>, Option<u32>)> {
        std::mem::take(&mut self.blocks)
            .into_iter()
            .map(|(b, (d, c))| (b, d, c))
    }

    /// The blocks in block order, without their crcs.
    pub fn into_blocks(mut self) -> impl Iterator<Item = (u64, Vec<u8>)> {
        std::mem::take(&mut self.blocks)
            .into_iter()
            .map(|(b, (d, _))| (b, d))
    }
}

impl Drop for Writes {
    fn drop(&mut self) {
        for (_, (data, _)) in std::mem::take(&mut self.blocks) {
            recycle(data);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reinsert_replaces_block_and_crc() {
        let mut w = Writes::new();
        let a = vec![1u8; 16];
        w.insert_with_crc(5, a.clone(), crc32c::crc32c(&a));
        w.insert(5, vec![2u8; 16]);
        w.insert(3, vec![3u8; 16]);
        assert_eq!(w.get(5), Some(&[2u8; 16][..]));
        let got: Vec<_> = w
            .into_blocks_with_crc()
            .map(|(b, d, c)| (b, d[0], c))
            .collect();
        assert_eq!(got, vec![(3, 3, None), (5, 2, None)]);
    }

    #[test]
    fn recycled_blocks_come_back_zeroed_or_filled() {
        let mut w = Writes::new();
        let mut b = zeroed_block();
        b.fill(0xee);
        w.insert(1, b);
        drop(w);
        assert_eq!(zeroed_block(), vec![0u8; BLOCK_SIZE]);
        let mut w = Writes::new();
        w.insert(2, block_from(&[0x11; BLOCK_SIZE]));
        drop(w);
        assert_eq!(block_from(&[7u8; BLOCK_SIZE]), vec![7u8; BLOCK_SIZE]);
    }
}
