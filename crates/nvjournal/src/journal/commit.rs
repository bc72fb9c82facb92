//! Group commit: a commit record covering every finished transaction,
//! the per-partition commit workers, and the commit-area writes.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crossbeam::utils::Backoff;
use parking_lot::Mutex;

use super::{keep_scratch, lock_spinning, mutated, take_scratch, DroppedFlush, Inner, Result};
use crate::error::{Failure, JournalError};
use crate::layout::{slot_term, Geometry, Record, RecordKind, MAX_EXCLUDED, SLOT_CRC_AT};
use crate::protocol::{self, CachePadded, Cover};
use crate::region::{Persist, RegionMode};

/// How long an idle commit worker sleeps before it looks again. A commit
/// advances every partition's check itself when the worker is behind, so
/// this bounds only the background work, not commit latency; a short nap
/// (it was 1 ms) cost four wake-ups per millisecond, a tenth of the file
/// system's CPU time on a busy 2-CPU machine, for nothing a commit needs.
const COMMIT_WORKER_NAP: Duration = Duration::from_millis(10);
/// A commit worker that passed at least this many slots in one step naps a
/// tenth of [`COMMIT_WORKER_NAP`]: committers are not keeping up with it.
const COMMIT_WORKER_BUSY: u64 = 256;

thread_local! {
    /// A commit's scratch lists (heads snapshot, excluded epochs), kept per
    /// thread between commits: a commit per transaction allocates nothing.
    static COMMIT_HEADS: Cell<Vec<u64>> = const { Cell::new(Vec::new()) };
    static COMMIT_EXCLUDED: Cell<Vec<u64>> = const { Cell::new(Vec::new()) };
}

/// The durable state most recently written to the commit area.
pub(super) struct Durable {
    pub(super) rec: Record,
    /// Commit records written (a plain field: it changes only under this
    /// lock, so counting costs no cache line of its own).
    pub(super) commits: u64,
    /// The record before the one being written (a digest sums what the
    /// new one commits beyond it); kept to reuse its lists.
    prev: Record,
    /// Per partition: below this position every slot is committed by
    /// `rec` (or aborted), so a digest need look only from here.
    verify_from: Vec<u64>,
}

impl Durable {
    /// Write the current state as a record of `kind` (with the next
    /// sequence number), carrying `digest` (see [`Record::digest`]). The
    /// caller syncs the region.
    pub(super) fn write(
        &mut self,
        kind: RecordKind,
        digest: Option<u64>,
        region: &dyn Persist,
        geo: &Geometry,
    ) {
        self.rec.seq += 1;
        self.rec.kind = kind;
        self.rec.digest = digest;
        write_record(region, geo, &self.rec);
    }

    /// Remember the current record as the one the next commit extends.
    fn keep_as_prev(&mut self) {
        let (prev, rec) = (&mut self.prev, &self.rec);
        prev.seq = rec.seq;
        prev.epoch = rec.epoch;
        prev.excluded.clone_from(&rec.excluded);
        prev.heads.clone_from(&rec.heads);
        prev.tails.clone_from(&rec.tails);
    }
}

/// The durable state and group commit.
pub(super) struct Committing {
    pub(super) durable: CachePadded<Mutex<Durable>>,
    /// `commit()` calls satisfied by another caller's commit or with
    /// nothing to commit.
    pub(super) shared: CachePadded<AtomicU64>,
    /// Bumped after each batch of ordered-mode device writes
    /// ([`Journal::write_ordered`](super::Journal::write_ordered)).
    pub(super) ordered_gen: AtomicU64,
    /// The `ordered_gen` a device flush has covered (held while flushing,
    /// so a commit never passes a flush still in progress).
    pub(super) ordered_flushed: Mutex<u64>,
}

impl Committing {
    /// Starting from `rec`, the newest record on the media.
    pub(super) fn new(rec: &Record) -> Self {
        Self {
            ordered_gen: AtomicU64::new(0),
            ordered_flushed: Mutex::new(0),
            durable: CachePadded::new(Mutex::new(Durable {
                rec: Record {
                    // Room for every list a commit can write: the record's
                    // Vecs are updated in place, never reallocated.
                    excluded: {
                        let mut e = Vec::with_capacity(MAX_EXCLUDED);
                        e.extend_from_slice(&rec.excluded);
                        e
                    },
                    ..rec.clone()
                },
                commits: 0,
                prev: Record {
                    excluded: Vec::with_capacity(MAX_EXCLUDED),
                    ..rec.clone()
                },
                // Every slot below the heads is committed by `rec`: after
                // a format or a recovery the rings start empty there.
                verify_from: rec.heads.clone(),
            })),
            shared: CachePadded::default(),
        }
    }
}

