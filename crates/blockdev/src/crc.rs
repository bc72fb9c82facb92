//! crc32c arithmetic the layers' on-media formats share.

/// `crc32c(a ++ b)` from `crc32c(a)` and `crc32c(b)` for a fixed `b.len()`:
/// the crc is linear, so `crc32c(a)` only needs shifting over `len` zero
/// bytes, a 32x32 bit matrix over GF(2), applied here as four table lookups
/// (zlib's `crc32_combine` squares matrices on every call instead).
///
/// ```
/// use ptsd_blockdev::CrcShift;
/// let (a, b) = (b"header".as_slice(), [9u8; 4096]);
/// let shift = CrcShift::new(b.len());
/// let whole = [a, &b[..]].concat();
/// assert_eq!(shift.combine(crc32c::crc32c(a), crc32c::crc32c(&b)), crc32c::crc32c(&whole));
/// ```
#[derive(Clone)]
pub struct CrcShift {
    len: usize,
    table: [[u32; 256]; 4],
}

impl CrcShift {
    /// Tables for appending `len` bytes.
    pub fn new(len: usize) -> Self {
        // The shift of each single bit; a byte's is the xor of its bits'.
        let bit: Vec<u32> = (0..32)
            .map(|i| crc32c::crc32c_combine(1 << i, 0, len))
            .collect();
        let mut table = [[0u32; 256]; 4];
        for (k, t) in table.iter_mut().enumerate() {
            for (b, e) in t.iter_mut().enumerate() {
                *e = (0..8)
                    .filter(|j| (b >> j) & 1 == 1)
                    .fold(0, |acc, j| acc ^ bit[8 * k + j]);
            }
        }
        Self { len, table }
    }

    /// The length of `b` these tables are for.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for tables that append nothing.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// `crc32c(a ++ b)` given `crc32c(a)` and `crc32c(b)`, `b` being
    /// [`len`](Self::len) bytes long.
    #[inline]
    pub fn combine(&self, crc_a: u32, crc_b: u32) -> u32 {
        let t = &self.table;
        t[0][(crc_a & 0xff) as usize]
            ^ t[1][((crc_a >> 8) & 0xff) as usize]
            ^ t[2][((crc_a >> 16) & 0xff) as usize]
            ^ t[3][(crc_a >> 24) as usize]
            ^ crc_b
    }
}
