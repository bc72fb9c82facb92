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
//! See the crate's README for the model and the paper's five variants.

mod bigvec;
pub mod config;
mod counters;
pub mod device;
mod error;
mod fastdiv;
mod flash;
pub mod image;
mod mapping;
pub mod request;
mod ssd;
pub mod store;
mod timeline;

pub use config::{
    ConfigError, FtlConfig, GcConfig, GcPolicy, SchedulerKind, SchemeConfig, StoreKind, Variant,
    WriteStop,
};
pub use counters::{ByCause, FtlStats};
pub use device::{Clock, SsdDevice, VirtualClock, WallClock};
pub use error::{DeviceFault, FtlError, RequestError};
pub use request::{Completion, Op, Request};
pub mod sim;
pub mod stats;
pub mod trace;
pub mod workload;
pub use image::{ImageError, PersistentStore};
pub use ssd::{DataIo, Done, Payload, Ssd};
pub use store::{MemStore, NoStore, Oob, PageKind, Store, StoreError};
