// Over 800 lines: the layout, the staged write runs and the OOB entries all live in one PersistentStore and change together; recovery is apart in image/recover.rs.
//! The persistent store: an SSD image on a `BlockDevice`, and recovery.
//!
//! Layout, in pages of the SSD's page size (the device's block size must
//! divide it):
//!
//! | pages            | content                                            |
//! |------------------|----------------------------------------------------|
//! | 0                | header: magic, version, geometry, clean flag, crc32c |
//! | 1 ..             | checkpoint: sequence number, GTD, erase counts, crc32c (valid only after a clean shutdown) |
//! | then             | OOB area: 32 bytes per physical page               |
//! | then             | the physical pages, stripe-major (below)           |
//!
//! Physical page `p` of block `b` of chip `c` (block `b` counted within its
//! chip) is data page `(b * pages_per_block + p) * chips + c`: the pages a
//! stripe writes at the same place on every chip lie side by side. Host
//! writes go round robin over the chips, each into its open block, and the
//! chips' write points mostly sit at the same block index (on a fresh image
//! 85 % of a sequentially written file's 1 MiB windows had one block index
//! on every chip), so a file's consecutive pages are mostly consecutive on
//! the image: a 1 MiB read is 3-5 runs there instead of 32 (one per chip).
//! (Version 1 stored page `ppa` at data page `ppa`.)
//!
//! OOB entry: kind (u8), id (u32: LPN or mapping-page number), seq (u64, a
//! program's order), aux (u64: a mapping page's as-of sequence number), the
//! crc32c of the page's data, and the crc32c of the entry. OOB entries are
//! kept in memory and written at each `sync`, *after* the data pages are
//! durable, so a durable entry always describes durable data; the data crc
//! catches an entry whose page was later overwritten without its new entry
//! reaching the media. A sync writes the entries in two ordered steps: the
//! data pages' first, then (after a device flush) those of the mapping and
//! trim pages programmed since the last sync. A mapping page's entry can
//! thus become durable only after the entries of every data page it points
//! to: a power cut inside a sync never leaves a mapping page that names
//! data pages recovery cannot see (it would take the page's as-of claim for
//! the whole page and drop the older, still valid copies of those LPNs).
//!
//! Recovery after a power cut (header not clean): every OOB entry is checked
//! against its page's data; per mapping page the newest copy (highest seq)
//! gives the map as of its `aux`; data pages and trim records newer than
//! that override it (newest sequence number wins). Then a checkpoint writes
//! the recovered map, so the trim records can go. After a clean shutdown the
//! checkpoint's GTD is read back and nothing is scanned.
//!
//! Programs are written to the device lazily: a program's page is staged in
//! memory, appended to the run of adjacent pages it continues, and the runs
//! go out together — sorted, each as one write, one batch — when the
//! staging area is full, before a batched read that needs one of them, and
//! at the start of each sync (a
//! single-page read of a staged page is served from memory). A page per
//! `pwrite` cost the file system's bulk writes half their CPU time in the
//! kernel's per-call and per-page work. Nothing is lost that was promised:
//! a program is durable only after a sync, as before (its OOB entry is
//! written there, after the data).

use std::collections::HashMap;

use ptsd_blockdev::le::{get_u32, get_u64, put_u32, put_u64};
use ptsd_blockdev::BlockDevice;
use thiserror::Error;

use crate::config::FtlConfig;
use crate::error::FtlError;
use crate::flash::{INVALID, TRIM_OWNER};
use crate::ssd::{Ssd, UNMAPPED};
use crate::store::{NandStoreError, Oob, PageKind, Store};

mod recover;
use recover::{recover_after_cut, recover_clean, Recovered};

const MAGIC: &[u8; 8] = b"PTSDFTL1";
const VERSION: u32 = 2;
const OOB_BYTES: usize = 32;
const HEADER_BYTES: usize = 48;

/// Whether `first_bytes` (the start of a file or device) is the header of
/// an emulated SSD's image, so a tool handed one where a file system was
/// expected can say what it is.
///
/// ```
/// assert!(ptsd_ftl::image::is_image_header(b"PTSDFTL1 and the rest"));
/// assert!(!ptsd_ftl::image::is_image_header(&[0u8; 4096]));
/// ```
pub fn is_image_header(first_bytes: &[u8]) -> bool {
    first_bytes.starts_with(MAGIC)
}

