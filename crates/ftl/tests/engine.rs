//! Invariants over random workloads, bad configs and bad requests, and the
//! block-device adapter.

use std::sync::Arc;

use ptsd_blockdev::{BlockDevice, BlockError};
use ptsd_ftl::{
    ConfigError, FtlConfig, Op, Payload, Request, SchemeConfig, Ssd, SsdDevice, SsdRequestError,
    StoreKind, Variant,
};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Closed loop at queue depth `qd`, timing only; returns read latencies.
fn closed_loop(ssd: &mut Ssd, seed: u64, requests: u64, qd: u64, read_pct: u32) -> Vec<u64> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let pages = ssd.logical_pages();
    let mut next = 0;
    let mut lat = Vec::new();
    let mk = |rng: &mut SmallRng, id| Request {
        id,
        op: if rng.gen_range(0..100) < read_pct {
            Op::Read
        } else {
            Op::Write
        },
        lpn: rng.gen_range(0..pages),
        pages: 1,
    };
    let start = ssd.next_event().unwrap_or(0).max(ssd.idle_at());
    for _ in 0..qd {
        ssd.submit(start, mk(&mut rng, next), Payload::None)
            .unwrap();
        next += 1;
    }
    let mut done = Vec::new();
    while let Some(t) = ssd.next_event() {
        ssd.advance(t, &mut done);
        for d in done.drain(..) {
            assert!(!d.failed);
            let c = d.completion;
            assert!(c.submit_ns <= c.dispatch_ns && c.dispatch_ns <= c.done_ns && c.done_ns <= t);
            if c.op == Op::Read {
                lat.push(c.latency_ns());
            }
            if next < requests {
                ssd.submit(t, mk(&mut rng, next), Payload::None).unwrap();
                next += 1;
            }
        }
    }
    lat
}

fn paper_small(v: Variant) -> FtlConfig {
    FtlConfig::paper(v, 256 << 20)
}

#[test]
fn ptsd_never_programs_on_the_read_path_but_dftl_does() {
    let mut programs = Vec::new();
    for v in Variant::ALL {
        let mut ssd = Ssd::new(paper_small(v)).unwrap();
        let pages = ssd.logical_pages();
        closed_loop(&mut ssd, 1, pages, 64, 0); // fill
        closed_loop(&mut ssd, 2, 60_000, 64, 70); // interleaved
        ssd.check_invariants().unwrap();
        programs.push((
            v,
            ssd.stats().programs_issued_by_reads,
            ssd.stats().cmt_read_misses,
        ));
    }
    for (v, p, misses) in &programs {
        match v {
            Variant::Page => assert_eq!(*p, 0),
            Variant::Dftl => assert!(
                *p > 0,
                "DFTL should write back dirty pages on reads: {programs:?}"
            ),
            _ => {
                assert_eq!(*p, 0, "{v:?} programmed flash while serving reads");
                assert!(*misses > 0);
            }
        }
    }
}

#[test]
fn a_clone_goes_on_exactly_like_the_original() {
    for v in Variant::ALL {
        let mut ssd = Ssd::new(paper_small(v)).unwrap();
        closed_loop(&mut ssd, 1, 40_000, 64, 0);
        let mut copy = ssd.try_clone().unwrap();
        let a = closed_loop(&mut ssd, 2, 30_000, 64, 70);
        let b = closed_loop(&mut copy, 2, 30_000, 64, 70);
        assert_eq!(a, b, "{}", v.name());
        assert_eq!(ssd.stats(), copy.stats(), "{}", v.name());
        copy.check_invariants().unwrap();
    }
}

