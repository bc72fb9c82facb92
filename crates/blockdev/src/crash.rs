//! A device that simulates power cuts and I/O faults, deterministically
//! from a seed.
//!
//! The model follows the crash-test backends of embedded databases (redb's
//! among them): the device keeps the *durable* image apart from the blocks
//! written since the last flush. A flush makes everything written so far
//! durable; a crash keeps every durable block and lets an arbitrary
//! (seeded-random) subset of the unflushed block writes reach the media, in
//! write order. Anything that survives a crash on this device could survive
//! a power cut on a real disk with a volatile write cache, so code that
//! recovers correctly here does not depend on luck.

use std::collections::HashMap;

use parking_lot::Mutex;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::corrupt::{CorruptPlan, Corruption, CorruptionEvent, Outcome, Tearing};
use crate::mem::validate_geometry;
use crate::{check_range, check_request, BlockDevice, BlockError};

/// A fault to inject into a [`CrashDevice`]. Counts start when the fault is
/// injected ([`CrashDevice::inject`]); several faults can be active at once.
#[derive(Debug, Clone, PartialEq)]
pub enum Fault {
    /// The `n`-th `write` call from now (1-based) fails with
    /// [`BlockError::InjectedFault`] and changes nothing. One-shot.
    NthWrite(u64),
    /// The `n`-th `flush` call from now (1-based) fails with
    /// [`BlockError::InjectedFlushFault`]; nothing becomes durable. One-shot.
    NthFlush(u64),
    /// After `n` more operations (reads, writes, flushes, discards) succeed,
    /// every later one fails — a disk that died. Cleared by a crash.
    AllAfter(u64),
    /// Each write, flush or discard fails with this probability, drawn from
    /// a generator seeded with `seed` (so a run is reproducible from it).
    Random {
        /// Seed of the generator that decides which operations fail.
        seed: u64,
        /// Chance in `[0, 1]` that one operation fails.
        probability: f64,
    },
    /// The power is cut *during* the `n`-th `write` call from now
    /// (1-based): that write is added to the unflushed ones, then the device
    /// crashes as by [`CrashDevice::crash`]`(seed)` and the call returns
    /// [`BlockError::Offline`]. Lets a test enumerate every crash point.
    CrashAtWrite {
        /// Which write (1-based, counted from now) the power cut hits.
        n: u64,
        /// Seed for choosing which unflushed writes survive.
        seed: u64,
    },
    /// The power is cut *during* the `n`-th `write` call from now
    /// (1-based): that write joins the unflushed ones and the device goes
    /// offline as by [`CrashDevice::power_cut`], the survivors still
    /// undecided ([`CrashDevice::crash_copy`] draws them); the call returns
    /// [`BlockError::Offline`].
    PowerCutAtWrite(u64),
    /// The power is cut when the `n`-th `flush` call from now (1-based)
    /// begins, before it makes anything durable; otherwise as
    /// [`Fault::PowerCutAtWrite`].
    PowerCutAtFlush(u64),
    /// Silent corruption: each block written from now is, with this
    /// probability, corrupted by one of `kinds` (a flipped bit, a misdirected
    /// write, a lost acknowledged write), drawn from a generator seeded with
    /// `seed`. The write still succeeds; [`CrashDevice::corruptions`] lists
    /// what happened. Survives crashes (the disk stays bad).
    Corrupt {
        /// Seed of the generator that picks victims and kinds.
        seed: u64,
        /// Chance in `[0, 1]` that one block write is corrupted.
        probability: f64,
        /// The kinds to choose from.
        kinds: Vec<Corruption>,
    },
}

/// What a crash did with the unflushed block writes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CrashReport {
    /// Unflushed block writes (or discards) that reached the media.
    pub kept: usize,
    /// Unflushed block writes that were lost.
    pub lost: usize,
}

/// Counters of a [`CrashDevice`], cumulative over crashes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CrashStats {
    /// Successful `read` calls.
    pub reads: u64,
    /// Successful `write` calls.
    pub writes: u64,
    /// Blocks written by successful `write` calls.
    pub blocks_written: u64,
    /// Successful `flush` calls.
    pub flushes: u64,
    /// Successful `discard` calls.
    pub discards: u64,
    /// Distinct blocks with a write or discard that is not yet durable.
    pub unflushed_blocks: u64,
    /// Block writes (and discards) not yet durable, counting each block of
    /// each call separately.
    pub unflushed_writes: u64,
    /// Crashes so far.
    pub crashes: u64,
    /// Operations failed by an injected fault.
    pub injected_faults: u64,
}

