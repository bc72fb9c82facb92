//! The zoned device's persistent image on a `BlockDevice`, and its
//! recovery after a power cut.
//!
//! Layout, in pages of the SSD's page size (the device's block size must
//! divide it):
//!
//! | pages  | content                                                     |
//! |--------|-------------------------------------------------------------|
//! | 0      | header: magic, version, geometry, zone shape, crc32c        |
//! | 1 ..   | zone table: 16 bytes a zone (generation, flags, crc32c)     |
//! | then   | OOB area: 32 bytes a physical page                          |
//! | then   | the physical pages, in physical page order                  |
//!
//! OOB entry: seq (u64), zone (u32), page offset in the zone (u32), zone
//! generation (u32), crc32c of the page's data, crc32c of the entry. A
//! program writes its data page at once and its OOB entry at the next
//! sync (after the data, one device flush closing both), so a durable
//! entry describes durable data, and the data crc catches one that does
//! not. A zone's table entry is written when it is reset (generation + 1:
//! the pages of older generations no longer count), finished, or failed.
//!
//! Recovery (every open, there is no clean-shutdown shortcut: the scan is
//! of the OOB area and the written pages' data crcs): a zone's write
//! pointer is the number of consecutive pages from its start whose entry
//! names this zone, offset and generation and whose data matches; its
//! state comes from that and its table flags (finished → full; an
//! unfinished zone with pages → closed, as a ZNS drive closes open zones
//! at a power cycle). Erase counts come back as each zone's generation (an
//! upper bound for each of its blocks).

use ptsd_blockdev::le::{get_u32, get_u64, put_u32, put_u64};
use ptsd_blockdev::{BlockDevice, BlockError};
use thiserror::Error;

use super::{ZoneState, ZonedConfig, ZonedError, ZonedSsd};
use crate::store::{NandStoreError, NoStore, Oob, Store};

const MAGIC: &[u8; 8] = b"PTSDZNS1";
const VERSION: u32 = 1;
const OOB_BYTES: usize = 32;
const ZONE_BYTES: usize = 16;
const FINISHED: u32 = 1;
const READ_ONLY: u32 = 2;
const OFFLINE: u32 = 4;

/// What is wrong with a zoned image.
#[derive(Debug, Error)]
pub enum ZonedImageError {
    #[error("not a ptsd zoned image (bad magic)")]
    NotAnImage,
    #[error("zoned image version {0} is not supported (this build reads version {VERSION})")]
    Version(u32),
    #[error("zoned image header is corrupt (checksum mismatch)")]
    HeaderChecksum,
    #[error("zoned image geometry {found} differs from the configuration's {expected}")]
    Geometry { found: String, expected: String },
    #[error("device of {have} bytes is too small for the zoned image ({needed} bytes)")]
    TooSmall { needed: u64, have: u64 },
    #[error("device block size {block} does not divide the page size {page}")]
    BlockSize { block: u32, page: u32 },
    #[error("backing device")]
    Device(#[source] BlockError),
}

impl From<BlockError> for ZonedImageError {
    fn from(e: BlockError) -> Self {
        ZonedImageError::Device(e)
    }
}

/// The geometry a header records, as a string for messages and checks.
fn geometry(cfg: &ZonedConfig) -> String {
    let n = &cfg.nand;
    format!(
        "page {} B, {}x{} chips, {} blocks/chip, {} pages/block, stripe {}, {} blocks/chip/zone, capacity {}",
        n.page_size,
        n.channels,
        n.chips_per_channel,
        n.blocks_per_chip,
        n.pages_per_block,
        cfg.stripe(),
        cfg.zone_blocks_per_chip,
        cfg.limits().capacity
    )
}

/// The image of a zoned device: a [`Store`] whose OOB entries and zone
/// table recovery reads back.
pub(super) struct ZonedImage {
    dev: Box<dyn BlockDevice>,
    page: usize,
    /// Device blocks per page.
    k: u64,
    table_first: u64,
    oob_first: u64,
    data_first: u64,
    table: Vec<u8>,
    oob: Vec<u8>,
    /// OOB pages changed since the last sync.
    dirty: Vec<bool>,
}

impl ZonedImage {
    /// Bytes an image of `cfg` takes.
    pub(super) fn bytes(cfg: &ZonedConfig) -> u64 {
        let (_, _, _, total) = Self::extents(cfg);
        total * u64::from(cfg.nand.page_size)
    }

