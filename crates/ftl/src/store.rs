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
pub enum StoreError {
    #[error("backing device: {0}")]
    Device(#[from] ptsd_blockdev::BlockError),
    #[error("image: {0}")]
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
    fn program(&mut self, ppa: u32, oob: Oob, data: &[u8]) -> Result<(), StoreError>;
    /// Read physical page `ppa` into `buf` (one page).
    fn read(&mut self, ppa: u32, buf: &mut [u8]) -> Result<(), StoreError>;
    /// GC copy: `to` gets `from`'s data with a new OOB.
    fn copy(&mut self, from: u32, to: u32, oob: Oob, scratch: &mut [u8]) -> Result<(), StoreError> {
        self.read(from, scratch)?;
        self.program(to, oob, scratch)
    }
    /// Erase the `pages` pages starting at `first`.
    fn erase(&mut self, first: u32, pages: u32) -> Result<(), StoreError>;
    /// Make everything programmed so far durable.
    fn sync(&mut self) -> Result<(), StoreError> {
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
    fn program(&mut self, _: u32, _: Oob, _: &[u8]) -> Result<(), StoreError> {
        Ok(())
    }
    fn read(&mut self, _: u32, buf: &mut [u8]) -> Result<(), StoreError> {
        buf.fill(0);
        Ok(())
    }
    fn erase(&mut self, _: u32, _: u32) -> Result<(), StoreError> {
        Ok(())
    }
    fn try_clone(&self) -> Option<Box<dyn Store>> {
        Some(Box::new(NoStore))
    }
}

/// Pages in memory, allocated when first programmed and freed on erase.
#[derive(Debug, Clone)]
pub struct MemStore {
    pages: Vec<Option<Box<[u8]>>>,
}

impl MemStore {
    pub fn new(physical_pages: u64) -> Self {
        MemStore {
            pages: (0..physical_pages).map(|_| None).collect(),
        }
    }
}

impl Store for MemStore {
    fn keeps_data(&self) -> bool {
        true
    }
    fn program(&mut self, ppa: u32, _: Oob, data: &[u8]) -> Result<(), StoreError> {
        self.pages[ppa as usize] = Some(data.into());
        Ok(())
    }
    fn read(&mut self, ppa: u32, buf: &mut [u8]) -> Result<(), StoreError> {
        match &self.pages[ppa as usize] {
            Some(p) => buf.copy_from_slice(p),
            None => buf.fill(0),
        }
        Ok(())
    }
    fn copy(&mut self, from: u32, to: u32, _: Oob, _: &mut [u8]) -> Result<(), StoreError> {
        self.pages[to as usize] = self.pages[from as usize].clone();
        Ok(())
    }
    fn erase(&mut self, first: u32, pages: u32) -> Result<(), StoreError> {
        for p in &mut self.pages[first as usize..(first + pages) as usize] {
            *p = None;
        }
        Ok(())
    }
    fn try_clone(&self) -> Option<Box<dyn Store>> {
        Some(Box::new(self.clone()))
    }
}
