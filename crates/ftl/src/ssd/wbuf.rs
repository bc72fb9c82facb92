//! The write buffer and its flush to flash.
//!
//! Double-buffered and bounded: one half (`cap` pages, one per chip by
//! default, so a flush stripes over every chip) fills while the pages of
//! earlier flushes are being programmed. A flushed page keeps its slot until
//! its program ends, and at most `2 * cap` pages are held in all; a write
//! that finds no room waits for the earliest program to end (back-pressure,
//! for every scheduler).

use super::{Cause, Ssd, IN_BUFFER, UNMAPPED};
use crate::bigvec::prefetch;
use crate::error::FtlError;
use crate::store::{Oob, PageKind};

/// The write buffer: LPNs (and their data if the store keeps data) waiting
/// to be programmed, plus the flash page each one replaces; and the slots
/// of flushed pages whose programs have not ended yet.
#[derive(Clone)]
pub(super) struct WriteBuffer {
    pub(super) lpn: Vec<u32>,
    pub(super) prev: Vec<u32>,
    pub(super) data: Vec<u8>,
    /// Pages of the filling half (a flush programs this many).
    pub(super) cap: usize,
    pub(super) page: usize,
    pub(super) inflight: InFlight,
    /// A superset of the filling half's LPNs, bit `lpn % 1024` (a few
    /// percent of false hits with one page per chip): GC's copy tests it
    /// before scanning `lpn`, a mispredicted loop per copy otherwise.
    pub(super) filter: [u64; 16],
}

/// When each flushed page's program ends (its slot frees then), as
/// `(end << 1) | is_mapping_page`, ascending: mapping write-backs take
/// slots too (they hold back writes) but are not host data (the bound is on
/// host data). Sorted, so the scheduler's "when is there room" is one index
/// (it is asked at every dispatch decision); programs end mostly in the
/// order placed, so inserts land near the back. A plain vector whose
/// front is `head`: popping the front is a step, and an insert moves only
/// the few later entries (a ring buffer's insert and indexing cost more).
#[derive(Clone, Default)]
pub(super) struct InFlight {
    keys: Vec<u64>,
    head: usize,
    /// How many of the keys are host data pages, so that `held_at` need
    /// not count them.
    host: usize,
    /// While a flush places its programs (nothing reads the list then),
    /// its keys are only collected here and merged in at its end: one
    /// sort of a few dozen keys and one pass instead of a search and a
    /// `memmove` per key.
    staged: Vec<u64>,
    batching: bool,
}

impl InFlight {
    pub(super) fn with_capacity(n: usize) -> Self {
        InFlight {
            keys: Vec::with_capacity(n),
            head: 0,
            host: 0,
            staged: Vec::with_capacity(n),
            batching: false,
        }
    }
    /// Collect the keys pushed from now on until [`end_batch`](Self::end_batch).
    fn begin_batch(&mut self) {
        self.batching = true;
    }
    /// Merge the collected keys in (the same list as pushing each).
    fn end_batch(&mut self) {
        self.batching = false;
        if self.staged.is_empty() {
            return;
        }
        self.staged.sort_unstable();
        let n = self.keys.len();
        if self.head > 0 && self.head == n {
            self.keys.clear();
            self.head = 0;
        } else if self.head >= 64 && 2 * self.head >= n {
            self.keys.drain(..self.head);
            self.head = 0;
        }
        let n = self.keys.len();
        let m = self.staged.len();
        self.keys.resize(n + m, 0);
        // Merge from the back: each later key moves once.
        let (keys, staged) = (&mut self.keys, &self.staged);
        let (mut i, mut j) = (n, m);
        // Branch-free: which side moves is data (a mispredict each).
        let head = self.head;
        while j > 0 {
            let s = staged[j - 1];
            let k = if i > head { keys[i - 1] } else { 0 };
            let take_old = i > head && k > s;
            keys[i + j - 1] = if take_old { k } else { s };
            i -= usize::from(take_old);
            j -= usize::from(!take_old);
        }
        self.staged.clear();
    }
    #[inline]
    fn live(&self) -> &[u64] {
        &self.keys[self.head..]
    }
    #[inline]
    fn push(&mut self, k: u64) {
        self.host += usize::from(k & 1 == 0);
        if self.batching {
            self.staged.push(k);
            return;
        }
        let n = self.keys.len();
        // After the entries `<= k`: most land a few from the back, some
        // far (mapping write-backs queue up far ahead). Gallop back from
        // the end (1, 2, 4, ... entries), then search that stretch.
        let mut at = n;
        if n > self.head && self.keys[n - 1] > k {
            // `keys[hi..]` are all > k.
            let mut hi = n - 1;
            let mut step = 1;
            let lo = loop {
                let lo = hi.saturating_sub(step).max(self.head);
                if lo == self.head || self.keys[lo] <= k {
                    break lo;
                }
                hi = lo;
                step *= 2;
            };
            at = lo + self.keys[lo..hi].partition_point(|&x| x <= k);
        }
        if self.head > 0 && self.head == n {
            // Empty: start over at the front.
            self.keys.clear();
            self.head = 0;
            at = 0;
        } else if self.head >= 64 && 2 * self.head >= n {
            // Drop the popped prefix now and then.
            self.keys.drain(..self.head);
            at -= self.head;
            self.head = 0;
        }
        self.keys.insert(at, k);
    }
    #[inline]
    fn front(&self) -> Option<u64> {
        self.keys.get(self.head).copied()
    }
    #[inline]
    fn pop_front(&mut self) -> Option<u64> {
        let k = self.front()?;
        self.head += 1;
        self.host -= usize::from(k & 1 == 0);
        Some(k)
    }
    #[inline]
    fn back(&self) -> Option<u64> {
        self.live().last().copied()
    }
}

