//! The block store the file system writes through.
//!
//! Everything above this module changes the image only with
//! [`Store::begin`] → [`StoreTxn::write`]… → [`StoreTxn::finish`]: one
//! all-or-nothing transaction per file-system operation. [`Store::sync`]
//! makes every finished transaction durable (fsync). The mounted file system
//! uses the journal store (`JournalStore`); [`DirectStore`] writes straight to
//! the device and serves mkfs, fsck and unit tests, where no crash safety is
//! needed.

use std::sync::Arc;

use ptsd_blockdev::BlockDevice;

use crate::error::FsStoreError;
use crate::format::BLOCK_SIZE;

/// A block store with all-or-nothing multi-block transactions.
pub trait Store: Send + Sync {
    /// Blocks in the store.
    fn num_blocks(&self) -> u64;
    /// Read the newest finished version of one block.
    fn read(&self, blk: u64, buf: &mut [u8]) -> Result<(), FsStoreError>;
    /// Read the consecutive blocks `[blk, blk + buf.len() / BLOCK_SIZE)`.
    /// The caller holds off writers of these blocks meanwhile (the file's
    /// lock), so a store may read them in one device request. The default
    /// reads block by block.
    fn read_run(&self, blk: u64, buf: &mut [u8]) -> Result<(), FsStoreError> {
        for (i, b) in buf.chunks_mut(BLOCK_SIZE).enumerate() {
            self.read(blk + i as u64, b)?;
        }
        Ok(())
    }
    /// Start a transaction. Dropping it unfinished aborts it.
    fn begin(&self) -> Box<dyn StoreTxn + '_>;
    /// Make every finished transaction durable.
    fn sync(&self) -> Result<(), FsStoreError>;
    /// Write every finished transaction to its home location and flush the
    /// device, so the device alone holds the whole file system.
    fn checkpoint(&self) -> Result<(), FsStoreError>;
    /// Write block 0 (the superblock) straight to the device and flush. The
    /// superblock is never journaled.
    fn write_super(&self, block: &[u8]) -> Result<(), FsStoreError>;
    /// Tell the device that `[blk, blk + count)` hold nothing (TRIM), so an
    /// SSD need not keep copying them. Only for free blocks whose freeing
    /// is durable ([`sync`](Self::sync) returned after it) and that nobody
    /// can allocate until this returns. A version the journal still holds
    /// may be checkpointed over them later, which is harmless. The default
    /// does nothing (a hint a store may ignore).
    fn discard(&self, blk: u64, count: u64) -> Result<(), FsStoreError> {
        let _ = (blk, count);
        Ok(())
    }
    /// Whether a version of `blk` waits to be written home (a journal's
    /// uncheckpointed copy): a discard of it now would be undone by that
    /// write. The default: nothing waits.
    fn holds(&self, blk: u64) -> bool {
        let _ = blk;
        false
    }
    /// Checkpoint and release the store (clean unmount).
    fn close(&self) -> Result<(), FsStoreError>;
    /// One line saying what this store is and how durable it is.
    fn describe(&self) -> String;
    /// Read block `blk` and check it against the checksum the store keeps
    /// for it (fsck's scrub of file data); stores that keep none: `Ok`.
    fn verify(&self, blk: u64) -> Result<(), FsStoreError> {
        let _ = blk;
        Ok(())
    }
    /// Whether [`verify`](Self::verify) checks anything.
    fn checks_blocks(&self) -> bool {
        false
    }
}

