//! [`SsdDevice`]: the emulated SSD as a `ptsd_blockdev::BlockDevice`, holding
//! real data, under a virtual or a wall clock.

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use ptsd_blockdev::{check_range, check_request, BlockDevice, BlockError};

use crate::error::{DeviceFault, SsdRequestError};
use crate::request::{Op, Request};
use crate::ssd::{Done, Payload, Ssd};
use crate::FtlStats;

/// Where a device's time comes from.
pub trait Clock: Send + Sync {
    /// Now, in nanoseconds (monotone).
    fn now_ns(&self) -> u64;
    /// Block until `t_ns` has come.
    fn wait_until(&self, t_ns: u64);
}

/// Simulated time: waiting jumps the clock forward, so requests take no wall
/// time but their model latencies add up in [`now_ns`](Clock::now_ns).
#[derive(Debug, Default)]
pub struct VirtualClock {
    now: AtomicU64,
}

impl VirtualClock {
    pub fn new() -> Self {
        Self::default()
    }

    /// Move the clock forward to `t_ns` (never back): what a test driving
    /// time by hand calls, the same step as [`Clock::wait_until`].
    pub fn advance_to(&self, t_ns: u64) {
        self.now.fetch_max(t_ns, Ordering::AcqRel);
    }
}

impl Clock for VirtualClock {
    fn now_ns(&self) -> u64 {
        self.now.load(Ordering::Acquire)
    }
    fn wait_until(&self, t_ns: u64) {
        self.now.fetch_max(t_ns, Ordering::AcqRel);
    }
}

/// Real time: a request returns when the model's completion time has passed
/// on the wall clock (emulation).
#[derive(Debug)]
pub struct WallClock {
    start: Instant,
}

impl Default for WallClock {
    fn default() -> Self {
        WallClock {
            start: Instant::now(),
        }
    }
}

impl WallClock {
    pub fn new() -> Self {
        Self::default()
    }
}

impl Clock for WallClock {
    fn now_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }
    fn wait_until(&self, t_ns: u64) {
        loop {
            let now = self.now_ns();
            if now >= t_ns {
                return;
            }
            let left = t_ns - now;
            // Sleep for the bulk, spin the last stretch (sleep overshoots).
            if left > 100_000 {
                std::thread::sleep(Duration::from_nanos(left - 50_000));
            } else {
                std::hint::spin_loop();
            }
        }
    }
}

struct Inner {
    ssd: Ssd,
    next_id: u64,
    out: Vec<Done>,
    /// Completions that belong to other threads' requests.
    finished: HashMap<u64, Done>,
}

impl Inner {
    /// Advance the engine to `now` and file its completions by request id
    /// (for whichever waiting thread they belong to).
    fn collect(&mut self, now: u64) {
        self.ssd.advance(now, &mut self.out);
        for d in self.out.drain(..) {
            self.finished.insert(d.completion.id, d);
        }
    }
}

/// An [`Ssd`] behind the `BlockDevice` trait (block size = page size). Safe
/// to share between threads: requests from several threads are in the
/// interface queue together, as on a real device.
///
/// ```
/// use ptsd_blockdev::BlockDevice;
/// use ptsd_ftl::{FtlConfig, Ssd, SsdDevice, StoreKind, Variant};
///
/// let mut cfg = FtlConfig::paper(Variant::WriteOpt, 64 << 20);
/// cfg.store = StoreKind::Memory;
/// let dev = SsdDevice::virtual_time(Ssd::new(cfg).unwrap());
/// dev.write(10, &vec![7u8; 8192]).unwrap();
/// let mut buf = vec![0u8; 4096];
/// dev.read(11, &mut buf).unwrap();
/// assert_eq!(buf, vec![7u8; 4096]);
/// assert!(dev.now_ns() > 0); // model time went by
/// ```
pub struct SsdDevice<C: Clock = VirtualClock> {
    inner: Mutex<Inner>,
    clock: C,
    page_size: u32,
    pages: u64,
    /// The engine's store device, told what a read will need before the
    /// read takes the lock (see [`SsdDevice::prefetch_from`]).
    prefetch: Option<Arc<dyn BlockDevice>>,
    /// Where recent reads ended: a read starting at one is sequential.
    stream_ends: Mutex<[u64; 8]>,
    /// Read payloads kept for reuse.
    spare: Mutex<Vec<Vec<u8>>>,
}

/// A sequential read prefetches this many times its own size beyond it.
const AHEAD: u64 = 7;

