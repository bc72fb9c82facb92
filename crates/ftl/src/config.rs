//! Device configuration: NAND geometry and timing, over-provisioning, mapping
//! memory, scheme, GC, write buffer, scheduler and store.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use thiserror::Error;

use crate::mapping::{MapGeometry, SchemeFactory};
use crate::policy::{Scheduler, VictimPolicy};

/// Bytes one page-map entry costs in DRAM (a 32-bit physical page number).
pub const MAP_ENTRY_BYTES: u64 = 4;
/// Bytes one entry of PTSD's entry-granular dirty region costs (LPN + PPN).
pub const DIRTY_ENTRY_BYTES: u64 = 8;

/// How logical pages are mapped to physical pages.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum SchemeConfig {
    /// The whole map in DRAM (the paper's OPT / PAGE).
    Page,
    /// Demand-based FTL: one LRU cache of whole mapping pages (CMT) + GTD.
    Dftl,
    /// PTSD: the CMT split into a clean and a dirty region.
    Ptsd {
        /// Share of the cache budget given to the clean region (0.5 = 50:50).
        clean_ratio: f64,
        /// Dirty region holds individual entries grouped by mapping page
        /// (greedy batch update) instead of whole pages (WRITEOPT).
        entry_dirty: bool,
        /// Move the clean:dirty split from observed read misses vs. dirty
        /// evictions (see the crate README for the controller).
        adaptive: bool,
    },
}

impl SchemeConfig {
    /// PTSD with the paper's 50:50 split, page-granular dirty region.
    pub fn ptsd() -> Self {
        SchemeConfig::Ptsd {
            clean_ratio: 0.5,
            entry_dirty: false,
            adaptive: false,
        }
    }

    /// Short name for tables: `page`, `dftl`, `ptsd`, `ptsd-entry`...
    pub fn name(&self) -> &'static str {
        match self {
            SchemeConfig::Page => "page",
            SchemeConfig::Dftl => "dftl",
            SchemeConfig::Ptsd {
                entry_dirty: false,
                adaptive: false,
                ..
            } => "ptsd",
            SchemeConfig::Ptsd {
                entry_dirty: true,
                adaptive: false,
                ..
            } => "ptsd-entry",
            SchemeConfig::Ptsd {
                entry_dirty: false,
                adaptive: true,
                ..
            } => "ptsd-adaptive",
            SchemeConfig::Ptsd {
                entry_dirty: true,
                adaptive: true,
                ..
            } => "ptsd-entry-adaptive",
        }
    }
}

/// Order in which the controller takes requests from the interface queue.
/// The block target (`ptsd-ublk`) orders the requests of plain block devices
/// by the same two policies, named by this same type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SchedulerKind {
    /// Arrival order; a full write buffer is flushed asynchronously.
    Fifo,
    /// PTSD's `write_stop`: when a write finds the buffer full, serve only
    /// reads until none is queued, then flush (see [`WriteStop`] for what
    /// happens to that write). For a plain block device: reads ahead of
    /// writes that do not overlap them, nothing crossing a FLUSH.
    // The alias reads device specs that block targets stored before the
    // two scheduler enums became this one.
    #[serde(alias = "read-priority")]
    ReadPriority,
}

/// A scheduler name that is neither `fifo` nor `read-priority`.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("unknown scheduler {0:?} (expected fifo or read-priority)")]
pub struct UnknownScheduler(pub String);

impl std::str::FromStr for SchedulerKind {
    type Err = UnknownScheduler;
    /// `fifo`, or `read-priority` (also `read_priority`, `rp`).
    fn from_str(s: &str) -> Result<Self, UnknownScheduler> {
        match s {
            "fifo" => Ok(SchedulerKind::Fifo),
            "read-priority" | "read_priority" | "rp" => Ok(SchedulerKind::ReadPriority),
            other => Err(UnknownScheduler(other.to_owned())),
        }
    }
}