/// One block's unflushed write; `None` is a discard (reads as zeroes).
struct PendingWrite {
    block: u64,
    data: Option<Box<[u8]>>,
}

enum ActiveFault {
    NthWrite {
        left: u64,
    },
    NthFlush {
        left: u64,
    },
    AllAfter {
        left: u64,
    },
    Random {
        rng: Box<ChaCha8Rng>,
        probability: f64,
    },
    CrashAtWrite {
        left: u64,
        seed: u64,
    },
    PowerCutAtWrite {
        left: u64,
    },
    PowerCutAtFlush {
        left: u64,
    },
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum OpKind {
    Read,
    Write,
    Flush,
    Discard,
}

/// What the fault plan decided for one operation.
enum Verdict {
    Proceed,
    Fail,
    /// Perform the write, then crash with this seed.
    CrashAfter(u64),
    /// Perform the write, then cut the power (survivors undecided).
    CutAfter,
}

struct State {
    /// The durable image, sparse: an absent block reads as zeroes.
    durable: HashMap<u64, Box<[u8]>>,
    /// Unflushed block writes in the order they were made.
    log: Vec<PendingWrite>,
    /// Index in `log` of each block's newest unflushed write.
    latest: HashMap<u64, usize>,
    offline: bool,
    faults: Vec<ActiveFault>,
    /// Armed corruption faults (kept across crashes, unlike `faults`).
    corrupt: Vec<CorruptPlan>,
    /// Every corruption inflicted so far.
    corruptions: Vec<CorruptionEvent>,
    /// Whether a crash may tear the writes it keeps (a sector prefix).
    torn_writes: bool,
    stats: CrashStats,
}

impl State {
    fn new(durable: HashMap<u64, Box<[u8]>>) -> Self {
        Self {
            durable,
            log: Vec::new(),
            latest: HashMap::new(),
            offline: false,
            faults: Vec::new(),
            corrupt: Vec::new(),
            corruptions: Vec::new(),
            torn_writes: false,
            stats: CrashStats::default(),
        }
    }

    /// Consult the active faults for one operation; updates their counters.
    fn judge(&mut self, op: OpKind) -> Verdict {
        let mut verdict = Verdict::Proceed;
        for fault in &mut self.faults {
            let this = match fault {
                ActiveFault::NthWrite { left } if op == OpKind::Write && *left > 0 => {
                    *left -= 1;
                    if *left == 0 {
                        Verdict::Fail
                    } else {
                        Verdict::Proceed
                    }
                }
                ActiveFault::NthFlush { left } if op == OpKind::Flush && *left > 0 => {
                    *left -= 1;
                    if *left == 0 {
                        Verdict::Fail
                    } else {
                        Verdict::Proceed
                    }
                }
                ActiveFault::AllAfter { left } => {
                    if *left == 0 {
                        Verdict::Fail
                    } else {
                        *left -= 1;
                        Verdict::Proceed
                    }
                }
                ActiveFault::Random { rng, probability } if op != OpKind::Read => {
                    if rng.gen_bool(*probability) {
                        Verdict::Fail
                    } else {
                        Verdict::Proceed
                    }
                }
                ActiveFault::CrashAtWrite { left, seed } if op == OpKind::Write && *left > 0 => {
                    *left -= 1;
                    if *left == 0 {
                        Verdict::CrashAfter(*seed)
                    } else {
                        Verdict::Proceed
                    }
                }
                ActiveFault::PowerCutAtWrite { left } if op == OpKind::Write && *left > 0 => {
                    *left -= 1;
                    if *left == 0 {
                        Verdict::CutAfter
                    } else {
                        Verdict::Proceed
                    }
                }
                ActiveFault::PowerCutAtFlush { left } if op == OpKind::Flush && *left > 0 => {
                    *left -= 1;
                    if *left == 0 {
                        Verdict::CutAfter
                    } else {
                        Verdict::Proceed
                    }
                }
                _ => Verdict::Proceed,
            };
            // A failure wins over a crash, which wins over proceeding; every
            // fault still sees the operation so its count stays true.
            verdict = match (verdict, this) {
                (Verdict::Fail, _) | (_, Verdict::Fail) => Verdict::Fail,
                (Verdict::CrashAfter(s), _) | (_, Verdict::CrashAfter(s)) => Verdict::CrashAfter(s),
                (Verdict::CutAfter, _) | (_, Verdict::CutAfter) => Verdict::CutAfter,
                _ => Verdict::Proceed,
            };
        }
        // Spent one-shot faults go away so they cannot fire again.
        self.faults.retain(|f| {
            !matches!(
                f,
                ActiveFault::NthWrite { left: 0 }
                    | ActiveFault::NthFlush { left: 0 }
                    | ActiveFault::CrashAtWrite { left: 0, .. }
                    | ActiveFault::PowerCutAtWrite { left: 0 }
                    | ActiveFault::PowerCutAtFlush { left: 0 }
            )
        });
        if matches!(verdict, Verdict::Fail) {
            self.stats.injected_faults += 1;
        }
        verdict
    }

