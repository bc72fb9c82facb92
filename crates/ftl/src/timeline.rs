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

/// Reserved intervals of every chip and every channel.
///
/// An operation is issued to its chip when its input is ready (a data read
/// after its mapping-page read, say), so a chip serves operations in issue
/// order and an operation issued later for an earlier time may use an idle
/// gap: each chip, like each channel, keeps its reserved intervals.
#[derive(Debug, Clone)]
pub(crate) struct Timeline {
    chips: Vec<Channel>,
    channels: Vec<Channel>,
    chips_per_channel: u32,
    t_read: u64,
    t_prog: u64,
    t_erase: u64,
    t_xfer: u64,
    now: u64,
}

impl Channel {
    /// Earliest start `>= t` of a free stretch of `dur` ns.
    fn find(&self, t: u64, dur: u64) -> u64 {
        let mut i = self.busy.len();
        while i > 0 && self.busy[i - 1].1 > t {
            i -= 1;
        }
        let mut start = t;
        while i < self.busy.len() {
            let (a, b) = self.busy[i];
            if start + dur <= a {
                return start;
            }
            start = start.max(b);
            i += 1;
        }
        start
    }
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
            chips: vec![Channel::default(); (channels * chips_per_channel) as usize],
            channels: vec![Channel::default(); channels as usize],
            chips_per_channel,
            t_read,
            t_prog,
            t_erase,
            t_xfer,
            now: 0,
        }
    }

    /// Drop reservations that ended by `now` (monotone); nothing is placed
    /// before `now` afterwards.
    pub fn prune(&mut self, now: u64) {
        self.now = now;
        for ch in &mut self.channels {
            ch.prune(now);
        }
    }

    #[inline]
    fn channel_of(&self, chip: u32) -> usize {
        (chip / self.chips_per_channel) as usize
    }

    /// Place an operation on `chip` at the earliest start `s >= t` where the
    /// chip is free for `pre + xfer + post` ns and the channel for `xfer` ns
    /// from `s + pre`. Returns its end.
    fn place(&mut self, chip: u32, t: u64, pre: u64, xfer: u64, post: u64) -> u64 {
        let c = chip as usize;
        let ch = self.channel_of(chip);
        self.chips[c].prune(self.now);
        let total = pre + xfer + post;
        let mut s = t;
        loop {
            s = self.chips[c].find(s, total);
            if xfer == 0 {
                break;
            }
            let x = self.channels[ch].find(s + pre, xfer);
            if x == s + pre {
                self.channels[ch].reserve(x, xfer);
                break;
            }
            s = x - pre;
        }
        self.chips[c].reserve(s, total);
        s + total
    }

    /// Page read: the chip senses the page, then it crosses the channel.
    #[inline]
    pub fn read(&mut self, chip: u32, t: u64) -> u64 {
        self.place(chip, t, self.t_read, self.t_xfer, 0)
    }

    /// Page program: the data crosses the channel into the chip's register,
    /// then the chip programs.
    #[inline]
    pub fn program(&mut self, chip: u32, t: u64) -> u64 {
        self.place(chip, t, 0, self.t_xfer, self.t_prog)
    }

    /// Copy-back inside a chip (GC): read then program, no channel.
    #[inline]
    pub fn copyback(&mut self, chip: u32, t: u64) -> u64 {
        self.place(chip, t, self.t_read + self.t_prog, 0, 0)
    }

    /// Block erase.
    #[inline]
    pub fn erase(&mut self, chip: u32, t: u64) -> u64 {
        self.place(chip, t, self.t_erase, 0, 0)
    }

    /// When every chip is idle.
    pub fn all_idle_at(&self) -> u64 {
        self.chips
            .iter()
            .filter_map(|c| c.busy.back().map(|&(_, e)| e))
            .max()
            .unwrap_or(0)
            .max(self.now)
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

    #[test]
    fn a_later_issue_uses_an_idle_gap_of_the_chip() {
        let mut tl = Timeline::new(1, 1, 100, 400, 3000, 10);
        // A data read issued for t = 500 (after its mapping-page read)...
        assert_eq!(tl.read(0, 500), 610);
        // ...does not hold back a read issued later for t = 0.
        assert_eq!(tl.read(0, 0), 110);
        // Nor one that fits between: [110, 220) is free, [500, 610) is not.
        assert_eq!(tl.read(0, 100), 220);
        assert_eq!(tl.read(0, 400), 720);
    }
}
