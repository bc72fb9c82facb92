//! `Payload::External`: the caller lends its buffers through a `DataIo`
//! and the SSD moves the bytes straight between them and its write buffer
//! or store. Same data, same timing as owned payloads; a missing buffer
//! fails that request alone.

use std::collections::HashMap;

use ptsd_ftl::{
    Completion, Done, FtlConfig, Op, Payload, Request, SchedulerKind, SchemeConfig, Ssd,
    SsdRequestError, StoreKind, Variant,
};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

mod common;
use common::PAGE;

/// Caller-owned buffers by request id.
type Lent = HashMap<u64, Vec<u8>>;

/// The tests' tiny PTSD device (see [`common::small`]), which garbage
/// collects often.
fn tiny(scheduler: SchedulerKind) -> FtlConfig {
    let scheme = SchemeConfig::Ptsd {
        clean_ratio: 0.5,
        entry_dirty: true,
        adaptive: false,
    };
    common::small(scheme, scheduler, FtlConfig::default().gc.policy)
}

fn page_bytes(lpn: u64, version: u64) -> Vec<u8> {
    (0..PAGE)
        .map(|i| (lpn as u8).wrapping_mul(31) ^ (version as u8) ^ (i as u8))
        .collect()
}

fn req(id: u64, op: Op, lpn: u64, pages: u32) -> Request {
    Request { id, op, lpn, pages }
}

/// Run everything submitted to completion.
fn drain(ssd: &mut Ssd, lent: &mut Lent) -> Vec<Done> {
    let mut out = Vec::new();
    while let Some(t) = ssd.next_event() {
        ssd.advance_with(t, &mut out, lent);
    }
    out
}

/// The host side of [`closed_loop`]: what it submitted and what each read
/// must return.
struct Host {
    rng: SmallRng,
    external: bool,
    logical: u64,
    lent: Lent,
    oracle: HashMap<u64, Vec<u8>>,
    // What each read in flight must return, fixed when it is submitted:
    // requests are served in order per LPN only for the same kind, so the
    // loop keeps at most one request per LPN in flight.
    expect: HashMap<u64, (u64, Vec<Vec<u8>>)>,
    busy: HashMap<u64, u64>,
    /// Extent of each request in flight: id -> (lpn, pages).
    extents: HashMap<u64, (u64, u32)>,
    next_id: u64,
}

impl Host {
    /// Submit the next random request on an extent no request in flight
    /// touches.
    fn submit_one(&mut self, ssd: &mut Ssd, now: u64) {
        let id = self.next_id;
        self.next_id += 1;
        let r = self.rng.gen_range(0..100);
        let pages = if r >= 98 {
            0
        } else {
            self.rng.gen_range(1..=3u32)
        };
        let lpn = loop {
            let lpn = self.rng.gen_range(0..self.logical - 3);
            if (lpn..lpn + u64::from(pages)).all(|p| !self.busy.contains_key(&p)) {
                break lpn;
            }
        };
        for p in lpn..lpn + u64::from(pages) {
            self.busy.insert(p, id);
        }
        let (op, payload) = if r < 45 {
            let mut data = Vec::new();
            for p in lpn..lpn + u64::from(pages) {
                let b = page_bytes(p, id);
                data.extend_from_slice(&b);
                self.oracle.insert(p, b);
            }
            (Op::Write, Payload::Write(data))
        } else if r < 95 {
            let want = (lpn..lpn + u64::from(pages))
                .map(|p| {
                    self.oracle
                        .get(&p)
                        .cloned()
                        .unwrap_or_else(|| vec![0; PAGE])
                })
                .collect();
            self.expect.insert(id, (lpn, want));
            (Op::Read, Payload::Read(vec![0xAA; pages as usize * PAGE]))
        } else if r < 98 {
            for p in lpn..lpn + u64::from(pages) {
                self.oracle.remove(&p);
            }
            (Op::Discard, Payload::None)
        } else {
            (Op::Flush, Payload::None)
        };
        let payload = match payload {
            Payload::Write(b) | Payload::Read(b) if self.external => {
                self.lent.insert(id, b);
                Payload::External
            }
            p => p,
        };
        ssd.submit(now, req(id, op, lpn, pages), payload).unwrap();
        self.extents.insert(id, (lpn, pages));
    }
}

