//! Recovery: find the newest valid commit-area record, replay exactly the
//! committed slots (newest version of each block) to the device, and start
//! a fresh lap of every ring.

use rustc_hash::FxHashMap as HashMap;

use ptsd_blockdev::BlockDevice;

use crate::error::{JournalError, JournalFormatError};
use crate::journal::{write_record, RecoveryReport};
use crate::layout::{
    slot_term, Geometry, Record, RecordKind, SlotHeader, SLOT_CRC_AT, SLOT_HEADER,
};
use crate::region::Persist;

/// Blocks per device batch during replay.
const REPLAY_BATCH: usize = 64;

pub(crate) fn recover(
    region: &dyn Persist,
    device: &dyn BlockDevice,
    geo: &Geometry,
) -> Result<(Record, RecoveryReport), JournalError> {
    let newest = newest_record(region, geo)?;
    // A record written in the same sync as its slots (msync mode) counts
    // only if every slot it newly commits reached the media; otherwise
    // that sync was cut short, nothing it committed was acknowledged, and
    // the record before it (durable before it was written) holds.
    let (last, torn_commit) = match newest.digest {
        Some(digest) => {
            let prev = newest
                .seq
                .checked_sub(1)
                .and_then(|seq| record_with_seq(region, geo, seq))
                .ok_or(JournalFormatError::TornCommitWithoutPredecessor { seq: newest.seq })?;
            if digest_on_media(region, geo, &newest, &prev) == digest {
                (newest, false)
            } else {
                tracing::warn!(
                    seq = newest.seq,
                    "the newest commit record's sync was cut short: \
                     recovering from the record before it"
                );
                (prev, true)
            }
        }
        None => (newest, false),
    };
    let n = geo.partitions as usize;
    let bs = geo.block_size as usize;
    let mut report = RecoveryReport {
        clean: last.kind == RecordKind::Clean,
        record_seq: last.seq,
        committed_epoch: last.epoch,
        committed_slots: 0,
        replayed_blocks: 0,
        discarded_slots: 0,
        torn_commit,
    };
    let mut slot = vec![0u8; SLOT_HEADER + bs];
    for p in 0..n {
        // Same block => same partition, and a later position is a newer
        // version, so "newest committed position per block" is exactly the
        // result of replaying the committed slots in order.
        let mut newest: HashMap<u64, u64> = HashMap::default();
        for pos in last.tails[p]..last.heads[p] {
            region.read(geo.slot_offset(p, pos), &mut slot);
            match SlotHeader::decode_valid(&slot, pos, geo.block_size) {
                Some(h)
                    if h.epoch <= last.epoch
                        && !last.excluded.contains(&h.epoch)
                        && h.block < geo.device_blocks =>
                {
                    report.committed_slots += 1;
                    newest.insert(h.block, pos);
                }
                _ => report.discarded_slots += 1,
            }
        }
        let mut writes: Vec<(u64, u64)> = newest.into_iter().collect();
        writes.sort_unstable();
        let mut buf = vec![0u8; bs * REPLAY_BATCH];
        for chunk in writes.chunks(REPLAY_BATCH) {
            for (i, &(_, pos)) in chunk.iter().enumerate() {
                region.read(
                    geo.slot_offset(p, pos) + SLOT_HEADER,
                    &mut buf[i * bs..(i + 1) * bs],
                );
            }
            let batch: Vec<(u64, &[u8])> = chunk
                .iter()
                .enumerate()
                .map(|(i, &(b, _))| (b, &buf[i * bs..(i + 1) * bs]))
                .collect();
            device.write_batch(&batch)?;
            report.replayed_blocks += chunk.len() as u64;
        }
    }
    device.flush()?;
    // Continue one full lap later: no slot left from before the crash can
    // carry a position we will use again, so stale slots never look valid.
    let start: Vec<u64> = (last.heads.iter().zip(&last.tails))
        .map(|(&h, &t)| h.max(t) + geo.slots)
        .collect();
    let rec = Record {
        kind: RecordKind::Recovered,
        seq: last.seq + 1,
        epoch: last.epoch,
        excluded: Vec::new(),
        heads: start.clone(),
        tails: start,
        digest: None,
    };
    write_record(region, geo, &rec);
    region.sync()?;
    Ok((rec, report))
}

