//! An emulated NAND SSD.
//!
//! One state machine per SSD, with no threads or I/O of its own: requests go
//! into an interface queue with the current time, NAND operations are placed
//! on per-channel and per-chip timelines, and each request comes out with its
//! completion time. The same core runs under a virtual clock (simulation) and
//! the wall clock (emulation behind ublk).
//!
//! - [`FtlConfig`]: geometry, timing, over-provisioning, mapping memory,
//!   [`SchemeConfig`] (page / DFTL / PTSD), GC, write buffer, scheduler, store.
//! - [`Ssd`]: `submit` / `next_event` / `advance`, [`FtlStats`].
//!
//! - [`SsdDevice`]: the emulated SSD, holding real data, as a
//!   [`BlockDevice`](ptsd_blockdev::BlockDevice) for any layer above.
//!
//! See the crate's README for the model and the paper's five variants.
//!
//! ```
//! use std::sync::Arc;
//! use ptsd_blockdev::BlockDevice;
//! use ptsd_ftl::{FtlConfig, Ssd, SsdDevice, StoreKind, Variant};
//!
//! // The paper's PTSD with greedy batch update (WRITEOPT), 64 MiB, data in memory.
//! let mut cfg = FtlConfig::paper(Variant::WriteOpt, 64 << 20);
//! cfg.store = StoreKind::Memory;
//! let ssd = Arc::new(SsdDevice::virtual_time(Ssd::new(cfg).unwrap()));
//! let dev: Arc<dyn BlockDevice> = ssd.clone(); // what the journal or a file system takes
//!
//! dev.write(100, &[0xAB; 4096]).unwrap();
//! dev.flush().unwrap();
//! let mut page = [0u8; 4096];
//! dev.read(100, &mut page).unwrap();
//! assert_eq!(page, [0xAB; 4096]);
//!
//! // The model's side of it: simulated time passed, NAND pages were programmed.
//! assert!(ssd.now_ns() > 0);
//! assert_eq!(ssd.stats().host_write_pages, 1);
//! ```

mod bigvec;
pub mod config;
pub mod conformance;
mod counters;
pub mod device;
mod error;
mod fastdiv;
mod flash;
pub mod image;
pub mod mapping;
pub mod policy;
pub mod request;
mod ssd;
pub mod store;
mod timeline;

pub use config::{
    ConfigError, Extensions, FtlConfig, GcConfig, GcPolicy, SchedulerKind, SchemeConfig, StoreKind,
    UnknownScheduler, Variant, WriteStop,
};
pub use counters::{ByCause, FtlStats};
pub use device::{Clock, SsdDevice, VirtualClock, WallClock};
pub use error::{DeviceFault, FtlError, SsdRequestError};
pub use mapping::{MapAction, MapGeometry, MappingScheme, SchemeFactory};
pub use policy::{Scheduler, VictimPolicy};
pub use request::{Completion, Op, Request};
pub mod sim;
pub mod stats;
pub mod trace;
pub mod workload;
pub mod zoned;
pub use image::{ImageError, PersistentStore};
pub use ssd::{DataIo, Done, Payload, Ssd};
pub use store::{MemStore, NandStoreError, NoStore, Oob, PageKind, Store};
