//! The lock-free core of the journal, in one place so that the loom model
//! (`tests/loom.rs`, run with `RUSTFLAGS="--cfg loom"`) checks the very code
//! the journal runs: a ring's slot states (claim → `claimed` → `staged` or
//! `aborted`, and `last_check` over them), per-transaction epochs with done
//! marks, and the commit's snapshot of both. Under `--cfg loom` the atomics
//! are loom's.
//!
//! Public only for the model; not a stable API.

#[cfg(loom)]
pub use loom::sync::atomic::{AtomicU64, Ordering};
#[cfg(not(loom))]
pub use std::sync::atomic::{AtomicU64, Ordering};

const ST_STAGED: u64 = 1;
const ST_ABORTED: u64 = 2;
const ST_CLAIMED: u64 = 3;

/// Slot state: staged at ring position `pos`.
#[inline]
pub fn staged(pos: u64) -> u64 {
    (pos << 2) | ST_STAGED
}

/// Slot state: aborted at ring position `pos`.
#[inline]
pub fn aborted(pos: u64) -> u64 {
    (pos << 2) | ST_ABORTED
}

/// Slot state: claimed (being written) at ring position `pos`.
#[inline]
pub fn claimed(pos: u64) -> u64 {
    (pos << 2) | ST_CLAIMED
}

/// Keeps hot atomics on their own cache lines (no false sharing): 128
/// bytes on x86-64, whose prefetcher pulls cache lines in pairs. Plain
/// data, so the loom model checks the same layout-free code.
pub use crossbeam::utils::CachePadded;

/// DRAM state of one slot, one cache line each (neighbouring slots are
/// staged by different threads). 64 bytes, not [`CachePadded`]'s 128: a
/// ring has a slot per journal block, and the pair prefetcher's sharing
/// between two neighbours costs less than doubling every ring's metadata.
#[repr(align(64))]
#[derive(Default)]
pub struct SlotMeta {
    /// `claimed`/`staged`/`aborted(pos)` once used at ring position `pos`.
    pub state: AtomicU64,
    /// Block number of the slot (published by `state`).
    pub block: AtomicU64,
    /// Epoch of the transaction that claimed the slot (published by `state`).
    pub epoch: AtomicU64,
}

impl SlotMeta {
    /// [`Ring::publish_claim`] on a slot already looked up.
    #[inline]
    pub fn publish_claim(&self, pos: u64, block: u64, epoch: u64) {
        self.block.store(block, Ordering::Relaxed);
        self.epoch.store(epoch, Ordering::Relaxed);
        self.state.store(claimed(pos), Ordering::Release);
    }

    /// [`Ring::publish_staged`] on a slot already looked up.
    #[inline]
    pub fn publish_staged(&self, pos: u64) {
        self.state.store(staged(pos), Ordering::Release);
    }
}

/// How far a commit's scan must carry a ring's `last_check` (or the epochs'
/// `done_below`) before the commit publishes it (see [`Ring::scan_start`]).
pub const PUBLISH_STRIDE: u64 = 8;

/// The lock-free part of one partition ring.
pub struct Ring {
    slots: u64,
    /// Next ring position to claim.
    pub head: CachePadded<AtomicU64>,
    /// Every position below this is staged or aborted (the paper's
    /// `last_check`, exclusive).
    pub last_check: CachePadded<AtomicU64>,
    meta: Box<[SlotMeta]>,
}

impl Ring {
    /// A ring of `slots` slots whose first position is `start`.
    pub fn new(slots: u64, start: u64) -> Self {
        Self {
            slots,
            head: CachePadded::new(AtomicU64::new(start)),
            last_check: CachePadded::new(AtomicU64::new(start)),
            meta: (0..slots).map(|_| SlotMeta::default()).collect(),
        }
    }

    /// The slot of ring position `pos`.
    #[inline]
    pub fn slot(&self, pos: u64) -> &SlotMeta {
        self.slot_at(pos % self.slots)
    }

    /// The slot at index `index` (`pos % slots`, for callers that need the
    /// index for other things too: one division per stage, not three).
    #[inline]
    pub fn slot_at(&self, index: u64) -> &SlotMeta {
        &self.meta[index as usize]
    }

