//! The region of a journal file on a disk file system (msync mode): the
//! bytes live in anonymous memory, each store marks its pages dirty, and a
//! `sync` writes the dirty pages to the file (`pwrite`) and `fdatasync`s it.
//! The writes are direct I/O where the file system allows it: the pages go
//! from our memory to the disk, with no page-cache copy for the kernel to
//! write back (which cost as much CPU as the file system itself), and the
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
    /// The file opened again with `O_DIRECT` (None where refused).
    direct: Option<File>,
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

    /// The file to write through: the direct one unless it was refused.
    fn writer<'a>(&'a self, file: &'a File) -> &'a File {
        match &self.direct {
            Some(direct) if !self.direct_refused.load(Ordering::Relaxed) => direct,
            _ => file,
        }
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
        let mut result = write_pages(&taken, mem, len, self.writer(file));
        if let Err(RegionError::Io { source, .. }) = &result {
            if self.direct.is_some()
                && source.raw_os_error() == Some(libc::EINVAL)
                && !self.direct_refused.swap(true, Ordering::Relaxed)
            {
                tracing::warn!(
                    "direct writes to the journal file refused ({source}); buffered from now on"
                );
                result = write_pages(&taken, mem, len, file);
            }
        }
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

/// Write the pages whose bits are set in `bits`, runs of adjacent pages as
/// one `pwrite` each.
fn write_pages(bits: &[u64], mem: *const u8, len: usize, file: &File) -> Result<(), RegionError> {
    let pages = len.div_ceil(PAGE);
    let is_dirty = |p: usize| bits[p / 64] & (1 << (p % 64)) != 0;
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
        let (from, to) = (start * PAGE, (page * PAGE).min(len));
        // SAFETY: `[from, to)` lies inside the live `len`-byte allocation
        // `mem` points to. Other threads may store into these bytes while
        // the kernel copies them (concurrent commits); such a store marks
        // its page dirty again, so the next sync writes it.
        let bytes = unsafe { std::slice::from_raw_parts(mem.add(from), to - from) };
        file.write_all_at(bytes, from as u64)
            .map_err(|source| RegionError::Io {
                op: "write",
                source,
            })?;
    }
    Ok(())
}

/// `file` opened again for direct I/O, if its file system allows it
/// (tmpfs and some others refuse `O_DIRECT`).
fn open_direct(file: &File) -> Option<File> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(format!("/proc/self/fd/{}", file.as_raw_fd()))
        .ok()
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
