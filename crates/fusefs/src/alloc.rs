//! Block allocation: one bitmap block per group, each behind its own lock.
//!
//! An operation that allocates or frees locks every group it will touch, in
//! ascending order, before changing any bit, and holds them until its journal
//! transaction has finished ([`AllocCtx`]). So a bitmap block written into
//! one transaction never contains another transaction's unfinished change,
//! and operations in different groups never wait on each other.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RawMutex};

use crate::error::Errno;
use crate::format::{seal_bitmap, BITS_PER_GROUP, BLOCK_SIZE};

/// One allocation group: its bitmap block (crc bytes included), and the
/// runs freed in it since its last trim.
pub struct Group {
    pub bits: Vec<u8>,
    freed: Vec<(u64, u64)>,
}

/// What [`Allocator::trim_group`] discards.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TrimScope {
    /// The runs freed since the group's last trim that are still free (an
    /// online or unmount trim: space trimmed once is not trimmed again).
    Freed,
    /// Every free run in `[lo, hi)` at least `min_len` blocks long
    /// (FITRIM).
    Free { lo: u64, hi: u64, min_len: u64 },
}

fn get_bit(bits: &[u8], i: u64) -> bool {
    bits[(i / 8) as usize] & (1 << (i % 8)) != 0
}
fn set_bit(bits: &mut [u8], i: u64, v: bool) {
    if v {
        bits[(i / 8) as usize] |= 1 << (i % 8);
    } else {
        bits[(i / 8) as usize] &= !(1 << (i % 8));
    }
}

/// The free-space map of a mounted file system.
pub struct Allocator {
    groups: Vec<Arc<Mutex<Group>>>,
    free_per_group: Vec<AtomicU64>,
    free_total: AtomicU64,
    bitmap_start: u64,
    num_blocks: u64,
    /// Where the next directory's search for a roomy group starts.
    next_dir_group: AtomicUsize,
    /// Per group: blocks were freed since its last trim.
    trim_due: Vec<AtomicBool>,
    /// Blocks freed since the last trim (a trigger, not an exact count:
    /// an operation rolled back still counts).
    freed_since_trim: AtomicU64,
}

impl Allocator {
    /// Build from the bitmap blocks as read from the store.
    pub fn new(bitmaps: Vec<Vec<u8>>, bitmap_start: u64, num_blocks: u64) -> Self {
        let mut free_per_group = Vec::new();
        let mut total = 0;
        for (g, b) in bitmaps.iter().enumerate() {
            let base = g as u64 * BITS_PER_GROUP;
            let n = BITS_PER_GROUP.min(num_blocks.saturating_sub(base));
            let free = (0..n).filter(|&i| !get_bit(b, i)).count() as u64;
            total += free;
            free_per_group.push(AtomicU64::new(free));
        }
        Self {
            trim_due: bitmaps.iter().map(|_| AtomicBool::new(false)).collect(),
            groups: bitmaps
                .into_iter()
                .map(|bits| {
                    Arc::new(Mutex::new(Group {
                        bits,
                        freed: Vec::new(),
                    }))
                })
                .collect(),
            free_per_group,
            free_total: AtomicU64::new(total),
            bitmap_start,
            num_blocks,
            next_dir_group: AtomicUsize::new(0),
            freed_since_trim: AtomicU64::new(0),
        }
    }

    /// Blocks freed since the last [`trim_group`](Self::trim_group) pass
    /// began.
    pub fn freed_since_trim(&self) -> u64 {
        self.freed_since_trim.load(Ordering::Relaxed)
    }

    /// Freed blocks worth an online trim: `max` (the caller's ceiling), or
    /// a sixteenth of a smaller device's blocks (at least 64).
    pub fn auto_trim_blocks(&self, max: u64) -> u64 {
        (self.num_blocks / 16).clamp(64, max.max(64))
    }

    /// Claim the freed-block count for a trim pass (returns what it was).
    pub fn take_freed_since_trim(&self) -> u64 {
        self.freed_since_trim.swap(0, Ordering::Relaxed)
    }

