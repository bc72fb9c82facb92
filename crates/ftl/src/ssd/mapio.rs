//! Mapping-page I/O: the cache's loads and write-backs on flash.

use super::{Cause, Ssd, IN_BUFFER, UNMAPPED};
use crate::error::FtlError;
use crate::mapping::MapAction;
use crate::store::{Oob, PageKind};

impl Ssd {
    // ---- mapping pages ---------------------------------------------------

    pub(super) fn take_acts(&mut self) -> Vec<MapAction> {
        self.act_pool.pop().unwrap_or_default()
    }

    pub(super) fn put_acts(&mut self, mut v: Vec<MapAction>) {
        v.clear();
        self.act_pool.push(v);
    }

    /// Carry out mapping actions starting at `t`. Returns when the loads
    /// (what a lookup waits for) are done; write-backs extend `horizon`.
    pub(super) fn exec_acts(
        &mut self,
        acts: &[MapAction],
        t: u64,
        cause: Cause,
    ) -> Result<u64, FtlError> {
        let mut ready = t;
        for &a in acts {
            match a {
                MapAction::Load(mpn) => {
                    let p = self.gtd[mpn as usize];
                    if p != UNMAPPED {
                        ready = ready.max(self.op_read(p, t));
                        self.count_map_read(cause);
                    }
                }
                MapAction::WriteBack { mpn, read_first } => {
                    let mut s = t;
                    let p = self.gtd[mpn as usize];
                    if read_first && p != UNMAPPED {
                        s = self.op_read(p, t);
                        self.count_map_read(cause);
                    }
                    self.write_map_page(mpn, s, cause)?;
                }
            }
        }
        Ok(ready)
    }

    pub(super) fn count_map_read(&mut self, cause: Cause) {
        let c = &mut self.stats.map_reads;
        match cause {
            Cause::Read => c.host_read += 1,
            Cause::Write => c.host_write += 1,
            Cause::Gc => c.gc += 1,
            Cause::Checkpoint => c.checkpoint += 1,
        }
    }

    /// Program mapping page `mpn` with its current content at `t`.
    pub(crate) fn write_map_page(
        &mut self,
        mpn: u32,
        t: u64,
        cause: Cause,
    ) -> Result<u64, FtlError> {
        let ppa = self.alloc_map(t)?;
        let end = self.op_program(ppa, t);
        self.store_map_page(mpn, ppa, t, end, cause)?;
        Ok(end)
    }

    /// The rest of a mapping-page write whose program on `ppa` (allocated)
    /// was placed at `t` and ends at `end`: content, OOB, GTD, counters.
    pub(super) fn store_map_page(
        &mut self,
        mpn: u32,
        ppa: u32,
        t: u64,
        end: u64,
        cause: Cause,
    ) -> Result<(), FtlError> {
        if matches!(cause, Cause::Write | Cause::Gc) {
            // A dirty mapping page evicted by a flush or updated by GC is
            // staged in controller DRAM until programmed: it takes a write-
            // buffer slot meanwhile, so host writes cannot outrun the
            // mapping work they cause (reads never wait for a slot).
            self.buf.push_inflight(end, true);
        }
        self.seq += 1;
        if self.persistent {
            let mut content = std::mem::take(&mut self.scratch);
            self.encode_map_page(mpn, &mut content);
            let oob = Oob {
                kind: PageKind::Map,
                id: mpn,
                seq: self.seq,
                aux: self.seq,
            };
            let r = self.store.program(ppa, oob, &content);
            self.scratch = content;
            r?;
        }
        let old = self.gtd[mpn as usize];
        if old != UNMAPPED {
            self.flash.invalidate(old, t);
        }
        self.gtd[mpn as usize] = ppa;
        self.gtd_seq[mpn as usize] = self.seq;
        if self.persistent {
            self.map_stale[(mpn / 64) as usize] &= !(1u64 << (mpn % 64));
        }
        self.flash.fill(ppa, mpn, t);
        let c = &mut self.stats.map_programs;
        match cause {
            Cause::Read => c.host_read += 1,
            Cause::Write => c.host_write += 1,
            Cause::Gc => c.gc += 1,
            Cause::Checkpoint => c.checkpoint += 1,
        }
        Ok(())
    }

    /// The flash content of mapping page `mpn`: its entries as little-endian
    /// u32, buffered pages at their old (programmed) copy. The page's as-of
    /// sequence number is its OOB sequence number, which GC copies keep.
    pub(crate) fn encode_map_page(&self, mpn: u32, out: &mut [u8]) {
        let epp = self.g.entries_per_map_page as usize;
        let first = mpn as usize * epp;
        for (i, chunk) in out.chunks_exact_mut(4).take(epp).enumerate() {
            let lpn = first + i;
            let v = match self.l2p.get(lpn) {
                Some(&e) if e != UNMAPPED && e & IN_BUFFER != 0 => {
                    self.buf.prev[(e & !IN_BUFFER) as usize]
                }
                Some(&e) => e,
                None => UNMAPPED,
            };
            chunk.copy_from_slice(&v.to_le_bytes());
        }
    }
}
