//! The emulated SSD behind the fake queue: data, flush/discard/zeroes, and
//! completions released at the modelled time.

use ptsd_blockdev::BlockError;
use ptsd_ftl::Clock as _;
use ptsd_ftl::{FtlConfig, FtlError, Ssd, StoreKind, Variant, VirtualClock};
use ptsd_ublk::backend::{block_errno, Backend};
use ptsd_ublk::engine::{Clock, Engine, EngineConfig, QueueSide};
use ptsd_ublk::fake::{fake_queue, FakeHandle};
use ptsd_ublk::ftl::{FtlBackend, Timing};
use ptsd_ublk::request::{op, RawDesc};
use ptsd_ublk::spec::{BackendSpec, DeviceSpec, FtlScheme, FtlStore, Opened};
use ptsd_ublk::{LockMode, SchedulerKind};
use std::sync::Arc;

mod common;
use common::{clock_for, Rig};

const BS: usize = 4096;
const SPB: u64 = 8;
const DEPTH: u16 = 128;

/// The backend `spec` describes, on an SSD opened here (the binary opens
/// and locks a persistent image through ptsd-stack instead).
fn build(spec: &DeviceSpec) -> Box<dyn ptsd_ublk::Backend> {
    let opened = spec.ftl_config().map(|c| {
        let ssd = match c.store {
            StoreKind::File { .. } => Ssd::open(c),
            _ => Ssd::new(c),
        };
        Opened::Ssd(Box::new(ssd.unwrap()))
    });
    spec.build_backend(opened).unwrap()
}

fn rig(scheme: FtlScheme, timing: Timing, sched: Option<SchedulerKind>) -> Rig {
    let spec = DeviceSpec {
        backend: BackendSpec::Ftl {
            scheme,
            bytes: 32 << 20,
            store: FtlStore::Mem,
            timing,
        },
        sched,
        lock_mode: LockMode::Swap,
        poll: true,
    };
    rig_for(build(&spec), clock_for(timing))
}

fn rig_for(backend: Box<dyn Backend>, clock: (Clock, Option<Arc<VirtualClock>>)) -> Rig {
    Rig::new(backend, clock, DEPTH, 64 << 10)
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(29) ^ seed)
        .collect()
}

/// An FTL that ran out of flash space fails what would need space with
/// ENOSPC (so a file system above reports "No space left on device"), and a
/// read, or any other fault, with EIO.
#[test]
fn an_out_of_space_ftl_answers_enospc_and_other_faults_eio() {
    for (fault, want_write) in [
        (FtlError::NoSpace, -libc::ENOSPC),
        (FtlError::Busy(1), -libc::EIO),
    ] {
        let mut cfg = FtlConfig::paper(Variant::Page, 32 << 20);
        cfg.store = StoreKind::Memory;
        let mut backend = FtlBackend::new(Ssd::new(cfg).unwrap(), Timing::Off).unwrap();
        backend.inject_fault(fault);
        let mut r = rig_for(Box::new(backend), clock_for(Timing::Off));
        let data = pattern(7, BS);
        let write = r.one(0, RawDesc::new(op::WRITE, 9 * SPB, 8), Some(&data));
        assert_eq!(write, want_write, "write");
        for (what, desc) in [
            ("flush", RawDesc::new(op::FLUSH, u64::MAX, 0)),
            ("discard", RawDesc::new(op::DISCARD, 8 * SPB, 8)),
            ("write-zeroes", RawDesc::new(op::WRITE_ZEROES, 8 * SPB, 8)),
        ] {
            assert_eq!(r.one(1, desc, None), want_write, "{what}");
        }
        assert_eq!(
            r.one(2, RawDesc::new(op::READ, 8 * SPB, 8), None),
            -libc::EIO,
            "read"
        );
    }
}

