//! Quick engine speed check (the criterion bench is `benches/engine.rs`):
//! `cargo run --release -p ptsd-ftl --example speed -- [variant] [requests]`

use std::time::Instant;

use ptsd_ftl::{FtlConfig, Ssd, Variant};
use rand::rngs::SmallRng;
use rand::SeedableRng;

#[path = "../benches/common/mod.rs"]
mod common;

/// Closed loop at queue depth 128: `read_pct` % reads, sequential LPNs
/// (the request id, wrapping) or uniform random ones.
fn run(ssd: &mut Ssd, rng: &mut SmallRng, requests: u64, read_pct: u32, sequential: bool) {
    let pages = ssd.logical_pages();
    let make = |id: u64| common::one_page(rng, id, read_pct, pages, sequential.then(|| id % pages));
    common::closed_loop(ssd, 128, requests, make, |_| {});
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
