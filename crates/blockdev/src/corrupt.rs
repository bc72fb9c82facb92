//! Torn writes and silent-corruption faults for [`CrashDevice`](crate::CrashDevice).
//!
//! Kept apart from the crash model itself: a power cut only decides *which*
//! unflushed writes reach the media; these faults decide what a write that
//! does reach them looks like — only a prefix of its sectors (torn), or not
//! what the caller asked for at all (a flipped bit, the wrong block, nothing).
//! The corruption faults are opt-in and seeded, so a run replays exactly.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Sector size a torn write is cut at: a disk writes a 512-byte sector
/// atomically, not a whole 4 KiB block.
pub const SECTOR: usize = 512;

/// A kind of silent corruption a [`CrashDevice`](crate::CrashDevice) can inflict on a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Corruption {
    /// One bit of the block is flipped on its way to the media.
    BitFlip,
    /// The block lands on another block number (which it overwrites); the
    /// intended block keeps its old content.
    Misdirect,
    /// The write is acknowledged and never stored.
    LostWrite,
}

impl Corruption {
    /// Every kind.
    pub const ALL: [Corruption; 3] = [
        Corruption::BitFlip,
        Corruption::Misdirect,
        Corruption::LostWrite,
    ];
}

/// One corruption that happened, so a checker knows where to expect it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CorruptionEvent {
    /// What happened.
    pub kind: Corruption,
    /// The block the caller wrote.
    pub block: u64,
    /// For [`Corruption::Misdirect`], where the data went; for a bit flip,
    /// the bit index within the block; else 0.
    pub detail: u64,
}

/// What to store for one block of a write.
pub(crate) enum Outcome {
    /// Store it as written.
    Intact,
    /// Store this (corrupted) data at this block instead.
    Store(u64, Box<[u8]>),
    /// Store nothing.
    Drop,
}

/// An armed corruption fault: each block written is corrupted with
/// `probability`, by a kind drawn from `kinds`.
pub(crate) struct CorruptPlan {
    rng: ChaCha8Rng,
    probability: f64,
    kinds: Vec<Corruption>,
}

impl CorruptPlan {
    pub(crate) fn new(seed: u64, probability: f64, kinds: &[Corruption]) -> Self {
        Self {
            rng: ChaCha8Rng::seed_from_u64(seed),
            probability: if probability.is_nan() {
                0.0
            } else {
                probability.clamp(0.0, 1.0)
            },
            kinds: kinds.to_vec(),
        }
    }

    /// Decide the fate of one block written at `block` on a device of
    /// `num_blocks` blocks.
    pub(crate) fn judge(
        &mut self,
        block: u64,
        data: &[u8],
        num_blocks: u64,
    ) -> (Outcome, Option<CorruptionEvent>) {
        if self.kinds.is_empty() || !self.rng.gen_bool(self.probability) {
            return (Outcome::Intact, None);
        }
        let kind = self.kinds[self.rng.gen_range(0..self.kinds.len())];
        match kind {
            Corruption::BitFlip => {
                let bit = self.rng.gen_range(0..data.len() as u64 * 8);
                let mut d: Box<[u8]> = data.into();
                d[(bit / 8) as usize] ^= 1 << (bit % 8);
                let ev = CorruptionEvent {
                    kind,
                    block,
                    detail: bit,
                };
                (Outcome::Store(block, d), Some(ev))
            }
            Corruption::Misdirect if num_blocks > 1 => {
                // Any other block: a wrong LBA is not usually a neighbour.
                let mut to = self.rng.gen_range(0..num_blocks - 1);
                if to >= block {
                    to += 1;
                }
                let ev = CorruptionEvent {
                    kind,
                    block,
                    detail: to,
                };
                (Outcome::Store(to, data.into()), Some(ev))
            }
            Corruption::Misdirect => (Outcome::Intact, None),
            Corruption::LostWrite => {
                let ev = CorruptionEvent {
                    kind,
                    block,
                    detail: 0,
                };
                (Outcome::Drop, Some(ev))
            }
        }
    }
}

/// Tearing of the writes a crash keeps: each kept block write is, with
/// probability 1/4, cut after a random number of whole sectors (at least one
/// sector kept, at least one lost); the rest of the block keeps the content
/// it had before that write.
pub(crate) struct Tearing {
    rng: ChaCha8Rng,
}

impl Tearing {
    pub(crate) fn new(seed: u64) -> Self {
        // A different stream from the keep/lose coin of the same seed.
        Self {
            rng: ChaCha8Rng::seed_from_u64(seed ^ 0x7EA2_5EC7_0000_0001),
        }
    }

    /// The content a kept write of `new` over `old` leaves; `None` keeps
    /// `new` whole.
    pub(crate) fn tear(&mut self, old: Option<&[u8]>, new: &[u8]) -> Option<Box<[u8]>> {
        let sectors = new.len() / SECTOR;
        if sectors < 2 || !self.rng.gen_ratio(1, 4) {
            return None;
        }
        let keep = self.rng.gen_range(1..sectors) * SECTOR;
        let mut out: Box<[u8]> = match old {
            Some(o) => o.into(),
            None => vec![0u8; new.len()].into_boxed_slice(),
        };
        out[..keep].copy_from_slice(&new[..keep]);
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tear_keeps_a_sector_prefix() {
        let old = vec![1u8; 4096];
        let new = vec![2u8; 4096];
        let mut t = Tearing::new(5);
        let mut torn = 0;
        for _ in 0..200 {
            if let Some(b) = t.tear(Some(&old), &new) {
                torn += 1;
                let cut = b
                    .iter()
                    .position(|&x| x == 1)
                    .expect("some old sector left");
                assert!(cut > 0 && cut % SECTOR == 0);
                assert!(b[..cut].iter().all(|&x| x == 2));
                assert!(b[cut..].iter().all(|&x| x == 1));
            }
        }
        assert!((20..100).contains(&torn), "{torn} of 200 torn");
        // A single-sector block cannot tear.
        assert!((0..50).all(|_| t.tear(None, &[3u8; 512]).is_none()));
    }

    #[test]
    fn corruption_is_seeded_and_each_kind_does_its_thing() {
        let data = vec![0u8; 512];
        for kind in Corruption::ALL {
            let mut p = CorruptPlan::new(9, 1.0, &[kind]);
            let (out, ev) = p.judge(3, &data, 10);
            let ev = ev.expect("probability 1 always corrupts");
            assert_eq!((ev.kind, ev.block), (kind, 3));
            match (kind, out) {
                (Corruption::BitFlip, Outcome::Store(3, d)) => {
                    assert_eq!(d.iter().map(|b| b.count_ones()).sum::<u32>(), 1)
                }
                (Corruption::Misdirect, Outcome::Store(to, d)) => {
                    assert!(to != 3 && to < 10 && to == ev.detail && *d == data[..])
                }
                (Corruption::LostWrite, Outcome::Drop) => {}
                (k, _) => panic!("{k:?} did the wrong thing"),
            }
        }
        let mut never = CorruptPlan::new(9, 0.0, &Corruption::ALL);
        assert!(matches!(never.judge(0, &data, 10), (Outcome::Intact, None)));
    }
}