/// The direct backend maps a device's out-of-space (`StorageFull`, as
/// `SsdDevice` reports an out-of-space FTL) to ENOSPC, anything else to EIO.
#[test]
fn a_full_block_device_answers_enospc() {
    let full = BlockError::Io(std::io::Error::new(
        std::io::ErrorKind::StorageFull,
        "no space",
    ));
    assert_eq!(block_errno(&full), -libc::ENOSPC);
    let other = BlockError::Io(std::io::Error::other("media error"));
    assert_eq!(block_errno(&other), -libc::EIO);
    assert_eq!(block_errno(&BlockError::Offline), -libc::EIO);
}

#[test]
fn every_scheme_stores_data_and_handles_every_op() {
    for scheme in [FtlScheme::Page, FtlScheme::Dftl, FtlScheme::Ptsd] {
        let mut r = rig(scheme, Timing::Off, None);
        // Spread writes so DFTL/PTSD miss in their mapping caches.
        for i in 0..64u64 {
            let data = pattern(i as u8, 2 * BS);
            let block = i * 97 % 8000;
            assert_eq!(
                r.one(0, RawDesc::new(op::WRITE, block * SPB, 16), Some(&data)),
                2 * BS as i32
            );
        }
        assert_eq!(r.one(1, RawDesc::new(op::FLUSH, u64::MAX, 0), None), 0);
        for i in 0..64u64 {
            let block = i * 97 % 8000;
            assert_eq!(
                r.one(2, RawDesc::new(op::READ, block * SPB, 16), None),
                2 * BS as i32
            );
            assert_eq!(
                r.handle.read_buffer(2, 2 * BS).unwrap(),
                pattern(i as u8, 2 * BS),
                "{scheme:?} block {block}"
            );
        }
        assert_eq!(r.one(3, RawDesc::new(op::DISCARD, 97 * SPB, 8), None), 0);
        assert_eq!(
            r.one(3, RawDesc::new(op::WRITE_ZEROES, 98 * SPB, 8), None),
            0
        );
        assert_eq!(
            r.one(4, RawDesc::new(op::READ, 97 * SPB, 16), None),
            2 * BS as i32
        );
        assert!(
            r.handle
                .read_buffer(4, 2 * BS)
                .unwrap()
                .iter()
                .all(|&b| b == 0),
            "{scheme:?}"
        );
        // Past the end: an error, the SSD keeps working.
        assert!(r.one(5, RawDesc::new(op::READ, 1 << 40, 8), None) < 0);
        assert_eq!(r.one(5, RawDesc::new(op::READ, 0, 8), None), BS as i32);
    }
}

#[test]
fn emulated_timing_releases_completions_at_the_modelled_time() {
    let mut r = rig(FtlScheme::Page, Timing::Emulate, None);
    let t = r.clock.clone().unwrap();
    // Write then read one page: the read has to go to NAND after a flush.
    r.handle
        .submit(0, RawDesc::new(op::WRITE, 0, 8), Some(&pattern(1, BS)))
        .unwrap();
    assert_eq!(r.settle(), vec![(0, BS as i32)]);
    r.handle
        .submit(1, RawDesc::new(op::FLUSH, u64::MAX, 0), None)
        .unwrap();
    assert_eq!(r.settle(), vec![(1, 0)]);
    let start = t.now_ns();
    r.handle
        .submit(2, RawDesc::new(op::READ, 0, 8), None)
        .unwrap();
    assert!(
        r.turn().is_empty(),
        "a NAND read cannot finish in zero time"
    );
    let next = r.engine_next().unwrap();
    assert!(next > start, "completion is in the future");
    // One nanosecond early: still nothing.
    t.advance_to(next - 1);
    assert!(r.turn().is_empty());
    t.advance_to(next);
    let mut c = r.turn();
    while c.is_empty() {
        t.advance_to(r.engine_next().unwrap());
        c = r.turn();
    }
    assert_eq!(c, vec![(2, BS as i32)]);
    let latency = t.now_ns() - start;
    // The model's page read: array read + transfer, at least 100 µs.
    assert!(latency >= 100_000, "modelled read latency {latency} ns");
    assert_eq!(r.handle.read_buffer(2, BS).unwrap(), pattern(1, BS));
}