/// One seeded closed-loop run at queue depth 8 (writes of 1–3 pages,
/// reads, a few discards and flushes), checking every read against an
/// oracle. Returns every completion and the SSD's final counters.
fn closed_loop(scheduler: SchedulerKind, external: bool, seed: u64) -> (Vec<Completion>, String) {
    let mut ssd = Ssd::new(tiny(scheduler)).unwrap();
    let logical = ssd.logical_pages();
    let mut host = Host {
        rng: SmallRng::seed_from_u64(seed),
        external,
        logical,
        lent: Lent::default(),
        oracle: HashMap::new(),
        expect: HashMap::new(),
        busy: HashMap::new(),
        extents: HashMap::new(),
        next_id: 0,
    };
    let mut completions = Vec::new();
    let total = 3000u64;
    let mut now = 0u64;
    for _ in 0..8 {
        host.submit_one(&mut ssd, now);
    }
    let mut done = Vec::new();
    let mut finished = 0;
    while let Some(t) = ssd.next_event() {
        now = now.max(t);
        ssd.advance_with(t, &mut done, &mut host.lent);
        for d in done.drain(..) {
            assert!(
                !d.failed,
                "seed {seed}: {:?} failed: {:?}",
                d.completion, d.error
            );
            let id = d.completion.id;
            let buf = match d.payload {
                Payload::External => host.lent.remove(&id).expect("lent buffer"),
                Payload::Read(b) | Payload::Write(b) => b,
                Payload::None => Vec::new(),
            };
            if let Some((lpn, want)) = host.expect.remove(&id) {
                for (i, w) in want.iter().enumerate() {
                    assert_eq!(
                        &buf[i * PAGE..(i + 1) * PAGE],
                        &w[..],
                        "seed {seed}: read {id} of lpn {}",
                        lpn + i as u64
                    );
                }
            }
            let (lpn, pages) = host.extents.remove(&id).unwrap();
            for p in lpn..lpn + u64::from(pages) {
                host.busy.remove(&p);
            }
            completions.push(d.completion);
            finished += 1;
            if host.next_id < total {
                host.submit_one(&mut ssd, now);
            }
        }
    }
    assert_eq!(finished, total);
    assert!(ssd.stats().gc_data_runs > 0, "seed {seed}: no GC ran");
    ssd.check_invariants().unwrap();
    // Everything once more, half through lent buffers, half owned.
    for p in 0..logical {
        let want = host
            .oracle
            .get(&p)
            .cloned()
            .unwrap_or_else(|| vec![0; PAGE]);
        let payload = if p % 2 == 0 {
            host.lent.insert(p, vec![0xAA; PAGE]);
            Payload::External
        } else {
            Payload::Read(vec![0xAA; PAGE])
        };
        ssd.submit(now, req(p, Op::Read, p, 1), payload).unwrap();
        let d = drain(&mut ssd, &mut host.lent).pop().unwrap();
        assert!(!d.failed);
        now = now.max(d.completion.done_ns);
        let got = match d.payload {
            Payload::Read(b) => b,
            _ => host.lent.remove(&p).unwrap(),
        };
        assert_eq!(got, want, "seed {seed}: final read of lpn {p}");
    }
    ssd.refresh_stats();
    (completions, format!("{:?}", ssd.stats()))
}

#[test]
fn lent_buffers_keep_the_data_and_the_timing_of_owned_ones() {
    for scheduler in [SchedulerKind::Fifo, SchedulerKind::ReadPriority] {
        for seed in [1, 2] {
            let owned = closed_loop(scheduler, false, seed);
            let lent = closed_loop(scheduler, true, seed);
            assert_eq!(
                owned.0, lent.0,
                "seed {seed} {scheduler:?}: completions differ"
            );
            assert_eq!(
                owned.1, lent.1,
                "seed {seed} {scheduler:?}: counters differ"
            );
        }
    }
}

/// The paper's write-optimised 64 MiB SSD, keeping its data in memory.
fn paper_ssd_in_memory() -> Ssd {
    let mut cfg = FtlConfig::paper(Variant::WriteOpt, 64 << 20);
    cfg.store = StoreKind::Memory;
    Ssd::new(cfg).unwrap()
}

#[test]
fn a_write_from_a_lent_buffer_reads_back_from_the_write_buffer_and_from_flash() {
    let mut ssd = paper_ssd_in_memory();
    let page = ssd.page_size() as usize;
    let mut lent = Lent::default();
    let data: Vec<u8> = (0..2 * page).map(|i| (i % 251) as u8).collect();
    lent.insert(1, data.clone());
    ssd.submit(0, req(1, Op::Write, 10, 2), Payload::External)
        .unwrap();
    let done = drain(&mut ssd, &mut lent);
    assert!(!done[0].failed);
    assert_eq!(done[0].payload, Payload::External);
    // Still in the write buffer: no flash read.
    lent.insert(2, vec![0; 2 * page]);
    let t = ssd.idle_at();
    ssd.submit(t, req(2, Op::Read, 10, 2), Payload::External)
        .unwrap();
    assert!(!drain(&mut ssd, &mut lent)[0].failed);
    assert_eq!(lent[&2], data);
    assert_eq!(ssd.stats().buffer_read_hits, 2);
    assert_eq!(ssd.stats().flash_data_reads, 0);
    // From flash after a flush, lent and owned.
    let t = ssd.idle_at();
    ssd.submit(t, req(3, Op::Flush, 0, 0), Payload::None)
        .unwrap();
    drain(&mut ssd, &mut lent);
    lent.insert(4, vec![0; 2 * page]);
    let t = ssd.idle_at();
    ssd.submit(t, req(4, Op::Read, 10, 2), Payload::External)
        .unwrap();
    ssd.submit(t, req(5, Op::Read, 10, 2), Payload::Read(vec![0; 2 * page]))
        .unwrap();
    let done = drain(&mut ssd, &mut lent);
    assert!(done.iter().all(|d| !d.failed));
    assert_eq!(ssd.stats().flash_data_reads, 4);
    assert_eq!(lent[&4], data);
    let owned = done.iter().find(|d| d.completion.id == 5).unwrap();
    assert_eq!(owned.payload, Payload::Read(data.clone()));
    // A page next to them was never written: zeroes.
    lent.insert(6, vec![0xEE; page]);
    let t = ssd.idle_at();
    ssd.submit(t, req(6, Op::Read, 12, 1), Payload::External)
        .unwrap();
    drain(&mut ssd, &mut lent);
    assert_eq!(lent[&6], vec![0; page]);
}

