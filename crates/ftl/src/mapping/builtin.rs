//! The built-in schemes: page, DFTL, PTSD (page- and entry-granular dirty
//! region, fixed or adaptive split), each a [`MappingScheme`] like any
//! other.

use super::{Lists, MapAction, MapGeometry, MappingScheme};
use crate::bigvec::prefetch;
use crate::config::{SchemeConfig, DIRTY_ENTRY_BYTES, MAP_ENTRY_BYTES};

/// Build the cache for a built-in scheme.
pub(super) fn build(scheme: SchemeConfig, g: &MapGeometry) -> Box<dyn MappingScheme> {
    let (logical_pages, map_pages) = (g.logical_pages, g.map_pages);
    let (t_read, t_prog) = (g.t_read_ns, g.t_prog_ns);
    let epp = g.page_size / MAP_ENTRY_BYTES as u32;
    let gtd = map_pages * MAP_ENTRY_BYTES;
    let page = u64::from(g.page_size);
    let cmt = g.budget_bytes.saturating_sub(gtd);
    match scheme {
        SchemeConfig::Page => Box::new(PageMap {
            bytes: logical_pages * MAP_ENTRY_BYTES,
        }),
        SchemeConfig::Dftl => Box::new(Dftl {
            state: vec![NOT_CACHED; map_pages as usize],
            lru: Lists::new(map_pages as usize, 1),
            cap: ((cmt / page) as u32).max(1),
            gtd_bytes: gtd,
            page_bytes: page,
        }),
        SchemeConfig::Ptsd {
            clean_ratio,
            entry_dirty,
            adaptive,
        } => {
            let dirty_unit = if entry_dirty { DIRTY_ENTRY_BYTES } else { page };
            let split = Split {
                cmt_bytes: cmt,
                page_bytes: page,
                dirty_unit,
                clean_bytes: (cmt as f64 * clean_ratio) as u64,
                adaptive: adaptive.then(|| Adaptive::new(t_read, t_prog)),
            };
            if entry_dirty {
                let (cap_clean, cap_dirty) = split.caps();
                Box::new(PtsdEntry {
                    state: vec![NOT_CACHED; map_pages as usize],
                    clean: Lists::new(map_pages as usize, 1),
                    buckets: Lists::new(map_pages as usize, epp as usize + 1),
                    count: vec![0; map_pages as usize],
                    dirty_bits: vec![0; logical_pages.div_ceil(64) as usize],
                    max_count: 0,
                    total: 0,
                    cap_clean,
                    cap_entries: cap_dirty,
                    epp,
                    gtd_bytes: gtd,
                    split,
                })
            } else {
                let (cap_clean, cap_dirty) = split.caps();
                Box::new(PtsdPage {
                    state: vec![NOT_CACHED; map_pages as usize],
                    lists: Lists::new(map_pages as usize, 2),
                    cap: [cap_clean, cap_dirty],
                    gtd_bytes: gtd,
                    split,
                })
            }
        }
    }
}

const NOT_CACHED: u8 = 0;
const CLEAN: u8 = 1;
const DIRTY: u8 = 2;

/// The page FTL: the whole map is in DRAM; nothing to do.
#[derive(Clone)]
struct PageMap {
    bytes: u64,
}

impl MappingScheme for PageMap {
    fn clone_box(&self) -> Box<dyn MappingScheme> {
        Box::new(self.clone())
    }
    fn read(&mut self, _: u32, _: u32, _: &mut Vec<MapAction>) -> bool {
        true
    }
    fn write(&mut self, _: u32, _: u32, _: &mut Vec<MapAction>) -> bool {
        true
    }
    fn gc_update(&mut self, _: u32, _: &[u32], _: &mut Vec<MapAction>) {}
    fn write_back_all(&mut self, _: &mut Vec<MapAction>) {}
    fn memory_bytes(&self) -> u64 {
        self.bytes
    }
    fn uses_map_pages(&self) -> bool {
        false
    }
}

/// DFTL: whole mapping pages in one LRU. A miss evicts the LRU page,
/// writing it back first if dirty, whoever (read or write) caused the miss.
#[derive(Clone)]
struct Dftl {
    state: Vec<u8>,
    lru: Lists,
    cap: u32,
    gtd_bytes: u64,
    page_bytes: u64,
}