/// What is wrong with an image.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum ImageError {
    #[error("not a ptsd-ftl image (bad magic)")]
    NotAnImage,
    #[error("image version {0} is not supported (this build reads version {VERSION})")]
    Version(u32),
    #[error("image header is corrupt (checksum mismatch)")]
    HeaderChecksum,
    #[error("image checkpoint is corrupt (checksum mismatch)")]
    CheckpointChecksum,
    #[error(
        "physical page {ppa} does not match its checksum (corrupt, lost or misdirected write)"
    )]
    PageChecksum { ppa: u32 },
    #[error("image geometry {found} differs from the configuration's {expected}")]
    Geometry { found: String, expected: String },
    #[error("device of {have} bytes is too small for the image ({needed} bytes)")]
    TooSmall { needed: u64, have: u64 },
    #[error("device block size {block} does not divide the page size {page}")]
    BlockSize { block: u32, page: u32 },
}

#[derive(Clone, Copy, Debug)]
struct Layout {
    page: usize,
    /// Device blocks per page.
    k: u64,
    ckpt_first: u64,
    ckpt_pages: u64,
    oob_first: u64,
    oob_pages: u64,
    data_first: u64,
    total_pages: u64,
    /// Geometry, for the stripe-major place of a physical page.
    chips: u32,
    ppb: u32,
    blocks_per_chip: u32,
}

impl Layout {
    fn new(cfg: &FtlConfig, block: u32) -> Layout {
        let g = cfg.geometry();
        let page = g.page_size as u64;
        let ckpt_bytes = 32 + 12 * g.map_pages + 4 * g.total_blocks() + 4;
        let ckpt_pages = ckpt_bytes.div_ceil(page);
        let oob_pages = (g.physical_pages * OOB_BYTES as u64).div_ceil(page);
        Layout {
            page: page as usize,
            k: page / u64::from(block),
            ckpt_first: 1,
            ckpt_pages,
            oob_first: 1 + ckpt_pages,
            oob_pages,
            data_first: 1 + ckpt_pages + oob_pages,
            total_pages: 1 + ckpt_pages + oob_pages + g.physical_pages,
            chips: g.chips,
            ppb: g.pages_per_block,
            blocks_per_chip: g.blocks_per_chip,
        }
    }

    /// The data page (from `data_first`) holding physical page `ppa`:
    /// stripe-major, see the module docs. A bijection on the physical
    /// pages.
    fn data_page(&self, ppa: u32) -> u64 {
        let per_chip = self.ppb * self.blocks_per_chip;
        let (chip, in_chip) = (ppa / per_chip, ppa % per_chip);
        u64::from(in_chip) * u64::from(self.chips) + u64::from(chip)
    }

    fn block(&self, page_index: u64) -> u64 {
        page_index * self.k
    }
}

fn geometry_string(cfg: &FtlConfig, logical: u64) -> String {
    format!(
        "{} B pages, {}x{} chips, {} blocks/chip, {} pages/block, {} logical pages",
        cfg.page_size,
        cfg.channels,
        cfg.chips_per_channel,
        cfg.blocks_per_chip,
        cfg.pages_per_block,
        logical
    )
}

fn encode_header(cfg: &FtlConfig, clean: bool, out: &mut [u8]) {
    out.fill(0);
    out[..8].copy_from_slice(MAGIC);
    put_u32(out, 8, VERSION);
    put_u32(out, 12, cfg.page_size);
    put_u32(out, 16, cfg.channels);
    put_u32(out, 20, cfg.chips_per_channel);
    put_u32(out, 24, cfg.blocks_per_chip);
    put_u32(out, 28, cfg.pages_per_block);
    put_u64(out, 32, cfg.logical_pages());
    out[40] = u8::from(clean);
    let crc = crc32c::crc32c(&out[..44]);
    put_u32(out, 44, crc);
}

