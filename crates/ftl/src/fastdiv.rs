//! Division by a divisor fixed at run time (geometry), without a `div`
//! instruction: the engine divides page numbers on every flash operation.

/// `n / d` for a fixed `d > 0`: a shift when `d` is a power of two, else one
/// multiplication by a precomputed reciprocal (Lemire, Kaser, Kurz, "Faster
/// remainder by direct computation", 2019: exact for every 32-bit `n`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Divisor {
    /// `floor((2^64 - 1) / d) + 1`, or 0 when `d` is a power of two.
    magic: u64,
    shift: u32,
}

impl Divisor {
    pub fn new(d: u32) -> Self {
        assert!(d > 0, "division by zero");
        if d.is_power_of_two() {
            Divisor {
                magic: 0,
                shift: d.trailing_zeros(),
            }
        } else {
            Divisor {
                magic: u64::MAX / u64::from(d) + 1,
                shift: 0,
            }
        }
    }

    #[inline(always)]
    pub fn div(self, n: u32) -> u32 {
        if self.magic == 0 {
            n >> self.shift
        } else {
            ((u128::from(self.magic) * u128::from(n)) >> 64) as u32
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    #[test]
    fn divides_exactly() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        let mut ds: Vec<u32> = vec![1, 2, 3, 5, 7, 640, 1000, 1 << 31, u32::MAX, u32::MAX - 1];
        ds.extend((0..200).map(|_| rng.gen_range(1..=u32::MAX)));
        ds.extend((0..200).map(|_| rng.gen_range(1..5000)));
        for d in ds {
            let div = Divisor::new(d);
            let mut ns: Vec<u32> = vec![0, 1, d - 1, d, d.wrapping_add(1), u32::MAX, u32::MAX - 1];
            ns.extend((0..500).map(|_| rng.gen::<u32>()));
            for n in ns {
                assert_eq!(div.div(n), n / d, "{n} / {d}");
            }
        }
    }
}