impl Dftl {
    fn make_room(&mut self, acts: &mut Vec<MapAction>) {
        while self.lru.len(0) >= self.cap {
            let Some(v) = self.lru.pop_back(0) else { break };
            if self.state[v as usize] == DIRTY {
                acts.push(MapAction::WriteBack {
                    mpn: v,
                    read_first: false,
                });
            }
            self.state[v as usize] = NOT_CACHED;
        }
    }

    fn access(&mut self, mpn: u32, dirty: bool, acts: &mut Vec<MapAction>) -> bool {
        let s = &mut self.state[mpn as usize];
        if *s != NOT_CACHED {
            if dirty {
                *s = DIRTY;
            }
            self.lru.touch(0, mpn);
            return true;
        }
        self.make_room(acts);
        acts.push(MapAction::Load(mpn));
        self.state[mpn as usize] = if dirty { DIRTY } else { CLEAN };
        self.lru.push_front(0, mpn);
        false
    }
}

impl MappingScheme for Dftl {
    fn clone_box(&self) -> Box<dyn MappingScheme> {
        Box::new(self.clone())
    }
    fn read(&mut self, _: u32, mpn: u32, acts: &mut Vec<MapAction>) -> bool {
        self.access(mpn, false, acts)
    }
    fn write(&mut self, _: u32, mpn: u32, acts: &mut Vec<MapAction>) -> bool {
        self.access(mpn, true, acts)
    }
    fn gc_update(&mut self, mpn: u32, _: &[u32], acts: &mut Vec<MapAction>) {
        // Cached: update in DRAM (as DFTL does). Otherwise one batch
        // read-modify-write of the mapping page for all moved entries.
        if self.state[mpn as usize] != NOT_CACHED {
            self.state[mpn as usize] = DIRTY;
        } else {
            acts.push(MapAction::WriteBack {
                mpn,
                read_first: true,
            });
        }
    }
    fn write_back_all(&mut self, acts: &mut Vec<MapAction>) {
        for (mpn, s) in self.state.iter_mut().enumerate() {
            if *s == DIRTY {
                acts.push(MapAction::WriteBack {
                    mpn: mpn as u32,
                    read_first: false,
                });
                *s = CLEAN;
            }
        }
    }
    fn memory_bytes(&self) -> u64 {
        self.gtd_bytes + u64::from(self.lru.len(0)) * self.page_bytes
    }
}

/// How PTSD splits its cache budget, and the optional adaptive controller.
#[derive(Clone)]
struct Split {
    cmt_bytes: u64,
    page_bytes: u64,
    /// Bytes per dirty unit: a page, or one entry in the entry-granular mode.
    dirty_unit: u64,
    clean_bytes: u64,
    adaptive: Option<Adaptive>,
}

impl Split {
    /// (clean pages, dirty units), each at least one.
    fn caps(&self) -> (u32, u32) {
        let clean = (self.clean_bytes / self.page_bytes).max(1);
        let dirty =
            ((self.cmt_bytes - self.clean_bytes.min(self.cmt_bytes)) / self.dirty_unit).max(1);
        (
            clean.min(u64::from(u32::MAX)) as u32,
            dirty.min(u64::from(u32::MAX)) as u32,
        )
    }

    /// Feed one event to the controller; `Some` when the split moved.
    fn observe(&mut self, read_miss: bool) -> Option<(u32, u32)> {
        let a = self.adaptive.as_mut()?;
        let clean = a.observe(read_miss, self.clean_bytes, self.cmt_bytes)?;
        self.clean_bytes = clean;
        Some(self.caps())
    }
}

/// Adaptive clean:dirty split (the paper's future work).
///
/// Every `WINDOW` events (read misses + dirty evictions) it compares the
/// flash time each region cost in that window: read misses x t_read against
/// dirty evictions x t_prog. If one side costs more than 10 % above the
/// other, 1/32 of the cache budget moves to the region that cost more; the
/// clean share stays within [10 %, 90 %]. Shrinking the clean region just
/// drops clean pages; shrinking the dirty region takes effect at the next
/// write, so a read still never programs flash.
#[derive(Clone)]
struct Adaptive {
    t_read: u64,
    t_prog: u64,
    read_misses: u64,
    dirty_evictions: u64,
}

const WINDOW: u64 = 1024;

impl Adaptive {
    fn new(t_read: u64, t_prog: u64) -> Self {
        Adaptive {
            t_read,
            t_prog,
            read_misses: 0,
            dirty_evictions: 0,
        }
    }

