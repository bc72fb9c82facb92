//! A device over a regular file or a block-device node.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::aligned::AlignedBuf;
use crate::mem::validate_geometry;
use crate::uring::{RawOp, RingPool, UringError, MAX_OP_BYTES};
use crate::{check_range, check_request, BlockDevice, BlockError};

/// `BLKGETSIZE64 = _IOR(0x12, 114, size_t)`, `BLKZEROOUT = _IO(0x12, 127)`
/// in the generic ioctl encoding (x86, Arm, RISC-V); libc does not export
/// them.
const BLKGETSIZE64: libc::Ioctl = 0x8008_1272_u32 as libc::Ioctl;
const BLKZEROOUT: libc::Ioctl = 0x127f_u32 as libc::Ioctl;

/// Memory alignment assumed for O_DIRECT when the kernel does not report it.
const DEFAULT_DIO_MEM_ALIGN: usize = 4096;

/// Largest bounce buffer for one unaligned synchronous request; bigger
/// requests go through it in pieces.
const MAX_BOUNCE: usize = 1 << 20;

/// A [`BlockDevice`] over a regular file or a block-device node (`/dev/…`).
///
/// * Single requests use `pread`/`pwrite` on a shared descriptor, so every
///   method takes `&self` and many threads can issue I/O at once.
/// * O_DIRECT is used when the file system accepts it for this block size;
///   otherwise (tmpfs, a block size below the device's sector) the device
///   falls back to buffered I/O and logs why. Buffers that are not aligned
///   in memory are copied through an aligned bounce buffer — never an error.
/// * `read_batch`/`write_batch` go through io_uring (one submission per
///   ring-full of extents) when I/O is direct and the kernel allows it, else
///   one by one (see [`FileDeviceOptions::io_uring_buffered`]).
/// * `flush` is `fdatasync`. `discard` punches a hole (files) or issues a
///   zeroing discard (block devices); either way discarded blocks read as
///   zeroes, as [`BlockDevice::discard`] promises. Plain `BLKDISCARD` is not
///   used because it does not promise that.
///
/// ```
/// use ptsd_blockdev::{BlockDevice, FileDevice};
///
/// let dir = tempfile::tempdir().unwrap();
/// let dev = FileDevice::create(dir.path().join("disk.img"), 4096, 64).unwrap();
/// let blocks = vec![(1u64, vec![1u8; 4096]), (9, vec![9u8; 8192])];
/// let batch: Vec<(u64, &[u8])> = blocks.iter().map(|(b, d)| (*b, &d[..])).collect();
/// dev.write_batch(&batch).unwrap(); // one io_uring submission if available
/// dev.flush().unwrap();
/// let mut buf = vec![0u8; 4096];
/// dev.read(10, &mut buf).unwrap();
/// assert_eq!(buf, vec![9u8; 4096]);
/// ```
pub struct FileDevice {
    file: File,
    path: PathBuf,
    block_size: u32,
    num_blocks: u64,
    is_block_device: bool,
    direct: bool,
    /// Memory alignment buffers need for O_DIRECT; 1 when buffered.
    mem_align: usize,
    rings: Option<RingPool>,
    /// Set once the file system refused a fallocate mode, so later discards
    /// go straight to writing zeroes.
    punch_unsupported: AtomicBool,
    zero_range_unsupported: AtomicBool,
    /// `write_batch` passes `RWF_DONTCACHE` for batches of at least this
    /// many bytes; `usize::MAX` when off or refused.
    uncached_from: AtomicUsize,
    /// Bounds what batched writes keep cached
    /// ([`FileDeviceOptions::cache_window`]).
    window: Option<WriteWindow>,
}

impl std::fmt::Debug for FileDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileDevice")
            .field("path", &self.path)
            .field("block_size", &self.block_size)
            .field("num_blocks", &self.num_blocks)
            .field("is_block_device", &self.is_block_device)
            .field("direct", &self.direct)
            .field("mem_align", &self.mem_align)
            .field("io_uring", &self.rings.is_some())
            .finish()
    }
}

impl FileDevice {
    /// Open an existing file or block device with `block_size`-byte blocks
    /// and the default options.
    pub fn open(path: impl AsRef<Path>, block_size: u32) -> Result<Self, BlockError> {
        FileDeviceOptions::new().block_size(block_size).open(path)
    }

