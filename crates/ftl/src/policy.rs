//! GC victim policies and interface-queue schedulers: the public traits the
//! engine talks to, and the built-ins (greedy and cost-benefit victims;
//! FIFO and read priority) implemented on them.
//!
//! The config enums [`GcPolicy`] and [`SchedulerKind`] name the built-ins;
//! any other implementation is accepted wherever they are
//! (`FtlConfig::with_gc_policy`, `FtlConfig::with_scheduler`).

use std::fmt;
use std::ops::Range;

use crate::config::{GcConfig, GcPolicy, SchedulerKind};
use crate::flash::{Flash, POOL_FREE, POOL_MAP};
use crate::request::Op;

/// A read-only view of the NAND blocks, for a [`VictimPolicy`]. Blocks are
/// numbered chip by chip: chip `c` has blocks
/// [`chip_blocks(c)`](Self::chip_blocks).
pub struct BlockView<'a> {
    flash: &'a Flash,
}

impl<'a> BlockView<'a> {
    pub(crate) fn new(flash: &'a Flash) -> Self {
        BlockView { flash }
    }

    /// The blocks of `chip`.
    #[inline]
    pub fn chip_blocks(&self, chip: u32) -> Range<u32> {
        let n = self.flash.blocks_per_chip;
        chip * n..(chip + 1) * n
    }

    /// Pages per block.
    #[inline]
    pub fn pages_per_block(&self) -> u32 {
        self.flash.ppb
    }

    /// Valid pages in block `b`.
    #[inline]
    pub fn valid_pages(&self, b: u32) -> u32 {
        self.flash.valid[b as usize]
    }

    /// Pages programmed in block `b` since its erase.
    #[inline]
    pub fn written_pages(&self, b: u32) -> u32 {
        self.flash.wp[b as usize]
    }

    /// Whether GC may clean `b`: in use, not open for writing, not being
    /// cleaned, some page invalid. A victim must be collectable.
    #[inline]
    pub fn collectable(&self, b: u32) -> bool {
        let i = b as usize;
        let f = self.flash;
        f.pool[i] != POOL_FREE && !f.open[i] && f.valid[i] < f.wp[i]
    }

    /// Whether `b` holds mapping (translation) pages rather than data.
    #[inline]
    pub fn holds_mapping_pages(&self, b: u32) -> bool {
        self.flash.pool[b as usize] == POOL_MAP
    }

    /// Times block `b` was erased.
    #[inline]
    pub fn erase_count(&self, b: u32) -> u32 {
        self.flash.erases[b as usize]
    }

    /// When `b` last changed (a page programmed or invalidated), in ns of
    /// the device clock; kept only if the policy
    /// [`needs_age`](VictimPolicy::needs_age) (0 otherwise).
    #[inline]
    pub fn last_change_ns(&self, b: u32) -> u64 {
        self.flash.stamp[b as usize]
    }
}

/// Chooses which block GC cleans next, and when background GC starts.
///
/// The engine calls [`victim`](Self::victim) when a chip starts a GC run
/// (in the background when it is low on free blocks, at once at the
/// floor); the block returned must be
/// [`collectable`](BlockView::collectable) and on that chip, and `None`
/// means the chip has nothing to clean. The engine moves the victim's valid
/// pages, erases it and, below `high_free_blocks`, asks again.
pub trait VictimPolicy: Send + Sync + fmt::Debug {
    /// Short name for tables.
    fn name(&self) -> String;
    /// The block on `chip` to clean next, if any is collectable.
    fn victim(&mut self, blocks: &BlockView<'_>, chip: u32, now_ns: u64) -> Option<u32>;
    /// Whether the engine must keep each block's last change time (costs a
    /// store per page program and invalidation).
    fn needs_age(&self) -> bool {
        false
    }
    /// Whether a chip just left with `free_blocks` free blocks starts
    /// background GC (the floor `urgent_free_blocks` is the engine's).
    fn start_background(&self, free_blocks: u32, gc: &GcConfig) -> bool {
        free_blocks <= gc.low_free_blocks
    }
    /// An independent copy (for a new device or a snapshot).
    fn clone_box(&self) -> Box<dyn VictimPolicy>;
}

/// Fewest valid pages (the first such block).
#[derive(Clone, Copy, Debug, Default)]
pub struct Greedy;

impl VictimPolicy for Greedy {
    fn name(&self) -> String {
        "greedy".into()
    }

    fn victim(&mut self, blocks: &BlockView<'_>, chip: u32, _now_ns: u64) -> Option<u32> {
        // Test the count first, whether GC may take the block only for a
        // new best.
        let mut best = None;
        let mut best_valid = u32::MAX;
        for b in blocks.chip_blocks(chip) {
            let v = blocks.valid_pages(b);
            if v < best_valid && blocks.collectable(b) {
                best_valid = v;
                best = Some(b);
                if v == 0 {
                    break;
                }
            }
        }
        best
    }

