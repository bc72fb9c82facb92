//! The flush checker: a region wrapper that verifies the journal's cache
//! flushes and fences, in the spirit of pmemcheck and Chipmunk.
//!
//! On persistent memory a store is durable only once its cache line has
//! been written back (`clwb`/`clflushopt`/`clflush`, or a non-temporal
//! store) *and* a fence (`sfence`) on the same thread has ordered that
//! write-back. Emulators model no CPU cache, so a missing flush never shows
//! up as lost data there, and a crash test only finds it when the crash
//! happens to fall in the window. [`FlushCheck`] wraps any region, keeps a
//! shadow of what the CPU sees and of what is certainly durable, follows
//! every store, flush and fence per 64-byte line (fences per thread), and
//! wherever the journal relies on durability asserts that the bytes it
//! relies on are durable:
//!
//! - **a slot's flag made durable** (a stage): the slot's header and
//!   payload must already be durable, or a crash could leave a flagged slot
//!   holding older data;
//! - **a commit record stored** (commit, checkpoint, clean close, recovery):
//!   everything the record commits must already be durable: the superblock,
//!   the flag of every slot of a committed epoch written in this lap of the
//!   ring, and the header and payload of those that are staged. *Already*:
//!   write-backs completing at the same fence are not ordered among
//!   themselves;
//! - **a commit returning** (and a clean close,
//!   [`Persist::check_durable`]): the newest record and all it commits.
//!
//! In [`RegionMode::Msync`] flushes and fences make nothing durable; only
//! `sync` (msync) does, so the same rules check that mode's protocol
//! (the flag rule is skipped there: one msync writes data and flag back in
//! no order; and a commit record carrying a digest of its slots, written
//! before the one sync that makes both durable, is checked only where the
//! commit returns).
//!
//! The checker sees the region through the [`Persist`] trait: what it
//! verifies is the journal's use of that trait. The region's own
//! `write_persist_unshared` is trusted to make its bytes durable at its
//! fence (non-temporal stores, or a copy and write-back).
//!
//! Setting `PTSD_FLUSH_CHECK=1` makes [`Journal::create`](crate::Journal::create)
//! and [`Journal::open`](crate::Journal::open) wrap every region in a
//! checker that panics on a violation: `PTSD_FLUSH_CHECK=1 cargo test -p
//! ptsd-nvjournal` runs the journal's test suite under it.
//!
//! ```
//! use ptsd_nvjournal::{CrashRegion, FlushCheck, Persist};
//! let r = FlushCheck::recording(CrashRegion::new(4096));
//! r.write(0, &[1u8; 64]);
//! r.persist(0, 64);
//! assert!(r.violations().is_empty());
//! ```

use std::collections::HashMap;
use std::sync::OnceLock;
use std::thread::ThreadId;

use parking_lot::Mutex;
use ptsd_blockdev::le::get_u64;

use crate::flush::CACHE_LINE;
use crate::layout::{Geometry, Record, SlotHeader, FLAG_AT, FLAG_STAGED, SB_SIZE, SLOT_HEADER};
use crate::region::{Persist, RegionError, RegionMode};

/// Line states.
const CLEAN: u8 = 0;
const DIRTY: u8 = 1;
const FLUSHED: u8 = 2;

/// Details kept per violation (the first few byte ranges at fault).
const MAX_DETAILS: usize = 4;

/// A region wrapper that checks every durability point (see the module
/// docs). Clones of the inner region (e.g. a [`CrashRegion`](crate::CrashRegion)
/// kept by a test) still see every store: the checker forwards them all.
pub struct FlushCheck<R> {
    inner: R,
    shadow: Mutex<Shadow>,
    panic: bool,
}

