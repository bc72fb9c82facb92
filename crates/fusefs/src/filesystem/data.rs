//! File data: read, write, truncate (setattr), fallocate.

use super::undo::undo_on_error;
use super::{ext_slack, put_inode, Attr, FileSystem, Inode, SetAttr, SetTime, Writes};
use super::{BS, MAX_FILE_SIZE, S_IFMT, S_IFREG};
use crate::error::Errno;
use crate::extent::ExtentMap;
use crate::format::{Ts, BLOCK_SIZE};
use std::sync::atomic::Ordering;

impl FileSystem {
    /// Read up to `size` bytes at `offset`.
    pub fn read(&self, ino: u64, offset: u64, size: u32) -> Result<Vec<u8>, Errno> {
        self.read_access(ino, offset, size, true)
    }

    /// [`read`](Self::read), moving the atime as the mount's
    /// [`AtimePolicy`](super::AtimePolicy) says if `atime` (false: the
    /// file was opened `O_NOATIME`).
    pub fn read_access(
        &self,
        ino: u64,
        offset: u64,
        size: u32,
        atime: bool,
    ) -> Result<Vec<u8>, Errno> {
        let mut g = self.lock(ino)?;
        if g.is_dir() {
            return Err(Errno::EISDIR);
        }
        if atime {
            self.accessed(&mut g);
        }
        if offset >= g.d.size {
            return Ok(Vec::new());
        }
        let end = g.d.size.min(offset + u64::from(size));
        // Holes and unwritten extents stay zero without any I/O; written
        // runs are read one device request per physically contiguous run.
        let mut out = vec![0u8; (end - offset) as usize];
        let mut runbuf = Vec::new();
        let last = (end - 1) / BS;
        let mut lblk = offset / BS;
        while lblk <= last {
            let Some((pblk, unwritten, left)) = g.ext.lookup(lblk) else {
                lblk = g.ext.next_mapped(lblk).unwrap_or(last + 1);
                continue;
            };
            let n = left.min(last + 1 - lblk);
            if !unwritten {
                // The part of the run inside [offset, end).
                let lo = offset.max(lblk * BS);
                let hi = end.min((lblk + n) * BS);
                let dest = &mut out[(lo - offset) as usize..(hi - offset) as usize];
                if lo == lblk * BS && hi == (lblk + n) * BS {
                    // Whole blocks: straight into the reply.
                    self.store.read_run(pblk, dest)?;
                } else {
                    runbuf.resize((n * BS) as usize, 0);
                    self.store.read_run(pblk, &mut runbuf)?;
                    let from = (lo - lblk * BS) as usize;
                    dest.copy_from_slice(&runbuf[from..from + (hi - lo) as usize]);
                }
            }
            lblk += n;
        }
        Ok(out)
    }

    /// Write `data` at `offset`; returns the bytes written. Clears setuid,
    /// setgid (if group-executable) and `security.capability`, as a write
    /// by an unprivileged process does.
    pub fn write(&self, ino: u64, offset: u64, data: &[u8]) -> Result<u32, Errno> {
        self.write_as(ino, offset, data, true)
    }

    /// [`write`](Self::write), saying whether the writer lacks the
    /// privilege to keep setuid/setgid (`kill_priv`: the kernel's
    /// `FUSE_WRITE_KILL_SUIDGID`; a process with CAP_FSETID keeps them, as
    /// on other Linux file systems). Any write drops the file capability.
    pub fn write_as(
        &self,
        ino: u64,
        offset: u64,
        data: &[u8],
        kill_priv: bool,
    ) -> Result<u32, Errno> {
        self.writable()?;
        let mut g = self.lock(ino)?;
        let killed = undo_on_error(&mut g, |g| self.write_locked(g, offset, data, kill_priv))?;
        drop(g);
        if killed {
            self.attrs_changed_behind_kernel(ino);
        }
        Ok(data.len() as u32)
    }

