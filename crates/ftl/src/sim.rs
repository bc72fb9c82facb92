//! The simulator: drives a device over a virtual clock, closed-loop at a
//! queue depth or open-loop by trace timestamps, one phase at a time.
//!
//! The device is anything that implements [`SimDevice`] (the [`crate::Ssd`]
//! does, timing only); requests come from a [`RequestSource`] (a synthetic
//! [`Workload`] or a trace). Each phase resets the device's counters, runs
//! until its last request completes and returns a [`PhaseReport`].
//!
//! Closed loop at queue depth `qd`: `qd` requests are submitted at the
//! phase's start; whenever one completes, the next is submitted at its
//! completion time, so exactly `qd` are outstanding until the source runs
//! dry.
//!
//! ```
//! use ptsd_ftl::sim::{testing::FixedLatency, Simulator};
//! use ptsd_ftl::workload::WorkloadSpec;
//! // A device with 4 parallel units and 100 µs per request.
//! let mut sim = Simulator::new(FixedLatency::new(4, 100_000, 100_000));
//! let mut reads = WorkloadSpec::random_read(1 << 20, 10_000, 1).build().unwrap();
//! let phase = sim.run_closed("randread", &mut reads, 4).unwrap();
//! assert_eq!(phase.read.count, 10_000);
//! assert!((phase.throughput.iops - 40_000.0).abs() < 100.0);
//! ```

use std::time::Instant;

use serde::Serialize;
use thiserror::Error;

use crate::request::{Completion, Op, Request};
use crate::stats::{LatencyRecorder, PhaseReport, Throughput};
use crate::trace::{TraceError, TraceReader, TraceRecord};
use crate::workload::Workload;

/// An error a device reports for a request it cannot take.
pub type DeviceError = Box<dyn std::error::Error + Send + Sync>;

/// What the simulator needs from a device.
pub trait SimDevice {
    /// The device's counters, snapshotted at the end of each phase.
    type Stats: Clone + Serialize;

    /// Hand the device a request at `now_ns`.
    fn submit(&mut self, now_ns: u64, req: Request) -> Result<(), DeviceError>;
    /// Run the device up to `now_ns`, appending the requests completed by
    /// then to `done`.
    fn advance(&mut self, now_ns: u64, done: &mut Vec<Completion>);
    /// The time of the device's next internal event, if it has work.
    fn next_event(&self) -> Option<u64>;
    /// The counters since the last [`SimDevice::reset_stats`].
    fn stats(&self) -> Self::Stats;
    /// Start counting afresh (at each phase).
    fn reset_stats(&mut self);
    /// Bytes per logical page (for MB/s).
    fn page_size(&self) -> u32;
    /// Why the device stopped working, if it did (checked after every
    /// [`SimDevice::advance`]; a failed device also refuses submissions).
    fn fault(&self) -> Option<DeviceError> {
        None
    }
    /// An independent copy of the device in its current state, if it can
    /// be copied (see [`Simulator::checkpoint`]).
    fn try_clone(&self) -> Option<Self>
    where
        Self: Sized,
    {
        None
    }
}

/// A device state and the virtual time it was saved at, to run several
/// phases from the same starting point ([`Simulator::checkpoint`]).
pub struct Checkpoint<D> {
    device: D,
    now_ns: u64,
}

/// A simulation could not go on.
#[derive(Debug, Error)]
pub enum SimError {
    #[error("the device rejected request {id} ({op:?} at page {lpn}) at {now_ns} ns")]
    Device {
        id: u64,
        op: Op,
        lpn: u64,
        now_ns: u64,
        #[source]
        source: DeviceError,
    },
    #[error("the device failed at {now_ns} ns")]
    DeviceFailed {
        now_ns: u64,
        #[source]
        source: DeviceError,
    },
    #[error(transparent)]
    Trace(#[from] TraceError),
    #[error("the device holds {in_flight} requests but has no event pending")]
    Stalled { in_flight: u64 },
    #[error("the queue depth must be at least 1")]
    ZeroQueueDepth,
}

/// A stream of requests for a closed-loop phase.
pub trait RequestSource {
    /// The next request, `None` when the source is exhausted.
    fn next_request(&mut self) -> Result<Option<Request>, SimError>;
    /// How many requests it will yield in all, if known (for progress).
    fn total(&self) -> Option<u64>;
    /// Says what the source is, e.g. `randread 4 KiB`.
    fn describe(&self) -> String;
}

impl RequestSource for Workload {
    #[inline]
    fn next_request(&mut self) -> Result<Option<Request>, SimError> {
        Ok(self.next())
    }