/// One open transaction.
pub trait StoreTxn {
    /// Add a full block to the transaction.
    fn write(&mut self, blk: u64, data: &[u8]) -> Result<(), FsStoreError>;
    /// [`write`](Self::write) a block whose crc32c the caller knows
    /// already (`crc == crc32c::crc32c(data)`; a sealed metadata block
    /// derives it from its seal), so a journaling store need not compute it
    /// again. The default ignores it.
    fn write_with_crc(&mut self, blk: u64, data: &[u8], crc: u32) -> Result<(), FsStoreError> {
        let _ = crc;
        self.write(blk, data)
    }
    /// [`write`](Self::write) (or [`write_with_crc`](Self::write_with_crc)
    /// when `crc` is known) of a block the caller gives away: a store that
    /// keeps blocks in memory until later (`CoalescingStore`) takes the
    /// buffer instead of copying it. The default borrows it, then keeps it
    /// for this thread's next block.
    fn write_owned(
        &mut self,
        blk: u64,
        data: Vec<u8>,
        crc: Option<u32>,
    ) -> Result<(), FsStoreError> {
        let res = match crc {
            Some(crc) => self.write_with_crc(blk, &data, crc),
            None => self.write(blk, &data),
        };
        crate::writes::recycle(data);
        res
    }
    /// Add a run of full blocks of file data, from `blk` on, that no
    /// finished transaction refers to yet (blocks this transaction
    /// allocates): a store may write them straight to their home location
    /// instead of journaling them (ordered mode, as ext4's `data=ordered`),
    /// provided they are durable before anything of this transaction can
    /// be — a crash then shows either the old metadata (the blocks
    /// unreferenced) or the new metadata and the data. Owned, so that the
    /// bytes reach the device without another copy. The default journals
    /// each block like [`write`](Self::write), which is always correct (a
    /// wrapping store that does not forward this keeps full data
    /// journaling).
    fn write_ordered(&mut self, blk: u64, data: Vec<u8>) -> Result<(), FsStoreError> {
        for (i, block) in data.chunks(BLOCK_SIZE).enumerate() {
            self.write(blk + i as u64, block)?;
        }
        Ok(())
    }
    /// Make the transaction visible (and part of the next sync) as a whole.
    fn finish(self: Box<Self>) -> Result<(), FsStoreError>;
}

/// Writes straight to the device: each transaction's blocks are written at
/// `finish`. Not crash-safe; for mkfs, fsck and tests.
pub struct DirectStore {
    dev: Arc<dyn BlockDevice>,
}

impl DirectStore {
    /// A store over `dev`, whose block size must be [`BLOCK_SIZE`].
    pub fn new(dev: Arc<dyn BlockDevice>) -> Result<Self, FsStoreError> {
        if dev.block_size() as usize != BLOCK_SIZE {
            return Err(FsStoreError::Device(
                ptsd_blockdev::BlockError::InvalidConfig(format!(
                    "device block size {} is not {BLOCK_SIZE}",
                    dev.block_size()
                )),
            ));
        }
        Ok(Self { dev })
    }
}

struct DirectTxn<'a> {
    dev: &'a dyn BlockDevice,
    writes: Vec<(u64, Vec<u8>)>,
}

impl StoreTxn for DirectTxn<'_> {
    fn write(&mut self, blk: u64, data: &[u8]) -> Result<(), FsStoreError> {
        ptsd_blockdev::check_request(self.dev, blk, data.len())?;
        self.writes.push((blk, data.to_vec()));
        Ok(())
    }
    fn finish(self: Box<Self>) -> Result<(), FsStoreError> {
        for (blk, data) in &self.writes {
            self.dev.write(*blk, data)?;
        }
        Ok(())
    }
}

impl Store for DirectStore {
    fn num_blocks(&self) -> u64 {
        self.dev.num_blocks()
    }
    fn read(&self, blk: u64, buf: &mut [u8]) -> Result<(), FsStoreError> {
        Ok(self.dev.read(blk, buf)?)
    }
    fn begin(&self) -> Box<dyn StoreTxn + '_> {
        Box::new(DirectTxn {
            dev: &*self.dev,
            writes: Vec::new(),
        })
    }
    fn sync(&self) -> Result<(), FsStoreError> {
        Ok(self.dev.flush()?)
    }
    fn checkpoint(&self) -> Result<(), FsStoreError> {
        self.sync()
    }
    fn write_super(&self, block: &[u8]) -> Result<(), FsStoreError> {
        self.dev.write(0, block)?;
        Ok(self.dev.flush()?)
    }
    fn discard(&self, blk: u64, count: u64) -> Result<(), FsStoreError> {
        Ok(self.dev.discard(blk, count)?)
    }
    fn close(&self) -> Result<(), FsStoreError> {
        self.sync()
    }
    fn describe(&self) -> String {
        "direct device writes (no journal, not crash-safe)".into()
    }
}

/// The mounted path: every transaction goes through the NVM journal
/// (`ptsd-nvjournal`), `sync` is a journal commit (no device flush), and the
/// journal's checkpoint threads write home locations in the background.
pub struct JournalStore {
    journal: Arc<ptsd_nvjournal::Journal>,
    dev: Arc<dyn BlockDevice>,
    what: String,
}

impl JournalStore {
    /// A store over an opened (recovered) or newly created journal whose
    /// home device is `dev`. `what` describes it for `describe`.
    pub fn new(
        journal: Arc<ptsd_nvjournal::Journal>,
        dev: Arc<dyn BlockDevice>,
        what: String,
    ) -> Self {
        Self { journal, dev, what }
    }

