//! A host-side log-structured layer over the zoned device: what a
//! zone-aware file system or key-value store does, reduced to its
//! essentials, so that the same block workload can run on the
//! conventional SSD (device GC) and on the zoned one (host GC).
//!
//! The host keeps a page map (logical page → zone and offset), writes
//! every page at the write pointer of an open zone (user writes go round
//! robin over one zone per chip group, so that they use every chip as the
//! conventional device's striping does; GC copies go round robin over
//! as many zones of their own), and when free zones run low reclaims the zone
//! with the fewest valid pages (greedy): it reads each valid page, writes
//! it to its GC zone, and resets the victim. User writes that find no
//! free zone wait for a reset. The host's GC runs alongside user I/O, a
//! few copies at a time, and contends with it on the chips.
//!
//! It is a [`SimDevice`], so the [`Simulator`](crate::sim::Simulator)
//! drives it with the conventional device's workloads.
//!
//! ```
//! use ptsd_ftl::sim::Simulator;
//! use ptsd_ftl::workload::WorkloadSpec;
//! use ptsd_ftl::zoned::{HostLog, ZonedConfig, ZonedSsd};
//! use ptsd_ftl::StoreKind;
//! let mut cfg = ZonedConfig::small();
//! cfg.nand.store = StoreKind::None;
//! let dev = ZonedSsd::new(cfg).unwrap();
//! // The host uses 60 % of the zones' capacity.
//! let pages = dev.zone_count() as u64 * dev.zone_capacity() * 6 / 10;
//! let mut sim = Simulator::new(HostLog::new(dev, pages).unwrap());
//! let mut w = WorkloadSpec::random_write(pages, 4 * pages, 1).build().unwrap();
//! let phase = sim.run_closed("randwrite", &mut w, 8).unwrap();
//! assert_eq!(phase.device.device.waf, 1.0);      // the device never copies
//! assert!(phase.device.host_copies > 0);         // the host does
//! ```

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use serde::Serialize;

use super::{ZonedError, ZonedSsd, ZonedStats};
use crate::request::{Completion, Op, Request};
use crate::sim::{DeviceError, SimDevice};

const UNMAPPED: u64 = u64::MAX;

/// Counters of the host layer and of the device under it.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct HostLogStats {
    /// Pages the user wrote.
    pub user_write_pages: u64,
    /// Pages the host's GC copied.
    pub host_copies: u64,
    /// Zones the host's GC reset.
    pub host_resets: u64,
    /// User writes that waited for a free zone.
    pub stalled_writes: u64,
    /// NAND programs per user page: (user pages + host copies) / user
    /// pages, as the device's WAF is 1.
    pub total_waf: f64,
    /// The device's own counters (its WAF is 1.0: it copies nothing).
    pub device: ZonedStats,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    /// A user request completes.
    Done { slot: u32 },
    /// A GC read of `lpn` from `(zone, off)` ended: write it out.
    GcRead { lpn: u64, zone: u32, off: u32 },
    /// A GC program ended.
    GcWritten,
    /// A victim's reset ended: the zone is free.
    ResetDone { zone: u32 },
}

#[derive(Clone, Copy, Debug)]
struct Pending {
    id: u64,
    op: Op,
    submit_ns: u64,
    dispatch_ns: u64,
}

/// The host's log-structured layer over a [`ZonedSsd`]: a page map, one
/// open zone per chip group for user writes and as many for GC copies,
/// greedy reclaim of the zone with the fewest valid pages.
pub struct HostLog {
    dev: ZonedSsd,
    pages: u64,
    cap: u64,
    zone_pages: u64,
    /// Logical page → `zone * cap + offset`, or `UNMAPPED`.
    l2p: Vec<u64>,
    /// `zone * cap + offset` → logical page, or `UNMAPPED`.
    p2l: Vec<u64>,
    valid: Vec<u64>,
    free: VecDeque<u32>,
    /// Zones full and not being reclaimed (GC candidates).
    sealed: Vec<bool>,
    /// (zone, next offset) of each write stream: one user stream per chip
    /// group (a zone stripes over one group only, so one open zone would
    /// leave the other groups' chips idle), then as many GC streams.
    streams: Vec<Option<(u32, u64)>>,
    /// The user and the GC stream the next write goes to (round robin).
    next_stream: usize,
    next_gc_stream: usize,
    groups: u32,
    /// GC under way: victim and next offset to look at.
    victim: Option<(u32, u64)>,
    gc_inflight: u32,
    gc_qd: u32,
    gc_low: usize,
    gc_high: usize,
    /// Reclaiming: from below `gc_low` free zones up to `gc_high`.
    reclaiming: bool,
    /// Why the host stopped (the simulator reports it).
    failure: Option<String>,
    events: BinaryHeap<Reverse<(u64, u64, Event)>>,
    seq: u64,
    slots: Vec<Option<Pending>>,
    free_slots: Vec<u32>,
    /// User writes waiting for a free zone (with their submit time).
    blocked: VecDeque<(u64, Request)>,
    stats: HostLogStats,
}

