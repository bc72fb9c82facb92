//! Block allocation and per-chip garbage collection.

use super::{Cause, Ssd, IN_BUFFER, UNMAPPED};
use crate::bigvec::prefetch;
use crate::error::FtlError;
use crate::flash::{Stream, INVALID, POOL_DATA, POOL_MAP, TRIM_OWNER};
use crate::store::{Oob, PageKind};

impl Ssd {
    // ---- allocation and GC -----------------------------------------------

    pub(super) fn alloc(
        &mut self,
        stream: Stream,
        chip: u32,
        t: u64,
    ) -> Result<Option<u32>, FtlError> {
        if let Some(p) = self.flash.alloc_in_open(stream, chip) {
            return Ok(Some(p));
        }
        if self.gc_depth == 0 && self.flash.free_count(chip) <= self.cfg.gc.low_free_blocks {
            self.gc(chip, t)?;
            if let Some(p) = self.flash.alloc_in_open(stream, chip) {
                return Ok(Some(p));
            }
        }
        // Keep the last free block of a chip for GC.
        let keep = if stream == Stream::GcData { 0 } else { 1 };
        if self.flash.open_block(stream, chip, keep) {
            return Ok(self.flash.alloc_in_open(stream, chip));
        }
        Ok(None)
    }

    pub(super) fn alloc_host(&mut self, t: u64) -> Result<u32, FtlError> {
        for _ in 0..self.g.chips {
            let chip = self.host_rr;
            self.host_rr = if chip + 1 == self.g.chips {
                0
            } else {
                chip + 1
            };
            if let Some(p) = self.alloc(Stream::Host, chip, t)? {
                return Ok(p);
            }
        }
        Err(FtlError::NoSpace)
    }

    pub(super) fn alloc_map(&mut self, t: u64) -> Result<u32, FtlError> {
        for _ in 0..self.g.chips {
            let chip = self.map_rr;
            self.map_rr = if chip + 1 == self.g.chips {
                0
            } else {
                chip + 1
            };
            if let Some(p) = self.alloc(Stream::Map, chip, t)? {
                return Ok(p);
            }
        }
        Err(FtlError::NoSpace)
    }

    /// Clean blocks on `chip` until it has `high_free_blocks` free (or
    /// nothing is left to reclaim). Copies stay on the chip (copy-back).
    pub(super) fn gc(&mut self, chip: u32, t: u64) -> Result<(), FtlError> {
        if self.gc_depth >= 4 {
            return Ok(());
        }
        self.gc_depth += 1;
        let r = self.gc_inner(chip, t);
        self.gc_depth -= 1;
        r
    }

