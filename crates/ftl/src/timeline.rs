//! Per-chip and per-channel timelines.
//!
//! Each chip and each channel keeps its reserved intervals: an operation
//! takes the earliest gap that fits on its chip, and its transfer the
//! earliest gap on the channel, so one chip stuck behind a long GC does not
//! block its channel for the other chips on it, and an operation issued later
//! for an earlier time may use an idle gap.

use crate::fastdiv::Divisor;

/// Reserved `[start, end)` intervals of one resource (a chip or a channel).
///
/// A gap shorter than `min_gap` (the shortest reservation this resource
/// ever takes) can never be used, so it is merged away at once: lists stay
/// short and searches find the same starts as with every gap kept.
#[derive(Debug, Clone)]
pub(crate) struct Intervals {
    /// `busy[head..]`: sorted, disjoint, separated by gaps of at least
    /// `min_gap`. `busy[..head]` ended by `now` (dropped in bulk later).
    busy: Vec<(u64, u64)>,
    head: usize,
    min_gap: u64,
    /// End of the first live interval (`u64::MAX` if none) and of the last
    /// (0 if none), kept here so that the common cases (nothing to prune,
    /// append after everything) do not touch the list.
    first_end: u64,
    last_end: u64,
}

impl Default for Intervals {
    fn default() -> Self {
        Intervals::new(1)
    }
}

impl Intervals {
    /// A resource whose reservations all last at least `min_dur` ns.
    fn new(min_dur: u64) -> Self {
        Intervals {
            busy: Vec::new(),
            head: 0,
            min_gap: min_dur.max(1),
            first_end: u64::MAX,
            last_end: 0,
        }
    }

    /// The live intervals.
    #[cfg(test)]
    fn live(&self) -> &[(u64, u64)] {
        &self.busy[self.head..]
    }

    /// Forget intervals that ended by `now`. Only memory: a search from
    /// `t >= now` skips them anyway.
    #[inline(always)]
    fn prune(&mut self, now: u64) {
        if self.first_end > now {
            return;
        }
        let h = self.head + first_ending_after(&self.busy[self.head..], now);
        let live = self.busy.len() - h;
        if live == 0 {
            self.busy.clear();
            self.head = 0;
            self.first_end = u64::MAX;
            self.last_end = 0;
            return;
        }
        self.first_end = self.busy[h].1;
        if h >= 64 && h >= 2 * live {
            // Drop most of the dead prefix, keep some room for inserts
            // near the front.
            let keep = live / 2 + 8;
            self.busy.drain(..h - keep);
            self.head = keep;
        } else {
            self.head = h;
        }
    }

    /// Insert at `i` (`head <= i <= len`), moving the shorter side: the
    /// dead prefix is room to grow towards the front.
    #[inline]
    fn insert(&mut self, mut i: usize, x: (u64, u64)) {
        let n = self.busy.len();
        if i - self.head >= n - i {
            self.busy.insert(i, x);
            return;
        }
        if self.head == 0 {
            let pad = n / 2 + 8;
            self.busy.splice(0..0, std::iter::repeat_n((0, 0), pad));
            self.head = pad;
            i += pad;
        }
        self.busy.copy_within(self.head..i, self.head - 1);
        self.head -= 1;
        self.busy[i - 1] = x;
    }

    /// Remove entry `i` (`head <= i < len`), moving the shorter side.
    #[inline]
    fn remove(&mut self, i: usize) {
        if i - self.head < self.busy.len() - 1 - i {
            self.busy.copy_within(self.head..i, self.head + 1);
            self.head += 1;
        } else {
            self.busy.remove(i);
        }
    }

    /// Earliest start `>= t` of a free stretch of `dur` ns, and the index
    /// before which it goes in `busy`.
    #[inline(always)]
    fn find(&self, t: u64, dur: u64) -> (u64, usize) {
        let n = self.busy.len();
        // Most reservations go after everything reserved so far.
        if self.last_end <= t {
            return (t, n);
        }
        let mut i = self.head + first_ending_after(&self.busy[self.head..], t);
        let mut start = t;
        while let Some(&(a, b)) = self.busy.get(i) {
            if start + dur <= a {
                break;
            }
            start = start.max(b);
            i += 1;
        }
        (start, i)
    }

