//! Block allocation and per-chip garbage collection.
//!
//! GC runs in the background, one job (one victim block) at a time per
//! chip, as a sequence of steps: one on-chip copy-back per valid page, then
//! the erase. Steps take only the chip's idle time ahead of the host's next
//! operation (user I/O first; a step already started is not preempted), and
//! the host's writes go to chips without a GC job while any chip has none.
//! A chip that must open a block with at most `urgent_free_blocks` free
//! finishes its GC at once, ahead of host I/O (the hard floor). The victim
//! is erased, and reusable, only after its last copy.
//!
//! The mapping updates of a data block's GC (DFTL and page-granular PTSD
//! write mapping pages back, entry-granular PTSD may evict) are background
//! transactions too: queued when the victim is erased, each placed only in
//! a chip's idle time ahead of the host's next operation (its mapping-page
//! read on the chip holding the old copy, its program on a chip without a
//! GC job), so user I/O overtakes them. Until then the moved entries live
//! in controller DRAM (a lookup sees them; the engine's map is exact). Past
//! `2 x pages_per_block` pending pages the oldest is done at once (the
//! table's bound), and a write-back of a page written since is dropped.

use super::{Cause, Ssd, IN_BUFFER, UNMAPPED};
use crate::bigvec::prefetch;
use crate::error::FtlError;
use crate::flash::{Stream, INVALID, POOL_DATA, POOL_MAP, TRIM_OWNER};
use crate::mapping::MapAction;
use crate::policy::BlockView;
use crate::store::{Oob, PageKind};

/// One chip's GC under way: the victim and how far it has got.
#[derive(Clone, Debug)]
pub(super) struct GcJob {
    victim: u32,
    /// Next page offset in the victim to look at.
    next: u32,
    /// Steps start at or after this (the previous step's end).
    cursor: u64,
    /// LPNs moved so far (their mapping is updated at the end).
    moved: Vec<u32>,
}

/// A mapping-page write-back of GC waiting for idle time.
#[derive(Clone, Copy, Debug)]
pub(super) struct MapWork {
    mpn: u32,
    /// Its flash copy must be read first (not yet done).
    read_first: bool,
    /// Not before this (the GC's end, then the read's).
    ready: u64,
    /// The sequence number when queued: a later write of the page makes
    /// this one moot.
    seq: u64,
    /// The read of the page's copy at `read_at` cannot start before this
    /// (a failed try's bound; `from` and the reservations only grow), so
    /// the pump before each host operation need not search for it again.
    read_not_before: u64,
    read_at: u32,
    /// Where every chip failed to take its program: no chip could start it
    /// before this (0: no bound), as long as the chips tried then are
    /// still all the candidates ([`ProgramBound`]).
    prog: ProgramBound,
}

/// A failed search's lower bound on when a mapping page's program can
/// start on any candidate chip. Starts only move later (reservations are
/// only added, `from` only grows); the bound is kept only while no chip
/// left out then has become a candidate: a chip skipped for its GC job
/// still has one, or no chip was skipped.
#[derive(Clone, Copy, Debug, Default)]
struct ProgramBound {
    not_before: u64,
    /// The chips with a GC job then, when they were skipped.
    skipped: Option<u64>,
}

impl Ssd {
    // ---- allocation -------------------------------------------------------

    pub(super) fn alloc(
        &mut self,
        stream: Stream,
        chip: u32,
        t: u64,
    ) -> Result<Option<u32>, FtlError> {
        if let Some(p) = self.flash.alloc_in_open(stream, chip) {
            return Ok(Some(p));
        }
        if self.gc_depth < 4 && self.flash.free_count(chip) <= self.cfg.gc.urgent_free_blocks {
            self.gc_urgent(chip, t)?;
            if let Some(p) = self.flash.alloc_in_open(stream, chip) {
                return Ok(Some(p));
            }
        }
        // Keep the last free block of a chip for GC.
        let keep = if stream == Stream::GcData { 0 } else { 1 };
        if self.flash.open_block(stream, chip, keep) {
            if self
                .victims
                .start_background(self.flash.free_count(chip), &self.cfg.gc)
            {
                self.gc_start(chip, t);
            }
            return Ok(self.flash.alloc_in_open(stream, chip));
        }
        Ok(None)
    }