    pub(super) fn gc_inner(&mut self, chip: u32, t: u64) -> Result<(), FtlError> {
        let ppb = self.g.pages_per_block;
        while self.flash.free_count(chip) < self.cfg.gc.high_free_blocks {
            let Some(victim) = self.flash.victim(chip, self.cfg.gc.policy, t) else {
                break;
            };
            let pool = self.flash.pool[victim as usize];
            let stream = if pool == POOL_MAP {
                Stream::Map
            } else {
                Stream::GcData
            };
            if pool == POOL_DATA {
                self.stats.gc_data_runs += 1;
            } else {
                self.stats.gc_map_runs += 1;
            }
            let mut moved = std::mem::take(&mut self.moved);
            moved.clear();
            // The copies follow one another on the chip (nothing else is
            // placed meanwhile): place them all at once.
            let copies_end = self.op_copybacks(chip, t, self.flash.valid[victim as usize]);
            let written = self.flash.wp[victim as usize];
            // The owners' map entries and cache state are random accesses:
            // fetch them a few pages ahead so that the misses overlap.
            const AHEAD: u32 = 16;
            if pool == POOL_DATA {
                for off in 0..AHEAD.min(written) {
                    self.prefetch_owner(victim * ppb + off);
                }
            }
            for off in 0..written {
                let src = victim * ppb + off;
                if pool == POOL_DATA && off + AHEAD < written {
                    self.prefetch_owner(src + AHEAD);
                }
                let owner = self.flash.p2l[src as usize];
                if owner == INVALID {
                    continue;
                }
                let dst = match self.flash.alloc_in_open(stream, chip) {
                    Some(d) => d,
                    None if self.flash.open_block(stream, chip, 0) => self
                        .flash
                        .alloc_in_open(stream, chip)
                        .ok_or(FtlError::NoSpace)?,
                    None => return Err(FtlError::NoSpace),
                };
                self.seq += 1;
                if self.has_data {
                    let kind = if pool == POOL_DATA {
                        PageKind::Data
                    } else if owner == TRIM_OWNER {
                        PageKind::Trim
                    } else {
                        PageKind::Map
                    };
                    // A mapping page keeps its as-of sequence number.
                    let aux = if kind == PageKind::Map {
                        self.gtd_seq[owner as usize]
                    } else {
                        0
                    };
                    let oob = Oob {
                        kind,
                        id: if owner == TRIM_OWNER { 0 } else { owner },
                        seq: self.seq,
                        aux,
                    };
                    let mut scratch = std::mem::take(&mut self.scratch);
                    let r = self.store.copy(src, dst, oob, &mut scratch);
                    self.scratch = scratch;
                    r?;
                }
                self.flash.invalidate(src, t);
                self.flash.fill(dst, owner, t);
                if pool == POOL_DATA {
                    self.stats.gc_data_copies += 1;
                    let e = self.l2p[owner as usize];
                    if e != UNMAPPED && e & IN_BUFFER != 0 {
                        self.buf.prev[(e & !IN_BUFFER) as usize] = dst;
                    } else {
                        self.l2p[owner as usize] = dst;
                    }
                    self.mark_map_stale(owner);
                    moved.push(owner);
                } else {
                    self.stats.gc_map_copies += 1;
                    if owner == TRIM_OWNER {
                        if let Some(p) = self.trim_pages.iter_mut().find(|p| **p == src) {
                            *p = dst;
                        }
                    } else {
                        self.gtd[owner as usize] = dst;
                    }
                }
            }
            // The victim's stale copies may be what a power cut falls back
            // to: make the new copies durable before destroying them.
            if self.persistent {
                self.persist_trims(t)?;
                self.store.sync()?;
                self.store.erase(victim * ppb, ppb)?;
            } else if self.has_data {
                self.store.erase(victim * ppb, ppb)?;
            }
            // The erase follows the copies; the block is usable after it.
            let erased = self.op_erase(chip, copies_end);
            self.block_ready[victim as usize] = erased;
            self.flash.erase(victim);
            self.stats.erases += 1;
            let ec = self.flash.erases[victim as usize];
            self.stats.max_erase_count = self.stats.max_erase_count.max(ec);
            self.stats.mean_erase_count += 1.0 / f64::from(self.flash.blocks());
            if pool == POOL_DATA && self.uses_map_pages && !moved.is_empty() {
                self.update_moved_mappings(&mut moved, t)?;
            }
            self.moved = moved;
        }
        Ok(())
    }

    /// Start fetching the map entry and cache state of data page `ppa`'s
    /// owner (GC is about to move it).
    #[inline(always)]
    pub(super) fn prefetch_owner(&self, ppa: u32) {
        let owner = self.flash.p2l[ppa as usize];
        if owner != INVALID {
            prefetch(&self.l2p[owner as usize]);
            self.cache.prefetch(owner);
        }
    }

    pub(super) fn update_moved_mappings(
        &mut self,
        moved: &mut [u32],
        t: u64,
    ) -> Result<(), FtlError> {
        let epp = self.g.entries_per_map_page;
        moved.sort_unstable();
        let mut acts = self.take_acts();
        let mut i = 0;
        while i < moved.len() {
            let mpn = moved[i] / epp;
            let mut j = i + 1;
            while j < moved.len() && moved[j] / epp == mpn {
                j += 1;
            }
            acts.clear();
            self.cache.gc_update(mpn, &moved[i..j], &mut acts);
            if let Err(e) = self.exec_acts(&acts, t, Cause::Gc) {
                self.put_acts(acts);
                return Err(e);
            }
            i = j;
        }
        self.put_acts(acts);
        Ok(())
    }
}
