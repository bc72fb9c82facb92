//! Host operations: read, write (into the buffer), discard, flush.

use super::{Cause, Queued, Ssd, IN_BUFFER, MAX_TRIM_PAGES, UNMAPPED};
use crate::error::FtlError;
use crate::request::Request;

/// Merges sorted extents `(first, count)` less than `gap` apart into spans
/// covering the gaps between them (`gap` 1: adjacent ones only), as long
/// as at least half of a span's blocks are the extents' own: on a
/// stripe-major image whose chips' write points sit at different block
/// indices a read's pages lie one or two in every 32 blocks, and covering
/// those gaps would fetch many times what is needed.
pub(crate) fn merge_within(extents: &mut Vec<(u64, u64)>, gap: u64) {
    let mut merged: usize = 0;
    // Blocks of the last span that are its extents' own.
    let mut own: u64 = 0;
    for i in 0..extents.len() {
        let (b, n) = extents[i];
        match merged.checked_sub(1).map(|m| extents[m]) {
            Some((first, count))
                if b < first + count + gap
                    && 2 * (own + n) >= (b + n).max(first + count) - first =>
            {
                extents[merged - 1].1 = (b + n).max(first + count) - first;
                own += n;
            }
            _ => {
                extents[merged] = (b, n);
                merged += 1;
                own = n;
            }
        }
    }
    extents.truncate(merged);
}

impl Ssd {
    // ---- host operations -------------------------------------------------

    /// Serve read `req`, filling `dest` (if any: `pages * page_size` bytes).
    pub(super) fn do_read(
        &mut self,
        req: &Request,
        t: u64,
        dest: Option<&mut [u8]>,
    ) -> Result<u64, FtlError> {
        self.show_request(req);
        self.serving_read = true;
        let r = self.read_pages(req, t, dest);
        self.serving_read = false;
        r
    }

    /// The scheme's request hook, if it has one (`lpn + pages` is within
    /// the device: checked at submission).
    #[inline]
    fn show_request(&mut self, req: &Request) {
        if self.cache_sees_requests {
            self.cache.request(req.op, req.lpn as u32, req.pages);
        }
    }

    /// Where on the store's device the flash pages of `pages` logical
    /// pages from `lpn` lie, as `(device block, blocks)` extents, adjacent
    /// ones merged, appended to `out` (nothing for pages in the write
    /// buffer, unmapped, or a store without a device). A hint only: the
    /// map may change before the pages are read. [`SsdDevice`] prefetches
    /// them before taking the engine's lock, so that cold reads from
    /// several threads reach the disk together instead of one at a time.
    ///
    /// [`SsdDevice`]: crate::SsdDevice
    pub fn image_extents(&self, lpn: u64, pages: u32, out: &mut Vec<(u64, u64)>) {
        if !self.has_data {
            return;
        }
        let end = (lpn + u64::from(pages)).min(self.l2p.len() as u64);
        for l in lpn..end {
            let e = self.l2p[l as usize];
            if e == UNMAPPED || e & IN_BUFFER != 0 {
                continue;
            }
            let Some((block, n)) = self.store.image_extent(e) else {
                return;
            };
            out.push((block, n));
        }
        out.sort_unstable();
        out.dedup();
        merge_within(out, 1);
    }

