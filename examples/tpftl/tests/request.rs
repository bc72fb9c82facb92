//! Request-level prefetching: a multi-page read misses (costs a
//! translation-page read) once per TP it touches, where selective
//! prefetching alone needs a second miss to see the run.

use std::sync::Arc;

use ptsd_example_tpftl::Tpftl;
use ptsd_ftl::{FtlConfig, Op, Payload, Request, Ssd};

/// Mapping-cache misses on reads and the scheme's `request_prefetched`
/// after 64 reads of 8 pages, each in a different TP, one at a time (on a
/// fresh device: a miss on a TP never written costs no flash read, so the
/// misses count the TP reads a used device would do).
fn eight_page_reads(scheme: Tpftl) -> (u64, u64) {
    let mut ssd = Ssd::new(FtlConfig::paper_with(Arc::new(scheme), 256 << 20)).unwrap();
    let per_tp = 1024;
    let mut done = Vec::new();
    let mut t = 0;
    for id in 0..64 {
        // One start in each TP, never across a TP boundary.
        let lpn = id * per_tp + 100 + id;
        let req = Request {
            id,
            op: Op::Read,
            lpn,
            pages: 8,
        };
        ssd.submit(t, req, Payload::None).unwrap();
        while let Some(next) = ssd.next_event() {
            t = next;
            ssd.advance(t, &mut done);
        }
    }
    assert_eq!(done.len(), 64);
    ssd.refresh_stats();
    let s = ssd.stats();
    (
        s.cmt_read_misses,
        s.scheme.get("request_prefetched").copied().unwrap_or(0),
    )
}

#[test]
fn a_multi_page_read_costs_one_tp_read() {
    let (with, prefetched) = eight_page_reads(Tpftl::default());
    assert_eq!(with, 64, "one miss per request");
    assert_eq!(prefetched, 64 * 7);
    let (without, none) = eight_page_reads(Tpftl {
        request_prefetch: false,
        ..Tpftl::default()
    });
    // The second page misses too; then selective prefetching takes over.
    assert_eq!(without, 128);
    assert_eq!(none, 0);
}
