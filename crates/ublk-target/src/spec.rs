//! What a device serves, as a serializable description.
//!
//! `ptsd ublk add` turns its flags into a [`DeviceSpec`]; the spec is stored
//! with the device (libublk's per-device JSON) so that `ptsd ublk recover N`
//! rebuilds exactly the same backend after the daemon died.

use crate::backend::{Backend, DirectBackend};
use crate::ftl::{FtlBackend, Timing};
use crate::handoff::LockMode;
use crate::zoned::ZonedBackend;
use ptsd_blockdev::{BlockDevice, BlockError, MemDevice};
use ptsd_ftl::zoned::{ZonedConfig, ZonedError, ZonedSsd};
use ptsd_ftl::{FtlConfig, SchedulerKind, Ssd, StoreKind, Variant};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::Arc;

/// The device's contents.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum BackendSpec {
    /// A RAM disk of `bytes` (lost when the daemon exits).
    Mem {
        /// Capacity.
        bytes: u64,
        /// Bytes per block.
        block_size: u32,
    },
    /// A plain file or block device, loop-style.
    Backing {
        /// The file or device.
        path: PathBuf,
        /// Bytes per block.
        block_size: u32,
    },
    /// The emulated SSD with `scheme` (`page`, `dftl`, `ptsd`) and
    /// `bytes` of logical space.
    Ftl {
        /// The mapping scheme.
        scheme: FtlScheme,
        /// Logical capacity.
        bytes: u64,
        /// Where the SSD's persistent state lives.
        store: FtlStore,
        /// Whether NAND latencies are emulated.
        timing: Timing,
    },
    /// The zoned (ZNS) SSD, host-managed: `bytes` of zones of `zone_bytes`.
    Zoned {
        /// Capacity (a multiple of the zone size times the chip groups).
        bytes: u64,
        /// Zone size (a power of two, at least one erase block).
        zone_bytes: u64,
        /// Writable bytes of each zone; `None` = the zone size.
        zone_capacity_bytes: Option<u64>,
        /// Most zones open at once (0 = no limit).
        max_open: u32,
        /// Most zones open or closed at once (0 = no limit).
        max_active: u32,
        /// Where the SSD's persistent state lives.
        store: FtlStore,
        /// Whether NAND latencies are emulated.
        timing: Timing,
    },
}

/// Mapping scheme of the emulated SSD, as the paper's variants.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FtlScheme {
    /// Full page map in DRAM (the paper's OPT/PAGE).
    Page,
    /// DFTL: page-granular cached mapping table.
    Dftl,
    /// PTSD: clean/dirty partitioned cache, entry-granular dirty region.
    Ptsd,
}

impl std::str::FromStr for FtlScheme {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "page" => Ok(FtlScheme::Page),
            "dftl" => Ok(FtlScheme::Dftl),
            "ptsd" => Ok(FtlScheme::Ptsd),
            other => Err(format!(
                "unknown FTL {other:?} (expected page, dftl or ptsd)"
            )),
        }
    }
}

/// Where the emulated SSD keeps page data.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FtlStore {
    /// Timing only: writes are dropped, reads return zeroes.
    None,
    /// In memory (lost with the daemon).
    Mem,
    /// A persistent image file.
    File(PathBuf),
}

impl FtlStore {
    /// `none`, `mem`, or anything else as a file path.
    pub fn parse(s: &str) -> Self {
        match s {
            "none" => FtlStore::None,
            "mem" | "memory" => FtlStore::Mem,
            path => FtlStore::File(PathBuf::from(path)),
        }
    }

    /// The SSD model's store for it.
    fn kind(&self) -> StoreKind {
        match self {
            FtlStore::None => StoreKind::None,
            FtlStore::Mem => StoreKind::Memory,
            FtlStore::File(path) => StoreKind::File { path: path.clone() },
        }
    }
}