struct Shadow {
    /// What the CPU sees (every store so far).
    current: Vec<u8>,
    /// What is certainly on the media.
    durable: Vec<u8>,
    /// Per line: CLEAN, DIRTY (stored since its last write-back) or
    /// FLUSHED (written back, no fence yet by the flushing thread).
    lines: Vec<u8>,
    /// Event number of each line's last store (for the report).
    stored_at: Vec<u64>,
    /// Lines each thread has written back since its last fence.
    pending: HashMap<ThreadId, Vec<usize>>,
    msync: bool,
    events: u64,
    /// Superblock generation: bumped by every store into the superblock.
    sb_gen: u64,
    geo: Option<(u64, Option<Geometry>)>,
    /// Durability points checked (flag sets, records, commit returns).
    checked: u64,
    violations: Vec<String>,
}

impl<R: Persist> FlushCheck<R> {
    /// A checker that panics at the first violation (on the journal's own
    /// background threads it records the violation and panics when the
    /// region is dropped, so no worker dies holding the journal up).
    pub fn new(inner: R) -> Self {
        Self::build(inner, true)
    }

    /// A checker that only records violations (see [`violations`](Self::violations)).
    pub fn recording(inner: R) -> Self {
        Self::build(inner, false)
    }

    fn build(inner: R, panic: bool) -> Self {
        // Whatever the region holds now is taken as the media's contents.
        let mut image = vec![0u8; inner.len()];
        inner.read(0, &mut image);
        let lines = image.len().div_ceil(CACHE_LINE);
        let msync = inner.mode() == RegionMode::Msync;
        Self {
            inner,
            shadow: Mutex::new(Shadow {
                durable: image.clone(),
                current: image,
                lines: vec![CLEAN; lines],
                stored_at: vec![0; lines],
                pending: HashMap::new(),
                msync,
                events: 0,
                sb_gen: 0,
                geo: None,
                checked: 0,
                violations: Vec::new(),
            }),
            panic,
        }
    }

    /// The wrapped region.
    pub fn inner(&self) -> &R {
        &self.inner
    }

    /// Durability points checked so far.
    pub fn checked(&self) -> u64 {
        self.shadow.lock().checked
    }

    /// Every violation found so far, one message each.
    pub fn violations(&self) -> Vec<String> {
        self.shadow.lock().violations.clone()
    }

    /// Record the violations a check found; panic unless recording only
    /// or on a journal worker thread.
    fn report(&self, mut sh: parking_lot::MutexGuard<'_, Shadow>, found: Vec<String>) {
        if found.is_empty() {
            return;
        }
        for v in &found {
            eprintln!("flush check: {v}");
        }
        sh.violations.extend(found.iter().cloned());
        drop(sh);
        let worker = std::thread::current()
            .name()
            .is_some_and(|n| n.starts_with("nvj-"));
        if self.panic && !worker {
            panic!("flush check: {}", found.join("\n"));
        }
    }
}

impl<R> Drop for FlushCheck<R> {
    fn drop(&mut self) {
        let sh = self.shadow.get_mut();
        if self.panic && enabled_by_env() {
            eprintln!(
                "flush check: {} durability points checked, {} violation(s)",
                sh.checked,
                sh.violations.len()
            );
        }
        let v = &sh.violations;
        if self.panic && !v.is_empty() && !std::thread::panicking() {
            panic!("flush check: {} violation(s), the first: {}", v.len(), v[0]);
        }
    }
}

fn lines_of(offset: usize, len: usize) -> std::ops::Range<usize> {
    if len == 0 {
        return 0..0;
    }
    offset / CACHE_LINE..(offset + len).div_ceil(CACHE_LINE)
}

impl Shadow {
    fn store(&mut self, offset: usize, data: &[u8]) {
        self.events += 1;
        self.current[offset..offset + data.len()].copy_from_slice(data);
        for l in lines_of(offset, data.len()) {
            self.lines[l] = DIRTY;
            self.stored_at[l] = self.events;
        }
        if offset < SB_SIZE {
            self.sb_gen += 1;
        }
    }

