//! The in-memory extent map of one file: file block → device block runs.

use std::collections::BTreeMap;

use crate::format::{Extent, MAX_EXTENT_LEN};

/// Runs keyed by their first file block.
#[derive(Clone, Debug, Default)]
pub struct ExtentMap {
    runs: BTreeMap<u64, (u64, u32, bool)>,
    mapped: u64,
    /// Bumped by every change, so a writer can tell whether the stored
    /// extent list is still current.
    version: u64,
    /// Every run starting below this is as last marked clean (`None`: no
    /// change since), so a writer re-encodes only the tail of a long list.
    dirty_from: Option<u64>,
    /// While an operation may still fail: what each change replaced, to
    /// put back (see [`Checkpoint`]).
    undo: Option<Vec<(u64, Option<Run>)>>,
}

/// A run as kept: device block, length, unwritten.
type Run = (u64, u32, bool);

/// The state of an [`ExtentMap`] when [`ExtentMap::checkpoint`] was taken:
/// [`ExtentMap::rollback`] returns to it in time proportional to the
/// changes made since, not to the map's size (a file may have millions of
/// runs, and every write takes a checkpoint).
#[derive(Clone, Copy, Debug)]
#[must_use = "a checkpoint is rolled back to or released"]
pub struct Checkpoint {
    mapped: u64,
    version: u64,
    dirty_from: Option<u64>,
}

impl ExtentMap {
    /// True if nothing is mapped.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    /// Build from stored extents (assumed non-overlapping; fsck checks).
    pub fn from_extents(ext: &[Extent]) -> Self {
        let mut m = ExtentMap::default();
        for e in ext {
            m.runs.insert(e.lblk, (e.pblk, e.len, e.unwritten));
            m.mapped += u64::from(e.len);
        }
        m
    }

    /// The extents in file order.
    pub fn to_extents(&self) -> Vec<Extent> {
        self.extents_from(0)
    }

    /// Changes so far (starts at 0; [`punch`](Self::punch) and
    /// [`insert`](Self::insert) each add one).
    pub fn version(&self) -> u64 {
        self.version
    }

    /// The lowest first block of a run changed since
    /// [`mark_clean`](Self::mark_clean) (runs starting below it, and how many
    /// there are, are unchanged), or `None`.
    pub fn dirty_from(&self) -> Option<u64> {
        self.dirty_from
    }

    /// The stored list now matches the map.
    pub fn mark_clean(&mut self) {
        self.dirty_from = None;
    }

    /// Start recording changes, so that [`rollback`](Self::rollback) can
    /// undo them (one checkpoint at a time: a second replaces the first).
    pub fn checkpoint(&mut self) -> Checkpoint {
        self.undo = Some(Vec::new());
        Checkpoint {
            mapped: self.mapped,
            version: self.version,
            dirty_from: self.dirty_from,
        }
    }

    /// Keep the changes since `cp` and stop recording.
    pub fn release(&mut self, cp: Checkpoint) {
        let _ = cp;
        self.undo = None;
    }

    /// Undo every change since `cp` (the map, its version and what is
    /// marked dirty are as they were) and stop recording.
    pub fn rollback(&mut self, cp: Checkpoint) {
        for (k, old) in self.undo.take().unwrap_or_default().into_iter().rev() {
            match old {
                Some(v) => self.runs.insert(k, v),
                None => self.runs.remove(&k),
            };
        }
        self.mapped = cp.mapped;
        self.version = cp.version;
        self.dirty_from = cp.dirty_from;
    }

    fn set(&mut self, k: u64, v: Run) {
        let old = self.runs.insert(k, v);
        if let Some(u) = &mut self.undo {
            u.push((k, old));
        }
    }

    fn del(&mut self, k: u64) -> Option<Run> {
        let old = self.runs.remove(&k);
        if let (Some(u), Some(_)) = (&mut self.undo, old) {
            u.push((k, old));
        }
        old
    }

    fn touch(&mut self, lblk: u64) {
        // The run holding `lblk` (or the one before it) may split or merge.
        let start = self
            .runs
            .range(..=lblk)
            .next_back()
            .map_or(lblk, |(&s, _)| s.min(lblk));
        self.dirty_from = Some(self.dirty_from.map_or(start, |d| d.min(start)));
    }

