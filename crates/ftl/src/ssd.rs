//! The SSD state machine: interface queue, scheduler, write buffer, mapping,
//! GC and the NAND timelines.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use crate::bigvec::{prefetch, BigVec};
use crate::config::{FtlConfig, Geometry, SchedulerKind, StoreKind};
use crate::counters::FtlStats;
use crate::error::{FtlError, RequestError};
use crate::fastdiv::Divisor;
use crate::flash::{Flash, Stream, INVALID, POOL_DATA, POOL_MAP, TRIM_OWNER};
use crate::mapping::{self, MapAction, MapCache};
use crate::request::{Completion, Op, Request};
use crate::store::{MemStore, NoStore, Oob, PageKind, Store};
use crate::timeline::Timeline;

/// Trim-record pages kept before a checkpoint folds them into the map.
const MAX_TRIM_PAGES: usize = 32;

/// `l2p` value of an unmapped logical page.
pub(crate) const UNMAPPED: u32 = u32::MAX;
/// `l2p` flag: the page is in the write buffer, the low bits are its slot.
pub(crate) const IN_BUFFER: u32 = 1 << 31;

/// Data that travels with a request.
///
/// A timing-only simulation passes `None` (nothing is allocated); a device
/// that holds data passes the bytes to write, or a buffer to read into
/// (its length must be `pages * page_size`), or says that the caller keeps
/// the buffer ([`External`](Payload::External)).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub enum Payload {
    #[default]
    None,
    Write(Vec<u8>),
    Read(Vec<u8>),
    /// The caller owns the request's buffer and lends it while the SSD
    /// serves the request, through the [`DataIo`] given to
    /// [`Ssd::advance_with`]: a write's bytes go straight from it into the
    /// write buffer, a read's straight from the store (or the write buffer)
    /// into it, with no copy in between. For reads and writes only.
    External,
}

/// Caller-owned request buffers, for requests submitted with
/// [`Payload::External`].
///
/// The SSD asks for a request's buffer only inside
/// [`Ssd::advance_with`], when it serves the request (a write: when it
/// copies the bytes into its write buffer; a read: when it fills the
/// buffer), and at most once per request. The buffer must be exactly
/// `pages * page_size` bytes long. `None` (or a wrong length) fails that
/// one request ([`Done::error`]); the device goes on.
pub trait DataIo {
    /// The bytes of write request `id`.
    fn source(&mut self, id: u64) -> Option<&[u8]>;
    /// The buffer that read request `id` fills.
    fn destination(&mut self, id: u64) -> Option<&mut [u8]>;
}

/// Buffers by request id: lend one by inserting it before the request is
/// submitted, take it back after the request is done.
impl DataIo for std::collections::HashMap<u64, Vec<u8>> {
    fn source(&mut self, id: u64) -> Option<&[u8]> {
        self.get(&id).map(|b| &b[..])
    }
    fn destination(&mut self, id: u64) -> Option<&mut [u8]> {
        self.get_mut(&id).map(|b| &mut b[..])
    }
}

/// No caller buffers: every [`Payload::External`] request fails
/// (what [`Ssd::advance`] uses).
struct NoBuffers;

impl DataIo for NoBuffers {
    fn source(&mut self, _: u64) -> Option<&[u8]> {
        None
    }
    fn destination(&mut self, _: u64) -> Option<&mut [u8]> {
        None
    }
}

/// A finished request. For reads with a `Payload::Read` buffer, the payload
/// comes back filled; a write's buffer comes back too, for reuse.
#[derive(Debug, Clone)]
pub struct Done {
    pub completion: Completion,
    pub payload: Payload,
    /// It failed: the device failed while serving it (see [`Ssd::fault`]),
    /// or the request itself could not be served ([`error`](Self::error)).
    pub failed: bool,
    /// Why this request alone failed, changing nothing (its external
    /// buffer was missing or of the wrong size); `None` otherwise. Boxed:
    /// it is rare, and every completion carries the field.
    pub error: Option<Box<RequestError>>,
}

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
    SyncFlush,
}

/// The write buffer: LPNs (and their data if the store keeps data) waiting
/// to be programmed, plus the flash page each one replaces.
#[derive(Clone)]
struct WriteBuffer {
    lpn: Vec<u32>,
    prev: Vec<u32>,
    data: Vec<u8>,
    cap: usize,
    page: usize,
}

impl WriteBuffer {
    fn len(&self) -> usize {
        self.lpn.len()
    }
    fn full(&self) -> bool {
        self.lpn.len() >= self.cap
    }
    fn slot_data(&mut self, slot: usize) -> &mut [u8] {
        &mut self.data[slot * self.page..(slot + 1) * self.page]
    }
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
/// assert_eq!(ssd.stats().read_path_programs, 0);
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
    pub(crate) cache: Box<dyn MapCache>,
    uses_map_pages: bool,
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
    ctrl_free: u64,
    busy_until: u64,
    flush_busy_until: u64,
    last_program_end: u64,
    horizon: u64,