    /// Reserve `[start, start + dur)` found by [`find`](Self::find) at index
    /// `i` (nothing changed in between).
    #[inline(always)]
    fn reserve_at(&mut self, i: usize, start: u64, dur: u64) {
        if dur == 0 {
            return;
        }
        let end = start + dur;
        let n = self.busy.len();
        if i == n {
            // After everything: no need to read the list.
            if n > self.head && start - self.last_end < self.min_gap {
                self.busy[n - 1].1 = end;
            } else {
                self.busy.push((start, end));
            }
            if n == self.head {
                self.first_end = end;
            } else if n == self.head + 1 {
                self.first_end = self.busy[self.head].1;
            }
            self.last_end = end;
            return;
        }
        let near_front = i <= self.head + 1;
        let join_prev = i > self.head && start - self.busy[i - 1].1 < self.min_gap;
        let join_next = self.busy[i].0 - end < self.min_gap;
        match (join_prev, join_next) {
            (true, true) => {
                self.busy[i - 1].1 = self.busy[i].1;
                self.remove(i);
            }
            (true, false) => self.busy[i - 1].1 = end,
            (false, true) => self.busy[i].0 = start,
            (false, false) => self.insert(i, (start, end)),
        }
        if near_front {
            self.first_end = self.busy[self.head].1;
        }
    }

    /// When the last reservation ends (0 if none).
    fn last_end(&self) -> u64 {
        self.last_end
    }

    /// Reserve `dur` ns at the earliest start `>= t`; returns the start.
    #[cfg(test)]
    fn reserve(&mut self, t: u64, dur: u64) -> u64 {
        let (start, i) = self.find(t, dur);
        self.reserve_at(i, start, dur);
        start
    }
}

/// Index of the first interval of `list` (sorted) that ends after `t`
/// (`list.len()` if none): a galloping search from the front, where the
/// intervals near `now` are, so a step or two in the common cases.
#[inline(always)]
fn first_ending_after(list: &[(u64, u64)], t: u64) -> usize {
    let mut lo = 0;
    let mut hi = 1;
    while lo < list.len() && list[lo].1 <= t {
        if hi >= list.len() || list[hi].1 > t {
            let hi = hi.min(list.len());
            return lo + 1 + list[lo + 1..hi].partition_point(|&(_, end)| end <= t);
        }
        lo = hi;
        hi = 2 * hi + 1;
    }
    lo
}

/// Reserved intervals of every chip and every channel.
///
/// An operation is issued to its chip when its input is ready (a data read
/// after its mapping-page read, say), so a chip serves operations in issue
/// order and an operation issued later for an earlier time may use an idle
/// gap: each chip, like each channel, keeps its reserved intervals.
#[derive(Debug, Clone)]
pub(crate) struct Timeline {
    chips: Vec<Intervals>,
    channels: Vec<Intervals>,
    chips_per_channel: Divisor,
    t_read: u64,
    t_prog: u64,
    t_erase: u64,
    t_xfer: u64,
    now: u64,
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
        // The shortest reservation of a chip: read, program, copy-back or erase.
        let chip_min = (t_read + t_xfer)
            .min(t_xfer + t_prog)
            .min(t_read + t_prog)
            .min(t_erase);
        Timeline {
            chips: vec![Intervals::new(chip_min); (channels * chips_per_channel) as usize],
            channels: vec![Intervals::new(t_xfer); channels as usize],
            chips_per_channel: Divisor::new(chips_per_channel),
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
    }

    /// The last prune time: nothing is placed before it.
    pub fn now(&self) -> u64 {
        self.now
    }

    #[inline]
    fn channel_of(&self, chip: u32) -> usize {
        self.chips_per_channel.div(chip) as usize
    }

    /// Place an operation on `chip` at the earliest start `s >= t` where the
    /// chip is free for `pre + xfer + post` ns and the channel for `xfer` ns
    /// from `s + pre`. Returns its end.
    #[inline(always)]
    fn place(&mut self, chip: u32, t: u64, pre: u64, xfer: u64, post: u64) -> u64 {
        match self.place_before(chip, t, pre, xfer, post, None, true) {
            Ok(end) => end,
            Err(_) => unreachable!("placement without a deadline always succeeds"),
        }
    }

