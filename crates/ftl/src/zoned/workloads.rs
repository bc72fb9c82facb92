//! Zoned workloads on the zoned device alone, closed loop at a queue
//! depth over a virtual clock: per-zone sequential writes, zone appends
//! from many writers, random reads, and resets.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::str::FromStr;

use hdrhistogram::Histogram;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use super::{ZoneError, ZoneState, ZonedError, ZonedSsd, ZonedStats};
use crate::stats::{cdf_points, CdfPoint, LatencySummary};

/// What a zoned phase does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ZonedWorkload {
    /// `zones` zones written at once, each sequentially at its write
    /// pointer, the requests going round robin over them; a full zone is
    /// replaced by an empty one (the oldest full zone is reset when none
    /// is left).
    SeqWrite { zones: u32 },
    /// One writer per request slot, writer `i` appending to zone
    /// `i % zones`: many writers share a zone without coordinating, the
    /// device picks each append's place. A zone that fills is replaced.
    Append { zones: u32 },
    /// Random reads of the written pages (every zone filled first).
    RandRead,
    /// Reset of full zones (every zone filled first).
    Reset,
}

impl FromStr for ZonedWorkload {
    type Err = String;

    /// `seqwrite[:ZONES]`, `append[:ZONES]`, `randread`, `reset`.
    fn from_str(s: &str) -> Result<Self, String> {
        let (kind, arg) = match s.split_once(':') {
            Some((k, a)) => (k, Some(a)),
            None => (s, None),
        };
        let zones = |default: u32| -> Result<u32, String> {
            match arg {
                None => Ok(default),
                Some(a) => match a.parse::<u32>() {
                    Ok(n) if n > 0 => Ok(n),
                    _ => Err(format!("{s:?}: the zone count must be a positive number")),
                },
            }
        };
        match kind {
            "seqwrite" => Ok(ZonedWorkload::SeqWrite { zones: zones(4)? }),
            "append" => Ok(ZonedWorkload::Append { zones: zones(1)? }),
            "randread" if arg.is_none() => Ok(ZonedWorkload::RandRead),
            "reset" if arg.is_none() => Ok(ZonedWorkload::Reset),
            _ => Err(format!(
                "unknown zoned workload {s:?}; expected seqwrite[:ZONES], append[:ZONES], randread or reset"
            )),
        }
    }
}

/// What one zoned phase measured.
#[derive(Clone, Debug, Serialize)]
pub struct ZonedPhase {
    pub name: String,
    pub workload: ZonedWorkload,
    pub qd: u32,
    pub pages_per_request: u32,
    pub requests: u64,
    pub sim_seconds: f64,
    pub iops: f64,
    /// Pages read and written per simulated second, in MB (10^6 bytes).
    pub mb_per_s: f64,
    pub write: LatencySummary,
    pub read: LatencySummary,
    pub reset: LatencySummary,
    pub read_cdf: Vec<CdfPoint>,
    pub write_cdf: Vec<CdfPoint>,
    /// Distinct pages the appends were placed at (appends only; equal to
    /// the pages appended if no two appends overlapped).
    pub distinct_append_pages: u64,
    pub device: ZonedStats,
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("static bounds")
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Read,
    Write,
    Reset,
}

/// Drives a [`ZonedSsd`] through zoned phases; the virtual clock runs on
/// across phases.
///
/// ```
/// use ptsd_ftl::zoned::{ZonedConfig, ZonedRunner, ZonedSsd, ZonedWorkload};
/// use ptsd_ftl::StoreKind;
/// let mut cfg = ZonedConfig::small();
/// cfg.nand.store = StoreKind::None;
/// let mut run = ZonedRunner::new(ZonedSsd::new(cfg).unwrap(), 1);
/// let p = run.run("append", ZonedWorkload::Append { zones: 2 }, 8, 1, 200).unwrap();
/// assert_eq!(p.distinct_append_pages, 200); // no two appends collided
/// assert_eq!(p.device.waf, 1.0);
/// ```
pub struct ZonedRunner {
    dev: ZonedSsd,
    now: u64,
    rng: ChaCha8Rng,
    /// Zones that filled, oldest first (to reset when space runs out).
    full: VecDeque<u32>,
    /// Next zone never used since its last reset.
    next_empty: VecDeque<u32>,
    /// Host-side write pointer of each zone (relative).
    wp: Vec<u64>,
}

