//! A daemon killed with acknowledged but unflushed writes (the engine and
//! its backend dropped without the shutdown flush), then a new one on the
//! same file store: every acknowledged write reads back, and the FLUSH the
//! kernel sends the new daemon covers them for real.

use ptsd_ftl::{FtlConfig, Op, Payload, Request, Ssd, StoreKind, Variant};
use ptsd_ublk::engine::{serve_once, Clock, Engine, EngineConfig, Incoming, QueueSide};
use ptsd_ublk::fake::{fake_queue, FakeHandle, FakeQueue};
use ptsd_ublk::ftl::{FtlBackend, Timing};
use ptsd_ublk::request::{op, RawDesc};
use ptsd_ublk::LockMode;
use std::path::Path;

const BS: usize = 4096;
const SPB: u64 = (BS / 512) as u64;
const DEPTH: u16 = 32;
const BYTES: u64 = 32 << 20;

/// The FTL configuration `ptsd ublk add --ftl ptsd --store FILE` builds.
fn cfg(image: &Path) -> FtlConfig {
    let mut cfg = FtlConfig::paper(Variant::WriteOpt, BYTES);
    let floor = 4 * u64::from(cfg.page_size);
    cfg.map_memory_bytes = cfg.map_memory_bytes.map(|b| b.max(floor));
    cfg.store = StoreKind::File {
        path: image.to_path_buf(),
    };
    cfg
}

struct Daemon {
    engine: Engine,
    queue: FakeQueue,
    handle: FakeHandle,
    side: QueueSide,
    scratch: Vec<Incoming>,
}

fn start(image: &Path, timing: Timing, log_limit: Option<u64>) -> Daemon {
    let mut backend = FtlBackend::new(Ssd::open(cfg(image)).unwrap(), timing).unwrap();
    if let Some(l) = log_limit {
        backend.set_log_limit(l);
    }
    let config = EngineConfig {
        queues: 1,
        depth: DEPTH,
        max_io_bytes: 64 << 10,
        lock_mode: LockMode::Swap,
        poll: true,
    };
    let (engine, shared) = Engine::new(Box::new(backend), config, Clock::wall());
    let (queue, handle) = fake_queue(DEPTH, 64 << 10, false);
    Daemon {
        engine,
        queue,
        handle,
        side: QueueSide::new(shared, 0),
        scratch: Vec::new(),
    }
}

impl Daemon {
    /// Submit one request and serve until it completes.
    fn one(&mut self, tag: u16, desc: RawDesc, data: Option<&[u8]>) -> i32 {
        self.handle.submit(tag, desc, data).unwrap();
        for _ in 0..10_000 {
            serve_once(&mut self.queue, &mut self.side, &mut self.scratch).unwrap();
            self.engine.step();
            serve_once(&mut self.queue, &mut self.side, &mut self.scratch).unwrap();
            let c = self.handle.take_completions();
            if let Some(&(t, res)) = c.first() {
                assert_eq!((c.len(), t), (1, tag), "{desc:?}");
                return res;
            }
        }
        panic!("{desc:?} never completed");
    }

    fn write(&mut self, block: u64, data: &[u8]) {
        let sectors = (data.len() / 512) as u32;
        let res = self.one(0, RawDesc::new(op::WRITE, block * SPB, sectors), Some(data));
        assert_eq!(res, data.len() as i32, "write of block {block}");
    }

    fn read(&mut self, block: u64, blocks: usize) -> Vec<u8> {
        let sectors = (blocks * BS / 512) as u32;
        let res = self.one(1, RawDesc::new(op::READ, block * SPB, sectors), None);
        assert_eq!(res, (blocks * BS) as i32, "read of block {block}");
        self.handle.read_buffer(1, blocks * BS).unwrap()
    }

    fn flush(&mut self) -> i32 {
        self.one(2, RawDesc::new(op::FLUSH, 0, 0), None)
    }

    /// kill -9: everything the process held is gone, nothing is flushed.
    fn kill(self) {
        drop(self);
    }
}

/// assert_eq! for buffers, without printing them.
macro_rules! same {
    ($a:expr, $b:expr) => {
        same!($a, $b, "")
    };
    ($a:expr, $b:expr, $($msg:tt)+) => {{
        let (a, b) = (&$a[..], &$b[..]);
        if a != b {
            let at = a.iter().zip(b).position(|(x, y)| x != y);
            panic!(
                "buffers differ (lengths {} and {}, first difference at byte {:?}) {}",
                a.len(),
                b.len(),
                at,
                format!($($msg)+)
            );
        }
    }};
}

fn pattern(block: u64, version: u8, blocks: usize) -> Vec<u8> {
    (0..blocks * BS)
        .map(|i| (i as u8).wrapping_mul(31) ^ (block as u8).wrapping_mul(7) ^ version)
        .collect()
}

