//! The fake-queue rig the backend tests share: one queue and the engine,
//! driven step by step on the test's thread.
// Each test binary uses part of it.
#![allow(dead_code)]

use ptsd_ftl::VirtualClock;
use ptsd_ublk::engine::{serve_once, Clock, Engine, EngineConfig, Incoming, QueueSide};
use ptsd_ublk::fake::{fake_queue, FakeHandle, FakeQueue};
use ptsd_ublk::ftl::Timing;
use ptsd_ublk::request::RawDesc;
use ptsd_ublk::{Backend, LockMode};
use std::sync::Arc;

pub struct Rig {
    pub engine: Engine,
    pub queue: FakeQueue,
    pub handle: FakeHandle,
    pub side: QueueSide,
    pub scratch: Vec<Incoming>,
    /// The hand-moved clock, with emulated timing.
    pub clock: Option<Arc<VirtualClock>>,
}

/// The engine's clock for `timing`: the wall clock, or (emulated timing) a
/// clock the test moves by hand.
pub fn clock_for(timing: Timing) -> (Clock, Option<Arc<VirtualClock>>) {
    match timing {
        Timing::Off => (Clock::wall(), None),
        Timing::Emulate => {
            let (c, t) = Clock::manual();
            (c, Some(t))
        }
    }
}

impl Rig {
    /// `backend` behind one fake queue of `depth` tags with `buf`-byte
    /// buffers.
    pub fn new(
        backend: Box<dyn Backend>,
        (clock, manual): (Clock, Option<Arc<VirtualClock>>),
        depth: u16,
        buf: usize,
    ) -> Rig {
        let config = EngineConfig {
            queues: 1,
            depth,
            max_io_bytes: buf as u32,
            lock_mode: LockMode::Swap,
            poll: true,
        };
        let (engine, shared) = Engine::new(backend, config, clock);
        let (queue, handle) = fake_queue(depth, buf, false);
        Rig {
            engine,
            queue,
            handle,
            side: QueueSide::new(shared, 0),
            scratch: Vec::new(),
            clock: manual,
        }
    }

    /// Queue → engine → queue once; the completions.
    pub fn turn(&mut self) -> Vec<(u16, i32)> {
        serve_once(&mut self.queue, &mut self.side, &mut self.scratch).unwrap();
        self.engine.step();
        serve_once(&mut self.queue, &mut self.side, &mut self.scratch).unwrap();
        self.handle.take_completions()
    }

    /// Submit one request on `tag` and return its result.
    pub fn one(&mut self, tag: u16, desc: RawDesc, data: Option<&[u8]>) -> i32 {
        self.handle.submit(tag, desc, data).unwrap();
        let c = self.turn();
        assert_eq!(c.len(), 1, "{desc:?}");
        c[0].1
    }

    pub fn engine_next(&self) -> Option<u64> {
        self.engine.next_event()
    }

    /// Move the manual clock from event to event until nothing is in
    /// flight; returns the completions.
    pub fn settle(&mut self) -> Vec<(u16, i32)> {
        let t = self.clock.clone().unwrap();
        let mut all = self.turn();
        while self.side.in_flight() > 0 {
            let next = self
                .engine_next()
                .expect("requests in flight have a next event");
            t.advance_to(next);
            all.extend(self.turn());
        }
        all
    }
}
