//! The request path: queue threads hand requests to one device thread and
//! take completions back.
//!
//! ```text
//!  queue thread 0 ─┐  push_batch (1 lock)            take_all (1 lock) ┌─ queue thread 0
//!  queue thread 1 ─┼──────────────► inbox ─► Engine ─► outbox[q] ──────┼─ queue thread 1
//!        …         ┘                        (Backend:                   └─ …
//!                                            scheduler + device)
//! ```
//!
//! A queue thread runs [`serve`] over a [`QueueIo`]: the kernel's ublk queue
//! in production (`crate::kernel`), a [`crate::fake::FakeQueue`] in tests.
//! Both run exactly this code. With polling on, a queue thread that has
//! requests in flight never blocks: it spins between the kernel ring
//! (non-blocking) and its outbox. With polling off it sleeps in the kernel
//! ring and the engine wakes it through a [`Waker`].

use crate::backend::{Backend, Finished, IoBufPtr, Pending};
use crate::handoff::{Handoff, LockMode};
use crate::request::{decode, Geometry, IoOp, RawDesc, UblkRequestError};
use crate::stats::OpStats;
use parking_lot::Mutex;
use ptsd_ftl::{VirtualClock, WallClock};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::Thread;
use std::time::{Duration, Instant};

/// The engine's time base, in nanoseconds: any [`ptsd_ftl::Clock`], the one
/// clock abstraction of ptsd (the emulated SSD's devices take the same).
#[derive(Clone)]
pub struct Clock(Arc<dyn ptsd_ftl::Clock>);

impl Clock {
    /// The wall clock, starting now.
    pub fn wall() -> Self {
        Clock(Arc::new(WallClock::new()))
    }

    /// A clock at 0 that moves only when a test moves the returned
    /// [`VirtualClock`] (with [`VirtualClock::advance_to`]).
    pub fn manual() -> (Self, Arc<VirtualClock>) {
        let t = Arc::new(VirtualClock::new());
        (Clock(t.clone()), t)
    }

    /// Nanoseconds since the clock's start.
    #[inline]
    pub fn now_ns(&self) -> u64 {
        self.0.now_ns()
    }
}

impl From<Arc<dyn ptsd_ftl::Clock>> for Clock {
    fn from(c: Arc<dyn ptsd_ftl::Clock>) -> Self {
        Clock(c)
    }
}

impl std::fmt::Debug for Clock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Clock").field(&self.now_ns()).finish()
    }
}

/// Wakes a queue thread that sleeps waiting for completions.
pub trait Waker: Send + Sync {
    /// Wake the queue thread (it may not be asleep).
    fn wake(&self);
}

/// How the request path behaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EngineConfig {
    /// Number of queues (queue threads) feeding the engine.
    pub queues: u16,
    /// Tags per queue.
    pub depth: u16,
    /// Bytes of each tag's buffer.
    pub max_io_bytes: u32,
    /// Queue swapping or a lock per request.
    pub lock_mode: LockMode,
    /// Reap completions by polling instead of sleeping.
    pub poll: bool,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            queues: 1,
            depth: 64,
            max_io_bytes: 512 << 10,
            lock_mode: LockMode::Swap,
            poll: true,
        }
    }
}

/// State shared by the queue threads and the engine.
pub struct Shared {
    config: EngineConfig,
    geometry: Geometry,
    clock: Clock,
    inbox: Handoff<Pending>,
    outboxes: Vec<Handoff<Finished>>,
    queue_sleeping: Vec<AtomicBool>,
    wakers: Vec<Mutex<Option<Arc<dyn Waker>>>>,
    worker_sleeping: AtomicBool,
    worker: Mutex<Option<Thread>>,
    stop: AtomicBool,
    stats: Vec<Mutex<OpStats>>,
}