    /// Claim the next position: the one atomic add of the paper. The slot
    /// belongs to the caller alone until it publishes it.
    #[inline]
    pub fn claim(&self) -> u64 {
        self.head.fetch_add(1, Ordering::AcqRel)
    }

    /// Say which epoch claimed `pos` (before writing the slot), so that a
    /// commit not covering that epoch need not wait for the copy.
    #[inline]
    pub fn publish_claim(&self, pos: u64, block: u64, epoch: u64) {
        self.slot(pos).publish_claim(pos, block, epoch);
    }

    /// The slot's data and flag are durable.
    #[inline]
    pub fn publish_staged(&self, pos: u64) {
        self.slot(pos).publish_staged(pos);
    }

    /// The slot's `ABORTED` flag is durable (or it was never written and
    /// never will be: an abandoned position).
    #[inline]
    pub fn publish_aborted(&self, pos: u64) {
        self.slot(pos).state.store(aborted(pos), Ordering::Release);
    }

    /// True if `pos` is staged (Acquire: its writes are visible).
    #[inline]
    pub fn is_staged(&self, pos: u64) -> bool {
        self.slot(pos).state.load(Ordering::Acquire) == staged(pos)
    }

    /// True if `pos` is aborted.
    #[inline]
    pub fn is_aborted(&self, pos: u64) -> bool {
        self.slot(pos).state.load(Ordering::Acquire) == aborted(pos)
    }

    /// Advance `last_check` over staged/aborted slots (the commit worker's
    /// step). Returns how many slots it passed.
    pub fn advance_last_check(&self) -> u64 {
        let start = self.last_check.load(Ordering::Acquire);
        let j = self.checked_from(start, u64::MAX);
        if j > start {
            self.last_check.fetch_max(j, Ordering::AcqRel);
        }
        j - start
    }

    /// The first position in `[start, end)` that is neither staged nor
    /// aborted, or `end`.
    fn checked_from(&self, start: u64, end: u64) -> u64 {
        self.first_from(start, end, |j, m| {
            let st = m.state.load(Ordering::Acquire);
            st == staged(j) || st == aborted(j)
        })
    }

    /// The first position in `[from, end)` whose slot fails `ok`, or `end`.
    /// Steps the slot index along instead of dividing per position (a
    /// 64-bit division costs more than the load it locates).
    #[inline]
    fn first_from(&self, from: u64, end: u64, ok: impl Fn(u64, &SlotMeta) -> bool) -> u64 {
        let mut j = from;
        let mut index = (from % self.slots) as usize;
        while j < end && ok(j, &self.meta[index]) {
            j += 1;
            index += 1;
            if index == self.meta.len() {
                index = 0;
            }
        }
        j
    }

    /// For a commit: has position `j` (slot `m`) passed — staged, aborted, or claimed
    /// by an epoch the commit does not cover (`covers(epoch)` false)? A
    /// claim not yet published, or a covered slot still being written
    /// (impossible once its epoch is done), has not.
    #[inline]
    fn slot_passed(j: u64, m: &SlotMeta, covers: impl Fn(u64) -> bool) -> bool {
        let st = m.state.load(Ordering::Acquire);
        st == staged(j)
            || st == aborted(j)
            || (st == claimed(j) && !covers(m.epoch.load(Ordering::Relaxed)))
    }

    /// For a commit: the first position in `[from, head)` that has not
    /// [passed](Self::slot_passed), or `head` if all have. The caller waits
    /// (a claim is a few instructions from being published) and retries
    /// from the returned position.
    pub fn scan_passed(&self, from: u64, head: u64, covers: impl Fn(u64) -> bool) -> u64 {
        self.first_from(from, head, |j, m| Self::slot_passed(j, m, &covers))
    }

    /// Where a commit starts scanning: past `last_check` over staged and
    /// aborted slots. The result is published as the new `last_check` only
    /// once it is [`PUBLISH_STRIDE`] ahead: a commit per transaction would
    /// otherwise write the line every other core's commit reads next, and
    /// rescanning a few slots whose states no longer change costs less.
    /// The scan stops at the commit's `head`: the slots from there on are
    /// the next to be claimed, and reading their lines here would make
    /// the stagers fetch them back from this core.
    pub fn scan_start(&self, head: u64) -> u64 {
        let start = self.last_check.load(Ordering::Acquire);
        let j = self.checked_from(start, head);
        if j - start >= PUBLISH_STRIDE {
            self.last_check.fetch_max(j, Ordering::AcqRel);
        }
        j
    }
}

