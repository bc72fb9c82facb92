//! Coalescing: the blocks of many finished transactions staged once per
//! commit window.
//!
//! A file-system operation finishes one transaction, and every transaction
//! today stages each block it changed: a created 4 KiB file stages its
//! directory's inode, the directory block and the bitmap block at the
//! create, and its own inode (again) and the bitmap (again) at the write,
//! though the next journal commit makes all of them durable together.
//! [`CoalescingStore`] keeps the newest version of each block finished
//! transactions wrote in memory (the *window*) and stages the whole window
//! as one transaction of the store below at the next flush: an explicit
//! [`sync`](Store::sync) (fsync), a checkpoint (the store's own, on its
//! interval, takes over the journal's background one), or the window
//! reaching its size limit. A block changed by a hundred creates in one
//! window is staged once.
//!
//! **Why atomicity holds.** A transaction enters the window whole, under
//! one lock, or not at all (dropped unfinished), and a window is staged as
//! one transaction below, so a crash shows every operation of a window or
//! none. Windows are staged in order (one flush at a time), and an
//! operation that saw another's changes (through the file system's memory,
//! after that one finished and released its locks) entered the window
//! after it, so what a crash keeps is a prefix of the finished operations,
//! as without coalescing. Durability is unchanged: [`sync`](Store::sync)
//! flushes the window before the commit below.
//!
//! **Right after an fsync** ([`set_direct_after_sync`]), a transaction
//! finding the window empty is staged below at once, as without
//! coalescing: where something fsyncs all the time (a mail server, a
//! database), the window would only move each operation's staging into
//! the next fsync and make every fsync wait for it; once no fsync came for
//! that long, windows coalesce again. Order holds across the switch: a
//! transaction goes straight below only while the window is empty and
//! none is being flushed, and one that went into a window never depends
//! on one still on its way below (that one holds its blocks' locks until
//! its staging finished).
//!
//! [`set_direct_after_sync`]: CoalescingStore::set_direct_after_sync
//!
//! **Reads** see the window first (then a window being flushed, then the
//! store below), so a block is read as the newest finished transaction
//! left it. **Ordered data** ([`StoreTxn::write_ordered`]) goes home at
//! the transaction's finish, before its metadata can reach the journal;
//! a block the window still holds a version of (metadata of a file freed
//! in this window) is journaled instead, or the flush would write the old
//! version over it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::error::FsStoreError;
use crate::format::{Superblock, BLOCK_SIZE};
use crate::stagestats::{BlockKind, StageCounts, StageStats, TxCount};
use crate::store::{Store, StoreTxn};

/// A block's newest version: contents and crc32c if known.
type Version = (Vec<u8>, Option<u32>);
type Window = BTreeMap<u64, Version>;

#[derive(Default)]
struct Pending {
    /// The open window: newest version of each block by block number.
    open: Window,
    /// The window being staged below (read until it is finished there).
    flushing: Option<Arc<Window>>,
}

impl Pending {
    /// The newest version of `blk` not yet staged below, if any.
    fn get(&self, blk: u64) -> Option<&Version> {
        self.open
            .get(&blk)
            .or_else(|| self.flushing.as_ref().and_then(|w| w.get(&blk)))
    }
}

/// A [`Store`] that coalesces the blocks of finished transactions per
/// commit window (see the module documentation).
///
/// ```
/// use std::sync::Arc;
/// use ptsd_blockdev::{BlockDevice, MemDevice};
/// use ptsd_fs::coalesce::CoalescingStore;
/// use ptsd_fs::{DirectStore, Store};
///
/// let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(4096, 64).unwrap());
/// let below: Arc<dyn Store> = Arc::new(DirectStore::new(dev.clone()).unwrap());
/// let store = CoalescingStore::new(below, 1024, None);
/// for v in 1..=3u8 {
///     let mut tx = store.begin();
///     tx.write(5, &[v; 4096]).unwrap();
///     tx.finish().unwrap();
/// }
/// let mut buf = vec![0u8; 4096];
/// store.read(5, &mut buf).unwrap(); // the window's newest version
/// assert_eq!(buf[0], 3);
/// dev.read(5, &mut buf).unwrap(); // nothing staged below yet
/// assert_eq!(buf[0], 0);
/// store.sync().unwrap(); // one transaction below, block 5 once
/// dev.read(5, &mut buf).unwrap();
/// assert_eq!(buf[0], 3);
/// ```
pub struct CoalescingStore {
    inner: Arc<dyn Store>,
    /// A window reaching this many blocks is flushed.
    max_blocks: usize,
    pending: Mutex<Pending>,
    /// One flush at a time, so windows are staged in order.
    flush_lock: Mutex<()>,
    /// A flush failed: its blocks are lost, so nothing more is accepted.
    failed: AtomicBool,
    /// The flusher thread's stop flag and wake-up (shared with it, so it
    /// waits without keeping the store alive).
    stop: Arc<Stop>,
    flusher: Mutex<Option<JoinHandle<()>>>,
    /// Blocks staged below, by kind; a flushed window counts as one
    /// transaction.
    staged: StageStats,
    /// First block past the bitmaps (to tell bitmaps by their place).
    data_start: u64,
    /// A thread flushes full windows (and checkpoints).
    background: bool,
    /// Stage transactions at once for this long after a sync (ns; 0:
    /// never), see [`set_direct_after_sync`](Self::set_direct_after_sync).
    direct_after_sync: AtomicU64,
    /// Until when (ns since `epoch`) transactions are staged at once.
    direct_until: AtomicU64,
    epoch: Instant,
}