    /// The next chip of a round robin, skipping chips with a GC job while
    /// some chip has none (their time goes to GC, and no host write waits
    /// for another chip's GC). When every chip has one, the chip with the
    /// most free blocks (the furthest from the urgent floor).
    fn alloc_striped(&mut self, stream: Stream, t: u64) -> Result<u32, FtlError> {
        let chips = self.g.chips;
        if (self.gc_active.len() as u32) < chips {
            // `left` turns of the round robin remain; each takes one chip,
            // skipped if it has a job.
            let mut left = chips;
            while left > 0 {
                let chip = if stream == Stream::Map {
                    self.map_rr
                } else {
                    self.host_rr
                };
                let skip = self.turns_to_idle_chip(chip).min(left);
                let rr = if stream == Stream::Map {
                    &mut self.map_rr
                } else {
                    &mut self.host_rr
                };
                if skip == left {
                    // Every turn left finds a chip with a job.
                    *rr = wrap(chip + left, chips);
                    break;
                }
                let c = wrap(chip + skip, chips);
                *rr = wrap(c + 1, chips);
                left -= skip + 1;
                if let Some(p) = self.alloc(stream, c, t)? {
                    return Ok(p);
                }
            }
        }
        self.alloc_by_free_count(stream, t)
    }

    /// [`alloc_striped`](Self::alloc_striped) when every chip has a GC
    /// job: the chip with the most free blocks first. Rare, and kept out of
    /// line so the round robin's path stays short.
    #[cold]
    #[inline(never)]
    fn alloc_by_free_count(&mut self, stream: Stream, t: u64) -> Result<u32, FtlError> {
        let mut order: Vec<u32> = (0..self.g.chips).collect();
        order.sort_by_key(|&c| std::cmp::Reverse(self.flash.free_count(c)));
        for chip in order {
            if let Some(p) = self.alloc(stream, chip, t)? {
                return Ok(p);
            }
        }
        Err(FtlError::NoSpace)
    }

    /// How many chips from `chip` on (round robin) have a GC job before
    /// the first that has none (`chips` if every one has).
    #[inline]
    fn turns_to_idle_chip(&self, chip: u32) -> u32 {
        let chips = self.g.chips;
        if chips > 64 {
            return (0..chips)
                .find(|&k| self.gc_jobs[wrap(chip + k, chips) as usize].is_none())
                .unwrap_or(chips);
        }
        let all = if chips == 64 {
            u64::MAX
        } else {
            (1u64 << chips) - 1
        };
        let idle = !self.gc_mask & all;
        if idle == 0 {
            return chips;
        }
        // The idle chips from `chip` up, then from 0 (wrapped).
        let up = idle >> chip;
        if up != 0 {
            up.trailing_zeros()
        } else {
            chips - chip + idle.trailing_zeros()
        }
    }

    pub(super) fn alloc_host(&mut self, t: u64) -> Result<u32, FtlError> {
        self.alloc_striped(Stream::Host, t)
    }

    pub(super) fn alloc_map(&mut self, t: u64) -> Result<u32, FtlError> {
        self.alloc_striped(Stream::Map, t)
    }

    // ---- GC jobs ------------------------------------------------------------

