//! On-media layout: superblock, commit area, partition rings of slots.
//!
//! Every field is encoded explicitly little-endian at a fixed offset; no
//! Rust struct layout reaches the media. Each structure carries a crc32c.
//!
//! ```text
//! [0, 4096)             superblock (fields below, crc32c at byte 88)
//! [4096, ring_offset)   commit area: `record_count` records of `record_size`
//! [ring_offset, ...)    partition p: `slots` slots of `slot_size` bytes
//! slot = 64-byte header + one block of payload
//! ```

use ptsd_blockdev::le::{get_u32, get_u64, put_u32, put_u64};
use ptsd_blockdev::CrcShift;

use crate::error::JournalFormatError;

pub(crate) const SB_MAGIC: [u8; 8] = *b"PTSDNVJL";
/// Version 3 journals on a disk file write commit records with a digest
/// (one sync per commit). Version 2 journals are still read and written
/// as before; a binary that knows only version 2 refuses version 3 rather
/// than miss its newest commits.
pub(crate) const SB_VERSION: u32 = 3;
/// Oldest superblock version still opened.
const SB_VERSION_OLDEST: u32 = 2;
pub(crate) const SB_SIZE: usize = 4096;
const SB_CRC_AT: usize = 88;

pub(crate) const REC_MAGIC: u32 = u32::from_le_bytes(*b"PJCR");
/// A record that carries a digest of the slots it newly commits (written
/// in the same sync as those slots; see [`Record::digest`]).
pub(crate) const REC_MAGIC_DIGEST: u32 = u32::from_le_bytes(*b"PJCD");
pub(crate) const SLOT_MAGIC: u32 = u32::from_le_bytes(*b"PJSL");
pub(crate) const SLOT_HEADER: usize = 64;
/// Offset of the 8-byte flag word in a slot header.
pub(crate) const FLAG_AT: usize = 56;
pub(crate) const SLOT_CRC_AT: usize = 40;
/// Flag value of a fully staged slot (an arbitrary pattern, so that zeroes
/// or stale garbage are not mistaken for it).
pub(crate) const FLAG_STAGED: u64 = 0x5354_4147_4544_2121;
/// Flag value of a slot whose transaction was aborted.
pub(crate) const FLAG_ABORTED: u64 = 0x4142_4f52_5445_4421;

/// Largest supported partition count.
pub const MAX_PARTITIONS: u32 = 256;

/// Geometry of a journal region, as stored in its superblock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Number of partitions (rings).
    pub partitions: u32,
    /// Bytes per journaled block.
    pub block_size: u32,
    /// Commit records in the commit area (a ring of them).
    pub record_count: u32,
    /// Slots per partition ring.
    pub slots: u64,
    /// Bytes per slot (header + block).
    pub slot_size: u64,
    /// Offset of the commit area.
    pub commit_offset: u64,
    /// Bytes per commit record.
    pub record_size: u64,
    /// Offset of partition 0's ring.
    pub ring_offset: u64,
    /// Bytes of region the layout covers.
    pub region_len: u64,
    /// Blocks on the home device.
    pub device_blocks: u64,
    /// Block size of the home device.
    pub device_block_size: u32,
    /// Superblock version: 3 for journals created now; from 3 on, a
    /// journal on a disk file syncs once per commit (see the README).
    pub version: u32,
}

impl Geometry {
    /// Whether commit records may carry a digest and share their sync
    /// with their slots (a version-2 journal's readers would ignore them).
    pub(crate) fn digest_records(&self) -> bool {
        self.version >= 3
    }
}

