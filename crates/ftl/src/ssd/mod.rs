//! The SSD state machine: interface queue, scheduler, write buffer, mapping,
//! GC and the NAND timelines.
//!
//! This file holds the state and the public API; each step has its own
//! module: [`queue`] (scheduler), [`host`] (host operations), [`wbuf`]
//! (write buffer), [`mapio`] (mapping-page I/O), [`gc`] (allocation, GC),
//! [`persist`] (discards, checkpoints), [`nand`] (timeline wrappers),
//! [`payload`] (request buffers), [`sim`] (the simulator adapter).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use crate::bigvec::{prefetch, BigVec};
use crate::config::{FtlConfig, Geometry, StoreKind};
use crate::counters::FtlStats;
use crate::error::{DeviceFault, FtlError, SsdRequestError};
use crate::fastdiv::Divisor;
use crate::flash::{Flash, INVALID, POOL_DATA};
use crate::mapping::{MapAction, MapGeometry, MappingScheme};
use crate::policy::{Scheduler, VictimPolicy};
use crate::request::{Op, Request};
use crate::store::{MemStore, NoStore, Store};
use crate::timeline::Timeline;

mod gc;
mod host;
mod mapio;
mod nand;
mod payload;
mod persist;
mod queue;
mod sim;
mod wbuf;

pub(crate) use host::merge_within;
use payload::NoBuffers;
pub use payload::{DataIo, Done, Payload};
use wbuf::WriteBuffer;

/// Trim-record pages kept before a checkpoint folds them into the map.
const MAX_TRIM_PAGES: usize = 32;

/// `l2p` value of an unmapped logical page.
pub(crate) const UNMAPPED: u32 = u32::MAX;
/// `l2p` flag: the page is in the write buffer, the low bits are its slot.
pub(crate) const IN_BUFFER: u32 = 1 << 31;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cause {
    Read,
    Write,
    Gc,
    Checkpoint,
}

#[derive(Clone)]
struct Queued {
    req: Request,
    submit_ns: u64,
    arrival: u64,
    payload: Payload,
}

#[derive(Clone, Copy)]
enum Pick {
    Read,
    Other,
    /// The write that raised `write_stop`.
    Held,
}

