//! DRAM state of one ring: head, tail, slot states and the index of the
//! newest finished version of each block.

use rustc_hash::FxHashMap as HashMap;
use std::sync::atomic::AtomicU64;

use parking_lot::{Mutex, RwLock};

use crate::protocol::{CachePadded, Ring};

/// DRAM state of one ring.
pub(super) struct Partition {
    /// Head, `last_check` and per-slot states (the lock-free part).
    pub(super) ring: Ring,
    /// Every position below this is checkpointed and free.
    pub(super) tail: CachePadded<AtomicU64>,
    /// Ring position this partition started at (for the stats).
    pub(super) start: u64,
    pub(super) journal_reads: CachePadded<AtomicU64>,
    /// Newest finished version of each block in this ring: block -> pos,
    /// in [`INDEX_SHARDS`] shards (see [`Partition::index`]).
    pub(super) index: Box<[CachePadded<IndexShard>]>,
    /// Positions claimed past the ring's capacity by stages that gave up
    /// (`JournalError::Full`); marked aborted once the ring has room.
    pub(super) holes: Mutex<Vec<u64>>,
    /// Checkpoint result of the current round: new tail, (block, pos) written.
    pub(super) ckpt_result: Mutex<(u64, Vec<(u64, u64)>)>,
}

impl Partition {
    pub(super) fn new(slots: u64, start: u64) -> Self {
        Self {
            ring: Ring::new(slots, start),
            tail: CachePadded::new(AtomicU64::new(start)),
            start,
            journal_reads: CachePadded::default(),
            index: (0..INDEX_SHARDS)
                .map(|_| CachePadded::new(RwLock::new(HashMap::default())))
                .collect(),
            holes: Mutex::new(Vec::new()),
            ckpt_result: Mutex::new((start, Vec::new())),
        }
    }

    /// The index shard holding `block`. Threads finishing transactions
    /// update the index of every partition they staged into; with one map
    /// per partition each update would take a lock line and hash buckets
    /// the other cores just wrote. Shards make that rare.
    pub(super) fn index(&self, block: u64) -> &IndexShard {
        &self.index[index_shard(block)]
    }
}

/// Part of a partition's index: block -> ring position.
pub(super) type IndexShard = RwLock<HashMap<u64, u64>>;

/// Index shards per partition: `1 << INDEX_SHARD_BITS`.
const INDEX_SHARD_BITS: u32 = 4;
const INDEX_SHARDS: usize = 1 << INDEX_SHARD_BITS;

pub(super) fn index_shard(block: u64) -> usize {
    // Fibonacci hashing: consecutive blocks of a partition (a stride of
    // the partition count apart) spread over the shards.
    (block.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - INDEX_SHARD_BITS)) as usize
}