impl Geometry {
    /// Lay out a region of `region_len` bytes. Errors if it cannot hold at
    /// least two slots per partition.
    pub(crate) fn plan(
        region_len: u64,
        partitions: u32,
        block_size: u32,
        record_count: u32,
        device_blocks: u64,
        device_block_size: u32,
    ) -> Result<Self, JournalFormatError> {
        if partitions == 0 || partitions > MAX_PARTITIONS {
            return Err(JournalFormatError::Geometry(format!(
                "partition count {partitions} not in 1..={MAX_PARTITIONS}"
            )));
        }
        if !(512..=1 << 20).contains(&block_size) || !block_size.is_power_of_two() {
            return Err(JournalFormatError::Geometry(format!(
                "block size {block_size} is not a power of two in 512..=1MiB"
            )));
        }
        if record_count < 2 {
            return Err(JournalFormatError::Geometry(
                "need at least 2 commit records".into(),
            ));
        }
        let record_size = record_size(partitions);
        let commit_offset = SB_SIZE as u64;
        let ring_offset =
            (commit_offset + u64::from(record_count) * record_size).div_ceil(4096) * 4096;
        let slot_size = SLOT_HEADER as u64 + u64::from(block_size);
        let avail = region_len.saturating_sub(ring_offset);
        let slots = avail / (u64::from(partitions) * slot_size);
        if slots < 2 {
            return Err(JournalFormatError::Geometry(format!(
                "region of {region_len} bytes holds fewer than 2 slots per partition"
            )));
        }
        Ok(Self {
            partitions,
            block_size,
            record_count,
            slots,
            slot_size,
            commit_offset,
            record_size,
            ring_offset,
            region_len,
            device_blocks,
            device_block_size,
            version: SB_VERSION,
        })
    }

    /// Offset of ring position `pos` of partition `p`.
    #[inline]
    pub(crate) fn slot_offset(&self, p: usize, pos: u64) -> usize {
        self.slot_offset_at(p, pos % self.slots)
    }

    /// Offset of slot `index` (`pos % slots`) of partition `p`.
    pub(crate) fn slot_offset_at(&self, p: usize, index: u64) -> usize {
        (self.ring_offset + (p as u64 * self.slots + index) * self.slot_size) as usize
    }

    /// Offset of commit record number `seq` (a ring of `record_count`).
    pub(crate) fn record_offset(&self, seq: u64) -> usize {
        (self.commit_offset + (seq % u64::from(self.record_count)) * self.record_size) as usize
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; SB_SIZE];
        b[0..8].copy_from_slice(&SB_MAGIC);
        put_u32(&mut b, 8, self.version);
        put_u32(&mut b, 12, self.partitions);
        put_u32(&mut b, 16, self.block_size);
        put_u32(&mut b, 20, self.record_count);
        put_u64(&mut b, 24, self.slots);
        put_u64(&mut b, 32, self.slot_size);
        put_u64(&mut b, 40, self.commit_offset);
        put_u64(&mut b, 48, self.record_size);
        put_u64(&mut b, 56, self.ring_offset);
        put_u64(&mut b, 64, self.region_len);
        put_u64(&mut b, 72, self.device_blocks);
        put_u32(&mut b, 80, self.device_block_size);
        let crc = crc32c::crc32c(&b[..SB_CRC_AT]);
        put_u32(&mut b, SB_CRC_AT, crc);
        b
    }

    /// Parse and validate a superblock read from a region of `region_len`
    /// bytes. Never panics on any input.
    pub(crate) fn decode(b: &[u8], region_len: u64) -> Result<Self, JournalFormatError> {
        if b.len() < SB_SIZE {
            return Err(JournalFormatError::Truncated);
        }
        if b[0..8] != SB_MAGIC {
            return Err(JournalFormatError::BadMagic);
        }
        let version = get_u32(b, 8);
        if !(SB_VERSION_OLDEST..=SB_VERSION).contains(&version) {
            return Err(JournalFormatError::UnsupportedVersion(version));
        }
        if crc32c::crc32c(&b[..SB_CRC_AT]) != get_u32(b, SB_CRC_AT) {
            return Err(JournalFormatError::BadChecksum("superblock"));
        }
        let stored = Self {
            partitions: get_u32(b, 12),
            block_size: get_u32(b, 16),
            record_count: get_u32(b, 20),
            slots: get_u64(b, 24),
            slot_size: get_u64(b, 32),
            commit_offset: get_u64(b, 40),
            record_size: get_u64(b, 48),
            ring_offset: get_u64(b, 56),
            region_len: get_u64(b, 64),
            device_blocks: get_u64(b, 72),
            device_block_size: get_u32(b, 80),
            version,
        };
        if stored.region_len > region_len {
            return Err(JournalFormatError::Geometry(format!(
                "superblock describes {} bytes but the region has {region_len}",
                stored.region_len
            )));
        }
        // Recompute the layout from the primary parameters: a superblock
        // whose derived fields disagree is corrupt even with a good crc.
        let planned = Self::plan(
            stored.region_len,
            stored.partitions,
            stored.block_size,
            stored.record_count,
            stored.device_blocks,
            stored.device_block_size,
        )?;
        let planned = Self { version, ..planned };
        if planned != stored {
            return Err(JournalFormatError::Geometry(
                "superblock layout fields are inconsistent".into(),
            ));
        }
        Ok(stored)
    }
}