/// Everything needed to (re)build a device's request path.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceSpec {
    /// The device's contents.
    pub backend: BackendSpec,
    /// Request order; `None` = the backend's default (the FTL variant's own
    /// scheduler, read priority for plain devices).
    pub sched: Option<SchedulerKind>,
    /// How the hand-off queues between queue threads and the engine are locked.
    pub lock_mode: LockMode,
    /// Queue threads busy-poll for completions instead of sleeping.
    pub poll: bool,
}

/// What the caller opened for a backend: the backing file or device, or
/// the emulated SSD. ptsd-ublk opens nothing that outlives its daemon: the
/// binary gets these from ptsd-stack, which locks a persistent image for as
/// long as the device is served.
pub enum Opened {
    /// The backing file or device ([`BackendSpec::Backing`]).
    Device(Arc<dyn BlockDevice>),
    /// The emulated SSD of [`DeviceSpec::ftl_config`] ([`BackendSpec::Ftl`]).
    Ssd(Box<Ssd>),
    /// The zoned SSD of [`DeviceSpec::zoned_config`] ([`BackendSpec::Zoned`]).
    Zoned(Box<ZonedSsd>),
}

impl Opened {
    fn kind(&self) -> &'static str {
        match self {
            Opened::Device(_) => "a backing device",
            Opened::Ssd(_) => "an emulated SSD",
            Opened::Zoned(_) => "a zoned SSD",
        }
    }
}