    /// Create (or replace) a file of `num_blocks` zero blocks and open it
    /// with the default options.
    pub fn create(
        path: impl AsRef<Path>,
        block_size: u32,
        num_blocks: u64,
    ) -> Result<Self, BlockError> {
        FileDeviceOptions::new()
            .block_size(block_size)
            .create(path, num_blocks)
    }

    /// Whether I/O bypasses the page cache (O_DIRECT).
    pub fn is_direct(&self) -> bool {
        self.direct
    }

    /// Whether batches go through io_uring (by default only with O_DIRECT;
    /// a refused ring setup is logged and leaves this false).
    pub fn io_uring_active(&self) -> bool {
        self.rings.is_some()
    }

    /// Whether large enough batched writes go out uncached
    /// ([`FileDeviceOptions::uncached_writes`] asked for, and not refused).
    pub fn writes_uncached(&self) -> bool {
        self.uncached_from.load(Ordering::Relaxed) != usize::MAX
    }

    /// Whether the path is a block device rather than a regular file.
    pub fn is_block_device(&self) -> bool {
        self.is_block_device
    }

    /// The path the device was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn open_with(path: &Path, opts: &FileDeviceOptions) -> Result<Self, BlockError> {
        validate_geometry(opts.block_size, 1)?;
        let bs = u64::from(opts.block_size);
        let mut file = open_rw(path, opts.direct);
        let mut direct = opts.direct;
        if direct {
            if let Err(e) = &file {
                if e.raw_os_error() == Some(libc::EINVAL) {
                    tracing::warn!(
                        "{}: O_DIRECT refused at open ({e}); using buffered I/O",
                        path.display()
                    );
                    direct = false;
                    file = open_rw(path, false);
                }
            }
        }
        let file = file?;
        let meta = file.metadata()?;
        let is_block_device = meta.file_type().is_block_device();
        let size = if is_block_device {
            block_device_size(&file)?
        } else if meta.is_file() {
            meta.len()
        } else {
            return Err(BlockError::InvalidConfig(format!(
                "{} is neither a regular file nor a block device",
                path.display()
            )));
        };
        if size % bs != 0 {
            if is_block_device {
                tracing::warn!(
                    "{}: size {size} is not a whole number of {bs}-byte blocks; the tail is unused",
                    path.display()
                );
            } else {
                return Err(BlockError::InvalidConfig(format!(
                    "{}: length {size} is not a whole number of {bs}-byte blocks",
                    path.display()
                )));
            }
        }
        let num_blocks = size / bs;
        if num_blocks == 0 {
            return Err(BlockError::InvalidConfig(format!(
                "{}: smaller than one {bs}-byte block",
                path.display()
            )));
        }

