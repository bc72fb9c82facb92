//! A zoned (ZNS) SSD on the same NAND geometry, timelines and page store
//! as the conventional one, but with no mapping and no device GC: the host
//! writes each zone sequentially at its write pointer and reclaims space
//! by resetting zones.
//!
//! - [`ZonedConfig`]: the NAND board ([`FtlConfig`]'s geometry, timing and
//!   store), how zones map onto erase blocks (stripe width, blocks per chip
//!   per zone, zone capacity below zone size), and the open/active limits.
//! - [`Zones`]: the ZNS zone state machine alone.
//! - [`ZonedSsd`]: the device: each command is checked by the state
//!   machine, then its NAND operations are placed on the per-chip and
//!   per-channel timelines from the given time, and its completion time
//!   returned; data go to the page store (none, memory, or a persistent
//!   image recovered after a power cut: see [`ZonedSsd::open_on`]).
//!
//! Zone `z` lies on chip group `z % groups` (groups of `stripe_chips`
//! chips, counted across the channels first) at block slot `z / groups` of each of those chips;
//! its pages go round robin over the group's chips, so a sequential write
//! runs on `stripe_chips` chips at once.
//!
//! ```
//! use ptsd_ftl::zoned::{ZonedConfig, ZonedSsd, ZoneState};
//! use ptsd_ftl::StoreKind;
//! let mut cfg = ZonedConfig::small();
//! cfg.nand.store = StoreKind::None; // timing only: no data to pass
//! let mut dev = ZonedSsd::new(cfg).unwrap();
//! let zp = dev.zone_pages();
//! let t = dev.write(0, zp, 4, None).unwrap();      // zone 1, at its write pointer
//! assert!(t.done_ns > 0);
//! let a = dev.append(t.done_ns, zp, 2, None).unwrap(); // returns where it went
//! assert_eq!(a.lpn, zp + 4);
//! assert!(dev.write(a.done_ns, zp, 1, None).is_err()); // not at the write pointer
//! dev.reset(a.done_ns, 1).unwrap();                // erases, with its latency
//! assert_eq!(dev.report(1, 1)[0].state, ZoneState::Empty);
//! assert_eq!(dev.stats().waf, 1.0);
//! ```

mod host;
mod image;
mod state;
mod workloads;

pub use host::{HostLog, HostLogStats};
pub use image::ZonedImageError;
pub use state::{Placed, ZoneAction, ZoneError, ZoneInfo, ZoneLimits, ZoneState, Zones};
pub use workloads::{ZonedPhase, ZonedRunner, ZonedWorkload};

use serde::Serialize;
use thiserror::Error;

use crate::config::FtlConfig;
use crate::store::{MemStore, NandStoreError, NoStore, Oob, PageKind, Store};
use crate::timeline::Timeline;
use crate::StoreKind;

use image::ZonedImage;

/// A zoned SSD's shape.
#[derive(Clone, Debug, PartialEq)]
pub struct ZonedConfig {
    /// Geometry, timing and store; the conventional FTL's mapping, GC,
    /// over-provisioning and write-buffer fields are not used.
    pub nand: FtlConfig,
    /// Chips each zone stripes over (a divisor of the chip count); 0 = all.
    pub stripe_chips: u32,
    /// Erase blocks per chip in each zone.
    pub zone_blocks_per_chip: u32,
    /// Writable pages per zone; `None` = the zone size.
    pub zone_capacity_pages: Option<u64>,
    /// 0 = no limit.
    pub max_open_zones: u32,
    /// 0 = no limit.
    pub max_active_zones: u32,
    /// Largest zone append, in pages.
    pub max_append_pages: u32,
    /// Erases a block endures: a reset that reaches it takes the zone
    /// offline. 0 = no limit.
    pub endurance: u32,
}

impl Default for ZonedConfig {
    /// The conventional default board (8 channels x 4 chips, 1 MiB blocks),
    /// each zone one block on each of 8 chips (8 MiB), capacity = size,
    /// 14 open and active zones (a shipping drive's figure), appends up to
    /// 128 pages.
    fn default() -> Self {
        ZonedConfig {
            nand: FtlConfig::default(),
            stripe_chips: 8,
            zone_blocks_per_chip: 1,
            zone_capacity_pages: None,
            max_open_zones: 14,
            max_active_zones: 14,
            max_append_pages: 128,
            endurance: 0,
        }
    }
}