/// How the read-priority scheduler treats the write that raised
/// `write_stop`, once no read is queued.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WriteStop {
    /// The flush starts (asynchronously, into the other half of the double
    /// buffer) and the write enters the buffer as soon as it has room, as
    /// any write does: writes are held only while reads wait.
    #[default]
    Intended,
    /// The paper's words taken literally: the flush starts only once no
    /// read is queued and no request is in service, and the write is
    /// processed synchronously: it completes when the flush's own data
    /// programs end, and the controller takes nothing meanwhile.
    Literal,
}

/// GC victim choice.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GcPolicy {
    /// Fewest valid pages.
    Greedy,
    /// Highest `age * (1 - u) / 2u` (Rosenblum & Ousterhout).
    CostBenefit,
}

/// When and how GC runs. Thresholds are free blocks per chip: background GC
/// starts when a chip opens a block and is left with at most
/// `low_free_blocks` free, and cleans victims until it has
/// `high_free_blocks`; its copies and erases run when the chip has no host
/// work. A chip that needs a block with at most `urgent_free_blocks` free
/// finishes its GC at once, ahead of host I/O (the hard floor).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GcConfig {
    pub policy: GcPolicy,
    pub low_free_blocks: u32,
    pub high_free_blocks: u32,
    #[serde(default = "default_urgent")]
    pub urgent_free_blocks: u32,
}

fn default_urgent() -> u32 {
    GcConfig::default().urgent_free_blocks
}

impl Default for GcConfig {
    fn default() -> Self {
        GcConfig {
            policy: GcPolicy::Greedy,
            low_free_blocks: 4,
            high_free_blocks: 5,
            urgent_free_blocks: 2,
        }
    }
}

/// Where page data and OOB live.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum StoreKind {
    /// Timing only: no data is kept; reads return zeroes.
    #[default]
    None,
    /// Page data in memory (lost when the `Ssd` is dropped).
    Memory,
    /// A persistent image file (see [`crate::Ssd::open`]).
    File { path: PathBuf },
}

/// The five algorithms of the paper's evaluation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Variant {
    /// Full page map in DRAM (OPT), FIFO.
    Page,
    /// DFTL (page-granular CMT), FIFO.
    Dftl,
    /// PTSD cache partitioning only, FIFO.
    Part,
    /// Partitioning + read-priority scheduling.
    PartSched,
    /// Partitioning + scheduling + entry-granular dirty region.
    WriteOpt,
}

impl Variant {
    /// All five, in the paper's order.
    pub const ALL: [Variant; 5] = [
        Variant::Page,
        Variant::Dftl,
        Variant::Part,
        Variant::PartSched,
        Variant::WriteOpt,
    ];

    /// The paper's name: `PAGE`, `DFTL`, `PART`, `PART-SCHED`, `WRITEOPT`.
    pub fn name(&self) -> &'static str {
        match self {
            Variant::Page => "PAGE",
            Variant::Dftl => "DFTL",
            Variant::Part => "PART",
            Variant::PartSched => "PART-SCHED",
            Variant::WriteOpt => "WRITEOPT",
        }
    }

    /// Scheme and scheduler of this variant.
    pub fn scheme_and_scheduler(&self) -> (SchemeConfig, SchedulerKind) {
        let part = |entry_dirty| SchemeConfig::Ptsd {
            clean_ratio: 0.5,
            entry_dirty,
            adaptive: false,
        };
        match self {
            Variant::Page => (SchemeConfig::Page, SchedulerKind::Fifo),
            Variant::Dftl => (SchemeConfig::Dftl, SchedulerKind::Fifo),
            Variant::Part => (part(false), SchedulerKind::Fifo),
            Variant::PartSched => (part(false), SchedulerKind::ReadPriority),
            Variant::WriteOpt => (part(true), SchedulerKind::ReadPriority),
        }
    }
}

