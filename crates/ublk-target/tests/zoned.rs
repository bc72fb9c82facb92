//! The zoned SSD behind the fake queue: every zone operation as the kernel
//! sends it, the errnos a ZNS drive's refusals become, the zone report's
//! `struct blk_zone` array, and completions released at the modelled time.

use ptsd_blockdev::{BlockDevice, MemDevice};
use ptsd_ftl::zoned::{ZonedConfig, ZonedSsd};
use ptsd_ublk::engine::serve_once;
use ptsd_ublk::ftl::Timing;
use ptsd_ublk::request::{op, RawDesc};
use ptsd_ublk::spec::{BackendSpec, DeviceSpec, FtlStore, Opened};
use ptsd_ublk::zoned::ZonedBackend;
use ptsd_ublk::{Backend, LockMode};
use std::sync::Arc;

mod common;
use common::{clock_for, Rig};

const BS: usize = 4096;
const SPB: u64 = 8;
const DEPTH: u16 = 16;
/// `ZonedConfig::small()`: 32 zones of 32 blocks, capacity 24, 4 open /
/// 6 active zones, appends of at most 8 blocks.
const ZONE: u64 = 32;
const CAP: u64 = 24;
const ZONES: usize = 32;

fn rig_on(backend: Box<dyn Backend>, timing: Timing) -> Rig {
    Rig::new(backend, clock_for(timing), DEPTH, 64 * BS)
}

fn rig(timing: Timing) -> Rig {
    let ssd = ZonedSsd::new(ZonedConfig::small()).unwrap();
    rig_on(Box::new(ZonedBackend::new(ssd, timing)), timing)
}

/// Zoned requests on tag 0, each completed before the next.
trait ZonedOps {
    fn req(&mut self, desc: RawDesc, data: Option<&[u8]>) -> i32;
    fn write(&mut self, block: u64, blocks: u64, fill: u8) -> i32;
    fn read(&mut self, block: u64, blocks: u64) -> Vec<u8>;
    fn zone_op(&mut self, code: u8, zone: u64) -> i32;
    fn report(&mut self, zone: u64, nr: u32) -> Vec<BlkZone>;
}

impl ZonedOps for Rig {
    fn req(&mut self, desc: RawDesc, data: Option<&[u8]>) -> i32 {
        self.one(0, desc, data)
    }

    fn write(&mut self, block: u64, blocks: u64, fill: u8) -> i32 {
        let data = vec![fill; blocks as usize * BS];
        self.req(
            RawDesc::new(op::WRITE, block * SPB, (blocks * SPB) as u32),
            Some(&data),
        )
    }

    fn read(&mut self, block: u64, blocks: u64) -> Vec<u8> {
        let r = self.req(
            RawDesc::new(op::READ, block * SPB, (blocks * SPB) as u32),
            None,
        );
        assert_eq!(r, (blocks as usize * BS) as i32);
        self.handle.read_buffer(0, blocks as usize * BS).unwrap()
    }

    fn zone_op(&mut self, code: u8, zone: u64) -> i32 {
        self.req(RawDesc::new(code, zone * ZONE * SPB, 0), None)
    }

    fn report(&mut self, zone: u64, nr: u32) -> Vec<BlkZone> {
        let r = self.req(RawDesc::new(op::REPORT_ZONES, zone * ZONE * SPB, nr), None);
        assert_eq!(r, nr as i32 * 64, "the whole buffer is handed back");
        let buf = self.handle.read_buffer(0, nr as usize * 64).unwrap();
        buf.chunks_exact(64).map(BlkZone::parse).collect()
    }
}

/// A `struct blk_zone` as the kernel reads it.
#[derive(Debug, PartialEq, Eq)]
struct BlkZone {
    start: u64,
    len: u64,
    wp: u64,
    kind: u8,
    cond: u8,
    capacity: u64,
}

impl BlkZone {
    fn parse(b: &[u8]) -> BlkZone {
        let u = |o: usize| u64::from_ne_bytes(b[o..o + 8].try_into().unwrap());
        BlkZone {
            start: u(0),
            len: u(8),
            wp: u(16),
            kind: b[24],
            cond: b[25],
            capacity: u(32),
        }
    }
}

const EMPTY: u8 = 0x1;
const IMP_OPEN: u8 = 0x2;
const EXP_OPEN: u8 = 0x3;
const CLOSED: u8 = 0x4;
const FULL: u8 = 0xE;