/// Extents of a sequential read's prefetch window less than this many
/// image blocks apart are fetched as one span, gaps included. A flush
/// stripes logical pages over the chips; on the stripe-major image (see
/// `image.rs`) a file's pages lie mostly side by side, interleaved with
/// whatever else was written at the same time (another file, metadata) and
/// broken where the chips' write points sit at different block indices.
/// The gaps here are those interleavings. (Under the earlier ppa-major
/// layout a file's pages lay in short runs, one per chip region; the gaps
/// and a window of 7 requests instead of 3 took `op_cost cold-read` of two
/// files written and read at once from 785-1 015 to 917-1 206 MB/s,
/// `docs/results.md`, 2026-11-28.)
const PREFETCH_GAP_BLOCKS: u64 = 64;

/// Read payloads kept for reuse (one per reader thread is enough).
const SPARE_BUFFERS: usize = 8;
/// Largest read payload kept (a FUSE read is at most 1 MiB).
const SPARE_MAX_BYTES: usize = 1 << 20;

/// Largest request handed to the engine at once (pages).
const MAX_PAGES: u64 = 1024;

impl SsdDevice<VirtualClock> {
    /// Simulated time: calls return at once, the clock jumps.
    pub fn virtual_time(ssd: Ssd) -> Self {
        SsdDevice::new(ssd, VirtualClock::new())
    }
}

impl SsdDevice<WallClock> {
    /// Real-time emulation: each call takes the model's latency.
    pub fn real_time(ssd: Ssd) -> Self {
        SsdDevice::new(ssd, WallClock::new())
    }
}

impl<C: Clock> SsdDevice<C> {
    pub fn new(ssd: Ssd, clock: C) -> Self {
        SsdDevice {
            page_size: ssd.page_size(),
            pages: ssd.logical_pages(),
            inner: Mutex::new(Inner {
                ssd,
                next_id: 0,
                out: Vec::new(),
                finished: HashMap::new(),
            }),
            clock,
            prefetch: None,
            stream_ends: Mutex::new([u64::MAX; 8]),
            spare: Mutex::new(Vec::new()),
        }
    }

    /// Prefetch from `image`, the device under the engine's persistent
    /// store, the flash pages a host read will need, before the read takes
    /// the engine's lock, and wait for its own pages there
    /// ([`BlockDevice::await_prefetch`]). The engine reads its store under
    /// that lock, so without this the cold reads of concurrent requests
    /// reach the disk one request at a time.
    pub fn prefetch_from(mut self, image: Arc<dyn BlockDevice>) -> Self {
        self.prefetch = Some(image);
        self
    }

    fn prefetch_pages(&self, block: u64, count: u64) {
        let Some(image) = &self.prefetch else {
            return;
        };
        // A read that continues an earlier one fetches the next as much
        // too: the next request then finds its pages cached.
        let ahead = {
            let mut ends = self.stream_ends.lock();
            match ends.iter_mut().find(|e| **e == block) {
                Some(e) => {
                    *e = block + count;
                    count * AHEAD
                }
                None => {
                    ends.rotate_right(1);
                    ends[0] = block + count;
                    0
                }
            }
        };
        let ahead = ahead.min(self.pages - block - count);
        let pages = |n: u64| n.min(u64::from(u32::MAX)) as u32;
        // Its own pages first (the read waits for them), then the next.
        let (mut own, mut next) = (Vec::new(), Vec::new());
        {
            let g = self.inner.lock();
            g.ssd.image_extents(block, pages(count), &mut own);
            g.ssd.image_extents(block + count, pages(ahead), &mut next);
        }
        crate::ssd::merge_within(&mut next, PREFETCH_GAP_BLOCKS);
        for &(b, n) in own.iter().chain(&next) {
            image.prefetch(b, n);
        }
        // Wait for its own pages here, off the lock: the engine reads them
        // under it, and a thread waiting there for the disk would hold up
        // every other request, this lookup of theirs included (two threads'
        // cold random reads then went to the disk one at a time).
        for &(b, n) in &own {
            image.await_prefetch(b, n);
        }
    }

    /// The device's clock, now.
    pub fn now_ns(&self) -> u64 {
        self.clock.now_ns()
    }

    /// The engine's counters.
    pub fn stats(&self) -> FtlStats {
        self.inner.lock().ssd.stats().clone()
    }

    /// Run `f` on the engine (reset stats, shut down, inspect).
    pub fn with_ssd<R>(&self, f: impl FnOnce(&mut Ssd) -> R) -> R {
        f(&mut self.inner.lock().ssd)
    }

