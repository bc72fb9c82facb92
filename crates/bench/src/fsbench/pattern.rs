//! Deterministic file contents: the byte at offset `o` of a file written
//! under `stamp` is a pure function of both, so a reader can check any range
//! without keeping a copy.

/// splitmix64's finaliser: a cheap, well-mixed hash of one word.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Fills `buf` with the contents of file `stamp` at `[offset, offset + len)`.
pub(crate) fn fill(stamp: u64, offset: u64, buf: &mut [u8]) {
    let mut pos = offset;
    let mut i = 0;
    while i < buf.len() {
        let word = mix(stamp ^ mix(pos >> 3)).to_le_bytes();
        let start = (pos & 7) as usize;
        let n = (8 - start).min(buf.len() - i);
        buf[i..i + n].copy_from_slice(&word[start..start + n]);
        i += n;
        pos += n as u64;
    }
}

/// Returns the offset of the first byte of `buf` that differs from file
/// `stamp`'s contents at `offset`, or `None` if all match.
pub(crate) fn first_mismatch(
    stamp: u64,
    offset: u64,
    buf: &[u8],
    scratch: &mut Vec<u8>,
) -> Option<u64> {
    scratch.resize(buf.len(), 0);
    fill(stamp, offset, scratch);
    buf.iter()
        .zip(scratch.iter())
        .position(|(a, b)| a != b)
        .map(|i| offset + i as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unaligned_ranges_agree_with_whole_file() {
        let mut whole = vec![0u8; 100];
        fill(7, 0, &mut whole);
        for start in 0..20 {
            for len in 0..30 {
                let mut part = vec![0u8; len];
                fill(7, start as u64, &mut part);
                assert_eq!(&part[..], &whole[start..start + len]);
            }
        }
        let mut other = vec![0u8; 100];
        fill(8, 0, &mut other);
        assert_ne!(whole, other, "different stamps give different contents");
    }

    #[test]
    fn mismatch_is_located() {
        let mut buf = vec![0u8; 64];
        fill(3, 10, &mut buf);
        let mut scratch = Vec::new();
        assert_eq!(first_mismatch(3, 10, &buf, &mut scratch), None);
        buf[17] ^= 1;
        assert_eq!(first_mismatch(3, 10, &buf, &mut scratch), Some(27));
    }
}
