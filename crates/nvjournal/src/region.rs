//! The persistent-memory region behind the journal, and the [`Persist`]
//! trait that lets a crash-simulating region take its place.

mod shadow;

use std::fs::{File, OpenOptions};
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

use thiserror::Error;

use crate::flush::{flush_instr, flush_range, store_fence, FlushInstr};

/// What can go wrong opening or syncing a region.
#[derive(Debug, Error)]
pub enum RegionError {
    /// The requested size cannot be mapped (zero, not a multiple of 4096...).
    #[error("invalid region size {0} (must be a non-zero multiple of 4096)")]
    BadSize(u64),
    /// The operating system refused an operation.
    #[error("region I/O error during {op}")]
    Io {
        /// The operation that failed (open, mmap, msync...).
        op: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
    /// A simulated region was crashed and accepts no more syncs.
    #[error("region crashed (simulated)")]
    Crashed,
}

/// How stores to the region become durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegionMode {
    /// `MAP_SYNC` on a DAX file system: a cache-line flush + fence makes a
    /// store durable against power loss (real persistent memory).
    Dax,
    /// A file on a block-backed file system: the region lives in memory,
    /// and a sync (which the journal issues at each commit) writes the
    /// pages stored to since the last one and `fdatasync`s the file (what
    /// `msync` of a shared mapping would do, without its page faults).
    Msync,
    /// A file on tmpfs (or any RAM file system): survives a process crash,
    /// not a power cut — the paper's "DRAM as NVM" emulation.
    Tmpfs,
    /// An in-process simulation (see [`crate::CrashRegion`]).
    Simulated,
}

impl std::fmt::Display for RegionMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RegionMode::Dax => "dax (MAP_SYNC)",
            RegionMode::Msync => "file+fdatasync",
            RegionMode::Tmpfs => "tmpfs (process-crash safe only)",
            RegionMode::Simulated => "simulated",
        })
    }
}

impl RegionMode {
    /// Whether a commit in this mode survives a power cut (DAX, msync).
    pub fn survives_power_loss(&self) -> bool {
        matches!(self, RegionMode::Dax | RegionMode::Msync)
    }

    /// What a commit survives in this mode, in words for a user (the
    /// durability line `ptsd mount` prints).
    pub fn durability(&self) -> String {
        match self {
            RegionMode::Dax => format!("power-loss safe (DAX, MAP_SYNC, {}+sfence)", flush_instr()),
            RegionMode::Msync => {
                "power-loss safe (written to the file and fdatasync'ed at each commit)".into()
            }
            RegionMode::Tmpfs => {
                "process-crash safe only (RAM file: survives kill -9, not a power cut)".into()
            }
            RegionMode::Simulated => "simulated".into(),
        }
    }
}