    /// Start a background job on `chip` if it has none and is below
    /// `high_free_blocks`.
    pub(super) fn gc_start(&mut self, chip: u32, t: u64) {
        let c = chip as usize;
        if self.gc_jobs[c].is_some() || self.flash.free_count(chip) >= self.cfg.gc.high_free_blocks
        {
            return;
        }
        let Some(victim) = self.victims.victim(&BlockView::new(&self.flash), chip, t) else {
            return;
        };
        debug_assert!(
            BlockView::new(&self.flash).collectable(victim)
                && self.flash.chip_of(victim * self.g.pages_per_block) == chip,
            "the GC policy chose block {victim}, not a collectable block of chip {chip}"
        );
        if self.flash.pool[victim as usize] == POOL_DATA {
            self.stats.gc_data_runs += 1;
        } else {
            self.stats.gc_map_runs += 1;
        }
        // Keep the victim out of later victim searches and allocation.
        self.flash.open[victim as usize] = true;
        // The steps scan the victim's owners, long untouched: start
        // fetching them all (a block's are a few cache lines).
        let ppb = self.g.pages_per_block as usize;
        let first = victim as usize * ppb;
        for p in (first..first + ppb).step_by(16) {
            prefetch(&self.flash.p2l[p]);
        }
        let mut moved = std::mem::take(&mut self.moved);
        moved.clear();
        if c < 64 {
            self.gc_mask |= 1 << c;
        }
        self.gc_jobs[c] = Some(GcJob {
            victim,
            next: 0,
            cursor: t,
            moved,
        });
        // No step starts before the cursor.
        self.gc_not_before[c] = t;
        self.gc_wake = self.gc_wake.min(t);
        self.gc_active.push(chip);
    }

    /// Give every chip's GC, then GC's mapping updates, the idle time
    /// before `t` (called before the host's work at `t` is placed). A
    /// failure stops the device.
    pub(super) fn gc_pump(&mut self, t: u64) {
        if t > self.gc_wake && !self.gc_pass(t) {
            return;
        }
        self.gc_map_pump(t);
    }

    /// The pump's pass over the jobs; sets `gc_wake` to the least bound
    /// left (a job started meanwhile lowers it itself). `false` if a
    /// failure stopped the device.
    fn gc_pass(&mut self, t: u64) -> bool {
        self.gc_wake = u64::MAX;
        let mut i = 0;
        while i < self.gc_active.len() {
            let chip = self.gc_active[i];
            if t <= self.gc_not_before[chip as usize] {
                self.gc_wake = self.gc_wake.min(self.gc_not_before[chip as usize]);
                i += 1;
                continue;
            }
            // (The job's bound is checked here as well: after a step, the
            // next call would mostly return at once.)
            while t > self.gc_not_before[chip as usize] {
                match self.gc_step(chip, Some(t)) {
                    Ok(true) if self.gc_jobs[chip as usize].is_some() => {}
                    Ok(_) => break,
                    Err(e) => {
                        self.fail(e);
                        // (Not every job was looked at: no bound.)
                        self.gc_wake = 0;
                        return false;
                    }
                }
            }
            // A finished job left the list (swap_remove): look at `i` again.
            if self.gc_active.get(i) == Some(&chip) {
                self.gc_wake = self.gc_wake.min(self.gc_not_before[chip as usize]);
                i += 1;
            }
        }
        true
    }

    /// GC's mapping updates in the idle time before `t`.
    fn gc_map_pump(&mut self, t: u64) {
        while let Some(&w) = self.gc_map_work.front() {
            match self.map_work_step(w, t) {
                Ok(None) => {
                    self.gc_map_work.pop_front();
                }
                Ok(Some(rest)) => {
                    if let Some(f) = self.gc_map_work.front_mut() {
                        *f = rest;
                    }
                    break;
                }
                Err(e) => {
                    self.fail(e);
                    return;
                }
            }
        }
    }