/// What a commit covers: every epoch up to `top` except `excluded`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cover {
    /// `finished` as read before looking at the epochs: every transaction
    /// counted there is covered.
    pub counted: u64,
    /// Newest epoch begun when the commit looked.
    pub top: u64,
    /// Epochs `<= top` whose transaction was still open.
    pub excluded: Vec<u64>,
}

impl Cover {
    /// True if the transaction of `epoch` is committed by this cover.
    pub fn covers(&self, epoch: u64) -> bool {
        epoch <= self.top && !self.excluded.contains(&epoch)
    }

    /// True if this cover commits every epoch `other` commits.
    pub fn contains(&self, other: &Cover) -> bool {
        other.is_within(self.top, &self.excluded)
    }

    /// True if the cover (`top`, `excluded`) commits every epoch this one
    /// commits (the durable record already says what this commit would).
    pub fn is_within(&self, top: u64, excluded: &[u64]) -> bool {
        top >= self.top
            && excluded
                .iter()
                .all(|&e| e > self.top || self.excluded.contains(&e))
    }

    /// The cover committing every epoch either commits. Covers computed
    /// one after another are nested, but two commits computing theirs at
    /// the same time may each see a done mark the other missed; the record
    /// written last must commit both.
    pub fn union(&self, other: &Cover) -> Cover {
        let (mut top, mut excluded) = (other.top, other.excluded.clone());
        self.widen(&mut top, &mut excluded);
        Cover {
            counted: self.counted.max(other.counted),
            top,
            excluded,
        }
    }

    /// [`union`](Self::union) in place: widen the cover (`top`, `excluded`)
    /// to commit every epoch this one commits too. The durable record is
    /// updated this way under its lock; nothing is allocated when
    /// `excluded` has room, so no commit frees a Vec another thread's
    /// commit allocated (a cross-thread free takes the allocator's slow
    /// path).
    pub fn widen(&self, top: &mut u64, excluded: &mut Vec<u64>) {
        // An epoch stays excluded if neither cover commits it: of the old
        // list, those this cover does not commit either; of ours, those
        // past the old top (ours up to it are already in the old list when
        // the old cover does not commit them).
        excluded.retain(|&e| !self.covers(e));
        let old_top = *top;
        excluded.extend(self.excluded.iter().filter(|&&e| e > old_top));
        excluded.sort_unstable();
        *top = old_top.max(self.top);
    }
}

/// Per-transaction epochs: numbers, done marks, and the finished count.
pub struct Epochs {
    counters: CachePadded<Counters>,
    /// Entry `e % len` holds `e` once epoch `e` is done (finished or
    /// aborted); 0 is never a live epoch.
    done: Box<[CachePadded<AtomicU64>]>,
    /// Every epoch below this is done.
    done_below: CachePadded<AtomicU64>,
}

/// The counters a thread touches one right after another: a transaction's
/// finish, then the commit (an fsync) that reads all three, then the next
/// begin. On one cache line, the first of these finds the line in the
/// other core's cache and the rest find it in its own; on a line each,
/// every one of them would.
struct Counters {
    /// Next epoch to begin.
    next: AtomicU64,
    /// Non-empty transactions finished so far.
    finished: AtomicU64,
    /// `Cover::counted` of the newest durable commit.
    durable_finished: AtomicU64,
}

impl Epochs {
    /// Epochs from `first` (>= 1), with a ring of `ring` done marks: at most
    /// that many transactions can begin past the oldest open one.
    pub fn new(first: u64, ring: usize) -> Self {
        assert!(first >= 1 && ring >= 1);
        Self {
            counters: CachePadded::new(Counters {
                next: AtomicU64::new(first),
                finished: AtomicU64::new(0),
                durable_finished: AtomicU64::new(0),
            }),
            done: (0..ring).map(|_| CachePadded::default()).collect(),
            done_below: CachePadded::new(AtomicU64::new(first)),
        }
    }

