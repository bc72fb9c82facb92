//! What a device serves, as a serializable description.
//!
//! `ptsd ublk add` turns its flags into a [`DeviceSpec`]; the spec is stored
//! with the device (libublk's per-device JSON) so that `ptsd ublk recover N`
//! rebuilds exactly the same backend after the daemon died.

use crate::backend::{Backend, DirectBackend};
use crate::ftl::{FtlBackend, Timing};
use crate::handoff::LockMode;
use ptsd_blockdev::{BlockError, FileDevice, FileDeviceOptions, MemDevice};
use ptsd_ftl::{FtlConfig, SchedulerKind, StoreKind, Variant};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

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
    /// The backing file or device could not be opened.
    #[error("backing store {path}: {source}")]
    Backing {
        /// The file or device.
        path: PathBuf,
        /// Why.
        source: BlockError,
    },
    /// The RAM disk could not be created.
    #[error("memory device: {0}")]
    Mem(#[source] BlockError),
    /// The emulated SSD could not be opened.
    #[error("emulated SSD: {0}")]
    Ftl(#[source] crate::ftl::OpenError),
}

impl DeviceSpec {
    /// Build the backend this spec describes.
    ///
    /// ```
    /// use ptsd_ublk::spec::{BackendSpec, DeviceSpec};
    /// use ptsd_ublk::{LockMode, SchedulerKind};
    /// let spec = DeviceSpec {
    ///     backend: BackendSpec::Mem { bytes: 1 << 20, block_size: 4096 },
    ///     sched: Some(SchedulerKind::ReadPriority),
    ///     lock_mode: LockMode::Swap,
    ///     poll: true,
    /// };
    /// assert_eq!(spec.build_backend().unwrap().num_blocks(), 256);
    /// ```
    pub fn build_backend(&self) -> Result<Box<dyn Backend>, SpecError> {
        match &self.backend {
            BackendSpec::Mem { bytes, block_size } => {
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
            BackendSpec::Backing { path, block_size } => {
                let dev: FileDevice = FileDeviceOptions::new()
                    .block_size(*block_size)
                    .open(path)
                    .map_err(|source| SpecError::Backing {
                        path: path.clone(),
                        source,
                    })?;
                Ok(Box::new(DirectBackend::new(dev, self.direct_sched())))
            }
            BackendSpec::Ftl {
                scheme,
                bytes,
                store,
                timing,
            } => {
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
                cfg.store = match store {
                    FtlStore::None => StoreKind::None,
                    FtlStore::Mem => StoreKind::Memory,
                    FtlStore::File(path) => StoreKind::File { path: path.clone() },
                };
                if let Some(s) = self.sched {
                    cfg.scheduler = s;
                }
                let backend = FtlBackend::new(cfg, *timing).map_err(SpecError::Ftl)?;
                Ok(Box::new(backend))
            }
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
            } => Some("--store mem"),
            _ => None,
        }
    }

    fn direct_sched(&self) -> SchedulerKind {
        self.sched.unwrap_or(SchedulerKind::ReadPriority)
    }
}