    fn observe(&mut self, read_miss: bool, clean: u64, total: u64) -> Option<u64> {
        if read_miss {
            self.read_misses += 1;
        } else {
            self.dirty_evictions += 1;
        }
        if self.read_misses + self.dirty_evictions < WINDOW {
            return None;
        }
        let read_cost = self.read_misses * self.t_read;
        let write_cost = self.dirty_evictions * self.t_prog;
        self.read_misses = 0;
        self.dirty_evictions = 0;
        let step = total / 32;
        let (lo, hi) = (total / 10, total - total / 10);
        let next = if read_cost * 10 > write_cost * 11 {
            (clean + step).min(hi)
        } else if write_cost * 10 > read_cost * 11 {
            clean.saturating_sub(step).max(lo)
        } else {
            clean
        };
        (next != clean).then_some(next)
    }
}

/// PTSD with a page-granular dirty region (PART, PART-SCHED).
#[derive(Clone)]
struct PtsdPage {
    state: Vec<u8>,
    /// List 0 = clean region, list 1 = dirty region.
    lists: Lists,
    cap: [u32; 2],
    gtd_bytes: u64,
    split: Split,
}

const C: usize = 0;
const D: usize = 1;

impl PtsdPage {
    fn evict_clean_to(&mut self, cap: u32) {
        while self.lists.len(C) > cap {
            let Some(v) = self.lists.pop_back(C) else {
                break;
            };
            self.state[v as usize] = NOT_CACHED;
        }
    }

    /// Make room for one more dirty page (write path only).
    fn make_room_dirty(&mut self, acts: &mut Vec<MapAction>) {
        while self.lists.len(D) >= self.cap[D] {
            let Some(v) = self.lists.pop_back(D) else {
                break;
            };
            acts.push(MapAction::WriteBack {
                mpn: v,
                read_first: false,
            });
            self.state[v as usize] = NOT_CACHED;
            if let Some(caps) = self.split.observe(false) {
                self.apply(caps);
            }
        }
    }

    fn apply(&mut self, (clean, dirty): (u32, u32)) {
        self.cap = [clean, dirty];
        self.evict_clean_to(clean);
    }
}

impl MappingScheme for PtsdPage {
    fn clone_box(&self) -> Box<dyn MappingScheme> {
        Box::new(self.clone())
    }
    fn read(&mut self, _: u32, mpn: u32, acts: &mut Vec<MapAction>) -> bool {
        match self.state[mpn as usize] {
            CLEAN => {
                self.lists.touch(C, mpn);
                true
            }
            DIRTY => {
                self.lists.touch(D, mpn);
                true
            }
            _ => {
                // Only clean pages are evicted on the read path: no program.
                self.evict_clean_to(self.cap[C] - 1);
                acts.push(MapAction::Load(mpn));
                self.state[mpn as usize] = CLEAN;
                self.lists.push_front(C, mpn);
                if let Some(caps) = self.split.observe(true) {
                    self.apply(caps);
                }
                false
            }
        }
    }

    fn write(&mut self, _: u32, mpn: u32, acts: &mut Vec<MapAction>) -> bool {
        match self.state[mpn as usize] {
            DIRTY => {
                self.lists.touch(D, mpn);
                true
            }
            CLEAN => {
                self.lists.remove(C, mpn);
                self.state[mpn as usize] = NOT_CACHED;
                self.make_room_dirty(acts);
                self.state[mpn as usize] = DIRTY;
                self.lists.push_front(D, mpn);
                true
            }
            _ => {
                self.make_room_dirty(acts);
                acts.push(MapAction::Load(mpn));
                self.state[mpn as usize] = DIRTY;
                self.lists.push_front(D, mpn);
                false
            }
        }
    }

    fn gc_update(&mut self, mpn: u32, _: &[u32], acts: &mut Vec<MapAction>) {
        match self.state[mpn as usize] {
            DIRTY => {}
            // A clean page stays clean: write the updated copy, keep it.
            CLEAN => acts.push(MapAction::WriteBack {
                mpn,
                read_first: false,
            }),
            _ => acts.push(MapAction::WriteBack {
                mpn,
                read_first: true,
            }),
        }
    }

    fn write_back_all(&mut self, acts: &mut Vec<MapAction>) {
        while let Some(v) = self.lists.pop_back(D) {
            acts.push(MapAction::WriteBack {
                mpn: v,
                read_first: false,
            });
            self.state[v as usize] = NOT_CACHED;
        }
    }

    fn memory_bytes(&self) -> u64 {
        self.gtd_bytes + u64::from(self.lists.len(C) + self.lists.len(D)) * self.split.page_bytes
    }