    /// Give the engine back.
    pub fn into_inner(self) -> Ssd {
        self.inner.into_inner().ssd
    }

    /// Submit one request and wait (on the clock) until it completes.
    fn run(&self, op: Op, lpn: u64, pages: u32, payload: Payload) -> Result<Payload, BlockError> {
        let id = {
            let mut g = self.inner.lock();
            let id = g.next_id;
            g.next_id += 1;
            let now = self.clock.now_ns();
            g.ssd
                .submit(now, Request { id, op, lpn, pages }, payload)
                .map_err(|e| request_error(e, op, lpn, pages, self.pages))?;
            id
        };
        loop {
            let wait = {
                let mut g = self.inner.lock();
                let g = &mut *g;
                g.collect(self.clock.now_ns());
                if let Some(d) = g.finished.remove(&id) {
                    if d.failed {
                        return Err(self.failure(d.error, &g.ssd, op, lpn, pages));
                    }
                    return Ok(d.payload);
                }
                g.ssd.next_event()
            };
            match wait {
                Some(t) => self.clock.wait_until(t),
                // Someone else collected our completion between the locks:
                // loop to find it in `finished`.
                None => std::thread::yield_now(),
            }
        }
    }
}

impl<C: Clock> SsdDevice<C> {
    /// The error of a request the engine failed: its own, else the
    /// device's fault.
    fn failure(
        &self,
        error: Option<Box<SsdRequestError>>,
        ssd: &Ssd,
        op: Op,
        lpn: u64,
        pages: u32,
    ) -> BlockError {
        match (error, ssd.fault()) {
            (Some(e), _) => request_error(*e, op, lpn, pages, self.pages),
            (None, Some(f)) => fault_error(op, f.clone()),
            (None, None) => BlockError::Io(io::Error::other("the SSD failed the request")),
        }
    }

    /// Validate the extent `[block, ..)` of `buf` and queue it, copied, as
    /// engine writes of at most `MAX_PAGES` pages each.
    fn queue_copy(
        &self,
        reqs: &mut Vec<(u64, u32, Vec<u8>)>,
        block: u64,
        buf: &[u8],
    ) -> Result<(), BlockError> {
        check_request(self, block, buf.len())?;
        let ps = self.page_size as usize;
        for (i, chunk) in buf.chunks(MAX_PAGES as usize * ps).enumerate() {
            reqs.push((
                block + i as u64 * MAX_PAGES,
                (chunk.len() / ps) as u32,
                chunk.to_vec(),
            ));
        }
        Ok(())
    }

    /// Submit several writes together (one lock for all, as a queue depth
    /// of their number would) and wait until every one completes. The first
    /// error is returned, after every request submitted has completed.
    fn run_writes(&self, writes: Vec<(u64, u32, Vec<u8>)>) -> Result<(), BlockError> {
        let mut pending: Vec<(u64, u64, u32)> = Vec::with_capacity(writes.len());
        let mut first_err = None;
        {
            let mut g = self.inner.lock();
            let now = self.clock.now_ns();
            for (lpn, pages, data) in writes {
                let id = g.next_id;
                g.next_id += 1;
                let req = Request {
                    id,
                    op: Op::Write,
                    lpn,
                    pages,
                };
                match g.ssd.submit(now, req, Payload::Write(data)) {
                    Ok(()) => pending.push((id, lpn, pages)),
                    Err(e) => {
                        first_err = Some(request_error(e, Op::Write, lpn, pages, self.pages));
                        break;
                    }
                }
            }
        }
        // The ids were handed out consecutively under one lock: take this
        // call's completions out of `finished` by range, instead of looking
        // up every pending id at every wake.
        let ids = pending.first().map_or(0, |p| p.0)..pending.last().map_or(0, |p| p.0 + 1);
        let mut left = pending.len();
        while left > 0 {
            let wait = {
                let mut g = self.inner.lock();
                let g = &mut *g;
                g.collect(self.clock.now_ns());
                let ssd = &g.ssd;
                g.finished.retain(|id, d| {
                    if !ids.contains(id) {
                        return true;
                    }
                    left -= 1;
                    if d.failed && first_err.is_none() {
                        let (_, lpn, pages) = pending[(id - ids.start) as usize];
                        first_err = Some(self.failure(d.error.take(), ssd, Op::Write, lpn, pages));
                    }
                    false
                });
                if left == 0 {
                    break;
                }
                g.ssd.next_event()
            };
            match wait {
                Some(t) => self.clock.wait_until(t),
                None => std::thread::yield_now(),
            }
        }
        first_err.map_or(Ok(()), Err)
    }
}

