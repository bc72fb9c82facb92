//! The target's software overhead, measured through the fake queue (the
//! same `serve` path the kernel drives):
//!
//! - `inproc/*`: one core, fake queue → scheduler → device → completion,
//!   batches of 64 × 4 KiB reads, timed in thread CPU time; ns per request
//!   = overhead per IO.
//! - `handoff/*`: 4 queue threads + the engine thread, queue swapping vs a
//!   lock per request.
//! - `qd1/*`: one request at a time round trip, polling vs sleeping.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ptsd_blockdev::MemDevice;
use ptsd_ublk::backend::{Backend, DirectBackend};
use ptsd_ublk::engine::{serve, serve_once, Clock, Engine, EngineConfig, QueueSide};
use ptsd_ublk::fake::fake_queue;
use ptsd_ublk::ftl::Timing;
use ptsd_ublk::handoff::LockMode;
use ptsd_ublk::request::{op, RawDesc};
use ptsd_ublk::sched::SchedKind;
use ptsd_ublk::spec::{BackendSpec, DeviceSpec, FtlScheme, FtlStore};
use std::time::{Duration, Instant};

const BS: u32 = 4096;
const BLOCKS: u64 = 4096;
const BATCH: u16 = 64;

fn reads(batch: u16, round: u64) -> Vec<(u16, RawDesc)> {
    (0..batch)
        .map(|t| {
            let block = (round * 7919 + u64::from(t) * 131) % BLOCKS;
            (t, RawDesc::new(op::READ, block * 8, 8))
        })
        .collect()
}

/// CPU time of the calling thread.
fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for clock_gettime to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn backends() -> Vec<(String, Box<dyn Backend>)> {
    let mut v: Vec<(String, Box<dyn Backend>)> = Vec::new();
    for sched in [SchedKind::Fifo, SchedKind::ReadPriority] {
        v.push((
            format!("mem-{sched:?}"),
            Box::new(DirectBackend::new(
                MemDevice::new(BS, BLOCKS).unwrap(),
                sched,
            )),
        ));
    }
    for (name, store) in [
        ("ftl-ptsd-nostore", FtlStore::None),
        ("ftl-ptsd-mem", FtlStore::Mem),
    ] {
        let spec = DeviceSpec {
            backend: BackendSpec::Ftl {
                scheme: FtlScheme::Ptsd,
                bytes: BLOCKS * u64::from(BS),
                store,
                timing: Timing::Off,
            },
            sched: None,
            lock_mode: LockMode::Swap,
            poll: true,
        };
        v.push((name.to_string(), spec.build_backend().unwrap()));
    }
    v
}

fn inproc(c: &mut Criterion) {
    let mut g = c.benchmark_group("inproc");
    g.throughput(Throughput::Elements(u64::from(BATCH)));
    for (name, backend) in backends() {
        let config = EngineConfig {
            queues: 1,
            depth: BATCH,
            max_io_bytes: BS,
            lock_mode: LockMode::Swap,
            poll: true,
        };
        let (mut engine, shared) = Engine::new(backend, config, Clock::wall());
        let (mut queue, handle) = fake_queue(BATCH, BS as usize, false);
        let mut side = QueueSide::new(shared, 0);
        let mut scratch = Vec::new();
        let mut done = Vec::new();
        // Write every block once so reads go through the mapping to (modelled)
        // NAND rather than short-cutting on unmapped pages.
        let page = vec![0x5au8; BS as usize];
        for first in (0..BLOCKS).step_by(BATCH as usize) {
            for t in 0..BATCH {
                let block = first + u64::from(t);
                handle
                    .submit(t, RawDesc::new(op::WRITE, block * 8, 8), Some(&page))
                    .unwrap();
            }
            serve_once(&mut queue, &mut side, &mut scratch).unwrap();
            engine.step();
            serve_once(&mut queue, &mut side, &mut scratch).unwrap();
            done.clear();
            handle.drain_completions(&mut done);
            assert!(done.iter().all(|&(_, r)| r == BS as i32));
        }
        let batches: Vec<_> = (0..16).map(|r| reads(BATCH, r)).collect();
        let mut round = 0usize;
        // Timed in this thread's CPU time: the figure is per core, and the
        // machine is shared.
        g.bench_function(BenchmarkId::new("read4k-batch64", &name), |b| {
            b.iter_custom(|iters| {
                let start = thread_cpu_time();
                for _ in 0..iters {
                    handle.submit_many(&batches[round % batches.len()]).unwrap();
                    round += 1;
                    serve_once(&mut queue, &mut side, &mut scratch).unwrap();
                    engine.step();
                    serve_once(&mut queue, &mut side, &mut scratch).unwrap();
                    done.clear();
                    handle.drain_completions(&mut done);
                    assert_eq!(done.len(), BATCH as usize);
                }
                thread_cpu_time() - start
            })
        });
    }
    g.finish();
}