    fn flush(&mut self, offset: usize, len: usize) {
        if self.msync {
            return;
        }
        let tid = std::thread::current().id();
        let mut mine = self.pending.remove(&tid).unwrap_or_default();
        for l in lines_of(offset, len) {
            if self.lines[l] != CLEAN {
                self.lines[l] = FLUSHED;
                mine.push(l);
            }
        }
        self.pending.insert(tid, mine);
    }

    fn fence(&mut self) {
        let Some(mine) = self.pending.remove(&std::thread::current().id()) else {
            return;
        };
        for l in mine {
            if self.lines[l] == FLUSHED {
                let r = l * CACHE_LINE..((l + 1) * CACHE_LINE).min(self.current.len());
                self.durable[r.clone()].copy_from_slice(&self.current[r]);
                self.lines[l] = CLEAN;
            }
        }
    }

    fn sync_all(&mut self) {
        self.durable.copy_from_slice(&self.current);
        self.lines.fill(CLEAN);
        self.pending.clear();
    }

    /// The geometry in the current superblock, if it holds one.
    fn geometry(&mut self) -> Option<Geometry> {
        match &self.geo {
            Some((g, geo)) if *g == self.sb_gen => geo.clone(),
            _ => {
                let len = self.current.len() as u64;
                let geo =
                    Geometry::decode(&self.current[..SB_SIZE.min(self.current.len())], len).ok();
                self.geo = Some((self.sb_gen, geo.clone()));
                geo
            }
        }
    }

    /// Why `[offset, offset + len)` is not durable, or `None` if it is.
    fn not_durable(&self, offset: usize, len: usize, what: &str) -> Option<String> {
        let r = offset..offset + len;
        if self.durable[r.clone()] == self.current[r] {
            return None;
        }
        let bad = lines_of(offset, len).find(|&l| {
            let r = l * CACHE_LINE..((l + 1) * CACHE_LINE).min(offset + len);
            let r = r.start.max(offset)..r.end;
            self.durable[r.clone()] != self.current[r]
        })?;
        let state = match self.lines[bad] {
            DIRTY => "stored, never written back",
            FLUSHED => "written back, no fence yet",
            _ => "stored again after its write-back",
        };
        Some(format!(
            "{what} [{offset}, +{len}) not durable: line at {} {state} (store event {} of {})",
            bad * CACHE_LINE,
            self.stored_at[bad],
            self.events,
        ))
    }

    /// What recovery relies on when `rec` is the newest record: the
    /// superblock, and every slot of an epoch `rec` commits written in
    /// this lap (its flag; all of it if staged).
    fn record_deps(&mut self, rec: &Record, point: &str) -> Vec<String> {
        self.checked += 1;
        let Some(geo) = self.geometry() else {
            return vec![format!("{point}: no valid superblock")];
        };
        let mut found = Vec::new();
        found.extend(self.not_durable(0, SB_SIZE, &format!("{point}: superblock")));
        let slot_len = geo.slot_size as usize;
        for p in 0..rec.heads.len().min(geo.partitions as usize) {
            for pos in rec.tails[p]..rec.heads[p] {
                if found.len() >= MAX_DETAILS {
                    return found;
                }
                let off = geo.slot_offset(p, pos);
                let slot = &self.current[off..off + slot_len];
                if get_u64(slot, 8) != pos {
                    continue; // not written in this lap: recovery skips it
                }
                let epoch = get_u64(slot, 32);
                if epoch > rec.epoch || rec.excluded.contains(&epoch) {
                    continue; // not committed by this record
                }
                let what = format!("{point}: slot {p}/{pos} (epoch {epoch})");
                let staged = SlotHeader::decode_valid(slot, pos, geo.block_size).is_some();
                found.extend(if staged {
                    self.not_durable(off, slot_len, &format!("{what} header+payload+flag"))
                } else {
                    self.not_durable(off + FLAG_AT, 8, &format!("{what} flag"))
                });
            }
        }
        found
    }