    pub(super) fn read_pages(
        &mut self,
        req: &Request,
        t: u64,
        mut dest: Option<&mut [u8]>,
    ) -> Result<u64, FtlError> {
        let page = self.g.page_size as usize;
        let mut done = t;
        let mut acts = self.take_acts();
        // Flash pages to copy into `dest`, read from the store together.
        let mut pending = std::mem::take(&mut self.read_list);
        pending.clear();
        for i in 0..req.pages {
            let lpn = (req.lpn + u64::from(i)) as u32;
            self.stats.host_read_pages += 1;
            let e = self.l2p[lpn as usize];
            if e != UNMAPPED && e & IN_BUFFER != 0 {
                self.stats.buffer_read_hits += 1;
                if let Some(b) = dest.as_deref_mut() {
                    let chunk = &mut b[i as usize * page..(i as usize + 1) * page];
                    if self.has_data {
                        chunk.copy_from_slice(self.buf.slot_data((e & !IN_BUFFER) as usize));
                    } else {
                        chunk.fill(0);
                    }
                }
                done = done.max(t + self.cfg.t_dram_ns);
                continue;
            }
            acts.clear();
            if self.cache.read(lpn, self.per_map_page.div(lpn), &mut acts) {
                self.stats.cmt_read_hits += 1;
            } else {
                self.stats.cmt_read_misses += 1;
            }
            let ready = if acts.is_empty() {
                t
            } else {
                // A mapping write-back may program, and GC then move and
                // erase, a page read so far: read those first.
                self.read_pending(&mut pending, dest.as_deref_mut())?;
                self.exec_acts(&acts, t, Cause::Read)?
            };
            if e == UNMAPPED {
                if let Some(b) = dest.as_deref_mut() {
                    b[i as usize * page..(i as usize + 1) * page].fill(0);
                }
                done = done.max(ready + self.cfg.t_dram_ns);
                continue;
            }
            let end = self.op_read(e, ready);
            self.stats.flash_data_reads += 1;
            done = done.max(end);
            if let Some(b) = dest.as_deref_mut() {
                if self.has_data {
                    pending.push((e, i));
                } else {
                    b[i as usize * page..(i as usize + 1) * page].fill(0);
                }
            }
        }
        let read = self.read_pending(&mut pending, dest);
        self.read_list = pending;
        read?;
        self.put_acts(acts);
        // DFTL's write-backs (and any GC they set off) end the read too.
        Ok(done.max(self.horizon))
    }

    /// Read the flash pages `pending` lists into `dest` and clear the list.
    fn read_pending(
        &mut self,
        pending: &mut Vec<(u32, u32)>,
        dest: Option<&mut [u8]>,
    ) -> Result<(), FtlError> {
        if let (Some(b), false) = (dest, pending.is_empty()) {
            let page = self.g.page_size as usize;
            let r = self.store.read_many(pending, b, page);
            pending.clear();
            r?;
        }
        Ok(())
    }

    /// Copy a write into the buffer, flushing the filling half when it is
    /// full. `sync` (the literal `write_stop`): the write completes only
    /// when that flush's data programs end. A page that finds the buffer at
    /// its bound waits for the earliest program to end (the scheduler
    /// normally dispatches a write only once it fits: see
    /// [`WriteBuffer::room_at`](super::wbuf::WriteBuffer::room_at)).
    /// `src`: the bytes (`pages * page_size`), if any.
    pub(super) fn do_write(
        &mut self,
        req: &Request,
        t: u64,
        sync: bool,
        src: Option<&[u8]>,
    ) -> Result<u64, FtlError> {
        self.show_request(req);
        let page = self.g.page_size as usize;
        let mut ready = t;
        for i in 0..req.pages {
            let lpn = (req.lpn + u64::from(i)) as u32;
            self.stats.host_write_pages += 1;
            let e = self.l2p[lpn as usize];
            let slot = if e != UNMAPPED && e & IN_BUFFER != 0 {
                (e & !IN_BUFFER) as usize
            } else {
                if self.buf.full() {
                    let end = self.flush_buffer(ready)?;
                    if sync {
                        ready = ready.max(end);
                    }
                }
                self.buf.release(ready);
                // Wait for host data slots only: the mapping write-backs a
                // flush just queued hold back later writes (the scheduler's
                // gate), not this one.
                while self.buf.held_at(ready) >= self.buf.bound() {
                    match self.buf.pop_inflight() {
                        Some(end) => ready = ready.max(end),
                        None => break,
                    }
                }
                let slot = self.buf.len();
                // Not `e`: the flush's GC may have moved the old copy.
                self.buf.push(lpn, self.l2p[lpn as usize]);
                self.l2p[lpn as usize] = IN_BUFFER | slot as u32;
                slot
            };
            if let Some(d) = src.filter(|_| self.has_data) {
                self.buf
                    .slot_data(slot)
                    .copy_from_slice(&d[i as usize * page..(i as usize + 1) * page]);
            }
        }
        Ok(ready + self.cfg.t_dram_ns)
    }

