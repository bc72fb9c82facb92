//! The request path driven by a fake ublk queue: the same `serve` code the
//! kernel queue threads run.

use proptest::prelude::*;
use ptsd_blockdev::MemDevice;
use ptsd_ublk::backend::DirectBackend;
use ptsd_ublk::engine::{serve, serve_once, Clock, Engine, EngineConfig, QueueSide};
use ptsd_ublk::fake::fake_queue;
use ptsd_ublk::handoff::LockMode;
use ptsd_ublk::request::{op, RawDesc};
use ptsd_ublk::sched::SchedulerKind;
use std::sync::Arc;
use std::time::Duration;

mod common;
use common::{clock_for, Rig};
use ptsd_ublk::ftl::Timing;

const BS: usize = 4096;
const SPB: u32 = (BS / 512) as u32; // sectors per block
const BLOCKS: u64 = 1024;
const DEPTH: u16 = 16;
const BUF: usize = 64 << 10;

fn rig(sched: SchedulerKind) -> Rig {
    let backend = DirectBackend::new(MemDevice::new(BS as u32, BLOCKS).unwrap(), sched);
    Rig::new(Box::new(backend), clock_for(Timing::Off), DEPTH, BUF)
}

/// Whole-block writes and reads, each completed before the next.
trait BlockOps {
    fn write(&mut self, tag: u16, block: u64, data: &[u8]) -> i32;
    fn read(&mut self, tag: u16, block: u64, blocks: usize) -> Vec<u8>;
}

impl BlockOps for Rig {
    fn write(&mut self, tag: u16, block: u64, data: &[u8]) -> i32 {
        let desc = RawDesc::new(op::WRITE, block * SPB as u64, (data.len() / 512) as u32);
        self.one(tag, desc, Some(data))
    }

    fn read(&mut self, tag: u16, block: u64, blocks: usize) -> Vec<u8> {
        let desc = RawDesc::new(op::READ, block * SPB as u64, (blocks * BS / 512) as u32);
        self.handle.submit(tag, desc, None).unwrap();
        let c = self.turn();
        assert_eq!(c, vec![(tag, (blocks * BS) as i32)]);
        self.handle.read_buffer(tag, blocks * BS).unwrap()
    }
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed)
        .collect()
}

#[test]
fn write_then_read_returns_the_data() {
    let mut r = rig(SchedulerKind::ReadPriority);
    let data = pattern(5, 3 * BS);
    assert_eq!(r.write(0, 100, &data), (3 * BS) as i32);
    assert_eq!(r.read(1, 100, 3), data);
    assert_eq!(r.read(2, 101, 1), data[BS..2 * BS].to_vec());
}

#[test]
fn flush_without_data_and_with_sector_max_succeeds() {
    let mut r = rig(SchedulerKind::ReadPriority);
    r.handle
        .submit(3, RawDesc::new(op::FLUSH, u64::MAX, 0), None)
        .unwrap();
    assert_eq!(r.turn(), vec![(3, 0)]);
}

#[test]
fn discard_and_write_zeroes_read_back_zeroes() {
    let mut r = rig(SchedulerKind::Fifo);
    r.write(0, 10, &pattern(1, 4 * BS));
    r.handle
        .submit(0, RawDesc::new(op::DISCARD, 10 * SPB as u64, SPB), None)
        .unwrap();
    assert_eq!(r.turn(), vec![(0, 0)]);
    r.handle
        .submit(
            0,
            RawDesc::new(op::WRITE_ZEROES, 12 * SPB as u64, 2 * SPB),
            None,
        )
        .unwrap();
    assert_eq!(r.turn(), vec![(0, 0)]);
    let back = r.read(1, 10, 4);
    assert!(back[..BS].iter().all(|&b| b == 0));
    assert_eq!(back[BS..2 * BS], pattern(1, 4 * BS)[BS..2 * BS]);
    assert!(back[2 * BS..].iter().all(|&b| b == 0));
}

fn submit_batch(r: &Rig, reqs: &[(u16, u8, u64)]) {
    for &(tag, o, block) in reqs {
        let data = pattern(tag as u8, BS);
        let payload = (o == op::WRITE).then_some(&data[..]);
        let sectors = if o == op::FLUSH { 0 } else { SPB };
        let sector = if o == op::FLUSH {
            u64::MAX
        } else {
            block * SPB as u64
        };
        r.handle
            .submit(tag, RawDesc::new(o, sector, sectors), payload)
            .unwrap();
    }
}

fn tags(c: &[(u16, i32)]) -> Vec<u16> {
    c.iter().map(|&(t, _)| t).collect()
}

#[test]
fn read_priority_serves_reads_of_a_batch_first() {
    let reqs = [
        (0, op::WRITE, 0),
        (1, op::WRITE, 8),
        (2, op::READ, 16),
        (3, op::WRITE, 24),
        (4, op::READ, 32),
    ];
    let mut r = rig(SchedulerKind::ReadPriority);
    submit_batch(&r, &reqs);
    assert_eq!(tags(&r.turn()), vec![2, 4, 0, 1, 3]);

    let mut f = rig(SchedulerKind::Fifo);
    submit_batch(&f, &reqs);
    assert_eq!(tags(&f.turn()), vec![0, 1, 2, 3, 4]);
}