impl Shared {
    /// How the request path behaves.
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// The device's size and block size.
    pub fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    /// The engine's clock.
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// Latency histograms of every queue, merged.
    pub fn stats(&self) -> OpStats {
        let mut all = OpStats::new();
        for s in &self.stats {
            all.merge(&s.lock());
        }
        all
    }

    /// Lock acquisitions on the hand-off queues so far (inbox, outboxes).
    pub fn lock_count(&self) -> u64 {
        self.inbox.lock_count() + self.outboxes.iter().map(|o| o.lock_count()).sum::<u64>()
    }

    /// Ask the engine to finish what is in flight and stop; new requests
    /// are refused from now on.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        self.unpark_worker();
    }

    /// Whether `stop` was called.
    pub fn is_stopping(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    fn unpark_worker(&self) {
        if self.worker_sleeping.swap(false, Ordering::SeqCst) {
            if let Some(t) = self.worker.lock().as_ref() {
                t.unpark();
            }
        }
    }

    /// Register how to wake queue `qid` when it sleeps in no-poll mode.
    pub fn set_waker(&self, qid: u16, waker: Arc<dyn Waker>) {
        if let Some(w) = self.wakers.get(qid as usize) {
            *w.lock() = Some(waker);
        }
    }
}

/// The device side: owns the [`Backend`], drains the inbox, routes
/// completions. Run it on its own thread with [`Engine::run`], or drive it
/// step by step (deterministic tests, single-core benchmarks).
pub struct Engine {
    shared: Arc<Shared>,
    backend: Box<dyn Backend>,
    batch: Vec<Pending>,
    done: Vec<Finished>,
    per_queue: Vec<Vec<Finished>>,
}

/// How long an idle polling engine keeps spinning before it parks.
const WORKER_SPIN: Duration = Duration::from_micros(50);
/// Below this distance to the next modelled completion the engine spins
/// rather than sleeps (sleeps overshoot by tens of microseconds).
const SPIN_WINDOW_NS: u64 = 200_000;

impl Engine {
    /// An engine over `backend`, and the state its queues share.
    ///
    /// ```
    /// use ptsd_blockdev::MemDevice;
    /// use ptsd_ublk::backend::DirectBackend;
    /// use ptsd_ublk::engine::{Clock, Engine, EngineConfig};
    /// use ptsd_ublk::sched::SchedulerKind;
    /// let backend = DirectBackend::new(MemDevice::new(4096, 64).unwrap(), SchedulerKind::Fifo);
    /// let (engine, shared) = Engine::new(Box::new(backend), EngineConfig::default(), Clock::wall());
    /// assert_eq!(shared.geometry().num_blocks, 64);
    /// # drop(engine);
    /// ```
    pub fn new(
        backend: Box<dyn Backend>,
        config: EngineConfig,
        clock: Clock,
    ) -> (Engine, Arc<Shared>) {
        let queues = config.queues.max(1) as usize;
        let geometry = Geometry {
            block_size: backend.block_size(),
            num_blocks: backend.num_blocks(),
            max_io_bytes: config.max_io_bytes,
        };
        let shared = Arc::new(Shared {
            config,
            geometry,
            clock,
            inbox: Handoff::new(config.lock_mode),
            outboxes: (0..queues)
                .map(|_| Handoff::new(config.lock_mode))
                .collect(),
            queue_sleeping: (0..queues).map(|_| AtomicBool::new(false)).collect(),
            wakers: (0..queues).map(|_| Mutex::new(None)).collect(),
            worker_sleeping: AtomicBool::new(false),
            worker: Mutex::new(None),
            stop: AtomicBool::new(false),
            stats: (0..queues).map(|_| Mutex::new(OpStats::new())).collect(),
        });
        let engine = Engine {
            shared: shared.clone(),
            backend,
            batch: Vec::new(),
            done: Vec::new(),
            per_queue: (0..queues).map(|_| Vec::new()).collect(),
        };
        (engine, shared)
    }