    pub(super) fn do_discard(&mut self, q: &Queued, t: u64) -> Result<u64, FtlError> {
        self.show_request(&q.req);
        let mut acts = self.take_acts();
        for i in 0..q.req.pages {
            let lpn = (q.req.lpn + u64::from(i)) as u32;
            self.stats.host_discard_pages += 1;
            let mut e = self.l2p[lpn as usize];
            if e != UNMAPPED && e & IN_BUFFER != 0 {
                let slot = (e & !IN_BUFFER) as usize;
                e = self.buf.prev[slot];
                self.buffer_remove(slot);
            }
            self.l2p[lpn as usize] = UNMAPPED;
            if e == UNMAPPED {
                continue;
            }
            self.mark_map_stale(lpn);
            self.flash.invalidate(e, t);
            acts.clear();
            if self.cache.write(lpn, self.per_map_page.div(lpn), &mut acts) {
                self.stats.cmt_write_hits += 1;
            } else {
                self.stats.cmt_write_misses += 1;
            }
            self.exec_acts(&acts, t, Cause::Write)?;
            if self.persistent {
                // A run of records carries its last discard's number, so it
                // grows only while nothing else took a number in between: a
                // mapping page written amid the run (by this loop's
                // write-backs) or a data page programmed (between requests)
                // must stay on the right side of every discard in it.
                let prev = self.seq;
                self.seq += 1;
                match self.trim_log.last_mut() {
                    Some((first, n, sq)) if *first + *n == lpn && *sq == prev => {
                        *n += 1;
                        *sq = self.seq;
                    }
                    _ => self.trim_log.push((lpn, 1, self.seq)),
                }
            }
        }
        self.put_acts(acts);
        Ok((t + self.cfg.t_dram_ns).max(self.horizon))
    }

    pub(super) fn do_flush(&mut self, t: u64) -> Result<u64, FtlError> {
        self.stats.host_flushes += 1;
        // Done when every buffered page is on flash (not GC's work).
        let end = self.flush_buffer(t)?.max(self.buf.drained_at());
        if self.persistent {
            self.persist_trims(t)?;
            if self.trim_pages.len() > MAX_TRIM_PAGES {
                self.checkpoint(t)?;
            }
            self.store.sync()?;
        }
        Ok(end.max(self.horizon))
    }
}

#[cfg(test)]
mod tests {
    use super::merge_within;

    #[test]
    fn prefetch_spans_cover_small_gaps_only() {
        let mut e = vec![(0, 8), (16, 8), (100, 4), (164, 4), (200, 40)];
        merge_within(&mut e, 64);
        // 16 - 8 = 8 < 64: merged (16 of 24 blocks own); 100 - 24 = 76:
        // not; 164 - 104 = 60 < 64, but only 8 of 68 blocks would be own:
        // not; 200 - 168 = 32: merged (44 of 76 own).
        assert_eq!(e, vec![(0, 24), (100, 4), (164, 76)]);
        // Sparse extents (one block in every 32, as on a skewed
        // stripe-major image): gaps under 64, but not covered.
        let mut e: Vec<(u64, u64)> = (0..8).map(|i| (i * 32, 1)).collect();
        merge_within(&mut e, 64);
        assert_eq!(e.len(), 8, "{e:?}");
        let mut e = vec![(0, 8), (8, 8)];
        merge_within(&mut e, 0);
        assert_eq!(e, vec![(0, 8), (8, 8)], "gap 0 merges nothing");
        let mut e: Vec<(u64, u64)> = Vec::new();
        merge_within(&mut e, 64);
        assert!(e.is_empty());
    }
}