impl std::str::FromStr for Variant {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let norm = s.to_ascii_lowercase().replace('_', "-");
        Ok(match norm.as_str() {
            "page" | "opt" => Variant::Page,
            "dftl" => Variant::Dftl,
            "part" => Variant::Part,
            "part-sched" | "partsched" => Variant::PartSched,
            "writeopt" | "write-opt" => Variant::WriteOpt,
            _ => {
                return Err(format!(
                    "unknown variant {s:?} (page, dftl, part, part-sched, writeopt)"
                ))
            }
        })
    }
}

/// A configuration that cannot work.
#[derive(Debug, Clone, Error, PartialEq)]
pub enum ConfigError {
    #[error("page size {0} is not a power of two between 512 B and 1 MiB")]
    PageSize(u32),
    #[error("{0} must not be zero")]
    Zero(&'static str),
    #[error("over-provisioning ratio {0} is out of range (0 < op_ratio <= 0.9)")]
    OpRatio(f64),
    #[error("{physical_pages} physical pages exceed the 2^31 the engine addresses")]
    TooLarge { physical_pages: u64 },
    #[error("logical size {logical_bytes} B is not a positive multiple of the {page_size} B page")]
    LogicalSize { logical_bytes: u64, page_size: u32 },
    #[error("logical size {logical_pages} pages leaves less than op_ratio {op_ratio} of the {physical_pages} physical pages spare")]
    NotEnoughSpare {
        logical_pages: u64,
        physical_pages: u64,
        op_ratio: f64,
    },
    #[error("each chip needs at least {needed} spare blocks (GC reserve, open blocks, mapping pages), it has {have}; add blocks or over-provisioning")]
    SpareBlocksPerChip { needed: u64, have: u64 },
    #[error("GC thresholds: need 1 <= urgent_free_blocks ({urgent}) < low_free_blocks ({low}) < high_free_blocks ({high})")]
    GcThresholds { urgent: u32, low: u32, high: u32 },
    #[error(
        "mapping memory budget {budget} B is too small for {scheme}: it needs at least {needed} B"
    )]
    MapMemory {
        scheme: &'static str,
        budget: u64,
        needed: u64,
    },
    #[error("PTSD clean_ratio {0} must be in (0, 1)")]
    CleanRatio(f64),
    #[error("write buffer of {0} pages is too large (at most 65536)")]
    WriteBuffer(u32),
    /// A custom mapping scheme refused the geometry or budget.
    #[error("mapping scheme {scheme}: {reason}")]
    Scheme { scheme: String, reason: String },
}

/// Everything that describes one emulated SSD.
///
/// `Default` is the paper's board sized for a 16 GiB logical device: 4 KiB
/// pages, 8 channels x 4 chips, 256-page (1 MiB) blocks, 640 blocks per chip
/// (20 GiB raw, 20 % over-provisioning), read 120 us, program 480 us,
/// erase 3.5 ms, 10 us per page on the bus, page FTL, FIFO, no store.
///
/// ```
/// use ptsd_ftl::{FtlConfig, Variant};
/// let cfg = FtlConfig::paper(Variant::WriteOpt, 1 << 30);
/// cfg.validate().unwrap();
/// assert_eq!(cfg.logical_pages(), (1 << 30) / 4096);
/// // mapping memory: 20 % of the page FTL's 4 B/page map
/// assert_eq!(cfg.map_memory_bytes, Some((1u64 << 30) / 4096 * 4 / 5));
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct FtlConfig {
    /// Bytes per NAND page (and per logical block).
    pub page_size: u32,
    pub channels: u32,
    pub chips_per_channel: u32,
    pub blocks_per_chip: u32,
    pub pages_per_block: u32,
    /// Array read (cell to page register).
    pub t_read_ns: u64,
    /// Array program.
    pub t_prog_ns: u64,
    /// Block erase.
    pub t_erase_ns: u64,
    /// Moving one page over the channel (either direction).
    pub t_xfer_ns: u64,
    /// Moving one page between host and controller DRAM (write-buffer copy,
    /// read served from the buffer).
    pub t_dram_ns: u64,
    /// Share of the physical pages hidden from the host.
    pub op_ratio: f64,
    /// Logical capacity; `None` = `floor(physical * (1 - op_ratio))`.
    pub logical_bytes: Option<u64>,
    /// DRAM for the mapping (GTD + cached mapping pages / entries); `None` =
    /// enough for the full page map.
    pub map_memory_bytes: Option<u64>,
    pub scheme: SchemeConfig,
    pub gc: GcConfig,
    /// Write-buffer pages; 0 = one per chip (a flush stripes over all chips).
    pub write_buffer_pages: u32,
    pub scheduler: SchedulerKind,
    /// Read priority: the reading of `write_stop` (see [`WriteStop`]).
    #[serde(default)]
    pub write_stop: WriteStop,
    pub store: StoreKind,
    /// A custom mapping scheme, GC victim policy or scheduler, each in
    /// place of the built-in `scheme`, `gc.policy` or `scheduler` named
    /// above (which then only fill the tables where no custom one is set).
    /// Not serialized: a device spec names built-ins only, and a custom
    /// FTL is passed again to reopen its image.
    #[serde(skip)]
    pub custom: Extensions,
}