    fn clean_share(&self) -> f64 {
        self.split.clean_bytes as f64 / self.split.cmt_bytes.max(1) as f64
    }
}

/// PTSD with an entry-granular dirty region (WRITEOPT): dirty entries are
/// kept per LPN, grouped by mapping page in buckets by count so the page
/// with the most dirty entries is found in O(1).
#[derive(Clone)]
struct PtsdEntry {
    state: Vec<u8>,
    clean: Lists,
    /// Bucket `k` lists the mapping pages with exactly `k` dirty entries.
    buckets: Lists,
    count: Vec<u16>,
    dirty_bits: Vec<u64>,
    max_count: usize,
    total: u64,
    cap_clean: u32,
    cap_entries: u32,
    epp: u32,
    gtd_bytes: u64,
    split: Split,
}

impl PtsdEntry {
    #[inline]
    fn is_dirty(&self, lpn: u32) -> bool {
        self.dirty_bits[(lpn >> 6) as usize] & (1u64 << (lpn & 63)) != 0
    }

    fn evict_clean_to(&mut self, cap: u32) {
        while self.clean.len(0) > cap {
            let Some(v) = self.clean.pop_back(0) else {
                break;
            };
            self.state[v as usize] = NOT_CACHED;
        }
    }

    fn add_entry(&mut self, lpn: u32, mpn: u32) {
        if self.is_dirty(lpn) {
            return;
        }
        self.dirty_bits[(lpn >> 6) as usize] |= 1u64 << (lpn & 63);
        let c = self.count[mpn as usize] as usize;
        if c > 0 {
            self.buckets.remove(c, mpn);
        }
        self.buckets.push_front(c + 1, mpn);
        self.count[mpn as usize] = (c + 1) as u16;
        self.max_count = self.max_count.max(c + 1);
        self.total += 1;
    }

    /// Batch update: write all dirty entries of the fullest mapping page.
    fn evict_one(&mut self, acts: &mut Vec<MapAction>) -> bool {
        while self.max_count > 0 && self.buckets.len(self.max_count) == 0 {
            self.max_count -= 1;
        }
        if self.max_count == 0 {
            return false;
        }
        let Some(v) = self.buckets.pop_back(self.max_count) else {
            return false;
        };
        self.flush_page(v, acts);
        true
    }

    /// Write back mapping page `v` with its dirty entries (already out of its bucket).
    fn flush_page(&mut self, v: u32, acts: &mut Vec<MapAction>) {
        acts.push(MapAction::WriteBack {
            mpn: v,
            read_first: self.state[v as usize] != CLEAN,
        });
        let first = u64::from(v) * u64::from(self.epp);
        let last = (first + u64::from(self.epp)).min(self.dirty_bits.len() as u64 * 64);
        // epp is a multiple of 64 (page size >= 512 B), so whole words.
        for w in (first / 64)..last.div_ceil(64) {
            self.dirty_bits[w as usize] = 0;
        }
        self.total -= u64::from(self.count[v as usize]);
        self.count[v as usize] = 0;
        if let Some((clean, dirty)) = self.split.observe(false) {
            self.cap_clean = clean;
            self.cap_entries = dirty;
            self.evict_clean_to(clean);
        }
    }

    fn make_room(&mut self, acts: &mut Vec<MapAction>) {
        while self.total > u64::from(self.cap_entries) {
            if !self.evict_one(acts) {
                break;
            }
        }
    }
}

impl MappingScheme for PtsdEntry {
    fn clone_box(&self) -> Box<dyn MappingScheme> {
        Box::new(self.clone())
    }
    #[inline]
    fn prefetch(&self, lpn: u32) {
        if let Some(w) = self.dirty_bits.get((lpn >> 6) as usize) {
            prefetch(w);
        }
    }
    fn prefetches(&self) -> bool {
        true
    }

    fn read(&mut self, lpn: u32, mpn: u32, acts: &mut Vec<MapAction>) -> bool {
        if self.is_dirty(lpn) {
            return true;
        }
        if self.state[mpn as usize] == CLEAN {
            self.clean.touch(0, mpn);
            return true;
        }
        self.evict_clean_to(self.cap_clean - 1);
        acts.push(MapAction::Load(mpn));
        self.state[mpn as usize] = CLEAN;
        self.clean.push_front(0, mpn);
        if let Some((clean, dirty)) = self.split.observe(true) {
            self.cap_clean = clean;
            self.cap_entries = dirty;
            self.evict_clean_to(clean);
        }
        false
    }

