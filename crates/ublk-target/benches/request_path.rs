//! The target's software overhead, measured through the fake queue (the
//! same `serve` path the kernel drives):
//!
//! - `inproc/*`: one core, fake queue → scheduler → device → completion,
//!   batches of 64 × 4 KiB reads (or writes), timed in thread CPU time; ns
//!   per request = overhead per IO.
//! - `handoff/*`: 4 queue threads + the engine thread, queue swapping vs a
//!   lock per request.
//! - `qd1/*`: one request at a time round trip, polling vs sleeping.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ptsd_blockdev::MemDevice;
use ptsd_ftl::Ssd;
use ptsd_ublk::backend::{Backend, DirectBackend};
use ptsd_ublk::engine::{serve, serve_once, Clock, Engine, EngineConfig, Incoming, QueueSide};
use ptsd_ublk::fake::{fake_queue, FakeHandle, FakeQueue};
use ptsd_ublk::ftl::Timing;
use ptsd_ublk::handoff::LockMode;
use ptsd_ublk::request::{op, RawDesc};
use ptsd_ublk::sched::SchedulerKind;
use ptsd_ublk::spec::{BackendSpec, DeviceSpec, FtlScheme, FtlStore, Opened};
use std::time::{Duration, Instant};

const BS: u32 = 4096;
const BLOCKS: u64 = 4096;
const BATCH: u16 = 64;

/// A batch of 4 KiB `op` requests spread over the device: tag `t` of round
/// `r` goes to block `(r * round_step + t * tag_step) % BLOCKS`.
fn spread(op: u8, round_step: u64, tag_step: u64, batch: u16, round: u64) -> Vec<(u16, RawDesc)> {
    (0..batch)
        .map(|t| {
            let block = (round * round_step + u64::from(t) * tag_step) % BLOCKS;
            (t, RawDesc::new(op, block * 8, 8))
        })
        .collect()
}

fn reads(batch: u16, round: u64) -> Vec<(u16, RawDesc)> {
    spread(op::READ, 7919, 131, batch, round)
}

fn writes(batch: u16, round: u64) -> Vec<(u16, RawDesc)> {
    spread(op::WRITE, 6007, 257, batch, round)
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
    for sched in [SchedulerKind::Fifo, SchedulerKind::ReadPriority] {
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
        let ssd = Ssd::new(spec.ftl_config().unwrap()).unwrap();
        let opened = Some(Opened::Ssd(Box::new(ssd)));
        v.push((name.to_string(), spec.build_backend(opened).unwrap()));
    }
    v
}

/// One queue and the engine on one thread: the in-process request path.
struct InProc {
    engine: Engine,
    queue: FakeQueue,
    handle: FakeHandle,
    side: QueueSide,
    incoming: Vec<Incoming>,
    done: Vec<(u16, i32)>,
}

impl InProc {
    /// Submit `batch`, serve it, run the engine, complete it.
    fn round_trip(&mut self, batch: &[(u16, RawDesc)]) -> &[(u16, i32)] {
        self.handle.submit_many(batch).unwrap();
        serve_once(&mut self.queue, &mut self.side, &mut self.incoming).unwrap();
        self.engine.step();
        serve_once(&mut self.queue, &mut self.side, &mut self.incoming).unwrap();
        self.done.clear();
        self.handle.drain_completions(&mut self.done);
        &self.done
    }
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
        let (engine, shared) = Engine::new(backend, config, Clock::wall());
        let (queue, handle) = fake_queue(BATCH, BS as usize, false);
        let mut p = InProc {
            engine,
            queue,
            handle,
            side: QueueSide::new(shared, 0),
            incoming: Vec::new(),
            done: Vec::new(),
        };
        // Write every block once so reads go through the mapping to (modelled)
        // NAND rather than short-cutting on unmapped pages.
        let page = vec![0x5au8; BS as usize];
        for first in (0..BLOCKS).step_by(BATCH as usize) {
            for t in 0..BATCH {
                let block = first + u64::from(t);
                p.handle
                    .submit(t, RawDesc::new(op::WRITE, block * 8, 8), Some(&page))
                    .unwrap();
            }
            assert!(p.round_trip(&[]).iter().all(|&(_, r)| r == BS as i32));
        }
        // Reads, then writes (random blocks, every write overwrites: for
        // the SSD this includes its buffer flushes and GC copies). The
        // writes' tag buffers still hold earlier data: the client's own
        // copy is not the target's cost. Timed in this thread's CPU time:
        // the figure is per core, and the machine is shared.
        let mut round = 0usize;
        for (kind, make) in [
            (
                "read4k-batch64",
                reads as fn(u16, u64) -> Vec<(u16, RawDesc)>,
            ),
            ("write4k-batch64", writes),
        ] {
            let batches: Vec<_> = (0..16).map(|r| make(BATCH, r)).collect();
            g.bench_function(BenchmarkId::new(kind, &name), |b| {
                b.iter_custom(|iters| {
                    let start = thread_cpu_time();
                    for _ in 0..iters {
                        let done = p.round_trip(&batches[round % batches.len()]);
                        assert_eq!(done.len(), BATCH as usize);
                        round += 1;
                    }
                    thread_cpu_time() - start
                })
            });
        }
    }
    g.finish();
}