/// Custom parts of an FTL, set with [`FtlConfig::with_scheme`],
/// [`with_gc_policy`](FtlConfig::with_gc_policy) and
/// [`with_scheduler`](FtlConfig::with_scheduler). Equal when they share
/// the same objects.
#[derive(Clone, Default)]
pub struct Extensions {
    /// Builds the mapping scheme (instead of [`FtlConfig::scheme`]).
    pub scheme: Option<Arc<dyn SchemeFactory>>,
    /// Prototype of the GC victim policy (each device gets a copy).
    pub gc_policy: Option<Arc<dyn VictimPolicy>>,
    /// Prototype of the interface-queue scheduler.
    pub scheduler: Option<Arc<dyn Scheduler>>,
}

impl Extensions {
    /// Whether nothing is customised.
    pub fn is_empty(&self) -> bool {
        self.scheme.is_none() && self.gc_policy.is_none() && self.scheduler.is_none()
    }
}

impl fmt::Debug for Extensions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Extensions")
            .field("scheme", &self.scheme.as_ref().map(|s| s.name()))
            .field("gc_policy", &self.gc_policy.as_ref().map(|p| p.name()))
            .field("scheduler", &self.scheduler.as_ref().map(|s| s.name()))
            .finish()
    }
}

impl PartialEq for Extensions {
    fn eq(&self, other: &Self) -> bool {
        fn same<T: ?Sized>(a: &Option<Arc<T>>, b: &Option<Arc<T>>) -> bool {
            match (a, b) {
                (None, None) => true,
                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                _ => false,
            }
        }
        same(&self.scheme, &other.scheme)
            && same(&self.gc_policy, &other.gc_policy)
            && same(&self.scheduler, &other.scheduler)
    }
}

impl Default for FtlConfig {
    fn default() -> Self {
        FtlConfig {
            page_size: 4096,
            channels: 8,
            chips_per_channel: 4,
            blocks_per_chip: 640,
            pages_per_block: 256,
            t_read_ns: 120_000,
            t_prog_ns: 480_000,
            t_erase_ns: 3_500_000,
            t_xfer_ns: 10_000,
            t_dram_ns: 1_000,
            op_ratio: 0.20,
            logical_bytes: None,
            map_memory_bytes: None,
            scheme: SchemeConfig::Page,
            gc: GcConfig::default(),
            write_buffer_pages: 0,
            scheduler: SchedulerKind::Fifo,
            write_stop: WriteStop::Intended,
            store: StoreKind::None,
            custom: Extensions::default(),
        }
    }
}

/// Numbers derived from a config (no validation).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Geometry {
    pub page_size: u32,
    pub channels: u32,
    pub chips_per_channel: u32,
    pub chips: u32,
    pub blocks_per_chip: u32,
    pub pages_per_block: u32,
    pub physical_pages: u64,
    pub logical_pages: u64,
    /// Mapping entries per mapping (translation) page.
    pub entries_per_map_page: u32,
    pub map_pages: u64,
    pub buffer_pages: u32,
}

