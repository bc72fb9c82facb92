//! The `BlockDevice` trait and plain devices.
//!
//! Every layer of ptsd that stores bytes does it through [`BlockDevice`]: the
//! journal's checkpoints, the file system's home locations, the ublk target's
//! backing store. The emulated SSD (`ptsd-ftl`) implements it too, so each
//! layer can run on a real disk, in memory, or on a simulated device that
//! forgets unflushed writes on a seeded crash.
//!
//! Addresses are in blocks of [`BlockDevice::block_size`] bytes; a buffer
//! must be a whole number of blocks. Bad requests return [`BlockError`],
//! never panic.
//!
//! ```
//! use ptsd_blockdev::{BlockDevice, MemDevice};
//!
//! let dev = MemDevice::new(4096, 16).unwrap();
//! dev.write(3, &[7u8; 4096]).unwrap();
//! let mut buf = vec![0u8; 4096];
//! dev.read(3, &mut buf).unwrap();
//! assert_eq!(buf, vec![7u8; 4096]);
//! assert!(dev.read(16, &mut buf).is_err()); // past the end: an error, not a panic
//! ```
#![warn(missing_docs)]

mod aligned;
mod behind;
mod cached;
mod corrupt;
mod crash;
mod crc;
mod error;
mod file;
pub mod le;
mod mem;
mod ramfs;
pub mod size;
mod uring;

pub use behind::WriteBehind;
pub use cached::cached_pages;
pub use corrupt::{Corruption, CorruptionEvent, SECTOR};
pub use crash::{CrashDevice, CrashReport, CrashStats, Fault};
pub use crc::CrcShift;
pub use error::{BlockError, ErrorChain};
pub use file::{FileDevice, FileDeviceOptions};
pub use mem::MemDevice;
pub use ramfs::{dir_on_ram_fs, file_on_ram_fs};

/// A device of fixed-size blocks, usable from many threads at once.
///
/// `read`/`write` take a block number and a buffer whose length is a
/// multiple of [`block_size`](Self::block_size). A write is *durable* only
/// after a later [`flush`](Self::flush) returns.
pub trait BlockDevice: Send + Sync {
    /// Bytes per block (a power of two, at least 512).
    fn block_size(&self) -> u32;

    /// Number of blocks on the device.
    fn num_blocks(&self) -> u64;

    /// Read `buf.len() / block_size` blocks starting at `block`.
    fn read(&self, block: u64, buf: &mut [u8]) -> Result<(), BlockError>;

    /// Write `buf.len() / block_size` blocks starting at `block`.
    fn write(&self, block: u64, buf: &[u8]) -> Result<(), BlockError>;

    /// Make every write that returned before this call durable.
    fn flush(&self) -> Result<(), BlockError>;

    /// Tell the device `count` blocks from `block` are unused. Reading them
    /// afterwards returns zeroes.
    fn discard(&self, block: u64, count: u64) -> Result<(), BlockError>;

    /// Capacity in bytes.
    fn capacity_bytes(&self) -> u64 {
        self.num_blocks() * u64::from(self.block_size())
    }

    /// Write zeroes to `count` blocks from `block`. The default writes a
    /// zero buffer; devices with a cheaper way override it.
    fn write_zeroes(&self, block: u64, count: u64) -> Result<(), BlockError> {
        check_range(self, block, count)?;
        let bs = self.block_size() as usize;
        const CHUNK: u64 = 64;
        let zeroes = vec![0u8; bs * CHUNK as usize];
        let mut done = 0;
        while done < count {
            let n = (count - done).min(CHUNK);
            self.write(block + done, &zeroes[..bs * n as usize])?;
            done += n;
        }
        Ok(())
    }

    /// Write several independent extents. Devices that can submit them
    /// together (io_uring) override this; the default writes one by one.
    fn write_batch(&self, writes: &[(u64, &[u8])]) -> Result<(), BlockError> {
        for (block, buf) in writes {
            self.write(*block, buf)?;
        }
        Ok(())
    }

