//! Staging: transactions, the lock-free slot claim and copy, backpressure
//! (waiting for ring space), aborts, and reads.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use crossbeam::utils::Backoff;
use parking_lot::{Condvar, Mutex};

use super::partition::{index_shard, Partition};
use super::{
    keep_scratch, lock_spinning, mutated, prefetch_write, DroppedFlush, Inner, JournalKind, Result,
    TxId,
};
use crate::error::JournalError;
use crate::layout::{SlotHeader, FLAG_ABORTED, FLAG_AT, FLAG_STAGED, SLOT_HEADER};
use crate::protocol::{CachePadded, Epochs};

/// Entries in the ring of per-epoch done marks: at most this many
/// transactions can begin past the oldest unfinished one.
const EPOCH_RING: usize = 1 << 12;

thread_local! {
    /// A finished transaction's slot list, handed to the thread's next one.
    pub(super) static TX_SLOTS: Cell<Vec<(u32, u64, u64)>> = const { Cell::new(Vec::new()) };
}

/// What stagers share besides the rings: the transactions' epochs, the
/// baselines' journal-wide lock, and counters.
pub(super) struct Staging {
    /// One epoch per transaction: numbers, done marks, finished count.
    pub(super) epochs: Epochs,
    pub(super) aborted: CachePadded<AtomicU64>,
    /// The baseline's journal-wide lock (None when partitioned).
    pub(super) global_lock: CachePadded<Option<Mutex<()>>>,
    /// Ring positions claimed and then given up (see `abandon`).
    pub(super) abandoned: CachePadded<AtomicU64>,
    pub(super) device_reads: CachePadded<AtomicU64>,
}

impl Staging {
    /// For a journal of `kind` whose first transaction gets `first_epoch`.
    pub(super) fn new(kind: JournalKind, first_epoch: u64) -> Self {
        Self {
            epochs: Epochs::new(first_epoch, EPOCH_RING),
            aborted: CachePadded::default(),
            global_lock: CachePadded::new(kind.has_global_lock().then(|| Mutex::new(()))),
            abandoned: CachePadded::default(),
            device_reads: CachePadded::default(),
        }
    }
}

/// Backpressure: stagers waiting for ring space, woken when a checkpoint
/// frees some (or the journal stops).
#[derive(Default)]
pub(super) struct Space {
    /// Stages and begins that had to wait.
    pub(super) waits: CachePadded<AtomicU64>,
    /// Some ring passed the high-water mark (a hint for `begin`).
    pub(super) high_water: CachePadded<AtomicBool>,
    pub(super) lock: CachePadded<Mutex<()>>,
    pub(super) cv: CachePadded<Condvar>,
}

/// A transaction: blocks staged with [`write`](Tx::write) commit together
/// or not at all. Dropping it without [`finish`](Tx::finish) aborts it.
///
/// A commit covers finished transactions only: one called while this
/// transaction is open neither covers it nor waits for it. A thread must
/// not [`begin`](crate::Journal::begin) another transaction while it holds this
/// one open (`begin` may wait for ring space this one pins).
pub struct Tx<'j> {
    /// Borrowed, not an `Arc`: a clone per transaction would write the
    /// Arc's count, one cache line every thread shares, twice per
    /// transaction.
    pub(super) inner: &'j Inner,
    pub(super) txid: u64,
    pub(super) epoch: u64,
    pub(super) slots: Vec<(u32, u64, u64)>,
    pub(super) done: bool,
}

