//! TPFTL (Zhou, Jiang, Peng, Xu: "An Efficient Page-level FTL to Optimize
//! Address Translation in Flash Memory", EuroSys 2015), written outside
//! `ptsd-ftl` on its public [`MappingScheme`] trait only.
//!
//! TPFTL caches individual mapping entries, grouped by translation page
//! (TP) — the two-level LRU of the paper: TP nodes in one LRU list, each
//! node's entries in its own LRU order — so a controller's DRAM holds the
//! entries that are used, not whole pages around them. On a miss it reads
//! the TP and, when the entries just before the requested one are cached
//! (a sequential pattern), also caches as many entries after it from the
//! page it has just read (selective prefetching: no extra flash read).
//! Request-level prefetching: on a miss, the entries of the rest of the
//! host request that lie in the TP just read are cached too (the scheme
//! sees each whole request through [`MappingScheme::request`]), so a
//! multi-page request costs one TP read per TP it touches, not one per
//! page. Replacement is clean-first within the LRU TP node (a clean entry goes
//! without a flash write); when that node has only dirty entries, all of
//! them are written back in one TP update (batch update) and stay cached,
//! clean.
//!
//! Memory model: 6 B per cached entry (2 B offset in its TP + 4 B physical
//! page), 8 B per TP node (TP number, count), the GTD (4 B per TP); list
//! links are not counted, as the built-in schemes do not count theirs.
//!
//! ```
//! use std::sync::Arc;
//! use ptsd_ftl::{FtlConfig, Op, Payload, Request, Ssd};
//! use ptsd_example_tpftl::Tpftl;
//!
//! let cfg = FtlConfig::paper_with(Arc::new(Tpftl::default()), 64 << 20);
//! let mut ssd = Ssd::new(cfg).unwrap();
//! for id in 0..64 {
//!     let req = Request { id, op: Op::Read, lpn: 1000 + id, pages: 1 };
//!     ssd.submit(0, req, Payload::None).unwrap();
//! }
//! let mut done = Vec::new();
//! while let Some(t) = ssd.next_event() {
//!     ssd.advance(t, &mut done);
//! }
//! ssd.refresh_stats();
//! // 64 sequential reads of one TP: the first misses, the rest are mostly
//! // prefetched.
//! assert!(ssd.stats().map_reads.total() < 8);
//! assert!(ssd.stats().scheme["prefetched"] > 50);
//! ```

use std::sync::Arc;
use std::time::Duration;

use ptsd_bench::sim::{Registry, RegistryError};
use ptsd_ftl::mapping::{Lists, MapAction, MapGeometry, MappingScheme, SchemeFactory};
use ptsd_ftl::{ConfigError, FtlConfig, Op, Ssd, StoreKind};
use ptsd_stack::{Claim, Holder, StackError};

/// The emulated SSD `ptsd ublk add --ftl dftl` serves (the paper's board,
/// DFTL's mapping budget with a floor of four mapping pages), with TPFTL
/// in place of DFTL: what `tpftl-ublk` serves as `/dev/ublkbN`.
///
/// ```
/// use ptsd_ftl::StoreKind;
/// let cfg = ptsd_example_tpftl::device_config(64 << 20, StoreKind::Memory);
/// assert_eq!(cfg.scheme_name(), "tpftl");
/// ```
pub fn device_config(bytes: u64, store: StoreKind) -> FtlConfig {
    let mut cfg = FtlConfig::paper_with(Arc::new(Tpftl::default()), bytes);
    let floor = 4 * u64::from(cfg.page_size);
    cfg.map_memory_bytes = cfg.map_memory_bytes.map(|b| b.max(floor));
    cfg.store = store;
    cfg
}

/// TPFTL's emulated SSD of [`device_config`], opened as `ptsd ublk` opens
/// its own: an image file is claimed under ptsd-stack's exclusive image
/// lock (held until the [`Claim`] is dropped), so an image that `ptsd
/// mount`, mkfs, fsck or another ublk daemon holds is refused, naming the
/// holder, and none of them can take this one while it is served.
///
/// ```
/// use ptsd_ftl::StoreKind;
/// let dir = tempfile::tempdir().unwrap();
/// let store = StoreKind::File { path: dir.path().join("ssd.img") };
/// let (ssd, claim) = ptsd_example_tpftl::open_device(64 << 20, store.clone()).unwrap();
/// let err = ptsd_example_tpftl::open_device(64 << 20, store).err().unwrap();
/// assert!(err.to_string().contains("in use by PID"), "{err}");
/// drop((ssd, claim));
/// ```
pub fn open_device(bytes: u64, store: StoreKind) -> Result<(Ssd, Option<Claim>), StackError> {
    ptsd_stack::claim_ssd(device_config(bytes, store), Holder::Ublk, Duration::ZERO)
}

