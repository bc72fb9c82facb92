//! Persistence of discards and checkpoints of the map.

use ptsd_blockdev::le::{put_u32, put_u64};

use super::{Cause, Ssd};
use crate::error::FtlError;
use crate::flash::TRIM_OWNER;
use crate::store::{Oob, PageKind};

impl Ssd {
    // ---- persistence of discards ------------------------------------------

    /// Write the discards logged since the last flush as trim-record pages.
    pub(super) fn persist_trims(&mut self, t: u64) -> Result<(), FtlError> {
        if self.trim_log.is_empty() {
            return Ok(());
        }
        let per_page = (self.g.page_size as usize - 8) / 16;
        let log = std::mem::take(&mut self.trim_log);
        for chunk in log.chunks(per_page) {
            let ppa = self.alloc_map(t)?;
            self.op_program(ppa, t);
            self.seq += 1;
            let mut content = std::mem::take(&mut self.scratch);
            content.fill(0);
            put_u64(&mut content, 0, chunk.len() as u64);
            for (k, &(first, n, seq)) in chunk.iter().enumerate() {
                let at = 8 + 16 * k;
                put_u32(&mut content, at, first);
                put_u32(&mut content, at + 4, n);
                put_u64(&mut content, at + 8, seq);
            }
            let oob = Oob {
                kind: PageKind::Trim,
                id: 0,
                seq: self.seq,
                aux: 0,
            };
            let r = self.store.program(ppa, oob, &content);
            self.scratch = content;
            r?;
            self.flash.fill(ppa, TRIM_OWNER, t);
            self.trim_pages.push(ppa);
            self.stats.trim_pages += 1;
        }
        Ok(())
    }

    #[inline]
    pub(crate) fn mark_map_stale(&mut self, lpn: u32) {
        if self.persistent {
            let m = self.per_map_page.div(lpn);
            self.map_stale[(m / 64) as usize] |= 1u64 << (m % 64);
        }
    }

    pub(crate) fn any_map_stale(&self) -> bool {
        self.map_stale.iter().any(|&w| w != 0)
    }

    /// Make the flash copy of the map current: flush the buffer, write back
    /// the cache's dirty state and every stale mapping page, make it all
    /// durable, then drop the trim records (the map now holds the discards).
    pub(crate) fn checkpoint(&mut self, t: u64) -> Result<u64, FtlError> {
        // It flushes the write buffer: the scheduler's answer may change.
        self.next_pick.set(None);
        let mut end = self.flush_buffer(t)?;
        self.drop_map_work();
        let mut acts = self.take_acts();
        self.cache.write_back_all(&mut acts);
        let r = self.exec_acts(&acts, t, Cause::Checkpoint);
        self.put_acts(acts);
        r?;
        for w in 0..self.map_stale.len() {
            while self.map_stale[w] != 0 {
                let bit = self.map_stale[w].trailing_zeros();
                let mpn = w as u32 * 64 + bit;
                end = end.max(self.write_map_page(mpn, t, Cause::Checkpoint)?);
            }
        }
        self.trim_log.clear();
        self.store.sync()?;
        for p in std::mem::take(&mut self.trim_pages) {
            self.flash.invalidate(p, t);
        }
        Ok(end.max(self.horizon))
    }
}