    /// (table pages, oob pages, physical pages, total pages).
    fn extents(cfg: &ZonedConfig) -> (u64, u64, u64, u64) {
        let n = &cfg.nand;
        let page = u64::from(n.page_size);
        let physical = u64::from(n.channels * n.chips_per_channel)
            * u64::from(n.blocks_per_chip)
            * u64::from(n.pages_per_block);
        let table = (u64::from(cfg.zones()) * ZONE_BYTES as u64).div_ceil(page);
        let oob = (physical * OOB_BYTES as u64).div_ceil(page);
        (table, oob, physical, 1 + table + oob + physical)
    }

    /// Open (or format, if its header is all zeroes) the image of `cfg`
    /// on `dev`; true if it was formatted.
    fn open(
        cfg: &ZonedConfig,
        dev: Box<dyn BlockDevice>,
    ) -> Result<(ZonedImage, bool), ZonedImageError> {
        let page = cfg.nand.page_size;
        let bs = dev.block_size();
        if bs == 0 || page % bs != 0 {
            return Err(ZonedImageError::BlockSize { block: bs, page });
        }
        let (table_pages, oob_pages, _, total) = Self::extents(cfg);
        let needed = total * u64::from(page);
        if dev.capacity_bytes() < needed {
            return Err(ZonedImageError::TooSmall {
                needed,
                have: dev.capacity_bytes(),
            });
        }
        let k = u64::from(page / bs);
        let mut img = ZonedImage {
            page: page as usize,
            k,
            table_first: 1,
            oob_first: 1 + table_pages,
            data_first: 1 + table_pages + oob_pages,
            table: vec![0; (table_pages * u64::from(page)) as usize],
            oob: vec![0; (oob_pages * u64::from(page)) as usize],
            dirty: vec![false; oob_pages as usize],
            dev,
        };
        let mut header = vec![0u8; page as usize];
        img.dev.read(0, &mut header)?;
        if header.iter().all(|&b| b == 0) {
            // Fresh: zero the table and OOB area, then the header last.
            img.dev.write_zeroes(k, (table_pages + oob_pages) * k)?;
            header[..8].copy_from_slice(MAGIC);
            put_u32(&mut header, 8, VERSION);
            let g = geometry(cfg);
            put_u32(&mut header, 12, g.len() as u32);
            header[16..16 + g.len()].copy_from_slice(g.as_bytes());
            let crc = crc32c::crc32c(&header[..page as usize - 4]);
            put_u32(&mut header, page as usize - 4, crc);
            img.dev.flush()?;
            img.dev.write(0, &header)?;
            img.dev.flush()?;
            return Ok((img, true));
        }
        if &header[..8] != MAGIC {
            return Err(ZonedImageError::NotAnImage);
        }
        let v = get_u32(&header, 8);
        if v != VERSION {
            return Err(ZonedImageError::Version(v));
        }
        if crc32c::crc32c(&header[..page as usize - 4]) != get_u32(&header, page as usize - 4) {
            return Err(ZonedImageError::HeaderChecksum);
        }
        let len = (get_u32(&header, 12) as usize).min(page as usize - 20);
        let found = String::from_utf8_lossy(&header[16..16 + len]).into_owned();
        let expected = geometry(cfg);
        if found != expected {
            return Err(ZonedImageError::Geometry { found, expected });
        }
        img.dev.read(img.table_first * k, &mut img.table)?;
        img.dev.read(img.oob_first * k, &mut img.oob)?;
        Ok((img, false))
    }

    /// Zone `zone`'s (generation, flags), if its entry is intact (a torn
    /// or never-written entry reads as generation 0, no flags).
    fn zone_entry(&self, zone: u32) -> (u32, u32) {
        let at = zone as usize * ZONE_BYTES;
        let e = &self.table[at..at + ZONE_BYTES];
        if crc32c::crc32c(&e[..12]) != get_u32(e, 12) {
            return (0, 0);
        }
        (get_u32(e, 0), get_u32(e, 4))
    }