/// Byte-addressable persistent memory as the journal sees it.
///
/// Offsets and lengths passed by the journal are multiples of 8. Stores are
/// not durable until [`persist`](Self::persist) covers them (and, in
/// [`RegionMode::Msync`], until [`sync`](Self::sync)). Concurrent calls on
/// disjoint ranges are allowed; overlapping racing calls give unspecified
/// bytes but never undefined behaviour.
pub trait Persist: Send + Sync {
    /// Size in bytes.
    fn len(&self) -> usize;
    /// True if the region has no bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// How durability is achieved.
    fn mode(&self) -> RegionMode;
    /// Store `data` at `offset` (not yet durable).
    fn write(&self, offset: usize, data: &[u8]);
    /// Load `buf.len()` bytes from `offset`.
    fn read(&self, offset: usize, buf: &mut [u8]);
    /// [`write`](Self::write) for bytes no other thread touches meanwhile:
    /// a real mapping copies with a plain `memcpy` instead of word-by-word
    /// atomic stores.
    ///
    /// # Safety
    /// No other thread may read or write any byte of
    /// `[offset, offset + data.len())` while this runs, unless ordered
    /// before or after it by a happens-before edge (the journal uses it only
    /// on a slot it owns after claiming it with an atomic add).
    unsafe fn write_unshared(&self, offset: usize, data: &[u8]) {
        self.write(offset, data)
    }
    /// [`read`](Self::read) for bytes no other thread writes meanwhile.
    ///
    /// # Safety
    /// No other thread may write any byte of `[offset, offset + buf.len())`
    /// while this runs, unless ordered before or after it by a
    /// happens-before edge.
    unsafe fn read_unshared(&self, offset: usize, buf: &mut [u8]) {
        self.read(offset, buf)
    }
    /// The bytes `[offset, offset + len)` in place, if the region is
    /// directly addressable (a real mapping); `None` otherwise (copy them
    /// with [`read_unshared`](Self::read_unshared)). Saves the checkpoint a
    /// copy per block.
    ///
    /// # Safety
    /// No other thread may write any of those bytes while the returned
    /// slice is alive.
    unsafe fn borrow_unshared(&self, offset: usize, len: usize) -> Option<&[u8]> {
        let _ = (offset, len);
        None
    }
    /// Store `parts` one after another from `offset` and make them durable:
    /// [`write_unshared`](Self::write_unshared) each, then
    /// [`persist`](Self::persist) the whole range. A real mapping uses
    /// non-temporal stores where aligned, which bypass the cache (no
    /// read-for-ownership of the destination, nothing left to write back),
    /// so only the fence remains.
    ///
    /// # Safety
    /// As [`write_unshared`](Self::write_unshared), for the whole range.
    unsafe fn write_persist_unshared(&self, offset: usize, parts: &[&[u8]]) {
        let mut at = offset;
        for part in parts {
            // SAFETY: the caller's guarantee covers every part.
            unsafe { self.write_unshared(at, part) };
            at += part.len();
        }
        self.persist(offset, at - offset);
    }
    /// Write back the cache lines of every range, then fence once: on return
    /// (in `Dax`/`Tmpfs`/`Simulated` mode) those stores are durable.
    fn persist_ranges(&self, ranges: &[(usize, usize)]);
    /// [`persist_ranges`](Self::persist_ranges) for one range.
    fn persist(&self, offset: usize, len: usize) {
        self.persist_ranges(&[(offset, len)]);
    }
    /// Make every store so far durable where cache flushes are not enough
    /// (`msync` in [`RegionMode::Msync`]; a no-op elsewhere).
    fn sync(&self) -> Result<(), RegionError>;
    /// The journal is about to tell its caller that everything committed
    /// is durable (a commit returning, a clean close). Nothing to do for a
    /// real region; a [`FlushCheck`](crate::FlushCheck) verifies it there.
    fn check_durable(&self) {}
}

/// A shared or boxed region is the region it points to.
macro_rules! forward_persist {
    ($($ptr:ident)::+) => {
        impl<T: Persist + ?Sized> Persist for $($ptr)::+<T> {
            fn len(&self) -> usize {
                (**self).len()
            }
            fn mode(&self) -> RegionMode {
                (**self).mode()
            }
            fn write(&self, offset: usize, data: &[u8]) {
                (**self).write(offset, data)
            }
            fn read(&self, offset: usize, buf: &mut [u8]) {
                (**self).read(offset, buf)
            }
            unsafe fn write_unshared(&self, offset: usize, data: &[u8]) {
                // SAFETY: the caller's guarantee is passed on unchanged.
                unsafe { (**self).write_unshared(offset, data) }
            }
            unsafe fn read_unshared(&self, offset: usize, buf: &mut [u8]) {
                // SAFETY: the caller's guarantee is passed on unchanged.
                unsafe { (**self).read_unshared(offset, buf) }
            }
            unsafe fn borrow_unshared(&self, offset: usize, len: usize) -> Option<&[u8]> {
                // SAFETY: the caller's guarantee is passed on unchanged.
                unsafe { (**self).borrow_unshared(offset, len) }
            }
            unsafe fn write_persist_unshared(&self, offset: usize, parts: &[&[u8]]) {
                // SAFETY: the caller's guarantee is passed on unchanged.
                unsafe { (**self).write_persist_unshared(offset, parts) }
            }
            fn persist_ranges(&self, ranges: &[(usize, usize)]) {
                (**self).persist_ranges(ranges)
            }
            fn persist(&self, offset: usize, len: usize) {
                (**self).persist(offset, len)
            }
            fn sync(&self) -> Result<(), RegionError> {
                (**self).sync()
            }
            fn check_durable(&self) {
                (**self).check_durable()
            }
        }
    };
}
forward_persist!(std::sync::Arc);
forward_persist!(Box);