        let mut dev = FileDevice {
            file,
            path: path.to_owned(),
            block_size: opts.block_size,
            num_blocks,
            is_block_device,
            direct,
            mem_align: 1,
            rings: None,
            punch_unsupported: AtomicBool::new(false),
            zero_range_unsupported: AtomicBool::new(false),
            uncached_from: AtomicUsize::new(usize::MAX),
            window: None,
        };
        if direct && !is_block_device && file_on_ram_fs(&dev.file) {
            // tmpfs may accept O_DIRECT but still copies through memory; the
            // flag would only add alignment bounces.
            tracing::info!("{}: on tmpfs, using buffered I/O", path.display());
            dev.file = open_rw(path, false)?;
            dev.direct = false;
        } else if direct {
            match direct_io_alignment(&dev.file, opts.block_size) {
                Ok(mem_align) => {
                    dev.mem_align = mem_align;
                    dev.direct = true;
                }
                Err(reason) => {
                    tracing::warn!("{}: {reason}; using buffered I/O", path.display());
                    dev.file = open_rw(path, false)?;
                    dev.direct = false;
                }
            }
        }
        if opts.random_access && !dev.direct {
            use std::os::fd::AsRawFd;
            // SAFETY: a plain syscall on a descriptor we own; it only
            // changes the kernel's readahead policy for the file.
            let rc =
                unsafe { libc::posix_fadvise(dev.file.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM) };
            if rc != 0 {
                tracing::debug!(
                    "{}: posix_fadvise(RANDOM) failed: errno {rc}",
                    path.display()
                );
            }
        }
        if opts.io_uring && !dev.direct && !opts.io_uring_buffered {
            tracing::info!(
                "{}: buffered I/O, so batches use pwrite/pread (faster than io_uring there)",
                path.display()
            );
        } else if opts.io_uring {
            match RingPool::new(opts.ring_entries) {
                Ok(pool) => dev.rings = Some(pool),
                Err(e) => tracing::warn!(
                    "{}: io_uring unavailable ({e}); batches use pread/pwrite",
                    path.display()
                ),
            }
        }
        // Only buffered batches through a ring can pass the flag.
        let ring_buffered = !dev.direct && dev.rings.is_some();
        if let Some(bytes) = opts.uncached_batch_bytes.filter(|_| ring_buffered) {
            if file_on_ram_fs(&dev.file) {
                tracing::debug!(
                    "{}: on a RAM file system, writes stay cached",
                    path.display()
                );
            } else {
                dev.uncached_from = AtomicUsize::new(bytes);
            }
        }
        if let Some(bytes) = opts.cache_window.filter(|_| !dev.direct) {
            if !file_on_ram_fs(&dev.file) {
                dev.window = Some(WriteWindow::new(bytes));
            }
        }
        Ok(dev)
    }

    /// Whether batched writes keep only a window of the newest cached
    /// ([`FileDeviceOptions::cache_window`] asked for, and applicable).
    pub fn cache_window_active(&self) -> bool {
        self.window.is_some()
    }

    /// Tells the window, if any, what a batch wrote.
    fn batch_written(&self, writes: &[(u64, &[u8])]) {
        if let Some(w) = &self.window {
            let bs = u64::from(self.block_size);
            w.wrote(
                self.file.as_raw_fd(),
                writes.iter().map(|(b, buf)| (b * bs, buf.len() as u64)),
            );
        }
    }

    /// The batch write itself, page cache window aside.
    fn write_batch_through(&self, writes: &[(u64, &[u8])]) -> Result<(), BlockError> {
        // Validate everything first so a bad extent writes nothing.
        for (block, buf) in writes {
            check_request(self, *block, buf.len())?;
        }
        let Some(rings) = &self.rings else {
            return writes
                .iter()
                .try_for_each(|(block, buf)| self.write_at(buf, self.offset(*block)));
        };
        let uncached_from = self.uncached_from.load(Ordering::Relaxed);
        let uncached = uncached_from != usize::MAX
            && writes.iter().map(|(_, buf)| buf.len()).sum::<usize>() >= uncached_from;
        if let ([(block, buf)], false) = (writes, uncached) {
            return self.write_at(buf, self.offset(*block));
        }
        // Unaligned buffers are copied to aligned ones that live until the
        // ring is done; moving an `AlignedBuf` does not move its bytes.
        let mut bounces = Vec::new();
        let mut ops = Vec::with_capacity(writes.len());
        for (block, buf) in writes {
            let ptr = if self.is_aligned(buf) {
                buf.as_ptr() as *mut u8
            } else {
                let mut bounce = self.bounce(buf.len())?;
                bounce.copy_from_slice(buf);
                let ptr = bounce.as_mut_ptr();
                bounces.push(bounce);
                ptr
            };
            push_ops(&mut ops, ptr, buf.len(), self.offset(*block));
        }
        // The ring only reads through these pointers for writes.
        let flags = if uncached { libc::RWF_DONTCACHE } else { 0 };
        match rings.run(self.file.as_raw_fd(), &ops, true, flags) {
            Ok(ran) => {
                if ran.flags_refused
                    && self.uncached_from.swap(usize::MAX, Ordering::Relaxed) != usize::MAX
                {
                    tracing::info!(
                        "{}: the kernel refused uncached (RWF_DONTCACHE) writes; writing through the page cache",
                        self.path.display()
                    );
                }
                self.finish_short(&ops, &ran.done, true)
            }
            Err(UringError::Op(e)) => Err(e.into()),
            Err(UringError::Ring(e)) => {
                tracing::warn!("io_uring write batch failed ({e}); redoing it with pwrite");
                writes
                    .iter()
                    .try_for_each(|(block, buf)| self.write_at(buf, self.offset(*block)))
            }
        }
    }

    fn offset(&self, block: u64) -> u64 {
        block * u64::from(self.block_size)
    }

    fn is_aligned(&self, buf: &[u8]) -> bool {
        buf.as_ptr() as usize % self.mem_align == 0
    }

    fn bounce(&self, len: usize) -> Result<AlignedBuf, BlockError> {
        AlignedBuf::zeroed(len, self.mem_align).ok_or_else(|| {
            BlockError::Io(io::Error::new(
                io::ErrorKind::OutOfMemory,
                format!("cannot allocate a {len}-byte aligned buffer"),
            ))
        })
    }

    /// `pread` at a byte offset, bouncing through aligned memory if needed.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<(), BlockError> {
        if self.is_aligned(buf) {
            self.file.read_exact_at(buf, offset)?;
            return Ok(());
        }
        let piece = buf.len().min(MAX_BOUNCE);
        let mut bounce = self.bounce(piece)?;
        let mut done = 0;
        for chunk in buf.chunks_mut(piece) {
            let b = &mut bounce[..chunk.len()];
            self.file.read_exact_at(b, offset + done as u64)?;
            chunk.copy_from_slice(b);
            done += chunk.len();
        }
        Ok(())
    }

    /// `pwrite` at a byte offset, bouncing through aligned memory if needed.
    fn write_at(&self, buf: &[u8], offset: u64) -> Result<(), BlockError> {
        if self.is_aligned(buf) {
            self.file.write_all_at(buf, offset)?;
            return Ok(());
        }
        let piece = buf.len().min(MAX_BOUNCE);
        let mut bounce = self.bounce(piece)?;
        let mut done = 0;
        for chunk in buf.chunks(piece) {
            let b = &mut bounce[..chunk.len()];
            b.copy_from_slice(chunk);
            self.file.write_all_at(b, offset + done as u64)?;
            done += chunk.len();
        }
        Ok(())
    }

    fn fallocate(&self, mode: libc::c_int, block: u64, count: u64) -> io::Result<()> {
        let offset = self.offset(block) as libc::off_t;
        let len = self.offset(count) as libc::off_t;
        // SAFETY: fallocate only reads its integer arguments; the descriptor
        // is open for as long as `self` lives.
        let rc = unsafe { libc::fallocate(self.file.as_raw_fd(), mode, offset, len) };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    fn blk_zeroout(&self, block: u64, count: u64) -> io::Result<()> {
        let range: [u64; 2] = [self.offset(block), self.offset(count)];
        // SAFETY: BLKZEROOUT reads a `[u64; 2]` (start, length) from the
        // pointer, which is valid for the duration of the call.
        let rc = unsafe { libc::ioctl(self.file.as_raw_fd(), BLKZEROOUT, range.as_ptr()) };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    /// Write zeroes with ordinary writes, from one aligned zero buffer.
    fn write_zero_buffers(&self, block: u64, count: u64) -> Result<(), BlockError> {
        let bs = self.block_size as usize;
        let per_write = (MAX_BOUNCE / bs).max(1) as u64;
        let zeroes = self.bounce(bs * per_write.min(count) as usize)?;
        let mut done = 0;
        while done < count {
            let n = (count - done).min(per_write);
            self.write_at(&zeroes[..bs * n as usize], self.offset(block + done))?;
            done += n;
        }
        Ok(())
    }

    /// Try a fallocate mode once; remember if the file system refuses it.
    fn try_fallocate(&self, flag: &AtomicBool, mode: libc::c_int, block: u64, count: u64) -> bool {
        if flag.load(Ordering::Relaxed) {
            return false;
        }
        match self.fallocate(mode, block, count) {
            Ok(()) => true,
            Err(e) => {
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EOPNOTSUPP | libc::ENOSYS | libc::EINVAL)
                ) {
                    flag.store(true, Ordering::Relaxed);
                }
                tracing::debug!(
                    "{}: fallocate mode {mode:#x} failed ({e}); writing zeroes",
                    self.path.display()
                );
                false
            }
        }
    }

    /// Finish, synchronously, ops the ring left short.
    fn finish_short(&self, ops: &[RawOp], done: &[usize], write: bool) -> Result<(), BlockError> {
        for (op, &n) in ops.iter().zip(done) {
            if n >= op.len {
                continue;
            }
            let offset = op.offset + n as u64;
            if write {
                // SAFETY: `op` describes a live buffer of `op.len` bytes that
                // the batch borrows, `n < op.len`, and the ring is done with it.
                let rest = unsafe { std::slice::from_raw_parts(op.ptr.add(n), op.len - n) };
                self.file.write_all_at(rest, offset)?;
            } else {
                // SAFETY: as above; for reads the batch borrows the buffer
                // mutably, and no other reference to it is alive here.
                let rest = unsafe { std::slice::from_raw_parts_mut(op.ptr.add(n), op.len - n) };
                self.file.read_exact_at(rest, offset)?;
            }
        }
        Ok(())
    }
}