/// `None` = a blank (all-zero) header; `Some(clean)` = a valid image.
fn decode_header(cfg: &FtlConfig, b: &[u8]) -> Result<Option<bool>, ImageError> {
    if b[..HEADER_BYTES].iter().all(|&x| x == 0) {
        return Ok(None);
    }
    if &b[..8] != MAGIC {
        return Err(ImageError::NotAnImage);
    }
    if crc32c::crc32c(&b[..44]) != get_u32(b, 44) {
        return Err(ImageError::HeaderChecksum);
    }
    let version = get_u32(b, 8);
    if version != VERSION {
        return Err(ImageError::Version(version));
    }
    let found = FtlConfig {
        page_size: get_u32(b, 12),
        channels: get_u32(b, 16),
        chips_per_channel: get_u32(b, 20),
        blocks_per_chip: get_u32(b, 24),
        pages_per_block: get_u32(b, 28),
        ..FtlConfig::default()
    };
    let found_logical = get_u64(b, 32);
    let (fs, es) = (
        geometry_string(&found, found_logical),
        geometry_string(cfg, cfg.logical_pages()),
    );
    if fs != es {
        return Err(ImageError::Geometry {
            found: fs,
            expected: es,
        });
    }
    Ok(Some(b[40] == 1))
}

/// A decoded, verified OOB entry.
#[derive(Clone, Copy, Debug)]
struct Entry {
    oob: Oob,
    data_crc: u32,
}

fn encode_oob(oob: &Oob, data_crc: u32, out: &mut [u8]) {
    out.fill(0);
    if oob.kind == PageKind::Free {
        return;
    }
    out[0] = oob.kind as u8;
    put_u32(out, 4, oob.id);
    put_u64(out, 8, oob.seq);
    put_u64(out, 16, oob.aux);
    put_u32(out, 24, data_crc);
    let crc = crc32c::crc32c(&out[..28]);
    put_u32(out, 28, crc);
}

fn decode_oob(b: &[u8]) -> Option<Entry> {
    let kind = match b[0] {
        1 => PageKind::Data,
        2 => PageKind::Map,
        3 => PageKind::Trim,
        _ => return None,
    };
    if crc32c::crc32c(&b[..28]) != get_u32(b, 28) {
        return None;
    }
    Some(Entry {
        oob: Oob {
            kind,
            id: get_u32(b, 4),
            seq: get_u64(b, 8),
            aux: get_u64(b, 16),
        },
        data_crc: get_u32(b, 24),
    })
}

/// Pages and their OOB on a [`BlockDevice`].
pub struct PersistentStore {
    dev: Box<dyn BlockDevice>,
    lay: Layout,
    /// The whole OOB area, as it should be on the device.
    oob: Vec<u8>,
    /// OOB pages changed since the last sync.
    dirty: Vec<bool>,
    dirty_list: Vec<u32>,
    /// Mapping and trim pages given an entry since the last sync, each with
    /// the entry it had before (written in the sync's first step instead,
    /// see the module docs); `meta_marked` has a bit per page listed here.
    meta: Vec<(u32, [u8; OOB_BYTES])>,
    meta_marked: Vec<u64>,
    /// Programs not yet written to the device, as runs of adjacent pages,
    /// each in a buffer of its own that goes to the device as it is (no
    /// gather copy): (first device block, bytes). A flush programs the
    /// chips round robin, each at its open block's next page: on the
    /// stripe-major image the pages of chips whose write points sit at the
    /// same block index follow each other, and their run grows through the
    /// whole flush.
    runs: Vec<(u64, Vec<u8>)>,
    /// The device block right after each run's end → the run.
    run_ends: HashMap<u64, usize>,
    /// Where each staged block is: (run, byte offset in it).
    staged_at: HashMap<u64, (usize, usize)>,
    staged_bytes: usize,
    /// Bytes a new run reserves: the mean run of the last write-out (at
    /// most `RUN_MAX`). Chips at different block indices and the mapping
    /// pages make short runs, which should not each reserve `RUN_MAX`.
    run_reserve: usize,
}

/// Staged program bytes that trigger a write-out.
const STAGED_MAX: usize = 4 << 20;

/// Bytes a run holds at most: a page that continues a full run starts the
/// next one. A flush over chips at one block index makes one stretch of up
/// to the 4 MiB staging area; as 128 KiB runs (adjacent, each one write)
/// their buffers stay below malloc's mmap threshold and are reused, where a
/// 4 MiB buffer grown by doubling was copied on the way and mapped (and
/// faulted in) afresh at each write-out: `ptsd bench fs` bulk writes lost a
/// quarter of their speed to that.
const RUN_MAX: usize = 128 << 10;

