//! The journal: its configuration, the public API, and the state all
//! parts share. The parts, one module each: `partition` (a ring's DRAM
//! state and index), `stage` (transactions, staging, backpressure, reads),
//! `commit` (group commit and the commit workers), `checkpoint`
//! (checkpoint rounds) and `trigger` (background commit + checkpoint).

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam::utils::Backoff;
use parking_lot::Mutex;
use ptsd_blockdev::BlockDevice;

use crate::error::{Failure, JournalError, JournalFormatError};
use crate::layout::{Geometry, Record, RecordKind, SB_SIZE, SLOT_HEADER};
use crate::protocol::CachePadded;
use crate::region::{Persist, RegionMode};
use ptsd_blockdev::CrcShift;

mod checkpoint;
mod commit;
mod partition;
mod stage;
mod trigger;

use checkpoint::Checkpointing;
pub(crate) use commit::write_record;
use commit::Committing;
use partition::Partition;
pub use stage::Tx;
use stage::{Space, Staging};
use trigger::Trigger;

type Result<T> = std::result::Result<T, JournalError>;

/// Which journal design runs behind the common API.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JournalKind {
    /// The paper's design: N rings, lock-free staging, one commit worker and
    /// one checkpoint thread per partition.
    Partitioned,
    /// The JBD2/JFS-like baseline: every stage, finish and commit snapshot
    /// takes one journal-wide mutex, held across the whole stage (claim,
    /// crc, copy, flush, flag). Use with `partitions: 1`.
    SingleLock,
    /// A well-built lock design: one ring and one journal-wide mutex, held
    /// only to claim space, update the index and take the commit snapshot;
    /// crc, copy, flush and flag happen outside it, so stagers copy in
    /// parallel. The fair baseline for the partitioned design. Use with
    /// `partitions: 1`.
    ShortLock,
}

impl JournalKind {
    /// True for the baselines that serialise on one journal-wide mutex.
    fn has_global_lock(self) -> bool {
        matches!(self, JournalKind::SingleLock | JournalKind::ShortLock)
    }
}

/// How to build or open a journal.
#[derive(Clone, Debug)]
pub struct JournalConfig {
    /// Partitioned (the paper) or the single-lock baseline.
    pub kind: JournalKind,
    /// Number of partitions (rings) when creating; `open` uses the count on
    /// the media.
    pub partitions: u32,
    /// Journal block size; must equal the device's block size.
    pub block_size: u32,
    /// Commit records in the commit area (at least 2).
    pub commit_records: u32,
    /// Start a background commit + checkpoint when a ring is this full (0..1).
    /// Above 0.75, [`Journal::begin`] commits and checkpoints itself when
    /// it finds a ring over 3/4 full.
    pub checkpoint_fill: f64,
    /// Also commit + checkpoint in the background this often (None: only by
    /// fill level, backpressure and explicit calls).
    pub checkpoint_interval: Option<Duration>,
    /// Blocks per device `write_batch` during checkpoints.
    pub checkpoint_batch: usize,
}

impl Default for JournalConfig {
    fn default() -> Self {
        Self {
            kind: JournalKind::Partitioned,
            partitions: 4,
            block_size: 4096,
            commit_records: 16,
            checkpoint_fill: 0.5,
            checkpoint_interval: Some(Duration::from_secs(1)),
            checkpoint_batch: 64,
        }
    }
}

impl JournalConfig {
    /// The partitioned journal with `partitions` rings.
    pub fn partitioned(partitions: u32) -> Self {
        Self {
            partitions,
            ..Self::default()
        }
    }

    /// The single-lock baseline (one ring, one mutex, one checkpointer).
    pub fn single_lock() -> Self {
        Self {
            kind: JournalKind::SingleLock,
            partitions: 1,
            ..Self::default()
        }
    }

    /// The short-lock baseline (one ring, one mutex held only to claim,
    /// index and snapshot; one checkpointer).
    pub fn short_lock() -> Self {
        Self {
            kind: JournalKind::ShortLock,
            partitions: 1,
            ..Self::default()
        }
    }
}

/// Identifies a finished transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TxId(pub u64);

