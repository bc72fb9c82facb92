//! The zoned device: timing, data, wear and recovery.

use std::sync::Arc;

use ptsd_blockdev::MemDevice;

use super::*;

fn page(v: u8, pages: usize) -> Vec<u8> {
    vec![v; pages * 4096]
}

#[test]
fn a_zone_stripes_its_pages_over_its_chips() {
    let cfg = ZonedConfig::small();
    let (t_prog, t_xfer) = (cfg.nand.t_prog_ns, cfg.nand.t_xfer_ns);
    let mut dev = ZonedSsd::new(cfg).unwrap();
    // Two pages on two chips of two channels: one program time.
    let d = dev.write(0, 0, 2, Some(&page(1, 2))).unwrap();
    assert_eq!(d.done_ns, t_xfer + t_prog);
    // Four pages: two per chip, one after the other.
    let t = d.done_ns;
    let d = dev.write(t, 2, 4, Some(&page(2, 4))).unwrap();
    assert_eq!(d.done_ns, t + 2 * (t_xfer + t_prog));
    let s = dev.stats();
    assert_eq!((s.host_write_pages, s.flash_programs, s.waf), (6, 6, 1.0));
}

#[test]
fn reads_return_the_data_and_zeroes_past_the_write_pointer() {
    let mut dev = ZonedSsd::new(ZonedConfig::small()).unwrap();
    let zp = dev.zone_pages();
    let mut data = page(0, 3);
    data[..4096].fill(5);
    data[4096..].fill(6);
    let w = dev.write(0, zp * 2, 3, Some(&data)).unwrap();
    let mut buf = page(9, 4);
    let done = dev.read(w.done_ns, zp * 2, 4, Some(&mut buf)).unwrap();
    assert_eq!(&buf[..3 * 4096], &data[..]);
    assert!(buf[3 * 4096..].iter().all(|&b| b == 0));
    assert!(done > w.done_ns);
    assert_eq!(
        dev.stats().flash_reads,
        3,
        "the page past the write pointer costs no NAND read"
    );
    assert!(matches!(
        dev.write(done, zp * 2 + 4, 1, Some(&page(1, 1))),
        Err(ZonedError::Zone(ZoneError::NotAtWritePointer { .. }))
    ));
    assert!(matches!(
        dev.write(done, 0, 1, None),
        Err(ZonedError::PayloadRequired)
    ));
}

#[test]
fn a_reset_erases_the_written_blocks_with_latency_and_wear() {
    let cfg = ZonedConfig::small();
    let t_erase = cfg.nand.t_erase_ns;
    let mut dev = ZonedSsd::new(cfg).unwrap();
    let zp = dev.zone_pages();
    // 17 pages of a zone striped over 2 chips with 16-page blocks: the
    // zone's two blocks (one per chip) hold them.
    let w = dev.write(0, zp, 17, Some(&page(3, 17))).unwrap();
    let t = dev.idle_at();
    let done = dev.reset(t, 1).unwrap();
    assert_eq!(
        done,
        t + t_erase,
        "the two erases run on their two chips at once"
    );
    let s = dev.stats();
    assert_eq!((s.resets, s.erases, s.max_erase_count), (1, 2, 1));
    assert!(w.done_ns <= t);
    // An empty zone's reset erases nothing.
    assert_eq!(dev.reset(done, 1).unwrap(), done);
    assert_eq!(dev.stats().erases, 2);
    let mut buf = page(1, 1);
    dev.read(done, zp, 1, Some(&mut buf)).unwrap();
    assert!(buf.iter().all(|&b| b == 0));
}

#[test]
fn a_zone_that_reaches_its_endurance_goes_offline() {
    let mut cfg = ZonedConfig::small();
    cfg.endurance = 2;
    let mut dev = ZonedSsd::new(cfg).unwrap();
    for _ in 0..2 {
        dev.write(0, 0, 1, Some(&page(1, 1))).unwrap();
        dev.reset(0, 0).unwrap();
    }
    assert_eq!(dev.report(0, 1)[0].state, ZoneState::Offline);
    assert!(matches!(
        dev.read(0, 0, 1, None),
        Err(ZonedError::Zone(ZoneError::Offline { zone: 0 }))
    ));
}

