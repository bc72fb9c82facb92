//! The requests a host hands the SSD, and what comes back.

use serde::{Deserialize, Serialize};

/// What a request asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Op {
    /// Read `pages` logical pages.
    Read,
    /// Write `pages` logical pages.
    Write,
    /// Drop the mapping of `pages` logical pages (TRIM).
    Discard,
    /// Make every completed write durable (flush the write buffer).
    Flush,
}

/// One host request, addressed in logical pages (LPNs) of the SSD's page size.
///
/// ```
/// use ptsd_ftl::{Op, Request};
/// let r = Request { id: 7, op: Op::Write, lpn: 1024, pages: 1 };
/// assert_eq!(r.end_lpn(), 1025);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    /// Caller-chosen tag, returned in the [`Completion`].
    pub id: u64,
    pub op: Op,
    /// First logical page. Ignored for [`Op::Flush`].
    pub lpn: u64,
    /// Number of logical pages. Zero only for [`Op::Flush`].
    pub pages: u32,
}

impl Request {
    /// One past the last logical page.
    pub fn end_lpn(&self) -> u64 {
        self.lpn.saturating_add(u64::from(self.pages))
    }
}

/// A finished request with its timestamps (nanoseconds on the SSD's clock).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Completion {
    pub id: u64,
    pub op: Op,
    /// When the host submitted it.
    pub submit_ns: u64,
    /// When the controller took it from the interface queue.
    pub dispatch_ns: u64,
    /// When its last NAND operation (or buffer copy) ended.
    pub done_ns: u64,
}

impl Completion {
    /// Host-visible latency.
    pub fn latency_ns(&self) -> u64 {
        self.done_ns.saturating_sub(self.submit_ns)
    }
}