/// What one threaded run cost.
struct RunCost {
    wall: Duration,
    /// CPU time of the whole process (every thread) during the run.
    cpu: Duration,
    /// Hand-off lock acquisitions during the run.
    locks: u64,
}

/// `queues` queue threads, each fed by a client thread that keeps `depth`
/// 4 KiB reads in flight, `total` requests in all. The clients sleep until
/// their completions arrive, as the block layer does: only the target's
/// threads poll (with `poll`).
fn threaded_run(lock_mode: LockMode, poll: bool, queues: u16, depth: u16, total: u64) -> RunCost {
    let backend = DirectBackend::new(
        MemDevice::new(BS, BLOCKS).unwrap(),
        SchedulerKind::ReadPriority,
    );
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
    let (start, cpu0, locks0) = (Instant::now(), process_cpu_time(), shared.lock_count());
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
            while done < per_queue {
                let batch = reads(depth, round);
                round += 1;
                handle.submit_many(&batch).unwrap();
                let mut got = 0;
                while got < depth as usize {
                    got += handle
                        .wait_completions(depth as usize - got, Duration::from_secs(10))
                        .len();
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
    let cost = RunCost {
        wall: start.elapsed(),
        cpu: process_cpu_time() - cpu0,
        locks: shared.lock_count() - locks0,
    };
    shared.stop();
    worker.join().unwrap();
    cost
}

/// CPU time of the whole process.
fn process_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for clock_gettime to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Queue swapping vs a lock per request: 4 queues at QD 16, no polling (on
/// a shared 2-core machine spinning threads would measure the scheduler).
/// Timed in process CPU time (every thread's), so the figure is the CPU
/// the hand-off costs, whatever else runs on the machine.
fn handoff(c: &mut Criterion) {
    let mut g = c.benchmark_group("handoff");
    g.sample_size(10);
    let per_iter = 4 * 16 * 64u64;
    g.throughput(Throughput::Elements(per_iter));
    for mode in [LockMode::Swap, LockMode::PerRequest] {
        let mut locks = (0u64, 0u64);
        g.bench_function(
            BenchmarkId::new("4queues-qd16-cpu", format!("{mode:?}")),
            |b| {
                b.iter_custom(|iters| {
                    (0..iters)
                        .map(|_| {
                            let cost = threaded_run(mode, false, 4, 16, per_iter);
                            locks.0 += cost.locks;
                            locks.1 += per_iter;
                            cost.cpu
                        })
                        .sum()
                })
            },
        );
        if locks.1 > 0 {
            eprintln!(
                "handoff {mode:?}: {:.2} hand-off lock acquisitions per request",
                locks.0 as f64 / locks.1 as f64
            );
        }
    }
    let items = 64 * 1024u64;
    g.throughput(Throughput::Elements(items));
    for mode in [LockMode::Swap, LockMode::PerRequest] {
        g.bench_function(
            BenchmarkId::new("queue-only-4producers-cpu", format!("{mode:?}")),
            |b| b.iter_custom(|iters| (0..iters).map(|_| handoff_queue_only(mode, items)).sum()),
        );
    }
    g.finish();
}

/// The hand-off queue alone: 4 producer threads push batches of 16 items
/// (one ublk queue's fetch) while one consumer takes everything. Process
/// CPU time per item, contention included.
fn handoff_queue_only(mode: LockMode, total: u64) -> Duration {
    use ptsd_ublk::handoff::Handoff;
    use std::sync::Arc;
    let h = Arc::new(Handoff::new(mode));
    let producers = 4u64;
    let cpu0 = process_cpu_time();
    let threads: Vec<_> = (0..producers)
        .map(|p| {
            let h = h.clone();
            std::thread::spawn(move || {
                let mut batch = Vec::with_capacity(16);
                for i in (0..total / producers).step_by(16) {
                    batch.extend((i..i + 16).map(|x| x * producers + p));
                    h.push_batch(&mut batch);
                }
            })
        })
        .collect();
    let mut out = Vec::new();
    let mut taken = 0u64;
    while taken < total {
        out.clear();
        let n = h.take_all(&mut out) as u64;
        if n == 0 {
            std::thread::yield_now();
        }
        taken += n;
    }
    for t in threads {
        t.join().unwrap();
    }
    process_cpu_time() - cpu0
}

/// Round-trip latencies (ns, sorted) of `n` single 4 KiB reads, one
/// queue, the target's threads polling or sleeping, the client sleeping.
fn qd1_latencies(poll: bool, n: usize) -> Vec<u64> {
    let backend = DirectBackend::new(
        MemDevice::new(BS, BLOCKS).unwrap(),
        SchedulerKind::ReadPriority,
    );
    let config = EngineConfig {
        queues: 1,
        depth: 1,
        max_io_bytes: BS,
        lock_mode: LockMode::Swap,
        poll,
    };
    let (engine, shared) = Engine::new(Box::new(backend), config, Clock::wall());
    let worker = engine.spawn().unwrap();
    let (mut queue, handle) = fake_queue(1, BS as usize, true);
    shared.set_waker(0, queue.waker());
    let s = shared.clone();
    let server = std::thread::spawn(move || {
        let mut side = QueueSide::new(s, 0);
        serve(&mut queue, &mut side);
    });
    let mut lat = Vec::with_capacity(n);
    for i in 0..n as u64 {
        let t = Instant::now();
        handle
            .submit(0, RawDesc::new(op::READ, (i * 131 % BLOCKS) * 8, 8), None)
            .unwrap();
        while handle
            .wait_completions(1, Duration::from_secs(10))
            .is_empty()
        {}
        lat.push(t.elapsed().as_nanos() as u64);
    }
    handle.close();
    server.join().unwrap();
    shared.stop();
    worker.join().unwrap();
    lat.sort_unstable();
    lat
}

/// One request at a time (QD 1): round-trip latency, the target's threads
/// polling vs sleeping. Wall time, so it needs idle cores to mean much;
/// the median (printed) is less disturbed by preemption than the mean.
fn qd1(c: &mut Criterion) {
    for poll in [true, false]
        .into_iter()
        .filter(|_| filter_may_select("qd1"))
    {
        let lat = qd1_latencies(poll, 20_000);
        let q = |f: f64| lat[((lat.len() - 1) as f64 * f) as usize] as f64 / 1e3;
        eprintln!(
            "qd1 {}: round trip p50 {:.1} us, p90 {:.1} us, p99 {:.1} us ({} requests)",
            if poll { "poll" } else { "sleep" },
            q(0.5),
            q(0.9),
            q(0.99),
            lat.len()
        );
    }
    let mut g = c.benchmark_group("qd1");
    g.sample_size(10);
    let n = 2000u64;
    g.throughput(Throughput::Elements(n));
    for poll in [true, false] {
        let name = if poll { "poll" } else { "sleep" };
        g.bench_function(BenchmarkId::new("read4k-roundtrip", name), |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| threaded_run(LockMode::Swap, poll, 1, 1, n).wall)
                    .sum()
            })
        });
    }
    g.finish();
}

/// Whether the bench's name filter (the command line's positional
/// arguments, if any) may select group `group`: work outside criterion's
/// `bench_function` (the printed QD1 percentiles) is skipped otherwise, so
/// `-- inproc` runs (and profiles) the in-process path alone.
fn filter_may_select(group: &str) -> bool {
    let mut filters = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-') && a.parse::<f64>().is_err())
        .peekable();
    filters.peek().is_none() || filters.any(|f| f.contains(group) || group.contains(&f))
}

criterion_group!(benches, inproc, handoff, qd1);
criterion_main!(benches);