/// What the image alone holds for `block` (no log replay): a copy of it
/// opened by the SSD directly.
fn image_alone(image: &Path, block: u64) -> Vec<u8> {
    let copy = image.with_extension("copy");
    std::fs::copy(image, &copy).unwrap();
    let mut ssd = Ssd::open(cfg(&copy)).unwrap();
    let r = Request {
        id: 1,
        op: Op::Read,
        lpn: block,
        pages: 1,
    };
    ssd.submit(0, r, Payload::Read(vec![0; BS])).unwrap();
    let mut done = Vec::new();
    while let Some(t) = ssd.next_event() {
        ssd.advance(t, &mut done);
    }
    match done.pop().map(|d| d.payload) {
        Some(Payload::Read(v)) => v,
        other => panic!("read of the copy: {other:?}"),
    }
}

#[test]
fn acknowledged_writes_survive_a_daemon_kill_and_the_next_flush_covers_them() {
    for timing in [Timing::Off, Timing::Emulate] {
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("ssd.img");
        let mut d = start(&image, timing, None);
        // Flushed: blocks 0..8. Acknowledged only: 8..16 rewritten, a
        // discard of 3, write-zeroes of 5, and new blocks 100..108.
        for b in 0..16 {
            d.write(b, &pattern(b, 1, 1));
        }
        assert_eq!(d.flush(), 0);
        for b in 8..16 {
            d.write(b, &pattern(b, 2, 1));
        }
        assert_eq!(d.one(3, RawDesc::new(op::DISCARD, 3 * SPB, 8), None), 0);
        assert_eq!(
            d.one(3, RawDesc::new(op::WRITE_ZEROES, 5 * SPB, 8), None),
            0
        );
        d.write(100, &pattern(100, 3, 8));
        d.kill();

        // The point of the log: the image alone lost the unflushed write.
        assert!(
            image_alone(&image, 100)[..] != pattern(100, 3, 8)[..BS],
            "{timing:?}: the write buffer was flushed after all; the test proves nothing"
        );

        let mut d = start(&image, timing, None);
        assert_eq!(d.flush(), 0, "the recovered daemon's first FLUSH");
        let check = |d: &mut Daemon| {
            for b in 0..16 {
                let want = match b {
                    3 | 5 => vec![0; BS],
                    8.. => pattern(b, 2, 1),
                    _ => pattern(b, 1, 1),
                };
                same!(d.read(b, 1), want, "{timing:?} block {b}");
            }
            same!(d.read(100, 8), pattern(100, 3, 8), "{timing:?}");
        };
        check(&mut d);
        // Killed again right after that FLUSH: still all there, from the
        // image itself now.
        d.kill();
        same!(image_alone(&image, 100), pattern(100, 3, 8)[..BS]);
        let mut d = start(&image, timing, None);
        check(&mut d);
    }
}

#[test]
fn a_flush_drops_only_what_it_covers_and_a_clean_stop_empties_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let image = dir.path().join("ssd.img");
    let backend = FtlBackend::new(Ssd::open(cfg(&image)).unwrap(), Timing::Off).unwrap();
    assert!(backend.log().unwrap().is_empty());
    drop(backend);
    // Writes, a flush, more writes: the log keeps the records after the
    // flush only.
    let mut d = start(&image, Timing::Off, None);
    d.write(1, &pattern(1, 1, 2));
    d.flush();
    d.write(5, &pattern(5, 2, 1));
    d.kill();
    let log = ptsd_ublk::acklog::AckLog::path_for(&image);
    let (_, recs) = ptsd_ublk::acklog::AckLog::open(&log, BS as u32, BYTES / BS as u64).unwrap();
    assert_eq!(recs.len(), 1, "only the write after the flush is live");
    let mut d = start(&image, Timing::Off, None);
    same!(d.read(1, 2), pattern(1, 1, 2));
    same!(d.read(5, 1), pattern(5, 2, 1));
    d.write(9, &pattern(9, 9, 1));
    // A clean stop (the daemon's shutdown flush) leaves nothing to replay.
    d.side.shared().stop();
    drop(d.engine.run()); // serves what is left, then the shutdown flush
    let (_, recs) = ptsd_ublk::acklog::AckLog::open(&log, BS as u32, BYTES / BS as u64).unwrap();
    assert!(recs.is_empty());
    let mut d = start(&image, Timing::Off, None);
    same!(d.read(9, 1), pattern(9, 9, 1));
}

#[test]
fn past_the_log_limit_the_backend_flushes_by_itself_and_loses_nothing() {
    for timing in [Timing::Off, Timing::Emulate] {
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("ssd.img");
        let limit = 64 * BS as u64;
        let mut d = start(&image, timing, Some(limit));
        for b in 0..300 {
            d.write(b, &pattern(b, 4, 1));
        }
        d.kill();
        let log = ptsd_ublk::acklog::AckLog::path_for(&image);
        let (l, recs) =
            ptsd_ublk::acklog::AckLog::open(&log, BS as u32, BYTES / BS as u64).unwrap();
        assert!(
            l.live_bytes() <= limit + BS as u64 + 64,
            "{timing:?}: {} live bytes",
            l.live_bytes()
        );
        assert!(!recs.is_empty() && recs.len() < 300);
        drop(l);
        let mut d = start(&image, timing, None);
        for b in 0..300 {
            same!(d.read(b, 1), pattern(b, 4, 1), "{timing:?} block {b}");
        }
    }
}