    /// Number of allocation groups.
    pub fn num_groups(&self) -> usize {
        self.groups.len()
    }

    /// Whether group `g` had blocks freed since its last trim.
    pub fn trim_due(&self, g: usize) -> bool {
        self.trim_due
            .get(g)
            .is_some_and(|d| d.load(Ordering::Relaxed))
    }

    /// Discard free runs of group `g` (which ones: `scope`), holding the
    /// group's lock throughout so that none of them is allocated (and
    /// written) before its discard reaches the device. `sync` runs first,
    /// under the lock: it must make every finished transaction durable, so
    /// each free being discarded is durable too (a crash can then never
    /// bring back an owner of a discarded block). Returns the blocks
    /// discarded. A freed block for which `held` says a version of it
    /// still waits to be written home (and would undo the discard) stays
    /// freed-but-untrimmed, for a later pass.
    pub fn trim_group<E>(
        &self,
        g: usize,
        scope: TrimScope,
        held: impl Fn(u64) -> bool,
        sync: impl FnOnce() -> Result<(), E>,
        mut discard: impl FnMut(u64, u64) -> Result<(), E>,
    ) -> Result<u64, E> {
        let Some(group) = self.groups.get(g) else {
            return Ok(0);
        };
        let mut guard = group.lock();
        // A FITRIM leaves the online trim's bookkeeping alone (its range
        // may not cover what was freed).
        let only_freed = scope == TrimScope::Freed;
        let due = only_freed && self.trim_due[g].swap(false, Ordering::Relaxed);
        let mut freed = if only_freed {
            std::mem::take(&mut guard.freed)
        } else {
            Vec::new()
        };
        let base = g as u64 * BITS_PER_GROUP;
        let nbits = BITS_PER_GROUP.min(self.num_blocks.saturating_sub(base));
        let res = (|| {
            sync()?;
            // Group-relative runs to look at, and the shortest worth a
            // discard.
            let (runs, min_len) = match scope {
                TrimScope::Freed => {
                    freed.sort_unstable();
                    let mut runs: Vec<(u64, u64)> = Vec::with_capacity(freed.len());
                    for &(s, l) in &freed {
                        match runs.last_mut() {
                            Some((_, re)) if s <= *re => *re = (*re).max(s + l),
                            _ => runs.push((s, s + l)),
                        }
                    }
                    (runs, 1)
                }
                TrimScope::Free { lo, hi, min_len } => {
                    let from = lo.max(base) - base;
                    let to = hi.min(base + nbits).saturating_sub(base);
                    (vec![(from, to)], min_len.max(1))
                }
            };
            let mut trimmed = 0;
            let mut later: Vec<(u64, u64)> = Vec::new();
            for (from, to) in runs {
                let mut i = from;
                while i < to.min(nbits) {
                    if get_bit(&guard.bits, i) {
                        i += 1;
                        continue;
                    }
                    if only_freed && held(base + i) {
                        match later.last_mut() {
                            Some((s, l)) if *s + *l == i => *l += 1,
                            _ => later.push((i, 1)),
                        }
                        i += 1;
                        continue;
                    }
                    let start = i;
                    while i < to && !get_bit(&guard.bits, i) && !(only_freed && held(base + i)) {
                        i += 1;
                    }
                    if i - start >= min_len {
                        discard(base + start, i - start)?;
                        trimmed += i - start;
                    }
                }
            }
            if !later.is_empty() {
                guard.freed.append(&mut later);
                self.trim_due[g].store(true, Ordering::Relaxed);
            }
            Ok(trimmed)
        })();
        if res.is_err() {
            // Still to do: put back what this pass took.
            guard.freed.append(&mut freed);
            if due {
                self.trim_due[g].store(true, Ordering::Relaxed);
            }
        }
        res
    }

