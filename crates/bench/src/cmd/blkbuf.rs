//! A page-aligned I/O buffer that tokio-uring can own while a request is in
//! flight: O_DIRECT needs buffers aligned to the device's logical block,
//! which a `Vec<u8>` does not promise.

use std::alloc::{alloc_zeroed, dealloc, handle_alloc_error, Layout};
use std::ptr::NonNull;

/// Alignment of every buffer: a page, enough for any logical block size.
const ALIGN: usize = 4096;

/// `len` bytes at a page-aligned address, filled with a seeded pattern (so
/// that writes do not send zero pages a device could treat specially).
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the buffer owns its allocation exclusively, like a Vec<u8>.
unsafe impl Send for AlignedBuf {}

impl AlignedBuf {
    /// A buffer of `len` (> 0) bytes.
    pub fn new(len: usize, seed: u64) -> Self {
        let layout = Self::layout(len);
        // SAFETY: `layout` has a non-zero size (`layout` asserts it).
        let raw = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).unwrap_or_else(|| handle_alloc_error(layout));
        let mut buf = AlignedBuf { ptr, len };
        let mut x = seed | 1;
        for b in buf.as_mut_slice() {
            // xorshift: cheap, non-zero, different per buffer.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = x as u8;
        }
        buf
    }

    fn layout(len: usize) -> Layout {
        assert!(len > 0, "an empty I/O buffer");
        Layout::from_size_align(len, ALIGN).expect("buffer size fits a Layout")
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: `ptr` points to `len` initialised (zeroed) bytes that this
        // buffer owns, borrowed mutably through `self`.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with exactly this layout.
        unsafe { dealloc(self.ptr.as_ptr(), Self::layout(self.len)) }
    }
}

// SAFETY: the pointer is stable (the allocation never moves or changes
// while the buffer lives, whoever owns it), and all `len` bytes are
// initialised from the start.
unsafe impl tokio_uring::buf::IoBuf for AlignedBuf {
    fn stable_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }

    fn bytes_init(&self) -> usize {
        self.len
    }

    fn bytes_total(&self) -> usize {
        self.len
    }
}

// SAFETY: as for `IoBuf`; every byte is always initialised, so `set_init`
// has nothing to record.
unsafe impl tokio_uring::buf::IoBufMut for AlignedBuf {
    fn stable_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    unsafe fn set_init(&mut self, _pos: usize) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio_uring::buf::IoBuf;

    #[test]
    fn aligned_and_filled() {
        let b = AlignedBuf::new(8192, 7);
        assert_eq!(b.stable_ptr() as usize % ALIGN, 0);
        assert_eq!(b.bytes_init(), 8192);
        // SAFETY: 8192 initialised bytes owned by `b`.
        let s = unsafe { std::slice::from_raw_parts(b.stable_ptr(), 8192) };
        assert!(s.iter().filter(|&&x| x == 0).count() < 8192 / 64);
    }
}