/// A memory-mapped file used as persistent memory.
///
/// [`open_file`](Self::open_file) tries `MAP_SHARED_VALIDATE | MAP_SYNC`
/// first (DAX); if the file system refuses, it maps a RAM file system's
/// file with `MAP_SHARED` ([`RegionMode::Tmpfs`]), and otherwise keeps the
/// region in memory, written to the file at each sync
/// ([`RegionMode::Msync`]). So a journal file on a DAX file system
/// (ext4/xfs mounted `-o dax` on persistent memory) gets the DAX mode by
/// itself, wherever the region is opened from.
///
/// ```
/// use ptsd_nvjournal::{PmemRegion, Persist, RegionMode};
/// let dir = tempfile::tempdir().unwrap();
/// let region = PmemRegion::open_file(dir.path().join("j"), 1 << 20).unwrap();
/// assert_ne!(region.mode(), RegionMode::Simulated);
/// region.write(64, &[1u8; 8]);
/// region.persist(64, 8);
/// let mut b = [0u8; 8];
/// region.read(64, &mut b);
/// assert_eq!(b, [1u8; 8]);
/// ```
pub struct PmemRegion {
    base: *mut u8,
    len: usize,
    mode: RegionMode,
    dax_file: bool,
    /// Msync mode: `base` is our own memory, written to `file` at syncs.
    shadow: Option<shadow::Shadow>,
    file: File,
}

// SAFETY: the mapping is owned by the region and lives until drop; every
// safe access to its bytes goes through atomic loads/stores (see `words`),
// so sharing the pointer across threads cannot cause a data race; the plain
// copies (`write_unshared`/`read_unshared`) are `unsafe` and their callers
// promise exclusive access.
unsafe impl Send for PmemRegion {}
// SAFETY: as above.
unsafe impl Sync for PmemRegion {}