    /// Write zone `zone`'s table entry (its device block at once).
    pub(super) fn write_zone_entry(
        &mut self,
        zone: u32,
        generation: u32,
        finished: bool,
        failed: Option<ZoneState>,
    ) -> Result<(), NandStoreError> {
        let flags = match failed {
            Some(ZoneState::Offline) => OFFLINE,
            Some(_) => READ_ONLY,
            None if finished => FINISHED,
            None => 0,
        };
        let at = zone as usize * ZONE_BYTES;
        let e = &mut self.table[at..at + ZONE_BYTES];
        put_u32(e, 0, generation);
        put_u32(e, 4, flags);
        put_u32(e, 8, 0);
        let crc = crc32c::crc32c(&e[..12]);
        put_u32(e, 12, crc);
        let bs = self.page / self.k as usize;
        let blk = at / bs;
        self.dev.write(
            self.table_first * self.k + blk as u64,
            &self.table[blk * bs..(blk + 1) * bs],
        )?;
        Ok(())
    }

    /// Physical page `ppa`'s entry: (seq, zone, offset, generation,
    /// data crc), if intact and not erased.
    fn entry(&self, ppa: u32) -> Option<(u64, u32, u32, u32, u32)> {
        let at = ppa as usize * OOB_BYTES;
        let e = &self.oob[at..at + OOB_BYTES];
        let seq = get_u64(e, 0);
        if seq == 0 || crc32c::crc32c(&e[..28]) != get_u32(e, 28) {
            return None;
        }
        Some((
            seq,
            get_u32(e, 8),
            get_u32(e, 12),
            get_u32(e, 16),
            get_u32(e, 20),
        ))
    }
}

impl Store for ZonedImage {
    fn keeps_data(&self) -> bool {
        true
    }

    fn persistent(&self) -> bool {
        true
    }

    fn program(&mut self, ppa: u32, oob: Oob, data: &[u8]) -> Result<(), NandStoreError> {
        self.dev
            .write((self.data_first + u64::from(ppa)) * self.k, data)?;
        let at = ppa as usize * OOB_BYTES;
        let e = &mut self.oob[at..at + OOB_BYTES];
        put_u64(e, 0, oob.seq);
        put_u32(e, 8, (oob.aux >> 32) as u32);
        put_u32(e, 12, oob.id);
        put_u32(e, 16, oob.aux as u32);
        put_u32(e, 20, crc32c::crc32c(data));
        put_u32(e, 24, 0);
        let crc = crc32c::crc32c(&e[..28]);
        put_u32(e, 28, crc);
        self.dirty[at / self.page] = true;
        Ok(())
    }

    fn read(&mut self, ppa: u32, buf: &mut [u8]) -> Result<(), NandStoreError> {
        self.dev
            .read((self.data_first + u64::from(ppa)) * self.k, buf)?;
        Ok(())
    }

    fn erase(&mut self, first: u32, pages: u32) -> Result<(), NandStoreError> {
        let a = first as usize * OOB_BYTES;
        let b = a + pages as usize * OOB_BYTES;
        self.oob[a..b].fill(0);
        for p in a / self.page..=(b - 1) / self.page {
            self.dirty[p] = true;
        }
        Ok(())
    }

    fn sync(&mut self) -> Result<(), NandStoreError> {
        // Data pages were written at their program: make them durable
        // before the entries that describe them.
        self.dev.flush()?;
        let mut writes = Vec::new();
        for (p, d) in self.dirty.iter_mut().enumerate() {
            if std::mem::take(d) {
                writes.push((
                    (self.oob_first + p as u64) * self.k,
                    &self.oob[p * self.page..(p + 1) * self.page],
                ));
            }
        }
        self.dev.write_batch(&writes)?;
        self.dev.flush()?;
        Ok(())
    }

