//! Wrappers that place NAND operations on the timelines and keep the
//! counters every operation shares.

use super::Ssd;

impl Ssd {
    // ---- timeline wrappers -------------------------------------------------

    #[inline]
    pub(super) fn op_read(&mut self, ppa: u32, t: u64) -> u64 {
        let chip = self.flash.chip_of(ppa);
        let end = self.tl.read(chip, t);
        if self.serving_read {
            // Did it wait behind a program or an erase on its chip?
            let start = end - self.cfg.t_read_ns - self.cfg.t_xfer_ns;
            let (ws, we) = self.chip_write_busy[chip as usize];
            if start > t && ws < start && we > t {
                self.stats.reads_behind_writes += 1;
                self.stats.read_wait_behind_writes_ns += start - t.max(ws);
            }
        }
        self.horizon = self.horizon.max(end);
        end
    }

    #[inline]
    pub(super) fn op_program(&mut self, ppa: u32, t: u64) -> u64 {
        let t = t.max(self.block_ready[self.flash.block_of(ppa) as usize]);
        let chip = self.flash.chip_of(ppa);
        let end = self.tl.program(chip, t);
        self.note_write_busy(chip, end - self.cfg.t_xfer_ns - self.cfg.t_prog_ns, end);
        self.note_program(end)
    }

    /// Bookkeeping every program (host, mapping, GC copy) shares.
    #[inline]
    pub(super) fn note_program(&mut self, end: u64) -> u64 {
        if self.serving_read {
            self.stats.programs_issued_by_reads += 1;
        }
        self.horizon = self.horizon.max(end);
        end
    }

    /// A GC copy-back placed by the GC (it ends at `end`).
    #[inline]
    pub(super) fn note_gc_program(&mut self, end: u64) {
        self.note_program(end);
    }

    /// The timelines' present (the last dispatch time).
    #[inline]
    pub(super) fn tl_now(&self) -> u64 {
        self.tl.now()
    }

    /// The latest program or erase placed on `chip` (for the count of
    /// reads that wait behind one).
    #[inline]
    pub(super) fn note_write_busy(&mut self, chip: u32, start: u64, end: u64) {
        let w = &mut self.chip_write_busy[chip as usize];
        if end > w.1 {
            *w = (start, end);
        }
    }
}
