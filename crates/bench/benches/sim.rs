//! Simulated requests per second of wall time: the PTSD engine under the
//! closed-loop driver at queue depth 128, and the driver alone over a
//! trivial device (to tell driver cost from engine cost).
//!
//! `cargo bench -p ptsd-bench --bench sim`; the figure is criterion's
//! "thrpt" in elements (requests) per second on one core.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use ptsd_bench::paper_ftl::PaperOptions;
use ptsd_ftl::sim::testing::FixedLatency;
use ptsd_ftl::sim::Simulator;
use ptsd_ftl::workload::{precondition, WorkloadSpec};
use ptsd_ftl::{Ssd, Variant};

const REQUESTS: u64 = 200_000;
const QD: u32 = 128;

fn ptsd_engine(c: &mut Criterion) {
    // 1 GiB, the paper's board otherwise (scale 1/16).
    let opts = PaperOptions {
        scale: 1.0 / 16.0,
        ..PaperOptions::default()
    };
    let pages = opts.logical_bytes() / 4096;
    let mut group = c.benchmark_group("sim");
    group.sample_size(10);
    group.throughput(Throughput::Elements(REQUESTS));
    for variant in [Variant::PartSched, Variant::WriteOpt, Variant::Dftl] {
        let ssd = Ssd::new(opts.config(variant)).expect("paper config is valid");
        let mut sim = Simulator::new(ssd);
        for spec in precondition(pages, 1.0, 1) {
            sim.run_closed("precondition", &mut spec.build().unwrap(), QD)
                .unwrap();
        }
        let mut seed = 10;
        for (kind, read_percent) in [("randread", 100), ("mixed70", 70)] {
            group.bench_function(format!("{}/{kind}/qd{QD}", variant.name()), |b| {
                b.iter(|| {
                    seed += 1;
                    let mut w = WorkloadSpec::mixed(pages, read_percent, REQUESTS, seed)
                        .build()
                        .unwrap();
                    sim.run_closed(kind, &mut w, QD).unwrap()
                })
            });
        }
    }
    let mut sim = Simulator::new(FixedLatency::new(32, 120_000, 480_000));
    let mut seed = 0;
    group.bench_function("driver-only/mixed70/qd128", |b| {
        b.iter(|| {
            seed += 1;
            let mut w = WorkloadSpec::mixed(pages, 70, REQUESTS, seed)
                .build()
                .unwrap();
            sim.run_closed("mixed70", &mut w, QD).unwrap()
        })
    });
    group.finish();
}

criterion_group!(benches, ptsd_engine);
criterion_main!(benches);