    #[inline]
    fn mark(&self, epoch: u64) -> &AtomicU64 {
        let len = self.done.len() as u64;
        // The journal's ring is a power of two: a mask, not a division.
        let i = if len.is_power_of_two() {
            epoch & (len - 1)
        } else {
            epoch % len
        };
        &self.done[i as usize]
    }

    /// A new transaction's epoch.
    #[inline]
    pub fn begin(&self) -> u64 {
        self.counters.next.fetch_add(1, Ordering::SeqCst)
    }

    /// True if `epoch`'s done mark is free to use (the epoch that used it
    /// before is done).
    #[inline]
    pub fn has_room(&self, epoch: u64) -> bool {
        epoch < self.done_below.load(Ordering::Relaxed) + self.done.len() as u64
            || epoch < self.advance_and_publish() + self.done.len() as u64
    }

    /// Like [`advance_done_below`](Self::advance_done_below), but always
    /// publishes what it found. Room for an epoch must be granted only on
    /// a published `done_below`: the epoch granted reuses the done mark of
    /// one a lap older, and once it finishes that mark no longer shows the
    /// older epoch done, so a later scan starting below the older epoch
    /// (from a stale published value) would stop there for ever, and every
    /// `begin` would wait for room that never comes.
    fn advance_and_publish(&self) -> u64 {
        let e = self.advance_done_below();
        self.done_below.fetch_max(e, Ordering::AcqRel).max(e)
    }