    /// The journal (for statistics).
    pub fn journal(&self) -> &Arc<ptsd_nvjournal::Journal> {
        &self.journal
    }
}

struct JournalTxn<'j> {
    tx: ptsd_nvjournal::Tx<'j>,
    journal: &'j ptsd_nvjournal::Journal,
    dev: &'j dyn BlockDevice,
    /// Ordered-mode blocks, written to the device at `finish`.
    ordered: Vec<(u64, Vec<u8>)>,
}

impl StoreTxn for JournalTxn<'_> {
    fn write(&mut self, blk: u64, data: &[u8]) -> Result<(), FsStoreError> {
        Ok(self.tx.write(blk, data)?)
    }
    fn write_with_crc(&mut self, blk: u64, data: &[u8], crc: u32) -> Result<(), FsStoreError> {
        Ok(self.tx.write_with_crc(blk, data, crc)?)
    }
    fn write_ordered(&mut self, blk: u64, data: Vec<u8>) -> Result<(), FsStoreError> {
        ptsd_blockdev::check_request(self.dev, blk, data.len())?;
        // A version still in the journal would be checkpointed (or
        // replayed after a crash) over the device write: journal such a
        // block too, so it is the newest. Nobody else writes these blocks
        // meanwhile (they are this transaction's), so the answer cannot go
        // stale.
        let n = (data.len() / BLOCK_SIZE) as u64;
        if !(blk..blk + n).any(|b| self.journal.holds(b)) {
            self.ordered.push((blk, data));
            return Ok(());
        }
        for (i, block) in data.chunks(BLOCK_SIZE).enumerate() {
            let b = blk + i as u64;
            if self.journal.holds(b) {
                self.write(b, block)?;
            } else {
                self.ordered.push((b, block.to_vec()));
            }
        }
        Ok(())
    }
    fn finish(mut self: Box<Self>) -> Result<(), FsStoreError> {
        if !self.ordered.is_empty() {
            // Data first, then the metadata that points at it. The journal
            // flushes the device before any commit record that can cover
            // this transaction (which it can only once finished), so no
            // crash exposes unwritten blocks in a file; one flush serves
            // every ordered write before a commit, as ext4's data=ordered
            // waits for the data once per commit.
            self.ordered.sort_unstable_by_key(|b| b.0);
            // Contiguous runs as one request each (a 1 MiB FUSE write is
            // one device write, not 256; the file system hands over whole
            // runs, so this rarely joins any).
            let mut runs: Vec<(u64, Vec<u8>)> = Vec::new();
            for (blk, data) in std::mem::take(&mut self.ordered) {
                match runs.last_mut() {
                    Some((start, buf)) if *start + (buf.len() / BLOCK_SIZE) as u64 == blk => {
                        buf.extend_from_slice(&data)
                    }
                    _ => runs.push((blk, data)),
                }
            }
            self.journal.write_ordered(runs)?;
        }
        self.tx.finish()?;
        Ok(())
    }
}

impl Store for JournalStore {
    fn num_blocks(&self) -> u64 {
        self.dev.num_blocks()
    }
    fn read(&self, blk: u64, buf: &mut [u8]) -> Result<(), FsStoreError> {
        Ok(self.journal.read(blk, buf)?)
    }
    fn read_run(&self, blk: u64, buf: &mut [u8]) -> Result<(), FsStoreError> {
        // Blocks the journal holds come from it; the others, found not
        // held first and read from the device after, in runs: with no
        // writer, a block once checkpointed out of the journal is home.
        let n = (buf.len() / BLOCK_SIZE) as u64;
        let mut i = 0;
        while i < n {
            let at = |k: u64| k as usize * BLOCK_SIZE;
            if self.journal.holds(blk + i) {
                self.journal.read(blk + i, &mut buf[at(i)..at(i + 1)])?;
                i += 1;
                continue;
            }
            let mut j = i + 1;
            while j < n && !self.journal.holds(blk + j) {
                j += 1;
            }
            self.dev.read(blk + i, &mut buf[at(i)..at(j)])?;
            i = j;
        }
        Ok(())
    }
    fn begin(&self) -> Box<dyn StoreTxn + '_> {
        Box::new(JournalTxn {
            tx: self.journal.begin(),
            journal: &self.journal,
            dev: &*self.dev,
            ordered: Vec::new(),
        })
    }
    fn sync(&self) -> Result<(), FsStoreError> {
        Ok(self.journal.commit()?)
    }
    fn checkpoint(&self) -> Result<(), FsStoreError> {
        Ok(self.journal.checkpoint()?)
    }
    fn write_super(&self, block: &[u8]) -> Result<(), FsStoreError> {
        self.dev.write(0, block)?;
        Ok(self.dev.flush()?)
    }
    fn discard(&self, blk: u64, count: u64) -> Result<(), FsStoreError> {
        Ok(self.dev.discard(blk, count)?)
    }
    fn holds(&self, blk: u64) -> bool {
        self.journal.holds(blk)
    }
    fn close(&self) -> Result<(), FsStoreError> {
        Ok(self.journal.close()?)
    }
    fn describe(&self) -> String {
        self.what.clone()
    }
}