/// Split an extent into ring ops of at most `MAX_OP_BYTES`.
fn push_ops(ops: &mut Vec<RawOp>, ptr: *mut u8, len: usize, offset: u64) {
    let mut done = 0;
    while done < len {
        let n = (len - done).min(MAX_OP_BYTES);
        ops.push(RawOp {
            // `done < len`: still inside the buffer.
            ptr: ptr.wrapping_add(done),
            len: n,
            offset: offset + done as u64,
        });
        done += n;
    }
}

fn open_rw(path: &Path, direct: bool) -> io::Result<File> {
    let mut opts = OpenOptions::new();
    opts.read(true).write(true);
    if direct {
        opts.custom_flags(libc::O_DIRECT);
    }
    opts.open(path)
}

/// Whether a regular file lives on tmpfs (or ramfs), where O_DIRECT buys
/// nothing. (Not for device nodes: /dev itself is a tmpfs.)
fn block_device_size(file: &File) -> io::Result<u64> {
    let mut size: u64 = 0;
    // SAFETY: BLKGETSIZE64 writes one u64 through the pointer, which points
    // at a live local.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), BLKGETSIZE64, &mut size as *mut u64) };
    if rc == 0 {
        Ok(size)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Decide whether O_DIRECT works on `file` for this block size; returns the
/// memory alignment buffers need, or why direct I/O cannot be used.
fn direct_io_alignment(file: &File, block_size: u32) -> Result<usize, String> {
    let mut mem_align = DEFAULT_DIO_MEM_ALIGN;
    // SAFETY: an all-zero statx is a valid value of this plain C struct.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: the path is a valid NUL-terminated empty string (with
    // AT_EMPTY_PATH the call inspects the descriptor) and `stx` is a live
    // struct the kernel fills.
    let rc = unsafe {
        libc::statx(
            file.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_DIOALIGN,
            &mut stx,
        )
    };
    if rc == 0 && stx.stx_mask & libc::STATX_DIOALIGN != 0 {
        let offset_align = stx.stx_dio_offset_align;
        if offset_align == 0 {
            return Err("the file system reports no direct I/O support".into());
        }
        if block_size % offset_align != 0 {
            return Err(format!(
                "block size {block_size} is below the {offset_align}-byte direct I/O alignment"
            ));
        }
        if stx.stx_dio_mem_align.is_power_of_two() {
            mem_align = stx.stx_dio_mem_align as usize;
        }
    }
    // Whatever the kernel reported, read one block to be sure.
    let mut probe = AlignedBuf::zeroed(block_size as usize, mem_align.max(block_size as usize))
        .ok_or("cannot allocate the O_DIRECT probe buffer")?;
    match file.read_exact_at(&mut probe, 0) {
        Ok(()) => Ok(mem_align),
        Err(e) => Err(format!("O_DIRECT probe read failed ({e})")),
    }
}

impl BlockDevice for FileDevice {
    fn block_size(&self) -> u32 {
        self.block_size
    }

    fn num_blocks(&self) -> u64 {
        self.num_blocks
    }

    fn read(&self, block: u64, buf: &mut [u8]) -> Result<(), BlockError> {
        check_request(self, block, buf.len())?;
        self.read_at(buf, self.offset(block))
    }

    fn write(&self, block: u64, buf: &[u8]) -> Result<(), BlockError> {
        check_request(self, block, buf.len())?;
        self.write_at(buf, self.offset(block))
    }

    fn flush(&self) -> Result<(), BlockError> {
        self.file.sync_data()?;
        Ok(())
    }

    fn discard(&self, block: u64, count: u64) -> Result<(), BlockError> {
        check_range(self, block, count)?;
        if count == 0 {
            return Ok(());
        }
        // On a block device, PUNCH_HOLE is a discard the kernel issues only
        // if the device then reads zeroes (else EOPNOTSUPP), so it keeps the
        // trait's promise; BLKZEROOUT is the next cheapest way to keep it.
        let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
        if self.try_fallocate(&self.punch_unsupported, mode, block, count) {
            return Ok(());
        }
        if self.is_block_device && self.blk_zeroout(block, count).is_ok() {
            return Ok(());
        }
        self.write_zero_buffers(block, count)
    }

    fn write_zeroes(&self, block: u64, count: u64) -> Result<(), BlockError> {
        check_range(self, block, count)?;
        if count == 0 {
            return Ok(());
        }
        if self.is_block_device {
            if self.blk_zeroout(block, count).is_ok() {
                return Ok(());
            }
        } else {
            let mode = libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE;
            if self.try_fallocate(&self.zero_range_unsupported, mode, block, count) {
                return Ok(());
            }
        }
        self.write_zero_buffers(block, count)
    }

    fn write_batch(&self, writes: &[(u64, &[u8])]) -> Result<(), BlockError> {
        self.write_batch_through(writes)?;
        self.batch_written(writes);
        Ok(())
    }

    /// `POSIX_FADV_WILLNEED`: the kernel starts reading the range into the
    /// page cache and returns. Nothing to do under O_DIRECT.
    fn prefetch(&self, block: u64, count: u64) {
        if self.direct || check_range(self, block, count).is_err() {
            return;
        }
        let bs = u64::from(self.block_size);
        // SAFETY: a plain syscall on a descriptor we own; it only reads
        // the file into the page cache.
        unsafe {
            libc::posix_fadvise(
                self.file.as_raw_fd(),
                (block * bs) as libc::off_t,
                (count * bs) as libc::off_t,
                libc::POSIX_FADV_WILLNEED,
            )
        };
    }

    fn await_prefetch(&self, block: u64, count: u64) {
        if self.direct || count == 0 || check_range(self, block, count).is_err() {
            return;
        }
        // A read of a block whose fetch is under way waits for it; one byte
        // of the range's last block is enough (the prefetch fetched the
        // range in order, the earlier blocks in the same or earlier
        // requests), and it costs one copy of a byte when cached.
        let mut byte = [0u8; 1];
        let last = (block + count - 1) * u64::from(self.block_size);
        let _ = self.file.read_at(&mut byte, last);
    }

    fn read_batch(&self, reads: &mut [(u64, &mut [u8])]) -> Result<(), BlockError> {
        for (block, buf) in reads.iter() {
            check_request(self, *block, buf.len())?;
        }
        let Some(rings) = &self.rings else {
            return reads
                .iter_mut()
                .try_for_each(|(block, buf)| self.read_at(buf, self.offset(*block)));
        };
        if let [(block, buf)] = reads {
            return self.read_at(buf, self.offset(*block));
        }
        // Unaligned targets are read into bounce buffers, copied out after.
        let mut bounces: Vec<(usize, AlignedBuf)> = Vec::new();
        let mut ops = Vec::with_capacity(reads.len());
        for (i, (block, buf)) in reads.iter_mut().enumerate() {
            let ptr = if self.is_aligned(buf) {
                buf.as_mut_ptr()
            } else {
                let mut bounce = self.bounce(buf.len())?;
                let ptr = bounce.as_mut_ptr();
                bounces.push((i, bounce));
                ptr
            };
            push_ops(&mut ops, ptr, buf.len(), self.offset(*block));
        }
        match rings.run(self.file.as_raw_fd(), &ops, false, 0) {
            Ok(ran) => self.finish_short(&ops, &ran.done, false)?,
            Err(UringError::Op(e)) => return Err(e.into()),
            Err(UringError::Ring(e)) => {
                tracing::warn!("io_uring read batch failed ({e}); redoing it with pread");
                return reads
                    .iter_mut()
                    .try_for_each(|(block, buf)| self.read_at(buf, self.offset(*block)));
            }
        }
        for (i, bounce) in bounces {
            reads[i].1.copy_from_slice(&bounce);
        }
        Ok(())
    }
}

mod alloc;
mod options;
mod window;
use crate::file_on_ram_fs;
use alloc::preallocate;
pub use options::FileDeviceOptions;
use window::WriteWindow;

#[cfg(test)]
mod tests;
