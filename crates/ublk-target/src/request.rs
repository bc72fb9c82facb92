//! Requests as the kernel hands them in, decoded and checked.
//!
//! The kernel describes each request with a `ublksrv_io_desc`: an operation
//! byte plus flags, a start sector and a sector count (512-byte sectors,
//! whatever the logical block size). [`RawDesc`] mirrors the fields we use;
//! [`decode`] turns one into an [`IoCmd`] in device blocks or says precisely
//! why it cannot be served. Nothing here panics on bad input.

use thiserror::Error;

/// ublk operation codes (`UBLK_IO_OP_*` in `linux/ublk_cmd.h`).
pub mod op {
    /// Read sectors.
    pub const READ: u8 = 0;
    /// Write sectors.
    pub const WRITE: u8 = 1;
    /// Make completed writes durable.
    pub const FLUSH: u8 = 2;
    /// The host no longer needs these sectors.
    pub const DISCARD: u8 = 3;
    /// Write one block's pattern over a range (unsupported).
    pub const WRITE_SAME: u8 = 4;
    /// The sectors read back as zeroes.
    pub const WRITE_ZEROES: u8 = 5;
    /// Open a zone explicitly (zoned devices).
    pub const ZONE_OPEN: u8 = 10;
    /// Close an open zone.
    pub const ZONE_CLOSE: u8 = 11;
    /// Make a zone full.
    pub const ZONE_FINISH: u8 = 12;
    /// Write at a zone's write pointer; the completion says where.
    pub const ZONE_APPEND: u8 = 13;
    /// Reset every zone.
    pub const ZONE_RESET_ALL: u8 = 14;
    /// Reset one zone (rewind its write pointer, erase it).
    pub const ZONE_RESET: u8 = 15;
    /// Fill the buffer with `struct blk_zone` entries from a zone on.
    pub const REPORT_ZONES: u8 = 18;
}

/// Bytes of one `struct blk_zone` in a zone report.
pub const BLK_ZONE_BYTES: u64 = 64;

/// Bytes per kernel sector: `start_sector` and `nr_sectors` count these.
pub const SECTOR: u64 = 512;

/// The fields of the kernel's `ublksrv_io_desc` that the target reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawDesc {
    /// Operation in the low 8 bits, `UBLK_IO_F_*` flags above.
    pub op_flags: u32,
    /// Length in 512-byte sectors (0 for FLUSH).
    pub nr_sectors: u32,
    /// First 512-byte sector (meaningless, often `u64::MAX`, for FLUSH).
    pub start_sector: u64,
}

impl RawDesc {
    /// A descriptor for `op` covering `[start_sector, start_sector + nr_sectors)`.
    pub fn new(op: u8, start_sector: u64, nr_sectors: u32) -> Self {
        RawDesc {
            op_flags: u32::from(op),
            nr_sectors,
            start_sector,
        }
    }

    /// The operation byte.
    pub fn op(&self) -> u8 {
        (self.op_flags & 0xff) as u8
    }
}

/// What a decoded request does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum IoOp {
    /// Read blocks into the request's buffer.
    Read,
    /// Write blocks from the request's buffer.
    Write,
    /// Make completed writes durable.
    Flush,
    /// Drop blocks the host no longer needs.
    Discard,
    /// Make blocks read back as zeroes.
    WriteZeroes,
    /// Zoned: open the zone starting at `block`.
    ZoneOpen,
    /// Zoned: close the zone starting at `block`.
    ZoneClose,
    /// Zoned: finish the zone starting at `block`.
    ZoneFinish,
    /// Zoned: reset the zone starting at `block`.
    ZoneReset,
    /// Zoned: reset every zone.
    ZoneResetAll,
    /// Zoned: write at the write pointer of the zone starting at `block`.
    ZoneAppend,
    /// Zoned: report up to `blocks` zones from the one starting at `block`.
    ReportZones,
}

impl IoOp {
    /// Every operation, in the order stats list them.
    pub const ALL: [IoOp; 12] = [
        IoOp::Read,
        IoOp::Write,
        IoOp::Flush,
        IoOp::Discard,
        IoOp::WriteZeroes,
        IoOp::ZoneOpen,
        IoOp::ZoneClose,
        IoOp::ZoneFinish,
        IoOp::ZoneReset,
        IoOp::ZoneResetAll,
        IoOp::ZoneAppend,
        IoOp::ReportZones,
    ];