    fn total(&self) -> Option<u64> {
        Some(self.spec().requests)
    }

    fn describe(&self) -> String {
        let s = self.spec();
        let kind = match (s.read_percent, s.access) {
            (100, _) => "read".to_string(),
            (0, _) => "write".to_string(),
            (p, _) => format!("{p}% read"),
        };
        let access = match s.access {
            crate::workload::Access::Sequential => "sequential".to_string(),
            crate::workload::Access::Uniform => "random".to_string(),
            crate::workload::Access::Zipf { theta } => format!("zipf({theta})"),
            crate::workload::Access::Runs {
                run_slots,
                theta: 0.0,
            } => format!("runs of {run_slots}"),
            crate::workload::Access::Runs { run_slots, theta } => {
                format!("zipf({theta}) runs of {run_slots}")
            }
        };
        format!("{access} {kind}, {} pages/request", s.pages_per_request)
    }
}

/// A stream of timestamped requests for an open-loop phase.
pub trait TimedSource {
    /// The next request and its time in ns from the phase's start.
    fn next_timed(&mut self) -> Result<Option<(u64, Request)>, SimError>;
    /// Says what the source is.
    fn describe(&self) -> String;
}

/// A trace replayed as a plain stream (timestamps ignored), for a
/// closed-loop phase, or by its timestamps, for an open-loop one.
pub struct TraceSource<R> {
    reader: TraceReader<R>,
    name: String,
}

impl<R: std::io::BufRead> TraceSource<R> {
    pub fn new(reader: TraceReader<R>, name: &str) -> Self {
        TraceSource {
            reader,
            name: name.to_string(),
        }
    }

    /// The reader (e.g. for its skipped-line count).
    pub fn reader(&self) -> &TraceReader<R> {
        &self.reader
    }
}

impl<R: std::io::BufRead> RequestSource for TraceSource<R> {
    fn next_request(&mut self) -> Result<Option<Request>, SimError> {
        Ok(self.reader.next().transpose()?.map(|r| r.request))
    }

    fn total(&self) -> Option<u64> {
        None
    }

    fn describe(&self) -> String {
        format!("trace {}", self.name)
    }
}

impl<R: std::io::BufRead> TimedSource for TraceSource<R> {
    fn next_timed(&mut self) -> Result<Option<(u64, Request)>, SimError> {
        Ok(self
            .reader
            .next()
            .transpose()?
            .map(|TraceRecord { ts_ns, request }| (ts_ns, request)))
    }

    fn describe(&self) -> String {
        format!("trace {} (timed)", self.name)
    }
}

/// Open-loop arrivals for a request stream: a Poisson process at `iops`
/// requests per second (exponential gaps, seeded), so that the arrivals do
/// not depend on completions and latencies are not shaped by a closed loop.
///
/// ```
/// use ptsd_ftl::sim::{testing::FixedLatency, Poisson, Simulator};
/// use ptsd_ftl::workload::WorkloadSpec;
/// let reads = WorkloadSpec::random_read(1 << 20, 20_000, 1).build().unwrap();
/// let mut arrivals = Poisson::new(reads, 5_000.0, 7);
/// let mut sim = Simulator::new(FixedLatency::new(4, 100_000, 100_000));
/// let phase = sim.run_open("poisson", &mut arrivals, 1.0).unwrap();
/// // 20 000 requests at 5 000/s: about 4 s of simulated time.
/// assert!((phase.throughput.sim_seconds - 4.0).abs() < 0.1);
/// ```
pub struct Poisson<S> {
    source: S,
    iops: f64,
    rng: rand_chacha::ChaCha8Rng,
    at_ns: f64,
}

impl<S: RequestSource> Poisson<S> {
    /// Arrivals of `source`'s requests at `iops` per second on average.
    pub fn new(source: S, iops: f64, seed: u64) -> Self {
        use rand::SeedableRng;
        Poisson {
            source,
            iops: iops.max(1e-9),
            rng: rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ 0x9e37_79b9_7f4a_7c15),
            at_ns: 0.0,
        }
    }
}