/// The valid record in commit-area place `i`, if any.
fn record_at(region: &dyn Persist, geo: &Geometry, i: u64) -> Option<Record> {
    let mut buf = vec![0u8; geo.record_size as usize];
    region.read(geo.record_offset(i), &mut buf);
    let r = Record::decode(&buf, geo.partitions)?;
    // A record must sit in the place its sequence number selects, and
    // cover no more than one ring of positions per partition.
    let fits = r
        .heads
        .iter()
        .zip(&r.tails)
        .all(|(h, t)| h.saturating_sub(*t) <= geo.slots);
    (geo.record_offset(r.seq) == geo.record_offset(i) && fits).then_some(r)
}

/// The valid record with sequence number `seq`, if it is still there.
fn record_with_seq(region: &dyn Persist, geo: &Geometry, seq: u64) -> Option<Record> {
    record_at(region, geo, seq % u64::from(geo.record_count)).filter(|r| r.seq == seq)
}

/// The valid record with the highest sequence number.
fn newest_record(region: &dyn Persist, geo: &Geometry) -> Result<Record, JournalError> {
    (0..u64::from(geo.record_count))
        .filter_map(|i| record_at(region, geo, i))
        .max_by_key(|r| r.seq)
        .ok_or_else(|| JournalFormatError::NoCommitRecord.into())
}

/// [`Record::digest`] of `rec` over `prev` as the media has it: the
/// [`slot_term`]s of the valid slots `rec` newly commits.
fn digest_on_media(region: &dyn Persist, geo: &Geometry, rec: &Record, prev: &Record) -> u64 {
    let mut slot = vec![0u8; SLOT_HEADER + geo.block_size as usize];
    let mut sum = 0u64;
    for p in 0..geo.partitions as usize {
        for pos in rec.tails[p]..rec.heads[p] {
            region.read(geo.slot_offset(p, pos), &mut slot);
            if let Some(h) = SlotHeader::decode_valid(&slot, pos, geo.block_size) {
                if rec.newly_commits(prev, p, pos, h.epoch) {
                    let crc = u32::from_le_bytes(
                        slot[SLOT_CRC_AT..SLOT_CRC_AT + 4]
                            .try_into()
                            .expect("4 bytes"),
                    );
                    sum = sum.wrapping_add(slot_term(p, pos, crc));
                }
            }
        }
    }
    sum
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use ptsd_blockdev::{BlockDevice, MemDevice};

    use super::*;
    use crate::{CrashRegion, Journal, JournalConfig};

    /// A corrupt commit area whose only record claims a digest the slots
    /// do not match, at sequence 0 (no record before it can exist): a
    /// typed error, no underflow.
    #[test]
    fn a_torn_digest_record_without_a_predecessor_is_an_error() {
        let region = CrashRegion::new(1 << 20);
        let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(4096, 64).unwrap());
        let j =
            Journal::create(region.clone(), dev.clone(), JournalConfig::partitioned(1)).unwrap();
        let geo = j.geometry().clone();
        j.close().unwrap();
        drop(j);
        let area = vec![0u8; (geo.record_size * u64::from(geo.record_count)) as usize];
        region.write(geo.commit_offset as usize, &area);
        for seq in [0, 5] {
            let rec = Record {
                kind: RecordKind::Commit,
                seq,
                epoch: 0,
                excluded: Vec::new(),
                heads: vec![0],
                tails: vec![0],
                digest: Some(1),
            };
            write_record(&region, &geo, &rec);
            let err = recover(&region, dev.as_ref(), &geo).unwrap_err();
            assert!(
                matches!(
                    err,
                    JournalError::Format(JournalFormatError::TornCommitWithoutPredecessor { seq: s }) if s == seq
                ),
                "{err}"
            );
        }
    }
}
