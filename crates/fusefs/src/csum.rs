//! Block checksums on plain devices: [`ChecksumStore`].
//!
//! A plain block device (an image file, a disk) can flip bits, write a
//! block to the wrong place or drop a write it acknowledged; metadata blocks
//! carry their own crc, file data did not. `ChecksumStore` wraps the store
//! the file system runs on and keeps a crc32c of every block written through
//! a transaction, salted with the block's number (so a block written to the
//! wrong place does not verify there), in a table at the end of the device.
//! A read whose block does not match its crc fails with
//! [`FsStoreError::Checksum`] (EIO to the caller); `fsck` reads every data
//! block and reports (with `--repair`, punches) the ones that fail.
//!
//! Crash atomicity comes from the journal underneath: the table blocks a
//! transaction changes are written *in that transaction*, so replay brings
//! data and crcs back together, and a torn or lost home write is replayed
//! like any other. Transactions finish under the table lock, so a table
//! block never carries the crc of data a later transaction writes.
//!
//! Layout of a device of `N` blocks: blocks `0..covered` are the file
//! system's (`num_blocks()`), then the table (1023 crcs and the block's own
//! crc per block), then a header in the last block. Block 0, the
//! superblock, is written in place outside transactions and has its own
//! crc; it is not in the table. A crc of 0 means "never written through a
//! transaction" and is not checked.

use std::sync::Arc;

use parking_lot::RwLock;

use crate::error::FsStoreError;
use crate::format::BLOCK_SIZE;
use crate::store::{Store, StoreTxn};

const MAGIC: &[u8; 8] = b"PTSDCSUM";
const VERSION: u32 = 1;
/// crcs per table block (the last 4 bytes are the block's own crc).
const PER_BLOCK: u64 = (BLOCK_SIZE as u64 - 4) / 4;

/// The checksum of block `blk` holding `data` (never 0).
fn crc(blk: u64, data: &[u8]) -> u32 {
    match crc32c::crc32c_append(crc32c::crc32c(&blk.to_le_bytes()), data) {
        0 => 1,
        c => c,
    }
}

/// Where the table and header of a device of `n` blocks go: `(covered,
/// table_start)`, or `None` if the device is too small.
fn layout(n: u64) -> Option<(u64, u64)> {
    // covered + ceil(covered / PER_BLOCK) + 1 <= n
    let mut covered = n.checked_sub(1)? * PER_BLOCK / (PER_BLOCK + 1);
    while covered + covered.div_ceil(PER_BLOCK) + 1 > n {
        covered = covered.checked_sub(1)?;
    }
    (covered > 0).then_some((covered, covered))
}

fn seal(b: &mut [u8]) {
    let at = b.len() - 4;
    let c = crc32c::crc32c(&b[..at]);
    b[at..].copy_from_slice(&c.to_le_bytes());
}

fn sealed(b: &[u8]) -> bool {
    let at = b.len() - 4;
    crc32c::crc32c(&b[..at]).to_le_bytes() == b[at..]
}

/// A store that checks every block it reads against the crc recorded when
/// it was written. See the module doc.
pub struct ChecksumStore {
    inner: Arc<dyn Store>,
    covered: u64,
    table_start: u64,
    /// One crc per covered block (0: none). Write-locked across a
    /// transaction's finish, so table blocks are written in transaction
    /// order and no read sees a crc before its data (or the reverse).
    table: RwLock<Vec<u32>>,
    /// Table blocks whose own crc failed at open: their blocks are not
    /// checked (fsck reports them; repair rewrites them).
    damaged: Vec<u64>,
}

impl ChecksumStore {
    /// Lay out a table and header at the end of `inner` (all crcs 0) and
    /// open it: the file system then goes on blocks `0..num_blocks()`.
    pub fn format(inner: Arc<dyn Store>) -> Result<ChecksumStore, FsStoreError> {
        let n = inner.num_blocks();
        let (covered, table_start) = layout(n).ok_or(FsStoreError::Checksum {
            block: 0,
            what: "device too small for a checksum table",
        })?;
        let mut tx = inner.begin();
        let mut empty = vec![0u8; BLOCK_SIZE];
        seal(&mut empty);
        for t in 0..covered.div_ceil(PER_BLOCK) {
            tx.write(table_start + t, &empty)?;
        }
        let mut h = vec![0u8; BLOCK_SIZE];
        h[..8].copy_from_slice(MAGIC);
        h[8..12].copy_from_slice(&VERSION.to_le_bytes());
        h[12..20].copy_from_slice(&covered.to_le_bytes());
        h[20..28].copy_from_slice(&table_start.to_le_bytes());
        seal(&mut h);
        tx.write(n - 1, &h)?;
        tx.finish()?;
        inner.checkpoint()?;
        Self::load(inner)?.ok_or(FsStoreError::Checksum {
            block: n - 1,
            what: "checksum table header not readable after formatting it",
        })
    }