    /// Lower-case name used in stats output.
    pub fn name(self) -> &'static str {
        match self {
            IoOp::Read => "read",
            IoOp::Write => "write",
            IoOp::Flush => "flush",
            IoOp::Discard => "discard",
            IoOp::WriteZeroes => "write_zeroes",
            IoOp::ZoneOpen => "zone_open",
            IoOp::ZoneClose => "zone_close",
            IoOp::ZoneFinish => "zone_finish",
            IoOp::ZoneReset => "zone_reset",
            IoOp::ZoneResetAll => "zone_reset_all",
            IoOp::ZoneAppend => "zone_append",
            IoOp::ReportZones => "report_zones",
        }
    }

    /// Whether the request moves data through the tag's buffer.
    pub fn has_data(self) -> bool {
        matches!(
            self,
            IoOp::Read | IoOp::Write | IoOp::ZoneAppend | IoOp::ReportZones
        )
    }

    /// Whether the kernel hands the request's data to the target (a write
    /// of some kind), rather than the target filling the buffer.
    pub fn data_in(self) -> bool {
        matches!(self, IoOp::Write | IoOp::ZoneAppend)
    }

    /// Whether the request changes device contents.
    pub fn modifies(self) -> bool {
        matches!(
            self,
            IoOp::Write
                | IoOp::Discard
                | IoOp::WriteZeroes
                | IoOp::ZoneAppend
                | IoOp::ZoneFinish
                | IoOp::ZoneReset
                | IoOp::ZoneResetAll
        )
    }

    /// Whether the operation exists only on zoned devices.
    pub fn is_zoned(self) -> bool {
        matches!(
            self,
            IoOp::ZoneOpen
                | IoOp::ZoneClose
                | IoOp::ZoneFinish
                | IoOp::ZoneReset
                | IoOp::ZoneResetAll
                | IoOp::ZoneAppend
                | IoOp::ReportZones
        )
    }
}

/// A checked request in device blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IoCmd {
    /// What to do.
    pub op: IoOp,
    /// First device block (0 for FLUSH and ZONE_RESET_ALL; a zone's first
    /// block for the other zone operations).
    pub block: u64,
    /// Number of device blocks (0 for FLUSH and zone management); for
    /// REPORT_ZONES, the most zones to report.
    pub blocks: u64,
}

impl IoCmd {
    /// Bytes the request moves through its buffer with `block_size`-byte
    /// blocks: its blocks, or a zone report's `struct blk_zone` array.
    pub fn data_bytes(&self, block_size: u32) -> u64 {
        match self.op {
            IoOp::ReportZones => self.blocks * BLK_ZONE_BYTES,
            op if op.has_data() => self.blocks * u64::from(block_size),
            _ => 0,
        }
    }

    /// Whether two requests touch a common block (FLUSH touches none).
    pub fn overlaps(&self, other: &IoCmd) -> bool {
        self.blocks > 0
            && other.blocks > 0
            && self.block < other.block.saturating_add(other.blocks)
            && other.block < self.block.saturating_add(self.blocks)
    }
}

/// The shape of the device requests are checked against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Bytes per device block (a power of two, ≥ 512).
    pub block_size: u32,
    /// Device size in blocks.
    pub num_blocks: u64,
    /// Size of each tag's data buffer: the most a READ or WRITE may move.
    pub max_io_bytes: u32,
}

/// Why a request cannot be served. Each maps to the errno the kernel gets.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum UblkRequestError {
    /// An operation code ptsd does not serve (EOPNOTSUPP).
    #[error("unsupported ublk operation {0}")]
    UnsupportedOp(u8),
    /// A read, write, discard or write-zeroes of no sectors (EINVAL).
    #[error("empty {0:?} request")]
    Empty(IoOp),
    /// The request is not whole device blocks (EINVAL).
    #[error(
        "{op:?} at sector {sector} (+{sectors}) is not aligned to the {block_size}-byte block"
    )]
    Misaligned {
        /// The operation.
        op: IoOp,
        /// First sector.
        sector: u64,
        /// Sectors.
        sectors: u32,
        /// The device's block size, bytes.
        block_size: u32,
    },
    /// The request reaches past the end of the device (EIO, as the kernel's
    /// block layer reports it).
    #[error(
        "{op:?} of blocks {block}..+{blocks} is past the end of the {num_blocks}-block device"
    )]
    OutOfRange {
        /// The operation.
        op: IoOp,
        /// First block.
        block: u64,
        /// Blocks.
        blocks: u64,
        /// Blocks on the device.
        num_blocks: u64,
    },
    /// The request is larger than its I/O buffer (EINVAL).
    #[error("{op:?} of {bytes} bytes exceeds the {max} byte I/O buffer")]
    TooLarge {
        /// The operation.
        op: IoOp,
        /// Bytes asked for.
        bytes: u64,
        /// Bytes of the buffer.
        max: u32,
    },
    /// A tag the queue does not have (EIO): the kernel (or a fake queue)
    /// broke the protocol.
    #[error("tag {tag} is beyond the queue depth {depth}")]
    BadTag {
        /// The tag.
        tag: u16,
        /// Tags in the queue.
        depth: usize,
    },
    /// The target is stopping (EIO).
    #[error("the target is shutting down")]
    ShuttingDown,
}