    /// Queue one block written by the caller, through the corruption
    /// faults (if armed).
    fn push_written(&mut self, block: u64, data: &[u8], num_blocks: u64) {
        let mut outcome = Outcome::Intact;
        for plan in &mut self.corrupt {
            if let (o @ (Outcome::Store(..) | Outcome::Drop), Some(ev)) =
                plan.judge(block, data, num_blocks)
            {
                outcome = o;
                self.corruptions.push(ev);
                break;
            }
        }
        match outcome {
            Outcome::Intact => self.push(block, Some(data.into())),
            Outcome::Store(to, d) => self.push(to, Some(d)),
            Outcome::Drop => {}
        }
    }

    fn push(&mut self, block: u64, data: Option<Box<[u8]>>) {
        self.latest.insert(block, self.log.len());
        self.log.push(PendingWrite { block, data });
    }

    fn read_block(&self, block: u64, out: &mut [u8]) {
        let current = match self.latest.get(&block) {
            Some(&i) => self.log[i].data.as_deref(),
            None => self.durable.get(&block).map(|b| &**b),
        };
        match current {
            Some(data) => out.copy_from_slice(data),
            None => out.fill(0),
        }
    }

    fn make_durable(&mut self, write: PendingWrite) {
        match write.data {
            Some(data) => {
                self.durable.insert(write.block, data);
            }
            None => {
                self.durable.remove(&write.block);
            }
        }
    }

    fn flush_all(&mut self) {
        self.latest.clear();
        let log = std::mem::take(&mut self.log);
        for write in log {
            self.make_durable(write);
        }
    }

    /// Power cut: apply the unflushed writes `keep` selects, in write
    /// order, drop the rest, and go offline.
    fn crash(&mut self, mut keep: impl FnMut(usize) -> bool) -> CrashReport {
        self.crash_torn(&mut keep, None)
    }

    /// A crash whose kept writes `tearing` may cut to a sector prefix.
    fn crash_torn(
        &mut self,
        keep: &mut dyn FnMut(usize) -> bool,
        mut tearing: Option<Tearing>,
    ) -> CrashReport {
        let mut report = CrashReport::default();
        self.latest.clear();
        let log = std::mem::take(&mut self.log);
        for (i, mut write) in log.into_iter().enumerate() {
            if keep(i) {
                report.kept += 1;
                if let (Some(t), Some(new)) = (tearing.as_mut(), write.data.as_deref()) {
                    if let Some(torn) = t.tear(self.durable.get(&write.block).map(|b| &**b), new) {
                        write.data = Some(torn);
                    }
                }
                self.make_durable(write);
            } else {
                report.lost += 1;
            }
        }
        self.offline = true;
        self.faults.clear();
        self.stats.crashes += 1;
        report
    }

