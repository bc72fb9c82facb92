// Over 800 lines: the split into stage, commit, checkpoint and trigger modules is still open.
//! The journal: staging, transactions, group commit, reads, and the
//! background threads (commit workers, checkpointers, trigger).

use rustc_hash::FxHashMap as HashMap;
use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam::channel::{Receiver, RecvTimeoutError, Sender};
use crossbeam::utils::Backoff;
use parking_lot::{Condvar, Mutex, RwLock};
use ptsd_blockdev::BlockDevice;

use crate::error::{Failure, FormatError, JournalError};
use crate::layout::{
    Geometry, Record, RecordKind, SlotHeader, FLAG_ABORTED, FLAG_AT, FLAG_STAGED, MAX_EXCLUDED,
    SB_SIZE, SLOT_HEADER,
};
use crate::protocol::{self, CachePadded, Cover, Epochs, Ring};
use crate::region::{Persist, RegionMode};

type Result<T> = std::result::Result<T, JournalError>;

/// How long an idle commit worker sleeps before it looks again. A commit
/// advances every partition's check itself when the worker is behind, so
/// this bounds only the background work, not commit latency; a short nap
/// (it was 1 ms) cost four wake-ups per millisecond, a tenth of the file
/// system's CPU time on a busy 2-CPU machine, for nothing a commit needs.
const COMMIT_WORKER_NAP: Duration = Duration::from_millis(10);
/// A commit worker that passed at least this many slots in one step naps a
/// tenth of [`COMMIT_WORKER_NAP`]: committers are not keeping up with it.
const COMMIT_WORKER_BUSY: u64 = 256;

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
}

/// Entries in the ring of per-epoch done marks: at most this many
/// transactions can begin past the oldest unfinished one.
const EPOCH_RING: usize = 1 << 12;

/// DRAM state of one ring.
struct Partition {
    /// Head, `last_check` and per-slot states (the lock-free part).
    ring: Ring,
    /// Every position below this is checkpointed and free.
    tail: CachePadded<AtomicU64>,
    /// Ring position this partition started at (for the stats).
    start: u64,
    journal_reads: CachePadded<AtomicU64>,
    /// Newest finished version of each block in this ring: block -> pos,
    /// in [`INDEX_SHARDS`] shards (see [`Partition::index`]).
    index: Box<[CachePadded<IndexShard>]>,
    /// Positions claimed past the ring's capacity by stages that gave up
    /// (`JournalError::Full`); marked aborted once the ring has room.
    holes: Mutex<Vec<u64>>,
    /// Checkpoint result of the current round: new tail, (block, pos) written.
    ckpt_result: Mutex<(u64, Vec<(u64, u64)>)>,
}

impl Partition {
    fn new(slots: u64, start: u64) -> Self {
        Self {
            ring: Ring::new(slots, start),
            tail: CachePadded::new(AtomicU64::new(start)),
            start,
            journal_reads: CachePadded::default(),
            index: (0..INDEX_SHARDS)
                .map(|_| CachePadded::new(RwLock::new(HashMap::default())))
                .collect(),
            holes: Mutex::new(Vec::new()),
            ckpt_result: Mutex::new((start, Vec::new())),
        }
    }

    /// The index shard holding `block`. Threads finishing transactions
    /// update the index of every partition they staged into; with one map
    /// per partition each update would take a lock line and hash buckets
    /// the other cores just wrote. Shards make that rare.
    fn index(&self, block: u64) -> &IndexShard {
        &self.index[index_shard(block)]
    }
}

/// Part of a partition's index: block -> ring position.
type IndexShard = RwLock<HashMap<u64, u64>>;

/// Index shards per partition: `1 << INDEX_SHARD_BITS`.
const INDEX_SHARD_BITS: u32 = 4;
const INDEX_SHARDS: usize = 1 << INDEX_SHARD_BITS;

fn index_shard(block: u64) -> usize {
    // Fibonacci hashing: consecutive blocks of a partition (a stride of
    // the partition count apart) spread over the shards.
    (block.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - INDEX_SHARD_BITS)) as usize
}