    /// Place as much of `w` as fits in idle time before `before`: `None`
    /// when done (or moot), else what is left.
    fn map_work_step(&mut self, mut w: MapWork, before: u64) -> Result<Option<MapWork>, FtlError> {
        let m = w.mpn as usize;
        if self.gtd_seq[m] > w.seq {
            return Ok(None);
        }
        let from = w.ready.max(self.tl_now());
        if from >= before {
            return Ok(Some(w));
        }
        if w.read_first {
            let p = self.gtd[m];
            if p != UNMAPPED {
                if p == w.read_at && before <= w.read_not_before {
                    return Ok(Some(w));
                }
                let chip = self.flash.chip_of(p);
                let end = match self.tl.read_before(chip, from, before) {
                    Ok(end) => end,
                    Err(start) => {
                        (w.read_not_before, w.read_at) = (start, p);
                        return Ok(Some(w));
                    }
                };
                self.horizon = self.horizon.max(end);
                self.count_map_read(Cause::Gc);
                w.ready = end;
            }
            w.read_first = false;
            return self.map_work_step(w, before);
        }
        let chips = self.g.chips;
        let avoid_gc = (self.gc_active.len() as u32) < chips;
        if before <= w.prog.not_before && self.program_bound_holds(w.prog, avoid_gc) {
            // Every chip would fail again (and the round robin would come
            // back to where it is).
            return Ok(Some(w));
        }
        // The least start among the chips that failed; `None` once a chip
        // failed for another reason (no page to allocate).
        let mut least = Some(u64::MAX);
        for _ in 0..chips {
            let chip = self.map_rr;
            self.map_rr = if chip + 1 == chips { 0 } else { chip + 1 };
            if avoid_gc && self.gc_jobs[chip as usize].is_some() {
                continue;
            }
            if let Err(start) = self.tl.program_before(chip, from, before) {
                least = least.map(|l| l.min(start));
                continue;
            }
            let Some(ppa) = self.alloc(Stream::Map, chip, from)? else {
                least = None;
                continue;
            };
            let end = self.op_program(ppa, from);
            self.store_map_page(w.mpn, ppa, from, end, Cause::Gc)?;
            return Ok(None);
        }
        w.prog = match least {
            Some(not_before) if chips <= 64 => ProgramBound {
                not_before,
                skipped: avoid_gc.then_some(self.gc_mask),
            },
            _ => ProgramBound::default(),
        };
        Ok(Some(w))
    }

    /// Whether the chips that are candidates now for a mapping page's
    /// program are among those `b` was found over.
    fn program_bound_holds(&self, b: ProgramBound, avoid_gc: bool) -> bool {
        match b.skipped {
            // Every chip was a candidate.
            None => true,
            // Those skipped then all still have a job, and are skipped.
            Some(mask) => avoid_gc && self.gc_mask & mask == mask,
        }
    }

    /// Do `w` at once, from `t` (the bound of pending work was reached).
    fn map_work_now(&mut self, w: MapWork, t: u64) -> Result<(), FtlError> {
        let m = w.mpn as usize;
        if self.gtd_seq[m] > w.seq {
            return Ok(());
        }
        let mut s = w.ready.max(t).max(self.tl_now());
        let p = self.gtd[m];
        if w.read_first && p != UNMAPPED {
            s = self.op_read(p, s);
            self.count_map_read(Cause::Gc);
        }
        self.write_map_page(w.mpn, s, Cause::Gc)?;
        Ok(())
    }

    /// Drop GC's pending mapping updates (a checkpoint writes every stale
    /// mapping page anyway).
    pub(super) fn drop_map_work(&mut self) {
        self.gc_map_work.clear();
    }

    /// Finish `chip`'s GC now, ahead of host I/O, until it has more than
    /// `urgent_free_blocks` free (or nothing is left to reclaim).
    fn gc_urgent(&mut self, chip: u32, t: u64) -> Result<(), FtlError> {
        self.gc_depth += 1;
        self.stats.gc_urgent += 1;
        let r = (|| {
            while self.flash.free_count(chip) <= self.cfg.gc.urgent_free_blocks {
                if self.gc_jobs[chip as usize].is_none() {
                    // (free <= urgent < high: a job starts if any block
                    // can be cleaned.)
                    self.gc_start(chip, t);
                    match self.gc_jobs[chip as usize].as_mut() {
                        Some(j) => j.cursor = j.cursor.max(t),
                        None => break,
                    }
                }
                // Run this job (not the next one it may start) to its end.
                let victim = self.gc_jobs[chip as usize].as_ref().map(|j| j.victim);
                while self.gc_jobs[chip as usize].as_ref().map(|j| j.victim) == victim {
                    self.gc_step(chip, None)?;
                }
            }
            Ok(())
        })();
        self.gc_depth -= 1;
        r
    }

