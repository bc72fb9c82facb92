//! Mapping schemes: the public trait the engine talks to, and the built-ins
//! (page, DFTL, PTSD with its page- and entry-granular dirty regions and the
//! adaptive split) implemented on it.
//!
//! The engine keeps the authoritative logical-to-physical array itself (it is
//! what the flash holds plus what the cache changed); a [`MappingScheme`]
//! models what a controller with limited DRAM would have to do to use it:
//! which mapping (translation) pages it must read on a miss and which it must
//! write back when it evicts dirty state. It answers with [`MapAction`]s,
//! which the engine places on the NAND timelines, and reports the DRAM it
//! models. A scheme therefore cannot lose data: a wrong scheme gives wrong
//! timings and counters, never wrong contents; the
//! [`conformance`](crate::conformance) kit checks the rest of its contract.
//!
//! A [`SchemeFactory`] builds a scheme for one device; the built-in
//! [`SchemeConfig`] is one, and any other is accepted wherever it is
//! (`FtlConfig::with_scheme`). The crate README's "Write your own FTL"
//! walks through one.

use std::fmt;

use crate::config::{ConfigError, FtlConfig, SchemeConfig, DIRTY_ENTRY_BYTES, MAP_ENTRY_BYTES};
use crate::request::Op;

mod builtin;

/// "No item" in [`Lists`] (and in the engine's block lists).
pub const NIL: u32 = u32::MAX;

/// A flash operation on mapping (translation) pages a scheme needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapAction {
    /// Read mapping page `mpn` into DRAM; the lookup waits for it.
    Load(u32),
    /// Write mapping page `mpn` with its current content. `read_first`: the
    /// page is not in DRAM, so read the old copy first (read-modify-write).
    WriteBack {
        /// The mapping page.
        mpn: u32,
        /// Read the flash copy before writing (the page is not cached).
        read_first: bool,
    },
}

/// What a scheme is built for: the device's mapping geometry, its DRAM
/// budget and its NAND timing.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MapGeometry {
    /// Logical pages the host addresses (LPNs are `0..logical_pages`).
    pub logical_pages: u64,
    /// Mapping pages (`mpn` is `lpn / entries_per_map_page`).
    pub map_pages: u64,
    /// Map entries (4 B each) per mapping page.
    pub entries_per_map_page: u32,
    /// Bytes per page.
    pub page_size: u32,
    /// Mapping DRAM the scheme may model, in bytes (the GTD included).
    pub budget_bytes: u64,
    /// Flash read and program times (for schemes that weigh them).
    pub t_read_ns: u64,
    /// See `t_read_ns`.
    pub t_prog_ns: u64,
}

impl MapGeometry {
    /// The geometry of the device `cfg` describes.
    ///
    /// ```
    /// use ptsd_ftl::mapping::MapGeometry;
    /// use ptsd_ftl::{FtlConfig, Variant};
    /// let g = MapGeometry::of(&FtlConfig::paper(Variant::Dftl, 64 << 20));
    /// assert_eq!(g.logical_pages, 16384);
    /// assert_eq!(g.map_pages, 16);
    /// assert_eq!(g.gtd_bytes(), 64);
    /// ```
    pub fn of(cfg: &FtlConfig) -> Self {
        let g = cfg.geometry();
        MapGeometry {
            logical_pages: g.logical_pages,
            map_pages: g.map_pages,
            entries_per_map_page: g.entries_per_map_page,
            page_size: g.page_size,
            budget_bytes: cfg.map_budget_bytes(),
            t_read_ns: cfg.t_read_ns,
            t_prog_ns: cfg.t_prog_ns,
        }
    }

    /// DRAM of the global translation directory (4 B per mapping page),
    /// which every demand-based scheme keeps.
    pub fn gtd_bytes(&self) -> u64 {
        self.map_pages * MAP_ENTRY_BYTES
    }

    /// The mapping page of `lpn`.
    pub fn map_page_of(&self, lpn: u32) -> u32 {
        lpn / self.entries_per_map_page
    }
}

