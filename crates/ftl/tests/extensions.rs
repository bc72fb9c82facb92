//! Custom parts through `FtlConfig`: the engine really asks them (GC
//! victims, queue order, counters), and built-ins stay as they were.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ptsd_ftl::mapping::{MapAction, MapGeometry, MappingScheme, SchemeFactory};
use ptsd_ftl::policy::{BlockView, Candidate, Greedy, Scheduler, VictimPolicy};
use ptsd_ftl::{FtlConfig, Op, Payload, Request, SchemeConfig, Ssd, Variant};

/// Greedy, counting the victims it chose (shared by all its copies).
#[derive(Debug, Clone)]
struct Counting(Arc<AtomicU64>);

impl VictimPolicy for Counting {
    fn name(&self) -> String {
        "counting".into()
    }
    fn victim(&mut self, blocks: &BlockView<'_>, chip: u32, now_ns: u64) -> Option<u32> {
        let v = Greedy.victim(blocks, chip, now_ns);
        if let Some(b) = v {
            assert!(blocks.collectable(b) && blocks.chip_blocks(chip).contains(&b));
            self.0.fetch_add(1, Ordering::Relaxed);
        }
        v
    }
    fn clone_box(&self) -> Box<dyn VictimPolicy> {
        Box::new(self.clone())
    }
}

/// Everything but reads first.
#[derive(Debug)]
struct WritesFirst;

impl Scheduler for WritesFirst {
    fn name(&self) -> String {
        "writes-first".into()
    }
    fn read_first(&self, _: &Candidate, _: &Candidate) -> bool {
        false
    }
    fn clone_box(&self) -> Box<dyn Scheduler> {
        Box::new(WritesFirst)
    }
}

fn drive(ssd: &mut Ssd, reqs: &[Request]) -> Vec<ptsd_ftl::Completion> {
    for r in reqs {
        ssd.submit(0, *r, Payload::None).unwrap();
    }
    let mut done = Vec::new();
    while let Some(t) = ssd.next_event() {
        ssd.advance(t, &mut done);
    }
    done.into_iter().map(|d| d.completion).collect()
}

fn random_writes(n: u64, pages: u64) -> Vec<Request> {
    (0..n)
        .map(|id| Request {
            id,
            op: Op::Write,
            lpn: id * 7919 % pages,
            pages: 1,
        })
        .collect()
}

#[test]
fn a_custom_gc_policy_chooses_every_victim() {
    let count = Arc::new(AtomicU64::new(0));
    let cfg =
        FtlConfig::paper(Variant::Dftl, 64 << 20).with_gc_policy(Arc::new(Counting(count.clone())));
    let mut ssd = Ssd::new(cfg).unwrap();
    let pages = ssd.logical_pages();
    for round in 0..3 {
        let reqs: Vec<Request> = random_writes(pages, pages)
            .into_iter()
            .map(|mut r| {
                r.id += round * pages;
                r
            })
            .collect();
        drive(&mut ssd, &reqs);
    }
    let s = ssd.stats();
    assert!(s.gc_data_runs > 0);
    assert_eq!(
        count.load(Ordering::Relaxed),
        s.gc_data_runs + s.gc_map_runs
    );
    ssd.check_invariants().unwrap();
}

#[test]
fn a_custom_scheduler_orders_the_queue() {
    // A read first, then more writes than the write buffer holds: FIFO
    // serves the read at once; writes-first only after every write, which
    // wait for room in the buffer.
    let mut reqs = vec![Request {
        id: 0,
        op: Op::Read,
        lpn: 5,
        pages: 1,
    }];
    reqs.extend(random_writes(200, 16384).into_iter().map(|mut r| {
        r.id += 1;
        r
    }));
    let read_dispatch = |cfg: FtlConfig| {
        let mut ssd = Ssd::new(cfg).unwrap();
        let c = drive(&mut ssd, &reqs);
        let read = c.iter().find(|c| c.op == Op::Read).unwrap().dispatch_ns;
        let last_write = c
            .iter()
            .filter(|c| c.op == Op::Write)
            .map(|c| c.dispatch_ns)
            .max();
        (read, last_write.unwrap())
    };
    let base = FtlConfig::paper(Variant::Dftl, 64 << 20);
    let (fifo_read, fifo_last_write) = read_dispatch(base.clone());
    assert_eq!(fifo_read, 0);
    assert!(fifo_last_write > 0);
    let (read, last_write) = read_dispatch(base.with_scheduler(Arc::new(WritesFirst)));
    assert!(
        read >= last_write && read > 0,
        "read at {read}, last write at {last_write}"
    );
}

