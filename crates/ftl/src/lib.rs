//! An emulated NAND SSD.
//!
//! One state machine per SSD, with no threads or I/O of its own: requests go
//! into an interface queue with the current time, NAND operations are placed
//! on per-channel and per-chip timelines, and each request comes out with its
//! completion time. The same core runs under a virtual clock (simulation) and
//! the wall clock (emulation behind ublk).

pub mod request;

pub use request::{Completion, Op, Request};
pub mod sim;
pub mod stats;
pub mod trace;
pub mod workload;