impl ZonedConfig {
    /// A tiny board for tests and examples: 2 channels x 2 chips, 16-page
    /// blocks, 16 blocks per chip, zones of one block on each of 2 chips
    /// (32 pages, capacity 24), 4 open / 6 active zones, data in memory.
    pub fn small() -> Self {
        let nand = FtlConfig {
            channels: 2,
            chips_per_channel: 2,
            blocks_per_chip: 16,
            pages_per_block: 16,
            store: StoreKind::Memory,
            ..FtlConfig::default()
        };
        ZonedConfig {
            nand,
            stripe_chips: 2,
            zone_blocks_per_chip: 1,
            zone_capacity_pages: Some(24),
            max_open_zones: 4,
            max_active_zones: 6,
            max_append_pages: 8,
            endurance: 0,
        }
    }

    fn chips(&self) -> u32 {
        self.nand
            .channels
            .saturating_mul(self.nand.chips_per_channel)
    }

    fn stripe(&self) -> u32 {
        if self.stripe_chips == 0 {
            self.chips()
        } else {
            self.stripe_chips
        }
    }

    /// Pages per zone in the address space.
    pub fn zone_pages(&self) -> u64 {
        u64::from(self.stripe())
            * u64::from(self.zone_blocks_per_chip)
            * u64::from(self.nand.pages_per_block)
    }

    /// Zones on the device.
    pub fn zones(&self) -> u32 {
        let groups = self.chips() / self.stripe().max(1);
        groups * (self.nand.blocks_per_chip / self.zone_blocks_per_chip.max(1))
    }

    /// Check the shape; the error says what is wrong.
    pub fn validate(&self) -> Result<(), ZonedError> {
        let n = &self.nand;
        let bad = |what: String| Err(ZonedError::Config(what));
        if !n.page_size.is_power_of_two() || n.page_size < 512 || n.page_size > (1 << 20) {
            return bad(format!(
                "page size {} is not a power of two in 512..=1MiB",
                n.page_size
            ));
        }
        for (v, name) in [
            (n.channels, "channels"),
            (n.chips_per_channel, "chips per channel"),
            (n.blocks_per_chip, "blocks per chip"),
            (n.pages_per_block, "pages per block"),
            (self.zone_blocks_per_chip, "zone blocks per chip"),
            (self.max_append_pages, "max append pages"),
        ] {
            if v == 0 {
                return bad(format!("{name} must be at least 1"));
            }
        }
        if n.t_read_ns == 0 || n.t_prog_ns == 0 || n.t_erase_ns == 0 {
            return bad("NAND read, program and erase times must be positive".into());
        }
        let chips = self.chips();
        if self.stripe() > chips || chips % self.stripe() != 0 {
            return bad(format!(
                "a stripe of {} chips does not divide the {chips} chips",
                self.stripe()
            ));
        }
        if self.zone_blocks_per_chip > n.blocks_per_chip {
            return bad(format!(
                "{} blocks per chip per zone, but chips have {} blocks",
                self.zone_blocks_per_chip, n.blocks_per_chip
            ));
        }
        let pages = u64::from(chips) * u64::from(n.blocks_per_chip) * u64::from(n.pages_per_block);
        if pages >= (1u64 << 31) - 2 {
            return bad(format!(
                "{pages} physical pages are too many (at most 2^31 - 3)"
            ));
        }
        if let Some(c) = self.zone_capacity_pages {
            if c == 0 || c > self.zone_pages() {
                return bad(format!(
                    "zone capacity {c} pages is not in 1..={} (the zone size)",
                    self.zone_pages()
                ));
            }
        }
        if self.max_open_zones != 0
            && self.max_active_zones != 0
            && self.max_open_zones > self.max_active_zones
        {
            return bad(format!(
                "max open zones {} > max active zones {}",
                self.max_open_zones, self.max_active_zones
            ));
        }
        Ok(())
    }

    fn limits(&self) -> ZoneLimits {
        ZoneLimits {
            zones: self.zones(),
            zone_pages: self.zone_pages(),
            capacity: self.zone_capacity_pages.unwrap_or(self.zone_pages()),
            max_open: self.max_open_zones,
            max_active: self.max_active_zones,
            max_append: self.max_append_pages,
        }
    }
}

