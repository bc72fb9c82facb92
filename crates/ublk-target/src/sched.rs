//! Ordering the requests queued at the device.
//!
//! [`SchedulerKind::ReadPriority`] is PTSD's host-interface rule: a read waiting
//! behind writes goes first, because a read stalls its application while a
//! write has usually been acknowledged from a cache above. Two rules keep
//! that safe: a read never passes a queued write, discard or write-zeroes
//! that touches the same blocks, and a FLUSH is a barrier nothing crosses.
//! The emulated SSD has its own scheduler with the same two policies; this
//! one orders requests for plain block devices.

use crate::backend::Pending;
use crate::request::IoOp;

/// Which order queued requests are served in: the FTL's scheduler
/// vocabulary, one type for both (`Fifo`, or `ReadPriority` within the
/// safety rules above).
pub use ptsd_ftl::SchedulerKind;

/// A queue of requests that hands them out in [`SchedulerKind`] order.
///
/// ```
/// use ptsd_ublk::sched::{SchedulerKind, Scheduler};
/// let s = Scheduler::new(SchedulerKind::Fifo);
/// assert_eq!(s.len(), 0);
/// ```
pub struct Scheduler {
    kind: SchedulerKind,
    queue: Vec<Pending>,
    deferred: Vec<Pending>,
}

impl Scheduler {
    /// An empty scheduler of kind `kind`.
    pub fn new(kind: SchedulerKind) -> Self {
        Scheduler {
            kind,
            queue: Vec::new(),
            deferred: Vec::new(),
        }
    }

    /// Its kind.
    pub fn kind(&self) -> SchedulerKind {
        self.kind
    }

    /// Queue a request.
    pub fn push(&mut self, p: Pending) {
        self.queue.push(p);
    }

    /// Requests queued.
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// No request queued.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Move every queued request to `out`, in service order.
    pub fn drain_in_order(&mut self, out: &mut Vec<Pending>) {
        match self.kind {
            SchedulerKind::Fifo => out.append(&mut self.queue),
            SchedulerKind::ReadPriority => {
                // Segment by segment between FLUSH barriers: the reads that
                // overlap no earlier modifying request of the segment first,
                // then everything else in arrival order, then the FLUSH.
                let mut segment_start = 0;
                let queue = std::mem::take(&mut self.queue);
                for (i, p) in queue.iter().enumerate() {
                    if p.cmd.op == IoOp::Flush {
                        self.order_segment(&queue[segment_start..i], out);
                        out.push(*p);
                        segment_start = i + 1;
                    }
                }
                self.order_segment(&queue[segment_start..], out);
                self.queue = queue;
                self.queue.clear();
            }
        }
    }

    fn order_segment(&mut self, segment: &[Pending], out: &mut Vec<Pending>) {
        self.deferred.clear();
        for p in segment {
            // Only the modifying requests seen so far can block a read; in
            // a read-heavy batch that list stays short.
            let passes = p.cmd.op == IoOp::Read
                && !self
                    .deferred
                    .iter()
                    .any(|w| w.cmd.op.modifies() && w.cmd.overlaps(&p.cmd));
            if passes {
                out.push(*p);
            } else {
                self.deferred.push(*p);
            }
        }
        out.append(&mut self.deferred);
    }
}