    /// The extents starting at or after `lblk`, in file order.
    pub fn extents_from(&self, lblk: u64) -> Vec<Extent> {
        self.runs
            .range(lblk..)
            .map(|(&lblk, &(pblk, len, unwritten))| Extent {
                lblk,
                pblk,
                len,
                unwritten,
            })
            .collect()
    }

    /// Number of runs.
    pub fn len(&self) -> usize {
        self.runs.len()
    }

    /// The file block after the last mapped one (0 if none).
    pub fn end(&self) -> u64 {
        self.runs
            .last_key_value()
            .map_or(0, |(&s, &(_, len, _))| s + u64::from(len))
    }

    /// Mapped blocks.
    pub fn mapped_blocks(&self) -> u64 {
        self.mapped
    }

    /// Where file block `lblk` lives: (device block, unwritten, blocks left
    /// in this run from `lblk`).
    pub fn lookup(&self, lblk: u64) -> Option<(u64, bool, u64)> {
        let (&start, &(pblk, len, unw)) = self.runs.range(..=lblk).next_back()?;
        if lblk < start + u64::from(len) {
            Some((pblk + (lblk - start), unw, start + u64::from(len) - lblk))
        } else {
            None
        }
    }

    /// First mapped file block at or after `lblk`, if any.
    pub fn next_mapped(&self, lblk: u64) -> Option<u64> {
        if self.lookup(lblk).is_some() {
            return Some(lblk);
        }
        self.runs.range(lblk..).next().map(|(&s, _)| s)
    }

    /// A good device block to put file block `lblk` at: right after the run
    /// before it.
    pub fn goal(&self, lblk: u64) -> Option<u64> {
        let (&start, &(pblk, len, _)) = self.runs.range(..lblk).next_back()?;
        Some(pblk + (lblk.min(start + u64::from(len)) - start))
    }

    /// Unmap `[lblk, lblk+count)`; returns the device runs no longer used.
    pub fn punch(&mut self, lblk: u64, count: u64) -> Vec<(u64, u64)> {
        let end = lblk.saturating_add(count);
        self.version += 1;
        self.touch(lblk);
        let mut freed = Vec::new();
        // Runs that start before `lblk` but reach into the range.
        let mut keys: Vec<u64> = Vec::new();
        if let Some((&s, &(_, len, _))) = self.runs.range(..lblk).next_back() {
            if s + u64::from(len) > lblk {
                keys.push(s);
            }
        }
        keys.extend(self.runs.range(lblk..end).map(|(&s, _)| s));
        for s in keys {
            let (pblk, len, unw) = self.del(s).expect("run present");
            let rend = s + u64::from(len);
            let cut_start = s.max(lblk);
            let cut_end = rend.min(end);
            if s < cut_start {
                self.set(s, (pblk, (cut_start - s) as u32, unw));
            }
            if cut_end < rend {
                self.set(
                    cut_end,
                    (pblk + (cut_end - s), (rend - cut_end) as u32, unw),
                );
            }
            freed.push((pblk + (cut_start - s), cut_end - cut_start));
            self.mapped -= cut_end - cut_start;
        }
        freed
    }

    /// Split the run holding `lblk` so that one starts there.
    fn split_at(&mut self, lblk: u64) {
        if let Some((&s, &(pblk, len, unw))) = self.runs.range(..lblk).next_back() {
            let end = s + u64::from(len);
            if end > lblk {
                self.set(s, (pblk, (lblk - s) as u32, unw));
                self.set(lblk, (pblk + (lblk - s), (end - lblk) as u32, unw));
            }
        }
    }

    /// Move every run at or after `from` by `by` blocks towards the start
    /// (`down`, a collapse: `[from - by, from)` must be unmapped) or the end
    /// (an insert: a run holding `from` is split there first).
    pub fn shift(&mut self, from: u64, by: u64, down: bool) {
        self.version += 1;
        let lowest = if down { from.saturating_sub(by) } else { from };
        self.touch(lowest);
        if !down {
            self.split_at(from);
        }
        let moved: Vec<(u64, Run)> = self.runs.range(from..).map(|(&k, &v)| (k, v)).collect();
        for &(k, _) in &moved {
            self.del(k);
        }
        for (k, v) in moved {
            self.set(if down { k - by } else { k + by }, v);
        }
    }