impl<S: RequestSource> TimedSource for Poisson<S> {
    fn next_timed(&mut self) -> Result<Option<(u64, Request)>, SimError> {
        use rand::Rng;
        let Some(req) = self.source.next_request()? else {
            return Ok(None);
        };
        // Exponential gap: -ln(U) / rate, U in (0, 1].
        let u: f64 = 1.0 - self.rng.gen::<f64>();
        self.at_ns += -u.ln() / self.iops * 1e9;
        Ok(Some((self.at_ns.round() as u64, req)))
    }

    fn describe(&self) -> String {
        format!(
            "{}, Poisson arrivals at {:.0} IOPS",
            self.source.describe(),
            self.iops
        )
    }
}

/// Where a phase stands, handed to the progress callback.
#[derive(Clone, Copy, Debug)]
pub struct Progress<'a> {
    pub phase: &'a str,
    pub completed: u64,
    /// Requests in the phase, when the source knows.
    pub total: Option<u64>,
    /// Simulated time since the phase started.
    pub sim_ns: u64,
}

/// Completions between two progress callbacks.
const PROGRESS_EVERY: u64 = 1 << 15;

type ProgressFn<'p> = Box<dyn FnMut(&Progress<'_>) + Send + 'p>;

/// Drives one device through phases; the virtual clock runs on across
/// phases.
pub struct Simulator<'p, D> {
    device: D,
    now_ns: u64,
    done: Vec<Completion>,
    progress: Option<ProgressFn<'p>>,
}

/// Counts and timing of the phase under way.
struct PhaseState {
    recorder: LatencyRecorder,
    start_ns: u64,
    last_done_ns: u64,
    completed: u64,
    in_flight: u64,
    reads: u64,
    writes: u64,
    read_pages: u64,
    write_pages: u64,
    others: u64,
}

impl PhaseState {
    fn new(start_ns: u64) -> Self {
        PhaseState {
            recorder: LatencyRecorder::new(),
            start_ns,
            last_done_ns: start_ns,
            completed: 0,
            in_flight: 0,
            reads: 0,
            writes: 0,
            read_pages: 0,
            write_pages: 0,
            others: 0,
        }
    }

    #[inline]
    fn submitted(&mut self, req: &Request) {
        self.in_flight += 1;
        match req.op {
            Op::Read => {
                self.reads += 1;
                self.read_pages += u64::from(req.pages);
            }
            Op::Write => {
                self.writes += 1;
                self.write_pages += u64::from(req.pages);
            }
            Op::Discard | Op::Flush => self.others += 1,
        }
    }

    #[inline]
    fn completed(&mut self, c: &Completion) {
        self.recorder.record(c);
        self.last_done_ns = self.last_done_ns.max(c.done_ns);
        self.completed += 1;
        self.in_flight -= 1;
    }
}

impl<'p, D: SimDevice> Simulator<'p, D> {
    pub fn new(device: D) -> Self {
        Simulator {
            device,
            now_ns: 0,
            done: Vec::with_capacity(1024),
            progress: None,
        }
    }

    /// A simulator that starts from a saved state.
    pub fn from_checkpoint(saved: Checkpoint<D>) -> Self {
        let mut sim = Simulator::new(saved.device);
        sim.now_ns = saved.now_ns;
        sim
    }

