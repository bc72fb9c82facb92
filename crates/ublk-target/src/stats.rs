//! Target-side latency histograms, one per operation.
//!
//! A request's latency is measured from the moment its queue thread picks
//! it up to the moment the queue thread completes it: everything the target
//! adds (hand-off, scheduling, device, modelled NAND time), none of the
//! kernel's own path.

use crate::request::IoOp;
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Latency histograms and error counts per operation.
///
/// ```
/// use ptsd_ublk::request::IoOp;
/// use ptsd_ublk::stats::OpStats;
/// let mut s = OpStats::new();
/// s.record(IoOp::Read, 20_000, true);
/// s.record(IoOp::Read, 40_000, false);
/// let r = s.report();
/// assert_eq!(r.ops["read"].count, 2);
/// assert_eq!(r.ops["read"].errors, 1);
/// ```
#[derive(Clone)]
pub struct OpStats {
    hist: [Histogram<u64>; OPS],
    errors: [u64; OPS],
}

const OPS: usize = IoOp::ALL.len();

fn op_index(op: IoOp) -> usize {
    // `ALL` lists the variants in declaration order.
    op as usize
}

fn new_hist() -> Histogram<u64> {
    // 1 ns .. 100 s at 2 significant digits (values within 1 %): 31 KiB
    // each. Three digits would take 224 KiB each, and the once-a-second
    // reader merges them all while the queue threads wait for the lock.
    Histogram::new_with_bounds(1, 100_000_000_000, 2).expect("static histogram bounds are valid")
}

impl Default for OpStats {
    fn default() -> Self {
        Self::new()
    }
}

impl OpStats {
    /// Empty histograms.
    pub fn new() -> Self {
        OpStats {
            hist: std::array::from_fn(|_| new_hist()),
            errors: [0; OPS],
        }
    }

    /// Record one request's latency; `ok` is false if it completed with an
    /// error.
    pub fn record(&mut self, op: IoOp, latency_ns: u64, ok: bool) {
        let i = op_index(op);
        self.hist[i].saturating_record(latency_ns.max(1));
        if !ok {
            self.errors[i] += 1;
        }
    }

    /// Add another set of histograms into this one.
    pub fn merge(&mut self, other: &OpStats) {
        for i in 0..OPS {
            // Same bounds on both sides, so adding cannot fail.
            let _ = self.hist[i].add(&other.hist[i]);
            self.errors[i] += other.errors[i];
        }
    }

    /// Requests recorded, all operations together.
    pub fn total(&self) -> u64 {
        self.hist.iter().map(|h| h.len()).sum()
    }

    /// Summary per operation (operations never seen are left out).
    pub fn report(&self) -> StatsReport {
        let mut ops = BTreeMap::new();
        for op in IoOp::ALL {
            let h = &self.hist[op_index(op)];
            if h.is_empty() {
                continue;
            }
            ops.insert(
                op.name().to_string(),
                OpSummary {
                    count: h.len(),
                    errors: self.errors[op_index(op)],
                    mean_ns: h.mean() as u64,
                    p50_ns: h.value_at_quantile(0.50),
                    p90_ns: h.value_at_quantile(0.90),
                    p99_ns: h.value_at_quantile(0.99),
                    p999_ns: h.value_at_quantile(0.999),
                    max_ns: h.max(),
                },
            );
        }
        StatsReport { ops }
    }
}

/// Latency summary of one operation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpSummary {
    /// Requests completed.
    pub count: u64,
    /// Of which failed.
    pub errors: u64,
    /// Mean latency, ns.
    pub mean_ns: u64,
    /// Median latency, ns.
    pub p50_ns: u64,
    /// 90th percentile, ns.
    pub p90_ns: u64,
    /// 99th percentile, ns.
    pub p99_ns: u64,
    /// 99.9th percentile, ns.
    pub p999_ns: u64,
    /// Largest latency, ns.
    pub max_ns: u64,
}

/// What `ptsd ublk stats N` prints: a summary per operation name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatsReport {
    /// The summary of each operation ("read", "write", "flush"...).
    pub ops: BTreeMap<String, OpSummary>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_operation_has_its_own_histogram() {
        // `op_index` relies on `IoOp::ALL` listing the variants in
        // declaration order.
        let mut s = OpStats::new();
        for (i, op) in IoOp::ALL.into_iter().enumerate() {
            assert_eq!(op_index(op), i);
            s.record(op, 1_000 * (i as u64 + 1), true);
        }
        let r = s.report();
        assert_eq!(r.ops.len(), IoOp::ALL.len());
        assert_eq!(r.ops["report_zones"].count, 1);
        assert_eq!(r.ops["zone_append"].count, 1);
    }
}