#[test]
fn page_map_costs_four_bytes_per_page_and_caches_stay_in_budget() {
    let ssd = Ssd::new(paper_small(Variant::Page)).unwrap();
    assert_eq!(ssd.map_memory_bytes(), ssd.logical_pages() * 4);
    for v in [Variant::Dftl, Variant::Part, Variant::WriteOpt] {
        let cfg = paper_small(v);
        let budget = cfg.map_memory_bytes.unwrap();
        assert_eq!(budget, cfg.logical_pages() * 4 / 5);
        let mut ssd = Ssd::new(cfg).unwrap();
        closed_loop(&mut ssd, 3, 50_000, 32, 50);
        let used = ssd.map_memory_bytes();
        assert!(
            used <= budget && used > budget / 2,
            "{v:?}: {used} of {budget}"
        );
    }
}

#[test]
fn adaptive_split_moves_toward_reads_on_a_read_workload() {
    let mut cfg = paper_small(Variant::PartSched);
    cfg.scheme = SchemeConfig::Ptsd {
        clean_ratio: 0.5,
        entry_dirty: true,
        adaptive: true,
    };
    let mut ssd = Ssd::new(cfg).unwrap();
    let pages = ssd.logical_pages();
    closed_loop(&mut ssd, 1, pages, 64, 0);
    closed_loop(&mut ssd, 4, 100_000, 64, 100);
    assert!(ssd.stats().clean_share > 0.8, "{}", ssd.stats().clean_share);
    assert_eq!(ssd.stats().programs_issued_by_reads, 0);
}

/// In steady state (GC running, as the paper measures), read priority cuts
/// the read tail.
#[test]
fn read_priority_protects_the_read_tail() {
    let p999 = |v| {
        let mut ssd = Ssd::new(paper_small(v)).unwrap();
        let pages = ssd.logical_pages();
        closed_loop(&mut ssd, 1, pages, 128, 0);
        closed_loop(&mut ssd, 2, pages, 128, 0);
        let mut lat = closed_loop(&mut ssd, 5, 100_000, 128, 70);
        lat.sort_unstable();
        lat[lat.len() * 999 / 1000]
    };
    let (part, sched) = (p999(Variant::Part), p999(Variant::PartSched));
    assert!(
        sched < part,
        "PART-SCHED p99.9 {sched} ns vs PART {part} ns"
    );
}

#[test]
fn bad_configs_are_refused_with_a_reason() {
    let ok = FtlConfig::default();
    ok.validate().unwrap();
    type Expect = fn(&ConfigError) -> bool;
    let cases: Vec<(FtlConfig, Expect)> = vec![
        (
            FtlConfig {
                page_size: 4095,
                ..ok.clone()
            },
            |e| matches!(e, ConfigError::PageSize(_)),
        ),
        (
            FtlConfig {
                channels: 0,
                ..ok.clone()
            },
            |e| matches!(e, ConfigError::Zero("channels")),
        ),
        (
            FtlConfig {
                op_ratio: 0.0,
                ..ok.clone()
            },
            |e| matches!(e, ConfigError::OpRatio(_)),
        ),
        (
            FtlConfig {
                op_ratio: 1.5,
                ..ok.clone()
            },
            |e| matches!(e, ConfigError::OpRatio(_)),
        ),
        (
            FtlConfig {
                scheme: SchemeConfig::Dftl,
                map_memory_bytes: Some(100),
                ..ok.clone()
            },
            |e| matches!(e, ConfigError::MapMemory { .. }),
        ),
        (
            FtlConfig {
                map_memory_bytes: Some(1 << 20),
                ..ok.clone()
            },
            |e| matches!(e, ConfigError::MapMemory { scheme: "page", .. }),
        ),
        (
            FtlConfig {
                scheme: SchemeConfig::Ptsd {
                    clean_ratio: 1.0,
                    entry_dirty: false,
                    adaptive: false,
                },
                ..ok.clone()
            },
            |e| matches!(e, ConfigError::CleanRatio(_)),
        ),
        (
            FtlConfig {
                blocks_per_chip: 8,
                ..ok.clone()
            },
            |e| {
                matches!(
                    e,
                    ConfigError::NotEnoughSpare { .. } | ConfigError::SpareBlocksPerChip { .. }
                )
            },
        ),
        (
            FtlConfig {
                logical_bytes: Some(1000),
                ..ok.clone()
            },
            |e| matches!(e, ConfigError::LogicalSize { .. }),
        ),
    ];
    for (cfg, want) in cases {
        let e = cfg.validate().expect_err("config should be refused");
        assert!(want(&e), "unexpected error {e:?}");
        assert!(!e.to_string().is_empty());
        assert!(Ssd::new(cfg).is_err());
    }
}

