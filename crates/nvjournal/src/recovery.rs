//! Recovery: find the newest valid commit-area record, replay exactly the
//! committed slots (newest version of each block) to the device, and start
//! a fresh lap of every ring.

use rustc_hash::FxHashMap as HashMap;

use ptsd_blockdev::BlockDevice;

use crate::error::{FormatError, JournalError};
use crate::journal::{write_record, RecoveryReport};
use crate::layout::{Geometry, Record, RecordKind, SlotHeader, SLOT_HEADER};
use crate::region::Persist;

/// Blocks per device batch during replay.
const REPLAY_BATCH: usize = 64;

pub(crate) fn recover(
    region: &dyn Persist,
    device: &dyn BlockDevice,
    geo: &Geometry,
) -> Result<(Record, RecoveryReport), JournalError> {
    let last = newest_record(region, geo)?;
    let n = geo.partitions as usize;
    let bs = geo.block_size as usize;
    let mut report = RecoveryReport {
        clean: last.kind == RecordKind::Clean,
        record_seq: last.seq,
        committed_epoch: last.epoch,
        committed_slots: 0,
        replayed_blocks: 0,
        discarded_slots: 0,
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
    };
    write_record(region, geo, &rec);
    region.sync()?;
    Ok((rec, report))
}

/// The valid record with the highest sequence number.
fn newest_record(region: &dyn Persist, geo: &Geometry) -> Result<Record, JournalError> {
    let mut buf = vec![0u8; geo.record_size as usize];
    let mut best: Option<Record> = None;
    for i in 0..u64::from(geo.record_count) {
        region.read(geo.record_offset(i), &mut buf);
        if let Some(r) = Record::decode(&buf, geo.partitions) {
            // A record must sit in the slot its sequence number selects, and
            // cover no more than one ring of positions per partition.
            let fits = r
                .heads
                .iter()
                .zip(&r.tails)
                .all(|(h, t)| h.saturating_sub(*t) <= geo.slots);
            if geo.record_offset(r.seq) == geo.record_offset(i)
                && fits
                && best.as_ref().is_none_or(|b| r.seq > b.seq)
            {
                best = Some(r);
            }
        }
    }
    best.ok_or_else(|| FormatError::NoCommitRecord.into())
}
