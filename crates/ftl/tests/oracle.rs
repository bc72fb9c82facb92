//! Model-based tests: any sequence of writes, reads, discards and flushes on
//! any scheme and scheduler returns what a HashMap oracle returns.

use std::collections::HashMap;

use proptest::prelude::*;
use ptsd_ftl::{FtlConfig, GcPolicy, Op, Payload, Request, SchedulerKind, SchemeConfig, Ssd};

mod common;
use common::{small, PAGE};

pub fn schemes() -> Vec<(SchemeConfig, SchedulerKind)> {
    let p = |entry_dirty, adaptive| SchemeConfig::Ptsd {
        clean_ratio: 0.5,
        entry_dirty,
        adaptive,
    };
    vec![
        (SchemeConfig::Page, SchedulerKind::Fifo),
        (SchemeConfig::Dftl, SchedulerKind::Fifo),
        (p(false, false), SchedulerKind::Fifo),
        (p(false, false), SchedulerKind::ReadPriority),
        (p(true, false), SchedulerKind::ReadPriority),
        (p(true, true), SchedulerKind::Fifo),
        (p(false, true), SchedulerKind::ReadPriority),
    ]
}

#[derive(Clone, Debug)]
enum Step {
    Write { lpn: u64, pages: u32, tag: u8 },
    Read { lpn: u64, pages: u32 },
    Discard { lpn: u64, pages: u32 },
    Flush,
}

fn step(logical: u64) -> impl Strategy<Value = Step> {
    let ext = (0..logical, 1u32..4).prop_map(move |(l, n)| (l.min(logical - u64::from(n)), n));
    prop_oneof![
        6 => (ext.clone(), any::<u8>()).prop_map(|((lpn, pages), tag)| Step::Write { lpn, pages, tag }),
        4 => ext.clone().prop_map(|(lpn, pages)| Step::Read { lpn, pages }),
        1 => ext.prop_map(|(lpn, pages)| Step::Discard { lpn, pages }),
        1 => Just(Step::Flush),
    ]
}

fn page_bytes(lpn: u64, tag: u8) -> Vec<u8> {
    (0..PAGE)
        .map(|i| (lpn as u8).wrapping_mul(31) ^ tag ^ (i as u8))
        .collect()
}

/// Caller-owned buffers by request id.
type Lent = HashMap<u64, Vec<u8>>;

/// Run one request to completion (queue depth 1) and return it. With
/// `external`, a read or write lends its buffer (`Payload::External`)
/// instead of handing it over, and gets it back in the returned payload.
fn run_one(ssd: &mut Ssd, now: &mut u64, req: Request, payload: Payload) -> ptsd_ftl::Done {
    run_one_with(ssd, now, req, payload, false)
}

fn run_one_with(
    ssd: &mut Ssd,
    now: &mut u64,
    req: Request,
    payload: Payload,
    external: bool,
) -> ptsd_ftl::Done {
    let mut lent = Lent::default();
    let payload = match payload {
        Payload::Write(b) | Payload::Read(b) if external => {
            lent.insert(req.id, b);
            Payload::External
        }
        p => p,
    };
    ssd.submit(*now, req, payload).unwrap();
    let mut out = Vec::new();
    while out.is_empty() {
        let t = ssd.next_event().expect("a request is outstanding");
        *now = (*now).max(t);
        ssd.advance_with(t, &mut out, &mut lent);
    }
    if let Some(b) = lent.remove(&req.id) {
        assert_eq!(out[0].payload, Payload::External);
        out[0].payload = match req.op {
            Op::Read => Payload::Read(b),
            _ => Payload::Write(b),
        };
    }
    let d = out.pop().unwrap();
    assert!(!d.failed, "request failed: {:?}", ssd.fault());
    assert!(d.completion.done_ns >= d.completion.submit_ns);
    d
}