/// A read queued behind a burst of writes, under FIFO and under PTSD read
/// priority: returns when the read completed (modelled ns after submit).
fn read_behind_writes(sched: SchedulerKind) -> u64 {
    let mut r = rig(FtlScheme::Ptsd, Timing::Emulate, Some(sched));
    let t = r.clock.clone().unwrap();
    // The page the read wants is on NAND, not in the write buffer.
    r.handle
        .submit(
            100,
            RawDesc::new(op::WRITE, 5000 * SPB, 8),
            Some(&pattern(7, BS)),
        )
        .unwrap();
    r.handle
        .submit(101, RawDesc::new(op::FLUSH, u64::MAX, 0), None)
        .unwrap();
    r.settle();
    let start = t.now_ns();
    for tag in 0..100u16 {
        let block = u64::from(tag) * 13;
        r.handle
            .submit(
                tag,
                RawDesc::new(op::WRITE, block * SPB, 8),
                Some(&pattern(tag as u8, BS)),
            )
            .unwrap();
    }
    r.handle
        .submit(100, RawDesc::new(op::READ, 5000 * SPB, 8), None)
        .unwrap();
    let mut read_done = None;
    let mut guard = 0;
    while read_done.is_none() {
        for (tag, res) in r.turn() {
            assert!(res >= 0);
            if tag == 100 {
                read_done = Some(t.now_ns() - start);
            }
        }
        if let Some(next) = r.engine_next() {
            t.advance_to(next);
        }
        guard += 1;
        assert!(guard < 100_000, "no progress");
    }
    read_done.unwrap()
}

#[test]
fn read_priority_lets_a_read_pass_a_write_burst() {
    let fifo = read_behind_writes(SchedulerKind::Fifo);
    let rp = read_behind_writes(SchedulerKind::ReadPriority);
    eprintln!("read behind 100 writes: fifo {fifo} ns, read-priority {rp} ns");
    assert!(rp < fifo, "read priority {rp} ns vs fifo {fifo} ns");
}

#[test]
fn a_file_store_keeps_flushed_data_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let spec = DeviceSpec {
        backend: BackendSpec::Ftl {
            scheme: FtlScheme::Ptsd,
            bytes: 16 << 20,
            store: FtlStore::File(dir.path().join("ssd.img")),
            timing: Timing::Off,
        },
        sched: None,
        lock_mode: LockMode::Swap,
        poll: true,
    };
    let config = EngineConfig {
        queues: 1,
        depth: 4,
        max_io_bytes: BS as u32,
        lock_mode: LockMode::Swap,
        poll: true,
    };
    for round in 0..2u8 {
        let (engine, shared) = Engine::new(build(&spec), config, Clock::wall());
        let worker = engine.spawn().unwrap();
        let (mut queue, handle) = fake_queue(4, BS, true);
        let mut side = QueueSide::new(shared.clone(), 0);
        let server = std::thread::spawn(move || ptsd_ublk::serve(&mut queue, &mut side));
        let wait = |h: &FakeHandle| h.wait_completions(1, std::time::Duration::from_secs(10));
        if round == 1 {
            // What round 0 flushed is there after the restart.
            handle
                .submit(0, RawDesc::new(op::READ, 40 * SPB, 8), None)
                .unwrap();
            assert_eq!(wait(&handle), vec![(0, BS as i32)]);
            assert_eq!(handle.read_buffer(0, BS).unwrap(), pattern(0, BS));
        }
        handle
            .submit(
                1,
                RawDesc::new(op::WRITE, 40 * SPB, 8),
                Some(&pattern(round, BS)),
            )
            .unwrap();
        assert_eq!(wait(&handle), vec![(1, BS as i32)]);
        handle
            .submit(2, RawDesc::new(op::FLUSH, u64::MAX, 0), None)
            .unwrap();
        assert_eq!(wait(&handle), vec![(2, 0)]);
        handle.close();
        server.join().unwrap();
        shared.stop();
        drop(worker.join().unwrap());
    }
}