impl PmemRegion {
    /// Map `bytes` of the file at `path`, creating or extending it.
    pub fn open_file(path: impl AsRef<Path>, bytes: u64) -> Result<Self, RegionError> {
        if bytes == 0 || bytes % 4096 != 0 || bytes > isize::MAX as u64 {
            return Err(RegionError::BadSize(bytes));
        }
        let path = path.as_ref();
        let io = |op| move |source| RegionError::Io { op, source };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(io("open"))?;
        use std::os::fd::AsRawFd;
        let fd = file.as_raw_fd();
        let dax_file = statx_dax(fd);
        let old_len = file.metadata().map_err(io("stat"))?.len();
        // The mode unless MAP_SYNC is granted below.
        let fallback = fallback_mode(&file);
        if old_len < bytes {
            if dax_file || fallback == RegionMode::Msync {
                // Written zeroes, not a hole (or fallocate's unwritten
                // extents): a MAP_SYNC write fault, or a sync's write, that
                // allocates or converts an extent must commit the file
                // system's journal before it returns, once per page on the
                // first lap.
                zero_fill(&file, old_len, bytes).map_err(io("zero-fill"))?;
            } else {
                file.set_len(bytes).map_err(io("set_len"))?;
                reserve(&file, old_len, bytes).map_err(io("fallocate"))?;
            }
        }
        let len = bytes as usize;
        let prot = libc::PROT_READ | libc::PROT_WRITE;
        // MAP_POPULATE pre-faults every page now, so the first lap of each
        // ring does not pay a page fault per slot (real pmem never faults).
        // SAFETY: mapping a file we hold open, at a kernel-chosen address;
        // the result is checked against MAP_FAILED before use.
        let dax = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                libc::MAP_SHARED_VALIDATE | libc::MAP_SYNC | libc::MAP_POPULATE,
                fd,
                0,
            )
        };
        let (base, mode) = if dax != libc::MAP_FAILED {
            (dax, RegionMode::Dax)
        } else {
            if dax_file {
                tracing::warn!(
                    path = %path.display(),
                    error = %std::io::Error::last_os_error(),
                    "the file is DAX (statx) but MAP_SYNC was refused: not power-loss safe through cache flushes"
                );
            }
            let mode = fallback;
            let p = if mode == RegionMode::Msync {
                // Memory of our own, written to the file at each sync
                // (see `shadow`).
                // SAFETY: a fresh anonymous mapping; checked below.
                let p = unsafe {
                    libc::mmap(
                        std::ptr::null_mut(),
                        len,
                        prot,
                        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                        -1,
                        0,
                    )
                };
                if p == libc::MAP_FAILED {
                    return Err(io("mmap")(std::io::Error::last_os_error()));
                }
                if let Err(e) = shadow::load(&file, p.cast(), len) {
                    // SAFETY: unmapping exactly the mapping just created.
                    unsafe { libc::munmap(p, len) };
                    return Err(io("read")(e));
                }
                p
            } else {
                // SAFETY: as above, plain shared mapping.
                let p = unsafe {
                    libc::mmap(
                        std::ptr::null_mut(),
                        len,
                        prot,
                        libc::MAP_SHARED | libc::MAP_POPULATE,
                        fd,
                        0,
                    )
                };
                if p == libc::MAP_FAILED {
                    return Err(io("mmap")(std::io::Error::last_os_error()));
                }
                p
            };
            (p, mode)
        };
        tracing::info!(
            path = %path.display(),
            bytes,
            mode = %mode,
            dax_file,
            flush = %flush_instr(),
            "journal region mapped"
        );
        Ok(Self {
            base: base.cast(),
            len,
            mode,
            dax_file,
            shadow: (mode == RegionMode::Msync).then(|| shadow::Shadow::new(len, &file)),
            file,
        })
    }

    /// True if the kernel reports the file as DAX (`statx`
    /// `STATX_ATTR_DAX`: its pages are the persistent memory itself).
    pub fn dax_file(&self) -> bool {
        self.dax_file
    }

    /// True if syncs write the file with direct I/O (msync mode on a file
    /// system that allows `O_DIRECT`, until a direct write is refused).
    pub fn writes_direct(&self) -> bool {
        self.shadow.as_ref().is_some_and(|s| s.writes_direct())
    }

    /// The cache-line flush instruction in use.
    pub fn flush_instr(&self) -> FlushInstr {
        flush_instr()
    }

    /// Note a store for the next sync (msync mode).
    fn mark(&self, offset: usize, len: usize) {
        if let Some(shadow) = &self.shadow {
            shadow.mark(offset, len);
        }
    }

    fn words(&self) -> &[AtomicU64] {
        // SAFETY: `base` is page-aligned, valid for `len` bytes (a multiple
        // of 4096) for the life of `self`, and AtomicU64 permits shared
        // mutation.
        unsafe { std::slice::from_raw_parts(self.base.cast::<AtomicU64>(), self.len / 8) }
    }

    fn bytes(&self) -> &[AtomicU8] {
        // SAFETY: as in `words`.
        unsafe { std::slice::from_raw_parts(self.base.cast::<AtomicU8>(), self.len) }
    }
}

/// `statx`'s DAX attribute of an open file (false where unsupported).
fn statx_dax(fd: std::os::fd::RawFd) -> bool {
    let mut st = std::mem::MaybeUninit::<libc::statx>::zeroed();
    // SAFETY: statx on an fd we own with an empty path (AT_EMPTY_PATH)
    // fills the struct we pass.
    let rc = unsafe {
        libc::statx(
            fd,
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_BASIC_STATS,
            st.as_mut_ptr(),
        )
    };
    if rc != 0 {
        return false;
    }
    // SAFETY: statx succeeded, so the struct is initialised.
    let st = unsafe { st.assume_init() };
    let dax = libc::STATX_ATTR_DAX as u64;
    st.stx_attributes_mask & dax != 0 && st.stx_attributes & dax != 0
}

/// Write zeroes to `[from, to)` of `file` and make them durable.
fn zero_fill(file: &File, from: u64, to: u64) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let zeros = vec![0u8; 1 << 20];
    let mut at = from;
    while at < to {
        let n = (to - at).min(zeros.len() as u64) as usize;
        file.write_all_at(&zeros[..n], at)?;
        at += n as u64;
    }
    file.sync_data()
}