/// One emulated SSD.
///
/// Driving it (closed loop, timing only):
///
/// ```
/// use ptsd_ftl::{FtlConfig, Op, Payload, Request, Ssd, Variant};
///
/// let mut ssd = Ssd::new(FtlConfig::paper(Variant::WriteOpt, 64 << 20)).unwrap();
/// let mut done = Vec::new();
/// for id in 0..8 {
///     let req = Request { id, op: Op::Write, lpn: id * 100, pages: 1 };
///     ssd.submit(0, req, Payload::None).unwrap();
/// }
/// let mut finished = 0;
/// while let Some(t) = ssd.next_event() {
///     ssd.advance(t, &mut done);
///     for d in done.drain(..) {
///         finished += 1;
///         assert!(d.completion.done_ns >= d.completion.submit_ns);
///         if d.completion.id < 64 {
///             let id = d.completion.id + 8;
///             let op = if id % 2 == 0 { Op::Read } else { Op::Write };
///             let req = Request { id, op, lpn: id * 37 % 1000, pages: 1 };
///             ssd.submit(t, req, Payload::None).unwrap();
///         }
///     }
/// }
/// assert_eq!(finished, 72);
/// assert_eq!(ssd.stats().programs_issued_by_reads, 0);
/// ```
pub struct Ssd {
    cfg: FtlConfig,
    g: Geometry,
    tl: Timeline,
    pub(crate) flash: Flash,
    pub(crate) l2p: BigVec<u32>,
    pub(crate) gtd: Vec<u32>,
    /// Sequence number (as-of time) of each mapping page's flash copy.
    pub(crate) gtd_seq: Vec<u64>,
    pub(crate) cache: Box<dyn MappingScheme>,
    /// GC victim choice and the interface-queue order.
    victims: Box<dyn VictimPolicy>,
    sched: Box<dyn Scheduler>,
    /// `sched.stop_writes_when_full()`, asked once.
    sched_stops: bool,
    /// The scheme's own counters at the last `reset_stats` (reported as
    /// the difference), and scratch to read them.
    scheme_base: Vec<(&'static str, u64)>,
    uses_map_pages: bool,
    /// `cache.prefetch` does something (only entry-granular PTSD's).
    cache_prefetches: bool,
    /// `cache.request` does something (custom schemes only).
    cache_sees_requests: bool,
    buf: WriteBuffer,
    pub(crate) store: Box<dyn Store>,
    has_data: bool,
    persistent: bool,

    reads: VecDeque<Queued>,
    others: VecDeque<Queued>,
    arrival: u64,
    slots: Vec<Option<Done>>,
    free_slots: Vec<u32>,
    /// Requests in service by completion time, then slot: `time << 32 | slot`.
    heap: BinaryHeap<Reverse<u128>>,

    write_stop: bool,
    held: Option<(Queued, u64)>,
    /// `next_dispatch`'s answer while nothing it depends on changed
    /// (`None`: to compute). It is asked about twice per event (by the
    /// caller's `next_event`, then by `advance`); `submit`, `dispatch` and
    /// `checkpoint` clear it.
    next_pick: std::cell::Cell<Option<Option<(u64, Pick)>>>,
    ctrl_free: u64,
    busy_until: u64,
    horizon: u64,

    /// LPN -> mapping page.
    per_map_page: Divisor,
    host_rr: u32,
    map_rr: u32,
    gc_depth: u32,
    /// Each chip's GC job under way, and the chips that have one.
    gc_jobs: Vec<Option<gc::GcJob>>,
    gc_active: Vec<u32>,
    /// Per chip: its job's next step cannot start before this (a lower
    /// bound: the last step's end, or the start a failed search found; it
    /// only moves later), so the pump before each host operation skips
    /// jobs that cannot step without touching them. Apart from the jobs
    /// (one dense array) because the pump reads it for every active chip.
    gc_not_before: Vec<u64>,
    /// A lower bound on the active jobs' `gc_not_before` (`u64::MAX` with
    /// none): the pump skips its pass over the jobs while its time is not
    /// past it (most pumps; no job could step). Set exactly by each pass;
    /// a new job lowers it; a step elsewhere only raises a job's bound.
    gc_wake: u64,
    /// Bit `c`: chip `c` has a GC job (kept only with at most 64 chips), so
    /// that the round robins find the next chip without one in a few bit
    /// operations instead of a mispredicted test per chip.
    gc_mask: u64,
    /// GC's mapping write-backs waiting for idle time, oldest first.
    gc_map_work: VecDeque<gc::MapWork>,
    /// When the last buffer flush's data programs end (tests).
    last_flush_end: u64,
    /// Per chip: the latest program or erase placed, `(start, end)`.
    chip_write_busy: Vec<(u64, u64)>,
    act_pool: Vec<Vec<MapAction>>,
    /// A host read's flash pages as (ppa, page of the request), reused.
    read_list: Vec<(u32, u32)>,
    moved: Vec<u32>,
    scratch: Vec<u8>,
    serving_read: bool,
    pub(crate) seq: u64,
    /// Discards since the last host flush, as (first LPN, count, seq of the
    /// last discard of the run; see `do_discard`).
    pub(crate) trim_log: Vec<(u32, u32, u64)>,
    /// Trim-record pages on flash since the last checkpoint.
    pub(crate) trim_pages: Vec<u32>,
    pub(crate) stats: FtlStats,
    fault: Option<DeviceFault>,
    /// Persistent store: mapping pages whose flash copy is older than the
    /// map (bit per mapping page), written at a checkpoint.
    map_stale: Vec<u64>,
    /// When each block's last erase ends (a program must wait for it).
    block_ready: Vec<u64>,
    /// Scratch for the `SimDevice` adapter.
    sim_done: Vec<Done>,
    advances: u64,
}

impl Ssd {
    /// A new, empty SSD. The store must be `None` or `Memory`; a file store
    /// is opened with [`Ssd::open`].
    pub fn new(cfg: FtlConfig) -> Result<Ssd, FtlError> {
        cfg.validate()?;
        let g = cfg.geometry();
        let store: Box<dyn Store> = match &cfg.store {
            StoreKind::None => Box::new(NoStore),
            StoreKind::Memory => Box::new(MemStore::new(g.physical_pages, g.page_size)),
            StoreKind::File { path } => {
                return Err(FtlError::Unsupported(format!(
                    "a file store ({}) is opened with Ssd::open",
                    path.display()
                )))
            }
        };
        Ok(Self::with_store(cfg, store))
    }

