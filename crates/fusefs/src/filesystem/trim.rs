//! Discarding free space (TRIM): online after enough frees, at unmount, and
//! on request (`fstrim`, FITRIM).
//!
//! Without it a device below the file system keeps every block ever
//! written: an SSD (the emulated one by default) holds deleted files' pages
//! as live data its garbage collection may have to copy, and an image file
//! keeps their space on the host's disk.

use std::sync::atomic::Ordering;

use super::{Caller, FileSystem, BS};
use crate::alloc::TrimScope;
use crate::error::Errno;
use crate::format::BITS_PER_GROUP;

/// `FITRIM` (`_IOWR('X', 121, struct fstrim_range)`), as `fstrim(8)` sends it.
pub const FITRIM: u32 = 0xc018_5879;

/// Freed blocks (4 KiB) that make the next operation's caller trim the
/// groups they came from: 32 MiB (a sixteenth of a device smaller than
/// 512 MiB).
pub const AUTO_TRIM_BLOCKS: u64 = 8192;

impl FileSystem {
    /// Discard the free runs of at least `min_len` blocks among blocks
    /// `[first, first + len)`, as FITRIM does; returns the blocks
    /// discarded. Each allocation group is locked while its runs are
    /// discarded, after a journal commit has made every free in it durable,
    /// so no block is discarded while a crash could still give it back to
    /// its old owner, nor after it is allocated again.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use ptsd_blockdev::{BlockDevice, MemDevice};
    /// # use ptsd_fs::{mkfs, DirectStore, FileSystem, MkfsOptions, Store};
    /// let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(4096, 4096).unwrap());
    /// let store: Arc<dyn Store> = Arc::new(DirectStore::new(dev).unwrap());
    /// mkfs(&*store, &MkfsOptions::default()).unwrap();
    /// let fs = FileSystem::mount(store).unwrap();
    /// // Every free block is discarded, in runs of any length.
    /// assert_eq!(fs.trim(0, u64::MAX, 1).unwrap(), fs.statfs().bfree);
    /// ```
    /// A range that starts past the end, or an empty one, is EINVAL.
    pub fn trim(&self, first: u64, len: u64, min_len: u64) -> Result<u64, Errno> {
        self.writable()?;
        if first >= self.layout.num_blocks || len == 0 {
            return Err(Errno::EINVAL);
        }
        let end = first.saturating_add(len);
        let lo_g = (first / BITS_PER_GROUP) as usize;
        let hi_g = (end.div_ceil(BITS_PER_GROUP) as usize).min(self.alloc.num_groups());
        let mut total = 0;
        for g in lo_g..hi_g {
            total += self.trim_one(
                g,
                TrimScope::Free {
                    lo: first.max(self.layout.data_start),
                    hi: end,
                    min_len,
                },
            )?;
        }
        Ok(total)
    }

    /// Answer an ioctl the FUSE layers pass on: `FITRIM` with its
    /// `struct fstrim_range` (start, len, minlen, in bytes) as `data`;
    /// returns the range to send back, its `len` set to the bytes
    /// discarded, as the kernel's file systems do. Only root may (the
    /// kernel asks CAP_SYS_ADMIN); any other ioctl is ENOTTY.
    pub fn ioctl(&self, who: Caller, cmd: u32, data: &[u8]) -> Result<Vec<u8>, Errno> {
        if cmd != FITRIM {
            return Err(Errno::ENOTTY);
        }
        if who.uid != 0 {
            return Err(Errno::EPERM);
        }
        let field = |i: usize| {
            data.get(i * 8..i * 8 + 8)
                .map(|b| u64::from_ne_bytes(b.try_into().expect("eight bytes")))
                .ok_or(Errno::EINVAL)
        };
        let (start, len, min_len) = (field(0)?, field(1)?, field(2)?);
        // As ext4: EINVAL for a range that starts past the end, one shorter
        // than a block (or empty), or a minimum run longer than a group.
        if start / BS >= self.layout.num_blocks || len < BS || min_len.div_ceil(BS) > BITS_PER_GROUP
        {
            return Err(Errno::EINVAL);
        }
        let blocks = self.trim(start / BS, len / BS, min_len.div_ceil(BS).max(1))?;
        let mut out = Vec::with_capacity(24);
        for v in [start, blocks * BS, min_len] {
            out.extend_from_slice(&v.to_ne_bytes());
        }
        Ok(out)
    }

    /// Discard what was freed since the last trim, if at least
    /// [`AUTO_TRIM_BLOCKS`] were freed (a sixteenth of a small device).
    /// Callers hold no inode or group lock (the FUSE layers call it after
    /// replying to a request). One caller at a time does the work; the
    /// others go on.
    pub fn trim_if_due(&self) {
        if self.trim_is_due() {
            self.trim_freed();
        }
    }

    /// Whether [`trim_if_due`](Self::trim_if_due) has work (one atomic
    /// load: cheap enough to ask after every request).
    pub fn trim_is_due(&self) -> bool {
        self.auto_trim.load(Ordering::Relaxed)
            && self.alloc.freed_since_trim() >= self.alloc.auto_trim_blocks(AUTO_TRIM_BLOCKS)
    }

    /// Whether freed blocks are discarded online and at unmount (the
    /// default; off: only [`trim`](Self::trim) discards, as with ext4's
    /// `nodiscard` and a periodic `fstrim`).
    pub fn set_auto_trim(&self, on: bool) {
        self.auto_trim.store(on, Ordering::Relaxed);
    }

    /// Discard the runs freed since the last trim that are still free, in
    /// every group that has some (one caller at a time). Errors are
    /// logged: a discard is a hint, and a journal failure has already made
    /// the file system read-only.
    pub(super) fn trim_freed(&self) {
        if !self.auto_trim.load(Ordering::Relaxed) || self.trimming.swap(true, Ordering::Acquire) {
            return;
        }
        self.alloc.take_freed_since_trim();
        for g in 0..self.alloc.num_groups() {
            if !self.alloc.trim_due(g) || self.failed.load(Ordering::Relaxed) {
                continue;
            }
            if let Err(e) = self.trim_one(g, TrimScope::Freed) {
                tracing::warn!("discarding free space of group {g}: {e:?}");
                break;
            }
        }
        self.trimming.store(false, Ordering::Release);
    }

    fn trim_one(&self, g: usize, scope: TrimScope) -> Result<u64, Errno> {
        self.alloc.trim_group(
            g,
            scope,
            |blk| self.store.holds(blk),
            || self.store.sync().map_err(|e| e.errno()),
            |blk, count| self.store.discard(blk, count).map_err(|e| e.errno()),
        )
    }
}