/// Counters describing what the journal has done.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JournalStats {
    /// Blocks staged into rings (ring slots claimed, less those given up
    /// with [`JournalError::Full`] or a closed journal).
    pub staged_blocks: u64,
    /// Transactions finished.
    pub finished_txs: u64,
    /// Transactions aborted (dropped unfinished).
    pub aborted_txs: u64,
    /// Commit records written.
    pub commits: u64,
    /// `commit()` calls satisfied by another caller's commit or with
    /// nothing to commit (group commit).
    pub shared_commits: u64,
    /// Checkpoint rounds completed.
    pub checkpoints: u64,
    /// Blocks written to the device by checkpoints.
    pub checkpointed_blocks: u64,
    /// Stages that had to wait for ring space.
    pub backpressure_waits: u64,
    /// Reads served from the journal.
    pub journal_reads: u64,
    /// Reads served from the device.
    pub device_reads: u64,
}

/// What recovery found when a journal was opened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecoveryReport {
    /// The last record was a clean close.
    pub clean: bool,
    /// Sequence number of the newest valid commit-area record.
    pub record_seq: u64,
    /// Every transaction of an epoch up to this one was committed, except
    /// those still open at that commit.
    pub committed_epoch: u64,
    /// Committed slots found (all versions).
    pub committed_slots: u64,
    /// Blocks written to the device (newest version of each).
    pub replayed_blocks: u64,
    /// Slots in the committed range that were discarded: torn (bad crc or
    /// header), aborted, or of a later or excluded (uncommitted) epoch.
    pub discarded_slots: u64,
    /// The newest commit record reached the media but not every slot it
    /// commits (a journal on a disk file, cut off during its sync): its
    /// commit was never acknowledged, and recovery used the record before.
    pub torn_commit: bool,
}

const RUNNING: u8 = 0;
const CLOSED: u8 = 1;
const FAILED: u8 = 2;

pub(crate) struct Inner {
    // Read by every stage and written only at start-up and shutdown: Rust
    // packs these together, and every field written while the journal runs
    // (in the groups below) has cache lines of its own (`CachePadded`), so a
    // stage misses no line on these.
    region: Box<dyn Persist>,
    device: Arc<dyn BlockDevice>,
    geo: Geometry,
    kind: JournalKind,
    cfg: JournalConfig,
    parts: Vec<Partition>,
    fill_threshold: u64,
    /// Combines a slot header's crc with its payload's (block-sized).
    slot_crc: Box<CrcShift>,
    status: AtomicU8,
    shutdown: AtomicBool,

    /// Transactions: epochs, the baselines' lock, stage counters.
    stage: Staging,
    /// Backpressure: stagers waiting for ring space.
    space: Space,
    /// The durable state and group commit.
    committing: Committing,
    /// Checkpoint rounds.
    ckpt: Checkpointing,
    /// The background trigger's wake-ups.
    trigger: Trigger,
    failure: CachePadded<Mutex<Option<Arc<Failure>>>>,
}