    fn write_locked(
        &self,
        g: &mut Inode,
        offset: u64,
        data: &[u8],
        kill_priv: bool,
    ) -> Result<bool, Errno> {
        let ino = g.d.ino;
        if g.is_dir() {
            return Err(Errno::EISDIR);
        }
        if data.is_empty() {
            return Ok(false);
        }
        let end = offset.checked_add(data.len() as u64).ok_or(Errno::EFBIG)?;
        if end > MAX_FILE_SIZE {
            return Err(Errno::EFBIG);
        }
        let first = offset / BS;
        let last = (end - 1) / BS;
        // What must be allocated, and how many new runs at most.
        let mut missing = 0u64;
        let mut converts = 0usize;
        let mut l = first;
        while l <= last {
            match g.ext.lookup(l) {
                Some((_, unw, left)) => {
                    let n = left.min(last - l + 1);
                    if unw {
                        converts += 2;
                    }
                    l += n;
                }
                None => {
                    missing += 1;
                    l += 1;
                }
            }
        }
        let added_runs = if missing > 0 {
            missing.min(64) as usize + 2
        } else {
            0
        } + converts;
        let need = missing
            + if added_runs > 0 {
                ext_slack(g, added_runs.max(missing as usize))
            } else {
                0
            };
        let goal = g.ext.goal(first).unwrap_or(ino + 1);
        // Written runs may merge back into fewer: hold the chain's groups
        // so the blocks it no longer needs are freed.
        let shrink = if converts > 0 {
            g.chain.runs()
        } else {
            Vec::new()
        };
        let mut ctx = if need > 0 || !shrink.is_empty() {
            Some(self.alloc.prepare(need, goal, &shrink)?)
        } else {
            None
        };
        let mut w = Writes::new();
        // Ordered mode for a large write into holes: the whole new blocks
        // go home once (before the metadata commits) instead of through the
        // journal and again through the checkpoint. Not when this write
        // frees blocks (converting unwritten runs can shrink the extent
        // chain): a block freed and reused by one uncommitted transaction
        // could show this file's data in its old owner after a crash.
        let whole_new = (offset.div_ceil(BS)..end / BS)
            .filter(|&l| g.ext.lookup(l).is_none())
            .count() as u64;
        let min = self.ordered_min_blocks.load(Ordering::Relaxed);
        let use_ordered = min > 0 && whole_new >= min && shrink.is_empty();
        // Runs of adjacent blocks (first block, bytes), built as allocated.
        let mut ordered: Vec<(u64, Vec<u8>)> = Vec::new();
        for lblk in first..=last {
            let bstart = lblk * BS;
            let lo = offset.max(bstart);
            let hi = end.min(bstart + BS);
            let mapping = g.ext.lookup(lblk);
            let pblk = match mapping {
                Some((p, unw, _)) => {
                    if unw {
                        g.ext.punch(lblk, 1);
                        g.ext.insert(lblk, p, 1, false);
                    }
                    p
                }
                None => {
                    let ctx = ctx.as_mut().ok_or(Errno::EIO)?;
                    let goal = g.ext.goal(lblk).unwrap_or(ino + 1);
                    let run = ctx.alloc(1, goal);
                    let (p, _) = *run.first().ok_or(Errno::ENOSPC)?;
                    g.ext.insert(lblk, p, 1, false);
                    p
                }
            };
            let whole = lo == bstart && hi == bstart + BS;
            if whole {
                let o = (lo - offset) as usize;
                let block = &data[o..o + BLOCK_SIZE];
                if !(use_ordered && mapping.is_none()) {
                    w.insert(pblk, crate::writes::block_from(block));
                    continue;
                }
                match ordered.last_mut() {
                    Some((start, run)) if *start + (run.len() / BLOCK_SIZE) as u64 == pblk => {
                        run.extend_from_slice(block)
                    }
                    _ => {
                        // Room for the rest of the write (runs are usually
                        // the whole of it), within reason.
                        let mut run = Vec::with_capacity((end - lo).min(4 << 20) as usize);
                        run.extend_from_slice(block);
                        ordered.push((pblk, run));
                    }
                }
                continue;
            }
            // A partial block (at most the first and the last): built in
            // a block of its own, zeroed where nothing is read into it.
            let mut buf = crate::writes::zeroed_block();
            if matches!(mapping, Some((_, false, _))) && bstart < g.d.size {
                self.store.read(pblk, &mut buf)?;
                // Bytes past EOF must read back as zero after an extension.
                if g.d.size < bstart + BS && g.d.size > bstart {
                    let keep = (g.d.size - bstart) as usize;
                    buf[keep..].fill(0);
                }
            }
            let o = (lo - offset) as usize;
            let n = (hi - lo) as usize;
            buf[(lo - bstart) as usize..(lo - bstart) as usize + n]
                .copy_from_slice(&data[o..o + n]);
            w.insert(pblk, buf);
        }
        let now = Ts::now();
        g.d.size = g.d.size.max(end);
        g.d.mtime = now;
        g.d.ctime = now;
        let killed = if kill_priv {
            self.kill_priv(g, &mut w)?
        } else {
            // Any write drops the file capability, privileged or not. The
            // kernel does it before a page-cache write; a direct one
            // (`FOPEN_DIRECT_IO`) reaches us without it.
            self.drop_capability(g, &mut w)?;
            false
        };
        put_inode(g, ctx.as_mut(), &mut w)?;
        if !ordered.is_empty() {
            self.sync_frees()?;
        }
        self.commit_ordered(w, ordered, ctx)?;
        Ok(killed)
    }