#[test]
fn writes_at_the_write_pointer_read_back_and_off_it_fail_with_eio() {
    let mut r = rig(Timing::Off);
    assert_eq!(r.write(ZONE, 2, 0xA1), 2 * BS as i32);
    assert_eq!(r.write(ZONE + 2, 1, 0xA2), BS as i32);
    // Not at the write pointer (ahead, and rewriting behind it).
    assert_eq!(r.write(ZONE + 5, 1, 0xFF), -libc::EIO);
    assert_eq!(r.write(ZONE, 1, 0xFF), -libc::EIO);
    let back = r.read(ZONE, 4);
    assert!(back[..2 * BS].iter().all(|&b| b == 0xA1));
    assert!(back[2 * BS..3 * BS].iter().all(|&b| b == 0xA2));
    // Past the write pointer reads zeroes.
    assert!(back[3 * BS..].iter().all(|&b| b == 0));
    let z = &r.report(1, 1)[0];
    assert_eq!((z.wp, z.cond), ((ZONE + 3) * SPB, IMP_OPEN));
}

#[test]
fn a_write_past_the_zone_capacity_fails_and_filling_it_makes_it_full() {
    let mut r = rig(Timing::Off);
    for i in 0..CAP / 8 - 1 {
        assert_eq!(r.write(i * 8, 8, 1), 8 * BS as i32);
    }
    assert_eq!(r.write(CAP - 8, 9, 1), -libc::EIO, "crosses the capacity");
    assert_eq!(r.write(CAP - 8, 8, 1), 8 * BS as i32);
    assert_eq!(r.report(0, 1)[0].cond, FULL);
    assert_eq!(r.write(CAP, 1, 1), -libc::EIO, "full zone");
}

#[test]
fn zone_append_returns_the_sector_written() {
    let mut r = rig(Timing::Off);
    let append = |r: &mut Rig, blocks: u64, fill: u8| {
        let data = vec![fill; blocks as usize * BS];
        let res = r.req(
            RawDesc::new(op::ZONE_APPEND, 2 * ZONE * SPB, (blocks * SPB) as u32),
            Some(&data),
        );
        (res, r.handle.append_sector(0))
    };
    assert_eq!(append(&mut r, 3, 7), (3 * BS as i32, Some(2 * ZONE * SPB)));
    assert_eq!(
        append(&mut r, 2, 8),
        (2 * BS as i32, Some((2 * ZONE + 3) * SPB))
    );
    let back = r.read(2 * ZONE + 3, 2);
    assert!(back.iter().all(|&b| b == 8));
    // Over the 8-block append limit, and not at a zone start: EINVAL,
    // and no sector.
    assert_eq!(append(&mut r, 9, 1), (-libc::EINVAL, None));
    let data = vec![1u8; BS];
    let mid = r.req(
        RawDesc::new(op::ZONE_APPEND, (2 * ZONE + 1) * SPB, SPB as u32),
        Some(&data),
    );
    assert_eq!(mid, -libc::EINVAL);
    assert_eq!(r.handle.append_sector(0), None);
}

#[test]
fn open_close_finish_reset_move_the_zone_through_its_states() {
    let mut r = rig(Timing::Off);
    assert_eq!(r.zone_op(op::ZONE_OPEN, 3), 0);
    assert_eq!(r.report(3, 1)[0].cond, EXP_OPEN);
    assert_eq!(r.write(3 * ZONE, 4, 3), 4 * BS as i32);
    assert_eq!(r.zone_op(op::ZONE_CLOSE, 3), 0);
    assert_eq!(r.report(3, 1)[0].cond, CLOSED);
    assert_eq!(r.zone_op(op::ZONE_FINISH, 3), 0);
    let z = &r.report(3, 1)[0];
    assert_eq!(z.cond, FULL);
    assert_eq!(r.write(3 * ZONE + 4, 1, 3), -libc::EIO, "finished zone");
    assert_eq!(r.zone_op(op::ZONE_RESET, 3), 0);
    let z = &r.report(3, 1)[0];
    assert_eq!((z.cond, z.wp), (EMPTY, 3 * ZONE * SPB));
    // After the reset the data is gone and the zone writes from its start.
    assert!(r.read(3 * ZONE, 4).iter().all(|&b| b == 0));
    assert_eq!(r.write(3 * ZONE, 1, 4), BS as i32);
    // Closing an empty zone is an invalid transition (EIO); a zone command
    // not at a zone start is EINVAL.
    assert_eq!(r.zone_op(op::ZONE_CLOSE, 5), -libc::EIO);
    let off = r.req(RawDesc::new(op::ZONE_RESET, (3 * ZONE + 1) * SPB, 0), None);
    assert_eq!(off, -libc::EINVAL);
}