impl UblkRequestError {
    /// The negative errno the request completes with.
    pub fn errno(&self) -> i32 {
        match self {
            UblkRequestError::UnsupportedOp(_) => -libc::EOPNOTSUPP,
            UblkRequestError::Empty(_)
            | UblkRequestError::Misaligned { .. }
            | UblkRequestError::TooLarge { .. } => -libc::EINVAL,
            UblkRequestError::OutOfRange { .. } | UblkRequestError::BadTag { .. } => -libc::EIO,
            UblkRequestError::ShuttingDown => -libc::EIO,
        }
    }
}

/// Check `raw` against `geo` and convert it to device blocks.
///
/// The operation is looked at first: a FLUSH carries no data and its start
/// sector is garbage (the kernel sends `u64::MAX`), so it must never reach a
/// bounds check.
///
/// ```
/// use ptsd_ublk::request::{decode, op, Geometry, IoOp, RawDesc};
/// let geo = Geometry { block_size: 4096, num_blocks: 256, max_io_bytes: 1 << 19 };
/// let flush = decode(&RawDesc::new(op::FLUSH, u64::MAX, 0), &geo).unwrap();
/// assert_eq!(flush.op, IoOp::Flush);
/// let read = decode(&RawDesc::new(op::READ, 16, 8), &geo).unwrap();
/// assert_eq!((read.block, read.blocks), (2, 1));
/// assert!(decode(&RawDesc::new(op::READ, 2048, 8), &geo).is_err()); // past the end
/// ```
pub fn decode(raw: &RawDesc, geo: &Geometry) -> Result<IoCmd, UblkRequestError> {
    let io_op = match raw.op() {
        op::FLUSH => {
            return Ok(IoCmd {
                op: IoOp::Flush,
                block: 0,
                blocks: 0,
            })
        }
        op::READ => IoOp::Read,
        op::WRITE => IoOp::Write,
        op::DISCARD => IoOp::Discard,
        op::WRITE_ZEROES => IoOp::WriteZeroes,
        op::ZONE_APPEND => IoOp::ZoneAppend,
        op::ZONE_RESET_ALL => {
            return Ok(IoCmd {
                op: IoOp::ZoneResetAll,
                block: 0,
                blocks: 0,
            })
        }
        op::ZONE_OPEN | op::ZONE_CLOSE | op::ZONE_FINISH | op::ZONE_RESET | op::REPORT_ZONES => {
            return decode_zone(raw, geo)
        }
        other => return Err(UblkRequestError::UnsupportedOp(other)),
    };
    if raw.nr_sectors == 0 {
        return Err(UblkRequestError::Empty(io_op));
    }
    let block = first_block(raw, geo, io_op, true)?;
    let blocks = u64::from(raw.nr_sectors) / sectors_per_block(geo);
    match block.checked_add(blocks) {
        Some(end) if end <= geo.num_blocks => {}
        _ => {
            return Err(UblkRequestError::OutOfRange {
                op: io_op,
                block,
                blocks,
                num_blocks: geo.num_blocks,
            })
        }
    }
    if io_op.has_data() {
        let bytes = u64::from(raw.nr_sectors) * SECTOR;
        if bytes > u64::from(geo.max_io_bytes) {
            return Err(UblkRequestError::TooLarge {
                op: io_op,
                bytes,
                max: geo.max_io_bytes,
            });
        }
    }
    Ok(IoCmd {
        op: io_op,
        block,
        blocks,
    })
}

fn sectors_per_block(geo: &Geometry) -> u64 {
    u64::from(geo.block_size.max(512)) / SECTOR
}