    /// Make every transaction that freed blocks durable before data goes
    /// straight to a block that may be one of them: otherwise a crash
    /// could undo the free and leave the old owner (a file, or metadata)
    /// pointing at the new data. One journal commit, and only when
    /// something was freed since the last one (ext4 keeps such blocks
    /// unallocatable until the commit instead).
    fn sync_frees(&self) -> Result<(), Errno> {
        let gen = self.free_gen.load(Ordering::SeqCst);
        if self.free_synced.load(Ordering::SeqCst) < gen {
            self.store.sync()?;
            self.free_synced.fetch_max(gen, Ordering::SeqCst);
        }
        Ok(())
    }

    /// Smallest write, in whole newly allocated blocks, whose data goes
    /// home directly (ordered mode) instead of through the journal; 0 turns
    /// ordered mode off.
    pub fn set_ordered_min_blocks(&self, blocks: u64) {
        self.ordered_min_blocks.store(blocks, Ordering::Relaxed);
    }

    /// What a write, truncate or chown by an unprivileged process does to a
    /// file's privileges (Linux's `file_remove_privs`): drop setuid, setgid
    /// when the group may execute (otherwise it marks mandatory locking),
    /// and the `security.capability` xattr. Adds the xattr block to `w`
    /// if it changed. Returns whether the mode changed.
    fn kill_priv(&self, g: &mut Inode, w: &mut Writes) -> Result<bool, Errno> {
        if g.is_dir() {
            return Ok(false);
        }
        let before = g.d.mode;
        g.d.mode &= !libc::S_ISUID;
        if g.d.mode & libc::S_IXGRP != 0 {
            g.d.mode &= !libc::S_ISGID;
        }
        self.drop_capability(g, w)?;
        Ok(g.d.mode != before)
    }

    /// Removes the `security.capability` xattr, if any; adds the xattr
    /// blocks to `w` if they changed (a removal never needs more).
    fn drop_capability(&self, g: &mut Inode, w: &mut Writes) -> Result<(), Errno> {
        if g.d.xattr_blk == 0 {
            return Ok(());
        }
        self.ensure_xattrs(g)?;
        let map = g.xattrs.as_ref().ok_or(Errno::EIO)?;
        if map.contains_key(&b"security.capability"[..]) {
            let mut map = map.clone();
            map.remove(&b"security.capability"[..]);
            g.d.ctime = Ts::now();
            self.store_xattrs(g, map, None, w)?;
        }
        Ok(())
    }

    /// Runs of device blocks that `[lblk, ∞)` maps to.
    fn runs_from(ext: &ExtentMap, lblk: u64) -> Vec<(u64, u64)> {
        let mut probe = ext.clone();
        probe.punch(lblk, u64::MAX - lblk)
    }

    fn runs_in(ext: &ExtentMap, lblk: u64, count: u64) -> Vec<(u64, u64)> {
        let mut probe = ext.clone();
        probe.punch(lblk, count)
    }

    /// Zero `[from, to)` inside one block of `g` (if it holds written data).
    fn zero_partial(&self, g: &Inode, from: u64, to: u64, w: &mut Writes) -> Result<(), Errno> {
        if from >= to {
            return Ok(());
        }
        let lblk = from / BS;
        if let Some((pblk, false, _)) = g.ext.lookup(lblk) {
            let mut buf = match w.get(pblk) {
                Some(b) => b.to_vec(),
                None => self.read_block(pblk)?,
            };
            let a = (from - lblk * BS) as usize;
            let b = (to - lblk * BS) as usize;
            buf[a..b].fill(0);
            w.insert(pblk, buf);
        }
        Ok(())
    }

    /// Change attributes (chmod, chown, truncate, utimens).
    pub fn setattr(&self, ino: u64, set: SetAttr) -> Result<Attr, Errno> {
        self.writable()?;
        let mut g = self.lock(ino)?;
        undo_on_error(&mut g, |g| self.setattr_locked(g, set))
    }

