//! A small deterministic driver for instruction counts (callgrind): the
//! engine bench's preconditioning (fill + half a capacity of random
//! writes), then `n` requests of one workload in `measured`, the only
//! function to collect:
//!
//! `valgrind --tool=callgrind --collect-atstart=no --toggle-collect='*measured*' \
//!   target/release/examples/cgdrive <variant> [n] [read_pct]` (`GIB=` sets the size, default 16)

use ptsd_ftl::{Ssd, Variant};
use rand::rngs::SmallRng;
use rand::SeedableRng;

#[path = "../benches/common/mod.rs"]
mod common;

#[inline(never)]
fn measured(ssd: &mut Ssd, rng: &mut SmallRng, n: u64, read_pct: u32) {
    common::bench_loop(ssd, rng, 128, n, read_pct, false);
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let variant: Variant = args.get(1).map_or(Variant::Part, |s| s.parse().unwrap());
    let n: u64 = args.get(2).map_or(100_000, |s| s.parse().unwrap());
    let read_pct: u32 = args.get(3).map_or(0, |s| s.parse().unwrap());
    let gib: u64 = std::env::var("GIB").map_or(16, |s| s.parse().unwrap());
    let mut ssd = common::preconditioned(variant, gib << 30, 128);
    let mut rng = SmallRng::seed_from_u64(2);
    ssd.refresh_stats();
    ssd.reset_stats();
    measured(&mut ssd, &mut rng, n, read_pct);
    ssd.refresh_stats();
    println!("{}", serde_json::to_string(ssd.stats()).unwrap());
}
