//! Heap buffers with a chosen memory alignment, for O_DIRECT bounce copies.

use std::alloc::{self, Layout};
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

/// A zero-initialised byte buffer whose start is aligned to a power of two.
pub(crate) struct AlignedBuf {
    ptr: NonNull<u8>,
    layout: Layout,
}

impl AlignedBuf {
    /// `len` zero bytes aligned to `align`. `None` if `len` is zero, `align`
    /// is not a power of two, or memory is exhausted.
    pub(crate) fn zeroed(len: usize, align: usize) -> Option<Self> {
        if len == 0 {
            return None;
        }
        let layout = Layout::from_size_align(len, align).ok()?;
        // SAFETY: the layout has a non-zero size (checked above).
        let ptr = unsafe { alloc::alloc_zeroed(layout) };
        NonNull::new(ptr).map(|ptr| Self { ptr, layout })
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `ptr` points to `layout.size()` initialised bytes we own.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.layout.size()) }
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`, and `&mut self` makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.layout.size()) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `zeroed` with exactly this layout.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_and_zeroed() {
        for align in [1usize, 512, 4096] {
            let mut b = AlignedBuf::zeroed(8192, align).unwrap();
            assert_eq!(b.as_ptr() as usize % align, 0);
            assert!(b.iter().all(|&x| x == 0));
            b[8191] = 1;
            assert_eq!(b.len(), 8192);
        }
        assert!(AlignedBuf::zeroed(0, 4096).is_none());
        assert!(AlignedBuf::zeroed(10, 3).is_none());
    }
}
