//! Allocating a created file's blocks ahead (`FileDeviceOptions::preallocate`).

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;

/// Whether `file` is on tmpfs or ramfs, where allocating ahead takes RAM.
pub(super) fn on_ram_fs(file: &File) -> bool {
    const TMPFS_MAGIC: i64 = 0x0102_1994;
    const RAMFS_MAGIC: i64 = 0x8584_58f6;
    let mut st = std::mem::MaybeUninit::<libc::statfs>::zeroed();
    // SAFETY: fstatfs fills the struct we pass for a descriptor we own.
    if unsafe { libc::fstatfs(file.as_raw_fd(), st.as_mut_ptr()) } != 0 {
        return false;
    }
    // SAFETY: fstatfs succeeded, so the struct is initialised.
    let st = unsafe { st.assume_init() };
    // `f_type`'s integer type differs between libcs.
    #[allow(clippy::unnecessary_cast)]
    let f_type = st.f_type as i64;
    f_type == TMPFS_MAGIC || f_type == RAMFS_MAGIC
}

/// `fallocate` the whole file. A file system that cannot, or has not the
/// room, leaves the file sparse (as without the option), with a warning
/// for the latter: a device larger than the free space is allowed.
pub(super) fn preallocate(file: &File, bytes: u64, path: &Path) -> io::Result<()> {
    // SAFETY: a plain syscall on a descriptor we own, within its length.
    let rc = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, bytes as libc::off_t) };
    if rc == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) => Ok(()),
        Some(libc::ENOSPC) | Some(libc::EDQUOT) => {
            tracing::warn!(
                "{}: no room to allocate all {bytes} bytes now ({e}); the file stays sparse, so writes fail once the disk is full",
                path.display()
            );
            Ok(())
        }
        _ => Err(e),
    }
}