impl PersistentStore {
    /// The entry holds the crc of what was programmed: a flipped bit, a
    /// lost or misdirected device write shows here as an error, never as
    /// another page's (or stale) data handed up — or copied on by GC under
    /// a fresh crc.
    fn verify(&self, ppa: u32, data: &[u8]) -> Result<(), NandStoreError> {
        if let Some(e) = self.entry(ppa) {
            if matches!(e.oob.kind, PageKind::Data | PageKind::Map)
                && crc32c::crc32c(data) != e.data_crc
            {
                return Err(ImageError::PageChecksum { ppa }.into());
            }
        }
        Ok(())
    }

    fn data_block(&self, ppa: u32) -> u64 {
        self.lay
            .block(self.lay.data_first + self.lay.data_page(ppa))
    }

    fn set_oob(&mut self, ppa: u32, oob: &Oob, data_crc: u32) {
        let at = ppa as usize * OOB_BYTES;
        if matches!(oob.kind, PageKind::Map | PageKind::Trim) {
            let (w, bit) = (ppa as usize / 64, 1u64 << (ppa % 64));
            if self.meta_marked[w] & bit == 0 {
                self.meta_marked[w] |= bit;
                let mut before = [0u8; OOB_BYTES];
                before.copy_from_slice(&self.oob[at..at + OOB_BYTES]);
                self.meta.push((ppa, before));
            }
        }
        encode_oob(oob, data_crc, &mut self.oob[at..at + OOB_BYTES]);
        let page = at / self.lay.page;
        if !self.dirty[page] {
            self.dirty[page] = true;
            self.dirty_list.push(page as u32);
        }
    }

    fn entry(&self, ppa: u32) -> Option<Entry> {
        let at = ppa as usize * OOB_BYTES;
        decode_oob(&self.oob[at..at + OOB_BYTES])
    }

    fn write_pages(&self, first_page: u64, bytes: &[u8]) -> Result<(), NandStoreError> {
        let mut padded;
        let buf = if bytes.len() % self.lay.page == 0 {
            bytes
        } else {
            padded = bytes.to_vec();
            padded.resize(bytes.len().next_multiple_of(self.lay.page), 0);
            &padded[..]
        };
        self.dev.write(self.lay.block(first_page), buf)?;
        Ok(())
    }

    /// Write OOB pages `pages` (sorted, distinct) from the in-memory area,
    /// contiguous runs in one device write each.
    fn write_oob_pages(&self, pages: &[u32]) -> Result<(), NandStoreError> {
        let page = self.lay.page;
        let mut i = 0;
        while i < pages.len() {
            let mut j = i + 1;
            while j < pages.len() && pages[j] == pages[j - 1] + 1 {
                j += 1;
            }
            let (a, b) = (pages[i] as usize, pages[j - 1] as usize + 1);
            self.dev.write(
                self.lay.block(self.lay.oob_first + a as u64),
                &self.oob[a * page..b * page],
            )?;
            i = j;
        }
        Ok(())
    }

    /// Swap the listed mapping/trim entries with their pre-sync ones.
    fn swap_meta(&mut self) {
        for (ppa, before) in &mut self.meta {
            let at = *ppa as usize * OOB_BYTES;
            self.oob[at..at + OOB_BYTES].swap_with_slice(before);
        }
    }

    /// Write every staged program to the device: the runs, sorted by place,
    /// as one owned batch (a write-behind device takes it and returns at
    /// once). (A page is staged at most once: `erase` writes the staged
    /// pages out first.)
    fn write_pending(&mut self) -> Result<(), NandStoreError> {
        if self.runs.is_empty() {
            return Ok(());
        }
        let mut runs = std::mem::take(&mut self.runs);
        runs.sort_unstable_by_key(|r| r.0);
        self.run_ends.clear();
        self.staged_at.clear();
        let mean = self.staged_bytes / runs.len();
        self.run_reserve = mean
            .next_multiple_of(self.lay.page)
            .clamp(self.lay.page, RUN_MAX);
        self.staged_bytes = 0;
        self.dev
            .write_batch_owned(runs)
            .map_err(NandStoreError::from)
    }