#[test]
fn reset_all_empties_every_written_zone() {
    let mut r = rig(Timing::Off);
    for z in 0..3 {
        assert_eq!(r.write(z * ZONE, 2, 9), 2 * BS as i32);
    }
    assert_eq!(r.req(RawDesc::new(op::ZONE_RESET_ALL, 0, 0), None), 0);
    assert!(r
        .report(0, ZONES as u32)
        .iter()
        .all(|z| z.cond == EMPTY && z.wp == z.start));
}

#[test]
fn the_open_and_active_limits_give_the_block_layers_errnos() {
    let mut r = rig(Timing::Off);
    // 4 explicitly open zones: a fifth explicit open has no zone to close
    // implicitly (ETOOMANYREFS: BLK_STS_ZONE_OPEN_RESOURCE).
    for z in 0..4 {
        assert_eq!(r.zone_op(op::ZONE_OPEN, z), 0);
    }
    assert_eq!(r.zone_op(op::ZONE_OPEN, 4), -libc::ETOOMANYREFS);
    // Two more active (closed) zones fill the 6 active; a seventh is
    // EOVERFLOW (BLK_STS_ZONE_ACTIVE_RESOURCE).
    for z in 0..4 {
        assert_eq!(r.write(z * ZONE, 1, 1), BS as i32);
        assert_eq!(r.zone_op(op::ZONE_CLOSE, z), 0);
    }
    for z in 4..6 {
        assert_eq!(r.write(z * ZONE, 1, 1), BS as i32);
    }
    assert_eq!(r.write(6 * ZONE, 1, 1), -libc::EOVERFLOW);
}

#[test]
fn the_zone_report_lists_every_zone_and_ends_with_a_zeroed_entry() {
    let mut r = rig(Timing::Off);
    assert_eq!(r.write(ZONE, 5, 1), 5 * BS as i32);
    let zones = r.report(0, ZONES as u32 + 4);
    for (i, z) in zones.iter().take(ZONES).enumerate() {
        let start = i as u64 * ZONE * SPB;
        assert_eq!((z.start, z.len, z.kind), (start, ZONE * SPB, 2));
        assert_eq!(z.capacity, CAP * SPB);
        let wp = if i == 1 { start + 5 * SPB } else { start };
        assert_eq!(z.wp, wp, "zone {i}");
    }
    // Past the last zone: zero-length entries, where the kernel stops.
    assert!(zones[ZONES..].iter().all(|z| z.len == 0));
    // A report from the last zone holds it alone.
    let last = ZONES as u64 - 1;
    let tail = r.report(last, 4);
    assert_eq!(tail[0].start, last * ZONE * SPB);
    assert_eq!(tail[1].len, 0);
}

#[test]
fn discard_is_refused_and_flush_succeeds() {
    let mut r = rig(Timing::Off);
    assert_eq!(
        r.req(RawDesc::new(op::DISCARD, 0, 8), None),
        -libc::EOPNOTSUPP
    );
    assert_eq!(r.req(RawDesc::new(op::FLUSH, u64::MAX, 0), None), 0);
}

#[test]
fn emulated_timing_releases_a_write_at_the_nand_program_time() {
    let mut r = rig(Timing::Emulate);
    let data = vec![5u8; BS];
    r.handle
        .submit(0, RawDesc::new(op::WRITE, 0, SPB as u32), Some(&data))
        .unwrap();
    serve_once(&mut r.queue, &mut r.side, &mut r.scratch).unwrap();
    r.engine.step();
    serve_once(&mut r.queue, &mut r.side, &mut r.scratch).unwrap();
    assert!(r.handle.take_completions().is_empty(), "not before tPROG");
    let t = r.engine.next_event().unwrap();
    assert!(t >= ZonedConfig::small().nand.t_prog_ns, "{t}");
    r.clock.as_ref().unwrap().advance_to(t);
    r.engine.step();
    serve_once(&mut r.queue, &mut r.side, &mut r.scratch).unwrap();
    assert_eq!(r.handle.take_completions(), vec![(0, BS as i32)]);
}