    fn clone_box(&self) -> Box<dyn VictimPolicy> {
        Box::new(*self)
    }
}

/// Highest `age * (1 - u) / 2u` (Rosenblum & Ousterhout), `u` the valid
/// share.
#[derive(Clone, Copy, Debug, Default)]
pub struct CostBenefit;

impl VictimPolicy for CostBenefit {
    fn name(&self) -> String {
        "cost-benefit".into()
    }

    fn victim(&mut self, blocks: &BlockView<'_>, chip: u32, now_ns: u64) -> Option<u32> {
        let mut best = None;
        let mut best_score = f64::MIN;
        let ppb = f64::from(blocks.pages_per_block());
        for b in blocks.chip_blocks(chip).filter(|&b| blocks.collectable(b)) {
            let u = f64::from(blocks.valid_pages(b)) / ppb;
            let age = (now_ns.saturating_sub(blocks.last_change_ns(b)) + 1) as f64;
            let score = if u == 0.0 {
                f64::MAX
            } else {
                age * (1.0 - u) / (2.0 * u)
            };
            if score > best_score {
                best_score = score;
                best = Some(b);
            }
        }
        best
    }

    fn needs_age(&self) -> bool {
        true
    }

    fn clone_box(&self) -> Box<dyn VictimPolicy> {
        Box::new(*self)
    }
}

impl GcPolicy {
    /// The built-in policy this names.
    pub fn policy(self) -> Box<dyn VictimPolicy> {
        match self {
            GcPolicy::Greedy => Box::new(Greedy),
            GcPolicy::CostBenefit => Box::new(CostBenefit),
        }
    }
}

/// The request at the head of one of the two interface queues (reads;
/// everything else), as a [`Scheduler`] sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// What it is.
    pub op: Op,
    /// First logical page and pages.
    pub lpn: u64,
    /// See `lpn`.
    pub pages: u32,
    /// When the host submitted it.
    pub submit_ns: u64,
    /// The earliest it can be dispatched: the controller is free and, for
    /// a write, the write buffer has room.
    pub ready_ns: u64,
    /// Arrival order over both queues.
    pub arrival: u64,
}

/// Orders the interface queue: which of the two head requests (the oldest
/// read, the oldest other request) the controller takes next, and whether
/// a write that finds the write buffer full stops writes.
///
/// Within each queue the order is arrival order (a write never passes a
/// flush or another write). [`read_first`](Self::read_first) must be a
/// function of its arguments only: the engine may ask twice for the same
/// choice.
pub trait Scheduler: Send + Sync + fmt::Debug {
    /// Short name for tables.
    fn name(&self) -> String;
    /// Both queues have a request: take the read first?
    fn read_first(&self, read: &Candidate, other: &Candidate) -> bool;
    /// A write dispatched with the write buffer full: hold it and serve
    /// only reads until none is queued, then flush (PTSD's `write_stop`,
    /// see `WriteStop`)? Otherwise the write waits for room as any does.
    fn stop_writes_when_full(&self) -> bool {
        false
    }
    /// An independent copy.
    fn clone_box(&self) -> Box<dyn Scheduler>;
}

/// Arrival order.
#[derive(Clone, Copy, Debug, Default)]
pub struct Fifo;

impl Scheduler for Fifo {
    fn name(&self) -> String {
        "fifo".into()
    }
    #[inline]
    fn read_first(&self, read: &Candidate, other: &Candidate) -> bool {
        read.arrival < other.arrival
    }
    fn clone_box(&self) -> Box<dyn Scheduler> {
        Box::new(*self)
    }
}

/// PTSD's read priority: the earlier-ready request first (a read passes a
/// write waiting for room), and `write_stop` when a write finds the buffer
/// full.
#[derive(Clone, Copy, Debug, Default)]
pub struct ReadPriority;

impl Scheduler for ReadPriority {
    fn name(&self) -> String {
        "read-priority".into()
    }
    #[inline]
    fn read_first(&self, read: &Candidate, other: &Candidate) -> bool {
        read.ready_ns < other.ready_ns
            || (read.ready_ns == other.ready_ns && read.arrival < other.arrival)
    }
    fn stop_writes_when_full(&self) -> bool {
        true
    }
    fn clone_box(&self) -> Box<dyn Scheduler> {
        Box::new(*self)
    }
}

impl SchedulerKind {
    /// The built-in scheduler this names.
    pub fn scheduler(self) -> Box<dyn Scheduler> {
        match self {
            SchedulerKind::Fifo => Box::new(Fifo),
            SchedulerKind::ReadPriority => Box::new(ReadPriority),
        }
    }
}
