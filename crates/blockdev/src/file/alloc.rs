//! Allocating a created file's blocks ahead (`FileDeviceOptions::preallocate`).

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;

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
