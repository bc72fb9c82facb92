//! Little-endian fields at byte offsets: the one codec vocabulary of the
//! on-device formats above (the file system's blocks, the journal's
//! superblock, slots and records, the SSD image's header, OOB entries and
//! checkpoints).
//!
//! Offsets are the caller's to check: every format validates the length of
//! what it decodes before it reads fields, so an offset past the end is a
//! bug in the format code and panics.
//!
//! ```
//! use ptsd_blockdev::le::{get_u16, get_u32, get_u64, put_u16, put_u32, put_u64};
//! let mut b = [0u8; 14];
//! put_u16(&mut b, 0, 0xBEEF);
//! put_u32(&mut b, 2, 0xDEAD_BEEF);
//! put_u64(&mut b, 6, 1 << 40);
//! assert_eq!(b[..2], [0xEF, 0xBE]);
//! assert_eq!((get_u16(&b, 0), get_u32(&b, 2), get_u64(&b, 6)), (0xBEEF, 0xDEAD_BEEF, 1 << 40));
//! ```

/// The `u16` at `b[at..at + 2]`.
#[inline]
pub fn get_u16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(b[at..at + 2].try_into().expect("2 bytes"))
}

/// The `u32` at `b[at..at + 4]`.
#[inline]
pub fn get_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

/// The `u64` at `b[at..at + 8]`.
#[inline]
pub fn get_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// Store `v` at `b[at..at + 2]`.
#[inline]
pub fn put_u16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_le_bytes());
}

/// Store `v` at `b[at..at + 4]`.
#[inline]
pub fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

/// Store `v` at `b[at..at + 8]`.
#[inline]
pub fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}
