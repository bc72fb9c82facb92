//! The emulated SSD (`ptsd-ftl`) as a [`Backend`].
//!
//! Requests go into the SSD's interface queue, where its own scheduler
//! (FIFO or PTSD read priority) orders them. With [`Timing::Emulate`] the
//! SSD runs on the engine's wall clock: a request is released when the NAND
//! model says it finishes, so a program on `/dev/ublkbN` sees modelled flash
//! latencies. With [`Timing::Off`] the SSD runs on its own virtual clock and
//! every request completes as soon as it is served.

use crate::acklog::{AckLog, AckLogError, Logged, Record};
use crate::backend::{Backend, Finished, Pending, ShutdownError};
use crate::request::IoOp;
use ptsd_ftl::{DataIo, DeviceFault, Done, FtlError, Op, Payload, Request, Ssd};
use std::collections::VecDeque;

/// Whether completions wait for the modelled NAND time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Timing {
    /// Complete as soon as served (the model's clock is virtual).
    #[default]
    Off,
    /// Complete at the modelled time, on the wall clock.
    Emulate,
}

impl std::str::FromStr for Timing {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "off" => Ok(Timing::Off),
            "emulate" | "on" => Ok(Timing::Emulate),
            other => Err(format!(
                "unknown timing {other:?} (expected off or emulate)"
            )),
        }
    }
}

/// The SSD behind the target.
///
/// ```
/// use ptsd_ftl::{FtlConfig, Ssd, StoreKind, Variant};
/// use ptsd_ublk::backend::Backend;
/// use ptsd_ublk::ftl::{FtlBackend, Timing};
/// let mut cfg = FtlConfig::paper(Variant::WriteOpt, 64 << 20);
/// cfg.store = StoreKind::Memory;
/// let b = FtlBackend::new(Ssd::new(cfg).unwrap(), Timing::Off).unwrap();
/// assert_eq!(b.num_blocks(), 16384);
/// ```
pub struct FtlBackend {
    ssd: Ssd,
    timing: Timing,
    keeps_data: bool,
    page: u32,
    /// Virtual time for `Timing::Off`.
    vnow: u64,
    /// Requests inside the SSD and their IO buffers, which the SSD reads
    /// and fills in place (`Payload::External`).
    inflight: Inflight,
    inflight_count: usize,
    done: Vec<Done>,
    /// Finished before `advance` was called (refused at submit).
    refused: Vec<Finished>,
    /// With a file store: every write, write-zeroes and discard, logged
    /// before the SSD sees it (see [`crate::acklog`]).
    log: Option<AckLog>,
    /// FLUSHes in the SSD (request id) and the log mark each covers.
    flush_marks: Vec<(u64, u64)>,
    /// The log outgrew [`LOG_LIMIT`]: an internal FLUSH is draining it and
    /// new requests wait in `held` until it completes.
    draining: Option<u64>,
    held: VecDeque<Pending>,
    /// `Timing::Emulate`: the SSD's clock minus the engine's (the replay
    /// ran on the SSD's clock before the engine's started).
    offset: u64,
    log_limit: u64,
}

/// Live log bytes above which the backend flushes the SSD by itself.
pub const LOG_LIMIT: u64 = 32 << 20;
/// The SSD request id of the backend's own FLUSH.
const INTERNAL_FLUSH: u64 = u64::MAX - 1;

/// Why an [`FtlBackend`] could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The acknowledged-write log could not be opened.
    #[error(transparent)]
    Log(#[from] AckLogError),
    /// Replaying the acknowledged-write log into the SSD failed.
    #[error("replaying {path}: {what}")]
    Replay {
        /// The log file.
        path: std::path::PathBuf,
        /// What went wrong.
        what: String,
    },
}

/// The requests inside the SSD, by queue and tag (the SSD's request id
/// encodes both), lending their IO buffers to the SSD as it serves them.
struct Inflight {
    slots: Vec<Vec<Option<Pending>>>,
    page: usize,
    /// The source of every write-zeroes request (grown to the largest).
    zeroes: Vec<u8>,
}

impl Inflight {
    fn get(&self, id: u64) -> Option<&Pending> {
        let (queue, tag) = queue_and_tag(id);
        self.slots.get(queue)?.get(tag)?.as_ref()
    }