    /// Goal block for a new directory (Orlov-style spreading, as in
    /// ext2/ext4): the next group, in rotation, with at least the average
    /// free space. A file goes near its directory, so files of different
    /// directories fall in different groups and operations on them never
    /// wait for one another's bitmap lock.
    pub fn dir_goal(&self) -> u64 {
        let n = self.groups.len();
        let avg = self.free_total.load(Ordering::Relaxed) / n as u64;
        let start = self.next_dir_group.fetch_add(1, Ordering::Relaxed);
        let g = (0..n)
            .map(|k| (start + k) % n)
            .find(|&g| {
                let f = self.free_per_group[g].load(Ordering::Relaxed);
                f > 0 && f >= avg
            })
            .unwrap_or(start % n);
        g as u64 * BITS_PER_GROUP
    }

    /// Free blocks right now.
    pub fn free_blocks(&self) -> u64 {
        self.free_total.load(Ordering::Relaxed)
    }

    /// Is `blk` marked used? (For checks; takes the group lock briefly.)
    pub fn is_used(&self, blk: u64) -> bool {
        let g = (blk / BITS_PER_GROUP) as usize;
        match self.groups.get(g) {
            Some(grp) => get_bit(&grp.lock().bits, blk % BITS_PER_GROUP),
            None => true,
        }
    }

    /// Start an operation's allocation context: lock the groups holding
    /// `frees` and enough groups (starting at `goal`'s) to allocate `need`
    /// blocks. ENOSPC if the file system does not have `need` free blocks.
    pub fn prepare(
        &self,
        need: u64,
        goal: u64,
        frees: &[(u64, u64)],
    ) -> Result<AllocCtx<'_>, Errno> {
        let ngroups = self.groups.len();
        for _attempt in 0..64 {
            if need > 0 && self.free_total.load(Ordering::Relaxed) < need {
                return Err(Errno::ENOSPC);
            }
            let mut wanted: Vec<usize> = Vec::new();
            for &(start, len) in frees {
                let mut b = start;
                while b < start + len {
                    let g = (b / BITS_PER_GROUP) as usize;
                    if g < ngroups && !wanted.contains(&g) {
                        wanted.push(g);
                    }
                    b = (g as u64 + 1) * BITS_PER_GROUP;
                }
            }
            let mut promised = 0;
            let start_g = ((goal.min(self.num_blocks.saturating_sub(1))) / BITS_PER_GROUP) as usize;
            let mut alloc_groups = Vec::new();
            if need > 0 {
                for k in 0..ngroups {
                    let g = (start_g + k) % ngroups;
                    let f = self.free_per_group[g].load(Ordering::Relaxed);
                    if f == 0 {
                        continue;
                    }
                    alloc_groups.push(g);
                    if !wanted.contains(&g) {
                        wanted.push(g);
                    }
                    promised += f;
                    if promised >= need {
                        break;
                    }
                }
                if promised < need {
                    return Err(Errno::ENOSPC);
                }
            }
            wanted.sort_unstable();
            let guards: BTreeMap<usize, parking_lot::ArcMutexGuard<RawMutex, Group>> = wanted
                .iter()
                .map(|&g| (g, self.groups[g].lock_arc()))
                .collect();
            let actual: u64 = alloc_groups
                .iter()
                .map(|g| self.free_per_group[*g].load(Ordering::Relaxed))
                .sum();
            if actual >= need {
                return Ok(AllocCtx {
                    alloc: self,
                    guards,
                    alloc_order: alloc_groups,
                    dirty: Vec::new(),
                    undo: Vec::new(),
                    done: false,
                });
            }
            // Someone took the space between the look and the lock: look again.
        }
        Err(Errno::ENOSPC)
    }

    fn adjust(&self, g: usize, delta: i64) {
        if delta >= 0 {
            self.free_per_group[g].fetch_add(delta as u64, Ordering::Relaxed);
            self.free_total.fetch_add(delta as u64, Ordering::Relaxed);
        } else {
            self.free_per_group[g].fetch_sub((-delta) as u64, Ordering::Relaxed);
            self.free_total
                .fetch_sub((-delta) as u64, Ordering::Relaxed);
        }
    }
}

/// The groups one operation holds, and what it changed in them.
pub struct AllocCtx<'a> {
    alloc: &'a Allocator,
    guards: BTreeMap<usize, parking_lot::ArcMutexGuard<RawMutex, Group>>,
    alloc_order: Vec<usize>,
    dirty: Vec<usize>,
    /// (block, was used) for rolling back an operation that fails.
    undo: Vec<(u64, bool)>,
    done: bool,
}