/// The built-in FTLs plus TPFTL (`tpftl`) and its ablations
/// (`tpftl-noprefetch`, `tpftl-noclean`, `tpftl-norequest`), by the names
/// a sweep file's `ftl` gives: what `tpftl-sweep` runs sweeps with.
///
/// ```
/// let names = ptsd_example_tpftl::registry()?.names();
/// assert!(names.contains(&"dftl".to_string()) && names.contains(&"tpftl".to_string()));
/// # Ok::<(), ptsd_bench::sim::RegistryError>(())
/// ```
pub fn registry() -> Result<Registry, RegistryError> {
    let on = Tpftl::default();
    [
        on,
        Tpftl {
            prefetch: false,
            ..on
        },
        Tpftl {
            clean_first: false,
            ..on
        },
        Tpftl {
            request_prefetch: false,
            ..on
        },
    ]
    .into_iter()
    .try_fold(Registry::builtins(), |reg, t| {
        reg.with_scheme(&t.name(), Arc::new(t))
    })
}

/// Bytes a cached entry costs: its offset in the TP and its physical page.
pub const ENTRY_BYTES: u64 = 6;
/// Bytes a TP node costs: the TP number and its entry count.
pub const NODE_BYTES: u64 = 8;

/// Selective prefetching fetches this many entries per cached one before
/// the miss (see `Cache::prefetch`).
pub const PREFETCH_GROWTH: u32 = 1024;

/// Entry states, per LPN.
const NOT_CACHED: u8 = 0;
const CLEAN: u8 = 1;
const DIRTY: u8 = 2;

/// The TPFTL factory; the fields turn its techniques off one by one (for
/// ablations), all on by default.
///
/// ```
/// use ptsd_example_tpftl::Tpftl;
/// use ptsd_ftl::SchemeFactory;
/// assert_eq!(Tpftl::default().name(), "tpftl");
/// let t = Tpftl { request_prefetch: false, ..Tpftl::default() };
/// assert_eq!(t.name(), "tpftl-norequest");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tpftl {
    /// Selective prefetching on a miss after cached predecessors.
    pub prefetch: bool,
    /// Evict a clean entry of the LRU TP node before writing any back.
    pub clean_first: bool,
    /// Request-level prefetching: a miss caches the rest of its read or
    /// discard request's entries in the TP just read.
    pub request_prefetch: bool,
}

impl Default for Tpftl {
    fn default() -> Self {
        Tpftl {
            prefetch: true,
            clean_first: true,
            request_prefetch: true,
        }
    }
}

impl SchemeFactory for Tpftl {
    /// `tpftl`, with `-noprefetch`, `-noclean`, `-norequest` for each
    /// technique turned off.
    fn name(&self) -> String {
        let mut name = String::from("tpftl");
        for (on, off) in [
            (self.prefetch, "-noprefetch"),
            (self.clean_first, "-noclean"),
            (self.request_prefetch, "-norequest"),
        ] {
            if !on {
                name.push_str(off);
            }
        }
        name
    }

    fn check(&self, g: &MapGeometry) -> Result<(), ConfigError> {
        // Room for the GTD and one node with a few entries.
        let needed = g.gtd_bytes() + NODE_BYTES + 4 * ENTRY_BYTES;
        if g.budget_bytes < needed {
            return Err(ConfigError::Scheme {
                scheme: self.name(),
                reason: format!(
                    "a mapping budget of {} B is too small: it needs at least {needed} B",
                    g.budget_bytes
                ),
            });
        }
        if g.logical_pages > u64::from(u32::MAX) {
            return Err(ConfigError::Scheme {
                scheme: self.name(),
                reason: "more than 2^32 logical pages".into(),
            });
        }
        Ok(())
    }

    fn build(&self, g: &MapGeometry) -> Box<dyn MappingScheme> {
        Box::new(Cache::new(*self, g))
    }
}

/// TPFTL's cached mapping table.
#[derive(Clone)]
struct Cache {
    opts: Tpftl,
    /// Per LPN: not cached, clean or dirty.
    state: Vec<u8>,
    /// Per TP `t`: list `2t` its clean entries, `2t + 1` its dirty ones,
    /// most recently used first (over LPNs).
    entries: Lists,
    /// TP nodes with at least one entry, most recently used first.
    nodes: Lists,
    epp: u32,
    logical: u32,
    gtd_bytes: u64,
    /// Bytes for nodes and entries.
    cap: u64,
    used: u64,
    /// The read or discard request being translated (`start..end`).
    request: Option<(u32, u32)>,
    prefetched: u64,
    request_prefetched: u64,
    batch_updates: u64,
    batch_entries: u64,
    clean_evictions: u64,
}