/// Reserve the file's blocks now: a store into a shared mapping of a hole
/// that the file system cannot back (full disk, quota) is a SIGBUS, not an
/// error, so the space is claimed at open, where running out is an error.
fn reserve(file: &File, from: u64, to: u64) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: a plain syscall on a descriptor we own, within the file's
    // length (already set).
    let rc = unsafe {
        libc::fallocate(
            file.as_raw_fd(),
            0,
            from as libc::off_t,
            (to - from) as libc::off_t,
        )
    };
    if rc == 0 {
        return Ok(());
    }
    let e = std::io::Error::last_os_error();
    match e.raw_os_error() {
        // Not every file system can (then it behaves as before).
        Some(libc::EOPNOTSUPP) | Some(libc::EINVAL) => Ok(()),
        _ => Err(e),
    }
}

fn fallback_mode(file: &File) -> RegionMode {
    if ptsd_blockdev::file_on_ram_fs(file) {
        RegionMode::Tmpfs
    } else {
        RegionMode::Msync
    }
}

impl Drop for PmemRegion {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the mapping we created; no references
        // into it outlive `self`.
        unsafe {
            libc::munmap(self.base.cast(), self.len);
        }
    }
}

/// Copy `src` to `dst` so that it is durable after the next `sfence`: with
/// non-temporal 16-byte stores where `dst` and the length are 16-aligned,
/// else with a plain copy and a cache-line write-back.
///
/// # Safety
/// `dst..dst + src.len()` must lie in one live mapping and not be accessed
/// by any other thread meanwhile.
unsafe fn copy_persist_nodrain(dst: *mut u8, src: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    if (dst as usize) % 16 == 0 && src.len() % 16 == 0 {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_stream_si128};
        // A cache line per iteration: four independent stores per loop
        // trip. A loop of single 16-byte stores ran up to 40% slower in
        // some builds than in others, depending on where the code landed.
        let lines = src.chunks_exact(64);
        let tail = lines.remainder();
        for (i, line) in lines.enumerate() {
            // SAFETY: SSE2 is part of x86-64; `line` holds 64 readable
            // bytes (unaligned loads); `dst + 64 i + 16 k` is 16-aligned and
            // inside the range the caller vouches for.
            unsafe {
                let s = line.as_ptr().cast::<__m128i>();
                let d = dst.add(64 * i).cast::<__m128i>();
                let (a, b) = (_mm_loadu_si128(s), _mm_loadu_si128(s.add(1)));
                let (c, e) = (_mm_loadu_si128(s.add(2)), _mm_loadu_si128(s.add(3)));
                _mm_stream_si128(d, a);
                _mm_stream_si128(d.add(1), b);
                _mm_stream_si128(d.add(2), c);
                _mm_stream_si128(d.add(3), e);
            }
        }
        let done = src.len() - tail.len();
        for (i, chunk) in tail.chunks_exact(16).enumerate() {
            // SAFETY: as above, for the last (< 64) bytes.
            unsafe {
                let v = _mm_loadu_si128(chunk.as_ptr().cast::<__m128i>());
                _mm_stream_si128(dst.add(done + 16 * i).cast::<__m128i>(), v);
            }
        }
        return;
    }
    // SAFETY: the caller vouches for the destination range.
    unsafe {
        std::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len());
        flush_range(dst, src.len());
    }
}

/// Copy `data` into atomically accessed memory (8-byte words where aligned).
pub(crate) fn atomic_store(words: &[AtomicU64], bytes: &[AtomicU8], offset: usize, data: &[u8]) {
    assert!(
        offset + data.len() <= bytes.len(),
        "region store out of bounds"
    );
    if offset % 8 == 0 && data.len() % 8 == 0 {
        for (w, chunk) in words[offset / 8..].iter().zip(data.chunks_exact(8)) {
            w.store(
                u64::from_ne_bytes(chunk.try_into().unwrap()),
                Ordering::Relaxed,
            );
        }
    } else {
        for (b, &v) in bytes[offset..].iter().zip(data) {
            b.store(v, Ordering::Relaxed);
        }
    }
}

