use std::sync::Arc;

use thiserror::Error;

use crate::config::ConfigError;
use crate::store::NandStoreError;

/// Errors of the engine as a whole.
#[derive(Debug, Error)]
pub enum FtlError {
    #[error("invalid configuration")]
    Config(#[from] ConfigError),
    #[error("store")]
    Store(#[from] NandStoreError),
    /// GC could not free a block anywhere (over-provisioning too small for
    /// how the data ended up spread over the chips).
    #[error("no free flash space left (GC found nothing to reclaim)")]
    NoSpace,
    /// The store kind needs another constructor (e.g. a file store needs `Ssd::open`).
    #[error("{0}")]
    Unsupported(String),
    /// Shutdown with requests still queued or in service.
    #[error("{0} requests are still outstanding")]
    Busy(usize),
    /// A previous error stopped the device.
    #[error("device failed earlier")]
    Failed(#[source] DeviceFault),
}

/// The error that stopped a device for good ([`Ssd::fault`](crate::Ssd::fault)).
/// Shared: every later request is refused with the same fault.
#[derive(Debug, Clone, Error)]
#[error(transparent)]
pub struct DeviceFault(Arc<FtlError>);

impl DeviceFault {
    pub(crate) fn new(e: FtlError) -> Self {
        DeviceFault(Arc::new(e))
    }

    /// The engine error that stopped the device.
    pub fn error(&self) -> &FtlError {
        &self.0
    }

    /// The device ran out of flash space: a write the user sees fail with
    /// ENOSPC, not EIO.
    pub fn is_no_space(&self) -> bool {
        matches!(*self.0, FtlError::NoSpace)
    }
}

/// The same fault (one device stops once).
impl PartialEq for DeviceFault {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for DeviceFault {}

/// A request the SSD refuses; nothing was changed.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum SsdRequestError {
    #[error("logical pages {lpn}..{} are out of range (device has {logical_pages})", .lpn.saturating_add(u64::from(*.pages)))]
    OutOfRange {
        lpn: u64,
        pages: u32,
        logical_pages: u64,
    },
    #[error("a {op:?} request needs at least one page")]
    ZeroLength { op: crate::Op },
    #[error("payload of {len} bytes does not match {pages} pages of {page_size} bytes")]
    PayloadSize {
        len: usize,
        pages: u32,
        page_size: u32,
    },
    #[error("a {op:?} request cannot carry this payload kind")]
    PayloadKind { op: crate::Op },
    #[error("this SSD keeps data: a write needs its bytes")]
    PayloadRequired,
    /// A [`Payload::External`](crate::Payload::External) request whose
    /// caller had no buffer for it when the SSD served it.
    #[error("no caller buffer for {op:?} request {id}")]
    BufferMissing { id: u64, op: crate::Op },
    #[error("the SSD failed earlier and accepts no more requests")]
    Failed(#[source] DeviceFault),
}