#[test]
fn a_missing_or_wrong_sized_buffer_fails_only_its_request() {
    let mut ssd = paper_ssd_in_memory();
    let page = ssd.page_size() as usize;
    let mut lent = Lent::default();
    lent.insert(1, vec![1; page]);
    ssd.submit(0, req(1, Op::Write, 3, 1), Payload::External)
        .unwrap();
    // No buffer for 2, a short one for 3, a write's buffer too long for 4.
    ssd.submit(0, req(2, Op::Write, 4, 1), Payload::External)
        .unwrap();
    lent.insert(3, vec![0; page - 1]);
    ssd.submit(0, req(3, Op::Read, 3, 1), Payload::External)
        .unwrap();
    lent.insert(4, vec![9; 2 * page]);
    ssd.submit(0, req(4, Op::Write, 5, 1), Payload::External)
        .unwrap();
    ssd.submit(0, req(5, Op::Read, 4, 1), Payload::External)
        .unwrap();
    let done = drain(&mut ssd, &mut lent);
    let by_id: HashMap<u64, &Done> = done.iter().map(|d| (d.completion.id, d)).collect();
    assert!(!by_id[&1].failed);
    for id in [2, 5] {
        assert!(by_id[&id].failed);
        assert!(matches!(
            by_id[&id].error.as_deref(),
            Some(&SsdRequestError::BufferMissing { id: i, .. }) if i == id
        ));
    }
    for id in [3, 4] {
        assert!(by_id[&id].failed);
        assert!(matches!(
            by_id[&id].error.as_deref(),
            Some(SsdRequestError::PayloadSize { .. })
        ));
    }
    assert_eq!(lent[&3], vec![0; page - 1], "a refused read wrote nothing");
    // The device goes on, and the refused writes changed nothing.
    assert_eq!(ssd.fault(), None);
    assert_eq!(ssd.stats().host_write_pages, 1);
    lent.insert(6, vec![0xEE; 3 * page]);
    let t = ssd.idle_at();
    ssd.submit(t, req(6, Op::Read, 3, 3), Payload::External)
        .unwrap();
    let done = drain(&mut ssd, &mut lent);
    assert!(!done[0].failed);
    let mut want = vec![1; page];
    want.resize(3 * page, 0);
    assert_eq!(lent[&6], want);
    // Without `advance_with` there are no lent buffers at all.
    let t = ssd.idle_at();
    ssd.submit(t, req(7, Op::Read, 3, 1), Payload::External)
        .unwrap();
    let mut out = Vec::new();
    while let Some(t) = ssd.next_event() {
        ssd.advance(t, &mut out);
    }
    assert!(out[0].failed);
    assert!(matches!(
        out[0].error.as_deref(),
        Some(SsdRequestError::BufferMissing { .. })
    ));
    assert_eq!(ssd.fault(), None);
    // Only reads and writes can lend a buffer.
    for op in [Op::Discard, Op::Flush] {
        assert!(matches!(
            ssd.submit(t, req(8, op, 0, 1), Payload::External),
            Err(SsdRequestError::PayloadKind { .. })
        ));
    }
}

#[test]
fn a_timing_only_ssd_fills_lent_read_buffers_with_zeroes() {
    let mut ssd = Ssd::new(FtlConfig::paper(Variant::WriteOpt, 64 << 20)).unwrap();
    let page = ssd.page_size() as usize;
    let mut lent = Lent::default();
    lent.insert(1, vec![7; page]);
    lent.insert(2, vec![0xEE; page]);
    ssd.submit(0, req(1, Op::Write, 0, 1), Payload::External)
        .unwrap();
    ssd.submit(0, req(2, Op::Read, 0, 1), Payload::External)
        .unwrap();
    let done = drain(&mut ssd, &mut lent);
    assert!(done.iter().all(|d| !d.failed));
    assert_eq!(lent[&2], vec![0; page]);
}
