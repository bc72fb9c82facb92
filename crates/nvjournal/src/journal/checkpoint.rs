//! Checkpoints: rounds of one thread per partition writing committed
//! blocks home, then the device flush and the freed ring space.

use rustc_hash::FxHashMap as HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use parking_lot::{Condvar, Mutex};

use super::partition::{index_shard, Partition};
use super::{Inner, Result};
use crate::error::Failure;
use crate::layout::{RecordKind, SLOT_HEADER};
use crate::protocol::{self, CachePadded};

#[derive(Clone)]
pub(super) struct CkptTarget {
    pub(super) epoch: u64,
    pub(super) excluded: Vec<u64>,
    pub(super) heads: Vec<u64>,
}

impl CkptTarget {
    /// True if the slots of `epoch` are committed by this target.
    pub(super) fn covers(&self, epoch: u64) -> bool {
        epoch <= self.epoch && !self.excluded.contains(&epoch)
    }
}

#[derive(Default)]
pub(super) struct CkptState {
    /// Rounds started.
    pub(super) round: u64,
    /// Rounds finished.
    pub(super) completed: u64,
    pub(super) running: bool,
    pub(super) pending: bool,
    pub(super) target: Option<CkptTarget>,
    pub(super) shutdown: bool,
}

/// Checkpoint rounds: their state, the checkpointers' wake-ups, counters.
#[derive(Default)]
pub(super) struct Checkpointing {
    pub(super) state: CachePadded<Mutex<CkptState>>,
    /// Wakes the checkpointers for a new round.
    pub(super) cv: CachePadded<Condvar>,
    /// Wakes those waiting for a round to end.
    pub(super) done_cv: CachePadded<Condvar>,
    /// Checkpointers done with the current round.
    pub(super) arrived: CachePadded<AtomicUsize>,
    /// Rounds completed.
    pub(super) rounds: CachePadded<AtomicU64>,
    /// Blocks written home.
    pub(super) blocks: CachePadded<AtomicU64>,
}

impl Inner {
    /// Start a checkpoint round of the newest commit (or queue one after
    /// the running round). Returns the round that will cover it.
    pub(super) fn request_checkpoint(&self) -> u64 {
        let mut c = self.ckpt.state.lock();
        if c.running {
            c.pending = true;
            c.round + 1
        } else {
            self.start_round(&mut c);
            c.round
        }
    }

    /// Start a checkpoint round unless one is running. The background
    /// trigger uses this: stages keep kicking it while a round runs (the
    /// ring stays over the fill level until the round frees it), and
    /// queueing a round for each kick would chain rounds back to back, each
    /// over just what arrived during the last. Once the round is done, the
    /// next stage kicks again only if the ring is still over the level.
    pub(super) fn start_checkpoint_if_idle(&self) {
        let mut c = self.ckpt.state.lock();
        if !c.running {
            self.start_round(&mut c);
        }
    }

    fn start_round(&self, c: &mut CkptState) {
        let target = {
            let d = self.committing.durable.lock();
            CkptTarget {
                epoch: d.rec.epoch,
                excluded: d.rec.excluded.clone(),
                heads: d.rec.heads.clone(),
            }
        };
        let has_holes = self.parts.iter().any(|p| !p.holes.lock().is_empty());
        let work = self.parts.iter().zip(&target.heads).any(|(p, &h)| {
            let t = p.tail.load(Ordering::Acquire);
            t < h || p.ring.is_aborted(t)
        });
        if !work && !has_holes {
            return;
        }
        c.round += 1;
        c.running = true;
        c.target = Some(target);
        self.ckpt.arrived.store(0, Ordering::SeqCst);
        self.ckpt.cv.notify_all();
    }

    pub(super) fn checkpoint_and_wait(&self) -> Result<()> {
        self.check_running()?;
        let round = self.request_checkpoint();
        let mut c = self.ckpt.state.lock();
        // Stop when our round is done, or when it was never started because
        // there was nothing left to do.
        while c.completed < round && (c.running || c.round >= round) && !c.shutdown {
            self.ckpt.done_cv.wait(&mut c);
        }
        drop(c);
        self.check_running()
    }

    /// Checkpoint thread of partition `p`: one per partition, synchronised
    /// per round by an atomic counter; the last to arrive finishes the round.
    pub(super) fn checkpoint_worker(&self, p: usize) {
        let mut seen = 0u64;
        // Reused every round: it grows to the partition's hot set once
        // instead of rehashing its way there each round.
        let mut newest = HashMap::default();
        loop {
            let target = {
                let mut c = self.ckpt.state.lock();
                while c.round == seen && !c.shutdown {
                    self.ckpt.cv.wait(&mut c);
                }
                if c.shutdown {
                    return;
                }
                seen = c.round;
                c.target.clone().expect("a started round has a target")
            };
            let result = self.checkpoint_partition(p, &target, &mut newest);
            match result {
                Ok(r) => *self.parts[p].ckpt_result.lock() = r,
                Err(e) => {
                    self.fail(Failure::Checkpoint {
                        partition: p,
                        source: e,
                    });
                    let tail = self.parts[p].tail.load(Ordering::Acquire);
                    *self.parts[p].ckpt_result.lock() = (tail, Vec::new());
                }
            }
            if self.ckpt.arrived.fetch_add(1, Ordering::AcqRel) + 1 == self.parts.len() {
                if let Err(e) = self.finish_round() {
                    self.fail(Failure::CheckpointRound(e));
                }
                let mut c = self.ckpt.state.lock();
                c.completed = c.round;
                c.running = false;
                if c.pending && self.check_running().is_ok() {
                    c.pending = false;
                    self.start_round(&mut c);
                }
                self.ckpt.done_cv.notify_all();
            }
        }
    }

