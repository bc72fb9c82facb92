//! Large flat arrays (the L2P and P2L maps) on transparent huge pages.
//!
//! A random 4 KiB simulation touches the 16 MiB L2P and 20 MiB P2L arrays at
//! random; on 4 KiB pages nearly every such access also misses the TLB.
//! Backing them by an anonymous mapping advised `MADV_HUGEPAGE` (where the
//! system allows it) makes the engine markedly faster; where huge pages are
//! not available the mapping works the same on ordinary pages.

use std::ops::{Deref, DerefMut};

use bytemuck::Pod;
use memmap2::MmapMut;

/// Alignment that lets the kernel back the array by 2 MiB pages.
const HUGE: usize = 2 << 20;
/// Smaller arrays stay on the heap: huge pages would not pay off.
const MIN_HUGE_BYTES: usize = 4 << 20;

/// A fixed-length array of `T`, filled with one value at creation.
pub(crate) struct BigVec<T: Pod> {
    store: Backing<T>,
}

enum Backing<T: Pod> {
    Heap(Vec<T>),
    /// `len` elements from byte `off` of the mapping (2 MiB-aligned).
    Mapped {
        map: MmapMut,
        off: usize,
        len: usize,
    },
}

impl<T: Pod> BigVec<T> {
    /// `len` copies of `value`.
    pub fn filled(len: usize, value: T) -> Self {
        let bytes = len * std::mem::size_of::<T>();
        let store = if bytes < MIN_HUGE_BYTES {
            Backing::Heap(vec![value; len])
        } else {
            match MmapMut::map_anon(bytes + HUGE) {
                Ok(map) => {
                    let off = (HUGE - map.as_ptr() as usize % HUGE) % HUGE;
                    // Advice only: without THP the pages are ordinary ones.
                    let _ = map.advise_range(memmap2::Advice::HugePage, off, bytes);
                    let mut v = BigVec {
                        store: Backing::Mapped { map, off, len },
                    };
                    v.fill(value);
                    return v;
                }
                Err(_) => Backing::Heap(vec![value; len]),
            }
        };
        BigVec { store }
    }
}

impl<T: Pod> Deref for BigVec<T> {
    type Target = [T];
    #[inline]
    fn deref(&self) -> &[T] {
        match &self.store {
            Backing::Heap(v) => v,
            Backing::Mapped { map, off, len } => {
                bytemuck::cast_slice(&map[*off..*off + *len * std::mem::size_of::<T>()])
            }
        }
    }
}

impl<T: Pod> DerefMut for BigVec<T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut [T] {
        match &mut self.store {
            Backing::Heap(v) => v,
            Backing::Mapped { map, off, len } => {
                bytemuck::cast_slice_mut(&mut map[*off..*off + *len * std::mem::size_of::<T>()])
            }
        }
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
