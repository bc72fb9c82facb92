//! The zoned SSD ([`ZonedSsd`]) as a [`Backend`]: a host-managed zoned
//! `/dev/ublkbN`.
//!
//! Each request is checked by the zone state machine and placed on the
//! NAND timelines as it arrives (zoned devices need no reordering: the
//! kernel sends one write per zone at a time), then released when the
//! model says it finishes ([`Timing::Emulate`], on the engine's wall clock)
//! or at once ([`Timing::Off`]). A request the zone rules refuse completes
//! with the errno a ZNS drive's status becomes in Linux: EIO for a write
//! off the write pointer, a full, read-only or offline zone or a bad state
//! transition; ETOOMANYREFS / EOVERFLOW when the open / active zone limit
//! is reached (the block layer's `BLK_STS_ZONE_OPEN_RESOURCE` /
//! `BLK_STS_ZONE_ACTIVE_RESOURCE`).

use crate::backend::{Backend, Finished, Pending, ShutdownError};
use crate::ftl::Timing;
use crate::request::{IoOp, BLK_ZONE_BYTES, SECTOR};
use ptsd_ftl::zoned::{ZoneError, ZoneInfo, ZoneState, ZonedError, ZonedSsd};

/// The zone shape the kernel is told (`UBLK_PARAM_TYPE_ZONED` and the
/// basic parameters' `chunk_sectors`), in device blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ZoneGeometry {
    /// Blocks per zone (a power of two: the kernel's zone size).
    pub zone_blocks: u64,
    /// Most zones open at once (0 = no limit).
    pub max_open: u32,
    /// Most zones open or closed at once (0 = no limit).
    pub max_active: u32,
    /// Largest zone append, blocks.
    pub max_append_blocks: u32,
}

/// `BLK_ZONE_TYPE_SEQWRITE_REQ`: every zone is sequential-write-required.
const ZONE_TYPE_SEQWRITE_REQ: u8 = 2;

/// Write `info` as a Linux `struct blk_zone` (64 bytes, native byte order,
/// 512-byte sectors) into `out`.
///
/// ```
/// use ptsd_ftl::zoned::{ZoneInfo, ZoneState};
/// use ptsd_ublk::zoned::encode_blk_zone;
/// let z = ZoneInfo { start: 16, size: 16, capacity: 12, wp: 19, state: ZoneState::ImplicitlyOpen };
/// let mut out = [0u8; 64];
/// encode_blk_zone(&z, 8, &mut out); // 4 KiB blocks
/// assert_eq!(u64::from_ne_bytes(out[16..24].try_into().unwrap()), 19 * 8); // write pointer
/// assert_eq!(out[25], 0x2); // condition: implicitly open
/// ```
pub fn encode_blk_zone(info: &ZoneInfo, sectors_per_block: u64, out: &mut [u8; 64]) {
    out.fill(0);
    out[0..8].copy_from_slice(&(info.start * sectors_per_block).to_ne_bytes());
    out[8..16].copy_from_slice(&(info.size * sectors_per_block).to_ne_bytes());
    out[16..24].copy_from_slice(&(info.wp * sectors_per_block).to_ne_bytes());
    out[24] = ZONE_TYPE_SEQWRITE_REQ;
    out[25] = info.state.code();
    out[32..40].copy_from_slice(&(info.capacity * sectors_per_block).to_ne_bytes());
}

/// The negative errno a refused zoned command completes with.
pub fn zoned_errno(e: &ZonedError) -> i32 {
    match e {
        ZonedError::Zone(z) => match z {
            ZoneError::TooManyOpen { .. } => -libc::ETOOMANYREFS,
            ZoneError::TooManyActive { .. } => -libc::EOVERFLOW,
            ZoneError::ZeroLength
            | ZoneError::AppendNotAtStart { .. }
            | ZoneError::AppendTooLarge { .. } => -libc::EINVAL,
            _ => -libc::EIO,
        },
        ZonedError::PayloadSize { .. } => -libc::EINVAL,
        _ => -libc::EIO,
    }
}