impl Geometry {
    pub fn total_blocks(&self) -> u64 {
        u64::from(self.chips) * u64::from(self.blocks_per_chip)
    }
}

impl FtlConfig {
    /// This config with a custom mapping scheme in place of
    /// [`scheme`](Self::scheme).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use ptsd_ftl::{FtlConfig, SchemeConfig, Ssd, Variant};
    /// // Any `SchemeFactory`; here a built-in one, to keep the example short
    /// // (the crate README writes a scheme of its own).
    /// let cfg = FtlConfig::paper(Variant::Dftl, 64 << 20)
    ///     .with_scheme(Arc::new(SchemeConfig::ptsd()));
    /// assert_eq!(cfg.scheme_name(), "ptsd");
    /// let ssd = Ssd::new(cfg).unwrap();
    /// ```
    pub fn with_scheme(mut self, scheme: Arc<dyn SchemeFactory>) -> Self {
        self.custom.scheme = Some(scheme);
        self
    }

    /// This config with a custom GC victim policy in place of
    /// [`gc.policy`](GcConfig::policy).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use ptsd_ftl::policy::CostBenefit;
    /// use ptsd_ftl::{FtlConfig, Variant};
    /// let cfg = FtlConfig::paper(Variant::Dftl, 64 << 20).with_gc_policy(Arc::new(CostBenefit));
    /// assert_eq!(cfg.gc_policy().name(), "cost-benefit");
    /// ```
    pub fn with_gc_policy(mut self, policy: Arc<dyn VictimPolicy>) -> Self {
        self.custom.gc_policy = Some(policy);
        self
    }

    /// This config with a custom interface-queue scheduler in place of
    /// [`scheduler`](Self::scheduler).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use ptsd_ftl::policy::ReadPriority;
    /// use ptsd_ftl::{FtlConfig, Variant};
    /// let cfg = FtlConfig::paper(Variant::Dftl, 64 << 20).with_scheduler(Arc::new(ReadPriority));
    /// assert_eq!(cfg.scheduler().name(), "read-priority");
    /// ```
    pub fn with_scheduler(mut self, scheduler: Arc<dyn Scheduler>) -> Self {
        self.custom.scheduler = Some(scheduler);
        self
    }

    /// The mapping scheme's factory: the custom one, or the built-in
    /// [`scheme`](Self::scheme).
    pub fn scheme_factory(&self) -> &dyn SchemeFactory {
        match &self.custom.scheme {
            Some(f) => f.as_ref(),
            None => &self.scheme,
        }
    }

    /// The mapping scheme's name (`dftl`, `ptsd`, or a custom one's).
    pub fn scheme_name(&self) -> String {
        self.scheme_factory().name()
    }

    /// A new GC victim policy for a device of this config.
    pub fn gc_policy(&self) -> Box<dyn VictimPolicy> {
        match &self.custom.gc_policy {
            Some(p) => p.clone_box(),
            None => self.gc.policy.policy(),
        }
    }

    /// A new scheduler for a device of this config.
    pub fn scheduler(&self) -> Box<dyn Scheduler> {
        match &self.custom.scheduler {
            Some(s) => s.clone_box(),
            None => self.scheduler.scheduler(),
        }
    }

    /// The paper's setup for a custom mapping scheme: DFTL's device,
    /// mapping budget and FIFO scheduler, with `scheme` in place of DFTL.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use ptsd_ftl::{FtlConfig, SchemeConfig, Variant};
    /// let cfg = FtlConfig::paper_with(Arc::new(SchemeConfig::Dftl), 1 << 30);
    /// assert_eq!(cfg.map_memory_bytes, FtlConfig::paper(Variant::Dftl, 1 << 30).map_memory_bytes);
    /// ```
    pub fn paper_with(scheme: Arc<dyn SchemeFactory>, logical_bytes: u64) -> Self {
        FtlConfig::paper(Variant::Dftl, logical_bytes).with_scheme(scheme)
    }