impl Tx<'_> {
    /// Stage a full block now (lock-free in the partitioned journal): claim
    /// a slot with one atomic add, write header and payload, flush, then set
    /// and flush the slot's flag.
    pub fn write(&mut self, block: u64, data: &[u8]) -> Result<()> {
        let pos_part = self.inner.stage(block, data, None, self.txid, self.epoch)?;
        self.slots.push((pos_part.0, pos_part.1, block));
        Ok(())
    }

    /// [`write`](Self::write) for a caller that already knows
    /// `crc32c::crc32c(data)` (a block that carries its own checksum can
    /// derive it from that), so staging skips a pass over the payload.
    /// A wrong `crc` makes recovery drop the transaction as torn, so debug
    /// builds check it.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use ptsd_blockdev::{BlockDevice, MemDevice};
    /// use ptsd_nvjournal::{CrashRegion, Journal, JournalConfig};
    ///
    /// let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(4096, 64).unwrap());
    /// let region = CrashRegion::new(1 << 20);
    /// let j = Journal::create(region.clone(), dev.clone(), JournalConfig::partitioned(2)).unwrap();
    /// let block = vec![7u8; 4096];
    /// let mut tx = j.begin();
    /// tx.write_with_crc(3, &block, crc32c::crc32c(&block)).unwrap();
    /// tx.finish().unwrap();
    /// j.commit().unwrap();
    /// drop(j); // "crash"
    /// let (j, _) = Journal::open(region, dev, JournalConfig::partitioned(2)).unwrap();
    /// let mut back = vec![0u8; 4096];
    /// j.read(3, &mut back).unwrap();
    /// assert_eq!(back, block);
    /// ```
    pub fn write_with_crc(&mut self, block: u64, data: &[u8], crc: u32) -> Result<()> {
        debug_assert_eq!(crc, crc32c::crc32c(data), "caller's crc of block {block}");
        let pos_part = self
            .inner
            .stage(block, data, Some(crc), self.txid, self.epoch)?;
        self.slots.push((pos_part.0, pos_part.1, block));
        Ok(())
    }

    /// Read `block` as this transaction sees it: its own newest write, else
    /// [`Journal::read`](crate::Journal::read).
    pub fn read(&self, block: u64, buf: &mut [u8]) -> Result<()> {
        if let Some(&(p, pos, _)) = self.slots.iter().rev().find(|s| s.2 == block) {
            let inner = &self.inner;
            inner.check_buf(block, buf.len())?;
            let off = inner.geo.slot_offset(p as usize, pos) + SLOT_HEADER;
            // SAFETY: this transaction staged the slot (its writes happened
            // before, on this thread) and it is unfinished, so it is neither
            // checkpointed nor freed: nobody writes it.
            unsafe { inner.region.read_unshared(off, buf) };
            return Ok(());
        }
        self.inner.read(block, buf)
    }

    /// This transaction's id.
    pub fn id(&self) -> TxId {
        TxId(self.txid)
    }

    /// Blocks staged so far.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// True if nothing was staged.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// All blocks are staged: the transaction becomes visible to reads and
    /// part of the next commit.
    pub fn finish(mut self) -> Result<TxId> {
        self.done = true;
        let inner = self.inner;
        if let Err(e) = inner.check_running() {
            inner.abort(&self.slots, self.epoch);
            return Err(e);
        }
        {
            let _g = inner.stage.global_lock.as_ref().map(lock_spinning);
            // One index lock per shard touched, not one per block.
            self.slots
                .sort_unstable_by_key(|&(p, pos, block)| (p, index_shard(block), pos));
            let same_shard = |a: &(u32, u64, u64), b: &(u32, u64, u64)| {
                a.0 == b.0 && index_shard(a.2) == index_shard(b.2)
            };
            for shard_slots in self.slots.chunk_by(same_shard) {
                let (p, _, first_block) = shard_slots[0];
                let mut idx = inner.parts[p as usize].index(first_block).write();
                for &(_, pos, block) in shard_slots {
                    let e = idx.entry(block).or_insert(pos);
                    if *e < pos {
                        *e = pos;
                    }
                }
            }
        }
        // Done mark, then count: a commit that counts us sees us done.
        inner
            .stage
            .epochs
            .finish(self.epoch, !self.slots.is_empty());
        Ok(TxId(self.txid))
    }
}

impl Drop for Tx<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.inner.abort(&self.slots, self.epoch);
        }
        keep_scratch(&TX_SLOTS, std::mem::take(&mut self.slots));
    }
}

impl Inner {
    /// `begin` waits while a ring holds more than this many live slots.
    fn high_water_slots(&self) -> u64 {
        self.geo.slots - self.geo.slots / 4
    }