#[test]
fn a_read_never_passes_an_overlapping_write() {
    let mut r = rig(SchedulerKind::ReadPriority);
    submit_batch(&r, &[(0, op::WRITE, 7), (1, op::READ, 7), (2, op::READ, 9)]);
    assert_eq!(tags(&r.turn()), vec![2, 0, 1]);
    // And the read saw the write.
    assert_eq!(r.handle.read_buffer(1, BS).unwrap(), pattern(0, BS));
}

#[test]
fn flush_is_a_barrier_for_read_priority() {
    let mut r = rig(SchedulerKind::ReadPriority);
    submit_batch(
        &r,
        &[
            (0, op::WRITE, 1),
            (1, op::FLUSH, 0),
            (2, op::READ, 5),
            (3, op::WRITE, 6),
            (4, op::READ, 7),
        ],
    );
    assert_eq!(tags(&r.turn()), vec![0, 1, 2, 4, 3]);
}

#[test]
fn malformed_requests_complete_with_errors() {
    let mut r = rig(SchedulerKind::ReadPriority);
    let einval = -libc::EINVAL;
    let cases: Vec<(RawDesc, i32)> = vec![
        (RawDesc::new(op::WRITE_SAME, 0, SPB), -libc::EOPNOTSUPP),
        (RawDesc::new(99, 0, SPB), -libc::EOPNOTSUPP),
        (RawDesc::new(op::READ, 0, 0), einval),
        (RawDesc::new(op::READ, 1, SPB), einval),
        (RawDesc::new(op::READ, 0, 1), einval),
        (RawDesc::new(op::READ, BLOCKS * SPB as u64, SPB), -libc::EIO),
        (RawDesc::new(op::WRITE, u64::MAX - 7, SPB), -libc::EIO),
        (
            RawDesc::new(op::DISCARD, (BLOCKS - 1) * SPB as u64, 2 * SPB),
            -libc::EIO,
        ),
        (RawDesc::new(op::READ, 0, (2 * BUF / 512) as u32), einval),
    ];
    for (desc, want) in cases {
        r.handle.submit(0, desc, None).unwrap();
        assert_eq!(r.turn(), vec![(0, want)], "{desc:?}");
    }
    // A tag the queue does not have.
    let stats = r.side.shared().stats().report();
    assert!(stats.ops["read"].errors >= 5);
    // The device still works afterwards.
    assert_eq!(r.write(1, 0, &pattern(9, BS)), BS as i32);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
    /// Whatever the kernel sends, the target answers and does not panic.
    #[test]
    fn any_descriptor_gets_an_answer(opf in any::<u32>(), sector in any::<u64>(), sectors in any::<u32>()) {
        let mut r = rig(SchedulerKind::ReadPriority);
        r.handle.submit(0, RawDesc { op_flags: (opf % 8) | (opf & !0xff), nr_sectors: sectors % 256, start_sector: sector % (2 * BLOCKS * SPB as u64) }, None).unwrap();
        let c = r.turn();
        prop_assert_eq!(c.len(), 1);
        r.handle.submit(1, RawDesc { op_flags: opf, nr_sectors: sectors, start_sector: sector }, None).unwrap();
        prop_assert_eq!(r.turn().len(), 1);
    }
}

/// Several queue threads, one engine thread, real concurrency: every
/// request completes with the right data, in both hand-off modes and with
/// polling on and off.
fn threaded(lock_mode: LockMode, poll: bool) -> (u64, u64) {
    const QUEUES: u16 = 3;
    const PER_QUEUE: usize = 300;
    let backend = DirectBackend::new(
        MemDevice::new(BS as u32, BLOCKS).unwrap(),
        SchedulerKind::ReadPriority,
    );
    let config = EngineConfig {
        queues: QUEUES,
        depth: DEPTH,
        max_io_bytes: BUF as u32,
        lock_mode,
        poll,
    };
    let (engine, shared) = Engine::new(Box::new(backend), config, Clock::wall());
    let worker = engine.spawn().unwrap();
    let mut threads = Vec::new();
    for q in 0..QUEUES {
        let (mut queue, handle) = fake_queue(DEPTH, BUF, true);
        let shared = shared.clone();
        shared.set_waker(q, queue.waker());
        let server = std::thread::spawn(move || {
            let mut side = QueueSide::new(shared, q);
            serve(&mut queue, &mut side);
        });
        let client = std::thread::spawn(move || {
            // Each queue owns its own region of the device.
            let base = q as u64 * 256;
            let mut done = 0;
            let mut next = 0;
            while done < PER_QUEUE {
                // Fill the queue with a write and a read per pair of tags.
                let mut submitted = 0;
                for tag in 0..DEPTH {
                    if next >= PER_QUEUE {
                        break;
                    }
                    let block = base + (next as u64 % 128);
                    let data = pattern((next % 251) as u8, BS);
                    handle
                        .submit(
                            tag,
                            RawDesc::new(op::WRITE, block * SPB as u64, SPB),
                            Some(&data),
                        )
                        .unwrap();
                    next += 1;
                    submitted += 1;
                }
                let mut got = Vec::new();
                while got.len() < submitted {
                    let c = handle.wait_completions(1, Duration::from_secs(10));
                    assert!(!c.is_empty(), "no completion within 10 s");
                    got.extend(c);
                }
                assert!(got.iter().all(|&(_, r)| r == BS as i32), "{got:?}");
                done += submitted;
            }
            // Read back the last value written to a few blocks.
            for i in (PER_QUEUE - 20)..PER_QUEUE {
                let block = base + (i as u64 % 128);
                handle
                    .submit(0, RawDesc::new(op::READ, block * SPB as u64, SPB), None)
                    .unwrap();
                let c = handle.wait_completions(1, Duration::from_secs(10));
                assert_eq!(c, vec![(0, BS as i32)]);
                assert_eq!(
                    handle.read_buffer(0, BS).unwrap(),
                    pattern((i % 251) as u8, BS)
                );
            }
            handle.close();
        });
        threads.push((server, client));
    }
    for (s, c) in threads {
        c.join().unwrap();
        s.join().unwrap();
    }
    let locks = shared.lock_count();
    let requests = shared.stats().total();
    shared.stop();
    worker.join().unwrap();
    (locks, requests)
}