thread_local! {
    /// A commit's scratch lists (heads snapshot, excluded epochs), kept per
    /// thread between commits: a commit per transaction allocates nothing.
    static COMMIT_HEADS: Cell<Vec<u64>> = const { Cell::new(Vec::new()) };
    static COMMIT_EXCLUDED: Cell<Vec<u64>> = const { Cell::new(Vec::new()) };
    /// A finished transaction's slot list, handed to the thread's next one.
    static TX_SLOTS: Cell<Vec<(u32, u64, u64)>> = const { Cell::new(Vec::new()) };
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

/// The durable state most recently written to the commit area.
struct Durable {
    rec: Record,
    /// Commit records written (a plain field: it changes only under this
    /// lock, so counting costs no cache line of its own).
    commits: u64,
}

impl Durable {
    /// Write the current state as a record of `kind` (with the next
    /// sequence number) and make it durable.
    fn write(&mut self, kind: RecordKind, region: &dyn Persist, geo: &Geometry) {
        self.rec.seq += 1;
        self.rec.kind = kind;
        write_record(region, geo, &self.rec);
    }
}

#[derive(Clone)]
struct CkptTarget {
    epoch: u64,
    excluded: Vec<u64>,
    heads: Vec<u64>,
}

impl CkptTarget {
    /// True if the slots of `epoch` are committed by this target.
    fn covers(&self, epoch: u64) -> bool {
        epoch <= self.epoch && !self.excluded.contains(&epoch)
    }
}

#[derive(Default)]
struct CkptState {
    /// Rounds started.
    round: u64,
    /// Rounds finished.
    completed: u64,
    running: bool,
    pending: bool,
    target: Option<CkptTarget>,
    shutdown: bool,
}

const RUNNING: u8 = 0;
const CLOSED: u8 = 1;
const FAILED: u8 = 2;

pub(crate) struct Inner {
    region: Box<dyn Persist>,
    device: Arc<dyn BlockDevice>,
    geo: Geometry,
    kind: JournalKind,
    cfg: JournalConfig,
    parts: Vec<Partition>,
    fill_threshold: u64,

    /// One epoch per transaction: numbers, done marks, finished count.
    epochs: Epochs,
    aborted: CachePadded<AtomicU64>,

    // Every field written after start-up gets cache lines of its own
    // (`CachePadded`), so the read-mostly fields every stage reads (`geo`,
    // `parts`, `status`, `shutdown`...) share lines with nothing that
    // changes: a stage then misses no line on them. Rust packs the
    // unpadded fields together.
    /// The baseline's journal-wide lock (None when partitioned).
    global_lock: CachePadded<Option<Mutex<()>>>,
    durable: CachePadded<Mutex<Durable>>,
    shared_commits: CachePadded<AtomicU64>,

    ckpt: CachePadded<Mutex<CkptState>>,
    ckpt_cv: CachePadded<Condvar>,
    ckpt_done_cv: CachePadded<Condvar>,
    ckpt_arrived: CachePadded<AtomicUsize>,
    checkpoints: CachePadded<AtomicU64>,
    checkpointed_blocks: CachePadded<AtomicU64>,
    backpressure_waits: CachePadded<AtomicU64>,
    /// Ring positions claimed and then given up (see `abandon`).
    abandoned: CachePadded<AtomicU64>,
    /// Some ring passed the high-water mark (a hint for `begin`).
    high_water: CachePadded<AtomicBool>,
    device_reads: CachePadded<AtomicU64>,

    space_lock: CachePadded<Mutex<()>>,
    space_cv: CachePadded<Condvar>,

    /// Wakes the trigger thread: a kick is a message, at most one pending
    /// (kicks while one waits coalesce).
    trigger_tx: Sender<()>,
    trigger_rx: Receiver<()>,
    trigger_kicked: CachePadded<AtomicBool>,

    status: AtomicU8,
    failure: CachePadded<Mutex<Option<Arc<Failure>>>>,
    shutdown: AtomicBool,
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

/// A transaction: blocks staged with [`write`](Tx::write) commit together
/// or not at all. Dropping it without [`finish`](Tx::finish) aborts it.
///
/// A commit covers finished transactions only: one called while this
/// transaction is open neither covers it nor waits for it. A thread must
/// not [`begin`](Journal::begin) another transaction while it holds this
/// one open (`begin` may wait for ring space this one pins).
pub struct Tx<'j> {
    /// Borrowed, not an `Arc`: a clone per transaction would write the
    /// Arc's count, one cache line every thread shares, twice per
    /// transaction.
    inner: &'j Inner,
    txid: u64,
    epoch: u64,
    slots: Vec<(u32, u64, u64)>,
    done: bool,
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
            return Err(FormatError::Truncated.into());
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
        let (trigger_tx, trigger_rx) = crossbeam::channel::bounded(1);
        let inner = Arc::new(Inner {
            region,
            device,
            kind: cfg.kind,
            parts,
            fill_threshold,
            epochs: Epochs::new(rec.epoch + 1, EPOCH_RING),
            aborted: CachePadded::default(),
            global_lock: CachePadded::new(cfg.kind.has_global_lock().then(|| Mutex::new(()))),
            durable: CachePadded::new(Mutex::new(Durable {
                rec: Record {
                    // Room for every list a commit can write: the record's
                    // Vecs are updated in place, never reallocated.
                    excluded: {
                        let mut e = Vec::with_capacity(MAX_EXCLUDED);
                        e.extend_from_slice(&rec.excluded);
                        e
                    },
                    ..rec.clone()
                },
                commits: 0,
            })),
            shared_commits: CachePadded::default(),
            ckpt: CachePadded::new(Mutex::new(CkptState::default())),
            ckpt_cv: CachePadded::new(Condvar::new()),
            ckpt_done_cv: CachePadded::new(Condvar::new()),
            ckpt_arrived: CachePadded::new(AtomicUsize::new(0)),
            checkpoints: CachePadded::new(AtomicU64::new(0)),
            checkpointed_blocks: CachePadded::new(AtomicU64::new(0)),
            backpressure_waits: CachePadded::new(AtomicU64::new(0)),
            abandoned: CachePadded::new(AtomicU64::new(0)),
            high_water: CachePadded::new(AtomicBool::new(false)),
            device_reads: CachePadded::default(),
            space_lock: CachePadded::new(Mutex::new(())),
            space_cv: CachePadded::new(Condvar::new()),
            trigger_tx,
            trigger_rx,
            trigger_kicked: CachePadded::new(AtomicBool::new(false)),
            status: AtomicU8::new(RUNNING),
            failure: CachePadded::new(Mutex::new(None)),
            shutdown: AtomicBool::new(false),
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
        let epoch = inner.epochs.begin();
        inner.wait_epoch_room(epoch);
        Tx {
            inner,
            txid: epoch,
            epoch,
            slots: take_scratch(&TX_SLOTS),
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
            let mut d = inner.durable.lock();
            let clean = inner
                .parts
                .iter()
                .zip(&d.rec.heads)
                .all(|(p, &h)| p.tail.load(Ordering::Acquire) >= h);
            if clean {
                d.rec.tails = d.rec.heads.clone();
                d.write(RecordKind::Clean, inner.region.as_ref(), &inner.geo);
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
                .saturating_sub(i.abandoned.load(Ordering::Relaxed)),
            finished_txs: i.epochs.finished(),
            aborted_txs: i.aborted.load(Ordering::Relaxed),
            commits: i.durable.lock().commits,
            shared_commits: i.shared_commits.load(Ordering::Relaxed),
            checkpoints: i.checkpoints.load(Ordering::Relaxed),
            checkpointed_blocks: i.checkpointed_blocks.load(Ordering::Relaxed),
            backpressure_waits: i.backpressure_waits.load(Ordering::Relaxed),
            journal_reads: i
                .parts
                .iter()
                .map(|p| p.journal_reads.load(Ordering::Relaxed))
                .sum(),
            device_reads: i.device_reads.load(Ordering::Relaxed),
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
            let mut c = inner.ckpt.lock();
            c.shutdown = true;
            inner.ckpt_cv.notify_all();
            inner.ckpt_done_cv.notify_all();
        }
        let _ = inner.trigger_tx.try_send(());
        {
            let _s = inner.space_lock.lock();
            inner.space_cv.notify_all();
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

/// Encode `rec`, write it to its place in the commit area and make it
/// durable.
///
/// Callers are the only writer of the commit area at the time: under the
/// durable-state lock, or before the journal's threads start (create,
/// recovery); nothing reads it while a journal runs.
pub(crate) fn write_record(region: &dyn Persist, geo: &Geometry, rec: &Record) {
    thread_local! {
        /// Encoding buffer, one per thread: reused, so a commit allocates
        /// nothing, and never written by another core, so encoding misses
        /// no cache line (a buffer in the shared durable state would be
        /// in the last committer's cache).
        static RECORD_BUF: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    }
    let off = geo.record_offset(rec.seq);
    let write = |buf: &mut Vec<u8>| {
        rec.encode_into(geo.record_size, buf);
        // Whole cache lines (records are line-aligned and sized; the bytes
        // past the crc are unused), so the copy can use non-temporal
        // stores: the lines need not be fetched from the core that wrote
        // the last record.
        buf.resize(
            buf.len().next_multiple_of(64).min(geo.record_size as usize),
            0,
        );
        if crate::bugs::active("commit_no_flush") && rec.kind == RecordKind::Commit {
            // Injected bug: the commit record is stored but never flushed.
            region.write(off, &buf[..]);
            return;
        }
        // SAFETY: see above: no other thread writes or reads the commit
        // area meanwhile.
        unsafe {
            if mutated(DroppedFlush::Record) {
                region.write_unshared(off, buf);
            } else {
                region.write_persist_unshared(off, &[&buf[..]]);
            }
        }
    };
    // A thread whose thread-locals are gone (exiting) uses a fresh buffer.
    if RECORD_BUF.try_with(|b| write(&mut b.borrow_mut())).is_err() {
        write(&mut Vec::new());
    }
}

impl Tx<'_> {
    /// Stage a full block now (lock-free in the partitioned journal): claim
    /// a slot with one atomic add, write header and payload, flush, then set
    /// and flush the slot's flag.
    pub fn write(&mut self, block: u64, data: &[u8]) -> Result<()> {
        let pos_part = self.inner.stage(block, data, self.txid, self.epoch)?;
        self.slots.push((pos_part.0, pos_part.1, block));
        Ok(())
    }

    /// Read `block` as this transaction sees it: its own newest write, else
    /// [`Journal::read`].
    pub fn read(&self, block: u64, buf: &mut [u8]) -> Result<()> {
        if let Some(&(p, pos, _)) = self.slots.iter().rev().find(|s| s.2 == block) {
            let inner = &self.inner;
            inner.check_buf(block, buf.len())?;
            let off = inner.geo.slot_offset(p as usize, pos) + SLOT_HEADER;
            // SAFETY: this transaction staged the slot (its writes happened
            // before, on this thread) and it is unfinished, so it is neither
            // checkpointed nor freed: nobody writes it.
            unsafe { inner.region.read_unshared(off, buf) };
            return Ok(());
        }
        self.inner.read(block, buf)
    }

    /// This transaction's id.
    pub fn id(&self) -> TxId {
        TxId(self.txid)
    }

    /// Blocks staged so far.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// True if nothing was staged.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// All blocks are staged: the transaction becomes visible to reads and
    /// part of the next commit.
    pub fn finish(mut self) -> Result<TxId> {
        self.done = true;
        let inner = self.inner;
        if let Err(e) = inner.check_running() {
            inner.abort(&self.slots, self.epoch);
            return Err(e);
        }
        {
            let _g = inner.global_lock.as_ref().map(lock_spinning);
            // One index lock per shard touched, not one per block.
            self.slots
                .sort_unstable_by_key(|&(p, pos, block)| (p, index_shard(block), pos));
            let same_shard = |a: &(u32, u64, u64), b: &(u32, u64, u64)| {
                a.0 == b.0 && index_shard(a.2) == index_shard(b.2)
            };
            for shard_slots in self.slots.chunk_by(same_shard) {
                let (p, _, first_block) = shard_slots[0];
                let mut idx = inner.parts[p as usize].index(first_block).write();
                for &(_, pos, block) in shard_slots {
                    let e = idx.entry(block).or_insert(pos);
                    if *e < pos {
                        *e = pos;
                    }
                }
            }
        }
        // Done mark, then count: a commit that counts us sees us done.
        inner.epochs.finish(self.epoch, !self.slots.is_empty());
        Ok(TxId(self.txid))
    }
}

impl Drop for Tx<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.inner.abort(&self.slots, self.epoch);
        }
        keep_scratch(&TX_SLOTS, std::mem::take(&mut self.slots));
    }
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
        let _s = self.space_lock.lock();
        self.space_cv.notify_all();
        JournalError::Failed(why)
    }

    /// `begin` waits while a ring holds more than this many live slots.
    fn high_water_slots(&self) -> u64 {
        self.geo.slots - self.geo.slots / 4
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

    /// Stage one block; returns (partition, position).
    fn stage(&self, block: u64, data: &[u8], txid: u64, epoch: u64) -> Result<(u32, u64)> {
        self.check_running()?;
        self.check_buf(block, data.len())?;
        let p = self.partition_of(block);
        let part = &self.parts[p];
        let mut guard = self.global_lock.as_ref().map(lock_spinning);
        // The tail only grows, so one read before the claim is enough to
        // know the slot is free (the common case: no second read).
        let tail = part.tail.load(Ordering::Acquire);
        let pos = part.ring.claim();
        let waited = pos >= tail + self.geo.slots
            && pos >= part.tail.load(Ordering::Acquire) + self.geo.slots;
        if waited {
            // The baseline must not hold its lock while waiting: the commit
            // that frees space needs it.
            drop(guard.take());
            self.wait_for_space(p, pos, epoch)?;
            guard = self.global_lock.as_ref().map(lock_spinning);
        }
        // Tell committers whose epoch this slot belongs to, first thing: a
        // commit scanning past `pos` waits only until then, and one not
        // covering this epoch does not wait for the copy.
        let index = pos % self.geo.slots;
        let meta = part.ring.slot_at(index);
        meta.publish_claim(pos, block, epoch);
        if !waited {
            let used = pos + 1 - tail;
            if used >= self.fill_threshold {
                self.kick_trigger();
            }
            if used >= self.high_water_slots() && !self.high_water.load(Ordering::Relaxed) {
                self.high_water.store(true, Ordering::Relaxed);
            }
        }
        if self.kind == JournalKind::ShortLock {
            // The claim is published: a commit snapshot taken from here on
            // waits for this slot's flag (as in the partitioned journal), so
            // the copy needs no lock.
            drop(guard.take());
        }
        let off = self.geo.slot_offset_at(p, index);
        let header = SlotHeader {
            pos,
            block,
            txid,
            epoch,
        }
        .encode(data);
        // SAFETY: position `pos` was handed to this stager alone by the
        // `fetch_add` above and lies inside the ring's free space (`pos <
        // tail + slots`), so no other thread reads or writes this slot until
        // the `Release` store of its state below publishes it; the previous
        // lap's occupant was checkpointed, dropped from the index and freed
        // (tail advanced, Acquire) before we got here.
        unsafe {
            if mutated(DroppedFlush::StagePayload) {
                self.region.write_unshared(off, &header);
                self.region.write_unshared(off + SLOT_HEADER, data);
            } else {
                self.region
                    .write_persist_unshared(off, &[&header[..], data]);
            }
        };
        self.region.write(off + FLAG_AT, &FLAG_STAGED.to_le_bytes());
        if !mutated(DroppedFlush::StageFlag) {
            self.region.persist(off + FLAG_AT, 8);
        }
        meta.publish_staged(pos);
        drop(guard);
        Ok((p as u32, pos))
    }

    /// Backpressure: wait until position `pos` of partition `p` is inside
    /// the ring. Gives up with `Full` when the slot pinning the tail cannot
    /// be freed before this transaction (epoch `epoch`) finishes.
    fn wait_for_space(&self, p: usize, pos: u64, epoch: u64) -> Result<()> {
        let part = &self.parts[p];
        self.backpressure_waits.fetch_add(1, Ordering::Relaxed);
        loop {
            let tail = part.tail.load(Ordering::Acquire);
            if pos < tail + self.geo.slots {
                return Ok(());
            }
            if let Err(e) = self.check_running() {
                self.abandon(part, pos);
                return Err(e);
            }
            if part.ring.is_staged(tail)
                && part.ring.slot(tail).epoch.load(Ordering::Relaxed) >= epoch
            {
                // Freeing the tail needs our own transaction, or a younger
                // one, to finish. Waiting only ever for older transactions
                // rules out a cycle of waiters (wait-die): give up and leave
                // a hole at `pos`.
                self.abandon(part, pos);
                return Err(JournalError::Full { partition: p });
            }
            self.kick_trigger();
            self.request_checkpoint();
            let mut g = self.space_lock.lock();
            if part.tail.load(Ordering::Acquire) == tail && !self.shutdown.load(Ordering::SeqCst) {
                self.space_cv.wait_for(&mut g, Duration::from_millis(2));
            }
        }
    }

    /// Leave position `pos` unused (its stager gave up).
    fn abandon(&self, part: &Partition, pos: u64) {
        part.holes.lock().push(pos);
        self.abandoned.fetch_add(1, Ordering::Relaxed);
    }

    fn wait_below_high_water(&self) {
        // Stagers raise `high_water` when they pass the mark, so that the
        // common case reads one flag, not every ring's head and tail.
        if !self.high_water.load(Ordering::Relaxed) {
            return;
        }
        let over = || self.over_high_water();
        if !over() {
            self.high_water.store(false, Ordering::Relaxed);
            return;
        }
        self.backpressure_waits.fetch_add(1, Ordering::Relaxed);
        // With the fill level above the mark, the trigger does not fire for
        // a ring at the mark, and a checkpoint frees only what is committed:
        // without commits (and no interval) this would wait forever. So the
        // waiter commits what is finished itself, in this thread, as JBD2's
        // handle reservation does (and a single-threaded run stays
        // deterministic). With the fill level at or below the mark, the
        // kick below has the trigger do it.
        let commit_here = self.fill_threshold > self.high_water_slots();
        while over() && self.check_running().is_ok() && !self.shutdown.load(Ordering::SeqCst) {
            if commit_here {
                let fin = self.epochs.finished();
                if !self.epochs.is_durable(fin) {
                    // A failure stops the journal; the loop then ends.
                    let _ = self.commit_covering(fin);
                }
            }
            self.kick_trigger();
            self.request_checkpoint();
            let mut g = self.space_lock.lock();
            if over() {
                self.space_cv.wait_for(&mut g, Duration::from_millis(2));
            }
        }
    }

    fn abort(&self, slots: &[(u32, u64, u64)], epoch: u64) {
        if !slots.is_empty() {
            let mut ranges = Vec::with_capacity(slots.len());
            for &(p, pos, _) in slots {
                let off = self.geo.slot_offset(p as usize, pos) + FLAG_AT;
                self.region.write(off, &FLAG_ABORTED.to_le_bytes());
                ranges.push((off, 8));
            }
            // Durable before the epoch is marked done and can commit.
            if !mutated(DroppedFlush::AbortFlag) {
                self.region.persist_ranges(&ranges);
            }
            for &(p, pos, _) in slots {
                self.parts[p as usize].ring.publish_aborted(pos);
            }
        }
        self.aborted.fetch_add(1, Ordering::Relaxed);
        self.epochs.abort(epoch);
    }

    fn read(&self, block: u64, buf: &mut [u8]) -> Result<()> {
        self.check_buf(block, buf.len())?;
        let p = self.partition_of(block);
        let part = &self.parts[p];
        {
            // The read lock keeps the slot from being freed while we copy.
            let idx = part.index(block).read();
            if let Some(&pos) = idx.get(&block) {
                let off = self.geo.slot_offset(p, pos) + SLOT_HEADER;
                // SAFETY: the slot was published by a finished transaction
                // (index insert after its staging, under the index lock);
                // while we hold the read lock the checkpoint cannot drop it
                // from the index, so the tail cannot pass it and no stager
                // can reuse it.
                unsafe { self.region.read_unshared(off, buf) };
                part.journal_reads.fetch_add(1, Ordering::Relaxed);
                return Ok(());
            }
        }
        self.device_reads.fetch_add(1, Ordering::Relaxed);
        self.device.read(block, buf)?;
        Ok(())
    }

    /// Advance partition `p`'s `last_check` over staged/aborted slots.
    fn advance_last_check(&self, p: usize) -> u64 {
        self.parts[p].ring.advance_last_check()
    }

    /// An epoch's done mark is reused every [`EPOCH_RING`] epochs: wait
    /// until the epoch that used it before is done (only ever needed when
    /// that many transactions started while an old one stays open).
    fn wait_epoch_room(&self, epoch: u64) {
        let wait = Backoff::new();
        while !self.epochs.has_room(epoch) {
            wait.snooze();
        }
    }

    /// Wait until every position of partition `p` below `head` is staged,
    /// aborted, or claimed by a transaction the commit's `cover` excludes.
    fn wait_passed(&self, p: usize, head: u64, cover: &Cover) -> Result<()> {
        let ring = &self.parts[p].ring;
        if ring.last_check.load(Ordering::Acquire) >= head {
            return Ok(());
        }
        let mut j = ring.scan_start(head);
        let wait = Backoff::new();
        loop {
            // A checkpoint may have freed (and a stager reused) the slots
            // this scan stopped at; it raises `last_check` past them first.
            j = j.max(ring.last_check.load(Ordering::Acquire));
            j = ring.scan_passed(j, head, |e| cover.covers(e));
            if j >= head {
                return Ok(());
            }
            // The claim is not published yet (a few instructions away), or
            // a freed hole is about to be marked aborted.
            wait.snooze();
            if self.shutdown.load(Ordering::Relaxed) {
                return Err(JournalError::Closed);
            }
        }
    }

    /// Commit worker of partition `p` (the paper's): advances `last_check`
    /// over flagged slots in the background, so that committers find it
    /// near the head. Committers advance it too when they find it behind,
    /// so a commit never waits for this thread to wake up, and the worker
    /// naps [`COMMIT_WORKER_NAP`] unless it found much to do, leaving the
    /// cores to the stagers.
    fn commit_worker(&self, p: usize) {
        while !self.shutdown.load(Ordering::Relaxed) {
            // Far behind (stages without commits): come back soon, so that
            // the next commit does not scan thousands of slots itself.
            let passed = self.advance_last_check(p);
            std::thread::park_timeout(if passed >= COMMIT_WORKER_BUSY {
                COMMIT_WORKER_NAP / 10
            } else {
                COMMIT_WORKER_NAP
            });
        }
    }

    fn commit(&self) -> Result<()> {
        self.check_running()?;
        // `finished` counts every transaction finished before this call;
        // once a durable commit has counted as many, they are all durable.
        let fin = self.epochs.finished();
        if self.epochs.is_durable(fin) {
            self.shared_commits.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        self.commit_covering(fin)
    }

    /// Write a commit record covering every transaction finished so far
    /// (at least the first `fin`), unless another commit does.
    fn commit_covering(&self, fin: u64) -> Result<()> {
        // Commits run concurrently up to the record write, which is
        // serialised under `durable` and merges covers (see below).
        self.check_running()?;
        if self.epochs.is_durable(fin) {
            self.shared_commits.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        // Which epochs this commit covers: every epoch up to the newest
        // begun, except those whose transaction is still open, which are
        // listed in the record as excluded. So a commit never waits for a
        // transaction in progress (it waits only when more than
        // MAX_EXCLUDED are open at once).
        let wait = Backoff::new();
        let cover = loop {
            if let Some(cover) = self
                .epochs
                .cover_into(MAX_EXCLUDED, take_scratch(&COMMIT_EXCLUDED))
            {
                break cover;
            }
            wait.snooze();
            if self.shutdown.load(Ordering::Relaxed) {
                return Err(JournalError::Closed);
            }
        };
        // Snapshot every partition's index (the paper's commit_ts). Positions
        // past the ring's capacity belong to stagers still waiting for
        // space, necessarily of later epochs, and are excluded.
        let g = self.global_lock.as_ref().map(lock_spinning);
        let mut heads = take_scratch(&COMMIT_HEADS);
        heads.extend(self.parts.iter().map(|part| {
            let h = part.ring.head.load(Ordering::SeqCst);
            h.min(part.tail.load(Ordering::SeqCst) + self.geo.slots)
        }));
        drop(g);
        // Wait until every partition has passed its snapshot: `last_check`
        // (advanced by the partition's commit worker, or here) over flagged
        // slots, and past it only slots of later or excluded epochs, which
        // the record keeps from replay.
        let counted = cover.counted;
        for (p, &h) in heads.iter().enumerate() {
            self.wait_passed(p, h, &cover)?;
        }
        self.region
            .sync()
            .map_err(|e| self.fail(Failure::RegionSync(e)))?;
        let g = self.global_lock.as_ref().map(lock_spinning);
        {
            let mut d = lock_spinning(&self.durable);
            // The newest record may come from a commit that ran alongside
            // ours: covers taken one after the other are nested, but two
            // taken at the same time may each have seen a done mark the
            // other missed. Write the union (with the larger heads), so
            // the newest record commits everything either commit promised;
            // skip the write if the newest record already contains ours.
            if cover.is_within(d.rec.epoch, &d.rec.excluded) {
                self.shared_commits.fetch_add(1, Ordering::Relaxed);
            } else {
                let rec = &mut d.rec;
                cover.widen(&mut rec.epoch, &mut rec.excluded);
                for (dh, &h) in rec.heads.iter_mut().zip(&heads) {
                    *dh = (*dh).max(h);
                }
                d.write(RecordKind::Commit, self.region.as_ref(), &self.geo);
                self.region
                    .sync()
                    .map_err(|e| self.fail(Failure::RegionSync(e)))?;
                d.commits += 1;
            }
            // Under the lock: every publisher holds it, so a plain store.
            self.epochs.publish_durable_serialised(counted);
        }
        drop(g);
        keep_scratch(&COMMIT_HEADS, heads);
        keep_scratch(&COMMIT_EXCLUDED, cover.excluded);
        Ok(())
    }

    fn kick_trigger(&self) {
        if !self.trigger_kicked.load(Ordering::Relaxed)
            && !self.trigger_kicked.swap(true, Ordering::AcqRel)
        {
            // Full: a kick is already pending, which is all this one asks.
            let _ = self.trigger_tx.try_send(());
        }
    }

    /// True if some ring holds at least `begin`'s high-water mark of live
    /// slots (`begin` then waits for a checkpoint).
    fn over_high_water(&self) -> bool {
        let high = self.high_water_slots();
        self.parts
            .iter()
            .any(|p| p.ring.head.load(Ordering::Relaxed) >= p.tail.load(Ordering::Relaxed) + high)
    }

    /// True if some ring holds at least the fill level of live slots.
    fn over_fill_level(&self) -> bool {
        self.parts.iter().any(|p| {
            p.ring.head.load(Ordering::Relaxed)
                >= p.tail.load(Ordering::Relaxed) + self.fill_threshold
        })
    }

    /// Background trigger: commit + checkpoint when a ring passes the fill
    /// level, and every `checkpoint_interval`.
    fn trigger_worker(&self) {
        let interval = self.cfg.checkpoint_interval;
        let mut last = Instant::now();
        loop {
            let wait = interval.unwrap_or(Duration::from_millis(100));
            if let Err(RecvTimeoutError::Disconnected) = self.trigger_rx.recv_timeout(wait) {
                return;
            }
            if self.shutdown.load(Ordering::SeqCst) {
                return;
            }
            let kicked = self.trigger_kicked.swap(false, Ordering::AcqRel);
            let due = interval.is_some_and(|i| last.elapsed() >= i);
            // A kick from a stage that saw the ring full just before the
            // last round freed it is stale: a round now would checkpoint
            // only the few slots staged since.
            let filled = kicked && self.over_fill_level();
            if !due && !filled {
                continue;
            }
            last = Instant::now();
            // Commit what is finished (a commit never waits for open
            // transactions: a stager waiting for ring space may be one).
            let fin = self.epochs.finished();
            if !self.epochs.is_durable(fin) && self.commit_covering(fin).is_err() {
                continue;
            }
            self.start_checkpoint_if_idle();
        }
    }

    /// Start a checkpoint round of the newest commit (or queue one after
    /// the running round). Returns the round that will cover it.
    fn request_checkpoint(&self) -> u64 {
        let mut c = self.ckpt.lock();
        if c.running {
            c.pending = true;
            c.round + 1
        } else {
            self.start_round(&mut c);
            c.round
        }
    }

    /// Start a checkpoint round unless one is running. The background
    /// trigger uses this: stages keep kicking it while a round runs (the
    /// ring stays over the fill level until the round frees it), and
    /// queueing a round for each kick would chain rounds back to back, each
    /// over just what arrived during the last. Once the round is done, the
    /// next stage kicks again only if the ring is still over the level.
    fn start_checkpoint_if_idle(&self) {
        let mut c = self.ckpt.lock();
        if !c.running {
            self.start_round(&mut c);
        }
    }

    fn start_round(&self, c: &mut CkptState) {
        let target = {
            let d = self.durable.lock();
            CkptTarget {
                epoch: d.rec.epoch,
                excluded: d.rec.excluded.clone(),
                heads: d.rec.heads.clone(),
            }
        };
        let has_holes = self.parts.iter().any(|p| !p.holes.lock().is_empty());
        let work = self.parts.iter().zip(&target.heads).any(|(p, &h)| {
            let t = p.tail.load(Ordering::Acquire);
            t < h || p.ring.is_aborted(t)
        });
        if !work && !has_holes {
            return;
        }
        c.round += 1;
        c.running = true;
        c.target = Some(target);
        self.ckpt_arrived.store(0, Ordering::SeqCst);
        self.ckpt_cv.notify_all();
    }

    fn checkpoint_and_wait(&self) -> Result<()> {
        self.check_running()?;
        let round = self.request_checkpoint();
        let mut c = self.ckpt.lock();
        // Stop when our round is done, or when it was never started because
        // there was nothing left to do.
        while c.completed < round && (c.running || c.round >= round) && !c.shutdown {
            self.ckpt_done_cv.wait(&mut c);
        }
        drop(c);
        self.check_running()
    }

    /// Checkpoint thread of partition `p`: one per partition, synchronised
    /// per round by an atomic counter; the last to arrive finishes the round.
    fn checkpoint_worker(&self, p: usize) {
        let mut seen = 0u64;
        // Reused every round: it grows to the partition's hot set once
        // instead of rehashing its way there each round.
        let mut newest = HashMap::default();
        loop {
            let target = {
                let mut c = self.ckpt.lock();
                while c.round == seen && !c.shutdown {
                    self.ckpt_cv.wait(&mut c);
                }
                if c.shutdown {
                    return;
                }
                seen = c.round;
                c.target.clone().expect("a started round has a target")
            };
            let result = self.checkpoint_partition(p, &target, &mut newest);
            match result {
                Ok(r) => *self.parts[p].ckpt_result.lock() = r,
                Err(e) => {
                    self.fail(Failure::Checkpoint {
                        partition: p,
                        source: e,
                    });
                    let tail = self.parts[p].tail.load(Ordering::Acquire);
                    *self.parts[p].ckpt_result.lock() = (tail, Vec::new());
                }
            }
            if self.ckpt_arrived.fetch_add(1, Ordering::AcqRel) + 1 == self.parts.len() {
                if let Err(e) = self.finish_round() {
                    self.fail(Failure::CheckpointRound(e));
                }
                let mut c = self.ckpt.lock();
                c.completed = c.round;
                c.running = false;
                if c.pending && self.check_running().is_ok() {
                    c.pending = false;
                    self.start_round(&mut c);
                }
                self.ckpt_done_cv.notify_all();
            }
        }
    }

    /// Write the newest committed version of each block in partition `p`
    /// between its tail and the target commit. Returns the new tail (the
    /// first slot that must stay) and what was written.
    fn checkpoint_partition(
        &self,
        p: usize,
        target: &CkptTarget,
        newest: &mut HashMap<u64, u64>,
    ) -> Result<(u64, Vec<(u64, u64)>)> {
        let part = &self.parts[p];
        let tail = part.tail.load(Ordering::Acquire);
        let head = target.heads[p];
        newest.clear();
        let mut new_tail = head.max(tail);
        for pos in tail..head {
            let slot = part.ring.slot(pos);
            let state = slot.state.load(Ordering::Acquire);
            if state == protocol::aborted(pos) {
                continue;
            }
            if state != protocol::staged(pos) || !target.covers(slot.epoch.load(Ordering::Relaxed))
            {
                new_tail = pos;
                break;
            }
            newest.insert(slot.block.load(Ordering::Relaxed), pos);
        }
        if new_tail == head.max(tail) {
            // Aborted slots past the commit can be freed too: they will
            // never be replayed, and a later commit need not exist for them.
            while part.ring.is_aborted(new_tail) {
                new_tail += 1;
            }
        }
        let mut written: Vec<(u64, u64)> = newest.drain().collect();
        written.sort_unstable();
        let bs = self.geo.block_size as usize;
        let mut buf = Vec::new();
        for chunk in written.chunks(self.cfg.checkpoint_batch) {
            // SAFETY (both branches): every slot in `chunk` is staged (state
            // read with Acquire above) and lies in [tail, head): it is not
            // reused before this round advances the tail, which happens
            // after this function returns, and staged slots are never
            // rewritten. So nobody writes these bytes while we read them or
            // while the borrowed slices live.
            let borrowed: Option<Vec<(u64, &[u8])>> = chunk
                .iter()
                .map(|&(b, pos)| {
                    let off = self.geo.slot_offset(p, pos) + SLOT_HEADER;
                    // SAFETY: a staged slot in [tail, head), see above.
                    unsafe { self.region.borrow_unshared(off, bs) }.map(|d| (b, d))
                })
                .collect();
            if let Some(batch) = borrowed {
                // A real mapping: hand the slots to the device in place.
                self.device.write_batch(&batch)?;
                continue;
            }
            buf.resize(bs * chunk.len(), 0);
            for (i, &(_, pos)) in chunk.iter().enumerate() {
                let off = self.geo.slot_offset(p, pos) + SLOT_HEADER;
                // SAFETY: a staged slot in [tail, head), see above.
                unsafe {
                    self.region
                        .read_unshared(off, &mut buf[i * bs..(i + 1) * bs])
                };
            }
            let batch: Vec<(u64, &[u8])> = chunk
                .iter()
                .enumerate()
                .map(|(i, &(b, _))| (b, &buf[i * bs..(i + 1) * bs]))
                .collect();
            self.device.write_batch(&batch)?;
        }
        Ok((new_tail, written))
    }

    /// Last checkpointer of a round: flush the device, make the new tails
    /// durable, drop checkpointed blocks from the index, free ring space.
    fn finish_round(&self) -> Result<()> {
        self.check_running()?;
        // Injected bug: ring space freed (checkpoint record) before the
        // device flush that makes the checkpointed blocks durable.
        let early_free = crate::bugs::active("ckpt_free_before_flush");
        if !early_free {
            self.device.flush()?;
        }
        let results: Vec<(u64, Vec<(u64, u64)>)> = self
            .parts
            .iter()
            .map(|p| std::mem::take(&mut *p.ckpt_result.lock()))
            .collect();
        {
            let mut d = self.durable.lock();
            for (t, r) in d.rec.tails.iter_mut().zip(&results) {
                *t = (*t).max(r.0);
            }
            d.write(RecordKind::Checkpoint, self.region.as_ref(), &self.geo);
            self.region.sync()?;
        }
        if early_free {
            self.device.flush()?;
        }
        let mut blocks = 0;
        for (part, (new_tail, mut written)) in self.parts.iter().zip(results) {
            blocks += written.len() as u64;
            written.sort_unstable_by_key(|&(b, _)| (index_shard(b), b));
            for shard in written.chunk_by(|a, b| index_shard(a.0) == index_shard(b.0)) {
                let mut idx = part.index(shard[0].0).write();
                for &(b, pos) in shard {
                    if idx.get(&b) == Some(&pos) {
                        idx.remove(&b);
                    }
                }
            }
            // `last_check` first: everything below `new_tail` is staged or
            // aborted, and a scan must never start below the tail, where a
            // stager may already reuse a slot (it would wait forever for a
            // position whose slot now holds a later one).
            part.ring.last_check.fetch_max(new_tail, Ordering::AcqRel);
            // Only now, with every shard updated, may the tail pass these
            // slots (a reader holding a shard's read lock keeps its slot).
            part.tail.fetch_max(new_tail, Ordering::AcqRel);
            self.fill_holes(part);
        }
        self.checkpointed_blocks
            .fetch_add(blocks, Ordering::Relaxed);
        self.checkpoints.fetch_add(1, Ordering::Relaxed);
        let _s = self.space_lock.lock();
        self.space_cv.notify_all();
        Ok(())
    }

    /// Mark abandoned positions that are now inside the ring as aborted, so
    /// the commit worker and checkpointer pass them.
    fn fill_holes(&self, part: &Partition) {
        let mut holes = part.holes.lock();
        let tail = part.tail.load(Ordering::Acquire);
        holes.retain(|&h| {
            if h < tail + self.geo.slots {
                part.ring.publish_aborted(h);
                false
            } else {
                true
            }
        });
    }
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
