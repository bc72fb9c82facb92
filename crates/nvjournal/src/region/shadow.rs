//! The region of a journal file on a disk file system (msync mode): the
//! bytes live in anonymous memory, each store marks its pages dirty, and a
//! `sync` writes the dirty pages to the file (`pwrite`) and `fdatasync`s it.
//! The writes are direct I/O where the file system allows it, submitted
//! together through io_uring: the pages go from our memory to the disk with
//! no page-cache copy for the kernel's writeback to handle again, and the
//! file's blocks are written zeroes at creation, so `fdatasync` has no
//! metadata to commit, only the disk's cache to flush.
//!
//! A shared mapping of the file would do the same with `msync`, at a cost
//! the journal pays on every commit: the kernel write-protects each page it
//! writes back (an IPI to every CPU running the process, to flush their
//! TLBs), and the next store to the page takes a write fault that updates
//! the file's mtime. Measured on ext4, those were a quarter of the file
//! system daemon's CPU time under a varmail-like load.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::Mutex;
use ptsd_blockdev::{BlockDevice, FileDevice, FileDeviceOptions};

use super::RegionError;

const PAGE: usize = 4096;

/// Dirty pages of the in-memory copy, and the serialisation of syncs.
pub(super) struct Shadow {
    /// One bit per page: stored to since it was last written to the file.
    dirty: Box<[AtomicU64]>,
    /// Syncs begun (each takes the dirty bits it writes at its start).
    begun: AtomicU64,
    /// Syncs completed; held while one runs, so they run one at a time.
    completed: Mutex<u64>,
    /// The file opened again for direct I/O, its writes batched through
    /// io_uring (None where refused).
    direct: Option<FileDevice>,
    /// Set once a direct write was refused: buffered writes from then on.
    direct_refused: AtomicBool,
}

impl Shadow {
    pub(super) fn new(len: usize, file: &File) -> Self {
        let pages = len.div_ceil(PAGE);
        Self {
            dirty: (0..pages.div_ceil(64)).map(|_| AtomicU64::new(0)).collect(),
            begun: AtomicU64::new(0),
            completed: Mutex::new(0),
            direct: open_direct(file),
            direct_refused: AtomicBool::new(false),
        }
    }

    pub(super) fn writes_direct(&self) -> bool {
        self.direct.is_some() && !self.direct_refused.load(Ordering::Relaxed)
    }

    /// The direct device to write through, unless refused.
    fn direct(&self) -> Option<&FileDevice> {
        self.direct
            .as_ref()
            .filter(|_| !self.direct_refused.load(Ordering::Relaxed))
    }

    /// Mark `[offset, offset + len)` as stored to (after the store, so a
    /// sync that takes the bit also sees the bytes).
    pub(super) fn mark(&self, offset: usize, len: usize) {
        if len == 0 {
            return;
        }
        let (first, last) = (offset / PAGE, (offset + len - 1) / PAGE);
        for page in first..=last {
            self.dirty[page / 64].fetch_or(1 << (page % 64), Ordering::SeqCst);
        }
    }

    /// Make every store marked before this call durable in `file`: write
    /// the dirty pages of `mem` (`len` bytes) and `fdatasync`.
    pub(super) fn sync(&self, mem: *const u8, len: usize, file: &File) -> Result<(), RegionError> {
        // A sync begun after this call began covers our stores too: wait
        // for the running one, and skip ours if such a sync completed.
        // (SeqCst throughout: a sync numbered above `seen` then takes the
        // dirty bits after every mark made before this load.)
        let seen = self.begun.load(Ordering::SeqCst);
        let mut completed = self.completed.lock();
        if *completed > seen {
            return Ok(());
        }
        let number = self.begun.fetch_add(1, Ordering::SeqCst) + 1;
        let taken: Vec<u64> = self
            .dirty
            .iter()
            .map(|w| w.swap(0, Ordering::SeqCst))
            .collect();
        let runs = dirty_runs(&taken, len);
        let result = match self.direct() {
            Some(dev) => {
                match write_direct(&runs, mem, dev) {
                    Err(e) => {
                        // Refused (alignment, a file system that changed its
                        // mind): buffered from now on, and redo this sync so.
                        if !self.direct_refused.swap(true, Ordering::Relaxed) {
                            tracing::warn!("direct writes to the journal file failed ({e}); buffered from now on");
                        }
                        write_buffered(&runs, mem, file)
                    }
                    Ok(()) => Ok(()),
                }
            }
            None => write_buffered(&runs, mem, file),
        };
        let result = result.and_then(|()| {
            file.sync_data().map_err(|source| RegionError::Io {
                op: "fdatasync",
                source,
            })
        });
        if result.is_err() {
            // Not durable: leave the pages dirty for whoever syncs next.
            for (w, &bits) in self.dirty.iter().zip(&taken) {
                w.fetch_or(bits, Ordering::SeqCst);
            }
            return result;
        }
        *completed = number;
        Ok(())
    }
}