    /// The valid record stored at commit-area entry `i`, if any.
    fn record_at(&self, geo: &Geometry, i: u64, image: &[u8]) -> Option<Record> {
        let off = geo.record_offset(i);
        let r = Record::decode(&image[off..off + geo.record_size as usize], geo.partitions)?;
        (geo.record_offset(r.seq) == off).then_some(r)
    }

    /// Records whose first byte lies in `[offset, offset + len)`.
    fn records_stored(&mut self, offset: usize, len: usize) -> Vec<Record> {
        let Some(geo) = self.geometry() else {
            return Vec::new();
        };
        let (start, end) = (geo.commit_offset as usize, geo.ring_offset as usize);
        if offset + len <= start || offset >= end {
            return Vec::new();
        }
        (0..u64::from(geo.record_count))
            .filter(|&i| (offset..offset + len).contains(&geo.record_offset(i)))
            .filter_map(|i| self.record_at(&geo, i, &self.current))
            .collect()
    }

    /// The flag rule: for every slot flag in `[offset, offset + len)` about
    /// to become durable as STAGED, header and payload must be durable.
    fn flag_rule(&mut self, offset: usize, len: usize) -> Vec<String> {
        let Some(geo) = self.geometry() else {
            return Vec::new();
        };
        if self.msync || offset + len <= geo.ring_offset as usize {
            return Vec::new();
        }
        let (ring, size) = (geo.ring_offset as usize, geo.slot_size as usize);
        let total = geo.partitions as usize * geo.slots as usize;
        let mut found = Vec::new();
        let first = offset.saturating_sub(ring) / size;
        let last = ((offset + len).saturating_sub(ring) / size).min(total.saturating_sub(1));
        for s in first..=last {
            let slot = ring + s * size;
            let flag = slot + FLAG_AT;
            if flag < offset || flag + 8 > offset + len {
                continue;
            }
            if get_u64(&self.current, flag) != FLAG_STAGED
                || get_u64(&self.durable, flag) == FLAG_STAGED
            {
                continue;
            }
            self.checked += 1;
            let what = format!(
                "flag set: slot {}/{} ",
                s / geo.slots as usize,
                get_u64(&self.current, slot + 8)
            );
            found.extend(self.not_durable(slot, FLAG_AT, &format!("{what}header")));
            found.extend(self.not_durable(
                slot + SLOT_HEADER,
                size - SLOT_HEADER,
                &format!("{what}payload"),
            ));
        }
        found
    }

    /// A store: apply it, then check every commit record it wrote.
    fn store_checked(&mut self, offset: usize, data: &[u8]) -> Vec<String> {
        self.store(offset, data);
        let mut found = Vec::new();
        for rec in self.records_stored(offset, data.len()) {
            if self.msync && rec.digest.is_some() {
                // Written before the sync that makes its slots durable too;
                // recovery checks its digest, and the rule holds where the
                // commit returns (`durable_point`).
                continue;
            }
            let point = format!("commit record seq {} ({:?}) stored", rec.seq, rec.kind);
            found.extend(self.record_deps(&rec, &point));
        }
        found
    }

    /// A persist: check the flag rule, write back, fence.
    fn persist_checked(&mut self, ranges: &[(usize, usize)]) -> Vec<String> {
        let mut found = Vec::new();
        for &(offset, len) in ranges {
            found.extend(self.flag_rule(offset, len));
        }
        for &(offset, len) in ranges {
            self.flush(offset, len);
        }
        self.fence();
        found
    }

    /// The newest record (in the durable image under msync, where a record
    /// is stored before its msync) and everything it commits.
    fn durable_point(&mut self) -> Vec<String> {
        let Some(geo) = self.geometry() else {
            return Vec::new();
        };
        let image = if self.msync {
            &self.durable
        } else {
            &self.current
        };
        let newest = (0..u64::from(geo.record_count))
            .filter_map(|i| self.record_at(&geo, i, image))
            .max_by_key(|r| r.seq);
        let Some(rec) = newest else {
            return vec!["commit returned: no valid commit record".into()];
        };
        let point = format!("commit returned (newest record seq {})", rec.seq);
        let off = geo.record_offset(rec.seq);
        let mut found: Vec<String> = self
            .not_durable(
                off,
                geo.record_size as usize,
                &format!("{point}: the record"),
            )
            .into_iter()
            .collect();
        found.extend(self.record_deps(&rec, &point));
        found
    }
}

