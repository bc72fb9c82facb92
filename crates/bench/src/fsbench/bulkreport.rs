//! The bulk-data part of the report: rates over the rounds, and what each
//! unit of work cost the FUSE daemon (requests, context switches, syscalls).

use std::fmt::Write as _;

use serde::Serialize;

use super::bulk::BulkPart;
use super::devstat::ProcCost;
use super::report::{per_op, requests_line, spread_cell, Spread, SuiteReport};
use super::suite::TargetRun;

/// One part's cost per unit of work (per MiB for the sequential parts, per
/// read for the random one), summed over the rounds.
#[derive(Clone, Debug, Serialize)]
pub struct PartCost {
    /// The part.
    pub part: BulkPart,
    /// FUSE requests per unit, per opcode (FUSE targets with counts only).
    pub requests: Vec<(String, f64)>,
    /// Daemon context switches per unit (voluntary + involuntary).
    pub ctxt: Option<f64>,
    /// Daemon read- and write-class syscalls per unit.
    pub syscalls: Option<f64>,
}

/// The bulk figures of one target over the rounds.
#[derive(Clone, Debug, Default, Serialize)]
pub struct BulkSummary {
    /// Sequential write + fsync, MB/s.
    pub write_mb_per_sec: Option<Spread>,
    /// Cold sequential read, MB/s.
    pub read_mb_per_sec: Option<Spread>,
    /// Cold 4 KiB random reads/s.
    pub rand_iops: Option<Spread>,
    /// Random read p99, us (median over rounds).
    pub rand_p99_us: Option<Spread>,
    /// Per-part costs.
    pub costs: Vec<PartCost>,
}

pub(super) fn summarize(runs: &[&TargetRun]) -> BulkSummary {
    let b: Vec<_> = runs.iter().filter_map(|r| r.bulk.as_ref()).collect();
    let of = |f: &dyn Fn(&super::bulk::BulkResult) -> f64| {
        Spread::of(&b.iter().map(|x| f(&x.result)).collect::<Vec<_>>())
    };
    let mut costs = Vec::new();
    for part in [BulkPart::SeqWrite, BulkPart::SeqRead, BulkPart::RandRead] {
        let mut units = 0u64;
        let mut pairs = Vec::new();
        let mut daemon: Option<ProcCost> = None;
        for r in runs.iter().filter(|r| r.bulk.is_some()) {
            let res = &r.bulk.as_ref().expect("filtered").result;
            let u = match part {
                BulkPart::RandRead => res.rand_ops,
                _ => res.bytes >> 20,
            };
            for (_, c) in r.bulk_parts.iter().filter(|(p, _)| *p == part) {
                units += u;
                pairs.push((c.requests.as_slice(), u));
                if let Some(d) = c.daemon {
                    let t = daemon.get_or_insert_with(ProcCost::default);
                    t.voluntary_ctxt += d.voluntary_ctxt;
                    t.nonvoluntary_ctxt += d.nonvoluntary_ctxt;
                    t.syscr += d.syscr;
                    t.syscw += d.syscw;
                }
            }
        }
        if units == 0 {
            continue;
        }
        let per = |n: u64| n as f64 / units as f64;
        costs.push(PartCost {
            part,
            requests: per_op(&pairs),
            ctxt: daemon.map(|d| per(d.voluntary_ctxt + d.nonvoluntary_ctxt)),
            syscalls: daemon.map(|d| per(d.syscr + d.syscw)),
        });
    }
    BulkSummary {
        write_mb_per_sec: of(&|r| r.write_mb_per_sec),
        read_mb_per_sec: of(&|r| r.read_mb_per_sec),
        rand_iops: of(&|r| r.rand_iops),
        rand_p99_us: of(&|r| r.rand_read.p99_us),
        costs,
    }
}

pub(super) fn render(s: &mut String, report: &SuiteReport) {
    let c = &report.config.bulk;
    let _ = writeln!(
        s,
        "bulk: {} threads x {} MiB file, {} KiB I/Os, write+fsync then cold read, then cold 4 KiB random reads {:?}",
        c.threads,
        c.file_size >> 20,
        c.io_size >> 10,
        c.rand_bound
    );
    let _ = writeln!(
        s,
        "{:<16} {:<14} {:>22} {:>22} {:>22} {:>10}",
        "bulk", "class", "write+fsync MB/s", "cold read MB/s", "4k rand read/s", "p99 us"
    );
    for sm in &report.summary {
        let b = &sm.bulk;
        let _ = writeln!(
            s,
            "{:<16} {:<14} {:>22} {:>22} {:>22} {:>10}",
            sm.target.name,
            sm.target.durability.label(),
            spread_cell(b.write_mb_per_sec, 0),
            spread_cell(b.read_mb_per_sec, 0),
            spread_cell(b.rand_iops, 0),
            b.rand_p99_us
                .map_or("-".into(), |x| format!("{:.0}", x.median)),
        );
    }
    let costed: Vec<_> = report
        .summary
        .iter()
        .filter(|t| t.bulk.costs.iter().any(|c| c.ctxt.is_some()))
        .collect();
    if !costed.is_empty() {
        let _ = writeln!(
            s,
            "bulk cost in the FUSE daemon (all rounds; per MiB for seq parts, per read for random): context switches, read/write syscalls, FUSE requests"
        );
        for sm in costed {
            for pc in &sm.bulk.costs {
                let f = |x: Option<f64>| x.map_or("-".into(), |x| format!("{x:.2}"));
                let _ = writeln!(
                    s,
                    "  {:<16} {:<10} ctxt {:>8} syscalls {:>8}  requests {}",
                    sm.target.name,
                    match pc.part {
                        BulkPart::SeqWrite => "seq-write",
                        BulkPart::SeqRead => "seq-read",
                        BulkPart::RandRead => "rand-read",
                    },
                    f(pc.ctxt),
                    f(pc.syscalls),
                    requests_line(&pc.requests)
                );
            }
        }
    }
}
