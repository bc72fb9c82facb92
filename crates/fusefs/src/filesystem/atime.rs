//! Access times, as mount(8)'s atime family asks: which read or readdir
//! updates an inode's atime (Linux's `atime_needs_update`), and when the
//! update is written (at once, or with `lazytime` kept in memory until
//! the inode's next change, an fsync, its eviction, the unmount, a
//! switch to read-only or 24 hours).
//!
//! FUSE leaves atime to the file system (the kernel marks its inodes
//! `S_NOATIME`), so without this an atime never moves.

use std::sync::atomic::Ordering;

use super::{put_inode, FileSystem, Inode, Writes};
use crate::error::Errno;
use crate::format::Ts;

/// How long `relatime` lets an atime lag, and `lazytime` keep one in
/// memory (Linux's 24 hours).
const DAY: i64 = 24 * 60 * 60;

/// When a read updates the atime: mount(8)'s atime family.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Atime {
    /// `relatime` (Linux's default): only when the atime is not newer
    /// than the mtime or ctime, or is 24 hours old.
    #[default]
    Relatime,
    /// `noatime`: never.
    Noatime,
    /// `strictatime`: at every access.
    Strictatime,
}

/// The whole atime policy of a mount.
///
/// ```
/// use ptsd_fs::filesystem::{Atime, AtimePolicy};
/// use ptsd_fs::format::Ts;
/// let p = AtimePolicy::default(); // relatime
/// let t = |sec| Ts { sec, nsec: 0 };
/// // Read after a change: updated.
/// assert!(p.needs_update(false, t(100), t(100), t(100), t(200)));
/// // Read again soon after: not.
/// assert!(!p.needs_update(false, t(200), t(100), t(100), t(300)));
/// let strict = AtimePolicy { atime: Atime::Strictatime, ..p };
/// assert!(strict.needs_update(false, t(200), t(100), t(100), t(300)));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AtimePolicy {
    /// The atime family.
    pub atime: Atime,
    /// `nodiratime`: directories' atimes never move.
    pub nodiratime: bool,
    /// `lazytime`: an atime update stays in memory (see the module doc).
    pub lazytime: bool,
}

fn before_or_at(a: Ts, b: Ts) -> bool {
    (a.sec, a.nsec) <= (b.sec, b.nsec)
}

impl AtimePolicy {
    pub(super) fn to_u8(self) -> u8 {
        let a = match self.atime {
            Atime::Relatime => 0,
            Atime::Noatime => 1,
            Atime::Strictatime => 2,
        };
        a | (u8::from(self.nodiratime) << 2) | (u8::from(self.lazytime) << 3)
    }

    fn from_u8(v: u8) -> Self {
        AtimePolicy {
            atime: match v & 3 {
                1 => Atime::Noatime,
                2 => Atime::Strictatime,
                _ => Atime::Relatime,
            },
            nodiratime: v & 4 != 0,
            lazytime: v & 8 != 0,
        }
    }

    /// Whether an access at `now` to an inode (a directory if `is_dir`)
    /// with these times moves its atime (Linux's `atime_needs_update` and
    /// `relatime_need_update`).
    pub fn needs_update(&self, is_dir: bool, atime: Ts, mtime: Ts, ctime: Ts, now: Ts) -> bool {
        if self.atime == Atime::Noatime || (is_dir && self.nodiratime) {
            return false;
        }
        if self.atime == Atime::Relatime
            && !before_or_at(atime, mtime)
            && !before_or_at(atime, ctime)
            && now.sec - atime.sec < DAY
        {
            return false;
        }
        atime != now
    }
}

impl FileSystem {
    /// Choose when reads update atimes (see [`AtimePolicy`]); the mount
    /// passes its options, and a remount its new ones. Until then
    /// `noatime`: a file system used as a library changes only when asked.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use ptsd_blockdev::MemDevice;
    /// # use ptsd_fs::{mkfs, Caller, DirectStore, FileSystem, MkfsOptions};
    /// use ptsd_fs::filesystem::{Atime, AtimePolicy};
    /// # let dev = Arc::new(MemDevice::new(4096, 256).unwrap());
    /// # let store = Arc::new(DirectStore::new(dev).unwrap());
    /// # mkfs(&*store, &MkfsOptions::default()).unwrap();
    /// # let fs = FileSystem::mount(store).unwrap();
    /// let p = AtimePolicy { atime: Atime::Noatime, ..Default::default() };
    /// fs.set_atime_policy(p);
    /// assert_eq!(fs.atime_policy(), p);
    /// ```
    pub fn set_atime_policy(&self, p: AtimePolicy) {
        self.atime.store(p.to_u8(), Ordering::SeqCst);
        if !p.lazytime {
            // What lazytime kept in memory is not left behind.
            if let Err(e) = self.flush_lazy_atimes() {
                tracing::warn!("writing lazy atimes: {e}");
            }
        }
    }

    /// The current [`AtimePolicy`].
    pub fn atime_policy(&self) -> AtimePolicy {
        AtimePolicy::from_u8(self.atime.load(Ordering::Relaxed))
    }

    /// `g` was read (or listed): move its atime if the policy says so.
    /// Never fails the read: an update that cannot be written is logged.
    pub(super) fn accessed(&self, g: &mut Inode) {
        // Not `writable`: a read must not ask the mount anything.
        if self.refuses_changes() {
            return;
        }
        let p = self.atime_policy();
        let now = Ts::now();
        if !p.needs_update(g.is_dir(), g.d.atime, g.d.mtime, g.d.ctime, now) {
            return;
        }
        g.d.atime = now;
        if p.lazytime {
            let since = *g.lazy_atime_since.get_or_insert(now.sec);
            if now.sec - since < DAY {
                self.lazy_atimes.lock().insert(g.d.ino);
                return;
            }
        }
        if let Err(e) = self.write_inode(g) {
            tracing::warn!("writing the atime of inode {}: {e}", g.d.ino);
        }
    }

    /// Write `g` (its atime) as a transaction of its own.
    pub(super) fn write_inode(&self, g: &mut Inode) -> Result<(), Errno> {
        let mut w = Writes::new();
        put_inode(g, None, &mut w)?;
        self.commit(w, None)
    }

    /// Write every atime `lazytime` kept in memory (fsync, unmount,
    /// read-only switch). Inodes evicted meanwhile wrote theirs then.
    pub(super) fn flush_lazy_atimes(&self) -> Result<(), Errno> {
        let inos: Vec<u64> = std::mem::take(&mut *self.lazy_atimes.lock())
            .into_iter()
            .collect();
        for ino in inos {
            let Some(arc) = self.shard(ino).lock().get(&ino).cloned() else {
                continue;
            };
            let mut g = arc.lock();
            if g.lazy_atime_since.is_some() && !g.freed && self.can_commit() {
                self.write_inode(&mut g)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "atime_tests.rs"]
mod tests;