    /// A new, empty SSD over any [`Store`] (already validated config).
    pub(crate) fn with_store(cfg: FtlConfig, store: Box<dyn Store>) -> Ssd {
        let g = cfg.geometry();
        let cache = cfg.scheme_factory().build(&MapGeometry::of(&cfg));
        let victims = cfg.gc_policy();
        let sched = cfg.scheduler();
        let has_data = store.keeps_data();
        let persistent = store.persistent();
        let page = g.page_size as usize;
        let cap = g.buffer_pages as usize;
        Ssd {
            tl: Timeline::new(
                g.channels,
                g.chips_per_channel,
                cfg.t_read_ns,
                cfg.t_prog_ns,
                cfg.t_erase_ns,
                cfg.t_xfer_ns,
            ),
            flash: {
                let mut f = Flash::new(g.chips, g.blocks_per_chip, g.pages_per_block);
                f.track_age = victims.needs_age();
                f
            },
            l2p: BigVec::filled(g.logical_pages as usize, UNMAPPED),
            gtd: vec![UNMAPPED; g.map_pages as usize],
            gtd_seq: vec![0; g.map_pages as usize],
            uses_map_pages: cache.uses_map_pages(),
            cache_prefetches: cache.prefetches(),
            cache_sees_requests: cache.sees_requests(),
            cache,
            sched_stops: sched.stop_writes_when_full(),
            victims,
            sched,
            scheme_base: Vec::new(),
            buf: WriteBuffer {
                lpn: Vec::with_capacity(cap),
                prev: Vec::with_capacity(cap),
                data: if has_data {
                    vec![0; cap * page]
                } else {
                    Vec::new()
                },
                cap,
                page,
                inflight: wbuf::InFlight::with_capacity(8 * cap),
                filter: [0; 16],
            },
            store,
            has_data,
            persistent,
            reads: VecDeque::with_capacity(256),
            others: VecDeque::with_capacity(256),
            arrival: 0,
            slots: Vec::with_capacity(256),
            free_slots: Vec::new(),
            heap: BinaryHeap::with_capacity(256),
            write_stop: false,
            held: None,
            next_pick: std::cell::Cell::new(None),
            ctrl_free: 0,
            busy_until: 0,
            horizon: 0,
            per_map_page: Divisor::new(g.entries_per_map_page),
            host_rr: 0,
            map_rr: 0,
            gc_depth: 0,
            gc_jobs: vec![None; g.chips as usize],
            gc_active: Vec::with_capacity(g.chips as usize),
            gc_not_before: vec![0; g.chips as usize],
            gc_wake: u64::MAX,
            gc_mask: 0,
            gc_map_work: VecDeque::new(),
            last_flush_end: 0,
            chip_write_busy: vec![(0, 0); g.chips as usize],
            act_pool: (0..4).map(|_| Vec::with_capacity(64)).collect(),
            read_list: Vec::new(),
            moved: Vec::with_capacity(g.pages_per_block as usize),
            scratch: if has_data { vec![0; page] } else { Vec::new() },
            serving_read: false,
            seq: 0,
            trim_log: Vec::new(),
            trim_pages: Vec::new(),
            stats: FtlStats {
                clean_share: 1.0,
                ..FtlStats::default()
            },
            fault: None,
            map_stale: if persistent {
                vec![0; g.map_pages.div_ceil(64) as usize]
            } else {
                Vec::new()
            },
            sim_done: Vec::with_capacity(256),
            advances: 0,
            block_ready: vec![0; g.total_blocks() as usize],
            g,
            cfg,
        }
    }