/// Most epochs a commit record can list as excluded (transactions still
/// open when the commit was taken); a commit finding more open waits.
pub const MAX_EXCLUDED: usize = 64;

/// Bytes of one commit record for `partitions` partitions.
pub(crate) fn record_size(partitions: u32) -> u64 {
    (36 + 16 * u64::from(partitions) + 8 * MAX_EXCLUDED as u64).div_ceil(64) * 64
}

/// Why a commit record was written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordKind {
    /// Written by `Journal::create`.
    Format = 0,
    /// A commit: `heads`/`epoch` advanced.
    Commit = 1,
    /// A checkpoint: `tails` advanced.
    Checkpoint = 2,
    /// A clean close: everything checkpointed.
    Clean = 3,
    /// Written by recovery after replay.
    Recovered = 4,
}

impl RecordKind {
    fn from_u32(v: u32) -> Option<Self> {
        Some(match v {
            0 => Self::Format,
            1 => Self::Commit,
            2 => Self::Checkpoint,
            3 => Self::Clean,
            4 => Self::Recovered,
            _ => return None,
        })
    }
}

/// A commit-area record: the durable state of the journal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Record {
    pub kind: RecordKind,
    /// Record sequence number; the valid record with the highest wins.
    pub seq: u64,
    /// Every transaction of an epoch `<= epoch` is committed, except those
    /// of the `excluded` epochs.
    pub epoch: u64,
    /// Epochs `<= epoch` whose transactions were still open at the commit
    /// (at most [`MAX_EXCLUDED`]); their slots are not replayed.
    pub excluded: Vec<u64>,
    /// Per partition: ring positions below this were covered by the commit.
    pub heads: Vec<u64>,
    /// Per partition: ring positions below this are checkpointed and free
    /// (may pass `heads` when the slots between are aborted).
    pub tails: Vec<u64>,
    /// Where the record went to the media in the same sync as the slots it
    /// commits (a journal on a disk file: one `fdatasync` per commit, not
    /// two), the [`slot_term`] sum of the slots it commits that the record
    /// before it (sequence `seq - 1`) did not. Recovery recomputes it from
    /// the media; a mismatch means the sync was cut short, and the record
    /// before it, durable before this one was written, is used instead.
    /// `None`: the slots were durable before the record was written.
    pub digest: Option<u64>,
}