#[test]
fn threaded_swap_polling() {
    let (locks, requests) = threaded(LockMode::Swap, true);
    assert_eq!(requests, 3 * (300 + 20));
    // Per request at most one push and one take on each of inbox and
    // outbox; batching makes it fewer.
    assert!(
        locks <= 4 * requests,
        "{locks} locks for {requests} requests"
    );
}

#[test]
fn threaded_per_request_blocking() {
    let (locks, requests) = threaded(LockMode::PerRequest, false);
    assert_eq!(requests, 3 * (300 + 20));
    // A locked FIFO: every push and every pop (plus the final empty pop).
    assert!(
        locks >= 4 * requests,
        "{locks} locks for {requests} requests"
    );
}

#[test]
fn queue_swapping_takes_one_lock_per_batch() {
    let mut r = rig(SchedulerKind::Fifo);
    for tag in 0..DEPTH {
        r.handle
            .submit(
                tag,
                RawDesc::new(op::READ, tag as u64 * SPB as u64, SPB),
                None,
            )
            .unwrap();
    }
    let before = r.side.shared().lock_count();
    assert_eq!(r.turn().len(), DEPTH as usize);
    // push + take on the inbox, push + take on the outbox.
    assert_eq!(r.side.shared().lock_count() - before, 4);
}

#[test]
fn closing_a_queue_with_requests_in_flight_waits_for_them() {
    let backend = DirectBackend::new(
        MemDevice::new(BS as u32, BLOCKS).unwrap(),
        SchedulerKind::Fifo,
    );
    let config = EngineConfig {
        depth: DEPTH,
        max_io_bytes: BUF as u32,
        ..EngineConfig::default()
    };
    let (engine, shared) = Engine::new(Box::new(backend), config, Clock::wall());
    let (mut queue, handle) = fake_queue(DEPTH, BUF, true);
    let mut side = QueueSide::new(shared.clone(), 0);
    handle
        .submit(0, RawDesc::new(op::WRITE, 0, SPB), Some(&pattern(1, BS)))
        .unwrap();
    let mut scratch = Vec::new();
    serve_once(&mut queue, &mut side, &mut scratch).unwrap();
    assert_eq!(side.in_flight(), 1);
    handle.close();
    let worker = engine.spawn().unwrap();
    serve(&mut queue, &mut side); // returns only once the write is back
    assert_eq!(side.in_flight(), 0);
    shared.stop();
    let backend = worker.join().unwrap();
    drop(backend);
    let _ = Arc::strong_count(&shared);
}

/// One scheduler vocabulary: the FTL's `SchedulerKind` names the block
/// target's policies too, parses the CLI's spellings, and reads the
/// kebab-case name device specs were stored with before.
#[test]
fn the_scheduler_names_parse_and_old_specs_still_read() {
    use ptsd_ublk::SchedulerKind;
    for (s, want) in [
        ("fifo", SchedulerKind::Fifo),
        ("read-priority", SchedulerKind::ReadPriority),
        ("read_priority", SchedulerKind::ReadPriority),
        ("rp", SchedulerKind::ReadPriority),
    ] {
        assert_eq!(s.parse::<SchedulerKind>().unwrap(), want, "{s}");
    }
    let err = "lifo".parse::<SchedulerKind>().unwrap_err();
    assert_eq!(
        err.to_string(),
        "unknown scheduler \"lifo\" (expected fifo or read-priority)"
    );
    let old: SchedulerKind = serde_json::from_str("\"read-priority\"").unwrap();
    assert_eq!(old, SchedulerKind::ReadPriority);
    let json = serde_json::to_string(&SchedulerKind::ReadPriority).unwrap();
    assert_eq!(
        serde_json::from_str::<SchedulerKind>(&json).unwrap(),
        SchedulerKind::ReadPriority
    );
}
