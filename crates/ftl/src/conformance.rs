//! The conformance kit: one call checks a mapping scheme (with, optionally,
//! a GC victim policy and a scheduler) the way the crate's own property
//! tests check the built-ins.
//!
//! On a tiny device (512 B pages, 4 chips of 24 eight-page blocks, 320
//! logical pages in 3 mapping pages, a 4-page write buffer, a mapping
//! budget of the GTD plus two mapping pages: GC and cache misses all the
//! time), for each of `cases` seeded cases:
//!
//! 1. **oracle**: random writes, reads, discards and flushes of 1 to 3
//!    pages read back what a `HashMap` says, before and after a full
//!    read-back; the scheme's modelled DRAM stays within the budget after
//!    every request; the engine's invariants hold every 64 requests and at
//!    the end; a snapshot (`Ssd::try_clone`, i.e. the scheme's `clone_box`)
//!    taken midway replays the next requests with the same completion
//!    times as the original;
//! 2. **power cut**: the same on a persistent image over a
//!    [`CrashDevice`], with power cuts (any subset of unflushed device
//!    writes kept) and clean reopens: every page holds its value as of the
//!    last completed flush or one written after it, and after a clean
//!    reopen exactly its last value.
//!
//! A failure names the check and its seed; [`Kit::seed`] (or the
//! environment variable `PTSD_KIT_SEED`) replays that one case.
//!
//! ```
//! use std::sync::Arc;
//! use ptsd_ftl::conformance::Kit;
//! use ptsd_ftl::SchemeConfig;
//!
//! let report = Kit::new(Arc::new(SchemeConfig::Dftl)).cases(2).run().unwrap();
//! assert!(report.gc_runs > 0 && report.map_reads > 0);
//! ```

use std::collections::{HashMap, HashSet};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use ptsd_blockdev::CrashDevice;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use thiserror::Error;

use crate::config::{FtlConfig, MAP_ENTRY_BYTES};
use crate::mapping::SchemeFactory;
use crate::policy::{Scheduler, VictimPolicy};
use crate::request::{Op, Request};
use crate::ssd::{Done, Payload, Ssd};

/// Page size of the kit's device.
pub const PAGE: usize = 512;
/// Logical pages of the kit's device.
pub const LOGICAL: u64 = 320;

/// A check the kit runs on a scheme; what a failure names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Check {
    /// The device would not build (e.g. the scheme refused the budget).
    Device,
    /// Reads against a `HashMap`, memory budget, invariants, snapshots.
    Oracle,
    /// Power cuts and reopens of a persistent image.
    PowerCut,
}

/// A failed check: which, with what seed, and what went wrong.
#[derive(Debug, Error)]
#[error("{scheme}: the {check:?} check failed with seed {seed}: {message}\n  replay this case: PTSD_KIT_SEED={seed} (or Kit::seed({seed}))")]
pub struct KitFailure {
    /// The scheme's name.
    pub scheme: String,
    /// Which check.
    pub check: Check,
    /// The case's seed.
    pub seed: u64,
    /// What went wrong.
    pub message: String,
}

/// What a passing run exercised (summed over cases and checks).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KitReport {
    /// Cases run (each runs every check).
    pub cases: u32,
    /// Host requests completed.
    pub requests: u64,
    /// Mapping-page reads and programs the scheme asked for.
    pub map_reads: u64,
    /// See `map_reads`.
    pub map_programs: u64,
    /// GC runs (data and mapping blocks).
    pub gc_runs: u64,
    /// Power cuts recovered from.
    pub cuts: u64,
}

/// The kit for one scheme (and optional GC policy and scheduler).
#[derive(Clone, Debug)]
pub struct Kit {
    scheme: Arc<dyn SchemeFactory>,
    gc_policy: Option<Arc<dyn VictimPolicy>>,
    scheduler: Option<Arc<dyn Scheduler>>,
    budget: Option<u64>,
    full_map: bool,
    cases: u32,
    steps: usize,
    only: Option<u64>,
}