/// One staged slot's share of a [`Record::digest`]: a mix of partition,
/// ring position and the slot's crc (so a torn, stale or missing slot
/// changes the sum).
pub(crate) fn slot_term(partition: usize, pos: u64, crc: u32) -> u64 {
    let mix = |mut z: u64| {
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    mix(pos ^ mix((((partition as u64) << 32) | u64::from(crc)) ^ 0x9E37_79B9_7F4A_7C15))
}

impl Record {
    /// True if the transactions of `epoch` are committed by this record.
    pub(crate) fn covers(&self, epoch: u64) -> bool {
        epoch <= self.epoch && !self.excluded.contains(&epoch)
    }

    /// True if a staged slot of `epoch` at `pos` in partition `p` is
    /// committed by this record but not by `prev`, the record before it:
    /// the slots its [`digest`](Self::digest) sums.
    pub(crate) fn newly_commits(&self, prev: &Record, p: usize, pos: u64, epoch: u64) -> bool {
        pos >= self.tails[p]
            && pos < self.heads[p]
            && self.covers(epoch)
            && !(pos < prev.heads[p] && prev.covers(epoch))
    }
}

impl Record {
    #[cfg(test)]
    pub(crate) fn encode(&self, size: u64) -> Vec<u8> {
        let mut b = Vec::new();
        self.encode_into(size, &mut b);
        b
    }

    /// Encode into `b` (cleared first; callers reuse one buffer) the bytes
    /// actually used (at most `size`): fixed fields, heads, tails, excluded
    /// epochs, the digest if any, crc32c over all of them.
    pub(crate) fn encode_into(&self, size: u64, b: &mut Vec<u8>) {
        let n = self.heads.len();
        let k = self.excluded.len();
        assert!(k <= MAX_EXCLUDED, "too many excluded epochs in a record");
        let digest_at = 32 + 16 * n + 8 * k;
        let crc_at = digest_at + if self.digest.is_some() { 8 } else { 0 };
        // `record_size` leaves at least 12 bytes past the largest record
        // without a digest (it rounds up to 64), so the digest always fits.
        assert!(crc_at as u64 + 4 <= size, "record larger than its slot");
        b.clear();
        b.resize(crc_at + 4, 0);
        let b = &mut b[..];
        let magic = match self.digest {
            Some(d) => {
                put_u64(b, digest_at, d);
                REC_MAGIC_DIGEST
            }
            None => REC_MAGIC,
        };
        put_u32(b, 0, magic);
        put_u32(b, 4, self.kind as u32);
        put_u64(b, 8, self.seq);
        put_u64(b, 16, self.epoch);
        put_u32(b, 24, n as u32);
        put_u32(b, 28, k as u32);
        for i in 0..n {
            put_u64(b, 32 + 8 * i, self.heads[i]);
            put_u64(b, 32 + 8 * n + 8 * i, self.tails[i]);
        }
        for (i, &e) in self.excluded.iter().enumerate() {
            put_u64(b, 32 + 16 * n + 8 * i, e);
        }
        let crc = crc32c::crc32c(&b[..crc_at]);
        put_u32(b, crc_at, crc);
    }

    /// Parse a record; `None` if it is torn, foreign or inconsistent.
    pub(crate) fn decode(b: &[u8], partitions: u32) -> Option<Self> {
        let n = partitions as usize;
        if b.len() < 32 || get_u32(b, 24) != partitions {
            return None;
        }
        let with_digest = match get_u32(b, 0) {
            REC_MAGIC => false,
            REC_MAGIC_DIGEST => true,
            _ => return None,
        };
        let k = get_u32(b, 28) as usize;
        if k > MAX_EXCLUDED {
            return None;
        }
        let digest_at = 32 + 16 * n + 8 * k;
        let crc_at = digest_at + if with_digest { 8 } else { 0 };
        if b.len() < crc_at + 4 {
            return None;
        }
        if crc32c::crc32c(&b[..crc_at]) != get_u32(b, crc_at) {
            return None;
        }
        let heads: Vec<u64> = (0..n).map(|i| get_u64(b, 32 + 8 * i)).collect();
        let tails: Vec<u64> = (0..n).map(|i| get_u64(b, 32 + 8 * n + 8 * i)).collect();
        let excluded: Vec<u64> = (0..k).map(|i| get_u64(b, 32 + 16 * n + 8 * i)).collect();
        Some(Self {
            kind: RecordKind::from_u32(get_u32(b, 4))?,
            seq: get_u64(b, 8),
            epoch: get_u64(b, 16),
            excluded,
            heads,
            tails,
            digest: with_digest.then(|| get_u64(b, digest_at)),
        })
    }
}

/// A slot header (the first 64 bytes of a slot).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SlotHeader {
    pub pos: u64,
    pub block: u64,
    pub txid: u64,
    pub epoch: u64,
}

