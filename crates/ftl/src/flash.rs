//! Block and page state of the NAND array: owners, valid counts, write
//! pointers, free lists per chip, open blocks per stream, erase counts, and
//! the state GC victim policies read. All arrays are indexed by block or page number.

use std::collections::VecDeque;

use crate::bigvec::BigVec;
use crate::fastdiv::Divisor;
use crate::mapping::NIL;

/// `p2l` value of a page that holds nothing valid.
pub(crate) const INVALID: u32 = u32::MAX;
/// `p2l` value of a valid trim-record page (in the map pool).
pub(crate) const TRIM_OWNER: u32 = u32::MAX - 1;

/// Block pools.
pub(crate) const POOL_FREE: u8 = 0;
pub(crate) const POOL_DATA: u8 = 1;
pub(crate) const POOL_MAP: u8 = 2;

/// Write streams, each with one open block per chip.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stream {
    Host = 0,
    GcData = 1,
    Map = 2,
}

impl Stream {
    fn pool(self) -> u8 {
        match self {
            Stream::Host | Stream::GcData => POOL_DATA,
            Stream::Map => POOL_MAP,
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Flash {
    pub ppb: u32,
    pub blocks_per_chip: u32,
    /// Page number -> block, page number -> chip.
    per_block: Divisor,
    per_chip: Divisor,
    /// Owner of each physical page: LPN, mapping-page number, TRIM_OWNER or INVALID.
    pub p2l: BigVec<u32>,
    pub valid: Vec<u32>,
    pub wp: Vec<u32>,
    pub pool: Vec<u8>,
    pub erases: Vec<u32>,
    /// Time of the last change (program or invalidation) of each block.
    pub stamp: Vec<u64>,
    /// Whether the block is some stream's open block.
    pub open: Vec<bool>,
    /// Keep `stamp` (cost-benefit GC needs block ages; greedy does not).
    pub track_age: bool,
    free: Vec<VecDeque<u32>>,
    frontier: [Vec<u32>; 3],
}

impl Flash {
    pub fn new(chips: u32, blocks_per_chip: u32, ppb: u32) -> Self {
        let blocks = chips as usize * blocks_per_chip as usize;
        Flash {
            ppb,
            blocks_per_chip,
            per_block: Divisor::new(ppb),
            per_chip: Divisor::new(ppb * blocks_per_chip),
            p2l: BigVec::filled(blocks * ppb as usize, INVALID),
            valid: vec![0; blocks],
            wp: vec![0; blocks],
            pool: vec![POOL_FREE; blocks],
            erases: vec![0; blocks],
            stamp: vec![0; blocks],
            open: vec![false; blocks],
            track_age: true,
            free: (0..chips)
                .map(|c| (c * blocks_per_chip..(c + 1) * blocks_per_chip).collect())
                .collect(),
            frontier: std::array::from_fn(|_| vec![NIL; chips as usize]),
        }
    }

    #[inline]
    pub fn block_of(&self, ppa: u32) -> u32 {
        self.per_block.div(ppa)
    }

    #[inline]
    pub fn chip_of(&self, ppa: u32) -> u32 {
        self.per_chip.div(ppa)
    }

    #[inline]
    pub fn free_count(&self, chip: u32) -> u32 {
        self.free[chip as usize].len() as u32
    }

    pub fn blocks(&self) -> u32 {
        self.valid.len() as u32
    }

    /// Next page of the stream's open block on `chip`, if it has one.
    #[inline]
    pub fn alloc_in_open(&mut self, stream: Stream, chip: u32) -> Option<u32> {
        let b = self.frontier[stream as usize][chip as usize];
        if b == NIL {
            return None;
        }
        let off = self.wp[b as usize];
        self.wp[b as usize] = off + 1;
        if off + 1 == self.ppb {
            self.frontier[stream as usize][chip as usize] = NIL;
            self.open[b as usize] = false;
        }
        Some(b * self.ppb + off)
    }

    /// Open a free block for the stream on `chip` if more than `keep` free
    /// blocks remain.
    pub fn open_block(&mut self, stream: Stream, chip: u32, keep: u32) -> bool {
        if self.free_count(chip) <= keep {
            return false;
        }
        let Some(b) = self.free[chip as usize].pop_front() else {
            return false;
        };
        debug_assert_eq!(self.frontier[stream as usize][chip as usize], NIL);
        self.pool[b as usize] = stream.pool();
        self.wp[b as usize] = 0;
        self.open[b as usize] = true;
        self.frontier[stream as usize][chip as usize] = b;
        true
    }

    /// Record that `ppa` (just allocated) now holds `owner`.
    #[inline]
    pub fn fill(&mut self, ppa: u32, owner: u32, now: u64) {
        let b = self.block_of(ppa) as usize;
        self.p2l[ppa as usize] = owner;
        self.valid[b] += 1;
        if self.track_age {
            self.stamp[b] = now;
        }
    }

    #[inline]
    pub fn invalidate(&mut self, ppa: u32, now: u64) {
        let b = self.block_of(ppa) as usize;
        debug_assert_ne!(
            self.p2l[ppa as usize], INVALID,
            "double invalidation of {ppa}"
        );
        self.p2l[ppa as usize] = INVALID;
        self.valid[b] -= 1;
        if self.track_age {
            self.stamp[b] = now;
        }
    }

    /// Rebuild the free lists from `pool` (after recovery); every used
    /// block is closed (recovery opens none).
    pub fn rebuild_free_lists(&mut self) {
        for f in &mut self.free {
            f.clear();
        }
        for fr in &mut self.frontier {
            fr.fill(NIL);
        }
        for b in 0..self.blocks() {
            self.open[b as usize] = false;
            if self.pool[b as usize] == POOL_FREE {
                self.wp[b as usize] = 0;
                self.free[(b / self.blocks_per_chip) as usize].push_back(b);
            }
        }
    }

    /// Erase block `b` (no valid pages left) and return it to its chip's free list.
    pub fn erase(&mut self, b: u32) {
        let i = b as usize;
        debug_assert_eq!(self.valid[i], 0);
        let first = (b * self.ppb) as usize;
        self.p2l[first..first + self.ppb as usize].fill(INVALID);
        self.wp[i] = 0;
        self.pool[i] = POOL_FREE;
        self.open[i] = false;
        self.erases[i] += 1;
        self.free[(b / self.blocks_per_chip) as usize].push_back(b);
    }
}