#[test]
fn bad_shapes_are_refused_with_a_reason() {
    let mut cfg = ZonedConfig::small();
    cfg.stripe_chips = 3;
    assert!(matches!(ZonedSsd::new(cfg), Err(ZonedError::Config(m)) if m.contains("stripe")));
    let mut cfg = ZonedConfig::small();
    cfg.zone_capacity_pages = Some(33);
    assert!(matches!(ZonedSsd::new(cfg), Err(ZonedError::Config(m)) if m.contains("capacity")));
    let mut cfg = ZonedConfig::small();
    cfg.max_open_zones = 7;
    assert!(matches!(ZonedSsd::new(cfg), Err(ZonedError::Config(m)) if m.contains("open")));
}

fn disk(cfg: &ZonedConfig) -> Arc<MemDevice> {
    Arc::new(MemDevice::new(512, ZonedSsd::image_bytes(cfg) / 512).unwrap())
}

#[test]
fn recovery_restores_write_pointers_and_states_from_the_media() {
    let cfg = ZonedConfig::small();
    let d = disk(&cfg);
    let mut dev = ZonedSsd::open_on(cfg.clone(), Box::new(d.clone())).unwrap();
    let zp = dev.zone_pages();
    let cap = dev.zone_capacity();
    dev.write(0, 0, 5, Some(&page(1, 5))).unwrap(); // zone 0: 5 pages, open
    dev.append(0, zp, 3, Some(&page(2, 3))).unwrap(); // zone 1: 3 pages
    dev.finish(0, 1).unwrap(); // zone 1: finished early
    dev.write(0, 2 * zp, cap as u32, Some(&page(3, cap as usize)))
        .unwrap(); // zone 2: full
    dev.write(0, 3 * zp, 4, Some(&page(4, 4))).unwrap();
    dev.reset(0, 3).unwrap(); // zone 3: reset, then 2 new pages
    dev.write(0, 3 * zp, 2, Some(&page(5, 2))).unwrap();
    dev.open(0, 4).unwrap(); // zone 4: explicitly open, nothing written
    dev.fail_zone(5, ZoneState::ReadOnly).unwrap();
    dev.flush(0).unwrap();
    // Written after the last flush: not promised, and not recovered.
    dev.write(0, 5, 2, Some(&page(6, 2))).unwrap();
    let before = dev.report(0, 6);
    drop(dev); // power cut

    let mut dev = ZonedSsd::open_on(cfg.clone(), Box::new(d.clone())).unwrap();
    let after = dev.report(0, 6);
    let st: Vec<(u64, ZoneState)> = after.iter().map(|z| (z.wp - z.start, z.state)).collect();
    assert_eq!(
        st,
        [
            (5, ZoneState::Closed),
            (cap, ZoneState::Full),
            (cap, ZoneState::Full),
            (2, ZoneState::Closed),
            (0, ZoneState::Empty),
            (0, ZoneState::ReadOnly),
        ],
        "before the cut: {before:?}"
    );
    assert_eq!(dev.zones().active_count(), 2);
    let mut buf = page(0, 2);
    dev.read(0, 3 * zp, 2, Some(&mut buf)).unwrap();
    assert_eq!(
        buf,
        page(5, 2),
        "the new generation's pages, not the reset ones"
    );
    // Writing goes on at the recovered write pointer; erase counts came back.
    dev.write(0, 5, 1, Some(&page(7, 1))).unwrap();
    assert_eq!(dev.stats().max_erase_count, 1);

    // A different shape is refused.
    let mut other = cfg;
    other.zone_capacity_pages = Some(16);
    assert!(matches!(
        ZonedSsd::open_on(other, Box::new(d)),
        Err(ZonedError::Image(ZonedImageError::Geometry { .. }))
    ));
}

#[test]
fn a_torn_page_ends_the_recovered_write_pointer() {
    use ptsd_blockdev::BlockDevice;
    let cfg = ZonedConfig::small();
    let d = disk(&cfg);
    let mut dev = ZonedSsd::open_on(cfg.clone(), Box::new(d.clone())).unwrap();
    dev.write(0, 0, 4, Some(&page(1, 4))).unwrap();
    dev.flush(0).unwrap();
    drop(dev);
    // Corrupt the data of the zone's third page (offset 2: chip 0,
    // second page of its block) behind the device's back.
    let dev = ZonedSsd::open_on(cfg.clone(), Box::new(d.clone())).unwrap();
    let ppa = dev.layout.ppa(0, 2);
    let img_pages = ZonedSsd::image_bytes(&cfg) / 4096;
    let physical = u64::from(cfg.nand.channels * cfg.nand.chips_per_channel)
        * u64::from(cfg.nand.blocks_per_chip * cfg.nand.pages_per_block);
    let data_first = img_pages - physical;
    drop(dev);
    d.write((data_first + u64::from(ppa)) * 8, &[0xEE; 512])
        .unwrap();
    let dev = ZonedSsd::open_on(cfg, Box::new(d)).unwrap();
    assert_eq!(dev.report(0, 1)[0].wp, 2);
}