impl CoalescingStore {
    /// Coalesce transactions over `inner`, flushing a window at
    /// `max_blocks` blocks (with the thread below: the thread at that
    /// size, the operation itself at twice; keep twice well below what one
    /// transaction of `inner` may hold: a journal partition's ring) and, if
    /// `checkpoint_every` is given, checkpointing that often (a thread: the
    /// window flushed, then `inner` checkpointed). That replaces the
    /// journal's own timed checkpoint, which would not see the window: turn
    /// it off, and what finished before a checkpoint is durable after it,
    /// as without coalescing.
    pub fn new(
        inner: Arc<dyn Store>,
        max_blocks: usize,
        checkpoint_every: Option<Duration>,
    ) -> Arc<Self> {
        let mut sb = vec![0u8; BLOCK_SIZE];
        let data_start = inner
            .read(0, &mut sb)
            .ok()
            .and_then(|()| Superblock::decode(&sb, inner.num_blocks()).ok())
            .map_or(1, |sb| sb.data_start);
        let store = Arc::new(Self {
            inner,
            max_blocks: max_blocks.max(1),
            pending: Mutex::default(),
            flush_lock: Mutex::new(()),
            failed: AtomicBool::new(false),
            stop: Arc::default(),
            flusher: Mutex::new(None),
            staged: StageStats::default(),
            data_start,
            background: checkpoint_every.is_some(),
            direct_after_sync: AtomicU64::new(0),
            direct_until: AtomicU64::new(0),
            epoch: Instant::now(),
        });
        if let Some(every) = checkpoint_every {
            let weak = Arc::downgrade(&store);
            let stop = store.stop.clone();
            let t = std::thread::Builder::new()
                .name("ptsd-fs-window".into())
                .spawn(move || flusher(weak, stop, every))
                .ok();
            *store.flusher.lock() = t;
        }
        store
    }

    /// For `hold` after each [`sync`](Store::sync), a transaction that
    /// finds the window empty is staged below at once instead of joining
    /// a window (see the module documentation); `Duration::ZERO` (the
    /// default) always coalesces.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use ptsd_blockdev::{BlockDevice, MemDevice};
    /// use ptsd_fs::coalesce::CoalescingStore;
    /// use ptsd_fs::{DirectStore, Store};
    ///
    /// let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(4096, 64).unwrap());
    /// let below: Arc<dyn Store> = Arc::new(DirectStore::new(dev.clone()).unwrap());
    /// let store = CoalescingStore::new(below, 1024, None);
    /// store.set_direct_after_sync(Duration::from_secs(60));
    /// store.sync().unwrap();
    /// let mut tx = store.begin();
    /// tx.write(5, &[7; 4096]).unwrap();
    /// tx.finish().unwrap();
    /// assert_eq!(store.window_blocks(), 0); // staged below at once
    /// let mut buf = vec![0u8; 4096];
    /// dev.read(5, &mut buf).unwrap();
    /// assert_eq!(buf[0], 7);
    /// ```
    pub fn set_direct_after_sync(&self, hold: Duration) {
        let ns = u64::try_from(hold.as_nanos()).unwrap_or(u64::MAX);
        self.direct_after_sync.store(ns, Ordering::Relaxed);
    }