impl Cache {
    fn new(opts: Tpftl, g: &MapGeometry) -> Self {
        Cache {
            opts,
            state: vec![NOT_CACHED; g.logical_pages as usize],
            entries: Lists::new(g.logical_pages as usize, 2 * g.map_pages as usize),
            nodes: Lists::new(g.map_pages as usize, 1),
            epp: g.entries_per_map_page,
            logical: g.logical_pages as u32,
            gtd_bytes: g.gtd_bytes(),
            cap: g.budget_bytes - g.gtd_bytes(),
            used: 0,
            request: None,
            prefetched: 0,
            request_prefetched: 0,
            batch_updates: 0,
            batch_entries: 0,
            clean_evictions: 0,
        }
    }

    fn node_len(&self, mpn: u32) -> u32 {
        self.entries.len(2 * mpn as usize) + self.entries.len(2 * mpn as usize + 1)
    }

    /// Make `mpn` the most recently used node (adding it if new).
    fn touch_node(&mut self, mpn: u32) {
        if self.node_len(mpn) == 0 {
            self.nodes.push_front(0, mpn);
            self.used += NODE_BYTES;
        } else {
            self.nodes.touch(0, mpn);
        }
    }

    fn insert(&mut self, lpn: u32, mpn: u32, dirty: bool) {
        self.state[lpn as usize] = if dirty { DIRTY } else { CLEAN };
        self.entries
            .push_front(2 * mpn as usize + usize::from(dirty), lpn);
        self.used += ENTRY_BYTES;
    }

    fn remove(&mut self, lpn: u32, mpn: u32) {
        let dirty = self.state[lpn as usize] == DIRTY;
        self.entries
            .remove(2 * mpn as usize + usize::from(dirty), lpn);
        self.state[lpn as usize] = NOT_CACHED;
        self.used -= ENTRY_BYTES;
        if self.node_len(mpn) == 0 {
            self.nodes.remove(0, mpn);
            self.used -= NODE_BYTES;
        }
    }

    /// Batch update: write TP `mpn` with all its dirty entries, which stay
    /// cached, clean (most recent first, ahead of the clean ones).
    fn batch_update(&mut self, mpn: u32, acts: &mut Vec<MapAction>) {
        let (c, d) = (2 * mpn as usize, 2 * mpn as usize + 1);
        if self.entries.len(d) == 0 {
            return;
        }
        // Only some of the TP's entries are in DRAM: read, merge, write.
        acts.push(MapAction::WriteBack {
            mpn,
            read_first: true,
        });
        self.batch_updates += 1;
        while let Some(lpn) = self.entries.pop_back(d) {
            self.entries.push_front(c, lpn);
            self.state[lpn as usize] = CLEAN;
            self.batch_entries += 1;
        }
    }

    /// Evict until the cache fits its budget, never `keep` (the entry being
    /// looked up).
    fn fit(&mut self, keep: u32, acts: &mut Vec<MapAction>) {
        while self.used > self.cap {
            let Some(victim) = self.victim_node(keep) else {
                return;
            };
            if !self.opts.clean_first {
                self.batch_update(victim, acts);
            }
            // The LRU clean entry of the node (not the one looked up); if
            // it has none, its dirty entries become clean first.
            let lpn = match self.lru_clean(victim, keep) {
                Some(l) => l,
                None => {
                    self.batch_update(victim, acts);
                    let Some(l) = self.lru_clean(victim, keep) else {
                        return;
                    };
                    l
                }
            };
            self.remove(lpn, victim);
            self.clean_evictions += 1;
        }
    }

    /// The LRU TP node holding something evictable besides `keep`.
    fn victim_node(&self, keep: u32) -> Option<u32> {
        let tail = self.nodes.back(0)?;
        if tail != keep / self.epp || self.node_len(tail) > 1 {
            return Some(tail);
        }
        // Only the entry looked up is left at the tail: the next node.
        self.nodes.prev_of(tail)
    }

    fn lru_clean(&self, mpn: u32, keep: u32) -> Option<u32> {
        let c = 2 * mpn as usize;
        let tail = self.entries.back(c)?;
        if tail != keep {
            return Some(tail);
        }
        self.entries.prev_of(tail)
    }

    /// Translate `lpn` for a read (`dirty` false) or an update.
    fn lookup(&mut self, lpn: u32, mpn: u32, dirty: bool, acts: &mut Vec<MapAction>) -> bool {
        match self.state[lpn as usize] {
            NOT_CACHED => {}
            s => {
                let l = 2 * mpn as usize + usize::from(s == DIRTY);
                if dirty && s == CLEAN {
                    self.entries.remove(l, lpn);
                    self.entries.push_front(l + 1, lpn);
                    self.state[lpn as usize] = DIRTY;
                } else {
                    self.entries.touch(l, lpn);
                }
                self.nodes.touch(0, mpn);
                return true;
            }
        }
        acts.push(MapAction::Load(mpn));
        self.touch_node(mpn);
        self.insert(lpn, mpn, dirty);
        if self.opts.request_prefetch {
            self.prefetch_request(lpn, mpn);
        }
        if self.opts.prefetch {
            self.prefetch(lpn, mpn);
        }
        self.fit(lpn, acts);
        false
    }