    /// An independent copy of the whole device (to run several workloads
    /// from one state); `None` if its store cannot be copied (a persistent
    /// store).
    pub fn try_clone(&self) -> Option<Ssd> {
        Some(Ssd {
            cfg: self.cfg.clone(),
            g: self.g,
            tl: self.tl.clone(),
            flash: self.flash.clone(),
            l2p: self.l2p.clone(),
            gtd: self.gtd.clone(),
            gtd_seq: self.gtd_seq.clone(),
            cache: self.cache.clone_box(),
            victims: self.victims.clone_box(),
            sched: self.sched.clone_box(),
            sched_stops: self.sched_stops,
            scheme_base: self.scheme_base.clone(),
            uses_map_pages: self.uses_map_pages,
            cache_prefetches: self.cache_prefetches,
            cache_sees_requests: self.cache_sees_requests,
            buf: self.buf.clone(),
            store: self.store.try_clone()?,
            has_data: self.has_data,
            persistent: self.persistent,
            reads: self.reads.clone(),
            others: self.others.clone(),
            arrival: self.arrival,
            slots: self.slots.clone(),
            free_slots: self.free_slots.clone(),
            heap: self.heap.clone(),
            write_stop: self.write_stop,
            held: self.held.clone(),
            next_pick: std::cell::Cell::new(None),
            ctrl_free: self.ctrl_free,
            busy_until: self.busy_until,
            horizon: self.horizon,
            per_map_page: self.per_map_page,
            host_rr: self.host_rr,
            map_rr: self.map_rr,
            gc_depth: self.gc_depth,
            gc_jobs: self.gc_jobs.clone(),
            gc_active: self.gc_active.clone(),
            gc_not_before: self.gc_not_before.clone(),
            gc_wake: self.gc_wake,
            gc_mask: self.gc_mask,
            gc_map_work: self.gc_map_work.clone(),
            last_flush_end: self.last_flush_end,
            chip_write_busy: self.chip_write_busy.clone(),
            act_pool: self.act_pool.clone(),
            read_list: Vec::new(),
            moved: self.moved.clone(),
            scratch: self.scratch.clone(),
            serving_read: self.serving_read,
            seq: self.seq,
            trim_log: self.trim_log.clone(),
            trim_pages: self.trim_pages.clone(),
            stats: self.stats.clone(),
            fault: self.fault.clone(),
            map_stale: self.map_stale.clone(),
            block_ready: self.block_ready.clone(),
            sim_done: Vec::with_capacity(self.sim_done.capacity()),
            advances: self.advances,
        })
    }

    /// Logical pages the host can address.
    pub fn logical_pages(&self) -> u64 {
        self.g.logical_pages
    }

    /// Bytes per page (= per logical block).
    pub fn page_size(&self) -> u32 {
        self.g.page_size
    }

    pub fn config(&self) -> &FtlConfig {
        &self.cfg
    }

    /// Counters since creation or the last [`reset_stats`](Self::reset_stats).
    /// The derived figures (`waf`, `map_memory_bytes`, `clean_share`) are
    /// refreshed every 256 `advance` calls; call
    /// [`refresh_stats`](Self::refresh_stats) first for exact ones.
    pub fn stats(&self) -> &FtlStats {
        &self.stats
    }

    /// Zero the counters (to report phases separately).
    pub fn reset_stats(&mut self) {
        let (max, mean) = (self.stats.max_erase_count, self.stats.mean_erase_count);
        self.stats = FtlStats {
            max_erase_count: max,
            mean_erase_count: mean,
            ..FtlStats::default()
        };
        self.scheme_base.clear();
        self.cache.counters(&mut self.scheme_base);
        self.refresh_stats();
    }

    /// Modelled mapping DRAM in use (4 B/page for the page FTL; GTD + cached
    /// pages + dirty entries for DFTL/PTSD).
    pub fn map_memory_bytes(&self) -> u64 {
        self.cache.memory_bytes()
    }

    /// The error that stopped the device, if any.
    pub fn fault(&self) -> Option<&DeviceFault> {
        self.fault.as_ref()
    }

    /// Stop the device as if serving a request had failed with `e`: every
    /// later request is refused with it. Fault injection for the layers
    /// above (the configuration checks keep a real `NoSpace` rare).
    pub fn inject_fault(&mut self, e: FtlError) {
        self.fail(e);
    }

    /// Requests queued, held or in service.
    pub fn outstanding(&self) -> usize {
        self.reads.len() + self.others.len() + usize::from(self.held.is_some()) + self.heap.len()
    }

