//! What a device serves, as a serializable description.
//!
//! `ptsd ublk add` turns its flags into a [`DeviceSpec`]; the spec is stored
//! with the device (libublk's per-device JSON) so that `ptsd ublk recover N`
//! rebuilds exactly the same backend after the daemon died.

use crate::backend::{Backend, DirectBackend};
use crate::handoff::LockMode;
use crate::sched::SchedKind;
use ptsd_blockdev::{BlockError, FileDevice, FileDeviceOptions, MemDevice};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// The device's contents.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum BackendSpec {
    /// A RAM disk of `bytes` (lost when the daemon exits).
    Mem { bytes: u64, block_size: u32 },
    /// A plain file or block device, loop-style.
    Backing { path: PathBuf, block_size: u32 },
}

/// Everything needed to (re)build a device's request path.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceSpec {
    pub backend: BackendSpec,
    pub sched: SchedKind,
    pub lock_mode: LockMode,
    pub poll: bool,
}

/// Why a backend could not be built.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    #[error("device of {bytes} bytes is not a non-zero multiple of the {block_size}-byte block")]
    BadSize { bytes: u64, block_size: u32 },
    #[error("backing store {path}: {source}")]
    Backing { path: PathBuf, source: BlockError },
    #[error("memory device: {0}")]
    Mem(BlockError),
}

impl DeviceSpec {
    /// Build the backend this spec describes.
    ///
    /// ```
    /// use ptsd_ublk::spec::{BackendSpec, DeviceSpec};
    /// use ptsd_ublk::{LockMode, SchedKind};
    /// let spec = DeviceSpec {
    ///     backend: BackendSpec::Mem { bytes: 1 << 20, block_size: 4096 },
    ///     sched: SchedKind::ReadPriority,
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
                Ok(Box::new(DirectBackend::new(dev, self.sched)))
            }
            BackendSpec::Backing { path, block_size } => {
                let dev: FileDevice = FileDeviceOptions::new()
                    .block_size(*block_size)
                    .open(path)
                    .map_err(|source| SpecError::Backing {
                        path: path.clone(),
                        source,
                    })?;
                Ok(Box::new(DirectBackend::new(dev, self.sched)))
            }
        }
    }
}