#[test]
fn bad_requests_change_nothing() {
    let mut cfg = paper_small(Variant::Part);
    cfg.store = StoreKind::Memory;
    let mut ssd = Ssd::new(cfg).unwrap();
    let n = ssd.logical_pages();
    let w = |lpn, pages| Request {
        id: 1,
        op: Op::Write,
        lpn,
        pages,
    };
    assert!(matches!(
        ssd.submit(0, w(n - 1, 2), Payload::Write(vec![0; 8192])),
        Err(SsdRequestError::OutOfRange { .. })
    ));
    assert!(matches!(
        ssd.submit(0, w(u64::MAX, 1), Payload::Write(vec![0; 4096])),
        Err(SsdRequestError::OutOfRange { .. })
    ));
    assert!(matches!(
        ssd.submit(0, w(0, 0), Payload::None),
        Err(SsdRequestError::ZeroLength { .. })
    ));
    assert!(matches!(
        ssd.submit(0, w(0, 1), Payload::Write(vec![0; 100])),
        Err(SsdRequestError::PayloadSize { .. })
    ));
    assert!(matches!(
        ssd.submit(0, w(0, 1), Payload::None),
        Err(SsdRequestError::PayloadRequired)
    ));
    assert!(matches!(
        ssd.submit(0, w(0, 1), Payload::Read(vec![0; 4096])),
        Err(SsdRequestError::PayloadKind { .. })
    ));
    assert_eq!(ssd.outstanding(), 0);
    assert_eq!(ssd.next_event(), None);
}

#[test]
fn the_block_device_holds_data_from_many_threads() {
    let mut cfg = FtlConfig::paper(Variant::WriteOpt, 32 << 20);
    cfg.store = StoreKind::Memory;
    let dev = Arc::new(SsdDevice::virtual_time(Ssd::new(cfg).unwrap()));
    let n = dev.num_blocks();
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let dev = dev.clone();
            s.spawn(move || {
                let mut rng = SmallRng::seed_from_u64(t);
                for i in 0..300u64 {
                    // Each thread owns the blocks congruent to t mod 4.
                    let b = (rng.gen_range(0..n / 4)) * 4 + t;
                    let v = vec![(t * 31 + i) as u8; 4096];
                    dev.write(b, &v).unwrap();
                    let mut back = vec![0; 4096];
                    dev.read(b, &mut back).unwrap();
                    assert_eq!(back, v);
                }
            });
        }
    });
    dev.flush().unwrap();
    dev.discard(0, 8).unwrap();
    let mut z = vec![1; 8 * 4096];
    dev.read(0, &mut z).unwrap();
    assert!(z.iter().all(|&b| b == 0));
    assert!(matches!(
        dev.read(n, &mut [0; 4096]),
        Err(BlockError::OutOfRange { .. })
    ));
    assert!(matches!(
        dev.write(0, &[0; 100]),
        Err(BlockError::Misaligned { .. })
    ));
    assert!(dev.stats().host_write_pages >= 1200);
}

#[test]
fn wall_clock_takes_the_model_latency() {
    let mut cfg = FtlConfig::paper(Variant::Page, 32 << 20);
    cfg.store = StoreKind::Memory;
    let dev = SsdDevice::real_time(Ssd::new(cfg).unwrap());
    dev.write(3, &[5; 4096]).unwrap();
    dev.flush().unwrap(); // programs: >= 480 us of model time
    let t = std::time::Instant::now();
    let mut b = [0; 4096];
    dev.read(3, &mut b).unwrap(); // a flash read: >= 120 us
    assert!(t.elapsed() >= std::time::Duration::from_micros(120));
    assert_eq!(b, [5; 4096]);
}