/// DFTL counting its lookups as a scheme counter.
#[derive(Debug)]
struct Counted;

struct CountedScheme {
    inner: Box<dyn MappingScheme>,
    lookups: u64,
}

impl MappingScheme for CountedScheme {
    fn read(&mut self, lpn: u32, mpn: u32, acts: &mut Vec<MapAction>) -> bool {
        self.lookups += 1;
        self.inner.read(lpn, mpn, acts)
    }
    fn write(&mut self, lpn: u32, mpn: u32, acts: &mut Vec<MapAction>) -> bool {
        self.lookups += 1;
        self.inner.write(lpn, mpn, acts)
    }
    fn gc_update(&mut self, mpn: u32, lpns: &[u32], acts: &mut Vec<MapAction>) {
        self.inner.gc_update(mpn, lpns, acts)
    }
    fn write_back_all(&mut self, acts: &mut Vec<MapAction>) {
        self.inner.write_back_all(acts)
    }
    fn memory_bytes(&self) -> u64 {
        self.inner.memory_bytes()
    }
    fn counters(&self, out: &mut Vec<(&'static str, u64)>) {
        out.push(("lookups", self.lookups));
    }
    fn clone_box(&self) -> Box<dyn MappingScheme> {
        Box::new(CountedScheme {
            inner: self.inner.clone_box(),
            lookups: self.lookups,
        })
    }
}

impl SchemeFactory for Counted {
    fn name(&self) -> String {
        "counted".into()
    }
    fn check(&self, g: &MapGeometry) -> Result<(), ptsd_ftl::ConfigError> {
        SchemeConfig::Dftl.check(g)
    }
    fn build(&self, g: &MapGeometry) -> Box<dyn MappingScheme> {
        Box::new(CountedScheme {
            inner: SchemeConfig::Dftl.build(g),
            lookups: 0,
        })
    }
}

#[test]
fn scheme_counters_reach_the_stats_per_phase_and_built_ins_have_none() {
    let base = FtlConfig::paper(Variant::Dftl, 64 << 20);
    let mut ssd = Ssd::new(base.clone().with_scheme(Arc::new(Counted))).unwrap();
    let mut plain = Ssd::new(base).unwrap();
    let reqs: Vec<Request> = (0..100)
        .map(|id| Request {
            id,
            op: Op::Read,
            lpn: id * 31,
            pages: 1,
        })
        .collect();
    drive(&mut ssd, &reqs);
    drive(&mut plain, &reqs);
    ssd.refresh_stats();
    plain.refresh_stats();
    assert_eq!(ssd.stats().scheme["lookups"], 100);
    // Same model as the built-in it wraps: the same counters otherwise.
    let mut s = ssd.stats().clone();
    s.scheme.clear();
    assert_eq!(&s, plain.stats());
    assert!(!serde_json::to_string(plain.stats())
        .unwrap()
        .contains("scheme"));
    ssd.reset_stats();
    drive(&mut ssd, &reqs[..10]);
    ssd.refresh_stats();
    assert_eq!(ssd.stats().scheme["lookups"], 10, "counted since the reset");
    let json = serde_json::to_string(ssd.stats()).unwrap();
    assert!(json.contains(r#""scheme":{"lookups":10}"#), "{json}");
}