    fn read_pages(&self, first_page: u64, pages: u64) -> Result<Vec<u8>, NandStoreError> {
        let mut v = vec![0u8; pages as usize * self.lay.page];
        self.dev.read(self.lay.block(first_page), &mut v)?;
        Ok(v)
    }
}

impl Store for PersistentStore {
    fn keeps_data(&self) -> bool {
        true
    }

    fn as_any_mut(&mut self) -> Option<&mut dyn std::any::Any> {
        Some(self)
    }

    fn persistent(&self) -> bool {
        true
    }

    fn program(&mut self, ppa: u32, oob: Oob, data: &[u8]) -> Result<(), NandStoreError> {
        if data.len() != self.lay.page {
            // Not a whole page (no caller does this): written at once.
            self.write_pending()?;
            self.dev.write(self.data_block(ppa), data)?;
        } else {
            let block = self.data_block(ppa);
            let page = self.lay.page;
            let run = match self.run_ends.remove(&block) {
                Some(run) if self.runs[run].1.len() < RUN_MAX => run,
                _ => {
                    // Reserved up front: a run that grows by reallocating
                    // copies itself. (`staged_bytes < STAGED_MAX` here: a
                    // program that reaches it writes everything out.)
                    let reserve = self
                        .run_reserve
                        .min(STAGED_MAX.saturating_sub(self.staged_bytes));
                    self.runs.push((block, Vec::with_capacity(reserve)));
                    self.runs.len() - 1
                }
            };
            let bytes = &mut self.runs[run].1;
            if bytes.len() == bytes.capacity() {
                // Doubling, but never past `RUN_MAX`.
                let more = bytes.len().max(page).min(RUN_MAX - bytes.len());
                bytes.reserve_exact(more);
            }
            self.staged_at.insert(block, (run, bytes.len()));
            bytes.extend_from_slice(data);
            self.run_ends.insert(block + self.lay.k, run);
            self.staged_bytes += page;
        }
        self.set_oob(ppa, &oob, crc32c::crc32c(data));
        if self.staged_bytes >= STAGED_MAX {
            self.write_pending()?;
        }
        Ok(())
    }

    fn image_extent(&self, ppa: u32) -> Option<(u64, u64)> {
        Some((self.data_block(ppa), self.lay.k))
    }

    fn read(&mut self, ppa: u32, buf: &mut [u8]) -> Result<(), NandStoreError> {
        let block = self.data_block(ppa);
        match self.staged_at.get(&block) {
            Some(&(run, at)) if buf.len() == self.lay.page => {
                buf.copy_from_slice(&self.runs[run].1[at..at + buf.len()])
            }
            _ => {
                if buf.len() != self.lay.page {
                    // Not one page: it may span staged ones.
                    self.write_pending()?;
                }
                self.dev.read(block, buf)?
            }
        }
        self.verify(ppa, buf)
    }

    fn read_many(
        &mut self,
        pages: &[(u32, u32)],
        buf: &mut [u8],
        page: usize,
    ) -> Result<(), NandStoreError> {
        if pages
            .iter()
            .any(|&(ppa, _)| self.staged_at.contains_key(&self.data_block(ppa)))
        {
            self.write_pending()?;
        }
        // Runs of pages consecutive both on the image (device blocks, not
        // ppas: see the layout) and in the buffer, as (first device block,
        // first slot, pages); `pages` lists each run's pages in order.
        let k = self.lay.k;
        let mut runs: Vec<(u64, u32, u32)> = Vec::new();
        for &(ppa, slot) in pages {
            let block = self.data_block(ppa);
            match runs.last_mut() {
                Some((b, s, n)) if *b + u64::from(*n) * k == block && *s + *n == slot => *n += 1,
                _ => runs.push((block, slot, 1)),
            }
        }
        let mut reads: Vec<(u64, &mut [u8])> = Vec::with_capacity(runs.len());
        let mut rest = buf;
        let mut rest_at = 0usize;
        for &(block, slot, n) in &runs {
            let start = slot as usize * page - rest_at;
            let (_, tail) = rest.split_at_mut(start);
            let (chunk, after) = tail.split_at_mut(n as usize * page);
            reads.push((block, chunk));
            rest = after;
            rest_at = (slot + n) as usize * page;
        }
        self.dev.read_batch(&mut reads)?;
        let mut ppas = pages.iter().map(|&(ppa, _)| ppa);
        for ((_, _, n), (_, chunk)) in runs.iter().zip(&reads) {
            for one in chunk.chunks(page).take(*n as usize) {
                let ppa = ppas.next().expect("one ppa per page read");
                self.verify(ppa, one)?;
            }
        }
        Ok(())
    }