    /// Open the table `inner` holds, or `None` if it has none: no header
    /// in its last block, or a superblock that says the file system spans
    /// the whole device (so the last block is its own, whatever it holds).
    pub fn open(inner: Arc<dyn Store>) -> Result<Option<ChecksumStore>, FsStoreError> {
        let n = inner.num_blocks();
        let Some((covered, _)) = layout(n) else {
            return Ok(None);
        };
        let mut b = vec![0u8; BLOCK_SIZE];
        inner.read(0, &mut b)?;
        match crate::format::Superblock::decode(&b, n) {
            Ok(sb) if sb.num_blocks == covered => Self::load(inner),
            _ => Ok(None),
        }
    }

    fn load(inner: Arc<dyn Store>) -> Result<Option<ChecksumStore>, FsStoreError> {
        let n = inner.num_blocks();
        let mut h = vec![0u8; BLOCK_SIZE];
        inner.read(n - 1, &mut h)?;
        if &h[..8] != MAGIC {
            return Ok(None);
        }
        let bad = |what| FsStoreError::Checksum { block: n - 1, what };
        if !sealed(&h) {
            return Err(bad("checksum table header is corrupt"));
        }
        if u32::from_le_bytes(h[8..12].try_into().expect("4 bytes")) != VERSION {
            return Err(bad("checksum table version not supported"));
        }
        let covered = u64::from_le_bytes(h[12..20].try_into().expect("8 bytes"));
        let table_start = u64::from_le_bytes(h[20..28].try_into().expect("8 bytes"));
        if layout(n) != Some((covered, table_start)) {
            return Err(bad("checksum table geometry does not match the device"));
        }
        let mut table = vec![0u32; covered as usize];
        let mut damaged = Vec::new();
        let mut b = vec![0u8; BLOCK_SIZE];
        for t in 0..covered.div_ceil(PER_BLOCK) {
            inner.read(table_start + t, &mut b)?;
            if !sealed(&b) {
                damaged.push(table_start + t);
                continue;
            }
            let first = (t * PER_BLOCK) as usize;
            let end = (first + PER_BLOCK as usize).min(table.len());
            for (i, e) in table[first..end].iter_mut().enumerate() {
                *e = u32::from_le_bytes(b[i * 4..i * 4 + 4].try_into().expect("4 bytes"));
            }
        }
        Ok(Some(ChecksumStore {
            inner,
            covered,
            table_start,
            table: RwLock::new(table),
            damaged,
        }))
    }

    /// Table blocks whose own crc failed at open (their blocks unchecked).
    pub fn damaged_table_blocks(&self) -> &[u64] {
        &self.damaged
    }

    /// Each block of `buf` (from block `blk`) against its crc in `table`.
    fn check(table: &[u32], blk: u64, buf: &[u8]) -> Result<(), FsStoreError> {
        for (i, chunk) in buf.chunks_exact(BLOCK_SIZE).enumerate() {
            let b = blk + i as u64;
            let want = table.get(b as usize).copied().unwrap_or(0);
            if b != 0 && want != 0 && want != crc(b, chunk) {
                return Err(FsStoreError::Checksum {
                    block: b,
                    what: "block does not match its checksum (bit rot, or a lost or misdirected write)",
                });
            }
        }
        Ok(())
    }

    fn table_block(&self, table: &[u32], t: u64) -> Vec<u8> {
        let mut b = vec![0u8; BLOCK_SIZE];
        let first = (t * PER_BLOCK) as usize;
        let end = (first + PER_BLOCK as usize).min(table.len());
        for (i, e) in table[first..end].iter().enumerate() {
            b[i * 4..i * 4 + 4].copy_from_slice(&e.to_le_bytes());
        }
        seal(&mut b);
        b
    }
}

struct CTxn<'a> {
    inner: Box<dyn StoreTxn + 'a>,
    store: &'a ChecksumStore,
    crcs: Vec<(u64, u32)>,
}

impl CTxn<'_> {
    fn record(&mut self, blk: u64, data: &[u8]) -> Result<(), FsStoreError> {
        let end = blk.saturating_add((data.len() / BLOCK_SIZE) as u64);
        if end > self.store.covered {
            return Err(FsStoreError::Checksum {
                block: blk,
                what: "write past the checksummed blocks",
            });
        }
        for (i, chunk) in data.chunks_exact(BLOCK_SIZE).enumerate() {
            let b = blk + i as u64;
            if b != 0 {
                self.crcs.push((b, crc(b, chunk)));
            }
        }
        Ok(())
    }
}