    fn take(&mut self, id: u64) -> Option<Pending> {
        let (queue, tag) = queue_and_tag(id);
        self.slots.get_mut(queue)?.get_mut(tag)?.take()
    }

    fn insert(&mut self, p: Pending) {
        let (q, t) = (p.queue as usize, p.tag as usize);
        if self.slots.len() <= q {
            self.slots.resize_with(q + 1, Vec::new);
        }
        let slots = &mut self.slots[q];
        if slots.len() <= t {
            slots.resize(t + 1, None);
        }
        // A tag is in flight once at a time (the queue owns it until it
        // completes), so the slot is free.
        slots[t] = Some(p);
    }
}

impl DataIo for Inflight {
    fn source(&mut self, id: u64) -> Option<&[u8]> {
        let p = *self.get(id)?;
        let bytes = p.cmd.blocks as usize * self.page;
        match p.cmd.op {
            // SAFETY: the engine owns this request until it is finished
            // (the `IoBufPtr` protocol), and the SSD holds this slice only
            // while it copies from it, taking no other reference into it.
            IoOp::Write => unsafe { p.buf.slice_mut(bytes) }.map(|b| &*b),
            IoOp::WriteZeroes => self.zeroes.get(..bytes),
            _ => None,
        }
    }

    fn destination(&mut self, id: u64) -> Option<&mut [u8]> {
        let p = self.get(id)?;
        if p.cmd.op != IoOp::Read {
            return None;
        }
        let bytes = p.cmd.blocks as usize * self.page;
        // SAFETY: as in `source`; the SSD fills this slice and lets go of
        // it before the request completes.
        unsafe { p.buf.slice_mut(bytes) }
    }
}

impl FtlBackend {
    /// Serve `ssd`, opened (and, for a persistent image, locked) by the
    /// caller — `ptsd ublk` gets it from `ptsd_stack::claim_ssd`. With a
    /// file store (`StoreKind::File`), the writes its last daemon
    /// acknowledged but did not flush are replayed from the log next to
    /// the image and flushed, and every new write is logged.
    pub fn new(ssd: Ssd, timing: Timing) -> Result<Self, OpenError> {
        let mut ssd = ssd;
        let keeps_data = !matches!(ssd.config().store, ptsd_ftl::StoreKind::None);
        let image = match &ssd.config().store {
            ptsd_ftl::StoreKind::File { path } => Some(path.clone()),
            _ => None,
        };
        let log = match image {
            Some(image) => {
                let path = AckLog::path_for(&image);
                let (mut log, records) = AckLog::open(&path, ssd.page_size(), ssd.logical_pages())?;
                if !records.is_empty() {
                    let n = records.len();
                    replay(&mut ssd, records).map_err(|what| OpenError::Replay {
                        path: path.clone(),
                        what,
                    })?;
                    tracing::info!(records = n, log = %path.display(), "replayed acknowledged writes");
                }
                log.rewind().map_err(|source| AckLogError::Io {
                    path: path.clone(),
                    source,
                })?;
                Some(log)
            }
            None => None,
        };
        let page = ssd.page_size();
        let start = ssd.idle_at();
        ssd.refresh_stats();
        Ok(FtlBackend {
            ssd,
            timing,
            keeps_data,
            page,
            vnow: start,
            inflight: Inflight {
                slots: Vec::new(),
                page: page as usize,
                zeroes: Vec::new(),
            },
            inflight_count: 0,
            done: Vec::new(),
            refused: Vec::new(),
            log,
            flush_marks: Vec::new(),
            draining: None,
            held: VecDeque::new(),
            offset: start,
            log_limit: LOG_LIMIT,
        })
    }

    /// The acknowledged-write log, with a file store.
    pub fn log(&self) -> Option<&AckLog> {
        self.log.as_ref()
    }

    /// Flush by itself once the log holds `bytes` (default [`LOG_LIMIT`]).
    pub fn set_log_limit(&mut self, bytes: u64) {
        self.log_limit = bytes;
    }

    /// The SSD's counters (WAF, GC, mapping cache...).
    pub fn ssd(&self) -> &Ssd {
        &self.ssd
    }