    fn setattr_locked(&self, g: &mut Inode, set: SetAttr) -> Result<Attr, Errno> {
        let now = Ts::now();
        let mut w = Writes::new();
        let mut ctx = None;
        if let Some(size) = set.size {
            if g.is_dir() {
                return Err(Errno::EISDIR);
            }
            if size > MAX_FILE_SIZE {
                return Err(Errno::EFBIG);
            }
            if size < g.d.size {
                let keep_blocks = size.div_ceil(BS);
                let frees = Self::runs_from(&g.ext, keep_blocks);
                let lock = [frees.clone(), g.chain.runs()].concat();
                let mut c = self.alloc.prepare(0, 0, &lock)?;
                if size % BS != 0 {
                    self.zero_partial(g, size, (size / BS + 1) * BS, &mut w)?;
                }
                g.ext.punch(keep_blocks, u64::MAX - keep_blocks);
                for (s, l) in frees {
                    c.free(s, l)?;
                }
                ctx = Some(c);
            } else if size > g.d.size && g.d.size % BS != 0 {
                // Bytes between the old EOF and the block end must read as zero.
                let old = g.d.size;
                self.zero_partial(g, old, (old / BS + 1) * BS, &mut w)?;
            }
            if size != g.d.size {
                g.d.size = size;
                g.d.mtime = now;
            }
        }
        // A chown always drops the file's privileges (as Linux does, even
        // for root); a truncate does when the caller is unprivileged.
        let chown = set.uid.is_some() || set.gid.is_some();
        if chown || (set.size.is_some() && set.kill_priv) {
            self.kill_priv(g, &mut w)?;
        }
        if let Some(uid) = set.uid {
            g.d.uid = uid;
        }
        if let Some(gid) = set.gid {
            g.d.gid = gid;
        }
        if let Some(mode) = set.mode {
            g.d.mode = (g.d.mode & S_IFMT) | (mode & !S_IFMT);
            // An access ACL's mask follows the mode (posix_acl.rs).
            self.acl_chmod(g, &mut w)?;
        }
        let resolve = |t: SetTime| match t {
            SetTime::At(t) => t,
            SetTime::Now => now,
        };
        if let Some(t) = set.atime {
            g.d.atime = resolve(t);
        }
        if let Some(t) = set.mtime {
            g.d.mtime = resolve(t);
        }
        g.d.ctime = now;
        put_inode(g, ctx.as_mut(), &mut w)?;
        self.commit(w, ctx)?;
        Ok(g.attr())
    }

    /// Preallocate (mode 0 or `FALLOC_FL_KEEP_SIZE`), punch a hole
    /// (`PUNCH_HOLE|KEEP_SIZE`), zero a range (`ZERO_RANGE`), or remove or
    /// open a gap of whole blocks (`COLLAPSE_RANGE`, `INSERT_RANGE`, with
    /// ext4's rules: block-aligned, EINVAL for a collapse reaching EOF or
    /// an insert at or past it), as a caller without CAP_FSETID: every mode
    /// drops setuid/setgid as a write does (see
    /// [`fallocate_as`](Self::fallocate_as)).
    pub fn fallocate(&self, ino: u64, offset: u64, length: u64, mode: i32) -> Result<(), Errno> {
        self.fallocate_as(ino, offset, length, mode, true)
    }

    /// [`fallocate`](Self::fallocate), saying whether the caller lacks
    /// CAP_FSETID (`kill_priv`, see [`crate::caps::lacks_fsetid`]): like
    /// Linux's `file_modified`, every mode then drops setuid, and setgid
    /// when group-executable; any mode drops `security.capability`.
    pub fn fallocate_as(
        &self,
        ino: u64,
        offset: u64,
        length: u64,
        mode: i32,
        kill_priv: bool,
    ) -> Result<(), Errno> {
        let killed = self.fallocate_inner(ino, offset, length, mode, kill_priv)?;
        if killed {
            self.attrs_changed_behind_kernel(ino);
        }
        Ok(())
    }

    /// Drop the privileges a modification by this caller drops; true if
    /// the mode changed.
    fn modified_by(&self, g: &mut Inode, kill_priv: bool, w: &mut Writes) -> Result<bool, Errno> {
        if kill_priv {
            self.kill_priv(g, w)
        } else {
            self.drop_capability(g, w)?;
            Ok(false)
        }
    }

