//! 4 KiB random writes: one `pwrite` per block vs io_uring batches.
//!
//! `cargo bench -p ptsd-blockdev --bench batch`. Each iteration writes
//! `WRITES` random blocks of a 64 MiB file: on /tmp with O_DIRECT (the
//! disk) and buffered (the page cache), and on /dev/shm (tmpfs, always
//! buffered). Throughput is in blocks per second. The buffered runs force
//! io_uring on (`io_uring_buffered`) to show why it is off by default there.

use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ptsd_blockdev::{BlockDevice, FileDevice, FileDeviceOptions};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const BS: usize = 4096;
const BLOCKS: u64 = 16 * 1024; // 64 MiB
const WRITES: usize = 1024;

/// `WRITES` blocks of data in one allocation, each 4096-aligned so O_DIRECT
/// needs no bounce copy.
struct Data {
    bytes: Vec<u8>,
    start: usize,
}

impl Data {
    fn new() -> Self {
        let mut bytes = vec![0u8; (WRITES + 1) * BS];
        let start = bytes.as_ptr().align_offset(BS);
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = (i * 31 / 7) as u8;
        }
        Self { bytes, start }
    }
    fn block(&self, i: usize) -> &[u8] {
        &self.bytes[self.start + i * BS..self.start + (i + 1) * BS]
    }
}

fn bench_device(c: &mut Criterion, name: &str, dev: &FileDevice) {
    let data = Data::new();
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let targets: Vec<u64> = (0..WRITES).map(|_| rng.gen_range(0..BLOCKS)).collect();
    let extents: Vec<(u64, &[u8])> = targets
        .iter()
        .enumerate()
        .map(|(i, &b)| (b, data.block(i)))
        .collect();

    let mut group = c.benchmark_group(format!(
        "random_4k_writes/{name}{}",
        if dev.is_direct() {
            "_direct"
        } else {
            "_buffered"
        }
    ));
    group.throughput(Throughput::Elements(WRITES as u64));
    group.sample_size(20);
    group.warm_up_time(Duration::from_millis(500));
    group.measurement_time(Duration::from_secs(3));
    group.bench_function("pwrite", |b| {
        b.iter(|| {
            for &(block, buf) in &extents {
                dev.write(block, buf).unwrap();
            }
        })
    });
    for batch in [32usize, 128] {
        group.bench_with_input(
            BenchmarkId::new("io_uring_batch", batch),
            &batch,
            |b, &n| {
                b.iter(|| {
                    for chunk in extents.chunks(n) {
                        dev.write_batch(chunk).unwrap();
                    }
                })
            },
        );
    }
    group.finish();
}

fn batch(c: &mut Criterion) {
    for (name, dir, direct) in [
        ("tmp", "/tmp", true),
        ("tmp", "/tmp", false),
        ("shm", "/dev/shm", false),
    ] {
        let Ok(dir) = tempfile::tempdir_in(dir) else {
            eprintln!("skipping {name}: cannot make a directory there");
            continue;
        };
        let dev = FileDeviceOptions::new()
            .direct(direct)
            // Measure io_uring on buffered devices too, where it is off by
            // default.
            .io_uring_buffered(true)
            .ring_entries(128)
            .create(dir.path().join("bench.img"), BLOCKS)
            .unwrap();
        // Allocate every block so the runs measure writes, not allocation.
        let zeroes = Data::new();
        for b in (0..BLOCKS).step_by(WRITES) {
            let chunk: Vec<(u64, &[u8])> = (0..WRITES as u64)
                .map(|i| (b + i, zeroes.block(0)))
                .collect();
            dev.write_batch(&chunk).unwrap();
        }
        dev.flush().unwrap();
        assert!(
            dev.io_uring_active(),
            "io_uring unavailable: the batch figures would be pwrite"
        );
        bench_device(c, name, &dev);
    }
}

criterion_group!(benches, batch);
criterion_main!(benches);