impl HostLog {
    /// A host using logical pages `0..pages` on `dev` (its timing-only or
    /// data store: the host moves no data). GC keeps one free zone per
    /// chip group for its copies, starts below two more, stops at four
    /// more, with two copies per chip in flight.
    pub fn new(dev: ZonedSsd, pages: u64) -> Result<HostLog, ZonedError> {
        let zones = dev.zone_count();
        let cap = dev.zone_capacity();
        let groups = dev.chip_groups();
        // Room for the open zones (user streams and GC's) and GC's
        // reserve and watermarks.
        let needed = pages.div_ceil(cap) + 3 * u64::from(groups) + 4;
        if u64::from(zones) < needed {
            return Err(ZonedError::Config(format!(
                "a host log of {pages} pages needs {needed} zones of {cap} pages, the device has {zones}"
            )));
        }
        Ok(HostLog {
            pages,
            cap,
            zone_pages: dev.zone_pages(),
            l2p: vec![UNMAPPED; pages as usize],
            p2l: vec![UNMAPPED; (u64::from(zones) * cap) as usize],
            valid: vec![0; zones as usize],
            free: (0..zones).collect(),
            sealed: vec![false; zones as usize],
            streams: vec![None; 2 * groups as usize],
            next_stream: 0,
            next_gc_stream: 0,
            groups,
            victim: None,
            gc_inflight: 0,
            // Enough copies in flight to keep every chip busy.
            gc_qd: 2 * dev.config().nand.channels * dev.config().nand.chips_per_channel,
            gc_low: groups as usize + 2,
            gc_high: groups as usize + 4,
            reclaiming: false,
            failure: None,
            events: BinaryHeap::new(),
            seq: 0,
            slots: Vec::new(),
            free_slots: Vec::new(),
            blocked: VecDeque::new(),
            stats: HostLogStats::default(),
            dev,
        })
    }

    /// The device underneath.
    pub fn device(&self) -> &ZonedSsd {
        &self.dev
    }