/// Why a backend could not be built.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    /// The size is not a non-zero multiple of the block size.
    #[error("device of {bytes} bytes is not a non-zero multiple of the {block_size}-byte block")]
    BadSize {
        /// The size asked for.
        bytes: u64,
        /// Bytes per block.
        block_size: u32,
    },
    /// The caller handed over the wrong thing (or nothing) for this backend.
    #[error("the {backend} backend needs {want}, got {got}")]
    Opened {
        /// The backend of the spec.
        backend: &'static str,
        /// What it needs opened by the caller.
        want: &'static str,
        /// What it was given.
        got: &'static str,
    },
    /// The RAM disk could not be created.
    #[error("memory device")]
    Mem(#[source] BlockError),
    /// The zoned shape asked for cannot be built.
    #[error("zoned device: {0}")]
    ZonedShape(String),
    /// The zoned SSD's configuration is invalid.
    #[error("zoned device")]
    Zoned(#[source] ZonedError),
    /// The emulated SSD's acknowledged-write log could not be opened or replayed.
    #[error("emulated SSD")]
    Ftl(#[source] crate::ftl::OpenError),
}

impl DeviceSpec {
    /// The emulated SSD's configuration, for a [`BackendSpec::Ftl`] spec:
    /// what the caller opens (`ptsd_stack::claim_ssd`, or `Ssd::new` for a
    /// RAM or timing-only store) and hands to [`build_backend`](Self::build_backend).
    pub fn ftl_config(&self) -> Option<FtlConfig> {
        let BackendSpec::Ftl {
            scheme,
            bytes,
            store,
            ..
        } = &self.backend
        else {
            return None;
        };
        let variant = match scheme {
            FtlScheme::Page => Variant::Page,
            FtlScheme::Dftl => Variant::Dftl,
            FtlScheme::Ptsd => Variant::WriteOpt,
        };
        let mut cfg = FtlConfig::paper(variant, *bytes);
        // The paper's 20 %-of-the-map budget is too small to hold
        // even a few mapping pages on a tiny device.
        let floor = 4 * u64::from(cfg.page_size);
        cfg.map_memory_bytes = cfg.map_memory_bytes.map(|b| b.max(floor));
        cfg.store = store.kind();
        if let Some(s) = self.sched {
            cfg.scheduler = s;
        }
        Some(cfg)
    }

    /// The zoned SSD's configuration, for a [`BackendSpec::Zoned`] spec:
    /// the default NAND board (4 KiB pages, 8 channels x 4 chips, 1 MiB
    /// erase blocks) with each zone striped over up to 8 chips, and as
    /// many blocks per chip as the size needs. What the caller opens
    /// (`ZonedSsd::open_on` under ptsd-stack's claim, or `ZonedSsd::new`
    /// for a RAM or timing-only store) and hands to
    /// [`build_backend`](Self::build_backend).
    ///
    /// ```
    /// use ptsd_ublk::spec::{BackendSpec, DeviceSpec, FtlStore};
    /// use ptsd_ublk::{ftl::Timing, LockMode};
    /// let spec = DeviceSpec {
    ///     backend: BackendSpec::Zoned {
    ///         bytes: 256 << 20, zone_bytes: 8 << 20, zone_capacity_bytes: Some(6 << 20),
    ///         max_open: 8, max_active: 12, store: FtlStore::None, timing: Timing::Off,
    ///     },
    ///     sched: None, lock_mode: LockMode::Swap, poll: true,
    /// };
    /// let cfg = spec.zoned_config().unwrap().unwrap();
    /// assert_eq!((cfg.zones(), cfg.zone_pages()), (32, 2048));
    /// assert_eq!(cfg.zone_capacity_pages, Some(1536));
    /// ```
    pub fn zoned_config(&self) -> Option<Result<ZonedConfig, SpecError>> {
        let BackendSpec::Zoned {
            bytes,
            zone_bytes,
            zone_capacity_bytes,
            max_open,
            max_active,
            store,
            ..
        } = &self.backend
        else {
            return None;
        };
        Some(zoned_config(
            *bytes,
            *zone_bytes,
            *zone_capacity_bytes,
            (*max_open, *max_active),
            store,
        ))
    }

    /// Build the backend this spec describes: a RAM disk made here
    /// (`opened` = `None`), or on what the caller `opened` — the backing
    /// file or device, or the emulated SSD.
    ///
    /// ```
    /// use ptsd_ftl::Ssd;
    /// use ptsd_ublk::spec::{BackendSpec, DeviceSpec, FtlScheme, FtlStore, Opened};
    /// use ptsd_ublk::{ftl::Timing, LockMode, SchedulerKind};
    /// let mut spec = DeviceSpec {
    ///     backend: BackendSpec::Mem { bytes: 1 << 20, block_size: 4096 },
    ///     sched: Some(SchedulerKind::ReadPriority),
    ///     lock_mode: LockMode::Swap,
    ///     poll: true,
    /// };
    /// assert_eq!(spec.build_backend(None).unwrap().num_blocks(), 256);
    ///
    /// spec.backend = BackendSpec::Ftl {
    ///     scheme: FtlScheme::Ptsd,
    ///     bytes: 64 << 20,
    ///     store: FtlStore::Mem,
    ///     timing: Timing::Off,
    /// };
    /// let ssd = Ssd::new(spec.ftl_config().unwrap()).unwrap();
    /// let b = spec.build_backend(Some(Opened::Ssd(Box::new(ssd)))).unwrap();
    /// assert_eq!(b.num_blocks(), 16384);
    /// assert!(spec.build_backend(None).is_err());
    /// ```
    pub fn build_backend(&self, opened: Option<Opened>) -> Result<Box<dyn Backend>, SpecError> {
        let mismatch = |backend, want, opened: Option<Opened>| SpecError::Opened {
            backend,
            want,
            got: opened.as_ref().map_or("nothing", Opened::kind),
        };
        match (&self.backend, opened) {
            (BackendSpec::Mem { bytes, block_size }, None) => {
                let bs = u64::from(*block_size);
                if *bytes == 0 || bs == 0 || bytes % bs != 0 {
                    return Err(SpecError::BadSize {
                        bytes: *bytes,
                        block_size: *block_size,
                    });
                }
                let dev = MemDevice::new(*block_size, bytes / bs).map_err(SpecError::Mem)?;
                Ok(Box::new(DirectBackend::new(dev, self.direct_sched())))
            }
            (BackendSpec::Backing { .. }, Some(Opened::Device(dev))) => {
                Ok(Box::new(DirectBackend::new(dev, self.direct_sched())))
            }
            (BackendSpec::Ftl { timing, .. }, Some(Opened::Ssd(ssd))) => {
                let backend = FtlBackend::new(*ssd, *timing).map_err(SpecError::Ftl)?;
                Ok(Box::new(backend))
            }
            (BackendSpec::Zoned { timing, .. }, Some(Opened::Zoned(ssd))) => {
                Ok(Box::new(ZonedBackend::new(*ssd, *timing)))
            }
            (BackendSpec::Mem { .. }, o) => Err(mismatch("memory", "nothing", o)),
            (BackendSpec::Zoned { .. }, o) => Err(mismatch("zoned", "a zoned SSD", o)),
            (BackendSpec::Backing { .. }, o) => Err(mismatch("backing", "a backing device", o)),
            (BackendSpec::Ftl { .. }, o) => Err(mismatch("FTL", "an emulated SSD", o)),
        }
    }

    /// If the data lives in the daemon's memory (and dies with it): which
    /// option put it there.
    pub fn ram_backed(&self) -> Option<&'static str> {
        match &self.backend {
            BackendSpec::Mem { .. } => Some("--mem"),
            BackendSpec::Ftl {
                store: FtlStore::Mem,
                ..
            }
            | BackendSpec::Zoned {
                store: FtlStore::Mem,
                ..
            } => Some("--store mem"),
            _ => None,
        }
    }

    fn direct_sched(&self) -> SchedulerKind {
        self.sched.unwrap_or(SchedulerKind::ReadPriority)
    }
}

/// Chips each zone stripes over at most (the default board's zone).
const ZONE_STRIPE: u64 = 8;

/// See [`DeviceSpec::zoned_config`].
fn zoned_config(
    bytes: u64,
    zone_bytes: u64,
    capacity_bytes: Option<u64>,
    (max_open, max_active): (u32, u32),
    store: &FtlStore,
) -> Result<ZonedConfig, SpecError> {
    let bad = |m: String| Err(SpecError::ZonedShape(m));
    let mut nand = FtlConfig {
        store: store.kind(),
        ..FtlConfig::default()
    };
    let page = u64::from(nand.page_size);
    let block = page * u64::from(nand.pages_per_block);
    let chips = u64::from(nand.channels) * u64::from(nand.chips_per_channel);
    // The kernel's zone size is a power of two; a zone is whole erase
    // blocks on each chip of its stripe.
    if !zone_bytes.is_power_of_two() || zone_bytes < block {
        return bad(format!(
            "zone size {zone_bytes} is not a power of two of at least one {block}-byte erase block"
        ));
    }
    let zone_blocks = zone_bytes / block;
    let stripe = zone_blocks.min(ZONE_STRIPE);
    let per_chip = zone_blocks / stripe;
    let groups = chips / stripe;
    let row = zone_bytes * groups;
    if bytes == 0 || bytes % row != 0 {
        return bad(format!(
            "size {bytes} is not a non-zero multiple of {row} bytes (the zone size times the {groups} chip groups zones stripe over)"
        ));
    }
    let cap_pages = match capacity_bytes {
        None => None,
        Some(c) if c == 0 || c % page != 0 || c > zone_bytes => {
            return bad(format!(
                "zone capacity {c} is not a multiple of the {page}-byte page in 1..={zone_bytes} (the zone size)"
            ))
        }
        Some(c) => Some(c / page),
    };
    let zones = bytes / zone_bytes;
    for (v, what) in [(max_open, "open"), (max_active, "active")] {
        if u64::from(v) > zones {
            return bad(format!(
                "max {what} zones {v} is more than the device's {zones} zones"
            ));
        }
    }
    nand.blocks_per_chip = u32::try_from(bytes / row * per_chip)
        .map_err(|_| SpecError::ZonedShape(format!("size {bytes} is too large")))?;
    let cfg = ZonedConfig {
        nand,
        stripe_chips: stripe as u32,
        zone_blocks_per_chip: per_chip as u32,
        zone_capacity_pages: cap_pages,
        max_open_zones: max_open,
        max_active_zones: max_active,
        ..ZonedConfig::default()
    };
    cfg.validate().map_err(SpecError::Zoned)?;
    Ok(cfg)
}
