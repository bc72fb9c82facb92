//! TPFTL behind ptsd-ublk's request path (the fake queue the host tests
//! use; the kernel queue runs the same engine): what `tpftl-ublk` serves.

use ptsd_example_tpftl::device_config;
use ptsd_ftl::{Ssd, StoreKind};
use ptsd_ublk::engine::{serve_once, Clock, Engine, EngineConfig};
use ptsd_ublk::fake::fake_queue;
use ptsd_ublk::ftl::{FtlBackend, Timing};
use ptsd_ublk::request::{op, RawDesc};
use ptsd_ublk::QueueSide;

#[test]
fn tpftl_serves_block_requests_through_the_ublk_engine() {
    let backend = FtlBackend::new(
        Ssd::new(device_config(32 << 20, StoreKind::Memory)).unwrap(),
        Timing::Off,
    )
    .unwrap();
    assert_eq!(backend.ssd().config().scheme_name(), "tpftl");
    let config = EngineConfig {
        depth: 4,
        max_io_bytes: 64 << 10,
        ..EngineConfig::default()
    };
    let (mut engine, shared) = Engine::new(Box::new(backend), config, Clock::wall());
    let (mut queue, handle) = fake_queue(4, 64 << 10, false);
    let mut side = QueueSide::new(shared, 0);
    let mut scratch = Vec::new();
    let mut turn = || {
        serve_once(&mut queue, &mut side, &mut scratch).unwrap();
        engine.step();
        serve_once(&mut queue, &mut side, &mut scratch).unwrap();
        handle.take_completions()
    };
    // 64 KiB at several places (sectors of 512 B), then read each back.
    let data = |i: u64| -> Vec<u8> { (0..65536).map(|b| (b as u64 * 7 + i) as u8).collect() };
    let places = [0u64, 8 << 10, 40 << 10, 63 << 10];
    for (i, &sector) in places.iter().enumerate() {
        handle
            .submit(
                0,
                RawDesc::new(op::WRITE, sector, 128),
                Some(&data(i as u64)),
            )
            .unwrap();
        assert_eq!(turn(), vec![(0, 65536)]);
    }
    handle
        .submit(0, RawDesc::new(op::FLUSH, 0, 0), None)
        .unwrap();
    assert_eq!(turn(), vec![(0, 0)]);
    for (i, &sector) in places.iter().enumerate() {
        handle
            .submit(1, RawDesc::new(op::READ, sector, 128), None)
            .unwrap();
        assert_eq!(turn(), vec![(1, 65536)]);
        assert_eq!(handle.read_buffer(1, 65536).unwrap(), data(i as u64));
    }
}

/// `tpftl-ublk --store IMAGE` opens its image under ptsd-stack's lock: an
/// image `ptsd mount` holds is refused, naming the holder; while served,
/// a mount of it is refused.
#[test]
fn an_image_is_claimed_as_ptsd_ublk_claims_it() {
    use std::time::Duration;

    use ptsd_example_tpftl::open_device;
    use ptsd_stack::{claim_ssd, Holder};

    let dir = tempfile::tempdir().unwrap();
    let store = StoreKind::File {
        path: dir.path().join("ssd.img"),
    };
    let mounted = claim_ssd(
        device_config(32 << 20, store.clone()),
        Holder::Mount,
        Duration::ZERO,
    )
    .unwrap();
    let err = open_device(32 << 20, store.clone()).err().unwrap();
    assert!(err.to_string().contains("(ptsd mount)"), "{err}");
    drop(mounted);

    let served = open_device(32 << 20, store.clone()).unwrap();
    assert!(served.1.is_some(), "a file store is claimed");
    let err = claim_ssd(
        device_config(32 << 20, store),
        Holder::Mount,
        Duration::ZERO,
    )
    .err()
    .unwrap();
    assert!(err.to_string().contains("(ptsd ublk)"), "{err}");
}
