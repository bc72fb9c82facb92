//! Criterion benches: 4 KiB stage, stage + commit, and two-thread
//! stage + commit throughput, partitioned vs the single-lock and short-lock
//! baselines, with the region in a /dev/shm file (tmpfs mode; falls back to
//! a temp dir).

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ptsd_blockdev::{BlockDevice, MemDevice};
use ptsd_nvjournal::{Journal, JournalConfig, JournalKind, PmemRegion};

const BS: usize = 4096;
const DEVICE_BLOCKS: u64 = 4096;

fn journal(kind: JournalKind, name: &str) -> (Arc<Journal>, std::path::PathBuf) {
    let dir = if std::path::Path::new("/dev/shm").is_dir() {
        std::path::PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    let path = dir.join(format!("ptsd-criterion-{name}-{}", std::process::id()));
    let region = PmemRegion::open_file(&path, 128 << 20).expect("map region");
    let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(BS as u32, DEVICE_BLOCKS).unwrap());
    let cfg = match kind {
        JournalKind::Partitioned => JournalConfig::partitioned(4),
        JournalKind::SingleLock => JournalConfig::single_lock(),
        JournalKind::ShortLock => JournalConfig::short_lock(),
    };
    (
        Journal::create(region, dev, cfg).expect("create journal"),
        path,
    )
}

fn kinds() -> [(JournalKind, &'static str); 3] {
    [
        (JournalKind::Partitioned, "partitioned4"),
        (JournalKind::SingleLock, "single-lock"),
        (JournalKind::ShortLock, "short-lock"),
    ]
}

fn stage(c: &mut Criterion) {
    let mut g = c.benchmark_group("stage_4k");
    g.throughput(Throughput::Bytes(BS as u64));
    for (kind, name) in kinds() {
        let (j, path) = journal(kind, name);
        let data = vec![5u8; BS];
        let mut block = 0u64;
        g.bench_function(BenchmarkId::from_parameter(name), |b| {
            b.iter(|| {
                let mut tx = j.begin();
                block = (block + 7) % DEVICE_BLOCKS;
                tx.write(block, &data).unwrap();
                tx.finish().unwrap();
            })
        });
        j.close().unwrap();
        let _ = std::fs::remove_file(path);
    }
    g.finish();
}

fn stage_commit(c: &mut Criterion) {
    let mut g = c.benchmark_group("stage4_commit");
    g.throughput(Throughput::Bytes(4 * BS as u64));
    for (kind, name) in kinds() {
        let (j, path) = journal(kind, name);
        let data = vec![6u8; BS];
        let mut block = 0u64;
        g.bench_function(BenchmarkId::from_parameter(name), |b| {
            b.iter(|| {
                let mut tx = j.begin();
                for _ in 0..4 {
                    block = (block + 7) % DEVICE_BLOCKS;
                    tx.write(block, &data).unwrap();
                }
                tx.finish().unwrap();
                j.commit().unwrap();
            })
        });
        j.close().unwrap();
        let _ = std::fs::remove_file(path);
    }
    g.finish();
}

fn two_threads(c: &mut Criterion) {
    let mut g = c.benchmark_group("stage4_commit_2threads");
    g.throughput(Throughput::Bytes(2 * 4 * BS as u64));
    g.measurement_time(Duration::from_secs(3));
    for (kind, name) in kinds() {
        let (j, path) = journal(kind, name);
        g.bench_function(BenchmarkId::from_parameter(name), |b| {
            b.iter_custom(|iters| {
                let start = Instant::now();
                std::thread::scope(|s| {
                    for t in 0..2u64 {
                        let j = &j;
                        s.spawn(move || {
                            let data = vec![t as u8; BS];
                            let mut block = t;
                            for _ in 0..iters {
                                let mut tx = j.begin();
                                for _ in 0..4 {
                                    block = (block + 14) % DEVICE_BLOCKS;
                                    tx.write(block, &data).unwrap();
                                }
                                tx.finish().unwrap();
                                j.commit().unwrap();
                            }
                        });
                    }
                });
                start.elapsed()
            })
        });
        j.close().unwrap();
        let _ = std::fs::remove_file(path);
    }
    g.finish();
}

criterion_group!(benches, stage, stage_commit, two_threads);
criterion_main!(benches);