    /// Call `f` every few ten thousand completions and at each phase's end.
    pub fn with_progress(mut self, f: impl FnMut(&Progress<'_>) + Send + 'p) -> Self {
        self.progress = Some(Box::new(f));
        self
    }

    pub fn device(&self) -> &D {
        &self.device
    }

    pub fn device_mut(&mut self) -> &mut D {
        &mut self.device
    }

    pub fn into_device(self) -> D {
        self.device
    }

    /// The virtual clock: the last phase's last completion.
    pub fn now_ns(&self) -> u64 {
        self.now_ns
    }

    /// Save the device and the clock (between phases), if the device can
    /// be copied.
    pub fn checkpoint(&self) -> Option<Checkpoint<D>> {
        Some(Checkpoint {
            device: self.device.try_clone()?,
            now_ns: self.now_ns,
        })
    }

    /// Go back to a saved state: the next phase starts where the saved one
    /// would have.
    pub fn restore(&mut self, saved: Checkpoint<D>) {
        self.device = saved.device;
        self.now_ns = saved.now_ns;
    }

    fn submit(&mut self, at_ns: u64, req: Request, phase: &mut PhaseState) -> Result<(), SimError> {
        self.device
            .submit(at_ns, req)
            .map_err(|source| SimError::Device {
                id: req.id,
                op: req.op,
                lpn: req.lpn,
                now_ns: at_ns,
                source,
            })?;
        phase.submitted(&req);
        Ok(())
    }

    #[inline]
    fn check_fault(&self, now_ns: u64) -> Result<(), SimError> {
        match self.device.fault() {
            None => Ok(()),
            Some(source) => Err(SimError::DeviceFailed { now_ns, source }),
        }
    }

    fn report_progress(&mut self, name: &str, phase: &PhaseState, total: Option<u64>) {
        if let Some(f) = self.progress.as_mut() {
            f(&Progress {
                phase: name,
                completed: phase.completed,
                total,
                sim_ns: phase.last_done_ns - phase.start_ns,
            });
        }
    }

    /// Run a closed-loop phase at queue depth `qd` until `source` is
    /// exhausted and every request has completed.
    pub fn run_closed<S: RequestSource>(
        &mut self,
        name: &str,
        source: &mut S,
        qd: u32,
    ) -> Result<PhaseReport<D::Stats>, SimError> {
        if qd == 0 {
            return Err(SimError::ZeroQueueDepth);
        }
        let wall = Instant::now();
        let total = source.total();
        self.device.reset_stats();
        let mut phase = PhaseState::new(self.now_ns);
        for _ in 0..qd {
            match source.next_request()? {
                Some(req) => self.submit(self.now_ns, req, &mut phase)?,
                None => break,
            }
        }
        let mut done = std::mem::take(&mut self.done);
        let mut next_progress = PROGRESS_EVERY;
        let result = (|| {
            while phase.in_flight > 0 {
                let Some(t) = self.device.next_event() else {
                    return Err(SimError::Stalled {
                        in_flight: phase.in_flight,
                    });
                };
                let t = t.max(self.now_ns);
                self.now_ns = t;
                done.clear();
                self.device.advance(t, &mut done);
                self.check_fault(t)?;
                for c in &done {
                    phase.completed(c);
                    if let Some(req) = source.next_request()? {
                        // The host answers a completion with its next
                        // request at once.
                        self.submit(c.done_ns.max(phase.start_ns), req, &mut phase)?;
                    }
                }
                if phase.completed >= next_progress {
                    next_progress = phase.completed + PROGRESS_EVERY;
                    self.report_progress(name, &phase, total);
                }
            }
            Ok(())
        })();
        done.clear();
        self.done = done;
        result?;
        self.now_ns = self.now_ns.max(phase.last_done_ns);
        self.report_progress(name, &phase, total);
        Ok(self.finish(name, format!("{}, qd={qd}", source.describe()), phase, wall))
    }

    /// Run an open-loop phase: each request is submitted at the phase's
    /// start plus its timestamp times `time_scale` (0.5 replays twice as
    /// fast), however many are outstanding.
    pub fn run_open<S: TimedSource>(
        &mut self,
        name: &str,
        source: &mut S,
        time_scale: f64,
    ) -> Result<PhaseReport<D::Stats>, SimError> {
        let wall = Instant::now();
        self.device.reset_stats();
        let mut phase = PhaseState::new(self.now_ns);
        let mut done = std::mem::take(&mut self.done);
        let mut next_progress = PROGRESS_EVERY;
        let result = (|| {
            loop {
                let next = source.next_timed()?;
                // Run the device up to the next arrival (or to the end).
                let until = next.map(|(ts, _)| {
                    phase.start_ns + (ts as f64 * time_scale.max(0.0)).round() as u64
                });
                while let Some(t) = self.device.next_event() {
                    if until.is_some_and(|u| t > u) {
                        break;
                    }
                    let t = t.max(self.now_ns);
                    self.now_ns = t;
                    done.clear();
                    self.device.advance(t, &mut done);
                    self.check_fault(t)?;
                    for c in &done {
                        phase.completed(c);
                    }
                    if phase.in_flight == 0 && until.is_none() {
                        break;
                    }
                }
                if phase.completed >= next_progress {
                    next_progress = phase.completed + PROGRESS_EVERY;
                    self.report_progress(name, &phase, None);
                }
                match (next, until) {
                    (Some((_, req)), Some(at)) => {
                        let at = at.max(self.now_ns);
                        self.now_ns = at;
                        self.submit(at, req, &mut phase)?;
                    }
                    _ => break,
                }
            }
            if phase.in_flight > 0 {
                return Err(SimError::Stalled {
                    in_flight: phase.in_flight,
                });
            }
            Ok(())
        })();
        done.clear();
        self.done = done;
        result?;
        self.now_ns = self.now_ns.max(phase.last_done_ns);
        self.report_progress(name, &phase, None);
        let what = format!("{}, open loop x{time_scale}", source.describe());
        Ok(self.finish(name, what, phase, wall))
    }

    fn finish(
        &mut self,
        name: &str,
        workload: String,
        phase: PhaseState,
        wall: Instant,
    ) -> PhaseReport<D::Stats> {
        let wall_seconds = wall.elapsed().as_secs_f64();
        let page = u64::from(self.device.page_size());
        let rec = &phase.recorder;
        PhaseReport {
            name: name.to_string(),
            workload,
            throughput: Throughput::new(
                (phase.completed, phase.reads, phase.writes),
                (phase.read_pages * page, phase.write_pages * page),
                phase.last_done_ns - phase.start_ns,
            ),
            read: rec.summary(Op::Read),
            write: rec.summary(Op::Write),
            all: rec.summary_all(),
            read_cdf: rec.cdf(Op::Read),
            write_cdf: rec.cdf(Op::Write),
            wall_seconds,
            requests_per_wall_second: if wall_seconds > 0.0 {
                phase.completed as f64 / wall_seconds
            } else {
                0.0
            },
            device: self.device.stats(),
        }
    }
}

/// Simple devices for testing the simulator and for examples.
pub mod testing;

#[cfg(test)]
mod tests {
    use super::testing::FixedLatency;
    use super::*;
    use crate::trace::{TraceFormat, TraceOptions};
    use crate::workload::WorkloadSpec;

