//! The blocks one file-system operation writes, by block number.

use std::collections::BTreeMap;

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

    /// Blocks in block order: number, contents, crc if known.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &[u8], Option<u32>)> + '_ {
        self.blocks.iter().map(|(&b, (d, c))| (b, &d[..], *c))
    }

    /// The blocks in block order, without their crcs.
    pub fn into_blocks(self) -> impl Iterator<Item = (u64, Vec<u8>)> {
        self.blocks.into_iter().map(|(b, (d, _))| (b, d))
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
        let got: Vec<_> = w.iter().map(|(b, d, c)| (b, d[0], c)).collect();
        assert_eq!(got, vec![(3, 3, None), (5, 2, None)]);
        assert_eq!(w.get(5), Some(&[2u8; 16][..]));
    }
}