    fn crash_seeded(&mut self, seed: u64) -> CrashReport {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let tearing = self.torn_writes.then(|| Tearing::new(seed));
        self.crash_torn(&mut |_| rng.gen_bool(0.5), tearing)
    }
}

/// A block device in memory that can lose unflushed writes on a simulated
/// power cut, and fail operations on demand.
///
/// * Writes and discards go to an *unflushed* log, per block and in write
///   order; reads see the newest data.
/// * [`flush`](BlockDevice::flush) makes everything written so far durable.
/// * [`crash`](Self::crash)`(seed)` keeps every durable block and lets a
///   seeded-random subset of the unflushed block writes reach the media (each
///   block of each write independently, so multi-block writes can tear, as on
///   a real disk). Then all I/O fails with [`BlockError::Offline`] until
///   [`recover`](Self::recover) (same object) or [`reopen`](Self::reopen)
///   (a fresh device over the surviving image).
/// * [`inject`](Self::inject) arms a [`Fault`]: fail the n-th write or
///   flush, fail everything after a point, fail at random, or cut the power
///   in the middle of the n-th write.
///
/// The image is sparse (blocks never written take no memory), so a large
/// device is cheap. One lock guards the state: every operation is atomic
/// with respect to a crash, which is what makes the outcome a function of
/// the seed and the order of writes.
///
/// ```
/// use ptsd_blockdev::{BlockDevice, BlockError, CrashDevice};
///
/// let dev = CrashDevice::new(512, 64).unwrap();
/// dev.write(1, &[1u8; 512]).unwrap();
/// dev.flush().unwrap();
/// dev.write(1, &[2u8; 512]).unwrap(); // not flushed
/// dev.crash_keep_none();
/// let mut buf = [0u8; 512];
/// assert!(matches!(dev.read(1, &mut buf), Err(BlockError::Offline)));
/// dev.recover();
/// dev.read(1, &mut buf).unwrap();
/// assert_eq!(buf, [1u8; 512]); // the unflushed write was lost
/// ```
pub struct CrashDevice {
    block_size: u32,
    num_blocks: u64,
    state: Mutex<State>,
    on_cut: Mutex<Option<CutHook>>,
}

type CutHook = Box<dyn Fn() + Send + Sync>;

impl CrashDevice {
    /// A zero-filled device of `num_blocks` blocks of `block_size` bytes.
    pub fn new(block_size: u32, num_blocks: u64) -> Result<Self, BlockError> {
        validate_geometry(block_size, num_blocks)?;
        Ok(Self {
            block_size,
            num_blocks,
            state: Mutex::new(State::new(HashMap::new())),
            on_cut: Mutex::new(None),
        })
    }

    /// A device whose durable image is a copy of `source` (all-zero blocks
    /// are not stored).
    ///
    /// ```
    /// use ptsd_blockdev::{BlockDevice, CrashDevice, MemDevice};
    /// let mem = MemDevice::new(512, 4).unwrap();
    /// mem.write(2, &[9u8; 512]).unwrap();
    /// let dev = CrashDevice::from_device(&mem).unwrap();
    /// assert_eq!(dev.durable_block(2).unwrap(), vec![9u8; 512]);
    /// ```
    pub fn from_device<D: BlockDevice + ?Sized>(source: &D) -> Result<Self, BlockError> {
        let dev = Self::new(source.block_size(), source.num_blocks())?;
        let bs = source.block_size() as usize;
        let mut buf = vec![0u8; bs];
        {
            let mut state = dev.state.lock();
            for block in 0..source.num_blocks() {
                source.read(block, &mut buf)?;
                if buf.iter().any(|&b| b != 0) {
                    state.durable.insert(block, buf.clone().into_boxed_slice());
                }
            }
        }
        Ok(dev)
    }

    /// Arm a fault. See [`Fault`] for what each does.
    ///
    /// ```
    /// use ptsd_blockdev::{BlockDevice, BlockError, CrashDevice, Fault};
    /// let dev = CrashDevice::new(512, 8).unwrap();
    /// dev.inject(Fault::NthWrite(2));
    /// dev.write(0, &[1u8; 512]).unwrap();
    /// assert!(matches!(dev.write(1, &[1u8; 512]), Err(BlockError::InjectedFault { block: 1 })));
    /// dev.write(1, &[1u8; 512]).unwrap(); // one-shot
    /// ```
    pub fn inject(&self, fault: Fault) {
        let active = match fault {
            Fault::NthWrite(n) => ActiveFault::NthWrite { left: n.max(1) },
            Fault::NthFlush(n) => ActiveFault::NthFlush { left: n.max(1) },
            Fault::AllAfter(n) => ActiveFault::AllAfter { left: n },
            Fault::Random { seed, probability } => ActiveFault::Random {
                rng: Box::new(ChaCha8Rng::seed_from_u64(seed)),
                probability: if probability.is_nan() {
                    0.0
                } else {
                    probability.clamp(0.0, 1.0)
                },
            },
            Fault::CrashAtWrite { n, seed } => ActiveFault::CrashAtWrite {
                left: n.max(1),
                seed,
            },
            Fault::PowerCutAtWrite(n) => ActiveFault::PowerCutAtWrite { left: n.max(1) },
            Fault::PowerCutAtFlush(n) => ActiveFault::PowerCutAtFlush { left: n.max(1) },
            Fault::Corrupt {
                seed,
                probability,
                kinds,
            } => {
                let plan = CorruptPlan::new(seed, probability, &kinds);
                self.state.lock().corrupt.push(plan);
                return;
            }
        };
        self.state.lock().faults.push(active);
    }