/// A request the engine refused, as a `BlockError`; the engine's error
/// travels inside the `io::Error` (typed, for `source()`/downcasting).
fn request_error(e: SsdRequestError, op: Op, lpn: u64, pages: u32, capacity: u64) -> BlockError {
    match e {
        SsdRequestError::OutOfRange { .. } => BlockError::OutOfRange {
            block: lpn,
            count: u64::from(pages),
            capacity,
        },
        SsdRequestError::Failed(f) => fault_error(op, f),
        other => BlockError::Io(io::Error::new(io::ErrorKind::InvalidInput, other)),
    }
}

/// The device has stopped. An out-of-space fault is `StorageFull` for a
/// write, flush or discard, so the file system above answers ENOSPC, not
/// EIO; a read of a stopped device, or any other fault, is an I/O error.
fn fault_error(op: Op, f: DeviceFault) -> BlockError {
    let kind = if f.is_no_space() && op != Op::Read {
        io::ErrorKind::StorageFull
    } else {
        io::ErrorKind::Other
    };
    BlockError::Io(io::Error::new(kind, f))
}

impl<C: Clock> BlockDevice for SsdDevice<C> {
    fn block_size(&self) -> u32 {
        self.page_size
    }

    fn num_blocks(&self) -> u64 {
        self.pages
    }

    fn read(&self, block: u64, buf: &mut [u8]) -> Result<(), BlockError> {
        let count = check_request(self, block, buf.len())?;
        self.prefetch_pages(block, count);
        let ps = self.page_size as usize;
        let mut done = 0;
        while done < count {
            let n = (count - done).min(MAX_PAGES);
            let chunk = &mut buf[done as usize * ps..(done + n) as usize * ps];
            // A recycled buffer: a fresh one would be zeroed (and, at this
            // size, mapped and faulted in) only to be overwritten.
            let mut data = self.spare.lock().pop().unwrap_or_default();
            data.resize(chunk.len(), 0);
            let p = self.run(Op::Read, block + done, n as u32, Payload::Read(data))?;
            if let Payload::Read(data) = p {
                chunk.copy_from_slice(&data);
                let mut spare = self.spare.lock();
                if spare.len() < SPARE_BUFFERS && data.capacity() <= SPARE_MAX_BYTES {
                    spare.push(data);
                }
            }
            done += n;
        }
        Ok(())
    }

    fn write(&self, block: u64, buf: &[u8]) -> Result<(), BlockError> {
        let count = check_request(self, block, buf.len())?;
        let ps = self.page_size as usize;
        let mut done = 0;
        while done < count {
            let n = (count - done).min(MAX_PAGES);
            let chunk = &buf[done as usize * ps..(done + n) as usize * ps];
            self.run(
                Op::Write,
                block + done,
                n as u32,
                Payload::Write(chunk.to_vec()),
            )?;
            done += n;
        }
        Ok(())
    }

    fn flush(&self) -> Result<(), BlockError> {
        self.run(Op::Flush, 0, 0, Payload::None).map(|_| ())
    }

    /// The extents go to the engine together, under one lock.
    fn write_batch(&self, writes: &[(u64, &[u8])]) -> Result<(), BlockError> {
        let mut reqs = Vec::with_capacity(writes.len());
        for &(block, buf) in writes {
            self.queue_copy(&mut reqs, block, buf)?;
        }
        self.run_writes(reqs)
    }

    /// As `write_batch`; an extent of at most `MAX_PAGES` pages goes to
    /// the engine as it is (no copy).
    fn write_batch_owned(&self, writes: Vec<(u64, Vec<u8>)>) -> Result<(), BlockError> {
        let mut reqs = Vec::with_capacity(writes.len());
        for (block, buf) in writes {
            if buf.len() as u64 > MAX_PAGES * u64::from(self.page_size) {
                self.queue_copy(&mut reqs, block, &buf)?;
                continue;
            }
            let count = check_request(self, block, buf.len())?;
            reqs.push((block, count as u32, buf));
        }
        self.run_writes(reqs)
    }

    fn discard(&self, block: u64, count: u64) -> Result<(), BlockError> {
        check_range(self, block, count)?;
        let mut done = 0;
        while done < count {
            let n = (count - done).min(1 << 20);
            self.run(Op::Discard, block + done, n as u32, Payload::None)?;
            done += n;
        }
        Ok(())
    }
}