/// Errors of the zoned device.
#[derive(Debug, Error)]
pub enum ZonedError {
    #[error("invalid zoned configuration: {0}")]
    Config(String),
    /// The command breaks the zone rules; nothing was changed.
    #[error(transparent)]
    Zone(#[from] ZoneError),
    #[error("payload of {len} bytes does not match {pages} pages of {page_size} bytes")]
    PayloadSize {
        len: usize,
        pages: u32,
        page_size: u32,
    },
    #[error("this device keeps data: a write needs its bytes")]
    PayloadRequired,
    #[error("store")]
    Store(#[from] NandStoreError),
    #[error("zoned image")]
    Image(#[from] ZonedImageError),
}

/// What the zoned device did, since creation or the last
/// [`ZonedSsd::reset_stats`].
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ZonedStats {
    pub host_write_pages: u64,
    pub host_read_pages: u64,
    /// Of the written pages, those written by zone append.
    pub append_pages: u64,
    /// Pages programmed on NAND (no GC, no mapping: the host's pages).
    pub flash_programs: u64,
    /// Pages read from NAND (reads past a write pointer cost none).
    pub flash_reads: u64,
    pub resets: u64,
    pub finishes: u64,
    /// Block erases.
    pub erases: u64,
    /// Zones closed implicitly to free an open resource.
    pub implicit_closes: u64,
    /// Over the device's life.
    pub max_erase_count: u32,
    /// Flash programs / host pages written.
    pub waf: f64,
}

/// A command's completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ZoneDone {
    /// When its last NAND operation ends.
    pub done_ns: u64,
    /// Writes and appends: the first page written.
    pub lpn: u64,
}

/// Where zones lie on the NAND array.
#[derive(Clone, Copy, Debug)]
struct Layout {
    stripe: u32,
    groups: u32,
    zone_blocks: u32,
    ppb: u32,
    blocks_per_chip: u32,
    channels: u32,
    chips_per_channel: u32,
}

impl Layout {
    /// Physical page of page `offset` of `zone`.
    fn ppa(&self, zone: u32, offset: u64) -> u32 {
        let group = zone % self.groups;
        let slot = zone / self.groups;
        // Chips counted channel-interleaved, so that a group's chips (and
        // a zone's consecutive pages) spread over the channels first.
        let p = group * self.stripe + (offset % u64::from(self.stripe)) as u32;
        let chip = (p % self.channels) * self.chips_per_channel + p / self.channels;
        let r = (offset / u64::from(self.stripe)) as u32;
        let block = slot * self.zone_blocks + r / self.ppb;
        (chip * self.blocks_per_chip + block) * self.ppb + r % self.ppb
    }

    /// Chip of a physical page.
    fn chip(&self, ppa: u32) -> u32 {
        ppa / (self.ppb * self.blocks_per_chip)
    }

    /// The first physical page of each block holding one of the first
    /// `programmed` pages of `zone`.
    fn blocks(&self, zone: u32, programmed: u64) -> impl Iterator<Item = u32> + '_ {
        let per_block_row = u64::from(self.stripe) * u64::from(self.ppb);
        let rows = programmed.div_ceil(per_block_row);
        (0..rows).flat_map(move |row| {
            let used = (programmed - row * per_block_row).min(u64::from(self.stripe));
            (0..used).map(move |c| {
                let p = self.ppa(zone, row * per_block_row + c);
                p - p % self.ppb
            })
        })
    }
}

/// The zoned SSD (see the [module](self) documentation).
pub struct ZonedSsd {
    cfg: ZonedConfig,
    layout: Layout,
    zones: Zones,
    tl: Timeline,
    store: Box<dyn Store>,
    /// Erases of each block.
    erases: Vec<u32>,
    /// Per zone: resets so far (names the pages of this generation in
    /// their OOB, so that recovery ignores older ones).
    generation: Vec<u32>,
    seq: u64,
    stats: ZonedStats,
}

impl std::fmt::Debug for ZonedSsd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZonedSsd")
            .field("zones", &self.zones.limits())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl ZonedSsd {
    /// A fresh device (every zone empty) with a `None` or `Memory` store;
    /// a `File` store needs [`open_on`](Self::open_on).
    pub fn new(cfg: ZonedConfig) -> Result<ZonedSsd, ZonedError> {
        let n = &cfg.nand;
        let pages = u64::from(n.channels * n.chips_per_channel)
            * u64::from(n.blocks_per_chip)
            * u64::from(n.pages_per_block);
        let store: Box<dyn Store> = match &n.store {
            StoreKind::None => Box::new(NoStore),
            StoreKind::Memory => Box::new(MemStore::new(pages, n.page_size)),
            StoreKind::File { .. } => {
                return Err(ZonedError::Config(
                    "a file store is opened with ZonedSsd::open_on".into(),
                ))
            }
        };
        Self::with_store(cfg, store)
    }

    fn with_store(cfg: ZonedConfig, store: Box<dyn Store>) -> Result<ZonedSsd, ZonedError> {
        cfg.validate()?;
        let n = &cfg.nand;
        let chips = n.channels * n.chips_per_channel;
        let stripe = cfg.stripe();
        let layout = Layout {
            stripe,
            groups: chips / stripe,
            zone_blocks: cfg.zone_blocks_per_chip,
            ppb: n.pages_per_block,
            blocks_per_chip: n.blocks_per_chip,
            channels: n.channels,
            chips_per_channel: n.chips_per_channel,
        };
        let tl = Timeline::new(
            n.channels,
            n.chips_per_channel,
            n.t_read_ns,
            n.t_prog_ns,
            n.t_erase_ns,
            n.t_xfer_ns,
        );
        let zones = Zones::new(cfg.limits());
        let blocks = chips as usize * n.blocks_per_chip as usize;
        Ok(ZonedSsd {
            generation: vec![0; cfg.zones() as usize],
            layout,
            zones,
            tl,
            store,
            erases: vec![0; blocks],
            seq: 0,
            stats: ZonedStats::default(),
            cfg,
        })
    }

    pub fn config(&self) -> &ZonedConfig {
        &self.cfg
    }

    pub fn zone_count(&self) -> u32 {
        self.zones.limits().zones
    }

    /// Pages per zone in the address space.
    pub fn zone_pages(&self) -> u64 {
        self.zones.limits().zone_pages
    }

    /// Groups of chips zones stripe over: zone `z` lies on group
    /// `z % chip_groups()`, so zones of different groups share no chip.
    pub fn chip_groups(&self) -> u32 {
        self.layout.groups
    }

    /// Writable pages per zone.
    pub fn zone_capacity(&self) -> u64 {
        self.zones.limits().capacity
    }

    /// Pages of the address space.
    pub fn logical_pages(&self) -> u64 {
        self.zones.device_pages()
    }

    pub fn page_size(&self) -> u32 {
        self.cfg.nand.page_size
    }

    /// The zone state machine (counts, per-zone info).
    pub fn zones(&self) -> &Zones {
        &self.zones
    }

    pub fn stats(&self) -> ZonedStats {
        let mut s = self.stats.clone();
        s.max_erase_count = self.erases.iter().copied().max().unwrap_or(0);
        s.waf = if s.host_write_pages == 0 {
            0.0
        } else {
            s.flash_programs as f64 / s.host_write_pages as f64
        };
        s
    }

    /// Start counting afresh (erase counts stay).
    pub fn reset_stats(&mut self) {
        self.stats = ZonedStats::default();
    }

    /// Whether the store keeps page data (then writes need their bytes).
    pub fn keeps_data(&self) -> bool {
        self.store.keeps_data()
    }

    /// When every chip is idle.
    pub fn idle_at(&self) -> u64 {
        self.tl.all_idle_at()
    }

    /// Up to `max` zones from `first` as a zone report gives them.
    pub fn report(&self, first: u32, max: u32) -> Vec<ZoneInfo> {
        let end = first.saturating_add(max).min(self.zone_count());
        (first.min(end)..end).map(|z| self.zones.info(z)).collect()
    }

    fn check_payload(&self, pages: u32, data: Option<&[u8]>) -> Result<(), ZonedError> {
        let page_size = self.page_size();
        match data {
            None if self.keeps_data() => Err(ZonedError::PayloadRequired),
            Some(d) if d.len() != pages as usize * page_size as usize => {
                Err(ZonedError::PayloadSize {
                    len: d.len(),
                    pages,
                    page_size,
                })
            }
            _ => Ok(()),
        }
    }

    /// Write `pages` pages at `lpn` (its zone's write pointer) at time
    /// `now_ns` (an earlier time than a previous command's counts as that
    /// one). `data` holds
    /// them if the store keeps data.
    pub fn write(
        &mut self,
        now_ns: u64,
        lpn: u64,
        pages: u32,
        data: Option<&[u8]>,
    ) -> Result<ZoneDone, ZonedError> {
        self.check_payload(pages, data)?;
        let placed = self.zones.write(lpn, pages)?;
        self.program(now_ns, placed, pages, data)
    }

    /// Zone append of `pages` pages to the zone starting at `zone_lpn`:
    /// the completion tells where they went.
    pub fn append(
        &mut self,
        now_ns: u64,
        zone_lpn: u64,
        pages: u32,
        data: Option<&[u8]>,
    ) -> Result<ZoneDone, ZonedError> {
        self.check_payload(pages, data)?;
        let placed = self.zones.append(zone_lpn, pages)?;
        self.stats.append_pages += u64::from(pages);
        self.program(now_ns, placed, pages, data)
    }

    fn program(
        &mut self,
        now_ns: u64,
        placed: Placed,
        pages: u32,
        data: Option<&[u8]>,
    ) -> Result<ZoneDone, ZonedError> {
        // A time before the last one given is taken as that one: the
        // timelines never place work in the past.
        let now_ns = now_ns.max(self.tl.now());
        self.tl.prune(now_ns);
        if placed.closed.is_some() {
            self.stats.implicit_closes += 1;
        }
        let page = self.page_size() as usize;
        let mut done = now_ns;
        for i in 0..u64::from(pages) {
            let off = placed.offset + i;
            let ppa = self.layout.ppa(placed.zone, off);
            done = done.max(self.tl.program(self.layout.chip(ppa), now_ns));
            if let (Some(d), true) = (data, self.store.keeps_data()) {
                self.seq += 1;
                let oob = Oob {
                    kind: PageKind::Data,
                    id: off as u32,
                    seq: self.seq,
                    aux: (u64::from(placed.zone) << 32)
                        | u64::from(self.generation[placed.zone as usize]),
                };
                let at = i as usize * page;
                if let Err(e) = self.store.program(ppa, oob, &d[at..at + page]) {
                    // The zone's pointer moved past pages the media may
                    // not hold: the zone is unusable, as a program
                    // failure makes it on a drive.
                    self.fail_zone(placed.zone, ZoneState::ReadOnly)?;
                    return Err(e.into());
                }
            }
        }
        self.stats.host_write_pages += u64::from(pages);
        self.stats.flash_programs += u64::from(pages);
        Ok(ZoneDone {
            done_ns: done,
            lpn: u64::from(placed.zone) * self.zone_pages() + placed.offset,
        })
    }

    /// Read `pages` pages at `lpn` into `buf` (if given: zeroes past each
    /// zone's write pointer) at `now_ns`; returns the completion time.
    pub fn read(
        &mut self,
        now_ns: u64,
        lpn: u64,
        pages: u32,
        mut buf: Option<&mut [u8]>,
    ) -> Result<u64, ZonedError> {
        self.zones.check_read(lpn, pages)?;
        let page = self.page_size() as usize;
        if let Some(b) = &buf {
            if b.len() != pages as usize * page {
                return Err(ZonedError::PayloadSize {
                    len: b.len(),
                    pages,
                    page_size: self.page_size(),
                });
            }
        }
        // A time before the last one given is taken as that one: the
        // timelines never place work in the past.
        let now_ns = now_ns.max(self.tl.now());
        self.tl.prune(now_ns);
        let zp = self.zone_pages();
        let mut done = now_ns + self.cfg.nand.t_dram_ns;
        for i in 0..u64::from(pages) {
            let l = lpn + i;
            let zone = (l / zp) as u32;
            let off = l % zp;
            let slot = buf
                .as_deref_mut()
                .map(|b| &mut b[i as usize * page..(i as usize + 1) * page]);
            if off >= self.zones.programmed(zone) {
                if let Some(s) = slot {
                    s.fill(0);
                }
                continue;
            }
            let ppa = self.layout.ppa(zone, off);
            done = done.max(self.tl.read(self.layout.chip(ppa), now_ns));
            self.stats.flash_reads += 1;
            if let Some(s) = slot {
                if self.store.keeps_data() {
                    self.store.read(ppa, s)?;
                } else {
                    s.fill(0);
                }
            }
        }
        self.stats.host_read_pages += u64::from(pages);
        Ok(done)
    }

    /// Explicitly open a zone.
    pub fn open(&mut self, now_ns: u64, zone: u64) -> Result<u64, ZonedError> {
        if self.zones.open(zone)?.is_some() {
            self.stats.implicit_closes += 1;
        }
        Ok(now_ns)
    }

    /// Close a zone.
    pub fn close(&mut self, now_ns: u64, zone: u64) -> Result<u64, ZonedError> {
        self.zones.close(zone)?;
        Ok(now_ns)
    }

    /// Finish a zone (it becomes full; its unwritten pages stay erased).
    pub fn finish(&mut self, now_ns: u64, zone: u64) -> Result<u64, ZonedError> {
        let was_full = zone < u64::from(self.zone_count())
            && self.zones.info(zone as u32).state == ZoneState::Full;
        self.zones.finish(zone)?;
        if !was_full {
            self.stats.finishes += 1;
            self.persist_zone(zone as u32)?;
        }
        Ok(now_ns)
    }

    /// Reset a zone: erase its written blocks (each erase on its chip's
    /// timeline, with its wear); returns when the last erase ends.
    pub fn reset(&mut self, now_ns: u64, zone: u64) -> Result<u64, ZonedError> {
        let programmed = self.zones.reset(zone)?;
        let zone = zone as u32;
        self.stats.resets += 1;
        // A time before the last one given is taken as that one: the
        // timelines never place work in the past.
        let now_ns = now_ns.max(self.tl.now());
        self.tl.prune(now_ns);
        let ppb = self.layout.ppb;
        let mut done = now_ns;
        let blocks: Vec<u32> = self.layout.blocks(zone, programmed).collect();
        let mut worn = false;
        for first in blocks {
            let chip = self.layout.chip(first);
            // An erase holds its chip only (no data on the channel).
            let end = match self.tl.gc_step_or_start(chip, now_ns, true, None) {
                Ok(end) | Err(end) => end,
            };
            done = done.max(end);
            let b = (first / ppb) as usize;
            self.erases[b] += 1;
            self.stats.erases += 1;
            worn |= self.cfg.endurance != 0 && self.erases[b] >= self.cfg.endurance;
            self.store.erase(first, ppb)?;
        }
        self.generation[zone as usize] = self.generation[zone as usize].wrapping_add(1);
        if worn {
            self.zones.set_failed(zone, ZoneState::Offline);
        }
        self.persist_zone(zone)?;
        Ok(done)
    }

    /// The device takes a zone read-only or offline (fault injection).
    pub fn fail_zone(&mut self, zone: u32, state: ZoneState) -> Result<(), ZonedError> {
        if !matches!(state, ZoneState::ReadOnly | ZoneState::Offline) || zone >= self.zone_count() {
            return Err(ZonedError::Config(format!(
                "zone {zone} can only be failed read-only or offline"
            )));
        }
        self.zones.set_failed(zone, state);
        self.persist_zone(zone)
    }

    /// Make every completed write durable; returns when done.
    pub fn flush(&mut self, now_ns: u64) -> Result<u64, ZonedError> {
        self.store.sync()?;
        Ok(now_ns)
    }

    fn image(&mut self) -> Option<&mut ZonedImage> {
        self.store.as_any_mut()?.downcast_mut::<ZonedImage>()
    }

    /// Write zone `zone`'s table entry (persistent store only).
    fn persist_zone(&mut self, zone: u32) -> Result<(), ZonedError> {
        let info = self.zones.info(zone);
        let generation = self.generation[zone as usize];
        let finished = info.state == ZoneState::Full;
        let failed =
            matches!(info.state, ZoneState::ReadOnly | ZoneState::Offline).then_some(info.state);
        if let Some(img) = self.image() {
            img.write_zone_entry(zone, generation, finished, failed)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod state_tests;
#[cfg(test)]
mod tests;