    /// Request-level prefetching: the entries of the rest of the current
    /// request that lie in TP `mpn` (just read for `lpn`).
    fn prefetch_request(&mut self, lpn: u32, mpn: u32) {
        let Some((start, end)) = self.request else {
            return;
        };
        if !(start..end).contains(&lpn) {
            return;
        }
        let last = end.min((mpn + 1) * self.epp).min(self.logical);
        self.request_prefetched += self.cache_behind(mpn, lpn + 1..last);
    }

    /// Cache the entries of `lpns` (in TP `mpn`, just read) not cached yet,
    /// clean, behind the requested entry in the node's LRU order; how many.
    fn cache_behind(&mut self, mpn: u32, lpns: std::ops::Range<u32>) -> u64 {
        let mut added = 0;
        for l in lpns {
            if self.state[l as usize] == NOT_CACHED {
                self.state[l as usize] = CLEAN;
                self.entries.push_back(2 * mpn as usize, l);
                self.used += ENTRY_BYTES;
                added += 1;
            }
        }
        added
    }

    /// Selective prefetching: when the entry before `lpn` is cached (a
    /// sequential pattern), the rest of the TP just read, up to the
    /// length of the cached run before it times `PREFETCH_GROWTH` (at
    /// least one TP's worth once a run spans a TP) and half the cache.
    fn prefetch(&mut self, lpn: u32, mpn: u32) {
        let limit = self.epp;
        let run = (1..=limit.min(lpn))
            .take_while(|&k| self.state[(lpn - k) as usize] != NOT_CACHED)
            .count() as u32;
        if run == 0 {
            return;
        }
        let end = ((mpn + 1) * self.epp).min(self.logical);
        // At most half the cache, so that a long run does not flush it.
        let room = (self.cap / 2 / ENTRY_BYTES) as u32;
        let len = run.saturating_mul(PREFETCH_GROWTH).min(room);
        let last = (lpn + 1).saturating_add(len).min(end);
        self.prefetched += self.cache_behind(mpn, lpn + 1..last);
    }
}

impl MappingScheme for Cache {
    fn request(&mut self, op: Op, lpn: u32, pages: u32) {
        // A write's pages are translated only when the buffer flushes them,
        // among other requests' pages: nothing to prefetch for.
        self.request = match op {
            Op::Read | Op::Discard => Some((lpn, lpn.saturating_add(pages))),
            Op::Write | Op::Flush => None,
        };
    }

    fn sees_requests(&self) -> bool {
        self.opts.request_prefetch
    }

    fn read(&mut self, lpn: u32, mpn: u32, acts: &mut Vec<MapAction>) -> bool {
        self.lookup(lpn, mpn, false, acts)
    }

    fn write(&mut self, lpn: u32, mpn: u32, acts: &mut Vec<MapAction>) -> bool {
        self.lookup(lpn, mpn, true, acts)
    }

    fn gc_update(&mut self, mpn: u32, lpns: &[u32], acts: &mut Vec<MapAction>) {
        // Cached entries are updated in DRAM; if any moved entry is not
        // cached, one read-modify-write of the TP carries them all (and the
        // node's dirty entries with it).
        let mut all_cached = true;
        for &lpn in lpns {
            match self.state[lpn as usize] {
                CLEAN => {
                    let c = 2 * mpn as usize;
                    self.entries.remove(c, lpn);
                    self.entries.push_back(c + 1, lpn);
                    self.state[lpn as usize] = DIRTY;
                }
                DIRTY => {}
                _ => all_cached = false,
            }
        }
        if !all_cached {
            if self.entries.len(2 * mpn as usize + 1) > 0 {
                self.batch_update(mpn, acts);
            } else {
                acts.push(MapAction::WriteBack {
                    mpn,
                    read_first: true,
                });
            }
        }
    }

    fn write_back_all(&mut self, acts: &mut Vec<MapAction>) {
        let mut node = self.nodes.front(0);
        while let Some(mpn) = node {
            node = self.nodes.next_of(mpn);
            self.batch_update(mpn, acts);
        }
    }

    fn memory_bytes(&self) -> u64 {
        self.gtd_bytes + self.used
    }

    fn counters(&self, out: &mut Vec<(&'static str, u64)>) {
        out.extend([
            ("prefetched", self.prefetched),
            ("request_prefetched", self.request_prefetched),
            ("batch_updates", self.batch_updates),
            ("batch_entries", self.batch_entries),
            ("clean_evictions", self.clean_evictions),
        ]);
    }

    fn clone_box(&self) -> Box<dyn MappingScheme> {
        Box::new(self.clone())
    }
}