    /// [`write_batch`](Self::write_batch) with owned buffers: a device that
    /// keeps what it is given (an emulated SSD's write buffer) takes them
    /// without a copy. The default lends them to `write_batch`.
    fn write_batch_owned(&self, writes: Vec<(u64, Vec<u8>)>) -> Result<(), BlockError> {
        let lent: Vec<(u64, &[u8])> = writes.iter().map(|(b, d)| (*b, d.as_slice())).collect();
        self.write_batch(&lent)
    }

    /// Read several independent extents; see [`write_batch`](Self::write_batch).
    fn read_batch(&self, reads: &mut [(u64, &mut [u8])]) -> Result<(), BlockError> {
        for (block, buf) in reads.iter_mut() {
            self.read(*block, buf)?;
        }
        Ok(())
    }

    /// A hint: `count` blocks from `block` will be read soon. Devices with a
    /// cache start fetching them and return without waiting; the default
    /// does nothing. Never an error: a later read reports any.
    fn prefetch(&self, block: u64, count: u64) {
        let _ = (block, count);
    }

    /// Wait until the blocks an earlier [`prefetch`](Self::prefetch) named
    /// are in the cache, without reading them out: for a caller about to
    /// read them while holding a lock others wait for, so that its wait for
    /// the disk happens before it takes the lock. A hint like `prefetch`
    /// (the later read is what reports errors); the default does nothing.
    fn await_prefetch(&self, block: u64, count: u64) {
        let _ = (block, count);
    }
}

impl<T: BlockDevice + ?Sized> BlockDevice for std::sync::Arc<T> {
    fn block_size(&self) -> u32 {
        (**self).block_size()
    }
    fn num_blocks(&self) -> u64 {
        (**self).num_blocks()
    }
    fn read(&self, block: u64, buf: &mut [u8]) -> Result<(), BlockError> {
        (**self).read(block, buf)
    }
    fn write(&self, block: u64, buf: &[u8]) -> Result<(), BlockError> {
        (**self).write(block, buf)
    }
    fn flush(&self) -> Result<(), BlockError> {
        (**self).flush()
    }
    fn discard(&self, block: u64, count: u64) -> Result<(), BlockError> {
        (**self).discard(block, count)
    }
    fn write_zeroes(&self, block: u64, count: u64) -> Result<(), BlockError> {
        (**self).write_zeroes(block, count)
    }
    fn write_batch(&self, writes: &[(u64, &[u8])]) -> Result<(), BlockError> {
        (**self).write_batch(writes)
    }
    fn write_batch_owned(&self, writes: Vec<(u64, Vec<u8>)>) -> Result<(), BlockError> {
        (**self).write_batch_owned(writes)
    }
    fn read_batch(&self, reads: &mut [(u64, &mut [u8])]) -> Result<(), BlockError> {
        (**self).read_batch(reads)
    }
    fn prefetch(&self, block: u64, count: u64) {
        (**self).prefetch(block, count)
    }
    fn await_prefetch(&self, block: u64, count: u64) {
        (**self).await_prefetch(block, count)
    }
}

/// Check that `[block, block + count)` lies on the device.
pub fn check_range<D: BlockDevice + ?Sized>(
    dev: &D,
    block: u64,
    count: u64,
) -> Result<(), BlockError> {
    let capacity = dev.num_blocks();
    match block.checked_add(count) {
        Some(end) if end <= capacity => Ok(()),
        _ => Err(BlockError::OutOfRange {
            block,
            count,
            capacity,
        }),
    }
}

/// Check a buffer for a request at `block` and return how many blocks it
/// covers: its length must be a non-zero multiple of the block size and the
/// extent must lie on the device.
pub fn check_request<D: BlockDevice + ?Sized>(
    dev: &D,
    block: u64,
    len: usize,
) -> Result<u64, BlockError> {
    let bs = dev.block_size() as usize;
    if len == 0 || len % bs != 0 {
        return Err(BlockError::Misaligned {
            len,
            block_size: dev.block_size(),
        });
    }
    let count = (len / bs) as u64;
    check_range(dev, block, count)?;
    Ok(count)
}

/// The README's examples run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