/// `external`: every other read and write lends its buffer
/// (`Payload::External`) rather than handing it over.
fn check_against_oracle(cfg: FtlConfig, steps: &[Step], external: bool) {
    let mut ssd = Ssd::new(cfg).unwrap();
    let mut oracle: HashMap<u64, Vec<u8>> = HashMap::new();
    let mut now = 0;
    for (id, s) in steps.iter().enumerate() {
        let id = id as u64;
        if std::env::var("FTL_DEBUG").is_ok() {
            if let Err(e) = ssd.check_invariants() {
                panic!(
                    "{:?} before step {id} {s:?} (previous {:?}): {e}",
                    ssd.config().scheme,
                    steps[id as usize - 1]
                );
            }
        }
        match *s {
            Step::Write { lpn, pages, tag } => {
                let mut data = Vec::new();
                for p in lpn..lpn + u64::from(pages) {
                    let b = page_bytes(p, tag);
                    data.extend_from_slice(&b);
                    oracle.insert(p, b);
                }
                run_one_with(
                    &mut ssd,
                    &mut now,
                    Request {
                        id,
                        op: Op::Write,
                        lpn,
                        pages,
                    },
                    Payload::Write(data),
                    external && id % 2 == 1,
                );
            }
            Step::Read { lpn, pages } => {
                let d = run_one_with(
                    &mut ssd,
                    &mut now,
                    Request {
                        id,
                        op: Op::Read,
                        lpn,
                        pages,
                    },
                    Payload::Read(vec![0xAA; pages as usize * PAGE]),
                    external && id % 2 == 1,
                );
                let Payload::Read(buf) = d.payload else {
                    panic!("read payload lost")
                };
                for (i, p) in (lpn..lpn + u64::from(pages)).enumerate() {
                    let want = oracle.get(&p).cloned().unwrap_or_else(|| vec![0; PAGE]);
                    assert_eq!(
                        &buf[i * PAGE..(i + 1) * PAGE],
                        &want[..],
                        "lpn {p} after step {id}"
                    );
                }
            }
            Step::Discard { lpn, pages } => {
                for p in lpn..lpn + u64::from(pages) {
                    oracle.remove(&p);
                }
                run_one(
                    &mut ssd,
                    &mut now,
                    Request {
                        id,
                        op: Op::Discard,
                        lpn,
                        pages,
                    },
                    Payload::None,
                );
            }
            Step::Flush => {
                run_one(
                    &mut ssd,
                    &mut now,
                    Request {
                        id,
                        op: Op::Flush,
                        lpn: 0,
                        pages: 0,
                    },
                    Payload::None,
                );
            }
        }
    }
    ssd.check_invariants().unwrap();
    // Everything, once more.
    for p in 0..ssd.logical_pages() {
        let d = run_one_with(
            &mut ssd,
            &mut now,
            Request {
                id: u64::MAX,
                op: Op::Read,
                lpn: p,
                pages: 1,
            },
            Payload::Read(vec![0xAA; PAGE]),
            external && p % 2 == 1,
        );
        let Payload::Read(buf) = d.payload else {
            panic!()
        };
        let want = oracle.get(&p).cloned().unwrap_or_else(|| vec![0; PAGE]);
        assert_eq!(buf, want, "final read of lpn {p}");
    }
    if !matches!(ssd.config().scheme, SchemeConfig::Dftl) {
        assert_eq!(
            ssd.stats().programs_issued_by_reads,
            0,
            "a read programmed flash"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn every_scheme_matches_a_hashmap(steps in prop::collection::vec(step(320), 1..400), pick in 0usize..7, cb in any::<bool>(), external in any::<bool>()) {
        let (scheme, sched) = schemes()[pick];
        let policy = if cb { GcPolicy::CostBenefit } else { GcPolicy::Greedy };
        check_against_oracle(small(scheme, sched, policy), &steps, external);
    }
}

#[test]
fn long_random_run_on_every_scheme() {
    use rand::{Rng, SeedableRng};
    for (scheme, sched) in schemes() {
        let seed = 7;
        let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
        let steps: Vec<Step> = (0..3000)
            .map(|_| {
                let lpn = rng.gen_range(0..318);
                match rng.gen_range(0..20) {
                    0 => Step::Flush,
                    1 => Step::Discard { lpn, pages: 2 },
                    2..=9 => Step::Read { lpn, pages: 2 },
                    _ => Step::Write {
                        lpn,
                        pages: 2,
                        tag: rng.gen(),
                    },
                }
            })
            .collect();
        check_against_oracle(small(scheme, sched, GcPolicy::Greedy), &steps, true);
    }
}