    fn as_any_mut(&mut self) -> Option<&mut dyn std::any::Any> {
        Some(self)
    }
}

impl ZonedSsd {
    /// Open the zoned device whose image is on `dev`, formatting a blank
    /// one (all zeroes) and otherwise recovering every zone's write
    /// pointer and state from the media: the pages of the current zone
    /// generation, consecutive from its start, whose data match their OOB
    /// checksums; a finished zone is full, any other with pages closed.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use ptsd_blockdev::{BlockDevice, MemDevice};
    /// use ptsd_ftl::zoned::{ZonedConfig, ZonedSsd, ZoneState};
    /// let cfg = ZonedConfig::small();
    /// let disk = Arc::new(MemDevice::new(4096, ZonedSsd::image_bytes(&cfg) / 4096).unwrap());
    /// let mut dev = ZonedSsd::open_on(cfg.clone(), Box::new(disk.clone())).unwrap();
    /// dev.write(0, 0, 3, Some(&[7u8; 3 * 4096])).unwrap();
    /// dev.flush(0).unwrap();
    /// drop(dev); // a power cut: no shutdown
    /// let dev = ZonedSsd::open_on(cfg, Box::new(disk)).unwrap();
    /// let z = dev.report(0, 1)[0];
    /// assert_eq!((z.wp, z.state), (3, ZoneState::Closed));
    /// ```
    pub fn open_on(cfg: ZonedConfig, dev: Box<dyn BlockDevice>) -> Result<ZonedSsd, ZonedError> {
        cfg.validate()?;
        let (img, fresh) = ZonedImage::open(&cfg, dev)?;
        let mut recovered = Vec::new();
        let mut seq = 0;
        let mut img = img;
        if !fresh {
            // The layout alone, to find each zone's pages.
            let ssd = ZonedSsd::with_store(cfg.clone(), Box::new(NoStore))?;
            let cap = ssd.zone_capacity();
            let mut buf = vec![0u8; cfg.nand.page_size as usize];
            for zone in 0..ssd.zone_count() {
                let (generation, flags) = img.zone_entry(zone);
                let mut wp = 0;
                while wp < cap {
                    let ppa = ssd.layout.ppa(zone, wp);
                    let Some((s, z, off, g, crc)) = img.entry(ppa) else {
                        break;
                    };
                    if z != zone || u64::from(off) != wp || g != generation {
                        break;
                    }
                    img.read(ppa, &mut buf)?;
                    if crc32c::crc32c(&buf) != crc {
                        break;
                    }
                    seq = seq.max(s);
                    wp += 1;
                }
                recovered.push((zone, generation, flags, wp));
            }
        }
        Self::install(cfg, img, recovered, seq)
    }

    fn install(
        cfg: ZonedConfig,
        img: ZonedImage,
        recovered: Vec<(u32, u32, u32, u64)>,
        seq: u64,
    ) -> Result<ZonedSsd, ZonedError> {
        let mut ssd = ZonedSsd::with_store(cfg, Box::new(img))?;
        ssd.seq = seq;
        for (zone, generation, flags, wp) in recovered {
            ssd.generation[zone as usize] = generation;
            let failed = if flags & OFFLINE != 0 {
                Some(ZoneState::Offline)
            } else if flags & READ_ONLY != 0 {
                Some(ZoneState::ReadOnly)
            } else {
                None
            };
            ssd.zones.restore(zone, wp, flags & FINISHED != 0, failed);
            let all = ssd.zone_capacity().max(1);
            let blocks: Vec<u32> = ssd.layout.blocks(zone, all).collect();
            for first in blocks {
                let b = (first / ssd.layout.ppb) as usize;
                ssd.erases[b] = ssd.erases[b].max(generation);
            }
        }
        Ok(ssd)
    }

    /// Whether `header` (an image's first bytes) starts a zoned image, so
    /// a caller can tell it from a conventional SSD's image before opening.
    ///
    /// ```
    /// use ptsd_ftl::zoned::ZonedSsd;
    /// assert!(ZonedSsd::is_zoned_image(b"PTSDZNS1..."));
    /// assert!(!ZonedSsd::is_zoned_image(&[0; 8]));
    /// ```
    pub fn is_zoned_image(header: &[u8]) -> bool {
        header.starts_with(MAGIC)
    }

    /// Bytes the image of `cfg` takes on its device.
    pub fn image_bytes(cfg: &ZonedConfig) -> u64 {
        ZonedImage::bytes(cfg)
    }
}