    /// Stop the SSD as if serving a request had failed with `e` (fault
    /// injection for tests: a real out-of-space is rare by configuration).
    pub fn inject_fault(&mut self, e: FtlError) {
        self.ssd.inject_fault(e);
    }

    fn finish(&mut self, d: Done, now_ns: u64, out: &mut Vec<Finished>) {
        let id = d.completion.id;
        if id == INTERNAL_FLUSH {
            if let Some(mark) = self.draining.take() {
                self.flush_done(mark, !d.failed);
            }
            return;
        }
        let Some(p) = self.inflight.take(id) else {
            return;
        };
        if p.cmd.op == IoOp::Flush {
            if let Some(i) = self.flush_marks.iter().position(|&(f, _)| f == id) {
                let (_, mark) = self.flush_marks.swap_remove(i);
                self.flush_done(mark, !d.failed);
            }
        }
        self.inflight_count -= 1;
        let bytes = p.cmd.blocks as usize * self.page as usize;
        let result = if d.failed {
            match &d.error {
                Some(e) => {
                    tracing::warn!(error = %e, cmd = ?p.cmd, "SSD failed a request");
                    request_errno(p.cmd.op, e)
                }
                None => fault_errno(p.cmd.op, self.ssd.fault()),
            }
        } else if p.cmd.op.has_data() {
            bytes as i32
        } else {
            0
        };
        if !self.keeps_data && p.cmd.op == IoOp::Read && result >= 0 {
            // A timing-only SSD keeps no data: reads return zeroes.
            // SAFETY: the engine owns this request until it is finished
            // (the `IoBufPtr` protocol).
            if let Some(buf) = unsafe { p.buf.slice_mut(bytes) } {
                buf.fill(0);
            }
        }
        out.push(Finished {
            queue: p.queue,
            tag: p.tag,
            op: p.cmd.op,
            result,
            append_sector: None,
            done_ns: now_ns,
        });
    }
}

impl FtlBackend {
    /// A FLUSH submitted at log mark `mark` completed.
    fn flush_done(&mut self, mark: u64, ok: bool) {
        let Some(log) = &mut self.log else { return };
        if !ok {
            return;
        }
        // The data is durable either way; a log that cannot drop what the
        // flush covered only replays more after a crash.
        if let Err(e) = log.covered(mark) {
            tracing::warn!(error = %ptsd_blockdev::ErrorChain(&e), log = %log.path().display(), "cannot drop flushed records");
        }
    }

    /// Log `p` if it changes data; `Err` = refuse it (the log failed).
    fn log_request(&mut self, p: &Pending, bytes: usize) -> Result<(), ()> {
        let Some(log) = &mut self.log else {
            return Ok(());
        };
        let lpn = p.cmd.block;
        let pages = u32::try_from(p.cmd.blocks).map_err(|_| ())?;
        let rec = match p.cmd.op {
            IoOp::Write => {
                // SAFETY: the engine owns this request until it is finished
                // (the `IoBufPtr` protocol); the slice is only read, and
                // dropped before the SSD is handed the request.
                let Some(data) = (unsafe { p.buf.slice_mut(bytes) }) else {
                    return Err(());
                };
                Record::Write { lpn, data }
            }
            IoOp::WriteZeroes => Record::Zeroes { lpn, pages },
            IoOp::Discard => Record::Discard { lpn, pages },
            IoOp::Flush => {
                self.flush_marks.push((request_id(p), log.mark()));
                return Ok(());
            }
            _ => return Ok(()),
        };
        log.append(rec).map_err(|e| {
            tracing::error!(error = %ptsd_blockdev::ErrorChain(&e), log = %log.path().display(), cmd = ?p.cmd, "cannot log a write: refused");
        })
    }

    /// Past [`LOG_LIMIT`], flush the SSD and hold new requests until done.
    fn maybe_drain(&mut self, t: u64) {
        let Some(log) = &self.log else { return };
        if self.draining.is_some() || log.live_bytes() < self.log_limit {
            return;
        }
        let mark = log.mark();
        let req = Request {
            id: INTERNAL_FLUSH,
            op: Op::Flush,
            lpn: 0,
            pages: 0,
        };
        match self.ssd.submit(t, req, Payload::None) {
            Ok(()) => self.draining = Some(mark),
            Err(e) => tracing::warn!(error = %e, "cannot flush to drain the log"),
        }
    }
}