    /// One step of `chip`'s job: copy the next valid page, or erase the
    /// victim once all are copied. With `before`, the step is taken only
    /// if the chip is idle before then. Returns whether a step was taken.
    fn gc_step(&mut self, chip: u32, before: Option<u64>) -> Result<bool, FtlError> {
        let c = chip as usize;
        let Some(job) = self.gc_jobs[c].as_ref() else {
            return Ok(false);
        };
        if before.is_some_and(|b| b <= self.gc_not_before[c]) {
            return Ok(false);
        }
        let (victim, cursor) = (job.victim, job.cursor);
        let ppb = self.g.pages_per_block;
        let written = self.flash.wp[victim as usize];
        let mut off = job.next;
        while off < written && self.flash.p2l[(victim * ppb + off) as usize] == INVALID {
            off += 1;
        }
        if off < written {
            let end = match self.tl.gc_step_or_start(chip, cursor, false, before) {
                Ok(end) => end,
                Err(start) => {
                    if let Some(job) = self.gc_jobs[c].as_mut() {
                        job.next = off;
                    }
                    self.gc_not_before[c] = start;
                    return Ok(false);
                }
            };
            let dur = self.cfg.t_read_ns + self.cfg.t_prog_ns;
            self.note_write_busy(chip, end - dur, end);
            self.note_gc_program(end);
            self.gc_copy(chip, victim, victim * ppb + off, end)?;
            if let Some(job) = self.gc_jobs[c].as_mut() {
                job.next = off + 1;
                job.cursor = end;
            }
            // The next step starts at `end` or later.
            self.gc_not_before[c] = end;
            return Ok(true);
        }
        let erased = match self.tl.gc_step_or_start(chip, cursor, true, before) {
            Ok(end) => end,
            Err(start) => {
                if let Some(job) = self.gc_jobs[c].as_mut() {
                    job.next = off;
                }
                self.gc_not_before[c] = start;
                return Ok(false);
            }
        };
        self.note_write_busy(chip, erased - self.cfg.t_erase_ns, erased);
        let Some(mut job) = self.gc_jobs[c].take() else {
            return Ok(false);
        };
        if c < 64 {
            self.gc_mask &= !(1 << c);
        }
        if let Some(k) = self.gc_active.iter().position(|&x| x == chip) {
            self.gc_active.swap_remove(k);
        }
        let pool = self.flash.pool[victim as usize];
        // The victim's stale copies may be what a power cut falls back
        // to: make the new copies durable before destroying them.
        if self.persistent {
            self.persist_trims(erased)?;
            self.store.sync()?;
            self.store.erase(victim * ppb, ppb)?;
        } else if self.has_data {
            self.store.erase(victim * ppb, ppb)?;
        }
        self.block_ready[victim as usize] = erased;
        self.flash.erase(victim);
        self.stats.erases += 1;
        let ec = self.flash.erases[victim as usize];
        self.stats.max_erase_count = self.stats.max_erase_count.max(ec);
        self.stats.mean_erase_count += 1.0 / f64::from(self.flash.blocks());
        let at = erased.max(self.tl_now());
        if pool == POOL_DATA && self.uses_map_pages && !job.moved.is_empty() {
            self.queue_moved_mappings(&mut job.moved, at)?;
        }
        self.moved = job.moved;
        // Go on until the chip has `high_free_blocks`.
        self.gc_start(chip, erased);
        Ok(true)
    }