    fn erase(&mut self, first: u32, pages: u32) -> Result<(), NandStoreError> {
        // So that no page is staged twice (the engine syncs before an
        // erase anyway: this is then a no-op).
        self.write_pending()?;
        for p in first..first + pages {
            self.set_oob(p, &Oob::FREE, 0);
        }
        Ok(())
    }

    fn sync(&mut self) -> Result<(), NandStoreError> {
        // Data first, then the OOB entries that describe it.
        self.write_pending()?;
        self.dev.flush()?;
        if self.dirty_list.is_empty() {
            return Ok(());
        }
        self.dirty_list.sort_unstable();
        if self.meta.is_empty() {
            self.write_oob_pages(&self.dirty_list)?;
        } else {
            // Step 1: every changed entry but the new mapping/trim ones.
            self.swap_meta();
            let r = self.write_oob_pages(&self.dirty_list);
            self.swap_meta();
            r?;
            self.dev.flush()?;
            // Step 2: the OOB pages holding new mapping/trim entries.
            let per_page = (self.lay.page / OOB_BYTES) as u32;
            let mut pages: Vec<u32> = self.meta.iter().map(|&(p, _)| p / per_page).collect();
            pages.sort_unstable();
            pages.dedup();
            self.write_oob_pages(&pages)?;
            for &(p, _) in &self.meta {
                self.meta_marked[p as usize / 64] = 0;
            }
            self.meta.clear();
        }
        for &p in &self.dirty_list {
            self.dirty[p as usize] = false;
        }
        self.dirty_list.clear();
        self.dev.flush()?;
        Ok(())
    }
}

impl Ssd {
    /// Open (or create) the persistent SSD image named by `cfg.store`
    /// (`StoreKind::File`). A new or empty file is formatted; an image left
    /// by a clean [`shutdown`](Ssd::shutdown) opens from its checkpoint; one
    /// left by a power cut is recovered from its OOB and mapping pages.
    pub fn open(cfg: FtlConfig) -> Result<Ssd, FtlError> {
        let crate::config::StoreKind::File { path } = &cfg.store else {
            return Err(FtlError::Unsupported(
                "Ssd::open needs StoreKind::File".into(),
            ));
        };
        cfg.validate()?;
        let lay = Layout::new(&cfg, cfg.page_size);
        let exists = std::fs::metadata(path)
            .map(|m| m.len() > 0)
            .unwrap_or(false);
        let dev = if exists {
            ptsd_blockdev::FileDevice::open(path, cfg.page_size).map_err(NandStoreError::from)?
        } else {
            ptsd_blockdev::FileDevice::create(path, cfg.page_size, lay.total_pages * lay.k)
                .map_err(NandStoreError::from)?
        };
        Ssd::open_on(cfg, Box::new(dev))
    }

