//! Wrappers that place NAND operations on the timelines and keep the
//! counters every operation shares.

use super::Ssd;

impl Ssd {
    // ---- timeline wrappers -------------------------------------------------

    #[inline]
    pub(super) fn op_read(&mut self, ppa: u32, t: u64) -> u64 {
        let end = self.tl.read(self.flash.chip_of(ppa), t);
        self.horizon = self.horizon.max(end);
        end
    }

    #[inline]
    pub(super) fn op_program(&mut self, ppa: u32, t: u64) -> u64 {
        let t = t.max(self.block_ready[self.flash.block_of(ppa) as usize]);
        let end = self.tl.program(self.flash.chip_of(ppa), t);
        self.note_program(end)
    }

    /// Bookkeeping every program (host, mapping, GC copy) shares.
    #[inline]
    pub(super) fn note_program(&mut self, end: u64) -> u64 {
        if self.serving_read {
            self.stats.read_path_programs += 1;
        }
        self.horizon = self.horizon.max(end);
        self.last_program_end = self.last_program_end.max(end);
        end
    }

    #[inline]
    pub(super) fn op_copybacks(&mut self, chip: u32, t: u64, copies: u32) -> u64 {
        // (Copies go to the chip's open GC block, erased long before.)
        let end = self.tl.copybacks(chip, t, copies);
        if self.serving_read {
            self.stats.read_path_programs += u64::from(copies);
        }
        self.horizon = self.horizon.max(end);
        self.last_program_end = self.last_program_end.max(end);
        end
    }

    #[inline]
    pub(super) fn op_erase(&mut self, chip: u32, t: u64) -> u64 {
        let end = self.tl.erase(chip, t);
        self.horizon = self.horizon.max(end);
        end
    }
}