#[test]
fn a_persistent_image_keeps_write_pointers_and_states_across_a_new_daemon() {
    let cfg = ZonedConfig::small();
    let disk = Arc::new(MemDevice::new(4096, ZonedSsd::image_bytes(&cfg) / 4096).unwrap());
    let open = |d: &Arc<MemDevice>| {
        let ssd = ZonedSsd::open_on(cfg.clone(), Box::new(d.clone())).unwrap();
        rig_on(Box::new(ZonedBackend::new(ssd, Timing::Off)), Timing::Off)
    };
    let mut r = open(&disk);
    assert_eq!(r.write(0, 3, 1), 3 * BS as i32);
    assert_eq!(r.write(2 * ZONE, 8, 2), 8 * BS as i32);
    assert_eq!(r.zone_op(op::ZONE_FINISH, 2), 0);
    assert_eq!(r.req(RawDesc::new(op::FLUSH, u64::MAX, 0), None), 0);
    drop(r); // the daemon dies
    assert!(disk.num_blocks() > 0);
    let mut r = open(&disk);
    let z = r.report(0, 3);
    assert_eq!((z[0].wp, z[0].cond), (3 * SPB, CLOSED));
    assert_eq!(z[2].cond, FULL);
    assert!(r.read(0, 3).iter().all(|&b| b == 1));
    assert_eq!(
        r.write(3, 1, 1),
        BS as i32,
        "writes go on at the kept pointer"
    );
}

#[test]
fn a_zoned_spec_builds_on_a_zoned_ssd_only() {
    let spec = DeviceSpec {
        backend: BackendSpec::Zoned {
            bytes: 256 << 20,
            zone_bytes: 8 << 20,
            zone_capacity_bytes: None,
            max_open: 14,
            max_active: 14,
            store: FtlStore::None,
            timing: Timing::Off,
        },
        sched: None,
        lock_mode: LockMode::Swap,
        poll: true,
    };
    let cfg = spec.zoned_config().unwrap().unwrap();
    let b = spec
        .build_backend(Some(Opened::Zoned(Box::new(ZonedSsd::new(cfg).unwrap()))))
        .unwrap();
    assert_eq!(b.num_blocks() * BS as u64, 256 << 20);
    let g = b.zone_geometry().unwrap();
    assert_eq!((g.zone_blocks, g.max_open, g.max_active), (2048, 14, 14));
    let err = spec.build_backend(None).err().unwrap().to_string();
    assert!(err.contains("zoned"), "{err}");
}

#[test]
fn zoned_shapes_the_kernel_would_refuse_are_clear_errors() {
    let shape = |bytes: u64, zone: u64, cap: Option<u64>, open: u32| {
        DeviceSpec {
            backend: BackendSpec::Zoned {
                bytes,
                zone_bytes: zone,
                zone_capacity_bytes: cap,
                max_open: open,
                max_active: open,
                store: FtlStore::None,
                timing: Timing::Off,
            },
            sched: None,
            lock_mode: LockMode::Swap,
            poll: true,
        }
        .zoned_config()
        .unwrap()
        .map(|c| c.zones())
        .map_err(|e| e.to_string())
    };
    assert_eq!(shape(64 << 20, 2 << 20, None, 4), Ok(32));
    let e = shape(256 << 20, 3 << 20, None, 4).unwrap_err();
    assert!(e.contains("power of two"), "{e}");
    let e = shape(100 << 20, 8 << 20, None, 4).unwrap_err();
    assert!(e.contains("multiple"), "{e}");
    let e = shape(256 << 20, 8 << 20, Some(9 << 20), 4).unwrap_err();
    assert!(e.contains("capacity"), "{e}");
    let e = shape(64 << 20, 8 << 20, None, 9).unwrap_err();
    assert!(e.contains("more than the device's 8 zones"), "{e}");
}

#[test]
fn conventional_backends_refuse_zone_operations() {
    let dev = MemDevice::new(4096, 64).unwrap();
    let b = ptsd_ublk::DirectBackend::new(dev, ptsd_ublk::SchedulerKind::Fifo);
    assert!(b.zone_geometry().is_none());
    let mut r = rig_on(Box::new(b), Timing::Off);
    assert_eq!(r.zone_op(op::ZONE_RESET, 0), -libc::EOPNOTSUPP);
}
