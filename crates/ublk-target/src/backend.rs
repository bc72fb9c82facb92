//! What serves the requests: a [`Backend`] owned by the engine's one
//! device thread, so it needs no lock of its own.
//!
//! [`DirectBackend`] serves any [`BlockDevice`] synchronously, ordering each
//! batch with a [`Scheduler`]. The emulated SSD has its own backend
//! (`crate::ftl`) that releases completions at the time the NAND model says.

use crate::request::{IoCmd, IoOp};
use crate::sched::{Scheduler, SchedulerKind};
use ptsd_blockdev::{BlockDevice, BlockError};
use std::path::PathBuf;
use thiserror::Error;

/// A tag's data buffer: memory the kernel (or a fake queue) lent us for one
/// request.
///
/// It is a raw pointer because the memory belongs to the queue (libublk
/// allocates it per tag) while the device thread fills or drains it. The
/// protocol that makes this sound: between handing a tag to the engine and
/// completing it, nobody but the engine touches the tag's buffer, and the
/// queue waits for every in-flight tag before it frees its buffers.
#[derive(Clone, Copy, Debug)]
pub struct IoBufPtr {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the pointer is only dereferenced by the one thread that currently
// owns the request (see the type's documentation), so moving it between
// threads is sound.
unsafe impl Send for IoBufPtr {}
// SAFETY: sharing the pointer value is harmless; every dereference is
// `unsafe` and bound by the ownership protocol above.
unsafe impl Sync for IoBufPtr {}

impl IoBufPtr {
    /// No buffer (FLUSH, DISCARD, WRITE_ZEROES).
    pub const NONE: IoBufPtr = IoBufPtr {
        ptr: std::ptr::null_mut(),
        len: 0,
    };