    /// Write the newest committed version of each block in partition `p`
    /// between its tail and the target commit. Returns the new tail (the
    /// first slot that must stay) and what was written.
    fn checkpoint_partition(
        &self,
        p: usize,
        target: &CkptTarget,
        newest: &mut HashMap<u64, u64>,
    ) -> Result<(u64, Vec<(u64, u64)>)> {
        let part = &self.parts[p];
        let tail = part.tail.load(Ordering::Acquire);
        let head = target.heads[p];
        newest.clear();
        let mut new_tail = head.max(tail);
        for pos in tail..head {
            let slot = part.ring.slot(pos);
            let state = slot.state.load(Ordering::Acquire);
            if state == protocol::aborted(pos) {
                continue;
            }
            if state != protocol::staged(pos) || !target.covers(slot.epoch.load(Ordering::Relaxed))
            {
                new_tail = pos;
                break;
            }
            newest.insert(slot.block.load(Ordering::Relaxed), pos);
        }
        if new_tail == head.max(tail) {
            // Aborted slots past the commit can be freed too: they will
            // never be replayed, and a later commit need not exist for them.
            while part.ring.is_aborted(new_tail) {
                new_tail += 1;
            }
        }
        let mut written: Vec<(u64, u64)> = newest.drain().collect();
        written.sort_unstable();
        let bs = self.geo.block_size as usize;
        let mut buf = Vec::new();
        for chunk in written.chunks(self.cfg.checkpoint_batch) {
            // SAFETY (both branches): every slot in `chunk` is staged (state
            // read with Acquire above) and lies in [tail, head): it is not
            // reused before this round advances the tail, which happens
            // after this function returns, and staged slots are never
            // rewritten. So nobody writes these bytes while we read them or
            // while the borrowed slices live.
            let borrowed: Option<Vec<(u64, &[u8])>> = chunk
                .iter()
                .map(|&(b, pos)| {
                    let off = self.geo.slot_offset(p, pos) + SLOT_HEADER;
                    // SAFETY: a staged slot in [tail, head), see above.
                    unsafe { self.region.borrow_unshared(off, bs) }.map(|d| (b, d))
                })
                .collect();
            if let Some(batch) = borrowed {
                // A real mapping: hand the slots to the device in place.
                self.device.write_batch(&batch)?;
                continue;
            }
            buf.resize(bs * chunk.len(), 0);
            for (i, &(_, pos)) in chunk.iter().enumerate() {
                let off = self.geo.slot_offset(p, pos) + SLOT_HEADER;
                // SAFETY: a staged slot in [tail, head), see above.
                unsafe {
                    self.region
                        .read_unshared(off, &mut buf[i * bs..(i + 1) * bs])
                };
            }
            let batch: Vec<(u64, &[u8])> = chunk
                .iter()
                .enumerate()
                .map(|(i, &(b, _))| (b, &buf[i * bs..(i + 1) * bs]))
                .collect();
            self.device.write_batch(&batch)?;
        }
        Ok((new_tail, written))
    }

    /// Last checkpointer of a round: flush the device, make the new tails
    /// durable, drop checkpointed blocks from the index, free ring space.
    fn finish_round(&self) -> Result<()> {
        self.check_running()?;
        // Injected bug: ring space freed (checkpoint record) before the
        // device flush that makes the checkpointed blocks durable.
        let early_free = crate::bugs::active("ckpt_free_before_flush");
        if !early_free {
            self.device.flush()?;
        }
        let results: Vec<(u64, Vec<(u64, u64)>)> = self
            .parts
            .iter()
            .map(|p| std::mem::take(&mut *p.ckpt_result.lock()))
            .collect();
        {
            let mut d = self.committing.durable.lock();
            for (t, r) in d.rec.tails.iter_mut().zip(&results) {
                *t = (*t).max(r.0);
            }
            d.write(
                RecordKind::Checkpoint,
                None,
                self.region.as_ref(),
                &self.geo,
            );
            self.region.sync()?;
        }
        if early_free {
            self.device.flush()?;
        }
        let mut blocks = 0;
        for (part, (new_tail, mut written)) in self.parts.iter().zip(results) {
            blocks += written.len() as u64;
            written.sort_unstable_by_key(|&(b, _)| (index_shard(b), b));
            for shard in written.chunk_by(|a, b| index_shard(a.0) == index_shard(b.0)) {
                let mut idx = part.index(shard[0].0).write();
                for &(b, pos) in shard {
                    if idx.get(&b) == Some(&pos) {
                        idx.remove(&b);
                    }
                }
            }
            // `last_check` first: everything below `new_tail` is staged or
            // aborted, and a scan must never start below the tail, where a
            // stager may already reuse a slot (it would wait forever for a
            // position whose slot now holds a later one).
            part.ring.last_check.fetch_max(new_tail, Ordering::AcqRel);
            // Only now, with every shard updated, may the tail pass these
            // slots (a reader holding a shard's read lock keeps its slot).
            part.tail.fetch_max(new_tail, Ordering::AcqRel);
            self.fill_holes(part);
        }
        self.ckpt.blocks.fetch_add(blocks, Ordering::Relaxed);
        self.ckpt.rounds.fetch_add(1, Ordering::Relaxed);
        let _s = self.space.lock.lock();
        self.space.cv.notify_all();
        Ok(())
    }

    /// Mark abandoned positions that are now inside the ring as aborted, so
    /// the commit worker and checkpointer pass them.
    fn fill_holes(&self, part: &Partition) {
        let mut holes = part.holes.lock();
        let tail = part.tail.load(Ordering::Acquire);
        holes.retain(|&h| {
            if h < tail + self.geo.slots {
                part.ring.publish_aborted(h);
                false
            } else {
                true
            }
        });
    }
}
