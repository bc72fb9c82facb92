//! Engine speed: simulated 4 KiB requests per second *per core*, closed
//! loop at queue depth 128 over a 16 GiB logical device, timing on, no data.
//! Time is the benchmark thread's CPU time (from
//! `/proc/thread-self/schedstat`, wall time where that is missing), so a
//! busy machine does not count other processes' time against the engine.
//!
//! `cargo bench -p ptsd-ftl --bench engine`

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use ptsd_ftl::{Ssd, Variant};
use rand::rngs::SmallRng;
use rand::SeedableRng;

const LOGICAL: u64 = 16 << 30;

/// CPU time of this thread, if the kernel tells.
fn cpu_time() -> Option<Duration> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    Some(Duration::from_nanos(
        s.split_whitespace().next()?.parse().ok()?,
    ))
}
const QD: u64 = 128;

mod common;

/// The bench's closed loop at `QD` (sequential LPNs from 1).
fn run(ssd: &mut Ssd, rng: &mut SmallRng, requests: u64, read_pct: u32, sequential: bool) {
    common::bench_loop(ssd, rng, QD, requests, read_pct, sequential);
}

fn preconditioned(variant: Variant) -> Ssd {
    common::preconditioned(variant, LOGICAL, QD)
}

fn engine(c: &mut Criterion) {
    let mut g = c.benchmark_group("closed_loop_qd128_16GiB");
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(8));
    const N: u64 = 200_000;
    g.throughput(Throughput::Elements(N));
    for variant in [
        Variant::WriteOpt,
        Variant::PartSched,
        Variant::Part,
        Variant::Dftl,
        Variant::Page,
    ] {
        // Preconditioned on first use: a filtered run skips the others.
        let mut ssd = None;
        let mut rng = SmallRng::seed_from_u64(2);
        for (name, read_pct) in [("randwrite", 0), ("randread", 100), ("mixed70r", 70)] {
            g.bench_function(format!("{}/{name}", variant.name()), |b| {
                let ssd = ssd.get_or_insert_with(|| preconditioned(variant));
                b.iter_custom(|iters| {
                    let (wall, cpu) = (Instant::now(), cpu_time());
                    for _ in 0..iters {
                        run(ssd, &mut rng, N, read_pct, false);
                    }
                    match (cpu, cpu_time()) {
                        (Some(a), Some(b)) => b - a,
                        _ => wall.elapsed(),
                    }
                })
            });
        }
    }
    g.finish();
}

criterion_group!(benches, engine);
criterion_main!(benches);