    /// A device that fails mid-run stops the simulation with its typed
    /// cause as the error's source; the FTL reports its own fault.
    #[test]
    fn a_device_fault_stops_the_run_with_its_cause() {
        let mut dev = FixedLatency::new(1, 100_000, 400_000);
        dev.fail_after = Some(10);
        let mut sim = Simulator::new(dev);
        let mut w = WorkloadSpec::random_write(1000, 100, 1).build().unwrap();
        match sim.run_closed("w", &mut w, 1) {
            Err(e @ SimError::DeviceFailed { .. }) => {
                let cause = std::error::Error::source(&e).expect("a cause");
                assert_eq!(cause.to_string(), "worn out after 10 requests");
            }
            other => panic!("expected DeviceFailed, got {:?}", other.map(|_| ())),
        }

        let mut cfg = crate::FtlConfig::paper(crate::Variant::Page, 32 << 20);
        cfg.store = crate::StoreKind::None;
        let mut ssd = crate::Ssd::new(cfg).unwrap();
        assert!(SimDevice::fault(&ssd).is_none());
        ssd.inject_fault(crate::FtlError::NoSpace);
        let fault = SimDevice::fault(&ssd).expect("a fault");
        let fault = fault
            .downcast_ref::<crate::DeviceFault>()
            .expect("the FTL's own fault type");
        assert!(fault.is_no_space());
    }

    #[test]
    fn closed_loop_keeps_qd_outstanding() {
        let mut sim = Simulator::new(FixedLatency::new(8, 100_000, 400_000));
        let mut w = WorkloadSpec::random_read(1000, 8000, 1).build().unwrap();
        // qd 2 on 8 units: ids spread over units, at most 2 busy at once.
        let p = sim.run_closed("r", &mut w, 2).unwrap();
        assert_eq!(p.read.count, 8000);
        assert!(p.throughput.iops <= 20_000.0 + 1.0, "{}", p.throughput.iops);
        assert!(p.read.min_us >= 99.9);
        assert_eq!(p.device, 8000);
        assert_eq!(p.throughput.read_bytes, 8000 * 4096);
    }

    #[test]
    fn phases_continue_the_clock_and_count_separately() {
        let mut sim = Simulator::new(FixedLatency::new(1, 100_000, 400_000));
        let mut w = WorkloadSpec::random_write(1000, 100, 1).build().unwrap();
        let p1 = sim.run_closed("w", &mut w, 1).unwrap();
        assert_eq!(sim.now_ns(), 100 * 400_000);
        assert!((p1.write.p50_us - 400.0).abs() < 1.0);
        let mut r = WorkloadSpec::random_read(1000, 50, 1).build().unwrap();
        let p2 = sim.run_closed("r", &mut r, 1).unwrap();
        assert_eq!(p2.device, 50);
        assert_eq!(p2.write.count, 0);
        assert_eq!(sim.now_ns(), 100 * 400_000 + 50 * 100_000);
        assert!((p2.throughput.sim_seconds - 0.005).abs() < 1e-12);
    }