    /// [`place`](Self::place), but only if the operation starts before
    /// `before` (if given); with `reserve` false only the check is made.
    /// Returns its end, or (nothing reserved) a lower bound on its start:
    /// it only moves later, as reservations are only added.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn place_before(
        &mut self,
        chip: u32,
        t: u64,
        pre: u64,
        xfer: u64,
        post: u64,
        before: Option<u64>,
        reserve: bool,
    ) -> Result<u64, u64> {
        debug_assert!(t >= self.now, "placed at {t} before now {}", self.now);
        let now = self.now;
        let ch = self.channel_of(chip);
        let chip = &mut self.chips[chip as usize];
        chip.prune(now);
        let total = pre + xfer + post;
        if xfer == 0 {
            let (s, at) = chip.find(t, total);
            if before.is_some_and(|b| s >= b) {
                return Err(s);
            }
            if reserve {
                chip.reserve_at(at, s, total);
            }
            return Ok(s + total);
        }
        let channel = &mut self.channels[ch];
        channel.prune(now);
        let mut s = t;
        let (at, x, xi) = loop {
            let (start, at) = chip.find(s, total);
            s = start;
            if before.is_some_and(|b| s >= b) {
                return Err(s);
            }
            let (x, xi) = channel.find(s + pre, xfer);
            if x == s + pre {
                break (at, x, xi);
            }
            s = x - pre;
        };
        if reserve {
            channel.reserve_at(xi, x, xfer);
            chip.reserve_at(at, s, total);
        }
        Ok(s + total)
    }

    /// A page read (as [`read`](Self::read)) in `chip`'s idle time: placed
    /// only if it starts before `before`.
    /// On failure, a lower bound on the read's start (as for
    /// [`gc_step_or_start`](Self::gc_step_or_start)): no later call from
    /// `t` or later can place it before that.
    pub fn read_before(&mut self, chip: u32, t: u64, before: u64) -> Result<u64, u64> {
        self.place_before(chip, t, self.t_read, self.t_xfer, 0, Some(before), true)
    }

    /// Whether a page program from `t` would start on `chip` before
    /// `before` (nothing is reserved).
    #[cfg(test)]
    pub fn program_fits_before(&mut self, chip: u32, t: u64, before: u64) -> bool {
        self.program_before(chip, t, before).is_ok()
    }

    /// [`program_fits_before`](Self::program_fits_before), telling on
    /// failure a lower bound on the program's start (as
    /// [`read_before`](Self::read_before) does).
    pub fn program_before(&mut self, chip: u32, t: u64, before: u64) -> Result<u64, u64> {
        self.place_before(chip, t, 0, self.t_xfer, self.t_prog, Some(before), false)
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

    /// `copies` copy-backs inside a chip (GC: read then program, no
    /// channel), each placed at the earliest gap from `t` in turn. Returns
    /// when the last ends (`t` if none).
    /// One step of background or urgent GC on `chip` alone (an on-chip
    /// copy-back, `t_read + t_prog`, or an erase): the earliest gap of the
    /// step's length from `from` (never before the last prune). With
    /// `before`, it is placed only if it starts before that time (GC takes
    /// only the idle time ahead of the host's next operation); returns
    /// its end, or `None` if not placed.
    #[cfg(test)]
    pub fn gc_step(
        &mut self,
        chip: u32,
        from: u64,
        erase: bool,
        before: Option<u64>,
    ) -> Option<u64> {
        self.gc_step_or_start(chip, from, erase, before).ok()
    }

    /// [`gc_step`](Self::gc_step), telling on failure the earliest start
    /// the step has now. It only moves later (reservations are only added,
    /// `now` only grows), so no call with `before` up to it can succeed.
    pub fn gc_step_or_start(
        &mut self,
        chip: u32,
        from: u64,
        erase: bool,
        before: Option<u64>,
    ) -> Result<u64, u64> {
        let dur = if erase {
            self.t_erase
        } else {
            self.t_read + self.t_prog
        };
        let now = self.now;
        let chip = &mut self.chips[chip as usize];
        chip.prune(now);
        let (start, at) = chip.find(from.max(now), dur);
        if before.is_some_and(|b| start >= b) {
            return Err(start);
        }
        chip.reserve_at(at, start, dur);
        Ok(start + dur)
    }

    #[cfg(test)]
    pub fn erase(&mut self, chip: u32, t: u64) -> u64 {
        self.place(chip, t, self.t_erase, 0, 0)
    }

    /// When every chip is idle.
    pub fn all_idle_at(&self) -> u64 {
        self.chips
            .iter()
            .map(Intervals::last_end)
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
        let mut ch = Intervals::default();
        assert_eq!(ch.reserve(100, 10), 100);
        assert_eq!(ch.reserve(50, 10), 50); // gap before
        assert_eq!(ch.reserve(55, 10), 60); // right after [50,60)
        assert_eq!(ch.reserve(60, 40), 110); // the 30 ns gap at 70 is too short
        assert_eq!(ch.live().len(), 2);
        assert_eq!(ch.reserve(70, 30), 70); // exactly fills [70,100)
        assert_eq!(ch.live(), &[(50, 150)]);
        ch.prune(150);
        assert!(ch.live().is_empty());
    }

    #[test]
    fn unusable_gaps_are_merged_away() {
        let mut ch = Intervals::new(30);
        assert_eq!(ch.reserve(0, 30), 0);
        assert_eq!(ch.reserve(50, 30), 50); // leaves a 20 ns gap: merged
        assert_eq!(ch.live(), &[(0, 80)]);
        assert_eq!(ch.reserve(120, 30), 120); // a 40 ns gap stays
        assert_eq!(ch.reserve(10, 30), 80); // first gap that fits, as before
        assert_eq!(ch.live(), &[(0, 150)]);
    }

    /// Every reservation kept, no merging, linear search: the reference.
    fn naive_reserve(all: &mut Vec<(u64, u64)>, t: u64, dur: u64) -> u64 {
        let mut start = t;
        for &(a, b) in all.iter() {
            if b <= start {
                continue;
            }
            if start + dur <= a {
                break;
            }
            start = start.max(b);
        }
        let at = all.partition_point(|&(a, _)| a < start);
        all.insert(at, (start, start + dur));
        start
    }

    #[test]
    fn same_starts_as_keeping_every_gap() {
        use rand::{Rng, SeedableRng};
        for seed in 0..24u64 {
            let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
            let min = [1, 10, 30][seed as usize % 3];
            let mut iv = Intervals::new(min);
            let mut all = Vec::new();
            let mut now = 0u64;
            for step in 0..1500 {
                if rng.gen_range(0..4) == 0 {
                    now += rng.gen_range(0..50);
                    iv.prune(now);
                }
                // Mostly near `now`, sometimes far ahead (a backlog).
                let t = now
                    + if rng.gen_bool(0.2) {
                        rng.gen_range(0..5000)
                    } else {
                        rng.gen_range(0..100)
                    };
                let dur = min + rng.gen_range(0..3) * min / 2;
                let want = naive_reserve(&mut all, t, dur);
                assert_eq!(iv.reserve(t, dur), want, "seed {seed} step {step}");
                let live = iv.live();
                assert_eq!(iv.first_end, live.first().map_or(u64::MAX, |x| x.1));
                assert_eq!(iv.last_end, live.last().map_or(0, |x| x.1));
            }
        }
    }

    #[test]
    fn gc_steps_take_only_idle_time_before_the_host() {
        let mut tl = Timeline::new(1, 2, 100, 400, 3000, 10);
        // A host program on chip 0 at 900: [900, 1310).
        assert_eq!(tl.program(0, 900), 1310);
        // A copy-back (500) fits before it: placed.
        assert_eq!(tl.gc_step(0, 0, false, Some(1000)), Some(500));
        // The next would start at 500 and overlap the program: the gap is
        // too short, so it goes after the program, which is past `before`.
        assert_eq!(tl.gc_step(0, 500, false, Some(1000)), None);
        // Urgent (no `before`): placed after the program.
        assert_eq!(tl.gc_step(0, 500, false, None), Some(1810));
        // An erase on the other chip in its idle time.
        assert_eq!(tl.gc_step(1, 0, true, Some(1)), Some(3000));
    }

    #[test]
    fn background_reads_and_programs_take_only_idle_time() {
        let mut tl = Timeline::new(1, 2, 100, 400, 3000, 10);
        // A host program on chip 0 at 300: [300, 710).
        assert_eq!(tl.program(0, 300), 710);
        // A read (110) fits in [0, 300): placed.
        assert_eq!(tl.read_before(0, 0, 300), Ok(110));
        // A program (410) does not fit before it; the check reserves nothing.
        assert!(!tl.program_fits_before(0, 110, 300));
        // Its failure tells the earliest start (after the program), a
        // bound no later try from 110 on can beat.
        assert_eq!(tl.program_before(0, 110, 300), Err(710));
        assert!(tl.program_fits_before(0, 110, 711));
        assert_eq!(tl.program(0, 110), 710 + 410);
        // The channel counts: chip 1's read waits for chip 0's transfers.
        assert_eq!(tl.read_before(1, 0, 1), Err(10));
        assert_eq!(tl.read_before(1, 0, 200), Ok(120));
    }

    #[test]
    fn a_read_holds_its_chip_until_its_data_is_out() {
        let mut tl = Timeline::new(1, 2, 100, 400, 3000, 10);
        // Chip 1 takes the channel over [100, 110).
        assert_eq!(tl.read(1, 0), 110);
        // Chip 0's read senses over [0, 100) but must wait for the channel
        // until 110: it holds the chip until its transfer ends at 120.
        assert_eq!(tl.read(0, 0), 120);
        // So a program on chip 0 cannot start before 120.
        assert_eq!(tl.program(0, 0), 120 + 10 + 400);
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