impl Kit {
    /// The kit for `scheme`, with the built-in greedy GC and FIFO, 8 cases
    /// of 400 requests (`PTSD_KIT_CASES` overrides the count), or only the
    /// case `PTSD_KIT_SEED` names.
    pub fn new(scheme: Arc<dyn SchemeFactory>) -> Self {
        let env = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
        Kit {
            scheme,
            gc_policy: None,
            scheduler: None,
            budget: None,
            full_map: false,
            cases: env("PTSD_KIT_CASES").map_or(8, |n| n.clamp(1, 1 << 20) as u32),
            steps: 400,
            only: env("PTSD_KIT_SEED"),
        }
    }

    /// Check with this GC victim policy.
    pub fn gc_policy(mut self, policy: Arc<dyn VictimPolicy>) -> Self {
        self.gc_policy = Some(policy);
        self
    }

    /// Check with this scheduler.
    pub fn scheduler(mut self, scheduler: Arc<dyn Scheduler>) -> Self {
        self.scheduler = Some(scheduler);
        self
    }

    /// Mapping DRAM budget in bytes (default: the GTD plus two 512 B
    /// mapping pages, 1036 B).
    pub fn map_budget(mut self, bytes: u64) -> Self {
        self.budget = Some(bytes);
        self
    }

    /// The full page map's budget (for a scheme that keeps it all in DRAM).
    pub fn full_map_budget(mut self) -> Self {
        self.full_map = true;
        self
    }

    /// Number of seeded cases (`PTSD_KIT_CASES`, when set, wins: CI can
    /// run more without editing the tests).
    pub fn cases(mut self, n: u32) -> Self {
        let env = std::env::var("PTSD_KIT_CASES").ok();
        self.cases = env.and_then(|v| v.parse().ok()).unwrap_or(n).max(1);
        self
    }

    /// Requests per case and check.
    pub fn steps(mut self, n: usize) -> Self {
        self.steps = n.max(1);
        self
    }

    /// Run only the case with this seed (a failure's).
    pub fn seed(mut self, seed: u64) -> Self {
        self.only = Some(seed);
        self
    }

    /// The kit's device for this scheme: data in memory, or (`persistent`)
    /// no store, for [`Ssd::open_on`] over an image device.
    pub fn device(&self, persistent: bool) -> FtlConfig {
        let mut cfg = FtlConfig {
            page_size: PAGE as u32,
            channels: 2,
            chips_per_channel: 2,
            blocks_per_chip: 24,
            pages_per_block: 8,
            logical_bytes: Some(LOGICAL * PAGE as u64),
            op_ratio: 0.1,
            write_buffer_pages: 4,
            store: if persistent {
                crate::StoreKind::None
            } else {
                crate::StoreKind::Memory
            },
            ..FtlConfig::default()
        };
        let gtd = LOGICAL.div_ceil((PAGE as u64) / MAP_ENTRY_BYTES) * MAP_ENTRY_BYTES;
        cfg.map_memory_bytes = if self.full_map {
            None
        } else {
            Some(self.budget.unwrap_or(gtd + 2 * PAGE as u64))
        };
        cfg.custom.scheme = Some(self.scheme.clone());
        cfg.custom.gc_policy = self.gc_policy.clone();
        cfg.custom.scheduler = self.scheduler.clone();
        cfg
    }

    /// Run every check on every case; the first failure stops the run.
    pub fn run(&self) -> Result<KitReport, KitFailure> {
        let seeds: Vec<u64> = match self.only {
            Some(s) => vec![s],
            None => (0..u64::from(self.cases))
                .map(|i| 0x5eed_0000 + i * 7919)
                .collect(),
        };
        let mut report = KitReport::default();
        for seed in seeds {
            let fail = |check, message| KitFailure {
                scheme: self.scheme.name(),
                check,
                seed,
                message,
            };
            for cfg in [self.device(false), self.device(true)] {
                cfg.validate()
                    .map_err(|e| fail(Check::Device, format!("{e} (see Kit::map_budget)")))?;
            }
            for check in [Check::Oracle, Check::PowerCut] {
                let r = catch_unwind(AssertUnwindSafe(|| match check {
                    Check::PowerCut => self.power_cut(seed),
                    _ => self.oracle(seed),
                }));
                let r = match r {
                    Ok(r) => r,
                    Err(p) => Err(format!(
                        "panicked: {}",
                        p.downcast_ref::<String>()
                            .map(String::as_str)
                            .or_else(|| p.downcast_ref::<&str>().copied())
                            .unwrap_or("(no message)")
                    )),
                };
                let got = r.map_err(|m| fail(check, m))?;
                report.requests += got.requests;
                report.map_reads += got.map_reads;
                report.map_programs += got.map_programs;
                report.gc_runs += got.gc_runs;
                report.cuts += got.cuts;
            }
            report.cases += 1;
        }
        Ok(report)
    }