impl StoreTxn for CTxn<'_> {
    fn write(&mut self, blk: u64, data: &[u8]) -> Result<(), FsStoreError> {
        self.record(blk, data)?;
        self.inner.write(blk, data)
    }

    fn write_with_crc(&mut self, blk: u64, data: &[u8], crc: u32) -> Result<(), FsStoreError> {
        self.record(blk, data)?;
        self.inner.write_with_crc(blk, data, crc)
    }

    fn write_owned(
        &mut self,
        blk: u64,
        data: Vec<u8>,
        crc: Option<u32>,
    ) -> Result<(), FsStoreError> {
        self.record(blk, &data)?;
        self.inner.write_owned(blk, data, crc)
    }

    /// Ordered data goes home before the transaction finishes; its crcs
    /// are in the transaction like any other (the block is new, so until
    /// the transaction is durable nothing reads it).
    fn write_ordered(&mut self, blk: u64, data: Vec<u8>) -> Result<(), FsStoreError> {
        self.record(blk, &data)?;
        self.inner.write_ordered(blk, data)
    }

    fn finish(self: Box<Self>) -> Result<(), FsStoreError> {
        let CTxn {
            mut inner,
            store,
            crcs,
        } = *self;
        let mut table = store.table.write();
        let mut old = Vec::with_capacity(crcs.len());
        let mut touched = std::collections::BTreeSet::new();
        for &(b, c) in &crcs {
            old.push((b, table[b as usize]));
            table[b as usize] = c;
            touched.insert(b / PER_BLOCK);
        }
        let res = touched
            .iter()
            .try_for_each(|&t| inner.write(store.table_start + t, &store.table_block(&table, t)))
            .and_then(|()| inner.finish());
        if res.is_err() {
            // Not visible: the blocks keep their old contents and crcs.
            for &(b, c) in old.iter().rev() {
                table[b as usize] = c;
            }
        }
        res
    }
}

impl Store for ChecksumStore {
    fn num_blocks(&self) -> u64 {
        self.covered
    }

    fn read(&self, blk: u64, buf: &mut [u8]) -> Result<(), FsStoreError> {
        if blk >= self.covered {
            return Err(FsStoreError::Checksum {
                block: blk,
                what: "read past the checksummed blocks",
            });
        }
        // Read under the table's lock: a transaction finishing meanwhile
        // (under the write lock) changes data and crcs together.
        let table = self.table.read();
        self.inner.read(blk, buf)?;
        Self::check(&table, blk, buf)
    }

    fn read_run(&self, blk: u64, buf: &mut [u8]) -> Result<(), FsStoreError> {
        let end = blk.saturating_add((buf.len() / BLOCK_SIZE) as u64);
        if end > self.covered {
            return Err(FsStoreError::Checksum {
                block: blk,
                what: "read past the checksummed blocks",
            });
        }
        let table = self.table.read();
        self.inner.read_run(blk, buf)?;
        Self::check(&table, blk, buf)
    }

    fn begin(&self) -> Box<dyn StoreTxn + '_> {
        Box::new(CTxn {
            inner: self.inner.begin(),
            store: self,
            crcs: Vec::new(),
        })
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

    fn discard(&self, blk: u64, count: u64) -> Result<(), FsStoreError> {
        self.inner.discard(blk, count)
    }

    fn holds(&self, blk: u64) -> bool {
        self.inner.holds(blk)
    }

    fn close(&self) -> Result<(), FsStoreError> {
        self.inner.close()
    }

    fn describe(&self) -> String {
        format!("{}; block checksums", self.inner.describe())
    }

    fn verify(&self, blk: u64) -> Result<(), FsStoreError> {
        let mut b = vec![0u8; BLOCK_SIZE];
        self.read(blk, &mut b)
    }

    fn checks_blocks(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::DirectStore;
    use ptsd_blockdev::{BlockDevice, MemDevice};

    #[test]
    fn layout_fits_and_covers_most_of_the_device() {
        for n in [3u64, 100, 1024, 1025, 4096, 1 << 20] {
            let (c, t) = layout(n).unwrap();
            assert!(c + c.div_ceil(PER_BLOCK) < n, "{n}");
            assert_eq!(t, c);
            assert!(c + c.div_ceil(PER_BLOCK) + 2 >= n, "{n}: {c} wastes blocks");
        }
        assert!(layout(1).is_none());
    }

    #[test]
    fn a_changed_block_fails_its_read_and_survives_reopen() {
        let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(4096, 64).unwrap());
        let inner: Arc<dyn Store> = Arc::new(DirectStore::new(dev.clone()).unwrap());
        let cs = ChecksumStore::format(inner.clone()).unwrap();
        let mut tx = cs.begin();
        tx.write(5, &[7u8; 4096]).unwrap();
        tx.write(6, &[8u8; 4096]).unwrap();
        tx.finish().unwrap();
        let mut b = vec![0u8; 4096];
        cs.read(5, &mut b).unwrap();
        assert_eq!(b, [7u8; 4096]);
        // An unfinished transaction changes no crc.
        let mut tx = cs.begin();
        tx.write(5, &[9u8; 4096]).unwrap();
        drop(tx);
        cs.read(5, &mut b).unwrap();
        // Bit rot, then a write that went to the wrong block.
        let mut rot = vec![7u8; 4096];
        rot[100] ^= 4;
        dev.write(5, &rot).unwrap();
        dev.write(6, &[7u8; 4096]).unwrap();
        assert!(
            ChecksumStore::open(inner.clone()).unwrap().is_none(),
            "no file system on it"
        );
        let cs = ChecksumStore::load(inner).unwrap().unwrap();
        for blk in [5, 6] {
            assert!(matches!(
                cs.read(blk, &mut b),
                Err(FsStoreError::Checksum { block, .. }) if block == blk
            ));
        }
        // Never written: not checked.
        cs.read(7, &mut b).unwrap();
        assert!(cs.damaged_table_blocks().is_empty());
    }
}
