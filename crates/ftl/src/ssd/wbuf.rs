//! The write buffer and its flush to flash.

use super::{Cause, Ssd, IN_BUFFER, UNMAPPED};
use crate::bigvec::prefetch;
use crate::error::FtlError;
use crate::store::{Oob, PageKind};

/// The write buffer: LPNs (and their data if the store keeps data) waiting
/// to be programmed, plus the flash page each one replaces.
#[derive(Clone)]
pub(super) struct WriteBuffer {
    pub(super) lpn: Vec<u32>,
    pub(super) prev: Vec<u32>,
    pub(super) data: Vec<u8>,
    pub(super) cap: usize,
    pub(super) page: usize,
}

impl WriteBuffer {
    pub(super) fn len(&self) -> usize {
        self.lpn.len()
    }
    pub(super) fn full(&self) -> bool {
        self.lpn.len() >= self.cap
    }
    pub(super) fn slot_data(&mut self, slot: usize) -> &mut [u8] {
        &mut self.data[slot * self.page..(slot + 1) * self.page]
    }
}

impl Ssd {
    /// Drop buffer slot `slot`, moving the last slot into its place.
    pub(super) fn buffer_remove(&mut self, slot: usize) {
        let last = self.buf.len() - 1;
        if slot != last {
            let moved = self.buf.lpn[last];
            self.buf.lpn[slot] = moved;
            self.buf.prev[slot] = self.buf.prev[last];
            if self.has_data {
                let page = self.buf.page;
                self.buf
                    .data
                    .copy_within(last * page..(last + 1) * page, slot * page);
            }
            self.l2p[moved as usize] = IN_BUFFER | slot as u32;
        }
        self.buf.lpn.pop();
        self.buf.prev.pop();
    }

    /// Program every buffered page (striped over the chips), placing the
    /// operations at `t`. Returns when the last of them (and of the mapping
    /// and GC work they caused) ends.
    pub(crate) fn flush_buffer(&mut self, t: u64) -> Result<u64, FtlError> {
        if self.buf.len() == 0 {
            return Ok(t);
        }
        self.stats.buffer_flushes += 1;
        let outer = self.horizon;
        self.horizon = t;
        // Fetch what the loop below touches at random all at once: the
        // owner entries and block counts of the pages being replaced, the
        // cache's state of each LPN. Independent misses overlap; in the loop
        // they would come one after the other.
        for slot in 0..self.buf.len() {
            let prev = self.buf.prev[slot];
            if prev != UNMAPPED {
                prefetch(&self.flash.p2l[prev as usize]);
                prefetch(&self.flash.valid[self.flash.block_of(prev) as usize]);
            }
            self.cache.prefetch(self.buf.lpn[slot]);
        }
        let mut acts = self.take_acts();
        let mut result = Ok(());
        for slot in 0..self.buf.len() {
            let lpn = self.buf.lpn[slot];
            let ppa = match self.alloc_host(t) {
                Ok(p) => p,
                Err(e) => {
                    result = Err(e);
                    break;
                }
            };
            self.op_program(ppa, t);
            self.seq += 1;
            if self.has_data {
                let oob = Oob {
                    kind: PageKind::Data,
                    id: lpn,
                    seq: self.seq,
                    aux: 0,
                };
                let page = self.buf.page;
                if let Err(e) =
                    self.store
                        .program(ppa, oob, &self.buf.data[slot * page..(slot + 1) * page])
                {
                    result = Err(e.into());
                    break;
                }
            }
            // Read after allocating: GC may have moved the old copy.
            let prev = self.buf.prev[slot];
            if prev != UNMAPPED {
                self.flash.invalidate(prev, t);
            }
            self.l2p[lpn as usize] = ppa;
            self.flash.fill(ppa, lpn, t);
            self.mark_map_stale(lpn);
            self.stats.flash_data_programs += 1;
            acts.clear();
            if self.cache.write(lpn, self.per_map_page.div(lpn), &mut acts) {
                self.stats.cmt_write_hits += 1;
            } else {
                self.stats.cmt_write_misses += 1;
            }
            if !acts.is_empty() {
                if let Err(e) = self.exec_acts(&acts, t, Cause::Write) {
                    result = Err(e);
                    break;
                }
            }
        }
        self.put_acts(acts);
        if result.is_err() {
            // Keep what was not programmed mapped to its old copy.
            for slot in 0..self.buf.len() {
                let lpn = self.buf.lpn[slot] as usize;
                if self.l2p[lpn] & IN_BUFFER != 0 && self.l2p[lpn] != UNMAPPED {
                    self.l2p[lpn] = self.buf.prev[slot];
                }
            }
        }
        self.buf.lpn.clear();
        self.buf.prev.clear();
        result?;
        let end = self.horizon;
        self.horizon = outer.max(end);
        Ok(end)
    }
}
