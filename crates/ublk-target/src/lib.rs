//! ptsd-ublk: any [`BlockDevice`](ptsd_blockdev::BlockDevice) — the emulated
//! SSD by default — as a Linux block device `/dev/ublkbN`.
//!
//! The kernel's ublk driver hands block requests to a userspace daemon over
//! io_uring. This crate is that daemon's request path, built the way the
//! papers on fast-storage I/O stacks say (`docs/papers.md` §3–4 in the
//! repository):
//!
//! - **poll, don't sleep**: with polling on, a queue thread with requests in
//!   flight spins between the kernel ring and its completion box instead of
//!   sleeping on an interrupt-like wake-up ([`engine::serve`]);
//! - **one lock per batch**: queue threads hand whole batches to the one
//!   device thread by queue swapping ([`handoff::LockMode::Swap`]), with a
//!   lock-per-request mode kept for comparison;
//! - **scheduling at the device**: requests are ordered by the FTL's
//!   scheduler, PTSD read priority by default ([`sched`]);
//! - **real-time NAND timing**: with the emulated SSD and timing on, a
//!   request completes when the NAND model says, on the wall clock.
//! - **zoned devices**: the zoned SSD model served as a host-managed zoned
//!   device ([`zoned`]), its data moved through the kernel's user-copy
//!   interface ([`usercopy`]).
//!
//! The request path is our own [`engine::QueueIo`] trait, not libublk's
//! types: the kernel queue (`kernel` module, feature `kernel`) and the
//! [`fake::FakeQueue`] of the host tests both run exactly [`engine::serve`].
//!
//! ```
//! use ptsd_blockdev::MemDevice;
//! use ptsd_ublk::backend::DirectBackend;
//! use ptsd_ublk::engine::{serve_once, Clock, Engine, EngineConfig, QueueSide};
//! use ptsd_ublk::fake::fake_queue;
//! use ptsd_ublk::request::{op, RawDesc};
//! use ptsd_ublk::sched::SchedulerKind;
//!
//! let backend = DirectBackend::new(MemDevice::new(4096, 256).unwrap(), SchedulerKind::ReadPriority);
//! let config = EngineConfig { depth: 4, max_io_bytes: 4096, ..EngineConfig::default() };
//! let (mut engine, shared) = Engine::new(Box::new(backend), config, Clock::wall());
//! let (mut queue, handle) = fake_queue(4, 4096, false);
//! let mut side = QueueSide::new(shared, 0);
//! let mut scratch = Vec::new();
//!
//! handle.submit(0, RawDesc::new(op::WRITE, 8, 8), Some(&[7u8; 4096])).unwrap();
//! serve_once(&mut queue, &mut side, &mut scratch).unwrap(); // queue → engine
//! engine.step(); // device thread
//! serve_once(&mut queue, &mut side, &mut scratch).unwrap(); // engine → queue
//! assert_eq!(handle.take_completions(), vec![(0, 4096)]);
//! ```
#![warn(missing_docs)]

pub mod acklog;
pub mod backend;
pub mod engine;
pub mod fake;
pub mod ftl;
pub mod handoff;
pub mod nvmet;
pub mod request;
pub mod sched;
pub mod stats;
pub mod usercopy;
pub mod zoned;

pub use backend::{Backend, DirectBackend, ShutdownError};
pub use engine::{serve, Clock, Engine, EngineConfig, QueueIo, QueueSide, Shared};
pub use handoff::LockMode;
pub use sched::SchedulerKind;
pub mod spec;

#[cfg(feature = "kernel")]
pub mod kernel;
