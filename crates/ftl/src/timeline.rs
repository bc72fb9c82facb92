//! Per-chip and per-channel timelines.
//!
//! A chip serves its operations first come, first served: it has one
//! next-free time. A channel only carries short page transfers, and a
//! transfer placed far in the future (behind a long GC on one chip) must not
//! block the channel for the other chips on it, so a channel keeps its
//! reserved intervals and a transfer takes the earliest gap that fits.

use std::collections::VecDeque;

#[derive(Debug, Default, Clone)]
pub(crate) struct Channel {
    /// Reserved `[start, end)` intervals, sorted, disjoint, merged when they
    /// touch.
    busy: VecDeque<(u64, u64)>,
}

impl Channel {
    /// Forget intervals that ended by `now`; nothing is placed before `now`.
    #[inline]
    fn prune(&mut self, now: u64) {
        while let Some(&(_, end)) = self.busy.front() {
            if end > now {
                break;
            }
            self.busy.pop_front();
        }
    }

    /// Reserve `dur` ns at the earliest start `>= t`; returns the start.
    fn reserve(&mut self, t: u64, dur: u64) -> u64 {
        if dur == 0 {
            return t;
        }
        // Fast path: after everything reserved so far.
        match self.busy.back_mut() {
            None => {
                self.busy.push_back((t, t + dur));
                return t;
            }
            Some(last) if last.1 <= t => {
                if last.1 == t {
                    last.1 = t + dur;
                } else {
                    self.busy.push_back((t, t + dur));
                }
                return t;
            }
            _ => {}
        }
        // Reservations lie mostly in the near future: scan back from the end
        // to the first interval that ends after `t`.
        let mut i = self.busy.len();
        while i > 0 && self.busy[i - 1].1 > t {
            i -= 1;
        }
        let mut start = t;
        loop {
            if i == self.busy.len() {
                let last = self
                    .busy
                    .back_mut()
                    .expect("non-empty: fast path handled empty");
                if last.1 == start {
                    last.1 = start + dur;
                } else {
                    self.busy.push_back((start, start + dur));
                }
                return start;
            }
            let (a, b) = self.busy[i];
            if start + dur <= a {
                let end = start + dur;
                let touches_prev = i > 0 && self.busy[i - 1].1 == start;
                let touches_next = end == a;
                match (touches_prev, touches_next) {
                    (true, true) => {
                        self.busy[i - 1].1 = b;
                        self.busy.remove(i);
                    }
                    (true, false) => self.busy[i - 1].1 = end,
                    (false, true) => self.busy[i].0 = start,
                    (false, false) => self.busy.insert(i, (start, end)),
                }
                return start;
            }
            start = start.max(b);
            i += 1;
        }
    }
}

/// Next-free times of every chip and the reserved intervals of every channel.
#[derive(Debug, Clone)]
pub(crate) struct Timeline {
    chip_free: Vec<u64>,
    channels: Vec<Channel>,
    chips_per_channel: u32,
    t_read: u64,
    t_prog: u64,
    t_erase: u64,
    t_xfer: u64,
}

impl Timeline {
    pub fn new(
        channels: u32,
        chips_per_channel: u32,
        t_read: u64,
        t_prog: u64,
        t_erase: u64,
        t_xfer: u64,
    ) -> Self {
        Timeline {
            chip_free: vec![0; (channels * chips_per_channel) as usize],
            channels: vec![Channel::default(); channels as usize],
            chips_per_channel,
            t_read,
            t_prog,
            t_erase,
            t_xfer,
        }
    }

    /// Drop channel reservations that ended by `now` (monotone).
    pub fn prune(&mut self, now: u64) {
        for ch in &mut self.channels {
            ch.prune(now);
        }
    }

    #[inline]
    fn channel_of(&self, chip: u32) -> usize {
        (chip / self.chips_per_channel) as usize
    }

    /// Page read: the chip senses the page, then it crosses the channel.
    /// The chip stays busy until its register is emptied. Returns the end.
    #[inline]
    pub fn read(&mut self, chip: u32, t: u64) -> u64 {
        let c = chip as usize;
        let sensed = t.max(self.chip_free[c]) + self.t_read;
        let ch = self.channel_of(chip);
        let xfer = self.channels[ch].reserve(sensed, self.t_xfer);
        let end = xfer + self.t_xfer;
        self.chip_free[c] = end;
        end
    }

    /// Page program: the data crosses the channel into the chip's register
    /// (the chip must be idle), then the chip programs. Returns the end.
    #[inline]
    pub fn program(&mut self, chip: u32, t: u64) -> u64 {
        let c = chip as usize;
        let ch = self.channel_of(chip);
        let xfer = self.channels[ch].reserve(t.max(self.chip_free[c]), self.t_xfer);
        let end = xfer + self.t_xfer + self.t_prog;
        self.chip_free[c] = end;
        end
    }

    /// Copy-back inside a chip (GC): read then program, no channel.
    #[inline]
    pub fn copyback(&mut self, chip: u32, t: u64) -> u64 {
        let c = chip as usize;
        let end = t.max(self.chip_free[c]) + self.t_read + self.t_prog;
        self.chip_free[c] = end;
        end
    }

    /// Block erase.
    #[inline]
    pub fn erase(&mut self, chip: u32, t: u64) -> u64 {
        let c = chip as usize;
        let end = t.max(self.chip_free[c]) + self.t_erase;
        self.chip_free[c] = end;
        end
    }

    /// When every chip is idle.
    pub fn all_idle_at(&self) -> u64 {
        self.chip_free.iter().copied().max().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channel_fills_gaps_and_merges() {
        let mut ch = Channel::default();
        assert_eq!(ch.reserve(100, 10), 100);
        assert_eq!(ch.reserve(50, 10), 50); // gap before
        assert_eq!(ch.reserve(55, 10), 60); // right after [50,60)
        assert_eq!(ch.reserve(60, 40), 110); // the 30 ns gap at 70 is too short
        assert_eq!(ch.busy.len(), 2);
        assert_eq!(ch.reserve(70, 30), 70); // exactly fills [70,100)
        assert_eq!(ch.busy, VecDeque::from(vec![(50, 150)]));
        ch.prune(150);
        assert!(ch.busy.is_empty());
    }

    #[test]
    fn a_far_transfer_does_not_block_the_channel() {
        let mut tl = Timeline::new(1, 2, 100, 400, 3000, 10);
        // chip 0 busy for a long time
        for _ in 0..10 {
            tl.erase(0, 0);
        }
        let far = tl.read(0, 0);
        assert_eq!(far, 30_000 + 110);
        // a read on chip 1 of the same channel is not delayed by it
        assert_eq!(tl.read(1, 0), 110);
        assert_eq!(tl.program(1, 0), 110 + 10 + 400);
    }
}