    /// Disarm every fault, corruption faults included.
    pub fn clear_faults(&self) {
        let mut st = self.state.lock();
        st.faults.clear();
        st.corrupt.clear();
    }

    /// Let seeded crashes ([`crash`](Self::crash), [`Fault::CrashAtWrite`])
    /// tear the writes they keep: a kept block write may reach the media
    /// only as a prefix of its 512-byte sectors, the rest of the block
    /// keeping its older content.
    pub fn set_torn_writes(&self, on: bool) {
        self.state.lock().torn_writes = on;
    }

    /// Every corruption the armed [`Fault::Corrupt`] faults inflicted, in
    /// order.
    pub fn corruptions(&self) -> Vec<CorruptionEvent> {
        self.state.lock().corruptions.clone()
    }

    /// Cut the power: keep each unflushed block write with probability 1/2,
    /// chosen by a generator seeded with `seed`, and go offline.
    pub fn crash(&self, seed: u64) -> CrashReport {
        self.state.lock().crash_seeded(seed)
    }

    /// Cut the power, letting `rng` choose (probability 1/2 each) which
    /// unflushed block writes survive.
    pub fn crash_with<R: Rng + ?Sized>(&self, rng: &mut R) -> CrashReport {
        self.state.lock().crash(|_| rng.gen_bool(0.5))
    }

    /// Cut the power and lose every unflushed write.
    pub fn crash_keep_none(&self) -> CrashReport {
        self.state.lock().crash(|_| false)
    }

    /// Cut the power after every unflushed write reached the media.
    pub fn crash_keep_all(&self) -> CrashReport {
        self.state.lock().crash(|_| true)
    }

    /// Cut the power after the first `n` unflushed block writes (in write
    /// order) reached the media — an in-order device.
    pub fn crash_keep_prefix(&self, n: usize) -> CrashReport {
        self.state.lock().crash(|i| i < n)
    }

    /// Cut the power but keep the unflushed writes aside, undecided: the
    /// device goes offline, and [`crash_copy`](Self::crash_copy) can then
    /// draw any number of different post-crash images from one cut.
    pub fn power_cut(&self) {
        let mut st = self.state.lock();
        st.offline = true;
        st.faults.clear();
    }

    /// Run `hook` when a [`Fault::PowerCutAtWrite`] or [`Fault::PowerCutAtFlush`] fires (after the
    /// device went offline, with no lock held), e.g. to cut a persistent
    /// memory region at the same instant.
    pub fn on_power_cut(&self, hook: impl Fn() + Send + Sync + 'static) {
        *self.on_cut.lock() = Some(Box::new(hook));
    }

    fn run_cut_hook(&self) {
        if let Some(hook) = self.on_cut.lock().as_ref() {
            hook();
        }
    }

    /// A fresh, online device over what a crash with `seed` would leave:
    /// the durable image plus a seeded subset of the unflushed writes (torn
    /// if [`set_torn_writes`](Self::set_torn_writes) is on). This device is
    /// unchanged, so each seed gives one more crash state of the same cut.
    pub fn crash_copy(&self, seed: u64) -> CrashDevice {
        let st = self.state.lock();
        let mut copy = State::new(st.durable.clone());
        copy.torn_writes = st.torn_writes;
        for w in &st.log {
            copy.push(w.block, w.data.clone());
        }
        copy.crash_seeded(seed);
        copy.offline = false;
        copy.stats = CrashStats::default();
        CrashDevice {
            block_size: self.block_size,
            num_blocks: self.num_blocks,
            state: Mutex::new(copy),
            on_cut: Mutex::new(None),
        }
    }

    /// Whether the device has crashed and not yet recovered.
    pub fn is_offline(&self) -> bool {
        self.state.lock().offline
    }