impl AllocCtx<'_> {
    /// Allocate up to `count` blocks near `goal`, as runs `(start, len)`.
    /// Returns fewer than `count` only when the locked groups are full.
    pub fn alloc(&mut self, count: u64, goal: u64) -> Vec<(u64, u64)> {
        let mut runs: Vec<(u64, u64)> = Vec::new();
        let mut left = count;
        let goal_g = (goal / BITS_PER_GROUP) as usize;
        let mut order = self.alloc_order.clone();
        if let Some(p) = order.iter().position(|&g| g == goal_g) {
            order.rotate_left(p);
        }
        for g in order {
            if left == 0 {
                break;
            }
            let base = g as u64 * BITS_PER_GROUP;
            let nbits = BITS_PER_GROUP.min(self.alloc.num_blocks - base);
            let start = if goal_g == g {
                goal % BITS_PER_GROUP
            } else {
                0
            };
            let guard = self.guards.get_mut(&g).expect("allocation group is locked");
            let mut taken = 0i64;
            let mut i = start;
            let mut scanned = 0;
            while left > 0 && scanned < nbits {
                if i >= nbits {
                    i = 0;
                }
                // Skip full words, then full bytes, quickly: a directory's
                // files are allocated from its goal on, so the scan would
                // otherwise walk every block its earlier files took.
                if i % 64 == 0 && i + 64 <= nbits && scanned + 64 <= nbits {
                    let at = (i / 8) as usize;
                    let word = u64::from_le_bytes(
                        guard.bits[at..at + 8]
                            .try_into()
                            .expect("eight bytes of the bitmap"),
                    );
                    if word == u64::MAX {
                        i += 64;
                        scanned += 64;
                        continue;
                    }
                }
                if i % 8 == 0 && i + 8 <= nbits && guard.bits[(i / 8) as usize] == 0xff {
                    i += 8;
                    scanned += 8;
                    continue;
                }
                if !get_bit(&guard.bits, i) {
                    set_bit(&mut guard.bits, i, true);
                    self.undo.push((base + i, false));
                    taken += 1;
                    left -= 1;
                    let blk = base + i;
                    match runs.last_mut() {
                        Some((s, l)) if *s + *l == blk => *l += 1,
                        _ => runs.push((blk, 1)),
                    }
                }
                i += 1;
                scanned += 1;
            }
            if taken > 0 {
                self.alloc.adjust(g, -taken);
                if !self.dirty.contains(&g) {
                    self.dirty.push(g);
                }
            }
        }
        runs
    }

    /// Mark `[start, start+len)` free. The groups must have been named in
    /// `prepare`; blocks of other groups are an internal error (EIO).
    pub fn free(&mut self, start: u64, len: u64) -> Result<(), Errno> {
        for blk in start..start + len {
            let g = (blk / BITS_PER_GROUP) as usize;
            let guard = self.guards.get_mut(&g).ok_or(Errno::EIO)?;
            let i = blk % BITS_PER_GROUP;
            if get_bit(&guard.bits, i) {
                set_bit(&mut guard.bits, i, false);
                self.undo.push((blk, true));
                self.alloc.adjust(g, 1);
                self.alloc.trim_due[g].store(true, Ordering::Relaxed);
                self.alloc.freed_since_trim.fetch_add(1, Ordering::Relaxed);
                match guard.freed.last_mut() {
                    Some((s, l)) if *s + *l == i => *l += 1,
                    _ => guard.freed.push((i, 1)),
                }
                if !self.dirty.contains(&g) {
                    self.dirty.push(g);
                }
            }
        }
        Ok(())
    }

    /// Whether this operation holds the group of `blk` (so it may free it).
    pub fn holds(&self, blk: u64) -> bool {
        self.guards.contains_key(&((blk / BITS_PER_GROUP) as usize))
    }

    /// Seal each changed bitmap block in place (its crc field is not a
    /// bit) and hand it to `write` with its block number and crc32c, to
    /// add to the transaction without a copy.
    pub fn write_dirty<E>(
        &mut self,
        mut write: impl FnMut(u64, &[u8], u32) -> Result<(), E>,
    ) -> Result<(), E> {
        for &g in &self.dirty {
            let guard = self.guards.get_mut(&g).expect("dirty group is locked");
            debug_assert_eq!(guard.bits.len(), BLOCK_SIZE);
            let crc = seal_bitmap(&mut guard.bits);
            write(self.alloc.bitmap_start + g as u64, &guard.bits, crc)?;
        }
        Ok(())
    }

    /// Whether this operation freed any block.
    pub fn freed_any(&self) -> bool {
        self.undo.iter().any(|&(_, was)| was)
    }

    /// The transaction finished: keep the changes and release the groups.
    pub fn commit(mut self) {
        self.done = true;
    }
}

