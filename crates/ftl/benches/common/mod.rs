//! The closed-loop driver the engine bench and the speed examples share
//! (`benches/engine.rs`, `examples/{speed,steady,digest}.rs` include it by
//! path): keep `qd` requests outstanding until `requests` have completed.

use ptsd_ftl::{Done, FtlConfig, Op, Payload, Request, Ssd, Variant};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Run a closed loop from the SSD's current time: `make(id)` builds
/// request `id` (ids 0, 1, ...), `on_done` sees every completion.
pub fn closed_loop(
    ssd: &mut Ssd,
    qd: u64,
    requests: u64,
    mut make: impl FnMut(u64) -> Request,
    mut on_done: impl FnMut(&Done),
) {
    let now = ssd.next_event().unwrap_or(0).max(ssd.idle_at());
    let mut next = 0u64;
    for _ in 0..qd.min(requests) {
        ssd.submit(now, make(next), Payload::None).unwrap();
        next += 1;
    }
    let mut done = Vec::with_capacity(256);
    let mut completed = 0;
    while completed < requests {
        let Some(t) = ssd.next_event() else { break };
        ssd.advance(t, &mut done);
        for d in done.drain(..) {
            on_done(&d);
            completed += 1;
            if next < requests {
                ssd.submit(t, make(next), Payload::None).unwrap();
                next += 1;
            }
        }
    }
}

/// One-page request `id`: a read with probability `read_pct` %, at a
/// uniformly random LPN of `pages`, or at `lpn` when given.
pub fn one_page(
    rng: &mut SmallRng,
    id: u64,
    read_pct: u32,
    pages: u64,
    lpn: Option<u64>,
) -> Request {
    let op = if rng.gen_range(0..100) < read_pct {
        Op::Read
    } else {
        Op::Write
    };
    Request {
        id,
        op,
        lpn: lpn.unwrap_or_else(|| rng.gen_range(0..pages)),
        pages: 1,
    }
}

/// The engine bench's workload: a closed loop at `qd` of one-page
/// requests, `read_pct` % reads, at sequential LPNs (1, 2, ..., wrapping)
/// or uniform random ones.
#[allow(dead_code)] // not every includer uses it
pub fn bench_loop(
    ssd: &mut Ssd,
    rng: &mut SmallRng,
    qd: u64,
    requests: u64,
    read_pct: u32,
    sequential: bool,
) {
    let pages = ssd.logical_pages();
    let mut seq_lpn = 0u64;
    let make = |id: u64| {
        let lpn = sequential.then(|| {
            seq_lpn = (seq_lpn + 1) % pages;
            seq_lpn
        });
        one_page(rng, id, read_pct, pages, lpn)
    };
    closed_loop(ssd, qd, requests, make, |_| {});
}

/// A `bytes`-byte SSD of `variant` in the engine bench's steady state: filled
/// once sequentially, then half a capacity of random overwrites (GC running),
/// at queue depth `qd`, seed 1.
#[allow(dead_code)] // not every includer uses it
pub fn preconditioned(variant: Variant, bytes: u64, qd: u64) -> Ssd {
    let mut ssd = Ssd::new(FtlConfig::paper(variant, bytes)).unwrap();
    let mut rng = SmallRng::seed_from_u64(1);
    let pages = ssd.logical_pages();
    bench_loop(&mut ssd, &mut rng, qd, pages, 0, true);
    bench_loop(&mut ssd, &mut rng, qd, pages / 2, 0, false);
    ssd
}