/// Apply the logged records to `ssd` in order, on its own clock, and flush.
fn replay(ssd: &mut Ssd, records: Vec<Logged>) -> Result<(), String> {
    let page = ssd.page_size() as usize;
    let mut t = ssd.idle_at();
    let mut done = Vec::new();
    let last = records.len() as u64;
    let flush = Request {
        id: last,
        op: Op::Flush,
        lpn: 0,
        pages: 0,
    };
    let reqs = records.into_iter().enumerate().map(|(i, r)| {
        let (op, lpn, pages, payload) = match r {
            Logged::Write { lpn, data } => {
                let pages = (data.len() / page) as u32;
                (Op::Write, lpn, pages, Payload::Write(data))
            }
            Logged::Zeroes { lpn, pages } => (
                Op::Write,
                lpn,
                pages,
                Payload::Write(vec![0; pages as usize * page]),
            ),
            Logged::Discard { lpn, pages } => (Op::Discard, lpn, pages, Payload::None),
        };
        let id = i as u64;
        (Request { id, op, lpn, pages }, payload)
    });
    for (req, payload) in reqs.chain(std::iter::once((flush, Payload::None))) {
        ssd.submit(t, req, payload)
            .map_err(|e| format!("record {}: {e}", req.id))?;
        while let Some(next) = ssd.next_event() {
            t = t.max(next);
            ssd.advance(t, &mut done);
        }
        if let Some(d) = done.iter().find(|d| d.failed) {
            return Err(match ssd.fault() {
                Some(f) => format!("record {}: {f}", d.completion.id),
                None => format!("record {}: the SSD failed it", d.completion.id),
            });
        }
        done.clear();
    }
    Ok(())
}

/// The SSD's request id of `p`: its queue and tag.
fn request_id(p: &Pending) -> u64 {
    (u64::from(p.queue) << 16) | u64::from(p.tag)
}

/// The queue and tag a [`request_id`] encodes.
fn queue_and_tag(id: u64) -> (usize, usize) {
    ((id >> 16) as usize, (id & 0xffff) as usize)
}

impl Backend for FtlBackend {
    fn block_size(&self) -> u32 {
        self.page
    }

    fn num_blocks(&self) -> u64 {
        self.ssd.logical_pages()
    }

    fn submit(&mut self, now_ns: u64, p: Pending) {
        if self.draining.is_some() {
            self.held.push_back(p);
            return;
        }
        let t = match self.timing {
            Timing::Off => self.vnow,
            Timing::Emulate => now_ns + self.offset,
        };
        let bytes = p.cmd.blocks as usize * self.page as usize;
        let op = match p.cmd.op {
            IoOp::Read | IoOp::Write => {
                if self.keeps_data && (p.buf.is_empty() || p.buf.len() < bytes) {
                    self.refused.push(refuse(&p, -libc::EINVAL, now_ns));
                    return;
                }
                if p.cmd.op == IoOp::Read {
                    Op::Read
                } else {
                    Op::Write
                }
            }
            // Write-zeroes is a write of zeroes: the SSD has no cheaper way
            // that keeps the read-back contract.
            IoOp::WriteZeroes => {
                // One shared zero source, as long as the longest write-zeroes
                // so far (the kernel sends at most `max_io_buf_bytes`).
                if self.keeps_data && self.inflight.zeroes.len() < bytes {
                    self.inflight.zeroes.resize(bytes, 0);
                }
                Op::Write
            }
            IoOp::Discard => Op::Discard,
            IoOp::Flush => Op::Flush,
            // The kernel sends zone operations to zoned devices only.
            _ => {
                self.refused.push(refuse(&p, -libc::EOPNOTSUPP, now_ns));
                return;
            }
        };
        // With a data store, the SSD takes a write's bytes straight from the
        // IO buffer and fills a read's in place (see `Inflight`).
        let payload = if self.keeps_data && matches!(op, Op::Read | Op::Write) {
            Payload::External
        } else {
            Payload::None
        };
        let Ok(pages) = u32::try_from(p.cmd.blocks) else {
            self.refused.push(refuse(&p, -libc::EINVAL, now_ns));
            return;
        };
        let req = Request {
            id: request_id(&p),
            op,
            lpn: p.cmd.block,
            pages,
        };
        // Logged before the SSD has it: it cannot be acknowledged unlogged.
        if self.log_request(&p, bytes).is_err() {
            self.refused.push(refuse(&p, -libc::EIO, now_ns));
            return;
        }
        match self.ssd.submit(t, req, payload) {
            Ok(()) => {
                self.inflight.insert(p);
                self.inflight_count += 1;
            }
            Err(e) => {
                tracing::warn!(error = %e, cmd = ?p.cmd, "SSD refused a request");
                if p.cmd.op == IoOp::Flush {
                    self.flush_marks.retain(|&(f, _)| f != req.id);
                }
                let errno = request_errno(p.cmd.op, &e);
                self.refused.push(refuse(&p, errno, now_ns));
            }
        }
        self.maybe_drain(t);
    }