/// What a mapping scheme does on lookups and updates.
///
/// **What the engine guarantees.** `lpn < logical_pages` and `mpn` is its
/// mapping page. [`read`](Self::read) is called once per host page read
/// that is not served from the write buffer, in dispatch order;
/// [`write`](Self::write) once per page a buffer flush programs and per
/// page discarded; [`gc_update`](Self::gc_update) once per mapping page
/// whose entries a GC run moved; [`write_back_all`](Self::write_back_all)
/// at a host flush of a persistent device. The engine executes the
/// actions in order: a `Load` delays the lookup until the page is read, a
/// `WriteBack` programs a mapping page (after reading it when
/// `read_first`). Actions of `gc_update` are queued for GC's idle time;
/// only its `WriteBack`s are executed (the engine knows what GC moved).
///
/// **What the scheme must guarantee.** The return value says whether the
/// lookup hit (counters only). Every dirty state it drops is written back
/// by an action; after `write_back_all` nothing is dirty (a power cut
/// then loses nothing the host flushed). [`memory_bytes`](Self::memory_bytes)
/// stays within the budget of [`MapGeometry`] (the kit checks after every
/// request). It must not panic on any sequence of calls.
pub trait MappingScheme: Send {
    /// Translate `lpn` (in mapping page `mpn`) for a host read. Returns hit.
    fn read(&mut self, lpn: u32, mpn: u32, acts: &mut Vec<MapAction>) -> bool;
    /// Record a new mapping for `lpn` (host write or discard). Returns hit.
    fn write(&mut self, lpn: u32, mpn: u32, acts: &mut Vec<MapAction>) -> bool;
    /// GC moved the pages `lpns` (sorted, all in mapping page `mpn`).
    fn gc_update(&mut self, mpn: u32, lpns: &[u32], acts: &mut Vec<MapAction>);
    /// Write back every dirty mapping page (checkpoint); afterwards nothing
    /// is dirty.
    fn write_back_all(&mut self, acts: &mut Vec<MapAction>);
    /// Modelled DRAM in use (GTD + cached pages + dirty entries).
    fn memory_bytes(&self) -> u64;
    /// Current share of the cache budget given to clean pages (PTSD), or 1.
    fn clean_share(&self) -> f64 {
        1.0
    }
    /// The scheme's own counters, cumulative since it was built (e.g.
    /// prefetched entries); the engine reports them since the last
    /// `reset_stats`, in `FtlStats::scheme` and the JSON.
    fn counters(&self, _out: &mut Vec<(&'static str, u64)>) {}
    /// Start fetching (into the CPU cache) what a lookup or update of `lpn`
    /// will touch at random: a speed hint before a batch of updates.
    #[inline]
    fn prefetch(&self, _lpn: u32) {}
    /// Whether [`prefetch`](Self::prefetch) does anything (the engine
    /// skips the dynamic call otherwise).
    fn prefetches(&self) -> bool {
        false
    }
    /// A whole host request (`op` is `Read`, `Write` or `Discard`, never
    /// `Flush`), shown before any of its pages is translated, in dispatch
    /// order: what request-level prefetching needs (on the first miss,
    /// load the entries of the rest of the request). A read's
    /// [`read`](Self::read) calls follow at once, one per page not served
    /// from the write buffer; a discard's [`write`](Self::write) calls
    /// follow at once; a write's pages reach [`write`](Self::write) only
    /// when a buffer flush programs them, later and possibly among other
    /// requests' pages. Called only if
    /// [`sees_requests`](Self::sees_requests) says so.
    ///
    /// ```
    /// use ptsd_ftl::mapping::{MapAction, MappingScheme};
    /// use ptsd_ftl::Op;
    ///
    /// /// Remembers the read request being translated.
    /// #[derive(Clone, Default)]
    /// struct Span(Option<(u32, u32)>);
    /// impl MappingScheme for Span {
    ///     fn request(&mut self, op: Op, lpn: u32, pages: u32) {
    ///         self.0 = (op == Op::Read).then_some((lpn, lpn + pages));
    ///     }
    ///     fn sees_requests(&self) -> bool {
    ///         true
    ///     }
    ///     // ... the rest of a scheme (a full page map here).
    ///     fn read(&mut self, _: u32, _: u32, _: &mut Vec<MapAction>) -> bool { true }
    ///     fn write(&mut self, _: u32, _: u32, _: &mut Vec<MapAction>) -> bool { true }
    ///     fn gc_update(&mut self, _: u32, _: &[u32], _: &mut Vec<MapAction>) {}
    ///     fn write_back_all(&mut self, _: &mut Vec<MapAction>) {}
    ///     fn memory_bytes(&self) -> u64 { 0 }
    ///     fn clone_box(&self) -> Box<dyn MappingScheme> { Box::new(self.clone()) }
    /// }
    /// let mut s = Span::default();
    /// s.request(Op::Read, 8, 4);
    /// assert_eq!(s.0, Some((8, 12)));
    /// ```
    fn request(&mut self, _op: Op, _lpn: u32, _pages: u32) {}
    /// Whether [`request`](Self::request) does anything (the engine skips
    /// the dynamic call otherwise: the built-ins do not look at requests).
    fn sees_requests(&self) -> bool {
        false
    }
    /// An independent copy (a snapshot of the device).
    fn clone_box(&self) -> Box<dyn MappingScheme>;
    /// Whether this scheme keeps mapping pages on flash at all (the page
    /// FTL does not).
    fn uses_map_pages(&self) -> bool {
        true
    }
}

/// Builds a [`MappingScheme`] for a device: what `FtlConfig` holds.
///
/// ```
/// use ptsd_ftl::mapping::{MapGeometry, SchemeFactory};
/// use ptsd_ftl::{FtlConfig, SchemeConfig, Variant};
/// let cfg = FtlConfig::paper(Variant::Dftl, 64 << 20);
/// let g = MapGeometry::of(&cfg);
/// // The built-in schemes are factories too.
/// SchemeConfig::Dftl.check(&g).unwrap();
/// let dftl = SchemeConfig::Dftl.build(&g);
/// assert_eq!(dftl.memory_bytes(), g.gtd_bytes());
/// ```
pub trait SchemeFactory: Send + Sync + fmt::Debug {
    /// Short name for tables and JSON.
    fn name(&self) -> String;
    /// Whether the scheme can work on this geometry and budget (called by
    /// `FtlConfig::validate`, before [`build`](Self::build)).
    fn check(&self, _g: &MapGeometry) -> Result<(), ConfigError> {
        Ok(())
    }
    /// A new scheme with nothing cached.
    fn build(&self, g: &MapGeometry) -> Box<dyn MappingScheme>;
}

impl SchemeFactory for SchemeConfig {
    fn name(&self) -> String {
        SchemeConfig::name(self).to_string()
    }

    fn check(&self, g: &MapGeometry) -> Result<(), ConfigError> {
        let budget = g.budget_bytes;
        let page = u64::from(g.page_size);
        let gtd = g.gtd_bytes();
        let short = |scheme, needed| {
            Err(ConfigError::MapMemory {
                scheme,
                budget,
                needed,
            })
        };
        match *self {
            SchemeConfig::Page => {
                let needed = g.logical_pages * MAP_ENTRY_BYTES;
                if budget < needed {
                    return short("page", needed);
                }
            }
            SchemeConfig::Dftl => {
                if budget < gtd + page {
                    return short("dftl", gtd + page);
                }
            }
            SchemeConfig::Ptsd {
                clean_ratio,
                entry_dirty,
                ..
            } => {
                if !(clean_ratio > 0.0 && clean_ratio < 1.0) {
                    return Err(ConfigError::CleanRatio(clean_ratio));
                }
                let min_dirty = if entry_dirty { DIRTY_ENTRY_BYTES } else { page };
                let cmt = budget.saturating_sub(gtd);
                let clean = (cmt as f64 * clean_ratio) as u64;
                let needed_share =
                    (page as f64 / clean_ratio).max(min_dirty as f64 / (1.0 - clean_ratio));
                if clean < page || cmt - clean < min_dirty {
                    return short("ptsd", gtd + needed_share.ceil() as u64);
                }
            }
        }
        Ok(())
    }

    fn build(&self, g: &MapGeometry) -> Box<dyn MappingScheme> {
        builtin::build(*self, g)
    }
}

/// Several intrusive doubly linked lists over item indices `0..n`; an item
/// is in at most one list. Front = most recently used. What the built-in
/// schemes keep their LRU orders in: O(1) touch and eviction with no
/// allocation, 8 B per item.
///
/// ```
/// use ptsd_ftl::mapping::Lists;
/// let mut lru = Lists::new(4, 1);
/// for x in [0, 1, 2] {
///     lru.push_front(0, x);
/// }
/// lru.touch(0, 0);
/// assert_eq!(lru.pop_back(0), Some(1));
/// assert_eq!(lru.len(0), 2);
/// ```
#[derive(Debug, Clone)]
pub struct Lists {
    prev: Vec<u32>,
    next: Vec<u32>,
    head: Vec<u32>,
    tail: Vec<u32>,
    len: Vec<u32>,
}

impl Lists {
    /// `lists` empty lists over items `0..items`.
    pub fn new(items: usize, lists: usize) -> Self {
        Lists {
            prev: vec![NIL; items],
            next: vec![NIL; items],
            head: vec![NIL; lists],
            tail: vec![NIL; lists],
            len: vec![0; lists],
        }
    }

    /// Items in list `l`.
    #[inline]
    pub fn len(&self, l: usize) -> u32 {
        self.len[l]
    }

    /// Put `x` (in no list) at the front of list `l`.
    #[inline]
    pub fn push_front(&mut self, l: usize, x: u32) {
        let h = self.head[l];
        self.prev[x as usize] = NIL;
        self.next[x as usize] = h;
        if h == NIL {
            self.tail[l] = x;
        } else {
            self.prev[h as usize] = x;
        }
        self.head[l] = x;
        self.len[l] += 1;
    }

    /// Take `x` out of list `l` (which must hold it).
    #[inline]
    pub fn remove(&mut self, l: usize, x: u32) {
        let (p, n) = (self.prev[x as usize], self.next[x as usize]);
        if p == NIL {
            self.head[l] = n;
        } else {
            self.next[p as usize] = n;
        }
        if n == NIL {
            self.tail[l] = p;
        } else {
            self.prev[n as usize] = p;
        }
        self.len[l] -= 1;
    }

    /// Take the back (least recently used) item of list `l`.
    #[inline]
    pub fn pop_back(&mut self, l: usize) -> Option<u32> {
        let t = self.tail[l];
        if t == NIL {
            return None;
        }
        self.remove(l, t);
        Some(t)
    }

    /// Put `x` (in no list) at the back of list `l`.
    #[inline]
    pub fn push_back(&mut self, l: usize, x: u32) {
        let t = self.tail[l];
        self.next[x as usize] = NIL;
        self.prev[x as usize] = t;
        if t == NIL {
            self.head[l] = x;
        } else {
            self.next[t as usize] = x;
        }
        self.tail[l] = x;
        self.len[l] += 1;
    }

    /// The front (most recently used) item of list `l`.
    #[inline]
    pub fn front(&self, l: usize) -> Option<u32> {
        Some(self.head[l]).filter(|&x| x != NIL)
    }

    /// The back (least recently used) item of list `l`.
    #[inline]
    pub fn back(&self, l: usize) -> Option<u32> {
        Some(self.tail[l]).filter(|&x| x != NIL)
    }

    /// The item after `x` (towards the back) in its list.
    #[inline]
    pub fn next_of(&self, x: u32) -> Option<u32> {
        Some(self.next[x as usize]).filter(|&y| y != NIL)
    }

    /// The item before `x` (towards the front) in its list.
    #[inline]
    pub fn prev_of(&self, x: u32) -> Option<u32> {
        Some(self.prev[x as usize]).filter(|&y| y != NIL)
    }

    /// Move `x` (in list `l`) to its front.
    #[inline]
    pub fn touch(&mut self, l: usize, x: u32) {
        if self.head[l] != x {
            self.remove(l, x);
            self.push_front(l, x);
        }
    }
}