impl Drop for AllocCtx<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        for &(blk, was) in self.undo.iter().rev() {
            let g = (blk / BITS_PER_GROUP) as usize;
            if let Some(guard) = self.guards.get_mut(&g) {
                set_bit(&mut guard.bits, blk % BITS_PER_GROUP, was);
                self.alloc.adjust(g, if was { -1 } else { 1 });
            }
        }
    }
}

/// Build the initial bitmaps for mkfs: blocks `< used_upto` and past the
/// end of the device are marked used.
pub fn initial_bitmaps(num_blocks: u64, used: &[u64]) -> Vec<Vec<u8>> {
    let ngroups = num_blocks.div_ceil(BITS_PER_GROUP);
    let mut out = Vec::new();
    for g in 0..ngroups {
        let mut b = vec![0u8; BLOCK_SIZE];
        let base = g * BITS_PER_GROUP;
        for i in 0..BITS_PER_GROUP {
            if base + i >= num_blocks {
                set_bit(&mut b, i, true);
            }
        }
        for &u in used {
            if u >= base && u < base + BITS_PER_GROUP {
                set_bit(&mut b, u - base, true);
            }
        }
        out.push(b);
    }
    out
}

/// Whether bit `blk` is set in a group's bitmap block (for fsck).
pub fn bit_in(bitmap: &[u8], blk: u64) -> bool {
    get_bit(bitmap, blk % BITS_PER_GROUP)
}

