use std::sync::Arc;

use ptsd_blockdev::BlockError;
use thiserror::Error;

use crate::region::RegionError;

/// A superblock or commit area that cannot be used.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum JournalFormatError {
    /// Not a ptsd journal (or wiped).
    #[error("no ptsd journal superblock (bad magic)")]
    BadMagic,
    /// A journal written by an incompatible version.
    #[error("unsupported journal version {0}")]
    UnsupportedVersion(u32),
    /// A checksum does not match.
    #[error("{0} checksum mismatch")]
    BadChecksum(&'static str),
    /// Fields that cannot describe a real layout.
    #[error("invalid journal geometry: {0}")]
    Geometry(String),
    /// The region is smaller than a superblock.
    #[error("region too small for a superblock")]
    Truncated,
    /// No commit record survived (the journal was never formatted completely).
    #[error("no valid commit record in the commit area")]
    NoCommitRecord,
    /// The newest record's slots did not all reach the media, and the
    /// record before it, which recovery would fall back to, is gone.
    #[error(
        "commit record {seq} was cut short before its slots were written, \
         and the record before it is missing or corrupt"
    )]
    TornCommitWithoutPredecessor {
        /// Sequence number of the cut-short record.
        seq: u64,
    },
}

/// What can go wrong with a journal operation.
#[derive(Debug, Error)]
pub enum JournalError {
    /// The persistent-memory region failed.
    #[error(transparent)]
    Region(#[from] RegionError),
    /// The home block device failed.
    #[error("block device")]
    Device(#[from] BlockError),
    /// The region does not hold a usable journal.
    #[error("journal format")]
    Format(#[from] JournalFormatError),
    /// The journal belongs to a device of another shape.
    #[error("journal was made for a device of {expected_blocks} blocks of {expected_block_size} bytes, not {blocks} of {block_size}")]
    ForeignDevice {
        /// Blocks recorded in the superblock.
        expected_blocks: u64,
        /// Block size recorded in the superblock.
        expected_block_size: u32,
        /// Blocks of the device given.
        blocks: u64,
        /// Block size of the device given.
        block_size: u32,
    },
    /// A configuration that cannot work.
    #[error("invalid journal configuration: {0}")]
    Config(String),
    /// A block number past the end of the device.
    #[error("block {block} out of range (device has {num_blocks} blocks)")]
    BlockOutOfRange {
        /// The block asked for.
        block: u64,
        /// Device size in blocks.
        num_blocks: u64,
    },
    /// A buffer that is not exactly one block.
    #[error("buffer of {len} bytes is not one {block_size}-byte block")]
    BadLength {
        /// Buffer length.
        len: usize,
        /// Journal block size.
        block_size: u32,
    },
    /// The partition ring is full of slots that cannot be freed before this
    /// transaction finishes (it, or transactions begun after it, fill the
    /// ring). The transaction should be dropped (aborted) and retried.
    #[error("journal partition {partition} is full of uncommitted transactions")]
    Full {
        /// The full partition.
        partition: usize,
    },
    /// The journal was closed.
    #[error("journal is closed")]
    Closed,
    /// An earlier failure stopped the journal; every later operation gets
    /// the same cause.
    #[error("journal stopped after an earlier failure")]
    Failed(#[source] Arc<Failure>),
    /// The OS refused to start one of the journal's threads.
    #[error("cannot start journal thread {name}")]
    Spawn {
        /// The thread's name.
        name: String,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
}

/// Why the journal stopped for good (carried by [`JournalError::Failed`]).
#[derive(Debug, Error)]
pub enum Failure {
    /// Making slots or a commit record durable in the region failed.
    #[error("region sync failed")]
    RegionSync(#[source] RegionError),
    /// Writing one partition's blocks to their home locations failed.
    #[error("checkpoint of partition {partition} failed")]
    Checkpoint {
        /// The partition whose checkpoint failed.
        partition: usize,
        /// What failed (typically the home device).
        #[source]
        source: JournalError,
    },
    /// Finishing a checkpoint round (device flush, checkpoint record) failed.
    #[error("checkpoint failed")]
    CheckpointRound(#[source] JournalError),
}