    fn fallocate_inner(
        &self,
        ino: u64,
        offset: u64,
        length: u64,
        mode: i32,
        kill_priv: bool,
    ) -> Result<bool, Errno> {
        self.writable()?;
        let shift = libc::FALLOC_FL_COLLAPSE_RANGE | libc::FALLOC_FL_INSERT_RANGE;
        if mode & shift != 0 {
            // As the VFS and ext4: either mode alone, on whole blocks.
            if mode & !shift != 0 || mode == shift {
                return Err(Errno::EINVAL);
            }
            if length == 0 || offset % BS != 0 || length % BS != 0 {
                return Err(Errno::EINVAL);
            }
            offset.checked_add(length).ok_or(Errno::EFBIG)?;
            let collapse = mode == libc::FALLOC_FL_COLLAPSE_RANGE;
            let mut g = self.lock(ino)?;
            return undo_on_error(&mut g, |g| {
                self.shift_range(g, offset, length, collapse, kill_priv)
            });
        }
        let keep = mode & libc::FALLOC_FL_KEEP_SIZE != 0;
        let punch = mode & libc::FALLOC_FL_PUNCH_HOLE != 0;
        let zero = mode & libc::FALLOC_FL_ZERO_RANGE != 0;
        if mode
            & !(libc::FALLOC_FL_KEEP_SIZE | libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_ZERO_RANGE)
            != 0
        {
            return Err(Errno::EOPNOTSUPP);
        }
        if punch && (!keep || zero) {
            return Err(Errno::EOPNOTSUPP);
        }
        if length == 0 {
            return Err(Errno::EINVAL);
        }
        let end = offset.checked_add(length).ok_or(Errno::EFBIG)?;
        if end > MAX_FILE_SIZE {
            return Err(Errno::EFBIG);
        }
        let mut g = self.lock(ino)?;
        undo_on_error(&mut g, |g| {
            self.fallocate_locked(g, offset, length, mode, kill_priv)
        })
    }

    fn fallocate_locked(
        &self,
        g: &mut Inode,
        offset: u64,
        length: u64,
        mode: i32,
        kill_priv: bool,
    ) -> Result<bool, Errno> {
        let ino = g.d.ino;
        let keep = mode & libc::FALLOC_FL_KEEP_SIZE != 0;
        let punch = mode & libc::FALLOC_FL_PUNCH_HOLE != 0;
        let zero = mode & libc::FALLOC_FL_ZERO_RANGE != 0;
        let end = offset + length;
        if g.is_dir() {
            return Err(Errno::EISDIR);
        }
        if g.d.mode & S_IFMT != S_IFREG {
            return Err(Errno(libc::ENODEV));
        }
        let now = Ts::now();
        let mut w = Writes::new();
        let first_whole = offset.div_ceil(BS);
        let end_whole = end / BS;
        if punch || zero {
            // Zero partial edges, unmap whole blocks (zero range then
            // re-reserves them as unwritten).
            let whole = end_whole.saturating_sub(first_whole);
            let frees = if whole > 0 {
                Self::runs_in(&g.ext, first_whole, whole)
            } else {
                Vec::new()
            };
            let realloc = if zero { whole } else { 0 };
            // Unmapping the middle of a run splits it: one more extent,
            // which may need one more chain block even for a plain punch
            // (without it, a punch failed with ENOSPC once the list
            // outgrew the inode, issue 45 §5); zero range then maps the
            // range again in as many runs as the free space gives.
            let slack = match (whole, zero) {
                (0, _) => 0,
                (_, false) => ext_slack(g, 1),
                (_, true) => ext_slack(g, realloc.min(64) as usize + 2),
            };
            let lock = [frees.clone(), g.chain.runs()].concat();
            let mut ctx = self.alloc.prepare(
                realloc + slack,
                g.ext.goal(first_whole).unwrap_or(ino + 1),
                &lock,
            )?;
            if first_whole * BS > offset || whole == 0 {
                let a = offset;
                let b = end.min((offset / BS + 1) * BS);
                self.zero_partial(g, a, b, &mut w)?;
            }
            if end_whole * BS < end && end_whole >= first_whole && end_whole * BS >= offset {
                self.zero_partial(g, end_whole * BS, end, &mut w)?;
            }
            if whole > 0 {
                g.ext.punch(first_whole, whole);
                for (s, l) in frees {
                    ctx.free(s, l)?;
                }
                if zero {
                    let mut lblk = first_whole;
                    while lblk < end_whole {
                        let goal = g.ext.goal(lblk).unwrap_or(ino + 1);
                        let runs = ctx.alloc(end_whole - lblk, goal);
                        if runs.is_empty() {
                            return Err(Errno::ENOSPC);
                        }
                        for (s, l) in runs {
                            g.ext.insert(lblk, s, l, true);
                            lblk += l;
                        }
                    }
                }
            }
            if zero && !keep && end > g.d.size {
                g.d.size = end;
            }
            g.d.mtime = now;
            g.d.ctime = now;
            let killed = self.modified_by(g, kill_priv, &mut w)?;
            put_inode(g, Some(&mut ctx), &mut w)?;
            return self.commit(w, Some(ctx)).map(|()| killed);
        }
        // Preallocate unwritten blocks in the holes.
        let first = offset / BS;
        let last = (end - 1) / BS;
        let mut holes = Vec::new();
        let mut l = first;
        while l <= last {
            match g.ext.lookup(l) {
                Some((_, _, left)) => l += left,
                None => {
                    let stop = g.ext.next_mapped(l).unwrap_or(u64::MAX).min(last + 1);
                    holes.push((l, stop - l));
                    l = stop;
                }
            }
        }
        let missing: u64 = holes.iter().map(|h| h.1).sum();
        let slack = if missing > 0 {
            ext_slack(g, holes.len() + 64)
        } else {
            0
        };
        let mut ctx = self.alloc.prepare(
            missing + slack,
            g.ext.goal(first).unwrap_or(ino + 1),
            &g.chain.runs(),
        )?;
        for (mut lblk, count) in holes {
            let stop = lblk + count;
            while lblk < stop {
                let goal = g.ext.goal(lblk).unwrap_or(ino + 1);
                let runs = ctx.alloc(stop - lblk, goal);
                if runs.is_empty() {
                    return Err(Errno::ENOSPC);
                }
                for (s, n) in runs {
                    g.ext.insert(lblk, s, n, true);
                    lblk += n;
                }
            }
        }
        if !keep && end > g.d.size {
            g.d.size = end;
        }
        g.d.ctime = now;
        let killed = self.modified_by(g, kill_priv, &mut w)?;
        put_inode(g, Some(&mut ctx), &mut w)?;
        self.commit(w, Some(ctx)).map(|()| killed)
    }