    /// Take the inbox, serve it, route completions. Returns how many
    /// requests moved (in or out).
    pub fn step(&mut self) -> usize {
        let now = self.shared.clock.now_ns();
        let taken = self.shared.inbox.take_all(&mut self.batch);
        for p in self.batch.drain(..) {
            self.backend.submit(now, p);
        }
        self.backend.advance(now, &mut self.done);
        let finished = self.done.len();
        for f in self.done.drain(..) {
            // A completion for a queue that does not exist cannot happen
            // (requests carry their own queue id); drop it rather than panic.
            if let Some(v) = self.per_queue.get_mut(f.queue as usize) {
                v.push(f);
            }
        }
        for (q, v) in self.per_queue.iter_mut().enumerate() {
            if v.is_empty() {
                continue;
            }
            self.shared.outboxes[q].push_batch(v);
            if self.shared.queue_sleeping[q].swap(false, Ordering::SeqCst) {
                if let Some(w) = self.shared.wakers[q].lock().as_ref() {
                    w.wake();
                }
            }
        }
        taken + finished
    }

    /// When the backend next has something to release (emulated timing).
    pub fn next_event(&self) -> Option<u64> {
        self.backend.next_event()
    }

    /// Requests inside the backend.
    pub fn in_flight(&self) -> usize {
        self.backend.in_flight()
    }

    /// Serve until [`Shared::stop`] and nothing is left in flight, then
    /// shut the backend down (flushing it) and hand it back.
    pub fn run(mut self) -> Box<dyn Backend> {
        *self.shared.worker.lock() = Some(std::thread::current());
        let mut last_work = Instant::now();
        loop {
            if self.step() > 0 {
                last_work = Instant::now();
                continue;
            }
            let stopping = self.shared.is_stopping();
            if stopping && self.backend.in_flight() == 0 && self.shared.inbox.is_empty() {
                break;
            }
            let now = self.shared.clock.now_ns();
            match self.backend.next_event() {
                Some(t) if t > now + SPIN_WINDOW_NS => {
                    self.park(Some(Duration::from_nanos(t - now - SPIN_WINDOW_NS / 2)));
                }
                Some(_) => std::hint::spin_loop(),
                None if self.shared.config.poll && last_work.elapsed() < WORKER_SPIN => {
                    std::hint::spin_loop()
                }
                None if stopping => self.park(Some(Duration::from_millis(1))),
                None => self.park(None),
            }
        }
        if let Err(e) = self.backend.shutdown() {
            tracing::error!(error = %ptsd_blockdev::ErrorChain(&e), "backend shutdown failed");
        }
        self.backend
    }

    fn park(&self, timeout: Option<Duration>) {
        self.shared.worker_sleeping.store(true, Ordering::SeqCst);
        if self.shared.inbox.is_empty() && !self.shared.is_stopping() {
            match timeout {
                Some(t) => std::thread::park_timeout(t),
                None => std::thread::park(),
            }
        }
        self.shared.worker_sleeping.store(false, Ordering::SeqCst);
    }

    /// Run the engine on a new thread.
    pub fn spawn(self) -> std::io::Result<std::thread::JoinHandle<Box<dyn Backend>>> {
        std::thread::Builder::new()
            .name("ptsd-ublk-dev".into())
            .spawn(move || self.run())
    }
}

/// One request as the queue hands it in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Incoming {
    /// Its tag in the queue.
    pub tag: u16,
    /// The kernel's descriptor of it.
    pub desc: RawDesc,
}

/// The queue's end of the request path: checks requests, hands them to the
/// engine in batches, takes completions back, keeps the queue's latency
/// histograms.
pub struct QueueSide {
    shared: Arc<Shared>,
    qid: u16,
    arrivals: Vec<(u64, IoOp)>,
    in_flight: usize,
    staging: Vec<Pending>,
    reaped: Vec<Finished>,
    /// Arrival time of the batch being accepted (read once per batch).
    batch_now: Option<u64>,
}