    /// Put a request in the interface queue at time `now_ns` (monotone).
    /// A bad request is refused and changes nothing.
    pub fn submit(
        &mut self,
        now_ns: u64,
        req: Request,
        payload: Payload,
    ) -> Result<(), SsdRequestError> {
        if let Some(f) = &self.fault {
            return Err(SsdRequestError::Failed(f.clone()));
        }
        let expected = req.pages as usize * self.g.page_size as usize;
        match req.op {
            Op::Read | Op::Write | Op::Discard => {
                if req.pages == 0 {
                    return Err(SsdRequestError::ZeroLength { op: req.op });
                }
                if req
                    .lpn
                    .checked_add(u64::from(req.pages))
                    .is_none_or(|e| e > self.g.logical_pages)
                {
                    return Err(SsdRequestError::OutOfRange {
                        lpn: req.lpn,
                        pages: req.pages,
                        logical_pages: self.g.logical_pages,
                    });
                }
            }
            Op::Flush => {}
        }
        match (&payload, req.op) {
            (Payload::None, Op::Write) if self.has_data => {
                return Err(SsdRequestError::PayloadRequired)
            }
            (Payload::None, _) | (Payload::External, Op::Read | Op::Write) => {}
            (Payload::Write(d), Op::Write) | (Payload::Read(d), Op::Read) => {
                if d.len() != expected {
                    return Err(SsdRequestError::PayloadSize {
                        len: d.len(),
                        pages: req.pages,
                        page_size: self.g.page_size,
                    });
                }
            }
            _ => return Err(SsdRequestError::PayloadKind { op: req.op }),
        }
        let q = Queued {
            req,
            submit_ns: now_ns,
            arrival: self.arrival,
            payload,
        };
        self.arrival += 1;
        // The request waits in the queue a little: fetch its map entry
        // meanwhile (a cache miss on the 4 B/page L2P otherwise stalls the
        // dispatch).
        if let Some(e) = self.l2p.get(req.lpn as usize) {
            prefetch(e);
            if req.op == Op::Read && self.cache_prefetches {
                self.cache.prefetch(req.lpn as u32);
            }
        }
        if req.op == Op::Read {
            self.reads.push_back(q);
        } else {
            self.others.push_back(q);
        }
        self.next_pick.set(None);
        Ok(())
    }