impl WriteBuffer {
    /// Add `lpn` (replacing flash page `prev`) to the filling half.
    #[inline]
    pub(super) fn push(&mut self, lpn: u32, prev: u32) {
        self.lpn.push(lpn);
        self.prev.push(prev);
        self.filter[(lpn >> 6) as usize & 15] |= 1u64 << (lpn & 63);
    }
    /// Whether `lpn` is in the filling half.
    #[inline]
    pub(super) fn holds(&self, lpn: u32) -> bool {
        self.filter[(lpn >> 6) as usize & 15] & (1u64 << (lpn & 63)) != 0 && self.lpn.contains(&lpn)
    }
    /// Empty the filling half.
    pub(super) fn clear(&mut self) {
        self.lpn.clear();
        self.prev.clear();
        self.filter = [0; 16];
    }
    pub(super) fn len(&self) -> usize {
        self.lpn.len()
    }
    pub(super) fn full(&self) -> bool {
        self.lpn.len() >= self.cap
    }
    pub(super) fn slot_data(&mut self, slot: usize) -> &mut [u8] {
        &mut self.data[slot * self.page..(slot + 1) * self.page]
    }
    /// Pages the buffer may hold: both halves.
    pub(super) fn bound(&self) -> usize {
        2 * self.cap
    }
    /// A flushed page (or mapping write-back) whose program ends at `end`.
    pub(super) fn push_inflight(&mut self, end: u64, mapping: bool) {
        self.inflight.push((end << 1) | u64::from(mapping));
    }
    /// The earliest program end among the slots taken, removing it.
    pub(super) fn pop_inflight(&mut self) -> Option<u64> {
        self.inflight.pop_front().map(|k| k >> 1)
    }
    /// Forget the flushed pages whose programs ended by `t`.
    pub(super) fn release(&mut self, t: u64) {
        while let Some(k) = self.inflight.front() {
            if k >> 1 > t {
                break;
            }
            self.inflight.pop_front();
        }
    }
    /// Host data pages held at `t`: filling plus flushed and not yet
    /// programmed.
    pub(super) fn held_at(&self, t: u64) -> usize {
        // The host pages that ended by `t` are a prefix, short where it is
        // asked often (just after `release`).
        let ended = self
            .inflight
            .live()
            .iter()
            .take_while(|&&k| k >> 1 <= t)
            .filter(|&&k| k & 1 == 0)
            .count();
        self.len() + self.inflight.host - ended
    }
    /// The earliest time at which `pages` more pages fit (a flush of the
    /// filling half moves its pages to `inflight`: the total is the same).
    /// Large writes that can never fit at once get the time every flushed
    /// page is programmed; they then wait page by page.
    pub(super) fn room_at(&self, pages: usize) -> u64 {
        let live = self.inflight.live();
        let over = (live.len() + self.len() + pages).saturating_sub(self.bound());
        match over {
            0 => 0,
            _ => live.get(over - 1).or(live.last()).map_or(0, |k| k >> 1),
        }
    }
    /// When every flushed page is programmed.
    pub(super) fn drained_at(&self) -> u64 {
        self.inflight.back().map_or(0, |k| k >> 1)
    }
}