impl SlotHeader {
    /// Encode with the flag word zero; the crc covers header and payload.
    #[cfg(test)]
    pub(crate) fn encode(&self, payload: &[u8]) -> [u8; SLOT_HEADER] {
        let shift = CrcShift::new(payload.len());
        self.encode_with(payload.len(), crc32c::crc32c(payload), &shift)
    }

    /// [`encode`](Self::encode) from the payload's own crc32c, computed
    /// beforehand (`shift` is for `payload_len`): the same bytes. A stager
    /// checksums the payload before it claims a slot, so the checksum
    /// overlaps the fetch of the ring head's line instead of following it.
    pub(crate) fn encode_with(
        &self,
        payload_len: usize,
        payload_crc: u32,
        shift: &CrcShift,
    ) -> [u8; SLOT_HEADER] {
        debug_assert_eq!(shift.len(), payload_len);
        let mut b = [0u8; SLOT_HEADER];
        put_u32(&mut b, 0, SLOT_MAGIC);
        put_u32(&mut b, 4, payload_len as u32);
        put_u64(&mut b, 8, self.pos);
        put_u64(&mut b, 16, self.block);
        put_u64(&mut b, 24, self.txid);
        put_u64(&mut b, 32, self.epoch);
        let crc = shift.combine(crc32c::crc32c(&b[..SLOT_CRC_AT]), payload_crc);
        put_u32(&mut b, SLOT_CRC_AT, crc);
        b
    }