    fn advance(&mut self, now_ns: u64, out: &mut Vec<Finished>) {
        loop {
            out.append(&mut self.refused);
            let mut done = std::mem::take(&mut self.done);
            match self.timing {
                Timing::Emulate => {
                    self.ssd
                        .advance_with(now_ns + self.offset, &mut done, &mut self.inflight)
                }
                Timing::Off => {
                    // Run the model to idle on its own clock.
                    while let Some(t) = self.ssd.next_event() {
                        self.vnow = self.vnow.max(t);
                        self.ssd
                            .advance_with(self.vnow, &mut done, &mut self.inflight);
                    }
                }
            }
            for d in done.drain(..) {
                self.finish(d, now_ns, out);
            }
            self.done = done;
            // A drain finished: let the held requests in (and serve them).
            if self.draining.is_some() || self.held.is_empty() {
                return;
            }
            while let Some(p) = self.held.pop_front() {
                self.submit(now_ns, p);
            }
        }
    }

    fn next_event(&self) -> Option<u64> {
        match self.timing {
            Timing::Emulate => self.ssd.next_event().map(|t| t.saturating_sub(self.offset)),
            Timing::Off => None,
        }
    }

    fn in_flight(&self) -> usize {
        self.inflight_count
            + self.refused.len()
            + self.held.len()
            + usize::from(self.draining.is_some())
    }

    fn shutdown(&mut self) -> Result<(), ShutdownError> {
        let req = Request {
            id: u64::MAX,
            op: Op::Flush,
            lpn: 0,
            pages: 0,
        };
        let t = self.vnow.max(self.ssd.idle_at());
        self.ssd
            .submit(t, req, Payload::None)
            .map_err(ShutdownError::Refused)?;
        let mut done = Vec::new();
        while let Some(t) = self.ssd.next_event() {
            self.ssd.advance(t, &mut done);
        }
        if let Some(f) = self.ssd.fault() {
            return Err(ShutdownError::Fault(f.clone()));
        }
        // Checkpoint a persistent image so the next open is quick.
        self.ssd.shutdown().map_err(ShutdownError::Checkpoint)?;
        // Everything is durable: nothing to replay.
        match &mut self.log {
            Some(log) => log.rewind().map_err(|source| ShutdownError::Log {
                path: log.path().to_owned(),
                source,
            }),
            None => Ok(()),
        }
    }
}

fn refuse(p: &Pending, result: i32, now_ns: u64) -> Finished {
    Finished {
        queue: p.queue,
        tag: p.tag,
        op: p.cmd.op,
        result,
        append_sector: None,
        done_ns: now_ns,
    }
}

/// The errno of a request the stopped SSD failed: ENOSPC for a write,
/// flush, discard or write-zeroes once the FTL ran out of space (what the
/// file system above then tells its caller), EIO for a read or any other
/// fault.
fn fault_errno(op: IoOp, fault: Option<&DeviceFault>) -> i32 {
    if op != IoOp::Read && fault.is_some_and(DeviceFault::is_no_space) {
        -libc::ENOSPC
    } else {
        -libc::EIO
    }
}

/// The errno of a request the SSD refused or failed by itself.
fn request_errno(op: IoOp, e: &ptsd_ftl::SsdRequestError) -> i32 {
    match e {
        ptsd_ftl::SsdRequestError::Failed(f) => fault_errno(op, Some(f)),
        _ => -libc::EIO,
    }
}