    /// # Safety
    /// `ptr` must be valid for reads and writes of `len` bytes, and stay so,
    /// untouched by anyone else, until every request given this buffer has
    /// completed.
    pub unsafe fn new(ptr: *mut u8, len: usize) -> Self {
        IoBufPtr { ptr, len }
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// The start of the buffer.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// No buffer (length 0 or a null pointer).
    pub fn is_empty(&self) -> bool {
        self.len == 0 || self.ptr.is_null()
    }

    /// The first `len` bytes as a slice, or `None` if the buffer is shorter.
    ///
    /// # Safety
    /// The caller owns the request this buffer belongs to (see the type's
    /// documentation) and holds no other reference into it.
    pub unsafe fn slice_mut<'a>(&self, len: usize) -> Option<&'a mut [u8]> {
        if self.ptr.is_null() || len > self.len {
            return None;
        }
        // SAFETY: bounds checked above; validity and exclusivity are the
        // caller's contract (see `new`).
        Some(unsafe { std::slice::from_raw_parts_mut(self.ptr, len) })
    }
}

/// A request on its way to the device.
#[derive(Clone, Copy, Debug)]
pub struct Pending {
    /// The ublk queue it arrived on.
    pub queue: u16,
    /// Its tag in that queue.
    pub tag: u16,
    /// What the kernel asked for.
    pub cmd: IoCmd,
    /// The request's data buffer.
    pub buf: IoBufPtr,
    /// When the queue received it (engine clock, ns).
    pub arrived_ns: u64,
}

/// A request the device has finished.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Finished {
    /// The ublk queue it arrived on.
    pub queue: u16,
    /// Its tag in that queue.
    pub tag: u16,
    /// What it was.
    pub op: IoOp,
    /// Bytes moved (READ/WRITE/ZONE_APPEND/REPORT_ZONES), 0 for other
    /// successes, or `-errno`.
    pub result: i32,
    /// A zone append's first written sector (512-byte units, as the kernel
    /// takes it back), `None` for every other request.
    pub append_sector: Option<u64>,
    /// When the device finished it (engine clock, ns).
    pub done_ns: u64,
}

/// The device side of the engine.
pub trait Backend: Send {
    /// Bytes per block.
    fn block_size(&self) -> u32;
    /// Device size in blocks.
    fn num_blocks(&self) -> u64;
    /// Accept a request at `now_ns`.
    fn submit(&mut self, now_ns: u64, req: Pending);
    /// Serve what can be served and move every request finished by `now_ns`
    /// to `done`.
    fn advance(&mut self, now_ns: u64, done: &mut Vec<Finished>);
    /// When the next queued request finishes, if it lies in the future.
    fn next_event(&self) -> Option<u64>;
    /// Requests accepted but not yet moved to `done`.
    fn in_flight(&self) -> usize;
    /// A zoned device's zone shape (the kernel is then told the device is
    /// host-managed zoned); `None` for a conventional device.
    fn zone_geometry(&self) -> Option<crate::zoned::ZoneGeometry> {
        None
    }
    /// Called once when the target stops: flush what the device buffers.
    fn shutdown(&mut self) -> Result<(), ShutdownError> {
        Ok(())
    }
}

/// Why a backend could not stop cleanly: what it buffers may not be
/// durable.
#[derive(Debug, Error)]
pub enum ShutdownError {
    /// The device's final flush failed.
    #[error("flushing the device")]
    Flush(#[source] BlockError),
    /// The emulated SSD refused its final flush.
    #[error("the SSD refused the final flush")]
    Refused(#[source] ptsd_ftl::SsdRequestError),
    /// The emulated SSD stopped with a fault.
    #[error("the SSD failed")]
    Fault(#[source] ptsd_ftl::DeviceFault),
    /// The zoned SSD's final flush failed.
    #[error("flushing the zoned SSD")]
    Zoned(#[source] ptsd_ftl::zoned::ZonedError),
    /// Checkpointing the SSD's image failed.
    #[error("checkpointing the SSD image")]
    Checkpoint(#[source] ptsd_ftl::FtlError),
    /// Emptying the acknowledged-write log failed.
    #[error("rewinding the acknowledged-write log {}", path.display())]
    Log {
        /// The log file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// The errno a failed device request completes with: ENOSPC when the
/// device is out of space (an `io::Error` of kind `StorageFull`, as
/// `SsdDevice` reports an out-of-space FTL), EIO otherwise.
pub fn block_errno(e: &BlockError) -> i32 {
    match e {
        BlockError::Io(io) if io.kind() == std::io::ErrorKind::StorageFull => -libc::ENOSPC,
        _ => -libc::EIO,
    }
}

/// Serves a [`BlockDevice`] synchronously: each `advance` dispatches the
/// queued requests in the scheduler's order and completes them at once.
///
/// ```
/// use ptsd_blockdev::MemDevice;
/// use ptsd_ublk::backend::{Backend, DirectBackend};
/// use ptsd_ublk::sched::SchedulerKind;
/// let b = DirectBackend::new(MemDevice::new(4096, 64).unwrap(), SchedulerKind::ReadPriority);
/// assert_eq!(b.num_blocks(), 64);
/// ```
pub struct DirectBackend<D: BlockDevice> {
    dev: D,
    sched: Scheduler,
    order: Vec<Pending>,
}

impl<D: BlockDevice> DirectBackend<D> {
    /// A backend serving `dev`, ordering requests by `sched`.
    pub fn new(dev: D, sched: SchedulerKind) -> Self {
        DirectBackend {
            dev,
            sched: Scheduler::new(sched),
            order: Vec::new(),
        }
    }

    /// The device it serves.
    pub fn device(&self) -> &D {
        &self.dev
    }

    fn execute(&self, p: &Pending) -> i32 {
        let bs = u64::from(self.dev.block_size());
        let bytes = p.cmd.blocks * bs;
        let res = match p.cmd.op {
            IoOp::Flush => self.dev.flush(),
            IoOp::Discard => self.dev.discard(p.cmd.block, p.cmd.blocks),
            IoOp::WriteZeroes => self.dev.write_zeroes(p.cmd.block, p.cmd.blocks),
            IoOp::Read | IoOp::Write => {
                // SAFETY: the engine owns this request until it is finished
                // (the `IoBufPtr` protocol); nothing else references the
                // buffer meanwhile.
                let Some(buf) = (unsafe { p.buf.slice_mut(bytes as usize) }) else {
                    return -libc::EINVAL;
                };
                if p.cmd.op == IoOp::Read {
                    self.dev.read(p.cmd.block, buf)
                } else {
                    self.dev.write(p.cmd.block, buf)
                }
            }
            // The kernel sends zone operations to zoned devices only.
            _ => return -libc::EOPNOTSUPP,
        };
        match res {
            Ok(()) if p.cmd.op.has_data() => bytes as i32,
            Ok(()) => 0,
            Err(e) => {
                tracing::warn!(error = %ptsd_blockdev::ErrorChain(&e), cmd = ?p.cmd, "device request failed");
                block_errno(&e)
            }
        }
    }
}

impl<D: BlockDevice> Backend for DirectBackend<D> {
    fn block_size(&self) -> u32 {
        self.dev.block_size()
    }
    fn num_blocks(&self) -> u64 {
        self.dev.num_blocks()
    }
    fn submit(&mut self, _now_ns: u64, req: Pending) {
        self.sched.push(req);
    }
    fn advance(&mut self, now_ns: u64, done: &mut Vec<Finished>) {
        let mut order = std::mem::take(&mut self.order);
        self.sched.drain_in_order(&mut order);
        for p in order.drain(..) {
            let result = self.execute(&p);
            done.push(Finished {
                queue: p.queue,
                tag: p.tag,
                op: p.cmd.op,
                result,
                append_sector: None,
                done_ns: now_ns,
            });
        }
        self.order = order;
    }
    fn next_event(&self) -> Option<u64> {
        None
    }
    fn in_flight(&self) -> usize {
        self.sched.len()
    }
    fn shutdown(&mut self) -> Result<(), ShutdownError> {
        self.dev.flush().map_err(ShutdownError::Flush)
    }
}