/// A store that counts what passes through it to `inner`: block reads
/// (a run read as its blocks) and transactions begun. For tests and
/// measurements: what an operation costs in I/O and journal records.
///
/// ```
/// # use std::sync::Arc;
/// # use ptsd_blockdev::MemDevice;
/// use ptsd_fs::{mkfs, Caller, CountingStore, DirectStore, FileSystem, MkfsOptions};
/// let dev = Arc::new(MemDevice::new(4096, 256).unwrap());
/// let direct = Arc::new(DirectStore::new(dev).unwrap());
/// mkfs(&*direct, &MkfsOptions::default()).unwrap();
/// let store = Arc::new(CountingStore::new(direct));
/// let fs = FileSystem::mount(store.clone()).unwrap();
/// store.reset();
/// fs.mkdir(fs.root(), b"d", 0o755, Caller::default()).unwrap();
/// assert_eq!(store.transactions(), 1);
/// ```
pub struct CountingStore {
    inner: Arc<dyn Store>,
    reads: std::sync::atomic::AtomicU64,
    txns: std::sync::atomic::AtomicU64,
}

impl CountingStore {
    /// Counts from zero.
    pub fn new(inner: Arc<dyn Store>) -> Self {
        CountingStore {
            inner,
            reads: Default::default(),
            txns: Default::default(),
        }
    }

    /// Blocks read since the start or the last [`reset`](Self::reset).
    pub fn reads(&self) -> u64 {
        self.reads.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Transactions begun since the start or the last
    /// [`reset`](Self::reset).
    pub fn transactions(&self) -> u64 {
        self.txns.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Both counts back to zero.
    pub fn reset(&self) {
        self.reads.store(0, std::sync::atomic::Ordering::Relaxed);
        self.txns.store(0, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Store for CountingStore {
    fn num_blocks(&self) -> u64 {
        self.inner.num_blocks()
    }
    fn read(&self, blk: u64, buf: &mut [u8]) -> Result<(), FsStoreError> {
        self.reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.inner.read(blk, buf)
    }
    fn begin(&self) -> Box<dyn StoreTxn + '_> {
        self.txns.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.inner.begin()
    }
    fn sync(&self) -> Result<(), FsStoreError> {
        self.inner.sync()
    }
    fn checkpoint(&self) -> Result<(), FsStoreError> {
        self.inner.checkpoint()
    }
    fn write_super(&self, block: &[u8]) -> Result<(), FsStoreError> {
        self.inner.write_super(block)
    }
    fn close(&self) -> Result<(), FsStoreError> {
        self.inner.close()
    }
    fn describe(&self) -> String {
        self.inner.describe()
    }
    // The rest passes through as well: a counting wrapper must not change
    // what the store below does (discards, block checks, pending blocks).
    fn read_run(&self, blk: u64, buf: &mut [u8]) -> Result<(), FsStoreError> {
        // A run counts as its blocks, as the default's block reads did.
        let blocks = buf.len().div_ceil(BLOCK_SIZE) as u64;
        self.reads
            .fetch_add(blocks, std::sync::atomic::Ordering::Relaxed);
        self.inner.read_run(blk, buf)
    }
    fn discard(&self, blk: u64, count: u64) -> Result<(), FsStoreError> {
        self.inner.discard(blk, count)
    }
    fn holds(&self, blk: u64) -> bool {
        self.inner.holds(blk)
    }
    fn verify(&self, blk: u64) -> Result<(), FsStoreError> {
        self.inner.verify(blk)
    }
    fn checks_blocks(&self) -> bool {
        self.inner.checks_blocks()
    }
}