    #[test]
    fn queueing_shows_in_latency() {
        // qd 4 on one unit: every request waits for the three before it.
        let mut sim = Simulator::new(FixedLatency::new(1, 100_000, 100_000));
        let mut w = WorkloadSpec::random_read(1000, 1000, 1).build().unwrap();
        let p = sim.run_closed("r", &mut w, 4).unwrap();
        assert!((p.read.p50_us - 400.0).abs() < 1.0, "{:?}", p.read);
        assert!((p.throughput.iops - 10_000.0).abs() < 50.0);
    }

    #[test]
    fn open_loop_follows_timestamps() {
        // Requests every 1 ms on a 100 µs device: no queueing.
        let text: String = (0..100)
            .map(|i| format!("{},h,0,Read,{},4096,0\n", i * 10_000, i * 4096))
            .collect::<Vec<_>>()
            .concat();
        let reader = TraceReader::new(
            text.as_bytes(),
            "t",
            TraceOptions::new(TraceFormat::Msr, 4096, 1 << 20),
        );
        let mut src = TraceSource::new(reader, "t");
        let mut sim = Simulator::new(FixedLatency::new(1, 100_000, 100_000));
        let p = sim.run_open("replay", &mut src, 1.0).unwrap();
        assert_eq!(p.read.count, 100);
        assert!((p.read.max_us - 100.0).abs() < 0.5, "{:?}", p.read);
        assert_eq!(sim.now_ns(), 99 * 1_000_000 + 100_000);
        // Ten times faster: 100 µs apart on a 100 µs device, still no wait.
        let reader = TraceReader::new(
            text.as_bytes(),
            "t",
            TraceOptions::new(TraceFormat::Msr, 4096, 1 << 20),
        );
        let mut src = TraceSource::new(reader, "t");
        let mut sim = Simulator::new(FixedLatency::new(1, 100_000, 100_000));
        let p = sim.run_open("replay", &mut src, 0.1).unwrap();
        assert!((p.read.max_us - 100.0).abs() < 0.5);
        // A hundred times faster: they queue.
        let reader = TraceReader::new(
            text.as_bytes(),
            "t",
            TraceOptions::new(TraceFormat::Msr, 4096, 1 << 20),
        );
        let mut src = TraceSource::new(reader, "t");
        let mut sim = Simulator::new(FixedLatency::new(1, 100_000, 100_000));
        let p = sim.run_open("replay", &mut src, 0.01).unwrap();
        assert!(p.read.max_us > 5000.0);
    }

    #[test]
    fn closed_loop_trace_and_errors() {
        let text = "0,h,0,Read,0,4096,0\n1,h,0,Write,4096,4096,0\n2,h,0,Bogus,0,4096,0\n";
        let reader = TraceReader::new(
            text.as_bytes(),
            "bad.csv",
            TraceOptions::new(TraceFormat::Msr, 4096, 1 << 20),
        );
        let mut src = TraceSource::new(reader, "bad.csv");
        let mut sim = Simulator::new(FixedLatency::new(1, 100_000, 100_000));
        let err = sim
            .run_closed("replay", &mut src, 1)
            .unwrap_err()
            .to_string();
        assert_eq!(err, "bad.csv:3: unknown request type \"Bogus\"");

        let mut dev = FixedLatency::new(1, 1, 1);
        dev.capacity_pages = 10;
        let mut sim = Simulator::new(dev);
        let mut w = WorkloadSpec::random_read(1000, 100, 1).build().unwrap();
        assert!(matches!(
            sim.run_closed("r", &mut w, 4),
            Err(SimError::Device { .. })
        ));
        assert!(matches!(
            sim.run_closed("r", &mut w, 0),
            Err(SimError::ZeroQueueDepth)
        ));
    }

    #[test]
    fn progress_is_reported() {
        let calls = std::sync::Mutex::new(Vec::new());
        {
            let mut sim = Simulator::new(FixedLatency::new(4, 1000, 1000)).with_progress(|p| {
                calls.lock().unwrap().push((p.completed, p.total));
            });
            let mut w = WorkloadSpec::random_read(1000, 100_000, 1).build().unwrap();
            sim.run_closed("r", &mut w, 16).unwrap();
        }
        let calls = calls.into_inner().unwrap();
        assert!(calls.len() >= 3);
        assert_eq!(*calls.last().unwrap(), (100_000, Some(100_000)));
    }
}