    fn now_ns(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// Whether a transaction finishing now goes straight below: shortly
    /// after a sync, with no window open or being flushed (checked under
    /// the pending lock, so nothing enters a window ahead of it; the lock
    /// is taken only within the hold, off the path of window mode).
    fn direct_now(&self) -> bool {
        if self.direct_after_sync.load(Ordering::Relaxed) == 0
            || self.now_ns() >= self.direct_until.load(Ordering::Relaxed)
        {
            return false;
        }
        let p = self.pending.lock();
        p.open.is_empty() && p.flushing.is_none()
    }

    /// Blocks in the open window (for tests and statistics).
    pub fn window_blocks(&self) -> usize {
        self.pending.lock().open.len()
    }

    /// Blocks this store staged below so far, by kind (compare
    /// [`FileSystem::stage_counts`](crate::FileSystem::stage_counts), what
    /// the file system handed it); each window is one transaction.
    pub fn stage_counts(&self) -> StageCounts {
        self.staged.snapshot()
    }

    /// Stage the open window below as one transaction.
    pub fn flush(&self) -> Result<(), FsStoreError> {
        let _one = self.flush_lock.lock();
        self.check()?;
        let batch = {
            let mut p = self.pending.lock();
            if p.open.is_empty() {
                return Ok(());
            }
            let w = Arc::new(std::mem::take(&mut p.open));
            p.flushing = Some(w.clone());
            w
        };
        let mut count = TxCount::default();
        let res = (|| {
            let mut tx = self.inner.begin();
            for (&blk, (data, crc)) in batch.iter() {
                count.add(BlockKind::of(blk, data, self.data_start), 1, data.len());
                match crc {
                    Some(crc) => tx.write_with_crc(blk, data, *crc)?,
                    None => tx.write(blk, data)?,
                }
            }
            tx.finish()
        })();
        match res {
            Ok(()) => {
                self.pending.lock().flushing = None;
                self.staged.add_tx(&count);
                // Readers copy what they take, so the window is ours now:
                // its buffers serve this thread's next blocks.
                if let Ok(w) = Arc::try_unwrap(batch) {
                    w.into_values().for_each(|(b, _)| crate::writes::recycle(b));
                }
                Ok(())
            }
            Err(e) => {
                // The window stays readable (memory and reads agree); the
                // file system turns read-only on this error.
                self.failed.store(true, Ordering::SeqCst);
                Err(e)
            }
        }
    }

    fn check(&self) -> Result<(), FsStoreError> {
        if self.failed.load(Ordering::SeqCst) {
            return Err(FsStoreError::WindowLost);
        }
        Ok(())
    }

    /// The window's (or the flushing window's) version of `blk`, copied.
    fn pending_copy(&self, blk: u64, buf: &mut [u8]) -> bool {
        match self.pending.lock().get(blk) {
            Some((data, _)) => {
                buf.copy_from_slice(data);
                true
            }
            None => false,
        }
    }

    fn pending_holds(&self, blk: u64) -> bool {
        self.pending.lock().get(blk).is_some()
    }

    fn stop_flusher(&self) {
        *self.stop.flag.lock() = true;
        self.stop.wake.notify_all();
        let t = self.flusher.lock().take();
        if let Some(t) = t {
            // The flusher may be this thread (dropping the last Arc).
            if t.thread().id() != std::thread::current().id() {
                let _ = t.join();
            }
        }
    }
}

#[derive(Default)]
struct Stop {
    flag: Mutex<bool>,
    wake: Condvar,
    /// The window reached its size: flush it now (set under `flag`).
    full: AtomicBool,
}

fn flusher(store: Weak<CoalescingStore>, stop: Arc<Stop>, every: Duration) {
    let mut next = Instant::now() + every;
    loop {
        {
            let mut f = stop.flag.lock();
            if !*f && !stop.full.load(Ordering::Acquire) {
                stop.wake.wait_until(&mut f, next);
            }
            if *f {
                return;
            }
        }
        let Some(s) = store.upgrade() else { return };
        stop.full.store(false, Ordering::Release);
        let res = if Instant::now() >= next {
            next = Instant::now() + every;
            s.checkpoint()
        } else {
            s.flush()
        };
        if let Err(e) = res {
            tracing::error!(
                "checkpointing a commit window: {}",
                ptsd_blockdev::ErrorChain(&e)
            );
            return;
        }
    }
}

impl Drop for CoalescingStore {
    fn drop(&mut self) {
        self.stop_flusher();
    }
}

struct CoalescingTxn<'a> {
    store: &'a CoalescingStore,
    writes: Vec<(u64, Vec<u8>, Option<u32>)>,
    ordered: Vec<(u64, Vec<u8>)>,
}

