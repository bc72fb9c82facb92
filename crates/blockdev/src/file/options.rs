//! [`FileDeviceOptions`]: how a [`FileDevice`] is opened or created.

use std::fs::OpenOptions;
use std::os::unix::fs::FileTypeExt;
use std::path::Path;

use super::{preallocate, FileDevice};
use crate::file_on_ram_fs;
use crate::mem::validate_geometry;
use crate::BlockError;

/// How to open a [`FileDevice`]. By default: 4096-byte blocks, O_DIRECT and
/// io_uring both tried (each falls back, with a logged reason, if refused).
///
/// ```
/// use ptsd_blockdev::{BlockDevice, FileDeviceOptions};
/// let dir = tempfile::tempdir().unwrap();
/// let dev = FileDeviceOptions::new()
///     .block_size(512)
///     .direct(false)
///     .io_uring(false)
///     .create(dir.path().join("disk.img"), 100)
///     .unwrap();
/// assert_eq!(dev.capacity_bytes(), 51_200);
/// assert!(!dev.is_direct() && !dev.io_uring_active());
/// ```
#[derive(Debug, Clone)]
pub struct FileDeviceOptions {
    pub(super) block_size: u32,
    pub(super) direct: bool,
    pub(super) io_uring: bool,
    pub(super) io_uring_buffered: bool,
    pub(super) random_access: bool,
    pub(super) preallocate: bool,
    pub(super) uncached_batch_bytes: Option<usize>,
    pub(super) cache_window: Option<u64>,
    pub(super) ring_entries: u32,
}

impl Default for FileDeviceOptions {
    fn default() -> Self {
        Self {
            block_size: 4096,
            direct: true,
            io_uring: true,
            io_uring_buffered: false,
            random_access: false,
            preallocate: false,
            uncached_batch_bytes: None,
            cache_window: None,
            ring_entries: 128,
        }
    }
}

impl FileDeviceOptions {
    /// The defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// Bytes per block: a power of two, at least 512.
    pub fn block_size(mut self, block_size: u32) -> Self {
        self.block_size = block_size;
        self
    }

    /// Try O_DIRECT (bypass the page cache). On by default.
    pub fn direct(mut self, direct: bool) -> Self {
        self.direct = direct;
        self
    }

    /// Use io_uring for `read_batch`/`write_batch` when I/O is direct. On
    /// by default.
    pub fn io_uring(mut self, io_uring: bool) -> Self {
        self.io_uring = io_uring;
        self
    }

    /// Use io_uring for batches even when I/O goes through the page cache.
    /// Off by default: page-cache (and tmpfs) writes are memory copies the
    /// kernel cannot do without blocking, so io_uring hands each one to a
    /// worker thread, and the `batch` bench measured that 2–3× slower than
    /// plain `pwrite`.
    pub fn io_uring_buffered(mut self, on: bool) -> Self {
        self.io_uring_buffered = on;
        self
    }

    /// Allocate a created file's blocks at once (`fallocate`), except on
    /// a RAM file system: the file is then laid out contiguously on the
    /// disk, however scattered the order its blocks are first written in
    /// (else an image written at random reads back as small scattered disk
    /// requests), and a full disk is an error at creation, not at a write.
    pub fn preallocate(mut self, on: bool) -> Self {
        self.preallocate = on;
        self
    }

    /// Write batches of at least `min_batch_bytes` uncached: the kernel
    /// starts their writeback at once and drops the pages when it is done
    /// (`RWF_DONTCACHE`, Linux 6.14+). For streams written far more than
    /// they are re-read: their pages neither pile up as dirty data for the
    /// next `flush` to write in one go, nor take fresh memory from the
    /// kernel page by page (in a VM each fresh page can cost a host fault).
    /// Small batches stay cached: kicking writeback per small batch costs
    /// more CPU than it saves. Needs io_uring batches
    /// ([`io_uring_buffered`](Self::io_uring_buffered)) and buffered I/O.
    /// Where the kernel or the file system refuses the flag (older kernels,
    /// tmpfs) the device says so once and writes normally. `None` (the
    /// default): every write is cached.
    pub fn uncached_writes(mut self, min_batch_bytes: Option<usize>) -> Self {
        self.uncached_batch_bytes = min_batch_bytes;
        self
    }

    /// Keep only the newest `bytes` of batched writes in the page cache:
    /// as more is written, the writeback of older batches' ranges is
    /// started (`sync_file_range`), and once another half of the window
    /// has been written after that, their clean pages are dropped
    /// (`POSIX_FADV_DONTNEED`). Later writes then reuse those pages instead
    /// of taking fresh memory from the kernel, which in a VM can cost a
    /// host fault per page, while what was written lately, the likeliest
    /// to be read again, stays cached (unlike
    /// [`uncached_writes`](Self::uncached_writes)). For a file written
    /// once per block over a long stretch, such as an emulated SSD's page
    /// image. Buffered I/O only, and not on a RAM file system (its page
    /// cache is the file). `None` (the default): no bound.
    pub fn cache_window(mut self, bytes: Option<u64>) -> Self {
        self.cache_window = bytes;
        self
    }

    /// Tell the kernel the file is read at random (`POSIX_FADV_RANDOM`):
    /// no readahead around a buffered read. For files whose neighbouring
    /// blocks are unrelated, such as an emulated SSD's page image, where
    /// readahead fetches pages nobody asked for. Off by default.
    pub fn random_access(mut self, on: bool) -> Self {
        self.random_access = on;
        self
    }

    /// Submission-queue entries per ring (a batch larger than this goes in
    /// several submissions). Rounded up to a power of two by the kernel.
    pub fn ring_entries(mut self, entries: u32) -> Self {
        self.ring_entries = entries.clamp(1, 4096);
        self
    }

    /// Open an existing regular file (its length must be a whole number of
    /// blocks) or block device (its size from `BLKGETSIZE64`).
    pub fn open(&self, path: impl AsRef<Path>) -> Result<FileDevice, BlockError> {
        FileDevice::open_with(path.as_ref(), self)
    }

    /// Create a regular file of `num_blocks` zero blocks, replacing any file
    /// at `path`, and open it. Refuses a block-device path.
    pub fn create(
        &self,
        path: impl AsRef<Path>,
        num_blocks: u64,
    ) -> Result<FileDevice, BlockError> {
        let path = path.as_ref();
        validate_geometry(self.block_size, num_blocks)?;
        let bytes = num_blocks
            .checked_mul(u64::from(self.block_size))
            .filter(|&b| b <= i64::MAX as u64)
            .ok_or_else(|| {
                BlockError::InvalidConfig(format!(
                    "{num_blocks} blocks of {} bytes is too large for a file",
                    self.block_size
                ))
            })?;
        if let Ok(meta) = std::fs::metadata(path) {
            if meta.file_type().is_block_device() {
                return Err(BlockError::InvalidConfig(format!(
                    "{} is a block device; open it instead of creating it",
                    path.display()
                )));
            }
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)?;
        file.set_len(bytes)?;
        if self.preallocate && !file_on_ram_fs(&file) {
            preallocate(&file, bytes, path)?;
        }
        drop(file);
        FileDevice::open_with(path, self)
    }
}