    fn write(&mut self, lpn: u32, mpn: u32, acts: &mut Vec<MapAction>) -> bool {
        // A write never reads a mapping page: the entry is appended.
        let hit = self.is_dirty(lpn) || self.state[mpn as usize] == CLEAN;
        self.add_entry(lpn, mpn);
        self.make_room(acts);
        hit
    }

    fn gc_update(&mut self, mpn: u32, lpns: &[u32], acts: &mut Vec<MapAction>) {
        for &lpn in lpns {
            self.add_entry(lpn, mpn);
        }
        self.make_room(acts);
    }

    fn write_back_all(&mut self, acts: &mut Vec<MapAction>) {
        for mpn in 0..self.count.len() as u32 {
            let c = self.count[mpn as usize] as usize;
            if c > 0 {
                self.buckets.remove(c, mpn);
                self.flush_page(mpn, acts);
            }
        }
        self.max_count = 0;
    }

    fn memory_bytes(&self) -> u64 {
        self.gtd_bytes
            + u64::from(self.clean.len(0)) * self.split.page_bytes
            + self.total * DIRTY_ENTRY_BYTES
    }

    fn clean_share(&self) -> f64 {
        self.split.clean_bytes as f64 / self.split.cmt_bytes.max(1) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The built-in `scheme` on `map_pages` mapping pages of 1024 entries
    /// with `budget` bytes.
    fn build(
        scheme: SchemeConfig,
        budget: u64,
        logical_pages: u64,
        map_pages: u64,
        page_size: u32,
        t_read_ns: u64,
        t_prog_ns: u64,
    ) -> Box<dyn MappingScheme> {
        super::build(
            scheme,
            &MapGeometry {
                logical_pages,
                map_pages,
                entries_per_map_page: page_size / 4,
                page_size,
                budget_bytes: budget,
                t_read_ns,
                t_prog_ns,
            },
        )
    }

    fn ptsd(entry: bool) -> Box<dyn MappingScheme> {
        // 8 mapping pages of 1024 entries, room for 2 clean + 2 dirty pages
        let page = 4096u64;
        let gtd = 8 * 4;
        build(
            SchemeConfig::Ptsd {
                clean_ratio: 0.5,
                entry_dirty: entry,
                adaptive: false,
            },
            gtd + 4 * page,
            8 * 1024,
            8,
            4096,
            120,
            480,
        )
    }

    #[test]
    fn ptsd_reads_never_write_back() {
        for entry in [false, true] {
            let mut c = ptsd(entry);
            let mut acts = Vec::new();
            for mpn in 0..8u32 {
                c.write(mpn * 1024, mpn, &mut acts);
            }
            acts.clear();
            for round in 0..3 {
                for mpn in 0..8u32 {
                    c.read(mpn * 1024 + 1 + round, mpn, &mut acts);
                }
            }
            assert!(
                acts.iter().all(|a| matches!(a, MapAction::Load(_))),
                "{acts:?}"
            );
        }
    }

    #[test]
    fn dftl_read_miss_can_write_back() {
        let mut c = build(SchemeConfig::Dftl, 32 + 2 * 4096, 8 * 1024, 8, 4096, 1, 1);
        let mut acts = Vec::new();
        c.write(0, 0, &mut acts);
        c.write(1024, 1, &mut acts);
        acts.clear();
        c.read(2048, 2, &mut acts);
        assert_eq!(
            acts,
            vec![
                MapAction::WriteBack {
                    mpn: 0,
                    read_first: false
                },
                MapAction::Load(2)
            ]
        );
    }

    #[test]
    fn entry_eviction_is_greedy() {
        let mut c = build(
            SchemeConfig::Ptsd {
                clean_ratio: 0.5,
                entry_dirty: true,
                adaptive: false,
            },
            32 + 2 * 4096,
            8 * 1024,
            8,
            4096,
            1,
            1,
        );
        // dirty capacity = 4096 B / 8 B = 512 entries
        let mut acts = Vec::new();
        for i in 0..300 {
            c.write(3 * 1024 + i, 3, &mut acts);
        }
        for i in 0..212 {
            c.write(5 * 1024 + i, 5, &mut acts);
        }
        assert!(acts.is_empty());
        c.write(0, 0, &mut acts);
        assert_eq!(
            acts,
            vec![MapAction::WriteBack {
                mpn: 3,
                read_first: true
            }]
        );
        assert_eq!(c.memory_bytes(), 32 + 213 * 8);
    }
}