    /// `COLLAPSE_RANGE` (`collapse`: remove `[offset, offset+length)` and
    /// move the rest of the file down) or `INSERT_RANGE` (move everything
    /// from `offset` up, leaving a hole): the extent map's keys shift, no
    /// data moves.
    fn shift_range(
        &self,
        g: &mut Inode,
        offset: u64,
        length: u64,
        collapse: bool,
        kill_priv: bool,
    ) -> Result<bool, Errno> {
        if g.is_dir() {
            return Err(Errno::EISDIR);
        }
        if g.d.mode & S_IFMT != S_IFREG {
            return Err(Errno(libc::ENODEV));
        }
        let (first, count) = (offset / BS, length / BS);
        let size = g.d.size;
        let mut w = Writes::new();
        let (frees, ctx) = if collapse {
            if offset + length >= size {
                return Err(Errno::EINVAL);
            }
            let frees = Self::runs_in(&g.ext, first, count);
            let lock = [frees.clone(), g.chain.runs()].concat();
            // Cutting a run at both ends of the range makes one more.
            let ctx = self.alloc.prepare(ext_slack(g, 1), g.d.ino + 1, &lock)?;
            (frees, ctx)
        } else {
            if offset >= size {
                return Err(Errno::EINVAL);
            }
            // Blocks mapped past EOF (fallocate KEEP_SIZE) move too.
            let top = g.ext.end();
            if size + length > MAX_FILE_SIZE || top + count > MAX_FILE_SIZE / BS {
                return Err(Errno::EFBIG);
            }
            // Splitting the run at `offset` makes one more.
            let ctx = self
                .alloc
                .prepare(ext_slack(g, 1), g.d.ino + 1, &g.chain.runs())?;
            (Vec::new(), ctx)
        };
        let mut ctx = ctx;
        if collapse {
            g.ext.punch(first, count);
            for (s, l) in frees {
                ctx.free(s, l)?;
            }
            g.ext.shift(first + count, count, true);
            g.d.size = size - length;
        } else {
            g.ext.shift(first, count, false);
            g.d.size = size + length;
        }
        let now = Ts::now();
        g.d.mtime = now;
        g.d.ctime = now;
        let killed = self.modified_by(g, kill_priv, &mut w)?;
        put_inode(g, Some(&mut ctx), &mut w)?;
        self.commit(w, Some(ctx)).map(|()| killed)
    }
}