impl<R: Persist> Persist for FlushCheck<R> {
    fn len(&self) -> usize {
        self.inner.len()
    }
    fn mode(&self) -> RegionMode {
        self.inner.mode()
    }
    fn write(&self, offset: usize, data: &[u8]) {
        let mut sh = self.shadow.lock();
        self.inner.write(offset, data);
        let found = sh.store_checked(offset, data);
        self.report(sh, found);
    }
    fn read(&self, offset: usize, buf: &mut [u8]) {
        self.inner.read(offset, buf)
    }
    unsafe fn write_unshared(&self, offset: usize, data: &[u8]) {
        let mut sh = self.shadow.lock();
        // SAFETY: the caller's guarantee is passed on unchanged.
        unsafe { self.inner.write_unshared(offset, data) };
        let found = sh.store_checked(offset, data);
        self.report(sh, found);
    }
    unsafe fn read_unshared(&self, offset: usize, buf: &mut [u8]) {
        // SAFETY: the caller's guarantee is passed on unchanged.
        unsafe { self.inner.read_unshared(offset, buf) }
    }
    unsafe fn borrow_unshared(&self, offset: usize, len: usize) -> Option<&[u8]> {
        // SAFETY: the caller's guarantee is passed on unchanged.
        unsafe { self.inner.borrow_unshared(offset, len) }
    }
    unsafe fn write_persist_unshared(&self, offset: usize, parts: &[&[u8]]) {
        let mut sh = self.shadow.lock();
        // SAFETY: the caller's guarantee is passed on unchanged.
        unsafe { self.inner.write_persist_unshared(offset, parts) };
        let mut found = Vec::new();
        let mut at = offset;
        for part in parts {
            found.extend(sh.store_checked(at, part));
            at += part.len();
        }
        found.extend(sh.persist_checked(&[(offset, at - offset)]));
        self.report(sh, found);
    }
    fn persist_ranges(&self, ranges: &[(usize, usize)]) {
        let mut sh = self.shadow.lock();
        self.inner.persist_ranges(ranges);
        let found = sh.persist_checked(ranges);
        self.report(sh, found);
    }
    fn sync(&self) -> Result<(), RegionError> {
        let mut sh = self.shadow.lock();
        self.inner.sync()?;
        if sh.msync {
            sh.sync_all();
        }
        Ok(())
    }
    fn check_durable(&self) {
        self.inner.check_durable();
        let mut sh = self.shadow.lock();
        let found = sh.durable_point();
        self.report(sh, found);
    }
}

/// True if `PTSD_FLUSH_CHECK` asks for checking (read once).
pub(crate) fn enabled_by_env() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("PTSD_FLUSH_CHECK").is_ok_and(|v| !v.is_empty() && v != "0"))
}