    /// Move the valid page `src` of `victim` to the chip's open GC block
    /// (or mapping block), at simulated time `at` (when its copy ends).
    fn gc_copy(&mut self, chip: u32, victim: u32, src: u32, at: u64) -> Result<(), FtlError> {
        let pool = self.flash.pool[victim as usize];
        let stream = if pool == POOL_MAP {
            Stream::Map
        } else {
            Stream::GcData
        };
        let owner = self.flash.p2l[src as usize];
        let dst = match self.flash.alloc_in_open(stream, chip) {
            Some(d) => d,
            None if self.flash.open_block(stream, chip, 0) => self
                .flash
                .alloc_in_open(stream, chip)
                .ok_or(FtlError::NoSpace)?,
            None => return Err(FtlError::NoSpace),
        };
        self.seq += 1;
        if self.has_data {
            let kind = if pool == POOL_DATA {
                PageKind::Data
            } else if owner == TRIM_OWNER {
                PageKind::Trim
            } else {
                PageKind::Map
            };
            // A mapping page keeps its as-of sequence number.
            let aux = if kind == PageKind::Map {
                self.gtd_seq[owner as usize]
            } else {
                0
            };
            let oob = Oob {
                kind,
                id: if owner == TRIM_OWNER { 0 } else { owner },
                seq: self.seq,
                aux,
            };
            let mut scratch = std::mem::take(&mut self.scratch);
            let r = self.store.copy(src, dst, oob, &mut scratch);
            self.scratch = scratch;
            r?;
        }
        self.flash.invalidate(src, at);
        self.flash.fill(dst, owner, at);
        if pool == POOL_DATA {
            self.stats.gc_data_copies += 1;
            // Only an LPN of the filling buffer half can have its entry
            // marked `IN_BUFFER`: look there (a few dozen LPNs, in cache)
            // before reading the entry, so that the common case is a store
            // to the L2P, which does not stall on its cache miss as a load
            // would.
            let e = if self.buf.holds(owner) {
                self.l2p[owner as usize]
            } else {
                UNMAPPED
            };
            if e != UNMAPPED && e & IN_BUFFER != 0 {
                self.buf.prev[(e & !IN_BUFFER) as usize] = dst;
            } else {
                self.l2p[owner as usize] = dst;
            }
            self.mark_map_stale(owner);
            if let Some(job) = self.gc_jobs[chip as usize].as_mut() {
                job.moved.push(owner);
            }
            // The next owners' map entries are random accesses: start them.
            // (In the victim: a multiply, not a `%` by the block size.)
            let next = src + 1;
            if next < (victim + 1) * self.g.pages_per_block {
                self.prefetch_owner(next);
            }
        } else {
            self.stats.gc_map_copies += 1;
            if owner == TRIM_OWNER {
                if let Some(p) = self.trim_pages.iter_mut().find(|p| **p == src) {
                    *p = dst;
                }
            } else {
                self.gtd[owner as usize] = dst;
            }
        }
        Ok(())
    }

    /// Start fetching the map entry and cache state of data page `ppa`'s
    /// owner (GC is about to move it).
    #[inline(always)]
    pub(super) fn prefetch_owner(&self, ppa: u32) {
        let owner = self.flash.p2l[ppa as usize];
        if owner != INVALID {
            prefetch(&self.l2p[owner as usize]);
            if self.cache_prefetches {
                self.cache.prefetch(owner);
            }
        }
    }

    /// Update the cache for the LPNs a GC job moved and queue the mapping
    /// write-backs that takes (see the module docs), ready at `t`.
    fn queue_moved_mappings(&mut self, moved: &mut [u32], t: u64) -> Result<(), FtlError> {
        // By mapping page, ascending (the order the write-backs queue in);
        // within a page the order does not matter to any cache. The
        // mapping page of an LPN grows with it, so sorting the LPNs groups
        // them (distinct LPNs: each had one valid copy in the victim).
        moved.sort_unstable();
        let div = self.per_map_page;
        let mut acts = self.take_acts();
        let mut i = 0;
        while i < moved.len() {
            let mpn = div.div(moved[i]);
            // The group's end: the first LPN of a later mapping page.
            let mut j = i + 1;
            while j < moved.len() && div.div(moved[j]) == mpn {
                j += 1;
            }
            acts.clear();
            self.cache.gc_update(mpn, &moved[i..j], &mut acts);
            for &a in &acts {
                if let MapAction::WriteBack { mpn, read_first } = a {
                    self.gc_map_work.push_back(MapWork {
                        mpn,
                        read_first,
                        ready: t,
                        seq: self.seq,
                        read_not_before: 0,
                        prog: ProgramBound::default(),
                        read_at: UNMAPPED,
                    });
                }
            }
            i = j;
        }
        self.put_acts(acts);
        let bound = 2 * self.g.pages_per_block as usize;
        while self.gc_map_work.len() > bound {
            let Some(w) = self.gc_map_work.pop_front() else {
                break;
            };
            self.map_work_now(w, t)?;
        }
        Ok(())
    }
}

/// `x % n` for `x < 2 n`.
#[inline(always)]
fn wrap(x: u32, n: u32) -> u32 {
    if x >= n {
        x - n
    } else {
        x
    }
}