/// Copy atomically accessed memory into `buf`.
pub(crate) fn atomic_load(words: &[AtomicU64], bytes: &[AtomicU8], offset: usize, buf: &mut [u8]) {
    assert!(
        offset + buf.len() <= bytes.len(),
        "region load out of bounds"
    );
    if offset % 8 == 0 && buf.len() % 8 == 0 {
        for (w, chunk) in words[offset / 8..].iter().zip(buf.chunks_exact_mut(8)) {
            chunk.copy_from_slice(&w.load(Ordering::Relaxed).to_ne_bytes());
        }
    } else {
        for (b, v) in bytes[offset..].iter().zip(buf.iter_mut()) {
            *v = b.load(Ordering::Relaxed);
        }
    }
}

impl Persist for PmemRegion {
    fn len(&self) -> usize {
        self.len
    }
    fn mode(&self) -> RegionMode {
        self.mode
    }
    fn write(&self, offset: usize, data: &[u8]) {
        atomic_store(self.words(), self.bytes(), offset, data);
        self.mark(offset, data.len());
    }
    fn read(&self, offset: usize, buf: &mut [u8]) {
        atomic_load(self.words(), self.bytes(), offset, buf);
    }
    unsafe fn write_unshared(&self, offset: usize, data: &[u8]) {
        assert!(
            offset <= self.len && data.len() <= self.len - offset,
            "region store out of bounds"
        );
        // SAFETY: the range lies inside our live mapping (checked above),
        // `data` is ordinary memory and cannot overlap the mapping's bytes
        // being written by anyone else: the caller guarantees no concurrent
        // access to the destination.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.base.add(offset), data.len()) };
        self.mark(offset, data.len());
    }
    unsafe fn read_unshared(&self, offset: usize, buf: &mut [u8]) {
        assert!(
            offset <= self.len && buf.len() <= self.len - offset,
            "region load out of bounds"
        );
        // SAFETY: the range lies inside our live mapping (checked above) and
        // the caller guarantees nobody writes it concurrently.
        unsafe {
            std::ptr::copy_nonoverlapping(self.base.add(offset), buf.as_mut_ptr(), buf.len())
        };
    }
    unsafe fn borrow_unshared(&self, offset: usize, len: usize) -> Option<&[u8]> {
        assert!(
            offset <= self.len && len <= self.len - offset,
            "region load out of bounds"
        );
        // SAFETY: the range lies inside our mapping, which lives as long as
        // `&self`; the caller guarantees nobody writes it while the slice
        // lives, so it may be read as ordinary shared memory.
        Some(unsafe { std::slice::from_raw_parts(self.base.add(offset), len) })
    }
    unsafe fn write_persist_unshared(&self, offset: usize, parts: &[&[u8]]) {
        let total: usize = parts.iter().map(|p| p.len()).sum();
        assert!(
            offset <= self.len && total <= self.len - offset,
            "region store out of bounds"
        );
        let mut at = offset;
        for part in parts {
            // SAFETY: `[at, at + part.len())` lies inside our live mapping
            // (checked above) and the caller guarantees exclusive access.
            unsafe {
                if self.shadow.is_some() {
                    // Durable at the next sync; cache flushes buy nothing.
                    std::ptr::copy_nonoverlapping(part.as_ptr(), self.base.add(at), part.len());
                } else {
                    copy_persist_nodrain(self.base.add(at), part);
                }
            }
            at += part.len();
        }
        self.mark(offset, total);
        store_fence();
    }
    fn persist_ranges(&self, ranges: &[(usize, usize)]) {
        if self.shadow.is_some() {
            return;
        }
        for &(offset, len) in ranges {
            assert!(offset + len <= self.len, "persist out of bounds");
            // SAFETY: the range was just checked to lie inside our mapping.
            unsafe { flush_range(self.base.add(offset), len) };
        }
        store_fence();
    }
    fn sync(&self) -> Result<(), RegionError> {
        match &self.shadow {
            Some(shadow) => shadow.sync(self.base, self.len, &self.file),
            None => Ok(()),
        }
    }
}