/// `region` wrapped in a panicking checker when `PTSD_FLUSH_CHECK` is set.
pub(crate) fn wrap_from_env(region: Box<dyn Persist>) -> Box<dyn Persist> {
    // A unit test dropping a flush on purpose checks with its own checker.
    #[cfg(test)]
    if crate::journal::MUTANT.with(|m| m.get().is_some()) {
        return region;
    }
    if enabled_by_env() {
        tracing::info!("PTSD_FLUSH_CHECK: journal region wrapped in the flush checker");
        Box::new(FlushCheck::new(region))
    } else {
        region
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use ptsd_blockdev::{BlockDevice, MemDevice};

    use super::*;
    use crate::journal::{DroppedFlush, MUTANT};
    use crate::layout::RecordKind;
    use crate::{CrashRegion, Journal, JournalConfig};

    const BS: usize = 4096;

    /// Commits, an abort, a checkpoint and a clean close on one thread
    /// (the background threads stay idle), with `mutant` dropping one kind
    /// of flush; returns what the checker found.
    fn workload(mutant: Option<DroppedFlush>) -> Vec<String> {
        MUTANT.with(|m| m.set(mutant));
        let region = Arc::new(FlushCheck::recording(CrashRegion::new(1 << 20)));
        let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(BS as u32, 64).unwrap());
        let cfg = JournalConfig {
            checkpoint_interval: None,
            checkpoint_fill: 1.0,
            ..JournalConfig::partitioned(2)
        };
        let j = Journal::create(region.clone(), dev, cfg).unwrap();
        for i in 0..6u64 {
            let mut tx = j.begin();
            tx.write(i, &[i as u8 + 1; BS]).unwrap();
            tx.write(i + 20, &[i as u8 + 7; BS]).unwrap();
            if i == 2 {
                drop(tx); // aborted: the next commit covers its epoch
            } else {
                tx.finish().unwrap();
                j.commit().unwrap();
            }
        }
        j.checkpoint().unwrap();
        j.close().unwrap();
        drop(j);
        MUTANT.with(|m| m.set(None));
        region.violations()
    }

    #[test]
    fn the_journal_passes_the_flush_check() {
        assert_eq!(workload(None), Vec::<String>::new());
    }

    #[test]
    fn every_stage_and_record_is_a_checked_point() {
        let region = Arc::new(FlushCheck::recording(CrashRegion::new(1 << 20)));
        let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(BS as u32, 64).unwrap());
        let j = Journal::create(region.clone(), dev, JournalConfig::partitioned(2)).unwrap();
        let before = region.checked();
        let mut tx = j.begin();
        tx.write(1, &[1; BS]).unwrap();
        tx.write(2, &[2; BS]).unwrap();
        tx.finish().unwrap();
        j.commit().unwrap();
        // Two flags, the commit record when stored, the commit returning.
        assert_eq!(region.checked() - before, 4);
        j.close().unwrap();
    }

    #[test]
    fn a_stage_without_payload_write_back_is_caught_when_its_flag_is_set() {
        let v = workload(Some(DroppedFlush::StagePayload));
        assert!(
            v.iter()
                .any(|m| m.starts_with("flag set: slot") && m.contains("payload")),
            "{v:#?}"
        );
    }

    #[test]
    fn a_stage_without_flag_write_back_is_caught_by_the_commit_record() {
        let v = workload(Some(DroppedFlush::StageFlag));
        assert!(
            v.iter()
                .any(|m| m.starts_with("commit record seq") && m.contains("flag")),
            "{v:#?}"
        );
    }

    #[test]
    fn an_abort_without_flag_write_back_is_caught_by_the_next_commit() {
        let v = workload(Some(DroppedFlush::AbortFlag));
        // The aborted transaction is the third: epoch 3.
        assert!(
            v.iter()
                .any(|m| m.contains("(epoch 3) flag") && m.contains("stored, never written back")),
            "{v:#?}"
        );
    }

    #[test]
    fn a_commit_record_without_write_back_is_caught_when_commit_returns() {
        let v = workload(Some(DroppedFlush::Record));
        assert!(
            v.iter()
                .any(|m| m.starts_with("commit returned") && m.contains("the record")),
            "{v:#?}"
        );
    }

    #[test]
    fn a_fence_orders_only_its_own_threads_write_backs() {
        let r = Arc::new(FlushCheck::recording(CrashRegion::new(4096)));
        r.write(128, &[5u8; 64]);
        {
            let mut sh = r.shadow.lock();
            sh.flush(128, 64);
        }
        // Another thread's fence does not complete this thread's clwb.
        let r2 = r.clone();
        std::thread::spawn(move || r2.shadow.lock().fence())
            .join()
            .unwrap();
        assert!(r.shadow.lock().not_durable(128, 64, "x").is_some());
        r.shadow.lock().fence();
        assert!(r.shadow.lock().not_durable(128, 64, "x").is_none());
        // A store after the write-back makes the line dirty again.
        r.write(136, &[6u8; 8]);
        let msg = r.shadow.lock().not_durable(128, 64, "x").unwrap();
        assert!(msg.contains("stored, never written back"), "{msg}");
    }

    /// A region in msync mode: flushes make nothing durable, only sync.
    struct Msync(CrashRegion);

    impl Persist for Msync {
        fn len(&self) -> usize {
            self.0.len()
        }
        fn mode(&self) -> RegionMode {
            RegionMode::Msync
        }
        fn write(&self, offset: usize, data: &[u8]) {
            self.0.write(offset, data)
        }
        fn read(&self, offset: usize, buf: &mut [u8]) {
            self.0.read(offset, buf)
        }
        fn persist_ranges(&self, ranges: &[(usize, usize)]) {
            self.0.persist_ranges(ranges)
        }
        fn sync(&self) -> Result<(), RegionError> {
            Ok(())
        }
    }

    #[test]
    fn in_msync_mode_only_sync_makes_stores_durable() {
        let r = FlushCheck::recording(Msync(CrashRegion::new(4096)));
        r.write(0, &[1u8; 64]);
        r.persist(0, 64);
        assert!(r.shadow.lock().not_durable(0, 64, "x").is_some());
        r.sync().unwrap();
        assert!(r.shadow.lock().not_durable(0, 64, "x").is_none());
    }

    #[test]
    fn the_msync_journal_passes_the_flush_check() {
        let region = Arc::new(FlushCheck::recording(Msync(CrashRegion::new(1 << 20))));
        let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(BS as u32, 64).unwrap());
        let j = Journal::create(region.clone(), dev, JournalConfig::partitioned(2)).unwrap();
        for i in 0..20u64 {
            let mut tx = j.begin();
            tx.write(i, &[i as u8; BS]).unwrap();
            tx.finish().unwrap();
            j.commit().unwrap();
        }
        j.close().unwrap();
        drop(j);
        assert_eq!(region.violations(), Vec::<String>::new());
    }

    /// A version-2 journal (created before digest records) on a disk file
    /// keeps its two syncs per commit: each record is stored only after
    /// what it commits is durable, and carries no digest.
    #[test]
    fn a_version_2_msync_journal_orders_its_records_after_a_sync() {
        let media = CrashRegion::new(1 << 20);
        let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(BS as u32, 64).unwrap());
        let j = Journal::create(
            Msync(media.clone()),
            dev.clone(),
            JournalConfig::partitioned(2),
        )
        .unwrap();
        j.close().unwrap();
        drop(j);
        let mut sb = vec![0u8; SB_SIZE];
        media.read(0, &mut sb);
        let geo = Geometry::decode(&sb, 1 << 20).unwrap();
        let v2 = Geometry { version: 2, ..geo };
        media.write(0, &v2.encode());
        let region = Arc::new(FlushCheck::recording(Msync(media.clone())));
        let (j, _) = Journal::open(region.clone(), dev, JournalConfig::partitioned(2)).unwrap();
        assert_eq!(j.geometry().version, 2);
        for i in 0..20u64 {
            let mut tx = j.begin();
            tx.write(i, &[i as u8; BS]).unwrap();
            tx.finish().unwrap();
            j.commit().unwrap();
        }
        let mut rec = vec![0u8; v2.record_size as usize];
        let newest = (0..u64::from(v2.record_count))
            .filter_map(|i| {
                media.read(v2.record_offset(i), &mut rec);
                Record::decode(&rec, v2.partitions)
            })
            .max_by_key(|r| r.seq)
            .unwrap();
        assert_eq!(newest.kind, RecordKind::Commit);
        assert_eq!(newest.digest, None);
        j.close().unwrap();
        drop(j);
        assert_eq!(region.violations(), Vec::<String>::new());
    }
}