    /// Stage one block; returns (partition, position).
    fn stage(
        &self,
        block: u64,
        data: &[u8],
        known_crc: Option<u32>,
        txid: u64,
        epoch: u64,
    ) -> Result<(u32, u64)> {
        self.check_running()?;
        self.check_buf(block, data.len())?;
        let p = self.partition_of(block);
        let part = &self.parts[p];
        // The claim below writes a line the other stagers write too (the
        // ring head, or the baselines' lock): ask for it now and checksum
        // the payload (it does not depend on the slot) while it arrives,
        // instead of stalling on the claim's miss and checksumming after.
        // The single-lock baseline checksums under its lock, as before.
        let early_crc = if self.kind == JournalKind::SingleLock {
            None
        } else {
            match self.stage.global_lock.as_ref() {
                Some(lock) => prefetch_write(lock),
                None => prefetch_write(&*part.ring.head),
            }
            Some(known_crc.unwrap_or_else(|| crc32c::crc32c(data)))
        };
        let mut guard = self.stage.global_lock.as_ref().map(lock_spinning);
        // The tail only grows, so one read before the claim is enough to
        // know the slot is free (the common case: no second read).
        let tail = part.tail.load(Ordering::Acquire);
        let pos = part.ring.claim();
        let waited = pos >= tail + self.geo.slots
            && pos >= part.tail.load(Ordering::Acquire) + self.geo.slots;
        if waited {
            // The baseline must not hold its lock while waiting: the commit
            // that frees space needs it.
            drop(guard.take());
            self.wait_for_space(p, pos, epoch)?;
            guard = self.stage.global_lock.as_ref().map(lock_spinning);
        }
        // Tell committers whose epoch this slot belongs to, first thing: a
        // commit scanning past `pos` waits only until then, and one not
        // covering this epoch does not wait for the copy.
        let index = pos % self.geo.slots;
        let meta = part.ring.slot_at(index);
        meta.publish_claim(pos, block, epoch);
        if !waited {
            let used = pos + 1 - tail;
            if used >= self.fill_threshold {
                self.kick_trigger();
            }
            if used >= self.high_water_slots() && !self.space.high_water.load(Ordering::Relaxed) {
                self.space.high_water.store(true, Ordering::Relaxed);
            }
        }
        if self.kind == JournalKind::ShortLock {
            // The claim is published: a commit snapshot taken from here on
            // waits for this slot's flag (as in the partitioned journal), so
            // the copy needs no lock.
            drop(guard.take());
        }
        let off = self.geo.slot_offset_at(p, index);
        let payload_crc = early_crc
            .or(known_crc)
            .unwrap_or_else(|| crc32c::crc32c(data));
        let header = SlotHeader {
            pos,
            block,
            txid,
            epoch,
        }
        .encode_with(data.len(), payload_crc, &self.slot_crc);
        // SAFETY: position `pos` was handed to this stager alone by the
        // `fetch_add` above and lies inside the ring's free space (`pos <
        // tail + slots`), so no other thread reads or writes this slot until
        // the `Release` store of its state below publishes it; the previous
        // lap's occupant was checkpointed, dropped from the index and freed
        // (tail advanced, Acquire) before we got here.
        unsafe {
            if mutated(DroppedFlush::StagePayload) {
                self.region.write_unshared(off, &header);
                self.region.write_unshared(off + SLOT_HEADER, data);
            } else {
                self.region
                    .write_persist_unshared(off, &[&header[..], data]);
            }
        };
        self.region.write(off + FLAG_AT, &FLAG_STAGED.to_le_bytes());
        if !mutated(DroppedFlush::StageFlag) {
            self.region.persist(off + FLAG_AT, 8);
        }
        meta.publish_staged(pos);
        drop(guard);
        Ok((p as u32, pos))
    }

    /// Backpressure: wait until position `pos` of partition `p` is inside
    /// the ring. Gives up with `Full` when the slot pinning the tail cannot
    /// be freed before this transaction (epoch `epoch`) finishes.
    fn wait_for_space(&self, p: usize, pos: u64, epoch: u64) -> Result<()> {
        let part = &self.parts[p];
        self.space.waits.fetch_add(1, Ordering::Relaxed);
        loop {
            let tail = part.tail.load(Ordering::Acquire);
            if pos < tail + self.geo.slots {
                return Ok(());
            }
            if let Err(e) = self.check_running() {
                self.abandon(part, pos);
                return Err(e);
            }
            if part.ring.is_staged(tail)
                && part.ring.slot(tail).epoch.load(Ordering::Relaxed) >= epoch
            {
                // Freeing the tail needs our own transaction, or a younger
                // one, to finish. Waiting only ever for older transactions
                // rules out a cycle of waiters (wait-die): give up and leave
                // a hole at `pos`.
                self.abandon(part, pos);
                return Err(JournalError::Full { partition: p });
            }
            self.kick_trigger();
            self.request_checkpoint();
            let mut g = self.space.lock.lock();
            if part.tail.load(Ordering::Acquire) == tail && !self.shutdown.load(Ordering::SeqCst) {
                self.space.cv.wait_for(&mut g, Duration::from_millis(2));
            }
        }
    }

