//! The background trigger: commit + checkpoint by fill level and by
//! interval.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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

/// The ring fill level that starts a checkpoint, adapted to how fast rings
/// fill. A round frees ring space only when it ends, and a transaction
/// waits once a ring passes its high-water mark: started at the configured
/// level, a round can outlast the space left above it when stagers fill
/// rings faster than the device takes the checkpoint (small-file creates
/// in-process spent ~30 % of their time waiting). After a wait the next
/// rounds start at a quarter, earlier; each round with no wait moves the
/// level back up by a sixteenth of the way, since later, larger rounds
/// write a block rewritten meanwhile once (a fsync-heavy mail workload,
/// which never waits, ran 5-15 % slower with every round started at a
/// quarter).
pub(super) struct FillLevel {
    /// The configured level (slots): the highest.
    max: u64,
    /// The level after a wait (slots): a quarter of the ring, or `max` if
    /// that is lower.
    min: u64,
    now: CachePadded<AtomicU64>,
    /// A stager or `begin` waited for ring space since the last round ended.
    waited: CachePadded<AtomicBool>,
}

impl FillLevel {
    pub(super) fn new(max: u64, slots: u64) -> Self {
        let min = (slots / 4).clamp(1, max);
        Self {
            max,
            min,
            now: CachePadded::new(AtomicU64::new(max)),
            waited: CachePadded::default(),
        }
    }

    /// Live slots in a ring that start a checkpoint now.
    pub(super) fn slots(&self) -> u64 {
        self.now.load(Ordering::Relaxed)
    }

    /// Someone had to wait for ring space: start the next rounds earlier.
    pub(super) fn waited(&self) {
        self.waited.store(true, Ordering::Relaxed);
        self.now.store(self.min, Ordering::Relaxed);
    }

    /// A checkpoint round ended: with no wait since the last one, move the
    /// level a sixteenth of the way back up.
    pub(super) fn round_ended(&self) {
        if self.waited.swap(false, Ordering::Relaxed) {
            return;
        }
        let step = ((self.max - self.min) / 16).max(1);
        let up = self
            .now
            .load(Ordering::Relaxed)
            .saturating_add(step)
            .min(self.max);
        self.now.store(up, Ordering::Relaxed);
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
                >= p.tail.load(Ordering::Relaxed) + self.fill.slots()
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

#[cfg(test)]
mod tests {
    use super::FillLevel;

    #[test]
    fn a_wait_starts_rounds_at_a_quarter_and_quiet_rounds_climb_back() {
        let fill = FillLevel::new(512, 1024);
        assert_eq!(fill.slots(), 512, "starts at the configured level");
        fill.round_ended();
        assert_eq!(fill.slots(), 512, "never above the configured level");
        fill.waited();
        assert_eq!(fill.slots(), 256, "a wait: a quarter of the ring");
        fill.round_ended();
        assert_eq!(fill.slots(), 256, "the round with the wait does not climb");
        let mut rounds = 0;
        while fill.slots() < 512 {
            fill.round_ended();
            rounds += 1;
        }
        assert_eq!(rounds, 16, "back up in 16 rounds without a wait");
        fill.round_ended();
        assert_eq!(fill.slots(), 512);
        fill.waited();
        fill.round_ended();
        fill.round_ended();
        assert_eq!(fill.slots(), 256 + 16, "one quiet round after the wait's");
    }

    #[test]
    fn a_configured_level_below_a_quarter_stays() {
        let fill = FillLevel::new(100, 1024);
        fill.waited();
        assert_eq!(fill.slots(), 100);
        fill.round_ended();
        fill.round_ended();
        assert_eq!(fill.slots(), 100);
    }
}