    /// Power the device back on over the surviving image, in place, so
    /// holders of an `Arc` to it can go on. Faults stay disarmed.
    pub fn recover(&self) {
        self.state.lock().offline = false;
    }

    /// A fresh, online device over a copy of this one's durable image —
    /// what a restart would find. This device is unchanged.
    pub fn reopen(&self) -> CrashDevice {
        let st = self.state.lock();
        let mut fresh = State::new(st.durable.clone());
        fresh.torn_writes = st.torn_writes;
        CrashDevice {
            block_size: self.block_size,
            num_blocks: self.num_blocks,
            state: Mutex::new(fresh),
            on_cut: Mutex::new(None),
        }
    }

    /// The durable content of `block` (what a crash keeping nothing would
    /// leave), readable even while offline.
    pub fn durable_block(&self, block: u64) -> Result<Vec<u8>, BlockError> {
        check_range(self, block, 1)?;
        let state = self.state.lock();
        Ok(match state.durable.get(&block) {
            Some(data) => data.to_vec(),
            None => vec![0u8; self.block_size as usize],
        })
    }

    /// The counters so far.
    pub fn stats(&self) -> CrashStats {
        let state = self.state.lock();
        CrashStats {
            unflushed_blocks: state.latest.len() as u64,
            unflushed_writes: state.log.len() as u64,
            ..state.stats
        }
    }
}

impl BlockDevice for CrashDevice {
    fn block_size(&self) -> u32 {
        self.block_size
    }

    fn num_blocks(&self) -> u64 {
        self.num_blocks
    }

    fn read(&self, block: u64, buf: &mut [u8]) -> Result<(), BlockError> {
        check_request(self, block, buf.len())?;
        let mut state = self.state.lock();
        if state.offline {
            return Err(BlockError::Offline);
        }
        if let Verdict::Fail = state.judge(OpKind::Read) {
            return Err(BlockError::InjectedFault { block });
        }
        let bs = self.block_size as usize;
        for (i, chunk) in buf.chunks_exact_mut(bs).enumerate() {
            state.read_block(block + i as u64, chunk);
        }
        state.stats.reads += 1;
        Ok(())
    }

    fn write(&self, block: u64, buf: &[u8]) -> Result<(), BlockError> {
        let count = check_request(self, block, buf.len())?;
        let mut state = self.state.lock();
        if state.offline {
            return Err(BlockError::Offline);
        }
        let verdict = state.judge(OpKind::Write);
        if let Verdict::Fail = verdict {
            return Err(BlockError::InjectedFault { block });
        }
        let bs = self.block_size as usize;
        for (i, chunk) in buf.chunks_exact(bs).enumerate() {
            state.push_written(block + i as u64, chunk, self.num_blocks);
        }
        if let Verdict::CrashAfter(seed) = verdict {
            state.crash_seeded(seed);
            return Err(BlockError::Offline);
        }
        if let Verdict::CutAfter = verdict {
            state.offline = true;
            state.faults.clear();
            drop(state);
            self.run_cut_hook();
            return Err(BlockError::Offline);
        }
        state.stats.writes += 1;
        state.stats.blocks_written += count;
        Ok(())
    }

    fn flush(&self) -> Result<(), BlockError> {
        let mut state = self.state.lock();
        if state.offline {
            return Err(BlockError::Offline);
        }
        match state.judge(OpKind::Flush) {
            Verdict::Fail => return Err(BlockError::InjectedFlushFault),
            Verdict::CutAfter => {
                state.offline = true;
                state.faults.clear();
                drop(state);
                self.run_cut_hook();
                return Err(BlockError::Offline);
            }
            _ => {}
        }
        state.flush_all();
        state.stats.flushes += 1;
        Ok(())
    }

    fn discard(&self, block: u64, count: u64) -> Result<(), BlockError> {
        check_range(self, block, count)?;
        let mut state = self.state.lock();
        if state.offline {
            return Err(BlockError::Offline);
        }
        if let Verdict::Fail = state.judge(OpKind::Discard) {
            return Err(BlockError::InjectedFault { block });
        }
        for b in block..block + count {
            state.push(b, None);
        }
        state.stats.discards += 1;
        Ok(())
    }
}

#[cfg(test)]
#[path = "crash_tests.rs"]
mod tests;
