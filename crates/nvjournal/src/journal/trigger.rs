//! The background trigger: commit + checkpoint by fill level and by
//! interval.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crossbeam::channel::{Receiver, RecvTimeoutError, Sender};

use super::Inner;
use crate::protocol::CachePadded;

/// Wakes the trigger thread: a kick is a message, at most one pending
/// (kicks while one waits coalesce).
pub(super) struct Trigger {
    pub(super) tx: Sender<()>,
    pub(super) rx: Receiver<()>,
    pub(super) kicked: CachePadded<AtomicBool>,
}

impl Trigger {
    pub(super) fn new() -> Self {
        let (tx, rx) = crossbeam::channel::bounded(1);
        Self {
            tx,
            rx,
            kicked: CachePadded::default(),
        }
    }
}

impl Inner {
    pub(super) fn kick_trigger(&self) {
        if !self.trigger.kicked.load(Ordering::Relaxed)
            && !self.trigger.kicked.swap(true, Ordering::AcqRel)
        {
            // Full: a kick is already pending, which is all this one asks.
            let _ = self.trigger.tx.try_send(());
        }
    }

    /// True if some ring holds at least the fill level of live slots.
    fn over_fill_level(&self) -> bool {
        self.parts.iter().any(|p| {
            p.ring.head.load(Ordering::Relaxed)
                >= p.tail.load(Ordering::Relaxed) + self.fill_threshold
        })
    }

    /// Background trigger: commit + checkpoint when a ring passes the fill
    /// level, and every `checkpoint_interval`.
    pub(super) fn trigger_worker(&self) {
        let interval = self.cfg.checkpoint_interval;
        let mut last = Instant::now();
        loop {
            let wait = interval.unwrap_or(Duration::from_millis(100));
            if let Err(RecvTimeoutError::Disconnected) = self.trigger.rx.recv_timeout(wait) {
                return;
            }
            if self.shutdown.load(Ordering::SeqCst) {
                return;
            }
            let kicked = self.trigger.kicked.swap(false, Ordering::AcqRel);
            let due = interval.is_some_and(|i| last.elapsed() >= i);
            // A kick from a stage that saw the ring full just before the
            // last round freed it is stale: a round now would checkpoint
            // only the few slots staged since.
            let filled = kicked && self.over_fill_level();
            if !due && !filled {
                continue;
            }
            last = Instant::now();
            // Commit what is finished (a commit never waits for open
            // transactions: a stager waiting for ring space may be one).
            let fin = self.stage.epochs.finished();
            if !self.stage.epochs.is_durable(fin) && self.commit_covering(fin).is_err() {
                continue;
            }
            self.start_checkpoint_if_idle();
        }
    }
}