/// Encode `rec`, write it to its place in the commit area and make it
/// durable.
///
/// Callers are the only writer of the commit area at the time: under the
/// durable-state lock, or before the journal's threads start (create,
/// recovery); nothing reads it while a journal runs.
pub(crate) fn write_record(region: &dyn Persist, geo: &Geometry, rec: &Record) {
    thread_local! {
        /// Encoding buffer, one per thread: reused, so a commit allocates
        /// nothing, and never written by another core, so encoding misses
        /// no cache line (a buffer in the shared durable state would be
        /// in the last committer's cache).
        static RECORD_BUF: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    }
    let off = geo.record_offset(rec.seq);
    let write = |buf: &mut Vec<u8>| {
        rec.encode_into(geo.record_size, buf);
        // Whole cache lines (records are line-aligned and sized; the bytes
        // past the crc are unused), so the copy can use non-temporal
        // stores: the lines need not be fetched from the core that wrote
        // the last record.
        buf.resize(
            buf.len().next_multiple_of(64).min(geo.record_size as usize),
            0,
        );
        if crate::bugs::active("commit_no_flush") && rec.kind == RecordKind::Commit {
            // Injected bug: the commit record is stored but never flushed.
            region.write(off, &buf[..]);
            return;
        }
        // SAFETY: see above: no other thread writes or reads the commit
        // area meanwhile.
        unsafe {
            if mutated(DroppedFlush::Record) {
                region.write_unshared(off, buf);
            } else {
                region.write_persist_unshared(off, &[&buf[..]]);
            }
        }
    };
    // A thread whose thread-locals are gone (exiting) uses a fresh buffer.
    if RECORD_BUF.try_with(|b| write(&mut b.borrow_mut())).is_err() {
        write(&mut Vec::new());
    }
}

impl Inner {
    /// Advance partition `p`'s `last_check` over staged/aborted slots.
    fn advance_last_check(&self, p: usize) -> u64 {
        self.parts[p].ring.advance_last_check()
    }

    /// Wait until every position of partition `p` below `head` is staged,
    /// aborted, or claimed by a transaction the commit's `cover` excludes.
    fn wait_passed(&self, p: usize, head: u64, cover: &Cover) -> Result<()> {
        let ring = &self.parts[p].ring;
        if ring.last_check.load(Ordering::Acquire) >= head {
            return Ok(());
        }
        let mut j = ring.scan_start(head);
        let wait = Backoff::new();
        loop {
            // A checkpoint may have freed (and a stager reused) the slots
            // this scan stopped at; it raises `last_check` past them first.
            j = j.max(ring.last_check.load(Ordering::Acquire));
            j = ring.scan_passed(j, head, |e| cover.covers(e));
            if j >= head {
                return Ok(());
            }
            // The claim is not published yet (a few instructions away), or
            // a freed hole is about to be marked aborted.
            wait.snooze();
            if self.shutdown.load(Ordering::Relaxed) {
                return Err(JournalError::Closed);
            }
        }
    }

    /// Commit worker of partition `p` (the paper's): advances `last_check`
    /// over flagged slots in the background, so that committers find it
    /// near the head. Committers advance it too when they find it behind,
    /// so a commit never waits for this thread to wake up, and the worker
    /// naps [`COMMIT_WORKER_NAP`] unless it found much to do, leaving the
    /// cores to the stagers.
    pub(super) fn commit_worker(&self, p: usize) {
        while !self.shutdown.load(Ordering::Relaxed) {
            // Far behind (stages without commits): come back soon, so that
            // the next commit does not scan thousands of slots itself.
            let passed = self.advance_last_check(p);
            std::thread::park_timeout(if passed >= COMMIT_WORKER_BUSY {
                COMMIT_WORKER_NAP / 10
            } else {
                COMMIT_WORKER_NAP
            });
        }
    }

