//! Turning fuzzer bytes into decisions.
//!
//! A checker reads its whole workload from one byte string, so libFuzzer's
//! mutations change workloads, and a seeded run is just a run on
//! [`seeded_bytes`]. Past the end every read is 0: a short input is a short
//! (still valid) workload, never an error.

use rand::{RngCore, SeedableRng};

/// A cursor over fuzzer bytes.
pub struct Input<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Input<'a> {
    /// Read decisions from `data`.
    pub fn new(data: &'a [u8]) -> Self {
        Self { data, pos: 0 }
    }

    /// Whether every byte has been read.
    pub fn is_empty(&self) -> bool {
        self.pos >= self.data.len()
    }

    /// The next byte (0 past the end).
    pub fn u8(&mut self) -> u8 {
        let b = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        b
    }

    /// The next two bytes, little-endian.
    pub fn u16(&mut self) -> u16 {
        u16::from(self.u8()) | (u16::from(self.u8()) << 8)
    }

    /// The next four bytes, little-endian.
    pub fn u32(&mut self) -> u32 {
        u32::from(self.u16()) | (u32::from(self.u16()) << 16)
    }

    /// A number in `0..n` (`n` at most 65 536; 0 when `n` is 0).
    pub fn below(&mut self, n: u32) -> u32 {
        match n {
            0 | 1 => 0,
            2..=256 => u32::from(self.u8()) % n,
            _ => u32::from(self.u16()) % n,
        }
    }

    /// A coin.
    pub fn bool(&mut self) -> bool {
        self.u8() & 1 == 1
    }
}

/// The bytes a seeded run feeds a checker: `len` bytes from ChaCha8 seeded
/// with `seed`, so `(target, seed)` names one run exactly.
pub fn seeded_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut v = vec![0u8; len];
    rng.fill_bytes(&mut v);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_past_the_end_are_zero_and_below_is_in_range() {
        let mut i = Input::new(&[7, 1, 2]);
        assert_eq!(i.u8(), 7);
        assert_eq!(i.u16(), 0x0201);
        assert!(i.is_empty());
        assert_eq!((i.u32(), i.below(5), i.bool()), (0, 0, false));
        let bytes = seeded_bytes(3, 4096);
        assert_eq!(bytes, seeded_bytes(3, 4096));
        let mut i = Input::new(&bytes);
        for n in [1, 2, 7, 256, 257, 65_536] {
            assert!(i.below(n) < n.max(1));
        }
    }
}
