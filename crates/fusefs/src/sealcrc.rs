//! The crc32c of a whole sealed block, derived from its seal.
//!
//! A metadata block is sealed with the crc32c of its bytes with the 4-byte
//! crc field taken as zero, stored in that field. The journal wants the
//! crc32c of the block as written, seal included: computing it again is a
//! second pass over 4 KiB per block, a few per file created. CRCs are
//! affine over messages of one length, so the two differ by a linear
//! function of the field's value `s` alone: with `k` bytes after the
//! field, `crc(block) = s ^ shift_k(crc(s) ^ crc(0000))`, `crc(s)` being
//! the crc32c of the field's 4 bytes and `shift_k` appending `k` zero
//! bytes ([`CrcShift`]).

use std::sync::OnceLock;

use ptsd_blockdev::CrcShift;

use crate::format::BLOCK_SIZE;

/// crc32c of a whole `BLOCK_SIZE` block whose 4-byte field at `at` holds
/// (little-endian) `seal`, the crc32c of the block with that field zero.
/// The field after the magic (at 4) has its table made once; a field at
/// the end needs none; any other is computed on the spot.
pub(crate) fn whole_block_crc(seal: u32, at: usize) -> u32 {
    static AFTER_MAGIC: OnceLock<CrcShift> = OnceLock::new();
    let k = BLOCK_SIZE - at - 4;
    let field = crc32c::crc32c(&seal.to_le_bytes()) ^ crc32c::crc32c(&[0u8; 4]);
    let l = match (at, k) {
        // Nothing follows the field: no shift.
        (_, 0) => field,
        (4, _) => AFTER_MAGIC
            .get_or_init(|| CrcShift::new(k))
            .combine(field, 0),
        _ => CrcShift::new(k).combine(field, 0),
    };
    seal ^ l
}

/// The zero tails [`crc_zero_tail`] appends by table: multiples of this.
const TAIL_STEP: usize = 512;

/// crc32c of a `BLOCK_SIZE` block whose bytes from `end` on are all zero,
/// reading only up to `end` rounded up to [`TAIL_STEP`]: an inode block
/// holds a few hundred bytes, and a crc over its 4 KiB was most of what
/// encoding it cost.
pub(crate) fn crc_zero_tail(b: &[u8], end: usize) -> u32 {
    /// Per tail length `i * TAIL_STEP`: its shift, and the crc of its zeros.
    static TAILS: OnceLock<Vec<(CrcShift, u32)>> = OnceLock::new();
    debug_assert_eq!(b.len(), BLOCK_SIZE);
    debug_assert!(b[end.min(BLOCK_SIZE)..].iter().all(|&x| x == 0));
    let head = end
        .div_ceil(TAIL_STEP)
        .saturating_mul(TAIL_STEP)
        .min(BLOCK_SIZE);
    let crc = crc32c::crc32c(&b[..head]);
    if head == BLOCK_SIZE {
        return crc;
    }
    let tails = TAILS.get_or_init(|| {
        (0..=BLOCK_SIZE / TAIL_STEP)
            .map(|i| {
                let n = i * TAIL_STEP;
                (CrcShift::new(n), crc32c::crc32c(&vec![0u8; n]))
            })
            .collect()
    });
    let (shift, zeros) = &tails[(BLOCK_SIZE - head) / TAIL_STEP];
    shift.combine(crc, *zeros)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sealed(mut b: Vec<u8>, at: usize) -> (Vec<u8>, u32) {
        b[at..at + 4].fill(0);
        let seal = crc32c::crc32c(&b);
        b[at..at + 4].copy_from_slice(&seal.to_le_bytes());
        (b, seal)
    }

    proptest! {
        #[test]
        fn derived_crc_is_the_whole_blocks(
            bytes in proptest::collection::vec(any::<u8>(), BLOCK_SIZE),
            at in prop_oneof![Just(4usize), Just(BLOCK_SIZE - 4), 0usize..BLOCK_SIZE - 4],
        ) {
            let (b, seal) = sealed(bytes, at);
            prop_assert_eq!(whole_block_crc(seal, at), crc32c::crc32c(&b));
        }
    }

    proptest! {
        #[test]
        fn zero_tail_crc_is_the_blocks(
            head in proptest::collection::vec(any::<u8>(), 0..BLOCK_SIZE),
        ) {
            let end = head.len();
            let mut b = head;
            b.resize(BLOCK_SIZE, 0);
            prop_assert_eq!(crc_zero_tail(&b, end), crc32c::crc32c(&b));
        }
    }

    #[test]
    fn zero_tail_at_the_steps() {
        for end in [
            0,
            1,
            TAIL_STEP - 1,
            TAIL_STEP,
            TAIL_STEP + 1,
            BLOCK_SIZE - 1,
            BLOCK_SIZE,
        ] {
            let mut b = vec![0u8; BLOCK_SIZE];
            b[..end].fill(0xa5);
            assert_eq!(crc_zero_tail(&b, end), crc32c::crc32c(&b), "end {end}");
        }
    }

    /// The identity underneath, for any field value (not only a valid
    /// seal): the field's contribution is `L_k` of its value alone.
    #[test]
    fn field_contribution_is_linear_in_its_value() {
        let mut rng = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        for at in [0, 4, 100, BLOCK_SIZE - 4] {
            let mut z: Vec<u8> = (0..BLOCK_SIZE).map(|_| next() as u8).collect();
            z[at..at + 4].fill(0);
            let crc_zero_field = crc32c::crc32c(&z);
            for s in [0, 1, u32::MAX, next() as u32] {
                let mut b = z.clone();
                b[at..at + 4].copy_from_slice(&s.to_le_bytes());
                let l = whole_block_crc(s, at) ^ s;
                assert_eq!(
                    crc32c::crc32c(&b),
                    crc_zero_field ^ l,
                    "at {at}, field {s:#x}"
                );
            }
        }
    }
}