/// The zoned SSD behind the target.
///
/// ```
/// use ptsd_ftl::zoned::{ZonedConfig, ZonedSsd};
/// use ptsd_ublk::backend::Backend;
/// use ptsd_ublk::ftl::Timing;
/// use ptsd_ublk::zoned::ZonedBackend;
/// let b = ZonedBackend::new(ZonedSsd::new(ZonedConfig::small()).unwrap(), Timing::Off);
/// let g = b.zone_geometry().unwrap();
/// assert_eq!((g.zone_blocks, g.max_open, g.max_active), (32, 4, 6));
/// assert_eq!(b.num_blocks(), 32 * 32); // 32 zones of 32 blocks
/// ```
pub struct ZonedBackend {
    ssd: ZonedSsd,
    timing: Timing,
    /// The model's own clock with [`Timing::Off`].
    vnow: u64,
    /// Served, waiting for their modelled completion time.
    waiting: Vec<Finished>,
}

impl ZonedBackend {
    /// Serve `ssd` (opened, and for an image locked, by the caller: `ptsd
    /// ublk add --zoned` gets it through ptsd-stack's claim).
    pub fn new(ssd: ZonedSsd, timing: Timing) -> Self {
        ZonedBackend {
            ssd,
            timing,
            vnow: 0,
            waiting: Vec::new(),
        }
    }

    /// The device served.
    pub fn ssd(&self) -> &ZonedSsd {
        &self.ssd
    }

    fn sectors_per_block(&self) -> u64 {
        u64::from(self.ssd.page_size()) / SECTOR
    }

    /// The zone a zone command names by its first block, or EINVAL.
    fn zone_at(&self, block: u64) -> Result<u64, i32> {
        let zp = self.ssd.zone_pages();
        if block % zp != 0 {
            return Err(-libc::EINVAL);
        }
        Ok(block / zp)
    }