fn timing_only() -> ZonedConfig {
    let mut cfg = ZonedConfig::small();
    cfg.nand.store = StoreKind::None;
    cfg
}

#[test]
fn the_host_log_reclaims_zones_itself_and_the_device_never_copies() {
    use crate::sim::Simulator;
    use crate::workload::WorkloadSpec;
    let dev = ZonedSsd::new(timing_only()).unwrap();
    let pages = u64::from(dev.zone_count()) * dev.zone_capacity() * 6 / 10;
    let mut sim = Simulator::new(HostLog::new(dev, pages).unwrap());
    let mut fill = WorkloadSpec::sequential_fill(pages, 1).build().unwrap();
    sim.run_closed("fill", &mut fill, 4).unwrap();
    let mut w = WorkloadSpec::mixed(pages, 30, 20 * pages, 3)
        .build()
        .unwrap();
    let phase = sim.run_closed("mixed", &mut w, 16).unwrap();
    let s = &phase.device;
    sim.device().check_invariants().unwrap();
    assert_eq!(s.device.waf, 1.0);
    assert!(s.host_copies > 0 && s.host_resets > 0);
    assert_eq!(
        s.device.host_write_pages,
        s.user_write_pages + s.host_copies
    );
    let want = (s.user_write_pages + s.host_copies) as f64 / s.user_write_pages as f64;
    assert!((s.total_waf - want).abs() < 1e-9);
    assert_eq!(phase.throughput.requests, 20 * pages);
    assert!(phase.read.count > 0);
    // Too large a working set is refused, not run into a wall.
    let dev = ZonedSsd::new(timing_only()).unwrap();
    let all = u64::from(dev.zone_count()) * dev.zone_capacity();
    assert!(matches!(HostLog::new(dev, all), Err(ZonedError::Config(_))));
}

#[test]
fn sequential_writes_to_zones_on_different_chips_run_in_parallel() {
    let run = |zones, requests| {
        let mut r = ZonedRunner::new(ZonedSsd::new(timing_only()).unwrap(), 1);
        r.run("seq", ZonedWorkload::SeqWrite { zones }, 8, 1, requests)
            .unwrap()
    };
    // Each zone written once to its capacity (24 pages): zone 0 on two
    // chips, zones 0 and 1 on all four.
    let one = run(1, 24);
    let two = run(2, 48);
    assert!(
        (two.iops / one.iops - 2.0).abs() < 0.01,
        "{} vs {} IOPS",
        two.iops,
        one.iops
    );
    let many = run(2, 1000);
    assert!(
        many.reset.count > 0,
        "1000 pages overflow the 32 zones of 24: resets"
    );
    assert_eq!(many.device.waf, 1.0);
}

#[test]
fn a_reset_of_a_full_zone_takes_one_erase_time() {
    let cfg = timing_only();
    let t_erase = cfg.nand.t_erase_ns;
    let mut r = ZonedRunner::new(ZonedSsd::new(cfg).unwrap(), 1);
    let p = r.run("reset", ZonedWorkload::Reset, 1, 1, 1000).unwrap();
    assert_eq!(p.requests, u64::from(r.device().zone_count()));
    // Capacity 24 of 32 pages over 2 chips: one block on each, erased at once.
    assert_eq!(p.reset.count, p.requests);
    assert!(
        (p.reset.mean_us - t_erase as f64 / 1000.0).abs() < 1.0,
        "{}",
        p.reset.mean_us
    );
    let p = r.run("read", ZonedWorkload::RandRead, 4, 2, 100).unwrap();
    assert_eq!(p.device.host_read_pages, 200);
    assert!("append:0".parse::<ZonedWorkload>().is_err());
    assert_eq!(
        "seqwrite:3".parse(),
        Ok(ZonedWorkload::SeqWrite { zones: 3 })
    );
}

#[test]
fn a_time_in_the_past_counts_as_the_last_one() {
    let cfg = timing_only();
    let (t_prog, t_xfer) = (cfg.nand.t_prog_ns, cfg.nand.t_xfer_ns);
    let mut dev = ZonedSsd::new(cfg).unwrap();
    dev.write(1_000_000, 0, 1, None).unwrap();
    let d = dev.write(5, 1, 1, None).unwrap();
    assert_eq!(d.done_ns, 1_000_000 + t_xfer + t_prog);
}