    /// The earliest time at which [`advance`](Self::advance) would do
    /// something: complete a request or dispatch one. `None` when idle.
    pub fn next_event(&self) -> Option<u64> {
        let c = self.heap.peek().map(|&Reverse(k)| (k >> 32) as u64);
        let d = self.next_dispatch().map(|(t, _)| t);
        match (c, d) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Run the controller up to `now_ns`: dispatch queued requests in
    /// scheduler order, placing their NAND operations on the timelines, and
    /// append every request completed by `now_ns` to `out` (in completion
    /// order).
    ///
    /// Events are taken in time order, completions before dispatches at the
    /// same time: if a request completes at or before the next dispatch,
    /// `advance` returns the completions up to that dispatch and stops there,
    /// so that what the host submits in reaction (at the completion time) is
    /// in the queue before the controller decides (read priority depends on
    /// it). Call [`next_event`](Self::next_event) again to go on.
    ///
    /// Requests submitted with [`Payload::External`] fail here: they need
    /// [`advance_with`](Self::advance_with).
    pub fn advance(&mut self, now_ns: u64, out: &mut Vec<Done>) {
        self.advance_with(now_ns, out, &mut NoBuffers)
    }

    /// [`advance`](Self::advance), moving the data of
    /// [`Payload::External`] requests straight between `buffers` and the
    /// SSD's write buffer or store as it serves them.
    ///
    /// ```
    /// use std::collections::HashMap;
    /// use ptsd_ftl::{FtlConfig, Op, Payload, Request, Ssd, StoreKind, Variant};
    ///
    /// let mut cfg = FtlConfig::paper(Variant::WriteOpt, 64 << 20);
    /// cfg.store = StoreKind::Memory;
    /// let mut ssd = Ssd::new(cfg).unwrap();
    /// // The caller's buffers, by request id.
    /// let mut bufs: HashMap<u64, Vec<u8>> = HashMap::from([(0, vec![7; 4096]), (1, vec![0; 4096])]);
    /// ssd.submit(0, Request { id: 0, op: Op::Write, lpn: 5, pages: 1 }, Payload::External).unwrap();
    /// ssd.submit(0, Request { id: 1, op: Op::Read, lpn: 5, pages: 1 }, Payload::External).unwrap();
    /// let mut done = Vec::new();
    /// while let Some(t) = ssd.next_event() {
    ///     ssd.advance_with(t, &mut done, &mut bufs);
    /// }
    /// assert!(done.iter().all(|d| !d.failed));
    /// assert_eq!(bufs[&1], vec![7; 4096]);
    /// ```
    pub fn advance_with(&mut self, now_ns: u64, out: &mut Vec<Done>, buffers: &mut dyn DataIo) {
        let mut limit = now_ns;
        while let Some((t, pick)) = self.next_dispatch() {
            if t > now_ns {
                break;
            }
            if let Some(&Reverse(k)) = self.heap.peek() {
                if (k >> 32) as u64 <= t {
                    limit = t;
                    break;
                }
            }
            self.dispatch(t, pick, buffers);
        }
        while let Some(&Reverse(k)) = self.heap.peek() {
            let slot = k as u32;
            if (k >> 32) as u64 > limit {
                break;
            }
            self.heap.pop();
            if let Some(done) = self.slots[slot as usize].take() {
                out.push(done);
            }
            self.free_slots.push(slot);
        }
        // Derived figures cost dynamic calls: refresh them now and then.
        self.advances = self.advances.wrapping_add(1);
        if self.advances % 256 == 0 {
            self.refresh_stats();
        }
    }

    /// Recompute the derived figures of [`stats`](Self::stats) (WAF,
    /// mapping memory, clean share); `advance` does it every 256 calls.
    pub fn refresh_stats(&mut self) {
        self.stats.refresh_waf();
        self.stats.map_memory_bytes = self.cache.memory_bytes();
        self.stats.clean_share = self.cache.clean_share();
        self.stats.scheme = self.scheme_counters();
    }

    /// The scheme's counters since the last reset (`stats.scheme`).
    pub(crate) fn scheme_counters(&self) -> std::collections::BTreeMap<String, u64> {
        let mut now = Vec::new();
        self.cache.counters(&mut now);
        now.into_iter()
            .map(|(name, v)| {
                let base = self
                    .scheme_base
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map_or(0, |b| b.1);
                (name.to_string(), v.saturating_sub(base))
            })
            .collect()
    }

    /// Time at which every chip is idle (all placed operations done).
    pub fn idle_at(&self) -> u64 {
        self.tl.all_idle_at()
    }

    pub(crate) fn geometry(&self) -> &Geometry {
        &self.g
    }

    /// Pages the write buffer holds at `t` (tests: never over
    /// [`write_buffer_bound`](Self::write_buffer_bound)).
    #[doc(hidden)]
    pub fn write_buffer_held_at(&self, t: u64) -> usize {
        self.buf.held_at(t)
    }

    /// When the data programs of the last write-buffer flush end (tests:
    /// a synchronous flush's write completes then, waiting for nothing
    /// else).
    #[doc(hidden)]
    pub fn last_flush_data_end(&self) -> u64 {
        self.last_flush_end
    }

    /// Pages the write buffer may hold: two flush units (one filling, one
    /// being programmed).
    pub fn write_buffer_bound(&self) -> usize {
        self.buf.bound()
    }

    /// Whether the pages live in a persistent store.
    pub fn is_persistent(&self) -> bool {
        self.persistent
    }

    /// Check the engine's internal invariants (tests): every mapped LPN
    /// points at a valid data page owned by it, valid counts match, the GTD
    /// points at valid mapping pages.
    #[doc(hidden)]
    pub fn check_invariants(&self) -> Result<(), String> {
        let ppb = self.g.pages_per_block;
        let mut valid = vec![0u32; self.flash.blocks() as usize];
        for (ppa, &o) in self.flash.p2l.iter().enumerate() {
            if o != INVALID {
                valid[ppa / ppb as usize] += 1;
            }
        }
        if valid != self.flash.valid {
            return Err("valid counts disagree with page owners".into());
        }
        let mut mapped = 0u64;
        for (lpn, &e) in self.l2p.iter().enumerate() {
            let p = if e != UNMAPPED && e & IN_BUFFER != 0 {
                self.buf.prev[(e & !IN_BUFFER) as usize]
            } else {
                e
            };
            if p == UNMAPPED {
                continue;
            }
            mapped += 1;
            if self.flash.p2l[p as usize] != lpn as u32
                || self.flash.pool[(p / ppb) as usize] != POOL_DATA
            {
                return Err(format!(
                    "lpn {lpn} -> ppa {p} which is not its valid data page"
                ));
            }
        }
        let data_valid: u64 = (0..self.flash.blocks())
            .filter(|&b| self.flash.pool[b as usize] == POOL_DATA)
            .map(|b| u64::from(self.flash.valid[b as usize]))
            .sum();
        if data_valid != mapped {
            return Err(format!(
                "{data_valid} valid data pages but {mapped} mapped LPNs"
            ));
        }
        for (mpn, &p) in self.gtd.iter().enumerate() {
            if p != UNMAPPED && self.flash.p2l[p as usize] != mpn as u32 {
                return Err(format!("gtd[{mpn}] -> {p} which is not that mapping page"));
            }
        }
        Ok(())
    }
}