/// The device block `raw` starts at, or Misaligned if its start (and, with
/// `whole_length`, its length) is not whole blocks.
fn first_block(
    raw: &RawDesc,
    geo: &Geometry,
    op: IoOp,
    whole_length: bool,
) -> Result<u64, UblkRequestError> {
    let spb = sectors_per_block(geo);
    if raw.start_sector % spb != 0 || (whole_length && u64::from(raw.nr_sectors) % spb != 0) {
        return Err(UblkRequestError::Misaligned {
            op,
            sector: raw.start_sector,
            sectors: raw.nr_sectors,
            block_size: geo.block_size,
        });
    }
    Ok(raw.start_sector / spb)
}

/// Zone management and REPORT_ZONES: a start sector on a block boundary
/// inside the device, and no sectors (management) or a zone count (report,
/// in the descriptor's `nr_sectors` slot, the kernel's `nr_zones`). That
/// the sector starts a zone is the zoned backend's check: only it knows
/// the zone size.
fn decode_zone(raw: &RawDesc, geo: &Geometry) -> Result<IoCmd, UblkRequestError> {
    let io_op = match raw.op() {
        op::ZONE_OPEN => IoOp::ZoneOpen,
        op::ZONE_CLOSE => IoOp::ZoneClose,
        op::ZONE_FINISH => IoOp::ZoneFinish,
        op::ZONE_RESET => IoOp::ZoneReset,
        _ => IoOp::ReportZones,
    };
    let block = first_block(raw, geo, io_op, false)?;
    if block >= geo.num_blocks {
        return Err(UblkRequestError::OutOfRange {
            op: io_op,
            block,
            blocks: 0,
            num_blocks: geo.num_blocks,
        });
    }
    let blocks = if io_op == IoOp::ReportZones {
        let zones = u64::from(raw.nr_sectors);
        if zones == 0 {
            return Err(UblkRequestError::Empty(io_op));
        }
        let bytes = zones * BLK_ZONE_BYTES;
        if bytes > u64::from(geo.max_io_bytes) {
            return Err(UblkRequestError::TooLarge {
                op: io_op,
                bytes,
                max: geo.max_io_bytes,
            });
        }
        zones
    } else {
        0
    };
    Ok(IoCmd {
        op: io_op,
        block,
        blocks,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const GEO: Geometry = Geometry {
        block_size: 4096,
        num_blocks: 256,
        max_io_bytes: 4096,
    };

    #[test]
    fn zone_requests_decode_to_their_zone_start_and_zone_count() {
        let open = decode(&RawDesc::new(op::ZONE_OPEN, 64, 0), &GEO).unwrap();
        assert_eq!((open.op, open.block, open.blocks), (IoOp::ZoneOpen, 8, 0));
        let all = decode(&RawDesc::new(op::ZONE_RESET_ALL, u64::MAX, 0), &GEO).unwrap();
        assert_eq!((all.op, all.block), (IoOp::ZoneResetAll, 0));
        let report = decode(&RawDesc::new(op::REPORT_ZONES, 0, 64), &GEO).unwrap();
        assert_eq!((report.op, report.blocks), (IoOp::ReportZones, 64));
        assert_eq!(report.data_bytes(4096), 64 * BLK_ZONE_BYTES);
        let append = decode(&RawDesc::new(op::ZONE_APPEND, 64, 8), &GEO).unwrap();
        assert_eq!((append.op, append.blocks), (IoOp::ZoneAppend, 1));
        assert!(append.op.data_in() && append.op.modifies() && append.op.is_zoned());
    }

    #[test]
    fn bad_zone_requests_get_their_errno() {
        let err = |d: RawDesc| decode(&d, &GEO).unwrap_err().errno();
        // Not on a block boundary, past the end, no zones, a report larger
        // than the buffer (65 entries of 64 bytes).
        assert_eq!(err(RawDesc::new(op::ZONE_RESET, 3, 0)), -libc::EINVAL);
        assert_eq!(err(RawDesc::new(op::ZONE_FINISH, 256 * 8, 0)), -libc::EIO);
        assert_eq!(err(RawDesc::new(op::REPORT_ZONES, 0, 0)), -libc::EINVAL);
        assert_eq!(err(RawDesc::new(op::REPORT_ZONES, 0, 65)), -libc::EINVAL);
        assert_eq!(err(RawDesc::new(op::ZONE_APPEND, 0, 16)), -libc::EINVAL);
        assert_eq!(err(RawDesc::new(16, 0, 8)), -libc::EOPNOTSUPP);
    }
}