/// A lock-free partitioned journal on persistent memory (or the
/// single-lock or short-lock baseline, see [`JournalKind`]).
///
/// ```
/// use std::sync::Arc;
/// use ptsd_blockdev::{BlockDevice, MemDevice};
/// use ptsd_nvjournal::{CrashRegion, Journal, JournalConfig};
///
/// let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(4096, 64).unwrap());
/// let region = CrashRegion::new(1 << 20);
/// let journal = Journal::create(region.clone(), dev.clone(), JournalConfig::partitioned(2)).unwrap();
/// let mut tx = journal.begin();
/// tx.write(5, &[9u8; 4096]).unwrap();
/// tx.write(6, &[8u8; 4096]).unwrap();
/// tx.finish().unwrap();
/// journal.commit().unwrap();            // durable: both blocks or neither
/// let mut buf = vec![0u8; 4096];
/// journal.read(5, &mut buf).unwrap();   // served from the journal
/// assert_eq!(buf, vec![9u8; 4096]);
/// journal.close().unwrap();             // checkpoint everything, mark clean
/// dev.read(6, &mut buf).unwrap();
/// assert_eq!(buf, vec![8u8; 4096]);
/// let (_j, report) = Journal::open(region, dev, JournalConfig::partitioned(2)).unwrap();
/// assert!(report.clean);
/// ```
pub struct Journal {
    inner: Arc<Inner>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Journal {
    /// Format `region` as an empty journal for `device` and start it.
    pub fn create(
        region: impl Persist + 'static,
        device: Arc<dyn BlockDevice>,
        cfg: JournalConfig,
    ) -> Result<Arc<Self>> {
        check_config(&cfg, device.as_ref())?;
        let region = crate::flushcheck::wrap_from_env(Box::new(region));
        let geo = Geometry::plan(
            region.len() as u64,
            cfg.partitions,
            cfg.block_size,
            cfg.commit_records,
            device.num_blocks(),
            device.block_size(),
        )?;
        // Invalidate every slot header and record first, so nothing left in
        // the file from an earlier journal can ever look valid.
        let zero_header = [0u8; SLOT_HEADER];
        let mut ranges = Vec::new();
        for p in 0..geo.partitions as usize {
            for s in 0..geo.slots {
                let off = geo.slot_offset(p, s);
                region.write(off, &zero_header);
                ranges.push((off, SLOT_HEADER));
            }
        }
        let area = vec![0u8; (geo.record_size * u64::from(geo.record_count)) as usize];
        region.write(geo.commit_offset as usize, &area);
        ranges.push((geo.commit_offset as usize, area.len()));
        region.persist_ranges(&ranges);
        region.write(0, &geo.encode());
        region.persist(0, SB_SIZE);
        // The first record must not reach the media before the superblock
        // and the wiped slots (under msync, one msync orders nothing).
        region.sync()?;
        let n = geo.partitions as usize;
        let rec = Record {
            kind: RecordKind::Format,
            seq: 1,
            epoch: 0,
            excluded: Vec::new(),
            heads: vec![0; n],
            tails: vec![0; n],
            digest: None,
        };
        write_record(region.as_ref(), &geo, &rec);
        region.sync()?;
        tracing::info!(mode = %region.mode(), partitions = n, slots = geo.slots, "journal created");
        Self::start(region, device, geo, cfg, &rec)
    }

    /// Open an existing journal: validate the superblock, replay exactly the
    /// committed transactions to `device`, discard the rest, and start.
    /// The partition count and block size come from the media.
    pub fn open(
        region: impl Persist + 'static,
        device: Arc<dyn BlockDevice>,
        cfg: JournalConfig,
    ) -> Result<(Arc<Self>, RecoveryReport)> {
        let region = crate::flushcheck::wrap_from_env(Box::new(region));
        if region.len() < SB_SIZE {
            return Err(JournalFormatError::Truncated.into());
        }
        let mut sb = vec![0u8; SB_SIZE];
        region.read(0, &mut sb);
        let geo = Geometry::decode(&sb, region.len() as u64)?;
        if geo.device_blocks != device.num_blocks() || geo.device_block_size != device.block_size()
        {
            return Err(JournalError::ForeignDevice {
                expected_blocks: geo.device_blocks,
                expected_block_size: geo.device_block_size,
                blocks: device.num_blocks(),
                block_size: device.block_size(),
            });
        }
        let cfg = JournalConfig {
            partitions: geo.partitions,
            block_size: geo.block_size,
            commit_records: geo.record_count,
            ..cfg
        };
        check_config(&cfg, device.as_ref())?;
        let (rec, report) = crate::recovery::recover(region.as_ref(), device.as_ref(), &geo)?;
        tracing::info!(?report, mode = %region.mode(), "journal recovered");
        Ok((Self::start(region, device, geo, cfg, &rec)?, report))
    }

    fn start(
        region: Box<dyn Persist>,
        device: Arc<dyn BlockDevice>,
        geo: Geometry,
        cfg: JournalConfig,
        rec: &Record,
    ) -> Result<Arc<Self>> {
        let n = geo.partitions as usize;
        let parts = (0..n)
            .map(|p| Partition::new(geo.slots, rec.tails[p].max(rec.heads[p])))
            .collect();
        let fill_threshold =
            ((geo.slots as f64 * cfg.checkpoint_fill.clamp(0.05, 1.0)) as u64).clamp(1, geo.slots);
        let inner = Arc::new(Inner {
            region,
            device,
            kind: cfg.kind,
            parts,
            fill_threshold,
            slot_crc: Box::new(CrcShift::new(geo.block_size as usize)),
            status: AtomicU8::new(RUNNING),
            shutdown: AtomicBool::new(false),
            stage: Staging::new(cfg.kind, rec.epoch + 1),
            space: Space::default(),
            committing: Committing::new(rec),
            ckpt: Checkpointing::default(),
            trigger: Trigger::new(),
            failure: CachePadded::new(Mutex::new(None)),
            geo,
            cfg,
        });
        let journal = Self {
            inner: inner.clone(),
            threads: Mutex::new(Vec::new()),
        };
        // If the OS refuses a thread, dropping `journal` stops the ones
        // already started.
        for p in 0..n {
            let i = inner.clone();
            journal.add_thread(format!("nvj-commit-{p}"), move || i.commit_worker(p))?;
            let i = inner.clone();
            journal.add_thread(format!("nvj-ckpt-{p}"), move || i.checkpoint_worker(p))?;
        }
        let i = inner;
        journal.add_thread("nvj-trigger".into(), move || i.trigger_worker())?;
        Ok(Arc::new(journal))
    }

    /// Start a transaction.
    ///
    /// If a ring is more than three quarters full, this first waits for
    /// the background commit + checkpoint to make room (like JBD2's handle
    /// reservation), so that transactions rarely meet a full ring. A thread
    /// must not begin a second transaction while it holds one open.
    pub fn begin(&self) -> Tx<'_> {
        let inner: &Inner = &self.inner;
        inner.wait_below_high_water();
        let epoch = inner.stage.epochs.begin();
        inner.wait_epoch_room(epoch);
        Tx {
            inner,
            txid: epoch,
            epoch,
            slots: take_scratch(&stage::TX_SLOTS),
            done: false,
        }
    }