impl QueueSide {
    /// Queue `qid`'s side of the engine `shared`.
    pub fn new(shared: Arc<Shared>, qid: u16) -> Self {
        let depth = shared.config.depth.max(1) as usize;
        QueueSide {
            shared,
            qid,
            arrivals: vec![(0, IoOp::Flush); depth],
            in_flight: 0,
            staging: Vec::new(),
            reaped: Vec::new(),
            batch_now: None,
        }
    }

    /// The queue's id.
    pub fn qid(&self) -> u16 {
        self.qid
    }

    /// The engine's shared state.
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Requests handed to the engine and not yet reaped.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Take one request. A request that cannot be served returns its
    /// (negative errno) result at once; the caller completes it.
    pub fn accept(&mut self, tag: u16, desc: &RawDesc, buf: IoBufPtr) -> Option<i32> {
        // One clock read per batch: requests fetched together arrived
        // together.
        let clock = &self.shared.clock;
        let now = *self.batch_now.get_or_insert_with(|| clock.now_ns());
        let checked = if (tag as usize) >= self.arrivals.len() {
            Err(UblkRequestError::BadTag {
                tag,
                depth: self.arrivals.len(),
            })
        } else if self.shared.is_stopping() {
            Err(UblkRequestError::ShuttingDown)
        } else {
            decode(desc, &self.shared.geometry)
        };
        match checked {
            Ok(cmd) => {
                let bytes = cmd.data_bytes(self.shared.geometry.block_size);
                if cmd.op.has_data() && (buf.len() as u64) < bytes {
                    self.shared.stats[self.qid as usize]
                        .lock()
                        .record(cmd.op, 1, false);
                    return Some(-libc::EINVAL);
                }
                self.arrivals[tag as usize] = (now, cmd.op);
                self.staging.push(Pending {
                    queue: self.qid,
                    tag,
                    cmd,
                    buf,
                    arrived_ns: now,
                });
                self.in_flight += 1;
                None
            }
            Err(e) => {
                tracing::debug!(qid = self.qid, tag, error = %e, "request refused");
                let op = match e {
                    UblkRequestError::Empty(op)
                    | UblkRequestError::Misaligned { op, .. }
                    | UblkRequestError::OutOfRange { op, .. }
                    | UblkRequestError::TooLarge { op, .. } => Some(op),
                    _ => None,
                };
                if let Some(op) = op {
                    // Refusals are rare: record straight into the shared
                    // histograms.
                    self.shared.stats[self.qid as usize]
                        .lock()
                        .record(op, 1, false);
                }
                Some(e.errno())
            }
        }
    }

    /// Hand everything accepted since the last call to the engine.
    pub fn submit(&mut self) {
        self.batch_now = None;
        if self.staging.is_empty() {
            return;
        }
        self.shared.inbox.push_batch(&mut self.staging);
        self.shared.unpark_worker();
    }

    /// Whether completions are waiting (no lock taken).
    pub fn has_completions(&self) -> bool {
        !self.shared.outboxes[self.qid as usize].is_empty()
    }

    /// Take the queue's completions and pass each `(tag, result, zone
    /// append sector)` to `complete`. Returns how many were reaped.
    pub fn reap(&mut self, mut complete: impl FnMut(u16, i32, Option<u64>)) -> usize {
        let n = self.shared.outboxes[self.qid as usize].take_all(&mut self.reaped);
        if n == 0 {
            return 0;
        }
        let now = self.shared.clock.now_ns();
        // One lock per batch, recording straight into the queue's shared
        // histograms: a private set merged per batch would cost a scan of
        // every bucket (and, renewed, over a MiB of fresh memory) per batch.
        // The only other user of this lock is the once-a-second reader.
        let mut stats = self.shared.stats[self.qid as usize].lock();
        for f in self.reaped.drain(..) {
            let (arrived, _) = self.arrivals[f.tag as usize];
            stats.record(f.op, now.saturating_sub(arrived), f.result >= 0);
            complete(f.tag, f.result, f.append_sector);
        }
        drop(stats);
        self.in_flight -= n.min(self.in_flight);
        n
    }