    /// The paper's board with `blocks_per_chip` chosen so that the device
    /// exposes exactly `logical_bytes` at the configured over-provisioning.
    pub fn with_logical_bytes(mut self, logical_bytes: u64) -> Self {
        let page = u64::from(self.page_size.max(1));
        let logical_pages = logical_bytes / page;
        let chips = u64::from(self.channels.max(1)) * u64::from(self.chips_per_channel.max(1));
        let per_block = u64::from(self.pages_per_block.max(1));
        let op = if self.op_ratio > 0.0 && self.op_ratio < 1.0 {
            self.op_ratio
        } else {
            0.2
        };
        let physical = (logical_pages as f64 / (1.0 - op)).ceil() as u64;
        // Small devices also need the fixed per-chip reserve (GC, open blocks).
        let blocks = physical
            .div_ceil(chips * per_block)
            .max(self.min_blocks_per_chip(logical_pages));
        self.blocks_per_chip = blocks.clamp(1, u64::from(u32::MAX)) as u32;
        self.logical_bytes = Some(logical_bytes);
        self
    }

    /// The paper's setup for one of its five variants: `logical_bytes` of
    /// logical space, 20 % OP, mapping memory = 20 % of the page FTL's map
    /// (the page FTL itself gets its full map; tiny devices get at least the
    /// GTD plus two mapping pages).
    pub fn paper(variant: Variant, logical_bytes: u64) -> Self {
        let mut cfg = FtlConfig::default().with_logical_bytes(logical_bytes);
        let (scheme, scheduler) = variant.scheme_and_scheduler();
        cfg.scheme = scheme;
        cfg.scheduler = scheduler;
        // Tiny devices get at least the GTD and one page per region.
        let g = cfg.geometry();
        let floor = g.map_pages * MAP_ENTRY_BYTES + 2 * u64::from(cfg.page_size);
        cfg.map_memory_bytes = match variant {
            Variant::Page => None,
            _ => Some((cfg.logical_pages() * MAP_ENTRY_BYTES / 5).max(floor)),
        };
        cfg
    }

    /// Logical pages the host sees.
    pub fn logical_pages(&self) -> u64 {
        self.geometry().logical_pages
    }

    /// Bytes the full page map takes (4 B per logical page).
    pub fn full_map_bytes(&self) -> u64 {
        self.logical_pages() * MAP_ENTRY_BYTES
    }

    pub(crate) fn geometry(&self) -> Geometry {
        let chips = self.channels.saturating_mul(self.chips_per_channel);
        let total_blocks = u64::from(chips) * u64::from(self.blocks_per_chip);
        let physical_pages = total_blocks * u64::from(self.pages_per_block);
        let logical_pages = match self.logical_bytes {
            Some(b) => b / u64::from(self.page_size.max(1)),
            None => (physical_pages as f64 * (1.0 - self.op_ratio))
                .floor()
                .max(0.0) as u64,
        };
        let entries_per_map_page = (self.page_size / MAP_ENTRY_BYTES as u32).max(1);
        let map_pages = logical_pages.div_ceil(u64::from(entries_per_map_page));
        let buffer_pages = if self.write_buffer_pages == 0 {
            chips.max(1)
        } else {
            self.write_buffer_pages
        };
        Geometry {
            page_size: self.page_size,
            channels: self.channels,
            chips_per_channel: self.chips_per_channel,
            chips,
            blocks_per_chip: self.blocks_per_chip,
            pages_per_block: self.pages_per_block,
            physical_pages,
            logical_pages,
            entries_per_map_page,
            map_pages,
            buffer_pages,
        }
    }