    /// Map `[lblk, lblk+len)` (which must be unmapped) to `pblk..`.
    pub fn insert(&mut self, lblk: u64, pblk: u64, len: u64, unwritten: bool) {
        let mut lblk = lblk;
        let mut pblk = pblk;
        let mut len = len;
        self.version += 1;
        self.touch(lblk);
        self.mapped += len;
        // Merge with the run before.
        if let Some((&s, &(p, l, u))) = self.runs.range(..lblk).next_back() {
            if u == unwritten
                && s + u64::from(l) == lblk
                && p + u64::from(l) == pblk
                && u64::from(l) + len <= u64::from(MAX_EXTENT_LEN)
            {
                self.del(s);
                len += u64::from(l);
                lblk = s;
                pblk = p;
            }
        }
        // Merge with the run after.
        if let Some(&(p, l, u)) = self.runs.get(&(lblk + len)) {
            if u == unwritten && p == pblk + len && u64::from(l) + len <= u64::from(MAX_EXTENT_LEN)
            {
                self.del(lblk + len);
                len += u64::from(l);
            }
        }
        while len > 0 {
            let n = len.min(u64::from(MAX_EXTENT_LEN));
            self.set(lblk, (pblk, n as u32, unwritten));
            lblk += n;
            pblk += n;
            len -= n;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn punch_splits_and_insert_merges() {
        let mut m = ExtentMap::default();
        m.insert(0, 100, 10, false);
        m.insert(10, 110, 5, false);
        assert_eq!(m.len(), 1);
        assert_eq!(m.lookup(12), Some((112, false, 3)));
        let freed = m.punch(3, 4);
        assert_eq!(freed, vec![(103, 4)]);
        assert_eq!(m.len(), 2);
        assert_eq!(m.lookup(5), None);
        assert_eq!(m.lookup(7), Some((107, false, 8)));
        assert_eq!(m.mapped_blocks(), 11);
        m.insert(3, 103, 4, false);
        assert_eq!(m.len(), 1);
        let freed = m.punch(0, u64::MAX);
        assert_eq!(freed, vec![(100, 15)]);
        assert!(m.is_empty());
        assert_eq!(m.mapped_blocks(), 0);
    }

    #[test]
    fn rollback_undoes_every_change_since_the_checkpoint() {
        let mut m = ExtentMap::default();
        m.insert(0, 100, 10, false);
        m.insert(20, 300, 10, true);
        m.mark_clean();
        let before = m.to_extents();
        let v = m.version();
        let cp = m.checkpoint();
        m.punch(3, 4);
        m.insert(3, 500, 2, false);
        m.shift(20, 5, true);
        m.shift(2, 7, false);
        assert_ne!(m.to_extents(), before);
        m.rollback(cp);
        assert_eq!(m.to_extents(), before);
        assert_eq!(m.mapped_blocks(), 20);
        assert_eq!(m.version(), v);
        assert_eq!(m.dirty_from(), None);
        // Released: the changes stay.
        let cp = m.checkpoint();
        m.punch(0, 1);
        m.release(cp);
        assert_eq!(m.lookup(0), None);
    }

    #[test]
    fn shift_collapses_and_inserts() {
        let mut m = ExtentMap::default();
        m.insert(0, 100, 10, false);
        m.insert(20, 300, 4, true);
        m.punch(4, 4);
        m.shift(8, 4, true);
        assert_eq!(m.lookup(4), Some((108, false, 2)));
        assert_eq!(m.lookup(16), Some((300, true, 4)));
        assert_eq!(m.lookup(20), None);
        m.shift(2, 3, false);
        assert_eq!(m.lookup(1), Some((101, false, 1)));
        assert_eq!(m.lookup(2), None);
        assert_eq!(m.lookup(5), Some((102, false, 2)));
        assert_eq!(m.lookup(19), Some((300, true, 4)));
        assert_eq!(m.mapped_blocks(), 10);
    }

    #[test]
    fn unwritten_runs_do_not_merge_with_written() {
        let mut m = ExtentMap::default();
        m.insert(0, 50, 4, true);
        m.insert(4, 54, 4, false);
        assert_eq!(m.len(), 2);
        assert_eq!(m.goal(8), Some(58));
        assert_eq!(m.next_mapped(9), None);
    }
}