    /// Leave position `pos` unused (its stager gave up).
    fn abandon(&self, part: &Partition, pos: u64) {
        part.holes.lock().push(pos);
        self.stage.abandoned.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn wait_below_high_water(&self) {
        // Stagers raise `high_water` when they pass the mark, so that the
        // common case reads one flag, not every ring's head and tail.
        if !self.space.high_water.load(Ordering::Relaxed) {
            return;
        }
        let over = || self.over_high_water();
        if !over() {
            self.space.high_water.store(false, Ordering::Relaxed);
            return;
        }
        self.space.waits.fetch_add(1, Ordering::Relaxed);
        // With the fill level above the mark, the trigger does not fire for
        // a ring at the mark, and a checkpoint frees only what is committed:
        // without commits (and no interval) this would wait forever. So the
        // waiter commits what is finished itself, in this thread, as JBD2's
        // handle reservation does (and a single-threaded run stays
        // deterministic). With the fill level at or below the mark, the
        // kick below has the trigger do it.
        let commit_here = self.fill_threshold > self.high_water_slots();
        while over() && self.check_running().is_ok() && !self.shutdown.load(Ordering::SeqCst) {
            if commit_here {
                let fin = self.stage.epochs.finished();
                if !self.stage.epochs.is_durable(fin) {
                    // A failure stops the journal; the loop then ends.
                    let _ = self.commit_covering(fin);
                }
            }
            self.kick_trigger();
            self.request_checkpoint();
            let mut g = self.space.lock.lock();
            if over() {
                self.space.cv.wait_for(&mut g, Duration::from_millis(2));
            }
        }
    }

    /// True if some ring holds at least `begin`'s high-water mark of live
    /// slots (`begin` then waits for a checkpoint).
    fn over_high_water(&self) -> bool {
        let high = self.high_water_slots();
        self.parts
            .iter()
            .any(|p| p.ring.head.load(Ordering::Relaxed) >= p.tail.load(Ordering::Relaxed) + high)
    }

    fn abort(&self, slots: &[(u32, u64, u64)], epoch: u64) {
        if !slots.is_empty() {
            let mut ranges = Vec::with_capacity(slots.len());
            for &(p, pos, _) in slots {
                let off = self.geo.slot_offset(p as usize, pos) + FLAG_AT;
                self.region.write(off, &FLAG_ABORTED.to_le_bytes());
                ranges.push((off, 8));
            }
            // Durable before the epoch is marked done and can commit.
            if !mutated(DroppedFlush::AbortFlag) {
                self.region.persist_ranges(&ranges);
            }
            for &(p, pos, _) in slots {
                self.parts[p as usize].ring.publish_aborted(pos);
            }
        }
        self.stage.aborted.fetch_add(1, Ordering::Relaxed);
        self.stage.epochs.abort(epoch);
    }

    pub(super) fn read(&self, block: u64, buf: &mut [u8]) -> Result<()> {
        self.check_buf(block, buf.len())?;
        let p = self.partition_of(block);
        let part = &self.parts[p];
        {
            // The read lock keeps the slot from being freed while we copy.
            let idx = part.index(block).read();
            if let Some(&pos) = idx.get(&block) {
                let off = self.geo.slot_offset(p, pos) + SLOT_HEADER;
                // SAFETY: the slot was published by a finished transaction
                // (index insert after its staging, under the index lock);
                // while we hold the read lock the checkpoint cannot drop it
                // from the index, so the tail cannot pass it and no stager
                // can reuse it.
                unsafe { self.region.read_unshared(off, buf) };
                part.journal_reads.fetch_add(1, Ordering::Relaxed);
                return Ok(());
            }
        }
        self.stage.device_reads.fetch_add(1, Ordering::Relaxed);
        self.device.read(block, buf)?;
        Ok(())
    }

    /// An epoch's done mark is reused every [`EPOCH_RING`] epochs: wait
    /// until the epoch that used it before is done (only ever needed when
    /// that many transactions started while an old one stays open).
    pub(super) fn wait_epoch_room(&self, epoch: u64) {
        let wait = Backoff::new();
        while !self.stage.epochs.has_room(epoch) {
            wait.snooze();
        }
    }
}