    /// Ask to be woken when completions arrive. Returns false if some are
    /// already waiting (then do not sleep).
    pub fn prepare_sleep(&self) -> bool {
        self.shared.queue_sleeping[self.qid as usize].store(true, Ordering::SeqCst);
        if self.has_completions() {
            self.shared.queue_sleeping[self.qid as usize].store(false, Ordering::SeqCst);
            return false;
        }
        true
    }

    /// Done sleeping.
    pub fn end_sleep(&self) {
        self.shared.queue_sleeping[self.qid as usize].store(false, Ordering::SeqCst);
    }
}

/// The queue is gone (the kernel aborted it, or the fake was closed).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the queue is down")]
pub struct QueueDown;

/// What the request path needs from a ublk queue, the kernel's or a fake.
pub trait QueueIo {
    /// Append the requests that arrived since the last call to `out`. With
    /// `wait`, block until at least one arrives or the queue's [`Waker`]
    /// fires; without, return at once.
    fn fetch(&mut self, wait: bool, out: &mut Vec<Incoming>) -> Result<(), QueueDown>;
    /// The data buffer of `tag`.
    fn buffer(&mut self, tag: u16) -> IoBufPtr;
    /// Complete `tag` with `result` (bytes moved, 0, or `-errno`) and, for
    /// a successful zone append, the sector its data went to.
    fn complete(&mut self, tag: u16, result: i32, append_sector: Option<u64>);
}

/// Serve one queue until it goes down: the loop every queue thread runs.
///
/// Before returning it waits for the engine to give back every request in
/// flight, so the queue's buffers can be freed safely.
pub fn serve<Q: QueueIo>(q: &mut Q, side: &mut QueueSide) {
    let mut incoming = Vec::new();
    let mut idle_spins = 0u32;
    loop {
        match serve_once(q, side, &mut incoming) {
            Err(QueueDown) => {
                drain(side);
                return;
            }
            Ok(0) => {
                idle_spins += 1;
                if idle_spins % 64 == 0 {
                    // Polling, but do not starve the engine on a busy core.
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
            }
            Ok(_) => idle_spins = 0,
        }
    }
}

/// One turn of [`serve`]: fetch (blocking only when allowed), check and
/// hand over what arrived, complete what came back. Returns how many
/// requests arrived or completed. Tests call it directly to interleave the
/// queue and the engine deterministically.
pub fn serve_once<Q: QueueIo>(
    q: &mut Q,
    side: &mut QueueSide,
    incoming: &mut Vec<Incoming>,
) -> Result<usize, QueueDown> {
    // Block in the queue only with nothing in flight (nothing to reap), or
    // in no-poll mode once the engine has promised to wake us.
    let wait = if side.in_flight() == 0 {
        true
    } else if side.shared.config.poll {
        false
    } else {
        side.prepare_sleep()
    };
    let fetched = q.fetch(wait, incoming);
    if wait {
        side.end_sleep();
    }
    let arrived = incoming.len();
    for inc in incoming.drain(..) {
        let buf = q.buffer(inc.tag);
        if let Some(res) = side.accept(inc.tag, &inc.desc, buf) {
            q.complete(inc.tag, res, None);
        }
    }
    side.submit();
    let reaped = side.reap(|tag, res, append| q.complete(tag, res, append));
    fetched?;
    Ok(arrived + reaped)
}

/// Wait until every request of `side` is back from the engine, dropping the
/// results (the queue they would complete on is gone).
pub fn drain(side: &mut QueueSide) {
    while side.in_flight() > 0 {
        if side.reap(|_, _, _| {}) == 0 {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}