    /// Validate a slot read back as `slot` (header + payload) at ring
    /// position `pos`: magic, length, position, crc and the staged flag.
    pub(crate) fn decode_valid(slot: &[u8], pos: u64, block_size: u32) -> Option<Self> {
        if slot.len() != SLOT_HEADER + block_size as usize {
            return None;
        }
        let (h, payload) = slot.split_at(SLOT_HEADER);
        if get_u32(h, 0) != SLOT_MAGIC
            || get_u32(h, 4) != block_size
            || get_u64(h, 8) != pos
            || get_u64(h, FLAG_AT) != FLAG_STAGED
        {
            return None;
        }
        let crc = crc32c::crc32c_append(crc32c::crc32c(&h[..SLOT_CRC_AT]), payload);
        if crc != get_u32(h, SLOT_CRC_AT) {
            return None;
        }
        Some(Self {
            pos,
            block: get_u64(h, 16),
            txid: get_u64(h, 24),
            epoch: get_u64(h, 32),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The header crc combined with a payload crc computed first is the
    /// crc of header and payload in one pass (what recovery checks).
    #[test]
    fn crc_shift_matches_one_pass() {
        let mut x = 0x1234_5678_9abc_def0u64;
        for len in [1usize, 7, 64, 4096] {
            let shift = CrcShift::new(len);
            for _ in 0..50 {
                let bytes: Vec<u8> = (0..SLOT_CRC_AT + len)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        x as u8
                    })
                    .collect();
                let (a, b) = bytes.split_at(SLOT_CRC_AT);
                assert_eq!(
                    shift.combine(crc32c::crc32c(a), crc32c::crc32c(b)),
                    crc32c::crc32c(&bytes),
                    "len {len}"
                );
            }
        }
        let h = SlotHeader {
            pos: 77,
            block: 5,
            txid: 9,
            epoch: 9,
        };
        let payload = vec![0xa5u8; 4096];
        let mut slot = h.encode(&payload).to_vec();
        slot[FLAG_AT..FLAG_AT + 8].copy_from_slice(&FLAG_STAGED.to_le_bytes());
        slot.extend_from_slice(&payload);
        assert_eq!(SlotHeader::decode_valid(&slot, 77, 4096), Some(h));
    }

    #[test]
    fn superblock_round_trip_and_rejects_garbage() {
        let g = Geometry::plan(1 << 22, 4, 4096, 8, 1000, 4096).unwrap();
        let b = g.encode();
        assert_eq!(Geometry::decode(&b, 1 << 22).unwrap(), g);
        let mut bad = b.clone();
        bad[13] ^= 1;
        assert!(matches!(
            Geometry::decode(&bad, 1 << 22),
            Err(JournalFormatError::BadChecksum(_))
        ));
        assert!(matches!(
            Geometry::decode(&[0u8; 4096], 1 << 22),
            Err(JournalFormatError::BadMagic)
        ));
        assert!(Geometry::decode(&b, 1 << 20).is_err());
        assert!(Geometry::decode(&b[..100], 1 << 22).is_err());
        // A version-2 journal (before digest records) is still opened, as
        // version 2; version 1 and unknown later versions are refused.
        let v2 = Geometry {
            version: 2,
            ..g.clone()
        };
        let got = Geometry::decode(&v2.encode(), 1 << 22).unwrap();
        assert_eq!(got, v2);
        assert!(!got.digest_records() && g.digest_records());
        for v in [1, SB_VERSION + 1] {
            let other = Geometry {
                version: v,
                ..g.clone()
            };
            assert!(matches!(
                Geometry::decode(&other.encode(), 1 << 22),
                Err(JournalFormatError::UnsupportedVersion(x)) if x == v
            ));
        }
    }

    #[test]
    fn record_round_trip() {
        let r = Record {
            kind: RecordKind::Commit,
            seq: 9,
            epoch: 4,
            excluded: vec![2, 3],
            heads: vec![5, 6],
            tails: vec![1, 2],
            digest: None,
        };
        let b = r.encode(record_size(2));
        assert_eq!(Record::decode(&b, 2), Some(r.clone()));
        let mut too_many = b.clone();
        too_many[28] = (MAX_EXCLUDED + 1) as u8;
        assert_eq!(Record::decode(&too_many, 2), None);
        let mut torn = b.clone();
        torn[40] ^= 0xff;
        assert_eq!(Record::decode(&torn, 2), None);
        assert_eq!(Record::decode(&b, 3), None);
    }

    #[test]
    fn a_record_with_a_digest_fits_its_slot_at_every_size() {
        for n in 1..=16u32 {
            let r = Record {
                kind: RecordKind::Commit,
                seq: 3,
                epoch: 99,
                excluded: (1..=MAX_EXCLUDED as u64).collect(),
                heads: vec![7; n as usize],
                tails: vec![2; n as usize],
                digest: Some(0xDEAD_BEEF_0123_4567),
            };
            let b = r.encode(record_size(n));
            assert!(b.len() as u64 <= record_size(n));
            assert_eq!(Record::decode(&b, n), Some(r.clone()));
            let mut torn = b.clone();
            let at = b.len() - 6; // inside the digest
            torn[at] ^= 1;
            assert_eq!(Record::decode(&torn, n), None);
            // Without it, the same record is the older format, also read.
            let plain = Record { digest: None, ..r };
            assert_eq!(
                Record::decode(&plain.encode(record_size(n)), n),
                Some(plain)
            );
        }
    }

    #[test]
    fn newly_committed_slots_are_those_the_previous_record_left_out() {
        let rec = |epoch, excluded: Vec<u64>, heads| Record {
            kind: RecordKind::Commit,
            seq: 1,
            epoch,
            excluded,
            heads: vec![heads],
            tails: vec![0],
            digest: None,
        };
        let prev = rec(5, vec![4], 10);
        let next = rec(8, vec![7], 20);
        assert!(!next.newly_commits(&prev, 0, 3, 5)); // committed before
        assert!(next.newly_commits(&prev, 0, 3, 4)); // was open then
        assert!(next.newly_commits(&prev, 0, 3, 6)); // a later epoch below the old head
        assert!(next.newly_commits(&prev, 0, 12, 5)); // past the old head
        assert!(!next.newly_commits(&prev, 0, 12, 7)); // still open
        assert!(!next.newly_commits(&prev, 0, 12, 9)); // after the cover
        assert!(!next.newly_commits(&prev, 0, 20, 5)); // past the new head
        assert_ne!(slot_term(0, 3, 1), slot_term(0, 3, 2));
        assert_ne!(slot_term(0, 3, 1), slot_term(1, 3, 1));
        assert_ne!(slot_term(0, 3, 1), slot_term(0, 4, 1));
    }
}