/// `queues` threads each keep `depth` 4 KiB reads in flight for `total`
/// requests; returns the wall time.
fn threaded_run(lock_mode: LockMode, poll: bool, queues: u16, depth: u16, total: u64) -> Duration {
    let backend = DirectBackend::new(MemDevice::new(BS, BLOCKS).unwrap(), SchedKind::ReadPriority);
    let config = EngineConfig {
        queues,
        depth,
        max_io_bytes: BS,
        lock_mode,
        poll,
    };
    let (engine, shared) = Engine::new(Box::new(backend), config, Clock::wall());
    let worker = engine.spawn().unwrap();
    let per_queue = total / u64::from(queues);
    let start = Instant::now();
    let mut threads = Vec::new();
    for q in 0..queues {
        let (mut queue, handle) = fake_queue(depth, BS as usize, true);
        shared.set_waker(q, queue.waker());
        let s = shared.clone();
        let server = std::thread::spawn(move || {
            let mut side = QueueSide::new(s, q);
            serve(&mut queue, &mut side);
        });
        let client = std::thread::spawn(move || {
            let mut done = 0u64;
            let mut round = 0u64;
            let mut comps = Vec::new();
            while done < per_queue {
                let batch = reads(depth, round);
                round += 1;
                handle.submit_many(&batch).unwrap();
                let mut got = 0;
                while got < depth as usize {
                    comps.clear();
                    if poll {
                        handle.drain_completions(&mut comps);
                        if comps.is_empty() {
                            std::hint::spin_loop();
                        }
                    } else {
                        comps = handle.wait_completions(1, Duration::from_secs(10));
                    }
                    got += comps.len();
                }
                done += u64::from(depth);
            }
            handle.close();
        });
        threads.push((server, client));
    }
    for (s, c) in threads {
        c.join().unwrap();
        s.join().unwrap();
    }
    let elapsed = start.elapsed();
    shared.stop();
    worker.join().unwrap();
    elapsed
}

fn handoff(c: &mut Criterion) {
    let mut g = c.benchmark_group("handoff");
    g.sample_size(10);
    let per_iter = 4 * 16 * 64u64;
    g.throughput(Throughput::Elements(per_iter));
    for mode in [LockMode::Swap, LockMode::PerRequest] {
        g.bench_function(BenchmarkId::new("4queues-qd16", format!("{mode:?}")), |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| threaded_run(mode, true, 4, 16, per_iter))
                    .sum()
            })
        });
    }
    g.finish();
}

fn qd1(c: &mut Criterion) {
    let mut g = c.benchmark_group("qd1");
    g.sample_size(10);
    let n = 2000u64;
    g.throughput(Throughput::Elements(n));
    for poll in [true, false] {
        let name = if poll { "poll" } else { "sleep" };
        g.bench_function(BenchmarkId::new("read4k-roundtrip", name), |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| threaded_run(LockMode::Swap, poll, 1, 1, n))
                    .sum()
            })
        });
    }
    g.finish();
}

criterion_group!(benches, inproc, handoff, qd1);
criterion_main!(benches);