    /// [`run`](Self::run), panicking with the failure (seed included): what
    /// a test calls.
    pub fn check(&self) -> KitReport {
        match self.run() {
            Ok(r) => r,
            Err(f) => panic!("{f}"),
        }
    }

    fn oracle(&self, seed: u64) -> Result<KitReport, String> {
        let cfg = self.device(false);
        let budget = cfg.map_budget_bytes();
        let mut ssd = Ssd::new(cfg).map_err(|e| e.to_string())?;
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut oracle: HashMap<u64, Vec<u8>> = HashMap::new();
        let mut now = 0;
        let mut version = 0;
        let mut snapshot = None;
        for i in 0..self.steps {
            let req = random_request(&mut rng, i as u64, false);
            let payload = match req.op {
                Op::Write => {
                    let mut data = Vec::new();
                    for p in req.lpn..req.lpn + u64::from(req.pages) {
                        version += 1;
                        let v = pattern(p, version);
                        data.extend_from_slice(&v);
                        oracle.insert(p, v);
                    }
                    Payload::Write(data)
                }
                Op::Read => Payload::Read(vec![0xEE; req.pages as usize * PAGE]),
                Op::Discard => {
                    for p in req.lpn..req.lpn + u64::from(req.pages) {
                        oracle.remove(&p);
                    }
                    Payload::None
                }
                Op::Flush => Payload::None,
            };
            if i == self.steps / 2 {
                snapshot = Some((ssd.try_clone().ok_or("a memory device must clone")?, now));
            }
            let d = run_one(&mut ssd, &mut now, req, payload)?;
            if let Payload::Read(buf) = &d.payload {
                compare(&oracle, req.lpn, buf, &format!("request {i}"))?;
            }
            let mem = ssd.map_memory_bytes();
            if mem > budget {
                return Err(format!(
                    "after request {i} ({req:?}) the scheme models {mem} B of mapping DRAM, over its {budget} B budget"
                ));
            }
            if i % 64 == 63 {
                ssd.check_invariants()
                    .map_err(|e| format!("after request {i}: {e}"))?;
            }
        }
        ssd.check_invariants()
            .map_err(|e| format!("at the end: {e}"))?;
        for lpn in 0..LOGICAL {
            let req = Request {
                id: u64::MAX,
                op: Op::Read,
                lpn,
                pages: 1,
            };
            let d = run_one(&mut ssd, &mut now, req, Payload::Read(vec![0xEE; PAGE]))?;
            if let Payload::Read(buf) = &d.payload {
                compare(&oracle, lpn, buf, "the final read-back")?;
            }
        }
        if let Some((mut copy, mut t)) = snapshot {
            // The same requests again on the copy and on a second copy of
            // it: the same completion times (the scheme's `clone_box` kept
            // everything, and the copies share nothing).
            let mut twin = copy.try_clone().ok_or("a memory device must clone")?;
            let mut t2 = t;
            let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xc10e);
            for i in 0..self.steps.min(100) {
                let req = random_request(&mut rng, i as u64, false);
                let payload = |req: &Request| match req.op {
                    Op::Write => Payload::Write(vec![7; req.pages as usize * PAGE]),
                    Op::Read => Payload::Read(vec![0; req.pages as usize * PAGE]),
                    _ => Payload::None,
                };
                let a = run_one(&mut copy, &mut t, req, payload(&req))?;
                let b = run_one(&mut twin, &mut t2, req, payload(&req))?;
                if a.completion != b.completion || a.payload != b.payload {
                    return Err(format!(
                        "two snapshots of one device served request {i} ({req:?}) differently: {:?} vs {:?}",
                        a.completion, b.completion
                    ));
                }
            }
        }
        Ok(summary(&ssd, self.steps as u64 + LOGICAL, 0))
    }

    fn power_cut(&self, seed: u64) -> Result<KitReport, String> {
        let cfg = self.device(true);
        let blocks = Ssd::image_blocks(&cfg, PAGE as u32);
        let mut dev = Arc::new(CrashDevice::new(PAGE as u32, blocks).map_err(|e| e.to_string())?);
        let open = |dev: &Arc<CrashDevice>| {
            Ssd::open_on(cfg.clone(), Box::new(dev.clone())).map_err(|e| e.to_string())
        };
        let mut ssd = open(&dev)?;
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x9c07);
        let zero = vec![0u8; PAGE];
        // Current values, values as of the last flush, values since.
        let mut now_v: HashMap<u64, Vec<u8>> = HashMap::new();
        let mut flushed: HashMap<u64, Vec<u8>> = HashMap::new();
        let mut since: HashMap<u64, HashSet<Vec<u8>>> = HashMap::new();
        let (mut now, mut version, mut cuts) = (0u64, 0u64, 0u64);
        let mut total = summary(&ssd, 0, 0);
        for i in 0..self.steps {
            let roll = rng.gen_range(0..100);
            if roll < 3 || (roll < 5 && i + 1 == self.steps) {
                // Power cut: any subset of the unflushed writes survives.
                let cut_seed = rng.gen();
                dev.crash(cut_seed);
                add(&mut total, &summary(&ssd, 0, 0));
                drop(ssd);
                dev = Arc::new(dev.reopen());
                ssd = open(&dev).map_err(|e| format!("reopen after cut {cut_seed}: {e}"))?;
                ssd.check_invariants()
                    .map_err(|e| format!("after cut {cut_seed}: {e}"))?;
                now = 0;
                cuts += 1;
                let got = read_all(&mut ssd, &mut now)?;
                for (lpn, g) in got.iter().enumerate() {
                    let lpn = lpn as u64;
                    let before = flushed.get(&lpn).unwrap_or(&zero);
                    if g != before && !since.get(&lpn).is_some_and(|s| s.contains(g)) {
                        return Err(format!(
                            "request {i}: after cut {cut_seed} lpn {lpn} holds a value it never had since the last flush"
                        ));
                    }
                }
                now_v = got
                    .into_iter()
                    .enumerate()
                    .filter(|(_, g)| *g != zero)
                    .map(|(l, g)| (l as u64, g))
                    .collect();
                flushed = now_v.clone();
                since.clear();
                continue;
            }
            if roll < 5 {
                ssd.shutdown().map_err(|e| format!("shutdown: {e}"))?;
                add(&mut total, &summary(&ssd, 0, 0));
                drop(ssd);
                ssd = open(&dev).map_err(|e| format!("clean reopen: {e}"))?;
                now = 0;
                let got = read_all(&mut ssd, &mut now)?;
                for (lpn, g) in got.iter().enumerate() {
                    if g != now_v.get(&(lpn as u64)).unwrap_or(&zero) {
                        return Err(format!("request {i}: a clean reopen lost lpn {lpn}"));
                    }
                }
                flushed = now_v.clone();
                since.clear();
                continue;
            }
            let req = random_request(&mut rng, i as u64, true);
            let payload = match req.op {
                Op::Write => {
                    let mut data = Vec::new();
                    for p in req.lpn..req.lpn + u64::from(req.pages) {
                        version += 1;
                        let v = pattern(p, version);
                        data.extend_from_slice(&v);
                        since.entry(p).or_default().insert(v.clone());
                        now_v.insert(p, v);
                    }
                    Payload::Write(data)
                }
                Op::Discard => {
                    for p in req.lpn..req.lpn + u64::from(req.pages) {
                        since.entry(p).or_default().insert(zero.clone());
                        now_v.remove(&p);
                    }
                    Payload::None
                }
                _ => Payload::None,
            };
            run_one(&mut ssd, &mut now, req, payload)?;
            if req.op == Op::Flush {
                flushed = now_v.clone();
                since.clear();
            }
        }
        add(&mut total, &summary(&ssd, self.steps as u64, cuts));
        Ok(total)
    }
}