    /// Serve `p` at model time `t`: (completion time, result, append sector).
    fn execute(&mut self, t: u64, p: &Pending) -> Result<(u64, i32, Option<u64>), i32> {
        let bytes = p.cmd.data_bytes(self.ssd.page_size());
        let buf = if p.cmd.op.has_data() {
            // SAFETY: the engine owns this request until it is finished
            // (the `IoBufPtr` protocol); nothing else references the buffer
            // meanwhile.
            Some(unsafe { p.buf.slice_mut(bytes as usize) }.ok_or(-libc::EINVAL)?)
        } else {
            None
        };
        let keeps = self.ssd.keeps_data();
        let pages = || u32::try_from(p.cmd.blocks).map_err(|_| -libc::EINVAL);
        let err = |e: ZonedError| {
            tracing::debug!(error = %ptsd_blockdev::ErrorChain(&e), cmd = ?p.cmd, "zoned request refused");
            zoned_errno(&e)
        };
        let len = bytes as i32;
        match p.cmd.op {
            IoOp::Read => {
                let done = self.ssd.read(t, p.cmd.block, pages()?, buf).map_err(err)?;
                Ok((done, len, None))
            }
            IoOp::Write => {
                let data = buf.filter(|_| keeps).map(|b| &*b);
                let d = self
                    .ssd
                    .write(t, p.cmd.block, pages()?, data)
                    .map_err(err)?;
                Ok((d.done_ns, len, None))
            }
            IoOp::ZoneAppend => {
                let data = buf.filter(|_| keeps).map(|b| &*b);
                let d = self
                    .ssd
                    .append(t, p.cmd.block, pages()?, data)
                    .map_err(err)?;
                Ok((d.done_ns, len, Some(d.lpn * self.sectors_per_block())))
            }
            IoOp::ZoneOpen | IoOp::ZoneClose | IoOp::ZoneFinish | IoOp::ZoneReset => {
                let zone = self.zone_at(p.cmd.block)?;
                let done = match p.cmd.op {
                    IoOp::ZoneOpen => self.ssd.open(t, zone),
                    IoOp::ZoneClose => self.ssd.close(t, zone),
                    IoOp::ZoneFinish => self.ssd.finish(t, zone),
                    _ => self.ssd.reset(t, zone),
                };
                Ok((done.map_err(err)?, 0, None))
            }
            IoOp::ZoneResetAll => {
                // Every zone holding data or a resource; empty, read-only
                // and offline zones are left alone, as null_blk does.
                let mut done = t;
                for z in 0..self.ssd.zone_count() {
                    let state = self.ssd.zones().info(z).state;
                    if state.is_active() || state == ZoneState::Full {
                        done = done.max(self.ssd.reset(t, u64::from(z)).map_err(err)?);
                    }
                }
                Ok((done, 0, None))
            }
            IoOp::ReportZones => {
                let first = self.zone_at(p.cmd.block)?;
                let buf = buf.ok_or(-libc::EINVAL)?;
                // Zones past the last one stay zeroed: a zero-length entry
                // ends the report for the kernel.
                buf.fill(0);
                let max = u32::try_from(p.cmd.blocks).unwrap_or(u32::MAX);
                let spb = self.sectors_per_block();
                for (info, out) in self
                    .ssd
                    .report(first as u32, max)
                    .iter()
                    .zip(buf.chunks_exact_mut(BLK_ZONE_BYTES as usize))
                {
                    let out: &mut [u8; 64] = out.try_into().map_err(|_| -libc::EINVAL)?;
                    encode_blk_zone(info, spb, out);
                }
                Ok((t, len, None))
            }
            IoOp::Flush => Ok((self.ssd.flush(t).map_err(err)?, 0, None)),
            // Not advertised: a zoned device reclaims by zone reset.
            IoOp::Discard | IoOp::WriteZeroes => Err(-libc::EOPNOTSUPP),
        }
    }
}

impl Backend for ZonedBackend {
    fn block_size(&self) -> u32 {
        self.ssd.page_size()
    }

    fn num_blocks(&self) -> u64 {
        self.ssd.logical_pages()
    }

    fn zone_geometry(&self) -> Option<ZoneGeometry> {
        let cfg = self.ssd.config();
        Some(ZoneGeometry {
            zone_blocks: self.ssd.zone_pages(),
            max_open: cfg.max_open_zones,
            max_active: cfg.max_active_zones,
            max_append_blocks: cfg.max_append_pages,
        })
    }

    fn submit(&mut self, now_ns: u64, p: Pending) {
        let t = match self.timing {
            Timing::Off => self.vnow,
            Timing::Emulate => now_ns,
        };
        let (done, result, append_sector) = match self.execute(t, &p) {
            Ok(r) => r,
            Err(errno) => (t, errno, None),
        };
        let done_ns = match self.timing {
            Timing::Off => {
                self.vnow = self.vnow.max(done);
                now_ns
            }
            Timing::Emulate => done,
        };
        self.waiting.push(Finished {
            queue: p.queue,
            tag: p.tag,
            op: p.cmd.op,
            result,
            append_sector,
            done_ns,
        });
    }

    fn advance(&mut self, now_ns: u64, done: &mut Vec<Finished>) {
        let mut i = 0;
        while i < self.waiting.len() {
            if self.waiting[i].done_ns <= now_ns {
                done.push(self.waiting.swap_remove(i));
            } else {
                i += 1;
            }
        }
    }

    fn next_event(&self) -> Option<u64> {
        self.waiting.iter().map(|f| f.done_ns).min()
    }

    fn in_flight(&self) -> usize {
        self.waiting.len()
    }

    fn shutdown(&mut self) -> Result<(), ShutdownError> {
        let t = self.ssd.idle_at();
        self.ssd.flush(t).map(|_| ()).map_err(ShutdownError::Zoned)
    }
}