impl Ssd {
    /// Drop buffer slot `slot`, moving the last slot into its place.
    pub(super) fn buffer_remove(&mut self, slot: usize) {
        let last = self.buf.len() - 1;
        if slot != last {
            let moved = self.buf.lpn[last];
            self.buf.lpn[slot] = moved;
            self.buf.prev[slot] = self.buf.prev[last];
            if self.has_data {
                let page = self.buf.page;
                self.buf
                    .data
                    .copy_within(last * page..(last + 1) * page, slot * page);
            }
            self.l2p[moved as usize] = IN_BUFFER | slot as u32;
        }
        self.buf.lpn.pop();
        self.buf.prev.pop();
    }

    /// Program every buffered page (striped over the chips), placing the
    /// operations at `t`; each page's slot stays taken until its program
    /// ends. Returns when the last of these data programs ends: the mapping
    /// write-backs they cause are placed after them and any GC they set off
    /// runs in the background, and neither is waited for.
    pub(crate) fn flush_buffer(&mut self, t: u64) -> Result<u64, FtlError> {
        if self.buf.len() == 0 {
            return Ok(t);
        }
        self.buf.inflight.begin_batch();
        let r = self.flush_filling(t);
        self.buf.inflight.end_batch();
        r
    }

    /// [`flush_buffer`](Self::flush_buffer) of a non-empty buffer, its
    /// slots' program ends collected (nothing reads them meanwhile).
    fn flush_filling(&mut self, t: u64) -> Result<u64, FtlError> {
        self.stats.buffer_flushes += 1;
        let outer = self.horizon;
        self.horizon = t;
        let mut data_end = t;
        // Fetch what the loop below touches at random all at once: the
        // owner entries and block counts of the pages being replaced, the
        // cache's state of each LPN. Independent misses overlap; in the loop
        // they would come one after the other.
        for slot in 0..self.buf.len() {
            let prev = self.buf.prev[slot];
            if prev != UNMAPPED {
                prefetch(&self.flash.p2l[prev as usize]);
                prefetch(&self.flash.valid[self.flash.block_of(prev) as usize]);
            }
            if self.cache_prefetches {
                self.cache.prefetch(self.buf.lpn[slot]);
            }
        }
        // The mapping work, placed after every data program (the cache
        // appends each page's actions to it directly: a copy per page
        // through a scratch list cost a memcpy call each).
        let mut deferred = self.take_acts();
        let mut result = Ok(());
        for slot in 0..self.buf.len() {
            let lpn = self.buf.lpn[slot];
            let ppa = match self.alloc_host(t) {
                Ok(p) => p,
                Err(e) => {
                    result = Err(e);
                    break;
                }
            };
            let end = self.op_program(ppa, t);
            data_end = data_end.max(end);
            self.buf.push_inflight(end, false);
            self.seq += 1;
            if self.has_data {
                let oob = Oob {
                    kind: PageKind::Data,
                    id: lpn,
                    seq: self.seq,
                    aux: 0,
                };
                let page = self.buf.page;
                if let Err(e) =
                    self.store
                        .program(ppa, oob, &self.buf.data[slot * page..(slot + 1) * page])
                {
                    result = Err(e.into());
                    break;
                }
            }
            // Read after allocating: GC may have moved the old copy.
            let prev = self.buf.prev[slot];
            if prev != UNMAPPED {
                self.flash.invalidate(prev, t);
            }
            self.l2p[lpn as usize] = ppa;
            self.flash.fill(ppa, lpn, t);
            self.mark_map_stale(lpn);
            self.stats.flash_data_programs += 1;
            if self
                .cache
                .write(lpn, self.per_map_page.div(lpn), &mut deferred)
            {
                self.stats.cmt_write_hits += 1;
            } else {
                self.stats.cmt_write_misses += 1;
            }
        }
        if result.is_ok() && !deferred.is_empty() {
            result = self.exec_acts(&deferred, t, Cause::Write).map(|_| ());
        }
        deferred.clear();
        self.put_acts(deferred);
        if result.is_err() {
            // Keep what was not programmed mapped to its old copy.
            for slot in 0..self.buf.len() {
                let lpn = self.buf.lpn[slot] as usize;
                if self.l2p[lpn] & IN_BUFFER != 0 && self.l2p[lpn] != UNMAPPED {
                    self.l2p[lpn] = self.buf.prev[slot];
                }
            }
        }
        self.buf.clear();
        result?;
        self.horizon = outer;
        self.last_flush_end = data_end;
        Ok(data_end)
    }
}