/// A random request: 6 writes, 4 reads (not with `no_reads`), 1 discard,
/// 1 flush in 12, of 1 to 3 pages.
fn random_request(rng: &mut ChaCha8Rng, id: u64, no_reads: bool) -> Request {
    let pages = rng.gen_range(1..4u32);
    let lpn = rng.gen_range(0..=LOGICAL - u64::from(pages));
    let op = match rng.gen_range(0..12) {
        0..=5 => Op::Write,
        6..=9 if no_reads => Op::Write,
        6..=9 => Op::Read,
        10 => Op::Discard,
        _ => Op::Flush,
    };
    match op {
        Op::Flush => Request {
            id,
            op,
            lpn: 0,
            pages: 0,
        },
        _ => Request { id, op, lpn, pages },
    }
}

/// Page `lpn`'s content at `version` (both recorded in it).
fn pattern(lpn: u64, version: u64) -> Vec<u8> {
    let mut v = vec![(version as u8) | 1; PAGE];
    v[..8].copy_from_slice(&lpn.to_le_bytes());
    v[8..16].copy_from_slice(&version.to_le_bytes());
    v
}

/// Whether `buf` (pages from `lpn`) holds what `oracle` says.
fn compare(oracle: &HashMap<u64, Vec<u8>>, lpn: u64, buf: &[u8], when: &str) -> Result<(), String> {
    let zero = vec![0u8; PAGE];
    for (i, got) in buf.chunks(PAGE).enumerate() {
        let p = lpn + i as u64;
        if got != oracle.get(&p).unwrap_or(&zero).as_slice() {
            return Err(format!("{when}: lpn {p} reads back other data"));
        }
    }
    Ok(())
}