/// The byte ranges `[from, to)` of the pages whose bits are set in `bits`,
/// runs of adjacent pages as one range.
fn dirty_runs(bits: &[u64], len: usize) -> Vec<(usize, usize)> {
    let pages = len.div_ceil(PAGE);
    let is_dirty = |p: usize| bits[p / 64] & (1 << (p % 64)) != 0;
    let mut runs = Vec::new();
    let mut page = 0;
    while page < pages {
        if bits[page / 64] == 0 {
            page = (page / 64 + 1) * 64;
            continue;
        }
        if !is_dirty(page) {
            page += 1;
            continue;
        }
        let start = page;
        while page < pages && is_dirty(page) {
            page += 1;
        }
        runs.push((start * PAGE, (page * PAGE).min(len)));
    }
    runs
}

/// The bytes of `mem` in `[from, to)`.
///
/// SAFETY: the caller guarantees `[from, to)` lies inside the live
/// allocation `mem` points to. Other threads may store into these bytes
/// while the kernel copies them (concurrent commits); such a store marks its
/// page dirty again, so the next sync writes it.
unsafe fn bytes<'a>(mem: *const u8, from: usize, to: usize) -> &'a [u8] {
    // SAFETY: see above.
    unsafe { std::slice::from_raw_parts(mem.add(from), to - from) }
}

/// Write `runs` of `mem` through the page cache, one `pwrite` each.
fn write_buffered(runs: &[(usize, usize)], mem: *const u8, file: &File) -> Result<(), RegionError> {
    for &(from, to) in runs {
        // SAFETY: the runs lie inside the region's memory (`dirty_runs`).
        let b = unsafe { bytes(mem, from, to) };
        file.write_all_at(b, from as u64)
            .map_err(|source| RegionError::Io {
                op: "write",
                source,
            })?;
    }
    Ok(())
}

/// Write `runs` of `mem` with direct I/O, all submitted at once (io_uring),
/// so the disk sees them together rather than one round trip each.
fn write_direct(
    runs: &[(usize, usize)],
    mem: *const u8,
    dev: &FileDevice,
) -> Result<(), ptsd_blockdev::BlockError> {
    let writes: Vec<(u64, &[u8])> = runs
        .iter()
        // SAFETY: the runs lie inside the region's memory (`dirty_runs`).
        .map(|&(from, to)| ((from / PAGE) as u64, unsafe { bytes(mem, from, to) }))
        .collect();
    dev.write_batch(&writes)
}

/// `file` opened again for direct I/O in 4 KiB blocks, if its file system
/// allows it (tmpfs and some others refuse `O_DIRECT`).
fn open_direct(file: &File) -> Option<FileDevice> {
    use std::os::fd::AsRawFd;
    let dev = FileDeviceOptions::new()
        .block_size(PAGE as u32)
        .direct(true)
        .open(format!("/proc/self/fd/{}", file.as_raw_fd()))
        .ok()?;
    dev.is_direct().then_some(dev)
}

/// Fill `mem` (`len` bytes) from `file`. The file's page cache is built of
/// single pages (`POSIX_FADV_RANDOM`, after dropping what an earlier user
/// left): on file systems with large folios a 4 KiB `pwrite` into a 2 MiB
/// folio is written back as a whole folio.
pub(super) fn load(file: &File, mem: *mut u8, len: usize) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let fd = file.as_raw_fd();
    let advise = |advice| {
        // SAFETY: a plain syscall on a descriptor we own.
        match unsafe { libc::posix_fadvise(fd, 0, len as libc::off_t, advice) } {
            0 => Ok(()),
            e => Err(std::io::Error::from_raw_os_error(e)),
        }
    };
    file.sync_data()?;
    advise(libc::POSIX_FADV_DONTNEED)?;
    advise(libc::POSIX_FADV_RANDOM)?;
    let mut at = 0;
    while at < len {
        let n = (len - at).min(1 << 20);
        // SAFETY: `[at, at + n)` lies inside the `len` bytes at `mem`,
        // which nobody else accesses yet (the region is being built).
        let buf = unsafe { std::slice::from_raw_parts_mut(mem.add(at), n) };
        file.read_exact_at(buf, at as u64)?;
        at += n;
    }
    Ok(())
}
