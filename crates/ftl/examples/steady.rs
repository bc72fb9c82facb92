//! The criterion bench's workload (`benches/engine.rs`) without criterion,
//! for quick before/after comparisons: precondition (fill + half a capacity
//! of random writes), then `reps` rounds of 200 000 requests of each
//! workload, printing each workload's median and range of simulated
//! requests per CPU-second over the rounds.
//!
//! `cargo run --release -p ptsd-ftl --example steady -- <variant> [reps] [workload]`

use ptsd_ftl::{Ssd, Variant};
use rand::rngs::SmallRng;
use rand::SeedableRng;

const QD: u64 = 128;
const N: u64 = 200_000;

/// CPU time this thread has run (ns), from /proc.
fn cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

#[path = "../benches/common/mod.rs"]
mod common;

/// The bench's closed loop at `QD` (sequential LPNs from 1).
fn run(ssd: &mut Ssd, rng: &mut SmallRng, requests: u64, read_pct: u32, sequential: bool) {
    common::bench_loop(ssd, rng, QD, requests, read_pct, sequential);
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let variant: Variant = args.get(1).map_or(Variant::Dftl, |s| s.parse().unwrap());
    let reps: usize = args.get(2).map_or(10, |s| s.parse().unwrap());
    let only = args.get(3).cloned();
    // Logical GiB (default 16, as in the bench): `GIB=1` shows what is
    // left when the arrays fit in cache.
    let gib: u64 = std::env::var("GIB").map_or(16, |s| s.parse().unwrap());
    let mut ssd = common::preconditioned(variant, gib << 30, QD);
    let mut rng = SmallRng::seed_from_u64(2);
    let mut out = format!("{:<10}", variant.name());
    for (name, pct) in [("randwrite", 0), ("randread", 100), ("mixed70r", 70)] {
        if only.as_deref().is_some_and(|o| o != name) {
            continue;
        }
        let mut rates: Vec<f64> = (0..reps)
            .map(|_| {
                let c = cpu_ns();
                run(&mut ssd, &mut rng, N, pct, false);
                N as f64 / (cpu_ns() - c) as f64 * 1e3
            })
            .collect();
        rates.sort_by(f64::total_cmp);
        out += &format!(
            "  {name} {:.2} M ({:.2}-{:.2})",
            rates[reps / 2],
            rates[0],
            rates[reps - 1]
        );
    }
    println!("{out}");
}