    pub(super) fn commit(&self) -> Result<()> {
        self.check_running()?;
        // `finished` counts every transaction finished before this call;
        // once a durable commit has counted as many, they are all durable.
        let fin = self.stage.epochs.finished();
        if self.stage.epochs.is_durable(fin) {
            self.committing.shared.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        self.commit_covering(fin)
    }

    /// Write a commit record covering every transaction finished so far
    /// (at least the first `fin`), unless another commit does.
    pub(super) fn commit_covering(&self, fin: u64) -> Result<()> {
        // Commits run concurrently up to the record write, which is
        // serialised under `durable` and merges covers (see below).
        self.check_running()?;
        if self.stage.epochs.is_durable(fin) {
            self.committing.shared.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        // Which epochs this commit covers: every epoch up to the newest
        // begun, except those whose transaction is still open, which are
        // listed in the record as excluded. So a commit never waits for a
        // transaction in progress (it waits only when more than
        // MAX_EXCLUDED are open at once).
        let wait = Backoff::new();
        let cover = loop {
            if let Some(cover) = self
                .stage
                .epochs
                .cover_into(MAX_EXCLUDED, take_scratch(&COMMIT_EXCLUDED))
            {
                break cover;
            }
            wait.snooze();
            if self.shutdown.load(Ordering::Relaxed) {
                return Err(JournalError::Closed);
            }
        };
        // Snapshot every partition's index (the paper's commit_ts). Positions
        // past the ring's capacity belong to stagers still waiting for
        // space, necessarily of later epochs, and are excluded.
        let g = self.stage.global_lock.as_ref().map(lock_spinning);
        let mut heads = take_scratch(&COMMIT_HEADS);
        heads.extend(self.parts.iter().map(|part| {
            let h = part.ring.head.load(Ordering::SeqCst);
            h.min(part.tail.load(Ordering::SeqCst) + self.geo.slots)
        }));
        drop(g);
        // Wait until every partition has passed its snapshot: `last_check`
        // (advanced by the partition's commit worker, or here) over flagged
        // slots, and past it only slots of later or excluded epochs, which
        // the record keeps from replay.
        let counted = cover.counted;
        for (p, &h) in heads.iter().enumerate() {
            self.wait_passed(p, h, &cover)?;
        }
        // Ordered-mode data of the covered transactions (written before
        // they finished, so counted in `ordered_gen` by now) must be
        // durable on the device before the record makes them durable.
        let gen = self.committing.ordered_gen.load(Ordering::SeqCst);
        if gen > 0 {
            let mut flushed = self.committing.ordered_flushed.lock();
            if *flushed < gen && !crate::bugs::active("ordered_no_flush") {
                self.device.flush()?;
            }
            *flushed = (*flushed).max(gen);
        }
        // On persistent memory the stagers flushed the slots; on a disk
        // file (msync mode) they reach the file at a sync. There the
        // record goes out in the same sync as the slots it commits, with a
        // digest of them that recovery checks (one `fdatasync` per commit,
        // not a second one to order the record after the slots); a
        // version-2 journal syncs the slots first, as it always did.
        let msync = self.region.mode() == RegionMode::Msync;
        let one_sync = msync && self.geo.digest_records();
        if msync && !one_sync {
            self.region
                .sync()
                .map_err(|e| self.fail(Failure::RegionSync(e)))?;
        }
        let g = self.stage.global_lock.as_ref().map(lock_spinning);
        {
            let mut d = lock_spinning(&self.committing.durable);
            // The newest record may come from a commit that ran alongside
            // ours: covers taken one after the other are nested, but two
            // taken at the same time may each have seen a done mark the
            // other missed. Write the union (with the larger heads), so
            // the newest record commits everything either commit promised;
            // skip the write if the newest record already contains ours.
            if cover.is_within(d.rec.epoch, &d.rec.excluded) {
                self.committing.shared.fetch_add(1, Ordering::Relaxed);
            } else {
                if one_sync {
                    d.keep_as_prev();
                }
                let rec = &mut d.rec;
                cover.widen(&mut rec.epoch, &mut rec.excluded);
                for (dh, &h) in rec.heads.iter_mut().zip(&heads) {
                    *dh = (*dh).max(h);
                }
                let digest = one_sync.then(|| self.new_slots_digest(&mut d));
                d.write(RecordKind::Commit, digest, self.region.as_ref(), &self.geo);
                self.region
                    .sync()
                    .map_err(|e| self.fail(Failure::RegionSync(e)))?;
                d.commits += 1;
            }
            // Under the lock: every publisher holds it, so a plain store.
            self.stage.epochs.publish_durable_serialised(counted);
        }
        drop(g);
        keep_scratch(&COMMIT_HEADS, heads);
        keep_scratch(&COMMIT_EXCLUDED, cover.excluded);
        Ok(())
    }

    /// The [`Record::digest`] of `d.rec` over `d.prev`: the sum of
    /// [`slot_term`]s of the staged slots it newly commits, as recovery
    /// will recompute it from the media. Moves `d.verify_from` up to the
    /// first slot `d.rec` leaves uncommitted.
    ///
    /// Under the durable lock: no checkpoint can move a tail meanwhile,
    /// and every slot below the new heads is staged, aborted, or of an
    /// epoch the record does not cover (`wait_passed`).
    fn new_slots_digest(&self, d: &mut Durable) -> u64 {
        let Durable {
            rec,
            prev,
            verify_from,
            ..
        } = d;
        let mut sum = 0u64;
        let mut crc = [0u8; 4];
        for (p, part) in self.parts.iter().enumerate() {
            let mut first_open = rec.heads[p];
            for pos in verify_from[p].max(rec.tails[p])..rec.heads[p] {
                let meta = part.ring.slot(pos);
                let state = meta.state.load(Ordering::Acquire);
                if state == protocol::aborted(pos) {
                    continue;
                }
                let epoch = meta.epoch.load(Ordering::Relaxed);
                if state != protocol::staged(pos) || !rec.covers(epoch) {
                    // Still being written, or of an open or later epoch: a
                    // later record commits it (or it aborts).
                    first_open = first_open.min(pos);
                    continue;
                }
                if rec.newly_commits(prev, p, pos, epoch) {
                    self.region
                        .read(self.geo.slot_offset(p, pos) + SLOT_CRC_AT, &mut crc);
                    sum = sum.wrapping_add(slot_term(p, pos, u32::from_le_bytes(crc)));
                }
            }
            verify_from[p] = first_open;
        }
        sum
    }
}
