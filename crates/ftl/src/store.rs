//! Where the NAND pages' bytes live: the [`Store`] trait is the engine's I/O
//! boundary. [`NoStore`] keeps nothing (timing-only simulation),
//! [`MemStore`] keeps pages in memory, and the persistent store
//! ([`crate::image`]) keeps them, with their OOB, on a `BlockDevice`.

use thiserror::Error;

/// What a physical page holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum PageKind {
    /// Erased / never written.
    Free = 0,
    /// Host data; `Oob::id` is the LPN.
    Data = 1,
    /// A mapping (translation) page; `Oob::id` is its number.
    Map = 2,
    /// A page of discard (trim) records.
    Trim = 3,
}

/// The out-of-band area of a physical page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Oob {
    pub kind: PageKind,
    /// LPN (data) or mapping-page number (map); 0 for trim pages.
    pub id: u32,
    /// Program sequence number: larger = newer (GC copies get a new one).
    pub seq: u64,
    /// Mapping pages: the sequence number their content is as of (kept by
    /// GC copies). 0 otherwise.
    pub aux: u64,
}

impl Oob {
    pub const FREE: Oob = Oob {
        kind: PageKind::Free,
        id: 0,
        seq: 0,
        aux: 0,
    };
}

/// Errors of a store.
#[derive(Debug, Error)]
pub enum NandStoreError {
    #[error("backing device")]
    Device(#[from] ptsd_blockdev::BlockError),
    #[error("image")]
    Image(#[from] crate::image::ImageError),
}

/// The NAND array's bytes. The engine calls it only for stores that
/// [`keep data`](Store::keeps_data).
pub trait Store: Send {
    /// False for a timing-only store: then no other method is called.
    fn keeps_data(&self) -> bool;
    /// Whether pages survive the process (then OOB and recovery matter).
    fn persistent(&self) -> bool {
        false
    }
    /// Program physical page `ppa` (erased) with `data` (one page).
    fn program(&mut self, ppa: u32, oob: Oob, data: &[u8]) -> Result<(), NandStoreError>;
    /// Read physical page `ppa` into `buf` (one page).
    fn read(&mut self, ppa: u32, buf: &mut [u8]) -> Result<(), NandStoreError>;
    /// Read several physical pages into one buffer: `(ppa, slot)` fills
    /// `buf[slot * page..][..page]`, slots in increasing order. A store on a
    /// device overrides it to read runs of consecutive pages as one request
    /// and the runs in parallel: a multi-page host read of a cold image
    /// then costs one device round trip, not one per page.
    fn read_many(
        &mut self,
        pages: &[(u32, u32)],
        buf: &mut [u8],
        page: usize,
    ) -> Result<(), NandStoreError> {
        for &(ppa, slot) in pages {
            let at = slot as usize * page;
            self.read(ppa, &mut buf[at..at + page])?;
        }
        Ok(())
    }
    /// Where physical page `ppa` lies on the store's device, as (first
    /// device block, device blocks), for stores on a device.
    fn image_extent(&self, ppa: u32) -> Option<(u64, u64)> {
        let _ = ppa;
        None
    }
    /// GC copy: `to` gets `from`'s data with a new OOB.
    fn copy(
        &mut self,
        from: u32,
        to: u32,
        oob: Oob,
        scratch: &mut [u8],
    ) -> Result<(), NandStoreError> {
        self.read(from, scratch)?;
        self.program(to, oob, scratch)
    }
    /// Erase the `pages` pages starting at `first`.
    fn erase(&mut self, first: u32, pages: u32) -> Result<(), NandStoreError>;
    /// Make everything programmed so far durable.
    fn sync(&mut self) -> Result<(), NandStoreError> {
        Ok(())
    }
    /// For stores with more to offer (the persistent store's checkpoint).
    fn as_any_mut(&mut self) -> Option<&mut dyn std::any::Any> {
        None
    }
    /// An independent copy of the whole store, if it can have one (not a
    /// persistent store: its pages live on one device).
    fn try_clone(&self) -> Option<Box<dyn Store>> {
        None
    }
}

/// Timing-only: keeps nothing.
#[derive(Debug, Default)]
pub struct NoStore;

impl Store for NoStore {
    fn keeps_data(&self) -> bool {
        false
    }
    fn program(&mut self, _: u32, _: Oob, _: &[u8]) -> Result<(), NandStoreError> {
        Ok(())
    }
    fn read(&mut self, _: u32, buf: &mut [u8]) -> Result<(), NandStoreError> {
        buf.fill(0);
        Ok(())
    }
    fn erase(&mut self, _: u32, _: u32) -> Result<(), NandStoreError> {
        Ok(())
    }
    fn try_clone(&self) -> Option<Box<dyn Store>> {
        Some(Box::new(NoStore))
    }
}

/// Pages in memory, in chunks of contiguous pages (about 2 MiB, their
/// first page 4 KiB-aligned) allocated when a page in them is first
/// programmed.
///
/// Contiguous pages, rather than an allocation per page: a program costs
/// no allocation and no free, and a read copies from aligned memory. A
/// chunk stays once allocated, erased or not: GC reprograms an erased
/// block soon, and freeing it would cost a fresh, page-faulting chunk then
/// (with the paper's 1 MiB blocks, a chunk is two blocks). So the memory
/// used grows to the flash pages ever programmed, at most the physical
/// size.
///
/// ```
/// use ptsd_ftl::{MemStore, Oob, Store};
/// let mut s = MemStore::new(1024, 4096);
/// let mut buf = vec![1u8; 4096];
/// s.read(7, &mut buf).unwrap();
/// assert_eq!(buf, vec![0; 4096]); // never programmed: zeroes
/// s.program(7, Oob::FREE, &[9; 4096]).unwrap();
/// s.read(7, &mut buf).unwrap();
/// assert_eq!(buf, vec![9; 4096]);
/// s.erase(0, 64).unwrap();
/// s.read(7, &mut buf).unwrap();
/// assert_eq!(buf, vec![0; 4096]);
/// ```
#[derive(Debug, Clone)]
pub struct MemStore {
    page: usize,
    /// log2 of the pages per chunk.
    chunk_shift: u32,
    chunks: Vec<Option<Chunk>>,
    /// Bit per page: programmed since its last erase.
    programmed: Vec<u64>,
}

/// Where chunks start, for aligned copies.
const CHUNK_ALIGN: usize = 4096;

#[derive(Debug)]
struct Chunk {
    /// Zeroed when allocated (lazily, by the allocator's fresh mapping).
    bytes: Vec<u8>,
    /// Offset of the first page: `bytes` start `CHUNK_ALIGN`-aligned there.
    first: usize,
}

impl Chunk {
    fn new(len: usize) -> Chunk {
        let bytes = vec![0u8; len + CHUNK_ALIGN];
        // `align_offset` may refuse (usize::MAX): then unaligned, still right.
        let first = match bytes.as_ptr().align_offset(CHUNK_ALIGN) {
            o if o <= CHUNK_ALIGN => o,
            _ => 0,
        };
        Chunk { bytes, first }
    }

    fn page(&self, i: usize, page: usize) -> &[u8] {
        let at = self.first + i * page;
        &self.bytes[at..at + page]
    }

    fn page_mut(&mut self, i: usize, page: usize) -> &mut [u8] {
        let at = self.first + i * page;
        &mut self.bytes[at..at + page]
    }
}

impl Clone for Chunk {
    /// A copy with its own alignment.
    fn clone(&self) -> Chunk {
        let len = self.bytes.len() - CHUNK_ALIGN;
        let mut c = Chunk::new(len);
        let first = c.first;
        c.bytes[first..first + len].copy_from_slice(&self.bytes[self.first..self.first + len]);
        c
    }
}

impl MemStore {
    /// A store of `physical_pages` pages of `page_size` bytes, all erased.
    pub fn new(physical_pages: u64, page_size: u32) -> Self {
        let page = (page_size as usize).max(1);
        let per_chunk = ((2usize << 20) / page)
            .max(1)
            .min((physical_pages as usize).max(1));
        // Round down to a power of two: the chunk of a page is a shift.
        let chunk_shift = usize::BITS - 1 - per_chunk.leading_zeros();
        let chunks = (physical_pages as usize).div_ceil(1 << chunk_shift);
        MemStore {
            page,
            chunk_shift,
            chunks: (0..chunks).map(|_| None).collect(),
            programmed: vec![0; (physical_pages as usize).div_ceil(64)],
        }
    }

    fn is_programmed(&self, ppa: usize) -> bool {
        self.programmed[ppa / 64] & (1 << (ppa % 64)) != 0
    }

    fn locate(&self, ppa: usize) -> (usize, usize) {
        (ppa >> self.chunk_shift, ppa & ((1 << self.chunk_shift) - 1))
    }

    /// Page `ppa`'s bytes, marking it programmed (its chunk allocated if
    /// need be).
    fn page_for_program(&mut self, ppa: usize) -> &mut [u8] {
        let (c, i) = self.locate(ppa);
        let len = self.page << self.chunk_shift;
        self.programmed[ppa / 64] |= 1 << (ppa % 64);
        self.chunks[c]
            .get_or_insert_with(|| Chunk::new(len))
            .page_mut(i, self.page)
    }

    fn unprogram(&mut self, ppa: usize) {
        self.programmed[ppa / 64] &= !(1 << (ppa % 64));
    }
}

impl Store for MemStore {
    fn keeps_data(&self) -> bool {
        true
    }
    fn program(&mut self, ppa: u32, _: Oob, data: &[u8]) -> Result<(), NandStoreError> {
        self.page_for_program(ppa as usize).copy_from_slice(data);
        Ok(())
    }
    fn read(&mut self, ppa: u32, buf: &mut [u8]) -> Result<(), NandStoreError> {
        let ppa = ppa as usize;
        let (c, i) = self.locate(ppa);
        match &self.chunks[c] {
            Some(chunk) if self.is_programmed(ppa) => buf.copy_from_slice(chunk.page(i, self.page)),
            _ => buf.fill(0),
        }
        Ok(())
    }
    fn copy(&mut self, from: u32, to: u32, _: Oob, _: &mut [u8]) -> Result<(), NandStoreError> {
        let (from, to) = (from as usize, to as usize);
        if !self.is_programmed(from) {
            self.unprogram(to);
            return Ok(());
        }
        let page = self.page;
        self.page_for_program(to);
        let ((fc, fi), (tc, ti)) = (self.locate(from), self.locate(to));
        if fc == tc {
            if let Some(chunk) = &mut self.chunks[fc] {
                let (a, b) = (chunk.first + fi * page, chunk.first + ti * page);
                chunk.bytes.copy_within(a..a + page, b);
            }
        } else {
            let (lo, hi) = self.chunks.split_at_mut(fc.max(tc));
            let (src, dst) = if fc < tc {
                (&lo[fc], &mut hi[0])
            } else {
                (&hi[0], &mut lo[tc])
            };
            if let (Some(src), Some(dst)) = (src, dst) {
                dst.page_mut(ti, page).copy_from_slice(src.page(fi, page));
            }
        }
        Ok(())
    }
    fn erase(&mut self, first: u32, pages: u32) -> Result<(), NandStoreError> {
        for ppa in first as usize..(first as usize + pages as usize) {
            self.unprogram(ppa);
        }
        Ok(())
    }
    fn try_clone(&self) -> Option<Box<dyn Store>> {
        Some(Box::new(self.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(s: &mut MemStore, ppa: u32) -> Vec<u8> {
        let mut b = vec![0xEE; 4096];
        s.read(ppa, &mut b).unwrap();
        b
    }

    #[test]
    fn mem_store_copies_within_and_across_chunks_and_clones() {
        // 2 MiB chunks of 4 KiB pages: 512 pages each, 3 chunks.
        let mut s = MemStore::new(1200, 4096);
        assert_eq!(s.chunks.len(), 3);
        s.program(5, Oob::FREE, &[1; 4096]).unwrap();
        s.program(700, Oob::FREE, &[2; 4096]).unwrap();
        let mut scratch = [];
        s.copy(5, 6, Oob::FREE, &mut scratch).unwrap(); // same chunk
        s.copy(5, 1100, Oob::FREE, &mut scratch).unwrap(); // later chunk
        s.copy(700, 7, Oob::FREE, &mut scratch).unwrap(); // earlier chunk
        assert_eq!(read(&mut s, 6), vec![1; 4096]);
        assert_eq!(read(&mut s, 1100), vec![1; 4096]);
        assert_eq!(read(&mut s, 7), vec![2; 4096]);
        // Copying an erased page leaves an erased page.
        s.copy(8, 1100, Oob::FREE, &mut scratch).unwrap();
        assert_eq!(read(&mut s, 1100), vec![0; 4096]);
        let mut c = s.try_clone().unwrap();
        s.erase(0, 512).unwrap();
        assert_eq!(read(&mut s, 5), vec![0; 4096]);
        assert_eq!(read(&mut s, 700), vec![2; 4096]);
        let mut b = vec![0; 4096];
        c.read(5, &mut b).unwrap();
        assert_eq!(b, vec![1; 4096], "the clone is independent");
        // The chunk's memory stays: a new program needs no allocation.
        assert!(s.chunks[0].is_some());
    }

    #[test]
    fn mem_store_pages_start_aligned() {
        let mut s = MemStore::new(64, 4096);
        s.program(3, Oob::FREE, &[3; 4096]).unwrap();
        let chunk = s.chunks[0].as_ref().unwrap();
        assert_eq!(chunk.page(3, 4096).as_ptr().align_offset(CHUNK_ALIGN), 0);
        // Odd page sizes and tiny stores still work.
        let mut t = MemStore::new(3, 512);
        t.program(2, Oob::FREE, &[9; 512]).unwrap();
        let mut b = vec![0; 512];
        t.read(2, &mut b).unwrap();
        assert_eq!(b, vec![9; 512]);
    }
}