    /// Open (or format, if its first page is all zeroes) an SSD image on any
    /// block device — a `CrashDevice` in power-cut tests.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use ptsd_blockdev::MemDevice;
    /// use ptsd_ftl::{FtlConfig, Op, Payload, Request, Ssd, StoreKind};
    ///
    /// let mut cfg = FtlConfig::default().with_logical_bytes(8 << 20);
    /// cfg.channels = 2;
    /// cfg.chips_per_channel = 1;
    /// cfg.pages_per_block = 16;
    /// let cfg = cfg.with_logical_bytes(8 << 20);
    /// let dev = Arc::new(MemDevice::new(4096, Ssd::image_blocks(&cfg, 4096)).unwrap());
    /// let mut ssd = Ssd::open_on(cfg.clone(), Box::new(dev.clone())).unwrap();
    /// let w = Request { id: 1, op: Op::Write, lpn: 5, pages: 1 };
    /// ssd.submit(0, w, Payload::Write(vec![9; 4096])).unwrap();
    /// let mut done = Vec::new();
    /// while let Some(t) = ssd.next_event() { ssd.advance(t, &mut done); }
    /// ssd.shutdown().unwrap();
    /// drop(ssd);
    /// let mut again = Ssd::open_on(cfg, Box::new(dev)).unwrap();
    /// let r = Request { id: 2, op: Op::Read, lpn: 5, pages: 1 };
    /// again.submit(0, r, Payload::Read(vec![0; 4096])).unwrap();
    /// done.clear();
    /// while let Some(t) = again.next_event() { again.advance(t, &mut done); }
    /// assert!(done[0].payload == Payload::Read(vec![9; 4096]));
    /// ```
    pub fn open_on(cfg: FtlConfig, dev: Box<dyn BlockDevice>) -> Result<Ssd, FtlError> {
        cfg.validate()?;
        let block = dev.block_size();
        if block == 0 || cfg.page_size % block != 0 {
            return Err(NandStoreError::from(ImageError::BlockSize {
                block,
                page: cfg.page_size,
            })
            .into());
        }
        let lay = Layout::new(&cfg, block);
        let needed = lay.total_pages * lay.page as u64;
        if dev.capacity_bytes() < needed {
            return Err(NandStoreError::from(ImageError::TooSmall {
                needed,
                have: dev.capacity_bytes(),
            })
            .into());
        }
        let g = cfg.geometry();
        let mut store = PersistentStore {
            dev,
            lay,
            oob: Vec::new(),
            dirty: vec![false; lay.oob_pages as usize],
            dirty_list: Vec::new(),
            meta: Vec::new(),
            meta_marked: vec![0; g.physical_pages.div_ceil(64) as usize],
            runs: Vec::new(),
            run_ends: HashMap::new(),
            staged_at: HashMap::new(),
            staged_bytes: 0,
            run_reserve: RUN_MAX,
        };
        let header = store.read_pages(0, 1)?;
        let state = decode_header(&cfg, &header).map_err(NandStoreError::from)?;
        let recovered = match state {
            None => {
                // Format: a zeroed OOB area (all pages free), then the header.
                store.oob = vec![0; lay.oob_pages as usize * lay.page];
                store.write_pages(lay.oob_first, &store.oob)?;
                store.dev.flush().map_err(NandStoreError::from)?;
                None
            }
            Some(clean) => {
                store.oob = store.read_pages(lay.oob_first, lay.oob_pages)?;
                Some(if clean {
                    recover_clean(&cfg, &store)?
                } else {
                    recover_after_cut(&cfg, &store)?
                })
            }
        };
        // From now on the image is "in use": a crash is detected at reopen.
        let mut hdr = vec![0u8; lay.page];
        encode_header(&cfg, false, &mut hdr);
        store.write_pages(0, &hdr)?;
        store.dev.flush().map_err(NandStoreError::from)?;
        let mut ssd = Ssd::with_store(cfg, Box::new(store));
        if let Some(r) = recovered {
            ssd.install(r, g.pages_per_block)?;
        }
        Ok(ssd)
    }

    /// Device blocks (of `block_size` bytes) an image for `cfg` needs.
    pub fn image_blocks(cfg: &FtlConfig, block_size: u32) -> u64 {
        let lay = Layout::new(cfg, block_size);
        lay.total_pages * lay.k
    }

    fn install(&mut self, r: Recovered, ppb: u32) -> Result<(), FtlError> {
        let epp = self.geometry().entries_per_map_page;
        self.l2p.copy_from_slice(&r.l2p);
        self.gtd = r.gtd;
        self.gtd_seq = r.gtd_seq;
        self.seq = r.max_seq;
        let f = &mut self.flash;
        f.pool = r.pool;
        f.wp = r.wp;
        if let Some(e) = r.erases {
            f.erases = e;
        }
        f.p2l.fill(INVALID);
        f.valid.fill(0);
        for (lpn, &p) in self.l2p.iter().enumerate() {
            if p != UNMAPPED {
                f.p2l[p as usize] = lpn as u32;
                f.valid[(p / ppb) as usize] += 1;
            }
        }
        for (mpn, &p) in self.gtd.iter().enumerate() {
            if p != UNMAPPED {
                f.p2l[p as usize] = mpn as u32;
                f.valid[(p / ppb) as usize] += 1;
            }
        }
        for &p in &r.trim_pages {
            f.p2l[p as usize] = TRIM_OWNER;
            f.valid[(p / ppb) as usize] += 1;
        }
        f.rebuild_free_lists();
        let (max, sum) = f
            .erases
            .iter()
            .fold((0, 0u64), |(m, s), &e| (m.max(e), s + u64::from(e)));
        self.stats.max_erase_count = max;
        self.stats.mean_erase_count = sum as f64 / f64::from(f.blocks());
        self.trim_pages = r.trim_pages;
        for m in r.stale_map_pages {
            self.mark_map_stale(m * epp);
        }
        if !self.trim_pages.is_empty() || self.any_map_stale() {
            // Write the recovered map so the trim records can go.
            self.checkpoint(0)?;
        }
        Ok(())
    }