    /// Make every transaction finished before this call durable. Concurrent
    /// callers share one commit (group commit).
    pub fn commit(&self) -> Result<()> {
        self.inner.commit()?;
        self.inner.region.check_durable();
        Ok(())
    }

    /// Read the newest finished version of `block`: from the journal while
    /// it is there, else from the device.
    pub fn read(&self, block: u64, buf: &mut [u8]) -> Result<()> {
        self.inner.read(block, buf)
    }

    /// Write blocks straight to their home location on the device,
    /// outside any transaction (ordered-mode file data, as ext4's
    /// `data=ordered`). Every commit record written after this returns is
    /// preceded by a device flush, so a transaction that refers to these
    /// blocks and finishes after this call is never durable before they
    /// are. The caller must own the blocks (no finished transaction may
    /// refer to them, and [`holds`](Self::holds) must say no: a journaled
    /// version would be checkpointed over them).
    pub fn write_ordered(&self, writes: Vec<(u64, Vec<u8>)>) -> Result<()> {
        self.inner.check_running()?;
        self.inner.device.write_batch_owned(writes)?;
        self.inner
            .committing
            .ordered_gen
            .fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    /// Whether a finished transaction's version of `block` is still in the
    /// journal (not yet checkpointed). When this says no, every version the
    /// journal ever held is home, the device flushed and the ring's durable
    /// tail past it (a checkpoint drops a block from the index only then),
    /// so recovery never replays an old version over a write made straight
    /// to the device afterwards — which is what ordered-mode data relies on.
    pub fn holds(&self, block: u64) -> bool {
        let part = &self.inner.parts[self.inner.partition_of(block)];
        let held = part.index(block).read().contains_key(&block);
        held
    }

    /// Commit, then checkpoint every committed block to the device and wait
    /// for it (device flushed, ring space freed).
    pub fn checkpoint(&self) -> Result<()> {
        self.inner.commit()?;
        self.inner.checkpoint_and_wait()
    }

    /// Checkpoint everything, write a clean-close record and stop the
    /// background threads. Later operations return [`JournalError::Closed`].
    pub fn close(&self) -> Result<()> {
        let res = self.checkpoint();
        if res.is_ok() {
            let inner = &self.inner;
            let mut d = inner.committing.durable.lock();
            let clean = inner
                .parts
                .iter()
                .zip(&d.rec.heads)
                .all(|(p, &h)| p.tail.load(Ordering::Acquire) >= h);
            if clean {
                d.rec.tails = d.rec.heads.clone();
                d.write(RecordKind::Clean, None, inner.region.as_ref(), &inner.geo);
                inner.region.sync()?;
                inner.region.check_durable();
            }
        }
        let _ =
            self.inner
                .status
                .compare_exchange(RUNNING, CLOSED, Ordering::SeqCst, Ordering::SeqCst);
        self.stop_threads();
        res
    }

    /// Counters.
    pub fn stats(&self) -> JournalStats {
        let i = &self.inner;
        JournalStats {
            // Counted from the ring heads rather than per stage (a shared
            // counter would bounce between the stagers' cores).
            staged_blocks: i
                .parts
                .iter()
                .map(|p| p.ring.head.load(Ordering::Relaxed) - p.start)
                .sum::<u64>()
                .saturating_sub(i.stage.abandoned.load(Ordering::Relaxed)),
            finished_txs: i.stage.epochs.finished(),
            aborted_txs: i.stage.aborted.load(Ordering::Relaxed),
            commits: i.committing.durable.lock().commits,
            shared_commits: i.committing.shared.load(Ordering::Relaxed),
            checkpoints: i.ckpt.rounds.load(Ordering::Relaxed),
            checkpointed_blocks: i.ckpt.blocks.load(Ordering::Relaxed),
            backpressure_waits: i.space.waits.load(Ordering::Relaxed),
            journal_reads: i
                .parts
                .iter()
                .map(|p| p.journal_reads.load(Ordering::Relaxed))
                .sum(),
            device_reads: i.stage.device_reads.load(Ordering::Relaxed),
        }
    }

    /// How the region makes stores durable.
    pub fn mode(&self) -> RegionMode {
        self.inner.region.mode()
    }

    /// Partitioned, single-lock or short-lock.
    pub fn kind(&self) -> JournalKind {
        self.inner.kind
    }

    /// The on-media geometry.
    pub fn geometry(&self) -> &Geometry {
        &self.inner.geo
    }

    /// Journal block size in bytes.
    pub fn block_size(&self) -> u32 {
        self.inner.geo.block_size
    }

    /// The home device.
    pub fn device(&self) -> &Arc<dyn BlockDevice> {
        &self.inner.device
    }

    fn stop_threads(&self) {
        let inner = &self.inner;
        inner.shutdown.store(true, Ordering::SeqCst);
        {
            let mut c = inner.ckpt.state.lock();
            c.shutdown = true;
            inner.ckpt.cv.notify_all();
            inner.ckpt.done_cv.notify_all();
        }
        let _ = inner.trigger.tx.try_send(());
        {
            let _s = inner.space.lock.lock();
            inner.space.cv.notify_all();
        }
        for t in self.threads.lock().drain(..) {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

impl Drop for Journal {
    fn drop(&mut self) {
        self.stop_threads();
    }
}

impl Journal {
    fn add_thread(&self, name: String, f: impl FnOnce() + Send + 'static) -> Result<()> {
        let handle = std::thread::Builder::new()
            .name(name.clone())
            .spawn(f)
            .map_err(|source| JournalError::Spawn { name, source })?;
        self.threads.lock().push(handle);
        Ok(())
    }
}

fn check_config(cfg: &JournalConfig, device: &dyn BlockDevice) -> Result<()> {
    if cfg.block_size != device.block_size() {
        return Err(JournalError::Config(format!(
            "journal block size {} differs from the device's {}",
            cfg.block_size,
            device.block_size()
        )));
    }
    if cfg.kind.has_global_lock() && cfg.partitions != 1 {
        return Err(JournalError::Config(format!(
            "the {:?} journal has exactly 1 partition",
            cfg.kind
        )));
    }
    if cfg.checkpoint_batch == 0 {
        return Err(JournalError::Config(
            "checkpoint_batch must be at least 1".into(),
        ));
    }
    Ok(())
}

/// A flush the protocol needs, dropped on purpose by a unit test to show
/// that the flush checker notices (see `flushcheck`'s tests).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DroppedFlush {
    /// A stage writes header and payload without write-back.
    StagePayload,
    /// A stage sets the flag without write-back.
    StageFlag,
    /// An abort sets the flags without write-back.
    AbortFlag,
    /// A commit record is written without write-back.
    Record,
}

#[cfg(test)]
thread_local! {
    /// The mutant active on this thread (unit tests only).
    pub(crate) static MUTANT: Cell<Option<DroppedFlush>> = const { Cell::new(None) };
}

/// True if a unit test dropped this flush on this thread; constant false
/// outside `cfg(test)`.
#[inline(always)]
fn mutated(m: DroppedFlush) -> bool {
    #[cfg(test)]
    return MUTANT.with(|a| a.get() == Some(m));
    #[cfg(not(test))]
    {
        let _ = m;
        false
    }
}

/// Take a thread's scratch list (a fresh one if the thread is exiting and
/// its thread-locals are gone).
fn take_scratch<T: 'static>(key: &'static std::thread::LocalKey<Cell<Vec<T>>>) -> Vec<T> {
    key.try_with(Cell::take).unwrap_or_default()
}

/// Give a scratch list back, emptied, for the thread's next use.
fn keep_scratch<T: 'static>(key: &'static std::thread::LocalKey<Cell<Vec<T>>>, mut v: Vec<T>) {
    v.clear();
    let _ = key.try_with(|c| c.set(v));
}

impl Inner {
    fn check_running(&self) -> Result<()> {
        match self.status.load(Ordering::Acquire) {
            RUNNING => Ok(()),
            CLOSED => Err(JournalError::Closed),
            _ => Err(JournalError::Failed(
                self.failure
                    .lock()
                    .clone()
                    .expect("a failed journal records its failure"),
            )),
        }
    }