    /// Check the host's map against itself and the device: each mapped
    /// page once, valid counts right, every mapped page below its zone's
    /// write pointer on the device.
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut valid = vec![0u64; self.valid.len()];
        for (lpn, &p) in self.l2p.iter().enumerate() {
            if p == UNMAPPED {
                continue;
            }
            if self.p2l[p as usize] != lpn as u64 {
                return Err(format!(
                    "page {lpn} maps to {p}, which names {}",
                    self.p2l[p as usize]
                ));
            }
            let zone = (p / self.cap) as u32;
            valid[zone as usize] += 1;
            let info = self.dev.zones().info(zone);
            if info.wp <= info.start + p % self.cap {
                return Err(format!(
                    "page {lpn} is at or past zone {zone}'s write pointer"
                ));
            }
        }
        if valid != self.valid {
            return Err(format!(
                "valid counts {:?}, recounted {valid:?}",
                self.valid
            ));
        }
        Ok(())
    }

    fn push(&mut self, t: u64, e: Event) {
        self.seq += 1;
        self.events.push(Reverse((t, self.seq, e)));
    }

    fn slot(&mut self, p: Pending) -> u32 {
        match self.free_slots.pop() {
            Some(s) => {
                self.slots[s as usize] = Some(p);
                s
            }
            None => {
                self.slots.push(Some(p));
                (self.slots.len() - 1) as u32
            }
        }
    }

    fn is_gc(&self, stream: usize) -> bool {
        stream >= self.groups as usize
    }

    /// Pages `stream` can still take without a zone GC keeps.
    fn room(&self, stream: usize) -> u64 {
        let open = match self.streams[stream] {
            Some((_, off)) => self.cap - off,
            None => 0,
        };
        let spare = if self.is_gc(stream) {
            self.free.len()
        } else {
            self.free.len().saturating_sub(self.groups as usize)
        };
        open + spare as u64 * self.cap
    }

    /// The GC stream the next copy goes to: round robin, but one that
    /// needs no zone if no zone is free.
    fn gc_stream(&mut self) -> usize {
        let g = self.groups as usize;
        for k in 0..g {
            let s = g + (self.next_gc_stream + k) % g;
            if self.room(s) > 0 {
                self.next_gc_stream = (s - g + 1) % g;
                return s;
            }
        }
        g + self.next_gc_stream
    }

    /// The next page of `stream`'s zone, opening a free zone (of the
    /// stream's chip group if there is one) if needed; `None` if a user
    /// stream would take one of the last `groups` free zones, which GC
    /// keeps so that reclaim always has somewhere to copy to.
    fn next_page(&mut self, stream: usize) -> Option<(u32, u64)> {
        let (zone, off) = match self.streams[stream] {
            Some((z, off)) if off < self.cap => (z, off),
            _ => {
                if !self.is_gc(stream) && self.free.len() <= self.groups as usize {
                    return None;
                }
                let group = stream as u32 % self.groups;
                let at = self
                    .free
                    .iter()
                    .position(|&z| z % self.groups == group)
                    .unwrap_or(0);
                (self.free.remove(at)?, 0)
            }
        };
        if off + 1 == self.cap {
            self.sealed[zone as usize] = true;
        }
        self.streams[stream] = Some((zone, off + 1));
        Some((zone, off))
    }

    fn map(&mut self, lpn: u64, zone: u32, off: u64) {
        self.unmap(lpn);
        let p = u64::from(zone) * self.cap + off;
        self.l2p[lpn as usize] = p;
        self.p2l[p as usize] = lpn;
        self.valid[zone as usize] += 1;
    }

    fn unmap(&mut self, lpn: u64) {
        let old = std::mem::replace(&mut self.l2p[lpn as usize], UNMAPPED);
        if old != UNMAPPED {
            self.p2l[old as usize] = UNMAPPED;
            self.valid[(old / self.cap) as usize] -= 1;
        }
    }

    /// Serve a user write at `t`, or queue it if no zone has room.
    fn write(&mut self, t: u64, req: Request, submit_ns: u64) -> Result<bool, ZonedError> {
        // All its pages must fit before any is written (no partial writes).
        let stream = self.next_stream;
        if u64::from(req.pages) > self.room(stream) {
            return Ok(false);
        }
        self.next_stream = (stream + 1) % self.groups as usize;
        let mut done = t;
        for i in 0..u64::from(req.pages) {
            let Some((zone, off)) = self.next_page(stream) else {
                unreachable!("room was checked above");
            };
            let d = self
                .dev
                .write(t, u64::from(zone) * self.zone_pages + off, 1, None)?;
            done = done.max(d.done_ns);
            self.map(req.lpn + i, zone, off);
        }
        self.stats.user_write_pages += u64::from(req.pages);
        let slot = self.slot(Pending {
            id: req.id,
            op: Op::Write,
            submit_ns,
            dispatch_ns: t,
        });
        self.push(done, Event::Done { slot });
        self.maybe_gc(t)?;
        Ok(true)
    }

    fn read(&mut self, t: u64, req: Request) -> Result<(), ZonedError> {
        let mut done = t;
        for lpn in req.lpn..req.end_lpn() {
            let p = self.l2p[lpn as usize];
            let lba = if p == UNMAPPED {
                // Never written: read a page past some write pointer
                // (zeroes, no NAND): the host could answer from memory.
                continue;
            } else {
                (p / self.cap) * self.zone_pages + p % self.cap
            };
            done = done.max(self.dev.read(t, lba, 1, None)?);
        }
        let slot = self.slot(Pending {
            id: req.id,
            op: Op::Read,
            submit_ns: t,
            dispatch_ns: t,
        });
        self.push(done, Event::Done { slot });
        Ok(())
    }

    /// Start or feed the GC at `t`.
    fn maybe_gc(&mut self, t: u64) -> Result<(), ZonedError> {
        if self.free.len() < self.gc_low {
            self.reclaiming = true;
        } else if self.free.len() >= self.gc_high {
            self.reclaiming = false;
        }
        if self.victim.is_none() && self.reclaiming {
            // Greedy: the sealed zone with the fewest valid pages.
            let v = (0..self.sealed.len())
                .filter(|&z| self.sealed[z])
                .min_by_key(|&z| self.valid[z]);
            if let Some(v) = v {
                self.sealed[v] = false;
                self.victim = Some((v as u32, 0));
            }
        }
        while let Some((v, off)) = self.victim {
            if self.gc_inflight >= self.gc_qd {
                break;
            }
            if off == self.cap {
                if self.gc_inflight == 0 {
                    self.victim = None;
                    let end = self.dev.reset(t, u64::from(v))?;
                    self.stats.host_resets += 1;
                    self.push(end, Event::ResetDone { zone: v });
                }
                break;
            }
            self.victim = Some((v, off + 1));
            let lpn = self.p2l[(u64::from(v) * self.cap + off) as usize];
            if lpn == UNMAPPED {
                continue;
            }
            let r = self
                .dev
                .read(t, u64::from(v) * self.zone_pages + off, 1, None)?;
            self.gc_inflight += 1;
            self.push(
                r,
                Event::GcRead {
                    lpn,
                    zone: v,
                    off: off as u32,
                },
            );
        }
        Ok(())
    }

    fn handle(&mut self, t: u64, e: Event, done: &mut Vec<Completion>) -> Result<(), ZonedError> {
        match e {
            Event::Done { slot } => {
                let p = self.slots[slot as usize].take().expect("a pending slot");
                self.free_slots.push(slot);
                done.push(Completion {
                    id: p.id,
                    op: p.op,
                    submit_ns: p.submit_ns,
                    dispatch_ns: p.dispatch_ns,
                    done_ns: t,
                });
            }
            Event::GcRead { lpn, zone, off } => {
                let here = u64::from(zone) * self.cap + u64::from(off);
                if self.l2p[lpn as usize] == here {
                    let stream = self.gc_stream();
                    let Some((gz, goff)) = self.next_page(stream) else {
                        return Err(ZonedError::Config(
                            "host GC found no free zone to copy to (working set too large)".into(),
                        ));
                    };
                    let w = self
                        .dev
                        .write(t, u64::from(gz) * self.zone_pages + goff, 1, None)?;
                    self.map(lpn, gz, goff);
                    self.stats.host_copies += 1;
                    self.push(w.done_ns, Event::GcWritten);
                } else {
                    self.gc_inflight -= 1;
                }
            }
            Event::GcWritten => self.gc_inflight -= 1,
            Event::ResetDone { zone } => {
                debug_assert_eq!(self.valid[zone as usize], 0);
                self.free.push_back(zone);
                while let Some(&(submit, req)) = self.blocked.front() {
                    if !self.write(t, req, submit)? {
                        break;
                    }
                    self.blocked.pop_front();
                }
            }
        }
        self.maybe_gc(t)
    }
}

