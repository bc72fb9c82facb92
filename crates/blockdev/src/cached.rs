//! Which pages of a file the kernel holds in its page cache.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// For each 4 KiB page of the first `len` bytes of `file` (which must be
/// at least that long), whether it is in the page cache (`mincore`).
/// For checking what a cache hint or an uncached write did.
///
/// ```
/// use std::io::Write;
/// let mut f = tempfile::tempfile().unwrap();
/// f.write_all(&[1u8; 8192]).unwrap();
/// assert_eq!(ptsd_blockdev::cached_pages(&f, 8192).unwrap().len(), 2);
/// ```
pub fn cached_pages(file: &File, len: usize) -> io::Result<Vec<bool>> {
    const PAGE: usize = 4096;
    if len == 0 {
        return Ok(Vec::new());
    }
    // SAFETY: a read-only shared mapping of a file we hold open, unmapped
    // below; only its residency is queried, nothing is read through it.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    let mut vec = vec![0u8; len.div_ceil(PAGE)];
    // SAFETY: `p` maps `len` bytes and `vec` has one byte per page of it.
    let rc = unsafe { libc::mincore(p, len, vec.as_mut_ptr()) };
    let err = io::Error::last_os_error();
    // SAFETY: unmapping exactly the mapping made above.
    unsafe { libc::munmap(p, len) };
    if rc != 0 {
        return Err(err);
    }
    Ok(vec.iter().map(|&b| b & 1 != 0).collect())
}
