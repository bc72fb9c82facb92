//! Large flat arrays (the L2P and P2L maps) on transparent huge pages.
//!
//! A random 4 KiB simulation touches the 16 MiB L2P and 20 MiB P2L arrays at
//! random; on 4 KiB pages nearly every such access also misses the TLB.
//! Backing them by an anonymous mapping advised `MADV_HUGEPAGE` (where the
//! system allows it) makes the engine markedly faster; where huge pages are
//! not available the mapping works the same on ordinary pages.

use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

use bytemuck::Pod;
use memmap2::MmapMut;

/// Alignment that lets the kernel back the array by 2 MiB pages.
const HUGE: usize = 2 << 20;
/// Smaller arrays stay on the heap: huge pages would not pay off.
const MIN_HUGE_BYTES: usize = 4 << 20;

/// A fixed-length array of `T`, filled with one value at creation.
///
/// It keeps the pointer and length of its elements, so that an access is a
/// plain slice access: no match on where the memory lives, no re-slicing
/// of the mapping and no cast check (the L2P and P2L are indexed several
/// times per simulated request).
pub(crate) struct BigVec<T: Pod> {
    ptr: NonNull<T>,
    len: usize,
    /// The mapping that holds the elements, or `None`: `ptr` came from a
    /// `Box<[T]>` (`Box::into_raw`) that `drop` frees.
    map: Option<MmapMut>,
}

// SAFETY: a `BigVec` owns its elements exclusively (the box or the mapping
// it holds, which nothing else points into), like a `Vec<T>`; `T: Pod` is
// plain data.
unsafe impl<T: Pod + Send> Send for BigVec<T> {}
// SAFETY: shared access only reads through `&[T]`, as for a `Vec<T>`.
unsafe impl<T: Pod + Sync> Sync for BigVec<T> {}

impl<T: Pod> BigVec<T> {
    /// `len` copies of `value`.
    pub fn filled(len: usize, value: T) -> Self {
        let bytes = len * std::mem::size_of::<T>();
        if bytes >= MIN_HUGE_BYTES {
            if let Ok(mut map) = MmapMut::map_anon(bytes + HUGE) {
                let off = (HUGE - map.as_ptr() as usize % HUGE) % HUGE;
                // Advice only: without THP the pages are ordinary ones.
                let _ = map.advise_range(memmap2::Advice::HugePage, off, bytes);
                let elems: &mut [T] = bytemuck::cast_slice_mut(&mut map[off..off + bytes]);
                // SAFETY: a slice's pointer is never null.
                let ptr = unsafe { NonNull::new_unchecked(elems.as_mut_ptr()) };
                let mut v = BigVec {
                    ptr,
                    len,
                    map: Some(map),
                };
                v.fill(value);
                return v;
            }
        }
        let boxed: Box<[T]> = vec![value; len].into_boxed_slice();
        let raw = Box::into_raw(boxed);
        BigVec {
            // SAFETY: `Box::into_raw` never returns null.
            ptr: unsafe { NonNull::new_unchecked(raw.cast::<T>()) },
            len,
            map: None,
        }
    }
}

impl<T: Pod> Drop for BigVec<T> {
    fn drop(&mut self) {
        if self.map.is_none() {
            let raw = std::ptr::slice_from_raw_parts_mut(self.ptr.as_ptr(), self.len);
            // SAFETY: `ptr` and `len` are those of the `Box<[T]>` that
            // `filled` turned into a raw pointer; it is freed only here.
            drop(unsafe { Box::from_raw(raw) });
        }
    }
}

impl<T: Pod> Deref for BigVec<T> {
    type Target = [T];
    #[inline(always)]
    fn deref(&self) -> &[T] {
        // SAFETY: `ptr` points at `len` initialized elements owned by this
        // `BigVec` (box or mapping) for its whole life; `&self` rules out a
        // concurrent `&mut`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Pod> DerefMut for BigVec<T> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as in `deref`, and `&mut self` makes this the only access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Pod> Clone for BigVec<T> {
    fn clone(&self) -> Self {
        let mut copy = BigVec::filled(self.len(), T::zeroed());
        copy.copy_from_slice(self);
        copy
    }
}

impl<T: Pod + std::fmt::Debug> std::fmt::Debug for BigVec<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BigVec[{}]", self.len())
    }
}

/// Ask the CPU to bring `x`'s cache line in, without waiting for it.
#[inline(always)]
pub(crate) fn prefetch<T>(x: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is only a hint: it never faults and has no
    // architectural effect; `x` is a valid reference anyway.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>((x as *const T).cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = x;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_and_large_arrays_hold_their_values() {
        for len in [0, 10, (MIN_HUGE_BYTES / 4) + 3] {
            let mut v = BigVec::filled(len, 7u32);
            assert_eq!(v.len(), len);
            assert!(v.iter().all(|&x| x == 7));
            if len > 0 {
                v[len - 1] = 9;
                assert_eq!(v[len - 1], 9);
            }
        }
    }
}