impl SimDevice for HostLog {
    type Stats = HostLogStats;

    fn submit(&mut self, now_ns: u64, req: Request) -> Result<(), DeviceError> {
        if matches!(req.op, Op::Read | Op::Write | Op::Discard)
            && (req.pages == 0 || req.end_lpn() > self.pages)
        {
            return Err(format!(
                "{:?} of {} pages at {} is outside the host's {} pages",
                req.op, req.pages, req.lpn, self.pages
            )
            .into());
        }
        match req.op {
            Op::Read => self.read(now_ns, req)?,
            Op::Write => {
                if !self.blocked.is_empty() || !self.write(now_ns, req, now_ns)? {
                    self.stats.stalled_writes += 1;
                    self.blocked.push_back((now_ns, req));
                }
            }
            Op::Discard | Op::Flush => {
                if req.op == Op::Discard {
                    for lpn in req.lpn..req.end_lpn() {
                        self.unmap(lpn);
                    }
                }
                let slot = self.slot(Pending {
                    id: req.id,
                    op: req.op,
                    submit_ns: now_ns,
                    dispatch_ns: now_ns,
                });
                self.push(now_ns, Event::Done { slot });
            }
        }
        Ok(())
    }

    fn advance(&mut self, now_ns: u64, done: &mut Vec<Completion>) {
        // Everything at the earliest time, then back to the simulator: it
        // answers completions at their time, and the device's clock must
        // not have moved past it.
        let Some(&Reverse((t, _, _))) = self.events.peek() else {
            return;
        };
        if t > now_ns {
            return;
        }
        while let Some(&Reverse((te, _, e))) = self.events.peek() {
            if te != t {
                break;
            }
            self.events.pop();
            if let Err(err) = self.handle(t, e, done) {
                // The simulator sees it as a failed device.
                self.failure = Some(err.to_string());
                return;
            }
        }
    }

    fn next_event(&self) -> Option<u64> {
        self.events.peek().map(|Reverse((t, _, _))| *t)
    }

    fn stats(&self) -> HostLogStats {
        let mut s = self.stats.clone();
        s.device = self.dev.stats();
        s.total_waf = if s.user_write_pages == 0 {
            0.0
        } else {
            s.device.flash_programs as f64 / s.user_write_pages as f64
        };
        s
    }

    fn reset_stats(&mut self) {
        self.stats = HostLogStats::default();
        self.dev.reset_stats();
    }

    fn page_size(&self) -> u32 {
        self.dev.page_size()
    }

    fn fault(&self) -> Option<DeviceError> {
        self.failure.clone().map(|m| m.into())
    }
}