    /// The transaction of `epoch` finished: done mark first, then (if it
    /// staged anything) the count, so that a commit which reads the count
    /// and then the marks sees the mark of every transaction counted.
    #[inline]
    pub fn finish(&self, epoch: u64, staged_any: bool) {
        self.mark(epoch).store(epoch, Ordering::SeqCst);
        if staged_any {
            self.counters.finished.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// The transaction of `epoch` aborted (its `ABORTED` flags durable).
    #[inline]
    pub fn abort(&self, epoch: u64) {
        self.mark(epoch).store(epoch, Ordering::SeqCst);
    }

    /// Advance past `done_below` over done epochs; returns the first epoch
    /// not done. Published as the new `done_below` only once it is
    /// [`PUBLISH_STRIDE`] ahead: every commit calls this, and a write per
    /// commit would move the line to this core for the other cores' next
    /// commit to fetch back; reading a few stable done marks again is
    /// cheaper.
    pub fn advance_done_below(&self) -> u64 {
        let start = self.done_below.load(Ordering::Acquire);
        let mut e = start;
        while self.mark(e).load(Ordering::Acquire) == e {
            e += 1;
        }
        if e >= start + PUBLISH_STRIDE {
            self.done_below.fetch_max(e, Ordering::AcqRel).max(e)
        } else {
            e
        }
    }

    /// Non-empty transactions finished so far.
    #[inline]
    pub fn finished(&self) -> u64 {
        self.counters.finished.load(Ordering::SeqCst)
    }

    /// True once a durable commit covers the first `fin` finished
    /// transactions.
    #[inline]
    pub fn is_durable(&self, fin: u64) -> bool {
        self.counters.durable_finished.load(Ordering::SeqCst) >= fin
    }

    /// A commit's view: the finished count, then the newest epoch begun,
    /// then which epochs up to it are still open. `None` if more than
    /// `max_excluded` are open (retry later). Read the ring heads after this.
    pub fn cover(&self, max_excluded: usize) -> Option<Cover> {
        self.cover_into(max_excluded, Vec::new())
    }

    /// [`cover`](Self::cover), listing the excluded epochs in `excluded`
    /// (cleared first): a caller that keeps the list between commits
    /// allocates nothing.
    pub fn cover_into(&self, max_excluded: usize, mut excluded: Vec<u64>) -> Option<Cover> {
        let counted = self.counters.finished.load(Ordering::SeqCst);
        let top = self.counters.next.load(Ordering::SeqCst) - 1;
        let below = self.advance_done_below();
        excluded.clear();
        excluded.extend(
            (below..=top)
                .filter(|&e| self.mark(e).load(Ordering::SeqCst) != e)
                .take(max_excluded + 1),
        );
        (excluded.len() <= max_excluded).then_some(Cover {
            counted,
            top,
            excluded,
        })
    }

    /// The commit of a cover with this `counted` is durable. The caller
    /// serialises every publisher (the journal does it under its
    /// durable-state lock), so this is a plain store, not a
    /// read-modify-write that waits for the line the other cores' commits
    /// just read.
    #[inline]
    pub fn publish_durable_serialised(&self, counted: u64) {
        if self.counters.durable_finished.load(Ordering::Relaxed) < counted {
            self.counters
                .durable_finished
                .store(counted, Ordering::Release);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::{Cover, Epochs};

    /// Room granted after a scan that gained fewer than `PUBLISH_STRIDE`
    /// epochs: the epoch a lap later reuses a done mark the published
    /// `done_below` had not passed. It used to stay unpublished, and once the
    /// later epoch finished, every scan stopped at the older one for ever
    /// (both bench threads spun in `begin`).
    #[test]
    fn room_is_granted_only_on_a_published_done_below() {
        let ring = 16;
        let e = Epochs::new(1, ring);
        for _ in 1..=3 {
            let x = e.begin();
            e.finish(x, true);
        }
        // Epochs 4..=16 open, then 17, which reuses epoch 1's mark.
        let open: Vec<u64> = (4..=16).map(|_| e.begin()).collect();
        let lap = e.begin();
        assert_eq!(lap, 1 + ring as u64);
        assert!(e.has_room(lap), "epoch 1 is done: its mark may be reused");
        e.finish(lap, true);
        for x in open {
            e.finish(x, true);
        }
        // Every epoch up to 17 is done: a second lap past it must find room.
        for _ in 18..=40 {
            let x = e.begin();
            assert!(
                e.has_room(x),
                "epoch {x}: no room although all before it are done"
            );
            e.finish(x, true);
        }
        assert_eq!(e.advance_done_below(), 41);
    }

    fn cover(top: u64, excluded: &[u64]) -> Cover {
        Cover {
            counted: 0,
            top,
            excluded: excluded.to_vec(),
        }
    }

    /// Two commits scanning at once: one saw epoch 1 done but not 2, the
    /// other 2 but not 1. Neither contains the other; their union commits
    /// both, and contains each.
    #[test]
    fn union_of_unordered_covers_commits_both() {
        let a = cover(2, &[2]);
        let b = cover(2, &[1]);
        assert!(!a.contains(&b) && !b.contains(&a));
        let u = a.union(&b);
        assert_eq!(u, cover(2, &[]));
        assert!(u.contains(&a) && u.contains(&b));
    }

    /// Every pair of small covers: the union commits exactly what either
    /// commits and contains both; `contains` never claims too much.
    #[test]
    fn union_is_exact_over_small_covers() {
        let mut covers = Vec::new();
        for top in 0..6u64 {
            for mask in 0..(1u32 << top) {
                let excluded: Vec<u64> = (1..=top).filter(|e| (mask >> (e - 1)) & 1 == 1).collect();
                covers.push(cover(top, &excluded));
            }
        }
        for a in &covers {
            for b in &covers {
                let u = a.union(b);
                for e in 0..8 {
                    assert_eq!(u.covers(e), a.covers(e) || b.covers(e), "{a:?} {b:?} {e}");
                }
                assert!(u.contains(a) && u.contains(b), "{a:?} {b:?}");
                // `contains` may say no when the covers differ only in
                // epochs past both tops (a needless record), never yes
                // wrongly (a lost commit).
                let within = (0..8).all(|e| !b.covers(e) || a.covers(e));
                assert!(!a.contains(b) || within, "{a:?} {b:?}");
                assert!(u.excluded.windows(2).all(|w| w[0] < w[1]), "{u:?}");
            }
        }
    }

    #[test]
    fn union_keeps_what_neither_covers() {
        let a = cover(5, &[3, 5]);
        let b = cover(7, &[3, 6]);
        let u = a.union(&b);
        assert_eq!(u, cover(7, &[3, 6]));
        for e in 1..=8 {
            assert_eq!(u.covers(e), a.covers(e) || b.covers(e), "epoch {e}");
        }
        assert!(b.contains(&cover(4, &[3])));
        assert!(!b.contains(&cover(6, &[])));
    }
}