impl ZonedRunner {
    pub fn new(dev: ZonedSsd, seed: u64) -> Self {
        let zones = dev.zone_count();
        ZonedRunner {
            wp: vec![0; zones as usize],
            next_empty: (0..zones).collect(),
            full: VecDeque::new(),
            dev,
            now: 0,
            rng: ChaCha8Rng::seed_from_u64(seed),
        }
    }

    pub fn device(&self) -> &ZonedSsd {
        &self.dev
    }

    /// The virtual clock (the last phase's last completion).
    pub fn now_ns(&self) -> u64 {
        self.now
    }

    /// An empty zone, resetting the oldest full one if none is left.
    fn fresh_zone(&mut self, t: u64, resets: &mut Vec<u64>) -> Result<u32, ZonedError> {
        if let Some(z) = self.next_empty.pop_front() {
            return Ok(z);
        }
        let Some(z) = self.full.pop_front() else {
            return Err(ZonedError::Config(
                "more zones in use than the device has: lower the zone count".into(),
            ));
        };
        resets.push(self.dev.reset(t, u64::from(z))? - t);
        self.wp[z as usize] = 0;
        Ok(z)
    }

    fn seal(&mut self, z: u32) {
        self.full.push_back(z);
    }

    /// Fill every zone not yet full (sequentially, unmeasured).
    fn fill(&mut self) -> Result<(), ZonedError> {
        let pages = self.dev.zone_capacity();
        while let Some(z) = self.next_empty.pop_front() {
            let mut off = self.wp[z as usize];
            while off < pages {
                let n = (pages - off).min(64) as u32;
                let lba = u64::from(z) * self.dev.zone_pages() + off;
                // All at once: the timelines queue them on the chips.
                self.dev.write(self.now, lba, n, None)?;
                off += u64::from(n);
            }
            self.wp[z as usize] = pages;
            self.seal(z);
        }
        self.now = self.now.max(self.dev.idle_at());
        Ok(())
    }

