//! The flags ptsd-fs answers OPEN and CREATE with, on both transports
//! (and the bench's no-op ceiling, which must ask the kernel for the same).

use fuser::InitFlags;

/// `FOPEN_DIRECT_IO` (include/uapi/linux/fuse.h): this open bypasses the
/// kernel's page cache.
pub const FOPEN_DIRECT_IO: u32 = 1 << 0;
/// `FOPEN_KEEP_CACHE`: the kernel keeps the file's page cache across
/// opens (only this daemon changes files, always through the kernel).
pub const FOPEN_KEEP_CACHE: u32 = 1 << 1;

/// The `fuse_open_out` flags ptsd-fs answers an OPEN or CREATE with, for a
/// file opened with `open_flags` (the `open(2)` flags).
///
/// With `direct_writes` a write-only open bypasses the page cache: its
/// writes reach the daemon from the caller's own pages. The kernel then
/// neither copies them into cache pages nor asks for `security.capability`
/// before each write (the file system drops it itself), and it invalidates
/// other opens' cached pages of the range first, so readers stay coherent.
/// A write-only descriptor cannot read or be mapped, so nothing it could
/// have used from the cache is lost; a later reader reads from the file
/// system instead of pages the writer left behind. Measured on 2 CPUs
/// (`ptsd bench fs`, docs/results.md 2026-11-29): tokubench +13 % on
/// /dev/fuse and +45 % over io_uring, varmail +12 %, bulk write + fsync
/// +8-24 %.
///
/// ```
/// use ptsd_fs::fuse::{open_reply_flags, FOPEN_DIRECT_IO, FOPEN_KEEP_CACHE};
/// let wronly = libc::O_WRONLY as u32 | libc::O_CREAT as u32;
/// assert_eq!(open_reply_flags(wronly, true), FOPEN_KEEP_CACHE | FOPEN_DIRECT_IO);
/// assert_eq!(open_reply_flags(libc::O_RDWR as u32, true), FOPEN_KEEP_CACHE);
/// assert_eq!(open_reply_flags(wronly, false), FOPEN_KEEP_CACHE);
/// ```
pub fn open_reply_flags(open_flags: u32, direct_writes: bool) -> u32 {
    let write_only = open_flags & libc::O_ACCMODE as u32 == libc::O_WRONLY as u32;
    if direct_writes && write_only {
        FOPEN_KEEP_CACHE | FOPEN_DIRECT_IO
    } else {
        FOPEN_KEEP_CACHE
    }
}

/// Whether a kernel that offered `offered` at INIT invalidates other opens'
/// cached pages of a range before a direct write to it. Linux 6.6 brought
/// that together with `FUSE_DIRECT_IO_ALLOW_MMAP` (then named
/// `DIRECT_IO_RELAX`); an older kernel would leave a reader's cached pages
/// stale, so there write-only opens stay cached.
pub fn direct_writes_coherent(offered: InitFlags) -> bool {
    offered.contains(InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP)
}
