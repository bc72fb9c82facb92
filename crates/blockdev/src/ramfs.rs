//! Whether a file lives in RAM (tmpfs or ramfs): there, allocating ahead
//! takes memory, O_DIRECT still copies through memory, and a "durable"
//! write survives a process crash but not a power cut.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;

const TMPFS_MAGIC: i64 = 0x0102_1994;
const RAMFS_MAGIC: i64 = 0x8584_58f6;

/// Whether the open `file` is on tmpfs or ramfs (false if unknown).
///
/// ```
/// let f = std::fs::File::open("/").unwrap();
/// let _ = ptsd_blockdev::file_on_ram_fs(&f);
/// ```
pub fn file_on_ram_fs(file: &File) -> bool {
    let mut st = std::mem::MaybeUninit::<libc::statfs>::zeroed();
    // SAFETY: fstatfs fills the struct we pass for a descriptor we own.
    if unsafe { libc::fstatfs(file.as_raw_fd(), st.as_mut_ptr()) } != 0 {
        return false;
    }
    // SAFETY: fstatfs succeeded, so the struct is initialised.
    is_ram_fs(unsafe { &st.assume_init() })
}

/// Whether the directory `dir` is on tmpfs or ramfs (false if unknown).
///
/// ```
/// let _ = ptsd_blockdev::dir_on_ram_fs(std::path::Path::new("/dev/shm"));
/// ```
pub fn dir_on_ram_fs(dir: &Path) -> bool {
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    let mut st = std::mem::MaybeUninit::<libc::statfs>::zeroed();
    // SAFETY: statfs fills the struct we pass; `c` is NUL-terminated.
    if unsafe { libc::statfs(c.as_ptr(), st.as_mut_ptr()) } != 0 {
        return false;
    }
    // SAFETY: statfs succeeded, so the struct is initialised.
    is_ram_fs(unsafe { &st.assume_init() })
}

fn is_ram_fs(st: &libc::statfs) -> bool {
    // `f_type`'s integer type differs between libcs.
    #[allow(clippy::unnecessary_cast)]
    let f_type = st.f_type as i64;
    f_type == TMPFS_MAGIC || f_type == RAMFS_MAGIC
}