    /// LPN -> mapping page.
    per_map_page: Divisor,
    host_rr: u32,
    map_rr: u32,
    gc_depth: u32,
    act_pool: Vec<Vec<MapAction>>,
    moved: Vec<u32>,
    scratch: Vec<u8>,
    serving_read: bool,
    pub(crate) seq: u64,
    /// Discards since the last host flush, as (first LPN, count, seq).
    pub(crate) trim_log: Vec<(u32, u32, u64)>,
    /// Trim-record pages on flash since the last checkpoint.
    pub(crate) trim_pages: Vec<u32>,
    pub(crate) stats: FtlStats,
    fault: Option<String>,
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
        let cache = mapping::build(
            cfg.scheme,
            cfg.map_budget_bytes(),
            g.logical_pages,
            g.map_pages,
            g.page_size,
            cfg.t_read_ns,
            cfg.t_prog_ns,
        );
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
                f.track_age = cfg.gc.policy == crate::config::GcPolicy::CostBenefit;
                f
            },
            l2p: BigVec::filled(g.logical_pages as usize, UNMAPPED),
            gtd: vec![UNMAPPED; g.map_pages as usize],
            gtd_seq: vec![0; g.map_pages as usize],
            uses_map_pages: cache.uses_map_pages(),
            cache,
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
            ctrl_free: 0,
            busy_until: 0,
            flush_busy_until: 0,
            last_program_end: 0,
            horizon: 0,
            per_map_page: Divisor::new(g.entries_per_map_page),
            host_rr: 0,
            map_rr: 0,
            gc_depth: 0,
            act_pool: (0..4).map(|_| Vec::with_capacity(64)).collect(),
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
            uses_map_pages: self.uses_map_pages,
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
            ctrl_free: self.ctrl_free,
            busy_until: self.busy_until,
            flush_busy_until: self.flush_busy_until,
            last_program_end: self.last_program_end,
            horizon: self.horizon,
            per_map_page: self.per_map_page,
            host_rr: self.host_rr,
            map_rr: self.map_rr,
            gc_depth: self.gc_depth,
            act_pool: self.act_pool.clone(),
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
        self.refresh_stats();
    }

    /// Modelled mapping DRAM in use (4 B/page for the page FTL; GTD + cached
    /// pages + dirty entries for DFTL/PTSD).
    pub fn map_memory_bytes(&self) -> u64 {
        self.cache.memory_bytes()
    }

    /// The error that stopped the device, if any.
    pub fn fault(&self) -> Option<&str> {
        self.fault.as_deref()
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
    ) -> Result<(), RequestError> {
        if let Some(f) = &self.fault {
            return Err(RequestError::Failed(f.clone()));
        }
        let expected = req.pages as usize * self.g.page_size as usize;
        match req.op {
            Op::Read | Op::Write | Op::Discard => {
                if req.pages == 0 {
                    return Err(RequestError::ZeroLength { op: req.op });
                }
                if req
                    .lpn
                    .checked_add(u64::from(req.pages))
                    .is_none_or(|e| e > self.g.logical_pages)
                {
                    return Err(RequestError::OutOfRange {
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
                return Err(RequestError::PayloadRequired)
            }
            (Payload::None, _) | (Payload::External, Op::Read | Op::Write) => {}
            (Payload::Write(d), Op::Write) | (Payload::Read(d), Op::Read) => {
                if d.len() != expected {
                    return Err(RequestError::PayloadSize {
                        len: d.len(),
                        pages: req.pages,
                        page_size: self.g.page_size,
                    });
                }
            }
            _ => return Err(RequestError::PayloadKind { op: req.op }),
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
            if req.op == Op::Read {
                self.cache.prefetch(req.lpn as u32);
            }
        }
        if req.op == Op::Read {
            self.reads.push_back(q);
        } else {
            self.others.push_back(q);
        }
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
    }

    fn next_dispatch(&self) -> Option<(u64, Pick)> {
        if self.write_stop {
            if let Some(r) = self.reads.front() {
                return Some((r.submit_ns.max(self.ctrl_free), Pick::Read));
            }
            let (_, stopped) = self.held.as_ref()?;
            let t = self.ctrl_free.max(self.busy_until).max(*stopped);
            return Some((t, Pick::SyncFlush));
        }
        let pick = match (self.reads.front(), self.others.front()) {
            (Some(r), Some(o)) => {
                if r.arrival < o.arrival {
                    (r.submit_ns, Pick::Read)
                } else {
                    (o.submit_ns, Pick::Other)
                }
            }
            (Some(r), None) => (r.submit_ns, Pick::Read),
            (None, Some(o)) => (o.submit_ns, Pick::Other),
            (None, None) => return None,
        };
        Some((pick.0.max(self.ctrl_free), pick.1))
    }

    fn dispatch(&mut self, t: u64, pick: Pick, buffers: &mut dyn DataIo) {
        self.tl.prune(t);
        self.horizon = t;
        match pick {
            Pick::Read => {
                let Some(mut q) = self.reads.pop_front() else {
                    return;
                };
                let req = q.req;
                let r = match self.read_destination(&mut q, buffers) {
                    Ok(dest) => self.do_read(&req, t, dest),
                    Err(e) => return self.refuse(q, t, e),
                };
                self.finish(q, t, r);
            }
            Pick::Other => {
                let Some(q) = self.others.pop_front() else {
                    return;
                };
                let r = match q.req.op {
                    Op::Write => {
                        let fits = self.buf.len() + q.req.pages as usize <= self.buf.cap;
                        if self.cfg.scheduler == SchedulerKind::ReadPriority && !fits {
                            self.write_stop = true;
                            self.stats.write_stops += 1;
                            self.held = Some((q, t));
                            return;
                        }
                        match self.write_source(&q, buffers) {
                            Ok(src) => self.do_write(&q.req, t, false, src),
                            Err(e) => return self.refuse(q, t, e),
                        }
                    }
                    Op::Discard => self.do_discard(&q, t),
                    Op::Flush => self.do_flush(t),
                    Op::Read => unreachable!("reads are queued apart"),
                };
                self.finish(q, t, r);
            }
            Pick::SyncFlush => {
                let Some((q, _)) = self.held.take() else {
                    return;
                };
                self.write_stop = false;
                let r = match self.write_source(&q, buffers) {
                    Ok(src) => self.do_write(&q.req, t, true, src),
                    Err(e) => return self.refuse(q, t, e),
                };
                if let Ok(done) = r {
                    // The controller waits for the synchronous flush.
                    self.ctrl_free = self.ctrl_free.max(done);
                }
                self.finish(q, t, r);
            }
        }
    }

    /// The buffer a read fills: its own payload's or the caller's (checked
    /// before anything changes, so a missing one fails only this request).
    fn read_destination<'a>(
        &self,
        q: &'a mut Queued,
        buffers: &'a mut dyn DataIo,
    ) -> Result<Option<&'a mut [u8]>, RequestError> {
        let (id, op, pages) = (q.req.id, q.req.op, q.req.pages);
        match &mut q.payload {
            Payload::Read(b) => Ok(Some(b)),
            Payload::External => match buffers.destination(id) {
                Some(b) => self.check_buffer_len(b.len(), pages).map(|()| Some(b)),
                None => Err(RequestError::BufferMissing { id, op }),
            },
            _ => Ok(None),
        }
    }

    /// The bytes a write takes: its own payload's or the caller's.
    fn write_source<'a>(
        &self,
        q: &'a Queued,
        buffers: &'a mut dyn DataIo,
    ) -> Result<Option<&'a [u8]>, RequestError> {
        let (id, op, pages) = (q.req.id, q.req.op, q.req.pages);
        match &q.payload {
            Payload::Write(d) => Ok(Some(d)),
            Payload::External => match buffers.source(id) {
                Some(b) => self.check_buffer_len(b.len(), pages).map(|()| Some(b)),
                None => Err(RequestError::BufferMissing { id, op }),
            },
            _ => Ok(None),
        }
    }

    fn check_buffer_len(&self, len: usize, pages: u32) -> Result<(), RequestError> {
        if len == pages as usize * self.g.page_size as usize {
            Ok(())
        } else {
            Err(RequestError::PayloadSize {
                len,
                pages,
                page_size: self.g.page_size,
            })
        }
    }

    /// Complete a request that could not be served, at its dispatch time,
    /// having changed nothing (the device goes on).
    fn refuse(&mut self, q: Queued, dispatch_ns: u64, error: RequestError) {
        self.complete(q, dispatch_ns, dispatch_ns, true, Some(Box::new(error)));
    }

    fn finish(&mut self, q: Queued, dispatch_ns: u64, r: Result<u64, FtlError>) {
        match r {
            Ok(t) => {
                // Read priority flushes only once nothing is in service, so
                // the host has reacted to every completion first.
                self.busy_until = self.busy_until.max(t);
                self.complete(q, dispatch_ns, t, false, None);
            }
            Err(e) => {
                if self.fault.is_none() {
                    self.fault = Some(e.to_string());
                }
                self.complete(q, dispatch_ns, dispatch_ns, true, None);
            }
        }
    }

    /// Hand `q` back; `failed` with no `error` means the device failed.
    fn complete(
        &mut self,
        q: Queued,
        dispatch_ns: u64,
        done_ns: u64,
        failed: bool,
        error: Option<Box<RequestError>>,
    ) {
        self.push_done(Done {
            completion: Completion {
                id: q.req.id,
                op: q.req.op,
                submit_ns: q.submit_ns,
                dispatch_ns,
                done_ns,
            },
            payload: q.payload,
            failed,
            error,
        });
    }

    fn push_done(&mut self, done: Done) {
        let done_ns = done.completion.done_ns;
        let slot = match self.free_slots.pop() {
            Some(s) => {
                self.slots[s as usize] = Some(done);
                s
            }
            None => {
                self.slots.push(Some(done));
                (self.slots.len() - 1) as u32
            }
        };
        self.heap
            .push(Reverse(u128::from(done_ns) << 32 | u128::from(slot)));
    }

    // ---- host operations -------------------------------------------------

    /// Serve read `req`, filling `dest` (if any: `pages * page_size` bytes).
    fn do_read(&mut self, req: &Request, t: u64, dest: Option<&mut [u8]>) -> Result<u64, FtlError> {
        self.serving_read = true;
        let r = self.read_pages(req, t, dest);
        self.serving_read = false;
        r
    }

    fn read_pages(
        &mut self,
        req: &Request,
        t: u64,
        mut dest: Option<&mut [u8]>,
    ) -> Result<u64, FtlError> {
        let page = self.g.page_size as usize;
        let mut done = t;
        let mut acts = self.take_acts();
        for i in 0..req.pages {
            let lpn = (req.lpn + u64::from(i)) as u32;
            self.stats.host_read_pages += 1;
            let e = self.l2p[lpn as usize];
            if e != UNMAPPED && e & IN_BUFFER != 0 {
                self.stats.buffer_read_hits += 1;
                if let Some(b) = dest.as_deref_mut() {
                    let chunk = &mut b[i as usize * page..(i as usize + 1) * page];
                    if self.has_data {
                        chunk.copy_from_slice(self.buf.slot_data((e & !IN_BUFFER) as usize));
                    } else {
                        chunk.fill(0);
                    }
                }
                done = done.max(t + self.cfg.t_dram_ns);
                continue;
            }
            acts.clear();
            if self.cache.read(lpn, self.per_map_page.div(lpn), &mut acts) {
                self.stats.cmt_read_hits += 1;
            } else {
                self.stats.cmt_read_misses += 1;
            }
            let ready = if acts.is_empty() {
                t
            } else {
                self.exec_acts(&acts, t, Cause::Read)?
            };
            if e == UNMAPPED {
                if let Some(b) = dest.as_deref_mut() {
                    b[i as usize * page..(i as usize + 1) * page].fill(0);
                }
                done = done.max(ready + self.cfg.t_dram_ns);
                continue;
            }
            let end = self.op_read(e, ready);
            self.stats.flash_data_reads += 1;
            done = done.max(end);
            if let Some(b) = dest.as_deref_mut() {
                let chunk = &mut b[i as usize * page..(i as usize + 1) * page];
                if self.has_data {
                    self.store.read(e, chunk)?;
                } else {
                    chunk.fill(0);
                }
            }
        }
        self.put_acts(acts);
        // DFTL's write-backs (and any GC they set off) end the read too.
        Ok(done.max(self.horizon))
    }

    /// Copy a write into the buffer. `sync`: flush synchronously when full
    /// (read-priority); otherwise flush asynchronously, waiting only for the
    /// previous flush to drain (double buffering).
    /// `src`: the bytes (`pages * page_size`), if any.
    fn do_write(
        &mut self,
        req: &Request,
        t: u64,
        sync: bool,
        src: Option<&[u8]>,
    ) -> Result<u64, FtlError> {
        let page = self.g.page_size as usize;
        let mut ready = t;
        for i in 0..req.pages {
            let lpn = (req.lpn + u64::from(i)) as u32;
            self.stats.host_write_pages += 1;
            let e = self.l2p[lpn as usize];
            let slot = if e != UNMAPPED && e & IN_BUFFER != 0 {
                (e & !IN_BUFFER) as usize
            } else {
                if self.buf.full() {
                    if sync {
                        ready = self.flush_buffer(ready)?;
                    } else {
                        ready = ready.max(self.flush_busy_until);
                        let end = self.flush_buffer(t)?;
                        self.flush_busy_until = self.flush_busy_until.max(end);
                    }
                }
                let slot = self.buf.len();
                self.buf.lpn.push(lpn);
                // Not `e`: the flush's GC may have moved the old copy.
                self.buf.prev.push(self.l2p[lpn as usize]);
                self.l2p[lpn as usize] = IN_BUFFER | slot as u32;
                slot
            };
            if let Some(d) = src.filter(|_| self.has_data) {
                self.buf
                    .slot_data(slot)
                    .copy_from_slice(&d[i as usize * page..(i as usize + 1) * page]);
            }
        }
        Ok(ready + self.cfg.t_dram_ns)
    }

    fn do_discard(&mut self, q: &Queued, t: u64) -> Result<u64, FtlError> {
        let mut acts = self.take_acts();
        for i in 0..q.req.pages {
            let lpn = (q.req.lpn + u64::from(i)) as u32;
            self.stats.host_discard_pages += 1;
            let mut e = self.l2p[lpn as usize];
            if e != UNMAPPED && e & IN_BUFFER != 0 {
                let slot = (e & !IN_BUFFER) as usize;
                e = self.buf.prev[slot];
                self.buffer_remove(slot);
            }
            self.l2p[lpn as usize] = UNMAPPED;
            if e == UNMAPPED {
                continue;
            }
            self.mark_map_stale(lpn);
            self.flash.invalidate(e, t);
            acts.clear();
            if self.cache.write(lpn, self.per_map_page.div(lpn), &mut acts) {
                self.stats.cmt_write_hits += 1;
            } else {
                self.stats.cmt_write_misses += 1;
            }
            self.exec_acts(&acts, t, Cause::Write)?;
            if self.persistent {
                self.seq += 1;
                match self.trim_log.last_mut() {
                    Some((first, n, _)) if *first + *n == lpn => *n += 1,
                    _ => self.trim_log.push((lpn, 1, self.seq)),
                }
            }
        }
        self.put_acts(acts);
        Ok((t + self.cfg.t_dram_ns).max(self.horizon))
    }

    fn do_flush(&mut self, t: u64) -> Result<u64, FtlError> {
        self.stats.host_flushes += 1;
        let end = self.flush_buffer(t)?;
        self.flush_busy_until = self.flush_busy_until.max(end);
        if self.persistent {
            self.persist_trims(t)?;
            if self.trim_pages.len() > MAX_TRIM_PAGES {
                self.checkpoint(t)?;
            }
            self.store.sync()?;
        }
        Ok(end.max(self.last_program_end).max(self.horizon))
    }

    /// Drop buffer slot `slot`, moving the last slot into its place.
    fn buffer_remove(&mut self, slot: usize) {
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
    /// operations at `t`. Returns when the last of them (and of the mapping
    /// and GC work they caused) ends.
    pub(crate) fn flush_buffer(&mut self, t: u64) -> Result<u64, FtlError> {
        if self.buf.len() == 0 {
            return Ok(t);
        }
        self.stats.buffer_flushes += 1;
        let outer = self.horizon;
        self.horizon = t;
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
            self.cache.prefetch(self.buf.lpn[slot]);
        }
        let mut acts = self.take_acts();
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
            self.op_program(ppa, t);
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
            acts.clear();
            if self.cache.write(lpn, self.per_map_page.div(lpn), &mut acts) {
                self.stats.cmt_write_hits += 1;
            } else {
                self.stats.cmt_write_misses += 1;
            }
            if !acts.is_empty() {
                if let Err(e) = self.exec_acts(&acts, t, Cause::Write) {
                    result = Err(e);
                    break;
                }
            }
        }
        self.put_acts(acts);
        if result.is_err() {
            // Keep what was not programmed mapped to its old copy.
            for slot in 0..self.buf.len() {
                let lpn = self.buf.lpn[slot] as usize;
                if self.l2p[lpn] & IN_BUFFER != 0 && self.l2p[lpn] != UNMAPPED {
                    self.l2p[lpn] = self.buf.prev[slot];
                }
            }
        }
        self.buf.lpn.clear();
        self.buf.prev.clear();
        result?;
        let end = self.horizon;
        self.horizon = outer.max(end);
        Ok(end)
    }

    // ---- mapping pages ---------------------------------------------------

    fn take_acts(&mut self) -> Vec<MapAction> {
        self.act_pool.pop().unwrap_or_default()
    }

    fn put_acts(&mut self, mut v: Vec<MapAction>) {
        v.clear();
        self.act_pool.push(v);
    }

    /// Carry out mapping actions starting at `t`. Returns when the loads
    /// (what a lookup waits for) are done; write-backs extend `horizon`.
    fn exec_acts(&mut self, acts: &[MapAction], t: u64, cause: Cause) -> Result<u64, FtlError> {
        let mut ready = t;
        for &a in acts {
            match a {
                MapAction::Load(mpn) => {
                    let p = self.gtd[mpn as usize];
                    if p != UNMAPPED {
                        ready = ready.max(self.op_read(p, t));
                        self.count_map_read(cause);
                    }
                }
                MapAction::WriteBack { mpn, read_first } => {
                    let mut s = t;
                    let p = self.gtd[mpn as usize];
                    if read_first && p != UNMAPPED {
                        s = self.op_read(p, t);
                        self.count_map_read(cause);
                    }
                    self.write_map_page(mpn, s, cause)?;
                }
            }
        }
        Ok(ready)
    }

    fn count_map_read(&mut self, cause: Cause) {
        let c = &mut self.stats.map_reads;
        match cause {
            Cause::Read => c.host_read += 1,
            Cause::Write => c.host_write += 1,
            Cause::Gc => c.gc += 1,
            Cause::Checkpoint => c.checkpoint += 1,
        }
    }

    /// Program mapping page `mpn` with its current content at `t`.
    pub(crate) fn write_map_page(
        &mut self,
        mpn: u32,
        t: u64,
        cause: Cause,
    ) -> Result<u64, FtlError> {
        let ppa = self.alloc_map(t)?;
        let end = self.op_program(ppa, t);
        self.seq += 1;
        if self.persistent {
            let mut content = std::mem::take(&mut self.scratch);
            self.encode_map_page(mpn, &mut content);
            let oob = Oob {
                kind: PageKind::Map,
                id: mpn,
                seq: self.seq,
                aux: self.seq,
            };
            let r = self.store.program(ppa, oob, &content);
            self.scratch = content;
            r?;
        }
        let old = self.gtd[mpn as usize];
        if old != UNMAPPED {
            self.flash.invalidate(old, t);
        }
        self.gtd[mpn as usize] = ppa;
        self.gtd_seq[mpn as usize] = self.seq;
        if self.persistent {
            self.map_stale[(mpn / 64) as usize] &= !(1u64 << (mpn % 64));
        }
        self.flash.fill(ppa, mpn, t);
        let c = &mut self.stats.map_programs;
        match cause {
            Cause::Read => c.host_read += 1,
            Cause::Write => c.host_write += 1,
            Cause::Gc => c.gc += 1,
            Cause::Checkpoint => c.checkpoint += 1,
        }
        Ok(end)
    }

    /// The flash content of mapping page `mpn`: its entries as little-endian
    /// u32, buffered pages at their old (programmed) copy. The page's as-of
    /// sequence number is its OOB sequence number, which GC copies keep.
    pub(crate) fn encode_map_page(&self, mpn: u32, out: &mut [u8]) {
        let epp = self.g.entries_per_map_page as usize;
        let first = mpn as usize * epp;
        for (i, chunk) in out.chunks_exact_mut(4).take(epp).enumerate() {
            let lpn = first + i;
            let v = match self.l2p.get(lpn) {
                Some(&e) if e != UNMAPPED && e & IN_BUFFER != 0 => {
                    self.buf.prev[(e & !IN_BUFFER) as usize]
                }
                Some(&e) => e,
                None => UNMAPPED,
            };
            chunk.copy_from_slice(&v.to_le_bytes());
        }
    }

    // ---- allocation and GC -----------------------------------------------

    fn alloc(&mut self, stream: Stream, chip: u32, t: u64) -> Result<Option<u32>, FtlError> {
        if let Some(p) = self.flash.alloc_in_open(stream, chip) {
            return Ok(Some(p));
        }
        if self.gc_depth == 0 && self.flash.free_count(chip) <= self.cfg.gc.low_free_blocks {
            self.gc(chip, t)?;
            if let Some(p) = self.flash.alloc_in_open(stream, chip) {
                return Ok(Some(p));
            }
        }
        // Keep the last free block of a chip for GC.
        let keep = if stream == Stream::GcData { 0 } else { 1 };
        if self.flash.open_block(stream, chip, keep) {
            return Ok(self.flash.alloc_in_open(stream, chip));
        }
        Ok(None)
    }

    fn alloc_host(&mut self, t: u64) -> Result<u32, FtlError> {
        for _ in 0..self.g.chips {
            let chip = self.host_rr;
            self.host_rr = if chip + 1 == self.g.chips {
                0
            } else {
                chip + 1
            };
            if let Some(p) = self.alloc(Stream::Host, chip, t)? {
                return Ok(p);
            }
        }
        Err(FtlError::NoSpace)
    }

    fn alloc_map(&mut self, t: u64) -> Result<u32, FtlError> {
        for _ in 0..self.g.chips {
            let chip = self.map_rr;
            self.map_rr = if chip + 1 == self.g.chips {
                0
            } else {
                chip + 1
            };
            if let Some(p) = self.alloc(Stream::Map, chip, t)? {
                return Ok(p);
            }
        }
        Err(FtlError::NoSpace)
    }

    /// Clean blocks on `chip` until it has `high_free_blocks` free (or
    /// nothing is left to reclaim). Copies stay on the chip (copy-back).
    fn gc(&mut self, chip: u32, t: u64) -> Result<(), FtlError> {
        if self.gc_depth >= 4 {
            return Ok(());
        }
        self.gc_depth += 1;
        let r = self.gc_inner(chip, t);
        self.gc_depth -= 1;
        r
    }

    fn gc_inner(&mut self, chip: u32, t: u64) -> Result<(), FtlError> {
        let ppb = self.g.pages_per_block;
        while self.flash.free_count(chip) < self.cfg.gc.high_free_blocks {
            let Some(victim) = self.flash.victim(chip, self.cfg.gc.policy, t) else {
                break;
            };
            let pool = self.flash.pool[victim as usize];
            let stream = if pool == POOL_MAP {
                Stream::Map
            } else {
                Stream::GcData
            };
            if pool == POOL_DATA {
                self.stats.gc_data_runs += 1;
            } else {
                self.stats.gc_map_runs += 1;
            }
            let mut moved = std::mem::take(&mut self.moved);
            moved.clear();
            // The copies follow one another on the chip (nothing else is
            // placed meanwhile): place them all at once.
            let copies_end = self.op_copybacks(chip, t, self.flash.valid[victim as usize]);
            let written = self.flash.wp[victim as usize];
            // The owners' map entries and cache state are random accesses:
            // fetch them a few pages ahead so that the misses overlap.
            const AHEAD: u32 = 16;
            if pool == POOL_DATA {
                for off in 0..AHEAD.min(written) {
                    self.prefetch_owner(victim * ppb + off);
                }
            }
            for off in 0..written {
                let src = victim * ppb + off;
                if pool == POOL_DATA && off + AHEAD < written {
                    self.prefetch_owner(src + AHEAD);
                }
                let owner = self.flash.p2l[src as usize];
                if owner == INVALID {
                    continue;
                }
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
                self.flash.invalidate(src, t);
                self.flash.fill(dst, owner, t);
                if pool == POOL_DATA {
                    self.stats.gc_data_copies += 1;
                    let e = self.l2p[owner as usize];
                    if e != UNMAPPED && e & IN_BUFFER != 0 {
                        self.buf.prev[(e & !IN_BUFFER) as usize] = dst;
                    } else {
                        self.l2p[owner as usize] = dst;
                    }
                    self.mark_map_stale(owner);
                    moved.push(owner);
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
            }
            // The victim's stale copies may be what a power cut falls back
            // to: make the new copies durable before destroying them.
            if self.persistent {
                self.persist_trims(t)?;
                self.store.sync()?;
                self.store.erase(victim * ppb, ppb)?;
            } else if self.has_data {
                self.store.erase(victim * ppb, ppb)?;
            }
            // The erase follows the copies; the block is usable after it.
            let erased = self.op_erase(chip, copies_end);
            self.block_ready[victim as usize] = erased;
            self.flash.erase(victim);
            self.stats.erases += 1;
            let ec = self.flash.erases[victim as usize];
            self.stats.max_erase_count = self.stats.max_erase_count.max(ec);
            self.stats.mean_erase_count += 1.0 / f64::from(self.flash.blocks());
            if pool == POOL_DATA && self.uses_map_pages && !moved.is_empty() {
                self.update_moved_mappings(&mut moved, t)?;
            }
            self.moved = moved;
        }
        Ok(())
    }

    /// Start fetching the map entry and cache state of data page `ppa`'s
    /// owner (GC is about to move it).
    #[inline(always)]
    fn prefetch_owner(&self, ppa: u32) {
        let owner = self.flash.p2l[ppa as usize];
        if owner != INVALID {
            prefetch(&self.l2p[owner as usize]);
            self.cache.prefetch(owner);
        }
    }

    fn update_moved_mappings(&mut self, moved: &mut [u32], t: u64) -> Result<(), FtlError> {
        let epp = self.g.entries_per_map_page;
        moved.sort_unstable();
        let mut acts = self.take_acts();
        let mut i = 0;
        while i < moved.len() {
            let mpn = moved[i] / epp;
            let mut j = i + 1;
            while j < moved.len() && moved[j] / epp == mpn {
                j += 1;
            }
            acts.clear();
            self.cache.gc_update(mpn, &moved[i..j], &mut acts);
            if let Err(e) = self.exec_acts(&acts, t, Cause::Gc) {
                self.put_acts(acts);
                return Err(e);
            }
            i = j;
        }
        self.put_acts(acts);
        Ok(())
    }

    // ---- persistence of discards ------------------------------------------

    /// Write the discards logged since the last flush as trim-record pages.
    fn persist_trims(&mut self, t: u64) -> Result<(), FtlError> {
        if self.trim_log.is_empty() {
            return Ok(());
        }
        let per_page = (self.g.page_size as usize - 8) / 16;
        let log = std::mem::take(&mut self.trim_log);
        for chunk in log.chunks(per_page) {
            let ppa = self.alloc_map(t)?;
            self.op_program(ppa, t);
            self.seq += 1;
            let mut content = std::mem::take(&mut self.scratch);
            content.fill(0);
            content[..8].copy_from_slice(&(chunk.len() as u64).to_le_bytes());
            for (k, &(first, n, seq)) in chunk.iter().enumerate() {
                let at = 8 + 16 * k;
                content[at..at + 4].copy_from_slice(&first.to_le_bytes());
                content[at + 4..at + 8].copy_from_slice(&n.to_le_bytes());
                content[at + 8..at + 16].copy_from_slice(&seq.to_le_bytes());
            }
            let oob = Oob {
                kind: PageKind::Trim,
                id: 0,
                seq: self.seq,
                aux: 0,
            };
            let r = self.store.program(ppa, oob, &content);
            self.scratch = content;
            r?;
            self.flash.fill(ppa, TRIM_OWNER, t);
            self.trim_pages.push(ppa);
            self.stats.trim_pages += 1;
        }
        Ok(())
    }

    #[inline]
    pub(crate) fn mark_map_stale(&mut self, lpn: u32) {
        if self.persistent {
            let m = self.per_map_page.div(lpn);
            self.map_stale[(m / 64) as usize] |= 1u64 << (m % 64);
        }
    }

    pub(crate) fn any_map_stale(&self) -> bool {
        self.map_stale.iter().any(|&w| w != 0)
    }

    /// Make the flash copy of the map current: flush the buffer, write back
    /// the cache's dirty state and every stale mapping page, make it all
    /// durable, then drop the trim records (the map now holds the discards).
    pub(crate) fn checkpoint(&mut self, t: u64) -> Result<u64, FtlError> {
        let mut end = self.flush_buffer(t)?;
        let mut acts = self.take_acts();
        self.cache.write_back_all(&mut acts);
        let r = self.exec_acts(&acts, t, Cause::Checkpoint);
        self.put_acts(acts);
        r?;
        for w in 0..self.map_stale.len() {
            while self.map_stale[w] != 0 {
                let bit = self.map_stale[w].trailing_zeros();
                let mpn = w as u32 * 64 + bit;
                end = end.max(self.write_map_page(mpn, t, Cause::Checkpoint)?);
            }
        }
        self.trim_log.clear();
        self.store.sync()?;
        for p in std::mem::take(&mut self.trim_pages) {
            self.flash.invalidate(p, t);
        }
        Ok(end.max(self.horizon))
    }

    // ---- timeline wrappers -------------------------------------------------

    #[inline]
    fn op_read(&mut self, ppa: u32, t: u64) -> u64 {
        let end = self.tl.read(self.flash.chip_of(ppa), t);
        self.horizon = self.horizon.max(end);
        end
    }

    #[inline]
    fn op_program(&mut self, ppa: u32, t: u64) -> u64 {
        let t = t.max(self.block_ready[self.flash.block_of(ppa) as usize]);
        let end = self.tl.program(self.flash.chip_of(ppa), t);
        self.note_program(end)
    }

    /// Bookkeeping every program (host, mapping, GC copy) shares.
    #[inline]
    fn note_program(&mut self, end: u64) -> u64 {
        if self.serving_read {
            self.stats.read_path_programs += 1;
        }
        self.horizon = self.horizon.max(end);
        self.last_program_end = self.last_program_end.max(end);
        end
    }

    #[inline]
    fn op_copybacks(&mut self, chip: u32, t: u64, copies: u32) -> u64 {
        // (Copies go to the chip's open GC block, erased long before.)
        let end = self.tl.copybacks(chip, t, copies);
        if self.serving_read {
            self.stats.read_path_programs += u64::from(copies);
        }
        self.horizon = self.horizon.max(end);
        self.last_program_end = self.last_program_end.max(end);
        end
    }

    #[inline]
    fn op_erase(&mut self, chip: u32, t: u64) -> u64 {
        let end = self.tl.erase(chip, t);
        self.horizon = self.horizon.max(end);
        end
    }

    /// Time at which every chip is idle (all placed operations done).
    pub fn idle_at(&self) -> u64 {
        self.tl.all_idle_at()
    }

    pub(crate) fn geometry(&self) -> &Geometry {
        &self.g
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

/// The simulator drives the engine timing-only: no payloads.
impl crate::sim::SimDevice for Ssd {
    type Stats = FtlStats;

    fn submit(&mut self, now_ns: u64, req: Request) -> Result<(), crate::sim::DeviceError> {
        Ssd::submit(self, now_ns, req, Payload::None).map_err(|e| e.into())
    }

    fn advance(&mut self, now_ns: u64, done: &mut Vec<Completion>) {
        let mut scratch = std::mem::take(&mut self.sim_done);
        Ssd::advance(self, now_ns, &mut scratch);
        done.extend(scratch.drain(..).map(|d| d.completion));
        self.sim_done = scratch;
    }

    fn next_event(&self) -> Option<u64> {
        Ssd::next_event(self)
    }

    fn stats(&self) -> FtlStats {
        let mut s = Ssd::stats(self).clone();
        s.refresh_waf();
        s.map_memory_bytes = self.cache.memory_bytes();
        s.clean_share = self.cache.clean_share();
        s
    }

    fn reset_stats(&mut self) {
        Ssd::reset_stats(self)
    }

    fn page_size(&self) -> u32 {
        Ssd::page_size(self)
    }

    fn try_clone(&self) -> Option<Self> {
        Ssd::try_clone(self)
    }
}