/// Set or clear bit `blk` in a group's bitmap block (for fsck repair).
pub fn set_bit_in(bitmap: &mut [u8], blk: u64, v: bool) {
    set_bit(bitmap, blk % BITS_PER_GROUP, v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trim_discards_after_a_sync_under_the_group_lock() {
        let n = BITS_PER_GROUP * 2;
        let a = Allocator::new(initial_bitmaps(n, &[0, 1, 2, 3]), 1, n);
        let mut ctx = a.prepare(20, 0, &[]).unwrap();
        assert_eq!(ctx.alloc(20, 0), vec![(4, 20)]);
        ctx.commit();
        assert!(!a.trim_due(0), "nothing freed yet");
        let mut ctx = a.prepare(0, 0, &[(6, 3), (10, 1)]).unwrap();
        ctx.free(6, 3).unwrap();
        ctx.free(10, 1).unwrap();
        ctx.commit();
        // 7 is allocated again before the trim: it is in use, not trimmed.
        let mut ctx = a.prepare(1, 7, &[]).unwrap();
        assert_eq!(ctx.alloc(1, 7), vec![(7, 1)]);
        ctx.commit();
        assert!(a.trim_due(0) && !a.trim_due(1));
        assert_eq!(a.freed_since_trim(), 4);
        let synced = std::cell::Cell::new(false);
        let mut log = Vec::new();
        let got = a
            .trim_group(
                0,
                TrimScope::Freed,
                |_| false,
                || {
                    synced.set(true);
                    Ok::<(), ()>(())
                },
                |b, len| {
                    assert!(synced.get(), "discard before the sync");
                    // The group stays locked: no allocation can take it.
                    assert!(a.groups[0].try_lock().is_none());
                    log.push((b, len));
                    Ok(())
                },
            )
            .unwrap();
        // Only what was freed and is still free; never-used space is not
        // the online trim's business.
        assert_eq!(log, vec![(6, 1), (8, 1), (10, 1)]);
        assert_eq!(got, 3);
        assert!(!a.trim_due(0));
        // Trimmed once: the next online trim has nothing to do.
        let again = a.trim_group(
            0,
            TrimScope::Freed,
            |_| false,
            || Ok::<(), ()>(()),
            |_, _| panic!("trimmed twice"),
        );
        assert_eq!(again, Ok(0));
        // FITRIM: every free run of the range at least `min_len` long.
        log.clear();
        let scope = TrimScope::Free {
            lo: 0,
            hi: 30,
            min_len: 2,
        };
        let got = a
            .trim_group(
                0,
                scope,
                |_| false,
                || Ok::<(), ()>(()),
                |b, len| {
                    log.push((b, len));
                    Ok(())
                },
            )
            .unwrap();
        assert_eq!(log, vec![(24, 6)]);
        assert_eq!(got, 6);
        // A failed sync discards nothing and keeps the freed runs for later.
        let mut ctx = a.prepare(0, 0, &[(4, 1)]).unwrap();
        ctx.free(4, 1).unwrap();
        ctx.commit();
        let res = a.trim_group(
            0,
            TrimScope::Freed,
            |_| false,
            || Err("journal down"),
            |_, _| panic!("discarded after a failed sync"),
        );
        assert_eq!(res, Err("journal down"));
        assert!(a.trim_due(0));
        // A block whose old version waits in the journal is kept for later.
        let mut ctx = a.prepare(0, 0, &[(11, 2)]).unwrap();
        ctx.free(11, 2).unwrap();
        ctx.commit();
        let mut log = Vec::new();
        let trim = |held: &dyn Fn(u64) -> bool| {
            let mut got = Vec::new();
            a.trim_group(
                0,
                TrimScope::Freed,
                held,
                || Ok::<(), ()>(()),
                |b, len| {
                    got.push((b, len));
                    Ok(())
                },
            )
            .unwrap();
            got
        };
        log.extend(trim(&|b| b == 12));
        assert_eq!(log, vec![(4, 1), (11, 1)]);
        assert!(a.trim_due(0), "block 12 is still to trim");
        assert_eq!(trim(&|_| false), vec![(12, 1)]);
    }

    #[test]
    fn alloc_free_and_rollback() {
        let n = BITS_PER_GROUP * 2 + 100;
        let a = Allocator::new(initial_bitmaps(n, &[0, 1, 2, 3]), 1, n);
        assert_eq!(a.free_blocks(), n - 4);
        {
            let mut ctx = a.prepare(10, 0, &[]).unwrap();
            let runs = ctx.alloc(10, 0);
            assert_eq!(runs, vec![(4, 10)]);
            // dropped without commit: rolled back
        }
        assert_eq!(a.free_blocks(), n - 4);
        let mut ctx = a.prepare(10, 0, &[]).unwrap();
        assert_eq!(ctx.alloc(10, 0), vec![(4, 10)]);
        let mut dirty = 0;
        ctx.write_dirty(|_, b, crc| {
            assert_eq!(crc, crc32c::crc32c(b));
            dirty += 1;
            Ok::<(), ()>(())
        })
        .unwrap();
        assert_eq!(dirty, 1);
        ctx.commit();
        assert_eq!(a.free_blocks(), n - 14);
        let mut ctx = a.prepare(0, 0, &[(5, 2)]).unwrap();
        ctx.free(5, 2).unwrap();
        ctx.commit();
        assert!(!a.is_used(5));
        assert!(a.prepare(n, 0, &[]).is_err());
        // Spanning groups.
        let mut ctx = a.prepare(BITS_PER_GROUP + 10, BITS_PER_GROUP, &[]).unwrap();
        let got: u64 = ctx
            .alloc(BITS_PER_GROUP + 10, BITS_PER_GROUP)
            .iter()
            .map(|r| r.1)
            .sum();
        assert_eq!(got, BITS_PER_GROUP + 10);
        ctx.commit();
    }
}