impl CoalescingTxn<'_> {
    /// The checks the store below would make at once, made now, not at
    /// the flush (where a bad block would fail the whole window).
    fn check_range(&self, blk: u64, len: usize) -> Result<(), FsStoreError> {
        use ptsd_blockdev::BlockError;
        if len == 0 || len % BLOCK_SIZE != 0 {
            return Err(BlockError::Misaligned {
                len,
                block_size: BLOCK_SIZE as u32,
            }
            .into());
        }
        let capacity = self.store.inner.num_blocks();
        let count = (len / BLOCK_SIZE) as u64;
        if blk.checked_add(count).is_none_or(|end| end > capacity) {
            return Err(BlockError::OutOfRange {
                block: blk,
                count,
                capacity,
            }
            .into());
        }
        Ok(())
    }

    /// Stage this transaction below at once, as one transaction there (no
    /// window holds any of its blocks: see `direct_now`).
    fn finish_below(self) -> Result<(), FsStoreError> {
        let store = self.store;
        let mut count = TxCount::default();
        let mut tx = store.inner.begin();
        for (blk, data) in self.ordered {
            count.add(
                BlockKind::OrderedData,
                (data.len() / BLOCK_SIZE) as u64,
                data.len(),
            );
            tx.write_ordered(blk, data)?;
        }
        for (blk, data, crc) in self.writes {
            count.add(BlockKind::of(blk, &data, store.data_start), 1, data.len());
            tx.write_owned(blk, data, crc)?;
        }
        tx.finish()?;
        store.staged.add_tx(&count);
        Ok(())
    }
}

impl StoreTxn for CoalescingTxn<'_> {
    fn write(&mut self, blk: u64, data: &[u8]) -> Result<(), FsStoreError> {
        self.check_range(blk, data.len())?;
        self.writes.push((blk, data.to_vec(), None));
        Ok(())
    }
    fn write_with_crc(&mut self, blk: u64, data: &[u8], crc: u32) -> Result<(), FsStoreError> {
        self.check_range(blk, data.len())?;
        self.writes.push((blk, data.to_vec(), Some(crc)));
        Ok(())
    }
    fn write_owned(
        &mut self,
        blk: u64,
        data: Vec<u8>,
        crc: Option<u32>,
    ) -> Result<(), FsStoreError> {
        self.check_range(blk, data.len())?;
        self.writes.push((blk, data, crc));
        Ok(())
    }
    fn write_ordered(&mut self, blk: u64, data: Vec<u8>) -> Result<(), FsStoreError> {
        self.check_range(blk, data.len())?;
        self.ordered.push((blk, data));
        Ok(())
    }
    fn finish(mut self: Box<Self>) -> Result<(), FsStoreError> {
        let store = self.store;
        store.check()?;
        if store.direct_now() {
            return (*self).finish_below();
        }
        if !self.ordered.is_empty() {
            // These blocks are this transaction's (nobody else writes them
            // meanwhile), so whether the window holds one cannot change
            // before the insert below.
            let mut tx = store.inner.begin();
            let mut home = TxCount::default();
            for (blk, data) in std::mem::take(&mut self.ordered) {
                let n = (data.len() / BLOCK_SIZE) as u64;
                if !(blk..blk + n).any(|b| store.pending_holds(b)) {
                    home.add(BlockKind::OrderedData, n, data.len());
                    tx.write_ordered(blk, data)?;
                    continue;
                }
                for (i, block) in data.chunks(BLOCK_SIZE).enumerate() {
                    let b = blk + i as u64;
                    if store.pending_holds(b) {
                        self.writes.push((b, block.to_vec(), None));
                    } else {
                        home.add(BlockKind::OrderedData, 1, block.len());
                        tx.write_ordered(b, block.to_vec())?;
                    }
                }
            }
            // Home before the metadata can be staged (at a later flush).
            tx.finish()?;
            store.staged.add(&home);
        }
        if self.writes.is_empty() {
            return Ok(());
        }
        // The thread flushes a full window off the operation's path (it
        // holds its inodes' locks); at twice the size, or without the
        // thread, the operation flushes it itself.
        let over = {
            let p = store.pending.lock();
            let limit = store.max_blocks * if store.background { 2 } else { 1 };
            !p.open.is_empty() && p.open.len() + self.writes.len() > limit
        };
        if over {
            store.flush()?;
        }
        let len = {
            let mut p = store.pending.lock();
            for (blk, data, crc) in std::mem::take(&mut self.writes) {
                p.open.insert(blk, (data, crc));
            }
            p.open.len()
        };
        if len >= store.max_blocks {
            if store.background {
                let _g = store.stop.flag.lock();
                store.stop.full.store(true, Ordering::Release);
                store.stop.wake.notify_one();
            } else {
                store.flush()?;
            }
        }
        Ok(())
    }
}