    /// Blocks each chip needs for `logical_pages`: the data it holds (writes
    /// stripe evenly), the mapping pages (twice, for their own GC), the GC
    /// reserve and three open blocks (host, GC, mapping).
    fn min_blocks_per_chip(&self, logical_pages: u64) -> u64 {
        let ppb = u64::from(self.pages_per_block.max(1));
        let chips = u64::from(self.channels.max(1)) * u64::from(self.chips_per_channel.max(1));
        let epp = u64::from((self.page_size / MAP_ENTRY_BYTES as u32).max(1));
        let map_pages = logical_pages.div_ceil(epp);
        let data_blocks = logical_pages.div_ceil(chips).div_ceil(ppb);
        let map_blocks = (2 * map_pages).div_ceil(chips).div_ceil(ppb) + 1;
        data_blocks + map_blocks + u64::from(self.gc.high_free_blocks) + 3
    }

    /// Bytes of the mapping budget, with `None` resolved to the full map.
    pub fn map_budget_bytes(&self) -> u64 {
        self.map_memory_bytes
            .unwrap_or_else(|| self.full_map_bytes())
    }

    /// Check that the configuration can work; the error says what is wrong.
    ///
    /// ```
    /// use ptsd_ftl::{ConfigError, FtlConfig};
    /// let mut cfg = FtlConfig::default();
    /// cfg.page_size = 3000;
    /// assert_eq!(cfg.validate(), Err(ConfigError::PageSize(3000)));
    /// ```
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !self.page_size.is_power_of_two() || self.page_size < 512 || self.page_size > (1 << 20) {
            return Err(ConfigError::PageSize(self.page_size));
        }
        for (v, name) in [
            (self.channels, "channels"),
            (self.chips_per_channel, "chips_per_channel"),
            (self.blocks_per_chip, "blocks_per_chip"),
            (self.pages_per_block, "pages_per_block"),
        ] {
            if v == 0 {
                return Err(ConfigError::Zero(name));
            }
        }
        for (v, name) in [
            (self.t_read_ns, "t_read_ns"),
            (self.t_prog_ns, "t_prog_ns"),
            (self.t_erase_ns, "t_erase_ns"),
        ] {
            if v == 0 {
                return Err(ConfigError::Zero(name));
            }
        }
        if !(self.op_ratio > 0.0 && self.op_ratio <= 0.9) {
            return Err(ConfigError::OpRatio(self.op_ratio));
        }
        let g = self.geometry();
        if g.physical_pages >= (1u64 << 31) - 2 {
            return Err(ConfigError::TooLarge {
                physical_pages: g.physical_pages,
            });
        }
        if let Some(b) = self.logical_bytes {
            if b == 0 || b % u64::from(self.page_size) != 0 {
                return Err(ConfigError::LogicalSize {
                    logical_bytes: b,
                    page_size: self.page_size,
                });
            }
        }
        if g.logical_pages == 0 {
            return Err(ConfigError::Zero("logical pages"));
        }
        let max_logical = (g.physical_pages as f64 * (1.0 - self.op_ratio)).floor() as u64;
        if g.logical_pages > max_logical {
            return Err(ConfigError::NotEnoughSpare {
                logical_pages: g.logical_pages,
                physical_pages: g.physical_pages,
                op_ratio: self.op_ratio,
            });
        }
        let gc = &self.gc;
        if gc.urgent_free_blocks < 1
            || gc.low_free_blocks <= gc.urgent_free_blocks
            || gc.high_free_blocks <= gc.low_free_blocks
        {
            return Err(ConfigError::GcThresholds {
                urgent: self.gc.urgent_free_blocks,
                low: self.gc.low_free_blocks,
                high: self.gc.high_free_blocks,
            });
        }
        if g.buffer_pages > 65536 {
            return Err(ConfigError::WriteBuffer(g.buffer_pages));
        }
        let data_blocks = g
            .logical_pages
            .div_ceil(u64::from(g.chips))
            .div_ceil(u64::from(self.pages_per_block));
        let needed = self.min_blocks_per_chip(g.logical_pages);
        if u64::from(self.blocks_per_chip) < needed {
            return Err(ConfigError::SpareBlocksPerChip {
                needed: needed - data_blocks,
                have: u64::from(self.blocks_per_chip).saturating_sub(data_blocks),
            });
        }
        self.scheme_factory().check(&MapGeometry::of(self))
    }
}
