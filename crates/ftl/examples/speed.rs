//! Quick engine speed check (the criterion bench is `benches/engine.rs`):
//! `cargo run --release -p ptsd-ftl --example speed -- [variant] [requests]`

use std::time::Instant;

use ptsd_ftl::{FtlConfig, Op, Payload, Request, Ssd, Variant};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

fn run(ssd: &mut Ssd, rng: &mut SmallRng, requests: u64, read_pct: u32, sequential: bool) {
    let pages = ssd.logical_pages();
    let mut next = 0u64;
    let mk = |rng: &mut SmallRng, id: u64| Request {
        id,
        op: if rng.gen_range(0..100) < read_pct {
            Op::Read
        } else {
            Op::Write
        },
        lpn: if sequential {
            id % pages
        } else {
            rng.gen_range(0..pages)
        },
        pages: 1,
    };
    let now = ssd.next_event().unwrap_or(0).max(ssd.idle_at());
    for _ in 0..128.min(requests) {
        let r = mk(rng, next);
        next += 1;
        ssd.submit(now, r, Payload::None).unwrap();
    }
    let mut done = Vec::with_capacity(256);
    let mut completed = 0;
    while completed < requests {
        let Some(t) = ssd.next_event() else { break };
        ssd.advance(t, &mut done);
        for _ in done.drain(..) {
            completed += 1;
            if next < requests {
                let r = mk(rng, next);
                next += 1;
                ssd.submit(t, r, Payload::None).unwrap();
            }
        }
    }
}

/// CPU time this thread has run (ns), from /proc: wall time on a loaded
/// machine says little about the engine's speed per core.
fn cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let variant: Variant = args
        .get(1)
        .map(|s| s.parse().unwrap())
        .unwrap_or(Variant::WriteOpt);
    let n: u64 = args.get(2).map(|s| s.parse().unwrap()).unwrap_or(2_000_000);
    let mut ssd = Ssd::new(FtlConfig::paper(variant, 16 << 30)).unwrap();
    let mut rng = SmallRng::seed_from_u64(1);
    let pages = ssd.logical_pages();
    let (t, c) = (Instant::now(), cpu_ns());
    run(&mut ssd, &mut rng, pages, 0, true);
    println!(
        "fill {pages}: {:.2} M req/s wall, {:.2} M req/s per CPU-second",
        pages as f64 / t.elapsed().as_secs_f64() / 1e6,
        pages as f64 / (cpu_ns() - c) as f64 * 1e3
    );
    ssd.reset_stats();
    let only = args.get(3).cloned();
    for (name, pct) in [("randwrite", 0), ("randread", 100), ("mixed70r", 70)] {
        if only.as_deref().is_some_and(|o| o != name) {
            continue;
        }
        let (t, c) = (Instant::now(), cpu_ns());
        run(&mut ssd, &mut rng, n, pct, false);
        let cpu = (cpu_ns() - c) as f64;
        let s = ssd.stats();
        println!(
            "{name}: {:.2} M req/s wall, {:.2} M req/s per CPU-second (waf {:.2}, gc copies {}, map reads {}, map programs {})",
            n as f64 / t.elapsed().as_secs_f64() / 1e6,
            n as f64 / cpu * 1e3,
            s.waf,
            s.gc_data_copies,
            s.map_reads.total(),
            s.map_programs.total()
        );
        ssd.reset_stats();
    }
}