    /// Run `requests` requests of `pages` pages of `kind` at queue depth
    /// `qd` and report them (device counters for this phase alone).
    pub fn run(
        &mut self,
        name: &str,
        kind: ZonedWorkload,
        qd: u32,
        pages: u32,
        requests: u64,
    ) -> Result<ZonedPhase, ZonedError> {
        if qd == 0 || pages == 0 {
            return Err(ZonedError::Config(
                "queue depth and request size must be at least 1".into(),
            ));
        }
        let cap = self.dev.zone_capacity();
        if u64::from(pages) > cap {
            return Err(ZonedError::Config(format!(
                "a request of {pages} pages is larger than a zone's capacity ({cap} pages)"
            )));
        }
        let slots = match kind {
            ZonedWorkload::SeqWrite { zones } | ZonedWorkload::Append { zones } => {
                if zones >= self.dev.zone_count() {
                    return Err(ZonedError::Config(format!(
                        "{zones} zones at once leave none to reset (the device has {})",
                        self.dev.zone_count()
                    )));
                }
                zones
            }
            ZonedWorkload::RandRead | ZonedWorkload::Reset => {
                self.fill()?;
                0
            }
        };
        if let ZonedWorkload::Append { .. } = kind {
            if pages > self.dev.config().max_append_pages {
                return Err(ZoneError::AppendTooLarge {
                    pages,
                    limit: self.dev.config().max_append_pages,
                }
                .into());
            }
        }
        // Each reset erases a full zone: at most one per zone.
        let requests = match kind {
            ZonedWorkload::Reset => requests.min(u64::from(self.dev.zone_count())),
            _ => requests,
        };
        self.dev.reset_stats();
        let start = self.now;
        let mut resets_ns = Vec::new();
        // The zones the writers use (seqwrite, append).
        let mut current: Vec<u32> = Vec::new();
        for _ in 0..slots {
            let z = self.fresh_zone(start, &mut resets_ns)?;
            current.push(z);
        }
        let (mut hr, mut hw, mut hz) = (histogram(), histogram(), histogram());
        let mut heap: BinaryHeap<Reverse<(u64, u64, Kind, u64)>> = BinaryHeap::new();
        let mut appended = std::collections::HashSet::new();
        let mut issued = 0u64;
        let mut last = start;
        let mut seq = 0u64;
        let zp = self.dev.zone_pages();
        let total_pages = u64::from(self.dev.zone_count()) * cap;
        let mut reset_cursor = 0usize;
        // Issue request number `i` at `t`.
        let mut issue = |me: &mut Self,
                         t: u64,
                         i: u64,
                         heap: &mut BinaryHeap<_>,
                         current: &mut Vec<u32>,
                         resets: &mut Vec<u64>|
         -> Result<(), ZonedError> {
            seq += 1;
            match kind {
                ZonedWorkload::SeqWrite { .. } => {
                    let k = (i % current.len() as u64) as usize;
                    let mut z = current[k];
                    if me.wp[z as usize] + u64::from(pages) > cap {
                        me.dev.finish(t, u64::from(z))?;
                        me.seal(z);
                        z = me.fresh_zone(t, resets)?;
                        current[k] = z;
                    }
                    let lba = u64::from(z) * zp + me.wp[z as usize];
                    let d = me.dev.write(t, lba, pages, None)?;
                    me.wp[z as usize] += u64::from(pages);
                    heap.push(Reverse((d.done_ns, seq, Kind::Write, t)));
                }
                ZonedWorkload::Append { .. } => {
                    let k = (i % current.len() as u64) as usize;
                    let z = current[k];
                    let d = match me.dev.append(t, u64::from(z) * zp, pages, None) {
                        Ok(d) => d,
                        Err(ZonedError::Zone(
                            ZoneError::Boundary { .. } | ZoneError::ZoneFull { .. },
                        )) => {
                            if me.dev.zones().info(z).state != ZoneState::Full {
                                me.dev.finish(t, u64::from(z))?;
                            }
                            me.seal(z);
                            let nz = me.fresh_zone(t, resets)?;
                            current[k] = nz;
                            me.dev.append(t, u64::from(nz) * zp, pages, None)?
                        }
                        Err(e) => return Err(e),
                    };
                    for p in d.lpn..d.lpn + u64::from(pages) {
                        appended.insert(p);
                    }
                    heap.push(Reverse((d.done_ns, seq, Kind::Write, t)));
                }
                ZonedWorkload::RandRead => {
                    let p = me.rng.gen_range(0..total_pages - u64::from(pages) + 1);
                    // Keep the request inside one zone.
                    let (z, off) = (p / cap, (p % cap).min(cap - u64::from(pages)));
                    let d = me.dev.read(t, z * zp + off, pages, None)?;
                    heap.push(Reverse((d, seq, Kind::Read, t)));
                }
                ZonedWorkload::Reset => {
                    let z = reset_cursor as u32;
                    reset_cursor += 1;
                    me.wp[z as usize] = 0;
                    me.full.retain(|&f| f != z);
                    me.next_empty.push_back(z);
                    let d = me.dev.reset(t, u64::from(z))?;
                    heap.push(Reverse((d, seq, Kind::Reset, t)));
                }
            }
            Ok(())
        };
        while issued < requests.min(u64::from(qd)) {
            issue(self, start, issued, &mut heap, &mut current, &mut resets_ns)?;
            issued += 1;
        }
        while let Some(Reverse((t, _, k, submit))) = heap.pop() {
            let lat = (t - submit).max(1);
            match k {
                Kind::Read => hr.saturating_record(lat),
                Kind::Write => hw.saturating_record(lat),
                Kind::Reset => hz.saturating_record(lat),
            }
            last = last.max(t);
            if issued < requests {
                issue(self, t, issued, &mut heap, &mut current, &mut resets_ns)?;
                issued += 1;
            }
        }
        for r in resets_ns {
            hz.saturating_record(r.max(1));
        }
        // The writers' zones stay open for the next phase; being
        // unfilled, they are no reset candidates.
        self.now = last;
        let secs = (last - start) as f64 / 1e9;
        let per_s = |x: f64| if secs > 0.0 { x / secs } else { 0.0 };
        let device = self.dev.stats();
        let bytes =
            (device.host_read_pages + device.host_write_pages) * u64::from(self.dev.page_size());
        Ok(ZonedPhase {
            name: name.to_string(),
            workload: kind,
            qd,
            pages_per_request: pages,
            requests,
            sim_seconds: secs,
            iops: per_s(requests as f64),
            mb_per_s: per_s(bytes as f64) / 1e6,
            write: LatencySummary::of(&hw),
            read: LatencySummary::of(&hr),
            reset: LatencySummary::of(&hz),
            read_cdf: cdf_points(&hr),
            write_cdf: cdf_points(&hw),
            distinct_append_pages: appended.len() as u64,
            device,
        })
    }
}