impl Store for CoalescingStore {
    fn num_blocks(&self) -> u64 {
        self.inner.num_blocks()
    }
    fn read(&self, blk: u64, buf: &mut [u8]) -> Result<(), FsStoreError> {
        // A block not pending now is below already: a flush clears its
        // window only after the transaction below finished.
        if buf.len() == BLOCK_SIZE && self.pending_copy(blk, buf) {
            return Ok(());
        }
        self.inner.read(blk, buf)
    }
    fn read_run(&self, blk: u64, buf: &mut [u8]) -> Result<(), FsStoreError> {
        // Pending versions first (see `read`), the run below, then the
        // pending versions over it.
        let n = (buf.len() / BLOCK_SIZE) as u64;
        let mut over = Vec::new();
        {
            let p = self.pending.lock();
            for b in blk..blk + n {
                if let Some((data, _)) = p.get(b) {
                    over.push((b, data.clone()));
                }
            }
        }
        self.inner.read_run(blk, buf)?;
        for (b, data) in over {
            let at = (b - blk) as usize * BLOCK_SIZE;
            buf[at..at + BLOCK_SIZE].copy_from_slice(&data);
        }
        Ok(())
    }
    fn begin(&self) -> Box<dyn StoreTxn + '_> {
        Box::new(CoalescingTxn {
            store: self,
            writes: Vec::new(),
            ordered: Vec::new(),
        })
    }
    fn sync(&self) -> Result<(), FsStoreError> {
        self.flush()?;
        self.inner.sync()?;
        let hold = self.direct_after_sync.load(Ordering::Relaxed);
        if hold != 0 {
            let until = self.now_ns().saturating_add(hold);
            self.direct_until.fetch_max(until, Ordering::Relaxed);
        }
        Ok(())
    }
    fn checkpoint(&self) -> Result<(), FsStoreError> {
        self.flush()?;
        self.inner.checkpoint()
    }
    fn write_super(&self, block: &[u8]) -> Result<(), FsStoreError> {
        self.inner.write_super(block)
    }
    fn discard(&self, blk: u64, count: u64) -> Result<(), FsStoreError> {
        self.inner.discard(blk, count)
    }
    fn holds(&self, blk: u64) -> bool {
        self.pending_holds(blk) || self.inner.holds(blk)
    }
    fn close(&self) -> Result<(), FsStoreError> {
        self.stop_flusher();
        self.flush()?;
        self.inner.close()
    }
    fn describe(&self) -> String {
        format!(
            "{}; transactions coalesced per commit window",
            self.inner.describe()
        )
    }
    fn verify(&self, blk: u64) -> Result<(), FsStoreError> {
        self.inner.verify(blk)
    }
    fn checks_blocks(&self) -> bool {
        self.inner.checks_blocks()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DirectStore;
    use ptsd_blockdev::{BlockDevice, MemDevice};

    fn store() -> (Arc<dyn BlockDevice>, Arc<CoalescingStore>) {
        let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(4096, 64).unwrap());
        let below: Arc<dyn Store> = Arc::new(DirectStore::new(dev.clone()).unwrap());
        (dev, CoalescingStore::new(below, 1024, None))
    }

    fn put(s: &CoalescingStore, blk: u64, v: u8) {
        let mut tx = s.begin();
        tx.write(blk, &[v; BLOCK_SIZE]).unwrap();
        tx.finish().unwrap();
    }

    #[test]
    fn windows_resume_once_the_hold_after_a_sync_is_over() {
        let (dev, s) = store();
        s.set_direct_after_sync(Duration::from_millis(1));
        put(&s, 5, 1); // no sync yet: a window
        assert_eq!(s.window_blocks(), 1);
        s.sync().unwrap();
        put(&s, 6, 2); // right after the sync: below at once
        assert_eq!(s.window_blocks(), 0);
        let mut buf = vec![0u8; BLOCK_SIZE];
        dev.read(6, &mut buf).unwrap();
        assert_eq!(buf[0], 2);
        std::thread::sleep(Duration::from_millis(5));
        put(&s, 6, 3); // the hold is over: a window again
        assert_eq!(s.window_blocks(), 1);
        dev.read(6, &mut buf).unwrap();
        assert_eq!(buf[0], 2);
        s.read(6, &mut buf).unwrap();
        assert_eq!(buf[0], 3);
        // Direct staging counts as transactions below, block by block.
        let c = s.stage_counts();
        assert_eq!(c.txs, 2, "{c:?}");
    }

    #[test]
    fn without_a_hold_every_transaction_joins_the_window() {
        let (_, s) = store();
        s.sync().unwrap();
        put(&s, 5, 1);
        assert_eq!(s.window_blocks(), 1);
    }
}