/// Run one request to completion (queue depth 1).
fn run_one(ssd: &mut Ssd, now: &mut u64, req: Request, payload: Payload) -> Result<Done, String> {
    ssd.submit(*now, req, payload)
        .map_err(|e| format!("{req:?} refused: {e}"))?;
    let mut out = Vec::new();
    while out.is_empty() {
        let t = ssd
            .next_event()
            .ok_or_else(|| format!("{req:?} never completed"))?;
        *now = (*now).max(t);
        ssd.advance(t, &mut out);
    }
    let d = out.pop().ok_or("no completion")?;
    if d.failed {
        return Err(format!("{req:?} failed: {:?} {:?}", d.error, ssd.fault()));
    }
    Ok(d)
}

fn read_all(ssd: &mut Ssd, now: &mut u64) -> Result<Vec<Vec<u8>>, String> {
    (0..LOGICAL)
        .map(|lpn| {
            let req = Request {
                id: 0,
                op: Op::Read,
                lpn,
                pages: 1,
            };
            match run_one(ssd, now, req, Payload::Read(vec![0xEE; PAGE]))?.payload {
                Payload::Read(b) => Ok(b),
                other => Err(format!("read returned {other:?}")),
            }
        })
        .collect()
}

fn summary(ssd: &Ssd, requests: u64, cuts: u64) -> KitReport {
    let s = ssd.stats();
    KitReport {
        cases: 0,
        requests,
        map_reads: s.map_reads.total(),
        map_programs: s.map_programs.total(),
        gc_runs: s.gc_data_runs + s.gc_map_runs,
        cuts,
    }
}

fn add(to: &mut KitReport, r: &KitReport) {
    to.requests += r.requests;
    to.map_reads += r.map_reads;
    to.map_programs += r.map_programs;
    to.gc_runs += r.gc_runs;
    to.cuts += r.cuts;
}