    /// Stop the journal: every later operation fails with the first cause.
    fn fail(&self, why: Failure) -> JournalError {
        let mut chain = why.to_string();
        let mut cause = std::error::Error::source(&why);
        while let Some(c) = cause {
            chain += &format!(": {c}");
            cause = c.source();
        }
        tracing::error!(why = %chain, "journal failed");
        let why = {
            let mut f = self.failure.lock();
            // The failure is recorded before the status says FAILED, so
            // `check_running` always finds one.
            f.get_or_insert_with(|| Arc::new(why)).clone()
        };
        self.status.store(FAILED, Ordering::Release);
        let _s = self.space.lock.lock();
        self.space.cv.notify_all();
        JournalError::Failed(why)
    }

    fn check_buf(&self, block: u64, len: usize) -> Result<()> {
        if len != self.geo.block_size as usize {
            return Err(JournalError::BadLength {
                len,
                block_size: self.geo.block_size,
            });
        }
        if block >= self.geo.device_blocks {
            return Err(JournalError::BlockOutOfRange {
                block,
                num_blocks: self.geo.device_blocks,
            });
        }
        Ok(())
    }

    /// The partition of `block` (`block % partitions`, a mask when the
    /// count is a power of two: no division on the stage path).
    #[inline]
    fn partition_of(&self, block: u64) -> usize {
        let n = u64::from(self.geo.partitions);
        if n.is_power_of_two() {
            (block & (n - 1)) as usize
        } else {
            (block % n) as usize
        }
    }
}

/// Start fetching `x`'s cache line for writing (`prefetchw`), so that a
/// write to it a little later does not stall on the transfer from another
/// core. Only a hint: it changes no memory.
#[inline]
fn prefetch_write<T>(x: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `prefetchw` reads nothing into registers and writes no memory
    // (it only moves the line into this core's cache, exclusive); the
    // address is that of a live reference. CPUs without PRFCHW execute the
    // encoding as a no-op.
    unsafe {
        std::arch::asm!(
            "prefetchw [{0}]",
            in(reg) x as *const T,
            options(nostack, preserves_flags, readonly)
        );
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = x;
}

/// Take a lock that is held for about a microsecond at a time (the
/// baseline's journal lock, the durable-state lock): spin and then yield
/// with crossbeam's exponential [`Backoff`] before sleeping in the kernel,
/// as a kernel spinlock would; parking at once would make every hand-off
/// pay a futex wake-up, which is many times the critical section (a lock
/// convoy).
fn lock_spinning<T>(m: &Mutex<T>) -> parking_lot::MutexGuard<'_, T> {
    let backoff = Backoff::new();
    loop {
        if let Some(g) = m.try_lock() {
            return g;
        }
        if backoff.is_completed() {
            return m.lock();
        }
        backoff.snooze();
    }
}