    /// Clean shutdown: flush the write buffer, write every mapping page the
    /// flash copy of which is stale, and record a checkpoint so the next
    /// open needs no scan. The SSD stays usable (the next write marks the
    /// image in use again only at reopen, so call this last). Requests still
    /// outstanding are an error: complete them first.
    pub fn shutdown(&mut self) -> Result<(), FtlError> {
        if !self.is_persistent() {
            return Ok(());
        }
        if self.outstanding() > 0 {
            return Err(FtlError::Busy(self.outstanding()));
        }
        let t = self.idle_at();
        self.checkpoint(t)?;
        let cfg = self.config().clone();
        let g = cfg.geometry();
        let Some(store) = self.persistent_store() else {
            return Ok(());
        };
        let lay = store.lay;
        let mut ck = vec![0u8; (lay.ckpt_pages as usize) * lay.page];
        put_u64(&mut ck, 0, self.seq);
        put_u64(&mut ck, 8, g.map_pages);
        put_u64(&mut ck, 16, g.total_blocks());
        let mut at = 32;
        for &p in &self.gtd {
            put_u32(&mut ck, at, p);
            at += 4;
        }
        for &s in &self.gtd_seq {
            put_u64(&mut ck, at, s);
            at += 8;
        }
        for &e in &self.flash.erases {
            put_u32(&mut ck, at, e);
            at += 4;
        }
        let crc = crc32c::crc32c(&ck[..at]);
        put_u32(&mut ck, at, crc);
        let store = self.persistent_store().expect("checked above");
        store.write_pages(lay.ckpt_first, &ck)?;
        store.dev.flush().map_err(NandStoreError::from)?;
        let mut hdr = vec![0u8; lay.page];
        encode_header(&cfg, true, &mut hdr);
        store.write_pages(0, &hdr)?;
        store.dev.flush().map_err(NandStoreError::from)?;
        Ok(())
    }

    fn persistent_store(&mut self) -> Option<&mut PersistentStore> {
        self.store.as_any_mut()?.downcast_mut::<PersistentStore>()
    }
}

#[cfg(test)]
mod tests {
    use super::Layout;
    use crate::config::FtlConfig;

    #[test]
    fn stripe_major_places_every_page_once_and_a_stripe_side_by_side() {
        let cfg = FtlConfig {
            channels: 2,
            chips_per_channel: 3,
            blocks_per_chip: 5,
            pages_per_block: 4,
            ..FtlConfig::default()
        };
        let lay = Layout::new(&cfg, cfg.page_size);
        let (chips, ppb, bpc) = (6u32, 4u32, 5u32);
        let physical = chips * bpc * ppb;
        let mut seen = vec![false; physical as usize];
        for ppa in 0..physical {
            let d = lay.data_page(ppa);
            assert!(d < u64::from(physical), "ppa {ppa} placed at {d}");
            assert!(!seen[d as usize], "two pages at {d}");
            seen[d as usize] = true;
        }
        // Page 2 of block 3 on every chip: side by side, in chip order.
        let ppa = |chip: u32| chip * bpc * ppb + 3 * ppb + 2;
        for chip in 1..chips {
            assert_eq!(lay.data_page(ppa(chip)), lay.data_page(ppa(chip - 1)) + 1);
        }
        // The next page of chip 0 follows the last chip's.
        assert_eq!(lay.data_page(ppa(0) + 1), lay.data_page(ppa(chips - 1)) + 1);
    }
}
